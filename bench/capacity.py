"""What a relay cluster needs for 100k, 1M and 10M nodes (issue 19, item 4), from costs measured here.

    .venv/bin/python bench/capacity.py --sessions-per-process 5000 [--digest-nodes 10000]

Method. Every cost a relay pays for the *cluster* (not for its own sessions) is measured in-process, on the
code the relay runs, median of 5:
- a full LiveDigest of --digest-nodes nodes: bytes, and the receiver's cost (JSON, RFC 8785 + Ed25519
  verification, DigestBook.apply), per node entry;
- a LinkSample arriving over NATS: bytes, verification (two signatures) and LinkBook.add;
- a passed SGEMM roll-call Transcript (a real answer of the capsule's reactor at the roll-call target):
  bytes, its signature check, and the re-check every other relay does (web/transcripts.check_transcript:
  proofs and entries);
- a NodeProfile of real size arriving over NATS: bytes and verification.
Reference in the same run: the cost of one heartbeat on a relay's own session (verification of the first
one of a session is what this bench times, web/live.py), so each figure reads as "heartbeats' worth".

The rates come from RelayConfig's defaults (each named below) and two assumptions stated in ASSUMPTIONS:
how often a node's session comes or goes, and how often it re-measures. --sessions-per-process is the
measured capacity of one relay process at the ack target (bench/relay_sessions.py): the number of relay
processes is nodes / that. Every relay receives every other relay's cluster traffic (all subjects are
cluster-wide today), so per-relay inbound grows with the whole network, not with its share: the table says
which resource runs out first, and at what size.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.kernels_paired import cpu_model  # noqa: E402
from capsule.signing import sign, verify_record  # noqa: E402
from common.keys import NodeKey  # noqa: E402
from tests.samples import sample_profile  # noqa: E402
from tests.transcripts import answered_transcript  # noqa: E402
from web.config import RelayConfig  # noqa: E402
from web.digests import DigestBook, DigestWriter  # noqa: E402
from web.links import LinkBook  # noqa: E402
from web.transcripts import check_transcript  # noqa: E402

# Stated, not measured here: change them and the table follows.
ASSUMPTIONS = {
    "session_lifetime_s": 1800.0,   # a phone's session comes and goes every ~30 min on average (churn)
    "remeasure_interval_s": 86400.0,  # a node posts a new profile once a day
    "model_share": 1.0,  # share of nodes that claim tokens/s (a reference-model transcript per roll call)
}
SIZES = (100_000, 1_000_000, 10_000_000)
AUDITS = (1.0, 0.02)  # every transcript re-checked (the default), and one in fifty


def timed(fn: Callable[[], Any], repeat: int = 5) -> float:
    """Median seconds of `repeat` calls."""
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def digest_costs(nodes: int) -> dict[str, float]:
    relay, peer = NodeKey.generate(), NodeKey.generate()
    ids = [NodeKey.generate().node_id for _ in range(nodes)]
    now = time.time()
    body = DigestWriter(relay.node_id, 6, int(now * 1000)).next({n: int(now) for n in ids}, now)
    assert body is not None
    wire = json.dumps(sign("LiveDigest", body, relay)).encode()

    def receive() -> None:
        book = DigestBook(frozenset({relay.node_id, peer.node_id}), 120.0)
        outcome, _ = book.apply(verify_record("LiveDigest", json.loads(wire)), time.time())
        if outcome != "applied":
            raise RuntimeError(f"the digest was not applied: {outcome}")

    seconds = timed(receive)
    return {"bytes_per_node": len(wire) / nodes, "receive_us_per_node": seconds / nodes * 1e6}


def link_costs() -> dict[str, float]:
    relay, a, b = NodeKey.generate(), NodeKey.generate(), NodeKey.generate()
    body = {"a": a.node_id, "b": b.node_id, "rtt_ms": 12.5, "jitter_ms": 0.4, "loss": 0.0, "bw_mbps": None,
            "measured_at": int(time.time())}
    wire = json.dumps(sign("LinkSample", sign("LinkSample", body, a, "sig_a"), b, "sig_b")).encode()
    book = LinkBook(relay.node_id, RelayConfig())

    def receive() -> None:
        sample = json.loads(wire)
        verify_record("LinkSample", sample)
        book.add(sample, book.judge(sample))

    return {"bytes": float(len(wire)), "receive_us": timed(receive, 50) * 1e6}


def transcript_costs(reactor: Path) -> dict[str, float]:
    """A passed roll-call SGEMM challenge, answered by the capsule's reactor, as its Transcript."""
    config = RelayConfig()
    relay = NodeKey.generate()
    body = answered_transcript(reactor, relay.node_id, NodeKey.generate().node_id, 40.0, 2, config.roll_call_target_s)
    signed = json.dumps(sign("Transcript", body, relay)).encode()
    verify_s = timed(lambda: verify_record("Transcript", json.loads(signed)))  # on the event loop (web/cluster.py)
    seconds = timed(lambda: check_transcript(json.loads(signed), random.Random(2), config))  # in a worker thread
    return {"bytes": float(len(signed)), "verify_ms": verify_s * 1e3, "recheck_ms": seconds * 1e3}


