"""Relay benchmarks (the relay issue), each figure beside its reference from the same run.

    .venv/bin/python bench/relay_ingest.py [--nodes 100000]

1. sustained ingest: signed profiles (~7.5 KB each, shaped like bench/fixtures/real_profile.json) posted
   by 32 keep-alive connections to one relay process until `--nodes` nodes are stored; reference: the same profiles
   verified in-process (schema + Ed25519 + RFC 8785), without HTTP or storage — the ratio is what HTTP,
   durable storage and the event loop cost;
2. latency at 500 profiles/s (open loop): p50/p99;
3. GET /stats with --nodes live nodes: p99 (reference: GET /beacon, a constant document);
4. propagation between two relays through NATS: time from a 201 at relay A to the profile being served
   by relay B, p50/p99 over 200 profiles.
The load generator shares the 2 cores with the relay, so every figure is a lower bound for the relay.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.relay_load import get_request, pct, post_request, run_closed_loop, run_open_loop  # noqa: E402
from capsule.signing import sign, verify_record  # noqa: E402
from common.keys import NodeKey  # noqa: E402
from tests.nats_process import NatsProcess  # noqa: E402
from tests.relay_process import RelayProcess  # noqa: E402
from tests.samples import sample_profile  # noqa: E402

REAL_PROFILE = ROOT / "bench" / "fixtures" / "real_profile.json"  # `ce-bench run`, AMD EPYC 9xx4, 2026-12-03


def make_profiles(beacon: dict[str, Any], n: int) -> list[bytes]:
    """Profiles of the size and shape of a real run (the fixture's evidence, GPUs and all), each re-signed by
    its own key and citing the relay's beacon."""
    template = json.loads(REAL_PROFILE.read_text())
    cited = {k: beacon[k] for k in ("relay", "round", "value")}
    out = []
    for _ in range(n):
        key = NodeKey.generate()
        body = {**{k: v for k, v in template.items() if k != "sig"}, "node_id": key.node_id, "beacon": cited,
                "measured_at": int(time.time())}
        body["evidence"] = {**template["evidence"], "plan": {**template["evidence"]["plan"],
                                                             "seed": secrets.token_hex(32)}}
        out.append(json.dumps(sign("NodeProfile", body, key)).encode())
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--verify-workers", type=int, default=0, help="the relay's --verify-workers")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        relay = RelayProcess(tmp / "relay", "--ip-rate", "1000000", "--heartbeat-interval", "3600",
                             "--log-level", "warning", "--verify-workers", str(args.verify_workers)).start()
        try:
            with urllib.request.urlopen(relay.url + "/beacon") as r:
                beacon = json.loads(r.read())
            t0 = time.perf_counter()
            bodies = make_profiles(beacon, args.nodes + 2000)
            print(f"generated {len(bodies)} signed profiles ({len(bodies[0])} B each) in "
                  f"{time.perf_counter() - t0:.0f} s", file=sys.stderr)
            sample = bodies[:2000]
            t0 = time.perf_counter()
            for body in sample:
                verify_record("NodeProfile", json.loads(body))
            verify_rate = len(sample) / (time.perf_counter() - t0)

            reqs = [post_request("127.0.0.1", relay.port, "/v1/profiles", body) for body in bodies[2000:]]
            lat, statuses, wall = asyncio.run(run_closed_loop("127.0.0.1", relay.port, reqs, 32))
            ok = sum(1 for s in statuses if s == 201)
            ingest_rate = ok / wall
            print(f"ingest: {ok}/{len(reqs)} stored in {wall:.1f} s = {ingest_rate:.0f} profiles/s; in-process "
                  f"verification alone {verify_rate:.0f}/s; ratio {ingest_rate / verify_rate:.2f} "
                  f"(target >= 2000 profiles/s)")

            paced = [post_request("127.0.0.1", relay.port, "/v1/profiles", body) for body in sample]
            lat500, st500 = asyncio.run(run_open_loop("127.0.0.1", relay.port, paced, 500.0, 64))
            print(f"at 500 profiles/s: p50 {pct(lat500, 0.5) * 1000:.1f} ms, p99 {pct(lat500, 0.99) * 1000:.1f} ms "
                  f"over {len(lat500)} ({sum(1 for s in st500 if s == 201)} stored) (target p99 <= 50 ms)")

            with urllib.request.urlopen(relay.url + "/stats") as r:
                live = json.loads(r.read())["nodes"]
            gets = [get_request("127.0.0.1", relay.port, "/stats")] * 5000
            lat_stats, _, _ = asyncio.run(run_closed_loop("127.0.0.1", relay.port, gets, 1))
            beacons = [get_request("127.0.0.1", relay.port, "/beacon")] * 5000
            lat_beacon, _, _ = asyncio.run(run_closed_loop("127.0.0.1", relay.port, beacons, 1))
            print(f"GET /stats with {live} live nodes: p50 {pct(lat_stats, 0.5) * 1000:.2f} ms, p99 "
                  f"{pct(lat_stats, 0.99) * 1000:.2f} ms; GET /beacon p99 {pct(lat_beacon, 0.99) * 1000:.2f} ms; "
                  f"ratio {pct(lat_stats, 0.99) / pct(lat_beacon, 0.99):.2f} (target p99 <= 5 ms)")
        finally:
            relay.stop()

        nats = NatsProcess(tmp / "nats").start()
        a = RelayProcess(tmp / "a", *nats.relay_args(), "--ip-rate", "100000", "--log-level", "warning").start()
        b = RelayProcess(tmp / "b", *nats.relay_args(), "--ip-rate", "100000", "--log-level", "warning").start()
        try:
            _, beacon, _ = a.get("/beacon")
            delays = []
            for _ in range(200):
                key, p = sample_profile(beacon=beacon)
                assert a.post("/v1/profiles", p)[0] == 201
                t0 = time.perf_counter()
                while b.get(f"/v1/nodes/{key.node_id}")[0] != 200:
                    if time.perf_counter() - t0 > 5:
                        break
                delays.append(time.perf_counter() - t0)
            print(f"propagation A -> NATS -> B (until B serves it): p50 {pct(delays, 0.5) * 1000:.1f} ms, "
                  f"p99 {pct(delays, 0.99) * 1000:.1f} ms over {len(delays)} (target p99 <= 200 ms)")
        finally:
            a.stop()
            b.stop()
            nats.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
