"""Terminal output for `ce-bench run`: a progress bar per phase and the results table (rich, on stderr)."""

from __future__ import annotations

import threading
import time
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

console = Console(stderr=True)


class PhaseProgress:
    """One bar per phase. Probes run inside wasm and cannot report partial progress, so each bar advances
    against the phase's expected duration and completes when the next phase starts."""

    def __init__(self) -> None:
        self._progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                  TimeElapsedColumn(), TextColumn("of ~{task.total:.0f} s"), console=console)
        self._current: tuple[TaskID, float] | None = None
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick, daemon=True)

    def __enter__(self) -> PhaseProgress:
        self._progress.__enter__()
        self._ticker.start()
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self._finish_current()
        self._stop.set()
        self._ticker.join()
        self._progress.__exit__(et, ev, tb)

    def phase(self, name: str, expected_s: float) -> None:
        self._finish_current()
        task = self._progress.add_task(name, total=max(expected_s, 0.1))
        self._current = (task, time.monotonic())

    def _finish_current(self) -> None:
        if self._current:
            task = self._current[0]
            self._progress.update(task, completed=self._progress.tasks[task].total)
            self._current = None

    def _tick(self) -> None:
        while not self._stop.wait(0.1):
            current = self._current
            if current:
                task, started = current
                total = self._progress.tasks[task].total or 1.0
                self._progress.update(task, completed=min(time.monotonic() - started, total * 0.99))


def _fmt(value: Any, digits: int = 2) -> str:
    return "null" if value is None else f"{value:,.{digits}f}"


def results_table(profile: dict[str, Any]) -> Table:
    ev = profile["evidence"]
    cpu, storage, llm = profile["cpu"], profile["storage"], profile["llm"]
    table = Table(title=f"ce-bench NodeProfile {profile['node_id']}", title_justify="left")
    for col in ("figure", "value", "unit", "how"):
        table.add_column(col)
    g = ev["cpu"]["gflops_fp32"]
    table.add_row("CPU", f"{cpu['cores']} cores / {cpu['threads']} threads", "", profile["runtime"]["arch"])
    table.add_row("CPU fp32", _fmt(cpu["gflops_fp32"], 1), "GFLOP/s",
                  g.get("null_reason") or f"{ev['cpu']['instances']} wasm SIMD128 instances (count measured), "
                  f"work over their common window; 1 core alone {_fmt(g.get('single_core'), 1)}")
    table.add_row("memory bandwidth", _fmt(cpu["mem_bw_gbps"]), "GB/s",
                  ev["cpu"]["mem_bw_gbps"].get("null_reason") or "STREAM triad, all instances")
    table.add_row("memory", f"{profile['memory']['total_mb']:,} total / {profile['memory']['available_mb']:,} free",
                  "MiB", "psutil")
    table.add_row("storage write", _fmt(storage["write_mbps"], 0), "MB/s",
                  ev["storage"].get("null_reason") or "1 MiB writes + fsync")
    table.add_row("storage read", _fmt(storage["read_mbps"], 0), "MB/s",
                  ev["storage"].get("null_reason") or "may be served by the page cache (upper bound)")
    table.add_row("storage", f"{storage['total_gb']} total / {storage['free_gb']} free", "GB", "psutil")
    streams = llm.get("streams") or 1
    table.add_row(f"LLM {llm['ref_model']}", _fmt(llm["tokens_per_sec"], 1), "tokens/s",
                  ev["llm"].get("null_reason") or f"aggregate: {streams} decode stream(s) at once (tg128 each)")
    if llm.get("tokens_per_sec_one_stream") is not None:
        table.add_row("  one stream", _fmt(llm["tokens_per_sec_one_stream"], 1), "tokens/s",
                      "one stream decoding alone (latency: 1 / time per token)")
    for gpu, gev in zip(profile["gpus"], ev.get("gpus", []), strict=False):
        table.add_row(f"GPU {gpu['model']}", f"fp32 {_fmt(gpu['fp32_tflops'], 4)} / fp16 {_fmt(gpu['fp16_tflops'], 4)}",
                      "TFLOP/s", f"{gpu['backend']}, WGSL matmul n={gev['fp32_matmul'].get('n')}, checked vs numpy")
        table.add_row("  VRAM", _fmt(gpu["vram_mb"], 0), "MiB", gev.get("vram_null_reason") or gev.get("vram_source"))
    for note in ev.get("gpu_notes", []):
        table.add_row("GPU note", "", "", note)
    rt = profile["runtime"]
    table.add_row("runtime", f"{rt['os']} {rt['arch']}", "", f"docker={rt['docker']} gvisor={rt['gvisor']} "
                  f"engine={rt['engine']}")
    return table
