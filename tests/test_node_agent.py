"""`ce-bench node` against a real relay process: started while the relay is down it backs off, registers
once the relay is up, stays live, and stops cleanly on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from host_runner.agent import AgentConfig, remeasure_after_s
from tests.relay_process import CLI, RelayProcess, free_port


def test_remeasure_interval_is_drawn_from_the_beacon_within_the_spread() -> None:
    config = AgentConfig(remeasure_s=3600.0, remeasure_spread=0.25)
    waits = {remeasure_after_s(f"{i:064x}", "12D3KooWnode", config) for i in range(200)}
    assert len(waits) == 200 and min(waits) >= 2700.0 and max(waits) <= 4500.0
    assert remeasure_after_s("ab" * 32, "n", config) == remeasure_after_s("ab" * 32, "n", config)


def test_node_backs_off_registers_stays_live_and_stops_on_sigterm(tmp_path: Path) -> None:
    port = free_port()
    env = dict(os.environ, CE_BENCH_HOME=str(tmp_path / "home"))
    log = tmp_path / "node.log"
    with open(log, "wb") as out:
        node = subprocess.Popen([CLI, "node", "--relay", f"http://127.0.0.1:{port}", "--no-gpu", "--no-jitter",
                                 "--budget-ms", "500"], stdout=out, stderr=out, env=env, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60  # (start-up at nice 19 beside a roll call: waited for, not slept on)
        while "unreachable" not in log.read_text():
            assert time.monotonic() < deadline and node.poll() is None, log.read_text()
            time.sleep(0.2)
        time.sleep(1)
        assert node.poll() is None, log.read_text()  # backing off, alive
        with RelayProcess(tmp_path / "relay", "--heartbeat-interval", "0.5", port=port) as relay:
            node_id = log.read_text().split("ce-bench node: ")[1].split(" ->")[0]
            deadline = time.monotonic() + 120
            while True:
                status, body, _ = relay.get(f"/v1/nodes/{node_id}")
                if status == 200 and body["status"]["online"] and body["status"]["rtt_ms"] is not None:
                    break
                assert time.monotonic() < deadline and node.poll() is None, log.read_text()
                time.sleep(0.5)
            assert body["profile"]["beacon"]["relay"] == relay.get("/beacon")[1]["relay"]
            # the reactors were warmed with the roll call's work before the session said hello
            assert "warmed" in log.read_text(), log.read_text()
            node.send_signal(signal.SIGTERM)
            assert node.wait(timeout=30) == 0, log.read_text()
            assert "node stopped" in log.read_text()
    finally:
        if node.poll() is None:
            node.kill()


def test_challenge_shape_is_what_the_relay_will_ask() -> None:
    """The instances, SGEMM order and products a session warms are those of the relay's own roll-call
    challenge (web/proof/challenges.py new_challenge, from the profile's summary as web/api/summary.py reads it)."""
    from host_runner.agent import CHALLENGE_MAX_INSTANCES, CORE_FLOOR_GFLOPS, ROLL_CALL_TARGET_S, challenge_shape
    from web.api.summary import instance_count, sgemm_order
    from web.config import RelayConfig
    from web.proof.challenges import new_challenge

    config = RelayConfig()
    assert (config.challenge_max_instances, config.roll_call_target_s, config.core_floor_gflops) == (
        CHALLENGE_MAX_INSTANCES, ROLL_CALL_TARGET_S, CORE_FLOOR_GFLOPS)

    def relays(profile: dict[str, Any]) -> tuple[int, int, int]:
        ev, cpu = profile["evidence"], profile["cpu"]
        ch = new_challenge("n", cpu["gflops_fp32"], instance_count(ev, cpu["cores"]), sgemm_order(ev),
                           {"value": "00" * 32, "round": 0}, "ab" * 16, None, 0.0, config,
                           target_s=config.roll_call_target_s)
        return len(ch.seeds), ch.n, ch.reps

    cases: list[dict[str, Any]] = [
        {"cpu": {"cores": 8, "gflops_fp32": 60.0},
         "evidence": {"cpu": {"gflops_fp32": {"n": 512, "instances": [{}, {}, {}]}}}},
        {"cpu": {"cores": 100, "gflops_fp32": 6400.0}, "evidence": {"cpu": {"gflops_fp32": {"n": 1024}}}},
        {"cpu": {"cores": 2, "gflops_fp32": 0.5}, "evidence": {}},                      # no order; tiny claim
        {"cpu": {"cores": 4, "gflops_fp32": 300.0}, "evidence": {"cpu": {"gflops_fp32": {"n": 99_999}}}},
    ]
    for profile in cases:
        assert challenge_shape(profile) == relays(profile), profile
    assert challenge_shape({"cpu": {"cores": 2, "gflops_fp32": None}, "evidence": {}}) is None


def test_a_live_session_warms_its_reactors_before_it_connects(artifacts: object) -> None:
    """The first challenge's time holds no instantiation: the reactors exist (and have computed) before the
    session's first connection attempt, here to a port nobody listens on."""
    from common.keys import NodeKey
    from host_runner.live_client import LiveSession

    session = LiveSession(f"http://127.0.0.1:{free_port()}", NodeKey.generate(),
                          reactor_wasm=artifacts.reactor, warm=(2, 64, 2))  # type: ignore[attr-defined]
    assert session._pool is not None and not session._pool._reactors
    session.start()
    try:
        deadline = time.monotonic() + 60
        while not session.errors:
            assert time.monotonic() < deadline, "no connection attempt within 60 s"
            time.sleep(0.05)
        assert session.errors[0]["code"] == "connection", session.errors
        reactors = session._pool._reactors
        assert len(reactors) == 2  # made before the first attempt to connect, and each computed its products
        assert all(int(r.call("ce_challenge_root")) != 0 for r in reactors)
    finally:
        session.stop()


def test_reconnect_waits_are_drawn_and_back_off() -> None:
    """After a lost session the wait is drawn from 1-3 s (the sessions of a dead relay do not all arrive at its
    peer at one moment), doubling per failed attempt in a row up to 30 s (x0.5-1.5)."""
    from host_runner.live_client import RECONNECT_FIRST_S, RECONNECT_MAX_S, reconnect_wait_s

    assert (reconnect_wait_s(0, 0.0), reconnect_wait_s(0, 0.999)) == (0.5 * RECONNECT_FIRST_S,
                                                                     1.499 * RECONNECT_FIRST_S)
    assert [reconnect_wait_s(f, 0.5) for f in range(7)] == [2.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert reconnect_wait_s(50, 0.999) == 1.499 * RECONNECT_MAX_S


def test_a_session_backs_off_while_its_relay_is_away(monkeypatch: Any, artifacts: object) -> None:
    """The run loop uses the drawn, doubling waits (the pure function above) after each failed attempt to a
    closed port: the waits it asks for are recorded (a stop event that records and returns at once), so the
    test reads the loop's own choices, not how late a busy scheduler woke it."""
    import random
    import threading

    import pytest

    import host_runner.live_client as live_client
    from common.keys import NodeKey

    draws = iter([0.25, 0.9, 0.0, 0.6])
    monkeypatch.setattr(random, "random", lambda: next(draws))  # (live_client draws with random.random)

    class RecordedStop(threading.Event):
        def __init__(self) -> None:
            super().__init__()
            self.waits: list[float] = []

        def wait(self, timeout: float | None = None) -> bool:
            self.waits.append(float(timeout or 0.0))
            if len(self.waits) == 4:
                self.set()
            return self.is_set()

    session = live_client.LiveSession(f"http://127.0.0.1:{free_port()}", NodeKey.generate())
    stop = session._stop = RecordedStop()
    session._run()  # on this thread: four failed attempts, then the stop
    assert [e["code"] for e in session.errors] == ["connection"] * 4, session.errors
    first = live_client.RECONNECT_FIRST_S
    assert stop.waits == pytest.approx([first * 0.75, 2 * first * 1.4, 4 * first * 0.5, 8 * first * 1.1])


class _Socket:
    """Records what a session sends (the challenge's commit); the relay side is tested over real sockets in
    tests/test_trust.py and tests/test_proven.py."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def send(self, text: str) -> None:
        self.sent.append(json.loads(text))


def test_a_session_says_it_is_answering_while_it_computes_a_challenge(artifacts: object) -> None:
    """`answering` is true from a challenge's arrival to its commit, and only then: the node's landmark probes
    wait meanwhile (an RTT taken then would include the work)."""
    from common.keys import NodeKey
    from host_runner.live_client import LiveSession

    session = LiveSession(f"http://127.0.0.1:{free_port()}", NodeKey.generate(),
                          reactor_wasm=artifacts.reactor)  # type: ignore[attr-defined]
    ws = _Socket()
    assert not session.answering
    session._challenge(ws, {"type": "challenge", "id": "c1", "kind": "sgemm", "seeds": ["1f" * 8], "n": 256,
                            "reps": 40})
    seen_answering = False
    deadline = time.monotonic() + 60
    while not ws.sent:
        seen_answering = seen_answering or session.answering
        assert time.monotonic() < deadline, "no commit within 60 s"
        time.sleep(0.005)
    assert seen_answering, "the work was never seen in progress"
    assert ws.sent[0]["type"] == "commit" and ws.sent[0]["id"] == "c1"
    time.sleep(0.05)
    assert not session.answering


def test_landmark_probes_wait_while_the_node_answers_a_challenge() -> None:
    import threading

    from common.keys import NodeKey
    from host_runner.agent import Agent
    from host_runner.node import RunOptions

    class Working:  # a session whose challenge work ends when the test says so
        def __init__(self) -> None:
            self.done = threading.Event()

        @property
        def answering(self) -> bool:
            return not self.done.is_set()

    agent = Agent("http://127.0.0.1:1", NodeKey.generate(), RunOptions(capsule=Path("unused.wasm")),
                  AgentConfig(landmark_hold_s=5.0))
    work = Working()
    agent.session = work  # type: ignore[assignment]
    started = time.monotonic()  # (before the timer: the lower bound is exact however late this thread runs)
    threading.Timer(0.5, work.done.set).start()
    agent._wait_until_not_answering()
    # held until the work ended, and not to the hold's end (5 s; the upper bound leaves room for nice 19)
    assert 0.5 <= time.monotonic() - started < 4.0
    work.done.clear()  # work that never ends: the probe goes ahead after landmark_hold_s
    agent.config = AgentConfig(landmark_hold_s=0.3)
    started = time.monotonic()
    agent._wait_until_not_answering()
    assert 0.3 <= time.monotonic() - started < 3.0
