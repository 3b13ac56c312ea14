"""What the relay believes of each node, from the challenges it observed (pure: time passed in).

Counters decay exponentially with a half-life (gossipsub v1.1's P4/P7 counters are the model): recent
behaviour matters most, and failures weigh more than passes. A node is

- verified   once `trust_min_passes` challenges passed (as many of them CPU challenges, one at least a solo
             challenge, which asks the whole claim where a roll call takes the work done by its deadline), one of them
             within `trust_fresh_s` (verification lasts only while the node keeps answering), no recent
             failure outweighs them, and its claimed GFLOP/s is within `trust_flag_factor` of the best
             throughput the relay recently observed;
- flagged    for `trust_flag_hold_s` after a wrong answer (whatever the decay), or while its decayed failure
             weight reaches `trust_flag_failures` (late answers pile up);
- unverified otherwise: too few challenges yet, none recent, a client that does not answer them, or, once
             `trust_min_passes` CPU challenges passed, a claim beyond `trust_flag_factor` x the best observed
             throughput (likewise tokens/s and GPU fp32 TFLOP/s). Not flagged: load alone makes a machine
             show less than it measured idle, and it still counts what its roll calls show.

The status is what a node's page shows. What it adds to the verified scoreboard is what the latest roll
call proved (web/proof/rollcall.py), and nothing while flagged.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from web.config import RelayConfig

# Failure weights by code: a wrong answer is evidence of cheating; a late or missing one may be a network
# hiccup or a busy phone, so several must pile up before they flag a node.
WRONG_ANSWER_CODES = frozenset({"wrong_proof", "wrong_rows", "wrong_tokens", "malformed_commit", "malformed_opening",
                                "implausible_observation", "wrong_output"})  # wrong_output: a dispatched task's
# output that lost its quorum (web/jobs/)


# A client of an older protocol (a reference-model token hash, web/proof/challenges.py parse_tokens): it proves
# nothing, but says nothing against the node either, so an operator who has not updated is not flagged for it.
NO_WEIGHT_CODES = frozenset({"outdated_client"})


def failure_weight(code: str, config: RelayConfig) -> float:
    if code in NO_WEIGHT_CODES:
        return 0.0
    return 1.0 if code in WRONG_ANSWER_CODES else config.trust_soft_failure_weight


@dataclass
class Trust:
    passed: float = 0.0        # decayed count of passed challenges
    failed: float = 0.0        # decayed failure weight
    decayed_at: float = 0.0    # unix time the counters were last decayed to
    passes_total: int = 0
    failures_total: int = 0
    last_at: float | None = None
    last_code: str | None = None
    observed_gflops: list[float] = field(default_factory=list)  # the last trust_observed_kept figures
    observed_tps: list[float] = field(default_factory=list)     # the same for reference-model challenges
    observed_gpu_tflops: list[float] = field(default_factory=list)  # the same for GPU challenges (fp32 TFLOP/s)
    flagged_until: float = 0.0   # unix time a wrong answer's hold ends (trust_flag_hold_s after it)
    last_pass_at: float | None = None
    tokens_checked: int = 0      # reference-model answers whose drawn token the relay checked and found equal
    roll_call_tokens_checked: int = 0  # of those, roll-call answers
    last_wrong_code: str | None = None
    solo_passes: int = 0         # passed solo SGEMM challenges (a roll call's answers pass with partial work)

    def to_state(self) -> dict[str, Any]:
        """Everything it holds, as JSON (the relay stores it with every result: start reads one row per node)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Trust:
        """The Trust to_state wrote (fields a later version added take their defaults)."""
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in state.items() if k in known})

    def _decay(self, now: float, half_life_s: float) -> None:
        if now > self.decayed_at:
            factor = math.pow(0.5, (now - self.decayed_at) / half_life_s)
            self.passed *= factor
            self.failed *= factor
            self.decayed_at = now

    def record(self, passed: bool, code: str, observed_gflops: float | None, now: float,
               config: RelayConfig, observed_tps: float | None = None, tokens_checked: bool = False,
               observed_gpu_tflops: float | None = None, roll_call: bool = False) -> None:
        self._decay(now, config.trust_half_life_s)
        keep = config.trust_observed_kept
        if passed:
            self.passed += 1.0
            self.passes_total += 1
            self.last_pass_at = now
            self.solo_passes += int(not roll_call and observed_gflops is not None)  # an SGEMM one: the CPU claim
            self.tokens_checked += int(tokens_checked)
            self.roll_call_tokens_checked += int(tokens_checked and roll_call)
            if observed_gflops is not None and math.isfinite(observed_gflops):
                self.observed_gflops = [*self.observed_gflops, observed_gflops][-keep:]
            if observed_tps is not None and math.isfinite(observed_tps):
                self.observed_tps = [*self.observed_tps, observed_tps][-keep:]
            if observed_gpu_tflops is not None and math.isfinite(observed_gpu_tflops):
                self.observed_gpu_tflops = [*self.observed_gpu_tflops, observed_gpu_tflops][-keep:]
        else:
            self.failed += failure_weight(code, config)
            self.failures_total += 1
            if code in WRONG_ANSWER_CODES:  # sticks for the hold, whatever the decay does to the weight
                self.last_wrong_code = code
                self.flagged_until = max(self.flagged_until, now + config.trust_flag_hold_s)
        self.last_at = now
        self.last_code = code

    @property
    def best_gflops(self) -> float | None:
        return max(self.observed_gflops) if self.observed_gflops else None

    @property
    def median_gflops(self) -> float | None:
        return statistics.median(self.observed_gflops) if self.observed_gflops else None

    def judge(self, claimed_gflops: float | None, now: float, config: RelayConfig,
              claimed_tps: float | None = None, claimed_gpu_tflops: float | None = None) -> tuple[str, str]:
        """(status, reason) against the node's current claims."""
        self._decay(now, config.trust_half_life_s)
        if now < self.flagged_until:
            return "flagged", (f"a wrong answer ({self.last_wrong_code}); flagged until "
                               f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(self.flagged_until))}")
        if self.failed >= config.trust_flag_failures:
            return "flagged", f"failed challenges recently (last: {self.last_code})"
        best = self.best_gflops
        # A claim beyond trust_flag_factor x the best observed is not believed (unverified), but not flagged:
        # a machine under load shows less than it measured idle, and load alone must never flag an honest node
        # or zero its count (issue 29). It counts what its roll calls show, capped at the claim, so an
        # overstatement gains nothing; the node re-measures (capsule/claim_drift.py).
        # judged on the best of several CPU challenges: one busy moment is not a lie. (Counted on passes of
        # any kind, one slow first SGEMM answer and one reference-model answer flagged an honest node on busy
        # cores, CI 2026-12-04: "claims 51.9 GFLOP/s; the best the relay observed is 24.5".)
        if (claimed_gflops and best is not None and len(self.observed_gflops) >= config.trust_min_passes
                and claimed_gflops > best * config.trust_flag_factor):
            return "unverified", (f"claims {claimed_gflops:.1f} GFLOP/s; the best the relay observed is {best:.1f} "
                               f"(more than {config.trust_flag_factor:g}x apart)")
        best_tps = max(self.observed_tps) if self.observed_tps else None
        if (claimed_tps and best_tps is not None and len(self.observed_tps) >= config.trust_min_passes
                and claimed_tps > best_tps * config.trust_flag_factor):
            return "unverified", (f"claims {claimed_tps:.1f} tokens/s; the best the relay observed is {best_tps:.1f} "
                               f"(more than {config.trust_flag_factor:g}x apart)")
        gpu = self.observed_gpu_tflops
        if (claimed_gpu_tflops and len(gpu) >= config.trust_min_passes
                and claimed_gpu_tflops > max(gpu) * config.trust_flag_factor):
            return "unverified", (f"claims {claimed_gpu_tflops:.4g} fp32 GPU TFLOP/s; the best the relay observed is "
                               f"{max(gpu):.4g} (more than {config.trust_flag_factor:g}x apart)")
        if self.passes_total < config.trust_min_passes:
            if self.passes_total == 0 and self.failures_total == 0:
                return "unverified", "no challenge answered yet (a client must say hello to be challenged)"
            return "unverified", f"{self.passes_total} of {config.trust_min_passes} challenges passed so far"
        if claimed_gflops is None:
            return "unverified", "the profile claims no GFLOP/s figure to verify"
        if len(self.observed_gflops) < config.trust_min_passes:
            return "unverified", (f"{len(self.observed_gflops)} of {config.trust_min_passes} CPU (SGEMM) challenges "
                                  "passed so far")
        if self.solo_passes < 1:
            # a roll call's answer passes with the work done by its deadline; a solo challenge asks the whole
            # claim. A client that let roll calls withdraw every solo challenge it held (unjudged) was verified
            # on roll calls alone (issue 45); a solo challenge comes every ~60 s while unverified.
            return "unverified", "no solo challenge passed yet (roll calls alone do not verify a node)"
        if self.last_pass_at is None or now - self.last_pass_at > config.trust_fresh_s:
            return "unverified", (f"no challenge passed in the last {config.trust_fresh_s:g} s (verification "
                                  "lasts only while the node keeps answering)")
        return "verified", f"the claim is within {config.trust_flag_factor:g}x of the throughput the relay observed"

    def score(self, now: float, config: RelayConfig) -> float:
        self._decay(now, config.trust_half_life_s)
        return round(self.passed - config.trust_failure_penalty * self.failed, 3)

    def to_json(self, claimed_gflops: float | None, now: float, config: RelayConfig,
                claimed_tps: float | None = None, claimed_gpu_tflops: float | None = None) -> dict[str, Any]:
        status, reason = self.judge(claimed_gflops, now, config, claimed_tps, claimed_gpu_tflops)
        gpu = self.observed_gpu_tflops
        best = self.best_gflops
        tps = self.observed_tps
        return {
            "status": status, "reason": reason, "score": self.score(now, config),
            "observed": {"gflops_fp32": round(best, 3) if best is not None else None,
                         "gflops_fp32_median": round(self.median_gflops or 0.0, 3) if best is not None else None,
                         "tokens_per_sec": round(max(tps), 3) if tps else None,
                         "tokens_per_sec_median": round(statistics.median(tps), 3) if tps else None,
                         "gpu_tflops_fp32": round(max(gpu), 6) if gpu else None,
                         "gpu_tflops_fp32_median": round(statistics.median(gpu), 6) if gpu else None,
                         "method": f"best and median of the last {config.trust_observed_kept} challenges: 2 n^3 x "
                                   "instances flop / (commitment received - challenge sent - the session's median "
                                   f"RTT, at most {config.challenge_rtt_share_max:g} of that time), on the "
                                   "relay's clock; tokens/s likewise: the tokens the answer committed (decoded by "
                                   "the reference model, one drawn and checked) / the same window; GPU TFLOP/s "
                                   "likewise: 2 n^3 x instances flop of the GPU challenge (the probe's fp32 WGSL "
                                   "matmul)",
                         "tokens_per_sec_reason": None if tps else
                         "no reference-model challenge answered yet (only clients that offer 'llm-rank' get them)"},
            "challenges": {"passed": self.passes_total, "failed": self.failures_total, "last_at": self.last_at,
                           "last_code": self.last_code},
        }
