"""The probe plan drawn from the beacon, and whole-machine figures from per-instance reports."""

from __future__ import annotations

from typing import Any

from capsule.aggregate import aggregate
from capsule.plan import ALL_PROBES, plan_from_beacon

NODE_A = "12D3KooWBtg3aaRMjxwedh83aGiUkwSxDwUZkzuJcfaqUmo7R3pq"
NODE_B = "12D3KooW9pNAk8aiBuGVQtWRdbkLmo5qVL3e2h5UxbN2Nz9ttwiw"


def test_plan_is_a_function_of_beacon_and_node() -> None:
    p1 = plan_from_beacon("aa" * 32, NODE_A)
    assert p1 == plan_from_beacon("aa" * 32, NODE_A)
    assert p1.seed_hex != plan_from_beacon("ab" * 32, NODE_A).seed_hex
    assert p1.seed_hex != plan_from_beacon("aa" * 32, NODE_B).seed_hex
    assert sorted(p1.order) == sorted(ALL_PROBES) and len(p1.seed_hex) == 64
    assert 0 <= p1.start_jitter_ms < 1500


def test_plan_orders_and_jitters_vary() -> None:
    plans = [plan_from_beacon(f"{i:064x}", NODE_A) for i in range(200)]
    assert len({p.order for p in plans}) >= 20  # 24 permutations of 4 probes
    assert len({p.start_jitter_ms for p in plans}) > 150


def report(gflops: float | None, triad: float | None, tps: float | None) -> dict[str, Any]:
    return {"probes": {"sgemm": {"gflops": gflops, "n": 1024, "stats": {"n": 5, "median": gflops}},
                       "stream": {"triad_gbps": triad}, "llm": {"tokens_per_sec": tps, "runs": [tps]}}}


def test_whole_cpu_sums_concurrent_instances() -> None:
    solo = report(40.0, 15.0, 200.0)
    solo["probes"]["disk"] = {"write_mbps": 900.0, "read_mbps": 2000.0, "read_cache": "may be page cache"}
    f = aggregate([report(38.0, 8.0, 150.0), report(37.0, 7.5, 140.0)], solo, 0.95)
    assert f.gflops_fp32 == 75.0 and f.mem_bw_gbps == 15.5
    assert f.tokens_per_sec == 200.0  # batch-1 decode alone; the concurrent sum is evidence
    assert f.evidence["llm"]["aggregate_tokens_per_sec"] == 290.0
    assert f.evidence["cpu"]["gflops_fp32"]["scaling"] == 75.0 / 80.0
    assert f.evidence["cpu"]["wall_overlap"] == 0.95
    assert (f.write_mbps, f.read_mbps) == (900.0, 2000.0)


def test_a_failed_instance_makes_the_figure_null_with_reason() -> None:
    f = aggregate([report(38.0, 8.0, 150.0), report(None, 7.5, 140.0)], report(40.0, 15.0, 200.0))
    assert f.gflops_fp32 is None
    assert "instance(s) [1]" in f.evidence["cpu"]["gflops_fp32"]["null_reason"]
    assert f.mem_bw_gbps == 15.5
    assert f.write_mbps is None and "did not run" in f.evidence["storage"]["null_reason"]
