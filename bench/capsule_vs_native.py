"""Side-by-side benchmark of the capsule engine (issue: the capsule engine).

    .venv/bin/python bench/capsule_vs_native.py [--rounds 3]

Measured in one run on this machine, alternating so that noise hits both sides alike:
  * SGEMM: capsule.wasm under the wasmtime CLI vs the same C built natively with 128-bit vectors
    (system cc, x86-64 baseline = SSE2) vs numpy float32 matmul on OpenBLAS with one thread;
  * STREAM triad: capsule vs the same C native;
  * reference-model decode tokens/s: capsule vs native;
  * wall time of the default probe set (target <= 10 s per core), and the run-to-run spread of medians.
Prints each figure beside its reference and the ratio against the issue's target.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import build  # noqa: E402

N = 1024
NUMPY_SNIPPET = """
import json, time, numpy as np
try:
    from threadpoolctl import threadpool_info
    info = [(i.get('internal_api'), i.get('architecture'), i.get('num_threads')) for i in threadpool_info()]
except ImportError:
    info = 'threadpoolctl not installed'
n = %d
rng = np.random.default_rng(1)
a = rng.uniform(-1, 1, (n, n)).astype(np.float32); b = rng.uniform(-1, 1, (n, n)).astype(np.float32)
a @ b
rates = []
for _ in range(15):
    t = time.perf_counter(); a @ b; rates.append(2 * n**3 / (time.perf_counter() - t) / 1e9)
print(json.dumps({"gflops": sorted(rates)[len(rates) // 2], "blas": info}))
"""


def native_binary(tmp: Path) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        sys.exit("bench: no system C compiler for the native reference")
    out = tmp / "capsule-native"
    flags = [f for f in build.COMMON_FLAGS if f not in ("-msimd128", "-s")]
    subprocess.run([cc, *flags, *(str(build.KERNELS / s) for s in build.COMMAND_SOURCES), "-lm", "-o", str(out)],
                   check=True)
    return out


def run_json(cmd: list[str]) -> dict[str, Any]:
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def numpy_single_thread() -> dict[str, Any]:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    # OPENBLAS_CORETYPE/L2_SIZE are set on some of these machines for old OpenBLAS builds and slow a
    # current one down; unset both for this reference only (see the env notes).
    env.pop("OPENBLAS_CORETYPE", None)
    env.pop("OPENBLAS_L2_SIZE", None)
    out = subprocess.run([sys.executable, "-c", NUMPY_SNIPPET % N], capture_output=True, text=True, check=True,
                         env=env)
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def spread_pct(values: list[float]) -> float:
    return 100.0 * (max(values) - min(values)) / statistics.median(values)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="alternating wasm/native rounds (default 3)")
    args = parser.parse_args()
    build.build()
    wasmtime = str(Path(sys.executable).parent / "wasmtime")
    capsule = str(build.BUILD / "capsule.wasm")
    probe_args = ["--probes", "sgemm,stream,llm", "--seed", "be7c40", "--sgemm-n", str(N), "--budget-ms", "6000"]
    figures: dict[str, dict[str, list[float]]] = {
        side: {"sgemm": [], "triad": [], "tps": []} for side in ("wasm", "native")}
    blas: list[float] = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        native = str(native_binary(tmp))
        for r in range(args.rounds):
            for side, cmd in (("wasm", [wasmtime, "run", capsule]), ("native", [native])):
                p = run_json(cmd + probe_args)["probes"]
                figures[side]["sgemm"].append(p["sgemm"]["gflops"])
                figures[side]["triad"].append(p["stream"]["triad_gbps"])
                figures[side]["tps"].append(p["llm"]["tokens_per_sec"])
            np_result = numpy_single_thread()
            blas.append(np_result["gflops"])
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
        scratch = tmp / "scratch"
        scratch.mkdir()
        default_wall = [run_json([wasmtime, "run", "--dir", f"{scratch}::/scratch", capsule])["wall_ms"] / 1000
                        for _ in range(2)]

    med = {side: {k: statistics.median(v) for k, v in f.items()} for side, f in figures.items()}
    blas_med = statistics.median(blas)
    rows = [
        ("SGEMM n=1024 GFLOP/s", med["wasm"]["sgemm"], "same C native 128-bit", med["native"]["sgemm"], 0.85),
        ("SGEMM n=1024 GFLOP/s", med["wasm"]["sgemm"], "numpy OpenBLAS 1 thread", blas_med, 0.30),
        ("STREAM triad GB/s", med["wasm"]["triad"], "same C native", med["native"]["triad"], 0.95),
        ("ce-ref-15m decode tokens/s", med["wasm"]["tps"], "same C native", med["native"]["tps"], None),
    ]
    print(f"\nmedians of {args.rounds} alternating rounds (numpy BLAS: {np_result['blas']})")
    print(f"{'figure':28} {'capsule':>9}  {'reference':26} {'ref':>9} {'ratio':>6}  target")
    for name, mine, ref_name, ref, target in rows:
        ratio = mine / ref
        verdict = "" if target is None else (f">= {target}  " + ("met" if ratio >= target else "MISSED"))
        print(f"{name:28} {mine:9.2f}  {ref_name:26} {ref:9.2f} {ratio:6.3f}  {verdict}")
    print(f"default probe set wall time: {', '.join(f'{w:.1f} s' for w in default_wall)} (target <= 10 s per core)")
    for side in ("wasm", "native"):
        spreads = ", ".join(f"{k} {spread_pct(v):.1f}%" for k, v in figures[side].items())
        print(f"run-to-run spread of medians ({side}, (max-min)/median): {spreads} (target <= 3% when quiet)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
