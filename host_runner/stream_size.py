"""STREAM's array rule for the whole-CPU triad: each array at least 4x the last-level cache (McCalpin's STREAM
README: "each array must be at least 4 times the size of the available cache memory"), or the figure measures
the cache. The capsule's default of 64 MiB per array read 17.7 GB/s on a machine with a 300 MiB last-level
cache where 256 MiB arrays read 13.5 and native C triad 13.3 (issue 29).

The whole-CPU run gives each of k instances its own three arrays, which together play the role of STREAM's
shared arrays split among threads, so the rule is k x array >= 4 x LLC: array = 4 x LLC / k, never below the
capsule's default, at most what wasm32 and the machine's memory allow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_ARRAY_MIB = 64    # the capsule's --stream-mib default (capsule/kernels/driver.c)
MAX_ARRAY_MIB = 1024      # the capsule's --stream-mib limit: three arrays stay inside wasm32's 4 GiB
CACHE_FACTOR = 4          # STREAM: each array >= 4 x the last-level cache
MEMORY_SHARE = 0.5        # of available memory, at most, for all instances' arrays together
SYS_CPU = Path("/sys/devices/system/cpu")


@dataclass(frozen=True)
class LastLevelCache:
    """The machine's last-level cache in bytes (the distinct caches of the highest level, summed: AMD EPYC has
    one L3 per core complex), or None with the reason it could not be read."""

    bytes: int | None
    level: int | None
    source: str


def _size_bytes(text: str) -> int | None:
    text = text.strip().upper()
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    try:
        if text and text[-1] in units:
            return int(text[:-1]) * units[text[-1]]
        return int(text)
    except ValueError:
        return None


def last_level_cache(root: Path = SYS_CPU) -> LastLevelCache:
    caches: dict[tuple[int, str], int] = {}  # (level, shared cpus) -> bytes
    for index in sorted(root.glob("cpu[0-9]*/cache/index[0-9]*")):
        try:
            kind = (index / "type").read_text().strip()
            level = int((index / "level").read_text())
            size = _size_bytes((index / "size").read_text())
            shared = (index / "shared_cpu_list").read_text().strip()
        except (OSError, ValueError):
            continue
        if kind in ("Unified", "Data") and size:
            caches[(level, shared)] = size
    if not caches:
        return LastLevelCache(None, None, f"no cache sizes readable under {root}")
    top = max(level for level, _ in caches)
    return LastLevelCache(sum(size for (level, _), size in caches.items() if level == top), top,
                          f"{root}/cpu*/cache/index*/size (level {top}, distinct shared_cpu_list)")


def array_mib(instances: int, cache: LastLevelCache, available_mb: float | None) -> tuple[int, dict[str, Any]]:
    """The per-instance STREAM array size for `instances` instances, and the evidence of how it was sized."""
    k = max(instances, 1)
    evidence: dict[str, Any] = {"rule": "instances x array >= 4 x last-level cache (STREAM), at least the "
                                        f"capsule's {DEFAULT_ARRAY_MIB} MiB, at most {MAX_ARRAY_MIB} MiB (wasm32) "
                                        f"and {MEMORY_SHARE:g} of available memory for all arrays",
                                "instances": k, "llc_mib": None, "llc_source": cache.source}
    if cache.bytes is None:
        evidence["why_default"] = "the last-level cache could not be read: the capsule's default size"
        return DEFAULT_ARRAY_MIB, evidence
    evidence["llc_mib"] = round(cache.bytes / (1 << 20), 3)
    wanted = math.ceil(CACHE_FACTOR * cache.bytes / k / (1 << 20))
    mib = max(DEFAULT_ARRAY_MIB, wanted)
    if available_mb is not None and available_mb > 0:
        by_memory = int(MEMORY_SHARE * available_mb / (3 * k))
        if by_memory < mib:
            mib = max(1, by_memory)
            evidence["capped_by"] = f"available memory ({available_mb:.0f} MB)"
    if mib > MAX_ARRAY_MIB:
        mib = MAX_ARRAY_MIB
        evidence["capped_by"] = "wasm32 (three arrays within 4 GiB)"
    evidence["follows_rule"] = k * mib >= CACHE_FACTOR * cache.bytes / (1 << 20)
    return mib, evidence
