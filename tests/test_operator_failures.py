"""Loud failures at start (issue 47): a port another process holds, a NATS server nobody answers on, and one key
used by two nodes, each against the real `ce-bench` command or a real relay process."""

from __future__ import annotations

import json
import logging
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

from capsule.signing import sign
from common.keys import NodeKey
from host_runner.live_client import LiveSession
from host_runner.relay_client import fetch_beacon
from tests.relay_process import CLI, RelayProcess, free_port
from tests.resigned import register


def held_port() -> tuple[socket.socket, int]:
    """A loopback port a listening socket of this test holds (another relay, to the command under test)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", free_port()))
    sock.listen(1)
    return sock, sock.getsockname()[1]


def test_a_relay_on_a_port_another_process_holds_says_so_and_writes_nothing(tmp_path: Path) -> None:
    """Before: "relay started", then the bind error, exit 3, and a new key written into --data-dir."""
    sock, port = held_port()
    with sock:
        result = subprocess.run([CLI, "relay", "--port", str(port), "--data-dir", str(tmp_path / "data")],
                                capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip() == (f"ce-bench: error: cannot listen on 127.0.0.1:{port}: another process listens "
                                     "there (a relay already running? pick another --port)"), result.stderr
    assert not (tmp_path / "data").exists()  # no key, no store


def test_processes_on_a_port_another_relay_shares_say_so_and_write_nothing(tmp_path: Path) -> None:
    """`--processes N` binds the port in each process with SO_REUSEPORT. Before: a second `--processes` relay on
    the port of a first (its sockets SO_REUSEPORT too) bound beside it without a word, and the kernel split the
    connections between two relays; a plain socket there cost three restarts of each process and wrote keys."""
    for reuse_port in (True, False):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(("127.0.0.1", free_port()))
        sock.listen(1)
        port = sock.getsockname()[1]
        data = tmp_path / f"data-{reuse_port}"
        with sock:
            try:
                result = subprocess.run([CLI, "relay", "--processes", "2", "--port", str(port), "--data-dir",
                                         str(data)], capture_output=True, text=True, timeout=60)
            except subprocess.TimeoutExpired as exc:  # it serves: the failure this test is about
                raise AssertionError(f"--processes 2 started on a held port (SO_REUSEPORT {reuse_port})") from exc
        assert result.returncode == 1, result.stderr
        assert result.stderr.strip() == (f"ce-bench: error: cannot listen on 127.0.0.1:{port}: another process "
                                         "listens there (a relay already running? pick another --port)"), result.stderr
        assert not data.exists()  # no key, no store, no nats-server config


def test_processes_while_another_processes_relay_starts_on_the_port_say_so(tmp_path: Path) -> None:
    """A `--processes` relay that is starting binds its port (SO_REUSEPORT) before it listens, which a bind check
    does not see: the supervisor's lock on the port is what a second one meets (review finding: it shared it)."""
    import fcntl

    from web.cli import port_lock_path

    port = free_port()
    with open(port_lock_path("127.0.0.1", port), "w") as held:  # what a starting supervisor holds
        fcntl.flock(held, fcntl.LOCK_EX)
        result = subprocess.run([CLI, "relay", "--processes", "2", "--port", str(port), "--data-dir",
                                 str(tmp_path / "data")], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith(f"ce-bench: error: cannot listen on 127.0.0.1:{port}: another ce-bench relay "
                                    "--processes is starting or running there"), result.stderr
    assert not (tmp_path / "data").exists()


def test_up_on_a_port_another_process_holds_measures_and_posts_nothing(tmp_path: Path) -> None:
    """Before: `up` measured anyway, posted this machine's profile to the relay on that port and exited 0."""
    sock, port = held_port()
    with sock:
        started = time.monotonic()
        result = subprocess.run([CLI, "up", "--port", str(port), "--data-dir", str(tmp_path / "data"), "--no-gpu"],
                                capture_output=True, text=True, timeout=120, cwd=tmp_path)
        took = time.monotonic() - started
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
    assert "join:" not in result.stdout and "Traceback" not in result.stderr
    assert not (tmp_path / "data").exists()
    assert took < 30, took  # failed at the start: a measurement alone takes longer than the relay's import


def test_an_unreachable_nats_server_is_waited_for_then_named_in_one_line(tmp_path: Path) -> None:
    """Before: "nats error ... Connection refused" twice a second forever."""
    url = f"nats://127.0.0.1:{free_port()}"  # nothing listens there
    result = subprocess.run([CLI, "relay", "--port", str(free_port()), "--data-dir", str(tmp_path / "data"),
                             "--nats", url, "--nats-connect-wait-s", "3"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert any(line.startswith(f"waiting for NATS at {url}") for line in lines), lines
    assert lines[-1].startswith(f"ce-bench: error: NATS at {url} cannot be reached (") and "after 3 s" in lines[-1]
    assert "Traceback" not in result.stderr and len(lines) <= 6, lines


def test_sigterm_ends_a_relay_waiting_for_nats(tmp_path: Path) -> None:
    """Before: only kill -9 stopped a relay whose NATS server was down."""
    url = f"nats://127.0.0.1:{free_port()}"
    proc = subprocess.Popen([CLI, "relay", "--port", str(free_port()), "--data-dir", str(tmp_path / "data"),
                             "--nats", url, "--nats-connect-wait-s", "120"], stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()  # the event: it is waiting
        assert first.startswith("waiting for NATS"), first
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) != 0
    finally:
        if proc.poll() is None:
            proc.kill()


def registered(relay: RelayProcess, profile: dict[str, Any], key: NodeKey) -> None:
    register(relay.url, profile, key)


def metric(relay: RelayProcess, name: str) -> float:
    text = urllib.request.urlopen(relay.url + "/metrics", timeout=10).read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name))


def superseded_total(relay: RelayProcess) -> float:
    return metric(relay, "ce_relay_sessions_superseded_total")


def until(what: str, within_s: float, check: Any) -> Any:
    deadline = time.monotonic() + within_s
    while not (got := check()):
        assert time.monotonic() < deadline, what
        time.sleep(0.1)
    return got


def test_one_key_is_one_node_a_second_session_supersedes_the_first(tmp_path: Path,
                                                                    machine_profile: dict[str, Any]) -> None:
    """Before: a second `ce-bench node` with a running `up`'s key went live beside it without a word. Now the
    newer session takes the node, the older is told why and stops (no reconnect: the two would take turns),
    and the relay counts it on /metrics."""
    key = NodeKey.generate()
    with RelayProcess(tmp_path / "relay", "--heartbeat-interval", "0.5") as relay:
        registered(relay, json.loads(json.dumps(machine_profile)), key)
        older = LiveSession(relay.url, key).start()
        newer = None
        try:
            until("the first session is live", 30, lambda: older.acks >= 1)
            assert superseded_total(relay) == 0
            said: list[str] = []
            newer = LiveSession(relay.url, key, say=said.append).start()
            until("the older session is told", 30, lambda: older.superseded is not None)
            assert "one key is one node" in (older.superseded or "")
            until("the newer session is told", 30, lambda: any("one key is one node" in line for line in said))
            pongs = metric(relay, "ce_relay_pongs_total")  # only the newer session pongs now
            until("the newer session stays live", 30, lambda: metric(relay, "ce_relay_pongs_total") >= pongs + 3)
            assert superseded_total(relay) == 1  # the older did not come back to take the node again
            assert relay.get(f"/v1/nodes/{key.node_id}")[1]["status"]["online"]
        finally:
            older.stop()
            if newer is not None:
                newer.stop()


def test_a_lower_profile_replacing_a_higher_one_is_said(tmp_path: Path, machine_profile: dict[str, Any]) -> None:
    """Before: a second node with one key, measured under load (1 core, 19.5 GFLOP/s), silently replaced the
    better profile (2 cores, 64.3). The relay still takes it (machines change), and says so to the poster."""
    from host_runner.relay_client import post_profile_told

    key = NodeKey.generate()
    with RelayProcess(tmp_path / "relay") as relay:
        beacon = fetch_beacon(relay.url)
        told = []
        for i, share in enumerate((1.0, 0.3, 0.9)):  # the first stored, the second lower, the third not lower
            body = {k: v for k, v in json.loads(json.dumps(machine_profile)).items() if k != "sig"}
            body["cpu"]["gflops_fp32"] = round(share * machine_profile["cpu"]["gflops_fp32"], 3)
            body.update(node_id=key.node_id, measured_at=int(time.time()) - 30 + i,
                        beacon={k: beacon[k] for k in ("relay", "round", "value")})
            told.append(post_profile_told(relay.url, sign("NodeProfile", body, key)))
    assert [status for status, _ in told] == [201, 200, 200]
    assert told[0][1] == [] and told[2][1] == []  # 0.9 of the first is not below 0.8 of the second's 0.3
    assert len(told[1][1]) == 1 and "another machine using this key" in told[1][1][0], told


def test_nodes_and_roll_calls_list_what_the_relay_holds(tmp_path: Path, machine_profile: dict[str, Any]) -> None:
    """`ce-bench nodes` and `ce-bench roll-calls` (issue 47: listings people expect beside status), against a real
    relay: the node just posted is listed with its claim and status; CE_RELAY stands for --relay; a relay that
    is not there is one line, exit 1."""
    import os

    key = NodeKey.generate()
    with RelayProcess(tmp_path / "relay") as relay:
        registered(relay, {**json.loads(json.dumps(machine_profile)), "name": "rack 7 – Küche"}, key)
        env = {**os.environ, "CE_RELAY": relay.url}
        listed = subprocess.run([CLI, "nodes"], capture_output=True, text=True, timeout=60, env=env)
        status = subprocess.run([CLI, "status", key.node_id], capture_output=True, text=True, timeout=60, env=env)
        calls = subprocess.run([CLI, "roll-calls", "--json"], capture_output=True, text=True, timeout=60, env=env)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.strip().splitlines()
    assert lines[0].split()[:3] == ["node", "status", "cores"] and len(lines) == 2, lines
    assert lines[1].startswith("…" + key.node_id[-12:]) and "unverified" in lines[1]
    assert f"{machine_profile['cpu']['gflops_fp32']:,.1f}" in lines[1]
    assert lines[0].endswith("  name") and lines[1].endswith("  rack 7 – Küche"), lines  # the operator's name
    assert status.returncode == 0, status.stderr
    assert status.stdout.startswith(f'node {key.node_id} ("rack 7 – Küche") at {relay.url}'), status.stdout
    assert calls.returncode == 0 and "roll_calls" in json.loads(calls.stdout), calls.stderr
    gone = subprocess.run([CLI, "nodes", "--relay", f"http://127.0.0.1:{free_port()}"], capture_output=True,
                          text=True, timeout=60)
    assert gone.returncode == 1 and gone.stderr.startswith("ce-bench: error: relay ") and "Traceback" not in gone.stderr


def test_version_and_log_lines_for_a_person_or_a_collector() -> None:
    """`ce-bench --version` names the package and the capsule; log lines are JSON for a collector (stderr not
    a terminal, or CE_LOG_JSON=1) and one readable line with the same fields on a terminal."""
    from web.api import logs

    version = subprocess.run([CLI, "--version"], capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and version.stdout.startswith("ce-bench 1.") and "(capsule " in version.stdout
    record = logging.LogRecord("ce.relay", logging.WARNING, "x", 1, "relay started", None, None)
    record.relay = "12D3KooWX"
    assert json.loads(logs.JsonFormatter().format(record))["relay"] == "12D3KooWX"
    human = logs.HumanFormatter().format(record)
    assert human.endswith("warning  relay started  relay=12D3KooWX") and "{" not in human
    ce = logging.getLogger("ce")
    saved = (ce.handlers[:], ce.level, ce.propagate)
    try:
        formatters = [configured(tty, env) for tty, env in ((True, {}), (False, {}), (True, {"CE_LOG_JSON": "1"}))]
    finally:
        ce.handlers[:], ce.level, ce.propagate = saved
    assert [type(f) for f in formatters] == [logs.HumanFormatter, logs.JsonFormatter, logs.JsonFormatter]


def configured(tty: bool, env: dict[str, str]) -> logging.Formatter | None:
    """The formatter web/api/logs.configure picks with stderr a terminal or not and this environment."""
    import io
    import os
    from unittest import mock

    from web.api import logs

    stream = io.StringIO()
    outside = {k: v for k, v in os.environ.items() if k != "CE_LOG_JSON"}
    with (mock.patch.object(stream, "isatty", return_value=tty), mock.patch("sys.stderr", stream),
          mock.patch.dict(os.environ, {**outside, **env}, clear=True)):
        logs.configure("info")
    return logging.getLogger("ce").handlers[0].formatter
