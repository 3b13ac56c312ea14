"""A node that moves between regions keeps its trust and is counted in one region at a time (issue 32, item 4),
as pure rules; web/cluster/nats_cluster.py carries the messages (a NATS request on the region the node left).

A region's relays hold one trust per node (web/proof/transcripts.py), and a node's profile names the region of the
relay that took it (the cluster envelope's `region`). When a node's session arrives at a relay of region B
while the node's home, as B knows it, is region A, B asks A: a signed Handoff with `trust` null, on A's own
subject `ce.trust.handoff.A` (so only A's relays receive it). Every relay of A that takes the ask marks the
node as gone to B from that moment: its proof is dropped and it is not challenged there (it counts where it
is now), and each answers with the trust A holds, signed. B adopts the first answer: passes, failures, the
observed figures and any flag (a flag moves with the node: moving is no way out of it).

Counted twice during the move? A counts the node only until the ask arrives; B counts it only from its next
roll call with a proof. Between the two, at most one region holds a proof, and a node live in both at one roll
call (a session not yet timed out in A) is asked in the region that got it last: the latest arrival wins,
by the Handoff's `at`. A replayed ask is taken once, and only within max_age_s of its `at`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from web.proof.trust import Trust
from web.replay_marks import Marks, NoMarks

HANDOFF_SUBJECT = "ce.trust.handoff"
MARK_KIND = "handoff"  # the asks' marks in the store (web/replay_marks.py)
HOME_KIND = "home"     # where a node that moved lives (key "NODE REGION", at: the move)


def subject(region: str) -> str:
    """The subject a region's relays take asks on."""
    return f"{HANDOFF_SUBJECT}.{region}"


def ask_body(relay_id: str, node_id: str, from_region: str, to_region: str, at: float) -> dict[str, Any]:
    """The unsigned ask of a relay of `to_region` for the trust `from_region` holds."""
    return {"v": 1, "relay": relay_id, "node_id": node_id, "from_region": from_region, "to_region": to_region,
            "at": round(at, 3), "trust": None}


def answer_body(relay_id: str, ask: dict[str, Any], trust: Trust) -> dict[str, Any]:
    """The unsigned answer: the ask's fields, this relay's id and the trust its region holds."""
    return {**ask, "relay": relay_id, "trust": trust.to_state()}


def adopt(held: Trust | None, state: dict[str, Any], kept: int) -> Trust:
    """The trust a relay keeps for a node that came from another region: the other region's (its figures cut
    to the `kept` latest, as Trust keeps them), unless this relay's own is more recent; the later flag of the
    two either way."""
    theirs = Trust.from_state(state)
    for name in ("observed_gflops", "observed_tps", "observed_gpu_tflops"):
        setattr(theirs, name, list(getattr(theirs, name))[-kept:])
    if held is not None and (held.last_at or 0.0) > (theirs.last_at or 0.0):
        mine = dataclasses.replace(held)
        mine.flagged_until = max(held.flagged_until, theirs.flagged_until)
        return mine
    theirs.flagged_until = max(theirs.flagged_until, held.flagged_until if held else 0.0)
    return theirs


@dataclass
class Moves:
    """Where this relay's region stands on each node that moved: `home[node]` = (region, at of the arrival
    that made it so). An arrival or an ask older than what is held changes nothing (the latest arrival wins);
    an ask is taken once per (relay, node, at)."""

    region: str
    max_age_s: float
    home: dict[str, tuple[str, float]] = field(default_factory=dict)
    _taken: dict[tuple[str, str, float], float] = field(default_factory=dict)
    marks: Marks = field(default_factory=NoMarks)  # the asks taken, kept across restarts (web/replay_marks.py)

    def load(self, now: float) -> None:
        """The asks taken before a restart that are still fresh (a replay of one is refused after it too), and
        where each node that moved lives (a profile from before its move stays refused after it too)."""
        for key, at, _ in self.marks.load(MARK_KIND, now - self.max_age_s):
            relay, node_id, _ = key.split(" ", 2)
            self._taken[(relay, node_id, at)] = at
        for key, at, _ in self.marks.load(HOME_KIND, 0.0):
            node_id, _, region = key.partition(" ")
            if node_id not in self.home or self.home[node_id][1] < at:
                self.home[node_id] = (region, at)

    def _moved(self, node_id: str, region: str, at: float) -> None:
        """The node's home is `region` from `at` on: held, and kept across restarts (one row per node and
        region: the latest `at` of each)."""
        self.home[node_id] = (region, at)
        self.marks.keep(HOME_KIND, f"{node_id} {region}", at)

    def learn(self, node_id: str, region: str | None, at: float) -> None:
        """A profile's region (the cluster envelope): the node's home, unless a later arrival says otherwise."""
        if region is not None and (node_id not in self.home or self.home[node_id][1] < at):
            self.home[node_id] = (region, at)

    def arrived(self, node_id: str, at: float) -> str | None:
        """A session of the node arrived at this relay: the region to ask for its trust (its home elsewhere),
        or None; the node's home is this region from `at` on."""
        held = self.home.get(node_id)
        if held is not None and held[1] > at:
            return None  # a later arrival elsewhere already holds it
        if held is None or held[0] != self.region:
            self._moved(node_id, self.region, at)
        else:
            self.home[node_id] = (self.region, at)
        return held[0] if held is not None and held[0] != self.region else None

    def take_ask(self, relay: str, node_id: str, to_region: str, at: float, now: float) -> str:
        """An ask from a relay of `to_region`: "taken" (the node's home is there from `at`: stop counting it
        here, answer with its trust), or why not: "stale", "replayed", "not_newer"."""
        if abs(now - at) > self.max_age_s:
            return "stale"
        if any(now - t > self.max_age_s for t in self._taken.values()):
            self._taken = {k: t for k, t in self._taken.items() if now - t <= self.max_age_s}
            self.marks.drop(MARK_KIND, before=now - self.max_age_s)
        if (relay, node_id, at) in self._taken:
            return "replayed"
        self._taken[(relay, node_id, at)] = now
        self.marks.keep(MARK_KIND, f"{relay} {node_id} {at!r}", at)
        held = self.home.get(node_id)
        if held is not None and held[1] > at:
            return "not_newer"
        self._moved(node_id, to_region, at)
        return "taken"

    def gone(self, node_id: str) -> bool:
        """Whether the node's home is another region now (this region neither asks nor counts it)."""
        held = self.home.get(node_id)
        return held is not None and held[0] != self.region
