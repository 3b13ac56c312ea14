"""Token buckets keyed by client IP or NodeId. Pure: time is passed in."""

from __future__ import annotations

from collections import OrderedDict


class TokenBuckets:
    """`rate` tokens per second up to `burst`; least recently used keys are forgotten beyond max_keys so
    a flood of addresses cannot grow memory without bound."""

    def __init__(self, rate_per_s: float, burst: int, max_keys: int = 100_000) -> None:
        self.rate = rate_per_s
        self.burst = float(burst)
        self.max_keys = max_keys
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def take(self, key: str, now: float) -> float:
        """0 when allowed; otherwise the seconds until a token is available."""
        tokens, last = self._buckets.pop(key, (self.burst, now))
        tokens = min(self.burst, tokens + (now - last) * self.rate)
        if tokens >= 1.0:
            self._buckets[key] = (tokens - 1.0, now)
            wait = 0.0
        else:
            self._buckets[key] = (tokens, now)
            wait = (1.0 - tokens) / self.rate if self.rate > 0 else float("inf")
        while len(self._buckets) > self.max_keys:
            self._buckets.popitem(last=False)
        return wait
