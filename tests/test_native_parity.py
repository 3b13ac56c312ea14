"""The same C built natively with the system compiler computes the same bits as capsule.wasm: the
reference model's token hash and logits, and the SGEMM checksum (the issue's cross-check)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import Artifacts, run_cli


@pytest.mark.parametrize("seed", ["00ff", "be11ab1e"])
def test_native_and_wasm_agree(seed: str, native_capsule: Path, wasmtime_cli: Path, artifacts: Artifacts) -> None:
    args = ["--probes", "llm,sgemm", "--seed", seed, "--sgemm-n", "200"]
    native = subprocess.run([str(native_capsule), *args], capture_output=True, text=True, timeout=120)
    assert native.returncode == 0, native.stderr
    wasm = run_cli(wasmtime_cli, artifacts.capsule, args)
    assert wasm.returncode == 0, wasm.stderr
    n, w = json.loads(native.stdout), json.loads(wasm.stdout)
    assert n["simd"] == "native-vector-128" and w["simd"] == "wasm-simd128"
    for key in ("token_ids_sha256", "last_logits_sha256", "token_ids_head"):
        assert n["probes"]["llm"][key] == w["probes"]["llm"][key], key
    assert n["probes"]["sgemm"]["checksum"] == w["probes"]["sgemm"]["checksum"]


def test_different_seeds_decode_differently(native_capsule: Path) -> None:
    hashes = set()
    for seed in ("01", "02"):
        out = subprocess.run([str(native_capsule), "--probes", "llm", "--seed", seed], capture_output=True, text=True,
                             timeout=120, check=True)
        hashes.add(json.loads(out.stdout)["probes"]["llm"]["last_logits_sha256"])
    assert len(hashes) == 2
