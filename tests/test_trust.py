"""Verified, not claimed (issue 10), against real relay processes and the real capsule: an honest
`ce-bench node` becomes verified and stays so while other processes keep both cores busy; a node that signs
3x its real figures is flagged and adds nothing verified; wrong commitments and wrong rows fail; a key
without a live session stays unverified. The wrong answers are injected through LiveSession's
answer_factory: failure injection a real capsule cannot do."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from websockets.sync.client import connect

from capsule.signing import sign
from common.keys import NodeKey
from host_runner.challenge_answer import ReactorPool, SgemmAnswer
from host_runner.live_client import LiveSession
from tests.relay_process import CLI, RelayProcess
from tests.roll_call_helpers import registered as proven_registered

# Marked `alone` (tests/scheduling.py): the tests that compare answer times with claims or deadlines, or one
# machine's identities. A wrong answer fails whatever the load, so those tests run beside others. The first
# test (alone) makes the module's relay and measured profile: the profile is measured on quiet cores.
ALONE = pytest.mark.alone

FAST = ["--challenge-first-after", "1", "--challenge-interval-unverified", "1",
        "--heartbeat-interval", "0.5", "--beacon-interval", "1",
        "--roll-call-interval-s", "5", "--roll-call-min-gap-s", "5", "--roll-call-llm-offset-s", "2.5",
        "--roll-call-target-s", "1"]
VERIFY_WITHIN_S = 180  # the bound for an honest node (and for flagging a liar)


def wait_for(relay: RelayProcess, node_id: str, done: Callable[[dict[str, Any]], bool], within_s: float,
             what: str, each: Callable[[dict[str, Any]], None] = lambda body: None) -> dict[str, Any]:
    deadline = time.monotonic() + within_s
    while True:
        status, body, _ = relay.get(f"/v1/nodes/{node_id}")
        if status == 200:
            each(body)
            if done(body):
                return dict(body)
        assert time.monotonic() < deadline, f"{what}: not within {within_s} s; last: {body}"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def relay(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RelayProcess]:
    with RelayProcess(tmp_path_factory.mktemp("trust") / "relay", *FAST) as r:
        yield r


@pytest.fixture(scope="module")
def measured(machine_profile: dict[str, Any]) -> dict[str, Any]:
    """A real profile of this machine (re-signed below for each key against the relay's beacon)."""
    return dict(json.loads(json.dumps(machine_profile)))  # a copy: tests may change theirs


def registered(relay: RelayProcess, measured: dict[str, Any], gflops_factor: float = 1.0) -> NodeKey:
    """A fresh key whose profile (the measured one, CPU figure scaled) the relay accepted."""
    cpu: dict[str, Any] = {"gflops_fp32": round(measured["cpu"]["gflops_fp32"] * gflops_factor, 4)}
    if gflops_factor > 1:  # a liar claims the cores too: 3x of a fast run on 2 cores would pass no physical bound
        cpu["cores"] = cpu["threads"] = round(measured["cpu"]["cores"] * gflops_factor)
    return proven_registered(relay, measured, **cpu)


def stats(relay: RelayProcess) -> dict[str, Any]:
    return dict(relay.get("/stats")[1])


@ALONE
def test_overstating_node_is_not_believed_and_counts_only_what_it_shows(relay: RelayProcess, measured: dict[str, Any],
                                                                        artifacts: Any) -> None:
    """A node claiming 3x its speed: unverified once its answers showed the claim is more than 2x off (not
    flagged: a busy honest machine shows the same), and the verified scoreboard counts at most what it showed
    (its best observed x the 1.15 cap), never its claim."""
    key = registered(relay, measured, gflops_factor=3.0)
    session = LiveSession(relay.url, key, reactor_wasm=artifacts.reactor).start()
    try:
        body = wait_for(relay, key.node_id, lambda b: b["trust"]["status"] == "unverified"
                        and "observed" in b["trust"]["reason"], VERIFY_WITHIN_S,
                        "a node claiming 3x its speed is not believed")
        trust = body["trust"]
        assert trust["challenges"]["passed"] >= 2 and trust["challenges"]["failed"] == 0  # its answers were right
        claimed = body["profile"]["cpu"]["gflops_fp32"]
        assert trust["observed"]["gflops_fp32"] * 2 < claimed
        s = stats(relay)
        assert s["claimed"]["cpu_gflops"] >= claimed - 0.001  # (milli-unit sums) the claim is visible as a claim ...
        assert s["cpu_gflops"] < claimed / 2  # ... and counts at most what was shown (~1.15/3 of the claim)
        events = relay.get(f"/v1/nodes/{key.node_id}/history")[1]["events"]
        assert [e["event"] for e in events][0] == "profile"
        assert all(e["passed"] for e in events if e["event"] == "challenge")
    finally:
        session.stop()


class WrongInputs(SgemmAnswer):
    """Computes and commits honestly, but the product of other inputs: proofs hold, rows do not."""

    def __init__(self, wasm: Path, seeds: list[int], n: int, reps: int, pool: ReactorPool) -> None:
        super().__init__(wasm, [s ^ 1 for s in seeds], n, reps, pool)


class WrongRoots(SgemmAnswer):
    """Commits to roots it did not compute: no opening can match them."""

    def commit(self, stop_at: float | None = None, halt: Any = None) -> list[str]:
        super().commit(stop_at)
        return [os.urandom(32).hex() for _ in self.seeds]


class AlteredRows(SgemmAnswer):
    """Opens the committed rows with one value changed."""

    def open(self, rows: list[Any]) -> list[dict[str, Any]]:
        out = super().open(rows)
        values = np.frombuffer(__import__("base64").b64decode(out[0]["values"]), "<f4").copy()
        values[0] += 1.0
        out[0]["values"] = __import__("base64").b64encode(values.tobytes()).decode()
        return out


def until_failure_heard(session: LiveSession, within_s: float = 10.0) -> list[dict[str, Any]]:
    """The failed challenge_result messages the node has received (a reference-model round may pass)."""
    deadline = time.monotonic() + within_s
    while not (failures := [r for r in list(session.results) if not r["passed"]]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return failures


@pytest.mark.parametrize(("answer", "code"), [(WrongInputs, "wrong_rows"), (WrongRoots, "wrong_proof"),
                                              (AlteredRows, "wrong_proof")])
def test_wrong_answers_fail_and_flag(relay: RelayProcess, measured: dict[str, Any], artifacts: Any,
                                     answer: type[SgemmAnswer], code: str) -> None:
    key = registered(relay, measured)
    session = LiveSession(relay.url, key, reactor_wasm=artifacts.reactor, answer_factory=answer).start()
    try:
        body = wait_for(relay, key.node_id, lambda b: b["trust"]["status"] == "flagged", 60, f"{answer.__name__}")
        assert body["trust"]["challenges"]["failed"] >= 1
        # The relay records the verdict (what /v1/nodes shows) before its challenge_result reaches the node.
        failures = until_failure_heard(session)
        assert failures and failures[0]["code"] == code, session.results
        assert stats(relay)["verified_nodes"] == 0
    finally:
        session.stop()


def test_wrong_token_hash_fails_and_flags(relay: RelayProcess, measured: dict[str, Any], artifacts: Any) -> None:
    """A reference-model challenge answered with token ids the model did not produce: the relay checks one token
    of every answer, and the node is flagged."""
    key = registered(relay, measured)
    session = LiveSession(relay.url, key, reactor_wasm=artifacts.reactor,
                          llm=lambda pool, seed, decode, stop_at, halt: [0] * decode).start()
    try:
        wait_for(relay, key.node_id, lambda b: b["trust"]["status"] == "flagged", 60, "wrong token ids")
        # the status changes before the result frame reaches the node: wait for it (bounded)
        deadline = time.monotonic() + 10
        while not any(r["code"] == "wrong_tokens" and not r["passed"] for r in session.results):
            assert time.monotonic() < deadline, session.results
            time.sleep(0.2)
    finally:
        session.stop()


def test_profile_without_live_session_stays_unverified(relay: RelayProcess, measured: dict[str, Any]) -> None:
    key = registered(relay, measured)
    s = stats(relay)  # at once: without heartbeats the node is offline after 3 intervals (1.5 s here)
    assert s["verified_nodes"] == 0 and s["cpu_gflops"] == 0
    assert s["claimed"]["cpu_gflops"] >= measured["cpu"]["gflops_fp32"] - 0.001
    time.sleep(3)  # three challenge intervals: nothing may happen to a node that never said hello
    body = relay.get(f"/v1/nodes/{key.node_id}")[1]
    assert body["trust"]["status"] == "unverified" and body["trust"]["challenges"]["passed"] == 0
    assert "hello" in body["trust"]["reason"]


def test_bad_replies_get_stable_codes_and_keep_the_session(relay: RelayProcess, measured: dict[str, Any]) -> None:
    key = registered(relay, measured)
    with connect(relay.url.replace("http://", "ws://") + "/v1/live", open_timeout=10) as ws:
        welcome = json.loads(ws.recv(timeout=10))

        def answer_to(message: dict[str, Any]) -> dict[str, Any]:
            ws.send(json.dumps(message))
            while True:  # skip pings, acks and bandwidth probes (binary)
                raw = ws.recv(timeout=10)
                frame = json.loads(raw) if isinstance(raw, str) else {"type": "bw_probe"}
                if frame["type"] in ("error", "challenge_result", "open"):
                    return dict(frame)

        assert answer_to({"type": "commit", "id": "x", "roots": []})["code"] == "unknown_challenge"  # before hello
        assert answer_to({"type": "hello", "answers": 3})["code"] == "invalid_message"
        ws.send(json.dumps({"type": "hello", "answers": ["sgemm"]}))
        beat = sign("Heartbeat", {"node_id": key.node_id, "session": welcome["session"], "seq": 0,
                                  "sent_at": int(time.time())}, key)
        ws.send(json.dumps({"type": "heartbeat", "heartbeat": beat}))
        result = answer_to({"type": "commit", "id": "not-a-challenge", "roots": []})
        assert result["type"] == "error" and result["code"] == "unknown_challenge"  # a bad message, and a failure
        while True:  # the relay's challenge arrives; commit garbage to it
            raw = ws.recv(timeout=30)
            frame = json.loads(raw) if isinstance(raw, str) else {"type": "bw_probe"}
            if frame["type"] == "challenge":
                break
        result = answer_to({"type": "commit", "id": frame["id"], "roots": ["00"]})
        assert result["code"] == "malformed_commit" and not result["passed"]
        result = answer_to({"type": "commit", "id": frame["id"], "roots": ["00" * 32] * len(frame["seeds"])})
        assert result["code"] == "replayed"
    body = relay.get(f"/v1/nodes/{key.node_id}")[1]
    assert body["trust"]["status"] == "flagged" and body["trust"]["challenges"]["failed"] == 3


def busy_processes(count: int) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


class Agent:
    """A real `ce-bench node` process with its own key (its own CE_BENCH_HOME)."""

    def __init__(self, relay: RelayProcess, workdir: Path) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.log = workdir / "node.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen([CLI, "node", "--relay", relay.url, "--no-gpu", "--no-jitter",
                                          "--budget-ms", "500"], stdout=out, stderr=out, cwd=workdir,
                                         env=dict(os.environ, CE_BENCH_HOME=str(workdir / "home")))
        self._node_id: str | None = None

    @property
    def node_id(self) -> str:
        deadline = time.monotonic() + 60
        while self._node_id is None:
            text = self.log.read_text()
            if "ce-bench node: " in text:
                self._node_id = text.split("ce-bench node: ")[1].split(" ->")[0]
                break
            assert time.monotonic() < deadline and self.proc.poll() is None, text
            time.sleep(0.2)
        return self._node_id

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                assert self.proc.wait(timeout=30) == 0, self.log.read_text()
            finally:
                if self.proc.poll() is None:
                    self.proc.kill()


