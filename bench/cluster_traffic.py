"""What a relay cluster carries on NATS for liveness (issue 19, item 2): digests against one message per
heartbeat.

    .venv/bin/python bench/cluster_traffic.py [--sessions 1000] [--hold-s 30] [--heartbeat-interval 2]

Method: one nats-server and two relay processes that name each other as peers; a load generator (the
session of bench/relay_sessions.py: a signed heartbeat every interval / 2, pongs, co-signs) registers N nodes
on relay A and opens N live sessions to it. A NATS subscriber counts every message and byte on `ce.>` for
--hold-s once the sessions are up. Reference in the same run: the heartbeats relay A acknowledged meanwhile
(its /metrics), which is what the cluster carried before digests (one `ce.atlas.heartbeats` message of
~110 bytes per heartbeat). Also: how long a session that opens on A takes to show online on B
(heartbeat-to-digest propagation). The generator shares the 2 cores with both relays.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.kernels_paired import cpu_model  # noqa: E402
from bench.relay_load import ONE_ADDRESS  # noqa: E402
from bench.relay_sessions import Stats, register_nodes, session  # noqa: E402
from common.keys import NodeKey, load_or_create  # noqa: E402
from tests.nats_process import NatsProcess  # noqa: E402
from tests.relay_process import RelayProcess  # noqa: E402

OLD_HEARTBEAT_BYTES = 110  # {"node_id": 52 chars, "relay": 52 chars} as JSON, the message each heartbeat was


def metric(url: str, name: str) -> float:
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name))


def online(url: str, node_id: str) -> bool:
    with urllib.request.urlopen(f"{url}/v1/nodes/{node_id}", timeout=10) as resp:
        return bool(json.loads(resp.read())["status"]["online"])


async def measure(nats_url: str, a: RelayProcess, b: RelayProcess, keys: list[NodeKey], hold_s: float) -> None:
    import nats

    sessions = len(keys) - 1
    stats, stop = Stats(), asyncio.Event()
    url = a.url.replace("http://", "ws://") + "/v1/live"
    tasks = []
    for i, key in enumerate(keys[:-1]):
        tasks.append(asyncio.create_task(session(url, key, stats, stop, False)))
        if i % 200 == 199:
            await asyncio.sleep(0.2)
    await asyncio.sleep(8)  # every session has beaten; a first full digest went out
    counts: dict[str, list[int]] = {}

    async def count(msg: object) -> None:
        subject, data = msg.subject, msg.data  # type: ignore[attr-defined]
        row = counts.setdefault(subject, [0, 0])
        row[0] += 1
        row[1] += len(data)

    nc = await nats.connect(nats_url)
    await nc.subscribe("ce.>", cb=count)
    beats0 = metric(a.url, "ce_relay_heartbeats_total")
    await asyncio.sleep(hold_s)
    beats = metric(a.url, "ce_relay_heartbeats_total") - beats0
    await nc.close()
    late = keys[-1]  # one more session: how long until B shows it online
    t0 = time.perf_counter()
    tasks.append(asyncio.create_task(session(url, late, stats, stop, False)))
    while not await asyncio.to_thread(online, b.url, late.node_id):
        await asyncio.sleep(0.1)
    propagation_s = time.perf_counter() - t0
    stop.set()
    await asyncio.wait(tasks, timeout=30)
    liveness = counts.get("ce.atlas.live-digests", [0, 0])
    total_msgs, total_bytes = sum(r[0] for r in counts.values()), sum(r[1] for r in counts.values())
    old_msgs, old_bytes = beats / hold_s, beats * OLD_HEARTBEAT_BYTES / hold_s
    print(f"{sessions} sessions on relay A, {hold_s:.0f} s, CPU {cpu_model()}")
    print(f"  liveness now: {liveness[0] / hold_s:.2f} digests/s, {liveness[1] / hold_s / 1000:.2f} kB/s")
    print(f"  liveness before (one message per heartbeat): {old_msgs:.1f} msgs/s, {old_bytes / 1000:.2f} kB/s")
    old_total = max(beats * OLD_HEARTBEAT_BYTES, 1)
    print(f"  ratio: {liveness[0] / max(beats, 1):.4f}x the messages, {liveness[1] / old_total:.3f}x the bytes")
    per_subject = {k: v[0] for k, v in sorted(counts.items())}
    print(f"  all of ce.>: {total_msgs / hold_s:.2f} msgs/s, {total_bytes / hold_s / 1000:.2f} kB/s ({per_subject})")
    print(f"  a new session on A online on B after {propagation_s:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--hold-s", type=float, default=30.0)
    parser.add_argument("--heartbeat-interval", type=float, default=2.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        keys = [load_or_create(root / f"r{i}" / "relay.key") for i in range(2)]
        common = ["--heartbeat-interval", str(args.heartbeat_interval), "--ip-rate", "100000", *ONE_ADDRESS]
        with NatsProcess(root / "nats") as nats_server:
            relays = [RelayProcess(root / f"r{i}", *common, *nats_server.relay_args(),
                                   "--cluster-peer", keys[1 - i].node_id).start() for i in range(2)]
            try:
                pairs, _ = register_nodes(relays[0], args.sessions + 1)
                asyncio.run(measure(nats_server.url, relays[0], relays[1], [k for k, _ in pairs], args.hold_s))
            finally:
                for r in relays:
                    r.stop()


if __name__ == "__main__":
    main()
