"""Real nats-servers for a cluster that grows by region (web/cluster/regions.py, docs/manual.md "Sizing a
cluster"): a hub with JetStream (domain "hub": the cluster's buckets) and one server per region, each a leaf
node of the hub. NATS forwards a message over a leaf connection only where the other side has interest, so what
one region's relays subscribe to alone never leaves it."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.nats_process import NATS_SERVER
from tests.relay_process import free_port

HUB_DOMAIN = "hub"


class NatsRegions:
    def __init__(self, base: Path, regions: Sequence[str]) -> None:
        self.base = base
        self.regions = list(regions)
        self.hub_port, self.leaf_port, self.hub_http = free_port(), free_port(), free_port()
        self.ports = {r: free_port() for r in self.regions}
        self.http = {r: free_port() for r in self.regions}
        self.procs: list[subprocess.Popen[bytes]] = []

    def url(self, region: str) -> str:
        return f"nats://127.0.0.1:{self.ports[region]}"

    def relay_args(self, region: str) -> list[str]:
        """`ce-bench relay` options for a relay of `region`: its region's server, the hub's buckets."""
        return ["--nats", self.url(region), "--nats-insecure", "--region", region, "--nats-domain", HUB_DOMAIN]

    def _spawn(self, name: str, conf: str, port: int) -> None:
        path = self.base / f"{name}.conf"
        path.write_text(conf)
        log = open(self.base / f"{name}.log", "ab")  # noqa: SIM115 - the process owns it until it exits
        self.procs.append(subprocess.Popen([NATS_SERVER, "-c", str(path)], stdout=log, stderr=log))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"nats-server {name} did not start: {(self.base / f'{name}.log').read_text()[-1000:]}")

    def start(self) -> NatsRegions:
        self.base.mkdir(parents=True, exist_ok=True)
        q = json.dumps
        self._spawn("hub", f"server_name: hub\nlisten: {q(f'127.0.0.1:{self.hub_port}')}\n"
                           f"http: {q(f'127.0.0.1:{self.hub_http}')}\n"
                           f"jetstream {{ store_dir: {q(str(self.base / 'hub-js'))}, domain: {HUB_DOMAIN} }}\n"
                           f"leafnodes {{ listen: {q(f'127.0.0.1:{self.leaf_port}')} }}\n", self.hub_port)
        for region in self.regions:
            hub = q(f"nats-leaf://127.0.0.1:{self.leaf_port}")
            self._spawn(region, f"server_name: {region}\nlisten: {q(f'127.0.0.1:{self.ports[region]}')}\n"
                                f"http: {q(f'127.0.0.1:{self.http[region]}')}\n"
                                f"leafnodes {{ remotes: [ {{ url: {hub} }} ] }}\n", self.ports[region])
        deadline = time.monotonic() + 20  # the leaf connections up before any relay connects
        while len(self.leafz(self.hub_http)) < len(self.regions):
            if time.monotonic() > deadline:
                raise RuntimeError("the regions' leaf connections did not come up")
            time.sleep(0.1)
        return self

    @staticmethod
    def leafz(http_port: int) -> list[dict[str, Any]]:
        body = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{http_port}/leafz", timeout=5).read())
        return list(body.get("leafs") or [])

    def leaf_out_bytes(self, region: str) -> int:
        """Bytes the region's server sent over its leaf connection (to the hub, and so to the other regions)."""
        return sum(int(leaf.get("out_bytes", 0)) for leaf in self.leafz(self.http[region]))

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            proc.wait(timeout=10)

    def __enter__(self) -> NatsRegions:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
