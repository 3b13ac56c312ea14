"""The relay's event loop under a flood of big junk frames on WS /v1/live (issue 28, attack 6), beside the same
relay unflooded.

    .venv/bin/python bench/relay_flood.py [--clients 8] [--seconds 20] [--sizes 2096128,1500000]

Method: one relay process (default config). Reference: for --seconds, a probe thread times GET /beacon every
50 ms (the relay's answer time: its event loop's lag plus ~1 ms of work). Then the same while --clients
flooding clients (tests/flooder.py, one process, each client on its own loopback address) send junk JSON
frames of --sizes back to back, reconnecting whenever the relay closes or refuses them. Printed: the probe's
p50 / p99 / max in ms for both, the relay's own loop-lag figures from /metrics where it serves them
(ce_relay_loop_lag_*), the relay's CPU seconds, and the flooders' counts (frames sent, closes by code,
refusals). The flooders share the 2 cores with the relay: figures are upper bounds for the relay alone.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.relay_load import pct  # noqa: E402
from bench.relay_sessions import cpu_s  # noqa: E402
from tests.relay_process import RelayProcess  # noqa: E402


def probe(url: str, stop: threading.Event, out: list[float]) -> None:
    while not stop.is_set():
        t0 = time.perf_counter()
        try:
            urllib.request.urlopen(url + "/beacon", timeout=30).read()
            out.append(time.perf_counter() - t0)
        except OSError:
            out.append(float("inf"))
        stop.wait(0.05)


def lag_metrics(url: str) -> dict[str, float]:
    text = urllib.request.urlopen(url + "/metrics", timeout=30).read().decode()
    return {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
            if line.startswith("ce_relay_loop_lag") and "_bucket" not in line}


def phase(relay: RelayProcess, seconds: float, flood: list[str] | None) -> dict[str, object]:
    times: list[float] = []
    stop = threading.Event()
    thread = threading.Thread(target=probe, args=(relay.url, stop, times), daemon=True)
    cpu0 = cpu_s(relay.proc.pid) if relay.proc else 0.0
    thread.start()
    counts: dict[str, object] = {}
    if flood is None:
        time.sleep(seconds)
    else:
        out = subprocess.run(flood, capture_output=True, text=True, timeout=seconds + 60, cwd=ROOT)
        lines = out.stdout.strip().splitlines()
        counts = json.loads(lines[-1]) if lines else {"stderr": out.stderr[-300:]}
    stop.set()
    thread.join()
    ms = sorted(t * 1000 for t in times)
    return {"probe_ms": {"n": len(ms), "p50": round(pct(ms, 0.5), 1), "p99": round(pct(ms, 0.99), 1),
                         "max": round(ms[-1], 1)},
            "relay_cpu_s": round((cpu_s(relay.proc.pid) if relay.proc else 0.0) - cpu0, 1),
            "relay_lag": lag_metrics(relay.url), "flooders": counts}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--sizes", default=f"{2 * 1024 * 1024 - 1024},1500000")
    args, extra = parser.parse_known_args()  # anything else goes to `ce-bench relay`
    with tempfile.TemporaryDirectory() as tmp, RelayProcess(Path(tmp) / "relay", *extra) as relay:
        ws_url = relay.url.replace("http://", "ws://") + "/v1/live"
        reference = phase(relay, args.seconds, None)
        flooded = phase(relay, args.seconds, [sys.executable, "-m", "tests.flooder", ws_url, "--clients",
                                              str(args.clients), "--seconds", str(args.seconds), "--sizes", args.sizes])
    print(json.dumps({"clients": args.clients, "seconds": args.seconds, "sizes": args.sizes, "cpus": os.cpu_count(),
                      "reference": reference, "flooded": flooded}, indent=1))


if __name__ == "__main__":
    main()
