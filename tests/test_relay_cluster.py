"""Three relays on one real nats-server (with authorization, each relay its own user): shared atlas, catch-up
after a restart, survival of a NATS outage."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.nats_process import NatsProcess
from tests.relay_process import RelayProcess, eventually, start_all
from tests.samples import sample_profile

# timed (tests/scheduling.py): heartbeats and digests cross the cluster within set times
pytestmark = pytest.mark.timed


def serves(relay: RelayProcess, node_id: str, measured_at: int | None = None) -> bool:
    status, body, _ = relay.get(f"/v1/nodes/{node_id}")
    return status == 200 and (measured_at is None or body["profile"]["measured_at"] == measured_at)


def test_three_relays_share_one_atlas(tmp_path: Path) -> None:
    nats = NatsProcess(tmp_path / "nats", users=[f"relay-{i}" for i in range(3)]).start()
    relays = start_all([RelayProcess(tmp_path / f"r{i}", *nats.relay_args(f"relay-{i}"), "--ip-rate", "1000")
                        for i in range(3)])
    a, b, c = relays
    try:
        _, beacon, _ = a.get("/beacon")
        key, p1 = sample_profile(beacon=beacon)
        assert a.post("/v1/profiles", p1)[0] == 201
        eventually(lambda: serves(b, key.node_id) and serves(c, key.node_id), 10, "propagation to b and c")
        eventually(lambda: b.get("/stats")[1]["nodes"] == 1 and c.get("/stats")[1]["nodes"] == 1, 10, "stats")
        assert b.get("/fabric/stats")[1]["nodes"] == 0  # b's own scoreboard counts only its own nodes
        # a profile replaced through another relay wins everywhere (it is newer)
        _, beacon_c, _ = c.get("/beacon")
        _, p2 = sample_profile(key, beacon=beacon_c, measured_at=p1["measured_at"] + 1)
        assert c.post("/v1/profiles", p2)[0] == 200
        eventually(lambda: serves(a, key.node_id, p2["measured_at"]) and serves(b, key.node_id, p2["measured_at"]),
                   10, "the newer profile everywhere")

        # stop b; a profile arrives meanwhile; b restarts and catches up from the bucket
        b.stop()
        k2, p3 = sample_profile(beacon=beacon)
        assert a.post("/v1/profiles", p3)[0] == 201
        b = relays[1] = RelayProcess(tmp_path / "r1", *nats.relay_args("relay-1"), port=b.port).start()
        eventually(lambda: serves(b, k2.node_id), 15, "b catching up after its restart")

        # stop nats-server: relays keep answering from their own store; they resync when it is back
        nats.stop()
        k3, p4 = sample_profile(beacon=beacon)
        assert a.post("/v1/profiles", p4)[0] == 201
        assert serves(a, k3.node_id) and serves(b, k2.node_id) and c.get("/stats")[0] == 200
        assert not serves(b, k3.node_id)
        nats.start()  # the same port and users
        eventually(lambda: serves(b, k3.node_id) and serves(c, k3.node_id), 30, "resync after the NATS outage")
    finally:
        for r in relays:
            r.stop()
        nats.stop()
