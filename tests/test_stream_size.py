"""STREAM's array rule (host_runner/stream_size.py): arrays >= 4x the last-level cache over the instances,
read from a sysfs tree, capped by wasm32 and memory, and named in the evidence."""

from __future__ import annotations

from pathlib import Path

from host_runner.stream_size import LastLevelCache, array_mib, last_level_cache


def fake_sysfs(root: Path, caches: dict[int, list[tuple[int, str, str, str]]]) -> Path:
    """cpu -> [(level, type, size, shared_cpu_list)] as sysfs lays them out."""
    for cpu, entries in caches.items():
        for i, (level, kind, size, shared) in enumerate(entries):
            d = root / f"cpu{cpu}" / "cache" / f"index{i}"
            d.mkdir(parents=True)
            (d / "level").write_text(f"{level}\n")
            (d / "type").write_text(f"{kind}\n")
            (d / "size").write_text(f"{size}\n")
            (d / "shared_cpu_list").write_text(f"{shared}\n")
    return root


def test_the_last_level_cache_is_the_sum_of_the_distinct_top_level_caches(tmp_path: Path) -> None:
    # two core complexes of two cores, 16 MiB of L3 each (EPYC-like), 1 MiB L2 per core, instruction caches
    layout = {c: [(1, "Instruction", "32K", str(c)), (1, "Data", "32K", str(c)), (2, "Unified", "1024K", str(c)),
                  (3, "Unified", "16384K", "0-1" if c < 2 else "2-3")] for c in range(4)}
    cache = last_level_cache(fake_sysfs(tmp_path / "a", layout))
    assert (cache.bytes, cache.level) == (32 << 20, 3)
    one = last_level_cache(fake_sysfs(tmp_path / "b", {0: [(2, "Unified", "2M", "0")], 1: [(2, "Unified", "2M", "1")]}))
    assert (one.bytes, one.level) == (4 << 20, 2)
    missing = last_level_cache(tmp_path / "nothing")
    assert missing.bytes is None and "no cache sizes" in missing.source


def test_arrays_follow_the_rule_within_the_caps() -> None:
    llc = LastLevelCache(300 << 20, 3, "test")  # the machine of issue 29: 64 MiB arrays read the cache
    mib, evidence = array_mib(2, llc, 100_000)
    assert mib == 600 and evidence["follows_rule"] and evidence["llc_mib"] == 300  # 2 x 600 >= 4 x 300
    assert array_mib(1, llc, 100_000)[0] == 1024 and array_mib(1, llc, 100_000)[1]["capped_by"].startswith("wasm32")
    assert array_mib(8, llc, 100_000)[0] == 150
    assert array_mib(2, LastLevelCache(32 << 20, 3, "test"), 100_000)[0] == 64  # this VM: the default holds
    assert array_mib(64, llc, 100_000)[0] == 64  # never below the capsule's default
    small, why = array_mib(2, llc, 2_000)  # 0.5 of 2 GB over 6 arrays: 166 MiB
    assert small == 166 and "available memory" in why["capped_by"] and not why["follows_rule"]
    unknown, why = array_mib(2, LastLevelCache(None, None, "unreadable"), 100_000)
    assert unknown == 64 and why["llc_mib"] is None and "could not be read" in why["why_default"]


def test_this_machine_reads_its_cache() -> None:
    """Linux exposes the cache sizes: the rule is applied here, not skipped (the precondition of the triad test)."""
    cache = last_level_cache()
    assert cache.bytes is not None and cache.bytes >= 1 << 20, cache
