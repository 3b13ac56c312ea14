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
    """Four sessions at a roll call's moment: a server node computing a solo challenge (asked, the solo one
    withdrawn and named in its roll-call challenge); one whose solo commitment is in and owes only the opening
    from memory (asked, its solo challenge left to finish); one still owing an earlier roll call's answer (busy,
    as before); and a client that cannot stop its work (a browser, an older node: no "withdrawable" in its
    hello) computing a solo challenge (busy, as before: its roll-call answer would wait behind the solo one). A
    commitment that names the withdrawn challenge is told so and recorded nowhere, once; a second one is an
    unknown challenge, as any reply naming nothing in flight is."""
    box: dict[str, Any] = {}

    async def script(relay: Relay, desk: ChallengeDesk) -> None:
        owing = Node(desk, "s3", "198.51.100.3", {"sgemm"}, None)
        owing.who.withdrawable = True
        await desk.roll.run(relay.beacons.latest or {})  # s3 is asked and never answers
        computing = Node(desk, "s1", "198.51.100.1", {"sgemm"}, None)
        committed = Node(desk, "s2", "198.51.100.2", {"sgemm"}, None)
        browser = Node(desk, "s4", "198.51.100.4", {"sgemm"}, None)
        computing.who.withdrawable = committed.who.withdrawable = True
        for node in (computing, committed, browser):
            await desk._challenge_host(node.who.host, [node.who], time.time())  # a solo challenge each
        solo = {n.who.session_id: n.challenge("sgemm") for n in (computing, committed, browser)}
        assert all(ch.roll_call is None for ch in solo.values())  # the precondition: all are solo challenges
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
        box.update(nodes=(computing, committed, owing, browser), solo=solo, call=call, again=again.value.code,
                   history=(history_before, history_after), withdrawn=desk.core.metrics.withdrawn)

    in_relay(tmp_path, script)
    (computing, committed, owing, browser), solo, call = box["nodes"], box["solo"], box["call"]
    assert call.challenged == {computing.node_id, committed.node_id}
    assert call.failed == {owing.node_id: "busy", browser.node_id: "busy"}
    roll_msgs = [m for m in computing.sent if m["type"] == "challenge" and "stop_after_s" in m]
    assert [m.get("withdraws") for m in roll_msgs] == [[solo["s1"].id]]
    assert solo["s1"].id not in computing.who.challenges  # not owed, never timed out as late
    assert solo["s2"].id in committed.who.challenges  # its opening still counts
    assert solo["s4"].id in browser.who.challenges  # still owed by the client that cannot stop
    assert all("withdraws" not in m for m in committed.sent + browser.sent)
    assert box["withdrawn"] == 1
    assert computing.sent[-1] == {  # told, without an error counted against the session (no LiveError)
        "type": "withdrawn", "id": solo["s1"].id,
        "detail": "a roll call withdrew this challenge: not judged, counts neither way"}
    before, after = box["history"]
    assert before == after  # no history row, passed or failed
    assert box["trust"] in (None, (0, 0))  # judged neither way
    assert box["again"] == "unknown_challenge"


def test_the_reference_model_phase_withdraws_solo_work_too(tmp_path: Path) -> None:
    """32 s after the SGEMM phase the roll call asks for tokens: a server node computing a solo challenge then
    (one begun after its roll-call answer) is asked too, the solo one withdrawn, instead of losing its tokens/s
    until the next roll call."""
    box: dict[str, Any] = {}

    async def script(relay: Relay, desk: ChallengeDesk) -> None:
        node = Node(desk, "s1", "198.51.100.1", {"sgemm", "llm-rank"}, None)
        node.who.withdrawable = True
        call = await desk.roll.run(relay.beacons.latest or {})
        node.who.challenges.clear()  # its SGEMM answer came in and was judged
        await desk._challenge_host(node.who.host, [node.who], time.time())
        (solo,) = node.who.challenges.values()
        assert desk.core.atlas.nodes[node.node_id].profile.claimed_tps  # the precondition: it claims tokens/s
        await desk.roll.run_llm(call, relay.beacons.latest or {})
        box.update(node=node, solo=solo, call=call)

    in_relay(tmp_path, script)
    node, solo, call = box["node"], box["solo"], box["call"]
    assert call.llm_challenged == {node.node_id}
    (llm,) = [m for m in node.sent if m["type"] == "challenge" and m["kind"] == "llm" and "stop_after_s" in m]
    assert llm["withdraws"] == [solo.id] and solo.id not in node.who.challenges


