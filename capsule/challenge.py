"""The arithmetic of a challenge, shared by the relay that checks it and the node that answers it (pure).

An sgemm challenge names, per instance, a 64-bit seed, the order n of the probe it checks, and `reps`
products. The node computes C_t = A_t * B_t (t < reps; inputs of seed + t * golden) with the capsule's own
probe inputs and kernel (capsule/kernels/challenge.c), commits to all of them by one Merkle root over their
rows (leaf t * n + i = row i of C_t), and opens the leaves the relay then names. The relay regenerates the
named row of A_t and, for `entries` columns it picks only after the opening, those columns of B_t (the
capsule's splitmix64 stream, vectorised here), and recomputes those entries of each opened row in float64:
O(rows x entries x n) instead of the node's O(reps x n^3). Recomputing whole rows would need all of B_t,
O(n^2) draws per product: measured at 11.6% of the node's own work (BENCHMARKS.md), against a 1% target.

Seeds: seed_i = first 8 bytes (little-endian) of sha256("ce-bench/v1/challenge/{beacon}/{nonce}/{i}"), where
beacon is the value of the relay's latest beacon round and nonce the relay's fresh random hex: nobody can
precompute a challenge, and anyone holding the history can recompute one.
"""

from __future__ import annotations

import base64
import hashlib
import math
from collections.abc import Sequence

import numpy as np

GOLDEN = 0x9E3779B97F4A7C15
SGEMM_STREAM = 0x7367656D6D  # "sgemm": ce_sgemm_inputs mixes it into the seed
MAX_N = 2048                 # CE_CHALLENGE_MAX_N in capsule/kernels/challenge.h
MIN_N = 128                  # below this the call overhead, not the kernel, sets the time
EPS32 = 2.0 ** -24           # unit roundoff of fp32
MASK64 = (1 << 64) - 1


class ChallengeError(ValueError):
    """An answer that does not check out; `code` is the stable reason a relay reports."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


def instance_seed(beacon_value: str, nonce: str, instance: int) -> int:
    digest = hashlib.sha256(f"ce-bench/v1/challenge/{beacon_value}/{nonce}/{instance}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


MAX_PRODUCTS = 65536          # CE_CHALLENGE_MAX_PRODUCTS: only each product's 32-byte root is kept
DEFAULT_N = 1024             # when the claim's evidence names no order


LLM_PROMPT = 32              # the prompt tokens of each sequence (capsule/kernels/llm_challenge.h)
LLM_PER_SEQ = 224            # CE_LLMC_PER_SEQ: tokens decoded per sequence before the next prompt
LLM_VOCAB = 32000            # CE_LLM_VOCAB: token ids are in [0, LLM_VOCAB)
LLM_MAX_TOKENS = 8192        # the most tokens one challenge asks (~58 KB of JSON, web/sessions/live_guard.py)
# The most tokens one reference-model answer holds over all its streams (each stream at most LLM_MAX_TOKENS):
# ~200 KB of JSON. A claim beyond LLM_MAX_ANSWER_TOKENS / work_s (~21,000 tokens/s at 1.5625 s) is asked for
# this many and counted at most this many per second of the target (docs/protocol.md).
LLM_MAX_ANSWER_TOKENS = 32768
# The hello answer of a client that decodes as the relay checks (seeded rank sampling, capsule/kernels/llm.h). A
# client that says only "llm" decodes greedily (before issue 45): it gets no reference-model challenge (its
# tokens/s counts nothing) instead of failing every check as wrong_tokens and being flagged for it.
LLM_ANSWER = "llm-rank"


def tokens_for(claimed_tokens_per_sec: float, target_s: float) -> int:
    """Tokens a reference-model challenge asks: target_s of decoding at the claimed tokens/s (the probe's
    unit: decoded tokens per second, llama-bench "tg"), held within [8, LLM_MAX_TOKENS]. Sequences of
    LLM_PER_SEQ tokens follow one another, so no claim is held to one sequence's length."""
    return int(max(8, min(LLM_MAX_TOKENS, round(claimed_tokens_per_sec * target_s))))


