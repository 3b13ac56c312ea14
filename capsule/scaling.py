"""Whole-device figures that do not trust the platform's core count.

wasm has no threads here, so a whole-device figure comes from several capsule instances running at once
(wasmtime-py threads on servers, Web Workers in browsers). Two rules keep that figure true when the
instances share fewer cores than the platform claims (WebKit reports 4 on 2 cores, Safari rounds on
purpose, containers see the host's count):

* **Work over the common window.** Each instance reports the spans of its samples with the work done in
  them (`probes.<probe>.work.spans_ms`, with `clock.anchor_unix_ms` to place them on one timeline). The
  figure is the work all instances did inside the window in which all of them were running, divided by
  the window's length. Time-sliced instances then add up to what the cores really did; a sum of
  per-instance medians would count every instance at full speed, because short samples often dodge
  the scheduler.
* **Instances found by measurement.** Instances are added (1, 2, 4, ... with the reported count as one
  of the steps) while the aggregate rises by more than `min_gain` (half of what real cores add: time
  slices taken from other processes and SMT siblings add less); a step that did not pay is measured once
  more before the search ends, and a small rise is confirmed by measuring the previous count again (noise
  on a shared machine only slows a step, so the better of two measurements counts). The whole-device run
  uses the last count that still paid. The curve is kept as evidence.
* **A re-measurement keeps the answers' count.** When the roll calls' answers prompt a new measurement
  (capsule/claim_drift.py), the relay is already splitting challenges over `keep` instances and counting
  what they do, time slices taken from other processes included. The 50% rule would drop to fewer
  instances on a busy machine (WebKitGTK beside a busy loop per core: 1 -> 36.5, 2 -> 50.6 GFLOP/s, a rise
  of 0.39) and claim half of what the answers do. So after the search, `keep` is measured too (twice when
  it loses), and it stays the count unless fewer instances did clearly more (`keep_yields_above`).

Pure stdlib and free of I/O: the browser runs this file under Pyodide.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from capsule.probe_report import ProbeReport

Span = tuple[float, float, float]  # start, end (unix ms), work done in between (flop or byte)


@dataclass(frozen=True)
class ScalingConfig:
    """Defaults of the instance search; units in the names."""

    # Smallest rise of the aggregate that counts as "the added instances paid off", as a fraction of the
    # rise in instances (doubling: +50%; 16 -> 17 instances: +3%). Real cores add 80-100% per doubling.
    # Instances that only take a larger share of cores other processes keep busy add B / (2k + B) when k
    # become 2k beside B busy threads: 2 busy threads on 2 cores gave +25%, +34%, +16%, +11% for 1->2->4->8->16
    # (Xeon, 2026-12-04), and with the former 10% the search chose 8-16 "cores" on 2, a claim the node's
    # challenge answers then fell short of. SMT siblings on SIMD-bound SGEMM add 0-20%: not counted either.
    min_gain: float = 0.50
    # A rise between min_gain and this is ambiguous on a noisy machine (a disturbed previous step looks
    # like a gain): the previous count is measured once more and its better figure is compared. Doubling
    # onto real cores gives +75-100% (+74% on a noisy 2-vCPU AMD VM), so honest steps are rarely re-measured.
    confirm_below: float = 0.70
    # Upper bound on instances, whatever the platform says (browsers: memory per worker on phones).
    max_instances: int = 256
    # A re-measurement's kept count (the answers' own) yields to fewer instances only when they did more than
    # this x what it did. The errors are not alike: a claim above what the answers do costs the node nothing
    # (a roll call counts what it did), a claim below caps what is counted. And beside a busy loop on 2 cores
    # short 2-instance steps read 40-72 GFLOP/s against 44-54 for one (AMD EPYC, 2026-12-07), so a plain
    # "more" would often drop a count that does a third more at the roll calls.
    keep_yields_above: float = 1.25


DEFAULT_SCALING = ScalingConfig()


@dataclass(frozen=True)
class WindowRate:
    rate: float | None       # work per second over the window (None: no common window)
    window_ms: float          # length of the window all instances ran in
    span_ms: float            # first start to last end over all instances
    work_in_window: float
    reason: str = ""

    @property
    def overlap_frac(self) -> float:
        return self.window_ms / self.span_ms if self.span_ms > 0 else 0.0


def work_spans(report: ProbeReport, probe: str) -> list[Span]:
    """The spans of `probe` ("sgemm" or "stream") in a ProbeReport, on the unix-ms timeline; [] when none."""
    entry = report.probes.sgemm if probe == "sgemm" else report.probes.stream if probe == "stream" else None
    if entry is None:
        return []
    anchor = report.clock.anchor_unix_ms
    spans: list[Span] = []
    for item in entry.work.spans_ms:
        if len(item) == 3 and all(math.isfinite(v) for v in item) and item[1] > item[0] and item[2] >= 0:
            spans.append((anchor + item[0], anchor + item[1], float(item[2])))
    return spans


def window_rate(instances: Sequence[Sequence[Span]]) -> WindowRate:
    """Work per second done by all instances together while every one of them was running.

    The window starts when the last instance began its first sample and ends when the first instance
    finished its last one; a sample that straddles an edge counts in proportion to its overlap."""
    if not instances or any(not spans for spans in instances):
        return WindowRate(None, 0.0, 0.0, 0.0, "an instance reported no work spans")
    start = max(min(s for s, _, _ in spans) for spans in instances)
    end = min(max(e for _, e, _ in spans) for spans in instances)
    first = min(min(s for s, _, _ in spans) for spans in instances)
    last = max(max(e for _, e, _ in spans) for spans in instances)
    if end <= start:
        return WindowRate(None, 0.0, last - first, 0.0, "the instances never ran at the same time")
    work = 0.0
    for spans in instances:
        for s, e, w in spans:
            overlap = min(e, end) - max(s, start)
            if overlap > 0:
                work += w * overlap / (e - s)
    return WindowRate(work / ((end - start) / 1e3), end - start, last - first, work)


def _best_per_count(curve: Sequence[tuple[int, float | None]]) -> list[tuple[int, float | None]]:
    """The curve with repeated counts merged (best figure), in the order the counts were first tried."""
    best: dict[int, float | None] = {}
    for k, rate in curve:
        known = best.get(k)
        if k not in best or (rate is not None and (known is None or rate > known)):
            best[k] = rate
    return list(best.items())


def _rise(k0: int, r0: float, k1: int, r1: float) -> float:
    """The aggregate's relative rise per relative rise in instances (1.0 = perfect scaling)."""
    return (r1 / r0 - 1.0) / (k1 / k0 - 1.0) if r0 > 0 and k1 > k0 else 0.0


