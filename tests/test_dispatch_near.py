"""`near` places a job on the nodes nearest by delay (issue 44): a relay and five node processes in network
namespaces whose RTTs a user-space router builds (tests/test_world.py's world: 2-25 ms within a region, 50-95 ms
between). The nodes answer roll calls, measure each other (peer probes the relay brokers) and offer slots; a job
with `near` = one node and `nodes` = 3 must spread on the 3 nodes nearest to it by the built delays (within 10%),
the node itself included. Needs root (CI runs as root)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from common.keys import load_or_create
from host_runner.job_client import JobClient, read_manifest
from tests.conftest import ROOT, Artifacts
from tests.job_nodes import write_manifest
from tests.relay_process import CLI
from tests.test_world import get, in_ns, url, wait_for, world  # noqa: F401 - world is the fixture

pytestmark = pytest.mark.alone  # RTTs through a user-space router: judged against the built delays
RELAY = 1
NEAR = 4
HOSTS = [4, 5, 6, 7, 10]  # region 0: 4, 5, 6; region 1: 7; region 2: 10


def test_near_places_on_the_nearest_nodes_by_delay(world: dict[tuple[int, int], float],  # noqa: F811
                                                   tmp_path: Path, claims: dict[str, Any],
                                                   artifacts: Artifacts) -> None:
    from tests.job_nodes import proven, register

    submitter = load_or_create(tmp_path / "submitter.key")
    procs = [in_ns(RELAY, CLI, "relay", "--host", f"10.78.{RELAY}.2", "--port", "8000", "--data-dir",
                   str(tmp_path / "relay"), "--heartbeat-interval", "1", "--beacon-interval", "1",
                   "--challenge-first-after", "1", "--challenge-interval-unverified", "1",
                   "--roll-call-interval-s", "6", "--roll-call-min-gap-s", "6", "--roll-call-target-s", "1",
                   "--peer-probe-interval-s", "1", "--peer-probe-pair-repeat-s", "60", "--ip-rate", "1000",
                   "--node-rate", "1000", "--job-submitter", submitter.node_id, log=tmp_path / "relay.log")]

    class Relay:  # what register() and proven() use of a relay
        url = globals()["url"](RELAY)

        def get(self, path: str) -> tuple[int, Any, dict[str, str]]:
            return 200, get(self.url, path), {}

    relay = Relay()
    try:
        wait_for("the relay", 60, lambda: get(relay.url, "/beacon"), every_s=0.2)
        keys = {}
        for h in HOSTS:
            keys[h] = load_or_create(tmp_path / f"n{h}" / "node.key")
            register(relay, claims, keys[h])  # type: ignore[arg-type]
            key_file = str(tmp_path / f"n{h}" / "node.key")
            procs.append(in_ns(h, sys.executable, "-m", "tests.job_node", relay.url, key_file, f"10.78.{h}.2",
                               "--reactor", str(artifacts.reactor), "--peer-probes",
                               log=tmp_path / f"node{h}.log", env={"PYTHONPATH": str(ROOT)}))
        host_of = {keys[h].node_id: h for h in HOSTS}
        near_id = keys[NEAR].node_id

        def measured_from_near() -> set[int]:
            edges = get(relay.url, "/netgraph")["edges"]
            return {host_of[e["a"] if e["b"] == near_id else e["b"]] for e in edges
                    if near_id in (e["a"], e["b"]) and e["a"] in host_of and e["b"] in host_of}

        wait_for("every node proven", 90,
                 lambda: all(proven(relay, keys[h].node_id) for h in HOSTS))  # type: ignore[arg-type]
        wait_for("the near node's edges to every other node measured", 120,
                 lambda: measured_from_near() >= set(HOSTS) - {NEAR}, lambda: measured_from_near())
        body, blobs = read_manifest(write_manifest(tmp_path / "job.json", [[str(s), "1000"] for s in range(12)],
                                                   nodes=3, near=near_id))
        client = JobClient(relay.url)
        job_id = client.submit(body, blobs, submitter)["id"]
        state = wait_for("the job ends", 90,
                         lambda: (s := client.status(job_id))["state"] in ("done", "failed") and s)
        assert state["state"] == "done", state["counts"]
        chosen = {host_of[n] for n in state["nodes"]}
        distance = {h: 0.0 if h == NEAR else world[NEAR, h] for h in HOSTS}
        kth = sorted(distance.values())[2]
        assert len(chosen) == 3 and all(distance[h] <= 1.1 * kth for h in chosen), (chosen, distance)
        reasons = [a["reason"] for t in state["tasks"] for a in t["attempts"]]
        assert all("to near" in r for r in reasons), reasons[:3]
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except Exception:  # noqa: BLE001
                p.kill()
