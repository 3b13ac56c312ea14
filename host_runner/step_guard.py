"""Measurement steps kept apart from the node's own challenge answers.

A node that is live answers the relay's challenges while it measures itself again (a roll call's moment is
drawn from the beacon, so it cannot be avoided). A step that an answer overlapped timed the cores it shared
with that work, and read a share of the machine: a whole-CPU run beside a roll call's answer read 37.7 GFLOP/s
where the step before it had read 78.6 (tests/test_node_drift.py, AMD EPYC, 2026-12-07). Such a step waits for
the answer to end and runs again; the join page does the same (browser_node/join.js runAll).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

T = TypeVar("T")


class AnswerWatch(Protocol):
    """What a step needs to know of the live session (host_runner/live_client.py LiveSession)."""

    @property
    def answering(self) -> bool: ...  # computing a challenge's answer now

    @property
    def worked(self) -> int: ...  # challenges begun since the session started


@dataclass
class StepGuard:
    watch: AnswerWatch | None = None
    wait_s: float = 10.0   # the longest wait for an answer in progress before a step (an llm answer: a few s)
    tries: int = 3         # runs of one step at most; the last is kept whatever overlapped it
    poll_s: float = 0.05
    run_again: int = 0     # steps run again so far (the profile's evidence.cpu.steps_run_again)

    def run(self, step: Callable[[], T]) -> T:
        """step(), run again (after the answer) while an answer overlapped it, `tries` times at most."""
        for attempt in range(1, self.tries + 1):
            if self.watch is None:
                return step()
            deadline = time.monotonic() + self.wait_s
            while self.watch.answering and time.monotonic() < deadline:
                time.sleep(self.poll_s)
            begun, busy = self.watch.worked, self.watch.answering
            result = step()
            if attempt == self.tries or (not busy and self.watch.worked == begun):
                return result
            self.run_again += 1
        raise RuntimeError("unreachable: the last try returns")
