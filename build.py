"""Build every ce-bench artifact into build/.

    python build.py            # build what is out of date
    python build.py --force    # rebuild everything

Artifacts:
    build/capsule.wasm          WASI command (`wasmtime run build/capsule.wasm`)
    build/capsule-reactor.wasm  the same driver and probes for Web Workers and wasmtime-py (imports: clock, log)
    build/capsule.sha256        sha256 of capsule.wasm, the identity a CE job manifest names
    build/web/                  the browser bundle the relay serves: pages, ES modules, the reactor wasm,
                                WGSL shaders, Pyodide core (from the pinned npm package) and the capsule's
                                Python as wheels (capsule + rfc8785)

The C kernels are compiled by the pinned PyPI `ziglang` (clang for wasm32-wasi with wasi-libc), so a
fresh machine needs only pip. Inputs are hashed into a stamp file: an unchanged tree rebuilds nothing.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent
KERNELS = ROOT / "capsule" / "kernels"
BUILD = ROOT / "build"
ZIG_VERSION = "0.17.1"
PYODIDE_VERSION = "314.0.8"
PYODIDE_FILES = ["pyodide.mjs", "pyodide.asm.mjs", "pyodide.asm.wasm", "python_stdlib.zip", "pyodide-lock.json"]
RFC8785_WHEEL = "rfc8785-0.1.4-py3-none-any.whl"
NOBLE_VERSION = "3.2.0"  # @noble/ed25519: the signer for browsers without WebCrypto Ed25519
WASI_SHIM_VERSION = "0.4.2"  # @bjorn3/browser_wasi_shim: dispatched WASI tasks in the join page's task worker
CACHE = Path(os.environ.get("CE_BENCH_CACHE", Path.home() / ".cache" / "ce-bench"))

# -ffp-contract=off: no fused multiply-add anywhere, so a native build of the same C produces the same
# bits (the reference model's token hash is compared across builds). -s strips debug sections.
COMMON_FLAGS = ["-std=c11", "-D_DEFAULT_SOURCE", "-O3", "-msimd128", "-ffp-contract=off", "-Wall", "-Wextra", "-s"]

KERNEL_SOURCES = ["sgemm.c", "stream.c", "llm.c"]
PROBE_SOURCES = ["driver.c", *KERNEL_SOURCES, "sha256.c", "json.c", "stats.c",
                 "probe_sgemm.c", "probe_stream.c", "probe_llm.c"]
COMMAND_SOURCES = ["main.c", *PROBE_SOURCES, "probe_disk.c"]
# The reactor runs the same driver and probes (no disk: it has no filesystem) with the clock and the log
# lines imported from its host.
REACTOR_SOURCES = ["reactor.c", "challenge.c", "blake3x4.c", "llm_challenge.c", *PROBE_SOURCES]


@dataclass(frozen=True)
class Target:
    output: str
    sources: list[str]
    extra_flags: list[str]
    source_dir: Path = KERNELS


TARGETS = [
    Target("capsule.wasm", COMMAND_SOURCES, []),
    Target("capsule-reactor.wasm", REACTOR_SOURCES, ["-mexec-model=reactor", "-DCE_REACTOR"]),
    # a sample WASI command for dispatched jobs (docs/jobs.md; the tests and bench/dispatch.py run it)
    Target("work.wasm", ["work.c"], [], ROOT / "examples"),
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
    for path in sorted(target.source_dir.glob("*.[ch]")):
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
        *(str(target.source_dir / s) for s in target.sources), "-o", str(output),
    ]
    result = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise BuildError(f"compiling {target.output} failed:\n{result.stderr.strip()}")
    stamp.write_text(wanted)
    return output


def fetch_pyodide() -> Path:
    """The pinned Pyodide npm package, unpacked once into the cache (npm is the only source: no CDN)."""
    target = CACHE / f"pyodide-{PYODIDE_VERSION}"
    if (target / "package" / "pyodide.mjs").exists():
        return target / "package"
    target.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(["npm", "pack", f"pyodide@{PYODIDE_VERSION}", "--silent"], cwd=target,
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise BuildError(f"npm pack pyodide@{PYODIDE_VERSION} failed (is npm installed?): {result.stderr.strip()}")
    with tarfile.open(target / f"pyodide-{PYODIDE_VERSION}.tgz") as tar:
        tar.extractall(target, filter="data")
    return target / "package"


def fetch_npm(package: str, version: str) -> Path:
    """A pinned npm package, packed and unpacked once into the cache."""
    target = CACHE / f"{package.replace('/', '_').lstrip('@')}-{version}"
    if (target / "package" / "package.json").exists():
        return target / "package"
    target.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(["npm", "pack", f"{package}@{version}", "--silent"], cwd=target, capture_output=True,
                            text=True)
    if result.returncode != 0:
        raise BuildError(f"npm pack {package}@{version} failed (is npm installed?): {result.stderr.strip()}")
    (tgz,) = target.glob("*.tgz")
    with tarfile.open(tgz) as tar:
        tar.extractall(target, filter="data")
    return target / "package"


def fetch_rfc8785_wheel() -> Path:
    wheel = CACHE / RFC8785_WHEEL
    if not wheel.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        result = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(CACHE),
                                 "rfc8785==0.1.4"], capture_output=True, text=True)
        if result.returncode != 0 or not wheel.exists():
            raise BuildError(f"pip download rfc8785==0.1.4 failed: {result.stderr.strip()}")
    return wheel


def wheel_sources() -> list[Path]:
    """capsule/*.py (+ schema): what the capsule wheel holds."""
    return sorted(p for p in (ROOT / "capsule").rglob("*") if p.suffix in (".py", ".json") and p.is_file())


def shader_sources() -> list[Path]:
    return sorted((ROOT / "capsule" / "shaders").glob("*.wgsl"))


def page_sources() -> list[Path]:
    """The browser node's scripts and the relay's pages, served as they are."""
    return sorted([*(ROOT / "browser_node").glob("*.js"), *(p for p in (ROOT / "web" / "pages").glob("*")
                                                             if p.is_file())])


def capsule_wheel(dest: Path) -> Path:
    """capsule/*.py (+ schema) as a pure-Python wheel that Pyodide unpacks: the browser runs the same
    Python as servers."""
    name = "ce_capsule-1.0.0-py3-none-any.whl"
    files = wheel_sources()
    records = []
    out = dest / name
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        def add(arcname: str, data: bytes) -> None:
            info = zipfile.ZipInfo(arcname, date_time=(2026, 1, 1, 0, 0, 0))  # reproducible
            zf.writestr(info, data, zipfile.ZIP_DEFLATED)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            records.append(f"{arcname},sha256={digest},{len(data)}")
        for path in files:
            add(path.relative_to(ROOT).as_posix(), path.read_bytes())
        info_dir = "ce_capsule-1.0.0.dist-info"
        add(f"{info_dir}/METADATA", b"Metadata-Version: 2.1\nName: ce-capsule\nVersion: 1.0.0\n")
        add(f"{info_dir}/WHEEL", b"Wheel-Version: 1.0\nGenerator: ce-bench build.py\nRoot-Is-Purelib: true\n"
                                 b"Tag: py3-none-any\n")
        records.append(f"{info_dir}/RECORD,,")
        zf.writestr(zipfile.ZipInfo(f"{info_dir}/RECORD", date_time=(2026, 1, 1, 0, 0, 0)),
                    "\n".join(records) + "\n")
    return out


def web_sources() -> list[Path]:
    """Every repository file build/web is made from (the pinned npm and PyPI packages are named by version)."""
    return [*wheel_sources(), *shader_sources(), *page_sources(), BUILD / "capsule-reactor.wasm",
            Path(__file__).resolve()]


def web_digest() -> str:
    digest = hashlib.sha256(f"{PYODIDE_VERSION} {NOBLE_VERSION} {WASI_SHIM_VERSION} {RFC8785_WHEEL}".encode())
    for path in web_sources():
        digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def build_web(force: bool = False) -> Path:
    """build/web: everything the relay serves to browsers. Left as it is when made from the same sources: a
    relay may be serving it (two test workers each build once; a rebuild under a running browser join once
    took its files away)."""
    web = BUILD / "web"
    stamp = BUILD / ".web.inputs"
    wanted = web_digest()
    if not force and web.exists() and stamp.exists() and stamp.read_text() == wanted:
        return web
    stamp.unlink(missing_ok=True)
    if web.exists():
        shutil.rmtree(web)
    (web / "shaders").mkdir(parents=True)
    (web / "wheels").mkdir()
    pyodide_dir = web / "pyodide" / PYODIDE_VERSION
    pyodide_dir.mkdir(parents=True)
    package = fetch_pyodide()
    for name in PYODIDE_FILES:
        shutil.copy2(package / name, pyodide_dir / name)
    shutil.copy2(fetch_rfc8785_wheel(), web / "wheels" / RFC8785_WHEEL)
    capsule_wheel(web / "wheels")
    shutil.copy2(BUILD / "capsule-reactor.wasm", web / "capsule-reactor.wasm")
    noble = fetch_npm("@noble/ed25519", NOBLE_VERSION)
    (web / "vendor").mkdir()
    shutil.copy2(noble / "index.js", web / "vendor" / "noble-ed25519.js")
    shutil.copy2(noble / "LICENSE", web / "vendor" / "noble-ed25519.LICENSE")
    shim = fetch_npm("@bjorn3/browser_wasi_shim", WASI_SHIM_VERSION)
    shutil.copytree(shim / "dist", web / "vendor" / "browser_wasi_shim", ignore=shutil.ignore_patterns("*.tsbuildinfo"))
    shutil.copy2(shim / "LICENSE-MIT", web / "vendor" / "browser_wasi_shim" / "LICENSE-MIT")
    for shader in shader_sources():
        shutil.copy2(shader, web / "shaders" / shader.name)
    for source in page_sources():
        shutil.copy2(source, web / source.name)
    stamp.write_text(wanted)
    return web


def build(force: bool = False, web: bool = True) -> list[Path]:
    """Builds what is stale, one process at a time (test workers build at their start, side by side)."""
    import fcntl

    BUILD.mkdir(exist_ok=True)
    with open(BUILD / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        outputs = [build_target(t, force) for t in TARGETS]
        capsule = BUILD / "capsule.wasm"
        (BUILD / "capsule.sha256").write_text(hashlib.sha256(capsule.read_bytes()).hexdigest() + "\n")
        if web:
            outputs.append(build_web(force))
    return outputs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build ce-bench artifacts into build/.")
    parser.add_argument("--force", action="store_true", help="rebuild even when inputs are unchanged")
    args = parser.parse_args(argv)
    try:
        for path in build(force=args.force):
            size = sum(p.stat().st_size for p in path.rglob("*")) if path.is_dir() else path.stat().st_size
            print(f"built {path.relative_to(ROOT)} ({size} bytes)")
    except BuildError as exc:
        print(f"build.py: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
