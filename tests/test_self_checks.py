"""Each probe's self-check catches a broken kernel: test builds of the same C with a fault injected
(CE_INJECT_FAULT: 1 = an SGEMM kernel that drops one term of every dot product, 2 = a triad kernel whose
scalar is off by 1e-9, 3 = storage that flips one bit) must report the check as failed and the figure as
null, never as a number. The faults exist only in these native test builds (the define is never set for
capsule.wasm)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

import build


def faulty_capsule(tmp: Path, fault: int) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.fail("no system C compiler to build the fault-injected capsule")
    out = tmp / f"capsule-fault-{fault}"
    flags = [f for f in build.COMMON_FLAGS if f not in ("-msimd128", "-s")]
    subprocess.run([cc, *flags, f"-DCE_INJECT_FAULT={fault}", *(str(build.KERNELS / s) for s in build.COMMAND_SOURCES),
                    "-lm", "-o", str(out)], check=True, capture_output=True, text=True)
    return out


def run(binary: Path, *args: str) -> dict[str, Any]:
    out = subprocess.run([str(binary), "--seed", "5eed", "--budget-ms", "300", "--soft-budget", *args],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "FAILED" in out.stderr, out.stderr  # the summary says so too
    report: dict[str, Any] = json.loads(out.stdout)
    return report


def test_sgemm_sampled_entry_check_catches_a_broken_kernel(tmp_path: Path) -> None:
    sgemm = run(faulty_capsule(tmp_path, 1), "--probes", "sgemm", "--sgemm-n", "256")["probes"]["sgemm"]
    assert sgemm["verified"] is False and sgemm["gflops"] is None and sgemm["max_error_ratio"] > 1
    assert sgemm["reason"] and sgemm["work"]["spans_ms"] == []  # no samples were timed


@pytest.mark.parametrize("mode", [[], ["--stream-triad-only"]])
def test_stream_closed_form_check_catches_a_broken_kernel(tmp_path: Path, mode: list[str]) -> None:
    stream = run(faulty_capsule(tmp_path, 2), "--probes", "stream", "--stream-mib", "4", *mode)["probes"]["stream"]
    assert stream["verified"] is False and stream["triad_gbps"] is None and stream["max_rel_error"] > 1e-13
    assert all(stream[f"{k}_gbps"] is None for k in ("copy", "scale", "add"))


def test_disk_byte_comparison_catches_a_flipped_bit(tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    disk = run(faulty_capsule(tmp_path, 3), "--probes", "disk", "--disk-mib", "2", "--scratch", str(scratch))[
        "probes"]["disk"]
    assert disk["verified"] is False and disk["write_mbps"] is None and disk["read_mbps"] is None
    assert "differed" in disk["reason"]
    assert list(scratch.iterdir()) == []  # the probe file is removed either way
