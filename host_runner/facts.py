"""Runtime facts of this machine: os, arch, cores/threads, memory and storage totals, containers."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from pathlib import Path

import psutil
import wasmtime

from host_runner.wasm import HUGE_PAGE_ADVICE, HugePageAdvice


@dataclass(frozen=True)
class Facts:
    os: str
    arch: str
    cores: int
    threads: int
    total_mb: int
    available_mb: int
    storage_total_gb: int | None
    storage_free_gb: int | None
    docker: bool
    gvisor: bool
    engine: str


def _read(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


def in_docker() -> bool:
    cgroup = _read("/proc/1/cgroup")
    return Path("/.dockerenv").exists() or "docker" in cgroup or "containerd" in cgroup


def in_gvisor() -> bool:
    # gVisor's kernel identifies itself in dmesg-like /proc/version text; its runsc sets no other marker.
    return "gvisor" in _read("/proc/version").lower() or "gVisor" in _read("/proc/self/mountinfo")


def thp_mode() -> str:
    """The kernel's transparent-huge-page mode (always, madvise, never), or "" where there is none."""
    text = _read("/sys/kernel/mm/transparent_hugepage/enabled")
    return text[text.find("[") + 1:text.find("]")] if "[" in text and "]" in text else ""


def huge_pages_note(advice: HugePageAdvice | None = None) -> str:
    """How the capsule's wasm memory was paged, for the memory-bandwidth evidence: hosts advise it for
    transparent huge pages (common/reactor.py); whether that is honoured needs both the kernel's THP mode and
    its answer to each advice (`advice`: this process's, host_runner/wasm.py HUGE_PAGE_ADVICE). "transparent
    huge pages" only when every advice was accepted and the mode allows them."""
    mode = thp_mode()
    accepted, refused, reasons = (advice or HUGE_PAGE_ADVICE).snapshot()
    if not mode:
        return "4 KiB pages (no transparent huge pages on this system)"
    if mode == "never":
        return "4 KiB pages (transparent huge pages disabled: THP mode never)"
    if refused:
        why = ", ".join(f"{reason} x{count}" for reason, count in sorted(reasons.items()))
        refusal = f"the kernel refused MADV_HUGEPAGE for {refused} of {accepted + refused} capsule memories ({why})"
        if mode == "always":  # unadvised memory may still get huge pages in this mode: not known either way
            return f"not known: {refusal}; THP mode always may back them with huge pages unasked"
        return f"4 KiB pages: {refusal}; THP mode {mode} gives huge pages only to advised memory"
    if not accepted:
        return f"not known: no capsule memory was advised for huge pages in this process (THP mode {mode})"
    return f"transparent huge pages (MADV_HUGEPAGE accepted for all {accepted} capsule memories; THP mode {mode})"


def gather(storage_path: Path) -> Facts:
    vm = psutil.virtual_memory()
    threads = psutil.cpu_count(logical=True) or os.cpu_count() or 1
    cores = psutil.cpu_count(logical=False) or threads
    try:
        du = psutil.disk_usage(str(storage_path))
        total_gb, free_gb = du.total // 10**9, du.free // 10**9
    except OSError:
        total_gb = free_gb = None
    return Facts(
        os=platform.system().lower(), arch=platform.machine(), cores=cores, threads=threads,
        total_mb=vm.total // 2**20, available_mb=vm.available // 2**20,
        storage_total_gb=total_gb, storage_free_gb=free_gb, docker=in_docker(), gvisor=in_gvisor(),
        engine=f"wasmtime-py {wasmtime.__version__}" if hasattr(wasmtime, "__version__") else "wasmtime-py",
    )