def _times_measured(curve: Sequence[tuple[int, float | None]], k: int) -> int:
    return sum(1 for kk, _ in curve if kk == k)


def _searched_next(curve: Sequence[tuple[int, float | None]], reported: int,
                   config: ScalingConfig = DEFAULT_SCALING) -> int | None:
    """The search's own next count (None: it is over), without the count a re-measurement keeps."""
    if not curve:
        return 1
    steps = _best_per_count(curve)
    k, rate = steps[-1]
    if rate is None:
        return None
    if len(steps) >= 2:
        k0, r0 = steps[-2]
        if r0 is None:
            return None
        rise = _rise(k0, r0, k, rate)
        # noise on a shared machine only ever slows a step down, so a doubtful step is measured once more
        # and its better figure counts: a slowed new step must not end the search (it halved a 2-core
        # figure when one disturbed 2-instance step stopped the search at 1), and a slowed previous step
        # must not make the new one look like a gain
        if rise < config.min_gain:
            return k if _times_measured(curve, k) == 1 else None
        if rise < config.confirm_below and _times_measured(curve, k0) == 1:
            return k0
    if k >= config.max_instances:
        return None
    step = 2 * k
    if k < reported < step:
        step = reported
    return min(step, config.max_instances)


def _search_length(curve: Sequence[tuple[int, float | None]], reported: int, config: ScalingConfig) -> int:
    """How many of the curve's steps the search itself made; the rest measured the count a re-measurement
    keeps (the search ends at the first prefix it has nothing more to try for)."""
    for i in range(len(curve) + 1):
        if _searched_next(curve[:i], reported, config) is None:
            return i
    return len(curve)


