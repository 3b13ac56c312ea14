"""What an honest node's GPU counts at roll calls, beside the GPU probe alone (issue 29, item 1 for the GPU).

    .venv/bin/python bench/gpu_roll_calls.py [--roll-calls 20] [--gpu-share 0.3]

Method. One relay (a roll call every 10 s: beacon rounds every 1 s, target 1 s, deadline 1.25 s; the GPU floor at
1e-6 fp32 TFLOP/s, so that a software adapter can count). One node: `ce-bench run`'s own measurement with the GPU
probe (host_runner/node.py measure), registered with its CPU claim as measured and its GPU claim x --gpu-share
(lavapipe is the CPU: beside the SGEMM answer of the same moment it gets about half the cores, and a claim more
than 2x what it ever showed is not believed; tests/test_gpu_rollcall.py), and a LiveSession answering with the
capsule's reactor and a GpuContext, as `ce-bench node` does. Per roll call: the GPU answer's verdict (counted,
after_deadline, ...), its time on the relay's clock, its observed TFLOP/s over the claim, and the products it
committed of those it was given (work for 1.5625 s at the claim; it stops at 1.125 s). Reference: the GPU probe's
matmul alone (host_runner/gpu.py, the same shader, 1 s at its own order), before and after the roll calls.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.honest_count import cpu_model, measured_profile  # noqa: E402
from capsule.signing import sign  # noqa: E402
from common.keys import NodeKey  # noqa: E402
from host_runner.gpu_answer import context_for  # noqa: E402
from host_runner.live_client import LiveSession  # noqa: E402
from tests.relay_process import RelayProcess  # noqa: E402

RELAY = ["--ip-rate", "1000000", "--log-level", "warning", "--beacon-interval", "1", "--roll-call-interval-s", "10",
         "--roll-call-min-gap-s", "10", "--roll-call-llm-offset-s", "4", "--roll-call-target-s", "1",
         "--gpu-floor-tflops", "0.000001"]


def get(relay: RelayProcess, path: str) -> Any:
    with urllib.request.urlopen(relay.url + path, timeout=30) as r:
        return json.loads(r.read())


def probe_alone(ctx: Any) -> float:
    """The GPU probe's fp32 TFLOP/s now, alone (host_runner/gpu.py's matmul, as `ce-bench run` measures it)."""
    import numpy as np

    from host_runner import gpu

    return float(gpu._matmul(ctx.device, ctx.wgpu, np.float32, ctx.binding_limit, 1.0, "5eed")["tflops"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--roll-calls", type=int, default=20)
    parser.add_argument("--gpu-share", type=float, default=0.3)
    args = parser.parse_args()
    capsule = ROOT / "build" / "capsule.wasm"
    print(f"{cpu_model()}, {os.cpu_count()} CPUs; {time.strftime('%Y-%m-%d')}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        relay = RelayProcess(Path(tmp) / "relay", *RELAY).start()
        try:
            from host_runner.relay_client import fetch_beacon, post_profile

            key = NodeKey.generate()
            profile = measured_profile(relay, key, capsule, Path(tmp), gpu=True)
            if not profile["gpus"] or not profile["gpus"][0].get("fp32_tflops"):
                print(f"no GPU measured: {profile['evidence'].get('gpu_notes')}")
                return 1
            alone = [float(profile["gpus"][0]["fp32_tflops"])]
            profile["gpus"][0]["fp32_tflops"] = round(alone[0] * args.gpu_share, 6)
            claim = profile["gpus"][0]["fp32_tflops"]
            body = {k: v for k, v in profile.items() if k != "sig"}
            body["beacon"] = {k: v for k, v in fetch_beacon(relay.url).items() if k in ("relay", "round", "value")}
            post_profile(relay.url, sign("NodeProfile", body, key))
            ctx, line = context_for(profile)
            print(line, flush=True)
            if ctx is None:
                return 1
            alone.append(probe_alone(ctx))  # the reference's method, before and after the roll calls
            session = LiveSession(relay.url, key, reactor_wasm=capsule.with_name("capsule-reactor.wasm"),
                                  gpu=ctx).start()
            try:
                deadline = time.monotonic() + args.roll_calls * 20 + 60
                while time.monotonic() < deadline:
                    done = [r for r in list(session.results) if r.get("kind") == "gpu" and r.get("roll_call")]
                    if len(done) >= args.roll_calls:
                        break
                    time.sleep(1)
                verdicts = {r["id"]: str(r.get("verdict") or r.get("code")) for r in list(session.results)
                            if r.get("kind") == "gpu" and r.get("roll_call")}
                events = get(relay, f"/v1/nodes/{key.node_id}/history?limit=500")["events"]
                rows = [e for e in events if e.get("event") == "challenge" and e.get("kind") == "gpu"
                        and e.get("roll_call") and e["id"] in verdicts]
            finally:
                session.stop()
            alone.append(probe_alone(ctx))
            counted = [e for e in rows if verdicts[e["id"]] == "counted"]
            ratios = [(e.get("observed_tflops") or 0.0) / claim for e in rows]
            share = [sum(e["products"]) / (e["reps"] * e["instances"]) for e in rows if e.get("products")]
            times = [e["commit_s"] for e in rows if e.get("commit_s")]
            print(f"GPU claim {claim:.6f} fp32 TFLOP/s ({args.gpu_share:g} x `ce-bench run`'s GPU probe, "
                  f"{alone[0]:.6f}); the probe's matmul alone (1 s, its own order), before and after the roll "
                  f"calls: {alone[1]:.6f}, {alone[2]:.6f}")
            print(f"roll calls: {len(rows)}; GPU counted at {len(counted)} "
                  f"({', '.join(f'{v}: {list(verdicts.values()).count(v)}' for v in sorted(set(verdicts.values())))})")
            if rows:
                print(f"observed / claim: median {statistics.median(ratios):.3f} (min {min(ratios):.3f}, max "
                      f"{max(ratios):.3f}); GPU answer time on the relay's clock: median "
                      f"{statistics.median(times):.3f} s (max {max(times):.3f}); products committed / given: median "
                      f"{statistics.median(share) if share else float('nan'):.3f}")
        finally:
            relay.stop()
    return 0


if __name__ == "__main__":
    threading.excepthook = lambda args: None  # a LiveSession thread ending with the relay is not news
    sys.exit(main())
