"""ce-bench on the CE mesh (issue 31), read and written by a libp2p peer the project did not write: js-libp2p
from npm (tests/mesh_js/mesh_peer.mjs, its own canonical JSON and Ed25519 through node:crypto) against real
relays, a real `ce-bench node` and a real nats-server."""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from nacl.signing import SigningKey

from common.keys import NodeKey
from common.libp2p_host import local_ipv4
from tests.mesh_peer import JsPeer, js_peer_script, mesh_address, run_js
from tests.nats_process import NatsProcess
from tests.relay_process import CLI, RelayProcess
from tests.samples import sample_profile

FAST = ["--heartbeat-interval", "0.5", "--beacon-interval", "1", "--roll-call-interval-s", "5",
        "--roll-call-min-gap-s", "4", "--ip-rate", "1000"]


@pytest.fixture(scope="module")
def js_peer() -> Path:
    return js_peer_script()


def wait_for(check: Any, timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {timeout_s} s")


def test_the_js_verifier_can_fail(js_peer: Path) -> None:
    """The control for every `verified` below: this file's own check refuses a record changed after signing."""
    key, profile = sample_profile()
    assert run_js(js_peer, "verify", "NodeProfile", json.dumps(profile)) == [{"verified": True}]
    changed = {**profile, "measured_at": profile["measured_at"] + 1}
    assert run_js(js_peer, "verify", "NodeProfile", json.dumps(changed)) == [{"verified": False}]
    other = NodeKey.generate()
    assert run_js(js_peer, "verify", "NodeProfile", json.dumps({**profile, "node_id": other.node_id})) == [
        {"verified": False}]


def test_a_js_peer_reads_profile_edge_and_scoreboard_and_pings_the_node(js_peer: Path, tmp_path: Path) -> None:
    with RelayProcess(tmp_path / "relay", *FAST) as relay:
        relay_id = relay.get("/beacon")[1]["relay"]
        listener = JsPeer(js_peer, "listen", mesh_address(relay), "150")
        node = None
        try:
            listener.until(lambda line: "listening" in line, 30)
            env = dict(os.environ, CE_BENCH_HOME=str(tmp_path / "home"))
            with open(tmp_path / "node.log", "wb") as log:
                node = subprocess.Popen([CLI, "node", "--relay", relay.url, "--no-gpu", "--no-jitter", "--budget-ms",
                                         "500", "--no-peer-probes"],  # the default libp2p listen address
                                        stdout=log, stderr=log, env=env)
            wait_for(lambda: (tmp_path / "home" / "node.key").exists(), 30, "the node's key")
            node_id = NodeKey.load(tmp_path / "home" / "node.key").node_id
            wait_for(lambda: relay.get(f"/v1/nodes/{node_id}")[0] == 200, 120, "the node's profile at the relay")
            accepted = time.time()

            profile = listener.until(lambda m: m.get("kind") == "NodeProfile"
                                     and m["record"]["node_id"] == node_id, 30)
            edge = listener.until(lambda m: m.get("kind") == "LinkSample"
                                  and node_id in (m["record"]["a"], m["record"]["b"]), 30)
            # a scoreboard that counts the node: the roll call that proved it, signed once the next one began
            board = listener.until(lambda m: m.get("kind") == "Scoreboard" and m["record"]["proven"]["nodes"] >= 1,
                                   90)
            first_board = next(m for m in listener.seen if m.get("kind") == "Scoreboard")
            for message in (profile, edge, board):
                assert message["verified"] is True, message  # checked by js alone, against the PeerIds
                assert message["from"] == relay_id, message  # the relay's libp2p host is the relay's key
            assert profile["record"] == relay.get(f"/v1/nodes/{node_id}")[1]["profile"]
            assert profile["at"] - accepted < 30 and first_board["at"] - accepted < 30, (profile, first_board)
            assert relay_id in (edge["record"]["a"], edge["record"]["b"])  # the relay's own edge: confirmed
            record = board["record"]
            assert record["relay"] == relay_id
            served = {c["id"]: c for c in relay.get("/v1/roll-calls?limit=100")[1]["roll_calls"]}
            assert record["roll_call"] in served, record
            proven = served[record["roll_call"]]["proven"]
            assert record["proven"]["nodes"] == proven["nodes"] == 1
            assert abs(record["proven"]["cpu_gflops"] - proven["cpu_gflops"]) < 1e-3 and proven["cpu_gflops"] > 0

            # the node's own libp2p host: announced on its live session, pinged and identified by js
            addrs = relay.get(f"/v1/nodes/{node_id}")[1]["libp2p"]["multiaddrs"]
            assert addrs and all(a.endswith(f"/p2p/{node_id}") for a in addrs), addrs
            # by default on loopback only (issue 47: it listened on every interface), announced and bound so
            assert any(not ipaddress.ip_address(ip).is_loopback for ip in local_ipv4()), local_ipv4()  # can fail
            assert all(a.startswith("/ip4/127.0.0.1/tcp/") for a in addrs), addrs
            port = int(addrs[0].split("/")[4])
            bound = [line.split()[1] for line in Path("/proc/net/tcp").read_text().splitlines()[1:]
                     if line.split()[1].endswith(f":{port:04X}") and line.split()[3] == "0A"]  # 0A: LISTEN
            assert bound == [f"0100007F:{port:04X}"], bound
            [pinged] = run_js(js_peer, "ping", addrs[0])
            assert pinged["identified"] == node_id and "/ipfs/ping/1.0.0" in pinged["protocols"], pinged
            assert len(pinged["rtts_ms"]) == 5 and all(0 <= r < 1000 for r in pinged["rtts_ms"]), pinged
        finally:
            listener.stop()
            if node is not None and node.poll() is None:
                node.terminate()
                node.wait(timeout=30)


def test_every_profile_accepted_in_a_burst_reaches_the_subscriber(js_peer: Path, tmp_path: Path) -> None:
    """60 profiles posted back to back: every one is on the mesh (py-libp2p's default spam limit, 10 messages
    per topic per second and forwarder, once dropped 80% of a relay's own publications, counted as sent)."""
    with RelayProcess(tmp_path / "relay", *FAST) as relay:
        listener = JsPeer(js_peer, "listen", mesh_address(relay), "60")
        try:
            listener.until(lambda line: "listening" in line, 30)
            beacon = relay.get("/beacon")[1]
            # the relay's gossipsub takes the subscription in at a heartbeat: until one profile of its own has
            # reached the listener (a canary, posted again each second), the burst could go to nobody
            canaries: set[str] = set()

            def canary_in(line: dict[str, Any]) -> bool:
                return line.get("kind") == "NodeProfile" and line["record"]["node_id"] in canaries

            deadline = time.monotonic() + 30
            while True:
                key, profile = sample_profile(beacon=beacon)
                assert relay.post("/v1/profiles", profile)[0] == 201
                canaries.add(key.node_id)
                try:
                    listener.until(canary_in, 1.0)
                    break
                except AssertionError:
                    assert time.monotonic() < deadline, "no profile reached the subscriber within 30 s"
            posted = set()
            for _ in range(60):
                key, profile = sample_profile(beacon=beacon)
                assert relay.post("/v1/profiles", profile)[0] == 201
                posted.add(key.node_id)
            got: set[str] = set()

            def all_in(line: dict[str, Any]) -> bool:
                if line.get("kind") == "NodeProfile" and line["verified"]:
                    got.add(line["record"]["node_id"])
                return got >= posted

            listener.until(all_in, 20)
            assert got - canaries == posted
        finally:
            listener.stop()


def register(relay: RelayProcess, seed: bytes) -> str:
    """A node over HTTP, as the js peers are: a profile signed with the peer's own key (its seed)."""
    key = NodeKey(SigningKey(seed))
    _, profile = sample_profile(key, beacon=relay.get("/beacon")[1])
    status, body = relay.post("/v1/profiles", profile)
    assert status == 201, body
    return key.node_id


def pair_key(a: str, b: str) -> tuple[str, str]:
    return (a, b) if a < b else (b, a)


def edges_between(relay: RelayProcess, a: str, b: str) -> list[dict[str, Any]]:
    return [e for e in relay.get("/netgraph")[1]["edges"] if pair_key(e["a"], e["b"]) == pair_key(a, b)]


@pytest.fixture()
def seeds() -> tuple[bytes, bytes]:
    return os.urandom(32), os.urandom(32)


def published(lines: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {line["published"]: line for line in lines if "published" in line}
    assert set(out) == {"good", "one_sided", "forged", "malformed", "not_json", "replayed"}, lines
    assert all(isinstance(line["recipients"], int) and line["recipients"] >= 1 for line in out.values()), out
    return out


def test_two_js_peers_publish_a_sample_and_bad_ones_change_nothing(js_peer: Path, tmp_path: Path,
                                                                   seeds: tuple[bytes, bytes]) -> None:
    with RelayProcess(tmp_path / "relay", *FAST) as relay:
        a, b = register(relay, seeds[0]), register(relay, seeds[1])
        lines = run_js(js_peer, "pair", mesh_address(relay), seeds[0].hex(), seeds[1].hex())
        sent = published(lines)
        good = sent["good"]["record"]
        assert {good["a"], good["b"]} == {a, b}  # the js peers' own keys: PeerId = NodeId
        held = wait_for(lambda: edges_between(relay, a, b), 15, "the sample from the mesh in /netgraph")
        time.sleep(1.0)  # the bad ones were published after it: give them the same time to do harm
        graph = relay.get("/netgraph")[1]
        held = edges_between(relay, a, b)
        assert held == [good], held  # once, exactly as signed: not the one-sided (1.5 ms) nor the forged (2.5 ms)
        # nobody measured either end: the relay keeps it unconfirmed, and it moves no coordinate
        assert sorted(pair_key(a, b)) in [sorted(e) for e in graph["unconfirmed_edges"]], graph["unconfirmed_edges"]
        coords = {n["node_id"]: n["coordinate"] for n in graph["nodes"]}
        for node in (a, b):  # where an unmeasured node starts: the origin, never moved
            assert coords[node]["vec"] == [0.0] * len(coords[node]["vec"]), coords
            assert coords[node]["adjustment"] == 0.0, coords
        info = relay.get("/v1/libp2p")[1]
        # one-sided, forged, malformed, not JSON: refused at gossipsub validation (the sender's score falls)
        assert info["refused_at_validation"].get("ce-netgraph", 0) >= 4, info
        assert info["taken"].get("LinkSample:taken", 0) >= 1, info
        # ...and the peer that sent them (js peer a, PeerId = NodeId a) scores below zero on the relay
        assert info["peer_scores"].get(a, 0.0) < 0, info["peer_scores"]
        assert relay.get("/beacon")[0] == 200  # and the relay serves on


def test_a_sample_from_the_mesh_is_in_both_maps_of_a_cluster_once(js_peer: Path, tmp_path: Path,
                                                                  seeds: tuple[bytes, bytes]) -> None:
    with NatsProcess(tmp_path / "nats") as nats:
        relays = [RelayProcess(tmp_path / f"r{i}", *FAST, *nats.relay_args()).start() for i in range(2)]
        try:
            a, b = register(relays[0], seeds[0]), register(relays[0], seeds[1])
            wait_for(lambda: all(relays[1].get(f"/v1/nodes/{n}")[0] == 200 for n in (a, b)), 20,
                     "both profiles on the other relay")
            published(run_js(js_peer, "pair", mesh_address(relays[0]), seeds[0].hex(), seeds[1].hex()))
            for relay in relays:
                wait_for(lambda relay=relay: edges_between(relay, a, b), 15, f"the sample on {relay.url}")
            time.sleep(1.0)
            assert [len(edges_between(r, a, b)) for r in relays] == [1, 1]
            assert edges_between(relays[0], a, b) == edges_between(relays[1], a, b)
        finally:
            for relay in relays:
                relay.stop()

