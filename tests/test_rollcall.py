"""The pure rules of roll calls and challenge timing (web/rollcall.py, web/challenges.py): which rounds start a
roll call, what a node counts from what it proved, and time that cannot be bought."""

from __future__ import annotations

import hashlib
import math

import pytest

from capsule import plausibility
from web.challenges import implausible, net_time_s, new_challenge, new_llm_challenge
from web.config import RelayConfig
from web.rollcall import Proof, counted, draw, due
from web.stats import MILLI, Contribution

CONFIG = RelayConfig()
BEACON = {"round": 7, "value": "ab" * 32, "issued_at": 1_000}


def test_roll_call_rounds_follow_the_draw_at_the_configured_rate() -> None:
    config = RelayConfig(beacon_interval_s=10.0, roll_call_interval_s=600.0)
    values = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(60_000)]
    starts = [due({"value": v, "issued_at": 1_000}, config) for v in values]
    rate = sum(s is not None for s in starts) / len(values)
    # a binomial share of 1/60 over 60,000 rounds: sd = 0.00052; 5 sd either side
    assert abs(rate - 1 / 60) < 5 * 0.00052, rate
    assert {s for s in starts if s is not None} == {1_000 + config.roll_call_delay_s}
    # the decision is the round's own draw, nothing else
    for v in values[:200]:
        assert (due({"value": v, "issued_at": 5}, config) is not None) == (draw(v) < 1 / 60)
    # an interval below the beacon's: every round starts one
    fast = RelayConfig(beacon_interval_s=10.0, roll_call_interval_s=5.0)
    assert all(due({"value": v, "issued_at": 0}, fast) is not None for v in values[:100])


def test_counted_is_the_claim_capped_at_what_was_proven() -> None:
    proof = Proof("r", gflops=50.0, instances=2, tps=100.0)
    c = counted(proof, 40.0, 2, 90.0, CONFIG)
    assert c == Contribution(cores=2, cpu_mgflops=40 * MILLI, mtokens_per_sec=90 * MILLI)  # honest: the claim
    c = counted(proof, 500.0, 64, 3400.0, CONFIG)  # an overstatement counts what was seen x the cap
    assert c.cpu_mgflops == round(50.0 * CONFIG.trust_cap_factor * MILLI)
    assert c.mtokens_per_sec == round(100.0 * CONFIG.trust_cap_factor * MILLI)
    assert c.cores == 2  # the instances proven, not the claim
    # cores only where each reached the floor: 20 identities at 0.01 GFLOP/s with 2^32-1 cores count none
    tiny = Proof("r", gflops=0.01, instances=64)
    assert counted(tiny, 0.01, 2**32 - 1, None, CONFIG) == Contribution(cores=0, cpu_mgflops=10)
    assert counted(Proof("r", gflops=3.5, instances=64), 4.0, 64, None, CONFIG).cores == 3
    assert counted(Proof("r", gflops=0.0, instances=2), 40.0, 2, 90.0, CONFIG) == Contribution()
    assert counted(proof, None, 2, 90.0, CONFIG) == Contribution()  # no CPU claim: nothing


def test_net_time_subtracts_at_most_a_share_of_the_time() -> None:
    # an honest session: the median RTT is subtracted in full
    assert net_time_s(2.0, 20.0, CONFIG) == pytest.approx(1.98)
    # a node that held its pongs 15 s: it buys at most challenge_rtt_share_max of the time
    assert net_time_s(2.0, 15_000.0, CONFIG) == pytest.approx(2.0 * (1 - CONFIG.challenge_rtt_share_max))
    assert net_time_s(1.4, 15_000.0, CONFIG) > 1.0  # (was 1 us: 68.7 million GFLOP/s)
    assert net_time_s(2.0, None, CONFIG) == 2.0 and net_time_s(2.0, -5.0, CONFIG) == 2.0
    assert net_time_s(0.0, 0.0, CONFIG) == 1e-6


def test_a_figure_beyond_physics_is_implausible() -> None:
    ch = new_challenge("n", 50.0, 2, 256, BEACON, "00" * 16, 0.0, 0.0, CONFIG)
    ch.commit_s = ch.flops / 1e9 / (2 * plausibility.CORE_GFLOPS_MAX * 0.99)  # just under 2 cores' bound
    assert implausible(ch) is None
    ch.commit_s = ch.flops / 1e9 / (2 * plausibility.CORE_GFLOPS_MAX * 1.01)
    why = implausible(ch)
    assert why is not None and "2 instance(s)" in why
    llm = new_llm_challenge("n", 100.0, BEACON, "00" * 16, 0.0, 0.0, CONFIG)
    llm.commit_s = (32 + llm.decode) / (plausibility.TOKENS_PER_SEC_MAX * 1.01)
    assert implausible(llm) is not None
    llm.commit_s = (32 + llm.decode) / (plausibility.TOKENS_PER_SEC_MAX * 0.99)
    assert implausible(llm) is None


def test_a_tiny_claim_still_asks_each_instance_for_the_core_floor() -> None:
    ch = new_challenge("n", 0.01, 64, 128, BEACON, "00" * 16, 0.0, 0.0, CONFIG, target_s=2.0)
    per_instance_gflop = 2 * ch.n**3 * ch.reps / 1e9
    # the work per instance is at least what the floor does in the target time (within one product)
    assert per_instance_gflop >= CONFIG.core_floor_gflops * 2.0 - 2 * ch.n**3 / 1e9
    assert len(ch.seeds) == CONFIG.challenge_max_instances
    # a roll call's target time sizes the work (below the memory cap on a node's committed products)
    assert math.isclose(new_challenge("n", 2.0, 1, 128, BEACON, "00" * 16, 0.0, 0.0, CONFIG, 2.0).reps
                        / new_challenge("n", 2.0, 1, 128, BEACON, "00" * 16, 0.0, 0.0, CONFIG, 0.5).reps, 4,
                        rel_tol=0.05)