def profile_costs() -> dict[str, float]:
    _, profile = sample_profile()
    wire = json.dumps(profile).encode()
    return {"bytes": float(len(wire)), "verify_us": timed(lambda: verify_record("NodeProfile", json.loads(wire)),
                                                          20) * 1e6}


def heartbeat_us() -> float:
    key = NodeKey.generate()
    beat = sign("Heartbeat", {"node_id": key.node_id, "session": "ab" * 16, "seq": 1, "sent_at": 1}, key)
    wire = json.dumps({"type": "heartbeat", "heartbeat": beat})
    return timed(lambda: verify_record("Heartbeat", json.loads(wire)["heartbeat"]), 200) * 1e6


def per_relay_inbound(nodes: int, costs: dict[str, dict[str, float]], config: RelayConfig,
                      audit: float) -> dict[str, float]:
    """Cluster traffic into one relay for a network of `nodes` (messages from all other relays): bytes/s and
    CPU seconds per second, per kind."""
    interval = config.heartbeat_interval_s
    full_every_s = interval * config.digest_full_every
    churn = nodes / ASSUMPTIONS["session_lifetime_s"]  # sessions opening (and as many closing) per second
    rates = {  # (entries or messages per second, bytes each, CPU seconds each)
        "digests (full)": (nodes / full_every_s, costs["digest"]["bytes_per_node"],
                           costs["digest"]["receive_us_per_node"] / 1e6),
        "digests (changes)": (2 * churn, costs["digest"]["bytes_per_node"],
                              costs["digest"]["receive_us_per_node"] / 1e6),
        # each node offers a peer probe every peer_probe_interval_s: one co-signed sample per probe
        "link samples (peer probes)": (nodes / config.peer_probe_interval_s, costs["link"]["bytes"],
                                       costs["link"]["receive_us"] / 1e6),
        # each node is probed by the other landmarks every landmark interval (600 s, host_runner default)
        "link samples (landmarks)": (nodes * 2 / 600.0, costs["link"]["bytes"], costs["link"]["receive_us"] / 1e6),
        # every node answers SGEMM at every roll call: every relay verifies its transcript and re-checks the work
        # of the share `audit` (--transcript-audit-fraction)
        "transcripts (SGEMM)": (nodes / config.roll_call_interval_s, costs["transcript"]["bytes"],
                                (costs["transcript"]["verify_ms"] + audit * costs["transcript"]["recheck_ms"]) / 1e3),
        # the reference model's: verified only (nothing to recompute); an SGEMM one's size and check bound it
        "transcripts (model)": (nodes * ASSUMPTIONS["model_share"] / config.roll_call_interval_s,
                                costs["transcript"]["bytes"], costs["transcript"]["verify_ms"] / 1e3),
        "profiles": (nodes / ASSUMPTIONS["remeasure_interval_s"], costs["profile"]["bytes"],
                     costs["profile"]["verify_us"] / 1e6),
    }
    return {**{f"{k} B/s": r * b for k, (r, b, _) in rates.items()},
            **{f"{k} cpu": r * c for k, (r, _, c) in rates.items()}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions-per-process", type=int, required=True,
                        help="live sessions one relay process holds at the ack target (bench/relay_sessions.py)")
    parser.add_argument("--digest-nodes", type=int, default=10_000)
    args = parser.parse_args()
    import build

    config = RelayConfig()
    costs = {"digest": digest_costs(args.digest_nodes), "link": link_costs(),
             "transcript": transcript_costs(build.BUILD / "capsule-reactor.wasm"), "profile": profile_costs()}
    beat = heartbeat_us()
    print(f"{cpu_model()}; {time.strftime('%Y-%m-%d')}")
    print(f"reference: one heartbeat's verification {beat:.1f} us")
    for kind, figures in costs.items():
        print(f"  {kind}: " + ", ".join(f"{k} {v:,.2f}" for k, v in figures.items()))
    print(f"  a transcript's re-check = {costs['transcript']['recheck_ms'] * 1e3 / beat:,.0f} heartbeats; "
          f"a link sample = {costs['link']['receive_us'] / beat:.1f}; a digest entry = "
          f"{costs['digest']['receive_us_per_node'] / beat:.3f}")
    print("\n| nodes | relay processes | transcript audit | inbound per relay | CPU per relay for the cluster "
          "| first to run out |")
    print("|---|---|---|---|---|---|")
    for nodes in SIZES:
        for audit in AUDITS:
            inbound = per_relay_inbound(nodes, costs, config, audit)
            total_bytes = sum(v for k, v in inbound.items() if k.endswith("B/s"))
            cpu = {k[:-4]: v for k, v in inbound.items() if k.endswith(" cpu")}
            worst = max(cpu, key=lambda k: cpu[k])
            processes = -(-nodes // args.sessions_per_process)
            print(f"| {nodes:,} | {processes:,} | {audit:g} | {total_bytes / 1e6:,.2f} MB/s (NATS out: "
                  f"{total_bytes * processes / 1e9:,.2f} GB/s) | {sum(cpu.values()):,.2f} cores ("
                  f"{', '.join(f'{k} {v:.2f}' for k, v in sorted(cpu.items(), key=lambda kv: -kv[1])[:3])}) "
                  f"| {worst} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
