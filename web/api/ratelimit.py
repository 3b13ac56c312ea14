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

    def _refilled(self, key: str, now: float) -> float:
        tokens, last = self._buckets.pop(key, (self.burst, now))
        return min(self.burst, tokens + (now - last) * self.rate)

    def _keep(self, key: str, tokens: float, now: float) -> None:
        self._buckets[key] = (tokens, now)
        while len(self._buckets) > self.max_keys:
            self._buckets.popitem(last=False)

    def _until(self, tokens: float, needed: float) -> float:
        return (needed - tokens) / self.rate if self.rate > 0 else float("inf")

    def take(self, key: str, now: float) -> float:
        """0 when allowed; otherwise the seconds until a token is available."""
        tokens = self._refilled(key, now)
        if tokens >= 1.0:
            self._keep(key, tokens - 1.0, now)
            return 0.0
        self._keep(key, tokens, now)
        return self._until(tokens, 1.0)

    def charge(self, key: str, amount: float, now: float) -> float:
        """Takes `amount` whether or not it is there (what was already received: bytes): 0 while the balance
        stays >= 0, else the seconds until it is back to 0. The debt is held to one burst."""
        tokens = max(-self.burst, self._refilled(key, now) - amount)
        self._keep(key, tokens, now)
        return 0.0 if tokens >= 0 else self._until(tokens, 0.0)

    def debt_s(self, key: str, now: float) -> float:
        """The seconds until the key's balance is back to 0 (0 when it is not in debt), taking nothing."""
        tokens, last = self._buckets.get(key, (self.burst, now))
        tokens = min(self.burst, tokens + (now - last) * self.rate)
        return 0.0 if tokens >= 0 else self._until(tokens, 0.0)
