"""Whole-machine figures from per-instance ProbeReports, with the evidence that says how each was made.

The capsule is single-threaded (wasm has no threads here), so the whole-CPU figures come from one
instance per core started together: GFLOPS and STREAM bandwidth are the sums of the concurrent
instances' medians (as OpenMP STREAM sums its threads). The reference-model figure is batch-1 decode
of one instance running alone (llama-bench tg); the concurrent sum goes into the evidence as the
node's aggregate serving capacity. Disk comes from the solo run. A figure is null, with the reason,
when any instance failed to produce a checked value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

Report = dict[str, Any]


@dataclass
class Figures:
    gflops_fp32: float | None = None
    mem_bw_gbps: float | None = None
    tokens_per_sec: float | None = None
    read_mbps: float | None = None
    write_mbps: float | None = None
    evidence: dict[str, Any] = field(default_factory=dict)


def _probe(report: Report, name: str) -> dict[str, Any] | None:
    probes = report.get("probes")
    value = probes.get(name) if isinstance(probes, dict) else None
    return value if isinstance(value, dict) else None


def _sum_over(reports: Sequence[Report], probe: str, key: str) -> tuple[float | None, list[float | None], str]:
    values: list[float | None] = []
    for r in reports:
        p = _probe(r, probe)
        v = p.get(key) if p else None
        values.append(float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None)
    if not values:
        return None, values, f"{probe} did not run"
    if any(v is None for v in values):
        missing = [i for i, v in enumerate(values) if v is None]
        return None, values, f"{probe}.{key} missing or failed its check in instance(s) {missing}"
    return sum(v for v in values if v is not None), values, ""


def _spread(p: dict[str, Any] | None, stats_key: str) -> dict[str, Any]:
    stats = (p or {}).get(stats_key) or {}
    return {k: stats.get(k) for k in ("n", "median", "min", "max", "spread_pct")}


def aggregate(concurrent: Sequence[Report], solo: Report, wall_overlap: float | None = None) -> Figures:
    """concurrent: one report per core, started together (sgemm, stream, llm); solo: one instance alone
    (sgemm, llm, disk). wall_overlap: fraction of the concurrent phase all instances were running."""
    f = Figures()
    n = len(concurrent)
    f.gflops_fp32, per_gflops, why_g = _sum_over(concurrent, "sgemm", "gflops")
    f.mem_bw_gbps, per_triad, why_t = _sum_over(concurrent, "stream", "triad_gbps")
    agg_tps, per_tps, why_l = _sum_over(concurrent, "llm", "tokens_per_sec")
    solo_sgemm, solo_llm, disk = _probe(solo, "sgemm"), _probe(solo, "llm"), _probe(solo, "disk")
    first = concurrent[0] if concurrent else {}
    f.evidence["cpu"] = {
        "gflops_fp32": {
            "method": f"sum over {n} concurrent capsule instances (one per core) of each instance's median "
                      "SGEMM GFLOP/s; per instance: " + str((_probe(first, "sgemm") or {}).get("method", "")),
            "per_instance": per_gflops, "single_core": (solo_sgemm or {}).get("gflops"),
            "scaling": (f.gflops_fp32 / (n * solo_sgemm["gflops"]))
            if f.gflops_fp32 and solo_sgemm and solo_sgemm.get("gflops") else None,
            "n": (_probe(first, "sgemm") or {}).get("n"),
            "checksum": (_probe(first, "sgemm") or {}).get("checksum"),
            "spread_instance0": _spread(_probe(first, "sgemm"), "stats"),
            **({"null_reason": why_g} if why_g else {}),
        },
        "mem_bw_gbps": {
            "method": f"sum over {n} concurrent instances of the median STREAM triad chunk rate (GB/s, "
                      "STREAM byte counting)",
            "per_instance": per_triad, "array_mib": (_probe(first, "stream") or {}).get("array_mib"),
            "spread_instance0": _spread(((_probe(first, "stream") or {}).get("kernels") or {}).get("triad"),
                                        "chunk_stats"),
            **({"null_reason": why_t} if why_t else {}),
        },
        "instances": n,
        "wall_overlap": wall_overlap,
    }
    tps = (solo_llm or {}).get("tokens_per_sec")
    f.tokens_per_sec = float(tps) if isinstance(tps, int | float) else None
    f.evidence["llm"] = {
        "method": "batch-1 greedy decode of one capsule instance running alone: " + str((solo_llm or {}).get(
            "method", "")),
        "token_ids_sha256": (solo_llm or {}).get("token_ids_sha256"),
        "last_logits_sha256": (solo_llm or {}).get("last_logits_sha256"),
        "runs": (solo_llm or {}).get("runs"),
        "aggregate_tokens_per_sec": agg_tps, "aggregate_per_instance": per_tps,
        **({"aggregate_null_reason": why_l} if why_l else {}),
        **({} if f.tokens_per_sec is not None else {"null_reason": (solo_llm or {}).get("reason", "llm did not run")}),
    }
    if disk and disk.get("write_mbps") is not None:
        f.write_mbps, f.read_mbps = float(disk["write_mbps"]), float(disk["read_mbps"])
        f.evidence["storage"] = {"method": disk.get("method"), "read_cache": disk.get("read_cache"),
                                 "file_mib": disk.get("file_mib"), "write": _spread(disk, "write_stats"),
                                 "read": _spread(disk, "read_stats")}
    else:
        f.evidence["storage"] = {"null_reason": (disk or {}).get("skipped", "the disk probe did not run")}
    return f
