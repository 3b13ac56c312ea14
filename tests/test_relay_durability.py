"""Durability of the relay process: kill -9 under load loses nothing acknowledged (no client input producing
a 5xx is tests/test_no_5xx.py)."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from tests.relay_process import RelayProcess
from tests.samples import sample_profile


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
    # surviving kill -9 alone would also pass with synchronous=OFF (the page cache outlives the process):
    # the relay must say it runs with the settings that make an acknowledgement durable on power loss too
    started = next(json.loads(line) for line in relay.log.read_text().splitlines() if '"relay started"' in line)
    assert started["store"] == {"journal_mode": "wal", "synchronous": "FULL"}, started
    for t in threads:
        t.join(timeout=30)
    assert 300 <= len(acknowledged) < len(bodies), "the kill did not land mid-ingest"
    restarted = RelayProcess(tmp_path / "data", port=relay.port).start()
    try:
        missing = [n for n in acknowledged if restarted.get(f"/v1/nodes/{n}")[0] != 200]
        assert not missing, f"{len(missing)} acknowledged profiles lost, e.g. {missing[:3]}"
    finally:
        restarted.stop()


def test_a_store_written_before_summaries_loads_and_counts(tmp_path: Path) -> None:
    """A relay upgraded in place: its profiles table has no summary column (the schema of 2026-12-02); the
    new relay adds it, parses those rows once, and counts them like any other."""
    import sqlite3

    relay = RelayProcess(tmp_path / "data").start()
    try:
        _, beacon, _ = relay.get("/beacon")
        key, profile = sample_profile(beacon=beacon, gflops=40.0)
        assert post(relay.url, json.dumps(profile).encode()) == 201
    finally:
        relay.stop()
    db = tmp_path / "data" / "relay.sqlite"
    with sqlite3.connect(db) as conn:  # rewrite the table as an older relay had it
        rows = conn.execute("SELECT node_id, measured_at, origin, body, synced FROM profiles").fetchall()
        conn.execute("DROP TABLE profiles")
        conn.execute("CREATE TABLE profiles (node_id TEXT PRIMARY KEY, measured_at INTEGER NOT NULL, origin TEXT NOT "
                     "NULL, body BLOB NOT NULL, synced INTEGER NOT NULL DEFAULT 0)")
        conn.executemany("INSERT INTO profiles VALUES (?, ?, ?, ?, ?)", rows)
    restarted = RelayProcess(tmp_path / "data", port=relay.port).start()
    try:
        status, node, _ = restarted.get(f"/v1/nodes/{key.node_id}")
        assert status == 200 and node["profile"]["cpu"]["gflops_fp32"] == 40.0, node
        with sqlite3.connect(db) as conn:  # the old row's summary was written back: the next start reads it
            summary = conn.execute("SELECT summary FROM profiles WHERE node_id=?", (key.node_id,)).fetchone()[0]
        assert summary is not None and json.loads(summary)["gflops_fp32"] == 40.0
        # the atlas holds the old row's node: a newer profile replaces it, and counts
        _, beacon, _ = restarted.get("/beacon")
        _, newer = sample_profile(key, beacon=beacon, measured_at=profile["measured_at"] + 1, gflops=50.0)
        assert post(restarted.url, json.dumps(newer).encode()) == 200
        _, stats, _ = restarted.get("/stats")
        assert stats["claimed"]["cpu_gflops"] == 50.0 and stats["claimed"]["nodes"] == 1, stats
    finally:
        restarted.stop()
    with sqlite3.connect(db) as conn:
        assert "summary" in {row[1] for row in conn.execute("PRAGMA table_info(profiles)")}
