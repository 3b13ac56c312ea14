"""The instance search and the common-window figure (capsule/scaling.py), on synthetic machines."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import example, given
from hypothesis import strategies as st

from capsule.scaling import ScalingConfig, chosen_instances, next_instances, window_rate


def search(reported: int, aggregate_at: Callable[[int], float]) -> tuple[list[tuple[int, float | None]], int]:
    curve: list[tuple[int, float | None]] = []
    while (k := next_instances(curve, reported)) is not None:
        curve.append((k, aggregate_at(k)))
    return curve, chosen_instances(curve)


def machine(cores: int, per_core: float = 40.0) -> Callable[[int], float]:
    """Aggregate of k time-sliced instances on `cores` cores: linear up to the cores, flat after."""
    return lambda k: per_core * min(k, cores)


def test_a_claim_of_8_on_2_cores_ends_at_the_same_count_as_the_truth() -> None:
    claimed, _ = search(8, machine(2))
    honest, _ = search(2, machine(2))
    # the step that did not pay (4) is measured once more before the search ends
    assert [k for k, _ in claimed] == [1, 2, 4, 4] and [k for k, _ in honest] == [1, 2, 4, 4]
    assert chosen_instances(claimed) == chosen_instances(honest) == 2


def test_an_understated_count_is_searched_past() -> None:
    curve, chosen = search(4, machine(16))
    assert [k for k, _ in curve] == [1, 2, 4, 8, 16, 32, 32] and chosen == 16


def test_the_reported_count_is_one_of_the_steps() -> None:
    curve, chosen = search(6, machine(6))
    assert [k for k, _ in curve] == [1, 2, 4, 6, 12, 12] and chosen == 6


def test_a_disturbed_step_is_measured_again_before_it_counts() -> None:
    # one core; the 1-instance step was disturbed (26 instead of 40): 2 time-sliced instances look like +54%,
    # so 1 is measured again (40), and 2 no longer pays (measured twice, as any step that did not)
    figures = iter([26.0, 40.0, 40.0, 40.5])
    curve, chosen = search(8, lambda k: next(figures))
    assert curve == [(1, 26.0), (2, 40.0), (1, 40.0), (2, 40.5)] and chosen == 1


def test_a_small_rise_is_confirmed_and_then_counts() -> None:
    # two cores; the 2-instance step was slowed (66 instead of 80): +65% sends the search back to 1 once;
    # 1 measured again is no faster, so 2 counts; 4 does not pay (twice)
    figures = iter([40.0, 66.0, 40.0, 80.0, 81.0])
    curve, chosen = search(8, lambda k: next(figures))
    assert curve == [(1, 40.0), (2, 66.0), (1, 40.0), (4, 80.0), (4, 81.0)] and chosen == 2


def test_time_slices_taken_from_busy_processes_are_not_cores() -> None:
    # measured on this 2-vCPU Xeon with two busy processes beside the search (2026-12-04): more instances
    # take a larger share of the time-sliced cores (+25%, +34%, +16%, +11% per doubling); with the former
    # min_gain of 10% the search chose 16 instances on 2 cores
    measured = {1: 28.6, 2: 35.9, 4: 48.2, 8: 55.9, 16: 62.3}
    curve, chosen = search(2, lambda k: measured[k])
    assert chosen == 1 and [k for k, _ in curve] == [1, 2, 2]


def test_a_disturbed_step_does_not_end_the_search() -> None:
    # measured on this 2-core AMD VM (2026-12-03): the 2-instance step ran while both vCPUs shared one
    # physical core (36.8 GFLOP/s, +7%), which ended the search at 1 instance and halved the figure.
    # Measured again (59.6) it pays; 4 instances do not (twice)
    figures = iter([34.3, 36.8, 59.6, 60.1, 58.0])
    curve, chosen = search(2, lambda k: next(figures))
    assert curve == [(1, 34.3), (2, 36.8), (2, 59.6), (4, 60.1), (4, 58.0)] and chosen == 2


def test_a_step_that_really_does_not_pay_ends_the_search_after_one_more_measurement() -> None:
    figures = iter([40.0, 41.0, 42.0])
    curve, chosen = search(8, lambda k: next(figures))
    assert curve == [(1, 40.0), (2, 41.0), (2, 42.0)] and chosen == 1


def test_smt_siblings_that_add_little_are_not_counted() -> None:
    # 4 cores with SMT: 8 threads add 5% on SIMD-bound SGEMM
    curve, chosen = search(8, lambda k: 40.0 * min(k, 4) * (1.05 if k >= 8 else 1.0))
    assert chosen == 4


def test_a_failed_step_ends_the_search() -> None:
    assert next_instances([(1, 40.0), (2, None)], 8) is None
    assert chosen_instances([(1, 40.0), (2, None)]) == 1


def test_max_instances_bounds_the_search() -> None:
    curve, chosen = search(10_000, machine(10_000))
    assert curve[-1][0] == ScalingConfig().max_instances and chosen == 256


# derandomized by the suite's hypothesis profile (tests/conftest.py); each case hypothesis once found is pinned
@given(cores=st.integers(1, 64), reported=st.integers(1, 128))
@example(cores=3, reported=2)
@example(cores=1, reported=128)
@example(cores=17, reported=1)  # found by hypothesis: 16 -> 32 adds 6%, under min_gain: 16 is chosen
@example(cores=18, reported=17)  # found by hypothesis: 16 -> 17 is a small step; its gain is judged per instance
def test_chosen_count_misses_at_most_min_gain_of_the_machine(cores: int, reported: int) -> None:
    _, chosen = search(reported, machine(cores))
    # doubling may overshoot (3 cores -> 4 instances); it stops short only where the next step would have
    # added less than min_gain
    full = machine(cores)(cores)
    assert machine(cores)(chosen) * (1 + ScalingConfig().min_gain) >= full
    assert chosen < 2 * cores


def test_window_counts_straddling_samples_in_proportion() -> None:
    a = [(0.0, 100.0, 100.0), (100.0, 200.0, 100.0)]
    b = [(50.0, 150.0, 100.0), (150.0, 250.0, 100.0)]
    w = window_rate([a, b])
    assert (w.window_ms, w.span_ms) == (150.0, 250.0)
    # a: 50 + 100 work in [50, 200]; b: 100 + 50 -> 300 work over 150 ms = 2000 per second
    assert w.rate == 2000.0 and w.work_in_window == 300.0


def test_window_without_spans_or_overlap_is_null_with_reason() -> None:
    assert window_rate([[(0.0, 1.0, 1.0)], []]).reason == "an instance reported no work spans"
    w = window_rate([[(0.0, 1.0, 1.0)], [(2.0, 3.0, 1.0)]])
    assert w.rate is None and "never ran at the same time" in w.reason
