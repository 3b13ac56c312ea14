"""The suite's own scheduling (tests/conftest.py): under two pytest-xdist workers, a test marked `alone` runs
with no other test beside it, from its setup to its teardown, while unmarked tests do run two at a time. A
generated suite records when each test's fixture started and ended; run by a real `pytest -n 2`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

CONFTEST = f"""
import json, os, sys, time
import pytest
sys.path.insert(0, {str(ROOT)!r})
from tests.conftest import pytest_runtest_protocol  # noqa: F401  (the hook under test)

@pytest.fixture
def span(request):
    start = time.monotonic()
    yield
    with open(os.environ["SPANS"], "a") as f:
        f.write(json.dumps([request.node.name, start, time.monotonic()]) + "\\n")
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


def test_alone_tests_run_with_nothing_beside_them_and_the_rest_two_at_a_time(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(CONFTEST)
    for i in range(4):  # one module per test: --dist loadfile spreads them over both workers
        (suite / f"test_s{i}.py").write_text(SHARED.format(i=i))
    for i in range(2):
        (suite / f"test_a{i}.py").write_text(ALONE.format(i=i))
    spans_file = tmp_path / "spans.jsonl"
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "-n", "2", "--dist", "loadfile", "-c", "/dev/null", "--rootdir", str(suite), str(suite)],
                         capture_output=True, text=True, timeout=120, cwd=suite,
                         env={"SPANS": str(spans_file), "PATH": "/usr/bin"})
    assert run.returncode == 0, run.stdout + run.stderr
    spans = {name: (start, end) for name, start, end in map(json.loads, spans_file.read_text().splitlines())}
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
