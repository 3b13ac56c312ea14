"""Challenge benchmarks (the "verified, not claimed" issue), each figure beside its reference from the same run.

    .venv/bin/python bench/relay_challenges.py [--rounds 20]

1. relay CPU to verify one SGEMM challenge (proofs + numpy recomputation of sampled entries of the opened
   rows, one BLAS thread) beside the node's CPU for the same challenge (the capsule computing and
   committing): target <= 1%; also the same with whole opened rows recomputed (the first design);
   and challenges verified per second per relay core (1 / the relay's CPU per challenge);
2. bytes on the wire per challenge (challenge, commit, open, opening, result as JSON text);
3. observed / claimed of an honest `ce-bench node` against a real relay over --rounds challenges: median and
   spread (p25-p75), on an idle machine and with both cores busy with another process (target 0.8-1.25).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from threadpoolctl import threadpool_limits  # noqa: E402

from capsule.challenge import check_entries  # noqa: E402
from host_runner.challenge_answer import SgemmAnswer  # noqa: E402
from host_runner.wasm import default_engine, load_module  # noqa: E402
from tests.relay_process import CLI, RelayProcess  # noqa: E402
from web.config import RelayConfig  # noqa: E402
from web.proof.challenges import check_opened, new_challenge, on_commit, parse_opening  # noqa: E402

REACTOR = ROOT / "build" / "capsule-reactor.wasm"
CLAIM_GFLOPS, INSTANCES, N = 45.0, 2, 1024  # this machine's whole-CPU figure and its probe's order


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def verify_cost(reps: int) -> None:
    config = RelayConfig()
    load_module(default_engine(), REACTOR)
    node_s, relay_s, full_s, wire = [], [], [], []
    beacon = {"round": 1, "value": "ab" * 32}
    for rep in range(reps):
        ch = new_challenge("node", CLAIM_GFLOPS, INSTANCES, N, beacon, f"{rep:032x}", 0.0, time.perf_counter(),
                           config)
        answer = SgemmAnswer(REACTOR, ch.seeds, ch.n, ch.reps)
        t0 = time.process_time()  # the process's CPU over all threads: both instances' work
        roots = answer.commit()
        node_s.append(time.process_time() - t0)
        challenge = ch.message(config)
        commit = {"type": "commit", "id": ch.id, "roots": roots, "leaf": answer.leaf}
        opening_request = on_commit(ch, commit, ch.sent_at + 0.5, random.Random(rep), config)
        if opening_request is None:
            raise SystemExit("an sgemm challenge must ask for an opening")
        opening = {"type": "opening", "id": ch.id, "rows": answer.open(opening_request["rows"])}
        answer.release()
        t0 = time.process_time()
        with threadpool_limits(1):
            opened = parse_opening(ch, opening, ch.sent_at + 0.6, config)
            check_opened(ch, opened, random.Random(rep), config)
        relay_s.append(time.process_time() - t0)
        t0 = time.process_time()
        with threadpool_limits(1):  # whole rows: every column, which needs all of B_t
            for instance, rows in opened.items():
                for leaf, values in rows.items():
                    check_entries(ch.seeds[instance], ch.n, leaf, values, range(ch.n))
        full_s.append(time.process_time() - t0)
        result = {"type": "challenge_result", "id": ch.id, "passed": True, "code": "passed", "detail": "x" * 60,
                  "observed_gflops": 40.0}
        wire.append(sum(len(json.dumps(m)) for m in (challenge, commit, opening_request, opening, result)))
    node, relay, full = statistics.median(node_s), statistics.median(relay_s), statistics.median(full_s)
    print(f"1. one challenge, {ch.reps} products of n={ch.n} x {INSTANCES} instances (sized for {CLAIM_GFLOPS} "
          f"GFLOP/s): node CPU {node * 1000:.0f} ms, relay CPU {relay * 1000:.1f} ms (median of {reps}) -> "
          f"relay/node = {100 * relay / node:.2f}% (target <= 1%)")
    print(f"   whole rows recomputed instead: relay CPU {full * 1000:.1f} ms -> {100 * full / node:.2f}%")
    print(f"   challenges verified per second per relay core: {1 / relay:.0f}")
    print(f"2. bytes on the wire per challenge: {statistics.median(wire):,.0f} (median; the opening is "
          f"{len(json.dumps(opening)):,} of them)")


def honest_ratios(rounds: int, busy: int) -> tuple[float, float, float, int]:
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    try:
        with tempfile.TemporaryDirectory() as tmp, RelayProcess(
                Path(tmp) / "relay", "--challenge-first-after", "1", "--challenge-interval-unverified", "1",
                "--heartbeat-interval", "0.5", "--beacon-interval", "1", "--roll-call-interval-s", "5",
                "--roll-call-min-gap-s", "5") as relay:  # once verified, roll calls challenge it
            log = Path(tmp) / "node.log"
            with open(log, "wb") as out:
                node = subprocess.Popen([CLI, "node", "--relay", relay.url, "--no-gpu", "--no-jitter", "--budget-ms",
                                         "1000"], stdout=out, stderr=out, cwd=tmp,
                                        env=dict(os.environ, CE_BENCH_HOME=str(Path(tmp) / "home")))
            try:
                while "ce-bench node: " not in log.read_text():
                    time.sleep(0.2)
                node_id = log.read_text().split("ce-bench node: ")[1].split(" ->")[0]
                deadline = time.monotonic() + 600
                while True:
                    status, body, _ = relay.get(f"/v1/nodes/{node_id}/history")
                    events = [e for e in (body or {}).get("events", []) if e["event"] == "challenge"]
                    if status == 200 and len(events) >= rounds or time.monotonic() > deadline:
                        break
                    time.sleep(1)
            finally:
                node.terminate()
                node.wait(timeout=30)
    finally:
        for h in hogs:
            h.kill()
    ratios = sorted(e["observed_gflops"] / e["claimed_gflops"] for e in events if e["passed"])
    q = statistics.quantiles(ratios, n=4) if len(ratios) >= 2 else [ratios[0]] * 3
    return statistics.median(ratios), q[0], q[2], len(events) - len(ratios)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    print(f"CPU: {cpu_model()}, {os.cpu_count()} logical CPUs; {time.strftime('%Y-%m-%d')}")
    verify_cost(args.reps)
    for busy in (0, 2):
        median, p25, p75, failed = honest_ratios(args.rounds, busy)
        print(f"3. honest node, {busy} busy processes: observed/claimed median {median:.2f} (p25 {p25:.2f}, "
              f"p75 {p75:.2f}) over {args.rounds} challenges, {failed} failed (target 0.8-1.25)")


if __name__ == "__main__":
    main()
