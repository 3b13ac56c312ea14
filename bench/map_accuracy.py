"""How accurate the relay's map is against the number of landmarks and node-to-node probes per node, and how
soon a node that joins is placed (issue 18 benchmarks).

    .venv/bin/python bench/map_accuracy.py [--nodes 60] [--seed 5]

Method: a seeded world of three regions in a plane (RTT = distance + both ends' access delay, ~5 ms within a
region, 60-120 ms between), as tests/test_world.py builds in network namespaces; every measured sample is the
truth plus 0-2 ms of processing (what the namespace world measured). L landmarks (relays, spread over the
regions, measuring each other), each node measured by every landmark, and P node-to-node probes per node to
partners drawn by the relay's neighbour rule (half the nearest of its region, half random). The fit is the
relays' own refit (web/map/links.py LinkBook.refit: guarded_coordinates with the landmarks, REFIT_CONFIG). Scored
on node pairs never measured: median relative error and 5-NN recall. Reference in the same run: the same
world fitted with the landmark edges alone (P = 0), the star a relay cluster had before node-to-node probes.
Join: a new node's median error to every other node after its landmark round (at join) and after each peer
probe (one a minute as the offerer at the default interval, answering about as many).
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.kernels_paired import cpu_model  # noqa: E402
from fabric.defence import guarded_coordinates  # noqa: E402
from web.map.links import REFIT_CONFIG, coordinate_seed  # noqa: E402

CENTRES = [(0.0, 0.0), (70.0, 0.0), (30.0, 62.0)]


def world(nodes: int, landmarks: int, seed: int) -> tuple[dict[str, tuple[float, float, float]], list[str], list[str]]:
    rng = random.Random(seed)
    where: dict[str, tuple[float, float, float]] = {}
    marks = [f"L{i}" for i in range(landmarks)]
    for i, m in enumerate(marks):
        cx, cy = CENTRES[i % 3]
        where[m] = (cx + rng.uniform(-3, 3), cy + rng.uniform(-3, 3), rng.uniform(0.5, 1.5))
    ids = [f"n{i:03d}" for i in range(nodes)]
    for i, n in enumerate(ids):
        cx, cy = CENTRES[i % 3]
        where[n] = (cx + rng.uniform(-4, 4), cy + rng.uniform(-4, 4), rng.uniform(0.5, 2.0))
    return where, marks, ids


def rtt(where: dict[str, tuple[float, float, float]], a: str, b: str) -> float:
    (xa, ya, ha), (xb, yb, hb) = where[a], where[b]
    return math.hypot(xa - xb, ya - yb) + ha + hb


def samples(where: dict[str, tuple[float, float, float]], marks: list[str], ids: list[str], probes: int,
            rng: random.Random) -> list[dict[str, object]]:
    def sample(a: str, b: str) -> dict[str, object]:
        return {"a": a, "b": b, "rtt_ms": rtt(where, a, b) + rng.uniform(0, 2)}

    out = [sample(a, b) for i, a in enumerate(marks) for b in marks[i + 1:]]
    out += [sample(m, n) for m in marks for n in ids]
    seen: set[frozenset[str]] = set()
    for n in ids:
        region = ids.index(n) % 3
        near = sorted((x for x in ids if x != n and ids.index(x) % 3 == region), key=lambda x: rtt(where, n, x))
        for k in range(probes):
            partner = near[k // 2 % len(near)] if k % 2 == 0 else rng.choice([x for x in ids if x != n])
            if frozenset((n, partner)) not in seen:
                seen.add(frozenset((n, partner)))
                out.append(sample(n, partner))
    return out


def score(where: dict[str, tuple[float, float, float]], ids: list[str], links: list[dict[str, object]],
          marks: list[str]) -> tuple[float, float]:
    coords = guarded_coordinates(links, marks, cycles=200, seed=0, config=REFIT_CONFIG, seed_of=coordinate_seed)
    measured = {frozenset((str(s["a"]), str(s["b"]))) for s in links}
    errors = [abs(coords[a].distance(coords[b]) - rtt(where, a, b)) / rtt(where, a, b)
              for i, a in enumerate(ids) for b in ids[i + 1:] if frozenset((a, b)) not in measured]
    recalls = []
    for n in ids:
        true5 = set(sorted((x for x in ids if x != n), key=lambda x: rtt(where, n, x))[:5])
        pred5 = set(sorted((x for x in ids if x != n), key=lambda x: coords[n].distance(coords[x]))[:5])
        recalls.append(len(true5 & pred5) / 5)
    return statistics.median(errors), statistics.mean(recalls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=60)
    parser.add_argument("--seed", type=int, default=5)
    args = parser.parse_args()
    print(f"CPU: {cpu_model()}; {args.nodes} nodes in 3 regions, seed {args.seed}")
    print("landmarks | probes/node | median error (unmeasured pairs) | 5-NN recall")
    for landmarks in (1, 3, 6):
        for probes in (0, 2, 4, 8):
            where, marks, ids = world(args.nodes, landmarks, args.seed)
            links = samples(where, marks, ids, probes, random.Random(args.seed))
            err, recall = score(where, ids, links, marks)
            print(f"{landmarks:9d} | {probes:11d} | {err:31.3f} | {recall:11.2f}")
    # a node joins a placed world (3 landmarks, 4 probes per node): its error after its landmark round, then
    # after each peer probe (one a minute offered at the default peer_probe_interval_s, ~as many answered)
    where, marks, ids = world(args.nodes + 1, 3, args.seed)
    new, rest = ids[-1], ids[:-1]
    rng = random.Random(args.seed)
    base = [s for s in samples(where, marks, rest, 4, rng)]
    region = (len(ids) - 1) % 3
    partners = sorted((x for x in rest if rest.index(x) % 3 == region), key=lambda x: rtt(where, new, x))
    print("join: probes done | the new node's median error to every other node")
    for done in range(0, 5):
        links = base + [{"a": m, "b": new, "rtt_ms": rtt(where, m, new) + 1.0} for m in marks]
        links += [{"a": new, "b": p, "rtt_ms": rtt(where, new, p) + 1.0} for p in partners[:done]]
        coords = guarded_coordinates(links, marks, cycles=200, seed=0, config=REFIT_CONFIG, seed_of=coordinate_seed)
        err = statistics.median(abs(coords[new].distance(coords[x]) - rtt(where, new, x)) / rtt(where, new, x)
                                for x in rest)
        print(f"{done:17d} | {err:.3f}")


if __name__ == "__main__":
    main()
