"""Which nodes are live: each heartbeat (or accepted profile) refreshes a node; a node silent for
`timeout_s` goes offline. Touch and sweep are O(1) amortised: nodes are kept in last-seen order."""

from __future__ import annotations

from collections import OrderedDict


class Liveness:
    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._last_seen: OrderedDict[str, float] = OrderedDict()

    def touch(self, node_id: str, now: float) -> bool:
        """Records a sign of life; True when the node was offline (or unknown) before."""
        was_live = node_id in self._last_seen
        self._last_seen.pop(node_id, None)
        self._last_seen[node_id] = now
        return not was_live

    def sweep(self, now: float) -> list[str]:
        """Removes and returns the nodes whose last sign of life is older than the timeout."""
        gone = []
        while self._last_seen:
            node_id, seen = next(iter(self._last_seen.items()))
            if now - seen <= self.timeout_s:
                break
            self._last_seen.popitem(last=False)
            gone.append(node_id)
        return gone

    def last_seen(self, node_id: str) -> float | None:
        return self._last_seen.get(node_id)

    def is_live(self, node_id: str) -> bool:
        return node_id in self._last_seen

    def __len__(self) -> int:
        return len(self._last_seen)
