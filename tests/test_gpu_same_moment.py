"""A roll call sends a node's GPU challenge at the same moment as its SGEMM challenge (issue 28): both go out in
the roll call's one send loop, back to back, are in flight on the session together, and each is finished on its
own (web/proof/challenge_desk.py keeps challenges by id). Whichever answer is judged first, the GPU counts only beside
the SGEMM proof of the same roll call. In-process: a real Relay (its store on disk), sessions whose sends are
captured, answers finished through the desk with the times a node would have taken (what is judged here is the
bookkeeping, not the arithmetic: tests/test_gpu_rollcall.py answers with real adapters).

The pure bound behind it (one machine's CPU and "GPU" at one roll call) is in tests/test_rollcall.py."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.samples import sample_profile
from tests.threaded import in_thread
from web.api.summary import ProfileSummary
from web.config import RelayConfig
from web.map.stats import MICRO
from web.proof.challenge_desk import ChallengeDesk, Challengee
from web.proof.challenges import Challenge
from web.proof.rollcall import RollCall
from web.relay import Relay
from web.store import Store

GPU_TFLOPS = 1.0  # a real GPU's fp32 claim (10x the floor): one GPU, counted when proven
CPU_GFLOPS = 71.5  # tests/samples.py's claim, 2 instances
SIZED = 0.04  # the work given is the claim x the target within a whole number of products (+-3.1% for the GPU)

# each roll call schedules its reference-model phase 32 s on; the loop ends long before it
pytestmark = pytest.mark.filterwarnings("ignore:coroutine 'RollCaller.run_llm' was never awaited")


class Node:
    """One live session: its id and the messages the relay sent it."""

    def __init__(self, desk: ChallengeDesk, name: str, host: str, answers: set[str], gpu_tflops: float | None) -> None:
        key, profile = sample_profile()
        if gpu_tflops is None:
            profile["gpus"] = []
        else:
            profile["gpus"][0]["fp32_tflops"] = gpu_tflops
        desk.core.atlas.put(ProfileSummary.of_profile(profile), desk.core.relay_id, time.time())
        desk.core.atlas.heartbeat(key.node_id, time.time())
        self.node_id = key.node_id
        self.sent: list[dict[str, Any]] = []
        self.who: Challengee = desk.hello(name, host, self.send, frozenset(answers))
        self.who.node_id = key.node_id
        self.who.rtt_ms = 5.0

    async def send(self, message: dict[str, Any] | str) -> None:
        self.sent.append(json.loads(message) if isinstance(message, str) else message)

    def challenge(self, kind: str) -> Challenge:
        return next(ch for ch in self.who.challenges.values() if ch.kind == kind)

    def verdicts(self) -> dict[str, Any]:
        return {m["kind"]: m["verdict"] for m in self.sent if m["type"] == "challenge_result"}


def answered(ch: Challenge, seconds: float) -> Challenge:
    """The challenge as its answer leaves it: committed after `seconds` (net), every product done."""
    ch.commit_s = seconds
    if ch.kind == "sgemm":
        ch.products = [ch.reps] * len(ch.seeds)
    return ch


def in_relay(tmp_path: Path, script: Callable[[Relay, ChallengeDesk], Awaitable[None]]) -> Relay:
    """Runs `script` against an in-process relay whose beacon exists and that starts nothing by itself."""
    relay = Relay(RelayConfig(data_dir=tmp_path / "relay", challenge_first_after_s=1e9, roll_call_interval_s=1e12))

    async def go() -> None:
        await relay.issue_beacon()
        await script(relay, relay.challenges)
        await asyncio.sleep(0)  # the writes a new roll call spawned (the last one's totals) are queued...
        await relay.store.write(Store.all_of())  # ...and done before the loop ends (one writer, in order)

    try:
        in_thread(asyncio.run, go())
    finally:
        relay.store.close()
    return relay


def counted_gpu(desk: ChallengeDesk, node_id: str) -> tuple[int, float]:
    verified = desk.core.atlas.nodes[node_id].verified
    return verified.gpus, verified.gpu_utflops / MICRO


def test_the_gpu_challenge_goes_out_with_the_sgemm_one(tmp_path: Path) -> None:
    """A node that claims a GPU and answers "gpu" is sent its SGEMM challenge and, right behind it in the same
    send loop, its GPU challenge: one issued_at, both in flight at once, the two sends within the roll call's
    send spread. A node that claims a GPU but does not answer "gpu" gets only the SGEMM one (and counts no GPU);
    a node without a GPU claim too; and so does one whose GPU claim is below the floor in all (lavapipe's
    0.002 here: it could count no GPU, and a software adapter's answer would take its SGEMM answer's cores)."""
    box: dict[str, Any] = {}

    async def script(relay: Relay, desk: ChallengeDesk) -> None:
        gpu = Node(desk, "s1", "198.51.100.7", {"sgemm", "llm-rank", "gpu"}, GPU_TFLOPS)
        silent = Node(desk, "s2", "198.51.100.8", {"sgemm", "llm-rank"}, GPU_TFLOPS)
        cpu = Node(desk, "s3", "203.0.113.9", {"sgemm"}, None)
        soft = Node(desk, "s4", "203.0.113.10", {"sgemm", "gpu"}, 0.002)
        box.update(gpu=gpu, silent=silent, cpu=cpu, soft=soft, call=await desk.roll.run(relay.beacons.latest or {}))

    in_relay(tmp_path, script)
    gpu, silent, cpu, soft, call = box["gpu"], box["silent"], box["cpu"], box["soft"], box["call"]
    assert [(m["type"], m["kind"]) for m in gpu.sent] == [("challenge", "sgemm"), ("challenge", "gpu")]
    assert [m["kind"] for m in silent.sent] == ["sgemm"] and [m["kind"] for m in cpu.sent] == ["sgemm"]
    assert [m["kind"] for m in soft.sent] == ["sgemm"] and RelayConfig().gpu_floor_tflops > 0.002
    sgemm, g = gpu.challenge("sgemm"), gpu.challenge("gpu")
    assert len(gpu.who.challenges) == 2 and sgemm.roll_call == g.roll_call == call.id
    assert sgemm.issued_at == g.issued_at == call.at  # one moment
    assert call.send_spread_ms is not None and 0 <= (g.sent_at - sgemm.sent_at) * 1000 <= call.send_spread_ms
    assert call.challenged == {gpu.node_id, silent.node_id, cpu.node_id, soft.node_id}
    assert call.gpu_challenged == {gpu.node_id}
    # both stop at the common deadline and commit what they finished (docs/protocol.md, credit by the deadline)
    assert gpu.sent[0]["stop_after_s"] == gpu.sent[1]["stop_after_s"] == 1.125
    rows = call.to_json()
    assert rows["gpu"]["challenged"] == 1 and rows["sessions_challenged"] == 4


@pytest.mark.parametrize("gpu_first", [True, False])
def test_the_gpu_counts_beside_the_sgemm_proof_whichever_is_judged_first(tmp_path: Path, gpu_first: bool) -> None:
    """Each answer needs its own round trips, so the GPU answer may be judged before the SGEMM proof exists:
    it waits on the roll call and is put on the proof when it lands. Finishing one challenge leaves the other
    in flight. Both orders count the same: the CPU and the GPU claim, both told "counted"."""
    box: dict[str, Any] = {}

    async def script(relay: Relay, desk: ChallengeDesk) -> None:
        node = Node(desk, "s1", "198.51.100.7", {"sgemm", "llm-rank", "gpu"}, GPU_TFLOPS)
        call = await desk.roll.run(relay.beacons.latest or {})
        first, second = ("gpu", "sgemm") if gpu_first else ("sgemm", "gpu")
        await desk._finish(node.who, answered(node.challenge(first), 1.0), True, "passed", "rows match")
        box["left"] = [ch.kind for ch in node.who.challenges.values()]  # the other one, still in flight
        box["between"] = counted_gpu(desk, node.node_id)
        await desk._finish(node.who, answered(node.challenge(second), 1.0), True, "passed", "rows match")
        box.update(node=node, call=call, after=counted_gpu(desk, node.node_id),
                   cpu=desk.core.atlas.nodes[node.node_id].verified.cpu_mgflops / 1000)

    in_relay(tmp_path, script)
    node, call = box["node"], box["call"]
    assert box["left"] == ["sgemm" if gpu_first else "gpu"]
    assert box["between"] == (0, 0.0)  # the GPU alone, or the CPU before its GPU answer: no GPU yet
    assert box["after"] == (1, pytest.approx(GPU_TFLOPS, rel=SIZED))
    assert box["cpu"] == pytest.approx(CPU_GFLOPS, rel=SIZED)
    assert node.verdicts() == {"sgemm": "counted", "gpu": "counted"} and not node.who.challenges
    assert call.answered == call.gpu_answered == {node.node_id} and not call.gpu_failed


def test_a_gpu_answer_counts_nothing_without_the_sgemm_proof_of_its_roll_call(tmp_path: Path) -> None:
    """A GPU answer right in time counts nothing where the SGEMM answer of the same roll call fails, before
    or after it (a CPU that puts its cores into a "GPU" cannot keep the GPU figure and drop its CPU proof);
    nor does a GPU proven at an earlier roll call stand beside this one's SGEMM proof."""
    box: dict[str, Any] = {}

    async def script(relay: Relay, desk: ChallengeDesk) -> None:
        after = Node(desk, "s1", "198.51.100.7", {"sgemm", "gpu"}, GPU_TFLOPS)    # GPU passes, then SGEMM fails
        before = Node(desk, "s2", "198.51.100.8", {"sgemm", "gpu"}, GPU_TFLOPS)   # SGEMM fails, then GPU passes
        call = await desk.roll.run(relay.beacons.latest or {})
        await desk._finish(after.who, answered(after.challenge("gpu"), 1.0), True, "passed", "rows match")
        await desk._finish(after.who, after.challenge("sgemm"), False, "wrong_rows", "row 3 is not the product")
        await desk._finish(before.who, before.challenge("sgemm"), False, "late", "no commitment")
        await desk._finish(before.who, answered(before.challenge("gpu"), 1.0), True, "passed", "rows match")
        box.update(after=after, before=before, call=call,
                   counted=[counted_gpu(desk, n.node_id) for n in (after, before)])
        # the next roll call: an SGEMM proof before any GPU answer of it carries no GPU of the last one
        await relay.issue_beacon()
        desk.trust.clear()  # (the failures above flagged both; a fresh look at the bookkeeping alone)
        await desk.roll.run(relay.beacons.latest or {})
        await desk._finish(after.who, answered(after.challenge("gpu"), 1.0), True, "passed", "rows match")
        await desk._finish(after.who, answered(after.challenge("sgemm"), 1.0), True, "passed", "rows match")
        box["full"] = counted_gpu(desk, after.node_id)
        await relay.issue_beacon()
        third = await desk.roll.run(relay.beacons.latest or {})
        await desk._finish(after.who, answered(after.challenge("sgemm"), 1.0), True, "passed", "rows match")
        box["carried"] = counted_gpu(desk, after.node_id)
        box["third"] = third

    in_relay(tmp_path, script)
    call, after, before = box["call"], box["after"], box["before"]
    assert box["counted"] == [(0, 0.0), (0, 0.0)]
    assert call.gpu_answered == set()
    assert call.gpu_failed == {after.node_id: "no_sgemm_proof_this_roll_call",
                               before.node_id: "no_sgemm_proof_this_roll_call"}
    assert before.verdicts()["gpu"] == "no_sgemm_proof_this_roll_call"
    assert box["full"] == (1, pytest.approx(GPU_TFLOPS, rel=SIZED))  # the precondition of the last look: it did count
    assert box["carried"] == (0, 0.0) and after.challenge("gpu").roll_call == box["third"].id


