"""Synthetic ProbeReports for the pure tests: complete records (they must parse as capsule/probe_report.py
declares them, like the capsule's own output), with the figures and work spans a test chooses."""

from __future__ import annotations

from typing import Any

from capsule.probe_report import ProbeReport, parse_report


def _stats(median: float | None, n: int = 5) -> dict[str, Any]:
    return {"n": n if median is not None else 0, "median": median, "min": median, "max": median, "p25": median,
            "p75": median, "mad": 0.0 if median is not None else None, "spread_pct": 0.0 if median else None}


def probe_report(gflops: float | None, triad: float | None, tps: float | None,
                 spans: list[list[float]] | None = None, seed: str = "aa", anchor: float = 1_000_000.0,
                 disk: tuple[float, float] | None = None) -> ProbeReport:
    """A report whose SGEMM and triad work spans are `spans` ([start_ms, end_ms, work]); a None figure is a
    failed check; `disk` = (write_mbps, read_mbps) or None for a skipped disk probe."""
    spans = spans if spans is not None else [[0.0, 100.0, 1e9]]
    checksum = (seed * 64)[:64]
    data = {
        "schema": "ce-bench/probe-report/v1", "capsule_version": "1.0.0", "simd": "wasm-simd128",
        "build": "command", "seed": seed, "budget_ms": 3000,
        "clock": {"source": "test", "observed_step_ns": 1.0, "call_overhead_ns": 20.0, "anchor_unix_ms": anchor},
        "probe_order": ["sgemm", "stream", "llm", "disk"],
        "probes": {
            "sgemm": {"gflops": gflops, "unit": "GFLOP/s", "method": "test", "n": 1024, "stats": _stats(gflops),
                      "samples": [gflops] * 5, "warmup_ms": 1.0, "work": {"unit": "flop", "spans_ms": spans},
                      "verified": gflops is not None, "check": "test", "max_error_ratio": 0.01,
                      "checksum": checksum, "checksum_method": "sha256",
                      **({} if gflops is not None else {"reason": "the product failed its float64 check"})},
            "stream": {"copy_gbps": None, "scale_gbps": None, "add_gbps": None, "triad_gbps": triad,
                       "mode": "triad-only", "unit": "GB/s", "method": "test", "array_mib": 64, "chunk_mib": 1.0,
                       "timed_passes": 5, "kernels": {"triad": {"chunk_stats": _stats(triad), "pass_medians": []}},
                       "work": {"unit": "byte", "spans_ms": spans}, "verified": triad is not None,
                       "check": "test", "max_rel_error": 0.0},
            "llm": {"ref_model": "ce-ref-15m-f32", "tokens_per_sec": tps, "unit": "tokens/s", "method": "test",
                    "params": 15_000_000, "shape": "test", "prompt_tokens": 32, "decode_tokens": 128,
                    "run_stats": _stats(tps, 1), "runs": [tps] if tps is not None else [],
                    "block_stats": _stats(tps), "weights_ms": 1.0, "warmup_ms": 1.0,
                    "token_ids_sha256": ("7" + checksum)[:64], "last_logits_sha256": checksum,
                    "token_ids_head": [1, 2, 3], "reproducible": tps is not None,
                    **({} if tps is not None else {"reason": "runs decoded different tokens"})},
            "disk": ({"write_mbps": disk[0], "read_mbps": disk[1], "unit": "MB/s", "method": "test", "file_mib": 64,
                      "read_cache": "may be page cache", "write_stats": _stats(disk[0]), "write_samples": [],
                      "read_stats": _stats(disk[1]), "read_samples": [], "verified": True}
                     if disk else {"write_mbps": None, "read_mbps": None, "skipped": "no scratch directory"}),
        },
        "wall_ms": 1000.0,
    }
    return parse_report(data)
