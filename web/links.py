"""Measured edges and network coordinates at a relay: co-signed LinkSamples (its own live sessions and
POST /v1/links) feed a Vivaldi coordinate per endpoint, which rides /netgraph and /v1/nodes. Pure: the
relay stores the samples; this keeps the graph and answers the mesh questions."""

from __future__ import annotations

import time
from typing import Any

from fabric.graph import FabricMap
from fabric.vivaldi import Coordinate, CoordinateError, VivaldiNode

MESH_REFRESH_S = 2.0  # the mesh block of /stats is recomputed at most this often (it walks the graph)


class LinkBook:
    def __init__(self) -> None:
        self.nodes: dict[str, VivaldiNode] = {}
        self.links: dict[tuple[str, str], dict[str, Any]] = {}
        self._mesh: dict[str, Any] = {"median_rtt_ms": None, "reachable_frac": None, "regions": None}
        self._mesh_at = 0.0
        self._dirty = False
        self.region_of: dict[str, int] = {}

    def _node(self, node_id: str) -> VivaldiNode:
        if node_id not in self.nodes:
            self.nodes[node_id] = VivaldiNode(seed=hash(node_id) & 0xFFFF)
        return self.nodes[node_id]

    def add(self, sample: dict[str, Any]) -> bool:
        """Records a verified sample (if newer than the stored one for the pair) and moves both
        endpoints' coordinates. False when it was not newer."""
        a, b = sample["a"], sample["b"]
        key = (a, b) if a < b else (b, a)
        old = self.links.get(key)
        if old is not None and old["measured_at"] > sample["measured_at"]:
            return False
        self.links[key] = sample
        rtt = float(sample["rtt_ms"])
        node_a, node_b = self._node(a), self._node(b)
        coord_a = Coordinate(list(node_a.coord.vec), node_a.coord.error, node_a.coord.adjustment, node_a.coord.height)
        try:
            node_a.update(b, node_b.coord, rtt)
            node_b.update(a, coord_a, rtt)
        except CoordinateError:
            pass  # the sample is kept as a measured edge even if a coordinate update is refused
        self._dirty = True
        return True

    def coordinate(self, node_id: str) -> Coordinate | None:
        node = self.nodes.get(node_id)
        return node.coord if node else None

    def measured(self, a: str, b: str) -> dict[str, Any] | None:
        return self.links.get((a, b) if a < b else (b, a))

    def fabric_map(self) -> FabricMap:
        return FabricMap([], {n: v.coord for n, v in self.nodes.items()}, self.links.values())

    def mesh(self, now: float | None = None) -> dict[str, Any]:
        now = time.monotonic() if now is None else now
        if self._dirty and now - self._mesh_at >= MESH_REFRESH_S:
            fmap = self.fabric_map()
            self._mesh = fmap.mesh()
            self.region_of = {node: i for i, region in enumerate(fmap.regions()) for node in region}
            self._mesh_at = now
            self._dirty = False
        return self._mesh
