"""Tokens/s of identities of one machine against one honest node, on one relay, on a two-relay cluster and
across two regions (issue 45).

    .venv/bin/python bench/tokens_identities.py [--roll-calls 4] [--cases one,cluster,regions]

Method. A real profile of this machine (`ce-bench run`'s measurement, 500 ms phases): its reference-model claim
is aggregate decode throughput over `llm.streams` streams. Roll calls every 6 s (the reference-model phase 3 s
after the SGEMM one; SGEMM claimed at 0.6 of the machine, since tokens count beside an SGEMM proof). The
reference, measured in the same run: one honest node (that profile, a LiveSession answering every stream on
the capsule's reactor, as `ce-bench node` does), its counted tokens/s at each roll call. Then 2 and 4 identities
of the same machine, each claiming one stream at the one-stream rate (what a node of one stream honestly
claims), answering at once: the sum of their counted tokens/s per roll call that asked them all. On one relay,
then on two relays of a NATS cluster, then on two regions (identities split between them; every nats-server
with authorization, each relay its own user, as deployed). Prints each roll
call's figure, the median and the ratio to the honest node's median; the Done-when: identities <= 1.25x,
honest >= 0.9 of its claim. The CPU model and date with the figures.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common.keys import NodeKey, load_or_create  # noqa: E402
from host_runner.live_client import LiveSession  # noqa: E402
from host_runner.node import RunOptions, measure  # noqa: E402
from host_runner.relay_client import local_beacon  # noqa: E402
from tests.nats_process import NatsProcess  # noqa: E402
from tests.nats_regions import NatsRegions  # noqa: E402
from tests.relay_process import RelayProcess, start_all  # noqa: E402
from tests.resigned import register  # noqa: E402

ROLL = ["--challenge-first-after", "1", "--challenge-interval-unverified", "1", "--heartbeat-interval", "0.5",
        "--beacon-interval", "1", "--roll-call-target-s", "1", "--roll-call-interval-s", "6",
        "--roll-call-min-gap-s", "6", "--roll-call-llm-offset-s", "3", "--ip-rate", "1000"]
REACTOR = ROOT / "build" / "capsule-reactor.wasm"


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def registered(relay: RelayProcess, measured: dict[str, Any], llm: dict[str, Any]) -> NodeKey:
    return register(relay.url, measured, llm=llm, cpu={"gflops_fp32": 0.6 * measured["cpu"]["gflops_fp32"]})


def counted_per_roll_call(homes: list[tuple[RelayProcess, NodeKey]], roll_calls: int,
                          within_s: float) -> list[float]:
    """The identities' counted tokens/s summed per roll call (each read at its home relay: trust.proven, the
    last value seen while that roll call was the latest), over the first `roll_calls` that proved them all,
    after the first one (whose reference-model phase may predate the sessions)."""
    seen: dict[str, dict[str, float]] = {}
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        for relay, key in homes:
            proven = relay.get(f"/v1/nodes/{key.node_id}")[1]["trust"].get("proven")
            if proven:
                seen.setdefault(str(proven["roll_call"]), {})[key.node_id] = float(proven["tokens_per_sec"] or 0)
        complete = [rc for rc, by in seen.items() if len(by) == len(homes)]
        if len(complete) >= roll_calls + 2:  # the first may be partial, the latest still counting
            break
        time.sleep(0.4)
    order = sorted(seen, key=lambda rc: int(rc.split("-")[0]))
    complete = [rc for rc in order if len(seen[rc]) == len(homes)][1:-1]
    return [round(sum(seen[rc].values()), 1) for rc in complete[:roll_calls]]


def scenario(homes: list[RelayProcess], measured: dict[str, Any], llm: dict[str, Any], streams: int,
             roll_calls: int) -> list[float]:
    keys = [(relay, registered(relay, measured, llm)) for relay in homes]
    sessions = [LiveSession(relay.url, key, reactor_wasm=REACTOR, warm_llm=streams).start() for relay, key in keys]
    try:
        return counted_per_roll_call(keys, roll_calls, 60 + 12 * roll_calls)
    finally:
        for s in sessions:
            s.stop()


def report(name: str, figures: list[float], honest: float) -> None:
    median = statistics.median(figures) if figures else float("nan")
    print(f"  {name:34} {figures}  median {median:.1f}  = {median / honest:.2f}x the honest node  "
          f"(max {max(figures or [0]) / honest:.2f}x)")


def run(relays: list[RelayProcess], measured: dict[str, Any], roll_calls: int) -> None:
    llm = measured["llm"]
    one, streams = llm["tokens_per_sec_one_stream"], llm["streams"]
    honest = scenario(relays[:1], measured, {}, streams, roll_calls)
    h = statistics.median(honest)
    print(f"  {'honest node, ' + str(streams) + ' streams':34} {honest}  median {h:.1f} = "
          f"{h / llm['tokens_per_sec']:.2f} of its claim {llm['tokens_per_sec']:.1f} (the reference)")
    for k in (2, 4):
        homes = [relays[i % len(relays)] for i in range(k)]
        report(f"{k} identities of one stream each", scenario(homes, measured, {"streams": 1, "tokens_per_sec": one},
                                                              1, roll_calls), h)


def run_pair(base: Path, name: str, nats_args: Callable[[int], list[str]], measured: dict[str, Any],
             roll_calls: int) -> None:
    """run() on two relays that name each other as peers, relay i on the NATS options nats_args(i)."""
    keys = [load_or_create(base / f"{name}{i}" / "relay.key") for i in range(2)]
    relays = start_all([RelayProcess(base / f"{name}{i}", *ROLL, *nats_args(i), "--cluster-peer", keys[1 - i].node_id)
                        for i in range(2)])
    try:
        run(relays, measured, roll_calls)
    finally:
        for r in relays:
            r.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--roll-calls", type=int, default=4)
    parser.add_argument("--cases", default="one,cluster,regions",
                        help="which of one,cluster,regions to run (comma-separated; default all)")
    args = parser.parse_args()
    cases = set(args.cases.split(","))
    with tempfile.TemporaryDirectory(prefix="tokens-identities-") as tmp:
        base = Path(tmp)
        key = NodeKey.generate()
        measured = dict(measure(key, local_beacon(key), RunOptions(
            capsule=ROOT / "build" / "capsule.wasm", phase_budget_ms=500, gpu=False, jitter=False,
            scratch=base)).profile)
        llm = measured["llm"]
        print(f"{time.strftime('%Y-%m-%d')}  {cpu_model()}  profile: {llm['tokens_per_sec']:.1f} tokens/s over "
              f"{llm['streams']} streams, one stream {llm['tokens_per_sec_one_stream']:.1f}")
        if "one" in cases:
            print("one relay:")
            with RelayProcess(base / "one", *ROLL) as relay:
                run([relay], measured, args.roll_calls)
        # the cluster and the regions as deployed: authorization on every server, each relay its own user
        if "cluster" in cases:
            print("two relays of a NATS cluster with authorization (identities split between them):")
            with NatsProcess(base / "nats", users=["relay-c0", "relay-c1"]) as nats:
                run_pair(base, "c", lambda i: nats.relay_args(f"relay-c{i}"), measured, args.roll_calls)
        if "regions" in cases:
            print("two regions with authorization (a hub and a leaf nats-server per region; one relay in each, "
                  "identities split):")
            (base / "regions").mkdir()
            region = ("eu", "us")
            with NatsRegions(base / "regions", list(region), users={"relay-g0": "eu", "relay-g1": "us"}) as regions:
                run_pair(base, "g", lambda i: regions.relay_args(region[i], f"relay-g{i}"), measured,
                         args.roll_calls)

if __name__ == "__main__":
    main()
