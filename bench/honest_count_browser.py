"""What an honest browser node counts at roll calls (issue 29): the join page in Debian Chromium, quiet.

    .venv/bin/python bench/honest_count_browser.py [--roll-calls 50]

Method. One relay, as bench/honest_count.py runs it (a roll call every 10 s: beacon rounds every 1 s, target 1 s,
deadline 1.25 s). One tab of headless Chromium (Playwright, /usr/bin/chromium) opens the join page
(`?heavy_budget_s=0.5`: the disk and GPU phases are skipped, neither is judged here), presses Join and stays:
its own measurement is its claim, and it answers every roll call in its Web Workers. After each roll call (2.5 s
on, when the answer is judged) the relay's view of the node is read: the counted GFLOP/s if this roll call
counted it, else 0, over the claim the relay held at that moment (the page measures again by itself when three
roll calls in a row show below 0.8 or above 1.25x its claim: browser_node/claims.js). Prints the median, the 5th
percentile and the share of roll calls at >= 0.9 of the claim (the honest false-reject rate is the rest), how
many times the page measured again, and the node's challenges by outcome; the CPU model and the browser's
version with the figures. No same-run reference: the claim is the page's own figure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from playwright.sync_api import sync_playwright  # noqa: E402

from bench.honest_count import RELAY, cpu_model, node_view, pct, roll_call_ids  # noqa: E402
from tests.relay_process import RelayProcess  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless=new", "--no-sandbox", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run"]
JOINED = "() => /joined|stopped|refused|unreachable|busy/.test(document.getElementById('status').textContent)"


def counted_over_claim(relay: RelayProcess, node_id: str, count: int) -> list[float]:
    """counted / the claim held then, for the next `count` roll calls (0 where one did not count the node)."""
    seen = set(roll_call_ids(relay))
    out: list[float] = []
    deadline = time.monotonic() + count * 20 + 60
    while len(out) < count and time.monotonic() < deadline:
        time.sleep(0.5)
        fresh = [c for c in roll_call_ids(relay) if c not in seen]
        if not fresh:
            continue
        seen.update(fresh)
        time.sleep(2.5)  # the answer is in (deadline 1.25 s, opening and check)
        view = node_view(relay, node_id)
        counted, claim = view["trust"]["counted"], float(view["profile"]["cpu"]["gflops_fp32"])
        out.append(float(counted["cpu_gflops"]) / claim if counted.get("roll_call") == fresh[0] else 0.0)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--roll-calls", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as pw:
        relay = RelayProcess(Path(tmp) / "relay", *RELAY).start()
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            print(f"{cpu_model()}, {os.cpu_count()} CPUs; Chromium {browser.version}; {time.strftime('%Y-%m-%d')}",
                  flush=True)
            page = browser.new_page()
            page.goto(relay.url + "/?heavy_budget_s=0.5")
            page.wait_for_function("() => !document.getElementById('join').disabled", timeout=60_000)
            page.click("#join")
            page.wait_for_function(JOINED, timeout=120_000)
            status = page.locator("#status").inner_text()
            if not status.startswith("joined"):
                raise SystemExit(f"the join did not succeed: {status}")
            node_id = page.evaluate("() => window.ceProfile.node_id")
            first = page.evaluate("() => window.ceProfile.cpu.gflops_fp32")
            cores = page.evaluate("() => window.ceProfile.cpu.cores")
            time.sleep(10)  # hello, first solo challenges
            ratios = counted_over_claim(relay, node_id, args.roll_calls)
            if not ratios:
                raise SystemExit("no roll call was seen")
            print(f"quiet: first claim {first:.1f} GFLOP/s on {cores} worker(s); counted / claim over {len(ratios)} "
                  f"roll calls: median {statistics.median(ratios):.3f}, 5th percentile {pct(ratios, 0.05):.3f}, min "
                  f"{min(ratios):.3f}; at >= 0.9: {sum(r >= 0.9 for r in ratios)}/{len(ratios)} (false-reject rate "
                  f"{sum(r < 0.9 for r in ratios) / len(ratios):.3f}); counted 0 at {sum(r == 0 for r in ratios)}",
                  flush=True)
            with urllib.request.urlopen(f"{relay.url}/v1/nodes/{node_id}/history?limit=500", timeout=30) as r:
                events = json.loads(r.read())["events"]
            claims = [round(float(e["cpu_gflops"]), 1) for e in events if e.get("event") == "profile"]
            codes: dict[str, int] = {}
            for e in events:
                if e.get("event") == "challenge":
                    what = f"{'roll call' if e.get('roll_call') else 'solo'} {e.get('kind')}: {e.get('code')}"
                    codes[what] = codes.get(what, 0) + 1
            print(f"claims registered, in order: {claims} (measured again {len(claims) - 1} time(s)); the page says: "
                  f"{page.locator('#claims').inner_text()!r}; challenges by outcome: {codes}; trust at the end: "
                  f"{node_view(relay, node_id)['trust']['status']}", flush=True)
        finally:
            browser.close()
            relay.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
