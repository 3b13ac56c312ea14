"""Measured edges and network coordinates at a relay: co-signed LinkSamples (its own live sessions and
POST /v1/links) feed a Vivaldi coordinate per endpoint, which rides /netgraph and /v1/nodes. Pure: the
relay stores the samples; this keeps the graph, judges samples against its own measurements and answers
the mesh questions.

Trust in an edge (issue "links bounded by physics"): the schema bounds every sample by physics
(capsule.model LINK_*). An edge node <-> relay is the relay's own measurement. An edge between two nodes is
*confirmed* only when the relay has measured both endpoints itself (their edges to this relay) and the
sample satisfies the triangle inequality through the relay within RelayConfig's tolerance. The two sides
differ because the relay's RTTs only ever overstate (event loops, phone radios and busy nodes add delay,
nothing removes it): the upper side, rtt_ab <= factor * (rtt_a + rtt_b) + slack, stays sound under that
noise, so a sample beyond it is refused (inconsistent_rtt); the lower side, rtt_ab >= |rtt_a - rtt_b|,
does not (a node measured at 12 ms on a loaded loopback is really 0.3 ms away), so a sample below it is
kept but unconfirmed. Unconfirmed edges are served, but move no coordinate: two identities of one attacker
cannot drag the map with figures nobody observed."""

from __future__ import annotations

import hashlib
import time
from typing import Any

from capsule.model import LinkSample
from fabric.graph import FabricMap
from fabric.vivaldi import Coordinate, CoordinateError, VivaldiNode
from web.config import RelayConfig
from web.problems import Problem

MESH_REFRESH_S = 2.0  # the mesh block of /stats is recomputed at most this often (it walks the graph)


def coordinate_seed(node_id: str) -> int:
    """A NodeId's Vivaldi seed: the same in every process (Python's hash() of a str is salted per run)."""
    return int.from_bytes(hashlib.sha256(node_id.encode()).digest()[:4], "big")


def _key(a: str, b: str) -> tuple[str, str]:
    return (a, b) if a < b else (b, a)


class LinkBook:
    def __init__(self, relay_id: str, config: RelayConfig | None = None) -> None:
        self.relay_id = relay_id
        self.config = config or RelayConfig()
        self.nodes: dict[str, VivaldiNode] = {}
        self.links: dict[tuple[str, str], dict[str, Any]] = {}
        self.unconfirmed: set[tuple[str, str]] = set()
        self._mesh: dict[str, Any] = {"median_rtt_ms": None, "reachable_frac": None, "regions": None}
        self._mesh_at = 0.0
        self._dirty = False
        self.region_of: dict[str, int] = {}

    def _node(self, node_id: str) -> VivaldiNode:
        if node_id not in self.nodes:
            self.nodes[node_id] = VivaldiNode(seed=coordinate_seed(node_id))
        return self.nodes[node_id]

    def relay_rtt_ms(self, node_id: str) -> float | None:
        """This relay's own latest measurement of its RTT to node_id (the co-signed session edge)."""
        edge = self.links.get(_key(node_id, self.relay_id))
        return float(edge["rtt_ms"]) if edge else None

    def judge(self, sample: dict[str, Any]) -> bool:
        """Whether a verified sample is confirmed by this relay's own measurements; raises
        Problem(422, inconsistent_rtt) when it is slower than the path through this relay allows."""
        a, b = sample["a"], sample["b"]
        if self.relay_id in (a, b):
            return True  # the relay measured it itself (pings on its live session)
        rtt_a, rtt_b = self.relay_rtt_ms(a), self.relay_rtt_ms(b)
        if rtt_a is None or rtt_b is None:
            return False
        factor, slack = self.config.link_tiv_factor, self.config.link_slack_ms
        low = (abs(rtt_a - rtt_b) - slack) / factor
        high = factor * (rtt_a + rtt_b) + slack
        rtt = float(sample["rtt_ms"])
        if rtt > high:
            raise Problem(422, "inconsistent_rtt", "the RTT contradicts this relay's own measurements",
                          f"{rtt} ms between endpoints this relay measured at {rtt_a} ms and {rtt_b} ms; the "
                          f"triangle inequality through this relay allows at most {high:.3f} ms (factor "
                          f"{factor:g}, slack {slack:g} ms)", "$.rtt_ms")
        return rtt >= low

    def add(self, sample: dict[str, Any], confirmed: bool) -> bool:
        """Records a verified sample (if newer than the stored one for the pair); a confirmed one moves both
        endpoints' coordinates. False when it was not newer."""
        a, b = sample["a"], sample["b"]
        key = _key(a, b)
        old = self.links.get(key)
        if old is not None and old["measured_at"] > sample["measured_at"]:
            return False
        self.links[key] = sample
        self._dirty = True
        if not confirmed:
            self.unconfirmed.add(key)
            self._node(a), self._node(b)  # on the map, where their own confirmed edges put them
            return True
        self.unconfirmed.discard(key)
        rtt = float(sample["rtt_ms"])
        node_a, node_b = self._node(a), self._node(b)
        coord_a = Coordinate(list(node_a.coord.vec), node_a.coord.error, node_a.coord.adjustment, node_a.coord.height)
        try:
            node_a.update(b, node_b.coord, rtt)
            node_b.update(a, coord_a, rtt)
        except CoordinateError:
            pass  # the sample is kept as a measured edge even if a coordinate update is refused
        return True

    def load(self, samples: list[dict[str, Any]]) -> None:
        """Rebuilds the book from stored samples (oldest first): the relay's own edges first, so node-to-node
        edges are judged against them as they were when they arrived."""
        own = [s for s in samples if self.relay_id in (s["a"], s["b"])]
        for sample in own:
            self.add(sample, True)
        for sample in samples:
            if self.relay_id not in (sample["a"], sample["b"]):
                try:
                    confirmed = self.judge(sample)
                except Problem:
                    confirmed = False  # accepted under an earlier measurement; now it moves nothing
                self.add(sample, confirmed)

    def coordinate(self, node_id: str) -> Coordinate | None:
        node = self.nodes.get(node_id)
        return node.coord if node else None

    def measured(self, a: str, b: str) -> dict[str, Any] | None:
        return self.links.get(_key(a, b))

    def fabric_map(self) -> FabricMap:
        # the samples were verified (capsule.signing.verify_record: exactly LinkSample's fields) before the
        # book took them, so building the typed records needs no second parse
        return FabricMap([], {n: v.coord for n, v in self.nodes.items()},
                         [LinkSample(**sample) for sample in self.links.values()])

    def mesh(self, now: float | None = None) -> dict[str, Any]:
        now = time.monotonic() if now is None else now
        if self._dirty and now - self._mesh_at >= MESH_REFRESH_S:
            fmap = self.fabric_map()
            self._mesh = fmap.mesh()
            self.region_of = {node: i for i, region in enumerate(fmap.regions()) for node in region}
            self._mesh_at = now
            self._dirty = False
        return self._mesh
