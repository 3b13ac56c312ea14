"""Challenges over the live session, as pure functions (time passed in; the arithmetic is capsule/challenge.py).

node -> relay  {"type": "hello", "answers": ["sgemm"], "withdrawable": true}   the session opts in to challenges
relay -> node  {"type": "challenge", "id": HEX, "kind": "sgemm", "n": N, "reps": R, "seeds": [HEX16, ...],
                "beacon_round": R, "nonce": HEX, "commit_within_s": S, "stop_after_s": D (roll calls only),
                "leaves": ["high16", "fp32"]}   the leaf forms the relay checks (absent: an older relay, "fp32")
node -> relay  {"type": "commit", "id": HEX, "roots": [HEX64, ...], "products": [K, ...], "leaf": "high16"}
                one Merkle root per seed (instance) over its first K products (capsule/cpu_challenge.py);
                "products" absent: all R; "leaf" absent: "fp32" (an older node's leaves hash whole rows).
                At a roll call the node stops D seconds after the challenge arrived (the common deadline,
                less a margin for the last product and the network) and commits what it finished: the
                relay counts the work of those products. A GPU answer ("kind": "gpu") commits the same way
                (no "leaf": its leaves are SHA-256 of whole rows, web/proof/gpu_challenges.py).
relay -> node  {"type": "open", "id": HEX, "rows": [[instance, leaf], ...]}   drawn after the commitment,
                among the committed products' rows
node -> relay  {"type": "opening", "id": HEX, "rows": [{"instance", "row": leaf, "values": BASE64,
                "proof": [HEX64]}]}
relay -> node  {"type": "challenge_result", "id": HEX, "passed": BOOL, "code": CODE, "detail": "...",
                "observed_gflops": X | null, "observed_tokens_per_sec": X | null}
A roll call's challenge to a session whose hello said "withdrawable": true (it can stop its work: the server
node, an isolated join page) may carry "withdraws": [HEX, ...]: solo challenges the node had not committed yet,
withdrawn by the relay so the node answers the roll call with its whole machine; it stops them and sends nothing
for them (any other session owing an answer is not asked: `busy`). They are judged neither way; a commitment
that names one anyway gets {"type": "withdrawn", "id": HEX, "detail": "..."}, once, and is recorded nowhere
(web/proof/challenge_desk.py Challengee.make_way).

A reference-model challenge (for sessions that answer "llm-rank"): {"type": "challenge", "kind": "llm", "seeds":
[HEX16, ...] (one per decode stream the claim sums), "decode": D (per stream), "stop_after_s": S (roll calls only),
...}; the node decodes every stream at once with the capsule's fixed reference model from its seed's prompts
(capsule/kernels/llm_challenge.h: a new 32-token prompt every 224 tokens; each token at a rank the seed draws),
stops after D tokens or S seconds, and commits {"type": "commit", "id", "tokens": [ID, ...]} (one stream) or
{"tokens": [[ID, ...], ...]} (one list per seed), the token ids themselves; there is no opening. Observed
tokens/s = the tokens committed (all streams) / the same timed window.
The relay checks one token of every answer, drawn after it arrived (wrong_tokens when it differs): a token
guessed instead of computed is caught with the chance of being drawn, so an answer counts in expectation no
more than the tokens it computed, whatever identity sent it (web/proof/llm_checks.py).

Each instance computes up to `reps` products of the claim's own order n (capsule/cpu_challenge.py); the relay
times the commitment on its own clock: observed GFLOP/s = the committed products x 2 n^3 / (commitment
received - challenge sent - the session's median RTT, capped at challenge_rtt_share_max of that time:
net_time_s). An observed figure beyond the physical bounds of capsule/plausibility.py for the instances asked
is a failed answer (implausible_observation). Every failure has a stable code (late, malformed_commit,
wrong_proof, wrong_rows, malformed_opening, unknown_challenge, replayed, implausible_observation) and counts
against the node (web/proof/trust.py).
"""

from __future__ import annotations

