"""Delivered work against proven speed (seed 000 §4: "cross-check claimed throughput against delivered work and
flag implausible cards"), pure. When replicas of one task agree, each ran the same work: its wall time times
the GFLOP/s its latest roll call proved should be about the same on every node. A node whose product is
PACE_SLOW_FACTOR x its peers' (median of its last PACE_KEPT such tasks, at least PACE_MIN_TASKS) delivers far
less than its proof says: it is marked slow — shown on its page and in GET /v1/jobs, and placed after the
others — but not flagged in trust: a busy machine is slow honestly, and is never counted at zero for it."""

from __future__ import annotations

import statistics
from collections import deque
from typing import Any

PACE_KEPT = 20           # tasks per node behind its figure
PACE_MIN_TASKS = 10      # tasks before a node can be marked slow
PACE_SLOW_FACTOR = 4.0   # x its peers' wall time x proven GFLOP/s
PACE_MIN_WALL_MS = 100.0  # shorter tasks are mostly overhead (start, transfer): they say nothing of speed


class Pace:
    def __init__(self) -> None:
        self.ratios: dict[str, deque[float]] = {}

    def add_task(self, runs: list[tuple[str, float, float]]) -> None:
        """The agreeing runs of one task: (node, wall ms, proven GFLOP/s)."""
        work = [(node, wall * gflops) for node, wall, gflops in runs if wall >= PACE_MIN_WALL_MS and gflops > 0]
        for node, mine in work:
            others = [w for n, w in work if n != node]
            if others:
                self.ratios.setdefault(node, deque(maxlen=PACE_KEPT)).append(mine / statistics.median(others))

    def slow(self, node: str) -> bool:
        kept = self.ratios.get(node)
        return kept is not None and len(kept) >= PACE_MIN_TASKS and statistics.median(kept) > PACE_SLOW_FACTOR

    def of(self, node: str) -> dict[str, Any]:
        kept = self.ratios.get(node) or deque()
        return {"ratio_to_peers": round(statistics.median(kept), 3) if kept else None, "tasks": len(kept),
                "slow": self.slow(node),
                "method": f"median over its last {PACE_KEPT} tasks that agreed with other nodes' (each >= "
                          f"{PACE_MIN_WALL_MS:g} ms) of wall time x proven GFLOP/s, against its peers' on the same "
                          f"task; slow above {PACE_SLOW_FACTOR:g} after {PACE_MIN_TASKS} tasks"}
