"""Fabric Map benchmarks (the Fabric Map issue).

    .venv/bin/python bench/fabric_map.py [--nodes 100000]

At --nodes nodes with 8-dimensional coordinates and ~3 measured edges each:
  * snapshot load time (building the map from JSON-shaped data);
  * k_nearest(k=10) p99 (target <= 1 ms) beside a brute-force numpy pass as reference;
  * predicted_rtt p99 (target <= 10 us);
  * Vivaldi update throughput (updates/s);
  * median relative error on the synthetic suite (line, grid, split, random, heights) beside the
    Vivaldi paper's 11% (Dabek et al. 2004, on the King data set).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from capsule.model import LinkSample, NodeProfile  # noqa: E402
from capsule.typed import parse  # noqa: E402
from fabric.graph import FabricMap  # noqa: E402
from fabric.simulate import evaluate, grid, line, random_matrix, simulate, split, with_heights  # noqa: E402
from fabric.vivaldi import Coordinate, VivaldiNode  # noqa: E402


def p99(values: list[float]) -> float:
    return sorted(values)[int(0.99 * (len(values) - 1))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=100_000)
    args = parser.parse_args()
    rng = random.Random(1)
    n = args.nodes
    ids = [f"12D3KooW{i:044d}" for i in range(n)]
    coords = {i: Coordinate([rng.uniform(-100, 100) for _ in range(8)], 0.2, rng.uniform(-1, 1), rng.uniform(0.01, 5))
              for i in ids}
    links = [LinkSample(a=ids[rng.randrange(n)], b=ids[rng.randrange(n)], rtt_ms=rng.uniform(1, 300), jitter_ms=1.0,
                        loss=0.0, bw_mbps=None, measured_at=t, sig_a="", sig_b="") for t in range(3 * n)]
    template = parse(NodeProfile, json.loads((ROOT / "bench" / "fixtures" / "real_profile.json").read_text()))
    profiles = [dataclasses.replace(template, node_id=i) for i in ids]
    t0 = time.perf_counter()
    fmap = FabricMap(profiles, coords, links, {"nodes": n})
    load_s = time.perf_counter() - t0

    queries = [ids[rng.randrange(n)] for _ in range(300)]
    knn, brute = [], []
    vec = np.array([coords[i].vec for i in ids])
    for q in queries:
        t0 = time.perf_counter()
        fmap.k_nearest(q, 10)
        knn.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        np.argsort(np.sqrt(((vec - np.asarray(coords[q].vec)) ** 2).sum(axis=1)))[:11]
        brute.append(time.perf_counter() - t0)
    pairs = [(ids[rng.randrange(n)], ids[rng.randrange(n)]) for _ in range(20000)]
    pred = []
    for a, b in pairs:
        t0 = time.perf_counter()
        fmap.predicted_rtt(a, b)
        pred.append(time.perf_counter() - t0)
    node, peer = VivaldiNode(), Coordinate([1.0] * 8, 0.5)
    t0 = time.perf_counter()
    count = 20000
    for i in range(count):
        node.update(f"p{i % 50}", peer, 10.0 + (i % 7))
    update_rate = count / (time.perf_counter() - t0)

    print(f"{n} nodes, {len(links)} measured edges: snapshot load {load_s:.2f} s")
    print(f"k_nearest(k=10): p99 {p99(knn) * 1e3:.3f} ms, median {statistics.median(knn) * 1e3:.3f} ms; reference "
          f"full numpy argsort p99 {p99(brute) * 1e3:.3f} ms (target p99 <= 1 ms)")
    print(f"predicted_rtt: p99 {p99(pred) * 1e6:.2f} us, median {statistics.median(pred) * 1e6:.2f} us "
          "(target p99 <= 10 us)")
    print(f"Vivaldi updates: {update_rate:,.0f} per second (one core, pure Python)")
    suite = {"line": line(10, 10.0), "grid": grid(25, 10.0), "split": split(25, 1.0, 10.0),
             "random": random_matrix(25, 100.0, 10.0, 1), "heights": with_heights(25, 1)}
    medians = {name: statistics.median(evaluate(simulate(t, 1000, s), t).median_relative for s in (1, 2, 3))
               for name, t in suite.items()}
    print("median relative error (1000 cycles, median over 3 seeds): " +
          ", ".join(f"{k} {v * 100:.2f}%" for k, v in medians.items()) + " — Vivaldi paper: 11% on King data")
    return 0


if __name__ == "__main__":
    sys.exit(main())
