"""CE jobs: manifests name the capsule by sha256, limits stop runaway jobs, results are signed."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

import pytest
import wasmtime

from capsule.canonical import canonical_bytes
from capsule.signing import verify_record
from host_runner.wasm import Limits, limited_engine, run_command
from tests.cli_runs import assert_user_error, ce_bench
from tests.conftest import Artifacts


def manifest(artifacts: Artifacts, **changes: Any) -> dict[str, Any]:
    m: dict[str, Any] = {"v": 1, "capsule": {"sha256": hashlib.sha256(artifacts.capsule.read_bytes()).hexdigest()},
                         "probes": ["sgemm", "llm"], "budget_ms": 500,
                         "limits": {"memory_mib": 512, "wall_ms": 60000}}
    m.update(changes)
    return m


def write(tmp_path: Path, m: dict[str, Any]) -> Path:
    path = tmp_path / "job.json"
    path.write_text(json.dumps(m))
    return path


def test_job_runs_and_signs_profile_and_receipt(tmp_path: Path, artifacts: Artifacts) -> None:
    m = manifest(artifacts)
    result = ce_bench(tmp_path, "job", "run", str(write(tmp_path, m)), "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    profile = json.loads((tmp_path / "out" / "profile.json").read_text())
    receipt = json.loads((tmp_path / "out" / "receipt.json").read_text())
    verify_record("NodeProfile", profile)
    verify_record("JobReceipt", receipt)
    assert receipt["status"] == "ok" and receipt["error"] is None
    assert receipt["job_id"] == hashlib.sha256(canonical_bytes(m)).hexdigest()
    assert receipt["profile_sha256"] == hashlib.sha256(canonical_bytes(profile)).hexdigest()
    assert receipt["node_id"] == profile["node_id"]
    assert profile["cpu"]["gflops_fp32"] > 0 and profile["llm"]["tokens_per_sec"] > 0
    assert profile["evidence"]["job"]["instances"] == 1
    assert ce_bench(tmp_path, "verify", str(tmp_path / "out" / "receipt.json")).returncode == 0


def test_too_small_deadline_ends_with_a_clear_error(tmp_path: Path, artifacts: Artifacts) -> None:
    m = manifest(artifacts, probes=["llm", "sgemm"], limits={"memory_mib": 512, "wall_ms": 150})
    t0 = time.monotonic()
    result = ce_bench(tmp_path, "job", "run", str(write(tmp_path, m)), "--out", str(tmp_path / "out"), timeout=60)
    elapsed = time.monotonic() - t0
    assert_user_error(result, "job failed: the job exceeded its wall-clock limit of 150 ms")
    assert elapsed < 20, f"the deadline did not stop the job promptly ({elapsed:.1f} s)"
    receipt = json.loads((tmp_path / "out" / "receipt.json").read_text())
    verify_record("JobReceipt", receipt)
    assert receipt["status"] == "failed" and receipt["profile_sha256"] is None
    assert not (tmp_path / "out" / "profile.json").exists()


def test_memory_limit_is_enforced(tmp_path: Path, artifacts: Artifacts) -> None:
    m = manifest(artifacts, probes=["llm"], limits={"memory_mib": 32, "wall_ms": 60000})
    result = ce_bench(tmp_path, "job", "run", str(write(tmp_path, m)), "--out", str(tmp_path / "out"))
    assert_user_error(result, "job failed", "memory limit 32 MiB")


def test_fuel_limit_is_enforced(tmp_path: Path, artifacts: Artifacts) -> None:
    m = manifest(artifacts, limits={"memory_mib": 512, "wall_ms": 60000, "fuel": 1000000})
    result = ce_bench(tmp_path, "job", "run", str(write(tmp_path, m)), "--out", str(tmp_path / "out"))
    assert_user_error(result, "job failed: the job ran out of fuel (1000000 units)")


def test_capsule_mismatch_is_refused_before_running(tmp_path: Path, artifacts: Artifacts) -> None:
    m = manifest(artifacts, capsule={"sha256": "0" * 64})
    result = ce_bench(tmp_path, "job", "run", str(write(tmp_path, m)), "--out", str(tmp_path / "out"))
    assert_user_error(result, "capsule mismatch: the manifest names sha256 0000000000000000", "refusing to run")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("change", "message"), [
    ({"probes": ["gpu"]}, "$.probes: unknown probe 'gpu'"),
    ({"probes": []}, "$.probes: expected at least one probe"),
    ({"limits": {"memory_mib": 512}}, "$.limits.wall_ms: required field is missing"),
    ({"limits": {"memory_mib": 1, "wall_ms": 10}}, "$.limits.memory_mib: expected an integer in [16, 4096], got 1"),
    ({"capsule": {"sha256": "xyz"}}, "$.capsule.sha256: expected a string matching"),
    ({"v": 9}, "$.v: expected an integer in [1, 1], got 9"),
    ({"surprise": 1}, "$.surprise: unknown field"),
])
def test_manifest_errors_name_the_field(tmp_path: Path, artifacts: Artifacts, change: dict[str, Any],
                                        message: str) -> None:
    result = ce_bench(tmp_path, "job", "run", str(write(tmp_path, manifest(artifacts, **change))))
    assert_user_error(result, "invalid manifest", message)


def test_unreadable_manifest(tmp_path: Path) -> None:
    (tmp_path / "job.json").write_text("[1,")
    assert_user_error(ce_bench(tmp_path, "job", "run", str(tmp_path / "job.json")), "is not JSON")
    assert_user_error(ce_bench(tmp_path, "job", "run", str(tmp_path / "none.json")), "cannot read the manifest")


def test_deadline_that_passes_while_the_module_compiles_still_stops_the_run(artifacts: Artifacts) -> None:
    """Regression (CI, 2026-12-03): the timer used to start before compilation; when it fired first, the
    deadline armed afterwards was never reached and a 150 ms job ran for 3 s. A deadline already in the past
    must stop the run at its first check."""
    with pytest.raises(wasmtime.Trap) as trap:
        run_command(artifacts.capsule, ["--probes", "sgemm", "--budget-ms", "2000"], engine=limited_engine(),
                    limits=Limits(deadline=time.monotonic() - 1))
    assert trap.value.trap_code == wasmtime.TrapCode.INTERRUPT
