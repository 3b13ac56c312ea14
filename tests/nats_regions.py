"""Real nats-servers for a cluster that grows by region (web/cluster/regions.py, docs/manual.md "Sizing a
cluster"): a hub with JetStream (domain "hub": the cluster's buckets) and one server per region, each a leaf
node of the hub. NATS forwards a message over a leaf connection only where the other side has interest, so what
one region's relays subscribe to alone never leaves it. With `users` (relay user -> region), every server asks for
credentials, from the configs the project writes (web/cluster/region_servers.py): relays connect as their user,
the regions' servers dial the hub as their leaf user, and no anonymous client is admitted anywhere."""

from __future__ import annotations

import json
import secrets
import socket
import subprocess
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from common.files import write_atomic
from tests.nats_process import NATS_SERVER
from tests.relay_process import free_port
from web.cluster.region_servers import hub_config, region_config
from web.config import RelayConfig

HUB_DOMAIN = "hub"


class NatsRegions:
    def __init__(self, base: Path, regions: Sequence[str], users: dict[str, str] | None = None) -> None:
        self.base = base
        self.regions = list(regions)
        self.users = dict(users or {})  # relay user -> its region (none: servers without authorization)
        self.passwords = {name: secrets.token_urlsafe(18) for name in [*self.users, *self.regions, "admin"]}
        self.hub_port, self.leaf_port, self.hub_http = free_port(), free_port(), free_port()
        self.ports = {r: free_port() for r in self.regions}
        self.http = {r: free_port() for r in self.regions}
        self.procs: list[subprocess.Popen[bytes]] = []

    def url(self, region: str) -> str:
        return f"nats://127.0.0.1:{self.ports[region]}"

    def relay_args(self, region: str, user: str | None = None) -> list[str]:
        """`ce-bench relay` options for a relay of `region`: its region's server (as `user`, with users), the
        hub's buckets."""
        where = ["--region", region, "--nats-domain", HUB_DOMAIN]
        if user is None:
            return ["--nats", self.url(region), "--nats-insecure", *where]
        if self.users.get(user) != region:
            raise ValueError(f"{user!r} is not a relay user of region {region!r}: {self.users}")
        path = self.base / f"{user}.password"
        write_atomic(path, f"{self.passwords[user]}\n".encode(), 0o600)
        return ["--nats", self.url(region), "--nats-user", user, "--nats-password-file", str(path), *where]

    def _spawn(self, name: str, conf: str, port: int) -> None:
        path = self.base / f"{name}.conf"
        path.write_text(conf)
        path.chmod(0o600)  # passwords
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
        hub_listen, leaf_listen = f"127.0.0.1:{self.hub_port}", f"127.0.0.1:{self.leaf_port}"
        if self.users:
            self._spawn("hub", hub_config(hub_listen, leaf_listen, self.base / "hub-js", HUB_DOMAIN,
                                          {r: self.passwords[r] for r in self.regions}, self.passwords["admin"],
                                          http=f"127.0.0.1:{self.hub_http}"), self.hub_port)
            for region in self.regions:
                relays = {u: self.passwords[u] for u, r in self.users.items() if r == region}
                self._spawn(region, region_config(region, f"127.0.0.1:{self.ports[region]}",
                                                  f"nats-leaf://{leaf_listen}", self.passwords[region], relays,
                                                  RelayConfig().nats_bucket, HUB_DOMAIN,
                                                  http=f"127.0.0.1:{self.http[region]}"), self.ports[region])
        else:
            self._spawn("hub", f"server_name: hub\nlisten: {q(hub_listen)}\n"
                               f"http: {q(f'127.0.0.1:{self.hub_http}')}\n"
                               f"jetstream {{ store_dir: {q(str(self.base / 'hub-js'))}, domain: {HUB_DOMAIN} }}\n"
                               f"leafnodes {{ listen: {q(leaf_listen)} }}\n", self.hub_port)
            for region in self.regions:
                hub = q(f"nats-leaf://{leaf_listen}")
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
