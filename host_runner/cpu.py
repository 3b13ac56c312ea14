"""Whole-CPU measurement: capsule.wasm instances started together under wasmtime-py.

wasm has no threads here, so parallelism comes from instances. wasmtime-py calls into wasm through
ctypes, which releases the GIL, so Python threads run the instances truly in parallel. How many
instances is measured, not read from psutil (capsule/scaling.py): short SGEMM steps with 1, 2, 4, ...
instances (the reported core count as one step) until the aggregate stops rising, then the whole-CPU run
with the last count that paid. Figures are work over the instances' common window (capsule/aggregate.py).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from capsule.plan import instance_seed
from capsule.probe_report import ProbeReport, Probes, Work
from capsule.scaling import DEFAULT_SCALING, ScalingConfig, chosen_instances, next_instances, window_rate, work_spans
from host_runner import stream_size
from host_runner.step_guard import StepGuard
from host_runner.wasm import CapsuleError, CommandResult, default_engine, load_module, parse_capsule_report, run_command

# One scaling step: SGEMM only, at least 3 products per instance after the warm-up.
STEP_BUDGET_MS = 600


@dataclass(frozen=True)
class ConcurrentRun:
    reports: list[ProbeReport]
    wall_s: float


@dataclass(frozen=True)
class WholeCpu:
    run: ConcurrentRun
    curve: list[dict[str, Any]]  # [{"instances": k, "gflops_fp32": aggregate or None}]
    instances: int
    stream_sizing: dict[str, Any] | None = None  # how the STREAM arrays were sized (host_runner/stream_size.py)


def run_concurrent(wasm: Path, args_for: Callable[[int], Sequence[str]], instances: int,
                   scratch: Path | None = None) -> ConcurrentRun:
    """Runs `instances` copies of the capsule at once, instance i with args_for(i); raises CapsuleError
    if any fails."""
    engine = default_engine()
    load_module(engine, wasm)  # compile once, before the barrier
    barrier = threading.Barrier(instances)
    results: list[CommandResult | BaseException | None] = [None] * instances
    spans: list[tuple[float, float]] = [(0.0, 0.0)] * instances

    def worker(i: int) -> None:
        try:
            barrier.wait()
            t0 = time.perf_counter()
            results[i] = run_command(wasm, args_for(i), scratch=scratch, engine=engine)
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
        if r is None:
            raise CapsuleError(f"capsule instance {i} returned nothing")
        reports.append(parse_capsule_report(r.report(), f"capsule instance {i}"))
    # how long the instances overlapped is judged from their work spans (capsule/scaling.py), not here
    return ConcurrentRun(reports, max(e for _, e in spans) - min(s for s, _ in spans))


def _shifted(work: Work, shift_ms: float) -> Work:
    return replace(work, spans_ms=[[s + shift_ms, e + shift_ms, w] for s, e, w in work.spans_ms])


def _merged(first: ProbeReport, second: ProbeReport) -> ProbeReport:
    """One instance's reports of two runs as one: the second's probes join the first's, their work spans
    moved onto the first report's clock (each WASI context has its own monotonic zero)."""
    shift = second.clock.anchor_unix_ms - first.clock.anchor_unix_ms
    mine, extra = first.probes, second.probes
    probes = Probes(
        sgemm=replace(extra.sgemm, work=_shifted(extra.sgemm.work, shift)) if extra.sgemm else mine.sgemm,
        stream=replace(extra.stream, work=_shifted(extra.stream.work, shift)) if extra.stream else mine.stream,
        llm=extra.llm or mine.llm, disk=extra.disk or mine.disk)
    return replace(first, probes=probes, probe_order=[*first.probe_order, *second.probe_order])


def _probe_args(seed_hex: str, probes: str, budget_ms: int, sgemm_n: int,
                stream_mib: int | None = None) -> Callable[[int], list[str]]:
    size = ["--stream-mib", str(stream_mib)] if stream_mib is not None else []
    return lambda i: ["--probes", probes, "--seed", instance_seed(seed_hex, i), "--budget-ms", str(budget_ms),
                      "--soft-budget", "--sgemm-n", str(sgemm_n), "--stream-triad-only", *size]


