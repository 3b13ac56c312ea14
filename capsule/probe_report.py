"""The ProbeReport: what one capsule run prints (capsule/kernels/driver.c, the same C in the WASI command and
the reactor that browsers run), declared once as typed records. Hosts parse the capsule's JSON into these
before using a figure (`parse_report`), so a field the C renames or drops is a ValidationError naming the
path, not a silent None; the JSON Schema in capsule/schema/ProbeReport.schema.json is generated from here.

Per probe, a figure is null exactly when its check failed (`verified` false, `reason` says why) or the
probe was skipped (`skipped` says why); the statistics behind every figure come with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from capsule.typed import parse, spec

SCHEMA_ID = "ce-bench/probe-report/v1"
HEX64 = "[0-9a-f]{64}"


@dataclass(frozen=True)
class SampleStats:
    """ce_stats_json: order statistics of a sample set (null where the set is empty)."""

    n: int = spec(minimum=0)
    median: float | None = spec()
    min: float | None = spec()
    max: float | None = spec()
    p25: float | None = spec()
    p75: float | None = spec()
    mad: float | None = spec(description="median absolute deviation")
    spread_pct: float | None = spec(description="100 * (p75 - p25) / median")


@dataclass(frozen=True)
class Work:
    """Timed units of work on the run's clock: [start_ms, end_ms, amount] (capsule/scaling.py)."""

    unit: str = spec(enum=("flop", "byte"))
    spans_ms: list[list[float]] = spec()


@dataclass(frozen=True)
class Clock:
    source: str = spec()
    observed_step_ns: float | None = spec(minimum=0, unit="ns")
    call_overhead_ns: float | None = spec(minimum=0, unit="ns")
    anchor_unix_ms: float = spec(minimum=0, unit="ms since the unix epoch at the run's clock zero")


@dataclass(frozen=True)
class SgemmReport:
    gflops: float | None = spec(minimum=0, unit="GFLOP/s")
    unit: str = spec()
    method: str = spec()
    n: int = spec(minimum=1)
    stats: SampleStats = spec()
    samples: list[float | None] = spec()
    warmup_ms: float | None = spec(minimum=0, unit="ms")
    work: Work = spec()
    verified: bool = spec()
    check: str = spec()
    max_error_ratio: float | None = spec(minimum=0)
    checksum: str = spec(pattern=HEX64, description="sha256 of C")
    checksum_method: str = spec()
    reason: str | None = spec(default=None)


@dataclass(frozen=True)
class StreamKernel:
    chunk_stats: SampleStats = spec()
    pass_medians: list[float | None] = spec()


@dataclass(frozen=True)
class StreamReport:
    copy_gbps: float | None = spec(minimum=0, unit="GB/s")
    scale_gbps: float | None = spec(minimum=0, unit="GB/s")
    add_gbps: float | None = spec(minimum=0, unit="GB/s")
    triad_gbps: float | None = spec(minimum=0, unit="GB/s")
    mode: str = spec(enum=("all-kernels", "triad-only"))
    unit: str = spec()
    method: str = spec()
    array_mib: int = spec(minimum=1)
    chunk_mib: float = spec(minimum=0)
    timed_passes: int = spec(minimum=0)
    kernels: dict[str, Any] = spec(description="per kernel name: StreamKernel")
    work: Work = spec()
    verified: bool = spec()
    check: str = spec()
    max_rel_error: float | None = spec(minimum=0)
    reason: str | None = spec(default=None)

    def kernel(self, name: str) -> StreamKernel | None:
        raw = self.kernels.get(name)
        return parse(StreamKernel, raw, f"$.probes.stream.kernels.{name}") if raw is not None else None


@dataclass(frozen=True)
class LlmReport:
    ref_model: str = spec()
    tokens_per_sec: float | None = spec(minimum=0, unit="tokens/s")
    unit: str = spec()
    method: str = spec()
    params: int = spec(minimum=0)
    shape: str = spec()
    prompt_tokens: int = spec(minimum=0)
    decode_tokens: int = spec(minimum=0)
    run_stats: SampleStats = spec()
    runs: list[float | None] = spec()
    block_stats: SampleStats = spec()
    weights_ms: float | None = spec(minimum=0, unit="ms")
    warmup_ms: float | None = spec(minimum=0, unit="ms")
    token_ids_sha256: str = spec(pattern=HEX64)
    last_logits_sha256: str = spec(pattern=HEX64)
    token_ids_head: list[int] = spec()
    reproducible: bool = spec()
    reason: str | None = spec(default=None)


@dataclass(frozen=True)
class DiskReport:
    """Measured, failed (verified false + reason) or skipped (skipped says why): the fields present differ."""

    write_mbps: float | None = spec(minimum=0, unit="MB/s")
    read_mbps: float | None = spec(minimum=0, unit="MB/s")
    unit: str | None = spec(default=None)
    method: str | None = spec(default=None)
    file_mib: int | None = spec(minimum=1, default=None)
    read_cache: str | None = spec(default=None)
    write_stats: SampleStats | None = spec(default=None)
    write_samples: list[float | None] | None = spec(default=None)
    read_stats: SampleStats | None = spec(default=None)
    read_samples: list[float | None] | None = spec(default=None)
    verified: bool | None = spec(default=None)
    check: str | None = spec(default=None)
    reason: str | None = spec(default=None)
    skipped: str | None = spec(default=None)


@dataclass(frozen=True)
class Probes:
    sgemm: SgemmReport | None = spec(default=None)
    stream: StreamReport | None = spec(default=None)
    llm: LlmReport | None = spec(default=None)
    disk: DiskReport | None = spec(default=None)


@dataclass(frozen=True)
class ProbeReport:
    schema: str = spec(enum=(SCHEMA_ID,))
    capsule_version: str = spec()
    simd: str = spec()
    build: str = spec(enum=("command", "reactor"), description="the WASI command or the reactor (browsers)")
    seed: str = spec(pattern="[0-9a-f]{1,64}")
    budget_ms: int = spec(minimum=0, unit="ms")
    clock: Clock = spec()
    probe_order: list[str] = spec()
    probes: Probes = spec()
    wall_ms: float | None = spec(minimum=0, unit="ms")


def parse_report(data: Any) -> ProbeReport:
    """A capsule's JSON output as a ProbeReport; ValidationError names the first field that does not fit."""
    return parse(ProbeReport, data)
