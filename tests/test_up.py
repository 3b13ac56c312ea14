"""`ce-bench up`: a relay, this machine measured and registered through it, kept live, the join URL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.relay_process import CLI, free_port


def stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def test_up_serves_the_join_url_and_lists_this_machine(tmp_path: Path) -> None:
    port = free_port()
    env = dict(os.environ, CE_BENCH_HOME=str(tmp_path / "home"))
    proc = subprocess.Popen([CLI, "up", "--port", str(port), "--data-dir", str(tmp_path / "relay"), "--no-gpu",
                             "--budget-ms", "500", "--heartbeat-interval", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        lines = []
        deadline = time.monotonic() + 180
        assert proc.stdout is not None
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line, f"ce-bench up exited early: {proc.stderr.read() if proc.stderr else ''}"
            lines.append(line)
            if line.startswith("join: "):
                break
        join_url = lines[-1].split()[1]
        assert join_url == f"http://127.0.0.1:{port}/"
        node_id = lines[-2].split()[-1]
        assert urllib.request.urlopen(join_url, timeout=5).status == 200
        time.sleep(4)  # > 3 heartbeat intervals: the live session keeps the node online
        atlas = json.loads(urllib.request.urlopen(join_url + "atlas", timeout=5).read())
        assert [n["node_id"] for n in atlas["nodes"]] == [node_id]
        stats = json.loads(urllib.request.urlopen(join_url + "stats", timeout=5).read())
        claimed = stats["claimed"]  # verified figures need challenges first (tests/test_trust.py)
        assert stats["nodes"] == 1 and claimed["cpu_gflops"] > 0 and claimed["tokens_per_sec"] > 0
    finally:
        stop(proc)


def test_up_with_tls_serves_https(tmp_path: Path) -> None:
    """`ce-bench up --tls`: a self-signed certificate made once, the page and API over https."""
    import ssl

    port = free_port()
    env = dict(os.environ, CE_BENCH_HOME=str(tmp_path / "home"))
    proc = subprocess.Popen([CLI, "up", "--tls", "--port", str(port), "--data-dir", str(tmp_path / "relay"),
                             "--no-gpu", "--budget-ms", "500"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 180
        line = ""
        while time.monotonic() < deadline and not line.startswith("join: "):
            line = proc.stdout.readline()
            assert line, f"ce-bench up --tls exited early: {proc.stderr.read() if proc.stderr else ''}"
        url = line.split()[1]
        assert url == f"https://127.0.0.1:{port}/"
        context = ssl.create_default_context(cafile=str(tmp_path / "relay" / "tls-cert.pem"))
        stats = json.loads(urllib.request.urlopen(url + "stats", timeout=5, context=context).read())
        assert stats["nodes"] == 1
        with pytest.raises(urllib.error.URLError):  # an untrusting client refuses the self-signed certificate
            urllib.request.urlopen(url + "stats", timeout=5)
    finally:
        stop(proc)
