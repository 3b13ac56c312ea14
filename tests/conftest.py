"""Shared fixtures: the built capsule, the real wasmtime CLI, and a native build of the same C."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# Every hypothesis test runs derandomized (the same cases on every run, chosen from the test itself), so CI
# never passes or fails by luck; failures once found are pinned with @example beside each test. Explore with
# HYPOTHESIS_PROFILE=explore (random cases; a failure prints the blob that replays it).
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

import build  # noqa: E402  (the repository's build script)


@dataclass(frozen=True)
class Artifacts:
    capsule: Path
    reactor: Path


@pytest.fixture(scope="session")
def artifacts() -> Artifacts:
    build.build()
    return Artifacts(capsule=build.BUILD / "capsule.wasm", reactor=build.BUILD / "capsule-reactor.wasm")


@pytest.fixture(scope="session")
def wasmtime_cli() -> Path:
    cli = Path(sys.executable).parent / "wasmtime"
    found = cli if cli.exists() else shutil.which("wasmtime")
    if found is None:
        pytest.fail("the wasmtime CLI is not installed: run scripts/setup")
    return Path(found)


def run_cli(
    wasmtime_cli: Path, capsule: Path, args: Sequence[str], scratch: Path | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """`wasmtime run [--dir scratch::/scratch] capsule.wasm ARGS`, as a user types it."""
    cmd = [str(wasmtime_cli), "run"]
    if scratch is not None:
        cmd += ["--dir", f"{scratch}::/scratch"]
    cmd += [str(capsule), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="session")
def native_capsule(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same C sources built natively with the system compiler (128-bit vector extensions)."""
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.fail("no system C compiler (cc/gcc/clang) to build the native reference")
    out = tmp_path_factory.mktemp("native") / "capsule-native"
    sources = [str(build.KERNELS / s) for s in build.COMMAND_SOURCES]
    flags = [f for f in build.COMMON_FLAGS if f not in ("-msimd128", "-s")]
    subprocess.run([cc, *flags, *sources, "-lm", "-o", str(out)], check=True, capture_output=True, text=True)
    return out
