"""The harness that starts servers for tests (tests/relay_process.py): servers of the two xdist workers never
share a port, and a test never talks to a relay it did not start (CI, 2026-12-04: one worker's relay failed to
bind a port the other's had drawn, and its test, finding the port answering, failed with the other relay's
beacon)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.relay_process import PORT_BASE, PORTS_PER_WORKER, RelayProcess, free_port


def test_a_relay_answering_for_another_is_refused(tmp_path: Path) -> None:
    with RelayProcess(tmp_path / "first") as first:
        second = RelayProcess(tmp_path / "second", port=first.port)
        with pytest.raises(RuntimeError, match=f"port {first.port} is answered by relay"):
            second.start()
        assert second.proc is not None and second.proc.poll() is not None  # and it was stopped


def test_workers_draw_ports_from_ranges_of_their_own() -> None:
    code = "from tests.relay_process import free_port; print(*(free_port() for _ in range(50)))"
    drawn = {}
    for worker in ("gw0", "gw1"):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env={**os.environ, "PYTEST_XDIST_WORKER": worker}, cwd=Path(__file__).parents[1])
        drawn[worker] = [int(p) for p in out.stdout.split()]
    for i, worker in enumerate(("gw0", "gw1")):
        low = PORT_BASE + i * PORTS_PER_WORKER
        assert all(low <= p < low + PORTS_PER_WORKER for p in drawn[worker]), (worker, drawn[worker])
        assert len(set(drawn[worker])) == 50  # never the same port twice in one worker
    assert free_port() < 32768  # below the kernel's ephemeral ports, which bind(0) draws from
