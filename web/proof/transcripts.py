"""Challenge transcripts: one trust per node across a relay cluster (issue 20, item 4), as pure functions.

A relay that finishes a challenge signs a Transcript (capsule/model.py): the challenge (kind, order, reps,
the beacon value and nonce the seeds come from), the node's roots and opened rows with their Merkle proofs,
the relay's timing (commit_s, on its own clock) and its verdict. Other relays of the cluster receive it over
NATS and

- believe it only from a relay the operator named as a peer (`--cluster-peer`): the timing is the
  challenging relay's word, and any key can sign; a forged transcript from anyone else changes nothing;
- re-check the work: every opened row against its root (Merkle proof) and `challenge_entries_per_row`
  entries of each row recomputed at columns they draw themselves (check_transcript) — a peer that passed a
  wrong answer is caught, and the transcript is refused. `transcript_audit_fraction` below 1 re-checks a
  secret draw of them (PeerAudit: the rest are believed on the peer's signature; one failed check and the
  peer's transcripts are all re-checked from then on): every relay re-checking every transcript costs each
  relay the whole network's roll calls (BENCHMARKS.md, "Capacity model");
- then record the same result into their own trust and, for a roll call, the same proof.
Reference-model answers carry the token ids, the token the challenging relay checked and whether it did; an
audited one is checked again at that token (web/proof/peer_transcripts.py: the prefill up to it and one pass, on
this relay's reactor), the rest is the peer's word.
"""

from __future__ import annotations

import hashlib
import hmac
import random
from dataclasses import dataclass, field
from typing import Any

from capsule.challenge import LLM_MAX_TOKENS, LLM_VOCAB, ChallengeError, instance_seed
from capsule.cpu_challenge import LEAF_FORMS
from web.config import RelayConfig
from web.proof.challenges import Challenge, check_opened, parse_opening
from web.replay_marks import Marks, NoMarks

MARK_KIND = "transcript"  # its marks in the store (web/replay_marks.py)


