"""Bad input to capsule.wasm: one clear line, exit status 2, no trap, no stack dump, nothing on stdout."""

from __future__ import annotations

from pathlib import Path

import pytest

from host_runner.wasm import run_command
from tests.conftest import Artifacts, run_cli

SMALL = ["--sgemm-n", "128", "--stream-mib", "4", "--disk-mib", "2"]


def assert_clean_refusal(code: int, stdout: str, stderr: str, message: str) -> None:
    assert code == 2, stderr
    assert stdout == ""
    errors = [line for line in stderr.splitlines() if line.startswith("capsule: ")]
    assert len(errors) == 1 and message in errors[0], stderr
    for noise in ("panic", "backtrace", "wasm trap", "Error:", "Traceback"):
        assert noise not in stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--probes", "sgemm,gpu"], "unknown probe 'gpu' in --probes (expected sgemm, stream, disk or llm)"),
        (["--probes", "llm,llm"], "probe 'llm' is listed twice"),
        (["--probes", ","], "--probes names no probe"),
        (["--seed", "xyz"], "--seed expects 2 to 128 hex digits (an even count), got 'xyz'"),
        (["--seed", "abc"], "--seed expects 2 to 128 hex digits"),
        (["--seed", "a" * 130], "--seed expects 2 to 128 hex digits"),
        (["--budget-ms", "soon"], "--budget-ms expects an integer from 1 to 3600000, got 'soon'"),
        (["--budget-ms", "0"], "--budget-ms expects an integer from 1 to 3600000, got '0'"),
        (["--sgemm-n", "99999"], "--sgemm-n expects an integer from 16 to 4096"),
        (["--frobnicate", "1"], "unknown argument '--frobnicate'"),
        (["--seed"], "--seed needs a value"),
    ],
)
def test_bad_arguments(wasmtime_cli: Path, artifacts: Artifacts, args: list[str], message: str) -> None:
    result = run_cli(wasmtime_cli, artifacts.capsule, args)
    assert_clean_refusal(result.returncode, result.stdout, result.stderr, message)
    assert result.stderr.splitlines() == [result.stderr.splitlines()[0], result.stderr.splitlines()[1]]
    assert result.stderr.splitlines()[1].startswith("usage: capsule.wasm")


def test_disk_named_without_scratch(wasmtime_cli: Path, artifacts: Artifacts) -> None:
    result = run_cli(wasmtime_cli, artifacts.capsule, ["--probes", "disk", *SMALL])
    assert_clean_refusal(result.returncode, result.stdout, result.stderr,
                         "the disk probe needs a writable /scratch: no scratch directory /scratch")


def test_read_only_scratch(artifacts: Artifacts, tmp_path: Path) -> None:
    """A read-only preopen (wasmtime-py; as root a chmod would not stop the CLI) is refused."""
    result = run_command(artifacts.capsule, ["--probes", "disk", *SMALL], scratch=tmp_path, scratch_writable=False)
    assert_clean_refusal(result.exit_code, result.stdout, result.stderr, "/scratch is read-only")
    assert not list(tmp_path.iterdir())


def test_read_only_scratch_in_default_run(artifacts: Artifacts, tmp_path: Path) -> None:
    """A scratch the user granted but that cannot be written is an error even when disk was not named."""
    result = run_command(artifacts.capsule, ["--probes", "stream,disk", "--seed", "05", *SMALL], scratch=tmp_path,
                         scratch_writable=False)
    assert_clean_refusal(result.exit_code, result.stdout, result.stderr, "/scratch is read-only")


def test_budget_too_small(wasmtime_cli: Path, artifacts: Artifacts) -> None:
    result = run_cli(wasmtime_cli, artifacts.capsule, ["--probes", "sgemm", "--budget-ms", "1", "--sgemm-n", "512"])
    assert_clean_refusal(result.returncode, result.stdout, result.stderr, "--budget-ms 1 is too small: sgemm gets 1 ms")
    assert "try --budget-ms" in result.stderr


def test_help_exits_zero(wasmtime_cli: Path, artifacts: Artifacts) -> None:
    result = run_cli(wasmtime_cli, artifacts.capsule, ["--help"])
    assert result.returncode == 0 and result.stdout.startswith("usage: capsule.wasm")
