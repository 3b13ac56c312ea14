"""Whole-machine figures from per-instance ProbeReports, with the evidence that says how each was made.

The capsule is single-threaded (wasm has no threads here), so the whole-CPU figures come from several
instances running at once: GFLOP/s and STREAM triad bandwidth are the work all instances did over the
window in which all of them ran, divided by its length (capsule/scaling.py), with the number of instances
found by measurement. The reference-model figure is aggregate decode throughput: as many streams at once as
SGEMM instances paid, one instance each, summed if they pay (llm_streams); one stream alone (llama-bench tg)
stays beside it as the latency figure. Disk comes from the solo run. A figure is null, with the reason, when
any instance failed its check or the instances never overlapped. Every checked figure names the seed and the checksum
that reproduce it (`ce-bench verify --recompute`). Reports arrive typed (capsule/probe_report.py): a field
the capsule did not print is a parse error before this runs, never a silent None here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from capsule.probe_report import ProbeReport, SampleStats, SgemmReport, StreamReport
from capsule.scaling import WindowRate, window_rate, work_spans


@dataclass
class Figures:
    gflops_fp32: float | None = None
    mem_bw_gbps: float | None = None
    tokens_per_sec: float | None = None     # all decode streams together
    llm_streams: int = 1
    tokens_per_sec_one_stream: float | None = None
    read_mbps: float | None = None
    write_mbps: float | None = None
    evidence: dict[str, Any] = field(default_factory=dict)


def _sgemm_figure(r: ProbeReport) -> float | None:
    return r.probes.sgemm.gflops if r.probes.sgemm else None


def _triad_figure(r: ProbeReport) -> float | None:
    return r.probes.stream.triad_gbps if r.probes.stream else None


def _whole(reports: Sequence[ProbeReport], probe: str) -> tuple[float | None, WindowRate | None, str]:
    """(figure in 1e9 units per second, the window, why null)."""
    if not reports:
        return None, None, f"{probe} did not run"
    figure = _sgemm_figure if probe == "sgemm" else _triad_figure
    medians = [figure(r) for r in reports]
    failed = [i for i, v in enumerate(medians) if v is None]
    if failed:
        key = "gflops" if probe == "sgemm" else "triad_gbps"
        return None, None, f"{probe}.{key} missing or failed its check in instance(s) {failed}"
    spans = [work_spans(r, probe) for r in reports]
    if len(reports) == 1 and not spans[0]:  # one instance (a CE job): its own median is the whole figure
        return medians[0], None, ""
    window = window_rate(spans)
    if window.rate is None:
        return None, window, f"{probe}: {window.reason}"
    return window.rate / 1e9, window, ""


def _window_evidence(window: WindowRate | None) -> dict[str, Any]:
    if window is None:
        return {}
    return {"window_ms": round(window.window_ms, 3), "overlap_frac": round(window.overlap_frac, 4)}


def _spread(stats: SampleStats | None) -> dict[str, Any]:
    keys = ("n", "median", "min", "max", "spread_pct")
    return {k: getattr(stats, k) if stats else None for k in keys}


def _cpu_evidence(concurrent: Sequence[ProbeReport], solo: ProbeReport, f: Figures, g_window: WindowRate | None,
                  why_g: str, t_window: WindowRate | None, why_t: str,
                  scaling: Sequence[Mapping[str, Any]] | None) -> dict[str, Any]:
    n = len(concurrent)
    first: SgemmReport | None = concurrent[0].probes.sgemm if concurrent else None
    first_stream: StreamReport | None = concurrent[0].probes.stream if concurrent else None
    solo_sgemm = solo.probes.sgemm
    single = solo_sgemm.gflops if solo_sgemm else None
    triad = first_stream.kernel("triad") if first_stream else None
    return {
        "gflops_fp32": {
            "method": f"work over the common window: FLOPs of the SGEMM products all {n} concurrent capsule "
                      "instances did while every one was running / the window's length; per product: "
                      + (first.method if first else ""),
            "unit": "GFLOP/s (1e9 fp32 flop/s), all instances together",
            **_window_evidence(g_window),
            "per_instance_median": [_sgemm_figure(r) for r in concurrent],
            "single_core": single,
            "scaling_vs_single": (f.gflops_fp32 / (n * single)) if f.gflops_fp32 and single and n else None,
            "n": first.n if first else None,
            "seed": concurrent[0].seed if concurrent else None,
            "checksum": first.checksum if first else None,
            "instances": [{"seed": r.seed, "checksum": r.probes.sgemm.checksum if r.probes.sgemm else None}
                          for r in concurrent],
            "solo": {"seed": solo.seed, "n": solo_sgemm.n if solo_sgemm else None,
                     "checksum": solo_sgemm.checksum if solo_sgemm else None},
            "spread_instance0": _spread(first.stats if first else None),
            **({"null_reason": why_g} if why_g else {}),
        },
        "mem_bw_gbps": {
            "method": f"work over the common window: bytes (STREAM counting) of the triad passes all {n} "
                      "concurrent instances made while every one was running / the window's length",
            "unit": "GB/s (1e9 B/s), all instances together",
            **_window_evidence(t_window),
            "per_instance_median": [_triad_figure(r) for r in concurrent],
            "array_mib": first_stream.array_mib if first_stream else None,
            "spread_instance0": _spread(triad.chunk_stats if triad else None),
            **({"null_reason": why_t} if why_t else {}),
        },
        "instances": n,
        "scaling": [dict(step) for step in scaling or []],
        "instances_method": "measured: instances added (1, 2, 4, ..., the reported count as one step) while the "
                            "aggregate SGEMM rose by more than the threshold; the platform's count is not trusted",
    }


# Streams pay when k of them decode at least this share of k x one stream alone, the instance search's rule
# (capsule/scaling.py: an added instance must add half of what it would on a free core).
STREAMS_PAY_SHARE = 0.5


def llm_streams(solo_tps: float | None, streams: Sequence[ProbeReport] | None
                ) -> tuple[float | None, int, dict[str, Any]]:
    """Aggregate decode throughput: (tokens/s, streams, evidence). `streams`: one report per stream of a run of
    k llm instances at once (the whole-CPU count). Their sum is claimed if it beats one stream alone by half of
    what k - 1 added streams would on free cores; otherwise one stream's figure (a browser, one core, or
    streams that only took time slices)."""
    per = [r.probes.llm.tokens_per_sec if r.probes.llm else None for r in streams or []]
    total = sum(v for v in per if v is not None) if per and all(v is not None for v in per) else None
    note: dict[str, Any] = {"streams_tried": len(per), "per_stream_tokens_per_sec": per,
                            "streams_method": "k capsule instances decode at once (k = the whole-CPU instance "
                                              "count), each its own prompt; their medians summed; kept when the "
                                              f"sum >= one stream x (1 + {STREAMS_PAY_SHARE} x (k - 1))"}
    if solo_tps is None or total is None or len(per) < 2:
        return solo_tps, 1, note
    if total >= solo_tps * (1 + STREAMS_PAY_SHARE * (len(per) - 1)):
        return total, len(per), note
    return solo_tps, 1, {**note, "streams_refused": f"{len(per)} streams decoded {total:.1f} tokens/s, not "
                                                    f"enough above one stream's {solo_tps:.1f}"}


def aggregate(concurrent: Sequence[ProbeReport], solo: ProbeReport,
              scaling: Sequence[Mapping[str, Any]] | None = None,
              streams: Sequence[ProbeReport] | None = None) -> Figures:
    """concurrent: one report per instance of the whole-device run (sgemm, stream with work spans);
    solo: one instance alone (sgemm, llm, disk); scaling: the instance search's curve
    ([{"instances": k, "gflops_fp32": aggregate}, ...]), kept as evidence; streams: one report per instance of
    a run of llm instances at once (llm_streams), absent where none ran (a browser: one stream)."""
    f = Figures()
    f.gflops_fp32, g_window, why_g = _whole(concurrent, "sgemm")
    f.mem_bw_gbps, t_window, why_t = _whole(concurrent, "stream")
    f.evidence["cpu"] = _cpu_evidence(concurrent, solo, f, g_window, why_g, t_window, why_t, scaling)
    llm, disk = solo.probes.llm, solo.probes.disk
    f.tokens_per_sec_one_stream = llm.tokens_per_sec if llm else None
    f.tokens_per_sec, f.llm_streams, stream_note = llm_streams(f.tokens_per_sec_one_stream, streams)
    f.evidence["llm"] = {
        "method": f"aggregate decode throughput of {f.llm_streams} stream(s) at once (one capsule instance "
                  "each); one stream alone: " + (llm.method if llm else ""),
        **stream_note,
        "seed": solo.seed,
        "token_ids_sha256": llm.token_ids_sha256 if llm else None,
        "last_logits_sha256": llm.last_logits_sha256 if llm else None,
        "runs": llm.runs if llm else None,
        "run_stats": _spread(llm.run_stats if llm else None),
        **({} if f.tokens_per_sec is not None else
           {"null_reason": (llm.reason if llm else None) or "llm did not run"}),
    }
    if disk and disk.write_mbps is not None and disk.read_mbps is not None:
        f.write_mbps, f.read_mbps = disk.write_mbps, disk.read_mbps
        f.evidence["storage"] = {"method": disk.method, "read_cache": disk.read_cache, "file_mib": disk.file_mib,
                                 "write": _spread(disk.write_stats), "read": _spread(disk.read_stats)}
    else:
        why = ((disk.skipped or disk.reason) if disk else None) or "the disk probe did not run"
        f.evidence["storage"] = {"null_reason": why}
    return f
