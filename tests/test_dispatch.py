"""Work placed through the map (issue 44), on real processes: a relay (`ce-bench relay --job-submitter`), node
processes that answer its roll calls and run tasks (tests/job_node.py), jobs submitted with `ce-bench job submit`,
and every output compared with the `wasmtime` CLI run locally on the same module and arguments."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from capsule.signing import sign, verify_record
from common.keys import NodeKey, load_or_create
from host_runner.job_client import JobClient
from tests.cli_runs import ce_bench
from tests.conftest import Artifacts
from tests.job_nodes import ROOT, WORK, NodeProc, proven, register, write_manifest
from tests.relay_process import RelayProcess
from tests.roll_call_helpers import ROLL, node, until

pytestmark = pytest.mark.timed  # the nodes answer roll calls within deadlines to be proven
@pytest.fixture(scope="module")
def submitter(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, NodeKey]:
    home = tmp_path_factory.mktemp("submitter")
    return home, load_or_create(home / "node.key")


@pytest.fixture(scope="module")
def relay(tmp_path_factory: pytest.TempPathFactory, submitter: tuple[Path, NodeKey]) -> Iterator[RelayProcess]:
    with RelayProcess(tmp_path_factory.mktemp("dispatch") / "relay", *ROLL, "--job-submitter",
                      submitter[1].node_id) as r:
        yield r


@pytest.fixture(scope="module")
def fleet(relay: RelayProcess, claims: dict[str, Any], artifacts: Artifacts,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[NodeProc]]:
    """Four honest node processes, each proven at a roll call before the tests use them."""
    base = tmp_path_factory.mktemp("fleet")
    nodes = []
    for i in range(4):
        n = NodeProc(relay, base / f"n{i}", f"127.0.0.{10 + i}", artifacts.reactor)
        register(relay, claims, n.key)
        nodes.append(n)
    try:
        until("four proven nodes", 90, lambda: all(proven(relay, n.node_id) for n in nodes),
              lambda: [node(relay, n)["trust"]["status"] for n in nodes])
        yield nodes
    finally:
        for n in nodes:
            n.stop()


def local_output(wasmtime_cli: Path, args: list[str]) -> tuple[int, str]:
    done = subprocess.run([str(wasmtime_cli), "run", str(WORK), *args], capture_output=True, text=True, timeout=60)
    return done.returncode, done.stdout


def test_a_job_with_redundancy_two_matches_local_wasmtime(relay: RelayProcess, fleet: list[NodeProc],
                                                          submitter: tuple[Path, NodeKey], wasmtime_cli: Path,
                                                          tmp_path: Path) -> None:
    """`ce-bench job submit --wait --json` exits 0; every task ran on two nodes of different addresses, and its
    accepted output is what `wasmtime run` gives here for the same module and arguments."""
    tasks = [[str(seed), "200000"] for seed in range(24)] + [["exit", "3"]]
    result = ce_bench(submitter[0], "job", "submit", str(write_manifest(tmp_path / "job.json", tasks, redundancy=2)),
                      "--relay", relay.url, "--wait", "--json", timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    state = json.loads(result.stdout)
    assert state["state"] == "done" and state["counts"]["done"] == len(tasks)
    fleet_ids = {n.node_id for n in fleet}
    for task, args in zip(state["tasks"], tasks, strict=True):
        agreed = [a for a in task["attempts"] if a["verdict"] == "agreed"]
        assert len(agreed) >= 2 and len({a["node_id"] for a in agreed}) == len(agreed), task
        assert {a["node_id"] for a in agreed} <= fleet_ids
        code, out = local_output(wasmtime_cli, args)
        assert (task["exit_code"], task["stdout"]) == (code, out), (task, code, out)
        assert all(a["receipt"]["node_id"] == a["node_id"] for a in agreed)
    # each node's delivered work is in its history (apart from its challenges, which it must not push out)
    delivered = [relay.get(f"/v1/nodes/{n.node_id}/history")[1]["delivered"] for n in fleet]
    assert sum(d["agreed"] for d in delivered) >= 2 * len(tasks) and all(d["wrong"] == 0 for d in delivered)
    assert all(r["module_sha256"] for d in delivered for r in d["recent"])


def test_a_liar_is_caught_flagged_and_placed_no_more(relay: RelayProcess, fleet: list[NodeProc],
                                                     submitter: tuple[Path, NodeKey], claims: dict[str, Any],
                                                     artifacts: Artifacts, tmp_path: Path) -> None:
    """A proven node that lies on one task in three (its receipts signed as usual) is caught by the audit of a
    fresh identity's every task, flagged, and placed on no more; no honest node gets a wrong verdict."""
    liar = NodeProc(relay, tmp_path / "liar", "127.0.0.30", artifacts.reactor, lie_every=3)
    try:
        register(relay, claims, liar.key)
        until("the liar proven", 60, lambda: proven(relay, liar.node_id))
        client = JobClient(relay.url)
        from host_runner.job_client import read_manifest

        body, blobs = read_manifest(write_manifest(tmp_path / "job.json", [[str(s), "100000"] for s in range(40)],
                                                   nodes=5))
        job_id = client.submit(body, blobs, submitter[1])["id"]
        state = until("the job ends", 120, lambda: (s := client.status(job_id))["state"] in ("done", "failed") and s)
        attempts = [a for t in state["tasks"] for a in t["attempts"]]
        lies = [a for a in attempts if a["node_id"] == liar.node_id and a["verdict"] == "wrong"]
        assert lies, "the precondition: the liar ran tasks and lied on one"
        assert state["state"] == "done" and all(t["state"] == "done" for t in state["tasks"])
        assert not [a for a in attempts if a["verdict"] == "wrong" and a["node_id"] != liar.node_id]
        caught_at = min(a["ended_at"] for a in lies)
        assert any(a["placed_at"] > caught_at for a in attempts)  # the precondition: the job went on after the catch
        assert not [a for a in attempts if a["node_id"] == liar.node_id and a["placed_at"] > caught_at + 0.5]
        assert node(relay, liar)["trust"]["status"] == "flagged"
        for t in state["tasks"]:  # no lie was accepted: the made-up outputs are one hex word, the true ones three
            assert len(t["stdout"].split()) == 3, t
    finally:
        liar.stop()


def test_a_node_killed_mid_job_has_its_tasks_placed_again(relay: RelayProcess, fleet: list[NodeProc],
                                                          submitter: tuple[Path, NodeKey], claims: dict[str, Any],
                                                          tmp_path: Path) -> None:
    """kill -9 of a node running tasks: each of its attempts is lost and placed again within two liveness
    intervals (the relay's heartbeat interval, 0.5 s here), the job completes, and no task counts twice."""
    victim = NodeProc(relay, tmp_path / "victim", "127.0.0.40", None)  # never proven: it must never get work
    register(relay, claims, victim.key)
    until("the unproven node live, offering its slot", 30,
          lambda: node(relay, victim.key)["status"]["online"] and not proven(relay, victim.node_id))
    client = JobClient(relay.url)
    from host_runner.job_client import read_manifest

    body, blobs = read_manifest(write_manifest(tmp_path / "job.json", [[str(s), "150000000"] for s in range(8)],
                                               audit=0.0))
    doomed: NodeProc | None = None
    try:
        job_id = client.submit(body, blobs, submitter[1])["id"]

        def running_on_fleet() -> dict[str, Any] | None:
            s = client.status(job_id)
            return s if sum(1 for t in s["tasks"] for a in t["attempts"] if a["state"] == "running") >= 2 else None

        state = until("tasks running", 60, running_on_fleet)
        busy = {a["node_id"] for t in state["tasks"] for a in t["attempts"] if a["state"] == "running"}
        doomed = next(n for n in fleet if n.node_id in busy)
        doomed.kill9()
        killed_at = time.time()
        final = until("the job ends", 120, lambda: (s := client.status(job_id))["state"] in ("done", "failed") and s)
        assert final["state"] == "done", final["counts"]
        lost = [(t, a) for t in final["tasks"] for a in t["attempts"] if a["state"] == "lost"]
        assert lost and all(a["node_id"] == doomed.node_id for _, a in lost)
        for task, a in lost:
            again = [b for b in task["attempts"] if b["attempt"] > a["attempt"]]
            assert again and again[0]["placed_at"] - killed_at <= 2 * 0.5 + 0.5, (a, again)
        # no task counted twice: one accepted output each, from distinct nodes, none from a lost attempt
        assert final["counts"]["done"] == len(final["tasks"])
        for t in final["tasks"]:
            judged = [a for a in t["attempts"] if a["verdict"]]
            assert judged and len({a["node_id"] for a in judged}) == len(judged), t
            assert all(a["state"] == "done" for a in judged) and {a["output_sha256"] for a in judged} == {
                t["output_sha256"]}, t
        attempts = [a for t in final["tasks"] for a in t["attempts"]]
        assert not [a for a in attempts if a["node_id"] == victim.node_id]
    finally:
        victim.stop()
        if doomed is not None:
            fleet.remove(doomed)  # the later tests run on the nodes still alive


