"""The roll call's send loop at a real-time scheduling priority, where the OS lets the relay have one.

A roll call writes every challenge back to back (web/proof/roll_caller.py `_send_all`): ~80 ms for 10,000
sessions on one EPYC vCPU. On a relay machine with other work (there: an honest node's compute threads and the
harness's session generator) the scheduler preempted that loop and its send spread went from 80 ms to 156 ms,
beyond the 100 ms the protocol states (BENCHMARKS.md, 2026-12-07). Under SCHED_FIFO the thread runs the loop
to its end unless a higher real-time task wants the core. The loop has no await inside, is bounded by the
sessions it holds, and the policy is given back right after; Linux's real-time throttling (95% of each second
by default) bounds it besides.

Allowed to root or CAP_SYS_NICE (or an RLIMIT_RTPRIO above 0); elsewhere nothing changes and the loop runs
at the thread's normal priority, as before. `RelayConfig.roll_call_send_priority` 0 turns it off.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


@contextlib.contextmanager
def realtime(priority: int) -> Iterator[bool]:
    """Runs the block on the calling thread at SCHED_FIFO `priority` (1-99), then restores the thread's own
    policy; yields whether it got it (False: off, not Linux, or not permitted)."""
    if priority <= 0 or not hasattr(os, "sched_setscheduler"):
        yield False
        return
    try:
        policy, param = os.sched_getscheduler(0), os.sched_getparam(0)
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))  # (0: the calling thread on Linux)
    except OSError:  # EPERM: no CAP_SYS_NICE and no RLIMIT_RTPRIO; EINVAL: a priority out of range
        yield False
        return
    try:
        yield True
    finally:
        with contextlib.suppress(OSError):  # lowering one's own policy is always allowed
            os.sched_setscheduler(0, policy, param)
