"""Benchmark of the server node (`ce-bench run`).

    .venv/bin/python bench/server_node.py [--runs 2]

Prints, from real `ce-bench run` processes on this machine:
  * whole-CPU GFLOPS (one capsule instance per core, started together) vs cores x the single-core figure
    measured in the same run (target >= 0.9x linear);
  * the Python side's overhead: process wall time minus the time the probes themselves ran (capsule
    wall time of both phases + GPU probes) (target <= 1 s).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLI = str(Path(sys.executable).parent / "ce-bench")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    scaling, overheads = [], []
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, CE_BENCH_HOME=tmp)
        for i in range(args.runs):
            out = Path(tmp) / f"p{i}.json"
            t0 = time.perf_counter()
            subprocess.run([CLI, "run", "--no-jitter", "--out", str(out)], check=True, env=env, cwd=tmp,
                           capture_output=True)
            wall = time.perf_counter() - t0
            p = json.loads(out.read_text())
            g = p["evidence"]["cpu"]["gflops_fp32"]
            t = p["evidence"]["timing"]
            probes = t["concurrent_capsule_wall_s"] + t["solo_capsule_wall_s"] + t["gpu_s"]
            n = p["evidence"]["cpu"]["instances"]
            scaling.append(p["cpu"]["gflops_fp32"] / (n * g["single_core"]))
            overheads.append(wall - probes)
            print(f"run {i + 1}: {n} instances, whole CPU {p['cpu']['gflops_fp32']:.1f} GFLOP/s, single core "
                  f"{g['single_core']:.1f} -> {scaling[-1]:.3f}x linear; wall {wall:.2f} s, probes {probes:.2f} s, "
                  f"overhead {overheads[-1]:.2f} s", file=sys.stderr)
    print(f"whole-CPU GFLOPS / (cores x single core): median {statistics.median(scaling):.3f} "
          f"(runs: {', '.join(f'{s:.3f}' for s in scaling)}; target >= 0.9)")
    print(f"ce-bench run overhead (wall - probe time): median {statistics.median(overheads):.2f} s "
          f"(runs: {', '.join(f'{o:.2f}' for o in overheads)}; target <= 1 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
