"""GPU challenge benchmark (issue 20, item 5): the relay's CPU to check one GPU challenge beside the node's GPU time
for the same challenge, each figure beside its reference from the same run.

    .venv/bin/python bench/gpu_challenge.py [--rounds 5] [--adapter NAME] [--orders 128,256,512,1024,2048]
    VK_ICD_FILENAMES=/usr/lib/chromium/vk_swiftshader_icd.json .venv/bin/python bench/gpu_challenge.py \
        --adapter SwiftShader                                   (SwiftShader through Chromium's Vulkan ICD)

1. The adapter's own fp32 TFLOP/s by the probe (host_runner/gpu.py, the same shader), then --rounds challenges
   sized for that claim at the roll call's target time (web/proof/gpu_challenges.py): the node's wall time to commit
   (host_runner/gpu_answer.py: what the relay times), the relay's CPU to check the answer (parse_opening's proofs
   + check_opened's recomputed entries, one BLAS thread), their ratio, and observed / claimed.
2. The relay's CPU per challenge at each order (its cost depends on n and the opened rows, not on the work, but
   for log2(reps) more sibling hashes per row, ~1 us each): one product per order, so a fast GPU's challenge can
   be read off — it is sized to take the target time at the claim, so relay CPU / target is the relay's share
   for any GPU at that order.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

from host_runner import gpu  # noqa: E402
from host_runner.gpu_answer import GpuAnswer, GpuContext, pick_adapter  # noqa: E402
from web.config import RelayConfig  # noqa: E402
from web.proof import gpu_challenges as wg  # noqa: E402
from web.proof.challenges import Challenge, check_opened, on_commit, parse_opening  # noqa: E402

BEACON = {"round": 1, "value": "ab" * 32}


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def one(ch: Challenge, ctx: GpuContext, config: RelayConfig, seed: int) -> tuple[float, float, float]:
    """Node wall time to commit (s), node process CPU meanwhile (s), relay CPU to check the answer (s)."""
    answer = GpuAnswer(ch.seeds, ch.n, ch.reps, ctx)
    cpu0, t0 = time.process_time(), time.perf_counter()
    roots = answer.commit()
    node_wall, node_cpu = time.perf_counter() - t0, time.process_time() - cpu0
    ch.sent_at = time.perf_counter() - node_wall  # the relay's clock, network aside
    opening = on_commit(ch, {"type": "commit", "id": ch.id, "roots": roots}, time.perf_counter(),
                        random.Random(seed), config)
    assert opening is not None
    rows = answer.open(opening["rows"])
    t0 = time.process_time()
    with threadpool_limits(1):
        opened = parse_opening(ch, {"type": "opening", "id": ch.id, "rows": rows}, time.perf_counter(), config)
        check_opened(ch, opened, random.Random(seed), config)
    return node_wall, node_cpu, time.process_time() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--adapter", default=None, help="part of the adapter's name (default: the probe's first)")
    parser.add_argument("--orders", default="128,256,512,1024,2048")
    args = parser.parse_args()
    config = RelayConfig()
    ctx = GpuContext(pick_adapter(args.adapter))
    print(f"CPU: {cpu_model()}, {os.cpu_count()} logical CPUs; adapter: {ctx.name} ({ctx.backend}, "
          f"{ctx.adapter_type}, rows hashed on the {ctx.hash_on}); {time.strftime('%Y-%m-%d')}")
    probe = gpu._matmul(ctx.device, ctx.wgpu, np.float32, ctx.binding_limit, 1.0, "5eed")
    claim, probe_n = float(probe["tflops"]), int(probe["n"])
    target = config.roll_call_target_s
    walls, cpus, relays, ratios = [], [], [], []
    ch = None
    for k in range(args.rounds):
        ch = wg.new_gpu_challenge("node", claim, BEACON, f"{k:032x}", 0.0, 0.0, config, target, gpu_n=probe_n)
        wall, node_cpu, relay = one(ch, ctx, config, k)
        walls.append(wall)
        cpus.append(node_cpu)
        relays.append(relay)
        ratios.append((wg.observed_tflops(ch) or 0.0) / claim)
    assert ch is not None
    wall, relay = statistics.median(walls), statistics.median(relays)
    print(f"1. claim {claim * 1e3:.3f} GFLOP/s fp32 (probe, n={probe_n}); challenge {ch.reps} products of "
          f"n={ch.n} for {target:g} s; median of {args.rounds}: node GPU time {wall * 1000:.0f} ms (node process "
          f"CPU {statistics.median(cpus) * 1000:.0f} ms), relay CPU {relay * 1000:.2f} ms -> relay/node = "
          f"{100 * relay / wall:.3f}%; observed/claimed {statistics.median(ratios):.2f} "
          f"(range {min(ratios):.2f}-{max(ratios):.2f})")
    print("2. relay CPU per challenge by order (one instance, "
          f"{config.challenge_rows_per_instance} rows x {config.challenge_entries_per_row} entries), and its share "
          f"of a challenge sized for {target:g} s at any claim:")
    for n in (int(v) for v in args.orders.split(",")):
        if 4 * n * n > ctx.binding_limit:
            continue
        costs = relay_costs(n, args.rounds, ctx, config)
        cost = statistics.median(costs)
        print(f"   n={n}: relay CPU {cost * 1000:.2f} ms -> {100 * cost / target:.3f}% of {target:g} s; "
              f"{1 / cost:.0f} challenges checked per second per relay core")


def relay_costs(n: int, rounds: int, ctx: GpuContext, config: RelayConfig) -> list[float]:
    """The relay's CPU (s) to check `rounds` challenges of one product of order n: one answer, committed and
    opened once for all of them (a slow adapter takes tens of seconds per product at n = 2048), each check with
    its own rows and entries."""
    answer = GpuAnswer([12345], n, 1, ctx)
    roots = answer.commit()
    challenges = [Challenge(f"{k:016x}", "node", n, 1, [12345], 1, f"{k:032x}", 0.0, time.perf_counter(), 0.0,
                            kind=wg.KIND) for k in range(rounds)]
    asked = [on_commit(ch, {"type": "commit", "id": ch.id, "roots": roots}, time.perf_counter(), random.Random(k),
                       config) for k, ch in enumerate(challenges)]
    rows = answer.open([row for message in asked if message is not None for row in message["rows"]])
    per = config.challenge_rows_per_instance
    costs = []
    for k, ch in enumerate(challenges):
        ch.open_sent_at = time.perf_counter()
        t0 = time.process_time()
        with threadpool_limits(1):
            opened = parse_opening(ch, {"type": "opening", "id": ch.id, "rows": rows[k * per:(k + 1) * per]},
                                   time.perf_counter(), config)
            check_opened(ch, opened, random.Random(k), config)
        costs.append(time.process_time() - t0)
    return costs

if __name__ == "__main__":
    main()
