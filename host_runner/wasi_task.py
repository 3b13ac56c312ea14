"""One dispatched WASI task under wasmtime-py, inside the limits its manifest names (docs/jobs.md).

What a task may touch: its argv, its stdin blob, stdout (kept up to `output_bytes`; one byte more fails the
task and stops it), and an empty scratch directory preopened as "." and removed afterwards. No network, no
environment, no other file. Stops: linear memory beyond `memory_mib` (the allocation fails inside the
module), fuel (when the manifest sets it: the engine then meters every instruction), and the wall clock
(epoch interruption: a ticker thread advances the engine's epoch every EPOCH_TICK_S).

Compiled modules are cached by sha256 per engine: a node that runs many tasks of one job compiles its
module once.
"""

from __future__ import annotations

import errno
import tempfile
import threading
import time
from dataclasses import dataclass

import wasmtime

EPOCH_TICK_S = 0.01  # the wall-clock limit's resolution: a task stops at most ~10 ms after its wall_ms


@dataclass(frozen=True)
class TaskLimitsRt:
    memory_bytes: int
    wall_ms: int
    fuel: int | None
    output_bytes: int


@dataclass(frozen=True)
class TaskOutcome:
    exit_code: int | None   # None: the module did not exit (trapped, stopped by a limit)
    stdout: bytes           # at most output_bytes
    error: str | None       # why the task failed on the node, in words; None when it exited
    fuel_used: int | None
    wall_ms: float


class _Engines:
    """Two engines per process, made once: with fuel metering (slower: every block counts) and without;
    both interrupt by epoch. A ticker thread advances both epochs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._engines: dict[bool, wasmtime.Engine] = {}
        self._modules: dict[tuple[bool, str], wasmtime.Module] = {}
        self._ticker: threading.Thread | None = None

    def engine(self, fuel: bool) -> wasmtime.Engine:
        with self._lock:
            if fuel not in self._engines:
                config = wasmtime.Config()
                config.epoch_interruption = True
                config.consume_fuel = fuel
                config.cranelift_opt_level = "speed"
                self._engines[fuel] = wasmtime.Engine(config)
            if self._ticker is None:
                self._ticker = threading.Thread(target=self._tick, name="wasi-epoch", daemon=True)
                self._ticker.start()
            return self._engines[fuel]

    def _tick(self) -> None:
        while True:
            time.sleep(EPOCH_TICK_S)
            for engine in list(self._engines.values()):
                engine.increment_epoch()

    def module(self, fuel: bool, sha256: str, wasm: bytes) -> wasmtime.Module:
        key = (fuel, sha256)
        with self._lock:
            cached = self._modules.get(key)
        if cached is not None:
            return cached
        module = wasmtime.Module(self.engine(fuel), wasm)
        with self._lock:
            if len(self._modules) >= 32:  # a node serves a few jobs at a time; forget the oldest
                self._modules.pop(next(iter(self._modules)))
            self._modules[key] = module
        return module


ENGINES = _Engines()


class ModuleError(Exception):
    """The module cannot run at all (not wasm, not a WASI command): every task of it fails alike."""


# The only inputs a task may see are its argv and stdin: replicas on other nodes must compute the same bytes, or an
# honest node is outvoted (and flagged) by chance. WASI's random_get and clocks are therefore replaced: random
# bytes come from SplitMix64 seeded by the task's own seed (its job, index and argv: the same on every node), and
# both clocks start at DETERMINISTIC_EPOCH_NS and advance CLOCK_STEP_NS per reading. (The join page's worker does
# the same: browser_node/task-worker.js.)
DETERMINISTIC_EPOCH_NS = 1_700_000_000 * 10**9  # 2023-11-14, realtime; monotonic starts at 0
CLOCK_STEP_NS = 1_000


MASK64 = (1 << 64) - 1


def splitmix64(state: int) -> tuple[int, int]:
    """(next state, output): SplitMix64 (Steele et al.), simple to write the same in JavaScript."""
    state = (state + 0x9E3779B97F4A7C15) & MASK64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return state, z ^ (z >> 31)


def _deterministic(linker: wasmtime.Linker, seed: bytes) -> None:
    i32, i64 = wasmtime.ValType.i32(), wasmtime.ValType.i64()
    state = {"rng": int.from_bytes(seed[:8].ljust(8, b"\0"), "little"), "ticks": 0}

    def memory(caller: wasmtime.Caller) -> wasmtime.Memory:
        mem = caller.get("memory")
        if not isinstance(mem, wasmtime.Memory):
            raise wasmtime.Trap("the module exports no memory")
        return mem

    def random_get(caller: wasmtime.Caller, ptr: int, length: int) -> int:
        out = bytearray()
        while len(out) < length:  # 8 bytes per draw, little-endian; a draw's unused bytes are dropped
            state["rng"], word = splitmix64(state["rng"])
            out += word.to_bytes(8, "little")
        memory(caller).write(caller, bytes(out[:length]), ptr)
        return 0

    def clock_time_get(caller: wasmtime.Caller, clock_id: int, precision: int, ptr: int) -> int:
        state["ticks"] += 1
        now = state["ticks"] * CLOCK_STEP_NS + (DETERMINISTIC_EPOCH_NS if clock_id == 0 else 0)
        memory(caller).write(caller, now.to_bytes(8, "little"), ptr)
        return 0

    def clock_res_get(caller: wasmtime.Caller, clock_id: int, ptr: int) -> int:
        memory(caller).write(caller, CLOCK_STEP_NS.to_bytes(8, "little"), ptr)
        return 0

    linker.allow_shadowing = True
    linker.define_func("wasi_snapshot_preview1", "random_get", wasmtime.FuncType([i32, i32], [i32]), random_get,
                       access_caller=True)
    linker.define_func("wasi_snapshot_preview1", "clock_time_get", wasmtime.FuncType([i32, i64, i32], [i32]),
                       clock_time_get, access_caller=True)
    linker.define_func("wasi_snapshot_preview1", "clock_res_get", wasmtime.FuncType([i32, i32], [i32]),
                       clock_res_get, access_caller=True)


def task_seed(job_id: str, task: int, args: list[str]) -> bytes:
    """The seed of a task's random bytes: the same on every node that runs it."""
    import hashlib

    return hashlib.sha256("\x00".join(["ce-bench/task-random/v1", job_id, str(task), *args]).encode()).digest()


