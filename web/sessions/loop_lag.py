"""The relay's own event-loop lag (issue 28): a task that sleeps a short interval and records how late it woke
(scheduled wake-up vs actual). While the loop is busy with something else (a flood of frames, a long
callback), every message that arrives waits for it, and an answer's arrival is stamped late by that much.
What a node's answer is forgiven for it (lag_allowance, lag_forgiven: docs/protocol.md, "A roll call nobody
can spoil") is read from here; /metrics and GET /v1/checks show the figures.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Any

from web.api.metrics import Histogram
from web.config import RelayConfig

KEPT_S = 300.0  # samples kept: longer than any answer window (commit 20 s + opening 10 s), and /v1/checks' minute


class LoopLag:
    def __init__(self, interval_s: float = 0.05) -> None:
        self.interval_s = interval_s
        self.samples: deque[tuple[float, float]] = deque()  # (woke at, lag), perf_counter seconds
        self.histogram = Histogram()
        self.due: float | None = None  # when the running sleep should end

    async def run(self) -> None:
        while True:
            self.due = time.perf_counter() + self.interval_s
            await asyncio.sleep(self.interval_s)
            now = time.perf_counter()
            self.record(now, max(0.0, now - self.due))

    def record(self, now: float, lag: float) -> None:
        self.samples.append((now, lag))
        self.histogram.observe(lag)
        while self.samples and self.samples[0][0] < now - KEPT_S:
            self.samples.popleft()

    def current(self, now: float) -> float:
        """The stall in progress at `now` (the monitor has not woken since it was due): a message read right
        after a stall is stamped before the monitor records it."""
        return max(0.0, now - self.due) if self.due is not None else 0.0

    def worst_between(self, start: float, end: float) -> float:
        """The longest stall that overlapped [start, end] (perf_counter seconds), the one in progress at `end`
        included: each sample covers [woke - lag, woke]."""
        worst = self.current(end)
        for woke, lag in reversed(self.samples):
            if woke < start:
                break
            if woke - lag <= end:
                worst = max(worst, lag)
        return worst

    def summary(self, now: float, window_s: float = 60.0) -> dict[str, Any]:
        """The lag of the last window_s, in seconds: what GET /v1/checks shows."""
        recent = sorted(lag for woke, lag in self.samples if woke >= now - window_s)
        if not recent:
            return {"window_s": window_s, "samples": 0, "p50_s": None, "p99_s": None, "max_s": None}
        return {"window_s": window_s, "samples": len(recent), "p50_s": round(recent[len(recent) // 2], 4),
                "p99_s": round(recent[min(len(recent) - 1, int(0.99 * len(recent)))], 4),
                "max_s": round(recent[-1], 4)}


def lag_allowance(lag_s: float, config: RelayConfig) -> float:
    """What an answer is forgiven for the relay's longest stall during its window: none below
    loop_lag_allowance_min_s (timer noise), at most loop_lag_allowance_max_s."""
    return min(lag_s, config.loop_lag_allowance_max_s) if lag_s > config.loop_lag_allowance_min_s else 0.0


def lag_forgiven(net_s: float, allowance: float, roll_call: bool, config: RelayConfig) -> float:
    """An answer's time (web/proof/challenges.py net_time_s) with the relay's lag forgiven: a roll-call answer after
    the common deadline (web/proof/rollcall.py on_time) by no more than the allowance counts as arriving at the
    deadline, so its figure is the work over the deadline, never more (its bytes arrived up to `allowance`
    before the relay could read them); any other answer keeps the relay's clock."""
    deadline = config.roll_call_deadline_factor * config.roll_call_target_s
    if not roll_call or allowance <= 0 or net_s <= deadline or net_s - allowance > deadline:
        return net_s
    return deadline
