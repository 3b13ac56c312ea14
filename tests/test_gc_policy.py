"""web/gc_policy.py: freezes every tick, a full collection once per interval (unfreeze, collect, freeze),
against a stand-in gc that records the calls; and once against the real gc module."""

from __future__ import annotations

import gc

from web.gc_policy import GcPolicy


class Recorder:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def freeze(self) -> None:
        self.calls.append("freeze")

    def unfreeze(self) -> None:
        self.calls.append("unfreeze")

    def collect(self) -> int:
        self.calls.append("collect")
        return 7


def test_freezes_each_tick_and_collects_everything_once_per_interval() -> None:
    recorder = Recorder()
    policy = GcPolicy(10.0, 900.0, recorder)
    for now in range(0, 900, 10):
        policy.tick(float(now))
    assert recorder.calls == ["freeze"] * 90 and policy.last_full_s is None
    policy.tick(900.0)
    assert recorder.calls[90:] == ["unfreeze", "collect", "freeze"]
    assert policy.last_full_freed == 7 and policy.last_full_s is not None and policy.last_full_at == 900.0
    policy.tick(910.0)
    assert recorder.calls[93:] == ["freeze"]


def test_with_the_real_collector_frozen_cycles_wait_for_the_full_collection() -> None:
    class Node:
        def __init__(self) -> None:
            self.me = self

    policy = GcPolicy(10.0, 900.0)
    try:
        cycles = [Node() for _ in range(1000)]
        policy.tick(0.0)
        assert gc.get_freeze_count() >= 1000
        del cycles
        assert gc.collect() < 1000  # frozen: not scanned, so not freed (what makes collections short)
        policy.tick(900.0)
        assert policy.last_full_freed >= 1000  # the full collection frees them
    finally:
        gc.unfreeze()