def run_task(sha256: str, wasm: bytes, args: list[str], stdin: bytes, limits: TaskLimitsRt,
             seed: bytes = b"") -> TaskOutcome:
    fuel = limits.fuel is not None
    try:
        module = ENGINES.module(fuel, sha256, wasm)
    except wasmtime.WasmtimeError as exc:
        raise ModuleError(f"the module does not compile: {str(exc).splitlines()[0]}") from None
    engine = ENGINES.engine(fuel)
    store = wasmtime.Store(engine)
    store.set_limits(memory_size=limits.memory_bytes)
    if limits.fuel is not None:
        store.set_fuel(limits.fuel)
    ticks = max(1, round(limits.wall_ms / 1000 / EPOCH_TICK_S))
    out = bytearray()
    overflow = False

    def write(data: bytes) -> int:
        nonlocal overflow
        room = limits.output_bytes - len(out)
        if len(data) > room:
            out.extend(data[:max(room, 0)])
            overflow = True
            store.set_epoch_deadline(0)  # stop at the next check (a loop writing more gets EFBIG meanwhile)
            return -errno.EFBIG
        out.extend(data)
        return len(data)

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ce-task-") as scratch:
        wasi = wasmtime.WasiConfig()
        wasi.argv = ["task.wasm", *args]
        stdin_path = f"{scratch}.stdin"
        with open(stdin_path, "wb") as f:
            f.write(stdin)
        try:
            wasi.stdin_file = stdin_path
            wasi.stdout_custom = write
            wasi.stderr_custom = len  # stderr is not returned (logs are not output)
            wasi.preopen_dir(scratch, ".", fs_mutable=True)
            store.set_wasi(wasi)
            linker = wasmtime.Linker(engine)
            linker.define_wasi()
            _deterministic(linker, seed)
            store.set_epoch_deadline(ticks)
            exit_code: int | None = None
            error: str | None = None
            try:
                instance = linker.instantiate(store, module)
                start = instance.exports(store).get("_start")
                if not isinstance(start, wasmtime.Func):
                    raise ModuleError("the module is not a WASI command (no _start)")
                start(store)
                exit_code = 0
            except wasmtime.ExitTrap as exit_trap:
                exit_code = exit_trap.code
            except wasmtime.Trap as trap:
                error = _trap_words(trap, limits, overflow)
            except wasmtime.WasmtimeError as exc:  # instantiation: imports it lacks, memory beyond the limit
                error = f"the module cannot start: {str(exc).splitlines()[0][:300]}"
        finally:
            import os

            os.unlink(stdin_path)
    wall_ms = (time.perf_counter() - started) * 1000
    if overflow:
        exit_code, error = None, f"stdout exceeded the task's output_bytes ({limits.output_bytes} bytes)"
    fuel_used = None
    if limits.fuel is not None:
        fuel_used = limits.fuel - store.get_fuel()
    return TaskOutcome(exit_code, bytes(out), error, fuel_used, wall_ms)


def _trap_words(trap: wasmtime.Trap, limits: TaskLimitsRt, overflow: bool) -> str:
    if trap.trap_code == wasmtime.TrapCode.INTERRUPT:
        if overflow:
            return f"stdout exceeded the task's output_bytes ({limits.output_bytes} bytes)"
        return f"the task exceeded its wall-clock limit of {limits.wall_ms} ms"
    if trap.trap_code == wasmtime.TrapCode.OUT_OF_FUEL:
        return f"the task ran out of fuel ({limits.fuel} units)"
    code = trap.trap_code
    return f"the module trapped ({code.name.lower().replace('_', ' ')})" if code is not None else \
        f"the module trapped: {trap.message.strip()[:300]}"
