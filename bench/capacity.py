"""What a relay cluster needs for 100k, 1M and 10M nodes (issue 19, item 4; regions: issue 32, item 5), from
costs measured here.

    .venv/bin/python bench/capacity.py --sessions-per-process 5000 [--digest-nodes 10000] [--region-nodes 100000]

Method. Every cost a relay pays for the *cluster* (not for its own sessions) is measured in-process, on the
code the relay runs, median of 5:
- a full LiveDigest of --digest-nodes nodes: bytes, and the receiver's cost (JSON, RFC 8785 + Ed25519
  verification, DigestBook.apply), per node entry;
- a LinkSample arriving over NATS: bytes, verification (two signatures) and LinkBook.add;
- a passed SGEMM roll-call Transcript (a real answer of the capsule's reactor at the roll-call target):
  bytes, its signature check, and the re-check every other relay does (web/transcripts.check_transcript:
  proofs and entries);
- a passed reference-model Transcript (the node's tokens, decoded by the reactor) and the check of its drawn
  token that an auditing relay repeats (web/proof/peer_transcripts.py, at transcript_llm_audit_fraction);
- a NodeProfile of real size arriving over NATS: bytes and verification;
- a signed Scoreboard (a region's totals) and a Beacon: one per relay per roll call / beacon interval.
Reference in the same run: the cost of one heartbeat on a relay's own session (verification of the first
one of a session is what this bench times, web/sessions/live.py), so each figure reads as "heartbeats' worth".

The rates come from RelayConfig's defaults (each named below) and two assumptions stated in ASSUMPTIONS:
how often a node's session comes or goes, and how often it re-measures. --sessions-per-process is the
measured capacity of one relay process at the ack target (bench/relay_sessions.py): the number of relay
processes is nodes / that. Two layouts: flat (every subject cluster-wide: per-relay inbound grows with the
whole network) and regional (web/cluster/regions.py: digests, link samples and transcripts stay in a region of
--region-nodes nodes; profiles, beacons and the regions' signed totals are global). bench/regions.py
measures the regional law on real servers (BENCHMARKS.md): a relay's inbound did not grow with the other
region's size. The table says which resource runs out first, and at what size.
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
from web.cluster.digests import DigestBook, DigestWriter  # noqa: E402
from web.config import RelayConfig  # noqa: E402
from web.map.links import LinkBook  # noqa: E402
from web.proof.transcripts import check_transcript, transcript_body  # noqa: E402

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
    # on the event loop (web/cluster/nats_cluster.py)
    verify_s = timed(lambda: verify_record("Transcript", json.loads(signed)))
    seconds = timed(lambda: check_transcript(json.loads(signed), random.Random(2), config))  # in a worker thread
    return {"bytes": float(len(signed)), "verify_ms": verify_s * 1e3, "recheck_ms": seconds * 1e3}


def llm_transcript_costs(reactor: Path) -> dict[str, float]:
    """A passed reference-model roll-call answer (tokens for 1.5625 s at 200 tokens/s, decoded by the reactor)
    as its Transcript, and the check of its drawn token an auditing relay repeats."""
    from common.reactor import Reactor
    from web.proof.challenges import new_llm_challenge, on_commit
    from web.proof.rollcall import stop_after_s, work_s

    config = RelayConfig()
    relay = NodeKey.generate()
    ch = new_llm_challenge(NodeKey.generate().node_id, 200.0, {"round": 1, "value": "ab" * 32}, "cd" * 16, 1.0,
                           time.perf_counter(), config, work_s(config), stop_after_s(config))
    node, checker = Reactor(reactor), Reactor(reactor)
    node.llm_begin(ch.seeds[0])
    tokens = [node.llm_next() for _ in range(ch.decode)]
    on_commit(ch, {"tokens": tokens}, time.perf_counter(), random.Random(3), config)
    signed = json.dumps(sign("Transcript", transcript_body(relay.node_id, ch, "ab" * 32, True, "passed", "counted",
                                                          True, time.time()), relay)).encode()
    checker.llm_expected(ch.seeds[0], tokens, 0)  # the model made before anything is timed
    draws = random.Random(4)
    check_s = timed(lambda: checker.llm_expected(ch.seeds[0], tokens, draws.randrange(len(tokens))), 9)
    return {"bytes": float(len(signed)), "tokens": float(len(tokens)), "check_ms": check_s * 1e3}


def small_record_bytes() -> dict[str, float]:
    """A signed Beacon and a signed regional Scoreboard, as they cross the cluster."""
    from web.mesh.messages import scoreboard_body

    relay = NodeKey.generate()
    beacon = sign("Beacon", {"v": 1, "relay": relay.node_id, "round": 123456, "value": "ab" * 32,
                             "issued_at": time.time()}, relay)
    call = {"id": "rc-123456", "beacon_round": 123456, "at": time.time(), "sessions_challenged": 10_000,
            "proven": {"nodes": 9_000, "cpu_gflops": 123456.789, "tokens_per_sec": 98765.4, "gpus": 12,
                       "gpu_tflops": 34.5}}
    board = sign("Scoreboard", {**scoreboard_body(relay.node_id, call), "region": "eu-west"}, relay)
    return {"beacon": float(len(json.dumps(beacon))), "scoreboard": float(len(json.dumps(board)))}


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
                      audit: float, region_nodes: int | None = None, sessions_per_process: int = 5000
                      ) -> dict[str, float]:
    """Cluster traffic into one relay for a network of `nodes` (messages from all other relays): bytes/s and
    CPU seconds per second, per kind. With `region_nodes`, what stays in a region (digests, link samples,
    transcripts) comes from that many nodes only; profiles, beacons and the regions' totals from all."""
    network = nodes
    nodes = min(nodes, region_nodes) if region_nodes else nodes  # the regional terms below
    relays = -(-network // sessions_per_process)
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
        # the reference model's: verified, and its drawn token checked again at transcript_llm_audit_fraction
        "transcripts (model)": (nodes * ASSUMPTIONS["model_share"] / config.roll_call_interval_s,
                                costs["llm"]["bytes"], (costs["transcript"]["verify_ms"] + min(
                                    1.0, audit / max(config.transcript_audit_fraction, 1e-9))
                                    * config.transcript_llm_audit_fraction * costs["llm"]["check_ms"]) / 1e3),
        "profiles": (network / ASSUMPTIONS["remeasure_interval_s"], costs["profile"]["bytes"],
                     costs["profile"]["verify_us"] / 1e6),
        # global, per relay: its beacon rounds and (regional layout) its signed totals of each roll call
        "beacons": (relays / config.beacon_interval_s, costs["small"]["beacon"], costs["profile"]["verify_us"] / 1e6),
        "region totals": ((relays / config.roll_call_interval_s) if region_nodes else 0.0,
                          costs["small"]["scoreboard"], costs["profile"]["verify_us"] / 1e6),
    }
    return {**{f"{k} B/s": r * b for k, (r, b, _) in rates.items()},
            **{f"{k} cpu": r * c for k, (r, _, c) in rates.items()}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions-per-process", type=int, required=True,
                        help="live sessions one relay process holds at the ack target (bench/relay_sessions.py)")
    parser.add_argument("--digest-nodes", type=int, default=10_000)
    parser.add_argument("--region-nodes", type=int, default=100_000,
                        help="nodes per region in the regional layout (web/cluster/regions.py)")
    args = parser.parse_args()
    import build

    config = RelayConfig()
    costs = {"digest": digest_costs(args.digest_nodes), "link": link_costs(),
             "transcript": transcript_costs(build.BUILD / "capsule-reactor.wasm"), "profile": profile_costs(),
             "llm": llm_transcript_costs(build.BUILD / "capsule-reactor.wasm"), "small": small_record_bytes()}
    beat = heartbeat_us()
    print(f"{cpu_model()}; {time.strftime('%Y-%m-%d')}")
    print(f"reference: one heartbeat's verification {beat:.1f} us")
    for kind, figures in costs.items():
        print(f"  {kind}: " + ", ".join(f"{k} {v:,.2f}" for k, v in figures.items()))
    print(f"  a transcript's re-check = {costs['transcript']['recheck_ms'] * 1e3 / beat:,.0f} heartbeats; "
          f"a link sample = {costs['link']['receive_us'] / beat:.1f}; a digest entry = "
          f"{costs['digest']['receive_us_per_node'] / beat:.3f}")
    print("\n| nodes | layout | relay processes | transcript audit | inbound per relay | CPU per relay for the "
          "cluster | first to run out |")
    print("|---|---|---|---|---|---|---|")
    for nodes, region, audit in [(n, r, a) for n in SIZES for r in (None, args.region_nodes) for a in AUDITS]:
        inbound = per_relay_inbound(nodes, costs, config, audit, region, args.sessions_per_process)
        layout = "flat" if region is None else f"regions of {region:,}"
        total_bytes = sum(v for k, v in inbound.items() if k.endswith("B/s"))
        cpu = {k[:-4]: v for k, v in inbound.items() if k.endswith(" cpu")}
        worst = max(cpu, key=lambda k: cpu[k])
        processes = -(-nodes // args.sessions_per_process)
        print(f"| {nodes:,} | {layout} | {processes:,} | {audit:g} | {total_bytes / 1e6:,.2f} MB/s (NATS out: "
              f"{total_bytes * processes / 1e9:,.2f} GB/s) | {sum(cpu.values()):,.2f} cores ("
              f"{', '.join(f'{k} {v:.2f}' for k, v in sorted(cpu.items(), key=lambda kv: -kv[1])[:3])}) "
              f"| {worst} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
