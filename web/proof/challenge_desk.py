"""The relay's side of challenges, over the pure parts (web/proof/challenges.py, web/proof/trust.py,
web/proof/rollcall.py):
which sessions are challenged when, the answers of WS /v1/live, trust state, roll calls, and the history
they leave in the store.

Two kinds of moments. Solo challenges verify a newcomer (the first ~5 s after its hello, then every ~60 s
until verified; sessions of one source address at the same moment); they show on the node's page and add
nothing to /stats. Roll calls challenge every live session at once (web/proof/rollcall.py); the verified
scoreboard is what the latest one proved.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import secrets
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from capsule.challenge import LLM_ANSWER, ChallengeError
from common.reactor import CapsuleError, Reactor
from web.cluster.handoff import adopt
from web.map.stats import MICRO, Contribution
from web.parts import Core, Outbox
from web.proof.challenges import (
    Challenge,
    check_opened,
    checked_stream,
    implausible,
    new_challenge,
    new_llm_challenge,
    next_gap_s,
    on_commit,
    parse_opening,
    token_mismatch,
)
from web.proof.peer_transcripts import PeerTranscripts
from web.proof.roll_caller import STORE_KEY, RollCaller
from web.proof.rollcall import Proof, counted, next_roll_call
from web.proof.transcripts import transcript_body
from web.proof.trust import Trust
from web.replay_marks import StoreMarks
from web.sessions.live import LiveError
from web.store import Store

log = logging.getLogger("ce.challenges")


@dataclass(eq=False)
class Challengee:
    """One session that said hello: how to reach it and its challenges in flight (by id: a roll call sends a
    node that answers "gpu" its SGEMM and GPU challenges at the same moment, answered side by side)."""

    session_id: str
    host: str
    send: Any                                  # async (message: dict) -> None
    # the socket's write where it can take a frame built beforehand now, else None (then `send`): a roll
    # call's fast path (web/sessions/direct_frames.py); None where the server offers none
    frame_writer: Callable[[], Callable[[bytes], object] | None] | None = None
    node_id: str | None = None
    rtt_ms: float | None = None
    challenges: dict[str, Challenge] = field(default_factory=dict)
    active: bool = True                        # False: opted out of new challenges (hello without answers)
    answers: frozenset[str] = frozenset({"sgemm"})  # the kinds this client answers
    done_ids: set[str] = field(default_factory=set)  # ids answered on this session: a replay is named so
    withdrawn_ids: set[str] = field(default_factory=set)  # solo challenges a roll call withdrew (not judged)
    # the client stops a solo challenge a roll call withdraws (hello "withdrawable": the server node, and a join
    # page that is cross-origin isolated, whose workers read a SharedArrayBuffer flag); an older client does not
    # know the field
    withdrawable: bool = False

    @property
    def answering(self) -> bool:
        """Whether the node still owes an answer (a commitment or an opening). One whose answer arrived and that
        the relay is still checking (`checking`) is free: a relay slow to check (a flood, a busy machine) must
        not make an honest node miss the next roll call as "busy" (tests/test_flood.py, 2026-12-06)."""
        return any(not ch.checking for ch in self.challenges.values())

    def make_way(self) -> list[str] | None:
        """Makes way for a roll call: withdraws the solo challenges this node is still computing (no commitment
        yet), unjudged, and returns their ids (the roll call's challenge names them, so the node stops that work
        and answers the roll call with its whole machine); None while it owes an answer to a roll call (busy:
        not asked now). A solo challenge whose commitment arrived stays: its opening comes from memory.
        Without this a newcomer, or a node unverified under load, whose solo answer (seconds on a busy machine)
        overlapped the roll call's moment was not asked and counted 0 (2 of 50 busy roll calls, 2026-12-07).
        A client that cannot stop its work (not `withdrawable`) owing anything is busy, as before: asked now, it
        would compute the roll call's answer behind the solo one (an older join page's workers even mixed the
        two answers)."""
        owed = [ch for ch in self.challenges.values() if not ch.checking]
        if any(ch.roll_call is not None for ch in owed) or (owed and not self.withdrawable):
            return None
        ids = [ch.id for ch in owed if ch.roots is None and ch.tokens is None]
        for cid in ids:
            del self.challenges[cid]
        if ids:
            self.withdrawn_ids = {*list(self.withdrawn_ids)[-15:], *ids}
        return ids

    def in_flight(self, cid: object) -> Challenge | None:
        """The challenge in flight with this id (a node's message names it; anything else: None)."""
        return self.challenges.get(cid) if isinstance(cid, str) else None


class ChallengeDesk:
    def __init__(self, core: Core, outbox: Outbox) -> None:
        self.core = core      # the relay's config, key, store, atlas, beacon rounds and metrics
        self.outbox = outbox  # where transcripts and roll-call totals go beyond this relay
        self.config = core.config
        self.sessions: dict[str, Challengee] = {}
        self.next_at: dict[str, float] = {}       # host -> unix time of its next challenge round
        self.rounds: dict[str, int] = defaultdict(int)
        self._per_host: dict[str, int] = defaultdict(int)  # sessions that said hello, per host
        self.trust: dict[str, Trust] = {}
        self._statuses: dict[str, str] = {}    # the status each node was last shown with
        # the rows to open and the token to check, drawn from the OS's entropy: every open message reveals draws,
        # and a Mersenne Twister's state can be rebuilt from enough of them (then the next rows are known)
        self.rng: random.Random = random.SystemRandom()
        self._background: set[asyncio.Task[None]] = set()  # referenced until done (asyncio keeps weak refs)
        self._llm_checker: Reactor | None = None
        self._llm_lock = threading.Lock()  # one recomputation at a time on the relay's reactor
        self.secret = secrets.token_bytes(32)  # solo challenge moments, transcript audits: unpredictable
        self.peers = PeerTranscripts(core.relay_id, self.config, self, self.secret, self.rng, self._audited,
                                     self._llm_expected, StoreMarks(core.store))
        self.proofs: dict[str, Proof] = {}     # node id -> what it proved at the latest roll call
        self.roll = RollCaller(self)
        self._told: dict[str, str] = {}        # the status each node was last told of on its session

    def _audited(self) -> None:
        self.core.metrics.transcripts_audited += 1

    # --- state ----------------------------------------------------------------------------------

    def load(self, states: list[tuple[str, dict[str, Any]]],
             results: list[tuple[str, float, dict[str, Any]]]) -> list[str]:
        """At start: each node's stored trust state, then the stored results (oldest first) of nodes that have
        none (rows written before the relay kept one); the nodes replayed so (their state is to be stored)."""
        for node_id, state in states:
            self.trust[node_id] = Trust.from_state(state)
        replayed: set[str] = set()
        for node_id, at, result in results:
            if node_id == STORE_KEY:
                continue
            replayed.add(node_id)
            self.trust.setdefault(node_id, Trust(decayed_at=at)).record(
                bool(result.get("passed")), str(result.get("code")), result.get("observed_gflops"), at, self.config,
                result.get("observed_tokens_per_sec"), bool(result.get("tokens_checked")),
                result.get("observed_tflops"), bool(result.get("roll_call")))
        for node_id in self.trust:
            self.refresh(node_id, time.time())
        return sorted(replayed)

    def trust_state_ops(self, node_ids: list[str], now: float) -> list[Any]:
        return [Store.put_trust_op(n, now, json.dumps(self.trust[n].to_state()).encode()) for n in node_ids
                if n in self.trust]

    def trust_json(self, node_id: str, now: float) -> dict[str, Any]:
        entry = self.core.atlas.nodes.get(node_id)
        claimed, tps, gpu = self._claims(node_id)
        body = self.trust.get(node_id, Trust(decayed_at=now)).to_json(claimed, now, self.config, tps, gpu)
        proof = self.proofs.get(node_id)
        verified = entry.verified if entry is not None else Contribution()
        body["counted"] = {"cpu_gflops": verified.cpu_mgflops / 1000,
                           "tokens_per_sec": verified.mtokens_per_sec / 1000, "gpus": verified.gpus,
                           "gpu_tflops": verified.gpu_utflops / MICRO,
                           "roll_call": proof.roll_call if proof else None,
                           "method": "what the latest roll call proved (every live session challenged at one "
                                     "moment), capped at the claim; nothing while not answering; gpu_tflops is "
                                     "fp32 (the GPU challenge's WGSL matmul)"}
        beacon = self.core.beacons.latest
        body["next_roll_call"] = None if beacon is None else next_roll_call(beacon, now, self.config)
        body["proven"] = None if proof is None else {
            "roll_call": proof.roll_call, "gflops_fp32": round(proof.gflops, 3), "instances": proof.instances,
            "tokens_per_sec": round(proof.tps, 3), "gpu_tflops_fp32": round(proof.gpu_tflops, 6),
            "gpus": proof.gpus}
        return body

    def _claims(self, node_id: str) -> tuple[float | None, float | None, float | None]:
        """The claims a node is judged against: GFLOP/s, tokens/s, fp32 GPU TFLOP/s."""
        entry = self.core.atlas.nodes.get(node_id)
        if entry is None:
            return None, None, None
        return entry.profile.claimed_gflops, entry.profile.claimed_tps, entry.profile.claimed_gpu_tflops

    def status(self, node_id: str, now: float) -> str:
        trust = self.trust.get(node_id)
        if node_id not in self.core.atlas.nodes or trust is None:
            return "unverified"
        claimed, tps, gpu = self._claims(node_id)
        return trust.judge(claimed, now, self.config, tps, gpu)[0]

    def refresh(self, node_id: str, now: float) -> None:
        """Recomputes what the node adds to the verified scoreboard (after a result or a new profile)."""
        entry = self.core.atlas.nodes.get(node_id)
        trust = self.trust.get(node_id)
        if entry is None:
            return
        status = self.status(node_id, now)
        if self._statuses.get(node_id) != status:  # /atlas shows each node's status: its ETag must change
            self._statuses[node_id] = status
            self.core.atlas.version += 1
        proof = self.proofs.get(node_id)
        if trust is None or proof is None or status == "flagged":
            self.core.atlas.set_verified(node_id, Contribution())
            return
        profile = entry.profile
        self.core.atlas.set_verified(node_id, counted(proof, profile.claimed_gflops, profile.contribution.cores,
                                                       profile.claimed_tps, self.config, profile.claimed_gpu_tflops,
                                                       profile.gpu_count))

    def _drop_proof(self, node_id: str | None, now: float, what: str = "all") -> None:
        """The node stops counting (all of it, only tokens/s, or only its GPUs) until the next roll call
        proves it again."""
        if node_id is None or node_id not in self.proofs:
            return
        if what == "tps":
            self.proofs[node_id].tps = 0.0
        elif what == "gpu":
            self.proofs[node_id].gpu_tflops, self.proofs[node_id].gpus = 0.0, 0
        else:
            del self.proofs[node_id]
        self.refresh(node_id, now)

    # --- sessions ---------------------------------------------------------------------------------

    def hello(self, session_id: str, host: str, send: Any, answers: frozenset[str],
              frame_writer: Callable[[], Callable[[bytes], object] | None] | None = None,
              withdrawable: bool = False) -> Challengee:
        who = self.sessions.get(session_id)
        if who is None:
            who = Challengee(session_id, host, send, frame_writer=frame_writer)
            self._per_host[host] += 1
        who.active = "sgemm" in answers
        who.withdrawable = withdrawable
        # opting out (a hidden tab), or dropping the reference model, stops what depended on it at once
        if not who.active:
            self._drop_proof(who.node_id, time.time())
        else:
            if LLM_ANSWER in who.answers and LLM_ANSWER not in answers:
                self._drop_proof(who.node_id, time.time(), "tps")
            if "gpu" in who.answers and "gpu" not in answers:
                self._drop_proof(who.node_id, time.time(), "gpu")
        who.answers = answers
        self.sessions[session_id] = who
        self.next_at.setdefault(host, time.time() + self.config.challenge_first_after_s)
        return who

    def bye(self, session_id: str) -> None:
        who = self.sessions.pop(session_id, None)
        if who is None:
            return
        for ch in list(who.challenges.values()):
            # leaving with a challenge in flight is a missed answer, not an escape
            task = asyncio.get_running_loop().create_task(
                self._finish(who, ch, False, "late", "the session closed before the answer", notify=False))
            self._background.add(task)
            task.add_done_callback(self._background.discard)
        if not any(w.node_id == who.node_id and w.active for w in self.sessions.values()):
            self._drop_proof(who.node_id, time.time())  # counted only while live and answering
        self._per_host[who.host] -= 1
        if self._per_host[who.host] <= 0:  # a host's schedule ends with its last session
            for table in (self._per_host, self.next_at, self.rounds):
                table.pop(who.host, None)

    async def tick(self) -> None:
        """Once a second: expire answers that are overdue, and start the rounds that are due."""
        now_wall, now, config = time.time(), time.perf_counter(), self.config
        for who in list(self.sessions.values()):
            for ch in list(who.challenges.values()):
                if ch.checking:
                    continue  # its answer arrived in time; the relay is recomputing it
                if (ch.roots is None and ch.tokens is None
                        and now - ch.sent_at > config.challenge_commit_timeout_s):
                    await self._finish(who, ch, False, "late",
                                       f"no commitment within {config.challenge_commit_timeout_s:g} s")
                elif ch.open_sent_at is not None and now - ch.open_sent_at > config.challenge_open_timeout_s:
                    await self._finish(who, ch, False, "late",
                                       f"no opening within {config.challenge_open_timeout_s:g} s")
        by_host: dict[str, list[Challengee]] = defaultdict(list)
        for who in self.sessions.values():
            # solo challenges verify newcomers; once verified, roll calls keep a node's trust fresh
            if who.node_id is not None and who.active and self.status(who.node_id, now_wall) != "verified":
                by_host[who.host].append(who)
        for host, group in by_host.items():
            if self.next_at.get(host, now_wall) <= now_wall and not any(w.challenges for w in group):
                await self._challenge_host(host, group, now_wall)

    async def _challenge_host(self, host: str, group: list[Challengee], now_wall: float) -> None:
        beacon = self.core.beacons.latest
        if beacon is None:
            return
        first = min(w.node_id for w in group if w.node_id)
        self.next_at[host] = now_wall + next_gap_s(self.secret, beacon["value"], first, self.rounds[host], self.config)
        self.rounds[host] += 1
        llm_round = self.rounds[host] % self.config.challenge_llm_every == 0 and self.config.reactor_wasm.exists()
        for who in group:
            entry = self.core.atlas.nodes.get(who.node_id or "")
            claim = entry.profile if entry else None
            if claim is None or claim.claimed_gflops is None:
                continue
            if llm_round and LLM_ANSWER in who.answers and claim.claimed_tps:
                ch = new_llm_challenge(who.node_id or "", claim.claimed_tps, beacon, secrets.token_hex(16),
                                       who.rtt_ms, time.perf_counter(), self.config, streams=claim.llm_streams)
            else:
                ch = new_challenge(who.node_id or "", claim.claimed_gflops, claim.instances, claim.sgemm_n, beacon,
                                   secrets.token_hex(16), who.rtt_ms, time.perf_counter(), self.config)
            ch.issued_at = now_wall
            who.challenges[ch.id] = ch
            await who.send(ch.message(self.config))

    # --- answers ----------------------------------------------------------------------------------

    def _current(self, who: Challengee, message: dict[str, Any]) -> Challenge:
        cid = message.get("id")
        ch = who.in_flight(cid)
        if ch is not None:
            return ch
        if isinstance(cid, str) and cid in who.done_ids:
            raise ChallengeError("replayed", "this challenge was already answered")
        if isinstance(cid, str) and cid in who.withdrawn_ids:
            who.withdrawn_ids.discard(cid)  # named once: a second answer to it is unknown
            raise ChallengeError("withdrawn", "a roll call withdrew this challenge: not judged, counts neither way")
        raise ChallengeError("unknown_challenge", "no challenge with this id is in flight on this session")

    async def _answered(self, who: Challengee, message: dict[str, Any]) -> Challenge | None:
        """The challenge in flight that a commit or an opening names; None when it names none (recorded as a
        failure of the session's node, web/proof/challenges.py codes `unknown_challenge` or `replayed`)."""
        try:
            return self._current(who, message)
        except ChallengeError as exc:
            if exc.code == "withdrawn":  # the relay's own doing: told, recorded nowhere
                await who.send({"type": "withdrawn", "id": message.get("id"), "detail": exc.detail})
                return None
            await self._fail(who, None, exc)
            return None

    async def on_commit(self, who: Challengee, message: dict[str, Any], arrived: float | None = None,
                        lag_s: float = 0.0) -> None:
        """`arrived`: when the frame was received (perf_counter, stamped before parsing; now if None); `lag_s`:
        the relay's own event-loop stall since the challenge was sent (web/sessions/live_endpoint.py relay_lag)."""
        ch = await self._answered(who, message)
        if ch is None:
            return
        try:
            now = time.perf_counter() if arrived is None else arrived
            opening = on_commit(ch, message, now, self.rng, self.config, lag_s)
            if opening is not None:
                await who.send(opening)
                return
            # every answer: one token, drawn by on_commit after the tokens arrived (web/proof/llm_checks.py)
            ch.checking = True
            j = ch.checked_token if ch.checked_token is not None else 0
            seed, stream, at = checked_stream(ch)
            expected = await asyncio.to_thread(self._llm_expected, seed, stream, at)
            if (why := token_mismatch(ch, expected)) is not None:
                raise ChallengeError("wrong_tokens", why)
        except ChallengeError as exc:
            await self._fail(who, ch, exc)
            return
        except CapsuleError as exc:  # the relay's own reactor failed: not the node's fault, but nothing checked
            log.error("llm check failed", extra={"error": str(exc)})
            await self._finish(who, ch, True, "passed", "the relay could not check a token: not counted")
            return
        await self._finish(who, ch, True, "passed", f"token {j} of {len(ch.tokens or [])} checked and equal",
                           tokens_checked=True)

    async def apply_transcript(self, transcript: dict[str, Any]) -> None:
        """A peer relay's challenge transcript (signature checked by the caller): believed only from a named
        peer, its work re-checked (web/proof/peer_transcripts.py), then recorded as if this relay had run it, so every
        relay of the cluster keeps the same trust and roll-call proofs. Raises TranscriptError."""
        await self.peers.apply(transcript)

    def knows(self, node_id: str) -> bool:
        return node_id in self.core.atlas.nodes

    async def record_remote(self, origin: str, ch: Challenge, transcript: dict[str, Any]) -> None:
        """A peer's checked transcript, recorded as this relay records its own results."""
        c = transcript["challenge"]
        passed, code = bool(c.get("passed")), str(c.get("code"))
        now = min(float(transcript["at"]), time.time())
        trust = self.trust.setdefault(ch.node_id, Trust(decayed_at=now))
        trust.record(passed, code, ch.observed_gflops if passed else None, now, self.config,
                     ch.observed_tps if passed else None, bool(c.get("tokens_checked")),
                     ch.observed_tflops if passed else None, bool(ch.roll_call))
        if ch.roll_call:
            self.roll.on_remote_result(ch, passed, c.get("verdict"))
        self.refresh(ch.node_id, time.time())
        await self._store(ch.node_id, now, {**ch.record(), "passed": passed, "code": code, "relay": origin,
                                            "tokens_checked": bool(c.get("tokens_checked"))})

    async def adopt_trust(self, node_id: str, state: dict[str, Any]) -> None:
        """The trust another region held for a node that came here (web/cluster/handoff.py: a peer's signed answer),
        kept as this relay's own, stored, and the node's standing recomputed."""
        now = time.time()
        self.trust[node_id] = adopt(self.trust.get(node_id), state, self.config.trust_observed_kept)
        self.refresh(node_id, now)
        await self.core.store.write(Store.put_trust_op(node_id, now,
                                                        json.dumps(self.trust[node_id].to_state()).encode()))

    def moved_away(self, node_id: str) -> None:
        """The node's home is another region now: it stops counting here (web/cluster/handoff.py)."""
        self._drop_proof(node_id, time.time())

    def _llm_expected(self, seed: int, tokens: list[int], j: int) -> int:
        """The reference model's token j of a challenge after the node's tokens before it, by the capsule's own
        reactor (a worker thread; the model is made once and kept)."""
        with self._llm_lock:
            if self._llm_checker is None:
                self._llm_checker = Reactor(self.config.reactor_wasm)
            return self._llm_checker.llm_expected(seed, tokens, j)

    async def on_opening(self, who: Challengee, message: dict[str, Any], arrived: float | None = None,
                         lag_s: float = 0.0) -> None:
        ch = await self._answered(who, message)
        if ch is None:
            return
        try:
            now = time.perf_counter() if arrived is None else arrived
            opened = parse_opening(ch, message, now, self.config, lag_s)
            ch.opened_items = message.get("rows")
            ch.checking = True
            # the recomputation (numpy, ~1 ms) runs off the event loop all the same
            worst = await asyncio.to_thread(check_opened, ch, opened, self.rng, self.config)
        except ChallengeError as exc:
            await self._fail(who, ch, exc)
            return
        await self._finish(who, ch, True, "passed", f"rows match (worst error ratio {worst:.3g} of the fp32 bound)")

    async def _fail(self, who: Challengee, ch: Challenge | None, exc: ChallengeError) -> None:
        """A wrong answer to `ch` ends it; a reply out of turn (a second commitment, an opening before the
        commitment) or naming no challenge in flight is only recorded."""
        if ch is None or exc.code in ("unknown_challenge", "replayed"):
            await self._record_failure_without_challenge(who, exc)
            return
        await self._finish(who, ch, False, exc.code, exc.detail)

    async def record_failure(self, node_id: str, code: str, detail: str) -> None:
        """A failure found outside a challenge (a dispatched task's output that lost its quorum: web/jobs/), in
        the node's trust and history."""
        now = time.time()
        self.trust.setdefault(node_id, Trust(decayed_at=now)).record(False, code, None, now, self.config)
        self.refresh(node_id, now)
        await self._store(node_id, now, {"passed": False, "code": code, "detail": detail, "kind": "job"})

    async def _record_failure_without_challenge(self, who: Challengee, exc: ChallengeError) -> None:
        """A reply naming no challenge in flight still counts against the node; it is also a bad message of
        the session (LiveError), so a client repeating it is closed after MAX_ERRORS instead of writing
        history rows without end."""
        now = time.time()
        if who.node_id is not None:
            self.trust.setdefault(who.node_id, Trust(decayed_at=now)).record(False, exc.code, None, now, self.config)
            self.refresh(who.node_id, now)
            await self._store(who.node_id, now, {"passed": False, "code": exc.code, "detail": exc.detail})
        raise LiveError(exc.code, exc.detail)

    async def _finish(self, who: Challengee, ch: Challenge, passed: bool, code: str, detail: str,
                      notify: bool = True, tokens_checked: bool = False) -> None:
        """Ends `ch` (the challenge the answer or timeout was for, whatever else is in flight on the session);
        once only: a challenge already ended (its timeout and its answer racing) is not judged again."""
        if who.challenges.pop(ch.id, None) is None:
            return
        who.done_ids = {*list(who.done_ids)[-15:], ch.id}
        now = time.time()
        beyond = implausible(ch) if passed else None
        if beyond is not None:  # right rows in less time than physics allows: not computed as answered
            passed, code, detail = False, "implausible_observation", beyond
        observed = ch.observed_gflops if passed else None
        observed_tps = ch.observed_tps if passed else None
        trust = self.trust.setdefault(ch.node_id, Trust(decayed_at=now))
        trust.record(passed, code, observed, now, self.config, observed_tps, tokens_checked,
                     ch.observed_tflops if passed else None, bool(ch.roll_call))
        verdict = self.roll.on_result(ch, passed, code, tokens_checked) if ch.roll_call else None
        self.refresh(ch.node_id, now)
        result = {**ch.record(), "passed": passed, "code": code, "detail": detail, "tokens_checked": tokens_checked}
        if not passed:
            result["observed_gflops"] = result["observed_tokens_per_sec"] = result["observed_tflops"] = None
        log.info("challenge", extra={"node_id": ch.node_id, "kind": ch.kind, "passed": passed, "code": code,
                                     "observed_gflops": result.get("observed_gflops"),
                                     "observed_tokens_per_sec": result.get("observed_tokens_per_sec"),
                                     "observed_tflops": result.get("observed_tflops")})
        await self._store(ch.node_id, now, result)
        if self.outbox.clustered:  # the other relays re-check it and keep the same trust
            self.outbox.publish_transcript(transcript_body(
                self.core.relay_id, ch, ch.beacon_value, passed, code, verdict, tokens_checked, now))
        if notify:
            await who.send({"type": "challenge_result", "id": ch.id, "passed": passed, "code": code, "detail": detail,
                            "observed_gflops": result.get("observed_gflops"),
                            "observed_tokens_per_sec": result.get("observed_tokens_per_sec"),
                            "observed_tflops": result.get("observed_tflops"),
                            "roll_call": ch.roll_call, "verdict": verdict, "kind": ch.kind})
        claimed, claimed_tps, claimed_gpu = self._claims(ch.node_id)
        status = trust.judge(claimed, now, self.config, claimed_tps, claimed_gpu)
        if self._told.get(ch.node_id) != status[0]:  # the node hears each change of its status, with the reason
            self._told[ch.node_id] = status[0]
            await who.send({"type": "trust", "status": status[0], "reason": status[1]})

    async def _store(self, node_id: str, now: float, result: dict[str, Any]) -> None:
        """The result in the node's history and its trust state after it, in one transaction."""
        ops = [Store.put_history_op(node_id, now, "challenge", json.dumps(result).encode(), self.config.history_kept)]
        trust = self.trust.get(node_id)
        if trust is not None:
            ops.append(Store.put_trust_op(node_id, now, json.dumps(trust.to_state()).encode()))
        await self.core.store.write(Store.all_of(*ops))
