"""Per-relay cluster traffic against the size of another region (issue 32, item 5): flat in a regional cluster,
growing with the network in a flat one.

    .venv/bin/python bench/regions.py [--steps 200,1000,3000] [--hold-s 30] [--heartbeat-interval 2]

Method. Real nats-servers (tests/nats_regions.py: a JetStream hub, a leaf server per region) and four relay
processes, two per region ("a", "b"), each naming the other three as peers. Region a grows: N nodes registered
on relay A1 and N live sessions opened to it (the session of bench/relay_sessions.py: one signed heartbeat,
then pongs, and the landmark edges it co-signs). Region b holds a fixed 50 sessions on B1. At each step, after
the sessions are up and settled, each relay's NATS client counters (ce_relay_nats_in_bytes in /metrics) and
CPU seconds (/proc) are read over --hold-s: A2 (region a, no sessions of its own) shows what region a's size
costs a relay of that region; B2 (region b, none either) what it costs a relay of another region. The
reference, in the same run: the same four relays and sessions on one flat cluster (one nats-server, no
regions), where B2 receives everything. Also: the bytes region a's leaf server sent to the hub (what left the
region). The generator shares the 2 cores with the relays and servers, so CPU figures are for comparison
within the run only. Growth law: per-relay inbound = regional(N of its own region) + global (profiles as nodes
register or re-measure, beacons, one signed total per relay per roll call).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.cluster_traffic import metric  # noqa: E402
from bench.kernels_paired import cpu_model  # noqa: E402
from bench.relay_load import ONE_ADDRESS  # noqa: E402
from bench.relay_sessions import Stats, cpu_s, register_nodes, session  # noqa: E402
from common.keys import NodeKey, load_or_create  # noqa: E402
from tests.nats_process import NatsProcess  # noqa: E402
from tests.nats_regions import NatsRegions  # noqa: E402
from tests.relay_process import RelayProcess  # noqa: E402

NAMES = ("a1", "a2", "b1", "b2")
REGION_OF = {"a1": "a", "a2": "a", "b1": "b", "b2": "b"}
B_SESSIONS = 50


class Cluster:
    """Four relays on regional servers (regions=True) or one flat nats-server."""

    def __init__(self, root: Path, regional: bool, common: list[str]) -> None:
        self.root, self.regional, self.common = root, regional, common
        self.keys = {n: load_or_create(root / n / "relay.key") for n in NAMES}
        self.servers: Any = None
        self.relays: dict[str, RelayProcess] = {}

    def __enter__(self) -> Cluster:
        if self.regional:
            self.servers = NatsRegions(self.root / "nats", ["a", "b"]).start()
        else:
            self.servers = NatsProcess(self.root / "nats").start()
        for n in NAMES:
            peers = [x for p in NAMES if p != n for x in ("--cluster-peer", self.keys[p].node_id)]
            nats = self.servers.relay_args(REGION_OF[n]) if self.regional else ["--nats", self.servers.url]
            self.relays[n] = RelayProcess(self.root / n, *self.common, *nats, *peers).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        for r in self.relays.values():
            r.stop()
        self.servers.stop()

    def leaf_out(self) -> int | None:
        return self.servers.leaf_out_bytes("a") if self.regional else None


async def run(cluster: Cluster, steps: list[int], hold_s: float) -> list[dict[str, Any]]:
    a1, b1 = cluster.relays["a1"], cluster.relays["b1"]
    stats, stop = Stats(), asyncio.Event()
    tasks: list[asyncio.Task[None]] = []
    b_pairs, _ = await asyncio.to_thread(register_nodes, b1, B_SESSIONS)
    for key, _ in b_pairs:
        tasks.append(asyncio.create_task(session(b1.url.replace("http", "ws") + "/v1/live", key, stats, stop, False)))
    a_keys: list[NodeKey] = []
    rows = []
    for n in steps:
        pairs, _ = await asyncio.to_thread(register_nodes, a1, n - len(a_keys))
        a_keys += [k for k, _ in pairs]
        while len(tasks) < B_SESSIONS + len(a_keys):
            key = a_keys[len(tasks) - B_SESSIONS]
            tasks.append(asyncio.create_task(session(a1.url.replace("http", "ws") + "/v1/live", key, stats, stop,
                                                     False)))
            if len(tasks) % 200 == 0:
                await asyncio.sleep(0.2)
        await asyncio.sleep(15)  # first heartbeats, first edges, a full digest: the arrival wave has passed
        before = {n_: (metric(r.url, "ce_relay_nats_in_bytes"), cpu_s(r.proc.pid))  # type: ignore[union-attr]
                  for n_, r in cluster.relays.items()}
        leaf0 = cluster.leaf_out()
        await asyncio.sleep(hold_s)
        row: dict[str, Any] = {"n": n}
        for n_, r in cluster.relays.items():
            in0, cpu0 = before[n_]
            row[n_] = ((metric(r.url, "ce_relay_nats_in_bytes") - in0) / hold_s,
                       (cpu_s(r.proc.pid) - cpu0) / hold_s * 100)  # type: ignore[union-attr]
        leaf1 = cluster.leaf_out()
        row["leaf_out"] = None if leaf0 is None or leaf1 is None else (leaf1 - leaf0) / hold_s
        rows.append(row)
        print(f"  {'regional' if cluster.regional else 'flat'} N={n}: " + ", ".join(
            f"{k} in {row[k][0] / 1000:.2f} kB/s cpu {row[k][1]:.1f}%" for k in NAMES)
            + (f"; region a -> hub {row['leaf_out'] / 1000:.2f} kB/s" if row["leaf_out"] is not None else ""),
            flush=True)
    stop.set()
    await asyncio.wait(tasks, timeout=30)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", default="200,1000,3000")
    parser.add_argument("--hold-s", type=float, default=30.0)
    parser.add_argument("--heartbeat-interval", type=float, default=2.0)
    args = parser.parse_args()
    steps = [int(s) for s in args.steps.split(",")]
    common = ["--heartbeat-interval", str(args.heartbeat_interval), "--ip-rate", "100000", "--no-libp2p",
              *ONE_ADDRESS]
    print(f"{cpu_model()}; {time.strftime('%Y-%m-%d')}; steps {steps}, hold {args.hold_s:.0f} s, heartbeat "
          f"interval {args.heartbeat_interval:g} s, {B_SESSIONS} sessions in region b", flush=True)
    results = {}
    for regional in (True, False):
        with tempfile.TemporaryDirectory() as tmp, Cluster(Path(tmp), regional, common) as cluster:
            results[regional] = asyncio.run(run(cluster, steps, args.hold_s))
    print("N in region a | B2 (region b) in, regional | B2 in, flat | A2 (region a) in, regional | "
          "region a -> hub")
    for reg, flat in zip(results[True], results[False], strict=True):
        print(f"{reg['n']:>6} | {reg['b2'][0] / 1000:.2f} kB/s | {flat['b2'][0] / 1000:.2f} kB/s | "
              f"{reg['a2'][0] / 1000:.2f} kB/s | {reg['leaf_out'] / 1000:.2f} kB/s")
    first, last = results[True][0], results[True][-1]
    growth = last["n"] / first["n"]
    print(f"over {growth:.0f}x the nodes in region a: B2 (regional) x{last['b2'][0] / max(first['b2'][0], 1):.2f}, "
          f"B2 (flat) x{results[False][-1]['b2'][0] / max(results[False][0]['b2'][0], 1):.2f}, "
          f"A2 (regional) x{last['a2'][0] / max(first['a2'][0], 1):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
