"""The probe plan drawn from the beacon, and whole-machine figures from per-instance reports."""

from __future__ import annotations

from capsule.aggregate import aggregate
from capsule.plan import ALL_PROBES, plan_from_beacon
from tests.reports import probe_report as report

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


def test_whole_cpu_is_work_over_the_common_window() -> None:
    solo = report(40.0, 15.0, 200.0, seed="50", disk=(900.0, 2000.0))
    # instance 0 runs 0-400 ms, instance 1 starts 100 ms later (its own clock anchor) and runs to 500 ms:
    # the common window is 100-400 ms; each 100 ms product is 4e9 flop (40 GFLOP/s) -> 80 GFLOP/s
    a = report(38.0, 8.0, 150.0, [[t, t + 100.0, 4e9] for t in (0.0, 100.0, 200.0, 300.0)], seed="01")
    b = report(37.0, 7.5, 140.0, [[t, t + 100.0, 4e9] for t in (0.0, 100.0, 200.0, 300.0)], seed="02",
               anchor=1_000_100.0)
    f = aggregate([a, b], solo, [{"instances": 1, "gflops_fp32": 40.0}, {"instances": 2, "gflops_fp32": 80.0}])
    assert f.gflops_fp32 == 80.0 and f.mem_bw_gbps == 80.0
    cpu = f.evidence["cpu"]
    assert cpu["gflops_fp32"]["window_ms"] == 300.0 and cpu["gflops_fp32"]["overlap_frac"] == 0.6
    assert cpu["gflops_fp32"]["instances"] == [{"seed": "01", "checksum": "01" * 32},
                                               {"seed": "02", "checksum": "02" * 32}]
    assert cpu["gflops_fp32"]["solo"] == {"seed": "50", "n": 1024, "checksum": "50" * 32}
    assert cpu["scaling"][1] == {"instances": 2, "gflops_fp32": 80.0}
    assert f.tokens_per_sec == 200.0  # batch-1 decode alone
    assert f.evidence["llm"]["seed"] == "50" and f.evidence["llm"]["token_ids_sha256"] == ("750" + "50" * 31)[:64]
    assert (f.write_mbps, f.read_mbps) == (900.0, 2000.0)


def test_time_sliced_instances_add_up_to_the_cores_not_to_their_count() -> None:
    """Four instances on two cores: each gets half the time. Short samples that dodge the scheduler run
    at full speed (median 40 each, sum 160), but the work over the window is two cores' worth."""
    spans = [[t * 20.0, t * 20.0 + 10.0, 0.4e9] for t in range(50)]  # 10 ms at 40 GFLOP/s, then 10 ms waiting
    reports = [report(40.0, 10.0, None, spans, seed=f"0{i}") for i in range(4)]
    f = aggregate(reports, report(40.0, 15.0, 200.0))
    assert f.gflops_fp32 is not None and abs(f.gflops_fp32 - 80.0) < 1.0


def test_a_failed_instance_makes_the_figure_null_with_reason() -> None:
    f = aggregate([report(38.0, 8.0, 150.0), report(None, 7.5, 140.0)], report(40.0, 15.0, 200.0))
    assert f.gflops_fp32 is None
    assert "instance(s) [1]" in f.evidence["cpu"]["gflops_fp32"]["null_reason"]
    assert f.mem_bw_gbps is not None
    assert f.write_mbps is None and f.evidence["storage"]["null_reason"] == "no scratch directory"


def test_instances_that_never_overlapped_give_null() -> None:
    late = report(38.0, 8.0, None, anchor=2_000_000.0)
    f = aggregate([report(38.0, 8.0, None), late], report(40.0, 15.0, 200.0))
    assert f.gflops_fp32 is None and "never ran at the same time" in f.evidence["cpu"]["gflops_fp32"]["null_reason"]


def test_one_instance_without_spans_reports_its_own_median() -> None:
    """A CE job runs one instance with all four STREAM kernels (no triad-only spans): its median stands."""
    single = report(38.0, 12.5, 150.0, spans=[])
    f = aggregate([single], single)
    assert (f.gflops_fp32, f.mem_bw_gbps) == (38.0, 12.5)
