"""The roll call's send loop at SCHED_FIFO where the OS allows it (web/sessions/send_priority.py): the thread
gets the policy inside the block and its own back after, even when the block raises; where the process may not
(an unprivileged user) nothing changes and the relay goes on; 0 turns it off."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from web.sessions.send_priority import realtime


def test_the_block_runs_at_sched_fifo_and_the_thread_gets_its_policy_back() -> None:
    assert os.geteuid() == 0  # the precondition: the suite runs as root (CI does), which the OS grants FIFO
    before = os.sched_getscheduler(0), os.sched_getparam(0).sched_priority
    with realtime(1) as granted:
        inside = os.sched_getscheduler(0), os.sched_getparam(0).sched_priority
    assert granted and inside == (os.SCHED_FIFO, 1)
    assert (os.sched_getscheduler(0), os.sched_getparam(0).sched_priority) == before
    with pytest.raises(RuntimeError), realtime(1):
        raise RuntimeError("a send failed")
    assert (os.sched_getscheduler(0), os.sched_getparam(0).sched_priority) == before


def test_off_and_out_of_range_change_nothing() -> None:
    before = os.sched_getscheduler(0)
    for priority in (0, -3, 100):
        with realtime(priority) as granted:
            assert not granted and os.sched_getscheduler(0) == before


def test_an_unprivileged_relay_runs_its_loop_as_before() -> None:
    """As nobody (uid 65534) the OS refuses SCHED_FIFO: the block runs all the same, at the normal policy."""
    code = ("import os\n"
            "from web.sessions.send_priority import realtime  # (imported first: /root is not nobody's to read)\n"
            "os.setgid(65534); os.setuid(65534)\n"
            "before = os.sched_getscheduler(0)\n"
            "with realtime(1) as granted:\n"
            "    print(granted, os.sched_getscheduler(0) == before != os.SCHED_FIFO)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]
