"""Roll calls, as pure functions (time passed in): the whole network challenged at one moment.

Douceur's lemma (The Sybil Attack, IPTPS 2002): unless the tests of all identities run at the same time, one
machine presents as many identities as it can answer one after another. So the verified scoreboard is not
the sum of staggered challenges: it is what the latest roll call proved. At a roll call the relay sends a
challenge to every live session that answers them, all at once (SGEMM for every node, and with it, in the same
sends, the GPU challenge of every node that claims fp32 TFLOP/s, at least `gpu_floor_tflops` in all, and
answers "gpu": web/proof/gpu_challenges.py; the reference model, again all at once, `roll_call_llm_offset_s` later,
for every node that claims tokens/s).
Identities that share a machine share it at that moment, whatever addresses or relays they use, and so do a
node's CPU and "GPU": a CPU that answers the GPU challenge spends the cores its SGEMM answer would show.

The moment: every gap_rounds-th beacon round (roll_call_min_gap_s apart) starts a roll call with probability
gap x beacon_interval_s / roll_call_interval_s, drawn from the round's value (nobody, the relay included,
knows it before the round exists), at `roll_call_delay_s` after the round was issued.

What a node counts (`proven`): only an answer within the common deadline (on_time), and then the claim capped
at what the answer showed (shown: observed x trust_cap_factor, at most the work given / the target time);
never cores (a claim: throughput is proven, not the cores behind it); tokens/s from the tokens an answer
committed by the node's stop, once the token the relay drew was checked equal (web/proof/llm_checks.py); GPUs only
as many as instances it proved, each showing at least `gpu_floor_tflops`, and fp32 TFLOP/s (what the GPU
challenge measures: the probe's matmul_f32.wgsl) capped at its fp32 claim, counted only with a GPU and only
beside the SGEMM proof of the same roll call.
The claimed scoreboard's gpu_tflops sums what profiles claim (fp16); the verified one's is proven fp32.
Nothing for a node that joined since, was
hidden, opted out, or did not answer in time, until the next roll call.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Any

from web.config import RelayConfig
from web.map.stats import MICRO, MILLI, Contribution


def draw(beacon_value: str) -> float:
    """The round's uniform draw in [0, 1) that decides whether it starts a roll call."""
    digest = hashlib.sha256(f"ce-bench/v1/roll-call/{beacon_value}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def gap_rounds(config: RelayConfig) -> int:
    """Only every gap_rounds-th beacon round may start a roll call: roll_call_min_gap_s apart at least, so one
    roll call's answers are in before the next (decided by the round number alone, so every relay of a
    cluster that sees the leader's round decides the same, whatever rounds it missed)."""
    return max(1, math.ceil(config.roll_call_min_gap_s / config.beacon_interval_s))


def due(beacon: dict[str, Any], config: RelayConfig) -> float | None:
    """The unix time of the roll call this beacon round starts, or None if it starts none."""
    gap = gap_rounds(config)
    if int(beacon["round"]) % gap != 0:
        return None
    chance = min(1.0, gap * config.beacon_interval_s / config.roll_call_interval_s)
    if draw(str(beacon["value"])) >= chance:
        return None
    return float(beacon["issued_at"]) + config.roll_call_delay_s


def next_roll_call(beacon: dict[str, Any], now: float, config: RelayConfig) -> dict[str, Any]:
    """When the next roll call may come, as the pages show it (a countdown): the earliest moment (the next
    eligible round's issue + roll_call_delay_s, assuming rounds keep their interval), the chance each eligible
    round starts one, and the median moment. Nobody knows more before the round exists (draw())."""
    gap = gap_rounds(config)
    chance = min(1.0, gap * config.beacon_interval_s / config.roll_call_interval_s)
    r, issued = int(beacon["round"]), float(beacon["issued_at"])
    nxt = r + (gap - r % gap) % gap
    if nxt == r and (due(beacon, config) is None or issued + config.roll_call_delay_s < now):
        nxt += gap  # this round drew none, or its roll call has begun
    earliest = issued + (nxt - r) * config.beacon_interval_s + config.roll_call_delay_s
    rounds_to_median = 1 if chance >= 1.0 else max(1, math.ceil(math.log(0.5) / math.log(1.0 - chance)))
    return {"earliest_at": round(earliest, 3), "chance_each": round(chance, 6),
            "median_at": round(earliest + (rounds_to_median - 1) * gap * config.beacon_interval_s, 3),
            "every_s": config.roll_call_interval_s, "eligible_every_s": gap * config.beacon_interval_s,
            "method": "eligible beacon rounds each draw a roll call with this chance from their own value; "
                      "the moment is unknown until its round exists"}


@dataclass
class Proof:
    """What one node proved at a roll call: each figure already min(observed x trust_cap_factor, the work
    it was given / roll_call_target_s) — see shown(); the counted figures also follow its claims."""

    roll_call: str
    gflops: float = 0.0
    instances: int = 0
    tps: float = 0.0             # 0 until the llm phase showed it (and its hash was ever checked)
    gpu_tflops: float = 0.0      # fp32 TFLOP/s this roll call's GPU answer showed (0: none, or not yet judged)
    gpus: int = 0                # GPUs (instances) proven by that answer


def stop_after_s(config: RelayConfig) -> float:
    """When a node stops computing a roll call's SGEMM challenge and commits what it finished, in seconds
    after the challenge arrived on its clock (the message's stop_after_s)."""
    return config.roll_call_stop_share * config.roll_call_deadline_factor * config.roll_call_target_s


def work_s(config: RelayConfig) -> float:
    """The seconds of work at the claim a roll call's SGEMM challenge names: beyond the deadline, so a node
    at (or somewhat above) its claim is still computing when it stops. The work beyond what it committed
    is never counted: shown() counts only the committed products."""
    return config.roll_call_work_headroom * config.roll_call_deadline_factor * config.roll_call_target_s


def on_time(net_s: float, config: RelayConfig) -> bool:
    """Whether a roll-call answer met the common deadline (net_s: the answer's time, RTT allowance taken)."""
    return net_s <= config.roll_call_deadline_factor * config.roll_call_target_s


def shown(work: float, net_s: float, config: RelayConfig) -> float:
    """What a roll-call answer shows, per second: the observed rate x the cap, but never more than the work
    it was given over the common target time.

    The bound this buys: every counted answer arrived by deadline D' = deadline_factor x target (D). A machine
    doing C per second finishes at most C x D' of work by then, and each answer counts at most work / D, so
    one machine counts at most deadline_factor x C at a roll call however many identities, addresses or
    relays it answers through (1.25x by default; the RTT allowance adds at most 1 / (1 - share)). `work` is
    what the answer committed (the products finished by the node's stop, not those it was given), so a busy
    node shows what it did by the deadline."""
    if net_s <= 0:
        return 0.0
    return min(work / net_s * config.trust_cap_factor, work / config.roll_call_target_s)


def counted(proof: Proof, claimed_gflops: float | None, claimed_cores: int, claimed_tps: float | None,
            config: RelayConfig, claimed_gpu_tflops: float | None = None, claimed_gpus: int = 0) -> Contribution:
    """The node's contribution to the verified scoreboard from its latest roll call. GPU figures: fp32
    TFLOP/s proven (min of the fp32 claim and what the GPU answer showed) and the GPUs (instances) proven."""
    gflops = min(claimed_gflops or 0.0, proof.gflops)
    # Cores are not counted: a challenge proves throughput, not how many cores produced it (time-sliced
    # instances on 2 cores each showed the per-core floor: 10 identities counted 10x the machine's cores).
    # They stay a claim, like GPU memory and storage (claimed_cores is kept for the callers' symmetry).
    del claimed_cores
    tps = min(claimed_tps or 0.0, proof.tps)
    if gflops <= 0:
        return Contribution()
    gpu_tflops = min(claimed_gpu_tflops or 0.0, proof.gpu_tflops)
    # a GPU counts only at gpu_floor_tflops of what was shown each: a CPU answering the GPU challenge (numpy,
    # a software rasterizer) shows far less per "GPU" than any GPU worth scheduling
    # (the ratio nudged up by 1e-9: 0.3 / 0.1 is 2.9999999999999996 in floats, and three GPUs at the floor are 3)
    gpus = min(proof.gpus, max(claimed_gpus, 0), math.floor(gpu_tflops / config.gpu_floor_tflops * (1 + 1e-9)))
    # rounded down to the sums' milli- and micro-units: a node counted at its full claim never shows above it
    return Contribution(cpu_mgflops=math.floor(gflops * MILLI),
                        mtokens_per_sec=math.floor(tps * MILLI), gpus=gpus,
                        gpu_utflops=math.floor(gpu_tflops * MICRO) if gpus else 0)


@dataclass
class RollCall:
    """One roll call: who was asked, who answered, what was proven, and how spread the sends were. The GPU
    challenges go out in the same sends as the SGEMM ones (`at`, `send_spread_ms` cover both)."""

    id: str
    beacon_round: int
    at: float                                    # unix time of the first send
    challenged: set[str] = field(default_factory=set)      # node ids sent an SGEMM challenge
    answered: set[str] = field(default_factory=set)        # passed
    failed: dict[str, str] = field(default_factory=dict)   # node id -> code
    not_asked: dict[str, int] = field(default_factory=dict)  # sessions left out, by why (RollCaller._targets)
    send_spread_ms: float | None = None          # last send - first send, on the relay's clock
    llm_at: float | None = None
    llm_challenged: set[str] = field(default_factory=set)
    llm_answered: set[str] = field(default_factory=set)
    llm_failed: dict[str, str] = field(default_factory=dict)
    llm_send_spread_ms: float | None = None
    gpu_challenged: set[str] = field(default_factory=set)  # node ids sent a GPU challenge (with their SGEMM one)
    gpu_answered: set[str] = field(default_factory=set)
    gpu_failed: dict[str, str] = field(default_factory=dict)
    # node id -> (fp32 TFLOP/s shown, GPUs) of a GPU answer that counts: put on the node's SGEMM proof of this
    # roll call, whether that lands before or after it
    gpu_shown: dict[str, tuple[float, int]] = field(default_factory=dict)
    proven: dict[str, float] = field(default_factory=dict)  # totals once complete (filled by the desk)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "beacon_round": self.beacon_round, "at": round(self.at, 3),
                "sessions_challenged": len(self.challenged), "answered": len(self.answered),
                "failed": len(self.failed), "failure_codes": sorted(set(self.failed.values())),
                "sessions_not_asked": dict(sorted(self.not_asked.items())),
                "send_spread_ms": None if self.send_spread_ms is None else round(self.send_spread_ms, 3),
                "llm": {"at": None if self.llm_at is None else round(self.llm_at, 3),
                        "challenged": len(self.llm_challenged), "answered": len(self.llm_answered),
                        "failed": len(self.llm_failed), "failure_codes": sorted(set(self.llm_failed.values())),
                        "send_spread_ms": None if self.llm_send_spread_ms is None
                        else round(self.llm_send_spread_ms, 3)},
                "gpu": {"challenged": len(self.gpu_challenged), "answered": len(self.gpu_answered),
                        "failed": len(self.gpu_failed), "failure_codes": sorted(set(self.gpu_failed.values()))},
                "proven": dict(self.proven)}
