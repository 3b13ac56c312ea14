"""Vivaldi that resists lying nodes (issue 18, seed §9 "Vivaldi error as a lie detector").

A relay computes every node's coordinate from the RTT samples it holds; a node cannot claim a coordinate, only
lie about the samples it is an endpoint of (delay its pongs: inflate; or, co-signing a figure, report any).
Landmarks are the relays: their own RTT measurements to nodes and to each other are trusted (a figure a
landmark measured is true, though a node may have delayed its answer). The defence:

* landmark anchors: every node keeps, beside its coordinate, an *anchor* coordinate fitted to its landmark
  samples alone, which no peer sample moves (GNP-style; Kaafar et al., SIGCOMM 2007, use trusted "surveyors"
  the same way). Landmarks move on their own mesh, and on a node's sample only when that node is among the
  better-scoring half and the sample agrees with its anchor, so delayed pongs cannot drag the reference;
* residuals against the landmarks: a peer sample's residual is |ln(rtt / anchor prediction)|; a sample outside
  the triangle envelope through a landmark that measured both endpoints contradicts it and counts for nothing;
  a residual beyond a multiple of the population's typical one loses weight (spatial outlier test, Zage and
  Nita-Rotaru, CCS 2007). The reference is the landmarks, not the current coordinates, so lies that grow
  slowly (frog-boiling, Chan-Tin et al. 2009) are still measured against where the landmarks put the nodes;
* reputation: a node's score is the median of the latest residuals with its distinct peers (one vote per peer,
  counted only from peers in the better-scoring half), or how badly its anchor fits its own landmark RTTs if
  worse; a node scoring far above the typical residual (a liar lies on most of its samples, or delays its
  pongs at random) loses weight on every sample;
* drift limit (error-rise detector): a node whose coordinate predicts its landmark RTTs much worse than its
  anchor does is being dragged; it takes no peer samples until its landmark samples pull it back.

DefenceConfig(enabled=False) gives plain Serf Vivaldi (every sample full weight, landmarks move like any node).
Honest majority assumed: the medians and ranks the thresholds come from are honest while liars are well under
half (fabric/adversary.py's worlds hold at 30 % colluding liars; at 40 % the coordinated ones win the vote).
Units: ms for RTTs; residuals are unitless log-ratios (0.1 ~ 10 % off)."""

from __future__ import annotations

import contextlib
import math
import statistics
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterable

from fabric.config import DEFAULT, VivaldiConfig
from fabric.vivaldi import ZERO, Coordinate, CoordinateError, VivaldiNode


def ramp(residual: float, limit: float) -> float:
    """Weight of a residual against its limit: 1 up to the limit, falling linearly to 0 at twice the limit."""
    if residual <= limit:
        return 1.0
    return max(0.0, 2.0 - residual / limit)


def log_residual(rtt_ms: float, predicted_ms: float) -> float:
    return abs(math.log(max(rtt_ms, ZERO) / max(predicted_ms, ZERO)))


def _copy(c: Coordinate) -> Coordinate:
    return Coordinate(list(c.vec), c.error, c.adjustment, c.height)


