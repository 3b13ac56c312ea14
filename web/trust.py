"""What the relay believes of each node, from the challenges it observed (pure: time passed in).

Counters decay exponentially with a half-life (gossipsub v1.1's P4/P7 counters are the model): recent
behaviour matters most, and failures weigh more than passes. A node is

- verified   once `trust_min_passes` challenges passed, no recent failure outweighs them, and its claimed
             GFLOP/s is within `trust_flag_factor` of the best throughput the relay recently observed;
- flagged    when its decayed failure weight reaches `trust_flag_failures` (one wrong answer does), or, once
             `trust_min_passes` challenges passed, its claim exceeds the best observed throughput by more than
             `trust_flag_factor`;
- unverified otherwise (too few challenges yet, or a client that does not answer them).

What a node adds to the verified scoreboard is its claim capped at the *median* of its recent observations x
`trust_cap_factor`; unverified and flagged nodes add nothing there (web/atlas.py keeps both scoreboards).
Only the last `trust_observed_kept` observations count: a node that was challenged alone on its machine, and
now shares it with other identities challenged at the same moment, soon shows only its share.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from web.config import RelayConfig

# Failure weights by code: a wrong answer is evidence of cheating; a late or missing one may be a network
# hiccup or a busy phone, so several must pile up before they flag a node.
WRONG_ANSWER_CODES = frozenset({"wrong_proof", "wrong_rows", "wrong_tokens", "malformed_commit", "malformed_opening"})


def failure_weight(code: str, config: RelayConfig) -> float:
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

    def _decay(self, now: float, half_life_s: float) -> None:
        if now > self.decayed_at:
            factor = math.pow(0.5, (now - self.decayed_at) / half_life_s)
            self.passed *= factor
            self.failed *= factor
            self.decayed_at = now

    def record(self, passed: bool, code: str, observed_gflops: float | None, now: float,
               config: RelayConfig, observed_tps: float | None = None) -> None:
        self._decay(now, config.trust_half_life_s)
        keep = config.trust_observed_kept
        if passed:
            self.passed += 1.0
            self.passes_total += 1
            if observed_gflops is not None and math.isfinite(observed_gflops):
                self.observed_gflops = [*self.observed_gflops, observed_gflops][-keep:]
            if observed_tps is not None and math.isfinite(observed_tps):
                self.observed_tps = [*self.observed_tps, observed_tps][-keep:]
        else:
            self.failed += failure_weight(code, config)
            self.failures_total += 1
        self.last_at = now
        self.last_code = code

    @property
    def best_gflops(self) -> float | None:
        return max(self.observed_gflops) if self.observed_gflops else None

    @property
    def median_gflops(self) -> float | None:
        return statistics.median(self.observed_gflops) if self.observed_gflops else None

    def judge(self, claimed_gflops: float | None, now: float, config: RelayConfig,
              claimed_tps: float | None = None) -> tuple[str, str]:
        """(status, reason) against the node's current claims."""
        self._decay(now, config.trust_half_life_s)
        if self.failed >= config.trust_flag_failures:
            return "flagged", f"failed challenges recently (last: {self.last_code})"
        best = self.best_gflops
        # judged on the best of several: one busy moment is not a lie
        if (claimed_gflops and best is not None and self.passes_total >= config.trust_min_passes
                and claimed_gflops > best * config.trust_flag_factor):
            return "flagged", (f"claims {claimed_gflops:.1f} GFLOP/s; the best the relay observed is {best:.1f} "
                               f"(more than {config.trust_flag_factor:g}x apart)")
        best_tps = max(self.observed_tps) if self.observed_tps else None
        if (claimed_tps and best_tps is not None and len(self.observed_tps) >= config.trust_min_passes
                and claimed_tps > best_tps * config.trust_flag_factor):
            return "flagged", (f"claims {claimed_tps:.1f} tokens/s; the best the relay observed is {best_tps:.1f} "
                               f"(more than {config.trust_flag_factor:g}x apart)")
        if self.passes_total < config.trust_min_passes:
            if self.passes_total == 0 and self.failures_total == 0:
                return "unverified", "no challenge answered yet (a client must say hello to be challenged)"
            return "unverified", f"{self.passes_total} of {config.trust_min_passes} challenges passed so far"
        if claimed_gflops is None:
            return "unverified", "the profile claims no GFLOP/s figure to verify"
        return "verified", f"the claim is within {config.trust_flag_factor:g}x of the throughput the relay observed"

    def score(self, now: float, config: RelayConfig) -> float:
        self._decay(now, config.trust_half_life_s)
        return round(self.passed - config.trust_failure_penalty * self.failed, 3)

    def counted_gflops(self, claimed_gflops: float | None, config: RelayConfig) -> float:
        """What the verified scoreboard counts: the claim, capped at the median observed x trust_cap_factor
        (the median: one lucky quiet moment must not lift what counts)."""
        median = self.median_gflops
        if not claimed_gflops or median is None:
            return 0.0
        return min(claimed_gflops, median * config.trust_cap_factor)

    def counted_tps(self, claimed_tps: float | None, config: RelayConfig) -> float:
        """The same cap for tokens/s; nothing before a reference-model challenge observed any."""
        if not claimed_tps or not self.observed_tps:
            return 0.0
        return min(claimed_tps, statistics.median(self.observed_tps) * config.trust_cap_factor)

    def to_json(self, claimed_gflops: float | None, now: float, config: RelayConfig,
                claimed_tps: float | None = None) -> dict[str, Any]:
        status, reason = self.judge(claimed_gflops, now, config, claimed_tps)
        best = self.best_gflops
        tps = self.observed_tps
        return {
            "status": status, "reason": reason, "score": self.score(now, config),
            "observed": {"gflops_fp32": round(best, 3) if best is not None else None,
                         "gflops_fp32_median": round(self.median_gflops or 0.0, 3) if best is not None else None,
                         "tokens_per_sec": round(max(tps), 3) if tps else None,
                         "tokens_per_sec_median": round(statistics.median(tps), 3) if tps else None,
                         "method": f"best and median of the last {config.trust_observed_kept} challenges: 2 n^3 x "
                                   "instances flop / (commitment received - challenge sent - session RTT), on the "
                                   "relay's clock; tokens/s likewise: (32 prompt + decode) forward passes of "
                                   "the reference model / the same window",
                         "tokens_per_sec_reason": None if tps else
                         "no reference-model challenge answered yet (only clients that offer 'llm' get them)"},
            "counted": {"cpu_gflops": round(self.counted_gflops(claimed_gflops, config), 3)
                        if status == "verified" else 0.0,
                        "tokens_per_sec": round(self.counted_tps(claimed_tps, config), 3)
                        if status == "verified" else 0.0},
            "challenges": {"passed": self.passes_total, "failed": self.failures_total, "last_at": self.last_at,
                           "last_code": self.last_code},
        }