import hashlib
import hmac
import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from capsule import cpu_challenge, plausibility
from capsule.challenge import (
    LLM_MAX_ANSWER_TOKENS,
    LLM_VOCAB,
    ChallengeError,
    challenge_size,
    check_entries,
    check_proof,
    decode_row,
    instance_seed,
    tokens_for,
)
from web.config import RelayConfig
from web.proof.llm_checks import draw_checked
from web.sessions.loop_lag import lag_allowance, lag_forgiven


@dataclass
class Challenge:
    id: str
    node_id: str
    n: int
    reps: int
    seeds: list[int]
    beacon_round: int
    nonce: str
    claimed_gflops: float
    sent_at: float                     # perf_counter seconds
    rtt_ms: float
    issued_at: float = 0.0             # unix time it was sent (history; same-host rounds share it)
    kind: str = "sgemm"                # "sgemm" | "llm" | "gpu" (web/proof/gpu_challenges.py)
    decode: int = 0                    # llm: the most tokens to decode
    claimed_tps: float = 0.0           # llm: the claimed tokens/s it was sized for
    tokens: list[int] | None = None    # llm: the committed token ids, every stream's in stream order
    stream_tokens: list[int] | None = None  # llm: how many of them each stream (seed) committed
    checked_token: int | None = None   # llm: the index the relay checks, drawn when the tokens arrived
    checking: bool = False             # the answer arrived in time and is being recomputed (not late)
    roots: list[bytes] | None = None
    commit_s: float | None = None      # commitment received - sent - the RTT allowance (net_time_s)
    roll_call: str | None = None       # the roll call it belongs to (None: a solo challenge)
    opened_items: list[Any] | None = None  # the node's opening as it came (the transcript carries it)
    beacon_value: str = ""             # the round's value the seeds come from
    rows: list[tuple[int, int]] = field(default_factory=list)
    open_sent_at: float | None = None
    stop_after_s: float | None = None  # at a roll call: the node commits what it finished by then
    products: list[int] | None = None  # sgemm, gpu: products committed per instance (None: not committed yet)
    leaf: str = "fp32"                 # sgemm: what each committed leaf hashes (cpu_challenge.LEAF_FORMS)
    withdraws: list[str] = field(default_factory=list)  # solo challenges a roll call replaces (node stops them)

    @property
    def flops(self) -> float:
        """The work the answer stands for: the committed products (sgemm, gpu), else every product asked."""
        if self.kind != "llm" and self.products is not None:
            return 2.0 * self.n ** 3 * sum(self.products)
        return 2.0 * self.n ** 3 * self.reps * len(self.seeds)

    @property
    def observed_gflops(self) -> float | None:
        return self.flops / self.commit_s / 1e9 if self.commit_s and self.kind == "sgemm" else None

    @property
    def observed_tflops(self) -> float | None:
        """fp32 TFLOP/s of a GPU answer on the relay's clock (web/gpu_challenges.observed_tflops)."""
        return self.flops / self.commit_s / 1e12 if self.commit_s and self.kind == "gpu" else None

    @property
    def observed_tps(self) -> float | None:
        if not self.commit_s or self.kind != "llm" or self.tokens is None:
            return None
        return len(self.tokens) / self.commit_s

    def message(self, config: RelayConfig) -> dict[str, Any]:
        if self.kind == "llm":
            llm = {"type": "challenge", "id": self.id, "kind": "llm", "decode": self.decode,
                   "seeds": [f"{s:016x}" for s in self.seeds], "beacon_round": self.beacon_round,
                   "nonce": self.nonce, "commit_within_s": config.challenge_commit_timeout_s}
            if self.stop_after_s is not None:
                llm["stop_after_s"] = round(self.stop_after_s, 4)
            if self.withdraws:
                llm["withdraws"] = self.withdraws
            return llm
        # "sgemm" and "gpu" share the message (web/gpu_challenges.gpu_message)
        body = {"type": "challenge", "id": self.id, "kind": self.kind, "n": self.n, "reps": self.reps,
                "seeds": [f"{s:016x}" for s in self.seeds], "beacon_round": self.beacon_round, "nonce": self.nonce,
                "commit_within_s": config.challenge_commit_timeout_s}
        if self.stop_after_s is not None:
            body["stop_after_s"] = round(self.stop_after_s, 4)
        if self.kind == "sgemm":
            body["leaves"] = list(cpu_challenge.LEAF_FORMS)  # the leaf forms this relay checks (a node picks one)
        if self.withdraws:
            body["withdraws"] = self.withdraws
        return body

    def record(self) -> dict[str, Any]:
        """What the history keeps: enough for anyone to recompute the challenge from the beacon."""
        if self.kind == "gpu":
            from web.proof.gpu_challenges import gpu_record  # (it imports this module)

            return gpu_record(self)
        if self.kind == "llm":
            return {"id": self.id, "kind": "llm", "issued_at": self.issued_at, "decode": self.decode,
                    "beacon_round": self.beacon_round, "nonce": self.nonce,
                    "seed_method": "stream i: first 8 bytes LE of sha256('ce-bench/v1/challenge/{beacon}/{nonce}/{i}');"
                                   " tokens: capsule/kernels/llm_challenge.h",
                    "stop_after_s": self.stop_after_s,
                    "claimed_tokens_per_sec": self.claimed_tps, "rtt_ms": round(self.rtt_ms, 3),
                    "commit_s": round(self.commit_s, 4) if self.commit_s else None,
                    "observed_tokens_per_sec": round(self.observed_tps, 3) if self.observed_tps else None,
                    "tokens": None if self.tokens is None else len(self.tokens),
                    "streams": len(self.seeds), "stream_tokens": self.stream_tokens,
                    "checked_token": self.checked_token,
                    "token": None if self.tokens is None or self.checked_token is None
                    else self.tokens[self.checked_token], "roll_call": self.roll_call}
        return {"id": self.id, "kind": "sgemm", "issued_at": self.issued_at, "n": self.n, "reps": self.reps,
                "instances": len(self.seeds),
                "beacon_round": self.beacon_round, "nonce": self.nonce,
                "seed_method": "instance i: first 8 bytes LE of sha256('ce-bench/v1/challenge/{beacon}/{nonce}/{i}'); "
                               "product t: that + t * 0x9e3779b97f4a7c15 (mod 2^64); inputs: capsule/cpu_challenge.py",
                "products": self.products, "leaf": self.leaf, "stop_after_s": self.stop_after_s,
                "claimed_gflops": self.claimed_gflops, "rtt_ms": round(self.rtt_ms, 3),
                "commit_s": round(self.commit_s, 4) if self.commit_s else None,
                "observed_gflops": round(self.observed_gflops, 3) if self.observed_gflops else None,
                "rows": [list(r) for r in self.rows], "roll_call": self.roll_call}


