"""NodeView over the relay's own parts (web/jobs/ports.py): the atlas, the challenge desk's trust, the link book's
coordinates and the beacon rounds. The jobs part sees only the NodeView."""

from __future__ import annotations

import time
from typing import Any, Protocol

from web.api.ingest import BeaconBook
from web.jobs.ports import Standing
from web.map.atlas import Atlas
from web.map.links import LinkBook
from web.map.stats import MICRO, MILLI, Contribution


class TrustDesk(Protocol):
    def status(self, node_id: str, now: float) -> str: ...

    async def record_failure(self, node_id: str, code: str, detail: str) -> None: ...


class RelayNodeView:
    def __init__(self, atlas: Atlas, trust: TrustDesk, links: LinkBook, beacons: BeaconBook,
                 region: str | None) -> None:
        self.atlas, self.trust, self.links, self.beacons = atlas, trust, links, beacons
        self.region = region
        self._rtt_cache: tuple[int, float, dict[str, dict[str, float] | None]] = (-1, 0.0, {})

    def standing(self, node_id: str) -> Standing | None:
        entry = self.atlas.nodes.get(node_id)
        if entry is None:
            return None
        live = node_id in self.atlas.live
        counted = entry.verified
        status = self.trust.status(node_id, time.time())
        proven = live and counted != Contribution() and status == "verified"
        profile = entry.profile
        return Standing(live, proven, self.region, counted.cpu_mgflops / MILLI, counted.mtokens_per_sec / MILLI,
                        counted.gpu_utflops / MICRO, profile.mem_bw_gbps, None,
                        profile.contribution.storage_free_gb, status == "flagged")

    def rtt_from(self, node_id: str) -> dict[str, float] | None:
        version, at, table = self._rtt_cache
        now = time.monotonic()
        if version != self.links.version or now - at > 1.0:  # the fit changes with samples and refits
            table = {}
            self._rtt_cache = (self.links.version, now, table)
        if node_id not in table:
            fabric = self.links.fabric_map()
            ids = fabric.node_ids
            rtts: dict[str, float] = {}
            if node_id in ids:  # predicted from the coordinates
                rtts = dict(zip(ids, (float(d) for d in fabric.predicted_from(node_id)), strict=True))
            for other in self.atlas.nodes:  # a measured edge says more than a prediction
                measured = fabric.measured_rtt(node_id, other)
                if measured is not None:
                    rtts[other] = measured
            if rtts:
                rtts[node_id] = 0.0  # the node itself is the nearest (its data is there)
            table[node_id] = rtts or None
        return table[node_id]

    def beacon_value(self) -> str:
        latest = self.beacons.latest
        return str(latest["value"]) if latest else ""

    def beacon(self) -> dict[str, Any] | None:
        latest = self.beacons.latest
        return {k: latest[k] for k in ("relay", "round", "value")} if latest else None

    async def wrong_output(self, node_id: str, detail: str) -> None:
        await self.trust.record_failure(node_id, "wrong_output", detail)
