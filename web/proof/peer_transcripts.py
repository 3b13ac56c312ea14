"""Peer relays' challenge transcripts, as they arrive over the cluster (the rules are web/proof/transcripts.py):
believed
only from a named peer, taken once and only while fresh, their work re-checked at the audit fraction, then handed
to the desk to record as if this relay had run the challenge. What it needs from the rest of the relay is
narrow (ResultSink): whether a node is known, and a way to record a result."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from typing import Any, Protocol

from common.reactor import CapsuleError
from web.config import RelayConfig
from web.proof.challenges import Challenge, checked_stream, implausible
from web.proof.transcripts import (
    PeerAudit,
    TranscriptError,
    TranscriptLedger,
    audit_drawn,
    check_transcript,
    structure,
)
from web.replay_marks import Marks, NoMarks

log = logging.getLogger("ce.challenges")


class ResultSink(Protocol):
    """Where a peer's checked transcript goes (web/proof/challenge_desk.py ChallengeDesk)."""

    def knows(self, node_id: str) -> bool: ...

    async def record_remote(self, origin: str, ch: Challenge, transcript: dict[str, Any]) -> None: ...


# The reference model's token at an index after the tokens before it (seed, tokens, index): the relay's reactor.
TokenCheck = Callable[[int, list[int], int], int]


class PeerTranscripts:
    def __init__(self, relay_id: str, config: RelayConfig, sink: ResultSink, secret: bytes, rng: random.Random,
                 audited: Callable[[], None], token_check: TokenCheck | None = None,
                 marks: Marks | None = None) -> None:
        self.relay_id = relay_id
        self.config = config
        self.sink = sink
        self.secret = secret  # the audit draw's key: a peer cannot tell which of its transcripts are re-checked
        self.rng = rng
        self.audited = audited  # counts a re-checked transcript (the relay's metrics)
        self.token_check = token_check  # re-checks a reference-model answer's checked token (None: not here)
        self.audit = PeerAudit(config.transcript_audit_fraction)
        # what was taken survives a restart (marks: the relay's store): a replay after it changes nothing either
        self.ledger = TranscriptLedger(config.transcript_max_age_s, config.clock_skew_s, marks=marks or NoMarks())
        self.ledger.load(time.time())

    async def apply(self, transcript: dict[str, Any]) -> None:
        """A peer relay's challenge transcript (signature checked by the caller). Raises TranscriptError."""
        origin = str(transcript["relay"])
        if origin == self.relay_id:
            return
        if origin not in self.config.cluster_peers:
            raise TranscriptError("not_a_peer", f"{origin} is not a relay of this cluster (--cluster-peer)")
        c = transcript["challenge"]
        at, nonce = transcript.get("at"), c.get("nonce")
        if type(at) is not int or not isinstance(nonce, str):
            raise TranscriptError("invalid_transcript", "at: an integer (unix s); challenge.nonce: a string")
        self.ledger.take(origin, nonce, at, time.time())  # once, while fresh: a replay changes nothing
        try:
            ch = await self._checked(origin, transcript)
            if not self.sink.knows(ch.node_id):
                raise TranscriptError("unknown_node", "no profile of this node here yet")
        except TranscriptError:
            self.ledger.release(origin, nonce)  # refused for what it says: its peer may still send the right one
            raise
        await self.sink.record_remote(origin, ch, transcript)

    async def _checked(self, origin: str, transcript: dict[str, Any]) -> Challenge:
        """The transcript's challenge, its work re-checked when the audit draws it (always once its peer was
        caught), its form and physics always."""
        passed = bool(transcript["challenge"].get("passed"))
        try:
            if self.audit.due(self.secret, origin, transcript):
                ch = await asyncio.to_thread(check_transcript, transcript, self.rng, self.config)
                # a token check costs ~10% of the node's decode: at its own (lower) share, or once caught
                if ch.kind == "llm" and passed and self.token_check is not None and (
                        origin in self.audit.caught
                        or audit_drawn(self.secret, transcript, self.config.transcript_llm_audit_fraction)):
                    await self._check_token(ch)
                self.audited()
            else:  # believed on the peer's signature (checked by the caller), once its form holds
                ch = structure(transcript, self.config)
            if passed and implausible(ch) is not None:
                raise TranscriptError("wrong_transcript", f"passed an answer beyond physics: {implausible(ch)}")
        except TranscriptError as exc:
            # any signed transcript refused for what it says (not for whom it names) costs its relay the
            # benefit of the doubt: from now on every one of its transcripts is re-checked
            if origin not in self.audit.caught:
                self.audit.failed(origin, f"{exc.code}: {exc.detail}")
                log.error("a peer relay's transcript was refused: all of its transcripts are re-checked from now "
                          "on", extra={"peer": origin, "error": f"{exc.code}: {exc.detail}"[:200]})
            raise
        return ch

    async def _check_token(self, ch: Challenge) -> None:
        """The token the peer checked, checked again here (the same index: a peer that passed a guessed token
        is caught with the chance it drew it, which is the chance the node had of passing)."""
        if ch.tokens is None or ch.checked_token is None or self.token_check is None:
            raise TranscriptError("wrong_transcript", "a passed reference-model answer without its tokens")
        try:
            seed, stream, at = checked_stream(ch)
            expected = await asyncio.to_thread(self.token_check, seed, stream, at)
        except CapsuleError as exc:  # this relay's own reactor failed: the peer's word stands
            log.error("could not re-check a peer's token", extra={"error": str(exc)})
            return
        if expected != ch.tokens[ch.checked_token]:
            raise TranscriptError("wrong_transcript", f"token {ch.checked_token} differs from the reference model's")
