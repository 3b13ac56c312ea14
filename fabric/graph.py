"""The ce-graph query contract (seed 000 §3.4) over an in-memory Fabric Map:

    predicted_rtt(a, b) -> ms             measured_rtt(a, b) -> ms | None
    bandwidth(a, b) -> Mbit/s | None      k_nearest(node, k) -> [NodeId]
    regions() -> [[NodeId]]               shortest_path(a, b) -> [NodeId]
    profile(node) -> NodeProfile          snapshot() -> dict
    stats() -> FabricStats

Profiles and edges are typed records (capsule.model NodeProfile and LinkSample): `from_relay` parses what
a relay serves and refuses what does not match, naming the field (a relay is a peer, not a trusted
source); ~120 us per profile on a 2-core VM, so 100,000 profiles take ~12 s. Coordinates live in a numpy
matrix so k_nearest is one vectorised pass even at 100,000 nodes; measured edges are an adjacency map for
Dijkstra. Unknown nodes raise UnknownNode with the id.
"""

from __future__ import annotations

import heapq
import json
import statistics
import urllib.request
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from capsule.model import LinkSample, NodeProfile
from capsule.typed import parse, to_json
from fabric.vivaldi import Coordinate

REGION_RTT_MS = 30.0   # nodes closer than this (predicted) join one region (single linkage)
REGION_NEIGHBOURS = 8  # candidate neighbours per node when building regions (keeps it O(n k))


class UnknownNode(KeyError):
    """A NodeId the map does not hold."""

    def __str__(self) -> str:
        return f"unknown node {self.args[0]!r}"


