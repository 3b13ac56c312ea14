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
from pathlib import Path
from typing import Any

CLI = str(Path(sys.executable).parent / "ce-bench")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
                urllib.request.urlopen(self.url + "/beacon", timeout=1).read()
                return self
            except OSError:
                time.sleep(0.1)
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

    def post(self, path: str, data: bytes | dict[str, Any]) -> tuple[int, Any]:
        raw = data if isinstance(data, bytes) else json.dumps(data).encode()
        req = urllib.request.Request(self.url + path, data=raw, method="POST",
                                     headers={"content-type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())
