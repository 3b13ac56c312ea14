"""Physical bounds (capsule/plausibility.py), beyond tests/test_plausibility.py: the refusal carries the bound
and the reason a relay sends back in its 422 detail, word for word, for each figure (mutation testing:
scripts/mutants)."""

from __future__ import annotations

from typing import Any

import pytest

from capsule import plausibility
from capsule.model import NodeProfile
from capsule.typed import parse
from tests.samples import mutated, sample_profile

PROFILE = sample_profile()[1]  # 2 cores, one GPU


def typed(profile: dict[str, Any]) -> NodeProfile:
    return parse(NodeProfile, profile)


@pytest.mark.parametrize(("field", "value", "path", "bound", "message"), [
    ("cpu.gflops_fp32", 300.0, "$.cpu.gflops_fp32", 208.0,
     "$.cpu.gflops_fp32 = 300 exceeds 208: 2 core(s) x 104 GFLOP/s, the most a core can do with wasm SIMD128 "
     "(4 lanes x 4 vector ops/cycle x 6.5 GHz)"),
    ("cpu.mem_bw_gbps", 500.0, "$.cpu.mem_bw_gbps", 400.0,
     "$.cpu.mem_bw_gbps = 500 exceeds 400: 2 core(s) x 200 GB/s per core, at most 8000 GB/s "
     "(8 sockets of HBM-equipped CPUs)"),
    ("llm.tokens_per_sec", 5000.0, "$.llm.tokens_per_sec", plausibility.TOKENS_PER_SEC_MAX,
     "$.llm.tokens_per_sec = 5000 exceeds 3466.67: 1 stream(s) (at most one per core), each one core's 104 GFLOP/s "
     "over 2 x 1.5e+07 flops per decoded token"),
    ("llm.tokens_per_sec_one_stream", 5000.0, "$.llm.tokens_per_sec_one_stream", plausibility.TOKENS_PER_SEC_MAX,
     "$.llm.tokens_per_sec_one_stream = 5000 exceeds 3466.67: one core's 104 GFLOP/s over 2 x 1.5e+07 flops per "
     "decoded token"),
    ("storage.write_mbps", 70_000.0, "$.storage.write_mbps", 64_000.0,
     "$.storage.write_mbps = 70000 exceeds 64000: an fsync'ed write to one file system, at most a PCIe 5.0 x16 "
     "link"),
    ("storage.read_mbps", 9e6, "$.storage.read_mbps", 8e6,
     "$.storage.read_mbps = 9e+06 exceeds 8e+06: a read served from memory at the machine bandwidth bound"),
    ("gpus.0.fp32_tflops", 600.0, "$.gpus[0].fp32_tflops", 500.0,
     "$.gpus[0].fp32_tflops = 600 exceeds 500: fp32 WGSL matmul on any GPU"),
    ("gpus.0.fp16_tflops", 6000.0, "$.gpus[0].fp16_tflops", 5000.0,
     "$.gpus[0].fp16_tflops = 6000 exceeds 5000: fp16 WGSL matmul on any GPU"),
    ("gpus.0.vram_mb", 5 * 1024 * 1024, "$.gpus[0].vram_mb", 4 * 1024 * 1024,
     "$.gpus[0].vram_mb = 5.24288e+06 exceeds 4.1943e+06: memory of any one accelerator"),
])
def test_the_refusal_names_the_bound_and_why(field: str, value: float, path: str, bound: float,
                                              message: str) -> None:
    found = plausibility.check(typed(mutated(PROFILE, field, value)))
    assert found is not None
    assert (found.field, found.value, found.bound) == (path, value, bound)
    assert found.message() == message


def test_aggregate_tokens_per_sec_is_bounded_per_stream() -> None:
    """Tokens/s is aggregate decode throughput (issue 45): k streams may show k x one core's bound, not more, and
    never more streams than cores (a profile naming 256 streams on one core once passed at 870,400 tokens/s)."""
    four = mutated(mutated(mutated(PROFILE, "llm.streams", 4), "cpu.cores", 4), "cpu.threads", 4)
    limit = 4 * plausibility.TOKENS_PER_SEC_MAX
    assert plausibility.check(typed(mutated(four, "llm.tokens_per_sec", limit))) is None
    found = plausibility.check(typed(mutated(four, "llm.tokens_per_sec", limit + 1)))
    assert found is not None and found.bound == limit
    lying = mutated(mutated(PROFILE, "llm.streams", 256), "llm.tokens_per_sec", 256 * plausibility.TOKENS_PER_SEC_MAX)
    found = plausibility.check(typed(lying))
    assert found is not None and found.bound == PROFILE["cpu"]["cores"] * plausibility.TOKENS_PER_SEC_MAX


def test_memory_bandwidth_is_capped_by_the_machine_not_the_core_count() -> None:
    many = mutated(mutated(PROFILE, "cpu.cores", 64), "cpu.threads", 64)
    found = plausibility.check(typed(mutated(many, "cpu.mem_bw_gbps", 9000.0)))
    assert found is not None and found.bound == plausibility.MACHINE_MEM_BW_GBPS_MAX
    assert plausibility.check(typed(mutated(many, "cpu.mem_bw_gbps", 8000.0))) is None


def test_the_first_figure_beyond_its_bound_is_named() -> None:
    both = mutated(mutated(PROFILE, "storage.read_mbps", 9e6), "gpus.0.vram_mb", 5 * 1024 * 1024)
    found = plausibility.check(typed(both))
    assert found is not None and found.field == "$.storage.read_mbps"


def test_each_gpu_is_checked_under_its_own_index() -> None:
    gpu = PROFILE["gpus"][0]
    two = mutated(PROFILE, "gpus", [gpu, {**gpu, "fp32_tflops": 501.0}])
    found = plausibility.check(typed(two))
    assert found is not None and found.field == "$.gpus[1].fp32_tflops"
