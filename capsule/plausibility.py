"""Physical bounds on a NodeProfile's figures: what no hardware of its kind can do, whatever it signs. A relay
refuses a profile beyond a bound (422 `implausible_figure`, naming the bound); a node can run the same
check on itself before it signs (a figure beyond physics is a measurement bug, not a fast machine).

The bounds are deliberately generous — they catch lies and bugs, not fast machines; what a node really
does is established by the relay's challenges. Each constant says where it comes from.
"""

from __future__ import annotations

from dataclasses import dataclass

from capsule.model import NodeProfile

# The capsule's SGEMM is wasm SIMD128: 4 fp32 lanes; no FMA in the base spec, so a multiply and an add per
# lane are 2 flops over 2 instructions. A core issuing 4 vector FP operations per cycle (Zen 4 and Golden
# Cove have 4 FP pipes) at 6.5 GHz (above any shipping boost clock) does 4 lanes x 4 ops x 6.5 GHz.
SIMD128_LANES = 4
VECTOR_FP_OPS_PER_CYCLE = 4
CLOCK_MAX_GHZ = 6.5
CORE_GFLOPS_MAX = SIMD128_LANES * VECTOR_FP_OPS_PER_CYCLE * CLOCK_MAX_GHZ  # 104 GFLOP/s per core

# STREAM triad per core: a core's line fill buffers bound what it can move (~50 GB/s measured on the
# fastest server cores); 200 GB/s leaves 4x margin. A whole machine: 12-channel DDR5-6400 is 614 GB/s per
# socket; HBM-equipped CPUs (Xeon Max) reach ~1 TB/s per socket; 8 sockets of those is 8,000 GB/s.
CORE_MEM_BW_GBPS_MAX = 200.0
MACHINE_MEM_BW_GBPS_MAX = 8_000.0

# Reference-model decode (ce-ref-15m-f32): ~2 flops per parameter per token, one instance on one core. The
# model (60 MB fp32) can sit in a large L3, so DRAM bandwidth does not bound it; the core's compute does.
REF_MODEL_PARAMS = 15_000_000
TOKENS_PER_SEC_MAX = CORE_GFLOPS_MAX * 1e9 / (2 * REF_MODEL_PARAMS)  # ~3,470 tokens/s

# Storage: a write is fsync'ed to one file system, which sits on at most a PCIe 5.0 x16 link (~64 GB/s);
# a read may come from the page cache (the capsule says so), so it is bounded by memory, not by the disk.
STORAGE_WRITE_MBPS_MAX = 64_000.0
STORAGE_READ_MBPS_MAX = MACHINE_MEM_BW_GBPS_MAX * 1000

# GPUs through WGSL (no tensor cores): the largest accelerators today do ~80 TFLOP/s fp32 and ~2,500 dense
# fp16 with tensor cores; 500 / 5,000 leave room for what ships next. VRAM: 288 GB is today's largest.
GPU_FP32_TFLOPS_MAX = 500.0
GPU_FP16_TFLOPS_MAX = 5_000.0
GPU_VRAM_MB_MAX = 4 * 1024 * 1024


@dataclass(frozen=True)
class Implausible:
    field: str   # JSON path of the figure
    value: float
    bound: float
    why: str

    def message(self) -> str:
        return f"{self.field} = {self.value:g} exceeds {self.bound:g}: {self.why}"


def check(profile: NodeProfile) -> Implausible | None:
    """The first figure beyond its physical bound, or None."""
    cores = profile.cpu.cores
    limits: list[tuple[str, float | None, float, str]] = [
        ("$.cpu.gflops_fp32", profile.cpu.gflops_fp32, cores * CORE_GFLOPS_MAX,
         f"{cores} core(s) x {CORE_GFLOPS_MAX:g} GFLOP/s, the most a core can do with wasm SIMD128 "
         f"({SIMD128_LANES} lanes x {VECTOR_FP_OPS_PER_CYCLE} vector ops/cycle x {CLOCK_MAX_GHZ} GHz)"),
        ("$.cpu.mem_bw_gbps", profile.cpu.mem_bw_gbps, min(cores * CORE_MEM_BW_GBPS_MAX, MACHINE_MEM_BW_GBPS_MAX),
         f"{cores} core(s) x {CORE_MEM_BW_GBPS_MAX:g} GB/s per core, at most {MACHINE_MEM_BW_GBPS_MAX:g} GB/s "
         "(8 sockets of HBM-equipped CPUs)"),
        ("$.llm.tokens_per_sec", profile.llm.tokens_per_sec, min(profile.llm.streams or 1, cores) * TOKENS_PER_SEC_MAX,
         f"{min(profile.llm.streams or 1, cores)} stream(s) (at most one per core), each one core's "
         f"{CORE_GFLOPS_MAX:g} GFLOP/s over 2 x {REF_MODEL_PARAMS:g} flops per decoded token"),
        ("$.llm.tokens_per_sec_one_stream", profile.llm.tokens_per_sec_one_stream, TOKENS_PER_SEC_MAX,
         f"one core's {CORE_GFLOPS_MAX:g} GFLOP/s over 2 x {REF_MODEL_PARAMS:g} flops per decoded token"),
        ("$.storage.write_mbps", profile.storage.write_mbps, STORAGE_WRITE_MBPS_MAX,
         "an fsync'ed write to one file system, at most a PCIe 5.0 x16 link"),
        ("$.storage.read_mbps", profile.storage.read_mbps, STORAGE_READ_MBPS_MAX,
         "a read served from memory at the machine bandwidth bound"),
    ]
    for i, gpu in enumerate(profile.gpus):
        limits += [
            (f"$.gpus[{i}].fp32_tflops", gpu.fp32_tflops, GPU_FP32_TFLOPS_MAX, "fp32 WGSL matmul on any GPU"),
            (f"$.gpus[{i}].fp16_tflops", gpu.fp16_tflops, GPU_FP16_TFLOPS_MAX, "fp16 WGSL matmul on any GPU"),
            (f"$.gpus[{i}].vram_mb", gpu.vram_mb, GPU_VRAM_MB_MAX, "memory of any one accelerator"),
        ]
    for field, value, bound, why in limits:
        if value is not None and value > bound:
            return Implausible(field, float(value), bound, why)
    return None
