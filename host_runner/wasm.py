"""Running the capsule under wasmtime-py: the WASI command (one ProbeReport) with limits; the reactor
(kernels called directly) lives in common/reactor.py, shared with the relay, and is re-exported here. This
is the embedding the `ce-bench` CLI builds on; the `wasmtime` CLI runs the same capsule.wasm unchanged."""

from __future__ import annotations

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

__all__ = ["CapsuleError", "CommandResult", "Limits", "Reactor", "advise_huge_pages", "default_engine",
           "engine_config", "limited_engine", "load_module", "parse_capsule_report", "run_command"]


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
            advise_huge_pages(memory, store)  # before the capsule touches its arrays (see common/reactor.py)
        start = instance.exports(store)["_start"]
        assert isinstance(start, wasmtime.Func)  # our own module: a missing _start is a build bug
        code = 0
        try:
            start(store)
        except wasmtime.ExitTrap as exit_trap:
            code = exit_trap.code
        return CommandResult(code, out.read_text(), err.read_text())


