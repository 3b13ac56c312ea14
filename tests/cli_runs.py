"""`ce-bench` run as a user runs it, in a home of its own: the tests' one way to call the command line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CLI = str(Path(sys.executable).parent / "ce-bench")


def ce_bench(home: Path, *args: str, cwd: Path | None = None, timeout: float = 300,
             env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, CE_BENCH_HOME=str(home), COLUMNS="160", **(env_extra or {}))
    return subprocess.run([CLI, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)


def assert_user_error(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert result.returncode == 1, result.stdout + result.stderr
    assert "ce-bench: error: " in result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr
