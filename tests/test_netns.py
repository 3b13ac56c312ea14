"""Multi-host truth: six hosts with their own addresses in network namespaces (ip netns + veth + a bridge),
a relay on each, and a node on each that keeps a live session with every other host's relay (and its own). The links
between namespaces get their latency from a user-space delaying forwarder (these machines have no netem):
true RTTs of 5-150 ms from points in a plane. Every relay measures and co-signs its links; the test
checks the measured RTTs against the truth, then (5-fold) fits Vivaldi coordinates on 80% of the edges and
predicts the other 20%: median relative error <= 15% (the issue's bar). Needs root (CI runs as root);
everything it creates is removed at the end, and its traffic stays inside its namespaces."""

from __future__ import annotations

import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from capsule.signing import verify_record
from fabric.vivaldi import coordinates_from_links
from tests.conftest import ROOT

# run alone (tests/scheduling.py): RTTs through a user-space forwarder; predictions judged against them
pytestmark = pytest.mark.alone

HOSTS = 6
CLI = str(Path(sys.executable).parent / "ce-bench")


def sh(*cmd: str, check: bool = True, timeout: float = 60) -> str:
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {result.stderr.strip()}")
    return result.stdout


def true_rtts(seed: int) -> list[list[float]]:
    rng = random.Random(seed)
    pos = [(rng.uniform(0, 100), rng.uniform(0, 100)) for _ in range(HOSTS)]
    access = [rng.uniform(1, 4) for _ in range(HOSTS)]
    return [[0.0 if i == j else min(150.0, max(5.0, math.dist(pos[i], pos[j]) + access[i] + access[j]))
             for j in range(HOSTS)] for i in range(HOSTS)]


