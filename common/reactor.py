"""The capsule's reactor build under wasmtime-py, shared by nodes (host_runner) and the relay (web, which
recomputes reference-model challenges with it): module loading, the reactor's imports, and its exports
called with numpy arrays copied in and out of wasm memory."""

from __future__ import annotations

import ctypes
import functools
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import wasmtime

from capsule.probe_report import ProbeReport, parse_report
from capsule.typed import ValidationError


@dataclass(frozen=True)
class CommandResult:
    """What one run of capsule.wasm printed and how it ended."""

    exit_code: int
    stdout: str
    stderr: str

    def report(self) -> dict[str, Any]:
        """The ProbeReport; raises CapsuleError when the run failed or printed no JSON."""
        if self.exit_code != 0:
            last = self.stderr.strip().splitlines()[-1:] or ["(no message)"]
            raise CapsuleError(f"capsule exited with status {self.exit_code}: {last[0]}")
        try:
            report = json.loads(self.stdout)
        except json.JSONDecodeError as exc:
            raise CapsuleError(f"capsule printed no valid ProbeReport ({exc})") from exc
        if not isinstance(report, dict):
            raise CapsuleError(f"capsule printed a JSON {type(report).__name__}, expected an object")
        return report

    def probe_report(self, who: str = "the capsule") -> ProbeReport:
        """The ProbeReport, typed (capsule/probe_report.py)."""
        return parse_capsule_report(self.report(), who)


def parse_capsule_report(data: Any, who: str = "the capsule") -> ProbeReport:
    try:
        return parse_report(data)
    except ValidationError as exc:  # a capsule built from other sources than this host's code expects
        raise CapsuleError(f"{who} printed a ProbeReport this host cannot read: {exc}") from None


class CapsuleError(Exception):
    """The capsule could not be run or did not produce a report."""


# Keyed by the engine object itself (not its id): the key keeps the engine alive, so a module is never
# handed to a different engine that reused a collected one's address.
_modules: dict[tuple[wasmtime.Engine, Path], wasmtime.Module] = {}
_default_engine: wasmtime.Engine | None = None


# Every engine here reserves the whole 32-bit space for each linear memory, so a memory never moves and
# its reservation starts at its base (wasmtime's default on 64-bit hosts, made explicit because
# advise_huge_pages relies on it).
WASM32_RESERVATION_BYTES = 4 << 30
_MADV_HUGEPAGE = 14  # <sys/mman.h>, Linux


def engine_config() -> wasmtime.Config:
    """The configuration every engine of ce-bench starts from (see WASM32_RESERVATION_BYTES)."""
    config = wasmtime.Config()
    config.memory_reservation = WASM32_RESERVATION_BYTES
    config.memory_may_move = False
    return config


def default_engine() -> wasmtime.Engine:
    global _default_engine
    if _default_engine is None:
        _default_engine = wasmtime.Engine(engine_config())
    return _default_engine


def advise_huge_pages(memory: wasmtime.Memory, store: wasmtime.Store) -> bool:
    """Asks Linux to back the memory's whole reservation with transparent huge pages (madvise
    MADV_HUGEPAGE), as numpy and most allocators do for large arrays. Where THP is in its common `madvise`
    mode, wasmtime's linear memory otherwise gets 4 KiB pages, and STREAM then measured the TLB instead of
    memory: capsule triad 0.82x the same C on huge-page arrays, 0.97x with the advice (paired calls,
    bench/kernels_paired.py, AMD EPYC Zen 4, 2026-12-03). The memory must belong to an engine made from
    engine_config(). Returns whether the kernel took the advice (False elsewhere than Linux)."""
    if not sys.platform.startswith("linux"):
        return False
    base = ctypes.cast(memory.data_ptr(store), ctypes.c_void_p).value
    if not base:
        return False
    return int(_madvise()(base, WASM32_RESERVATION_BYTES, _MADV_HUGEPAGE)) == 0


@functools.cache
def _madvise() -> Any:
    madvise = ctypes.CDLL(None, use_errno=True).madvise
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    return madvise


