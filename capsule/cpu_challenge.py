"""The CPU (kind "sgemm") challenge's inputs and commitment (capsule/kernels/challenge.c), shared by the relay
that checks it and the nodes that answer it; the sizing and the row check's arithmetic are capsule/challenge.py.

What a node does for instance seed s, order n and at most `reps` products:

- B is drawn once per instance, A_t once per product: splitmix64 started at s ^ "chal-B" and at
  (s + t golden) ^ "chal-A", two inputs per draw (bits 63..40, then 39..16: 24 bits each, uniform in [-1, 1)).
  Every C_t = A_t B is a fresh n^3 of work (A_t is fresh random), at half the draws of fresh A_t and B_t;
- as each product is done, its rows are hashed into the product's own Merkle root; at a roll call the node
  stops where its deadline falls (`stop_after_s` of the challenge) and commits to the k products it finished
  by one root over their roots; the relay counts the work of those k (the busy node counts what it did) and
  opens rows among them only (a skipped product is caught by the same odds as before: web/proof/checks.py).
- leaf = BLAKE3 of the row's high halves (the upper 16 bits of each fp32 entry, n little-endian uint16: the
  commit's "leaf": "high16"; a commit without "leaf" is an older node's, whose leaf is BLAKE3 of the whole row,
  "fp32"), node = BLAKE3 keyed with NODE_KEY of (left || right); each level padded to a power of two with
  all-zero hashes: n leaves per product tree, k product roots in the top tree. The opening still carries the
  whole fp32 row: its high halves must be the committed ones, and each entry the relay checks must lie within
  the fp32 summation bound of its recomputation (~2^-9 of a typical entry at n = 1024, finer than a high
  half's 2^-8 step for all but the smallest entries). So the row is fixed at the commitment, as with whole-row
  leaves, and an entry committed wrong fails its check as before (challenge.c says why halves).

Why BLAKE3: the commitment is work the node does beyond its products, and it eats into the common deadline.
SHA-256 of every row (four lanes in wasm SIMD) and fresh A_t and B_t were 14.5-19.6% of a challenge
(BENCHMARKS.md); BLAKE3's seven add-xor-rotate rounds, four rows per SIMD128 vector, half the draws and half
the bytes per leaf bring it to the figure BENCHMARKS.md records ("The commitment's share").
"""

from __future__ import annotations

from collections.abc import Sequence

import blake3
import numpy as np

from capsule.challenge import GOLDEN, MASK64, ChallengeError, judge_entries, product_seed, tree_width

A_STREAM = 0x6368616C2D41   # "chal-A"
B_STREAM = 0x6368616C2D42   # "chal-B"
NODE_KEY = blake3.blake3(b"ce-bench/v1/merkle-node").digest()
MAX_PRODUCTS = 65536        # CE_CHALLENGE_MAX_PRODUCTS: only each product's root is kept
LEAF_FORMS = ("high16", "fp32")  # what a leaf hashes: each entry's high half, the whole row (older relays')
LEAF_FORM = "high16"         # what this capsule commits where the relay offers it


def leaf_form_offered(offered: object) -> str:
    """The leaf form to answer a challenge in: "high16" where the challenge's "leaves" offers it, else "fp32"
    (a relay that names no forms is older and checks whole rows: answering it in high halves would fail)."""
    return LEAF_FORM if isinstance(offered, list) and LEAF_FORM in offered else "fp32"


def leaf_hash(row: bytes, form: str = LEAF_FORM) -> bytes:
    """A row's leaf: BLAKE3 of its entries' high halves ("high16") or of the whole row ("fp32"); row is n
    little-endian fp32."""
    if form == "fp32":
        return blake3.blake3(row).digest()
    return blake3.blake3(np.frombuffer(row, "<u2")[1::2].tobytes()).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return blake3.blake3(left + right, key=NODE_KEY).digest()


def _levels_root(level: list[bytes]) -> bytes:
    level = level + [bytes(32)] * (tree_width(len(level)) - len(level))
    while len(level) > 1:
        level = [node_hash(level[i], level[i + 1]) for i in range(0, len(level), 2)]
    return level[0]