def test_a_late_gpu_answer_leaves_the_sgemm_proof_alone(tmp_path: Path) -> None:
    """The GPU answer after the deadline counts no GPU; the CPU still counts. The tick expires the challenge
    that is overdue and only that one."""
    box: dict[str, Any] = {}

    async def script(relay: Relay, desk: ChallengeDesk) -> None:
        node = Node(desk, "s1", "198.51.100.7", {"sgemm", "gpu"}, GPU_TFLOPS)
        call = await desk.roll.run(relay.beacons.latest or {})
        gpu = node.challenge("gpu")
        gpu.sent_at -= desk.config.challenge_commit_timeout_s + 1  # its commitment is overdue; the SGEMM's is not
        await desk.tick()
        box["left"] = [ch.kind for ch in node.who.challenges.values()]
        await desk._finish(node.who, answered(node.challenge("sgemm"), 1.0), True, "passed", "rows match")
        box.update(node=node, call=call, gpu=counted_gpu(desk, node.node_id),
                   cpu=desk.core.atlas.nodes[node.node_id].verified.cpu_mgflops / 1000)

    in_relay(tmp_path, script)
    node, call = box["node"], box["call"]
    assert box["left"] == ["sgemm"]
    assert call.gpu_failed == {node.node_id: "late"} and box["gpu"] == (0, 0.0)
    assert box["cpu"] == pytest.approx(CPU_GFLOPS, rel=SIZED) and node.verdicts() == {"gpu": "late", "sgemm": "counted"}


