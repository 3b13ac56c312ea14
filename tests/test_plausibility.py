"""Physical bounds (capsule/plausibility.py): each bound catches a figure beyond it, real figures pass, and
a real relay refuses a correctly signed profile beyond physics with 422 implausible_figure naming it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from capsule import plausibility
from capsule.model import NodeProfile
from capsule.signing import sign
from capsule.typed import parse
from tests.relay_process import RelayProcess
from tests.samples import mutated, sample_profile

REAL = Path(__file__).parent.parent / "bench" / "fixtures" / "real_profile.json"  # a real run, AMD EPYC


def typed(profile: dict[str, Any]) -> NodeProfile:
    return parse(NodeProfile, profile)


def test_a_real_profile_is_plausible() -> None:
    assert plausibility.check(typed(json.loads(REAL.read_text()))) is None


@pytest.mark.parametrize(("field", "value"), [
    ("cpu.gflops_fp32", 2 * plausibility.CORE_GFLOPS_MAX + 1),   # 2 cores
    ("cpu.mem_bw_gbps", 2 * plausibility.CORE_MEM_BW_GBPS_MAX + 1),
    ("llm.tokens_per_sec", plausibility.TOKENS_PER_SEC_MAX + 1),
    ("storage.write_mbps", plausibility.STORAGE_WRITE_MBPS_MAX + 1),
    ("storage.read_mbps", plausibility.STORAGE_READ_MBPS_MAX + 1),
    ("gpus.0.fp32_tflops", plausibility.GPU_FP32_TFLOPS_MAX + 1),
    ("gpus.0.fp16_tflops", plausibility.GPU_FP16_TFLOPS_MAX + 1),
    ("gpus.0.vram_mb", plausibility.GPU_VRAM_MB_MAX + 1),
])
def test_each_bound_catches_a_figure_beyond_it(field: str, value: float) -> None:
    _, profile = sample_profile()
    found = plausibility.check(typed(mutated(profile, field, value)))
    path = "$." + field.replace(".0.", "[0].")
    assert found is not None and found.field == path and found.value == value
    assert plausibility.check(typed(mutated(profile, field, found.bound))) is None  # the bound itself passes


def test_the_relay_refuses_a_signed_profile_beyond_physics(tmp_path: Path) -> None:
    with RelayProcess(tmp_path / "data") as relay:
        _, beacon, _ = relay.get("/beacon")
        key, profile = sample_profile(beacon=beacon)
        fast = sign("NodeProfile", {**{k: v for k, v in profile.items() if k != "sig"},
                                    "cpu": {**profile["cpu"], "gflops_fp32": 1e6}}, key)
        status, body = relay.post("/v1/profiles", fast)
        assert (status, body["code"], body["field"]) == (422, "implausible_figure", "$.cpu.gflops_fp32"), body
        assert "2 core(s) x 104 GFLOP/s" in body["detail"]
        assert relay.post("/v1/profiles", profile)[0] == 201
