"""A re-measurement the roll calls prompted keeps the instance count the node's answers use unless fewer
instances do more (capsule/scaling.py `keep`), on synthetic curves and on the one WebKitGTK measured busy."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from capsule.scaling import DEFAULT_SCALING, ScalingConfig, chosen_instances, kept_note, next_instances

Curve = list[tuple[int, float | None]]


def search(reported: int, rates: Callable[[int, int], float | None], keep: int | None,
           config: ScalingConfig = DEFAULT_SCALING) -> tuple[Curve, int]:
    """The search as host_runner/cpu.py and browser_node/join.js run it; rates(k, nth) is the figure of
    the nth (0-based) measurement of k instances."""
    curve: Curve = []
    while (k := next_instances(curve, reported, config, keep)) is not None:
        curve.append((k, rates(k, sum(1 for kk, _ in curve if kk == k))))
        assert len(curve) < 40, curve
    return curve, chosen_instances(curve, config, reported, keep)


def table(figures: Mapping[int, Sequence[float | None]]) -> Callable[[int, int], float | None]:
    return lambda k, nth: figures[k][min(nth, len(figures[k]) - 1)]


# WebKitGTK 2.50.6 on this 2-vCPU AMD EPYC, a busy loop per core (BENCHMARKS.md, 2026-12-07): 1 worker 36.5,
# 2 workers 50.6 GFLOP/s, a rise of 0.39 per doubling; its answers on 2 workers had shown ~55
WEBKIT_BUSY = {1: [36.5], 2: [50.6, 50.0], 4: [51.0]}


def test_a_busy_webkit_keeps_the_two_workers_its_answers_use() -> None:
    plain, chose = search(4, table(WEBKIT_BUSY), None)
    assert chose == 1  # the precondition: the 50% rule alone drops to one worker
    curve, kept = search(4, table(WEBKIT_BUSY), 2)
    assert kept == 2 and curve == plain  # 2 was on the curve already: no step more


def test_fewer_instances_that_do_clearly_more_win_after_keep_is_measured_twice() -> None:
    curve, chose = search(4, table({1: [40.0], 2: [30.0, 31.0], 4: [29.0]}), 2)
    assert chose == 1 and [k for k, _ in curve].count(2) == 2


def test_fewer_instances_that_do_at_most_1_25x_do_not_replace_keep() -> None:
    # keep 2's better figure 32.0: one instance at exactly 1.25x of it (40.0) is not clearly more, and 40.5 is
    assert search(4, table({1: [40.0], 2: [31.0, 32.0]}), 2)[1] == 2
    assert search(4, table({1: [40.5], 2: [31.0, 32.0]}), 2)[1] == 1
    # the kept count's steps that read less than one instance beside a busy loop (AMD EPYC, 2026-12-07)
    assert search(2, table({1: [48.0], 2: [51.0, 43.8]}), 2)[1] == 2
    assert search(2, table({1: [53.8], 2: [45.0, 44.0]}), 2)[1] == 2


def test_a_keep_that_lost_once_and_then_did_more_is_kept() -> None:
    # noise only slows a step: the better of its two measurements counts
    curve, chose = search(4, table({1: [50.0], 2: [30.0, 40.0], 4: [29.0]}), 2)
    assert chose == 2 and curve.count((2, 40.0)) == 1


def test_a_search_that_finds_more_than_keep_that_pays_chooses_more() -> None:
    _, chose = search(4, lambda k, _: 40.0 * min(k, 4), 2)
    assert chose == 4


def test_keep_beyond_the_search_is_measured_after_it_without_resuming_it() -> None:
    flat_after_2 = lambda k, _: 40.0 * min(k, 2)  # noqa: E731
    plain, chose = search(2, flat_after_2, None)
    assert [k for k, _ in plain] == [1, 2, 4, 4] and chose == 2
    curve, kept = search(2, flat_after_2, 8)
    # one step at 8 (it did as much as 2 and 4: nothing fewer did more), and the search does not go on to 16
    assert [k for k, _ in curve] == [1, 2, 4, 4, 8] and kept == 8


def test_a_keep_that_does_less_than_a_count_between_loses_to_the_best_of_those() -> None:
    _, chose = search(2, table({1: [40.0], 2: [80.0], 4: [82.0, 83.0], 8: [60.0, 61.0]}), 8)
    assert chose == 4  # 83 > 1.25 x 61 and more than 2's 80


def test_of_the_fewer_counts_the_one_that_did_most_wins_not_the_largest() -> None:
    curve, chose = search(2, table({1: [40.0], 2: [80.0], 4: [70.0], 8: [50.0]}), 8)
    assert [k for k, _ in curve] == [1, 2, 4, 4, 8, 8] and chose == 2


def test_a_keep_below_the_search_s_choice_is_not_measured() -> None:
    curve, chose = search(4, lambda k, _: 40.0 * min(k, 16), 1)
    assert [k for k, _ in curve] == [1, 2, 4, 8, 16, 32, 32] and chose == 16
    curve, chose = search(8, lambda k, _: 40.0 * min(k, 8), 3)  # 3 is not one of the search's steps
    assert 3 not in [k for k, _ in curve] and chose == 8


def test_keep_above_max_instances_is_not_measured() -> None:
    config = ScalingConfig(max_instances=2)
    curve, chose = search(2, table(WEBKIT_BUSY), 4, config)
    assert 4 not in [k for k, _ in curve] and chose == 1


def test_a_failed_keep_step_leaves_the_search_s_choice() -> None:
    curve, chose = search(2, table({1: [40.0], 2: [50.0, 50.0], 4: [None]}), 4)
    assert [k for k, _ in curve][-2:] == [4, 4] and chose == 1


def test_the_note_names_both_counts() -> None:
    note = kept_note(2, 1)
    assert note["answers_used"] == 2 and note["chosen"] == 1 and "did more than 1.25x" in str(note["rule"])
