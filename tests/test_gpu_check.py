"""The GPU probe's numpy check rejects a wrong product (so a passing check in the end-to-end test means
something): a shader that skips half of K is run on the real lavapipe adapter."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import wgpu

from capsule import gpu_policy as policy
from host_runner import gpu


def first_device() -> object:
    adapters = wgpu.gpu.enumerate_adapters_sync()
    if not adapters:
        pytest.fail("no WebGPU adapter: scripts/setup installs lavapipe (mesa-vulkan-drivers)")
    return adapters[0].request_device_sync()


def test_wrong_product_is_not_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = (gpu.SHADERS / "matmul_f32.wgsl").read_text()
    broken = source.replace("k0 < n; k0 += KT", "k0 < n / 2u; k0 += KT")  # drops half of the products
    assert broken != source
    (tmp_path / "matmul_f32.wgsl").write_text(broken)
    monkeypatch.setattr(gpu, "SHADERS", tmp_path)
    device = first_device()
    result = gpu._matmul(device, wgpu, np.float32, 128 * 2**20, 0.2, "5eed")
    assert result["verified"] is False and result["tflops"] is None
    assert "failed its float64 check" in result["null_reason"]


def test_correct_product_passes() -> None:
    result = gpu._matmul(first_device(), wgpu, np.float32, 128 * 2**20, 0.2, "5eed")
    assert result["verified"] is True and result["tflops"] > 0 and result["n"] % 64 == 0
    assert result["check"] == policy.check_plan("5eed", result["n"], "f32").describe()


def test_sizes_follow_the_shared_policy_and_the_adapter_limit() -> None:
    """A 1 MiB binding limit caps fp32 matmul at n = 512 (2 x 512^2 x 4 B would need 4 MiB for n = 1024)."""
    assert policy.next_n(256, 1.0, 4, 1 << 20) == 512
    assert policy.next_n(512, 1.0, 4, 1 << 20) is None
    assert policy.next_n(256, policy.STEP_TARGET_MS + 1, 4, 1 << 30) is None  # slow enough already
    assert policy.next_n(policy.N_MAX, 1.0, 2, 1 << 30) is None
    result = gpu._matmul(first_device(), wgpu, np.float32, 1 << 20, 0.2, "5eed")
    assert result["n"] <= 512


def test_checked_entries_come_from_the_seed() -> None:
    a, b = policy.check_plan("5eed", 512, "f32"), policy.check_plan("5eed", 512, "f32")
    assert a == b and len(a.entries) == policy.CHECKED_ENTRIES
    assert all(0 <= i < 512 and 0 <= j < 512 for i, j in a.entries)
    assert policy.check_plan("5eee", 512, "f32") != a and policy.check_plan("5eed", 512, "f16").tolerance == 0.05


def test_f16_shader_is_the_f32_shader_in_half_precision() -> None:
    """matmul_f16.wgsl is matmul_f32.wgsl with f16 storage and `enable f16;` and nothing else, so the two
    pipelines cannot drift apart (one .wgsl per pipeline, as the browser and wgpu load them)."""
    f32 = (gpu.SHADERS / "matmul_f32.wgsl").read_text()
    f16 = (gpu.SHADERS / "matmul_f16.wgsl").read_text()
    expected = "enable f16;\n\n" + f32.replace("array<f32", "array<f16").replace(
        "fp32 matrices", "fp16 matrices (fp16 multiply and accumulate; needs the shader-f16 feature)")
    assert f16 == expected
