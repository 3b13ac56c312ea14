"""Records of dispatched work (issue 44): the manifest v2 a submitter writes, the JobRequest that carries it
signed, the JobCancel that stops it, and the TaskReceipt a node signs for each task it ran.

Manifest v2 (v1, the capsule run locally by `ce-bench job run`, stays valid: host_runner/jobs.py):

    {"v": 2, "kind": "wasi", "module": {"sha256": HEX64, "path": "work.wasm"},
     "tasks": [{"args": ["7", "100000"], "stdin_sha256": null}, ...],
     "limits": {"memory_mib": 64, "wall_ms": 120000, "fuel": null, "output_bytes": 4096},
     "placement": {"nodes": 3, "redundancy": 1, "audit": 0.05, "near": null, "region": null, "min": {}}}

`kind: "capsule"` runs the ce-bench probes instead ("capsule": {"sha256": ...}, "probes", "budget_ms"); each
task's result is then the node's signed NodeProfile. `path` is the submitter's file, read and uploaded by the
CLI; the relay and the nodes know a module only by its sha256.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from capsule.peerid import public_key_from_peer_id
from capsule.typed import spec

# the same patterns as capsule/model.py (which imports this module, so it cannot import them from there)
HEX64 = "[0-9a-f]{64}"
NODE_ID = "12D3KooW[1-9A-HJ-NP-Za-km-z]{44}"
B64URL_SIG = "[A-Za-z0-9_-]{86}"
MAX_TIME = 2**40

MAX_TASKS = 10_000          # tasks in one job
MAX_ARGS = 64               # argv entries of one task
MAX_ARG_CHARS = 1024        # characters of one argv entry
MAX_OUTPUT_BYTES = 1 << 20  # the most stdout a task may return (1 MiB)


def _peer_id(value: str) -> None:
    public_key_from_peer_id(value)  # raises PeerIdError (a ValueError) with the reason


def node_id_field(description: str) -> Any:
    return spec(check=_peer_id, pattern=NODE_ID, max_length=100, description=description)


def _arg(value: str) -> None:  # (a field's check runs on each item of a list: capsule/typed.py)
    if len(value) > MAX_ARG_CHARS or "\x00" in value:
        raise ValueError(f"expected at most {MAX_ARG_CHARS} characters without NUL, got {len(value)}")


def _probe(value: str) -> None:
    from capsule.plan import ALL_PROBES

    if value not in ALL_PROBES:
        raise ValueError(f"expected one of {', '.join(ALL_PROBES)}, got {value[:40]!r}")


def check_manifest(m: JobManifestV2, path: str = "$") -> None:
    """What a field's own check cannot see (counts, repeats); ValidationError naming the field."""
    from capsule.typed import ValidationError

    if not 1 <= len(m.tasks) <= MAX_TASKS:
        raise ValidationError(f"{path}.tasks", f"expected 1 to {MAX_TASKS} tasks, got {len(m.tasks)}")
    for i, task in enumerate(m.tasks):
        if len(task.args) > MAX_ARGS:
            raise ValidationError(f"{path}.tasks[{i}].args", f"expected at most {MAX_ARGS} arguments, got "
                                                             f"{len(task.args)}")
    if m.probes is not None and (not m.probes or len(set(m.probes)) != len(m.probes)):
        raise ValidationError(f"{path}.probes", "expected at least one probe, each once")


@dataclass(frozen=True)
class ModuleRef:
    sha256: str = spec(pattern=HEX64, description="sha256 of the WASI command module")
    path: str | None = spec(max_length=4096, default=None, description="the submitter's file (the CLI reads it)")


@dataclass(frozen=True)
class CapsuleTarget:
    sha256: str = spec(pattern=HEX64, description="sha256 of capsule.wasm the nodes must run")


@dataclass(frozen=True)
class TaskSpec:
    args: list[str] = spec(check=_arg, description=f"argv after the module's name (at most {MAX_ARGS})")
    stdin_sha256: str | None = spec(pattern=HEX64, default=None, description="a blob uploaded with the job")


@dataclass(frozen=True)
class TaskLimits:
    memory_mib: int = spec(minimum=1, maximum=4096, unit="MiB", description="linear memory of the module")
    wall_ms: int = spec(minimum=1, maximum=3_600_000, unit="ms", description="wall clock per attempt")
    fuel: int | None = spec(minimum=1, maximum=2**62, default=None, description="wasm fuel (null: none)")
    output_bytes: int = spec(minimum=0, maximum=MAX_OUTPUT_BYTES, default=4096, unit="bytes",
                             description="stdout beyond this fails the task")