class GuardedVivaldi:
    """Coordinates for a set of nodes, fed one RTT sample at a time (as a relay receives them)."""

    def __init__(self, landmarks: Iterable[str], config: VivaldiConfig = DEFAULT,
                 seed_of: Callable[[str], int] | None = None) -> None:
        self.config = config
        self.landmarks = frozenset(landmarks)
        if config.defence.enabled and not self.landmarks:
            raise ValueError("the defence needs at least one landmark (trusted node) to measure residuals against")
        self._seed_of = seed_of or (lambda node: zlib.crc32(node.encode()))  # the same in every process
        self.nodes: dict[str, VivaldiNode] = {}
        self.anchors: dict[str, VivaldiNode] = {}
        self.landmark_rtt_ms: dict[str, dict[str, float]] = {}  # node -> landmark -> latest trusted RTT
        self._residuals: dict[str, OrderedDict[str, float]] = {}  # node -> peer -> latest residual
        self._node_trust: dict[str, float] = {}
        self._voters: set[str] | None = None  # None: everyone votes (before the first ranking)
        self._typical_residual = config.defence.residual_floor
        self._peer_samples = 0
        self.refused = 0  # peer samples that moved nothing (warm-up, envelope, residual or reputation)

    def _node(self, node: str) -> VivaldiNode:
        if node not in self.nodes:
            self.nodes[node] = VivaldiNode(self.config, seed=self._seed_of(node))
        return self.nodes[node]

    def coordinates(self) -> dict[str, Coordinate]:
        return {node: v.coord for node, v in self.nodes.items()}

    def add(self, a: str, b: str, rtt_ms: float) -> float:
        """Takes one sample between a and b; returns the trust it was given (0: it moved no coordinate)."""
        if not math.isfinite(rtt_ms) or rtt_ms < 0 or rtt_ms > self.config.rtt_max_ms:
            raise CoordinateError(f"rtt_ms must be finite and in [0, {self.config.rtt_max_ms:g}], got {rtt_ms}")
        if a == b:
            raise CoordinateError("a sample needs two different endpoints")
        self._node(a), self._node(b)
        if not self.config.defence.enabled:
            self._both(a, b, rtt_ms, 1.0, 1.0)
            return 1.0
        a_mark, b_mark = a in self.landmarks, b in self.landmarks
        if a_mark and b_mark:  # the landmark mesh: trusted both ways
            self._both(a, b, rtt_ms, 1.0, 1.0)
            return 1.0
        if a_mark or b_mark:  # a landmark measured a node: the figure is trusted, the node may have delayed
            mark, node = (a, b) if a_mark else (b, a)
            self.landmark_rtt_ms.setdefault(node, {})[mark] = rtt_ms
            anchor = self.anchors.setdefault(node, VivaldiNode(self.config, seed=self._seed_of(node) + 1))
            anchor.update(mark, self.nodes[mark].coord, rtt_ms)
            # the node moves fully; the landmark only on a node of good reputation whose sample agrees with
            # the node's anchor (a liar's delayed pongs must not drag the reference everyone is judged against)
            residual = log_residual(rtt_ms, anchor.coord.distance(self.nodes[mark].coord))
            voter = self._voters is not None and node in self._voters
            trust = self._node_trust.get(node, 0.0) * ramp(residual, self._sample_limit()) if voter else 0.0
            self._both(mark, node, rtt_ms, trust, 1.0)
            return 1.0
        trust = self._peer_trust(a, b, rtt_ms)
        if trust <= 0.0:
            self.refused += 1
            return 0.0
        self._both(a, b, rtt_ms, 0.0 if self._drifted(a) else trust, 0.0 if self._drifted(b) else trust)
        return trust

    def _both(self, a: str, b: str, rtt_ms: float, trust_a: float, trust_b: float) -> None:
        """Moves each endpoint against the other's coordinate from before the sample (0: it stays put)."""
        node_a, node_b = self.nodes[a], self.nodes[b]
        before_a = _copy(node_a.coord)
        if trust_a > 0.0:
            node_a.update(b, node_b.coord, rtt_ms, trust_a)
        if trust_b > 0.0:
            node_b.update(a, before_a, rtt_ms, trust_b)

    def _warm(self, node: str) -> bool:
        anchor = self.anchors.get(node)
        return anchor is not None and anchor.updates >= self.config.defence.anchor_warmup_samples

    def _peer_trust(self, a: str, b: str, rtt_ms: float) -> float:
        d = self.config.defence
        if not (self._warm(a) and self._warm(b)):
            return 0.0
        residual = log_residual(rtt_ms, self.anchors[a].coord.distance(self.anchors[b].coord))
        for node, peer in ((a, b), (b, a)):  # one vote per peer: a liar that samples eagerly still has one
            votes = self._residuals.setdefault(node, OrderedDict())
            votes.pop(peer, None)
            votes[peer] = residual
            if len(votes) > d.node_window:
                votes.popitem(last=False)
        self._peer_samples += 1
        if self._peer_samples % d.refresh_every == 1:
            self._refresh()
        if self._outside_envelope(a, b, rtt_ms):
            return 0.0
        return ramp(residual, self._sample_limit()) * min(self._node_trust.get(a, 1.0), self._node_trust.get(b, 1.0))

    def _sample_limit(self) -> float:
        d = self.config.defence
        return max(d.residual_floor, d.sample_threshold_factor * self._typical_residual)

    def _outside_envelope(self, a: str, b: str, rtt_ms: float) -> bool:
        """Whether the sample contradicts a landmark that measured both endpoints (triangle inequality)."""
        d = self.config.defence
        seen_a, seen_b = self.landmark_rtt_ms.get(a, {}), self.landmark_rtt_ms.get(b, {})
        for mark in seen_a.keys() & seen_b.keys():
            ra, rb = seen_a[mark], seen_b[mark]
            if rtt_ms > d.envelope_factor * (ra + rb) + d.envelope_slack_ms:
                return True
            if rtt_ms < (abs(ra - rb) - d.envelope_slack_ms) / d.envelope_factor:
                return True
        return False

    def _landmark_residual(self, coord: Coordinate, node: str) -> float:
        seen = self.landmark_rtt_ms.get(node, {})
        return statistics.median(log_residual(rtt, coord.distance(self.nodes[mark].coord))
                                 for mark, rtt in seen.items())

    def _drifted(self, node: str) -> bool:
        """The error-rise detector: the node's coordinate disagrees with its trusted landmark samples much more
        than its anchor does (peer samples dragged it away)."""
        d = self.config.defence
        own = self._landmark_residual(self.nodes[node].coord, node)
        anchored = self._landmark_residual(self.anchors[node].coord, node)
        return own > max(d.drift_floor, d.drift_factor * anchored)

    def _refresh(self) -> None:
        """Recomputes every node's score, the population's typical residual (the median score) and every node's
        trust. A score counts only the votes of *voters*, the better-scoring half of the nodes at the last pass:
        a victim's samples with liars say nothing about the victim, and ranks, unlike a threshold, need no scale
        (liars that muddy everyone's residuals early cannot vote themselves a looser limit). Two passes, so the
        liars ranked low by the first drop out of the second."""
        d = self.config.defence
        minimum = max(3, d.node_window // 8)
        fits = {node: self._landmark_residual(self.anchors[node].coord, node) for node in self._residuals}
        for _ in range(2):
            scores = {}
            for node, votes in self._residuals.items():
                if len(votes) < minimum:
                    continue
                counted = [r for peer, r in votes.items() if self._voters is None or peer in self._voters]
                if len(counted) < minimum:  # too few voters among its peers yet: every peer counts
                    counted = list(votes.values())
                # a node whose landmark RTTs contradict one another (its anchor cannot fit them) scores that
                scores[node] = max(statistics.median(counted), fits[node])
            if not scores:
                return
            self._typical_residual = statistics.median(scores.values())
            limit = max(d.residual_floor, d.reputation_factor * self._typical_residual)
            self._node_trust = {node: ramp(score, limit) for node, score in scores.items()}
            self._voters = {node for node, score in scores.items() if score <= self._typical_residual}


def guarded_coordinates(links: Iterable[dict[str, object]], landmarks: Iterable[str], cycles: int = 200,
                        seed: int = 0, config: VivaldiConfig = DEFAULT,
                        seed_of: Callable[[str], int] | None = None) -> dict[str, Coordinate]:
    """Coordinates for every endpoint of a set of LinkSamples through GuardedVivaldi: the samples replayed
    in a seeded random order `cycles` times (as fabric.vivaldi.coordinates_from_links does without the
    defence), so the same samples give the same coordinates in every process (a relay cluster's refits)."""
    import random

    rng = random.Random(seed)
    guarded = GuardedVivaldi(landmarks, config, seed_of)
    order = list(links)
    for _ in range(cycles):
        rng.shuffle(order)
        for link in order:
            # a sample a coordinate cannot take (a non-finite result) is skipped: the others still count
            with contextlib.suppress(CoordinateError):
                guarded.add(str(link["a"]), str(link["b"]), float(link["rtt_ms"]))  # type: ignore[arg-type]
    return guarded.coordinates()
