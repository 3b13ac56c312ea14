"""FabricStats (seed 000 §2.4), maintained incrementally: O(1) per node that arrives, changes or goes
offline, never a scan per request. Float figures are summed as integers of 1/1000 of their unit, so
adding and removing a node a million times leaves no rounding drift."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MILLI = 1000
MICRO = 1_000_000  # GPU TFLOP/s are summed in micro-TFLOP/s (MFLOP/s): a software GPU shows ~0.0003 TFLOP/s


@dataclass(frozen=True)
class Contribution:
    """What one live node adds to the scoreboard (integers; float figures in milli-units, GPU TFLOP/s in
    micro-units)."""

    cores: int = 0
    cpu_mgflops: int = 0
    gpus: int = 0
    gpu_vram_mb: int = 0
    gpu_utflops: int = 0
    mtokens_per_sec: int = 0
    storage_free_gb: int = 0


class FabricStats:
    def __init__(self, perf_reference: Mapping[str, float], perf_weights: Mapping[str, float]) -> None:
        self.reference = dict(perf_reference)
        self.weights = dict(perf_weights)
        self._live: dict[str, Contribution] = {}
        self._sum = [0] * 7

    def _apply(self, c: Contribution, sign: int) -> None:
        for i, v in enumerate((c.cores, c.cpu_mgflops, c.gpus, c.gpu_vram_mb, c.gpu_utflops, c.mtokens_per_sec,
                               c.storage_free_gb)):
            self._sum[i] += sign * v

    def set_live(self, node_id: str, contribution: Contribution) -> None:
        """A live node with this contribution (replacing what it contributed before)."""
        old = self._live.get(node_id)
        if old is not None:
            self._apply(old, -1)
        self._live[node_id] = contribution
        self._apply(contribution, +1)

    def set_offline(self, node_id: str) -> None:
        old = self._live.pop(node_id, None)
        if old is not None:
            self._apply(old, -1)

    def __len__(self) -> int:
        return len(self._live)

    def snapshot(self) -> dict[str, Any]:
        cores, mgflops, gpus, vram, utflops, mtps, free = self._sum
        cpu_gflops, gpu_tflops, tps = mgflops / MILLI, utflops / MICRO, mtps / MILLI
        figures = {"cpu_gflops": cpu_gflops, "gpu_tflops": gpu_tflops, "tokens_per_sec": tps}
        perf = sum(self.weights[k] * figures[k] / self.reference[k] for k in self.weights)
        return {
            "nodes": len(self._live), "cpu_cores": cores, "cpu_gflops": cpu_gflops, "gpus": gpus,
            "gpu_vram_mb": vram, "gpu_tflops": gpu_tflops, "tokens_per_sec": tps, "storage_free_gb": free,
            "perf_score": round(perf, 6),
            "mesh": {"median_rtt_ms": None, "reachable_frac": None, "regions": None},
        }
