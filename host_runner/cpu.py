"""Whole-CPU measurement: capsule.wasm instances, one per core, started together under wasmtime-py.

wasm has no threads here, so parallelism comes from instances. wasmtime-py calls into wasm through
ctypes, which releases the GIL, so Python threads run the instances truly in parallel. Each thread
records when its instance started and ended; the report states how much the instances overlapped.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from host_runner.wasm import CapsuleError, CommandResult, default_engine, load_module, run_command


@dataclass(frozen=True)
class ConcurrentRun:
    reports: list[dict[str, Any]]
    wall_overlap: float  # (earliest end - latest start) / (latest end - earliest start)
    wall_s: float


def run_concurrent(wasm: Path, args: Sequence[str], instances: int, scratch: Path | None = None) -> ConcurrentRun:
    """Runs `instances` copies of the capsule at once; raises CapsuleError if any fails."""
    engine = default_engine()
    load_module(engine, wasm)  # compile once, before the barrier
    barrier = threading.Barrier(instances)
    results: list[CommandResult | BaseException | None] = [None] * instances
    spans: list[tuple[float, float]] = [(0.0, 0.0)] * instances

    def worker(i: int) -> None:
        try:
            barrier.wait()
            t0 = time.perf_counter()
            results[i] = run_command(wasm, args, scratch=scratch, engine=engine)
            spans[i] = (t0, time.perf_counter())
        except BaseException as exc:  # reported below, never lost in a thread
            results[i] = exc

    threads = [threading.Thread(target=worker, args=(i,), name=f"capsule-{i}") for i in range(instances)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    reports = []
    for i, r in enumerate(results):
        if isinstance(r, BaseException):
            raise CapsuleError(f"capsule instance {i} failed: {r}")
        assert r is not None
        reports.append(r.report())
    start, end = max(s for s, _ in spans), min(e for _, e in spans)
    total = max(e for _, e in spans) - min(s for s, _ in spans)
    return ConcurrentRun(reports, max(0.0, end - start) / total if total > 0 else 0.0, total)