def test_the_capsule_dispatched_as_a_job(relay: RelayProcess, fleet: list[NodeProc],
                                         submitter: tuple[Path, NodeKey], tmp_path: Path) -> None:
    """kind "capsule": ce-bench itself dispatched as a CE job. Each task's output is the signed NodeProfile of the
    node it ran on, measured on the beacon round the relay sent; a capsule job that asks redundancy is refused."""
    m: dict[str, Any] = {"v": 2, "kind": "capsule", "capsule": {"path": str(ROOT / "build" / "capsule.wasm")},
         "probes": ["sgemm", "stream"], "budget_ms": 300, "tasks": [{"args": []} for _ in range(3)],
         "limits": {"memory_mib": 1024, "wall_ms": 60_000, "output_bytes": 65536}, "placement": {"nodes": 3}}
    (tmp_path / "capsule.json").write_text(json.dumps(m))
    result = ce_bench(submitter[0], "job", "submit", str(tmp_path / "capsule.json"), "--relay", relay.url, "--wait",
                      "--json", timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    state = json.loads(result.stdout)
    beacons = set()
    for task in state["tasks"]:
        profile = json.loads(task["stdout"])
        verify_record("NodeProfile", profile)
        ran = [a for a in task["attempts"] if a["verdict"] == "unchecked"]
        assert len(ran) == 1 and profile["node_id"] == ran[0]["node_id"] == ran[0]["receipt"]["node_id"]
        assert profile["cpu"]["gflops_fp32"] > 0 and profile["capsule"]["sha256"] == ran[0]["receipt"]["module_sha256"]
        beacons.add(profile["beacon"]["relay"])
    assert beacons == {relay.get("/beacon")[1]["relay"]}
    m["placement"]["redundancy"] = 2
    (tmp_path / "capsule.json").write_text(json.dumps(m))
    refused = ce_bench(submitter[0], "job", "submit", str(tmp_path / "capsule.json"), "--relay", relay.url)
    assert refused.returncode == 1 and "redundancy must be 1" in refused.stderr


def test_bad_input_gets_a_clear_answer(relay: RelayProcess, fleet: list[NodeProc], submitter: tuple[Path, NodeKey],
                                       tmp_path: Path) -> None:
    """Unknown submitter, a module that is not wasm, an unknown blob, nested JSON: each a 4xx naming the problem;
    a task that traps, loops, allocates past its limit or floods stdout fails alone, with the reason."""
    stranger = NodeKey.generate()
    client = JobClient(relay.url)
    from common.errors import UserError
    from host_runner.job_client import read_manifest

    body, blobs = read_manifest(write_manifest(tmp_path / "job.json", [["1", "10"]]))
    with pytest.raises(UserError, match="403 unknown_submitter"):
        client.submit(body, blobs, stranger)
    with pytest.raises(UserError, match="422 unknown_blob"):
        client.submit({**body, "module": {"sha256": "0" * 64}}, {}, submitter[1])
    junk = b"#!/bin/sh\necho hi\n"
    junk_sha = hashlib.sha256(junk).hexdigest()
    with pytest.raises(UserError, match="422 not_wasm"):
        client.submit({**body, "module": {"sha256": junk_sha}}, {junk_sha: junk}, submitter[1])
    nested = b'{"request": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    import urllib.error
    import urllib.request

    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(urllib.request.Request(relay.url + "/v1/jobs", data=nested, method="POST"), timeout=10)
    assert caught.value.code in (400, 422)
    cases = [["trap"], ["loop"], ["alloc", "100"], ["flood"], ["1", "1000"]]
    m = json.loads(write_manifest(tmp_path / "bad.json", cases).read_text())
    m["limits"].update(wall_ms=1500, memory_mib=24)  # work.wasm starts with 16 MiB + 64 KiB
    (tmp_path / "bad.json").write_text(json.dumps(m))
    body, blobs = read_manifest(tmp_path / "bad.json")
    job_id = client.submit(body, blobs, submitter[1])["id"]
    state = until("the job ends", 120, lambda: (s := client.status(job_id))["state"] in ("done", "failed") and s)
    by = {tuple(args): t for args, t in zip(cases, state["tasks"], strict=True)}
    assert state["state"] == "failed"
    assert "trapped" in by[("trap",)]["error"] and "wall-clock" in by[("loop",)]["error"]
    assert by[("alloc", "100")]["stdout"].startswith("allocation failed")  # the module saw its limit
    assert "output_bytes" in by[("flood",)]["error"]
    assert by[("1", "1000")]["state"] == "done"
    assert relay.get("/beacon")[0] == 200 and os.path.exists(relay.log)


def test_cancel_from_the_cli_and_refusals(relay: RelayProcess, fleet: list[NodeProc], submitter: tuple[Path, NodeKey],
                                          tmp_path: Path) -> None:
    """`ce-bench job cancel` by the submitter ends the job (no more placements); another key gets 403; a request
    with a broken signature is 422 bad_signature; blobs beyond the relay's limit are 413."""
    from host_runner.job_client import read_manifest

    manifest = write_manifest(tmp_path / "job.json", [[str(s), "3000000000"] for s in range(6)], audit=0.0)
    started = ce_bench(submitter[0], "job", "submit", str(manifest), "--relay", relay.url)
    assert started.returncode == 0, started.stderr
    job_id = started.stdout.strip()
    client = JobClient(relay.url)
    until("a task running", 30, lambda: client.status(job_id, tasks=False)["counts"]["running"] >= 1)
    stranger = tmp_path / "stranger"
    refused = ce_bench(stranger, "job", "cancel", job_id, "--relay", relay.url)
    assert refused.returncode == 1 and "403 not_submitter" in refused.stderr and "Traceback" not in refused.stderr
    done = ce_bench(submitter[0], "job", "cancel", job_id, "--relay", relay.url)
    assert done.returncode == 0 and "cancelled" in done.stdout, done.stderr
    status = ce_bench(submitter[0], "job", "status", job_id, "--relay", relay.url, "--json")
    assert status.returncode == 1  # a cancelled job is not a success
    state = json.loads(status.stdout)
    assert state["state"] == "cancelled" and all(t["state"] in ("cancelled", "done") for t in state["tasks"])
    placed = sum(len(t["attempts"]) for t in state["tasks"])
    time.sleep(1.0)  # (nothing to wait for: asserting that nothing more happens)
    assert sum(len(t["attempts"]) for t in client.status(job_id)["tasks"]) == placed
    body, blobs = read_manifest(write_manifest(tmp_path / "small.json", [["1", "10"]]))
    request = sign("JobRequest", {"v": 1, "submitter": submitter[1].node_id, "manifest": body,
                                  "nonce": "0" * 32, "created_at": int(time.time())}, submitter[1])
    request["nonce"] = "1" * 32  # signed over another nonce
    import urllib.error
    import urllib.request

    def post(payload: bytes) -> tuple[int, dict[str, Any]]:
        try:
            urllib.request.urlopen(urllib.request.Request(relay.url + "/v1/jobs", data=payload, method="POST",
                                                          headers={"content-type": "application/json"}), timeout=30)
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())
        raise AssertionError("accepted")

    assert post(json.dumps({"request": request}).encode())[1]["code"] == "bad_signature"
    # a body beyond the limit is refused from its declared length, before it is read (the client sends none)
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", relay.port, timeout=30)
    conn.putrequest("POST", "/v1/jobs")
    conn.putheader("content-type", "application/json")
    conn.putheader("content-length", str(23 << 20))  # a 17 MiB module in base64: over the 16 MiB blob limit
    conn.endheaders()
    answer = conn.getresponse()
    assert (answer.status, json.loads(answer.read())["code"]) == (413, "body_too_large")
    conn.close()
    assert relay.get("/v1/jobs")[0] == 200  # the relay serves on


