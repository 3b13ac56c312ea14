"""The typed ProbeReport (capsule/probe_report.py) against what both producers really print: capsule.wasm
under the wasmtime CLI, the reactor under wasmtime-py (the browser's reactor run is parsed in
tests/test_browser.py), and a fault-injected build whose checks fail. Drift in either direction is caught:
a field the C adds or drops is refused with its path."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from capsule.probe_report import SCHEMA_ID, ProbeReport, parse_report
from capsule.schemas import rendered
from capsule.typed import ValidationError
from host_runner.wasm import Reactor
from tests.conftest import Artifacts, run_cli
from tests.test_self_checks import faulty_capsule, run

SMALL = ["--sgemm-n", "192", "--stream-mib", "8", "--disk-mib", "4", "--budget-ms", "3000", "--soft-budget"]


@pytest.fixture(scope="module")
def command_report(wasmtime_cli: Path, artifacts: Artifacts, tmp_path_factory: pytest.TempPathFactory) -> Any:
    result = run_cli(wasmtime_cli, artifacts.capsule, [*SMALL, "--probes", "sgemm,stream,llm,disk"],
                     scratch=tmp_path_factory.mktemp("scratch"))
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_the_command_report_parses_with_every_figure(command_report: Any) -> None:
    report = parse_report(command_report)
    assert isinstance(report, ProbeReport) and report.schema == SCHEMA_ID and report.build == "command"
    sgemm, stream, llm, disk = report.probes.sgemm, report.probes.stream, report.probes.llm, report.probes.disk
    assert sgemm is not None and sgemm.verified and sgemm.gflops == sgemm.stats.median and sgemm.n == 192
    assert sgemm.work.unit == "flop" and len(sgemm.work.spans_ms) == sgemm.stats.n
    assert stream is not None and stream.verified and stream.triad_gbps is not None and stream.mode == "all-kernels"
    triad = stream.kernel("triad")
    assert triad is not None and triad.chunk_stats.median == stream.triad_gbps
    assert llm is not None and llm.reproducible and llm.tokens_per_sec == llm.run_stats.median
    assert disk is not None and disk.verified and disk.write_mbps is not None and disk.skipped is None


def test_the_reactor_report_parses_with_disk_skipped(artifacts: Artifacts) -> None:
    result = Reactor(artifacts.reactor).run(["--probes", "sgemm,stream,llm,disk", "--seed", "5eed",
                                             "--sgemm-n", "128", "--stream-mib", "4", "--budget-ms", "3000",
                                             "--soft-budget"])
    assert result.exit_code == 0, result.stderr
    report = parse_report(result.report())
    assert report.build == "reactor" and report.seed == "5eed"
    assert report.probes.sgemm is not None and report.probes.sgemm.gflops is not None
    assert report.probes.disk is not None and report.probes.disk.write_mbps is None
    assert report.probes.disk.skipped and "no filesystem" in report.probes.disk.skipped


def test_a_failed_check_parses_as_a_null_figure_with_its_reason(tmp_path: Path) -> None:
    report = parse_report(run(faulty_capsule(tmp_path, 1), "--probes", "sgemm", "--sgemm-n", "128"))
    assert report.probes.sgemm is not None
    assert (report.probes.sgemm.verified, report.probes.sgemm.gflops) == (False, None)
    assert report.probes.sgemm.reason == "the product failed its float64 check"


def test_drift_from_the_c_is_refused_with_the_path(command_report: Any) -> None:
    extra = copy.deepcopy(command_report)
    extra["probes"]["sgemm"]["gflops_peak"] = 1.0
    with pytest.raises(ValidationError, match=r"^\$\.probes\.sgemm\.gflops_peak: unknown field"):
        parse_report(extra)
    missing = copy.deepcopy(command_report)
    del missing["probes"]["llm"]["token_ids_sha256"]
    with pytest.raises(ValidationError, match=r"^\$\.probes\.llm\.token_ids_sha256: required field is missing"):
        parse_report(missing)
    wrong = copy.deepcopy(command_report)
    wrong["probes"]["stream"]["triad_gbps"] = "fast"
    with pytest.raises(ValidationError, match=r"^\$\.probes\.stream\.triad_gbps: expected a number"):
        parse_report(wrong)


def test_the_schema_is_shipped() -> None:
    schema = json.loads(rendered()["ProbeReport.schema.json"])
    assert schema["properties"]["probes"]["properties"]["sgemm"]["anyOf"][0]["required"][:2] == ["gflops", "unit"]
