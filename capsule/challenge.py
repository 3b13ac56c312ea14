"""The arithmetic of a challenge, shared by the relay that checks it and the node that answers it (pure).

An sgemm challenge names, per instance, a 64-bit seed and the order n. The node computes C = A * B with the
capsule's own probe inputs and kernel (capsule/kernels/challenge.c), commits to C by a Merkle root over its
rows, and opens the rows the relay then names. The relay regenerates A's named rows and all of B from the
seed (the capsule's splitmix64 stream, vectorised here) and recomputes each opened row in float64:
O(rows x n^2) instead of the node's O(n^3).

Seeds: seed_i = first 8 bytes (little-endian) of sha256("ce-bench/v1/challenge/{beacon}/{nonce}/{i}"), where
beacon is the value of the relay's latest beacon round and nonce the relay's fresh random hex: nobody can
precompute a challenge, and anyone holding the history can recompute one.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence

import numpy as np

GOLDEN = 0x9E3779B97F4A7C15
SGEMM_STREAM = 0x7367656D6D  # "sgemm": ce_sgemm_inputs mixes it into the seed
MAX_N = 2048                 # CE_CHALLENGE_MAX_N in capsule/kernels/challenge.h
MIN_N = 128                  # below this the call overhead, not the kernel, sets the time
N_STEP = 16                  # orders are rounded to a multiple of this
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


def order_for(claimed_gflops: float, instances: int, target_s: float) -> int:
    """The order n at which one instance's product takes target_s at the claimed speed (2 n^3 flops at
    claimed / instances GFLOP/s), rounded to N_STEP and held within [MIN_N, MAX_N]. A claim beyond MAX_N's
    reach just gets a shorter challenge: a node slower than its claim still shows in the observed time."""
    per_instance = max(claimed_gflops, 0.0) / max(instances, 1) * 1e9
    n = (per_instance * target_s / 2) ** (1 / 3)
    return int(min(MAX_N, max(MIN_N, round(n / N_STEP) * N_STEP)))


def _uniform(state: int, first: int, count: int) -> np.ndarray:
    """Draws first..first+count-1 of splitmix64 started at `state`, as the capsule's ce_rng_uniform floats."""
    k = np.arange(first + 1, first + count + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = np.uint64(state) + k * np.uint64(GOLDEN)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    bits = (z >> np.uint64(40)).astype(np.int64) - (1 << 23)
    return (bits.astype(np.float32) * np.float32(1.0 / (1 << 23))).astype(np.float32)


def inputs_rows(seed: int, n: int, rows: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """The named rows of A and all of B for an instance seed (what ce_sgemm_inputs fills)."""
    state = (seed ^ SGEMM_STREAM) & MASK64
    a_rows = np.stack([_uniform(state, r * n, n) for r in rows]) if rows else np.zeros((0, n), np.float32)
    b = _uniform(state, n * n, n * n).reshape(n, n)
    return a_rows, b


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


def check_proof(row: bytes, index: int, siblings: Sequence[bytes], root: bytes, n: int) -> None:
    """Raises ChallengeError unless row is leaf `index` of the n-leaf tree with this root."""
    depth = tree_width(n).bit_length() - 1
    if len(siblings) != depth or any(len(s) != 32 for s in siblings):
        raise ChallengeError("wrong_proof", f"row {index}: expected {depth} sibling hashes of 32 bytes")
    h, k = leaf_hash(row), index
    for sibling in siblings:
        h = node_hash(sibling, h) if k & 1 else node_hash(h, sibling)
        k >>= 1
    if h != root:
        raise ChallengeError("wrong_proof", f"row {index} does not open the committed root")


def check_rows(seed: int, n: int, opened: dict[int, np.ndarray]) -> float:
    """Recomputes each opened row in float64; returns the worst error ratio, where 1.0 is the worst-case
    fp32 summation error n * 2^-24 * sum|a_ip b_pj| (the same bound as the probe's own check). Raises
    ChallengeError when a row is off by more, or holds NaN/inf."""
    rows = sorted(opened)
    a_rows, b = inputs_rows(seed, n, rows)
    b64 = b.astype(np.float64)
    worst = 0.0
    for a_row, r in zip(a_rows.astype(np.float64), rows, strict=True):
        ref = a_row @ b64
        bound = n * EPS32 * (np.abs(a_row) @ np.abs(b64)) + 1e-30
        got = opened[r].astype(np.float64)
        if not np.all(np.isfinite(got)):
            raise ChallengeError("wrong_rows", f"row {r} holds NaN or infinity")
        ratio = float(np.max(np.abs(got - ref) / bound))
        if not ratio < 1.0:
            raise ChallengeError("wrong_rows", f"row {r} differs from the product (error ratio {ratio:.3g})")
        worst = max(worst, ratio)
    return worst


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
