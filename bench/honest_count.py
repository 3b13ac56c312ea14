"""What an honest node counts at roll calls, quiet and busy, beside what it can do (issue 29).

    .venv/bin/python bench/honest_count.py [--roll-calls 50] [--busy-roll-calls 50]

Method. One relay (a roll call every 10 s: beacon rounds every 1 s, target 1 s, deadline 1.25 s). One honest
node: `ce-bench run`'s own measurement (host_runner/node.py measure, --budget-ms 500) registered as it came
out, claim = its measured GFLOP/s, and a LiveSession answering with the capsule's reactor, as `ce-bench node`
does. Quiet: the counted figure (GET /v1/nodes/{id}: trust.counted after each roll call) over the claim, for
each roll call; the honest false-reject rate is the share of roll calls at which it counted below 0.9 of its
claim (after_deadline answers included), and beside it counted over what it could do then: the lesser of the
claim and the reference below, measured before each roll call on the quiet machine. Busy: a busy loop per
core (nice 0) starts after the node measured; the reference is what the node's own instances do under the
same load, measured between roll calls by the whole-CPU SGEMM run (host_runner/cpu.py whole_cpu_run, the
claim's instance count): counted over that reference, per roll call. Prints medians with the 5th percentile
and the share of roll calls at >= 0.9 (quiet) and >= 0.8 (busy); the CPU model with the figures.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from capsule.scaling import window_rate, work_spans  # noqa: E402
from common.keys import NodeKey  # noqa: E402
from host_runner.cpu import whole_cpu_run  # noqa: E402
from host_runner.live_client import LiveSession  # noqa: E402
from tests.relay_process import RelayProcess  # noqa: E402

# A roll call every 10 s, the reference-model phase 4 s after the SGEMM one: under load the reference model's
# answer takes ~3 s, and at 6 s apart it was still in flight at 3 of 20 roll calls ("busy": not asked). The
# defaults are 200 s and 32 s.
RELAY = ["--ip-rate", "1000000", "--log-level", "warning", "--beacon-interval", "1", "--roll-call-interval-s", "10",
         "--roll-call-min-gap-s", "10", "--roll-call-llm-offset-s", "4", "--roll-call-target-s", "1"]


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def node_view(relay: RelayProcess, node_id: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{relay.url}/v1/nodes/{node_id}", timeout=30) as r:
        return dict(json.loads(r.read()))


def roll_call_ids(relay: RelayProcess) -> list[str]:
    with urllib.request.urlopen(relay.url + "/v1/roll-calls?limit=1000", timeout=30) as r:
        return [c["id"] for c in json.loads(r.read())["roll_calls"]]


def after_each_roll_call(relay: RelayProcess, node_id: str, count: int,
                         between: Any = None) -> Iterator[tuple[float, dict[str, Any], float | None]]:
    """For the next `count` roll calls, once each answer is judged: the GFLOP/s it counted (0: the roll call did
    not count the node: a late or failed answer drops its proof), the relay's view of the node then, and the
    reference `between()` measured just before."""
    seen = set(roll_call_ids(relay))
    reference: float | None = None
    deadline, done = time.monotonic() + count * 20 + 60, 0
    while done < count and time.monotonic() < deadline:
        if between is not None and reference is None:
            reference = between()
        time.sleep(0.5)
        fresh = [c for c in roll_call_ids(relay) if c not in seen]
        if not fresh:
            continue
        seen.update(fresh)
        time.sleep(2.5)  # the answer is in (deadline 1.25 s, opening and check)
        view = node_view(relay, node_id)
        counted = view["trust"]["counted"]
        yield float(counted["cpu_gflops"]) if counted.get("roll_call") == fresh[0] else 0.0, view, reference
        done, reference = done + 1, None


def counted_per_roll_call(relay: RelayProcess, node_id: str, count: int,
                          between: Any = None) -> list[tuple[float, float | None]]:
    """(counted GFLOP/s, the reference measured just before) for the next `count` roll calls."""
    return [(counted, reference) for counted, _, reference in after_each_roll_call(relay, node_id, count, between)]


def challenges_by_outcome(events: list[dict[str, Any]]) -> dict[str, int]:
    """A node's history events counted as "roll call|solo KIND: CODE"."""
    codes: dict[str, int] = {}
    for e in events:
        if e.get("event") == "challenge":
            what = f"{'roll call' if e.get('roll_call') else 'solo'} {e.get('kind')}: {e.get('code')}"
            codes[what] = codes.get(what, 0) + 1
    return codes


def measured_profile(relay: RelayProcess, key: NodeKey, capsule: Path, scratch: Path, gpu: bool) -> dict[str, Any]:
    """`ce-bench run`'s own measurement of this machine (host_runner/node.py measure, 500 ms phases), signed by
    key against the relay's beacon, as it came out."""
    from host_runner.node import RunOptions, measure
    from host_runner.relay_client import fetch_beacon

    opts = RunOptions(capsule=capsule, phase_budget_ms=500, gpu=gpu, jitter=False, scratch=scratch)
    return dict(measure(key, fetch_beacon(relay.url), opts).profile)