@dataclass(frozen=True)
class Minimums:
    """What a node must show to be placed on (proven figures where the relay proves them)."""

    cpu_gflops: float | None = spec(minimum=0, default=None, unit="GFLOP/s")
    mem_bw_gbps: float | None = spec(minimum=0, default=None, unit="GB/s")
    tokens_per_sec: float | None = spec(minimum=0, default=None, unit="tokens/s")
    gpu_tflops: float | None = spec(minimum=0, default=None, unit="fp32 TFLOP/s")
    memory_mb: int | None = spec(minimum=0, default=None, unit="MB available")
    storage_free_gb: int | None = spec(minimum=0, default=None, unit="GB free")


@dataclass(frozen=True)
class Placement:
    nodes: int = spec(minimum=1, maximum=10_000, default=1, description="distinct nodes to spread the tasks on")
    redundancy: int = spec(minimum=1, maximum=7, default=1, description="nodes that run each task; majority wins")
    audit: float | None = spec(minimum=0, maximum=1, default=None,
                               description="share of tasks run again elsewhere when redundancy is 1 "
                                           "(null: the relay's default)")
    near: str | None = spec(max_length=100, default=None, description="a NodeId: nearest by predicted RTT first")
    region: str | None = spec(pattern=r"^[a-z][a-z0-9-]{0,31}$", default=None)
    min: Minimums = spec(default=Minimums())


@dataclass(frozen=True)
class JobManifestV2:
    v: int = spec(minimum=2, maximum=2)
    kind: str = spec(enum=("wasi", "capsule"))
    tasks: list[TaskSpec] = spec(description=f"1 to {MAX_TASKS} tasks")
    limits: TaskLimits = spec()
    placement: Placement = spec(default=Placement())
    module: ModuleRef | None = spec(default=None, description="kind wasi: the module")
    capsule: CapsuleTarget | None = spec(default=None, description="kind capsule: the capsule")
    probes: list[str] | None = spec(check=_probe, default=None, description="kind capsule: the probes")
    budget_ms: int | None = spec(minimum=100, maximum=600_000, default=None, description="kind capsule")


@dataclass(frozen=True)
class JobRequest:
    """POST /v1/jobs: a manifest signed by its submitter, whose key the relay's policy must name."""

    v: int = spec(minimum=1, maximum=1)
    submitter: str = node_id_field("the key that signs and may cancel the job")
    manifest: JobManifestV2 = spec()
    nonce: str = spec(pattern="[0-9a-f]{32}", description="random: two equal manifests are two jobs")
    created_at: int = spec(minimum=0, maximum=MAX_TIME, unit="unix seconds")
    sig: str = spec(pattern=B64URL_SIG)


@dataclass(frozen=True)
class JobCancel:
    """DELETE /v1/jobs/{id}: signed by the job's submitter."""

    job_id: str = spec(pattern=HEX64)
    submitter: str = node_id_field("the submitter of the job")
    at: int = spec(minimum=0, maximum=MAX_TIME, unit="unix seconds")
    sig: str = spec(pattern=B64URL_SIG)


@dataclass(frozen=True)
class TaskReceipt:
    """What a node signs for one attempt of one task: the relay keeps it beside the output."""

    v: int = spec(minimum=1, maximum=1)
    job_id: str = spec(pattern=HEX64)
    task: int = spec(minimum=0, maximum=MAX_TASKS)
    attempt: int = spec(minimum=0, maximum=1_000_000)
    node_id: str = node_id_field("the node that ran the attempt")
    module_sha256: str = spec(pattern=HEX64, description="the module (or capsule) it ran")
    exit_code: int | None = spec(minimum=-(2**31), maximum=2**31 - 1, description="null: it did not exit")
    output_sha256: str | None = spec(pattern=HEX64, description="sha256 of stdout (null: no output kept)")
    output_bytes: int = spec(minimum=0, maximum=2**40, unit="bytes")
    error: str | None = spec(max_length=1000, description="why the task failed on the node (limit, trap)")
    fuel_used: int | None = spec(minimum=0, maximum=2**63, description="null: no fuel metered")
    wall_ms: float = spec(minimum=0, maximum=1e9, unit="ms")
    finished_at: int = spec(minimum=0, maximum=MAX_TIME, unit="unix seconds")
    sig: str = spec(pattern=B64URL_SIG)


def blob_shas(m: JobManifestV2) -> list[str]:
    """The blobs a job names, each once: its module and its tasks' stdin."""
    shas = [*([m.module.sha256] if m.module else []), *(t.stdin_sha256 for t in m.tasks if t.stdin_sha256)]
    return list(dict.fromkeys(shas))
