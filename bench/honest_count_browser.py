"""What an honest browser node counts at roll calls (issue 29): the join page, quiet, in each engine from Debian.

    .venv/bin/python bench/honest_count_browser.py [--roll-calls 50] [--engine chromium|webkit|firefox]
                                                   [--busy-roll-calls 30]

Method. One relay, as bench/honest_count.py runs it (a roll call every 10 s: beacon rounds every 1 s, target 1 s,
deadline 1.25 s). One tab opens the join page (`?heavy_budget_s=0.5`: the disk and GPU phases are skipped,
neither is judged here): headless Chromium through Playwright (/usr/bin/chromium), WebKitGTK's MiniBrowser
through WebKitWebDriver and Selenium under Xvfb, or headless Firefox ESR through puppeteer-core
(bench/firefox_stay.mjs), as tests/test_engines.py drives them. It presses Join and stays:
its own measurement is its claim, and it answers every roll call in its Web Workers. After each roll call (2.5 s
on, when the answer is judged) the relay's view of the node is read: the counted GFLOP/s if this roll call
counted it, else 0, over the claim the relay held at that moment (the page measures again by itself when three
roll calls in a row show below 0.8 or above 1.25x its claim: browser_node/claims.js). Prints the median, the 5th
percentile and the share of roll calls at >= 0.9 of the claim (the honest false-reject rate is the rest), how
many times the page measured again, and the node's challenges by outcome; the CPU model and the browser's
version with the figures. No same-run reference: the claim is the page's own figure.

Busy (--busy-roll-calls N, after the quiet ones): a busy loop per core (nice 0, as bench/honest_count.py) starts
and stays for N roll calls. Per roll call: counted over the claim the relay held then, so the roll calls before
the page measured again show what it still did against its quiet claim, and those after it against its own
figure under the same load (the reference: measured by the page in the same window). Prints how many counted 0,
the roll call at which the new claim arrived, and the share at >= 0.8 after it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from playwright.sync_api import sync_playwright  # noqa: E402

from bench.honest_count import (  # noqa: E402
    RELAY,
    after_each_roll_call,
    challenges_by_outcome,
    cpu_model,
    node_view,
    pct,
    spin,
)
from capsule.scaling import chosen_instances  # noqa: E402
from tests.relay_process import RelayProcess  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
WEBKIT_DRIVER = "/usr/bin/WebKitWebDriver"
MINIBROWSER = "/usr/lib/x86_64-linux-gnu/webkit2gtk-4.1/MiniBrowser"
FIREFOX = "/usr/bin/firefox-esr"
FLAGS = ["--headless=new", "--no-sandbox", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run"]
JOINED = "() => /joined|stopped|refused|unreachable|busy/.test(document.getElementById('status').textContent)"


@dataclass
class Tab:
    """A joined tab that stays on the page: its engine, its first profile and its claims line, when readable."""

    engine: str
    profile: dict[str, Any]
    claims_line: Callable[[], str]


@contextlib.contextmanager
def chromium_tab(url: str) -> Iterator[Tab]:
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = browser.new_page()
            page.goto(url + "/?heavy_budget_s=0.5")
            page.wait_for_function("() => !document.getElementById('join').disabled", timeout=60_000)
            page.click("#join")
            page.wait_for_function(JOINED, timeout=120_000)
            status = page.locator("#status").inner_text()
            if not status.startswith("joined"):
                raise SystemExit(f"the join did not succeed: {status}")
            yield Tab(f"Chromium {browser.version}", page.evaluate("() => window.ceProfile"),
                      lambda: str(page.locator("#claims").inner_text()))
        finally:
            browser.close()


@contextlib.contextmanager
def webkit_tab(url: str) -> Iterator[Tab]:
    from selenium import webdriver
    from selenium.webdriver.webkitgtk.options import Options
    from selenium.webdriver.webkitgtk.service import Service

    display = f":{90 + os.getpid() % 9}"
    xvfb = subprocess.Popen(["Xvfb", display, "-screen", "0", "1280x900x24", "-nolisten", "tcp"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(2)
        options = Options()
        options.binary_location = MINIBROWSER
        options.add_argument("--automation")
        driver = webdriver.WebKitGTK(options=options, service=Service(executable_path=WEBKIT_DRIVER,
                                                                      env={**os.environ, "DISPLAY": display}))
        try:
            driver.get(url + "/?heavy_budget_s=0.5")
            deadline = time.monotonic() + 60
            while not driver.find_element("id", "join").is_enabled():
                if time.monotonic() > deadline:
                    raise SystemExit("the Join button never became enabled")
                time.sleep(0.2)
            driver.find_element("id", "join").click()
            deadline = time.monotonic() + 150
            while not any(w in (status := driver.find_element("id", "status").text)
                          for w in ("joined", "stopped", "refused", "unreachable", "busy")):
                if time.monotonic() > deadline:
                    raise SystemExit(f"no join within 150 s: {status}")
                time.sleep(0.5)
            if not status.startswith("joined"):
                raise SystemExit(f"the join did not succeed: {status}")
            version = driver.capabilities.get("browserVersion", "?")
            yield Tab(f"WebKitGTK MiniBrowser {version}", driver.execute_script("return window.ceProfile"),
                      lambda: str(driver.find_element("id", "claims").text))
        finally:
            driver.quit()
    finally:
        xvfb.terminate()
        xvfb.wait(timeout=10)


@contextlib.contextmanager
def firefox_tab(url: str, stay_s: float) -> Iterator[Tab]:
    from tests.test_engines import puppeteer_modules

    modules = puppeteer_modules()
    node = shutil.which("node")
    if node is None:
        raise SystemExit("node is needed to drive Firefox with puppeteer-core")
    version = subprocess.run([FIREFOX, "--version"], capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory() as home:
        proc = subprocess.Popen([node, str(ROOT / "bench" / "firefox_stay.mjs"), url, FIREFOX, str(stay_s)],
                                stdout=subprocess.PIPE, text=True,
                                env={**os.environ, "NODE_PATH": str(modules), "HOME": home})
        try:
            assert proc.stdout is not None
            outcome = json.loads(proc.stdout.readline() or "{}")
            if not str(outcome.get("status", "")).startswith("joined"):
                raise SystemExit(f"the join did not succeed: {outcome.get('status')}")
            yield Tab(version, outcome["profile"], lambda: "(not read: the tab is driven from node)")
        finally:
            proc.kill()
            proc.wait(timeout=10)


def counted_over_claim(relay: RelayProcess, node_id: str, count: int) -> list[float]:
    """counted / the claim held then (the page may have measured again), for the next `count` roll calls."""
    return [counted / float(view["profile"]["cpu"]["gflops_fp32"])
            for counted, view, _ in after_each_roll_call(relay, node_id, count)]


def history(relay: RelayProcess, node_id: str) -> list[dict[str, Any]]:
    """The node's history events as the relay keeps them (profiles and challenges, oldest first)."""
    with urllib.request.urlopen(f"{relay.url}/v1/nodes/{node_id}/history?limit=500", timeout=30) as r:
        return list(json.loads(r.read())["events"])