def next_instances(curve: Sequence[tuple[int, float | None]], reported: int,
                   config: ScalingConfig = DEFAULT_SCALING, keep: int | None = None) -> int | None:
    """The next instance count to try, or None when the search is over. curve: (instances, aggregate)
    measured so far, in order. Steps double from 1, with `reported` (the platform's claim) as one step;
    the search goes past the claim as long as the aggregate keeps rising. A step that did not pay is
    measured once more before the search ends; a small rise sends the search back to the previous count
    once, to tell noise from a gain. keep: the count the node's answers use, for a re-measurement the roll
    calls prompted; measured after the search (unless the search chose as many or more), and once more when
    fewer instances did clearly better."""
    searched = _search_length(curve, reported, config)
    if searched == len(curve):
        k = _searched_next(curve, reported, config)
        if k is not None:
            return k
    if keep is None or not 1 <= keep <= config.max_instances:
        return None
    if _searched_choice(_best_per_count(curve[:searched]), config) >= keep:
        return None  # the search found as many instances that pay: keep cannot be chosen
    best = dict(_best_per_count(curve))
    if keep not in best:
        return keep
    if _beaten_by_fewer(best, keep, config) and _times_measured(curve, keep) == 1:
        return keep
    return None


def _beaten_by_fewer(best: dict[int, float | None], keep: int, config: ScalingConfig) -> dict[int, float]:
    """The counts below keep that did more than keep_yields_above x what keep did (keep unmeasured: all)."""
    kept = best.get(keep)
    return {k: r for k, r in best.items() if k < keep and r is not None
            and (kept is None or r > config.keep_yields_above * kept)}


def _searched_choice(steps: Sequence[tuple[int, float | None]], config: ScalingConfig) -> int:
    best = steps[0][0] if steps else 1
    for (k0, r0), (k, r1) in zip(steps, steps[1:], strict=False):
        if r0 is None or r1 is None or _rise(k0, r0, k, r1) < config.min_gain:
            break
        best = k
    return best


def chosen_instances(curve: Sequence[tuple[int, float | None]], config: ScalingConfig = DEFAULT_SCALING,
                     reported: int = 1, keep: int | None = None) -> int:
    """The last count whose step raised the aggregate enough (see ScalingConfig.min_gain; 1 if none did).
    keep (with the `reported` the search was given): a re-measurement's count, chosen unless the search
    found more that paid or fewer instances did clearly more (keep_yields_above; then the fewer count that
    did most)."""
    if keep is None:
        return _searched_choice(_best_per_count(curve), config)
    chosen = _searched_choice(_best_per_count(curve[:_search_length(curve, reported, config)]), config)
    best = dict(_best_per_count(curve))
    if chosen >= keep or best.get(keep) is None:
        return chosen
    fewer = _beaten_by_fewer(best, keep, config)
    return max(fewer, key=lambda k: fewer[k]) if fewer else keep


def kept_note(keep: int, chosen: int, config: ScalingConfig = DEFAULT_SCALING) -> dict[str, object]:
    """The profile's evidence (evidence.cpu.instances_kept) of a re-measurement that was given `keep`."""
    return {"answers_used": keep, "chosen": chosen,
            "rule": "a re-measurement the roll calls prompted keeps the instance count its answers used unless "
                    f"the search found more that paid or fewer instances did more than {config.keep_yields_above:g}x "
                    "what it did (capsule/scaling.py)"}
