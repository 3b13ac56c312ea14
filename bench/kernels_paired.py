"""The capsule's kernels against the same C built natively, paired call by call.

    .venv/bin/python bench/kernels_paired.py [--seconds 8]

Method. One process, one thread: the capsule's reactor (build/capsule-reactor.wasm under wasmtime-py)
and the same kernel sources built natively as a shared library (the system C compiler, the capsule's
flags without -msimd128: 128-bit SSE/NEON vectors) are called in alternation, ABBA order, on arrays of the
same size and layout (the capsule's wasm memory is advised for huge pages, as numpy's arrays are:
common/reactor.py); for SGEMM numpy's BLAS (one thread, named through threadpoolctl) is a third arm. Every pair
of calls is a few milliseconds apart, so both sides see the same moment of this shared machine: the
figure is the median of per-pair ratios, with its interquartile range. (Whole probe runs a few seconds
apart, as bench/capsule_vs_native.py does, differ by 20-40% on these VMs: co-tenants come and go on a
scale of seconds.) Each kernel's output is checked against numpy before a rate counts.

Prints, per kernel: the capsule's median rate, the reference's, and the median paired ratio with its
spread, beside the issue-9 targets (triad >= 0.95x same C; SGEMM >= 0.85x same C, >= 0.30x BLAS).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import build  # noqa: E402
from common.reactor import Reactor  # noqa: E402

STREAM_MIB = 64       # per array, as the capsule's stream probe
GAP_BYTES = (2 << 20) + 4096 + 64  # between the arrays, as capsule/kernels/probe_stream.c
SGEMM_N = 1024        # the probe's default order
TRIAD_BYTES = 24      # STREAM counting: two loads and one store of a double per element
SCALAR = 3.0


def native_library(tmp: Path) -> ctypes.CDLL:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        sys.exit("bench: no system C compiler for the native reference")
    out = tmp / "libcekernels.so"
    flags = [f for f in build.COMMON_FLAGS if f not in ("-msimd128", "-s")]
    sources = [str(build.KERNELS / s) for s in ("stream.c", "sgemm.c")]
    subprocess.run([cc, *flags, "-fPIC", "-shared", *sources, "-o", str(out)], check=True)
    lib = ctypes.CDLL(str(out))
    p = ctypes.c_void_p
    lib.ce_stream_triad.argtypes = [ctypes.c_size_t, p, p, p, ctypes.c_double]
    lib.ce_stream_triad.restype = None
    lib.ce_sgemm.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, p, ctypes.c_int, p, ctypes.c_int, p,
                             ctypes.c_int]
    lib.ce_sgemm.restype = ctypes.c_int
    return lib


def cpu_model() -> str:
    """The CPU as /proc/cpuinfo names it, with family and model (VMs often say only "AMD EPYC")."""
    info: dict[str, str] = {}
    path = Path("/proc/cpuinfo")
    for line in path.read_text().splitlines() if path.exists() else []:
        key, _, value = line.partition(":")
        info.setdefault(key.strip(), value.strip())
    if "model name" not in info:
        return platform.processor() or "unknown CPU"
    return f"{info['model name']} (family {info.get('cpu family', '?')}, model {info.get('model', '?')})"


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter_ns()
    fn()
    return (time.perf_counter_ns() - t0) / 1e9


def paired(arms: dict[str, Callable[[], object]], work: float, seconds: float) -> dict[str, list[float]]:
    """Rates (work / s) of each arm, called in alternation (ABBA...) until `seconds` have passed; the
    first round is a warm-up."""
    names = list(arms)
    rates: dict[str, list[float]] = {n: [] for n in names}
    end = time.perf_counter() + seconds
    rnd = 0
    while time.perf_counter() < end or rnd < 4:
        order = names if rnd % 2 == 0 else names[::-1]
        for name in order:
            dt = timed(arms[name])
            if rnd > 0:
                rates[name].append(work / dt)
        rnd += 1
    return rates


def ratio_line(label: str, ours: list[float], ref: list[float], target: float | None, unit: str) -> str:
    ratios = sorted(a / b for a, b in zip(ours, ref, strict=True))
    q1, med, q3 = (ratios[len(ratios) // 4], statistics.median(ratios), ratios[3 * len(ratios) // 4])
    verdict = "" if target is None else ("met" if med >= target else "MISSED")
    aim = f">= {target:.2f}" if target is not None else ""
    return (f"{label:34s} {statistics.median(ours):8.2f} {statistics.median(ref):8.2f} {unit:7s} "
            f"{med:6.3f} [{q1:.3f}-{q3:.3f}] n={len(ratios):<4d} {aim} {verdict}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=8.0, help="time per kernel (default 8)")
    args = parser.parse_args()
    reactor_wasm = ROOT / "build" / "capsule-reactor.wasm"
    if not reactor_wasm.exists():
        sys.exit("bench: build/capsule-reactor.wasm is missing; run `.venv/bin/python build.py` first")
    try:
        from threadpoolctl import threadpool_info, threadpool_limits
    except ImportError:
        sys.exit("bench: threadpoolctl is missing (pip install -e '.[test]'): the BLAS kernel must be named")

    with tempfile.TemporaryDirectory() as tmp:
        lib = native_library(Path(tmp))
    wasm = Reactor(reactor_wasm)
    lines = []

    # STREAM triad: a = b + 3c over 64 MiB arrays, one whole pass per call. Both sides lay the arrays out
    # as the capsule's stream probe does (one block, GAP_BYTES between arrays): where arrays sit decides
    # this kernel's speed as much as its code does (see probe_stream.c)
    n = STREAM_MIB * 1024 * 1024 // 8
    gap = GAP_BYTES // 8
    block = np.concatenate([np.full(n, 1.0), np.zeros(gap), np.full(n, 2.0), np.zeros(gap), np.full(n, 1.0)])
    wblock = wasm.put(block)
    wa, wb, wc = (wblock + 8 * i * (n + gap) for i in range(3))
    na, nb, nc = (block.ctypes.data + 8 * i * (n + gap) for i in range(3))
    rates = paired({
        "wasm": lambda: wasm.call("ce_stream_triad", n, wa, wb, wc, SCALAR),
        "native": lambda: lib.ce_stream_triad(n, na, nb, nc, SCALAR),
    }, TRIAD_BYTES * n / 1e9, args.seconds)
    for got in (wasm.get(wa, np.float64, (n,)), block[:n]):
        if not np.all(got == 5.0):
            sys.exit("bench: a triad result is wrong; no figure reported")
    wasm.call("ce_free", wblock)
    del block
    lines.append(ratio_line("STREAM triad vs same C native", rates["wasm"], rates["native"], 0.95, "GB/s"))

    # SGEMM n=1024: C = A @ B, fp32
    rng = np.random.default_rng(1)
    a = rng.standard_normal((SGEMM_N, SGEMM_N), dtype=np.float32)
    b = rng.standard_normal((SGEMM_N, SGEMM_N), dtype=np.float32)
    pa, pb, pc = wasm.put(a), wasm.put(b), wasm.put(np.zeros_like(a))
    nc32 = np.zeros_like(a)
    s = SGEMM_N
    with threadpool_limits(limits=1, user_api="blas"):
        blas = [(i.get("internal_api"), i.get("architecture"), i.get("num_threads"))
                for i in threadpool_info() if i.get("user_api") == "blas"]
        rates = paired({
            "wasm": lambda: wasm.call("ce_sgemm", s, s, s, pa, s, pb, s, pc, s),
            "native": lambda: lib.ce_sgemm(s, s, s, a.ctypes.data, s, b.ctypes.data, s, nc32.ctypes.data, s),
            "blas": lambda: a @ b,
        }, 2.0 * s**3 / 1e9, args.seconds)
    want = a.astype(np.float64) @ b.astype(np.float64)
    bound = 1e-5 * np.sqrt(s) * np.abs(a).max() * np.abs(b).max() * s ** 0.5
    for got in (wasm.get(pc, np.float32, (s, s)), nc32):
        if not np.abs(got - want).max() <= bound:
            sys.exit("bench: an SGEMM product is wrong; no figure reported")
    lines.append(ratio_line("SGEMM n=1024 vs same C native", rates["wasm"], rates["native"], 0.85, "GFLOP/s"))
    lines.append(ratio_line(f"SGEMM n=1024 vs BLAS {blas}", rates["wasm"], rates["blas"], 0.30, "GFLOP/s"))

    print(f"{cpu_model()}, {len(os.sched_getaffinity(0))} CPUs; {time.strftime('%Y-%m-%d')}")
    print(f"{'kernel':34s} {'capsule':>8s} {'ref':>8s} {'unit':7s} {'ratio':>6s} [IQR of pair ratios]")
    for line in lines:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
