"""The relay's in-memory view of the atlas: the latest profile summary per node, who is live, and the
FabricStats of live nodes (this relay's own and the whole atlas). Pure: no I/O, time passed in."""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any

from web.config import RelayConfig
from web.liveness import Liveness
from web.stats import Contribution, FabricStats


@dataclass
class NodeEntry:
    measured_at: int
    sig: str
    origin: str               # the relay that accepted the profile first
    contribution: Contribution
    rtt_ms: float | None = None
    claimed_gflops: float | None = None  # the whole-CPU figure challenges are sized for and judged against
    instances: int = 1                   # how many capsule instances ran concurrently for that figure
    sgemm_n: int | None = None           # the order of the SGEMM behind that figure (challenges use it)
    claimed_tps: float | None = None     # the reference model's tokens/s claim
    verified: Contribution = Contribution()  # what the verified scoreboard counts (web/trust.py)


def tps_of(profile: dict[str, Any]) -> float | None:
    tps = profile["llm"].get("tokens_per_sec")
    return float(tps) if isinstance(tps, int | float) and tps > 0 else None


def claim_of(profile: dict[str, Any]) -> tuple[float | None, int, int | None]:
    """The whole-CPU GFLOP/s claim, its concurrent instance count (1 when the evidence does not say) and its
    SGEMM order (None when the evidence does not say)."""
    gflops = profile["cpu"].get("gflops_fp32")
    evidence = profile.get("evidence")
    cpu = evidence.get("cpu") if isinstance(evidence, dict) else None
    record = cpu.get("gflops_fp32") if isinstance(cpu, dict) else None
    instances = record.get("instances") if isinstance(record, dict) else None
    count = len(instances) if isinstance(instances, list) and instances else 1
    n = record.get("n") if isinstance(record, dict) else None
    return (float(gflops) if isinstance(gflops, int | float) and gflops > 0 else None), count, \
        (n if type(n) is int else None)


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
        self.global_stats.set_live(node_id, entry.contribution)
        self._set_verified_live(node_id, entry)
        if entry.origin == self.relay_id:
            self.local_stats.set_live(node_id, entry.contribution)
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

    def put(self, profile: dict[str, Any], origin: str, now: float, live: bool = True) -> bool:
        """Records a verified profile (newer than any before it); True if the node is new to the atlas.
        `live` is False for profiles loaded at start-up: a node is live only once heard from again."""
        node_id = profile["node_id"]
        old = self.nodes.get(node_id)
        is_new = old is None
        claimed, instances, sgemm_n = claim_of(profile)
        self.nodes[node_id] = NodeEntry(profile["measured_at"], profile["sig"], origin, Contribution.of(profile),
                                        None if old is None else old.rtt_ms, claimed, instances, sgemm_n,
                                        claimed_tps=tps_of(profile),
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

    def sweep(self, now: float) -> list[str]:
        gone = self.liveness.sweep(now)
        for node_id in gone:
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
