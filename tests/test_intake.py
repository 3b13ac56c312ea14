"""One intake for a profile, whichever way it arrives (issue 48): posted over HTTP, gossiped on the libp2p mesh by
a js-libp2p peer, or published by another relay of the cluster over NATS. Each leaves the same history row and
the same atlas entry on relay A. (Before, a profile from NATS wrote no history row on the relays it reached and
skipped their challenge desks' refresh.)"""

from __future__ import annotations

import json
import time
from functools import partial
from pathlib import Path
from typing import Any

from tests.mesh_peer import js_peer_script, mesh_address, run_js
from tests.nats_process import NatsProcess
from tests.relay_process import RelayProcess
from tests.roll_call_helpers import until
from tests.samples import sample_profile

FAST = ["--heartbeat-interval", "0.5", "--beacon-interval", "1", "--ip-rate", "1000"]


def node(relay: RelayProcess, node_id: str) -> dict[str, Any] | None:
    status, body, _ = relay.get(f"/v1/nodes/{node_id}")
    return body if status == 200 else None


def profile_rows(relay: RelayProcess, node_id: str) -> list[dict[str, Any]]:
    events = relay.get(f"/v1/nodes/{node_id}/history")[1]["events"]
    return [{k: v for k, v in e.items() if k != "at"} for e in events if e["event"] == "profile"]


def test_http_mesh_and_nats_leave_the_same_history_row_and_atlas_entry(tmp_path: Path) -> None:
    script = js_peer_script()
    with NatsProcess(tmp_path / "nats") as nats:
        a = RelayProcess(tmp_path / "a", *FAST, *nats.relay_args()).start()
        b = RelayProcess(tmp_path / "b", *FAST, *nats.relay_args()).start()
        try:
            beacon_a, beacon_b = a.get("/beacon")[1], b.get("/beacon")[1]
            # three nodes with the same figures: one posted to A, one gossiped to A, one posted to B
            by_http = sample_profile(beacon=beacon_a, gflops=42.0, name="over http")[1]
            by_mesh = sample_profile(beacon=beacon_a, gflops=42.0, name="over the mesh")[1]
            by_nats = sample_profile(beacon=beacon_b, gflops=42.0, name="over nats")[1]
            assert a.post("/v1/profiles", by_http)[0] == 201
            (tmp_path / "mesh.json").write_text(json.dumps(by_mesh))
            [sent] = [line for line in run_js(script, "publish", mesh_address(a), "ce-bench/profiles/1",
                                              str(tmp_path / "mesh.json")) if "published" in line]
            assert sent["recipients"] == 1, sent  # the precondition: the relay was a gossipsub peer of the topic
            assert b.post("/v1/profiles", by_nats)[0] == 201
            for profile in (by_http, by_mesh, by_nats):
                held = until(f"{profile['name']} at A", 30, partial(node, a, profile["node_id"]))
                assert held["profile"] == profile  # the atlas entry: the profile as signed
            rows = {p["name"]: until(f"{p['name']}'s history row at A", 15, partial(profile_rows, a, p["node_id"]))
                    for p in (by_http, by_mesh, by_nats)}
            # one row each, the same row: the figures the profile claims (before: none for the one from NATS)
            assert rows["over http"] == rows["over the mesh"] == rows["over nats"], rows
            assert len(rows["over nats"]) == 1 and rows["over nats"][0]["cpu_gflops"] == 42.0, rows
        finally:
            a.stop()
            b.stop()


def test_a_copy_taken_twice_leaves_one_row_and_an_older_one_changes_nothing(tmp_path: Path) -> None:
    """The intake itself, on a real SQLite store: a profile delivered twice (NATS and the mesh at once, or the live
    subject and the bucket's catch-up) leaves one history row and one desk refresh; one older than what the relay
    holds, arriving after it, neither writes a row nor moves the atlas back."""
    from common.keys import NodeKey
    from web.api.ingest import BeaconBook, verify_profile
    from web.api.metrics import Metrics
    from web.config import RelayConfig
    from web.intake.profiles import Origin, ProfileIntake
    from web.map.atlas import Atlas
    from web.parts import Core, Outbox
    from web.store import Store

    config, key = RelayConfig(data_dir=tmp_path), NodeKey.generate()
    store = Store(tmp_path / "relay.sqlite")
    core = Core(config, key, store, Atlas(config, key.node_id), BeaconBook(key.node_id, 10), Metrics())
    refreshed: list[str] = []
    intake = ProfileIntake(core, lambda node_id, now: refreshed.append(node_id), Outbox(key.node_id))
    node_key = NodeKey.generate()
    older = verify_profile(sample_profile(node_key, measured_at=int(time.time()) - 60)[1]).summary
    newer = verify_profile(sample_profile(node_key, measured_at=int(time.time()))[1]).summary
    peer = Origin("cluster", NodeKey.generate().node_id)
    for _ in range(2):  # the same copy twice
        store.submit(intake.write_op(newer, b"{}", peer, time.time())).result(timeout=10)
        intake.keep(newer, b"{}", peer, time.time())
    store.submit(intake.write_op(older, b"{}", peer, time.time())).result(timeout=10)  # then an older one
    intake.keep(older, b"{}", peer, time.time())
    rows = store.history(node_key.node_id, 10)
    assert [(kind, json.loads(body)["measured_at"]) for _, kind, body in rows] == [("profile", newer.measured_at)]
    assert refreshed == [node_key.node_id]
    assert core.atlas.nodes[node_key.node_id].profile.measured_at == newer.measured_at
    store.close()
