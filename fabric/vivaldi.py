"""Vivaldi network coordinates with height, as in Serf (Dabek et al. 2004; Ledlie et al. 2007): each
node's coordinate moves along the spring force between its predicted and measured RTT to a peer, with
an adaptive timestep weighted by the two nodes' error estimates, a per-peer median latency filter, an
adjustment term for non-Euclidean offsets, and gravity towards the origin. Units: milliseconds."""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass, field

from fabric.config import DEFAULT, VivaldiConfig

ZERO = 1.0e-3        # ms: Serf's zero threshold of 1 microsecond, for distances
ZERO_ERROR = 1.0e-6  # the same threshold for the unitless error estimates


class CoordinateError(ValueError):
    """An RTT sample or coordinate that cannot be used; the message says why."""


@dataclass
class Coordinate:
    vec: list[float]
    error: float
    adjustment: float = 0.0
    height: float = DEFAULT.height_min_ms

    @classmethod
    def origin(cls, config: VivaldiConfig = DEFAULT) -> Coordinate:
        return cls([0.0] * config.dimensionality, config.error_max, 0.0, config.height_min_ms)

    def is_valid(self) -> bool:
        return all(math.isfinite(v) for v in (*self.vec, self.error, self.adjustment, self.height))

    def raw_distance(self, other: Coordinate) -> float:
        return math.dist(self.vec, other.vec) + self.height + other.height

    def distance(self, other: Coordinate) -> float:
        """Predicted RTT in ms."""
        raw = self.raw_distance(other)
        adjusted = raw + self.adjustment + other.adjustment
        return adjusted if adjusted > 0 else raw

    def apply_force(self, config: VivaldiConfig, force: float, other: Coordinate, rng: random.Random) -> None:
        diff = [a - b for a, b in zip(self.vec, other.vec, strict=True)]
        mag = math.hypot(*diff)
        if mag > ZERO:
            unit = [d / mag for d in diff]
        else:  # the same spot: push in a random direction
            r = [rng.gauss(0, 1) for _ in diff]
            norm = math.hypot(*r) or 1.0
            unit, mag = [x / norm for x in r], 0.0
        self.vec = [v + u * force for v, u in zip(self.vec, unit, strict=True)]
        if mag > ZERO:
            self.height = max((self.height + other.height) * force / mag + self.height, config.height_min_ms)

    def to_json(self) -> dict[str, object]:
        return {"vec": [round(v, 4) for v in self.vec], "error": round(self.error, 4),
                "adjustment": round(self.adjustment, 4), "height": round(self.height, 4)}


@dataclass
class VivaldiNode:
    """One node's coordinate and the state Serf's client keeps for it."""

    config: VivaldiConfig = DEFAULT
    # None: the origin of `config` (a default_factory cannot see the config; Coordinate.origin() of DEFAULT gave
    # a node of any other dimensionality a coordinate that refused every peer of its own)
    coord: Coordinate = None  # type: ignore[assignment]
    seed: int = 0
    _filters: dict[str, deque[float]] = field(default_factory=dict)
    _adjustments: list[float] = field(default_factory=list)
    _adjust_index: int = 0
    updates: int = 0

    def __post_init__(self) -> None:
        if self.coord is None:
            self.coord = Coordinate.origin(self.config)
        self._rng = random.Random(self.seed)
        self._adjustments = [0.0] * self.config.adjustment_window

    def _filtered(self, peer: str, rtt_ms: float) -> float:
        samples = self._filters.setdefault(peer, deque(maxlen=self.config.latency_filter_size))
        samples.append(rtt_ms)
        return sorted(samples)[len(samples) // 2]  # as Serf: the upper median

    def update(self, peer: str, other: Coordinate, rtt_ms: float, trust: float = 1.0) -> Coordinate:
        """Moves this coordinate given a measured RTT to `peer` at coordinate `other`. `trust` in [0, 1]
        scales the sample's weight (fabric/defence.py down-weights samples that look like lies); at 1, the
        default, the update is Serf's."""
        if not math.isfinite(rtt_ms) or rtt_ms < 0 or rtt_ms > self.config.rtt_max_ms:
            raise CoordinateError(f"rtt_ms must be finite and in [0, {self.config.rtt_max_ms:g}], got {rtt_ms}")
        if not 0.0 <= trust <= 1.0:
            raise CoordinateError(f"trust must be in [0, 1], got {trust}")
        if not other.is_valid() or len(other.vec) != self.config.dimensionality:
            raise CoordinateError("the peer's coordinate is not finite or has the wrong dimensionality")
        rtt = max(self._filtered(peer, rtt_ms), ZERO)
        c, cfg = self.coord, self.config
        # Vivaldi: error-weighted timestep, then the spring force
        dist = c.distance(other)
        wrongness = abs(dist - rtt) / rtt
        total_error = max(c.error + other.error, ZERO_ERROR)
        weight = trust * c.error / total_error
        c.error = min(cfg.ce * weight * wrongness + c.error * (1.0 - cfg.ce * weight), cfg.error_max)
        c.apply_force(cfg, cfg.cc * weight * (rtt - dist), other, self._rng)
        # adjustment: the mean residual over a window, halved (each side takes half)
        if cfg.adjustment_window:
            self._adjustments[self._adjust_index] = trust * (rtt - c.raw_distance(other))
            self._adjust_index = (self._adjust_index + 1) % cfg.adjustment_window
            c.adjustment = sum(self._adjustments) / (2.0 * cfg.adjustment_window)
        # gravity towards the origin
        origin = Coordinate.origin(cfg)
        dist_s = c.distance(origin) / 1000.0
        c.apply_force(cfg, -1000.0 * (dist_s / cfg.gravity_rho_s) ** 2, origin, self._rng)
        if not c.is_valid():  # never let one bad update poison the coordinate
            self.coord = Coordinate.origin(cfg)
            raise CoordinateError("the update produced a non-finite coordinate; it was reset")
        self.updates += 1
        return c


def coordinates_from_links(links: list[dict[str, object]], cycles: int = 200, seed: int = 0,
                           config: VivaldiConfig = DEFAULT) -> dict[str, Coordinate]:
    """Coordinates for every endpoint of a set of measured LinkSamples: the samples are replayed in a
    seeded random order `cycles` times, each moving both endpoints (as a relay does when they arrive)."""
    rng = random.Random(seed)
    nodes: dict[str, VivaldiNode] = {}
    order = list(links)
    for _ in range(cycles):
        rng.shuffle(order)
        for link in order:
            a, b, rtt = str(link["a"]), str(link["b"]), float(link["rtt_ms"])  # type: ignore[arg-type]
            na = nodes.setdefault(a, VivaldiNode(config, seed=rng.randrange(1 << 30)))
            nb = nodes.setdefault(b, VivaldiNode(config, seed=rng.randrange(1 << 30)))
            before = Coordinate(list(na.coord.vec), na.coord.error, na.coord.adjustment, na.coord.height)
            na.update(b, nb.coord, rtt)
            nb.update(a, before, rtt)
    return {node: v.coord for node, v in nodes.items()}
