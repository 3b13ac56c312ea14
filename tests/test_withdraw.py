"""A roll call withdraws the solo challenges a node is still computing (issue 29): before, a node whose solo
answer (seconds on a busy machine) overlapped the roll call's moment was not asked and counted 0 (2 of 50 busy
roll calls, 2026-12-07). The relay's side in-process, through the roll call's own code; the server node's side
with the real capsule: a withdrawn answer stops after the product or token in progress and is never sent, and
the roll call's answer is committed by its own deadline instead of queueing behind seconds of solo work."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from common.keys import NodeKey
from host_runner.live_client import LiveSession
from tests.test_gpu_same_moment import Node, in_relay
from web.proof.challenge_desk import ChallengeDesk
from web.relay import Relay
from web.sessions.live import LiveError

# each roll call schedules its reference-model phase 32 s on; the loop ends long before it
pytestmark = pytest.mark.filterwarnings("ignore:coroutine 'RollCaller.run_llm' was never awaited")


def test_a_roll_call_withdraws_solo_work_and_judges_it_neither_way(tmp_path: Path) -> None:
    """Three nodes at a roll call's moment: one computing a solo challenge (asked, the solo one withdrawn and
    named in its roll-call challenge), one whose solo commitment is in and owes only the opening from memory
    (asked, its solo challenge left to finish), one still owing an earlier roll call's answer (busy, as before).
    A commitment that names the withdrawn challenge is told so and recorded nowhere, once; a second one is an
    unknown challenge, as any reply naming nothing in flight is."""
    box: dict[str, Any] = {}

    async def script(relay: Relay, desk: ChallengeDesk) -> None:
        owing = Node(desk, "s3", "198.51.100.3", {"sgemm"}, None)
        await desk.roll.run(relay.beacons.latest or {})  # s3 is asked and never answers
        computing = Node(desk, "s1", "198.51.100.1", {"sgemm"}, None)
        committed = Node(desk, "s2", "198.51.100.2", {"sgemm"}, None)
        for node in (computing, committed):
            await desk._challenge_host(node.who.host, [node.who], time.time())  # a solo challenge each
        solo = {n.who.session_id: n.challenge("sgemm") for n in (computing, committed)}
        assert all(ch.roll_call is None for ch in solo.values())  # the precondition: both are solo challenges
        solo["s2"].roots = [b"\0" * 32]  # its commitment arrived; the relay sent the rows to open
        history_before = relay.store.history(computing.node_id, 100)
        await relay.issue_beacon()
        call = await desk.roll.run(relay.beacons.latest or {})
        await desk.on_commit(computing.who, {"type": "commit", "id": solo["s1"].id, "roots": ["00" * 32]})
        history_after = relay.store.history(computing.node_id, 100)
        trust = desk.trust.get(computing.node_id)
        box["trust"] = None if trust is None else (trust.passes_total, trust.failures_total)
        with pytest.raises(LiveError) as again:
            await desk.on_commit(computing.who, {"type": "commit", "id": solo["s1"].id, "roots": ["00" * 32]})
        box.update(nodes=(computing, committed, owing), solo=solo, call=call, again=again.value.code,
                   history=(history_before, history_after), withdrawn=desk.core.metrics.withdrawn)

    in_relay(tmp_path, script)
    (computing, committed, owing), solo, call = box["nodes"], box["solo"], box["call"]
    assert call.challenged == {computing.node_id, committed.node_id}
    assert call.failed == {owing.node_id: "busy"}
    roll_msgs = [m for m in computing.sent if m["type"] == "challenge" and "stop_after_s" in m]
    assert [m.get("withdraws") for m in roll_msgs] == [[solo["s1"].id]]
    assert solo["s1"].id not in computing.who.challenges  # not owed, never timed out as late
    assert solo["s2"].id in committed.who.challenges  # its opening still counts
    assert all("withdraws" not in m for m in committed.sent)
    assert box["withdrawn"] == 1
    assert computing.sent[-1] == {  # told, without an error counted against the session (no LiveError)
        "type": "withdrawn", "id": solo["s1"].id,
        "detail": "a roll call withdrew this challenge: not judged, counts neither way"}
    before, after = box["history"]
    assert before == after  # no history row, passed or failed
    assert box["trust"] in (None, (0, 0))  # judged neither way
    assert box["again"] == "unknown_challenge"


def test_the_withdrawn_ids_are_the_relays_not_the_nodes(tmp_path: Path) -> None:
    """The cheater's side: a node cannot make a challenge withdrawn. Naming its own failing solo challenge in a
    message does nothing (only the relay's roll call withdraws), and at a roll call a challenge of a *roll call*
    is never withdrawn (one that owes it is busy: asked nothing, counted 0), so the roll call's own check is
    never dodged."""
    box: dict[str, Any] = {}

    async def script(relay: Relay, desk: ChallengeDesk) -> None:
        node = Node(desk, "s1", "198.51.100.1", {"sgemm"}, None)
        await desk._challenge_host(node.who.host, [node.who], time.time())
        solo = node.challenge("sgemm")
        # what a client can send: a commitment with garbage roots, as if it wished the challenge withdrawn
        await desk.on_commit(node.who, {"type": "commit", "id": solo.id, "roots": ["zz"], "withdraws": [solo.id]})
        box["solo_failed"] = [m for m in node.sent if m["type"] == "challenge_result"]
        first = await desk.roll.run(relay.beacons.latest or {})
        await relay.issue_beacon()
        second = await desk.roll.run(relay.beacons.latest or {})
        box.update(node=node, first=first, second=second)

    in_relay(tmp_path, script)
    node = box["node"]
    assert [(m["passed"], m["code"]) for m in box["solo_failed"]] == [(False, "malformed_commit")]
    assert box["first"].challenged == {node.node_id}
    assert box["second"].failed == {node.node_id: "busy"} and box["second"].challenged == set()


class Ws:
    """The node's socket as the session's worker threads use it: what they send, with when."""

    def __init__(self) -> None:
        self.sent: list[tuple[float, dict[str, Any]]] = []
        self.lock = threading.Lock()

    def send(self, text: str) -> None:
        with self.lock:
            self.sent.append((time.perf_counter(), json.loads(text)))

    def commits(self) -> dict[str, float]:
        with self.lock:
            return {m["id"]: at for at, m in self.sent if m.get("type") == "commit"}


def wait_for_commit(ws: Ws, cid: str, within_s: float) -> float | None:
    deadline = time.perf_counter() + within_s
    while time.perf_counter() < deadline:
        if cid in ws.commits():
            return ws.commits()[cid]
        time.sleep(0.01)
    return None


SOLO_S = 20.0  # the solo work withdrawn: at least this long on any machine here (products of order 256)


@pytest.mark.parametrize("kind", ["sgemm", "llm"])
def test_a_withdrawn_solo_answer_stops_and_the_roll_call_is_answered_by_its_deadline(
        artifacts: Any, kind: str) -> None:
    """The server node with the real capsule: a solo challenge of ~20 s or more is withdrawn by a roll call's
    challenge 0.3 s in; the solo work stops after the product or token in progress and nothing is sent for it,
    and the roll call's answer is committed by its own stop_after_s (1 s; fewer products or tokens than asked),
    where without the withdrawal it would wait for the solo work to end."""
    session = LiveSession("http://127.0.0.1:9", NodeKey.generate(), reactor_wasm=artifacts.reactor)
    ws = Ws()
    common = {"type": "challenge", "beacon_round": 7, "nonce": "cd" * 16, "commit_within_s": 60.0}
    if kind == "sgemm":
        # 2 x 256^3 flop a product: 20 s needs 20 s x 100 GFLOP/s / 33.6 MFLOP ~ 60,000 products at the most
        solo = {**common, "id": "solo", "kind": "sgemm", "n": 256, "reps": 65536, "seeds": ["5eed" * 4]}
        roll = {**common, "id": "roll", "kind": "sgemm", "n": 256, "reps": 65536, "seeds": ["0123" * 4],
                "stop_after_s": 1.0}
    else:
        solo = {**common, "id": "solo", "kind": "llm", "decode": 8192, "seeds": ["5eed" * 4]}  # ~6 ms a token
        roll = {**common, "id": "roll", "kind": "llm", "decode": 8192, "seeds": ["0123" * 4], "stop_after_s": 1.0}
    session._challenge(ws, solo)
    time.sleep(0.3)
    assert session.answering and ws.commits() == {}  # the precondition: the solo work is under way
    sent_at = time.perf_counter()
    session._challenge(ws, {**roll, "withdraws": ["solo"]})
    committed_at = wait_for_commit(ws, "roll", SOLO_S)
    assert committed_at is not None, "the roll call's answer never came"
    # what this catches is a wait behind >= SOLO_S of solo work; the bound leaves room for a test run at nice 19
    # beside a roll call (tests/scheduling.py), and the answer stopped by its own deadline, not by running out
    assert committed_at - sent_at <= SOLO_S / 2, f"the roll call's answer took {committed_at - sent_at:.2f} s"
    (roll_commit,) = [m for _, m in ws.sent if m.get("id") == "roll"]
    if kind == "sgemm":
        assert 1 <= roll_commit["products"][0] < 65536
    else:
        assert 1 <= len(roll_commit["tokens"]) < 8192
    time.sleep(0.5)
    assert "solo" not in ws.commits() and not session.answering  # stopped, and nothing sent for it
    assert session.errors == []
