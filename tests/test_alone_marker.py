"""The suite's own scheduling (tests/scheduling.py): under two pytest-xdist workers, a test marked `alone` runs
with no other test beside it, from its setup to its teardown, a `timed` one with no `alone` or `timed` test
beside it but ordinary ones at a lower CPU priority, while unmarked tests do run two at a time. A generated
suite records when each test's fixture started and ended, and at what priority; run by a real `pytest -n 2`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

CONFTEST = f"""
import json, os, sys, time
import pytest
sys.path.insert(0, {str(ROOT)!r})
from tests.scheduling import pytest_runtest_protocol  # noqa: F401  (the hook under test)

@pytest.fixture
def span(request):
    start = time.monotonic()
    yield
    nice = os.getpriority(os.PRIO_PROCESS, 0)
    with open(os.environ["SPANS"], "a") as f:
        f.write(json.dumps([request.node.name, start, time.monotonic(), nice]) + "\\n")
"""
SHARED = """
import time
def test_shared_{i}(span):
    time.sleep(0.4)
"""
ALONE = """
import time
import pytest
@pytest.mark.alone
def test_alone_{i}(span):
    time.sleep(0.4)
"""

TIMED = """
import time
import pytest
@pytest.mark.timed
def test_timed_{i}(span):
    time.sleep(0.4)
"""


STREAK = """
import time
import pytest
pytestmark = pytest.mark.alone
""" + "".join(f"""
def test_streak_{i}(span):
    time.sleep(0.4)
""" for i in range(3))


def run_suite(tmp_path: Path, modules: dict[str, str]) -> dict[str, tuple[float, float]]:
    """Runs the generated modules under `pytest -n 2 --dist loadfile`; each test's (start, end)."""
    return {name: (start, end) for name, (start, end, _) in run_suite_niced(tmp_path, modules).items()}


def run_suite_niced(tmp_path: Path, modules: dict[str, str]) -> dict[str, tuple[float, float, int]]:
    """As run_suite, with the priority (nice) each test ran at."""
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(CONFTEST)
    for name, text in modules.items():
        (suite / name).write_text(text)
    spans_file = tmp_path / "spans.jsonl"
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "-n", "2", "--dist", "loadfile", "-c", "/dev/null", "--rootdir", str(suite), str(suite)],
                         capture_output=True, text=True, timeout=120, cwd=suite,
                         # at this suite's own priority, not the lowered one this test may run at
                         preexec_fn=lambda: os.setpriority(os.PRIO_PROCESS, 0, 0) if os.geteuid() == 0 else None,
                         env={"SPANS": str(spans_file), "PATH": "/usr/bin"})
    assert run.returncode == 0, run.stdout + run.stderr
    return {name: (start, end, nice) for name, start, end, nice in map(json.loads, spans_file.read_text().splitlines())}


def test_alone_tests_run_with_nothing_beside_them_and_the_rest_two_at_a_time(tmp_path: Path) -> None:
    # one module per test: --dist loadfile spreads them over both workers
    spans = run_suite(tmp_path, {**{f"test_s{i}.py": SHARED.format(i=i) for i in range(4)},
                                 **{f"test_a{i}.py": ALONE.format(i=i) for i in range(2)}})
    assert len(spans) == 6, spans

    def overlap(a: str, b: str) -> bool:
        return bool(spans[a][0] < spans[b][1] and spans[b][0] < spans[a][1])

    alone = [n for n in spans if n.startswith("test_alone")]
    for a in alone:
        beside = [b for b in spans if b != a and overlap(a, b)]
        assert not beside, (a, beside, spans)
    shared = [n for n in spans if n.startswith("test_shared")]
    # the precondition that makes the check above mean something: two workers did run tests side by side
    assert any(overlap(a, b) for i, a in enumerate(shared) for b in shared[i + 1:]), spans


def test_consecutive_alone_tests_of_a_worker_keep_the_machine(tmp_path: Path) -> None:
    """Three `alone` tests in one module run back to back: no test of the other worker starts between them
    (released in between, the other worker would slip one in and the machine would run it by itself)."""
    spans = run_suite(tmp_path, {"test_streak.py": STREAK, **{f"test_s{i}.py": SHARED.format(i=i) for i in range(6)}})
    assert len(spans) == 9, spans
    streak = sorted(spans[f"test_streak_{i}"] for i in range(3))
    first, last = streak[0][0], streak[-1][1]
    inside = [n for n, (start, _) in spans.items() if not n.startswith("test_streak") and first < start < last]
    assert not inside, (inside, spans)
    # the precondition: the other worker had tests to slip in, and ran some before or after the streak
    assert any(start < first or start > last for n, (start, _) in spans.items() if n.startswith("test_shared")), spans


def test_timed_tests_run_one_at_a_time_beside_ordinary_tests_that_yield_the_cores(tmp_path: Path) -> None:
    """`timed` tests never overlap each other or an `alone` test; ordinary tests do run beside them, at nice
    19 against the timed test's 0 (this needs root, as CI has: without it they run as `alone`)."""
    # files named so that xdist hands them out in this order: two timed first (each worker gets one), then
    # ordinary ones and timed ones interleaved, and the alone ones last
    order = "ttstsstss"
    kinds = {"t": ("timed", TIMED), "s": ("shared", SHARED)}
    spans = run_suite_niced(tmp_path, {**{f"test_{n:02}_{kinds[k][0]}.py": kinds[k][1].format(i=n)
                                          for n, k in enumerate(order)},
                                       **{f"test_20_a{i}.py": ALONE.format(i=i) for i in range(2)}})
    assert len(spans) == len(order) + 2, spans

    def overlap(a: str, b: str) -> bool:
        return bool(spans[a][0] < spans[b][1] and spans[b][0] < spans[a][1])

    measuring = [n for n in spans if n.startswith(("test_timed", "test_alone"))]
    for a in measuring:
        others = [b for b in measuring if b != a and overlap(a, b)]
        assert not others, (a, others, spans)
    for a in (n for n in spans if n.startswith("test_alone")):
        assert not [b for b in spans if b != a and overlap(a, b)], (a, spans)
    timed = [n for n in spans if n.startswith("test_timed")]
    shared = [n for n in spans if n.startswith("test_shared")]
    assert os.geteuid() == 0, "the suite expects root (README): timed tests run as alone ones without it"
    beside = [(t, s) for t in timed for s in shared if overlap(t, s)]
    assert beside, spans  # the precondition and the point: ordinary tests used the time a timed one waited
    assert all(spans[t][2] == 0 and spans[s][2] == 19 for t, s in beside), spans
    assert {spans[n][2] for n in measuring} == {0}, spans  # every measuring test at the suite's priority