def test_a_busy_node_is_asked_neither(tmp_path: Path) -> None:
    """A node still answering an earlier challenge is asked neither at a roll call (both recorded busy)."""
    box: dict[str, Any] = {}

    async def script(relay: Relay, desk: ChallengeDesk) -> None:
        node = Node(desk, "s1", "198.51.100.7", {"sgemm", "gpu"}, GPU_TFLOPS)
        first = await desk.roll.run(relay.beacons.latest or {})
        await relay.issue_beacon()
        second = await desk.roll.run(relay.beacons.latest or {})
        box.update(node=node, first=first, second=second)

    in_relay(tmp_path, script)
    node, second = box["node"], box["second"]
    assert len(node.sent) == 2 and box["first"].gpu_challenged == {node.node_id}
    assert second.failed == {node.node_id: "busy"} and second.gpu_failed == {node.node_id: "busy"}


def test_rollcall_records_hold_the_gpu_shown_off_the_listing() -> None:
    """What a GPU answer showed waits on the roll call (gpu_shown) and never appears in GET /v1/roll-calls."""
    call = RollCall("1-x", 1, 5.0, gpu_shown={"n": (1.0, 1)})
    assert "gpu_shown" not in json.dumps(call.to_json())


def test_one_addresss_sessions_are_sent_back_to_back(tmp_path: Path) -> None:
    """Each answer is timed from its own send, so identities sent s apart have the deadline plus s between them:
    a roll call sends one address's sessions one after another, whatever order they said hello in."""
    box: dict[str, Any] = {}

    async def script(relay: Relay, desk: ChallengeDesk) -> None:
        hosts = ["203.0.113.1", "198.51.100.2", "203.0.113.1", "192.0.2.3", "198.51.100.2", "203.0.113.1"]
        nodes = [Node(desk, f"s{i}", host, {"sgemm"}, None) for i, host in enumerate(hosts)]
        box.update(nodes=nodes, call=await desk.roll.run(relay.beacons.latest or {}))

    in_relay(tmp_path, script)
    nodes = box["nodes"]
    assert all(len(n.sent) == 1 for n in nodes)  # the precondition: every session was challenged
    order = sorted(nodes, key=lambda n: n.challenge("sgemm").sent_at)
    hosts = [n.who.host for n in order]
    runs = [h for i, h in enumerate(hosts) if i == 0 or hosts[i - 1] != h]
    assert len(runs) == len(set(hosts)) == 3, hosts  # each address in one run of sends