def test_an_older_greedy_client_gets_no_reference_model_challenge_and_is_not_flagged(tmp_path: Path) -> None:
    """Issue 45's sampler changed what a right token is: a client that says only "llm" (it decodes greedily) would
    fail every check as wrong_tokens and be flagged for 24 h. The relay asks only "llm-rank" clients: the older
    one gets its SGEMM challenge and no reference-model one, and its tokens/s counts nothing."""
    box: dict[str, Any] = {}

    async def script(relay: Relay, desk: ChallengeDesk) -> None:
        old = Node(desk, "s1", "198.51.100.1", {"sgemm", "llm"}, None)
        new = Node(desk, "s2", "198.51.100.2", {"sgemm", "llm-rank"}, None)
        call = await desk.roll.run(relay.beacons.latest or {})
        for node in (old, new):
            node.who.challenges.clear()  # their SGEMM answers came in
        assert all(desk.core.atlas.nodes[n.node_id].profile.claimed_tps for n in (old, new))  # both claim tokens
        await desk.roll.run_llm(call, relay.beacons.latest or {})
        box.update(old=old, new=new, call=call, status=desk.status(old.node_id, time.time()))

    in_relay(tmp_path, script)
    old, new, call = box["old"], box["new"], box["call"]
    assert call.challenged == {old.node_id, new.node_id}
    assert call.llm_challenged == {new.node_id}
    assert not [m for m in old.sent if m["type"] == "challenge" and m["kind"] == "llm"]
    assert box["status"] != "flagged"


def test_a_roll_calls_own_challenge_is_never_withdrawn(tmp_path: Path) -> None:
    """The cheater's side: only a solo challenge is ever withdrawn. A node still owing a roll call's answer at the
    next roll call is busy (asked nothing, counted 0), so no roll call's check is dodged by the next one."""
    box: dict[str, Any] = {}

    async def script(relay: Relay, desk: ChallengeDesk) -> None:
        node = Node(desk, "s1", "198.51.100.1", {"sgemm"}, None)
        node.who.withdrawable = True
        first = await desk.roll.run(relay.beacons.latest or {})
        owed = node.challenge("sgemm")
        await relay.issue_beacon()
        second = await desk.roll.run(relay.beacons.latest or {})
        box.update(node=node, first=first, second=second, owed=owed)

    in_relay(tmp_path, script)
    node = box["node"]
    assert box["first"].challenged == {node.node_id}
    assert box["second"].failed == {node.node_id: "busy"} and box["second"].challenged == set()
    assert box["owed"].id in node.who.challenges and box["owed"].id not in node.who.withdrawn_ids


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
    deadline = time.monotonic() + 10
    while not session.answering:  # the precondition: the solo work is under way (its thread may start late)
        assert time.monotonic() < deadline, "the solo challenge's work never began"
        time.sleep(0.01)
    time.sleep(0.3)
    assert session.answering and ws.commits() == {}
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


def test_hello_says_withdrawable_as_true_or_false_and_nothing_else(tmp_path: Path) -> None:
    """Bad input gets a clear answer: a hello whose "withdrawable" is not a boolean is refused as invalid_message
    (naming the field), and the session goes on; the server node's own hello says true."""
    from websockets.sync.client import connect

    from tests.relay_process import RelayProcess

    sent: list[dict[str, Any]] = []

    class Recorder:
        def send(self, text: str) -> None:
            sent.append(json.loads(text))

    session = LiveSession("http://127.0.0.1:9", NodeKey.generate())
    session._ws = Recorder()
    session.hello(["sgemm"])
    assert sent == [{"type": "hello", "answers": ["sgemm"], "withdrawable": True}]
    with RelayProcess(tmp_path / "relay") as relay, connect(relay.url.replace("http", "ws") + "/v1/live") as ws:
        json.loads(ws.recv(timeout=10))  # welcome
        for bad in ("yes", 1, None):  # (each costs one of the session's MAX_ERRORS, 5)
            ws.send(json.dumps({"type": "hello", "answers": ["sgemm"], "withdrawable": bad}))
            while (reply := json.loads(ws.recv(timeout=10)))["type"] == "ping":
                pass
            assert reply["type"] == "error" and reply["code"] == "invalid_message", reply
            assert "withdrawable" in reply["detail"], reply
        ws.send(json.dumps({"type": "hello", "answers": ["sgemm"], "withdrawable": True}))
        ws.send(json.dumps({"type": "pong", "id": 424242}))  # answered: the session is still open and reading
        while (reply := json.loads(ws.recv(timeout=10)))["type"] != "error":
            pass
        assert reply["code"] == "unknown_ping", reply
