"""Signed records for tests, built through the same code paths the node uses."""

from __future__ import annotations

import copy
import secrets
import time
from typing import Any

from capsule.aggregate import Figures
from capsule.profile import build_profile
from capsule.signing import sign
from common.keys import NodeKey


def sample_profile(key: NodeKey | None = None, beacon: dict[str, Any] | None = None, measured_at: int | None = None,
                   **figures: Any) -> tuple[NodeKey, dict[str, Any]]:
    """A signed profile; `beacon` (a relay's GET /beacon) is cited when given, else a made-up round."""
    key = key or NodeKey.generate()
    cited = ({k: beacon[k] for k in ("relay", "round", "value")} if beacon else
             {"relay": NodeKey.generate().node_id, "round": 7, "value": secrets.token_hex(32)})
    f = Figures(gflops_fp32=figures.get("gflops", 71.5), mem_bw_gbps=29.25, tokens_per_sec=figures.get("tps", 181.5),
                read_mbps=1700.0,
                write_mbps=1100.0, evidence={"cpu": {"instances": 2}, "llm": {"runs": [181.5]}, "storage": {}})
    profile = build_profile(
        node_id=key.node_id, measured_at=measured_at if measured_at is not None else int(time.time()),
        beacon=cited,
        capsule={"version": "1.0.0", "sha256": "ab" * 32}, cores=2, threads=2,
        memory={"total_mb": 24000, "available_mb": 20000}, storage_total_gb=250, storage_free_gb=80, figures=f,
        gpus=[{"model": figures.get("gpu_model", "llvmpipe"), "backend": "vulkan", "vram_mb": None,
               "fp16_tflops": 0.002, "fp32_tflops": 0.002}],
        runtime={"os": "linux", "arch": "x86_64", "kind": "server", "docker": False, "gvisor": False, "wasm": True,
                 "engine": "wasmtime-py 50.0.1"},
        ref_model="ce-ref-15m-f32", name=figures.get("name"))
    return key, sign("NodeProfile", profile, key)


def mutated(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A deep copy with the dotted path set (a '-' value deletes the field)."""
    out = copy.deepcopy(obj)
    parts = path.split(".")
    target: Any = out
    for p in parts[:-1]:
        target = target[int(p)] if isinstance(target, list) else target[p]
    if value == "-":
        del target[parts[-1]]
    elif isinstance(target, list):
        target[int(parts[-1])] = value
    else:
        target[parts[-1]] = value
    return out
