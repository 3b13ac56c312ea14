"""capsule/scaling.py beyond tests/test_scaling.py: which spans of a report count, the window's figures when
there is none, samples that barely overlap it, the better of repeated measurements, rises at the thresholds
and from a zero or sub-unit figure (mutation testing: scripts/mutants)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from capsule.scaling import ScalingConfig, WindowRate, chosen_instances, next_instances, window_rate, work_spans
from tests.reports import probe_report

ANCHOR = 1_000_000.0


def test_work_spans_reads_the_named_probe_on_the_unix_timeline() -> None:
    report = probe_report(40.0, 15.0, 200.0, [[0.0, 100.0, 1e9]], anchor=ANCHOR)
    # the helper gives sgemm and stream the same spans; tell them apart by replacing stream's
    stream = report.probes.stream
    assert stream is not None
    stream = replace(stream, work=replace(stream.work, spans_ms=[[10.0, 30.0, 5e8]]))
    report = replace(report, probes=replace(report.probes, stream=stream))
    assert work_spans(report, "sgemm") == [(ANCHOR, ANCHOR + 100.0, 1e9)]
    assert work_spans(report, "stream") == [(ANCHOR + 10.0, ANCHOR + 30.0, 5e8)]
    assert work_spans(report, "llm") == [] and work_spans(report, "disk") == []


def test_work_spans_keeps_only_well_formed_spans() -> None:
    spans = [
        [0.0, 100.0, 10.0],    # kept
        [10.0, 20.0, 5.0],     # kept: less work than its start time
        [20.0, 30.0, 0.0],     # kept: no work is still a span
        [30.0, 40.0, 0.5],     # kept: fractional work
        [40.0, 40.0, 1.0],     # empty: end == start
        [50.0, 45.0, 1.0],     # reversed
        [60.0, 70.0, -1.0],    # negative work
        [70.0, 80.0],          # too short
        [80.0, 90.0, 1.0, 2.0],  # too long
    ]
    report = probe_report(40.0, 15.0, 200.0, spans, anchor=0.0)
    assert work_spans(report, "sgemm") == [(0.0, 100.0, 10.0), (10.0, 20.0, 5.0), (20.0, 30.0, 0.0),
                                           (30.0, 40.0, 0.5)]


def test_a_missing_window_has_zero_figures_and_says_why() -> None:
    assert window_rate([[(0.0, 1.0, 1.0)], []]) == WindowRate(None, 0.0, 0.0, 0.0, "an instance reported no work spans")
    assert window_rate([]) == WindowRate(None, 0.0, 0.0, 0.0, "an instance reported no work spans")
    apart = window_rate([[(10.0, 11.0, 1.0)], [(12.0, 13.0, 1.0)]])
    assert apart == WindowRate(None, 0.0, 3.0, 0.0, "the instances never ran at the same time")


def test_instances_that_only_touch_never_ran_at_the_same_time() -> None:
    w = window_rate([[(0.0, 100.0, 5.0)], [(100.0, 200.0, 5.0)]])
    assert w.rate is None and w.window_ms == 0.0 and w.span_ms == 200.0
    assert w.overlap_frac == 0.0


def test_a_sliver_of_overlap_counts_in_proportion() -> None:
    # the window is [9.5, 10] ms: half a millisecond of each sample
    w = window_rate([[(0.0, 10.0, 100.0)], [(9.5, 20.0, 105.0)]])
    assert w.window_ms == 0.5 and w.work_in_window == pytest.approx(10.0)
    assert w.rate == pytest.approx(20_000.0)


def test_the_better_of_two_measurements_of_a_count_counts() -> None:
    # 2 instances measured at 80, then disturbed at 41: 80 counts
    assert chosen_instances([(1, 40.0), (2, 80.0), (2, 41.0)]) == 2
    # a failed second measurement does not erase a good first one, nor a good second a failed first
    assert chosen_instances([(1, 40.0), (2, 80.0), (2, None)]) == 2
    assert chosen_instances([(1, 40.0), (2, None), (2, 80.0)]) == 2


def test_no_curve_chooses_one_instance() -> None:
    assert chosen_instances([]) == 1


def test_a_zero_figure_is_no_base_for_a_rise() -> None:
    assert chosen_instances([(1, 0.0), (2, 10.0)]) == 1
    assert next_instances([(1, 0.0), (2, 10.0)], 8) == 2  # measured once more, as a step that did not pay


def test_figures_below_one_scale_like_any_other() -> None:
    # a slow device: 0.5 -> 1.0 GB/s with 2 instances is a perfect doubling
    assert chosen_instances([(1, 0.5), (2, 1.0)]) == 2
    assert next_instances([(1, 0.5), (2, 1.0)], 2) == 4


# min_gain 0.25 and confirm_below 0.5 are exact in binary, so a rise can sit exactly on them
EXACT = ScalingConfig(min_gain=0.25, confirm_below=0.5)


def test_a_rise_of_exactly_min_gain_pays() -> None:
    """ScalingConfig.min_gain is the smallest rise that counts."""
    curve = [(1, 4.0), (2, 5.0), (1, 4.0)]  # +25% per doubling, the previous count confirmed
    assert chosen_instances(curve, EXACT) == 2
    assert next_instances(curve, 8, EXACT) == 4


def test_a_rise_of_exactly_confirm_below_is_not_measured_again() -> None:
    assert next_instances([(1, 2.0), (2, 3.0)], 8, EXACT) == 4  # +50%: not ambiguous
    assert next_instances([(1, 2.0), (2, 2.9)], 8, EXACT) == 1  # +45%: the previous count once more
