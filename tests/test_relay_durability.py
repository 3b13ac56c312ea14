"""Durability and robustness of the relay process: kill -9 under load loses nothing acknowledged, and no
client input produces a 5xx (hypothesis against the live server)."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.relay_process import RelayProcess
from tests.samples import mutated, sample_profile


def post(url: str, body: bytes) -> int:
    req = urllib.request.Request(url + "/v1/profiles", data=body, method="POST",
                                 headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_kill9_mid_ingest_loses_no_acknowledged_profile(tmp_path: Path) -> None:
    relay = RelayProcess(tmp_path / "data", "--ip-rate", "100000").start()
    _, beacon, _ = relay.get("/beacon")
    bodies = [json.dumps(sample_profile(beacon=beacon)[1]).encode() for _ in range(1200)]
    acknowledged: list[str] = []
    lock = threading.Lock()
    next_index = iter(range(len(bodies)))

    def worker() -> None:
        while True:
            with lock:
                i = next(next_index, None)
            if i is None:
                return
            try:
                status = post(relay.url, bodies[i])
            except OSError:  # the relay died under us: this profile was never acknowledged
                return
            if status in (200, 201):
                with lock:
                    acknowledged.append(json.loads(bodies[i])["node_id"])

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while len(acknowledged) < 300 and time.monotonic() < deadline:
        time.sleep(0.01)
    relay.kill9()  # mid-ingest: the workers still have profiles in flight
    for t in threads:
        t.join(timeout=30)
    assert 300 <= len(acknowledged) < len(bodies), "the kill did not land mid-ingest"
    restarted = RelayProcess(tmp_path / "data", port=relay.port).start()
    try:
        missing = [n for n in acknowledged if restarted.get(f"/v1/nodes/{n}")[0] != 200]
        assert not missing, f"{len(missing)} acknowledged profiles lost, e.g. {missing[:3]}"
    finally:
        restarted.stop()


def json_values() -> st.SearchStrategy[Any]:
    scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
    return st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.text(max_size=10), inner, max_size=3), max_leaves=10)


FIELDS = ["v", "node_id", "measured_at", "beacon.round", "beacon.value", "cpu.cores", "cpu.gflops_fp32", "gpus",
          "memory.total_mb", "storage.free_gb", "llm.tokens_per_sec", "runtime.kind", "evidence", "sig", "capsule"]


def test_no_client_input_produces_a_5xx(tmp_path: Path) -> None:
    with RelayProcess(tmp_path / "data", "--ip-rate", "100000", "--node-rate", "100000") as relay:
        _, beacon, _ = relay.get("/beacon")
        _, base = sample_profile(beacon=beacon)

        @settings(max_examples=250, deadline=None, suppress_health_check=list(HealthCheck))
        @given(field=st.sampled_from(FIELDS), value=json_values(), raw=st.binary(max_size=300),
               path=st.text(max_size=60), use_raw=st.booleans())
        def check(field: str, value: Any, raw: bytes, path: str, use_raw: bool) -> None:
            body = raw if use_raw else json.dumps(mutated(base, field, value)).encode()
            assert post(relay.url, body) < 500
            quoted = urllib.parse.quote(path, safe="")
            for target in (f"/v1/nodes/{quoted}", f"/atlas?limit={quoted}", f"/atlas?cursor={quoted}"):
                try:
                    urllib.request.urlopen(relay.url + target, timeout=10).read()
                except urllib.error.HTTPError as exc:
                    assert exc.code < 500, (target, exc.code)

        check()
    assert "unhandled error" not in relay.log.read_text()
