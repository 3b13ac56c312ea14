"""The rules of placement and checking, pure (no I/O, no clock): who may run a task, in which order, which
results are accepted, and the odds that a wrong output is accepted (docs/jobs.md).

Placement: a task goes only to a live node proven at the latest roll call, not flagged, meeting the manifest's
`min`, with a free slot; among those, by region (the asked one first), by predicted RTT to `near` (the SDK's
FabricMap.predicted_rtt), by load (running / slots), and last by a draw from the job's seed (the beacon value at
submission with the job's secret), so a node cannot arrange to be placed on the task it wants to cheat.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from capsule.job_records import Minimums


@dataclass(frozen=True)
class Candidate:
    """A live node that offered slots, as the map shows it now."""

    node_id: str
    address: str               # the source host of its session: replicas of one task go to different ones
    proven: bool               # counted at the latest roll call, verified and not flagged
    slots: int                 # tasks it runs at once (its `jobs` message)
    running: int = 0           # tasks it runs now, of every job
    checked: int = 0           # its outputs another node confirmed (few: every task it runs is checked)
    region: str | None = None
    cpu_gflops: float = 0.0    # proven (what the latest roll call counted)
    tokens_per_sec: float = 0.0
    gpu_tflops: float = 0.0
    mem_bw_gbps: float | None = None   # claimed (not proven at roll calls)
    memory_mb: int | None = None       # claimed available
    storage_free_gb: int | None = None  # claimed free
    slow: bool = False         # delivers far below its proven speed (web/jobs/pace.py): placed after the others
    kinds: frozenset[str] = frozenset({"wasi"})  # the kinds of task it runs (its `jobs` message)

    @property
    def free(self) -> int:
        return self.slots - self.running


def unmet(c: Candidate, want: Minimums) -> str | None:
    """Why `c` does not meet `want` (None: it does)."""
    checks: list[tuple[str, float | None, float | None]] = [
        ("cpu_gflops", want.cpu_gflops, c.cpu_gflops), ("tokens_per_sec", want.tokens_per_sec, c.tokens_per_sec),
        ("gpu_tflops", want.gpu_tflops, c.gpu_tflops), ("mem_bw_gbps", want.mem_bw_gbps, c.mem_bw_gbps),
        ("memory_mb", want.memory_mb, c.memory_mb), ("storage_free_gb", want.storage_free_gb, c.storage_free_gb)]
    for name, floor, have in checks:
        if floor is not None and (have is None or have < floor):
            return f"{name} {have} < {floor}"
    return None


def draw(seed: str, *parts: object) -> float:
    """A number in [0, 1) from the job's seed and `parts`: the same for everyone who knows the seed."""
    digest = hashlib.sha256(":".join([seed, *map(str, parts)]).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


@dataclass(frozen=True)
class Ranked:
    candidate: Candidate
    reason: str


def rank(candidates: Sequence[Candidate], want: Minimums, region: str | None,
         rtt_ms: Callable[[str], float | None] | None, seed: str, salt: object) -> list[Ranked]:
    """The eligible candidates (full ones included: placement skips them for now), best first, each with the reason
    it is where it is."""
    rows: list[tuple[tuple[float, float, float, float, float], Ranked]] = []
    for c in candidates:
        if not c.proven or unmet(c, want) is not None:  # (a full node stays ranked: it is busy, not unfit)
            continue
        rtt = rtt_ms(c.node_id) if rtt_ms is not None else None
        off_region = 0.0 if region is None or c.region == region else 1.0
        load = c.running / c.slots
        tie = draw(seed, salt, c.node_id)
        words = ["proven at the latest roll call"]
        if region is not None:
            words.append(f"region {c.region or 'none'}" + ("" if off_region == 0 else f" (asked {region})"))
        if rtt_ms is not None:
            words.append("predicted RTT " + ("unknown" if rtt is None else f"{rtt:.1f} ms") + " to near")
        words.append(f"load {c.running}/{c.slots}")
        if c.slow:
            words.append("delivers far below its proven speed: placed after the others")
        key = (off_region, float(c.slow), math.inf if rtt is None else (rtt if rtt_ms is not None else 0.0), load, tie)
        rows.append((key, Ranked(c, ", ".join(words))))
    rows.sort(key=lambda row: row[0])
    return [r for _, r in rows]


OutputKey = tuple[int, str]  # (exit code, sha256 of stdout): what replicas must agree on


def majority(outputs: Sequence[OutputKey], replicas: int) -> OutputKey | None:
    """The output more than half of `replicas` returned, if any (BOINC's quorum)."""
    need = replicas // 2 + 1
    for key in set(outputs):
        if outputs.count(key) >= need:
            return key
    return None


def audit_drawn(seed: str, job_id: str, task: int, share: float) -> bool:
    return draw(seed, "audit", job_id, task) < share


def false_accept_odds(redundancy: int, audit_share: float, liar_share: float) -> float:
    """The chance that one wrong output is accepted, exactly as the book decides (web/jobs/book.py): the liar's
    output stands against outputs of other nodes drawn at random, each a colluding liar (the same wrong output)
    with probability `liar_share`; a task is decided when an output has a majority of `replicas`, and a tie adds
    one node, up to max(3, R + 2) (then it fails: not accepted). With R = 1 the task is checked only when drawn
    for audit (`audit_share`), then as R = 2."""
    cap = max(3, redundancy + 2)

    @functools.cache
    def accepted(lies: int, truths: int, replicas: int) -> float:
        need = replicas // 2 + 1
        if lies >= need:
            return 1.0
        if truths >= need:
            return 0.0
        if lies + truths >= replicas:  # every replica answered, no majority: one more node, or the task fails
            return accepted(lies, truths, replicas + 1) if replicas < cap else 0.0
        f = liar_share
        return f * accepted(lies + 1, truths, replicas) + (1 - f) * accepted(lies, truths + 1, replicas)

    if redundancy == 1:
        return (1 - audit_share) + audit_share * accepted(1, 0, 2)
    return accepted(1, 0, redundancy)


LIAR_SHARES = (0.0, 0.1, 0.3)  # shares of colluding liars among the other nodes, in GET /v1/checks


def odds(audit_share: float, audit_all_until_checked: int) -> dict[str, Any]:
    """GET /v1/checks "jobs": the chance that one wrong output is accepted, per redundancy and audit share."""
    return {
        "what": "a dispatched task's output is accepted only when the majority of the nodes that ran it agree "
                "(redundancy R); with R = 1 a share of tasks (audit) runs again on a node of another address, and "
                "a mismatch goes to a third; a node whose output lost is flagged and placed on no more work",
        "novices": f"every task of a node with fewer than {audit_all_until_checked} outputs confirmed by another node "
                   "is audited: a fresh identity lies unaudited only after that much checked, honest work",
        "false_accept_per_lie": {
            f"R={r}" + (f", audit={a:g}" if r == 1 else ""): {f"liars {f:g}": round(false_accept_odds(r, a, f), 6)
                                                              for f in LIAR_SHARES}
            for r, a in ((1, 0.0), (1, audit_share), (1, 1.0), (2, 0.0), (3, 0.0))},
        # a node lying on a share of its tasks is caught at its first audited lie (a colluding auditor aside):
        # until then, each of its lies is accepted with the odds above; expected lies accepted first:
        "lies_accepted_before_caught": {f"audit={a:g}": round((1 - a) / a, 1) for a in (audit_share, 0.2, 0.5)},
        "after_a_catch": "every output of the caught node accepted unchecked in a job still running is checked "
                         "again; jobs that had ended keep their results",
        "default_audit_share": audit_share,
    }
