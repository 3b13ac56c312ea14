"""Which reference-model answers the relay recomputes, as pure functions (the draw passed in).

A token hash is checked by recomputing it: the same decode on the relay's own reactor, as much CPU as the node
spent. So it is sampled, and a sampled check is only as strong as the cost of a new identity (issue 28: each
of 10 identities answered its first challenge honestly, then committed random hashes, and a caught one was
replaced by a fresh key: 9.9x the machine's tokens/s counted).

The rule: a node's first `roll_call_llm_full_checks` (M) roll-call answers are all recomputed; after that a
share p = `roll_call_llm_check_fraction`. Only roll-call answers count towards M: they come at the moment every
other identity is asked too, so a machine cannot make many identities "trusted" one after another (solo
challenges can be answered in turn; they are checked on the first and then at `challenge_llm_check_fraction`).

The bound (cheat_gain): a cheater's best play is M honest answers, then a random hash at every roll call until
a check catches it (a wrong hash flags: the key is spent), then a fresh key. Per key that is M answers of real
work, (1 - p) / p uncounted-but-counted cheats on average before the caught one, and the caught one counting
nothing. Counted over worked: (M + (1 - p) / p) / M = 1 + (1 - p) / (p x M); 1.1875x at M = 16, p = 0.25
(without M, a key's one honest answer bought 3 free ones: 4x per identity, as measured).
"""

from __future__ import annotations

from web.config import RelayConfig


def recompute(roll_call: bool, roll_call_checks: int, checks: int, draw: float, config: RelayConfig) -> bool:
    """Whether the relay recomputes this answer's token hash. roll_call_checks: the node's roll-call answers
    recomputed equal so far; checks: all its answers recomputed equal; draw: uniform in [0, 1), drawn after
    the answer arrived (the node cannot know it when it commits)."""
    if roll_call:
        if roll_call_checks < config.roll_call_llm_full_checks:
            return True
        return draw < config.roll_call_llm_check_fraction
    if checks == 0:
        return True
    return draw < config.challenge_llm_check_fraction


def cheat_gain(config: RelayConfig) -> float:
    """The most a cheater that discards caught keys counts per unit of reference-model work it does."""
    p = config.roll_call_llm_check_fraction
    if p <= 0:
        return float("inf")
    return 1.0 + (1.0 - p) / (p * max(config.roll_call_llm_full_checks, 1))
