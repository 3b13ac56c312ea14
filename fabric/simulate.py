"""Seeded synthetic topologies and Serf's simulation loop, for accuracy tests and benchmarks
(hashicorp/serf coordinate/util_test.go and performance_test.go are the model). Units: ms."""

from __future__ import annotations

import copy
import math
import random
import statistics
from dataclasses import dataclass

from fabric.config import DEFAULT, VivaldiConfig
from fabric.vivaldi import VivaldiNode

Matrix = list[list[float]]


def line(n: int, spacing_ms: float) -> Matrix:
    return [[abs(i - j) * spacing_ms for j in range(n)] for i in range(n)]


def grid(n: int, spacing_ms: float) -> Matrix:
    side = int(math.isqrt(n))
    pos = [(i // side, i % side) for i in range(n)]
    return [[math.dist(pos[i], pos[j]) * spacing_ms for j in range(n)] for i in range(n)]


def split(n: int, lan_ms: float, wan_ms: float) -> Matrix:
    """Two LANs joined by a WAN link (nodes 0..n/2 and the rest): lan within, lan + wan across (as Serf)."""
    half = n // 2
    return [[0.0 if i == j else lan_ms + (0.0 if (i <= half) == (j <= half) else wan_ms) for j in range(n)]
            for i in range(n)]


def random_matrix(n: int, mean_ms: float, deviation_ms: float, seed: int) -> Matrix:
    rng = random.Random(seed)
    m = [[0.0] * n for _ in range(n)]
    for i in range(n):
        for j in range(i + 1, n):
            m[i][j] = m[j][i] = max(0.1, rng.gauss(mean_ms, deviation_ms))
    return m


def with_heights(n: int, seed: int, plane_ms: float = 100.0, height_ms: float = 20.0) -> Matrix:
    """Nodes in a plane, each behind an access link of its own latency (what heights model)."""
    rng = random.Random(seed)
    pos = [(rng.uniform(0, plane_ms), rng.uniform(0, plane_ms)) for _ in range(n)]
    heights = [rng.uniform(1, height_ms) for _ in range(n)]
    return [[0.0 if i == j else math.dist(pos[i], pos[j]) + heights[i] + heights[j] for j in range(n)]
            for i in range(n)]


def simulate(truth: Matrix, cycles: int, seed: int, config: VivaldiConfig = DEFAULT) -> list[VivaldiNode]:
    """Each cycle every node measures one random other node and updates (Serf's Simulate)."""
    rng = random.Random(seed)
    nodes = [VivaldiNode(config, seed=seed * 1000 + i) for i in range(len(truth))]
    for _ in range(cycles):
        for i, node in enumerate(nodes):
            j = rng.randrange(len(nodes))
            if j != i:
                node.update(f"node-{j}", copy.deepcopy(nodes[j].coord), truth[i][j])
    return nodes


@dataclass(frozen=True)
class Accuracy:
    error_avg: float      # mean relative error |predicted - true| / true over all pairs
    error_max: float
    median_relative: float


def evaluate(nodes: list[VivaldiNode], truth: Matrix) -> Accuracy:
    errors = []
    for i in range(len(nodes)):
        for j in range(i + 1, len(nodes)):
            actual = truth[i][j]
            if actual > 0:
                errors.append(abs(nodes[i].coord.distance(nodes[j].coord) - actual) / actual)
    return Accuracy(sum(errors) / len(errors), max(errors), statistics.median(errors))
