"""The issue's fleet (issue 44, first "Done when"): a job of 100 WASI tasks with redundancy 2 on 10 `ce-bench node`
processes and 2 join pages in Chromium, every output compared with `wasmtime run` here.

    .venv/bin/python bench/dispatch_fleet.py [--nodes 10] [--pages 2] [--tasks 100] [--n 3000000]

Method: one relay (roll calls every 10 s), N real `ce-bench node` processes (each its own key, measuring this
machine first, then answering roll calls and taking tasks; each live session from its own loopback address,
`--source-address 127.0.0.K`, so replicas of a task can go to different addresses), and Chromium join pages
(playwright, Debian's chromium) that tick "run tasks". Once every one is proven at a roll call (or after
--prove-s, with what is proven then: said), a job of --tasks tasks `work.wasm SEED --n` with redundancy 2 is
submitted with `ce-bench job submit --wait --json`. Printed: who was proven, the job's wall time, tasks per node,
and every output against a local `wasmtime run` of the same module and arguments. Everything shares 2 cores: a
figure of what the fleet did on this machine, not of the relay alone.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common.keys import load_or_create  # noqa: E402
from tests.relay_process import CLI, RelayProcess  # noqa: E402

WORK = ROOT / "build" / "work.wasm"
WASMTIME = Path(sys.executable).parent / "wasmtime"
RELAY_FLAGS = ["--challenge-first-after", "1", "--challenge-interval-unverified", "2", "--heartbeat-interval", "1",
               "--beacon-interval", "1", "--roll-call-target-s", "1", "--roll-call-interval-s", "10",
               "--roll-call-min-gap-s", "10", "--roll-call-llm-offset-s", "5", "--ip-rate", "1000",
               "--node-rate", "1000"]


def proven(relay: RelayProcess, node_id: str) -> bool:
    status, body, _ = relay.get(f"/v1/nodes/{node_id}")
    return status == 200 and body["trust"]["status"] == "verified" and body["trust"]["counted"]["cpu_gflops"] > 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--pages", type=int, default=2)
    parser.add_argument("--tasks", type=int, default=100)
    parser.add_argument("--n", type=int, default=3_000_000, help="rounds per task (~3 ns each here)")
    parser.add_argument("--prove-s", type=float, default=400.0)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    from tests.browsers import CHROMIUM, FLAGS, join

    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        submitter_home = tmp / "submitter"
        submitter = load_or_create(submitter_home / "node.key")
        procs: list[subprocess.Popen[bytes]] = []
        with RelayProcess(tmp / "relay", *RELAY_FLAGS, "--job-submitter", submitter.node_id) as relay, \
                sync_playwright() as pw:
            ids: dict[str, str] = {}
            t0 = time.monotonic()
            for i in range(args.nodes):
                home = tmp / f"node{i}"
                ids[load_or_create(home / "node.key").node_id] = f"ce-bench node {i}"
                log = open(tmp / f"node{i}.log", "wb")  # noqa: SIM115 - the process owns it
                procs.append(subprocess.Popen(
                    [CLI, "node", "--relay", relay.url, "--no-gpu", "--budget-ms", "500", "--no-peer-probes",
                     "--no-libp2p", "--landmark-interval-s", "0", "--source-address", f"127.0.0.{10 + i}"],
                    env={**os.environ, "CE_BENCH_HOME": str(home)}, stdout=log, stderr=log))
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            pages = []
            for i in range(args.pages):
                page = browser.new_context().new_page()
                profile = join(page, relay, "?heavy_budget_s=0.5")
                page.check("#accept-tasks")
                ids[profile["node_id"]] = f"join page {i}"
                pages.append(page)
            deadline = time.monotonic() + args.prove_s
            while time.monotonic() < deadline and not all(proven(relay, n) for n in ids):
                time.sleep(2)
            ok = [who for n, who in ids.items() if proven(relay, n)]
            print(f"proven after {time.monotonic() - t0:.0f} s: {len(ok)} of {len(ids)} ({', '.join(sorted(ok))})")
            manifest: dict[str, Any] = {"v": 2, "kind": "wasi", "module": {"path": str(WORK)},
                        "tasks": [{"args": [str(seed), str(args.n)]} for seed in range(args.tasks)],
                        "limits": {"memory_mib": 32, "wall_ms": 120_000, "output_bytes": 1024},
                        "placement": {"nodes": len(ids), "redundancy": 2}}
            (tmp / "job.json").write_text(json.dumps(manifest))
            t = time.monotonic()
            result = subprocess.run([CLI, "job", "submit", str(tmp / "job.json"), "--relay", relay.url, "--wait",
                                     "--json"], capture_output=True, text=True, timeout=900,
                                    env={**os.environ, "CE_BENCH_HOME": str(submitter_home)})
            took = time.monotonic() - t
            state: dict[str, Any] = json.loads(result.stdout)
            per_node: collections.Counter[str] = collections.Counter()
            wrong_vs_local = 0
            two_nodes = 0
            for task, spec in zip(state["tasks"], manifest["tasks"], strict=True):
                agreed = [a for a in task["attempts"] if a["verdict"] == "agreed"]
                two_nodes += len({a["node_id"] for a in agreed}) >= 2
                for a in agreed:
                    per_node[ids.get(a["node_id"], a["node_id"][:12])] += 1
                local = subprocess.run([str(WASMTIME), "run", str(WORK), *spec["args"]], capture_output=True,
                                       text=True, timeout=60)
                wrong_vs_local += (task["exit_code"], task["stdout"]) != (local.returncode, local.stdout)
            print(f"job {state['state']} (exit {result.returncode}) in {took:.1f} s: {state['counts']}; tasks on two "
                  f"nodes {two_nodes}/{len(state['tasks'])}; outputs unlike local wasmtime run: {wrong_vs_local}")
            print("agreed outputs per node:", dict(sorted(per_node.items())))
            browser.close()
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
