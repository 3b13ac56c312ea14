"""The relay's roll calls (the rules are web/proof/rollcall.py): when a beacon round draws one, every live session
that answers challenges is sent its SGEMM challenge at the same moment, and in the same sends, right behind it,
the GPU challenge of every node that claims fp32 TFLOP/s (at least gpu_floor_tflops in all) and answers "gpu"
(web/proof/gpu_challenges.py): the node answers both side by side, so a CPU that answers for a "GPU" spends the cores
its SGEMM answer would show at that moment. Later, again all at once, the reference-model challenge of every
node that claims tokens/s. Answers come back through the challenge desk (web/proof/challenge_desk.py), which
records what each node proved."""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from capsule.challenge import LLM_ANSWER
from web.map.stats import MICRO
from web.proof.challenges import Challenge, new_challenge, new_llm_challenge
from web.proof.gpu_challenges import new_gpu_challenge
from web.proof.rollcall import Proof, RollCall, due, on_time, shown, stop_after_s, work_s
from web.sessions.direct_frames import text_frame
from web.sessions.send_priority import realtime
from web.store import Store

if TYPE_CHECKING:
    from web.proof.challenge_desk import ChallengeDesk, Challengee

log = logging.getLogger("ce.rollcall")


STORE_KEY = "~roll-calls"  # the history rows that keep roll calls across restarts (not a NodeId)


