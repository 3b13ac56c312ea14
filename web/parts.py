"""The narrow things a relay's parts are given instead of the relay itself (web/relay.py wires them).

The challenge desk, the roll caller, the peer desk and the cluster each need a few things of the relay: its
config and key, the store, the atlas, the beacon rounds, the metrics, and somewhere to publish what they
decided. They get exactly that, so each can be read, built and tested without the others, and none reaches
back into the relay for more.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from common.keys import NodeKey
from web.api.ingest import BeaconBook
from web.api.metrics import Metrics
from web.config import RelayConfig
from web.map.atlas import Atlas
from web.store import Store


@dataclass(frozen=True)
class Core:
    """What every part of one relay reads or writes: its config and identity, and the shared state."""

    config: RelayConfig
    key: NodeKey          # the relay's signing key (transcripts, scoreboards, digests)
    store: Store          # the relay's SQLite file
    atlas: Atlas          # every node known here, live or not, and what each counts
    beacons: BeaconBook   # the beacon rounds this relay issued and honours
    metrics: Metrics

    @property
    def relay_id(self) -> str:
        return self.key.node_id


class ClusterLink(Protocol):
    """What the desks ask of the NATS cluster (web/cluster/nats_cluster.py Cluster)."""

    def publish_transcript(self, body: dict[str, Any]) -> None: ...

    def publish_scoreboard(self, call: dict[str, Any]) -> None: ...

    def held_by_lower_relay(self, node_id: str, now: float) -> bool: ...

    def gone(self, node_id: str) -> bool: ...

    def publish_profile(self, node_id: str, measured_at: int, body: bytes, arrival: bool = True) -> None: ...


class MeshLink(Protocol):
    """What the desks ask of the libp2p mesh (web/mesh/relay_mesh.py RelayMesh)."""

    def publish_scoreboard(self, relay_id: str, call: dict[str, Any]) -> None: ...

    def publish_profile(self, body: bytes) -> None: ...


class Outbox:
    """Where a relay's challenge results and roll-call totals go beyond it: the NATS cluster and the libp2p
    mesh, each once it is up (None before that, and without it). The relay sets them as they start."""

    def __init__(self, relay_id: str) -> None:
        self.relay_id = relay_id
        self.cluster: ClusterLink | None = None
        self.mesh: MeshLink | None = None

    def publish_transcript(self, body: dict[str, Any]) -> None:
        """A finished challenge's transcript: the other relays of the cluster re-check it and keep the same
        trust (web/proof/transcripts.py)."""
        if self.cluster is not None:
            self.cluster.publish_transcript(body)

    def publish_scoreboard(self, call: dict[str, Any]) -> None:
        """A finished roll call's final totals (RollCall.to_json): signed for any libp2p peer, and as this
        region's totals for the other regions."""
        if self.mesh is not None:
            self.mesh.publish_scoreboard(self.relay_id, call)
        if self.cluster is not None:
            self.cluster.publish_scoreboard(call)

    def publish_profile(self, node_id: str, measured_at: int, body: bytes, via: str) -> None:
        """A profile this relay took (web/intake/profiles.py): to the cluster unless it came from there (an
        arrival of the node here only when posted here: a mesh copy was posted elsewhere), and to the mesh only
        when posted here (gossipsub already carries what came over the mesh)."""
        if self.cluster is not None and via != "cluster":
            self.cluster.publish_profile(node_id, measured_at, body, arrival=via == "http")
        if self.mesh is not None and via == "http":
            self.mesh.publish_profile(body)

    def asked_elsewhere(self, node_id: str, now: float) -> bool:
        """Whether another relay asks this node at roll calls: a lower-id relay of its region holds it, or its
        home is another region now."""
        cluster = self.cluster
        return cluster is not None and (cluster.held_by_lower_relay(node_id, now) or cluster.gone(node_id))

    @property
    def clustered(self) -> bool:
        return self.cluster is not None