def observed(events: list[dict[str, Any]], since: float) -> list[tuple[float, float]]:
    """(when, GFLOP/s) of the node's passed roll-call SGEMM answers since `since` (unix s): the work over the
    time to its commitment on the relay's clock, before any allowance or cap (web/proof/challenges.py)."""
    return [(e["at"], float(e["observed_gflops"])) for e in events if e.get("event") == "challenge"
            and e.get("roll_call") and e.get("kind") == "sgemm" and e.get("passed") and e["at"] >= since
            and e.get("observed_gflops")]


def profile_times(events: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """(when, claimed GFLOP/s) of each profile the relay holds for the node, in order."""
    return [(e["at"], float(e["cpu_gflops"])) for e in events if e.get("event") == "profile"]


def busy_roll_calls(relay: RelayProcess, node_id: str, count: int) -> None:
    """The busy part: a busy loop per core for `count` roll calls; counted over the claim held at each, and
    what the answers did (observed GFLOP/s) beside the new claim: a claim below what the answers do caps what
    is counted (the relay counts min(claim, shown))."""

    spinners = [multiprocessing.Process(target=spin, daemon=True) for _ in range(os.cpu_count() or 1)]
    for s in spinners:
        s.start()
    try:
        busy_from = time.time()
        rows = [(counted, float(view["profile"]["cpu"]["gflops_fp32"]))
                for counted, view, _ in after_each_roll_call(relay, node_id, count)]
    finally:
        for s in spinners:
            s.terminate()
    if not rows:
        raise SystemExit("no busy roll call was seen")

    first_claim = rows[0][1]
    changed = next((i for i, (_, claim) in enumerate(rows) if claim != first_claim), None)
    before = [c / claim for c, claim in (rows if changed is None else rows[:changed])]
    after = [] if changed is None else [c / claim for c, claim in rows[changed:]]
    print(f"busy (a busy loop per core) over {len(rows)} roll calls: counted 0 at {sum(c == 0 for c, _ in rows)}; "
          f"counted / quiet claim {first_claim:.1f} before the page measured again: "
          f"{[round(r, 2) for r in before]}", flush=True)
    if changed is None:
        print("busy: the page did not measure again", flush=True)
    else:
        print(f"busy: the new claim {rows[changed][1]:.1f} GFLOP/s held from roll call {changed + 1}; counted / it "
              f"over {len(after)} roll calls: median {statistics.median(after):.3f}, min {min(after):.3f}; at >= 0.8: "
              f"{sum(r >= 0.8 for r in after)}/{len(after)}", flush=True)
        # all beside the same busy loops: before the new claim on the quiet claim's workers, after it on the new
        # claim's; the new claim against what its own answers did says whether it claims what the device does
        events = history(relay, node_id)
        claimed_at = profile_times(events)[1][0]  # the first measurement again (rows[changed])
        answers = observed(events, busy_from)
        earlier = [g for t, g in answers if t < claimed_at]
        later = [g for t, g in answers if t > claimed_at]
        if earlier and later:
            done = statistics.median(later)
            print(f"busy: observed at the roll calls (GFLOP/s, the same load), median before the new claim "
                  f"{statistics.median(earlier):.1f} (n={len(earlier)}), after it {done:.1f} (n={len(later)}); "
                  f"new claim / observed after it: {rows[changed][1] / done:.3f}; counted / observed after it "
                  f"(medians): {statistics.median(c for c, _ in rows[changed:]) / done:.3f}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--roll-calls", type=int, default=50)
    parser.add_argument("--engine", choices=("chromium", "webkit", "firefox"), default="chromium")
    parser.add_argument("--busy-roll-calls", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        relay = RelayProcess(Path(tmp) / "relay", *RELAY).start()
        tabs = {"chromium": lambda: chromium_tab(relay.url), "webkit": lambda: webkit_tab(relay.url),
                "firefox": lambda: firefox_tab(relay.url, (args.roll_calls + args.busy_roll_calls) * 20 + 120)}
        try:
            with tabs[args.engine]() as tab:
                print(f"{cpu_model()}, {os.cpu_count()} CPUs; {tab.engine}; {time.strftime('%Y-%m-%d')}", flush=True)
                node_id, first = tab.profile["node_id"], float(tab.profile["cpu"]["gflops_fp32"])
                cores = tab.profile["cpu"]["cores"]
                time.sleep(10)  # hello, first solo challenges
                ratios = counted_over_claim(relay, node_id, args.roll_calls)
                if not ratios:
                    raise SystemExit("no roll call was seen")
                print(f"quiet: first claim {first:.1f} GFLOP/s on {cores} worker(s); counted / claim over "
                      f"{len(ratios)} roll calls: median {statistics.median(ratios):.3f}, 5th percentile "
                      f"{pct(ratios, 0.05):.3f}, min {min(ratios):.3f}; at >= 0.9: {sum(r >= 0.9 for r in ratios)}/"
                      f"{len(ratios)} (false-reject rate {sum(r < 0.9 for r in ratios) / len(ratios):.3f}); counted 0 "
                      f"at {sum(r == 0 for r in ratios)}", flush=True)
                if args.busy_roll_calls:
                    busy_roll_calls(relay, node_id, args.busy_roll_calls)
                    # the instance search behind each claim: (instances, GFLOP/s) as the page measured them
                    for when, prof in (("quiet", tab.profile), ("latest", node_view(relay, node_id)["profile"])):
                        curve = [(p["instances"], p["gflops_fp32"]) for p in prof["evidence"]["cpu"]["scaling"]]
                        kept = prof["evidence"]["cpu"].get("instances_kept")
                        alone = (f"; the search alone: {chosen_instances(curve)}, the answers used "
                                 f"{kept['answers_used']}") if kept else ""
                        print(f"instance search ({when} claim, {prof['cpu']['cores']} chosen{alone}): {curve}",
                              flush=True)
                events = history(relay, node_id)
                claims = [round(claim, 1) for _, claim in profile_times(events)]
                codes = challenges_by_outcome(events)
                print(f"claims registered, in order: {claims} (measured again {len(claims) - 1} time(s)); the page "
                      f"says: {tab.claims_line()!r}; challenges by outcome: {codes}; trust at the end: "
                      f"{node_view(relay, node_id)['trust']['status']}", flush=True)
        finally:
            relay.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
