"""capsule.wasm under the real wasmtime CLI: the report a server operator gets, and bad input."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.conftest import Artifacts, run_cli

SMALL = ["--sgemm-n", "192", "--stream-mib", "8", "--disk-mib", "4"]


def check_stats(stats: dict[str, Any]) -> None:
    assert stats["n"] >= 1
    assert stats["min"] <= stats["p25"] <= stats["median"] <= stats["p75"] <= stats["max"]
    assert stats["min"] > 0


def test_default_run_reports_every_figure(wasmtime_cli: Path, artifacts: Artifacts, tmp_path: Path) -> None:
    """The issue's Done-when: `wasmtime run --dir X::/scratch build/capsule.wasm` with default settings."""
    result = run_cli(wasmtime_cli, artifacts.capsule, [], scratch=tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    probes = report["probes"]
    assert report["schema"] == "ce-bench/probe-report/v1"
    assert report["simd"] == "wasm-simd128"
    assert report["probe_order"] == ["sgemm", "stream", "disk", "llm"]
    assert re.fullmatch(r"[0-9a-f]{64}", report["seed"])  # a fresh random seed, reported
    for figure in (
        probes["sgemm"]["gflops"], probes["stream"]["triad_gbps"], probes["disk"]["write_mbps"],
        probes["disk"]["read_mbps"], probes["llm"]["tokens_per_sec"],
    ):
        assert isinstance(figure, float) and figure > 0
    assert probes["sgemm"]["verified"] is True and probes["sgemm"]["max_error_ratio"] < 1
    assert probes["sgemm"]["gflops"] == probes["sgemm"]["stats"]["median"]
    check_stats(probes["sgemm"]["stats"])
    assert probes["sgemm"]["stats"]["n"] == len(probes["sgemm"]["samples"]) >= 3
    assert probes["stream"]["verified"] is True
    assert probes["stream"]["triad_gbps"] == probes["stream"]["kernels"]["triad"]["chunk_stats"]["median"]
    for kernel in ("copy", "scale", "add", "triad"):
        check_stats(probes["stream"]["kernels"][kernel]["chunk_stats"])
    assert probes["disk"]["verified"] is True and "page cache" in probes["disk"]["read_cache"]
    assert probes["llm"]["ref_model"] == "ce-ref-15m-f32"
    assert probes["llm"]["reproducible"] is True
    assert re.fullmatch(r"[0-9a-f]{64}", probes["llm"]["token_ids_sha256"])
    assert not list(tmp_path.iterdir()), "the disk probe must remove its file"
    # the human summary on stderr names every figure
    for word in ("GFLOP/s", "GB/s triad", "MB/s write", "tokens/s", "done in"):
        assert word in result.stderr


def test_same_seed_same_checksums(wasmtime_cli: Path, artifacts: Artifacts) -> None:
    args = ["--probes", "sgemm,llm", "--seed", "c0ffee", *SMALL]
    first = json.loads(run_cli(wasmtime_cli, artifacts.capsule, args).stdout)["probes"]
    second = json.loads(run_cli(wasmtime_cli, artifacts.capsule, args).stdout)["probes"]
    assert first["sgemm"]["checksum"] == second["sgemm"]["checksum"]
    assert first["llm"]["token_ids_sha256"] == second["llm"]["token_ids_sha256"]
    other_args = ["--probes", "sgemm", "--seed", "c0ffef", *SMALL]
    other = json.loads(run_cli(wasmtime_cli, artifacts.capsule, other_args).stdout)
    assert other["probes"]["sgemm"]["checksum"] != first["sgemm"]["checksum"]


def test_probe_selection_and_order(wasmtime_cli: Path, artifacts: Artifacts) -> None:
    result = run_cli(wasmtime_cli, artifacts.capsule, ["--probes", "stream,sgemm", "--seed", "01", *SMALL])
    report = json.loads(result.stdout)
    assert report["probe_order"] == ["stream", "sgemm"]
    assert list(report["probes"]) == ["stream", "sgemm"]


def test_disk_skipped_without_scratch(wasmtime_cli: Path, artifacts: Artifacts) -> None:
    result = run_cli(wasmtime_cli, artifacts.capsule, ["--seed", "02", *SMALL])
    assert result.returncode == 0, result.stderr
    disk = json.loads(result.stdout)["probes"]["disk"]
    assert disk["write_mbps"] is None and disk["read_mbps"] is None
    assert "no scratch directory /scratch" in disk["skipped"] and "--dir" in disk["skipped"]
    assert "disk    skipped" in result.stderr
