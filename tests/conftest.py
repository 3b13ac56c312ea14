"""Shared fixtures: the built capsule, the real wasmtime CLI, and a native build of the same C."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# Every hypothesis test runs derandomized (the same cases on every run, chosen from the test itself), so CI
# never passes or fails by luck; failures once found are pinned with @example beside each test. Explore with
# HYPOTHESIS_PROFILE=explore (random cases; a failure prints the blob that replays it).
# No per-example deadline: it times one example on whatever else the machine runs (an ordinary test beside a
# `timed` one runs at nice 19, tests/scheduling.py: one example took 782 ms against hypothesis's 200 ms in
# fresh-clone run #35, 18 ms when replayed), nor a health check on how fast examples are drawn, for the same
# reason. What a test promises about time, it asserts itself.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("explore", derandomize=False, print_blob=True, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

import build  # noqa: E402  (the repository's build script)


def _apply_config_mutant(spec: str) -> None:
    """scripts/config_mutants.py: "module:Class:field:repr(value)" changes that field's default for every
    instance built in this process (the dataclass __init__'s default argument)."""
    import ast
    import importlib
    import inspect

    module, cls, name, value = spec.split(":", 3)
    klass = getattr(importlib.import_module(module), cls)
    init = klass.__init__
    params = list(inspect.signature(init).parameters)[1:]
    defaults = list(init.__defaults__ or ())
    index = params.index(name) - (len(params) - len(defaults))
    defaults[index] = ast.literal_eval(value)
    init.__defaults__ = tuple(defaults)


if os.environ.get("CE_CONFIG_MUTANT"):
    _apply_config_mutant(os.environ["CE_CONFIG_MUTANT"])

# How two xdist workers share the cores (`alone`, `timed` and ordinary tests): tests/scheduling.py
from tests.scheduling import pytest_runtest_protocol  # noqa: E402, F401  (the hook pytest finds here)


@dataclass(frozen=True)
class Artifacts:
    capsule: Path
    reactor: Path


@pytest.fixture(scope="session")
def artifacts() -> Artifacts:
    build.build()
    return Artifacts(capsule=build.BUILD / "capsule.wasm", reactor=build.BUILD / "capsule-reactor.wasm")


@pytest.fixture(scope="module")
def machine_profile(artifacts: Artifacts, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A real NodeProfile of this machine (no GPU, 500 ms phases, a local beacon), measured by each module
    that asks (its relay tests re-sign it for each key against their relay's beacon), by its first test, an
    `alone` one, so on quiet cores. Once per module, not once per test process: measured 15 minutes earlier in
    the run, the claims outran this VM's speed of the moment, and the honest identities of
    tests/test_proven_cluster.py missed every roll-call deadline (fresh-clone run #22)."""
    from common.keys import NodeKey
    from host_runner.node import RunOptions, measure
    from host_runner.relay_client import local_beacon

    key = NodeKey.generate()
    opts = RunOptions(capsule=artifacts.capsule, phase_budget_ms=500, gpu=False, jitter=False,
                      scratch=tmp_path_factory.mktemp("machine-profile"))
    return dict(measure(key, local_beacon(key), opts).profile)


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


@pytest.fixture(scope="session")
def browser_type_launch_args() -> dict[str, Any]:
    """pytest-playwright launches Debian's Chromium with WebGPU (tests/browsers.py); a module that wants another
    launch (tests/test_promises_join_page.py: without WebGPU) overrides this."""
    from tests.browsers import WEBGPU_LAUNCH_ARGS

    return dict(WEBGPU_LAUNCH_ARGS)


@pytest.fixture(scope="module")
def claims() -> dict[str, Any]:
    """What the dispatch tests' nodes claim (tests/job_nodes.py sample_claims)."""
    from tests.job_nodes import sample_claims

    return sample_claims()