def schedulable_cpus() -> int:
    """The CPUs the OS lets this process run on (its affinity: a container's cpuset, taskset), else the count
    of CPUs. More instances than these never run at once: beyond them they only take time slices from other
    processes, which the search must not count as cores."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def find_instances(wasm: Path, seed_hex: str, reported: int, sgemm_n: int = 1024,
                   config: ScalingConfig = DEFAULT_SCALING, step: Callable[[int, bool], None] | None = None,
                   keep: int | None = None, guard: StepGuard | None = None
                   ) -> tuple[list[tuple[int, float | None]], int]:
    """The instance search (capsule/scaling.py) with short SGEMM steps: (curve, chosen count). `reported` is
    the platform's core count (or the operator's --instances): a starting point, not a fact. On a server the
    search stops at the schedulable CPUs (a browser cannot know them: WebKit says 4 on 2 cores): beside two busy
    processes on 2 cores, a noisy step from 2 to 4 instances once read as a gain (fresh-clone run #31).
    keep: the count the node's answers use, for a re-measurement its roll calls prompted (capsule/scaling.py)."""
    config = replace(config, max_instances=min(config.max_instances, schedulable_cpus()))
    curve: list[tuple[int, float | None]] = []
    while (k := next_instances(curve, max(1, reported), config, keep)) is not None:
        if step:
            step(k, False)
        trial = (guard or StepGuard()).run(
            lambda: run_concurrent(wasm, _probe_args(seed_hex, "sgemm", STEP_BUDGET_MS, sgemm_n), k))
        rate = window_rate([work_spans(r, "sgemm") for r in trial.reports]).rate
        curve.append((k, None if rate is None else rate / 1e9))
    return curve, chosen_instances(curve, config, max(1, reported), keep)


def whole_cpu_run(wasm: Path, seed_hex: str, order: Sequence[str], instances: int, probe_budget_ms: int,
                  sgemm_n: int = 1024, stream_mib: int | None = None, guard: StepGuard | None = None) -> ConcurrentRun:
    """The whole-CPU probes (sgemm and triad-only stream, in `order`) on `instances` instances at once, one
    report per instance with both probes merged. stream_mib: the STREAM array size (the capsule's default
    when None)."""
    # each probe starts behind its own barrier: with more instances than cores, instances finish SGEMM at
    # different times, and a shared run could leave their STREAM passes without a common window
    step = guard or StepGuard()

    def probe_run(probe: str) -> Callable[[], ConcurrentRun]:
        return lambda: run_concurrent(wasm, _probe_args(seed_hex, probe, probe_budget_ms, sgemm_n, stream_mib),
                                      instances)

    runs = [step.run(probe_run(p)) for p in order if p in ("sgemm", "stream")]
    run = runs[0]
    for extra in runs[1:]:
        run = ConcurrentRun([_merged(a, b) for a, b in zip(run.reports, extra.reports, strict=True)],
                            run.wall_s + extra.wall_s)
    return run


def measure_whole_cpu(wasm: Path, seed_hex: str, order: Sequence[str], reported: int, budget_ms: int,
                      sgemm_n: int = 1024, config: ScalingConfig = DEFAULT_SCALING,
                      step: Callable[[int, bool], None] | None = None,
                      available_mb: float | None = None, keep: int | None = None,
                      guard: StepGuard | None = None) -> WholeCpu:
    """Finds the instance count by measurement, then runs the whole-CPU probes with it (budget_ms in all,
    shared by the probes), STREAM's arrays sized by its rule against this machine's last-level cache."""
    curve, chosen = find_instances(wasm, seed_hex, reported, sgemm_n, config, step, keep, guard)
    if step:
        step(chosen, True)
    stream_mib, sizing = stream_size.array_mib(chosen, stream_size.last_level_cache(), available_mb)
    run = whole_cpu_run(wasm, seed_hex, order, chosen, budget_ms // 2, sgemm_n, stream_mib, guard)
    return WholeCpu(run, [{"instances": k, "gflops_fp32": None if r is None else round(r, 3)} for k, r in curve],
                    chosen, {**sizing, "array_mib": stream_mib})


def llm_streams_run(wasm: Path, seed_hex: str, streams: int, budget_ms: int) -> ConcurrentRun:
    """The reference model's decode on `streams` instances at once (tg128 each, instance i on its own seed:
    its own prompt), for aggregate decode throughput (capsule/aggregate.py llm_streams)."""
    return run_concurrent(wasm, lambda i: ["--probes", "llm", "--seed", instance_seed(seed_hex, i),
                                           "--budget-ms", str(budget_ms), "--soft-budget"], streams)
