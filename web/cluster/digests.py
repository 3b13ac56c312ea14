"""Liveness across a relay cluster as signed per-relay digests (issue 19), pure: no I/O, time passed in.

Each relay publishes, every `heartbeat_interval_s`, what changed in the set of nodes live on it (a LiveDigest
with `added` and `removed`, numbered by `seq`), and every `digest_full_every` intervals the whole set, so a
relay that starts or missed a message catches up. Cluster traffic then grows with change (nodes joining and
leaving), not with heartbeats: 10,000 sessions beating every 10 s were 1,000 NATS messages/s into every relay;
now they are one digest per interval, carrying only who came and went.

A digest is signed by its relay and believed only from the peers the operator named (`cluster_peers`): a bare
NodeId on NATS, or a digest from anyone else, keeps nothing live and excuses no node from a roll call. A
delta that does not follow the last digest heard from its relay (a lost message) is not applied: that peer's
view is stale until its next full digest, and meanwhile its nodes count as not held there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class DigestWriter:
    """The digests this relay publishes: each one the change since the previous, or the full set."""

    relay: str
    full_every: int
    epoch: int          # this run's start (unix ms): digests order by (epoch, seq), so a restart starts afresh
    url: str | None = None  # where nodes reach the relay (announced for landmark probes)
    seq: int = 0
    ticks: int = 0       # intervals so far: every full_every-th one sends the whole set, changed or not
    published: dict[str, int] = field(default_factory=dict)  # node id -> since (unix s), as last published

    def next(self, live_here: dict[str, int], now: float) -> dict[str, Any] | None:
        """The next digest body (unsigned) for the nodes live here now (node id -> since), or None when
        nothing changed and no full digest is due. Called once per interval."""
        full = self.ticks % self.full_every == 0
        self.ticks += 1
        added = {n: s for n, s in live_here.items() if self.published.get(n) != s}
        removed = sorted(n for n in self.published if n not in live_here)
        if not full and not added and not removed:
            return None
        body: dict[str, Any] = {"v": 1, "relay": self.relay, "epoch": self.epoch, "seq": self.seq, "at": int(now),
                                "full": full,
                                "added": [{"node_id": n, "since": s}
                                          for n, s in sorted((live_here if full else added).items())],
                                "removed": [] if full else removed, "url": self.url}
        self.seq += 1
        self.published = dict(live_here)
        return body


@dataclass
class PeerView:
    epoch: int             # the peer's run
    seq: int               # the last digest applied
    heard_at: float        # unix time it arrived
    live: dict[str, int]   # node id -> since
    url: str | None = None  # where nodes reach it (its latest digest says)
    stale: bool = False    # a delta was missed: wait for the next full digest


@dataclass
class DigestBook:
    """What the named peers say is live on them."""

    peers: frozenset[str]
    max_age_s: float                        # a digest older than this on arrival is a replay (refused)
    views: dict[str, PeerView] = field(default_factory=dict)

    def apply(self, digest: Any, now: float) -> tuple[str, list[str]]:
        """Applies a verified LiveDigest record: (outcome, node ids that became live there). Outcomes:
        "applied"; "not_a_peer"; "old" (not after the last one applied, or older than max_age_s: a replay);
        "gap" (a delta after a missed one: the view waits for the next full digest)."""
        relay = str(digest.relay)
        if relay not in self.peers:
            return "not_a_peer", []
        if now - digest.at > self.max_age_s:
            return "old", []
        view = self.views.get(relay)
        order = (int(digest.epoch), int(digest.seq))
        if view is not None and order <= (view.epoch, view.seq):
            return "old", []
        pairs = {str(e.node_id): int(e.since) for e in digest.added}
        if digest.full:
            before = set() if view is None or view.stale else set(view.live)
            self.views[relay] = PeerView(order[0], order[1], now, pairs, digest.url)
            return "applied", sorted(set(pairs) - before)
        if view is None or view.stale or order != (view.epoch, view.seq + 1):
            if view is not None:
                view.stale = True
            return "gap", []
        view.seq, view.heard_at, view.url = order[1], now, digest.url
        for node_id in digest.removed:
            view.live.pop(str(node_id), None)
        view.live.update(pairs)
        return "applied", sorted(pairs)

    def holders(self, node_id: str, alive: set[str] | frozenset[str]) -> list[str]:
        """The peers, among those alive now (heard from lately: their beacon rounds), whose current view
        holds a live session of the node."""
        return sorted(r for r, v in self.views.items() if r in alive and not v.stale and node_id in v.live)

    def held(self, node_id: str, alive: set[str] | frozenset[str]) -> bool:
        return bool(self.holders(node_id, alive))
