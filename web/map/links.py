"""Measured edges and network coordinates at a relay: co-signed LinkSamples (its own live sessions, POST
/v1/links, and the other relays of its cluster over NATS) feed a Vivaldi coordinate per endpoint, which
rides /netgraph and /v1/nodes. Pure: the relay stores the samples; this keeps the graph, judges samples
against the landmarks' measurements and answers the mesh questions.

Trust in an edge (issue "links bounded by physics"): the schema bounds every sample by physics
(capsule.model LINK_*). The landmarks are this relay and its cluster peers: an edge node <-> landmark is the
landmark's own measurement. An edge between two nodes is *confirmed* only when a landmark has measured both
endpoints itself and the sample satisfies the triangle inequality through every landmark that did, within
RelayConfig's tolerance. The two sides
differ because the relay's RTTs only ever overstate (event loops, phone radios and busy nodes add delay,
nothing removes it): the upper side, rtt_ab <= factor * (rtt_a + rtt_b) + slack, stays sound under that
noise, so a sample beyond it is refused (inconsistent_rtt); the lower side, rtt_ab >= |rtt_a - rtt_b|,
does not (a node measured at 12 ms on a loaded loopback is really 0.3 ms away), so a sample below it is
kept but unconfirmed. Unconfirmed edges are served, but move no coordinate: two identities of one attacker
cannot drag the map with figures nobody observed."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from typing import Any

from capsule.model import LinkSample
from fabric.config import DEFAULT as DEFAULT_VIVALDI
from fabric.defence import guarded_coordinates
from fabric.graph import FabricMap
from fabric.vivaldi import Coordinate, CoordinateError, VivaldiNode
from web.api.problems import Problem
from web.config import RelayConfig

MESH_REFRESH_S = 2.0  # the mesh block of /stats is recomputed at most this often (it walks the graph)
REFIT_CYCLES = 200    # passes over the confirmed samples in a refit (coordinates_from_links' default)
# Refits fit without Serf's adjustment term: it averages a node's last 20 residuals, and replaying a fixed set
# of samples 200 times turns it into a constant offset on every prediction. Measured on the namespace world
# of tests/test_world.py (3 regions, relays as landmarks, 2026-12-04): unmeasured node pairs' median error
# 0.122 and 5-NN recall 0.76 with it, 0.035 and 0.88 without (predicted RTTs within a region were 3-4x high).
REFIT_CONFIG = dataclasses.replace(DEFAULT_VIVALDI, adjustment_window=0)


def coordinate_seed(node_id: str) -> int:
    """A NodeId's Vivaldi seed: the same in every process (Python's hash() of a str is salted per run)."""
    return int.from_bytes(hashlib.sha256(node_id.encode()).digest()[:4], "big")


def _key(a: str, b: str) -> tuple[str, str]:
    return (a, b) if a < b else (b, a)


class LinkBook:
    def __init__(self, relay_id: str, config: RelayConfig | None = None) -> None:
        self.relay_id = relay_id
        self.config = config or RelayConfig()
        # whose own edges are measurements: this relay and the peers of its cluster (their edges arrive over
        # NATS); a node-to-node edge is judged against every one of them that measured both ends
        self.landmarks = frozenset({relay_id, *self.config.cluster_peers})
        self.shared: dict[tuple[str, str], dict[str, Any]] = {}  # what refits use: what the cluster holds
        self.refitted_version = -1
        self.version = 0  # changes with every shared sample
        # which samples the coordinates were last refitted from (/netgraph's "fit"): two relays that show the
        # same digest with no sample since serve the same coordinates
        self.fit_samples = 0
        self.fit_digest = ""
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

    def rtt_via(self, landmark: str, node_id: str) -> float | None:
        """A landmark's own measurement of its RTT to node_id (the co-signed session edge), as the whole cluster
        holds it: a relay's newer own samples within link_gossip_change of that copy stay here, and judging by
        them let two relays decide one sample differently (one refused what the others keep: their refits
        then never agreed)."""
        edge = self.shared.get(_key(node_id, landmark))
        return float(edge["rtt_ms"]) if edge else None

    def judge(self, sample: dict[str, Any]) -> bool:
        """Whether a verified sample is confirmed by the landmarks' own measurements (this relay and its
        cluster peers); raises Problem(422, inconsistent_rtt) when it is slower than the path through any
        landmark that measured both endpoints allows. Confirmed: a landmark's own edge, or a node-to-node
        edge that at least one landmark measured both ends of and that no landmark's lower bound contradicts
        (every landmark that can check it agrees: two liars need all of them fooled, not one)."""
        a, b = sample["a"], sample["b"]
        if a in self.landmarks or b in self.landmarks:
            return True  # a landmark measured it itself (pings on its live session)
        rtt = float(sample["rtt_ms"])
        factor, slack = self.config.link_tiv_factor, self.config.link_slack_ms
        checked = False
        confirmed = True

        def who(landmark: str) -> str:
            return "this relay" if landmark == self.relay_id else f"peer relay {landmark}"

        for landmark in sorted(self.landmarks):
            rtt_a, rtt_b = self.rtt_via(landmark, a), self.rtt_via(landmark, b)
            if rtt_a is None or rtt_b is None:
                continue
            checked = True
            high = factor * (rtt_a + rtt_b) + slack
            if rtt > high:
                raise Problem(422, "inconsistent_rtt", "the RTT contradicts a landmark's own measurements",
                              f"{rtt} ms between endpoints {who(landmark)} measured at {rtt_a} ms and {rtt_b} "
                              f"ms; the triangle inequality through it allows at most {high:.3f} ms (factor "
                              f"{factor:g}, slack {slack:g} ms)", "$.rtt_ms")
            confirmed = confirmed and rtt >= (abs(rtt_a - rtt_b) - slack) / factor
        return checked and confirmed

    def add(self, sample: dict[str, Any], confirmed: bool, shared: bool = True) -> bool:
        """Records a verified sample (if newer than the stored one for the pair); a confirmed one moves both
        endpoints' coordinates. `shared`: the whole cluster holds it too (it came from there, or it is being
        sent there; a relay alone shares everything): only shared samples feed refits, so every relay refits
        from the same set. False when it was not newer."""
        a, b = sample["a"], sample["b"]
        key = _key(a, b)
        old = self.links.get(key)
        if old is not None and old["measured_at"] > sample["measured_at"]:
            return False
        self.links[key] = sample
        self._dirty = True
        if shared:
            self.shared[key] = sample
            self.version += 1
        if not confirmed:
            self.unconfirmed.add(key)
            self._node(a), self._node(b)  # on the map, where their own confirmed edges put them
            return True
        self.unconfirmed.discard(key)
        if not shared:
            return True  # within what the cluster holds already (link_gossip_change): the coordinates stay
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
        """Rebuilds the book from stored samples, then its coordinates (refit)."""
        for sample in samples:
            key = _key(sample["a"], sample["b"])
            old = self.links.get(key)
            if old is None or old["measured_at"] <= sample["measured_at"]:
                self.links[key] = self.shared[key] = sample
        self.version += 1
        self.refit()

    def refit(self) -> None:
        """Coordinates from every sample held, deterministically: each node-to-node sample re-judged against
        the landmark edges now held, the confirmed ones (sorted) fitted by coordinates_from_links. Every
        relay of a cluster that holds the same samples (they travel over NATS) so serves the same
        coordinates, whatever order they arrived in; samples that arrive between refits move coordinates
        incrementally (add) until the next one."""
        ordered = sorted(self.links.values(), key=lambda s: (s["a"], s["b"]))
        confirmed, self.unconfirmed = [], set()
        for sample in ordered:
            try:
                ok = self.judge(sample)
            except Problem:
                ok = False  # accepted under earlier measurements; now it moves nothing
            if ok:
                confirmed.append(sample)
            else:
                self.unconfirmed.add(_key(sample["a"], sample["b"]))
        budget = self.config.link_refit_updates
        cycles = max(1, min(REFIT_CYCLES, budget // max(1, len(confirmed))))
        # the landmarks (this relay and its peers) anchor the fit against lying nodes (fabric/defence.py)
        coords = guarded_coordinates(confirmed, self.landmarks, cycles=cycles, seed=0, config=REFIT_CONFIG,
                                     seed_of=coordinate_seed)
        for node_id in {s["a"] for s in ordered} | {s["b"] for s in ordered}:
            node = self._node(node_id)
            node.coord = coords.get(node_id) or VivaldiNode(seed=coordinate_seed(node_id)).coord
        self.fit_samples, self.fit_digest = len(ordered), samples_digest(ordered)
        self.refitted_version = self.version
        self._dirty = True

    def refit_due(self) -> bool:
        return self.version != self.refitted_version

    def take_fit(self, fitted: LinkBook, version: int) -> None:
        """Takes the coordinates and confirmations of a book refitted (in a worker thread) from this one's
        samples at `version`; samples added since keep their own judgement until the next refit."""
        for node_id, node in fitted.nodes.items():
            self._node(node_id).coord = node.coord
        changed = {k for k, s in self.links.items() if fitted.links.get(k) is not s}
        self.unconfirmed = (fitted.unconfirmed - changed) | (self.unconfirmed & changed)
        self.fit_samples, self.fit_digest = fitted.fit_samples, fitted.fit_digest
        self.refitted_version = version
        self._dirty = True

    def fit(self) -> dict[str, Any]:
        """What the served coordinates were fitted from: the number and digest of the samples of the last
        refit, and whether any shared sample moved them since (then they are not reproducible elsewhere)."""
        return {"samples": self.fit_samples, "sample_digest": self.fit_digest, "current": not self.refit_due()}

    def coordinate(self, node_id: str) -> Coordinate | None:
        node = self.nodes.get(node_id)
        return node.coord if node else None

    def confirmed(self, a: str, b: str) -> bool:
        """Whether the edge a-b is held and confirmed (it moves coordinates)."""
        return _key(a, b) in self.links and _key(a, b) not in self.unconfirmed

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


def samples_digest(ordered: list[dict[str, Any]]) -> str:
    """sha256 over the (a, b, measured_at, rtt_ms) of samples sorted by (a, b): a refit's input, named."""
    text = json.dumps([[s["a"], s["b"], s["measured_at"], s["rtt_ms"]] for s in ordered], separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def worth_gossiping(sent: dict[str, Any] | None, sample: dict[str, Any], config: RelayConfig) -> bool:
    """Whether a relay sends its newest measurement of an edge to the cluster, given the one it last sent:
    the first, one whose RTT moved by more than link_gossip_change (and link_gossip_min_ms) at least
    link_gossip_min_interval_s later, or one link_gossip_every_s newer."""
    if sent is None:
        return True
    before, now = float(sent["rtt_ms"]), float(sample["rtt_ms"])
    age_s = float(sample["measured_at"]) - float(sent["measured_at"])
    moved = abs(now - before) > max(config.link_gossip_change * before, config.link_gossip_min_ms)
    return (moved and age_s >= config.link_gossip_min_interval_s) or age_s >= config.link_gossip_every_s


def landmark_sample_due(held: dict[str, Any] | None, body: dict[str, Any], config: RelayConfig) -> bool:
    """Whether a relay asks its session's node to co-sign a new sample of their edge: the first, the first with a
    bandwidth figure, one whose RTT moved by more than link_gossip_change (and link_gossip_min_ms) from the one
    held, or one link_gossip_every_s newer (a session's first sample is always asked for:
    web/sessions/live_endpoint.py).
    A stable edge was re-signed every 3 pongs (30 s): at 10,000 sessions 333 samples/s, each two signatures, a
    durable write and a mesh message, the largest share of the relay's CPU after the sessions themselves
    (py-spy, BENCHMARKS.md); now ~33/s, and a phone sends ~12 a hour instead of 120."""
    if held is None or (held.get("bw_mbps") is None and body.get("bw_mbps") is not None):
        return True
    before, now = float(held["rtt_ms"]), float(body["rtt_ms"])
    moved = abs(now - before) > max(config.link_gossip_change * before, config.link_gossip_min_ms)
    return moved or float(body["measured_at"]) - float(held["measured_at"]) >= config.link_gossip_every_s


def fitted_book(relay_id: str, config: RelayConfig, samples: list[dict[str, Any]]) -> LinkBook:
    """A book of these samples, refitted (LinkBook.load): what a relay computes beside its event loop."""
    book = LinkBook(relay_id, config)
    book.load(samples)
    return book
