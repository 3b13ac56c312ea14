"""Transcript propagation between two relays of a cluster (issue 20, item 4): how long after relay A finished
a roll-call challenge relay B has it in its own trust, and what the transcripts cost NATS and relay B.

    .venv/bin/python bench/transcripts.py [--steps 0,100,1000] [--roll-calls 5]

Method: one nats-server and two relay processes that name each other as peers (roll calls every 8 s on the
shared beacon, 1 s target). One honest node (a real LiveSession with the capsule's reactor) keeps its session
with relay A and answers every challenge; per step, N more sessions on A (bench/roll_call.py's silent
sessions: they say hello, are challenged, never answer). A NATS subscriber notes when each of A's transcripts
of the honest node's roll-call challenges arrives (A publishes right after storing the result; stamped first
thing in the callback, though the silent sessions share the bench's event loop); relay B's
`GET /v1/nodes/{id}/history` is then polled every 20 ms until an event with the same nonce is there.
Propagation = B shows it - the transcript on NATS (B's re-check of the opened rows, its store write and up to
20 ms of polling); B's CPU seconds, and the roll-call transcripts of A and their bytes per roll call (over the
distinct roll calls they name), beside it. Reference
in the same run: the propagation at the first step (no other sessions). Everything shares the 2 cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.kernels_paired import cpu_model  # noqa: E402
from bench.relay_sessions import cpu_s, register_nodes  # noqa: E402
from bench.roll_call import RELAY, honest_node, silent_session  # noqa: E402
from common.keys import NodeKey, load_or_create  # noqa: E402
from tests.nats_process import NatsProcess  # noqa: E402
from tests.relay_process import RelayProcess  # noqa: E402

POLL_S = 0.02


def nonces_on(relay: RelayProcess, node_id: str) -> set[str]:
    with urllib.request.urlopen(f"{relay.url}/v1/nodes/{node_id}/history", timeout=30) as r:
        return {str(e.get("nonce")) for e in json.loads(r.read())["events"] if e["event"] == "challenge"}


async def step(nats_url: str, a: RelayProcess, a_id: str, b: RelayProcess, keys: list[NodeKey],
               honest: NodeKey, count: int) -> dict[str, float]:
    import nats

    url = a.url.replace("http://", "ws://") + "/v1/live"
    stop, challenged = asyncio.Event(), [0]
    tasks = [asyncio.create_task(silent_session(url, key, stop, challenged)) for key in keys]
    await asyncio.sleep(8 if keys else 1)  # every session said hello and beat
    arrived: asyncio.Queue[tuple[float, dict[str, Any]]] = asyncio.Queue()
    traffic = [0, 0]  # roll-call transcripts, their bytes
    calls: set[str] = set()  # the roll calls they belong to

    async def on_transcript(msg: Any) -> None:
        seen_at = time.perf_counter()  # first: the sessions share this loop
        body = json.loads(msg.data)
        if body["relay"] != a_id or not body["roll_call"]:
            return  # only A's roll calls (a session that moved to B would be measured from B's own store)
        traffic[0] += 1
        traffic[1] += len(msg.data)
        calls.add(str(body["roll_call"]))
        if body["node_id"] == honest.node_id and body["challenge"]["kind"] == "sgemm":
            await arrived.put((seen_at, body))

    nc = await nats.connect(nats_url)
    await nc.subscribe("ce.trust.transcripts", cb=on_transcript)
    assert b.proc is not None
    delays: list[float] = []
    b_cpu0, t0 = cpu_s(b.proc.pid), time.perf_counter()
    deadline = time.monotonic() + 60 + 20 * count
    while len(delays) < count and time.monotonic() < deadline:
        try:
            seen_at, body = await asyncio.wait_for(arrived.get(), timeout=max(1.0, deadline - time.monotonic()))
        except TimeoutError:
            break
        nonce = body["challenge"]["nonce"]
        while nonce not in await asyncio.to_thread(nonces_on, b, honest.node_id):
            if time.perf_counter() - seen_at > 30:
                raise SystemExit(f"relay B never showed the transcript {nonce} (30 s)")
            await asyncio.sleep(POLL_S)
        delays.append(time.perf_counter() - seen_at)
    elapsed = time.perf_counter() - t0
    b_cpu = cpu_s(b.proc.pid) - b_cpu0
    await nc.close()
    stop.set()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    per_call = max(len(calls), 1)
    return {"n": len(delays), "median_ms": statistics.median(delays) * 1e3 if delays else float("nan"),
            "max_ms": max(delays) * 1e3 if delays else float("nan"),
            "transcripts_per_call": traffic[0] / per_call, "kb_per_call": traffic[1] / per_call / 1e3,
            "b_cpu_per_s": b_cpu / elapsed}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", default="0,100,1000")
    parser.add_argument("--roll-calls", type=int, default=5)
    args = parser.parse_args()
    steps = [int(x) for x in args.steps.split(",")]
    capsule = ROOT / "build" / "capsule.wasm"
    print(f"CPU {cpu_model()}; two relays, one nats-server, the honest node and the sessions on the same cores")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ids = [load_or_create(root / f"r{i}" / "relay.key").node_id for i in range(2)]
        with NatsProcess(root / "nats") as nats_server:
            a, b = (RelayProcess(root / f"r{i}", *RELAY, *nats_server.relay_args(), "--cluster-peer", ids[1 - i])
                    for i in range(2))
            a.start(timeout=60)
            b.start(timeout=60)
            try:
                pairs, _ = register_nodes(a, max(steps) or 1)
                honest, node = honest_node(a.url, capsule, root)
                reference = None
                try:
                    for n in steps:
                        got = asyncio.run(step(nats_server.url, a, ids[0], b, [k for k, _ in pairs[:n]], honest,
                                               args.roll_calls))
                        reference = reference or got["median_ms"]
                        print(f"{n:>6} other sessions on A: {got['n']} roll-call transcripts of the honest node, on B "
                              f"{got['median_ms']:.0f} ms (median; max {got['max_ms']:.0f}) after NATS carried them "
                              f"(x{got['median_ms'] / reference:.2f} the {steps[0]}-session figure); "
                              f"{got['transcripts_per_call']:.0f} transcripts, {got['kb_per_call']:.0f} kB per roll "
                              f"call of A; relay B CPU {got['b_cpu_per_s']:.2f} s/s", flush=True)
                finally:
                    node.stop()
            finally:
                a.stop()
                b.stop()
    return 0


if __name__ == "__main__":
    threading.excepthook = lambda args: None  # a LiveSession thread ending with the relay is not news
    sys.exit(main())