def spin() -> None:
    while True:
        pass


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--roll-calls", type=int, default=50)
    parser.add_argument("--busy-roll-calls", type=int, default=50)
    args = parser.parse_args()
    capsule = ROOT / "build" / "capsule.wasm"
    print(f"{cpu_model()}, {os.cpu_count()} CPUs; {time.strftime('%Y-%m-%d')}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        relay = RelayProcess(Path(tmp) / "relay", *RELAY).start()
        try:
            from host_runner.relay_client import post_profile

            key = NodeKey.generate()
            profile = measured_profile(relay, key, capsule, Path(tmp), gpu=False)
            post_profile(relay.url, profile)
            claim, instances = float(profile["cpu"]["gflops_fp32"]), int(profile["cpu"]["cores"])
            session = LiveSession(relay.url, key, reactor_wasm=capsule.with_name("capsule-reactor.wasm")).start()
            try:
                time.sleep(10)  # hello, first solo challenges

                def reference() -> float:
                    run = whole_cpu_run(capsule, "ab" * 16, ("sgemm",), instances, 400)
                    rate = window_rate([work_spans(r, "sgemm") for r in run.reports]).rate
                    return (rate or 0.0) / 1e9

                rows = counted_per_roll_call(relay, key.node_id, args.roll_calls, reference)
                quiet = [c / claim for c, _ in rows]
                # "what it can do": the claim, or less where the machine did less just before (these VMs swing
                # 20-40% from one minute to the next); counted is capped at the claim
                can = [c / min(claim, r) for c, r in rows if r]
                print(f"quiet: claim {claim:.1f} GFLOP/s on {instances} instance(s); counted / claim over "
                      f"{len(quiet)} roll calls: median {statistics.median(quiet):.3f}, 5th percentile "
                      f"{pct(quiet, 0.05):.3f}, min {min(quiet):.3f}; at >= 0.9: "
                      f"{sum(q >= 0.9 for q in quiet)}/{len(quiet)} (false-reject rate "
                      f"{sum(q < 0.9 for q in quiet) / len(quiet):.3f})", flush=True)
                print(f"quiet: counted / what it could do (min of the claim and its instances' SGEMM measured "
                      f"before each roll call) over {len(can)}: median {statistics.median(can):.3f}, 5th percentile "
                      f"{pct(can, 0.05):.3f}, min {min(can):.3f}; at >= 0.9: {sum(q >= 0.9 for q in can)}/{len(can)}; "
                      f"reference median {statistics.median(r for _, r in rows if r):.1f} GFLOP/s", flush=True)
                if args.busy_roll_calls:
                    spinners = [multiprocessing.Process(target=spin, daemon=True) for _ in range(os.cpu_count() or 1)]
                    for s in spinners:
                        s.start()
                    try:
                        busy = counted_per_roll_call(relay, key.node_id, args.busy_roll_calls, reference)
                    finally:
                        for s in spinners:
                            s.terminate()
                    ratios = [c / r for c, r in busy if r]
                    print(f"busy (a busy loop per core): counted / what its instances did under the same load "
                          f"(measured before each roll call) over {len(ratios)} roll calls: median "
                          f"{statistics.median(ratios):.3f}, 5th percentile {pct(ratios, 0.05):.3f}, min "
                          f"{min(ratios):.3f}; at >= 0.8: {sum(q >= 0.8 for q in ratios)}/{len(ratios)}; counted 0 at "
                          f"{sum(c == 0 for c, _ in busy)}; reference median "
                          f"{statistics.median(r for _, r in busy if r):.1f} GFLOP/s", flush=True)
                with urllib.request.urlopen(f"{relay.url}/v1/nodes/{key.node_id}/history?limit=500", timeout=30) as r:
                    events = json.loads(r.read())["events"]
                codes = challenges_by_outcome(events)
                with urllib.request.urlopen(relay.url + "/v1/roll-calls?limit=1000", timeout=30) as r:
                    failures: dict[str, int] = {}
                    for c in json.loads(r.read())["roll_calls"]:
                        for code in c["failure_codes"]:
                            failures[code] = failures.get(code, 0) + 1
                with urllib.request.urlopen(relay.url + "/metrics", timeout=30) as r:
                    withdrawn = next((line.split()[-1] for line in r.read().decode().splitlines()
                                      if line.startswith("ce_relay_challenges_withdrawn_total ")), "?")
                print(f"the node's challenges by outcome: {codes}; roll calls naming each failure code: {failures}; "
                      f"solo challenges withdrawn for a roll call: {withdrawn}")
                flagged = node_view(relay, key.node_id)["trust"]["status"] == "flagged"
                print(f"trust at the end: {node_view(relay, key.node_id)['trust']['status']} (flagged: {flagged})")
            finally:
                session.stop()
        finally:
            relay.stop()
    return 0


if __name__ == "__main__":
    threading.excepthook = lambda args: None  # a LiveSession thread ending with the relay is not news
    sys.exit(main())
