"""Server whole-CPU figures do not trust the reported core count: with a claim of 8 cores on this machine,
the figures `ce-bench run --instances 8` reports stay within 10% of those under a claim of the real count
(issue 9), because instances are added only while they pay and the figure is work over the common window.

How the 10% is tested on a noisy VM. The claim enters only through the instance search: it decides how
many instances the whole-CPU run uses (whole_cpu_run takes no claim). So the test runs the real search
under each claim, and then:
* where both claims chose the same count, the figures come from the same procedure: nothing to compare;
* the figure must not grow with instances beyond the cores: twice as many instances as cores (WebKit's 4
  on 2; the most the search may overshoot to) against the cores' count, and the claim's count if it is
  neither, measured in alternation over many short rounds (the product's own run and aggregate), with the
  median of per-round ratios bounded at 1.10.
Whole runs compared one after the other cannot carry a 10% bound here: two identical runs differ by up to
2x (measured 2026-12-03, AMD EPYC: 36.7 vs 72.8 GFLOP/s for the same 2 instances, when the host put both
vCPUs on one physical core); rounds close in time share the host's state. Measured the same day with
these rounds (median of per-round ratios, 4 vs 2 instances): SGEMM 0.984-0.996, STREAM 0.920-0.933 here,
0.980-0.988 / 0.865-0.927 in Chromium; the same count on both sides gave 0.98-1.04. A sum of per-instance
medians (the bug this guards against) gives ~2x.
"""

from __future__ import annotations

import os
import statistics

from capsule.aggregate import aggregate
from capsule.plan import instance_seed
from host_runner.cpu import find_instances, measure_whole_cpu, whole_cpu_run
from tests.conftest import Artifacts

SEED = "ab" * 32
# Rounds per probe. SGEMM pair ratios spread ~3% here; STREAM's ~17%, because the host's memory bandwidth
# flips between two levels every few seconds, so STREAM rounds are short (16 MiB arrays, 300 ms: a pair is
# measured within ~1 s) and many. With 64 MiB arrays, 800 ms and 32 rounds, the 4-vs-2 median ranged
# 0.92-1.10 over three runs; with these, 0.89-0.96 over four (2026-12-03).
ROUNDS = {"sgemm": 16, "stream": 48}
ROUND_BUDGET_MS = {"sgemm": 400, "stream": 300}  # a few products / triad passes per instance and round
STREAM_MIB = 16  # per array: three arrays per instance still far exceed the caches


def figure(artifacts: Artifacts, probe: str, instances: int) -> float | None:
    run = whole_cpu_run(artifacts.capsule, SEED, (probe,), instances, ROUND_BUDGET_MS[probe], stream_mib=STREAM_MIB)
    f = aggregate(run.reports, run.reports[0])
    return f.gflops_fp32 if probe == "sgemm" else f.mem_bw_gbps


def test_a_claim_of_8_cores_does_not_inflate_the_server_figures(artifacts: Artifacts) -> None:
    cores = os.cpu_count() or 1
    honest, claimed = (find_instances(artifacts.capsule, SEED, claim)[1] for claim in (cores, 8))
    assert 1 <= honest <= 2 * cores and 1 <= claimed <= 2 * cores, (honest, claimed)
    others = sorted({2 * cores, claimed} - {honest})
    ratios: dict[tuple[str, int], list[float]] = {}
    for r in range(max(ROUNDS.values())):
        for probe in (p for p in ROUNDS if r < ROUNDS[p]):
            for other in others:
                pair = (honest, other) if r % 2 == 0 else (other, honest)  # ABBA: neither side always first
                got = dict(zip(pair, (figure(artifacts, probe, k) for k in pair), strict=True))
                mine, theirs = got[honest], got[other]
                if mine is not None and theirs is not None:  # None: no common window (said in evidence)
                    ratios.setdefault((probe, other), []).append(theirs / mine)
    assert len(ratios) == 2 * len(others), ratios
    for (probe, other), values in ratios.items():
        assert len(values) >= ROUNDS[probe] * 3 // 4, (probe, other, "too few rounds had a figure", values)
        median = statistics.median(values)
        assert median <= 1.10, (probe, f"{other} instances vs {honest}", "inflated", values)
        assert median >= 0.75, (probe, f"{other} instances vs {honest}", "deflated", values)


def test_the_composed_measurement_seeds_each_instance_from_the_plan(artifacts: Artifacts) -> None:
    whole = measure_whole_cpu(artifacts.capsule, SEED, ("sgemm", "stream"), 8, 1200)
    f = aggregate(whole.run.reports, whole.run.reports[0], whole.curve)
    assert f.gflops_fp32 is not None and f.mem_bw_gbps is not None, f.evidence["cpu"]
    assert [r.seed for r in whole.run.reports] == [instance_seed(SEED, i) for i in range(whole.instances)]
    assert [step["instances"] for step in whole.curve][:2] == [1, 2]
    assert f.evidence["cpu"]["instances"] == whole.instances
