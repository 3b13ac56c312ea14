"""When the relay's Python collects cyclic garbage, so that no collection stalls its sessions.

Measured (bench/relay_sessions.py, 10,000 live sessions, ~450 MiB): CPython's automatic full collections
scanned every live object, took 200-580 ms each, came every few seconds while sessions were being set up, and
were the heartbeat ack p99 (0.56-0.72 s with the event loop at 40% of a core). The policy: every
`gc_freeze_interval_s` the objects alive are moved to the permanent generation (gc.freeze: O(1)), so automatic
collections only ever scan what was allocated since; every `gc_full_interval_s` everything is unfrozen and
collected once, which frees the reference cycles of sessions that ended meanwhile (one pause of that size per
interval instead of one every few seconds). Pure over an injected gc module; time passed in.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class GcPolicy:
    freeze_interval_s: float
    full_interval_s: float
    collector: Any = field(default=gc)  # the gc module, or a test's stand-in with freeze/unfreeze/collect
    last_full_at: float | None = None
    last_full_s: float | None = None     # how long the last full collection took (the /metrics gauge)
    last_full_freed: int = 0

    def tick(self, now: float) -> None:
        """Called every freeze_interval_s: a full collection when due, else a freeze."""
        if self.last_full_at is None:
            self.last_full_at = now  # the first full collection one interval after start
        if now - self.last_full_at >= self.full_interval_s:
            t0 = time.perf_counter()
            self.collector.unfreeze()
            self.last_full_freed = int(self.collector.collect())
            self.last_full_s = time.perf_counter() - t0
            self.last_full_at = now
        self.collector.freeze()