class RollCaller:
    def __init__(self, desk: ChallengeDesk) -> None:
        self.desk = desk
        self.config = desk.config
        self.calls: list[RollCall] = []          # this run's, latest last
        self.earlier: list[dict[str, Any]] = []  # earlier runs' (from the store), latest first
        self._tasks: set[asyncio.Task[None]] = set()

    def load(self, stored: list[dict[str, Any]]) -> None:
        self.earlier = stored

    def on_beacon(self, beacon: dict[str, Any]) -> None:
        """Schedules the roll call this round draws, if any."""
        at = due(beacon, self.config)
        if at is None:
            return
        self._spawn(self._after(max(0.0, at - time.time()), self.run(beacon)))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @staticmethod
    async def _after(delay_s: float, coro: Any) -> None:
        await asyncio.sleep(delay_s)
        await coro

    @property
    def latest(self) -> RollCall | None:
        return self.calls[-1] if self.calls else None

    def _targets(self, skipped: dict[str, int] | None = None) -> dict[str, Challengee]:
        """One answering session per node with a claim here (a node with two sessions is asked once; one with
        a session on a lower-id relay of the cluster is asked there). `skipped` counts the sessions left out,
        by why (what GET /v1/roll-calls shows as sessions_not_asked: a session missing from a roll call is
        never unexplained)."""
        out: dict[str, Challengee] = {}
        atlas, outbox, now = self.desk.core.atlas, self.desk.outbox, time.time()
        for who in self.desk.sessions.values():
            entry = atlas.nodes.get(who.node_id or "")
            why = ("unidentified" if who.node_id is None else "opted_out" if not who.active
                   else "second_session" if who.node_id in out else "no_profile_here" if entry is None
                   else "no_cpu_claim" if entry.profile.claimed_gflops is None
                   else "not_live" if who.node_id not in atlas.live
                   else "asked_elsewhere" if outbox.asked_elsewhere(who.node_id, now) else None)
            if why is None and who.node_id is not None:
                out[who.node_id] = who
            elif why is not None and skipped is not None:
                skipped[why] = skipped.get(why, 0) + 1
        return out

    def on_remote_result(self, ch: Challenge, passed: bool, verdict: str | None) -> None:
        """A peer relay's roll-call verdict for a node it asked (its transcript re-checked by the desk)."""
        desk, node_id = self.desk, ch.node_id
        call = self.latest
        if call is None or call.id != ch.roll_call:
            return  # evidence of an earlier roll call (or one this relay never ran): it proves nothing now
        counts = passed and verdict == "counted" and ch.commit_s is not None
        if ch.kind == "sgemm":
            if counts and ch.commit_s is not None:
                previous = desk.proofs.get(node_id)
                desk.proofs[node_id] = self._sgemm_proof(call, ch, previous)
                call.answered.add(node_id)
            else:
                desk.proofs.pop(node_id, None)
                self._no_sgemm_proof(call, node_id)
        elif ch.kind == "llm":
            proof = desk.proofs.get(node_id)
            if proof is not None and proof.roll_call == ch.roll_call:
                proof.tps = shown(len(ch.tokens or []), ch.commit_s, self.config) if counts and ch.commit_s else 0.0
        elif ch.kind == "gpu":
            if counts:
                call.gpu_answered.add(node_id)
            self._gpu_shown(call, node_id, ch if counts else None)
        desk.refresh(node_id, time.time())

    def _proof_of(self, call: RollCall, node_id: str) -> Proof | None:
        """The node's SGEMM proof of this roll call, if it has landed."""
        proof = self.desk.proofs.get(node_id)
        return proof if proof is not None and proof.roll_call == call.id else None

    def _sgemm_proof(self, call: RollCall, ch: Challenge, previous: Proof | None) -> Proof:
        """The proof an SGEMM answer makes. Tokens/s proven at the previous roll call stand until this one's
        llm phase; GPU figures come only from this roll call's GPU answer (sent with the SGEMM challenge, and
        judged before or after it: each answer needs its own round trips)."""
        proof = Proof(call.id, shown(ch.flops / 1e9, ch.commit_s or 0.0, self.config), len(ch.seeds))
        if previous is not None:
            proof.tps = previous.tps
        proof.gpu_tflops, proof.gpus = call.gpu_shown.get(ch.node_id, (0.0, 0))
        return proof

    def _gpu_shown(self, call: RollCall, node_id: str, ch: Challenge | None) -> None:
        """What a GPU answer showed (None: nothing, or not counted), kept on the roll call until the node's
        SGEMM proof of it lands, and put on that proof now if it has: fp32 TFLOP/s shown as the SGEMM figure
        is (observed x the cap, at most the work over the target time), one GPU per instance."""
        if ch is None or ch.commit_s is None:
            call.gpu_shown.pop(node_id, None)
        else:
            call.gpu_shown[node_id] = (shown(ch.flops / 1e12, ch.commit_s, self.config), len(ch.seeds))
        proof = self._proof_of(call, node_id)
        if proof is not None:
            proof.gpu_tflops, proof.gpus = call.gpu_shown.get(node_id, (0.0, 0))

    @staticmethod
    def _no_sgemm_proof(call: RollCall, node_id: str) -> None:
        """The node's SGEMM answer of this roll call did not count: a GPU answer judged before it counts
        nothing either (a GPU counts only beside the CPU proven at the same moment)."""
        call.gpu_shown.pop(node_id, None)
        if node_id in call.gpu_answered:
            call.gpu_answered.discard(node_id)
            call.gpu_failed[node_id] = "no_sgemm_proof_this_roll_call"

    async def run(self, beacon: dict[str, Any]) -> RollCall:
        """The SGEMM phase, GPU challenges included: every target at once; then the llm phase is scheduled."""
        desk, now_wall = self.desk, time.time()
        latest = self.latest
        if latest is not None and latest.beacon_round == int(beacon["round"]):
            return latest  # (the same round heard twice)
        if latest is not None:
            self._freeze(latest)
        # the same id on every relay of a cluster (they all run the leader's round): transcripts name it
        call = RollCall(f"{beacon['round']}-{str(beacon['relay'])[-8:]}", int(beacon["round"]), now_wall)
        self.calls = [*self.calls, call][-self.config.roll_calls_kept:]
        targets = self._targets(call.not_asked)
        # whoever this relay does not ask now stops counting now: joined since, hidden, opted out, gone, and a
        # node another relay of the cluster asks: it counts again only on evidence of this roll call (that
        # relay's transcript), never because another relay is assumed to have asked it (two identities
        # taking turns on the lower relay were once both counted by the higher one: 2.0-2.4x)
        for node_id, proof in list(desk.proofs.items()):
            if node_id not in targets and proof.roll_call != call.id:
                desk._drop_proof(node_id, now_wall)
        planned: list[tuple[Challengee, Challenge]] = []
        for node_id, who in targets.items():
            claim = desk.core.atlas.nodes[node_id].profile
            # a GPU claim below the floor in all can count no GPU (web/proof/rollcall.py counted): not asked, so a
            # software adapter (lavapipe, SwiftShader: the CPU itself) never takes the cores of the SGEMM answer
            gpu = (claim.claimed_gpu_tflops or 0.0) >= self.config.gpu_floor_tflops and "gpu" in who.answers
            withdrawn = who.make_way()
            # still answering an earlier roll call (a client that cannot stop its work: any challenge): not
            # asked, counts nothing now
            if withdrawn is None:
                call.failed[node_id] = "busy"
                if gpu:
                    call.gpu_failed[node_id] = "busy"
                desk._drop_proof(node_id, now_wall)
                continue
            # work beyond the deadline, and the moment to stop: the node commits what it finished by then
            ch = new_challenge(node_id, claim.claimed_gflops or 0.0, claim.instances, claim.sgemm_n, beacon,
                               secrets.token_hex(16), who.rtt_ms, 0.0, self.config, work_s(self.config),
                               stop_after_s(self.config))
            ch.roll_call, ch.issued_at, ch.withdraws = call.id, now_wall, withdrawn
            desk.core.metrics.withdrawn += len(withdrawn)
            planned.append((who, ch))
            if claim.claimed_gpu_tflops and not gpu:
                desk._drop_proof(node_id, now_wall, "gpu")  # claims a GPU, does not answer for it now
            elif gpu:
                # the GPU challenge right behind the SGEMM one, answered side by side: one piece of silicon
                # is never counted twice (a CPU answering for a "GPU" spends what its SGEMM answer would show)
                # sized and stopped as the SGEMM challenge is: the GPU counts the products it finished by then
                g = new_gpu_challenge(node_id, claim.claimed_gpu_tflops or 0.0, beacon, secrets.token_hex(16),
                                      who.rtt_ms, 0.0, self.config, self.config.roll_call_target_s,
                                      gpus=claim.gpu_count, gpu_n=claim.gpu_n, binding_limit=claim.gpu_binding_limit,
                                      work_s=work_s(self.config), stop_after_s=stop_after_s(self.config))
                g.roll_call, g.issued_at = call.id, now_wall
                planned.append((who, g))
        call.challenged = {ch.node_id for _, ch in planned if ch.kind == "sgemm"}
        call.gpu_challenged = {ch.node_id for _, ch in planned if ch.kind == "gpu"}
        call.send_spread_ms = await self._send_all(planned)
        log.info("roll call", extra={"roll_call": call.id, "challenged": len(call.challenged),
                                     "gpu_challenged": len(call.gpu_challenged), "send_spread_ms": call.send_spread_ms})
        self._spawn(self._after(self.config.roll_call_llm_offset_s, self.run_llm(call, beacon)))
        return call

    async def run_llm(self, call: RollCall, beacon: dict[str, Any]) -> None:
        """The reference-model phase: every node that claims tokens/s, at once."""
        desk, now_wall = self.desk, time.time()
        if self.latest is not call:
            return  # a newer roll call began; it has its own llm phase
        planned: list[tuple[Challengee, Challenge]] = []
        for node_id, who in self._targets().items():
            claim = desk.core.atlas.nodes[node_id].profile
            if not claim.claimed_tps:
                continue
            withdrawn = who.make_way() if LLM_ANSWER in who.answers else None
            if withdrawn is None:
                desk._drop_proof(node_id, time.time(), "tps")  # claims tokens/s, did not show them now
                continue
            # asked even where the SGEMM answer missed its deadline: a wrong token is caught all the same
            # (what it shows counts only beside an SGEMM proof of this roll call). Sized and stopped as the
            # SGEMM challenge is: tokens for work_s at the claim, the node commits what it has at stop_after_s.
            ch = new_llm_challenge(node_id, claim.claimed_tps, beacon, secrets.token_hex(16), who.rtt_ms, 0.0,
                                   self.config, work_s(self.config), stop_after_s(self.config),
                                   streams=claim.llm_streams)
            ch.roll_call, ch.issued_at, ch.withdraws = call.id, now_wall, withdrawn
            desk.core.metrics.withdrawn += len(withdrawn)
            planned.append((who, ch))
        call.llm_at = now_wall
        call.llm_challenged = {ch.node_id for _, ch in planned}
        call.llm_send_spread_ms = await self._send_all(planned)

    async def _send_all(self, planned: list[tuple[Challengee, Challenge]]) -> float | None:
        """Sends every planned challenge back to back (all built beforehand, so the sends are all that
        separates the first from the last); the spread in ms on the relay's clock.

        The spread matters beyond fairness: each answer is timed from its own send, so a machine whose
        identities were sent s apart has the deadline plus s to answer them all (at most (deadline + s) /
        target of itself). Sessions of one address go back to back, so a machine behind one address gets its
        challenges within a few sends of each other (docs/protocol.md); a socket that cannot take a frame at
        the moment (closing, or its writes paused) goes after the others, through ASGI."""
        if not planned:
            return None
        planned = sorted(planned, key=lambda p: p[0].host)  # stable: one address's sessions together
        # Encoded before the first send, and where the server lets us (web/sessions/direct_frames.py) framed, with
        # each socket's write: those go first, straight to the sockets, with nothing awaited until the last is
        # written (so none can change state in between, and no sweep sees a challenge not yet sent); the rest
        # through ASGI after them (a socket closing, or paused by flow control). Everything that can fail is
        # done before the first challenge is registered: a roll call sends all of them or none.
        direct: list[tuple[Challengee, Challenge, Callable[[bytes], object], bytes]] = []
        through_asgi: list[tuple[Challengee, Challenge, str]] = []
        for who, ch in planned:
            text = json.dumps(ch.message(self.config))
            write = who.frame_writer() if who.frame_writer is not None else None
            if write is not None:
                direct.append((who, ch, write, text_frame(text)))
            else:
                through_asgi.append((who, ch, text))
        for who, ch, _, _ in direct:
            who.challenges[ch.id] = ch
        clock = time.perf_counter
        with realtime(self.config.roll_call_send_priority):  # not preempted by the machine's other work
            first = clock()
            for _, ch, write, frame in direct:
                ch.sent_at = clock()  # each answer is timed from its own send
                write(frame)
        # each ASGI send a task of its own: a client that stopped reading (its socket paused) waits alone, and
        # holds up neither the other sends nor the roll call's next steps; its answer is timed from here all the same
        for who, ch, text in through_asgi:
            ch.sent_at = clock()
            who.challenges[ch.id] = ch
            self._spawn(who.send(text))
        if through_asgi:
            await asyncio.sleep(0)  # the sends run now, in this order, as far as each socket lets them
        spread_ms = (clock() - first) * 1000
        self.desk.core.metrics.roll_call_sends.update({"direct": len(direct), "asgi": len(through_asgi)})
        return spread_ms

    def on_result(self, ch: Challenge, passed: bool, code: str, tokens_checked: bool) -> str:
        """Records a roll-call answer as the node's proof (the desk has recorded its trust already); the
        verdict the node is told: "counted", "after_deadline", "token_not_checked" (the relay's own reactor
        failed) or the failure code."""
        call = next((c for c in reversed(self.calls) if c.id == ch.roll_call), None)
        if call is None:
            return "roll_call_expired"
        desk, node_id, config = self.desk, ch.node_id, self.config
        in_time = ch.commit_s is not None and on_time(ch.commit_s, config)
        if passed and not in_time:
            code = "after_deadline"  # right, but too late to count at this roll call (no failure)
        if ch.kind == "sgemm":
            if passed and in_time and ch.commit_s is not None:
                call.answered.add(node_id)
                # tokens/s proven at the previous roll call stand until this one's llm phase; GPUs are this
                # roll call's (a GPU answer judged already is on the roll call)
                desk.proofs[node_id] = self._sgemm_proof(call, ch, desk.proofs.get(node_id))
            else:
                call.failed[node_id] = code
                desk.proofs.pop(node_id, None)
                self._no_sgemm_proof(call, node_id)
        elif ch.kind == "gpu":
            # sent with the SGEMM challenge and answered beside it; judged before or after it (each answer has
            # its own round trips): what it shows waits on the roll call for the SGEMM proof, and counts only
            # beside it. "counted" here means that; an SGEMM answer that fails later takes it back.
            if passed and in_time and node_id in call.failed:
                code = "no_sgemm_proof_this_roll_call"  # the SGEMM answer of this roll call did not count
            if passed and code == "passed":
                call.gpu_answered.add(node_id)
                self._gpu_shown(call, node_id, ch)
            else:
                call.gpu_failed[node_id] = code
                self._gpu_shown(call, node_id, None)
        elif ch.kind == "llm":
            proof = desk.proofs.get(node_id)
            if proof is not None and proof.roll_call != call.id:
                proof = None  # no SGEMM proof of this roll call: nothing to attach tokens/s to
            if passed and in_time and proof is None:
                code = "no_sgemm_proof_this_roll_call"
            if passed and code == "passed" and tokens_checked and ch.commit_s is not None:
                call.llm_answered.add(node_id)
                if proof is not None:
                    proof.tps = shown(len(ch.tokens or []), ch.commit_s, config)
            else:
                if passed and code == "passed" and not tokens_checked:
                    code = "token_not_checked"
                call.llm_failed[node_id] = code
                if proof is not None:
                    proof.tps = 0.0
        desk.refresh(node_id, time.time())
        return "counted" if passed and code == "passed" else code

    def after_deadline_rate(self) -> dict[str, Any] | None:
        """The honest false-reject rate this relay saw (GET /v1/checks): SGEMM answers of this run's roll
        calls whose rows were right but that arrived after the deadline, over all answers whose rows were
        right (None before any)."""
        late = sum(1 for c in self.calls for code in c.failed.values() if code == "after_deadline")
        right = late + sum(len(c.answered) for c in self.calls)
        if right == 0:
            return None
        return {"rate": late / right, "after_deadline": late, "right_answers": right, "roll_calls": len(self.calls)}

    def _freeze(self, call: RollCall) -> None:
        """The totals a roll call proved, kept when the next one begins (and stored)."""
        call.proven = self.totals(call)
        body = json.dumps(call.to_json()).encode()
        # the final totals, signed, for any libp2p peer (docs/mesh.md) and as this region's for the others
        self.desk.outbox.publish_scoreboard(call.to_json())
        self._spawn(self.desk.core.store.write(Store.put_history_op(STORE_KEY, call.at, "roll_call", body,
                                                                     self.config.roll_calls_kept)))

    def last_proven(self) -> dict[str, Any] | None:
        """The final totals of this relay's latest finished roll call (None before one finished)."""
        return next((dict(c.proven) for c in reversed(self.calls) if c.proven), None)

    def totals(self, call: RollCall) -> dict[str, float]:
        atlas = self.desk.core.atlas
        rows = [atlas.nodes[n].verified for n, p in self.desk.proofs.items() if p.roll_call == call.id
                and n in atlas.nodes]
        return {"nodes": sum(1 for r in rows if r.cpu_mgflops), "cpu_gflops": sum(r.cpu_mgflops for r in rows) / 1000,
                "tokens_per_sec": sum(r.mtokens_per_sec for r in rows) / 1000, "gpus": sum(r.gpus for r in rows),
                "gpu_tflops": sum(r.gpu_utflops for r in rows) / MICRO}

    def page(self, limit: int, before: float | None) -> list[dict[str, Any]]:
        """Roll calls, latest first (this run's with live totals for the latest, then earlier runs')."""
        out = []
        for call in reversed(self.calls):
            body = call.to_json()
            if call is self.latest:
                body["proven"] = self.totals(call)
            out.append(body)
        out += self.earlier
        if before is not None:
            out = [c for c in out if c["at"] < before]
        return out[:limit]
