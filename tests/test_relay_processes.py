"""`ce-bench relay --processes N`: N real relay processes on one port (SO_REUSEPORT), members of one NATS
cluster (here an operator's nats-server with authorization, one user for all the processes): connections
spread over them, a profile posted to one is served by all, a process killed comes back with the same key.
Without --nats they run their own nats-server: tests/test_nats_auth.py."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import psutil
from websockets.sync.client import connect

from tests.nats_process import NatsProcess
from tests.relay_process import RelayProcess, eventually
from tests.samples import sample_profile


def session_relay(relay: RelayProcess) -> str:
    """The relay id a new live session is welcomed by (a new connection: the kernel picks the process);
    "" when the connection failed (a process restarting)."""
    try:
        with connect(relay.url.replace("http://", "ws://") + "/v1/live", open_timeout=5) as ws:
            return str(json.loads(ws.recv(timeout=5))["relay"])
    except (OSError, TimeoutError, ValueError, KeyError):
        return ""


def children(relay: RelayProcess) -> list[psutil.Process]:
    """The relay processes the supervisor runs (not multiprocessing's resource tracker, not a dead one)."""
    assert relay.proc is not None
    found = []
    for child in psutil.Process(relay.proc.pid).children():
        try:
            if child.status() != psutil.STATUS_ZOMBIE and "resource_tracker" not in " ".join(child.cmdline()):
                found.append(child)
        except psutil.Error:  # it exited while listed
            continue
    return found


def test_processes_share_a_port_and_one_atlas(tmp_path: Path) -> None:
    nats = NatsProcess(tmp_path / "nats", users=["relay"]).start()
    relay = RelayProcess(tmp_path / "relay", *nats.relay_args("relay"), "--processes", "2", "--ip-rate", "1000",
                         "--beacon-interval", "1")
    try:
        relay.start(timeout=60)
        members = {r["relay"] for r in relay.get("/v1/relays")[1]["relays"]}
        assert len(members) == 2, members  # each process names the other as a cluster peer
        # start() returns once one process answers: the other may still be starting
        eventually(lambda: {session_relay(relay) for _ in range(24)} == members, 30,
                   "sessions welcomed by both processes")  # all 24 on one process: odds 2^-23

        eventually(lambda: all(all(r["last_seen"] for r in relay.get("/v1/relays")[1]["relays"]) for _ in range(6)),
                   30, "each process has heard the other's beacon rounds")
        time.sleep(1.5)  # a round issued since then: known to both
        # a node takes the beacon from one process and may post to the other: every process honours its peers'
        # rounds (12 tries: all on one process has odds 2^-11)
        posted = []
        for _ in range(12):
            _, beacon, _ = relay.get("/beacon")
            key, profile = sample_profile(beacon=beacon)
            posted.append((beacon["relay"], relay.post("/v1/profiles", profile)))
        assert all(status == 201 for _, (status, _) in posted), posted
        assert {cited for cited, _ in posted} == members  # both processes' beacons were cited
        # every process serves it: 12 new connections, spread by the kernel as the sessions above were
        eventually(lambda: all(relay.get(f"/v1/nodes/{key.node_id}")[0] == 200 for _ in range(12)), 15,
                   "the profile on every process")

        victim = children(relay)[0]
        victim.send_signal(signal.SIGKILL)
        eventually(lambda: len(children(relay)) == 2 and victim.pid not in {c.pid for c in children(relay)}, 30,
                   "the killed process started again")
        eventually(lambda: {session_relay(relay) for _ in range(24)} == members, 30,
                   "the restarted process welcomes sessions under its old id")
        last = children(relay)
    finally:
        relay.stop()
        nats.stop()
    assert relay.proc is not None and relay.proc.returncode == 0, relay.log.read_text()[-2000:]
    assert not [p for p in last if p.is_running() and p.status() != psutil.STATUS_ZOMBIE], "a process outlived it"

