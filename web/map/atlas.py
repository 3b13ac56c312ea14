"""The relay's in-memory view of the atlas: the latest profile summary per node, who is live, and the
FabricStats of live nodes (this relay's own and the whole atlas). Pure: no I/O, time passed in."""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from web.api.summary import ProfileSummary
from web.config import RelayConfig
from web.map.stats import Contribution, FabricStats
from web.sessions.liveness import Liveness


@dataclass
class NodeEntry:
    profile: ProfileSummary   # the latest verified profile, typed
    origin: str               # the relay that accepted the profile first
    rtt_ms: float | None = None
    verified: Contribution = Contribution()  # what the verified scoreboard counts (web/proof/trust.py)


class Atlas:
    def __init__(self, config: RelayConfig, relay_id: str) -> None:
        self.relay_id = relay_id
        self.nodes: dict[str, NodeEntry] = {}
        self.liveness = Liveness(config.offline_after_s)
        self.global_stats = FabricStats(config.perf_reference, config.perf_weights)
        self.local_stats = FabricStats(config.perf_reference, config.perf_weights)
        # the scoreboard of what challenges observed (the two above sum what live nodes claim)
        self.global_verified = FabricStats(config.perf_reference, config.perf_weights)
        self.local_verified = FabricStats(config.perf_reference, config.perf_weights)
        self.live: set[str] = set()
        self._sorted: list[str] = []      # live ids in order for /atlas paging, rebuilt lazily
        self._sorted_version = -1
        self.version = 0                  # bumps on every change a client of /atlas could see

    def _go_live(self, node_id: str) -> None:
        entry = self.nodes[node_id]
        self.global_stats.set_live(node_id, entry.profile.contribution)
        self._set_verified_live(node_id, entry)
        if entry.origin == self.relay_id:
            self.local_stats.set_live(node_id, entry.profile.contribution)
        else:
            self.local_stats.set_offline(node_id)
        self.live.add(node_id)

    def _set_verified_live(self, node_id: str, entry: NodeEntry) -> None:
        for stats, mine in ((self.global_verified, True), (self.local_verified, entry.origin == self.relay_id)):
            if mine and entry.verified != Contribution():
                stats.set_live(node_id, entry.verified)
            else:
                stats.set_offline(node_id)

    def set_verified(self, node_id: str, contribution: Contribution) -> None:
        """What the node now adds to the verified scoreboard (all zero: nothing)."""
        entry = self.nodes.get(node_id)
        if entry is None or entry.verified == contribution:
            return
        entry.verified = contribution
        if node_id in self.live:
            self._set_verified_live(node_id, entry)
        self.version += 1

    def _go_offline(self, node_id: str) -> None:
        for stats in (self.global_stats, self.local_stats, self.global_verified, self.local_verified):
            stats.set_offline(node_id)
        self.live.discard(node_id)

    def put(self, profile: ProfileSummary, origin: str, now: float, live: bool = True) -> bool:
        """Records a verified profile (newer than any before it); True if the node is new to the atlas.
        `live` is False for profiles loaded at start-up: a node is live only once heard from again."""
        node_id = profile.node_id
        old = self.nodes.get(node_id)
        is_new = old is None
        self.nodes[node_id] = NodeEntry(profile, origin, None if old is None else old.rtt_ms,
                                        verified=Contribution() if old is None else old.verified)
        if live:
            self.liveness.touch(node_id, now)
            self._go_live(node_id)
        elif self.liveness.is_live(node_id):
            self._go_live(node_id)
        self.version += 1
        return is_new

    def heartbeat(self, node_id: str, now: float, rtt_ms: float | None = None) -> bool:
        """A sign of life from a known node; False if the node has no profile here."""
        entry = self.nodes.get(node_id)
        if entry is None:
            return False
        if rtt_ms is not None:
            entry.rtt_ms = rtt_ms
        if self.liveness.touch(node_id, now):
            self._go_live(node_id)
            self.version += 1
        return True

    def sweep(self, now: float, keep: Callable[[str, float], bool] | None = None) -> list[str]:
        """Takes offline the nodes silent for the timeout, except those `keep` says are live elsewhere (a
        peer relay's digest holds their session: they stay live here until it no longer does)."""
        silent = self.liveness.sweep(now)
        gone = []
        for node_id in silent:
            if keep is not None and keep(node_id, now):
                self.liveness.touch(node_id, now)
                continue
            gone.append(node_id)
            self._go_offline(node_id)
        if gone:
            self.version += 1
        return gone

    def status(self, node_id: str) -> dict[str, Any] | None:
        entry = self.nodes.get(node_id)
        if entry is None:
            return None
        return {"online": self.liveness.is_live(node_id), "last_seen": self.liveness.last_seen(node_id),
                "rtt_ms": entry.rtt_ms, "origin": entry.origin}

    def live_sorted(self) -> list[str]:
        """Live node ids in order. Sorted on demand once per atlas version, so ingest stays O(1) per profile
        (an insertion into a sorted list of 100,000 ids costs more than verifying the profile)."""
        if self._sorted_version != self.version:
            self._sorted = sorted(self.live)
            self._sorted_version = self.version
        return self._sorted

    def page(self, cursor: str, limit: int) -> tuple[list[str], str | None]:
        """Live node ids after `cursor`, and the cursor of the next page (None at the end)."""
        ordered = self.live_sorted()
        i = bisect.bisect_right(ordered, cursor) if cursor else 0
        ids = ordered[i:i + limit]
        more = i + limit < len(ordered)
        return ids, (ids[-1] if more and ids else None)
