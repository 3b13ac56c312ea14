"""Coordinates under lying nodes (issue 18, item 4).

    .venv/bin/python bench/vivaldi_liars.py [--seeds 1,2,3] [--rounds 150] [--nodes 100] [--landmarks 6]
                                            [--liars 0.2] [--lie-scale 1.0]

On fabric/adversary.py's seeded worlds, per strategy and seed: the honest nodes' median relative prediction
error (every pair of honest non-landmark nodes, most never sampled) liar-free, with liars and the defence off
(plain Serf Vivaldi), with liars and the defence on (fabric/defence.py), and the ratio defended / liar-free
(target <= 1.5) beside undefended / liar-free (the attack is real at >= 2). The liar-free reference is the run
with the same configuration: plain for the undefended ratio, defended for the defended one; the first lines
give the defence's cost in a world without liars. --lie-scale scales every lie's size (0.1: sub-threshold
lies). Deterministic: the figures depend on the seeds only; the CPU model and the time are printed for the
record.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fabric.adversary import STRATEGIES, Lies, honest_error, make_world, run  # noqa: E402
from fabric.config import DefenceConfig, VivaldiConfig  # noqa: E402

ON, OFF = VivaldiConfig(), VivaldiConfig(defence=DefenceConfig(enabled=False))


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def scaled(scale: float) -> Lies:
    base = Lies()
    low, high = base.inflate_factor
    return Lies(base.extra_samples, (1.0 + (low - 1.0) * scale, 1.0 + (high - 1.0) * scale),
                base.disorder_factor ** scale, base.isolate_offset_ms * scale, base.move_offset_ms * scale,
                base.frog_ms_per_round * scale)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--rounds", type=int, default=150)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--landmarks", type=int, default=6)
    parser.add_argument("--liars", type=float, default=0.2, help="fraction of all nodes that lie together")
    parser.add_argument("--lie-scale", type=float, default=1.0)
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    lies = scaled(args.lie_scale)
    print(f"CPU: {cpu_model()} ({platform.python_implementation()} {platform.python_version()})")
    print(f"world: {args.nodes} nodes, {args.landmarks} landmarks, {args.liars:.0%} liars, {args.rounds} rounds, "
          f"seeds {args.seeds}, lie scale {args.lie_scale:g}")
    t0 = time.perf_counter()
    worlds = {s: make_world(s, args.nodes, args.landmarks, args.liars) for s in seeds}
    free = {(s, on): honest_error(worlds[s], run(worlds[s], None, args.rounds, ON if on else OFF))
            for s in seeds for on in (False, True)}
    print("\nliar-free median relative error, plain -> defended (the defence's cost without liars)")
    for s in seeds:
        plain, defended = free[(s, False)], free[(s, True)]
        print(f"  seed {s}: {plain:.4f} -> {defended:.4f}  ({defended / plain:.3f}x)")
    print(f"\n{'':14s} {'---- defence off (plain Vivaldi) ----':>37s}   {'---------- defence on ----------':>33s}")
    print(f"{'strategy':9s} {'seed':>4s} {'liar-free':>10s} {'with liars':>11s} {'ratio':>8s}   "
          f"{'liar-free':>10s} {'with liars':>11s} {'ratio':>8s}  (target <= 1.5)")
    worst: dict[str, tuple[float, float]] = {}
    for strategy in STRATEGIES:
        off_ratios, on_ratios = [], []
        for s in seeds:
            w = worlds[s]
            e_off = honest_error(w, run(w, strategy, args.rounds, OFF, lies))
            e_on = honest_error(w, run(w, strategy, args.rounds, ON, lies))
            off_ratios.append(e_off / free[(s, False)])
            on_ratios.append(e_on / free[(s, True)])
            print(f"{strategy:9s} {s:4d} {free[(s, False)]:10.4f} {e_off:11.4f} {off_ratios[-1]:7.2f}x   "
                  f"{free[(s, True)]:10.4f} {e_on:11.4f} {on_ratios[-1]:7.2f}x", flush=True)
        worst[strategy] = (min(off_ratios), max(on_ratios))
        print(f"{strategy:9s} {'med':>4s} {'':10s} {'':11s} {statistics.median(off_ratios):7.2f}x   "
              f"{'':10s} {'':11s} {statistics.median(on_ratios):7.2f}x")
    print("\nworst over seeds: undefended (smallest) / defended (largest)")
    for strategy, (off, on) in worst.items():
        verdict = "ok" if on <= 1.5 else "OVER TARGET"
        print(f"  {strategy:9s} {off:5.2f}x / {on:5.2f}x  {verdict}")
    print(f"\n{time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
