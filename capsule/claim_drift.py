"""Claims that follow the machine: when a node's roll-call answers keep showing a different speed from its
claim, it measures again and registers what it does now, instead of waiting for its next scheduled measurement
(6 h): `ce-bench node` (host_runner/agent.py) and the join page (browser_node/claims.js, through Pyodide: the
same rule in both).

Below the claim, the roll calls still count what the node does (the relay counts the work it finished by the
deadline), but its page and the claimed scoreboard would keep a figure the machine no longer reaches; above
it, the counted figure is capped at the claim, so a node whose load went away counts less than it does. The
rule is pure so it can be tested alone: the last `answers` roll-call SGEMM answers all below `low` x the
claim, or all above `high` x it (and never twice within `min_gap_s`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DriftConfig:
    answers: int = 3          # consecutive roll-call SGEMM answers (200 s apart on average: ~10 min)
    low: float = 0.8          # observed below this share of the claim ...
    high: float = 1.25        # ... or above this multiple of it
    min_gap_s: float = 900.0  # s between two measurements this rule starts (a run takes ~15 s of the machine)


def drift(results: list[dict[str, Any]], claimed_gflops: float | None, config: DriftConfig = DriftConfig()
          ) -> str | None:
    """Why the node should measure again now (None: no reason). `results` are the relay's challenge_result
    messages in arrival order; only roll-call SGEMM answers with an observed figure are read."""
    if not claimed_gflops or claimed_gflops <= 0:
        return None
    observed = [float(r["observed_gflops"]) for r in results
                if r.get("roll_call") and r.get("kind", "sgemm") == "sgemm"
                and isinstance(r.get("observed_gflops"), int | float)][-config.answers:]
    if len(observed) < config.answers:
        return None
    shown = ", ".join(f"{o:.1f}" for o in observed)
    if all(o < config.low * claimed_gflops for o in observed):
        return (f"the last {config.answers} roll calls observed {shown} GFLOP/s, below {config.low:g} of the "
                f"{claimed_gflops:.1f} claimed")
    if all(o > config.high * claimed_gflops for o in observed):
        return (f"the last {config.answers} roll calls observed {shown} GFLOP/s, above {config.high:g}x the "
                f"{claimed_gflops:.1f} claimed")
    return None