class TranscriptError(ValueError):
    """Why a transcript from the cluster was refused (a stable code and the detail)."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail


def transcript_body(relay_id: str, ch: Challenge, beacon_value: str, passed: bool, code: str, verdict: str | None,
                    tokens_checked: bool, at: float) -> dict[str, Any]:
    """The unsigned Transcript of a finished challenge."""
    challenge: dict[str, Any] = {
        "kind": ch.kind, "beacon_round": ch.beacon_round, "beacon_value": beacon_value, "nonce": ch.nonce,
        "instances": len(ch.seeds), "passed": passed, "code": code, "verdict": verdict,
        "commit_s": None if ch.commit_s is None else round(ch.commit_s, 6), "claimed_gflops": ch.claimed_gflops}
    if ch.kind == "llm":
        challenge.update(decode=ch.decode, tokens=ch.tokens, checked_token=ch.checked_token,
                         tokens_checked=tokens_checked, claimed_tokens_per_sec=ch.claimed_tps)
        if ch.stream_tokens is not None:
            challenge["stream_tokens"] = list(ch.stream_tokens)
    else:
        challenge.update(n=ch.n, reps=ch.reps, roots=[r.hex() for r in ch.roots or []],
                         rows=[list(r) for r in ch.rows], opened=ch.opened_items or [])
        if ch.products is not None:
            challenge["products"] = list(ch.products)  # the work the verdict counted (commit_s is its time)
        if ch.kind == "sgemm":
            challenge["leaf"] = ch.leaf  # what the node's leaves hash (absent in older transcripts: "fp32")
    return {"v": 1, "relay": relay_id, "node_id": ch.node_id, "roll_call": ch.roll_call, "at": int(at),
            "challenge": challenge}


def _int(c: dict[str, Any], key: str, low: int, high: int) -> int:
    value = c.get(key)
    if type(value) is not int or not low <= value <= high:
        raise TranscriptError("invalid_transcript", f"challenge.{key}: expected an integer in [{low}, {high}]")
    return value


def rebuild(transcript: dict[str, Any], config: RelayConfig) -> Challenge:
    """The Challenge a transcript describes, seeds derived again from its beacon value and nonce."""
    c = transcript["challenge"]
    kind = c.get("kind")
    if kind not in ("sgemm", "llm", "gpu"):
        raise TranscriptError("invalid_transcript", f"challenge.kind: expected sgemm, llm or gpu, got {kind!r}")
    value, nonce = c.get("beacon_value"), c.get("nonce")
    if not isinstance(value, str) or not isinstance(nonce, str) or len(nonce) > 64:
        raise TranscriptError("invalid_transcript", "challenge.beacon_value and challenge.nonce are strings")
    commit_s = c.get("commit_s")
    if commit_s is not None and (not isinstance(commit_s, int | float) or not 0 < commit_s < 3600):
        raise TranscriptError("invalid_transcript", "challenge.commit_s: seconds in (0, 3600) or null")
    instances = _int(c, "instances", 1, config.challenge_max_instances)
    try:
        seeds = [instance_seed(value, nonce, i) for i in range(instances)]
    except ValueError:
        raise TranscriptError("invalid_transcript", "challenge.beacon_value is not hex") from None
    ch = Challenge(nonce[:16], str(transcript["node_id"]), 0, 0, seeds, _int(c, "beacon_round", 0, 2**53), nonce,
                   float(c.get("claimed_gflops") or 0.0), 0.0, 0.0, kind=kind, roll_call=transcript.get("roll_call"))
    ch.commit_s = float(commit_s) if commit_s is not None else None
    if kind == "llm":
        ch.decode = _int(c, "decode", 1, LLM_MAX_TOKENS)
        tokens = c.get("tokens")
        if tokens is not None:
            if (not isinstance(tokens, list) or not 1 <= len(tokens) <= ch.decode * instances
                    or not all(type(t) is int and 0 <= t < LLM_VOCAB for t in tokens)):
                raise TranscriptError("invalid_transcript",
                                      f"challenge.tokens: 1 to decode x instances ids in [0, {LLM_VOCAB})")
            ch.tokens = list(tokens)
            ch.checked_token = _int(c, "checked_token", 0, len(tokens) - 1)
            lengths = c.get("stream_tokens")  # absent: one stream
            if (lengths is None and instances > 1) or (lengths is not None and (
                    not isinstance(lengths, list) or len(lengths) != instances
                    or not all(type(n) is int and 0 <= n <= ch.decode for n in lengths)
                    or sum(lengths) != len(tokens))):
                raise TranscriptError("invalid_transcript", f"challenge.stream_tokens: {instances} counts in "
                                                            "[0, decode] summing to the tokens")
            ch.stream_tokens = None if lengths is None else list(lengths)
        elif c.get("passed"):
            raise TranscriptError("invalid_transcript", "a passed reference-model answer names its tokens")
        return ch
    ch.n, ch.reps = _int(c, "n", 1, 4096), _int(c, "reps", 1, 1 << 20)
    products = c.get("products")  # absent: every product (older transcripts, and older nodes' GPU answers)
    if products is not None and (not isinstance(products, list) or len(products) != instances or not all(
            type(k) is int and 1 <= k <= ch.reps for k in products)):
        raise TranscriptError("invalid_transcript", f"challenge.products: {instances} integers in [1, reps]")
    ch.products = list(products) if products is not None else [ch.reps] * instances
    if kind == "sgemm":
        leaf = c.get("leaf", "fp32")
        if leaf not in LEAF_FORMS:
            raise TranscriptError("invalid_transcript", f"challenge.leaf: expected one of {', '.join(LEAF_FORMS)}")
        ch.leaf = str(leaf)
    return ch


def check_transcript(transcript: dict[str, Any], rng: random.Random, config: RelayConfig) -> Challenge:
    """Re-checks a passed SGEMM or GPU transcript's work (proofs and freshly drawn entries: a GPU challenge is
    an sgemm challenge of another order and size, checked alike); the rebuilt Challenge.
    Raises TranscriptError (a failed re-check is `wrong_transcript`)."""
    ch = structure(transcript, config)
    c = transcript["challenge"]
    if ch.kind not in ("sgemm", "gpu") or not c.get("passed"):
        return ch  # a failure or a reference-model answer: nothing to recompute here
    ch.open_sent_at = 0.0
    try:
        opened = parse_opening(ch, {"rows": c.get("opened")}, 0.0, config)
        worst = check_opened(ch, opened, rng, config)
    except ChallengeError as exc:
        raise TranscriptError("wrong_transcript", f"{exc.code}: {exc.detail}") from None
    if not worst < 1.0:
        raise TranscriptError("wrong_transcript", f"entries off by {worst:.3g}x the fp32 bound")
    return ch


def structure(transcript: dict[str, Any], config: RelayConfig) -> Challenge:
    """The rebuilt Challenge with a passed SGEMM or GPU answer's roots and rows checked for form (cheap:
    what even a transcript believed without a re-check must satisfy). Raises TranscriptError."""
    ch = rebuild(transcript, config)
    c = transcript["challenge"]
    if ch.kind not in ("sgemm", "gpu") or not c.get("passed"):
        return ch
    roots, rows = c.get("roots"), c.get("rows")
    if (not isinstance(roots, list) or len(roots) != len(ch.seeds) or not isinstance(rows, list)
            or not all(isinstance(r, list) and len(r) == 2 and all(type(x) is int for x in r) for r in rows)):
        raise TranscriptError("invalid_transcript", "challenge.roots: one per instance; challenge.rows: [i, row]")
    try:
        ch.roots = [bytes.fromhex(r) for r in roots]
    except (TypeError, ValueError):
        raise TranscriptError("invalid_transcript", "challenge.roots are hex") from None
    if any(len(r) != 32 for r in ch.roots) or any(not 0 <= i < len(ch.seeds) for i, _ in rows):
        raise TranscriptError("invalid_transcript", "challenge.roots are 32 bytes; rows name instances asked")
    if {i for i, _ in rows} != set(range(len(ch.seeds))):
        raise TranscriptError("wrong_transcript", "the opened rows do not cover every instance")
    ch.rows = [(int(i), int(r)) for i, r in rows]
    return ch


def audit_drawn(secret: bytes, transcript: dict[str, Any], fraction: float) -> bool:
    """Whether this relay re-checks a peer's transcript: a draw keyed by this relay's secret over the
    transcript's signature, below `fraction`. The peer cannot tell which of its transcripts will be checked."""
    if fraction >= 1.0:
        return True
    if fraction <= 0.0:
        return False
    digest = hmac.new(secret, f"ce-bench/v1/audit/{transcript.get('sig')}".encode(), hashlib.sha256).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