def challenges_of(relay: RelayProcess, node_id: str) -> int:
    events = relay.get(f"/v1/nodes/{node_id}/history")[1]["events"]
    return sum(1 for e in events if e["event"] == "challenge")


@ALONE
def test_honest_node_is_verified_and_stays_so_on_busy_cores(tmp_path: Path) -> None:
    """Both cores busy with another process the whole time (the node measures and answers under the same
    load): verified within 3 minutes, then 6 more challenges (3 roll calls, SGEMM and the reference model at
    each) without a single flag."""
    busy = busy_processes(2)
    try:
        with RelayProcess(tmp_path / "relay", *FAST) as relay:
            started = time.monotonic()
            agent = Agent(relay, tmp_path / "node")
            try:
                counted_seen: list[float] = []

                def no_flag(body: dict[str, Any]) -> None:
                    assert body["trust"]["status"] != "flagged", body["trust"]
                    counted, claimed = body["trust"]["counted"], body["profile"]
                    # counted (at roll calls) never above the claim
                    assert counted["cpu_gflops"] <= claimed["cpu"]["gflops_fp32"], body["trust"]
                    counted_seen.append(counted["cpu_gflops"])

                wait_for(relay, agent.node_id, lambda b: b["trust"]["status"] == "verified",
                         VERIFY_WITHIN_S - (time.monotonic() - started), "an honest node is verified", no_flag)
                verified = relay.get(f"/v1/nodes/{agent.node_id}")[1]
                at_verified = verified["trust"]["challenges"]["passed"]
                # time slices taken from the busy processes are not cores (8-16 were claimed on 2 before)
                assert verified["profile"]["cpu"]["cores"] <= (os.cpu_count() or 1), verified["profile"]["cpu"]
                # once verified, roll calls keep it so (solo challenges verify newcomers only)
                body = wait_for(relay, agent.node_id,
                                lambda b: b["trust"]["challenges"]["passed"] >= at_verified + 6, 240,
                                "6 more challenges", no_flag)
                print(f"busy cores: verified after {at_verified} passes; 6 more by {time.monotonic() - started:.0f} s")
                failed = [e for e in relay.get(f"/v1/nodes/{agent.node_id}/history")[1]["events"]
                          if e["event"] == "challenge" and not e["passed"]]
                assert body["trust"]["status"] == "verified" and not failed, (body["trust"], failed)
                # reference-model challenges were among them: tokens/s observed too
                assert body["trust"]["observed"]["tokens_per_sec"] > 0, body["trust"]
                # counted at roll calls on busy cores: it commits the work it finished by the deadline (before
                # issue 29 its answers at 0.7-0.83 of the claim often missed the 1.25x deadline: counted 0)
                assert max(counted_seen) > 0, counted_seen
            finally:
                agent.stop()
            before = relay.get(f"/v1/nodes/{agent.node_id}")[1]["trust"]
    finally:
        for p in busy:
            p.kill()
            p.wait()
    with RelayProcess(tmp_path / "relay", *FAST) as relay:  # trust is rebuilt from the stored history
        after = relay.get(f"/v1/nodes/{agent.node_id}")[1]["trust"]
        assert after["status"] == "verified" and after["challenges"] == before["challenges"]
        assert after["observed"]["gflops_fp32"] == before["observed"]["gflops_fp32"]