def test_kill9_of_the_relay_loses_no_job_and_no_finished_result(relay: RelayProcess, fleet: list[NodeProc],
                                                                 submitter: tuple[Path, NodeKey],
                                                                 tmp_path: Path) -> None:
    """The relay (SQLite) killed with -9 mid-job and started again on its data: the job is there, every result
    finished before the kill is kept as it was, the nodes come back, and the job completes. (Last in this
    module: it restarts the module's relay.)"""
    from host_runner.job_client import read_manifest

    client = JobClient(relay.url)
    body, blobs = read_manifest(write_manifest(tmp_path / "job.json", [[str(s), "60000000"] for s in range(16)],
                                               audit=0.0))
    job_id = client.submit(body, blobs, submitter[1])["id"]
    before = until("some tasks done", 60, lambda: (s := client.status(job_id))["counts"]["done"] >= 3 and s)
    relay.kill9()
    relay.start()
    after = client.status(job_id)  # at once: what the store kept
    done_before = {t["task"]: t for t in before["tasks"] if t["state"] == "done"}
    assert done_before
    for index, task in done_before.items():
        kept = after["tasks"][index]
        assert (kept["state"], kept["exit_code"], kept["stdout"], kept["output_sha256"]) == (
            "done", task["exit_code"], task["stdout"], task["output_sha256"])
    final = until("the job completes after the restart", 120,
                  lambda: (s := client.status(job_id))["state"] in ("done", "failed") and s)
    assert final["state"] == "done", final["counts"]
    restarted = [a for t in final["tasks"] for a in t["attempts"] if a["error"] == "the relay restarted"]
    assert all(sum(1 for a in t["attempts"] if a["verdict"] in ("agreed", "unchecked")) >= 1 for t in final["tasks"])
    assert restarted or before["counts"]["running"] == 0  # attempts in flight at the kill were placed again
