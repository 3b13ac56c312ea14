"""A cluster that grows by region (issue 32, item 4), as pure functions: which NATS subjects are global and which
stay in a region, and the global verified scoreboard summed from per-region totals signed by their relays.

The topology is NATS's own (docs/manual.md, "Sizing a cluster"): one nats-server (or cluster) per region, each a leaf
node of a hub. NATS forwards a message over a leaf connection only where there is interest on the other side,
so a subject that only one region's relays subscribe to never leaves that region: a relay's inbound cluster
traffic then grows with its region, not with the network.

- Regional (suffixed with the region): liveness digests, link samples and challenge transcripts. They concern
  the nodes a region's relays hold and measure; a node is asked at roll calls by the lowest-id relay of its
  region that holds it, and its transcript goes to that region's relays only.
- Global: profiles (the atlas every scheduler reads: one message per node per re-measure), beacons (one per
  relay per interval: they carry the roll call's moment, which must be one moment for the whole network, or a
  machine could answer in one region and then in another), and each region's signed roll-call totals (one
  per relay per roll call).

One machine, one count, across regions: a machine live in two regions is challenged in both at the same
moment (the beacon is global), so its two answers share it, as two identities on one relay do (web/proof/rollcall.py
shown: at most 1.25x the machine whatever the split).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

REGION = re.compile(r"[a-z][a-z0-9-]{0,31}")
TOTAL_KEYS = ("nodes", "cpu_gflops", "tokens_per_sec", "gpus", "gpu_tflops")


def check_region(name: str) -> str:
    """A region's name as subjects and KV keys take it; raises ValueError saying what was expected."""
    if not REGION.fullmatch(name):
        raise ValueError(f"a region is 1-32 characters of a-z, 0-9 and '-', starting with a letter; got {name!r}")
    return name


@dataclass(frozen=True)
class Subjects:
    """The subjects a relay publishes and subscribes to. Without a region every subject is the cluster's
    (one flat cluster, as before regions existed)."""

    profiles: str
    beacons: str
    scoreboards: str
    digests: str
    links: str
    transcripts: str

    @classmethod
    def of(cls, region: str | None) -> Subjects:
        def here(subject: str) -> str:
            return subject if region is None else f"{subject}.{check_region(region)}"

        return cls(profiles="ce.atlas.profiles", beacons="ce.relays.beacons", scoreboards="ce.regions.scoreboards",
                   digests=here("ce.atlas.live-digests"), links=here("ce.atlas.links"),
                   transcripts=here("ce.trust.transcripts"))


@dataclass
class RegionBoard:
    """Each region's latest roll-call totals, as signed by its relays (their Scoreboard records, signature and
    peer checked by the caller), summed into the network's verified scoreboard. A region counts once: from
    the lowest-id relay that reported its latest roll call (the relays of a region share transcripts, so they
    agree). A region whose relays fell silent for `stale_after_s` counts nothing."""

    own_region: str
    stale_after_s: float
    boards: dict[str, dict[str, tuple[dict[str, Any], float]]] = field(default_factory=dict)  # region -> relay

    def take(self, region: str, scoreboard: dict[str, Any], now: float) -> str:
        """Keeps a relay's scoreboard when it is newer than the one held for that relay; the outcome."""
        relay = str(scoreboard["relay"])
        held = self.boards.setdefault(region, {}).get(relay)
        if held is not None and held[0]["at"] >= scoreboard["at"]:
            return "not_newer"
        self.boards[region][relay] = (scoreboard, now)
        return "taken"

    def regions(self, now: float) -> dict[str, dict[str, Any]]:
        """Per region (other than this relay's own): the counted scoreboard, from the lowest-id relay that
        reported the region's latest roll call among those heard within stale_after_s."""
        out: dict[str, dict[str, Any]] = {}
        for region, relays in self.boards.items():
            fresh = {r: b for r, (b, seen) in relays.items() if now - seen <= self.stale_after_s}
            if region == self.own_region or not fresh:
                continue
            latest = max(b["at"] for b in fresh.values())
            relay = min(r for r, b in fresh.items() if b["at"] == latest)
            out[region] = fresh[relay]
        return out

    def network(self, own: dict[str, Any] | None, now: float) -> dict[str, Any]:
        """The network's verified totals: this region's own (`own`: the proven totals of this relay's latest
        finished roll call, or None) plus every other region's; with the parts named."""
        parts = {region: b for region, b in self.regions(now).items()}
        totals: dict[str, float] = dict.fromkeys(TOTAL_KEYS, 0)
        for proven in [*(b["proven"] for b in parts.values()), *([own] if own else [])]:
            for key in TOTAL_KEYS:
                totals[key] += proven.get(key, 0) or 0
        return {"totals": totals, "regions": {
            self.own_region: {"relay": "this relay", "proven": own},
            **{region: {"relay": b["relay"], "roll_call": b["roll_call"], "at": b["at"], "proven": b["proven"]}
               for region, b in parts.items()}}}
