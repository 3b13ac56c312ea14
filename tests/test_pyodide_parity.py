"""The capsule's Python runs unchanged under the bundled Pyodide (Node, no browser) and produces the same
canonical bytes, plan and PeerIds as CPython from the same input."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from capsule.canonical import signing_message
from capsule.plan import plan_from_beacon
from tests.conftest import ROOT, Artifacts
from tests.samples import sample_profile

SCRIPT = """
import json
from capsule.canonical import signing_message
from capsule.plan import plan_from_beacon
from capsule.peerid import peer_id_from_public_key, public_key_from_peer_id
from capsule.typed import parse
from capsule.model import NodeProfile
data = json.loads({payload!r})
parse(NodeProfile, data["profile"])
plan = plan_from_beacon(data["beacon"], data["profile"]["node_id"])
print(json.dumps({{
    "message": signing_message("NodeProfile", data["profile"]).hex(),
    "plan": [plan.seed_hex, list(plan.order), plan.start_jitter_ms],
    "key": public_key_from_peer_id(data["profile"]["node_id"]).hex(),
}}))
"""


def run_under_pyodide(code: str) -> str:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is needed to run Pyodide outside a browser")
    result = subprocess.run([node, str(ROOT / "tests" / "pyodide_runner.mjs"), str(ROOT / "build" / "web")],
                            input=code, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def test_same_bytes_as_cpython(artifacts: Artifacts) -> None:
    _, profile = sample_profile()
    profile["evidence"] = {"x": [1e-7, 0.1, 12345.5, 2.5e21, -0.0], "text": "ünïcode \u2028", "n": 2**52}
    beacon = "ab" * 32
    out = json.loads(run_under_pyodide(SCRIPT.format(payload=json.dumps({"profile": profile, "beacon": beacon}))))
    assert bytes.fromhex(out["message"]) == signing_message("NodeProfile", profile)
    plan = plan_from_beacon(beacon, profile["node_id"])
    assert out["plan"] == [plan.seed_hex, list(plan.order), plan.start_jitter_ms]
    from capsule.peerid import public_key_from_peer_id

    assert bytes.fromhex(out["key"]) == public_key_from_peer_id(profile["node_id"])
    assert Path(ROOT / "build" / "web" / "wheels").is_dir()