def test_a_node_the_relay_is_still_checking_is_asked_at_the_next_roll_call(tmp_path: Path) -> None:
    """A relay slow to check an answer (a flood, a busy machine: tests/test_flood.py failed so, 2026-12-06) must
    not make the honest node that sent it miss the next roll call as "busy": its answer is in. A node that still
    owes its answer is busy, as before."""
    box: dict[str, Any] = {}

    async def script(relay: Relay, desk: ChallengeDesk) -> None:
        checked = Node(desk, "s1", "198.51.100.7", {"sgemm"}, None)
        owing = Node(desk, "s2", "198.51.100.8", {"sgemm"}, None)
        first = await desk.roll.run(relay.beacons.latest or {})
        assert first.challenged == {checked.node_id, owing.node_id}  # the precondition: both asked once
        checked.challenge("sgemm").checking = True  # its opening arrived; the relay is recomputing its rows
        await relay.issue_beacon()
        box.update(checked=checked, owing=owing, call=await desk.roll.run(relay.beacons.latest or {}))

    in_relay(tmp_path, script)
    checked, owing, call = box["checked"], box["owing"], box["call"]
    assert call.challenged == {checked.node_id} and call.failed == {owing.node_id: "busy"}
    assert len(checked.who.challenges) == 2  # the one being checked and the new one, each kept by its id