def net_time_s(elapsed_s: float, rtt_ms: float | None, config: RelayConfig) -> float:
    """The time a challenge's work took on the relay's clock: elapsed minus the network's share, which is the
    session's median RTT but never more than `challenge_rtt_share_max` of elapsed (so delaying pongs buys
    at most 1 / (1 - share)), and never below zero."""
    allowance = min(max(rtt_ms or 0.0, 0.0) / 1000, config.challenge_rtt_share_max * elapsed_s)
    return max(elapsed_s - allowance, 1e-6)


def implausible(ch: Challenge) -> str | None:
    """Why an observed figure is beyond physics for what was asked (capsule/plausibility.py's bounds for the
    instance count challenged), or None. Such an answer was not computed in the time it claims."""
    if ch.kind == "gpu":
        from web.proof.gpu_challenges import gpu_implausible  # (it imports this module)

        return gpu_implausible(ch)
    gflops, tps = ch.observed_gflops, ch.observed_tps
    bound = len(ch.seeds) * plausibility.CORE_GFLOPS_MAX
    if gflops is not None and gflops > bound:
        return (f"observed {gflops:.1f} GFLOP/s over {len(ch.seeds)} instance(s); no hardware exceeds {bound:g} "
                f"({plausibility.CORE_GFLOPS_MAX:g} per core)")
    if tps is not None and tps > len(ch.seeds) * plausibility.TOKENS_PER_SEC_MAX:
        return (f"observed {tps:.1f} tokens/s over {len(ch.seeds)} stream(s); no core exceeds "
                f"{plausibility.TOKENS_PER_SEC_MAX:.0f} on the reference model")
    return None


