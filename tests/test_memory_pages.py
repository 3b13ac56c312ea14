"""The capsule's wasm memory gets transparent huge pages where the kernel offers them (common/reactor.py
advise_huge_pages): on 4 KiB pages STREAM measured the TLB, not memory (BENCHMARKS.md, issue 9)."""

from __future__ import annotations

from pathlib import Path

from common.reactor import Reactor
from host_runner.facts import huge_pages_note, thp_mode
from tests.conftest import Artifacts


def anon_huge_kib() -> int:
    return sum(int(line.split()[1]) for line in Path("/proc/self/smaps").read_text().splitlines()
               if line.startswith("AnonHugePages:"))


def test_the_stream_arrays_sit_on_huge_pages_where_the_kernel_offers_them(artifacts: Artifacts) -> None:
    mode = thp_mode()
    before = anon_huge_kib()
    reactor = Reactor(artifacts.reactor)
    report = reactor.run(["--probes", "stream", "--stream-triad-only", "--budget-ms", "300", "--soft-budget",
                          "--stream-mib", "16", "--seed", "ab" * 32]).probe_report()
    assert report.probes.stream is not None and report.probes.stream.triad_gbps is not None
    grown_kib = anon_huge_kib() - before
    if mode in ("always", "madvise"):
        assert reactor.huge_pages, "madvise(MADV_HUGEPAGE) was refused"
        # three 16 MiB arrays (~40 MiB of whole 2 MiB pages); the kernel may fall back to 4 KiB pages where
        # memory is fragmented, so a third of that is required, which 4 KiB pages alone never show
        assert grown_kib >= 16 * 1024, (mode, grown_kib)
        assert f"THP mode {mode}" in huge_pages_note()
    else:  # the kernel offers none: the evidence must say 4 KiB pages, never claim huge ones
        assert "4 KiB pages" in huge_pages_note(), mode
