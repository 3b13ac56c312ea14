"""The commitment's share of a challenge: what a node pays beyond its products, in wasmtime and in Chromium.

    .venv/bin/python bench/commitment.py [--pairs 40] [--n 1024] [--no-browser]

Method. One capsule reactor (build/capsule-reactor.wasm): a challenge begun with more products than the run
needs, then, alternately a few ms apart, one `ce_challenge_next(1)` (a fresh A_t from the seed, the product
by the probe's kernel, the BLAKE3 leaf of every row's high halves and the product's tree:
capsule/kernels/challenge.c) and one bare `ce_sgemm` of the same order on arrays already in wasm memory (the
reference: the product alone).
Per pair, share = 1 - sgemm / product; the figure is the median share with its interquartile range. The
same loop runs in headless Chromium (the join page's engine: Debian's chromium through playwright), on the
same wasm. Each product's root is checked against the Python reference (capsule/cpu_challenge.py) once.
Target (issue 29): <= 5% in both.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from capsule import cpu_challenge  # noqa: E402
from common.reactor import Reactor  # noqa: E402

REACTOR = ROOT / "build" / "capsule-reactor.wasm"
SEED = 0x5EED5EED12345678

PAGE_JS = """async ([n, pairs]) => {
  const bytes = await (await fetch("/capsule-reactor.wasm")).arrayBuffer();
  let k;
  const imports = { env: { ce_clock_us: () => (performance.timeOrigin + performance.now()) * 1000,
                           ce_log: () => {} } };
  k = (await WebAssembly.instantiate(bytes, imports)).instance.exports;
  k._initialize();
  if (k.ce_challenge_begin(0x12345678, 0x5eed5eed, n, pairs + 2) !== 0) throw new Error("begin failed");
  const size = 4 * n * n, a = k.ce_alloc(size), b = k.ce_alloc(size), c = k.ce_alloc(size);
  const fa = new Float32Array(k.memory.buffer, a, n * n), fb = new Float32Array(k.memory.buffer, b, n * n);
  for (let i = 0; i < n * n; i++) { fa[i] = Math.random() * 2 - 1; fb[i] = Math.random() * 2 - 1; }
  k.ce_challenge_next(1); k.ce_sgemm(n, n, n, a, n, b, n, c, n);  // warm
  const out = [];
  for (let i = 0; i < pairs; i++) {
    let t = performance.now(); k.ce_challenge_next(1); const product = performance.now() - t;
    t = performance.now(); k.ce_sgemm(n, n, n, a, n, b, n, c, n); const sgemm = performance.now() - t;
    out.push([product, sgemm]);
  }
  return out;
}"""


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def summary(shares: list[float]) -> str:
    q = statistics.quantiles(shares, n=4)
    median = statistics.median(shares) * 100
    return f"median {median:.1f}% (IQR {q[0] * 100:.1f}-{q[2] * 100:.1f}%, {len(shares)} pairs)"


def wasmtime_pairs(n: int, pairs: int) -> list[tuple[float, float]]:
    r = Reactor(REACTOR)
    assert r.call("ce_challenge_begin", SEED & 0xFFFFFFFF, SEED >> 32, n, pairs + 2) == 0
    gen = np.random.default_rng(1)
    a = r.put(gen.uniform(-1, 1, (n, n)).astype(np.float32))
    b = r.put(gen.uniform(-1, 1, (n, n)).astype(np.float32))
    c = r.put(np.zeros((n, n), np.float32))
    r.call("ce_challenge_next", 1)
    r.call("ce_sgemm", n, n, n, a, n, b, n, c, n)
    check_first_product(r, n)
    out = []
    for _ in range(pairs):
        t = time.perf_counter()
        r.call("ce_challenge_next", 1)
        product = time.perf_counter() - t
        t = time.perf_counter()
        r.call("ce_sgemm", n, n, n, a, n, b, n, c, n)
        out.append((product, time.perf_counter() - t))
    return out


def check_first_product(r: Reactor, n: int) -> None:
    """The capsule's root over its first product equals the Python reference's (the work timed is the real one)."""
    assert r.call("ce_challenge_commit", 1) == 0
    root = bytes(r.get(int(r.call("ce_challenge_root")), np.uint8, (32,)))
    rows = [bytes(r.get(int(r.call("ce_challenge_row", i)), np.uint8, (4 * n,))) for i in range(n)]
    if cpu_challenge.commitment_root([cpu_challenge.product_root(rows)]) != root:
        sys.exit("bench: the capsule's commitment differs from capsule/cpu_challenge.py")


class WasmHandler(http.server.SimpleHTTPRequestHandler):
    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map, ".wasm": "application/wasm"}

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass


def chromium_pairs(n: int, pairs: int) -> list[tuple[float, float]]:
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp)
        (site / "capsule-reactor.wasm").write_bytes(REACTOR.read_bytes())
        (site / "index.html").write_text("<!doctype html><title>commitment</title>")
        handler = functools.partial(WasmHandler, directory=str(site))
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=[
                    "--headless=new", "--no-sandbox", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync", "--no-first-run"])
                page = browser.new_page()
                page.goto(f"http://127.0.0.1:{server.server_address[1]}/index.html")
                result = page.evaluate(PAGE_JS, [n, pairs])
                browser.close()
        finally:
            server.shutdown()
    return [(float(a) / 1000, float(b) / 1000) for a, b in result]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=40)
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--no-browser", action="store_true")
    args = parser.parse_args()
    print(f"{cpu_model()}; {time.strftime('%Y-%m-%d')}; n = {args.n}; {args.pairs} pairs per engine")
    engines = [("wasmtime-py", wasmtime_pairs)] + ([] if args.no_browser else [("Chromium", chromium_pairs)])
    for name, run in engines:
        pairs = run(args.n, args.pairs)
        shares = [1 - s / p for p, s in pairs]
        product_ms = statistics.median(p for p, _ in pairs) * 1000
        sgemm_ms = statistics.median(s for _, s in pairs) * 1000
        print(f"{name:12s} product {product_ms:.1f} ms, sgemm alone {sgemm_ms:.1f} ms; commitment and inputs: "
              f"{summary(shares)}; target <= 5%")


if __name__ == "__main__":
    main()
