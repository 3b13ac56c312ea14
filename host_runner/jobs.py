"""CE jobs: the capsule run the way the CE network dispatches it.

A manifest names the capsule by sha256 (a mismatch is refused before anything runs), the probes, and
limits: wasm memory, fuel (wasm instructions, roughly) and a wall-clock deadline enforced by epoch
interruption, so a job can never hang its host. The result is a signed NodeProfile (figures from the
single instance the job ran, as the evidence says) and a signed JobReceipt that names the manifest by
the sha256 of its canonical bytes.

Manifest v1:
    {"v": 1, "capsule": {"sha256": HEX64}, "probes": ["sgemm", "stream", "llm"], "budget_ms": 3000,
     "limits": {"memory_mib": 1024, "wall_ms": 60000, "fuel": null},
     "beacon": {"relay": NODE_ID, "round": N, "value": HEX} (optional; a local one otherwise)}
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import wasmtime

from capsule.aggregate import aggregate
from capsule.canonical import canonical_bytes
from capsule.model import BeaconRef
from capsule.plan import ALL_PROBES, plan_from_beacon
from capsule.probe_report import ProbeReport
from capsule.profile import build_profile
from capsule.signing import Signer, node_id, sign
from capsule.typed import ValidationError, parse, spec
from common.keys import NodeKey
from host_runner import facts as facts_mod
from host_runner.node import REF_MODEL, capsule_ref
from host_runner.relay_client import local_beacon
from host_runner.wasm import CapsuleError, Limits, limited_engine, run_command


class JobError(Exception):
    """The manifest cannot be run (unreadable, invalid, wrong capsule); nothing was executed."""


def _probes(value: list[str]) -> None:
    if not value:
        raise ValueError("expected at least one probe")
    unknown = [p for p in value if p not in ALL_PROBES]
    if unknown:
        raise ValueError(f"unknown probe {unknown[0]!r} (expected {', '.join(ALL_PROBES)})")
    if len(set(value)) != len(value):
        raise ValueError("a probe is listed twice")


@dataclass(frozen=True)
class CapsuleSpec:
    sha256: str = spec(pattern="[0-9a-f]{64}")


@dataclass(frozen=True)
class JobLimits:
    memory_mib: int = spec(minimum=16, maximum=4096, unit="MiB")
    wall_ms: int = spec(minimum=1, maximum=3_600_000, unit="ms")
    fuel: int | None = spec(minimum=1, maximum=2**62, default=None)


@dataclass(frozen=True)
class JobManifest:
    v: int = spec(minimum=1, maximum=1)
    capsule: CapsuleSpec = spec()
    probes: list[str] = spec(check=None)
    budget_ms: int = spec(minimum=100, maximum=600_000)
    limits: JobLimits = spec()
    beacon: BeaconRef | None = spec(default=None)


@dataclass(frozen=True)
class JobResult:
    profile: dict[str, Any] | None
    receipt: dict[str, Any]


def load_manifest(path: Path) -> tuple[JobManifest, dict[str, Any]]:
    try:
        raw = json.loads(path.read_text())
    except OSError as exc:
        raise JobError(f"cannot read the manifest {path}: {exc.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise JobError(f"the manifest {path} is not JSON: {exc}") from None
    except RecursionError:  # thousands of nested arrays: a bad file, not a traceback
        raise JobError(f"the manifest {path} is nested too deeply to be a manifest") from None
    try:
        manifest = parse(JobManifest, raw)
        _probes(manifest.probes)
    except ValidationError as exc:
        raise JobError(f"invalid manifest {path}: {exc}") from None
    except ValueError as exc:
        raise JobError(f"invalid manifest {path}: $.probes: {exc}") from None
    return manifest, raw


@dataclass(frozen=True)
class CapsuleRun:
    profile: dict[str, Any] | None  # the signed NodeProfile of the run (None when it failed)
    error: str | None
    wall_ms: float


def run_capsule(capsule_path: Path, key: Signer, beacon: dict[str, Any], probes: list[str], budget_ms: int,
                memory_mib: int, wall_ms: int, fuel: int | None) -> CapsuleRun:
    """One capsule instance under limits, its figures signed as a NodeProfile: `ce-bench job run` and a capsule
    task dispatched by a relay (host_runner/task_worker.py)."""
    plan = plan_from_beacon(beacon["value"], node_id(key), tuple(probes))
    engine = limited_engine()
    t0 = time.perf_counter()
    deadline = time.monotonic() + wall_ms / 1000
    error: str | None = None
    report: ProbeReport | None = None
    try:
        scratch = Path.cwd()
        result = run_command(capsule_path, ["--probes", ",".join(plan.order), "--seed", plan.seed_hex,
                                            "--budget-ms", str(budget_ms), "--soft-budget"],
                             scratch=scratch if "disk" in probes else None, engine=engine,
                             limits=Limits(memory_bytes=memory_mib << 20, fuel=fuel, deadline=deadline))
        report = result.probe_report()
    except wasmtime.Trap as trap:
        elapsed_ms = (time.perf_counter() - t0) * 1000
        if trap.trap_code == wasmtime.TrapCode.INTERRUPT:
            error = f"the job exceeded its wall-clock limit of {wall_ms} ms (stopped after {elapsed_ms:.0f} ms)"
        elif trap.trap_code == wasmtime.TrapCode.OUT_OF_FUEL:
            error = f"the job ran out of fuel ({fuel} units)"
        else:
            error = f"the capsule trapped: {trap.message.splitlines()[0]}"
    except CapsuleError as exc:
        error = f"{exc} (memory limit {memory_mib} MiB)"
    except wasmtime.WasmtimeError as exc:  # instantiation: e.g. a memory limit below the capsule's own minimum
        error = f"the capsule cannot start: {str(exc).splitlines()[0]} (memory limit {memory_mib} MiB)"
    took_ms = (time.perf_counter() - t0) * 1000
    profile = None
    if report is not None:
        info = facts_mod.gather(Path.cwd())
        figures = aggregate([report], report)
        profile = sign("NodeProfile", build_profile(
            node_id=node_id(key), measured_at=int(time.time()), beacon=beacon, capsule=capsule_ref(capsule_path),
            cores=info.cores, threads=info.threads,
            memory={"total_mb": info.total_mb, "available_mb": info.available_mb},
            storage_total_gb=info.storage_total_gb, storage_free_gb=info.storage_free_gb, figures=figures, gpus=[],
            runtime={"os": info.os, "arch": info.arch, "kind": "server", "docker": info.docker,
                     "gvisor": info.gvisor, "wasm": True, "engine": "wasmtime-py (CE job)"},
            ref_model=REF_MODEL,
            evidence_extra={"job": {"instances": 1, "note": "a CE job runs one capsule instance: CPU figures "
                                    "are one core's, not the whole machine's", "probes": list(plan.order)},
                            "gpu_notes": ["CE wasm job: no GPU access"]},
        ), key)
    return CapsuleRun(profile, error, took_ms)


def run_job(manifest_path: Path, capsule_path: Path, key: NodeKey) -> JobResult:
    manifest, raw = load_manifest(manifest_path)
    try:
        wasm = capsule_path.read_bytes()
    except OSError as exc:
        raise JobError(f"cannot read the capsule {capsule_path}: {exc.strerror}") from None
    actual = hashlib.sha256(wasm).hexdigest()
    if actual != manifest.capsule.sha256:
        raise JobError(f"capsule mismatch: the manifest names sha256 {manifest.capsule.sha256[:16]}..., "
                       f"{capsule_path} is {actual[:16]}...; refusing to run")
    beacon: dict[str, Any] = (
        {"relay": manifest.beacon.relay, "round": manifest.beacon.round, "value": manifest.beacon.value}
        if manifest.beacon else local_beacon(key)
    )
    limits = manifest.limits
    started_at = int(time.time())
    run = run_capsule(capsule_path, key, beacon, manifest.probes, manifest.budget_ms, limits.memory_mib,
                      limits.wall_ms, limits.fuel)
    profile, error, wall_ms = run.profile, run.error, run.wall_ms
    receipt = sign("JobReceipt", {
        "v": 1, "job_id": hashlib.sha256(canonical_bytes(raw)).hexdigest(), "node_id": key.node_id,
        "capsule_sha256": actual, "status": "ok" if profile else "failed", "started_at": started_at,
        "finished_at": int(time.time()), "wall_ms": round(wall_ms, 1),
        "profile_sha256": hashlib.sha256(canonical_bytes(profile)).hexdigest() if profile else None,
        "error": error,
    }, key)
    return JobResult(profile, receipt)
