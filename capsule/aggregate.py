"""Whole-machine figures from per-instance ProbeReports, with the evidence that says how each was made.

The capsule is single-threaded (wasm has no threads here), so the whole-CPU figures come from several
instances running at once: GFLOP/s and STREAM triad bandwidth are the work all instances did over the
window in which all of them ran, divided by its length (capsule/scaling.py), with the number of instances
found by measurement. The reference-model figure is batch-1 decode of one instance running alone
(llama-bench tg). Disk comes from the solo run. A figure is null, with the reason, when any instance
failed its check or the instances never overlapped. Every checked figure names the seed and the checksum
that reproduce it (`ce-bench verify --recompute`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from capsule.scaling import WindowRate, window_rate, work_spans

Report = Mapping[str, Any]


@dataclass
class Figures:
    gflops_fp32: float | None = None
    mem_bw_gbps: float | None = None
    tokens_per_sec: float | None = None
    read_mbps: float | None = None
    write_mbps: float | None = None
    evidence: dict[str, Any] = field(default_factory=dict)


def _probe(report: Report, name: str) -> Mapping[str, Any] | None:
    probes = report.get("probes")
    value = probes.get(name) if isinstance(probes, dict) else None
    return value if isinstance(value, Mapping) else None


def _medians(reports: Sequence[Report], probe: str, key: str) -> list[float | None]:
    values: list[float | None] = []
    for r in reports:
        p = _probe(r, probe)
        v = p.get(key) if p else None
        values.append(float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None)
    return values


def _whole(reports: Sequence[Report], probe: str, key: str) -> tuple[float | None, WindowRate | None, str]:
    """(figure in 1e9 units per second, the window, why null)."""
    if not reports:
        return None, None, f"{probe} did not run"
    failed = [i for i, v in enumerate(_medians(reports, probe, key)) if v is None]
    if failed:
        return None, None, f"{probe}.{key} missing or failed its check in instance(s) {failed}"
    spans = [work_spans(r, probe) for r in reports]
    if len(reports) == 1 and not spans[0]:  # one instance (a CE job): its own median is the whole figure
        median = _medians(reports, probe, key)[0]
        return median, None, ""
    window = window_rate(spans)
    if window.rate is None:
        return None, window, f"{probe}: {window.reason}"
    return window.rate / 1e9, window, ""


def _window_evidence(window: WindowRate | None) -> dict[str, Any]:
    if window is None:
        return {}
    return {"window_ms": round(window.window_ms, 3), "overlap_frac": round(window.overlap_frac, 4)}


def _spread(p: Mapping[str, Any] | None, stats_key: str) -> dict[str, Any]:
    stats = (p or {}).get(stats_key) or {}
    return {k: stats.get(k) for k in ("n", "median", "min", "max", "spread_pct")}


def aggregate(concurrent: Sequence[Report], solo: Report,
              scaling: Sequence[Mapping[str, Any]] | None = None) -> Figures:
    """concurrent: one report per instance of the whole-device run (sgemm, stream with work spans);
    solo: one instance alone (sgemm, llm, disk); scaling: the instance search's curve
    ([{"instances": k, "gflops_fp32": aggregate}, ...]), kept as evidence."""
    f = Figures()
    n = len(concurrent)
    f.gflops_fp32, g_window, why_g = _whole(concurrent, "sgemm", "gflops")
    f.mem_bw_gbps, t_window, why_t = _whole(concurrent, "stream", "triad_gbps")
    solo_sgemm, solo_llm, disk = _probe(solo, "sgemm"), _probe(solo, "llm"), _probe(solo, "disk")
    first_sgemm = _probe(concurrent[0], "sgemm") if concurrent else None
    single = (solo_sgemm or {}).get("gflops")
    f.evidence["cpu"] = {
        "gflops_fp32": {
            "method": f"work over the common window: FLOPs of the SGEMM products all {n} concurrent capsule "
                      "instances did while every one was running / the window's length; per product: "
                      + str((first_sgemm or {}).get("method", "")),
            "unit": "GFLOP/s (1e9 fp32 flop/s), all instances together",
            **_window_evidence(g_window),
            "per_instance_median": _medians(concurrent, "sgemm", "gflops"),
            "single_core": single,
            "scaling_vs_single": (f.gflops_fp32 / (n * single))
            if f.gflops_fp32 and isinstance(single, int | float) and single > 0 and n else None,
            "n": (first_sgemm or {}).get("n"),
            "seed": concurrent[0].get("seed") if concurrent else None,
            "checksum": (first_sgemm or {}).get("checksum"),
            "instances": [{"seed": r.get("seed"), "checksum": (_probe(r, "sgemm") or {}).get("checksum")}
                          for r in concurrent],
            "solo": {"seed": solo.get("seed"), "n": (solo_sgemm or {}).get("n"),
                     "checksum": (solo_sgemm or {}).get("checksum")},
            "spread_instance0": _spread(first_sgemm, "stats"),
            **({"null_reason": why_g} if why_g else {}),
        },
        "mem_bw_gbps": {
            "method": f"work over the common window: bytes (STREAM counting) of the triad passes all {n} "
                      "concurrent instances made while every one was running / the window's length",
            "unit": "GB/s (1e9 B/s), all instances together",
            **_window_evidence(t_window),
            "per_instance_median": _medians(concurrent, "stream", "triad_gbps"),
            "array_mib": (_probe(concurrent[0], "stream") or {}).get("array_mib") if concurrent else None,
            "spread_instance0": _spread(((_probe(concurrent[0], "stream") or {}).get("kernels") or {}).get(
                "triad") if concurrent else None, "chunk_stats"),
            **({"null_reason": why_t} if why_t else {}),
        },
        "instances": n,
        "scaling": [dict(step) for step in scaling or []],
        "instances_method": "measured: instances added (1, 2, 4, ..., the reported count as one step) while the "
                            "aggregate SGEMM rose by more than the threshold; the platform's count is not trusted",
    }
    tps = (solo_llm or {}).get("tokens_per_sec")
    f.tokens_per_sec = float(tps) if isinstance(tps, int | float) else None
    f.evidence["llm"] = {
        "method": "batch-1 greedy decode of one capsule instance running alone: " + str((solo_llm or {}).get(
            "method", "")),
        "seed": solo.get("seed"),
        "token_ids_sha256": (solo_llm or {}).get("token_ids_sha256"),
        "last_logits_sha256": (solo_llm or {}).get("last_logits_sha256"),
        "runs": (solo_llm or {}).get("runs"),
        "run_stats": _spread(solo_llm, "run_stats"),
        **({} if f.tokens_per_sec is not None else {"null_reason": (solo_llm or {}).get("reason", "llm did not run")}),
    }
    if disk and disk.get("write_mbps") is not None:
        f.write_mbps, f.read_mbps = float(disk["write_mbps"]), float(disk["read_mbps"])
        f.evidence["storage"] = {"method": disk.get("method"), "read_cache": disk.get("read_cache"),
                                 "file_mib": disk.get("file_mib"), "write": _spread(disk, "write_stats"),
                                 "read": _spread(disk, "read_stats")}
    else:
        why = (disk or {}).get("skipped") or (disk or {}).get("reason") or "the disk probe did not run"
        f.evidence["storage"] = {"null_reason": why}
    return f