@dataclass
class PeerAudit:
    """Which peers' transcripts are believed on their signature at the configured fraction, and which have
    lost that: one failed re-check and every later transcript of that peer is re-checked (as with fraction
    1.0), for the life of this relay. A lying peer so gets about 1 / fraction lies before it is caught,
    then none; a peer with a bug costs CPU, not a split of the cluster."""

    fraction: float
    caught: dict[str, str] = field(default_factory=dict)  # peer -> the failed check that caught it

    def due(self, secret: bytes, origin: str, transcript: dict[str, Any]) -> bool:
        return origin in self.caught or audit_drawn(secret, transcript, self.fraction)

    def failed(self, origin: str, reason: str) -> None:
        self.caught.setdefault(origin, reason)


@dataclass
class TranscriptLedger:
    """Each peer transcript is taken once, and only while fresh: a record that crosses the cluster is bound to
    its time. Keyed by (relay, challenge nonce): the nonce is the relay's own 128-bit draw, one per challenge.
    (A listener on an unauthenticated NATS once kept an identity that had left counted at four roll calls by
    re-publishing its genuine transcripts, and flagged an honest node by re-publishing one `late` 10 times.)
    What was taken is kept through `marks` (web/replay_marks.py), so a relay that restarted takes nothing twice."""

    max_age_s: float                  # older on arrival (by its `at`, the peer's clock): refused as stale
    skew_s: float                     # clocks of the cluster may differ by this much
    seen: dict[tuple[str, str], float] = field(default_factory=dict)  # key -> its `at`
    pruned_at: float = 0.0
    marks: Marks = field(default_factory=NoMarks)

    def load(self, now: float) -> None:
        """What was taken before a restart and is still fresh (the store's marks)."""
        for key, at, _ in self.marks.load(MARK_KIND, now - self.max_age_s - self.skew_s):
            origin, _, nonce = key.partition(" ")
            self.seen[(origin, nonce)] = at

    def take(self, origin: str, nonce: str, at: float, now: float) -> None:
        """Records the transcript as taken; raises TranscriptError "replayed" or "stale"."""
        oldest = now - self.max_age_s - self.skew_s
        if not oldest <= at <= now + self.skew_s:
            raise TranscriptError("stale", f"at {at:.0f} is {now - at:.0f} s before this relay's clock (taken "
                                           f"within {self.max_age_s:g} s of its challenge, clocks "
                                           f"{self.skew_s:g} s apart)")
        key = (origin, nonce)
        if key in self.seen:
            raise TranscriptError("replayed", f"the transcript of challenge {nonce[:16]} from {origin} was taken")
        if now - self.pruned_at >= self.max_age_s:  # those older would be refused as stale anyway
            self.seen = {k: t for k, t in self.seen.items() if t >= oldest}
            self.pruned_at = now
            self.marks.drop(MARK_KIND, before=oldest)
        self.seen[key] = at
        self.marks.keep(MARK_KIND, f"{origin} {nonce}", at)

    def release(self, origin: str, nonce: str) -> None:
        """A taken transcript that was then refused for what it says: its peer may still send the right one."""
        if self.seen.pop((origin, nonce), None) is not None:
            self.marks.drop(MARK_KIND, f"{origin} {nonce}")

