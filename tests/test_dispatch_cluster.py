"""A job outlives the relay that took it (issue 44, "Faults"): two relays on one nats-server with users and the
relays' permissions (web/cluster/nats_auth.py), node processes homed on relay A, a job submitted to A; A is
killed with -9 mid-job. Relay B takes the job over from the cluster's JetStream bucket (web/jobs/cluster_jobs.py),
the nodes move to B by themselves, and the job completes there with every result A had finished kept."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from common.keys import NodeKey, load_or_create
from host_runner.job_client import JobClient, read_manifest
from tests.conftest import Artifacts
from tests.job_nodes import NodeProc, proven, register, write_manifest
from tests.nats_process import NatsProcess
from tests.relay_process import RelayProcess, free_port, start_all
from tests.roll_call_helpers import ROLL, until

pytestmark = pytest.mark.timed  # the nodes answer roll calls to be proven


@pytest.fixture()
def pair(tmp_path: Path) -> Iterator[tuple[RelayProcess, RelayProcess, NodeKey]]:
    submitter = load_or_create(tmp_path / "submitter.key")
    keys = [load_or_create(tmp_path / f"r{i}" / "relay.key") for i in range(2)]
    with NatsProcess(tmp_path / "nats", users=["relay-a", "relay-b"]) as nats:
        ports = [free_port() for _ in range(2)]
        relays = start_all([RelayProcess(tmp_path / f"r{i}", *ROLL, *nats.relay_args(f"relay-{'ab'[i]}"),
                                         "--public-url", f"http://127.0.0.1:{ports[i]}",
                                         "--cluster-peer", keys[1 - i].node_id, "--job-submitter", submitter.node_id,
                                         port=ports[i]) for i in range(2)])
        try:
            yield relays[0], relays[1], submitter
        finally:
            for r in relays:
                r.stop()


def plant_forgeries(relay: RelayProcess, tmp_path: Path, real_request: dict[str, Any]) -> set[str]:
    """What any relay user of the cluster can write into the jobs' bucket, each naming a dead owner: a value that is
    not JSON; a well-formed job signed by a key no relay admits; the real submitter's signed request stored under
    another id. Returns their ids."""
    import asyncio
    import hashlib
    import threading

    import nats

    from capsule.signing import sign
    from common.keys import NodeKey

    nats_url = relay.extra[relay.extra.index("--nats") + 1]
    user = relay.extra[relay.extra.index("--nats-user") + 1]
    password = Path(relay.extra[relay.extra.index("--nats-password-file") + 1]).read_text().strip()
    garbage, renamed = hashlib.sha256(b"garbage").hexdigest(), hashlib.sha256(b"renamed").hexdigest()
    stranger = NodeKey.generate()
    foreign = sign("JobRequest", {**{k: v for k, v in real_request.items() if k != "sig"},
                                  "submitter": stranger.node_id}, stranger)
    from capsule.canonical import canonical_bytes

    unadmitted = hashlib.sha256(canonical_bytes(foreign)).hexdigest()

    def value(request: dict[str, Any]) -> bytes:
        return json.dumps({"request": request, "created_at": 0, "seed": "0" * 64, "secret": "00" * 32,
                           "audit_share": 0, "owner": "gone", "state": "running"}).encode()

    async def put() -> None:
        nc = await nats.connect(nats_url, user=user, password=password)
        kv = await nc.jetstream().key_value("ce-atlas-jobs")
        await kv.put(f"job.{garbage}", b"{not json")
        await kv.put(f"job.{unadmitted}", value(foreign))
        await kv.put(f"job.{renamed}", value(real_request))
        await nc.close()

    # in a thread of its own: a playwright test earlier in this worker may have left an event loop running here
    failed: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(put())
        except BaseException as exc:  # noqa: BLE001 - raised below, in the test's thread
            failed.append(exc)

    done = threading.Thread(target=run)
    done.start()
    done.join(timeout=30)
    assert not done.is_alive() and not failed, failed  # the precondition: the forgeries are in the bucket
    return {garbage, unadmitted, renamed}


def _request_of(relay: RelayProcess, job_id: str) -> dict[str, Any]:
    """The signed JobRequest the relay stored for the job (its own SQLite file, read-only)."""
    import sqlite3

    with sqlite3.connect(f"file:{relay.data_dir / 'jobs.sqlite'}?mode=ro", uri=True) as db:
        row = db.execute("SELECT request FROM jobs WHERE id = ?", (job_id,)).fetchone()
    request: dict[str, Any] = json.loads(row[0])
    return request


def test_a_job_is_carried_on_by_another_relay_when_its_relay_dies(
        pair: tuple[RelayProcess, RelayProcess, NodeKey], claims: dict[str, Any], artifacts: Artifacts,
        tmp_path: Path) -> None:
    a, b, submitter = pair
    nodes = [NodeProc(a, tmp_path / f"n{i}", f"127.0.0.{60 + i}", artifacts.reactor) for i in range(3)]
    try:
        for n in nodes:
            register(a, claims, n.key)
        until("three proven nodes on A", 90, lambda: all(proven(a, n.node_id) for n in nodes))
        body, blobs = read_manifest(write_manifest(tmp_path / "job.json", [[str(s), "40000000"] for s in range(18)],
                                                   audit=0.0))
        answer = JobClient(a.url).submit(body, blobs, submitter)
        assert answer["cluster"] == "stored in the cluster's bucket", answer
        job_id = answer["id"]
        real_request = _request_of(a, job_id)
        forged = plant_forgeries(a, tmp_path, real_request)  # a relay user's writes into the jobs' bucket
        before = until("some tasks done on A", 90,
                       lambda: (s := JobClient(a.url).status(job_id))["counts"]["done"] >= 4 and s)
        assert before["counts"]["done"] < 18  # the precondition: work was left for B
        a.kill9()
        killed_at = time.time()
        on_b = JobClient(b.url)

        def adopted() -> dict[str, Any] | None:
            status, body, _ = b.get(f"/v1/jobs/{job_id}")
            return body if status == 200 else None

        until("B takes the job over", 30, adopted)
        # 18 tasks beside the other worker's tests: the nodes are proven on B at its first roll calls with them
        # (~6-12 s alone); the ceiling is for a loaded CI machine (one run of 913 missed 90 s on 2026-12-07)
        final = until("the job completes on B", 180,
                      lambda: (s := on_b.status(job_id))["state"] in ("done", "failed") and s,
                      lambda: (on_b.status(job_id, tasks=False), b.get("/v1/jobs")[1]["workers"],
                               [(b.get(f"/v1/nodes/{n.node_id}")[1]["trust"]["status"],
                                 b.get(f"/v1/nodes/{n.node_id}")[1]["trust"]["counted"],
                                 b.get(f"/v1/nodes/{n.node_id}")[1]["status"]) for n in nodes]))
        assert final["state"] == "done", final["counts"]
        for task in before["tasks"]:
            if task["state"] == "done":  # what A finished is kept (or, not yet written when A died, run again)
                kept = final["tasks"][task["task"]]
                assert (kept["exit_code"], kept["stdout"]) == (task["exit_code"], task["stdout"])
        assert all(len(t["stdout"].split()) == 3 for t in final["tasks"])
        ran_on_b = [a_ for t in final["tasks"] for a_ in t["attempts"] if a_["placed_at"] > killed_at]
        assert ran_on_b and {x["node_id"] for x in ran_on_b} <= {n.node_id for n in nodes}
        status, listing, _ = b.get("/v1/jobs")
        assert status == 200 and any(j["id"] == job_id for j in listing["jobs"])
        assert not {j["id"] for j in listing["jobs"]} & forged  # garbage and unsigned jobs were never taken over
    finally:
        for n in nodes:
            n.stop()
