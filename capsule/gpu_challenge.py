"""The GPU challenge's definition (issue 20, item 5), shared by the relay that checks it and the nodes that answer it
(host_runner/gpu_answer.py through wgpu; a browser through WebGPU). Pure stdlib, so it runs under Pyodide too.

Kind "gpu" is the first version of the sgemm challenge (capsule/challenge.py) run by the GPU probe's own WGSL matmul
(capsule/shaders/matmul_f32.wgsl, the shader behind a profile's gpus[].fp32_tflops):

- instance i has seed_i = capsule.challenge.instance_seed(beacon, nonce, i); its product t < reps is
  C_t = A_t B_t of order n, where A_t and B_t are *the sgemm challenge's own inputs* of (seed_i, t): splitmix64
  started at (seed_i + t golden) ^ "sgemm", A's n^2 draws then B's, uniform in [-1, 1) with 24 bits. The GPU
  draws them itself (capsule/shaders/challenge_gpu.wgsl, bit for bit), and the relay checks opened rows with
  capsule.challenge.check_entries unchanged;
- one Merkle root per instance over leaves t n + r = row r of C_t (little-endian fp32), capsule/challenge.py's
  tree: leaf sha256(0x00 || row), node sha256(0x01 || left || right), padded with zero leaves to a power of
  two. (The CPU challenge has since moved to BLAKE3 leaves, fresh A_t with one B per instance, and a tree per
  product so a node can commit what it finished by a deadline: capsule/cpu_challenge.py. The GPU keeps this
  form: it hashes on the GPU, where SHA-256 is no bottleneck. It commits what it finished by a deadline too: a
  commitment to its first k products is this tree over n k leaves, the same as upper_levels over k roots.)

What differs from the CPU challenge, and why:

- n is a power of two from the probe's own orders (128 ... 2048; the probe doubles from 128): each product's
  n leaves are then an aligned complete subtree, which the GPU hashes down to one root, so only 32 bytes per
  product leave the GPU. Measured here (Xeon, 1 core): hashing one n = 2048 product's 16 MiB takes 12.5 ms and
  drawing its inputs with numpy 560 ms, against an estimated ~1 ms for the product on a GPU doing ~17 TFLOP/s.
  The host joins the reps subtree roots (upper_levels) and builds proofs from both parts (proof).
- n is also capped by the adapter: A, B and C are each one storage binding of 4 n^2 bytes (lavapipe binds at
  most 128 MiB), and by the claim: one product at the claimed speed takes at most target / MIN_REPS (order_for).
  Why: the work is a whole number of products, and both ways of rounding cost an honest node at a roll call —
  more work than claim x target eats into the common deadline (1.25 x target: a node at 0.85 of its claim
  needs 1.18 x target for exact work), less caps what it shows (web/proof/rollcall.py shown: at most work / target).
  With at least MIN_REPS = 16 products, rounding to the nearest (reps_for) keeps the work within +-3.1% of
  claim x target. Real GPUs keep the probe's order (at a 1 s target n = 2048 needs a claim >= 0.28 TFLOP/s);
  a slow CPU adapter gets a smaller one (lavapipe at 2.7 GFLOP/s: n = 256 instead of the probe's 512).

Tolerance (why check_entries' bound holds on any GPU): an entry is sum_p a_ip b_pj over n terms, in fp32, in
whatever order the driver schedules, fused multiply-adds or not (WGSL guarantees neither). For any summation
order every term passes through at most n roundings (its product, at most n - 1 additions; an FMA merges two
into one), each of relative size u = 2^-24, so |computed - exact| <= ((1 + u)^n - 1) sum |a_ip b_pj|
(Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., sec. 3.1, which holds for every order) —
n u to first order, which is check_entries' bound; the exact factor exceeds n u by less than 1 + n u (1.00013 at
n = 2048), while real errors grow like sqrt(n) u and stay ~20x inside the bound (ERROR_RATIO_MEASURED), so
the first-order bound is what is checked, the CPU's and the GPU's alike. Subnormals, which WGSL lets a GPU flush
to zero, never occur: inputs are multiples of 2^-23, products multiples of 2^-46, and so is every partial sum
(the smallest non-zero magnitude, 2^-46, is far above fp32's 2^-126).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from capsule import gpu_policy
from capsule.seeding import MASK64, SGEMM_STREAM

KIND = "gpu"
GOLDEN = 0x9E3779B97F4A7C15       # capsule.challenge.GOLDEN: product t's seed is seed + t golden
TILE = gpu_policy.WORKGROUP       # matmul_f32.wgsl computes 64 x 64 tiles: n is a multiple of it
N_MIN = gpu_policy.N_START        # 128: the probe's smallest order
N_MAX = gpu_policy.N_MAX          # 2048: the probe's largest (and 3 x 16 MiB of buffers)
DEFAULT_N = 512                   # when the claim's evidence names no order
MIN_REPS = 16                     # one product is at most 1/16 of the target time at the claimed speed
MAX_REPS = 1 << 16                # 2^16 products of n = 2048: 1.1 PFLOP, 1,100 TFLOP/s for 1 s (> any GPU)
BINDING_DEFAULT = 128 << 20       # WebGPU's default maxStorageBufferBindingSize (B), lavapipe's too
# Worst error ratio (of the bound above) an honest answer showed, with margin: every entry of 16 rows of 4
# products each at n = 128 / 256 / 512 on lavapipe, 0.027 / 0.012 / 0.007 (2026-12-04); over 700 challenges at
# n = 128 (2 instances, the relay's own checks), median 0.014, max 0.0375, 2 of them above 0.03 (2026-12-05;
# 300 at n = 256: max 0.028). Tests hold answers to it, so a shader or driver whose error creeps toward the
# bound is noticed long before an honest node would fail.
ERROR_RATIO_MEASURED = 0.05


def is_order(n: object) -> bool:
    """Whether n is an order a GPU challenge can have: a power of two in [N_MIN, N_MAX]."""
    return type(n) is int and N_MIN <= n <= N_MAX and n & (n - 1) == 0


def max_order(binding_limit_bytes: int) -> int:
    """The largest order whose n x n fp32 matrix fits one storage binding of the adapter (at least N_MIN)."""
    n = N_MAX
    while n > N_MIN and 4 * n * n > binding_limit_bytes:
        n //= 2
    return n


def order_for(probe_n: object, claimed_tflops: float, target_s: float,
              binding_limit_bytes: int = BINDING_DEFAULT) -> int:
    """The challenge's order: the probe's own (a GPU's speed depends on n), within the adapter's binding limit,
    and small enough that one product at the claimed TFLOP/s takes at most target_s / MIN_REPS."""
    n = probe_n if is_order(probe_n) else DEFAULT_N
    assert isinstance(n, int)
    n = min(n, max_order(binding_limit_bytes))
    work = max(claimed_tflops, 0.0) * 1e12 * target_s / MIN_REPS  # flops one product may take
    while n > N_MIN and 2.0 * n**3 > work:
        n //= 2
    return n


def reps_for(claimed_tflops: float, instances: int, n: int, target_s: float) -> int:
    """Products per instance so the claim needs at least target_s (2 n^3 flops each at claimed / instances
    TFLOP/s), rounded to the nearest (see MIN_REPS), within [1, MAX_REPS]."""
    per_instance = max(claimed_tflops, 0.0) / max(instances, 1) * 1e12
    reps = round(per_instance * target_s / (2.0 * n**3))
    return int(max(1, min(reps, MAX_REPS)))


def flops(n: int, reps: int, instances: int) -> float:
    """The work of a challenge, in flops: 2 n^3 per product."""
    return 2.0 * n**3 * reps * instances


def product_state(seed: int, t: int) -> int:
    """The splitmix64 state product t's inputs are drawn from: capsule/challenge.py's, for the GPU's `gen`."""
    return (((seed + t * GOLDEN) & MASK64) ^ SGEMM_STREAM) & MASK64


# --- the Merkle tree, in parts (the same tree as capsule.challenge.merkle_root; tests compare them) ---------

def leaf_hash(row: bytes | memoryview) -> bytes:
    return hashlib.sha256(b"\x00" + row).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def zero_root(height: int) -> bytes:
    """The root of a subtree of 2^height padding leaves (zero bytes, not hashed: as merkle_root pads)."""
    h = bytes(32)
    for _ in range(height):
        h = node_hash(h, h)
    return h


def levels(bottom: Sequence[bytes]) -> list[list[bytes]]:
    """Every level of the tree over `bottom` (a power-of-two count of 32-byte nodes), bottom first."""
    if not bottom or len(bottom) & (len(bottom) - 1):
        raise ValueError(f"a level of {len(bottom)} nodes is not a power of two")
    out = [list(bottom)]
    while len(out[-1]) > 1:
        level = out[-1]
        out.append([node_hash(level[i], level[i + 1]) for i in range(0, len(level), 2)])
    return out


def upper_levels(product_roots: Sequence[bytes], n: int) -> list[list[bytes]]:
    """The tree above the products' subtree roots (each over n leaves), padded with zero subtrees to a power of
    two: its last level is the instance's root."""
    width = 1
    while width < len(product_roots):
        width *= 2
    height = n.bit_length() - 1
    return levels(list(product_roots) + [zero_root(height)] * (width - len(product_roots)))


def proof(sub: Sequence[Sequence[bytes]], upper: Sequence[Sequence[bytes]], t: int, row: int) -> list[bytes]:
    """The sibling hashes of leaf t n + row, bottom up: within product t's subtree (its levels `sub`, leaf
    digests first), then above it (upper_levels)."""
    out = [sub[k][(row >> k) ^ 1] for k in range(len(sub) - 1)]
    return out + [upper[k][(t >> k) ^ 1] for k in range(len(upper) - 1)]
