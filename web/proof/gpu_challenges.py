"""GPU challenges over the live session (issue 20, item 5), as pure functions beside web/proof/challenges.py (time
passed in; the arithmetic is capsule/gpu_challenge.py and capsule/challenge.py).

node -> relay  {"type": "hello", "answers": ["sgemm", ..., "gpu"]}     the session answers GPU challenges
relay -> node  {"type": "challenge", "id": HEX, "kind": "gpu", "n": N, "reps": R, "seeds": [HEX16, ...],
                "beacon_round": R, "nonce": HEX, "commit_within_s": S, "stop_after_s": D (roll calls only)}
then commit, open, opening and challenge_result exactly as for "sgemm" (web/proof/challenges.py): one Merkle root per
seed over the rows of the products it committed ("products": [K, ...]: its first K, all R when absent), rows drawn
after the commitment among those, proofs, entries recomputed at columns drawn after the opening. At a roll call the
GPU is given work beyond the deadline and stops at D, as the SGEMM answer does: a GPU (or a CPU adapter sharing
the cores with the SGEMM answer) counts the products it finished by the deadline, not nothing. The node computes
them with the GPU probe's own WGSL matmul (host_runner/gpu_answer.py, wgpu; a browser with WebGPU), one instance
(seed) per GPU it claims.

Reused as they are, because a GPU challenge is an sgemm challenge of another order and size: on_commit (the
commitment, rows drawn over n x the committed products' leaves), parse_opening (proofs against the roots) and
check_opened (capsule.challenge.check_entries: the bound n 2^-24 sum |a b| holds for any summation order, FMA or not —
capsule/gpu_challenge.py derives it). What is GPU-specific is here: sizing from the claimed fp32 TFLOP/s (the
probe's gpus[].fp32_tflops, same shader), the message and history record, observed TFLOP/s on the relay's clock,
and the physical bound (capsule/plausibility.py GPU_FP32_TFLOPS_MAX per GPU).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from capsule import gpu_challenge as gc
from capsule import plausibility
from capsule.challenge import instance_seed
from web.config import RelayConfig
from web.proof.challenges import Challenge

KIND = gc.KIND
MAX_INSTANCES = 16  # GPUs challenged per node: more claimed are challenged as 16 (and count as that many)


@dataclass(frozen=True)
class GpuClaim:
    """What a profile claims of its GPUs, as a challenge needs it."""

    tflops: float           # fp32 TFLOP/s of all its GPUs together (gpus[].fp32_tflops: matmul_f32.wgsl)
    gpus: int               # GPUs with an fp32 figure: one instance (seed) each
    n: int | None           # the probe's order (evidence.gpus[0].fp32_matmul.n)
    binding_limit: int      # B: the smallest max_storage_buffer_binding_size the probe reported


def gpu_claim(fp32_tflops: Sequence[float | None], evidence: dict[str, Any]) -> GpuClaim | None:
    """The GPU claim of a profile (its gpus[].fp32_tflops, in order, and its evidence), or None without one.
    Evidence is an open object in the data model: the fields read here are read with care."""
    figures = [f for f in fp32_tflops if f is not None and f > 0]
    if not figures:
        return None
    records = evidence.get("gpus")
    records = [r for r in records if isinstance(r, dict)] if isinstance(records, list) else []
    orders = [r.get("fp32_matmul", {}).get("n") for r in records if isinstance(r.get("fp32_matmul"), dict)]
    limits = [r.get("max_storage_buffer_binding_size") for r in records]
    n = next((o for o in orders if gc.is_order(o)), None)
    limit = min((v for v in limits if type(v) is int and v > 0), default=gc.BINDING_DEFAULT)
    return GpuClaim(sum(figures), len(figures), n, limit)


def new_gpu_challenge(node_id: str, claimed_tflops: float, beacon: dict[str, Any], nonce: str,
                      rtt_ms: float | None, now: float, config: RelayConfig, target_s: float | None = None, *,
                      gpus: int = 1, gpu_n: object = None, binding_limit: int = gc.BINDING_DEFAULT,
                      work_s: float | None = None, stop_after_s: float | None = None) -> Challenge:
    """A GPU challenge sized so the claimed fp32 TFLOP/s needs target_s (config.challenge_target_s by default):
    one instance per GPU, each its share of the claim, at the probe's order held within the adapter's binding
    limit and the claim (capsule/gpu_challenge.py order_for, reps_for). With stop_after_s (a roll call), the
    products are enough for work_s at the claim (beyond the deadline, as the SGEMM's) and the node commits what
    it finished by then; the order stays the one target_s gives. Challenge.claimed_gflops keeps the claim in
    GFLOP/s, the unit of the field."""
    target = target_s if target_s is not None else config.challenge_target_s
    k = max(1, min(gpus, MAX_INSTANCES))
    n = gc.order_for(gpu_n, claimed_tflops / k, target, binding_limit)
    reps = gc.reps_for(claimed_tflops, k, n, work_s if work_s is not None else target)
    seeds = [instance_seed(beacon["value"], nonce, i) for i in range(k)]
    return Challenge(nonce[:16], node_id, n, reps, seeds, beacon["round"], nonce, claimed_tflops * 1000, now,
                     rtt_ms or 0.0, kind=KIND, beacon_value=str(beacon["value"]), stop_after_s=stop_after_s)


def gpu_message(ch: Challenge, config: RelayConfig) -> dict[str, Any]:
    """The challenge message (Challenge.message for kind "gpu")."""
    return ch.message(config)


def observed_tflops(ch: Challenge) -> float | None:
    """fp32 TFLOP/s on the relay's clock: the work over the commitment's net time (web/challenges.net_time_s)."""
    return ch.flops / ch.commit_s / 1e12 if ch.commit_s and ch.kind == KIND else None


def gpu_record(ch: Challenge) -> dict[str, Any]:
    """What the history keeps (Challenge.record for kind "gpu"): enough to recompute it from the beacon."""
    observed = observed_tflops(ch)
    return {"id": ch.id, "kind": KIND, "issued_at": ch.issued_at, "n": ch.n, "reps": ch.reps,
            "instances": len(ch.seeds), "beacon_round": ch.beacon_round, "nonce": ch.nonce,
            "seed_method": "instance i: first 8 bytes LE of sha256('ce-bench/v1/challenge/{beacon}/{nonce}/{i}'); "
                           "product t: that + t * 0x9e3779b97f4a7c15 (mod 2^64); inputs: capsule/challenge.py",
            "products": ch.products, "stop_after_s": ch.stop_after_s,
            "claimed_tflops": round(ch.claimed_gflops / 1000, 6), "rtt_ms": round(ch.rtt_ms, 3),
            "commit_s": round(ch.commit_s, 4) if ch.commit_s else None,
            "observed_tflops": round(observed, 6) if observed else None,
            "rows": [list(r) for r in ch.rows], "roll_call": ch.roll_call}


def gpu_implausible(ch: Challenge) -> str | None:
    """Why an observed figure is beyond any GPU's fp32 WGSL matmul for the GPUs asked, or None (then the
    answer was not computed in the time it claims: implausible_observation)."""
    tflops = observed_tflops(ch)
    bound = len(ch.seeds) * plausibility.GPU_FP32_TFLOPS_MAX
    if tflops is not None and tflops > bound:
        return (f"observed {tflops:.1f} fp32 TFLOP/s over {len(ch.seeds)} GPU(s); no GPU exceeds "
                f"{plausibility.GPU_FP32_TFLOPS_MAX:g} through WGSL")
    return None
