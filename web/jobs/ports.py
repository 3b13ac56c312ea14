"""What the jobs part asks of the rest of the relay, and nothing more (web/relay.py wires it): a node's standing
on the map, the predicted RTT between two nodes, the current beacon value, and one thing to record — a wrong
output (the node's trust). Delivered work stays in the jobs' own store (JobStore.delivered)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class Standing:
    """A node as the map shows it now."""

    live: bool
    proven: bool               # counted at the latest roll call, and not flagged
    region: str | None = None
    cpu_gflops: float = 0.0    # what the latest roll call counted
    tokens_per_sec: float = 0.0
    gpu_tflops: float = 0.0
    mem_bw_gbps: float | None = None   # claimed
    memory_mb: int | None = None       # claimed available
    storage_free_gb: int | None = None
    flagged: bool = False      # a wrong answer or output lately: its results are taken no more


class NodeView(Protocol):
    def standing(self, node_id: str) -> Standing | None: ...

    def rtt_from(self, node_id: str) -> dict[str, float] | None:
        """Predicted RTT (ms) from `node_id` to every node with a coordinate (the SDK's FabricMap), or None
        when `node_id` has none."""
        ...

    def beacon_value(self) -> str: ...

    def beacon(self) -> dict[str, Any] | None:
        """The current round as a profile cites it ({relay, round, value}): capsule tasks measure on it."""
        ...

    async def wrong_output(self, node_id: str, detail: str) -> None:
        """A node's output lost the majority: a failure in its trust (flagged: no more work until it clears)
        and its history."""
        ...
