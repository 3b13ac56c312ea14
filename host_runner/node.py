"""One measurement of this server: plan from the beacon, whole-CPU phase, solo phase, GPUs, facts;
assembled into a signed NodeProfile."""

from __future__ import annotations

import hashlib
import importlib.metadata
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from capsule import CAPSULE_VERSION, plausibility
from capsule.aggregate import aggregate
from capsule.model import NodeProfile
from capsule.plan import CPU_PROBES, plan_from_beacon
from capsule.profile import build_profile
from capsule.scaling import kept_note
from capsule.signing import sign
from capsule.typed import parse
from common.keys import NodeKey
from host_runner import facts as facts_mod
from host_runner.cpu import llm_streams_run, measure_whole_cpu
from host_runner.gpu import probe_all
from host_runner.step_guard import AnswerWatch, StepGuard
from host_runner.wasm import CapsuleError, run_command

REF_MODEL = "ce-ref-15m-f32"
Progress = Callable[[str, float], None]  # (phase name, expected seconds) when a phase starts
UNSIGNED = "A" * 86  # a placeholder of a signature's shape (64 bytes, base64url), never published


@dataclass
class RunOptions:
    capsule: Path
    phase_budget_ms: int = 3000
    instances: int | None = None       # the core count the instance search starts from (default: psutil's)
    # the instance count the node's answers use: a re-measurement its roll calls prompted keeps it unless
    # fewer instances do more (capsule/scaling.py); None: the search alone decides
    keep_instances: int | None = None
    # the live session, when measuring again: steps its answers overlapped run again (host_runner/step_guard.py)
    answers: AnswerWatch | None = None
    scratch: Path | None = None        # default: a temporary directory under the current one
    gpu: bool = True
    jitter: bool = True
    beacon_source: str = "local"
    name: str | None = None            # the operator's name for the node (--name), signed in the profile


@dataclass
class RunResult:
    profile: dict[str, Any]
    gpu_notes: list[str]
    timings_s: dict[str, float] = field(default_factory=dict)