def load_module(engine: wasmtime.Engine, path: Path) -> wasmtime.Module:
    """Compiles a module once per engine (Cranelift compilation of capsule.wasm takes ~0.3 s)."""
    key = (engine, path.resolve())
    if key not in _modules:
        try:
            _modules[key] = wasmtime.Module.from_file(engine, str(path))
        except (OSError, wasmtime.WasmtimeError) as exc:
            raise CapsuleError(f"cannot load {path}: {exc}") from exc
    return _modules[key]


_CLOCK_ANCHOR_US = time.time_ns() / 1e3 - time.perf_counter_ns() / 1e3


def _clock_us() -> float:
    """The reactor's clock import: unix time in microseconds, on the monotonic perf_counter."""
    return _CLOCK_ANCHOR_US + time.perf_counter_ns() / 1e3


class Reactor:
    """The reactor variant: `run` executes the capsule's own probe driver (the same ProbeReport as the
    command); the kernels can also be called directly with numpy arrays copied in and out of wasm memory.
    Its imports are the host clock (env.ce_clock_us) and the summary lines (env.ce_log), kept in `log`."""

    def __init__(self, wasm: Path, engine: wasmtime.Engine | None = None) -> None:
        self.engine = engine or default_engine()
        self.store = wasmtime.Store(self.engine)
        self.log: list[str] = []
        linker = wasmtime.Linker(self.engine)
        linker.define_func("env", "ce_clock_us", wasmtime.FuncType([], [wasmtime.ValType.f64()]), _clock_us)
        linker.define_func("env", "ce_log", wasmtime.FuncType([wasmtime.ValType.i32()] * 2, []), self._log,
                           access_caller=True)
        self.instance = linker.instantiate(self.store, load_module(self.engine, wasm))
        exports = self.instance.exports(self.store)
        memory = exports["memory"]
        if not isinstance(memory, wasmtime.Memory):
            raise CapsuleError(f"{wasm}: export 'memory' is not a memory")
        self._memory = memory
        self.huge_pages = advise_huge_pages(memory, self.store)
        self._fn: dict[str, wasmtime.Func] = {}
        for name in (
            "_initialize", "ce_alloc", "ce_free", "ce_run", "ce_result_ptr", "ce_result_len", "ce_sgemm",
            "ce_sgemm_release", "ce_stream_copy", "ce_stream_scale", "ce_stream_add", "ce_stream_triad",
            "ce_llm_new", "ce_llm_free", "ce_llm_forward", "ce_llm_logits", "ce_llm_draw_rank", "ce_llm_token_at_rank",
            "ce_challenge_sgemm", "ce_challenge_begin",
            "ce_challenge_leaf_form",
            "ce_challenge_next", "ce_challenge_commit",
            "ce_challenge_root", "ce_challenge_row", "ce_challenge_proof", "ce_challenge_release", "ce_llm_challenge",
            "ce_llmc_begin", "ce_llmc_next", "ce_llmc_expected", "ce_llmc_release"):
            func = exports[name]
            if not isinstance(func, wasmtime.Func):
                raise CapsuleError(f"{wasm}: export {name!r} is missing or not a function")
            self._fn[name] = func
        self.call("_initialize")

    def _log(self, caller: wasmtime.Caller, ptr: int, length: int) -> None:
        self.log.append(bytes(self._view(ptr, np.uint8, length)).decode("utf-8", "replace"))

    def run(self, args: Sequence[str]) -> CommandResult:
        """The capsule command's arguments, run through the reactor's `ce_run`; stdout holds the
        ProbeReport (exit 0) and stderr the summary lines or the error (exit 2 or 1)."""
        line = " ".join(args).encode()
        if any(" " in a or not a for a in args):
            raise ValueError("reactor arguments cannot be empty or contain spaces")
        ptr = self.put(np.frombuffer(line + b"\0", np.uint8))
        self.log.clear()
        try:
            code = int(self.call("ce_run", ptr))
        finally:
            self.call("ce_free", ptr)
        text = bytes(self._view(int(self.call("ce_result_ptr")), np.uint8,
                                int(self.call("ce_result_len")))).decode("utf-8", "replace")
        if code == 0:
            return CommandResult(0, text, "".join(self.log))
        return CommandResult(code, "", "".join(self.log) + f"capsule: {text}\n")

    def call(self, name: str, *args: int | float) -> Any:
        return self._fn[name](self.store, *args)

    def _view(self, ptr: int, dtype: type[np.generic], count: int) -> np.ndarray:
        memory = self._memory
        base = memory.data_ptr(self.store)  # fetched anew: memory.grow may move it
        size = memory.data_len(self.store)
        raw = np.ctypeslib.as_array(base, shape=(size,))
        return raw[ptr : ptr + count * np.dtype(dtype).itemsize].view(dtype)

    def put(self, array: np.ndarray) -> int:
        """Copies a C-contiguous array into fresh wasm memory; returns its address."""
        data = np.ascontiguousarray(array)
        ptr = int(self.call("ce_alloc", max(data.nbytes, 16)))
        if ptr == 0:
            raise CapsuleError(f"wasm memory exhausted allocating {data.nbytes} bytes")
        self._view(ptr, data.dtype.type, data.size)[:] = data.ravel()
        return ptr

    def get(self, ptr: int, dtype: type[np.generic], shape: tuple[int, ...]) -> np.ndarray:
        return self._view(ptr, dtype, int(np.prod(shape))).reshape(shape).copy()

    def llm_token_hash(self, seed: int, decode: int) -> str:
        """The legacy reference-model challenge (ce_llm_challenge: the model and prompt of seed, `decode` greedy
        steps): a token_ids_sha256. No relay takes a token hash any more (outdated_client); kept for benches."""
        buf = int(self.call("ce_alloc", 65))
        try:
            rc = int(self.call("ce_llm_challenge", seed & 0xFFFFFFFF, seed >> 32, decode, buf))
            if rc != 0:
                raise CapsuleError(f"the capsule could not run the reference-model challenge (code {rc}, "
                                   f"decode={decode})")
            return bytes(self._view(buf, np.uint8, 64)).decode()
        finally:
            self.call("ce_free", buf)

    def llm_begin(self, seed: int) -> None:
        """Starts a reference-model challenge answered token by token (capsule/kernels/llm_challenge.h); the
        model is made on the first call (~150 ms) and kept."""
        if int(self.call("ce_llmc_begin", seed & 0xFFFFFFFF, seed >> 32)) != 0:
            raise CapsuleError("wasm memory exhausted making the reference model")

    def llm_next(self) -> int:
        """The challenge's next token (one forward pass, the token at the rank its seed draws: seeded rank
        sampling, capsule/kernels/llm.h; a new sequence's prompt first every 224)."""
        token = int(self.call("ce_llmc_next"))
        if token < 0:
            raise CapsuleError("no reference-model challenge was begun on this reactor")
        return token

    def llm_expected(self, seed: int, tokens: Sequence[int], j: int) -> int:
        """The token at index j that the reference model gives after the earlier tokens of its sequence: what
        a relay compares with the node's token j. Costs the prefill of that sequence up to j and one pass."""
        if not 0 <= j < len(tokens):
            raise ValueError(f"token index {j} is outside the {len(tokens)} tokens")
        ptr = self.put(np.asarray(tokens, np.int32))
        try:
            token = int(self.call("ce_llmc_expected", seed & 0xFFFFFFFF, seed >> 32, ptr, j))
        finally:
            self.call("ce_free", ptr)
        if token == -2:
            raise CapsuleError("wasm memory exhausted making the reference model")
        if token < 0:
            raise ValueError("a token id is outside the reference model's vocabulary")
        return token

    def sgemm(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """C = A @ B computed by the capsule's fp32 kernel."""
        m, k = a.shape
        k2, n = b.shape
        if k != k2:
            raise ValueError(f"inner dimensions differ: A is {a.shape}, B is {b.shape}")
        pa, pb = self.put(a.astype(np.float32)), self.put(b.astype(np.float32))
        pc = self.put(np.zeros((m, n), np.float32))
        try:
            if self.call("ce_sgemm", m, n, k, pa, k, pb, n, pc, n) != 0:
                raise CapsuleError("ce_sgemm could not allocate its workspace")
            return self.get(pc, np.float32, (m, n))
        finally:
            for p in (pa, pb, pc):
                self.call("ce_free", p)

