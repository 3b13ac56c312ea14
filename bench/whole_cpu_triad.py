"""Whole-CPU memory bandwidth: ce-bench's figure against the same C run natively, one process per core.

    .venv/bin/python bench/whole_cpu_triad.py [--rounds 5] [--budget-ms 2000]

Method. Both sides run STREAM triad-only passes (64 MiB arrays) in as many copies as the machine has
CPUs, started together, and both figures are computed the same way: bytes moved by all copies over the
window in which every copy was running (capsule/scaling.py window_rate, from each ProbeReport's work
spans). The capsule side is what `ce-bench run` does (capsule.wasm instances on threads under
wasmtime-py, host_runner/cpu.py run_concurrent); the native side is the capsule's C built with the
system compiler (128-bit vectors), one process per CPU. Rounds alternate (capsule, native, ...) and the
figure is the median of per-round ratios, since this machine's bandwidth drifts between rounds.
Target (issue 9): >= 0.9x.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import build  # noqa: E402
from bench.capsule_vs_native import native_binary  # noqa: E402
from bench.kernels_paired import cpu_model  # noqa: E402
from capsule.plan import instance_seed  # noqa: E402
from capsule.probe_report import parse_report  # noqa: E402
from capsule.scaling import window_rate, work_spans  # noqa: E402
from host_runner.cpu import run_concurrent  # noqa: E402

SEED = "be7c40" * 10 + "be7c"


def probe_args(i: int, budget_ms: int) -> list[str]:
    return ["--probes", "stream", "--stream-triad-only", "--seed", instance_seed(SEED, i), "--budget-ms",
            str(budget_ms), "--soft-budget"]


def native_round(binary: Path, copies: int, budget_ms: int) -> float:
    procs = [subprocess.Popen([str(binary), *probe_args(i, budget_ms)], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True)
             for i in range(copies)]
    reports = [parse_report(json.loads(p.communicate()[0])) for p in procs]
    if any(p.returncode != 0 for p in procs):
        sys.exit("bench: a native copy failed")
    rate = window_rate([work_spans(r, "stream") for r in reports]).rate
    if rate is None:
        sys.exit("bench: the native copies never ran at the same time")
    return rate / 1e9


def capsule_round(copies: int, budget_ms: int) -> float:
    run = run_concurrent(build.BUILD / "capsule.wasm", lambda i: probe_args(i, budget_ms), copies)
    rate = window_rate([work_spans(r, "stream") for r in run.reports]).rate
    if rate is None:
        sys.exit("bench: the capsule instances never ran at the same time")
    return rate / 1e9


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds (default 5)")
    parser.add_argument("--budget-ms", type=int, default=2000, help="per copy and round (default 2000)")
    args = parser.parse_args()
    build.build()
    copies = len(os.sched_getaffinity(0))
    capsule: list[float] = []
    native: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        binary = native_binary(Path(tmp))
        for r in range(args.rounds):
            capsule.append(capsule_round(copies, args.budget_ms))
            native.append(native_round(binary, copies, args.budget_ms))
            print(f"round {r + 1}/{args.rounds}: capsule {capsule[-1]:.2f}, native {native[-1]:.2f} GB/s",
                  file=sys.stderr)
    ratios = [c / n for c, n in zip(capsule, native, strict=True)]
    ratio = statistics.median(ratios)
    print(f"{cpu_model()}, {copies} CPUs; {time.strftime('%Y-%m-%d')}")
    print(f"whole-CPU STREAM triad, {copies} copies: capsule (ce-bench, wasmtime-py) {statistics.median(capsule):.2f} "
          f"GB/s, same C native one process per CPU {statistics.median(native):.2f} GB/s")
    print(f"median per-round ratio {ratio:.3f} (rounds: {', '.join(f'{x:.3f}' for x in ratios)}); target >= 0.90 "
          + ("met" if ratio >= 0.9 else "MISSED"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
