"""The probe plan: everything about a benchmark run that is drawn from the beacon.

A node cannot know its inputs before the beacon round exists, and cannot pick a quiet moment: the seed
(capsule inputs, weights of the reference model), the probe order and a start jitter all come from
sha256(domain || beacon value || node_id). Including the node id gives every node different inputs, so
one node's results cannot be replayed as another's.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from capsule.seeding import SplitMix64

CPU_PROBES = ("sgemm", "stream", "llm")
ALL_PROBES = ("sgemm", "stream", "disk", "llm")
DEFAULT_MAX_JITTER_MS = 1500


@dataclass(frozen=True)
class ProbePlan:
    seed_hex: str             # `--seed` for the capsule (64 hex digits)
    order: tuple[str, ...]    # probe order
    start_jitter_ms: int      # wait before starting, in [0, max_jitter_ms)


def plan_from_beacon(beacon_value_hex: str, node_id: str, probes: tuple[str, ...] = ALL_PROBES,
                     max_jitter_ms: int = DEFAULT_MAX_JITTER_MS) -> ProbePlan:
    try:
        value = bytes.fromhex(beacon_value_hex)
    except ValueError:
        raise ValueError(f"beacon value must be hex, got {beacon_value_hex[:20]!r}") from None
    seed = hashlib.sha256(b"ce-bench/v1/seed\n" + value + node_id.encode()).digest()
    rng = SplitMix64(int.from_bytes(seed[:8], "little"))
    order = list(probes)
    for i in range(len(order) - 1, 0, -1):  # Fisher-Yates
        j = rng.next() % (i + 1)
        order[i], order[j] = order[j], order[i]
    jitter = rng.next() % max_jitter_ms if max_jitter_ms > 0 else 0
    return ProbePlan(seed.hex(), tuple(order), int(jitter))


def instance_seed(seed_hex: str, index: int) -> str:
    """The seed of instance `index` of a whole-device run: every instance computes different products,
    so no instance can copy another's work, and each one's checksum reproduces from its own seed.
    Browsers (through Pyodide) and servers derive it with this function."""
    if not 0 <= index < 2**32:
        raise ValueError(f"instance index must be in [0, 2^32), got {index}")
    raw = bytes.fromhex(seed_hex)
    return hashlib.sha256(b"ce-bench/v1/instance\n" + raw + index.to_bytes(4, "little")).hexdigest()
