"""Nodes that take dispatched tasks (tests/job_node.py, each in its own process from its own loopback address),
registered to be proven at roll calls, and the manifests the dispatch tests and benches submit."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from capsule.signing import sign
from common.keys import NodeKey, load_or_create
from host_runner.relay_client import fetch_beacon, post_profile
from tests.relay_process import RelayProcess
from tests.roll_call_helpers import node

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "build" / "work.wasm"
CLAIM_SHARE = 0.3  # honest nodes claim this share of the measured GFLOP/s: proven at every roll call here


class NodeProc:
    """tests/job_node.py in its own process, from its own loopback address."""

    def __init__(self, relay: RelayProcess, home: Path, address: str, reactor: Path | None, slots: int = 1,
                 lie_every: int = 0) -> None:
        home.mkdir(parents=True, exist_ok=True)
        self.key_file = home / "node.key"
        self.key = load_or_create(self.key_file)
        self.log = home / "node.log"
        args = [sys.executable, "-m", "tests.job_node", relay.url, str(self.key_file), address, "--slots", str(slots),
                "--lie-every", str(lie_every)] + (["--reactor", str(reactor)] if reactor else [])
        self.proc = subprocess.Popen(args, cwd=ROOT, stdout=open(self.log, "wb"), stderr=subprocess.STDOUT)  # noqa: SIM115

    @property
    def node_id(self) -> str:
        return self.key.node_id

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=5)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=5)


def sample_claims() -> dict[str, Any]:
    """What the test nodes claim: a sample profile at 33 GFLOP/s on 2 instances (register() claims CLAIM_SHARE of
    it: ~10 GFLOP/s, well within what even a busy core here shows at a roll call), no GPU. Measuring this machine
    instead took ~8 s of both cores per module, and under-claiming is honest."""
    from tests.samples import sample_profile

    profile = sample_profile(gflops=33.0)[1]
    profile["gpus"] = []
    return profile


def register(relay: RelayProcess, measured: dict[str, Any], key: NodeKey) -> None:
    body = {k: v for k, v in json.loads(json.dumps(measured)).items() if k != "sig"}
    beacon = fetch_beacon(relay.url)
    body.update(node_id=key.node_id, measured_at=int(time.time()),
                beacon={k: beacon[k] for k in ("relay", "round", "value")})
    body["cpu"]["gflops_fp32"] = round(CLAIM_SHARE * measured["cpu"]["gflops_fp32"], 3)
    body["llm"]["tokens_per_sec"] = None  # no reference-model phase: the roll calls stay short
    body["gpus"] = []
    post_profile(relay.url, sign("NodeProfile", body, key))


def proven(relay: RelayProcess, node_id: str) -> bool:
    trust = node(relay, type("K", (), {"node_id": node_id})())["trust"]
    return bool(trust["status"] == "verified" and trust["counted"]["cpu_gflops"] > 0)


def write_manifest(path: Path, tasks: list[list[str]], **placement: Any) -> Path:
    path.write_text(json.dumps({
        "v": 2, "kind": "wasi", "module": {"path": str(WORK)}, "tasks": [{"args": a} for a in tasks],
        "limits": {"memory_mib": 32, "wall_ms": 20_000, "fuel": None, "output_bytes": 4096},
        "placement": {"nodes": 4, "redundancy": 1, **placement}}))
    return path