class FabricMap:
    def __init__(self, profiles: Iterable[NodeProfile] = (), coordinates: Mapping[str, Coordinate] | None = None,
                 links: Iterable[LinkSample] = (), stats: Mapping[str, Any] | None = None) -> None:
        self._profiles = {p.node_id: p for p in profiles}
        coords = dict(coordinates or {})
        self._ids = sorted(coords)
        self._index = {node: i for i, node in enumerate(self._ids)}
        dims = len(next(iter(coords.values())).vec) if coords else 0
        self._vec = np.array([coords[n].vec for n in self._ids], dtype=np.float64).reshape(len(self._ids), dims)
        self._height = np.array([coords[n].height for n in self._ids], dtype=np.float64)
        self._adjust = np.array([coords[n].adjustment for n in self._ids], dtype=np.float64)
        self._norm2 = (self._vec * self._vec).sum(axis=1)  # |x|^2 per node: distances by one matrix-vector product
        self._height_adjust = self._height + self._adjust
        self._coords = coords
        self._edges: dict[str, dict[str, LinkSample]] = {}
        for link in links:
            for x, y in ((link.a, link.b), (link.b, link.a)):
                old = self._edges.setdefault(x, {}).get(y)
                if old is None or old.measured_at <= link.measured_at:
                    self._edges[x][y] = link
        self._stats = dict(stats or {})

    # --- construction ------------------------------------------------------------------------------

    @classmethod
    def from_relay(cls, url: str, timeout_s: float = 30.0) -> FabricMap:
        """Reads a relay's atlas (every page), its netgraph and its FabricStats; a profile or edge that is not
        a valid record raises capsule.typed.ValidationError naming it."""
        base = url.rstrip("/")

        def get(path: str) -> Any:
            with urllib.request.urlopen(base + path, timeout=timeout_s) as resp:
                return json.loads(resp.read())

        profiles: list[NodeProfile] = []
        cursor = ""
        while True:
            page = get(f"/atlas?limit=1000&cursor={cursor}")
            profiles += [parse(NodeProfile, p, f"$.nodes[{i}]") for i, p in enumerate(page["nodes"])]
            if not page["next_cursor"]:
                break
            cursor = page["next_cursor"]
        graph = get("/netgraph")
        coords = {n["node_id"]: Coordinate(**n["coordinate"]) for n in graph["nodes"] if n.get("coordinate")}
        edges = [parse(LinkSample, e, f"$.edges[{i}]") for i, e in enumerate(graph["edges"])]
        return cls(profiles, coords, edges, get("/stats"))

    # --- the contract -------------------------------------------------------------------------------

    def _coord(self, node: str) -> Coordinate:
        try:
            return self._coords[node]
        except KeyError:
            raise UnknownNode(node) from None

    def predicted_rtt(self, a: str, b: str) -> float:
        """RTT in ms predicted by the Vivaldi coordinates (height and adjustment included)."""
        return self._coord(a).distance(self._coord(b))

    def measured_rtt(self, a: str, b: str) -> float | None:
        link = self._edges.get(a, {}).get(b)
        return link.rtt_ms if link else None

    def bandwidth(self, a: str, b: str) -> float | None:
        link = self._edges.get(a, {}).get(b)
        return link.bw_mbps if link else None

    def predicted_from(self, node: str) -> np.ndarray:
        """Predicted RTT (ms) from `node` to every node, in the order of `self.node_ids`."""
        c = self._coord(node)
        q = np.asarray(c.vec, dtype=np.float64)
        dist = self._vec @ q  # |x - q| = sqrt(|x|^2 - 2 x.q + |q|^2), in place to spare temporaries
        dist *= -2.0
        dist += self._norm2
        dist += float(q @ q)
        np.maximum(dist, 0.0, out=dist)
        np.sqrt(dist, out=dist)
        euclid = dist.copy()
        dist += self._height_adjust
        dist += c.height + c.adjustment
        bad = dist <= 0  # Serf: a non-positive adjusted distance falls back to the raw one
        if bad.any():
            dist[bad] = euclid[bad] + self._height[bad] + c.height
        return dist

    @property
    def node_ids(self) -> list[str]:
        return list(self._ids)

    def k_nearest(self, node: str, k: int) -> list[str]:
        """The k nodes with the smallest predicted RTT from `node` (itself excluded), nearest first."""
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        dist = self.predicted_from(node)
        dist[self._index[node]] = np.inf
        k = min(k, len(self._ids) - 1)
        if k <= 0:
            return []
        part = np.argpartition(dist, k - 1)[:k] if k < len(dist) else np.arange(len(dist))
        return [self._ids[i] for i in part[np.argsort(dist[part], kind="stable")]]

    def shortest_path(self, a: str, b: str) -> list[str]:
        """Lowest total measured RTT path over measured edges; [] when b cannot be reached from a."""
        for node in (a, b):
            if node not in self._edges and node not in self._coords and node not in self._profiles:
                raise UnknownNode(node)
        best = {a: 0.0}
        prev: dict[str, str] = {}
        heap = [(0.0, a)]
        while heap:
            d, node = heapq.heappop(heap)
            if node == b:
                path = [b]
                while path[-1] != a:
                    path.append(prev[path[-1]])
                return path[::-1]
            if d > best.get(node, float("inf")):
                continue
            for nxt, link in self._edges.get(node, {}).items():
                nd = d + link.rtt_ms
                if nd < best.get(nxt, float("inf")):
                    best[nxt] = nd
                    prev[nxt] = node
                    heapq.heappush(heap, (nd, nxt))
        return []

    def regions(self, threshold_ms: float = REGION_RTT_MS) -> list[list[str]]:
        """Nodes grouped by predicted RTT: single linkage over each node's nearest neighbours, joining
        pairs closer than threshold_ms. Largest region first, members sorted."""
        parent = list(range(len(self._ids)))

        def find(i: int) -> int:
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        for i, node in enumerate(self._ids):
            for other in self.k_nearest(node, REGION_NEIGHBOURS) if len(self._ids) > 1 else []:
                if self.predicted_rtt(node, other) < threshold_ms:
                    parent[find(i)] = find(self._index[other])
        groups: dict[int, list[str]] = {}
        for i, node in enumerate(self._ids):
            groups.setdefault(find(i), []).append(node)
        return sorted((sorted(g) for g in groups.values()), key=lambda g: (-len(g), g[0]))

    def profile(self, node: str) -> NodeProfile:
        try:
            return self._profiles[node]
        except KeyError:
            raise UnknownNode(node) from None

    def snapshot(self) -> dict[str, Any]:
        links = {id(link): link for peers in self._edges.values() for link in peers.values()}
        return {"profiles": [to_json(p) for p in self._profiles.values()],
                "coordinates": {n: c.to_json() for n, c in self._coords.items()},
                "links": [to_json(link) for link in links.values()], "stats": self.stats()}

    def mesh(self) -> dict[str, Any]:
        """The FabricStats mesh block from the measured graph and the coordinates."""
        links = {id(link): link for peers in self._edges.values() for link in peers.values()}
        nodes = set(self._edges) | set(self._coords)
        if not links:
            return {"median_rtt_ms": None, "reachable_frac": None, "regions": None}
        seen: set[str] = set()
        pairs = 0
        for start in nodes:  # connected components over measured edges
            if start in seen:
                continue
            stack, size = [start], 0
            seen.add(start)
            while stack:
                node = stack.pop()
                size += 1
                for nxt in self._edges.get(node, {}):
                    if nxt not in seen:
                        seen.add(nxt)
                        stack.append(nxt)
            pairs += size * (size - 1)
        n = len(nodes)
        return {"median_rtt_ms": round(statistics.median(x.rtt_ms for x in links.values()), 3),
                "reachable_frac": round(pairs / (n * (n - 1)), 4) if n > 1 else 1.0,
                "regions": len(self.regions()) if self._coords else None}

    def stats(self) -> dict[str, Any]:
        return {**self._stats, "mesh": self.mesh()}
