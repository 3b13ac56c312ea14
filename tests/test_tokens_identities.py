"""Tokens/s counted as what it is (issue 45): aggregate decode throughput, against identities of one machine.

Before, an honest node claimed and answered one decode stream, and two or four identities of the same machine,
each decoding on its own core, counted up to 1.58x it on one relay. Now the honest node decodes as many streams
at once as its cores pay (capsule/aggregate.py llm_streams) and a roll call asks each of them at one moment
(web/proof/challenges.py new_llm_challenge), so identities gain nothing: the deadline bounds what one machine
decodes by then (web/proof/rollcall.py shown). Real relay process, real capsule, real decoding on both sides;
bench/tokens_identities.py runs 1, 2 and 4 identities for BENCHMARKS.md."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

import pytest

from common.keys import NodeKey
from host_runner.live_client import LiveSession
from tests.relay_process import RelayProcess
from tests.resigned import register

pytestmark = pytest.mark.timed

# a roll call every 6 s, its reference-model phase 3 s after the SGEMM one (tests/test_proven.py's pace)
ROLL = ["--challenge-first-after", "1", "--challenge-interval-unverified", "1", "--heartbeat-interval", "0.5",
        "--beacon-interval", "1", "--roll-call-target-s", "1", "--roll-call-interval-s", "6",
        "--roll-call-min-gap-s", "6", "--roll-call-llm-offset-s", "3"]
SGEMM_SHARE = 0.6  # the SGEMM claim: tokens count beside an SGEMM proof, which this test is not about


def registered(relay: RelayProcess, measured: dict[str, Any], llm: dict[str, Any]) -> NodeKey:
    """A fresh key with the measured profile, its reference-model fields replaced by `llm`."""
    return register(relay.url, measured, llm=llm, cpu={"gflops_fp32": SGEMM_SHARE * measured["cpu"]["gflops_fp32"]})


def tokens_at_roll_calls(relay: RelayProcess, identities: int, count: int, after: set[str],
                         within_s: float) -> list[float]:
    """Tokens/s proven by the first `count` finished roll calls (not in `after`) whose reference-model phase
    challenged exactly `identities` sessions, answered or not."""
    deadline = time.monotonic() + within_s
    while True:
        calls = relay.get("/v1/roll-calls?limit=100")[1]["roll_calls"][1:]  # the latest may still be counting
        done = sorted((c for c in calls if c["id"] not in after and c["llm"]["challenged"] == identities),
                      key=lambda c: c["at"])
        if len(done) >= count:
            return [float(c["proven"]["tokens_per_sec"]) for c in done[:count]]
        assert time.monotonic() < deadline, [(c["llm"], c["proven"]) for c in calls[:6]]
        time.sleep(0.5)


def test_identities_of_one_machine_count_at_most_1_25x_one_honest_node(tmp_path: Path, artifacts: Any,
                                                                        machine_profile: dict[str, Any]) -> None:
    measured = dict(json.loads(json.dumps(machine_profile)))
    llm = measured["llm"]
    one, streams, aggregate = llm["tokens_per_sec_one_stream"], llm["streams"], llm["tokens_per_sec"]
    # the precondition: this machine decodes more streams than one at once, or identities had nothing to gain
    assert streams >= 2 and aggregate > 1.4 * one, llm
    with RelayProcess(tmp_path / "relay", *ROLL) as relay:
        honest = registered(relay, measured, {})
        session = LiveSession(relay.url, honest, reactor_wasm=artifacts.reactor, warm_llm=streams).start()
        try:
            alone = tokens_at_roll_calls(relay, 1, 3, set(), 120)
        finally:
            session.stop()
        seen = {c["id"] for c in relay.get("/v1/roll-calls?limit=100")[1]["roll_calls"]}
        # four identities, each one stream claimed at one stream's rate (what an honest node of one stream
        # would claim), each answering on its own reactor: the old way to count every core as a node
        keys = [registered(relay, measured, {"streams": 1, "tokens_per_sec": one}) for _ in range(4)]
        sessions = [LiveSession(relay.url, k, reactor_wasm=artifacts.reactor, warm_llm=1).start() for k in keys]
        try:
            shared = tokens_at_roll_calls(relay, 4, 3, seen, 150)
        finally:
            for s in sessions:
                s.stop()
    honest_tps = statistics.median(alone)
    print(f"honest node ({streams} streams, claims {aggregate:.0f}): {alone} tokens/s; "
          f"4 identities of one stream (claim {one:.0f} each): {shared} tokens/s")
    assert honest_tps >= 0.9 * aggregate, (alone, aggregate)  # the honest node counts what it decodes
    assert max(shared) <= 1.25 * honest_tps, (shared, alone)
    assert max(shared) > 0.3 * honest_tps  # the precondition: the identities' answers did count