def product_seed(seed: int, t: int) -> int:
    return (seed + t * GOLDEN) & MASK64


def reps_for(claimed_gflops: float, instances: int, n: int, target_s: float) -> int:
    """How many n-order products one instance computes so the claimed speed needs at most target_s (2 n^3
    flops each at claimed / instances GFLOP/s), at least 1 and at most MAX_PRODUCTS. A claim beyond that just
    gets a shorter challenge: a node slower than its claim still shows in the observed time.

    Rounded down, not to the nearest: roll calls hold every answer to one deadline (deadline_factor x
    target_s) and count at most work / target_s, so work beyond target_s at the claim only eats an honest
    node's margin. Rounding to the nearest once asked 4 products where 3.76 fit (1.06 s at the claim): an
    honest node answering at 0.8x its claim on busy cores (CI, 2026-12-04) missed every roll call. The price:
    a roll call counts at most floor(x) / x of the claim, x being the products that fit (3 of 3.76: 80%; 1 of
    1.9: 53%). Roll calls now size their work beyond the deadline and count the products committed by the
    node's stop (web/proof/rollcall.py work_s, stop_after_s), so this rounding only shapes solo challenges."""
    per_instance = max(claimed_gflops, 0.0) / max(instances, 1) * 1e9
    reps = math.floor(per_instance * target_s / (2 * n**3))
    return int(max(1, min(reps, MAX_PRODUCTS)))


def challenge_size(claimed_gflops: float, instances: int, evidence_n: object, target_s: float,
                   max_instances: int, core_floor_gflops: float) -> tuple[int, int, int]:
    """(instances, order, products per instance) of an SGEMM challenge to a claim: at most max_instances,
    the probe's own order (order_of), and the work of the claim for target_s, but never less than
    core_floor_gflops per instance (a tiny claim must not make cores free to show). The relay sizes its
    challenges with it (web/proof/challenges.py), and a node warms its reactors for the same (host_runner/agent.py)."""
    k = max(1, min(instances, max_instances))
    n = order_of(evidence_n)
    per_instance = max(claimed_gflops / k, core_floor_gflops)
    return k, n, reps_for(per_instance * k, k, n, target_s)


def order_of(evidence_n: object) -> int:
    """The challenge's order: the probe's own (its speed depends on n through the caches), held in range."""
    n = evidence_n if type(evidence_n) is int else DEFAULT_N
    return max(MIN_N, min(MAX_N, n))


def _uniform(state: int, first: int, count: int) -> np.ndarray:
    """Draws first..first+count-1 of splitmix64 started at `state`, as the capsule's ce_rng_uniform floats."""
    return _uniform_at(state, np.arange(first, first + count, dtype=np.uint64))


def _uniform_at(state: int, index: np.ndarray) -> np.ndarray:
    """Draws number `index` (0-based, any shape) of the splitmix64 stream started at `state`."""
    k = index.astype(np.uint64) + np.uint64(1)
    with np.errstate(over="ignore"):
        z = np.uint64(state) + k * np.uint64(GOLDEN)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    bits = (z >> np.uint64(40)).astype(np.int64) - (1 << 23)
    return (bits.astype(np.float32) * np.float32(1.0 / (1 << 23))).astype(np.float32)


def leaf_hash(row: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + row).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def tree_width(n: int) -> int:
    width = 1
    while width < n:
        width *= 2
    return width


def merkle_root(rows: Sequence[bytes]) -> bytes:
    """Reference implementation of challenge.c's tree (tests compare the two)."""
    level = [leaf_hash(r) for r in rows] + [bytes(32)] * (tree_width(len(rows)) - len(rows))
    while len(level) > 1:
        level = [node_hash(level[i], level[i + 1]) for i in range(0, len(level), 2)]
    return level[0]