def product_root(rows: Sequence[bytes], form: str = LEAF_FORM) -> bytes:
    """The root of one product's tree over its n rows (reference implementation; tests compare)."""
    return _levels_root([leaf_hash(r, form) for r in rows])


def commitment_root(product_roots: Sequence[bytes]) -> bytes:
    """The committed root over the first k products' roots."""
    return _levels_root(list(product_roots))


def check_proof(row: bytes, leaf: int, siblings: Sequence[bytes], root: bytes, n: int, products: int,
                form: str = LEAF_FORM) -> None:
    """Raises ChallengeError unless `row` is row leaf % n of product leaf // n under a commitment to
    `products` products of order n with this root (siblings: the product tree's, then the top tree's), its
    leaf hashed in `form` (LEAF_FORMS)."""
    t, i = divmod(leaf, n)
    depth_n, depth_k = tree_width(n).bit_length() - 1, tree_width(products).bit_length() - 1
    if not 0 <= t < products:
        raise ChallengeError("wrong_proof", f"row {leaf} is not in the {products} committed product(s)")
    if len(siblings) != depth_n + depth_k or any(len(s) != 32 for s in siblings):
        raise ChallengeError("wrong_proof", f"row {leaf}: expected {depth_n + depth_k} sibling hashes of 32 bytes")
    h = leaf_hash(row, form)
    for level, sibling in enumerate(siblings):
        k = i >> level if level < depth_n else t >> (level - depth_n)
        h = node_hash(sibling, h) if k & 1 else node_hash(h, sibling)
    if h != root:
        raise ChallengeError("wrong_proof", f"row {leaf} does not open the committed root")


def _draws_at(state: int, index: np.ndarray) -> np.ndarray:
    """Element `index` of challenge.c's draw_inputs from `state`: half index % 2 of splitmix64 draw index // 2."""
    idx = index.astype(np.uint64)
    k = (idx >> np.uint64(1)) + np.uint64(1)
    with np.errstate(over="ignore"):
        z = np.uint64(state) + k * np.uint64(GOLDEN)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    bits = np.where(idx & np.uint64(1), (z >> np.uint64(16)) & np.uint64(0xFFFFFF), z >> np.uint64(40))
    return ((bits.astype(np.int64) - (1 << 23)).astype(np.float32) * np.float32(1.0 / (1 << 23))).astype(np.float32)


def a_state(seed: int, t: int) -> int:
    return (product_seed(seed, t) ^ A_STREAM) & MASK64


def b_state(seed: int) -> int:
    return (seed ^ B_STREAM) & MASK64


def inputs_of(seed: int, n: int, t: int) -> tuple[np.ndarray, np.ndarray]:
    """A_t and B in full (tests compare them with the capsule's products)."""
    every = np.arange(n * n, dtype=np.uint64)
    return _draws_at(a_state(seed, t), every).reshape(n, n), _draws_at(b_state(seed), every).reshape(n, n)


def check_entries(seed: int, n: int, leaf: int, values: np.ndarray, columns: Sequence[int]) -> float:
    """Recomputes entries `columns` of leaf `leaf` (row leaf % n of product leaf // n) in float64; the worst
    error ratio, where 1.0 is the worst-case fp32 summation error n 2^-24 sum|a_ip b_pj| (the probe's own
    bound). Raises ChallengeError when an entry is off by more, or any value of the row is NaN/inf."""
    if not np.all(np.isfinite(values)):
        raise ChallengeError("wrong_rows", f"row {leaf} holds NaN or infinity")
    t, i = divmod(leaf, n)
    p = np.arange(n, dtype=np.uint64)
    a_row = _draws_at(a_state(seed, t), np.uint64(i * n) + p).astype(np.float64)
    cols = np.asarray(columns, dtype=np.uint64)
    b_cols = _draws_at(b_state(seed), p[:, None] * np.uint64(n) + cols[None, :]).astype(np.float64)
    return judge_entries(leaf, values, columns, a_row, b_cols)