def new_challenge(node_id: str, claimed_gflops: float, instances: int, sgemm_n: object, beacon: dict[str, Any],
                  nonce: str, rtt_ms: float | None, now: float, config: RelayConfig,
                  target_s: float | None = None, stop_after_s: float | None = None) -> Challenge:
    """An SGEMM challenge sized for target_s at the claim (solo: challenge_target_s). With stop_after_s (a roll
    call), the node stops then and commits what it finished: it is given work for target_s (the caller sizes
    it beyond the deadline, so a node at its claim never runs out first)."""
    k, n, reps = challenge_size(claimed_gflops, instances, sgemm_n,
                                target_s if target_s is not None else config.challenge_target_s,
                                config.challenge_max_instances, config.core_floor_gflops)
    seeds = [instance_seed(beacon["value"], nonce, i) for i in range(k)]
    return Challenge(nonce[:16], node_id, n, reps, seeds, beacon["round"], nonce, claimed_gflops, now, rtt_ms or 0.0,
                     beacon_value=str(beacon["value"]), stop_after_s=stop_after_s)


def new_llm_challenge(node_id: str, claimed_tps: float, beacon: dict[str, Any], nonce: str, rtt_ms: float | None,
                      now: float, config: RelayConfig, target_s: float | None = None,
                      stop_after_s: float | None = None, streams: int = 1) -> Challenge:
    """A reference-model challenge asking target_s of decoding at the claim (solo: challenge_target_s), split
    over the `streams` the claim sums (one seed each, decoded at once: the claim is aggregate throughput; at
    most challenge_max_instances; each stream at most LLM_MAX_TOKENS, all of them LLM_MAX_ANSWER_TOKENS). With
    stop_after_s (a roll call)
    the node stops then and commits the tokens it has: as for SGEMM, the caller sizes the work beyond the
    deadline."""
    target = target_s if target_s is not None else config.challenge_target_s
    k = max(1, min(streams, config.challenge_max_instances, LLM_MAX_ANSWER_TOKENS // 8))
    decode = min(tokens_for(claimed_tps / k, target), LLM_MAX_ANSWER_TOKENS // k)
    return Challenge(nonce[:16], node_id, 0, 0, [instance_seed(beacon["value"], nonce, i) for i in range(k)],
                     beacon["round"], nonce, 0.0, now, rtt_ms or 0.0, kind="llm", decode=decode,
                     claimed_tps=claimed_tps, beacon_value=str(beacon["value"]), stop_after_s=stop_after_s)


def checked_stream(ch: Challenge) -> tuple[int, list[int], int]:
    """Where the checked token lies: (its stream's seed, that stream's tokens, its index in them)."""
    tokens, j = ch.tokens or [], ch.checked_token or 0
    lengths = ch.stream_tokens or [len(tokens)]
    start = 0
    for s, n in enumerate(lengths):
        if j < start + n:
            return ch.seeds[s], tokens[start:start + n], j - start
        start += n
    raise ValueError(f"token {j} is beyond the answer's {start} tokens")


def token_mismatch(ch: Challenge, expected: int) -> str | None:
    """The relay's verdict on the checked token (`expected`: the reference model's token there, recomputed from
    checked_stream): None when the node's is the same, else why it is `wrong_tokens`."""
    _, stream, at = checked_stream(ch)
    if expected == stream[at]:
        return None
    return f"token {ch.checked_token} is {stream[at]}; the reference model gives {expected} after the tokens before it"


def next_gap_s(secret: bytes, beacon_value: str, node_id: str, count: int, config: RelayConfig) -> float:
    """Seconds until a not-yet-verified node's next solo challenge (verified nodes are kept so by roll calls):
    challenge_interval_unverified_s x (1 +- spread), drawn from the
    relay's secret, the beacon, the node and how many challenges it had. The secret matters: from public
    data alone (beacon, NodeId, count) a node once predicted its next moment within 0.04-0.94 s."""
    digest = hmac.new(secret, f"ce-bench/v1/challenge-at/{beacon_value}/{node_id}/{count}".encode(),
                      hashlib.sha256).digest()
    u = int.from_bytes(digest[:8], "big") / 2**64
    return config.challenge_interval_unverified_s * (1 + config.challenge_spread * (2 * u - 1))


def on_commit(ch: Challenge, message: dict[str, Any], now: float, rng: random.Random,
              config: RelayConfig, lag_s: float = 0.0) -> dict[str, Any] | None:
    """Takes the commitment (`now`: when its frame was received; `lag_s`: the relay's longest event-loop stall
    since the challenge was sent) and draws the rows to open; the open message (None for an llm challenge,
    which has no opening: the token to check is drawn into ch.checked_token). Raises ChallengeError."""
    if ch.roots is not None or ch.tokens is not None:
        raise ChallengeError("replayed", "this challenge was already committed")
    elapsed = now - ch.sent_at
    allowance = lag_allowance(lag_s, config)
    if elapsed - allowance > config.challenge_commit_timeout_s:
        raise ChallengeError("late", f"committed after {elapsed:.1f} s; the limit is "
                                     f"{config.challenge_commit_timeout_s:g} s")
    if ch.kind == "llm":
        ch.tokens, ch.stream_tokens = parse_tokens(ch, message)
        # drawn now, after the tokens arrived: a node cannot know which one is checked when it commits
        ch.checked_token = draw_checked(len(ch.tokens), rng)
        ch.commit_s = lag_forgiven(net_time_s(elapsed, ch.rtt_ms, config), allowance, ch.roll_call is not None,
                               config)
        return None
    roots = message.get("roots")
    if (not isinstance(roots, list) or len(roots) != len(ch.seeds)
            or not all(isinstance(r, str) and len(r) == 64 for r in roots)):
        raise ChallengeError("malformed_commit", f"expected {len(ch.seeds)} roots of 64 hex digits")
    products = parse_products(ch, message.get("products"))
    leaf = parse_leaf(ch, message.get("leaf"))
    try:
        ch.roots = [bytes.fromhex(r) for r in roots]
    except ValueError:
        raise ChallengeError("malformed_commit", "a root is not hex") from None
    ch.products, ch.leaf = products, leaf
    ch.commit_s = lag_forgiven(net_time_s(elapsed, ch.rtt_ms, config), allowance, ch.roll_call is not None,
                               config)
    # rows among the committed products only: a product committed but not computed is caught with the same
    # odds as one of a full answer (web/proof/checks.py)
    ch.rows = [(i, rng.randrange(ch.n * committed_products(ch, i))) for i in range(len(ch.seeds))
               for _ in range(config.challenge_rows_per_instance)]
    ch.open_sent_at = now
    return {"type": "open", "id": ch.id, "rows": [list(r) for r in ch.rows]}


def _token_ids(value: object, least: int, most: int) -> list[int] | None:
    if (isinstance(value, list) and least <= len(value) <= most
            and all(type(t) is int and 0 <= t < LLM_VOCAB for t in value)):
        return list(value)
    return None


def parse_tokens(ch: Challenge, message: dict[str, Any]) -> tuple[list[int], list[int] | None]:
    """A reference-model answer's token ids and, with several streams, how many each committed: one stream's are
    1 to `decode` integers in [0, LLM_VOCAB); k streams' are k such lists (0 to `decode` each: a stream may
    finish nothing by a roll call's stop), 1 token at least in all. Raises ChallengeError."""
    tokens = message.get("tokens")
    if tokens is None and "token_ids_sha256" in message:
        raise ChallengeError("outdated_client", "expected tokens (the token ids): a token hash is no longer "
                                                "taken, since every answer is checked; update ce-bench")
    k = len(ch.seeds)
    if k == 1:
        one = _token_ids(tokens, 1, ch.decode)
        if one is None:
            raise ChallengeError("malformed_commit",
                                 f"expected tokens: 1 to {ch.decode} integers in [0, {LLM_VOCAB})")
        return one, None
    streams = [_token_ids(s, 0, ch.decode) for s in tokens] if isinstance(tokens, list) and len(tokens) == k else []
    if not streams or any(s is None for s in streams) or not any(streams):
        raise ChallengeError("malformed_commit", f"expected tokens: {k} lists (one per stream) of 0 to {ch.decode} "
                                                 f"integers in [0, {LLM_VOCAB}), 1 token at least in all")
    return [t for s in streams for t in s or []], [len(s or []) for s in streams]


def parse_products(ch: Challenge, value: object) -> list[int]:
    """The products an SGEMM or GPU commitment covers per instance (absent: every product asked, as an older
    node's GPU answer always did). Raises ChallengeError."""
    if value is None:
        return [ch.reps] * len(ch.seeds)
    if (not isinstance(value, list) or len(value) != len(ch.seeds)
            or not all(type(k) is int and 1 <= k <= ch.reps for k in value)):
        raise ChallengeError("malformed_commit", f"products: expected {len(ch.seeds)} integers in [1, {ch.reps}]")
    return list(value)


def parse_leaf(ch: Challenge, value: object) -> str:
    """What an SGEMM commitment's leaves hash (absent: "fp32", an older node's whole rows). A GPU answer's
    leaves are always whole rows (capsule/gpu_challenge.py). Raises ChallengeError."""
    if value is None:
        return "fp32"
    if ch.kind != "sgemm" or value not in cpu_challenge.LEAF_FORMS:
        raise ChallengeError("malformed_commit", f"leaf: expected one of {', '.join(cpu_challenge.LEAF_FORMS)} "
                                                 f"for an sgemm commitment, got {str(value)[:40]!r}")
    return str(value)


def committed_products(ch: Challenge, instance: int) -> int:
    return ch.products[instance] if ch.products is not None else ch.reps


def parse_opening(ch: Challenge, message: dict[str, Any], now: float,
                  config: RelayConfig, lag_s: float = 0.0) -> dict[int, dict[int, np.ndarray]]:
    """The opened rows, proofs checked against the commitment: {instance: {row: values}}. Cheap (hashes);
    the recomputation (check_opened) is the expensive part. `lag_s` as for on_commit. Raises ChallengeError."""
    if ch.roots is None or ch.open_sent_at is None:
        raise ChallengeError("unknown_challenge", "no commitment to open yet")
    if now - ch.open_sent_at - lag_allowance(lag_s, config) > config.challenge_open_timeout_s:
        raise ChallengeError("late", f"opened after {now - ch.open_sent_at:.1f} s")
    items = message.get("rows")
    if not isinstance(items, list) or len(items) != len(ch.rows):
        raise ChallengeError("malformed_opening", f"expected {len(ch.rows)} opened rows")
    opened: dict[int, dict[int, np.ndarray]] = {}
    for (instance, row), item in zip(ch.rows, items, strict=True):
        if not isinstance(item, dict) or item.get("instance") != instance or item.get("row") != row:
            raise ChallengeError("malformed_opening", f"expected row {row} of instance {instance} in the order asked")
        raw = decode_row(item.get("values"), ch.n)
        proof = item.get("proof")
        if not isinstance(proof, list) or not all(isinstance(h, str) and len(h) == 64 for h in proof):
            raise ChallengeError("malformed_opening", "a proof is a list of 64-hex-digit hashes")
        try:
            siblings = [bytes.fromhex(h) for h in proof]
        except ValueError:
            raise ChallengeError("malformed_opening", "a proof hash is not hex") from None
        if ch.kind == "sgemm":
            cpu_challenge.check_proof(raw, row, siblings, ch.roots[instance], ch.n, committed_products(ch, instance),
                                      ch.leaf)
        else:  # the GPU's tree over the committed products' rows (capsule/gpu_challenge.py)
            check_proof(raw, row, siblings, ch.roots[instance], ch.n * committed_products(ch, instance))
        opened.setdefault(instance, {})[row] = np.frombuffer(raw, "<f4")
    return opened


def check_opened(ch: Challenge, opened: dict[int, dict[int, np.ndarray]], rng: random.Random,
                 config: RelayConfig) -> float:
    """Recomputes `challenge_entries_per_row` entries of each opened row, at columns drawn now (after the
    opening, so the node could not know them): O(rows x entries x n). The worst error ratio."""
    entries = min(config.challenge_entries_per_row, ch.n)
    check = cpu_challenge.check_entries if ch.kind == "sgemm" else check_entries
    return max(check(ch.seeds[instance], ch.n, leaf, values, rng.sample(range(ch.n), entries))
               for instance, rows in opened.items() for leaf, values in rows.items())
