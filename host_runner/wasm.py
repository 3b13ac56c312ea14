"""Running the capsule under wasmtime-py: the WASI command (one ProbeReport) with limits; the reactor
(kernels called directly) lives in common/reactor.py, shared with the relay, and is re-exported here. This
is the embedding the `ce-bench` CLI builds on; the `wasmtime` CLI runs the same capsule.wasm unchanged."""

from __future__ import annotations

import ctypes
import errno
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import wasmtime

from common.reactor import (
    CapsuleError,
    CommandResult,
    Reactor,
    advise_huge_pages,
    default_engine,
    engine_config,
    load_module,
    parse_capsule_report,
)

__all__ = ["HUGE_PAGE_ADVICE", "CapsuleError", "CommandResult", "HugePageAdvice", "Limits", "Reactor",
           "advise_huge_pages", "default_engine", "engine_config", "limited_engine", "load_module",
           "parse_capsule_report", "run_command"]


class HugePageAdvice:
    """What the kernel answered each time this process advised a capsule memory for transparent huge pages
    (madvise MADV_HUGEPAGE, common/reactor.py advise_huge_pages). The memory-bandwidth evidence may say
    "huge pages" only where the advice was taken (host_runner/facts.py huge_pages_note): where THP is in
    its `madvise` mode a refused advice leaves the STREAM arrays on 4 KiB pages, and the figure measures
    the TLB. Instances run in threads of one process (host_runner/cpu.py), hence the lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.accepted = 0
        self.refused = 0
        self.reasons: dict[str, int] = {}  # why advice was refused (errno name) -> how often

    def record(self, accepted: bool, reason: str = "") -> None:
        with self._lock:
            if accepted:
                self.accepted += 1
            else:
                self.refused += 1
                self.reasons[reason] = self.reasons.get(reason, 0) + 1

    def snapshot(self) -> tuple[int, int, dict[str, int]]:
        """(accepted, refused, reasons) at this moment."""
        with self._lock:
            return self.accepted, self.refused, dict(self.reasons)


HUGE_PAGE_ADVICE = HugePageAdvice()  # every capsule memory run_command makes in this process


def _advise(memory: wasmtime.Memory, store: wasmtime.Store) -> bool:
    """advise_huge_pages, with the kernel's answer recorded in HUGE_PAGE_ADVICE (its return value was once
    ignored, and the evidence said "huge pages" from the THP mode alone)."""
    ctypes.set_errno(0)  # advise_huge_pages' madvise is loaded with use_errno: its errno is this thread's copy
    accepted = advise_huge_pages(memory, store)
    code = 0 if accepted else ctypes.get_errno()
    HUGE_PAGE_ADVICE.record(accepted, errno.errorcode.get(code, f"errno {code}") if code else
                            "not advised (no madvise on this platform, or no memory base)")
    return accepted


@dataclass(frozen=True)
class Limits:
    """Resource limits for one run. The engine must be made by `limited_engine()` for deadlines/fuel."""

    memory_bytes: int | None = None
    fuel: int | None = None
    deadline: float | None = None  # time.monotonic() at which the run traps (epoch interruption)


def limited_engine() -> wasmtime.Engine:
    config = engine_config()
    config.epoch_interruption = True
    config.consume_fuel = True
    return wasmtime.Engine(config)


def run_command(
    wasm: Path,
    args: Sequence[str],
    scratch: Path | None = None,
    scratch_writable: bool = True,
    engine: wasmtime.Engine | None = None,
    limits: Limits | None = None,
) -> CommandResult:
    """Runs capsule.wasm with argv = ["capsule.wasm", *args]; scratch is preopened as /scratch.
    A limit that stops the run raises wasmtime.Trap (deadline, fuel)."""
    engine = engine or default_engine()
    module = load_module(engine, wasm)
    linker = wasmtime.Linker(engine)
    linker.define_wasi()
    store = wasmtime.Store(engine)
    if limits is not None:
        if limits.memory_bytes is not None:
            store.set_limits(memory_size=limits.memory_bytes)
        store.set_fuel(limits.fuel if limits.fuel is not None else 2**63 - 1)
    timer = _deadline_timer(engine, store, limits.deadline if limits else None)
    try:
        return _run_start(linker, store, module, args, scratch, scratch_writable)
    finally:
        if timer is not None:
            timer.cancel()


def _deadline_timer(engine: wasmtime.Engine, store: wasmtime.Store, deadline: float | None) -> threading.Timer | None:
    """Arms the store's epoch deadline *before* the timer that bumps the epoch starts: a timer started earlier
    could fire while the module compiles, and a deadline set after that bump would never be reached."""
    if deadline is None:
        return None
    store.set_epoch_deadline(1)
    timer = threading.Timer(max(0.0, deadline - time.monotonic()), engine.increment_epoch)
    timer.daemon = True
    timer.start()
    return timer


def _run_start(linker: wasmtime.Linker, store: wasmtime.Store, module: wasmtime.Module, args: Sequence[str],
               scratch: Path | None, scratch_writable: bool) -> CommandResult:
    with tempfile.TemporaryDirectory(prefix="ce-capsule-") as tmp:
        out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
        wasi = wasmtime.WasiConfig()
        wasi.argv = ["capsule.wasm", *args]
        wasi.stdout_file = str(out)
        wasi.stderr_file = str(err)
        if scratch is not None:
            wasi.preopen_dir(str(scratch), "/scratch", fs_mutable=scratch_writable)
        store.set_wasi(wasi)
        instance = linker.instantiate(store, module)
        memory = instance.exports(store)["memory"]
        if isinstance(memory, wasmtime.Memory):
            _advise(memory, store)  # before the capsule touches its arrays (see common/reactor.py)
        start = instance.exports(store)["_start"]
        assert isinstance(start, wasmtime.Func)  # our own module: a missing _start is a build bug
        code = 0
        try:
            start(store)
        except wasmtime.ExitTrap as exit_trap:
            code = exit_trap.code
        return CommandResult(code, out.read_text(), err.read_text())