def capsule_ref(path: Path) -> dict[str, str]:
    return {"version": CAPSULE_VERSION, "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}


def measure(key: NodeKey, beacon: dict[str, Any], opts: RunOptions, progress: Progress | None = None) -> RunResult:
    t_start = time.perf_counter()
    timings: dict[str, float] = {}
    step = progress or (lambda name, expected: None)
    node_id = key.node_id
    plan = plan_from_beacon(beacon["value"], node_id, CPU_PROBES)
    if opts.jitter and plan.start_jitter_ms:
        step(f"start jitter from the beacon ({plan.start_jitter_ms} ms)", plan.start_jitter_ms / 1000)
        time.sleep(plan.start_jitter_ms / 1000)
    scratch_parent = opts.scratch or Path.cwd()
    info = facts_mod.gather(scratch_parent)
    reported = opts.instances or info.cores
    budget = str(opts.phase_budget_ms)
    t = time.perf_counter()
    guard = StepGuard(opts.answers)
    whole = measure_whole_cpu(
        opts.capsule, plan.seed_hex, plan.order, reported, opts.phase_budget_ms,
        step=lambda k, final: step(f"whole CPU: {k} instances (sgemm, STREAM triad)", opts.phase_budget_ms / 1000)
        if final else step(f"whole CPU: how many instances pay? trying {k} (the platform says {reported})", 1.0),
        available_mb=info.available_mb, keep=opts.keep_instances, guard=guard)
    conc = whole.run
    timings["concurrent_s"] = time.perf_counter() - t
    step("one core alone (sgemm, llm, disk)", opts.phase_budget_ms / 1000 * 1.4)
    t = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ce-bench-scratch-", dir=scratch_parent) as scratch:
        solo = guard.run(lambda: run_command(opts.capsule, ["--probes", "sgemm,llm,disk", "--seed", plan.seed_hex,
                                                            "--budget-ms", budget, "--soft-budget"],
                                             scratch=Path(scratch)).probe_report("the solo capsule run"))
    timings["solo_s"] = time.perf_counter() - t
    streams = None
    if whole.instances > 1:
        # tokens/s is aggregate decode throughput: as many streams at once as SGEMM instances paid (each its
        # own prompt); capsule/aggregate.py keeps their sum only if it pays over one stream alone
        step(f"reference model: {whole.instances} decode streams at once", opts.phase_budget_ms / 1000 * 1.2)
        t = time.perf_counter()
        streams = guard.run(lambda: llm_streams_run(opts.capsule, plan.seed_hex, whole.instances,
                                                    opts.phase_budget_ms)).reports
        timings["llm_streams_s"] = time.perf_counter() - t
    gpus: list[dict[str, Any]] = []
    notes: list[str] = []
    gpu_evidence: list[dict[str, Any]] = []
    if opts.gpu:
        step("GPUs (WebGPU shaders through wgpu)", 3.0)
        t = time.perf_counter()
        results, notes = probe_all(plan.seed_hex)
        gpus = [g.profile_entry() for g in results]
        gpu_evidence = [g.evidence for g in results]
        timings["gpu_s"] = time.perf_counter() - t
    else:
        notes = ["GPU probes disabled (--no-gpu)"]
    figures = aggregate(conc.reports, solo, whole.curve, streams)
    figures.evidence["cpu"]["reported_cores"] = {"value": reported, "source": "--instances" if opts.instances
                                                 else "psutil.cpu_count(logical=False)", "trusted": False,
                                                 "note": "cpu.cores is the instance count the measurement chose"}
    figures.evidence["cpu"]["steps_run_again"] = guard.run_again if opts.answers is not None else None
    if opts.keep_instances is not None:
        figures.evidence["cpu"]["instances_kept"] = kept_note(opts.keep_instances, whole.instances)
    figures.evidence["cpu"]["mem_bw_gbps"]["pages"] = facts_mod.huge_pages_note()
    figures.evidence["cpu"]["mem_bw_gbps"]["array_sizing"] = whole.stream_sizing
    profile = build_profile(
        node_id=node_id, measured_at=int(time.time()), beacon=beacon, capsule=capsule_ref(opts.capsule),
        cores=whole.instances, threads=info.threads,
        memory={"total_mb": info.total_mb, "available_mb": info.available_mb},
        storage_total_gb=info.storage_total_gb, storage_free_gb=info.storage_free_gb, figures=figures,
        gpus=gpus,
        runtime={"os": info.os, "arch": info.arch, "kind": "server", "docker": info.docker, "gvisor": info.gvisor,
                 "wasm": True, "engine": f"wasmtime-py {importlib.metadata.version('wasmtime')}"},
        ref_model=REF_MODEL, name=opts.name,
        evidence_extra={
            "gpus": gpu_evidence, "gpu_notes": notes,
            "plan": {"seed": plan.seed_hex, "order": list(plan.order), "start_jitter_ms": plan.start_jitter_ms,
                     "beacon_source": opts.beacon_source,
                     "method": "sha256('ce-bench/v1/seed' || beacon value || node_id) seeds inputs, order, jitter"},
            "storage_totals": "psutil.disk_usage of the scratch directory's filesystem (GB = 1e9 B)",
            "timing": {
                "concurrent_phase_s": round(timings["concurrent_s"], 3),
                "concurrent_capsule_wall_s": round(max(r.wall_ms or 0.0 for r in conc.reports) / 1000, 3),
                "solo_phase_s": round(timings["solo_s"], 3),
                "solo_capsule_wall_s": round((solo.wall_ms or 0.0) / 1000, 3),
                "gpu_s": round(timings.get("gpu_s", 0.0), 3),
                "llm_streams_s": round(timings.get("llm_streams_s", 0.0), 3),
            },
        },
    )
    timings["total_s"] = time.perf_counter() - t_start
    # the relay's bounds, checked before the key signs anything (the schema wants a signature: a placeholder of
    # its shape stands in)
    beyond = plausibility.check(parse(NodeProfile, {**profile, "sig": UNSIGNED}))
    if beyond is not None:
        raise CapsuleError(f"refusing to publish a figure beyond physics: {beyond.message()} (a measurement "
                           "bug, not a fast machine; please report it with the capsule's output)")
    return RunResult(sign("NodeProfile", profile, key), notes, timings)