def check_proof(row: bytes, index: int, siblings: Sequence[bytes], root: bytes, leaves: int) -> None:
    """Raises ChallengeError unless row is leaf `index` of the tree of `leaves` leaves with this root."""
    depth = tree_width(leaves).bit_length() - 1
    if len(siblings) != depth or any(len(s) != 32 for s in siblings):
        raise ChallengeError("wrong_proof", f"row {index}: expected {depth} sibling hashes of 32 bytes")
    h, k = leaf_hash(row), index
    for sibling in siblings:
        h = node_hash(sibling, h) if k & 1 else node_hash(h, sibling)
        k >>= 1
    if h != root:
        raise ChallengeError("wrong_proof", f"row {index} does not open the committed root")


def check_entries(seed: int, n: int, leaf: int, values: np.ndarray, columns: Sequence[int]) -> float:
    """Recomputes entries `columns` of leaf `leaf` (row leaf % n of product leaf // n) in float64; returns
    the worst error ratio, where 1.0 is the worst-case fp32 summation error n * 2^-24 * sum|a_ip b_pj| (the
    bound of the probe's own check). Raises ChallengeError when an entry is off by more, or any value of
    the row is NaN/inf."""
    if not np.all(np.isfinite(values)):
        raise ChallengeError("wrong_rows", f"row {leaf} holds NaN or infinity")
    t, i = divmod(leaf, n)
    state = (product_seed(seed, t) ^ SGEMM_STREAM) & MASK64
    a_row = _uniform(state, i * n, n).astype(np.float64)
    cols = np.asarray(columns, dtype=np.uint64)
    p = np.arange(n, dtype=np.uint64)
    b_cols = _uniform_at(state, np.uint64(n * n) + p[:, None] * np.uint64(n) + cols[None, :]).astype(np.float64)
    return judge_entries(leaf, values, columns, a_row, b_cols)


def judge_entries(leaf: int, values: np.ndarray, columns: Sequence[int], a_row: np.ndarray,
                  b_cols: np.ndarray) -> float:
    """The worst error ratio of the opened row's `columns` against a_row @ b_cols (float64), where 1.0 is the
    worst-case fp32 summation error n 2^-24 sum|a_ip b_pj|; raises ChallengeError (wrong_rows) at or beyond
    it. Shared by both challenge forms (capsule/cpu_challenge.py draws its inputs otherwise)."""
    ref = a_row @ b_cols
    bound = len(a_row) * EPS32 * (np.abs(a_row) @ np.abs(b_cols)) + 1e-30
    ratio = np.abs(values[np.asarray(columns)].astype(np.float64) - ref) / bound
    worst = float(np.max(ratio))
    if not worst < 1.0:
        j = int(np.asarray(columns)[int(np.argmax(ratio))])
        raise ChallengeError("wrong_rows", f"leaf {leaf}, column {j} differs from the product "
                                           f"(error ratio {worst:.3g})")
    return worst


def inputs_of(seed: int, n: int, t: int) -> tuple[np.ndarray, np.ndarray]:
    """A_t and B_t in full (tests compare them with the capsule's products)."""
    state = (product_seed(seed, t) ^ SGEMM_STREAM) & MASK64
    return _uniform(state, 0, n * n).reshape(n, n), _uniform(state, n * n, n * n).reshape(n, n)


def encode_row(values: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(values, dtype="<f4").tobytes()).decode()


def decode_row(text: object, n: int) -> bytes:
    """The row's bytes from its base64 text; ChallengeError unless it is n little-endian fp32 values."""
    if not isinstance(text, str):
        raise ChallengeError("malformed_opening", "a row's values are base64 text")
    try:
        raw = base64.b64decode(text, validate=True)
    except ValueError:
        raise ChallengeError("malformed_opening", "a row's values are not valid base64") from None
    if len(raw) != 4 * n:
        raise ChallengeError("malformed_opening", f"a row holds {len(raw)} bytes; expected {4 * n} ({n} fp32)")
    return raw
