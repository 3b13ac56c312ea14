"""Real relay processes for tests: `ce-bench relay` on a free loopback port, stopped (or killed) by the
test, every wait bounded."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from common.keys import load_or_create

CLI = str(Path(sys.executable).parent / "ce-bench")


# Ports for the servers tests start, below the kernel's ephemeral range (32768-60999 by default, where
# bind(0) and outgoing connections draw from) and split between pytest-xdist workers. With bind(0), two
# workers could draw the same free port at the same moment: the second server failed to bind, and its test,
# finding the port answering, talked to the other worker's relay (CI, 2026-12-04: "beacon_mismatch - round 0
# has another value"). Each worker takes its own range, in order, so no two servers of one run share a port.
PORT_BASE = 10_000
PORTS_PER_WORKER = 2_500
_next_port: dict[str, int] = {}


def _port_range() -> range:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")  # unset outside xdist: serial runs take gw0's
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    start = PORT_BASE + (index % 8) * PORTS_PER_WORKER
    return range(start, start + PORTS_PER_WORKER)


def free_port() -> int:
    """A loopback port no other server of this test run has taken (see PORT_BASE), free right now."""
    ports = _port_range()
    key = str(ports.start)
    first = _next_port.get(key, ports.start + (os.getpid() % 100) * 20)  # a rerun starts elsewhere in the range
    for i in range(len(ports)):
        port = ports.start + (first - ports.start + i) % len(ports)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue  # in use (a server of an earlier test still closing, or another program)
        _next_port[key] = port + 1
        return port
    raise RuntimeError(f"no free loopback port in {ports.start}-{ports.stop - 1}")


def start_all(relays: Sequence[RelayProcess], timeout: float = 30) -> list[RelayProcess]:
    """Starts relays side by side and waits for every one: a start is mostly its process's imports, which two
    cores run two at a time (three relays were up in 0.85 s, 1.3 s one after another: 2026-12-06, 2 vCPU).
    One that fails stops the others and its error is raised."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(relays)) as pool:
        started = [pool.submit(relay.start, timeout) for relay in relays]
    failed = [exc for future in started if (exc := future.exception()) is not None]
    if failed:
        for relay in relays:
            relay.stop()
        raise failed[0]
    return list(relays)


class RelayProcess:
    def __init__(self, data_dir: Path, *extra: str, port: int | None = None) -> None:
        self.data_dir = data_dir
        self.port = port or free_port()
        self.extra = list(extra)
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = data_dir.parent / f"relay-{self.port}.log"

    def start(self, timeout: float = 30) -> RelayProcess:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log, "ab")  # noqa: SIM115 - the process owns it until it exits
        self.proc = subprocess.Popen(
            [CLI, "relay", "--port", str(self.port), "--data-dir", str(self.data_dir), *self.extra],
            stdout=log, stderr=log, env=dict(os.environ))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"relay exited with {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            try:
                beacon = json.loads(urllib.request.urlopen(self.url + "/beacon", timeout=1).read())
            except (OSError, ValueError):
                time.sleep(0.02)  # a refused connect costs nothing; 0.1 s added 0.05 s to every start on average
                continue
            ours = {load_or_create(path).node_id for path in self.data_dir.rglob("relay.key")}
            if beacon.get("relay") not in ours:  # another server answers on this port: never test against it
                self.stop()
                raise RuntimeError(f"port {self.port} is answered by relay {beacon.get('relay')}, not by the one "
                                   f"started here ({sorted(ours) or 'no key yet'}): {self.log.read_text()[-2000:]}")
            return self
        raise RuntimeError(f"relay did not answer within {timeout} s: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=5)

    def __enter__(self) -> RelayProcess:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, Any, dict[str, str]]:
        req = urllib.request.Request(self.url + path, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                body = resp.read()
                return resp.status, json.loads(body) if body else None, dict(resp.headers)
        except urllib.error.HTTPError as exc:
            body = exc.read()
            return exc.code, json.loads(body) if body else None, dict(exc.headers)

    def libp2p(self, timeout: float = 30) -> tuple[int, Any]:
        """GET /v1/libp2p once the relay's libp2p host listens or failed to: it comes up beside the relay, which
        answers 503 libp2p_starting meanwhile (web/relay.py)."""
        deadline = time.monotonic() + timeout
        while True:
            status, body, _ = self.get("/v1/libp2p")
            if status != 503 or (body or {}).get("code") != "libp2p_starting" or time.monotonic() > deadline:
                return status, body
            time.sleep(0.05)

    def post(self, path: str, data: bytes | dict[str, Any]) -> tuple[int, Any]:
        raw = data if isinstance(data, bytes) else json.dumps(data).encode()
        req = urllib.request.Request(self.url + path, data=raw, method="POST",
                                     headers={"content-type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())


RECEIVED = "ce_relay_cluster_received_total"  # what a relay took (or refused) from its cluster, by result


def metrics_text(relay: RelayProcess) -> str:
    """The relay's /metrics (one process's, with --processes N)."""
    import urllib.request

    with urllib.request.urlopen(relay.url + "/metrics", timeout=10) as resp:
        return str(resp.read().decode())


def metric(relay: RelayProcess, line_prefix: str) -> float:
    """The value of the one sample whose name and labels are `line_prefix` (0 when absent)."""
    for line in metrics_text(relay).splitlines():
        if line.startswith(line_prefix + " "):
            return float(line.split()[-1])
    return 0.0


def metric_sum(relay: RelayProcess, name: str) -> float:
    """The sum of every sample whose line starts with `name` (all label sets of a counter)."""
    return sum(float(line.split()[-1]) for line in metrics_text(relay).splitlines() if line.startswith(name))


def eventually(check: Callable[[], bool], timeout: float, what: str) -> None:
    """check() until it is true; after `timeout` s a failure naming `what`."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.1)