@pytest.fixture
def namespaces() -> Iterator[list[str]]:
    if os.geteuid() != 0:
        pytest.fail("the network-namespace harness needs root (ip netns); CI runs as root")
    tag = f"ce{os.getpid() % 100000}"
    switch, hosts = f"{tag}-sw", [f"{tag}-h{i}" for i in range(HOSTS)]
    try:
        sh("ip", "netns", "add", switch)
        sh("ip", "-n", switch, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", switch, "link", "set", "br0", "up")
        for i, ns in enumerate(hosts):
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "add", f"{tag}v{i}", "type", "veth", "peer", "name", f"{tag}s{i}")
            sh("ip", "link", "set", f"{tag}v{i}", "netns", ns)
            sh("ip", "link", "set", f"{tag}s{i}", "netns", switch)
            sh("ip", "-n", switch, "link", "set", f"{tag}s{i}", "master", "br0", "up")
            sh("ip", "-n", ns, "addr", "add", f"10.77.0.{i + 1}/24", "dev", f"{tag}v{i}")
            sh("ip", "-n", ns, "link", "set", f"{tag}v{i}", "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        yield hosts
    finally:
        for ns in [*hosts, switch]:
            sh("ip", "netns", "del", ns, check=False)


def in_ns(ns: str, *cmd: str, env: dict[str, str] | None = None, **kw: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(["ip", "netns", "exec", ns, *cmd], text=True, env={**os.environ, **(env or {})}, **kw)


def test_predicted_vs_measured_rtt_across_namespaces(namespaces: list[str], tmp_path: Path) -> None:
    truth = true_rtts(seed=7)
    procs: list[subprocess.Popen[str]] = []
    try:
        for i, ns in enumerate(namespaces):
            log = open(tmp_path / f"relay{i}.log", "w")  # noqa: SIM115 - closed with the process
            procs.append(in_ns(ns, CLI, "relay", "--host", f"10.77.0.{i + 1}", "--port", "8000", "--data-dir",
                               str(tmp_path / f"relay{i}"), "--heartbeat-interval", "0.5", "--ip-rate", "1000",
                               "--node-rate", "1000", stdout=log, stderr=log))
        for i, ns in enumerate(namespaces):
            deadline = time.monotonic() + 60
            while sh("ip", "netns", "exec", ns, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                     f"http://10.77.0.{i + 1}:8000/beacon", check=False) != "200":
                assert time.monotonic() < deadline, (tmp_path / f"relay{i}.log").read_text()[-2000:]
                time.sleep(0.3)
        for i, ns in enumerate(namespaces):
            spec = [[9000 + j, f"10.77.0.{j + 1}", 8000, truth[i][j] / 2] for j in range(HOSTS) if j != i]
            fwd = in_ns(ns, sys.executable, str(ROOT / "tests" / "netns_forwarder.py"), json.dumps(spec),
                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            procs.append(fwd)
            assert fwd.stdout is not None and fwd.stdout.readline().strip() == "ready"
        # each node: a session with every other host's relay through the forwarder, and one with the relay
        # of its own host (direct), whose measured edge ties the two co-located identities together
        nodes = [in_ns(ns, sys.executable, str(ROOT / "tests" / "netns_node.py"), "9", f"http://10.77.0.{i + 1}:8000",
                       *(f"http://127.0.0.1:{9000 + j}" for j in range(HOSTS) if j != i),
                       env={"CE_BENCH_HOME": str(tmp_path / f"node{i}")}, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE) for i, ns in enumerate(namespaces)]
        procs += nodes
        # every co-signed sample is evidence; per pair keep the lowest RTT seen during the run (the min
        # filter of ping tools: queueing on this busy 2-core machine only ever adds delay)
        best: dict[tuple[str, str], dict[str, Any]] = {}
        relay_of: dict[str, int] = {}

        def collect() -> None:
            for j, ns in enumerate(namespaces):
                out = sh("ip", "netns", "exec", ns, "curl", "-s", "-m", "5", f"http://10.77.0.{j + 1}:8000/netgraph",
                         check=False)
                if not out:
                    continue
                graph = json.loads(out)
                relay_of[graph["relay"]] = j
                for edge in graph["edges"]:
                    key = (edge["a"], edge["b"])
                    if key not in best or edge["rtt_ms"] < best[key]["rtt_ms"]:
                        verify_record("LinkSample", edge)  # co-signed by node and relay
                        best[key] = edge

        while any(p.poll() is None for p in nodes):
            collect()
            time.sleep(1.0)
        collect()
        node_of: dict[str, int] = {}
        for i, proc in enumerate(nodes):
            out, err = proc.communicate(timeout=180)
            assert proc.returncode == 0, err[-2000:]
            report = json.loads(out)
            assert min(report["links"]) >= 1, report
            node_of[report["node_id"]] = i
        edges = list(best.values())
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
    assert len(edges) == HOSTS * HOSTS
    local = [e for e in edges if node_of[e["a"]] == relay_of[e["b"]]]
    edges = [e for e in edges if node_of[e["a"]] != relay_of[e["b"]]]
    # same-host edges are loopback-fast (a busy 2-core machine can delay single pings; the median is robust)
    assert len(local) == HOSTS and statistics.median(e["rtt_ms"] for e in local) < 5
    # 1. measurement: each relay's RTT to each node of another host matches the emulated truth
    errors = [abs(e["rtt_ms"] - truth[node_of[e["a"]]][relay_of[e["b"]]]) / truth[node_of[e["a"]]][relay_of[e["b"]]]
              for e in edges]
    assert statistics.median(errors) <= 0.10, f"measured RTTs off the truth: median {statistics.median(errors):.3f}"
    # 2. prediction, 5-fold: fit coordinates on 80% of the cross-host edges (plus the co-location edges) and
    #    predict the other 20%, so every edge is predicted once by a map that never saw it
    edges.sort(key=lambda e: (node_of[e["a"]], relay_of[e["b"]]))
    random.Random(3).shuffle(edges)
    rel = []
    for fold in range(5):
        held_out = edges[fold::5]
        train = [e for k, e in enumerate(edges) if k % 5 != fold]
        coords = coordinates_from_links(train + local, cycles=300, seed=1)
        rel += [abs(coords[e["a"]].distance(coords[e["b"]]) - e["rtt_ms"]) / e["rtt_ms"]
                for e in held_out if e["a"] in coords and e["b"] in coords]
    assert len(rel) == len(edges)
    median_error = statistics.median(rel)
    print(f"netns harness: {len(edges)} co-signed edges, measured vs truth median error "
          f"{statistics.median(errors):.3f}, predicted vs measured (held out) median error {median_error:.3f}")
    assert median_error <= 0.15, f"median relative error of predicted RTT {median_error:.3f} > 0.15"
