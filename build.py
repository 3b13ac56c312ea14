"""Build every ce-bench artifact into build/.

    python build.py            # build what is out of date
    python build.py --force    # rebuild everything

Artifacts:
    build/capsule.wasm          WASI command (`wasmtime run build/capsule.wasm`)
    build/capsule-reactor.wasm  the same kernels exported for wasmtime-py and Web Workers (no imports)
    build/capsule.sha256        sha256 of capsule.wasm, the identity a CE job manifest names

The C kernels are compiled by the pinned PyPI `ziglang` (clang for wasm32-wasi with wasi-libc), so a
fresh machine needs only pip. Inputs are hashed into a stamp file: an unchanged tree rebuilds nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent
KERNELS = ROOT / "capsule" / "kernels"
BUILD = ROOT / "build"
ZIG_VERSION = "0.17.1"

# -ffp-contract=off: no fused multiply-add anywhere, so a native build of the same C produces the same
# bits (the reference model's token hash is compared across builds). -s strips debug sections.
COMMON_FLAGS = ["-std=c11", "-D_DEFAULT_SOURCE", "-O3", "-msimd128", "-ffp-contract=off", "-Wall", "-Wextra", "-s"]

KERNEL_SOURCES = ["sgemm.c", "stream.c", "llm.c"]
COMMAND_SOURCES = [
    "main.c", *KERNEL_SOURCES, "sha256.c", "json.c", "stats.c",
    "probe_sgemm.c", "probe_stream.c", "probe_disk.c", "probe_llm.c",
]
REACTOR_SOURCES = ["reactor.c", *KERNEL_SOURCES]


@dataclass(frozen=True)
class Target:
    output: str
    sources: list[str]
    extra_flags: list[str]


TARGETS = [
    Target("capsule.wasm", COMMAND_SOURCES, []),
    Target("capsule-reactor.wasm", REACTOR_SOURCES, ["-mexec-model=reactor"]),
]


class BuildError(Exception):
    """A build step failed; the message says which and why."""


def zig_command() -> list[str]:
    try:
        import ziglang  # noqa: F401  (only checks that the pinned toolchain is installed)
    except ImportError as exc:
        raise BuildError(
            f"the wasm toolchain is missing: pip install ziglang=={ZIG_VERSION} (or run scripts/setup)"
        ) from exc
    return [sys.executable, "-m", "ziglang"]


def inputs_digest(target: Target) -> str:
    digest = hashlib.sha256()
    digest.update(" ".join(COMMON_FLAGS + target.extra_flags).encode())
    digest.update(ZIG_VERSION.encode())
    for path in sorted(KERNELS.glob("*.[ch]")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def build_target(target: Target, force: bool) -> Path:
    output = BUILD / target.output
    stamp = BUILD / f".{target.output}.inputs"
    wanted = inputs_digest(target)
    if not force and output.exists() and stamp.exists() and stamp.read_text() == wanted:
        return output
    env = dict(os.environ)
    # zig builds wasi-libc once per feature set (~30 s) and caches it; keep that cache across builds.
    env.setdefault("ZIG_GLOBAL_CACHE_DIR", str(Path.home() / ".cache" / "ce-bench" / "zig"))
    cmd = [
        *zig_command(), "cc", "-target", "wasm32-wasi", *COMMON_FLAGS, *target.extra_flags,
        *(str(KERNELS / s) for s in target.sources), "-o", str(output),
    ]
    result = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise BuildError(f"compiling {target.output} failed:\n{result.stderr.strip()}")
    stamp.write_text(wanted)
    return output


def build(force: bool = False) -> list[Path]:
    BUILD.mkdir(exist_ok=True)
    outputs = [build_target(t, force) for t in TARGETS]
    capsule = BUILD / "capsule.wasm"
    (BUILD / "capsule.sha256").write_text(hashlib.sha256(capsule.read_bytes()).hexdigest() + "\n")
    return outputs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build ce-bench artifacts into build/.")
    parser.add_argument("--force", action="store_true", help="rebuild even when inputs are unchanged")
    args = parser.parse_args(argv)
    try:
        for path in build(force=args.force):
            print(f"built {path.relative_to(ROOT)} ({path.stat().st_size} bytes)")
    except BuildError as exc:
        print(f"build.py: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
