"""The GPU probe's numpy check rejects a wrong product (so a passing check in the end-to-end test means
something): a shader that skips half of K is run on the real lavapipe adapter."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import wgpu

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
    result = gpu._matmul(device, wgpu, np.float32, 128 * 2**20, 0.2)
    assert result["verified"] is False and result["tflops"] is None
    assert "failed its numpy check" in result["null_reason"]


def test_correct_product_passes() -> None:
    result = gpu._matmul(first_device(), wgpu, np.float32, 128 * 2**20, 0.2)
    assert result["verified"] is True and result["tflops"] > 0 and result["n"] % 64 == 0


def test_f16_shader_is_the_f32_shader_in_half_precision() -> None:
    """matmul_f16.wgsl is matmul_f32.wgsl with f16 storage and `enable f16;` and nothing else, so the two
    pipelines cannot drift apart (one .wgsl per pipeline, as the browser and wgpu load them)."""
    f32 = (gpu.SHADERS / "matmul_f32.wgsl").read_text()
    f16 = (gpu.SHADERS / "matmul_f16.wgsl").read_text()
    expected = "enable f16;\n\n" + f32.replace("array<f32", "array<f16").replace(
        "fp32 matrices", "fp16 matrices (fp16 multiply and accumulate; needs the shader-f16 feature)")
    assert f16 == expected
