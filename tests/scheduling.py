"""How scripts/test's two pytest-xdist workers share two cores (the pytest_runtest_protocol hook, installed by
tests/conftest.py).

Three kinds of test:
* ordinary tests run two at a time;
* `alone` tests measure CPU, memory or browser throughput against bounds (or load both cores themselves):
  nothing runs beside them, from setup to teardown, their module's fixtures included;
* `timed` tests answer roll calls within a deadline or judge a timed window, but mostly wait (25-55% of the
  two cores busy over their run, measured 2026-12-06 on the AMD EPYC VM, against 65-98% for the `alone`
  ones): one `timed` or `alone` test at a time, with ordinary tests beside them at the lowest CPU priority
  (nice 19), so that the ordinary tests use the cycles the timed test leaves idle and yield the cores
  whenever it computes. A timed test that bounds a figure by the machine's speed measured at another moment
  is `alone` (what runs beside it would move one side and not the other). Lowering the priority back
  needs root (CAP_SYS_NICE; CI runs as root): without it `timed` tests run as `alone` ones.

Two workers: three made the ordinary tests 30% slower on two cores and the run longer (1,254 s against
1,220, 2026-12-06). Measured before `timed` existed: the 67 `alone` tests took 870 s one after another with
56% of the cores idle while they ran, and the run's wall time was alone + others / 2 (BENCHMARKS.md, "The
suite's wall time").

The workers share three lock files, always taken in this order: `measure` (held exclusively by a timed or
alone test), the turnstile `gate`, and `main` (held shared by ordinary and timed tests, exclusively by alone
ones, which keep the gate too, so a waiting alone test is not overtaken). A worker whose next test also
measures keeps `measure` (and, from one alone test to the next, all three): released between them, the other
worker would slip a test in, and the machine would run that one by itself while the alone one waited.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

# Ordinary tests' nice increment. Weights are per thread: at +10 (weight 110 against 1024) a browser test's
# eight busy threads took enough beside a timed test to halve the machine's measured SGEMM (fresh-clone run
# #34); at +19 (weight 15) eight threads weigh 120 against a two-thread answer's 2,048.
NICE_BESIDE = 19
LOCK_DIR = Path(os.environ.get("CE_BENCH_TEST_LOCKS", "/tmp"))
_BASE_NICE = os.getpriority(os.PRIO_PROCESS, 0)  # the worker's own priority: measuring tests run at it


def kind_of(item: pytest.Item | None) -> str | None:
    """"alone", "timed" (as "alone" where priorities cannot be lowered back) or None for an ordinary test."""
    if item is None:
        return None
    if item.get_closest_marker("alone") is not None:
        return "alone"
    if item.get_closest_marker("timed") is not None:
        return "timed" if os.geteuid() == 0 else "alone"
    return None


def _descendants(root: int) -> list[int]:
    """root and every process below it (read from /proc: Linux only, as the suite is)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # gone meanwhile
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])  # after "pid (comm) state": comm may hold spaces
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _renice_all(nice: int) -> None:
    """Every thread of this worker and of the processes it started (relays, browsers, nats-servers kept by
    module fixtures): on Linux a priority belongs to a thread, and a new one inherits its creator's."""
    for pid in _descendants(os.getpid()):
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            with contextlib.suppress(OSError):  # exited meanwhile
                os.setpriority(os.PRIO_PROCESS, int(tid), nice)


class _Locks:
    """One worker's lock files and which of them it holds between tests."""

    def __init__(self, run: str) -> None:
        self.files: dict[str, IO[str]] = {
            name: open(LOCK_DIR / f"ce-bench-tests-{run}.{name}", "a")  # noqa: SIM115 - kept for the run
            for name in ("measure", "gate", "main")}
        self.held: set[str] = set()  # what the previous test kept for this one
        self.nice = _BASE_NICE

    def take(self, name: str, exclusive: bool = True) -> None:
        fcntl.flock(self.files[name], fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        self.held.add(name)

    def drop(self, name: str) -> None:
        if name in self.held:
            fcntl.flock(self.files[name], fcntl.LOCK_UN)
            self.held.discard(name)

    def enter(self, kind: str | None) -> None:
        if kind == "alone" and self.held >= {"measure", "gate", "main"}:
            pass  # kept from the previous alone test
        else:
            if kind is not None and "measure" not in self.held:
                self.take("measure")
            self.take("gate")
            self.take("main", exclusive=kind == "alone")
            if kind != "alone":
                self.drop("gate")
        want = _BASE_NICE if kind is not None else min(19, _BASE_NICE + NICE_BESIDE)
        if want != self.nice and os.geteuid() == 0:
            _renice_all(want)
            self.nice = want

    def leave(self, kind: str | None, next_kind: str | None) -> None:
        if kind == "alone" and next_kind == "alone":
            return  # the machine stays this worker's
        self.drop("main")
        self.drop("gate")
        if next_kind is None:
            self.drop("measure")


_locks: _Locks | None = None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[Any]:
    global _locks
    workerinput = getattr(item.config, "workerinput", None)
    if workerinput is None:
        yield  # one process: nothing runs beside a test
        return
    if _locks is None:
        _locks = _Locks(workerinput["testrunuid"])
    kind = kind_of(item)
    _locks.enter(kind)
    try:
        yield
    finally:
        _locks.leave(kind, kind_of(nextitem))
