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


def test_sizes_types_and_broken_entries(tmp_path: Path) -> None:
    """sysfs size strings (K, M, G or bytes), data caches counted and instruction caches not, entries with a
    file missing or a size unreadable skipped."""
    from host_runner.stream_size import _size_bytes

    assert (_size_bytes("32K"), _size_bytes("2M\n"), _size_bytes("1G"), _size_bytes("4096"), _size_bytes("12x"),
            _size_bytes("")) == (32 << 10, 2 << 20, 1 << 30, 4096, None, None)
    tree = fake_sysfs(tmp_path / "c", {0: [(1, "Instruction", "64M", "0"), (1, "Data", "48K", "0")]})
    assert last_level_cache(tree).bytes == 48 << 10  # the instruction cache is not where STREAM's data goes
    broken = fake_sysfs(tmp_path / "d", {0: [(3, "Unified", "8M", "0")], 1: [(3, "Unified", "nonsense", "1")]})
    (broken / "cpu0" / "cache" / "index1").mkdir()  # an entry without its files
    assert last_level_cache(broken).bytes == 8 << 20


def test_the_evidence_names_the_cache_and_the_caps() -> None:
    llc = LastLevelCache(300 << 20, 3, "sysfs")
    mib, ev = array_mib(2, llc, None)  # no memory figure: no memory cap
    assert mib == 600 and "capped_by" not in ev
    assert set(ev) == {"rule", "instances", "llc_mib", "llc_source", "follows_rule"}
    assert ev["llc_source"] == "sysfs" and ev["instances"] == 2 and "4 x last-level cache" in ev["rule"]
    assert array_mib(2, LastLevelCache(1_000_000, 3, "s"), None)[1]["llc_mib"] == 0.954  # MiB, 3 decimals
    assert array_mib(2, llc, 0)[0] == 600  # an unknown (0) available memory caps nothing
    assert array_mib(2, llc, 7200)[0] == 600 and "capped_by" not in array_mib(2, llc, 7200)[1]  # exactly enough
    assert array_mib(2, llc, 7199)[0] == 599
    assert array_mib(2, llc, 1)[0] == 1  # never below 1 MiB
    assert array_mib(1, LastLevelCache(256 << 20, 3, "s"), None) == (1024, array_mib(1, LastLevelCache(
        256 << 20, 3, "s"), None)[1])
    assert "capped_by" not in array_mib(1, LastLevelCache(256 << 20, 3, "s"), None)[1]  # exactly the wasm32 limit
    assert array_mib(4, LastLevelCache(64 << 20, 3, "s"), None)[1]["follows_rule"]  # 4 x 64 >= 4 x 64: on the edge
    assert not array_mib(4, LastLevelCache((64 << 20) + (1 << 20), 3, "s"), 800)[1]["follows_rule"]
