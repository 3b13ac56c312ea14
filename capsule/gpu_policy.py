"""One sizing and checking policy for the GPU probes, run by servers (host_runner/gpu.py, wgpu) and by
browsers (browser_node/gpu.js, WebGPU, through Pyodide): same matrix sizes from the adapter's limits, same
inputs from the seed, the same checked entries, the same repeat and sample counts, copy bandwidth on both.
Pure Python without numpy, so it runs unchanged in Pyodide.

Method (llama-bench/STREAM style): the matmul order doubles from N_START while one product takes less than
STEP_TARGET_MS and the next order still fits the adapter's max storage buffer and N_MAX; inputs are
uniform in (0, 1) (positive: a wrong or empty product cannot hide in cancellation); CHECKED_ENTRIES entries
of C, chosen from the run's seed, are compared with float64 dot products before any figure is reported; then samples of
`repeats` dispatches each are timed, at least MIN_SAMPLES, more while the budget lasts, at most
MAX_SAMPLES, and the figure is their median.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

N_START = 128
N_MAX = 2048  # 2 x 16 MiB fp32 inputs: within a phone's budget, and enough to fill desktop GPUs' caches
STEP_TARGET_MS = 60.0  # stop doubling once one product takes this long
REPEAT_TARGET_MS = 50.0  # dispatches per sample: about this much GPU time per sample
MAX_REPEATS = 20
MIN_SAMPLES, MAX_SAMPLES = 3, 15
CHECKED_ENTRIES = 64
TOLERANCE = {"f32": 1e-4, "f16": 0.05}  # max relative error of a checked entry (fp16 accumulates in fp16)
COPY_BYTES_MAX = 64 * 2**20  # copy bandwidth buffer: big enough to leave every cache
COPY_DISPATCHES = 5
COPY_SAMPLES = 5
WORKGROUP = 64  # the matmul shaders' tile: n is a multiple of it


@dataclass(frozen=True)
class CheckPlan:
    """Which entries of C = A B are checked, and against what tolerance."""

    entries: tuple[tuple[int, int], ...]
    tolerance: float

    def describe(self) -> str:
        return f"{len(self.entries)} entries chosen from the seed vs float64 dot products, relative error < " \
               f"{self.tolerance:g}"


def next_n(n: int, step_ms: float, elem_bytes: int, limit_bytes: int) -> int | None:
    """The next matmul order to try after one product of order n took step_ms, or None to keep n."""
    bigger = 2 * n
    if step_ms > STEP_TARGET_MS or bigger > N_MAX or bigger * bigger * elem_bytes > limit_bytes:
        return None
    return bigger


def repeats_for(step_ms: float) -> int:
    return max(1, min(MAX_REPEATS, int(REPEAT_TARGET_MS / max(step_ms, 0.1))))


def _stream(seed_hex: str, label: str) -> bytes:
    return hashlib.sha256(f"ce-bench/gpu/{label}/{seed_hex}".encode()).digest()


def check_plan(seed_hex: str, n: int, precision: str) -> CheckPlan:
    digest = _stream(seed_hex, f"check/{n}")
    entries: list[tuple[int, int]] = []
    counter = 0
    while len(entries) < CHECKED_ENTRIES:
        block = hashlib.sha256(digest + counter.to_bytes(8, "little")).digest()
        counter += 1
        for i, j in struct.iter_unpack("<II", block):
            entries.append((i % n, j % n))
    return CheckPlan(tuple(entries[:CHECKED_ENTRIES]), TOLERANCE[precision])


def copy_bytes(limit_bytes: int) -> int:
    """Bytes of the copy-bandwidth buffers: COPY_BYTES_MAX or what the adapter binds, in 16-byte elements."""
    return min(COPY_BYTES_MAX, limit_bytes) // 16 * 16
