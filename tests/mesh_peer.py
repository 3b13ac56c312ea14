"""The js-libp2p peer of the tests and benches (tests/mesh_js/mesh_peer.mjs: js-libp2p from npm, another
implementation than the relay's py-libp2p): installed once per lock file, run as a process whose JSON lines
arrive on a queue."""

from __future__ import annotations

import fcntl
import hashlib
import json
import queue
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from tests.relay_process import RelayProcess

HERE = Path(__file__).resolve().parent / "mesh_js"


def js_peer_script() -> Path:
    """tests/mesh_js installed with `npm ci` from its lock file into the build cache (once per lock), with
    mesh_peer.mjs beside its node_modules; the path of the script."""
    import build

    lock = (HERE / "package-lock.json").read_bytes()
    target = build.CACHE / f"mesh-js-{hashlib.sha256(lock).hexdigest()[:12]}"
    target.mkdir(parents=True, exist_ok=True)
    with open(target / ".lock", "w") as guard:  # two pytest-xdist workers may both get here first
        fcntl.flock(guard, fcntl.LOCK_EX)
        if not (target / "node_modules" / "libp2p").exists():
            shutil.copy(HERE / "package.json", target)
            shutil.copy(HERE / "package-lock.json", target)
            subprocess.run(["npm", "ci", "--silent", "--no-audit", "--no-fund"], cwd=target, check=True, timeout=300)
    shutil.copy(HERE / "mesh_peer.mjs", target)
    return target / "mesh_peer.mjs"


class JsPeer:
    """One mesh_peer.mjs process; its JSON lines arrive on a queue as they are printed."""

    def __init__(self, script: Path, *args: str) -> None:
        self.proc = subprocess.Popen(["node", str(script), *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     cwd=script.parent)
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                self.lines.put(json.loads(raw))
            except ValueError:
                self.lines.put({"noise": raw.decode(errors="replace")[:300]})

    def next(self, timeout_s: float) -> dict[str, Any] | None:
        try:
            line = self.lines.get(timeout=max(0.01, timeout_s))
        except queue.Empty:
            return None
        self.seen.append(line)
        assert "error" not in line, line["error"]
        return line

    def until(self, done: Any, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            line = self.next(deadline - time.monotonic())
            if line is not None and done(line):
                return line
        raise AssertionError(f"not seen within {timeout_s} s; seen: {json.dumps(self.seen)[-3000:]}")

    def finish(self, timeout_s: float) -> list[dict[str, Any]]:
        self.proc.wait(timeout=timeout_s)
        while self.next(0.01) is not None:
            pass
        assert self.proc.returncode == 0, self.seen[-5:]
        return self.seen

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=5)


def run_js(script: Path, *args: str, timeout_s: float = 60) -> list[dict[str, Any]]:
    peer = JsPeer(script, *args)
    try:
        return peer.finish(timeout_s)
    finally:
        peer.stop()


def mesh_address(relay: RelayProcess) -> str:
    status, info = relay.libp2p()
    assert status == 200, info
    return str(next(a for a in info["multiaddrs"] if a.startswith("/ip4/127.0.0.1/")))
