"""GPU probes on every adapter wgpu finds, with the WGSL shaders the browser uses (capsule/shaders/).

Method: capsule/gpu_policy.py, shared with the browser (sizes from the adapter's limits, the checked
entries from the run's seed, repeats and samples, copy bandwidth). TFLOPS = 2 n^3 per dispatch / time,
median of samples, each sample several dispatches in one submission, timed to the completion of a small
read-back (wgpu's work-done callback is unreliable in 0.32). Before any figure is reported the product's
checked entries are compared with float64 dot products (numpy). VRAM comes from NVML when present (nvidia-ml-py);
otherwise it is null with the reason: WebGPU exposes no memory size.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from capsule import gpu_policy as policy

SHADERS = Path(__file__).resolve().parents[1] / "capsule" / "shaders"
BACKENDS = {"vulkan": "vulkan", "metal": "metal", "d3d12": "dx12", "opengl": "gl", "gl": "gl"}


@dataclass
class GpuResult:
    model: str
    backend: str
    vram_mb: int | None
    fp16_tflops: float | None
    fp32_tflops: float | None
    evidence: dict[str, Any] = field(default_factory=dict)

    def profile_entry(self) -> dict[str, Any]:
        return {"model": self.model, "backend": self.backend, "vram_mb": self.vram_mb,
                "fp16_tflops": self.fp16_tflops, "fp32_tflops": self.fp32_tflops}


def _storage(device: Any, data: np.ndarray, wgpu: Any) -> Any:
    usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
    return device.create_buffer_with_data(data=data, usage=usage)


def _bind(device: Any, pipeline: Any, buffers: list[Any]) -> Any:
    entries = [{"binding": i, "resource": {"buffer": b, "offset": 0, "size": b.size}} for i, b in enumerate(buffers)]
    return device.create_bind_group(layout=pipeline.get_bind_group_layout(0), entries=entries)


def _run(device: Any, pipeline: Any, group: Any, grid: tuple[int, int], repeats: int, probe: Any) -> float:
    """Seconds for `repeats` dispatches, measured to the completion of a 16-byte read-back."""
    encoder = device.create_command_encoder()
    for _ in range(repeats):
        compute = encoder.begin_compute_pass()
        compute.set_pipeline(pipeline)
        compute.set_bind_group(0, group)
        compute.dispatch_workgroups(grid[0], grid[1], 1)
        compute.end()
    t0 = time.perf_counter()
    device.queue.submit([encoder.finish()])
    device.queue.read_buffer(probe, 0, 16)
    return time.perf_counter() - t0


def _matmul(device: Any, wgpu: Any, dtype: type[np.generic], limit_bytes: int, budget_s: float,
            seed_hex: str) -> dict[str, Any]:
    """fp32 or fp16 matmul sized, checked and sampled by capsule/gpu_policy.py (the browser's policy too)."""
    precision = "f16" if dtype is np.float16 else "f32"
    shader = f"matmul_{precision}.wgsl"
    module = device.create_shader_module(code=(SHADERS / shader).read_text())
    pipeline = device.create_compute_pipeline(layout="auto", compute={"module": module, "entry_point": "main"})
    rng = np.random.default_rng()
    n: int | None = policy.N_START
    chosen = None
    while n is not None:
        a = rng.uniform(0, 1, (n, n)).astype(dtype)
        b = rng.uniform(0, 1, (n, n)).astype(dtype)
        bufs = [_storage(device, a, wgpu), _storage(device, b, wgpu), _storage(device, np.zeros((n, n), dtype), wgpu),
                device.create_buffer_with_data(data=np.array([n, 0, 0, 0], np.uint32),
                                               usage=wgpu.BufferUsage.UNIFORM)]
        group = _bind(device, pipeline, bufs)
        grid = (n // policy.WORKGROUP, n // policy.WORKGROUP)
        dt = _run(device, pipeline, group, grid, 1, bufs[2])
        chosen = (n, a, b, bufs, group, grid, dt)
        n = policy.next_n(n, dt * 1000, np.dtype(dtype).itemsize, limit_bytes)
    assert chosen is not None  # the loop runs at least once
    n, a, b, bufs, group, grid, dt = chosen
    c = np.frombuffer(device.queue.read_buffer(bufs[2]), dtype=dtype).reshape(n, n)
    plan = policy.check_plan(seed_hex, n, precision)
    rows, cols = (np.array(x) for x in zip(*plan.entries, strict=True))
    exact = np.einsum("ek,ke->e", a[rows].astype(np.float64), b[:, cols].astype(np.float64))
    rel_err = float(np.max(np.abs(c[rows, cols].astype(np.float64) - exact) / exact))
    result: dict[str, Any] = {"n": n, "check": plan.describe(), "max_rel_error": rel_err,
                              "verified": rel_err < plan.tolerance}
    if not result["verified"]:
        result["tflops"] = None
        result["null_reason"] = f"the {shader} product failed its float64 check (error {rel_err:.3g})"
        return result
    repeats = policy.repeats_for(dt * 1000)
    for _ in range(2):  # warm-up: software and real drivers alike ramp up over the first dispatches
        _run(device, pipeline, group, grid, repeats, bufs[2])
    samples: list[float] = []
    deadline = time.perf_counter() + budget_s
    while len(samples) < policy.MIN_SAMPLES or (time.perf_counter() < deadline and len(samples) < policy.MAX_SAMPLES):
        seconds = _run(device, pipeline, group, grid, repeats, bufs[2])
        samples.append(2.0 * n**3 * repeats / seconds / 1e12)
    result.update(tflops=statistics.median(samples), samples=samples, dispatches_per_sample=repeats,
                  spread_pct=100 * (max(samples) - min(samples)) / statistics.median(samples))
    return result


def _bandwidth(device: Any, wgpu: Any, limit_bytes: int) -> dict[str, Any]:
    module = device.create_shader_module(code=(SHADERS / "copy_bandwidth.wgsl").read_text())
    pipeline = device.create_compute_pipeline(layout="auto", compute={"module": module, "entry_point": "main"})
    size = policy.copy_bytes(limit_bytes)
    count = size // 16
    src = np.random.default_rng().uniform(-1, 1, count * 4).astype(np.float32)
    bufs = [_storage(device, src, wgpu), _storage(device, np.zeros_like(src), wgpu)]
    group = _bind(device, pipeline, bufs)
    groups = (count + 255) // 256
    grid = (min(groups, 32768), (groups + 32767) // 32768)
    _run(device, pipeline, group, grid, 1, bufs[1])
    ok = np.array_equal(np.frombuffer(device.queue.read_buffer(bufs[1]), np.float32), src)
    reps = policy.COPY_DISPATCHES
    samples = [32.0 * count * reps / _run(device, pipeline, group, grid, reps, bufs[1]) / 1e9
               for _ in range(policy.COPY_SAMPLES)]
    return {"gbps": statistics.median(samples) if ok else None, "samples": samples, "bytes": size, "verified": ok,
            "check": "the whole destination equals the source after one dispatch",
            "method": f"dst = src over vec4<f32>, 32 B per element (read + write), {reps} dispatches per sample"}


def _nvml_vram_mb(name: str) -> int | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            dev_name = pynvml.nvmlDeviceGetName(handle)
            dev_name = dev_name.decode() if isinstance(dev_name, bytes) else dev_name
            if dev_name in name or name in dev_name:
                return int(pynvml.nvmlDeviceGetMemoryInfo(handle).total // 2**20)
    except Exception:  # NVML present but unusable (no driver): fall back to "unknown"
        return None
    return None


def _quiet_vulkan_loader() -> None:
    """Mesa's Vulkan drivers print "XDG_RUNTIME_DIR is invalid or not set" on every adapter enumeration
    where services (systemd units, containers) run without a login session: noise in a node's log. They
    only want a private directory for sockets they do not need here; give them one."""
    current = os.environ.get("XDG_RUNTIME_DIR")
    if current and os.path.isdir(current) and os.access(current, os.W_OK):
        return
    private = os.path.join(tempfile.gettempdir(), f"ce-bench-runtime-{os.getuid()}")
    os.makedirs(private, mode=0o700, exist_ok=True)
    os.environ["XDG_RUNTIME_DIR"] = private


def probe_all(seed_hex: str, budget_s: float = 1.0) -> tuple[list[GpuResult], list[str]]:
    """Measures every adapter; returns results and, for adapters or a missing wgpu, readable notes."""
    _quiet_vulkan_loader()
    try:
        import wgpu
    except ImportError:
        return [], ["wgpu is not installed: no GPU probes (pip install wgpu)"]
    notes: list[str] = []
    try:
        adapters = wgpu.gpu.enumerate_adapters_sync()
    except Exception as exc:  # a broken driver stack must not stop the CPU measurement
        return [], [f"no GPU adapters: wgpu could not enumerate them ({exc})"]
    if not adapters:
        notes.append("no GPU adapters found (Vulkan/Metal/DX12 driver missing?)")
    results = []
    seen: set[str] = set()
    # One device often appears through several backends (e.g. Vulkan and GL): measure it once, through
    # the first listed, which wgpu orders by preference (native APIs before GL).
    for adapter in sorted(adapters, key=lambda a: str(a.info.get("backend_type", "")).lower() in ("gl", "opengl")):
        info = adapter.info
        name = str(info.get("device") or info.get("description") or "unknown adapter")
        backend = BACKENDS.get(str(info.get("backend_type", "")).lower(), "vulkan")
        if name in seen:
            notes.append(f"{name}: also offered through {backend}, measured once")
            continue
        seen.add(name)
        try:
            results.append(_probe_adapter(adapter, wgpu, name, backend, str(info.get("adapter_type", "")), budget_s,
                                          seed_hex))
        except Exception as exc:  # one failing adapter is reported, the others still run
            notes.append(f"{name} ({backend}): probe failed: {type(exc).__name__}: {exc}")
    return results, notes


def _probe_adapter(adapter: Any, wgpu: Any, name: str, backend: str, kind: str, budget_s: float,
                   seed_hex: str) -> GpuResult:
    has_f16 = "shader-f16" in adapter.features
    device = adapter.request_device_sync(required_features=["shader-f16"] if has_f16 else [])
    limit = int(device.limits["max-storage-buffer-binding-size"])
    f32 = _matmul(device, wgpu, np.float32, limit, budget_s / 2, seed_hex)
    f16: dict[str, Any] = _matmul(device, wgpu, np.float16, limit, budget_s / 2, seed_hex) if has_f16 else {
        "tflops": None, "null_reason": "the adapter has no shader-f16 feature"}
    bw = _bandwidth(device, wgpu, limit)
    vram = _nvml_vram_mb(name)
    vram_source = "nvml" if vram is not None else None
    evidence = {"adapter_type": kind, "fp32_matmul": f32, "fp16_matmul": f16, "copy_bandwidth": bw,
                "max_storage_buffer_binding_size": limit, "vram_source": vram_source,
                "method": "WGSL shaders from capsule/shaders via wgpu (the same files the browser runs)"}
    if vram is None:
        evidence["vram_null_reason"] = ("CPU adapter (software rasterizer): no dedicated VRAM" if kind.upper() == "CPU"
                                        else "NVML unavailable and WebGPU exposes no memory size")
    return GpuResult(name, backend, vram, f16.get("tflops"), f32.get("tflops"), evidence)
