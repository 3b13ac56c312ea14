"""ruff and mypy (strict) over the Python sources, through the same script developers run."""

from __future__ import annotations

import subprocess

from tests.conftest import ROOT


def test_scripts_check_passes() -> None:
    result = subprocess.run([str(ROOT / "scripts" / "check")], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
