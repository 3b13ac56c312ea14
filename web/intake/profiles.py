"""One intake for a NodeProfile, however it arrived: posted over HTTP (or a live session), gossiped on the libp2p
mesh, or published by another relay of the cluster over NATS.

Each way in keeps its own gates before this point (HTTP: size, the verify pool, the moved-region rule, beacon,
time, newer-than-stored and rate; the mesh: the same, through the HTTP entry; NATS: the signature, the envelope's
origin, newer-than-stored). What follows a profile the relay takes is the same for all three, and lives only
here: one store write (the profile and its history row, committed together), the atlas entry, the challenge
desk's refresh (a new claim is judged against what was observed), and what goes out through the outbox.
(Before, a profile from NATS wrote no history row and left the desk unrefreshed on every other relay.)

Narrow on purpose: it is given the relay's Core (store, atlas, config, identity), the desk's refresh and the
outbox, not the relay.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from web.api.summary import ProfileSummary, lower_figures
from web.parts import Core, Outbox
from web.store import Op, Store

log = logging.getLogger("ce.relay")

Via = Literal["http", "mesh", "cluster"]


@dataclass(frozen=True)
class Origin:
    """How a profile reached this relay, and the relay it was first posted to (this one for http and mesh)."""

    via: Via
    relay: str

    @property
    def synced(self) -> bool:
        """Already in the cluster's bucket (a copy from NATS); anything else waits for the resync loop to push
        it (the store's `synced` flag)."""
        return self.via == "cluster"


class ProfileIntake:
    def __init__(self, core: Core, refresh: Callable[[str, float], None], outbox: Outbox) -> None:
        self.core = core
        self.refresh = refresh  # ChallengeDesk.refresh
        self.outbox = outbox

    def write_op(self, summary: ProfileSummary, body: bytes, origin: Origin, now: float) -> Op:
        """The one store write: the profile (with its summary) and, only where that changed the stored row (a
        newer profile), its history row, in one transaction. A copy delivered twice (over NATS and the mesh at
        once, or the live subject and the bucket's catch-up after a reconnect) leaves one row."""
        put = Store.put_profile_op(summary.node_id, summary.measured_at, origin.relay, body, origin.synced,
                                   json.dumps(summary.to_json()).encode())
        row = Store.put_history_op(summary.node_id, now, "profile", json.dumps(summary.figures()).encode(),
                                   self.core.config.history_kept)

        def op(conn: sqlite3.Connection) -> None:
            before = conn.total_changes
            put(conn)
            if conn.total_changes > before:
                row(conn)
        return op

    def keep(self, summary: ProfileSummary, body: bytes, origin: Origin, now: float) -> list[str]:
        """After the store committed write_op: the atlas, the desk, and the outbox. Returns the warnings a
        poster is told (a profile with lower figures than the one it replaced)."""
        node_id = summary.node_id
        before = self.core.atlas.nodes.get(node_id)
        if before is not None and before.profile.measured_at >= summary.measured_at:
            return []  # a newer (or this same) profile landed while this one was written: it stands
        warnings = lower_figures(before.profile, summary) if before is not None else []
        if warnings and origin.via != "cluster":
            log.warning("a profile replaced a higher one", extra={"node_id": node_id, "warnings": warnings})
        # a copy of another relay's is live here only while fresh: its node's session is elsewhere (digests say)
        live = origin.via != "cluster" or now - summary.measured_at <= self.core.config.offline_after_s
        self.core.atlas.put(summary, origin.relay, now, live=live)
        self.refresh(node_id, now)
        self.outbox.publish_profile(node_id, summary.measured_at, body, origin.via)
        return warnings
