"""Tests that kill mutants of web/challenges.py (scripts/mutants) that tests/test_challenges.py left alive:
the RTT allowance and the deadlines at their exact edges, the physics bound, and what the history keeps."""

from __future__ import annotations

import pytest

from web.challenges import net_time_s
from web.config import RelayConfig

CONFIG = RelayConfig()


def test_the_rtt_allowance_is_the_rtt_capped_at_its_share_of_the_time() -> None:
    share = CONFIG.challenge_rtt_share_max
    assert net_time_s(1.0, 50.0, CONFIG) == pytest.approx(0.95)            # the RTT, below its cap
    assert net_time_s(1.0, 5000.0, CONFIG) == pytest.approx(1.0 - share)  # capped: held pongs buy that share
    assert net_time_s(1.0, None, CONFIG) == 1.0 and net_time_s(1.0, -20.0, CONFIG) == 1.0
    assert net_time_s(0.0, 10.0, CONFIG) == 1e-6                          # never zero: rates stay finite
