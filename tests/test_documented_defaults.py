"""Every relay default the docs state is the default the relay runs with (issue 30: "a changed default must be
killed by a fast test or be listed as deliberately free"). Each row names the field, its value as a literal,
and the sentence of the README or docs/ that promises it: changing either alone fails here, so the docs and the
code move together. Defaults a test of the behaviour already pins (tests/test_numbers.py and the others that
scripts/config_mutants.py runs) are not repeated; the rest of RelayConfig is listed there as free, with why."""

from __future__ import annotations

from pathlib import Path

import pytest

from web.config import RelayConfig

ROOT = Path(__file__).resolve().parents[1]

# field, the default as the docs state it, the doc, a phrase of it that states the value
DOCUMENTED: list[tuple[str, float, str, str]] = [
    ("clock_skew_s", 60.0, "docs/protocol.md", "(plus the 60 s clock skew)"),
    ("beacon_window_s", 900.0, "docs/manual.md", "the relay's 15-minute beacon window"),
    ("heartbeat_interval_s", 10.0, "docs/manual.md", "[--heartbeat-interval 10]"),
    ("offline_after_missed", 3, "docs/manual.md", "3 missed intervals = offline"),
    ("digest_full_every", 6, "docs/manual.md", "every `--digest-full-every` intervals (6: 60 s)"),
    ("bw_probe_interval_s", 600.0, "docs/manual.md", "then every 600 s on average"),
    ("bw_probe_budget_mbps", 64.0, "docs/manual.md", "within a relay-wide 64 Mbit/s budget"),
    ("ip_rate_per_s", 50.0, "docs/manual.md", "[--ip-rate 50]"),
    ("node_rate_per_min", 6.0, "docs/manual.md", "[--node-rate 6]"),
    ("live_bytes_per_s_per_address", 128 * 1024, "docs/protocol.md", "(128 KiB/s, burst"),
    ("live_bytes_burst_per_address", 8 * 1024 * 1024, "docs/protocol.md", "`live_bytes_burst_per_address`, 8 MiB"),
    ("live_sessions_per_address", 256, "docs/protocol.md", "`live_sessions_per_address` (256)"),
    ("link_refit_interval_s", 10.0, "docs/sdk.md", "`--link-refit-interval-s` (10 s)"),
    ("peer_probe_interval_s", 60.0, "docs/sdk.md", "`--peer-probe-interval-s` (60 s)"),
    ("peer_probe_timeout_s", 30.0, "docs/sdk.md", "(`--peer-probe-timeout-s`, 30 s)"),
    ("peer_probe_pair_repeat_s", 600.0, "docs/sdk.md", "`--peer-probe-pair-repeat-s` (600 s)"),
    ("peer_probe_nearest_share", 0.5, "docs/sdk.md", "half to a random one"),
    ("challenge_first_after_s", 5.0, "docs/manual.md", "[--challenge-first-after 5]"),
    ("challenge_interval_unverified_s", 60.0, "docs/protocol.md", "then every ~60 s until verified"),
    ("challenge_llm_every", 3, "docs/protocol.md", "Solo challenges (every third a reference-model challenge"),
    ("transcript_audit_fraction", 1.0, "docs/manual.md", "[--transcript-audit-fraction 1]"),
    ("transcript_llm_audit_fraction", 0.05, "docs/manual.md", "[--transcript-llm-audit-fraction 0.05]"),
    ("transcript_max_age_s", 60.0, "docs/protocol.md", "`transcript_max_age_s` = 60 s"),
    ("roll_call_llm_offset_s", 32.0, "docs/protocol.md", "32 s later"),
    ("roll_call_send_priority", 1, "docs/manual.md", "[--roll-call-send-priority 1]"),
    ("loop_lag_interval_s", 0.05, "docs/protocol.md", "`loop_lag_interval_s` (50 ms)"),
    ("loop_lag_allowance_min_s", 0.05, "docs/protocol.md", "`loop_lag_allowance_min_s` (50 ms;"),
    ("loop_lag_allowance_max_s", 0.5, "docs/protocol.md", "`loop_lag_allowance_max_s` (0.5 s)"),
    ("trust_observed_kept", 8, "docs/protocol.md", "of the last 8 challenges"),
    ("history_kept", 500, "docs/manual.md", "oldest first (500 kept)"),
]


@pytest.mark.parametrize(("field", "value", "doc", "phrase"), DOCUMENTED, ids=[row[0] for row in DOCUMENTED])
def test_the_default_is_the_one_the_docs_state(field: str, value: float, doc: str, phrase: str) -> None:
    text = " ".join((ROOT / doc).read_text().split())  # sentences wrap across lines
    assert phrase in text, f"{doc} no longer says {phrase!r}: say {field}'s default ({value!r}) there"
    assert getattr(RelayConfig(), field) == value, f"{field}: the docs ({doc}) state {value!r}"
