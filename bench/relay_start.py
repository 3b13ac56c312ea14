"""How long a relay takes to start, against how many nodes it knows and how much challenge history each has
(issue 19: start in O(nodes)).

    .venv/bin/python bench/relay_start.py [--nodes 20000] [--history 1,25]

Method: for each history depth K, a relay store is written directly (web/store.py's own ops): N profiles
(one real signed profile's row and summary, its NodeId replaced: start reads stored summaries, not the
signed bodies), K challenge results per node in its history, and each node's trust state as a relay writes
it after a result. Then a Relay (web/relay.py, in-process, no NATS) is started and stopped 3 times; the
figure is the median wall time of Relay.start(). Reference in the same run: the same store without the trust
states, which makes the relay replay every stored result (what it did before snapshots). The claim holds
when start with snapshots does not grow with K (ratio K=max / K=1 near 1) while the replay does.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.kernels_paired import cpu_model  # noqa: E402
from common.keys import NodeKey  # noqa: E402
from tests.samples import sample_profile  # noqa: E402
from web.api.summary import ProfileSummary  # noqa: E402
from web.config import RelayConfig  # noqa: E402
from web.proof.trust import Trust  # noqa: E402
from web.relay import Relay  # noqa: E402
from web.store import Store  # noqa: E402


def write_store(data_dir: Path, nodes: int, history: int) -> None:
    """N nodes, K stored results each, and each node's trust state after them."""
    config = RelayConfig(data_dir=data_dir)
    _, profile = sample_profile()
    body, summary = json.dumps(profile), ProfileSummary.of_profile(profile).to_json()
    now = time.time()
    store = Store(data_dir / "relay.sqlite")
    try:
        ops = []
        for i in range(nodes):
            node_id = NodeKey.generate().node_id
            row = json.dumps({**summary, "node_id": node_id}).encode()
            ops.append(Store.put_profile_op(node_id, int(now), "bench", body.replace(profile["node_id"], node_id)
                                            .encode(), True, row))
            trust = Trust(decayed_at=now - history)
            for k in range(history):
                at = now - history + k
                observed = 70.0 + k % 3
                result = {"passed": True, "code": "passed", "observed_gflops": observed, "kind": "sgemm"}
                trust.record(True, "passed", observed, at, config)
                ops.append(Store.put_history_op(node_id, at, "challenge", json.dumps(result).encode(),
                                                config.history_kept))
            ops.append(Store.put_trust_op(node_id, now, json.dumps(trust.to_state()).encode()))
            if len(ops) > 5000 or i == nodes - 1:
                store.submit(Store.all_of(*ops)).result()
                ops = []
    finally:
        store.close()


async def start_once(data_dir: Path) -> float:
    relay = Relay(RelayConfig(data_dir=data_dir))
    began = time.perf_counter()
    await relay.start()
    took = time.perf_counter() - began
    await relay.stop()
    return took


def median_start(data_dir: Path, runs: int = 3) -> float:
    return statistics.median(asyncio.run(start_once(data_dir)) for _ in range(runs))


def start_without_states(data_dir: Path) -> float:
    """One start from a store without trust states (the relay replays every result, then writes them)."""
    db = sqlite3.connect(data_dir / "relay.sqlite")
    with db:
        db.execute("DELETE FROM trust")
        db.execute("PRAGMA user_version=0")  # as a store written before trust states
    db.close()
    return asyncio.run(start_once(data_dir))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=20_000)
    parser.add_argument("--history", default="1,25", help="results per node, comma-separated")
    args = parser.parse_args()
    depths = [int(k) for k in args.history.split(",")]
    print(f"relay start, {args.nodes} nodes, CPU {cpu_model()}")
    rows = []
    for k in depths:
        with tempfile.TemporaryDirectory() as tmp:
            data_dir = Path(tmp)
            write_store(data_dir, args.nodes, k)
            snap = median_start(data_dir)
            replay = statistics.median(start_without_states(data_dir) for _ in range(3))
            rows.append((k, snap, replay))
            print(f"  K={k:4d} results/node: start {snap:6.2f} s with trust states, {replay:6.2f} s replaying "
                  f"({k * args.nodes} results)")
    (k0, s0, r0), (k1, s1, r1) = rows[0], rows[-1]
    print(f"ratio K={k1} / K={k0}: {s1 / s0:.2f}x with trust states (target ~1), {r1 / r0:.2f}x replaying")


if __name__ == "__main__":
    main()
