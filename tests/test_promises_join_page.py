"""README promises of the join page that had no test (issue 17), in real Chromium against the real relay:

- an unreachable relay: the signed profile is kept in localStorage and delivered at the next visit (the relay
  process is really stopped during the run, and started again);
- the throttling flag: a sharp throughput drop during the whole-CPU run is said in evidence.cpu_notes (the
  drop is caused for real: the page's renderer is held to a tenth of the CPU from outside, as a CPU quota
  would, from a moment inside the run);
- heavy work stops when the tab is hidden: a real hidden tab (another tab of the same window brought to
  the front) during the run; the run stops, nothing is posted, the renderer's CPU use falls to idle; and a
  joined tab, hidden, opts out of the relay's challenges (none is sent, none answered) until shown again.

Playwright keeps every page it drives visible (its focus emulation holds the page as if captured), so the
hidden-tab tests drive Chromium over the DevTools protocol themselves (class DevTools below).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from playwright.sync_api import Browser
from websockets.sync.client import ClientConnection, connect

from capsule.peerid import peer_id_from_public_key
from capsule.plan import CPU_PROBES, plan_from_beacon
from tests.browsers import CHROMIUM, FLAGS, JOIN_DONE
from tests.conftest import Artifacts
from tests.relay_process import RelayProcess

READY = "() => !document.getElementById('join').disabled"
THROTTLE_NOTE = "throughput dropped sharply during the run (thermal throttling?)"


@pytest.fixture(scope="session")
def browser_type_launch_args() -> dict[str, Any]:
    return {"executable_path": CHROMIUM, "args": FLAGS}


def status_of(page: Any) -> str:
    return str(page.locator("#status").inner_text())


def test_profile_kept_while_the_relay_was_unreachable_is_delivered_at_the_next_visit(
        browser: Browser, tmp_path: Path, artifacts: Artifacts) -> None:
    relay = RelayProcess(tmp_path / "relay").start()
    context = browser.new_context()
    try:
        page = context.new_page()
        # heavy_budget_s=0.5: the disk and GPU phases are skipped, so nothing is fetched after the CPU phase (its
        # instance search starts workers, which load their script from the relay)
        page.goto(relay.url + "/?heavy_budget_s=0.5")
        page.wait_for_function(READY, timeout=60_000)
        page.click("#join")
        page.wait_for_selector("#ph-solo.running", timeout=90_000)
        relay.kill9()  # the relay goes away while the page measures (~2 s of the solo phase are left)
        page.wait_for_function(JOIN_DONE, timeout=120_000)
        text = status_of(page)
        assert "the relay is unreachable" in text and "the signed profile is kept" in text, text
        profile = page.evaluate("() => window.ceProfile")
        kept = page.evaluate("() => JSON.parse(localStorage.getItem('ce-bench-outbox'))")
        assert kept == profile and kept["sig"], kept
        page.close()

        relay.start()  # same port and data: the beacon round the profile cites is still honoured
        assert relay.get(f"/v1/nodes/{kept['node_id']}")[0] == 404
        page = context.new_page()  # the next visit
        page.goto(relay.url + "/")
        page.wait_for_function("() => /delivered/.test(document.getElementById('status').textContent)",
                               timeout=30_000)
        assert status_of(page) == "a profile kept from an earlier visit was delivered"
        status, node, _ = relay.get(f"/v1/nodes/{kept['node_id']}")
        assert status == 200 and node["profile"] == kept
        assert page.evaluate("() => localStorage.getItem('ce-bench-outbox')") is None
        page.reload()  # delivered once: a later visit has nothing to resend
        page.wait_for_function(READY, timeout=60_000)
        assert status_of(page).startswith("Ready")
    finally:
        context.close()
        relay.stop()


def drops(samples: list[float]) -> bool:
    """The README's "sharp throughput drop": the median of the last 3 samples below 0.6x that of the first 3
    (of at least 8), as browser_node/join.js judges each whole-CPU instance's SGEMM samples."""
    if len(samples) < 8:
        return False

    def med(xs: list[float]) -> float:
        return sorted(xs)[len(xs) // 2]

    return med(samples[-3:]) < 0.6 * med(samples[:3])


def renderer_pids() -> list[int]:
    """The Chromium renderers this test process started (through Playwright's driver)."""
    pids = []
    for child in psutil.Process(os.getpid()).children(recursive=True):
        try:  # a child may exit (or be an unreaped zombie) between the listing and the read of its command line
            cmdline = child.cmdline()
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
        if "--type=renderer" in " ".join(cmdline):
            pids.append(child.pid)
    return pids


# A CPU quota held from outside (as cgroup cpu.max or a deep thermal throttle would): once told (a line on
# stdin), after DELAY s, for DURATION s, the processes run RUN ms of every RUN + STOP (SIGSTOP/SIGCONT; a
# product takes 5-20 ms here); always continued at the end. A process of its own, so its timing owes nothing to
# this one's. Arguments: DELAY DURATION RUN_MS STOP_MS PID...
THROTTLER = """
import os, signal, sys, time
delay, duration, pids = float(sys.argv[1]), float(sys.argv[2]), [int(p) for p in sys.argv[5:]]
run_s, stop_s = float(sys.argv[3]) / 1000, float(sys.argv[4]) / 1000
def send(sig):
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
try:  # wake on time even while the page's workers fill every core (root may; otherwise best effort)
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
except PermissionError:
    pass
print("ready", flush=True)
if not sys.stdin.readline():  # closed without a word: nothing to do
    sys.exit(0)
time.sleep(delay)
end = time.monotonic() + duration
try:
    while time.monotonic() < end:
        send(signal.SIGSTOP)
        time.sleep(stop_s)
        send(signal.SIGCONT)
        time.sleep(run_s)
finally:
    send(signal.SIGCONT)
print("done", flush=True)
"""


# Instrumentation only: tells the test when the page starts its whole-CPU run (the run the flag judges)
# and in which probe order; the message goes on to the worker unchanged.
WATCH_WHOLE_RUN = """(() => {
  const post = Worker.prototype.postMessage;
  let told = false;
  Worker.prototype.postMessage = function (m, ...rest) {
    if (!told && m && m.cmd === "run" && Array.isArray(m.args) && m.args.includes("--stream-triad-only")) {
      told = true;
      window.ceWholeRunStarted(m.args[m.args.indexOf("--probes") + 1]);
    }
    return post.call(this, m, ...rest);
  };
})();"""


@pytest.mark.alone  # judged on measured throughput (tests/scheduling.py)
def test_a_sharp_throughput_drop_is_flagged(browser: Browser, tmp_path: Path, artifacts: Artifacts) -> None:
    """The page's whole-CPU run takes up to 40 SGEMM samples of 5-20 ms each here (then STREAM); 0.15 s into
    it (after at least 3 samples, before the last 3) the renderer is held to a tenth of the CPU. The later
    samples fall to a fraction, and the profile says so. The beacon is fixed for the test (--beacon-interval
    3600) so the probe order is known before Join: a key whose order runs SGEMM first is used (the drop must
    land inside the SGEMM samples)."""
    with RelayProcess(tmp_path / "relay", "--beacon-interval", "3600") as relay:
        _, beacon, _ = relay.get("/beacon")
        for _attempt in range(12):  # each new context is a new key, and a new probe order
            context = browser.new_context()
            page = context.new_page()
            page.goto(relay.url + "/?heavy_budget_s=0.5")  # no disk or GPU phase: not judged here
            page.wait_for_function(READY, timeout=60_000)
            public = page.evaluate("async () => [...(await (await import('/keys.js')).nodeKey()).publicKey]")
            order = plan_from_beacon(beacon["value"], peer_id_from_public_key(bytes(public)), CPU_PROBES).order
            if order.index("sgemm") < order.index("stream"):
                break
            context.close()
        else:
            raise AssertionError("no key in 12 ran SGEMM first")
        started: list[str] = []
        throttler: subprocess.Popen[str] | None = None

        def whole_run_started(probes: str) -> None:
            started.append(probes)
            assert throttler is not None and throttler.stdin is not None
            throttler.stdin.write("go\n")
            throttler.stdin.flush()

        try:
            context.expose_function("ceWholeRunStarted", whole_run_started)
            context.add_init_script(WATCH_WHOLE_RUN)
            page.reload()
            page.wait_for_function(READY, timeout=60_000)
            throttler = subprocess.Popen([sys.executable, "-c", THROTTLER, "0.15", "4.0", "1", "9",
                                          *map(str, renderer_pids())],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            assert throttler.stdout is not None and throttler.stdout.readline() == "ready\n"
            page.click("#join")
            page.wait_for_function(JOIN_DONE, timeout=120_000)
            assert throttler.wait(timeout=30) == 0
            assert status_of(page).startswith("joined"), status_of(page)
            assert started == ["sgemm,stream"], started
            profile = page.evaluate("() => window.ceProfile")
            samples = [r["probes"]["sgemm"]["samples"] for r in page.evaluate("() => window.ceReports.concurrent")]
            assert any(drops(s) for s in samples), ("the injected throttle did not show in the samples", samples)
            assert THROTTLE_NOTE in profile["evidence"]["cpu_notes"], (profile["evidence"]["cpu_notes"], samples)
            assert relay.get(f"/v1/nodes/{profile['node_id']}")[1]["profile"] == profile  # accepted as measured
        finally:
            if throttler is not None and throttler.stdin is not None:
                throttler.stdin.close()  # an unused throttler exits; a running one finishes its few seconds
                throttler.wait(timeout=30)
            context.close()


@pytest.mark.alone  # judged on measured throughput (tests/scheduling.py)
def test_an_unthrottled_run_is_not_flagged(browser: Browser, tmp_path: Path, artifacts: Artifacts) -> None:
    """The flag's other side, on the same machine: a run left alone is flagged only if its own samples drop
    by the README's rule (so noise cannot make the flag a constant)."""
    with RelayProcess(tmp_path / "relay") as relay:
        context = browser.new_context()
        try:
            page = context.new_page()
            page.goto(relay.url + "/?heavy_budget_s=0.5")
            page.wait_for_function(READY, timeout=60_000)
            page.click("#join")
            page.wait_for_function(JOIN_DONE, timeout=120_000)
            assert status_of(page).startswith("joined"), status_of(page)
            profile = page.evaluate("() => window.ceProfile")
            samples = [r["probes"]["sgemm"]["samples"] for r in page.evaluate("() => window.ceReports.concurrent")]
            assert (THROTTLE_NOTE in profile["evidence"]["cpu_notes"]) == any(drops(s) for s in samples), samples
        finally:
            context.close()


class DevTools:
    """Chromium driven over the DevTools protocol (flat sessions), without Playwright."""

    def __init__(self, tmp_path: Path) -> None:
        self.log = tmp_path / "chromium.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen([CHROMIUM, *FLAGS, "--remote-debugging-port=0",
                                          f"--user-data-dir={tmp_path / 'profile'}", "about:blank"],
                                         stdout=out, stderr=out)
        deadline = time.monotonic() + 30
        while "DevTools listening on " not in self.log.read_text(errors="replace"):
            assert time.monotonic() < deadline and self.proc.poll() is None, self.log.read_text(errors="replace")
            time.sleep(0.1)
        url = self.log.read_text(errors="replace").split("DevTools listening on ")[1].split()[0]
        self.ws: ClientConnection = connect(url, max_size=2**26).__enter__()
        self.next_id = 0
        self.events: list[dict[str, Any]] = []  # every event received so far, in order

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> Any:
        self.next_id += 1
        message: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        self.ws.send(json.dumps(message))
        while True:
            reply = json.loads(self.ws.recv(timeout=60))
            if "method" in reply:
                self.events.append(reply)
            elif reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]

    def attach(self, target_id: str) -> str:
        return str(self.send("Target.attachToTarget", {"targetId": target_id, "flatten": True})["sessionId"])

    def evaluate(self, session: str, expression: str) -> Any:
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": True}, session)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, session: str, expression: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not self.evaluate(session, expression):
            assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {expression}"
            time.sleep(0.2)

    def click(self, session: str, selector: str) -> None:
        """A real mouse click at the element's centre."""
        x, y = self.evaluate(session, f"""(() => {{ const r = document.querySelector("{selector}")
            .getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; }})()""")
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1},
                      session)

    def frames_received(self, session: str, since: int = 0, kind: str = "Received") -> list[dict[str, Any]]:
        """The WebSocket text messages the page received (or "Sent"), seen with Network.enable on its session, from
        event index since (the events that arrived meanwhile are read first)."""
        self.evaluate(session, "0")
        return [json.loads(e["params"]["response"]["payloadData"]) for e in self.events[since:]
                if e["method"] == f"Network.webSocketFrame{kind}" and e.get("sessionId") == session
                and e["params"]["response"]["opcode"] == 1]

    def renderer_cpu_s(self) -> float:
        infos = self.send("SystemInfo.getProcessInfo")["processInfo"]
        return float(sum(p["cpuTime"] for p in infos if p["type"] == "renderer"))

    def close(self) -> None:
        self.ws.close()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture
def devtools(tmp_path: Path) -> Iterator[DevTools]:
    d = DevTools(tmp_path)
    try:
        yield d
    finally:
        d.close()


STATUS = "document.getElementById('status').textContent"


@pytest.mark.alone  # the renderer's CPU use is measured (tests/scheduling.py)
def test_heavy_work_stops_when_the_tab_is_hidden(devtools: DevTools, tmp_path: Path, artifacts: Artifacts) -> None:
    """Join, then, while the page measures, another tab of the same window is opened in front: the join tab is
    really hidden (document.visibilityState, no override). The run stops with the reason and posts nothing,
    no later phase starts, and the renderer's CPU use falls from the workers' full load to idle."""
    with RelayProcess(tmp_path / "relay") as relay:
        [tab] = [t for t in devtools.send("Target.getTargets")["targetInfos"] if t["type"] == "page"]
        join_tab = devtools.attach(tab["targetId"])
        devtools.send("Page.navigate", {"url": relay.url + "/"}, join_tab)
        devtools.wait_for(join_tab, "document.getElementById('join') && !document.getElementById('join').disabled",
                          60)
        devtools.click(join_tab, "#join")
        devtools.wait_for(join_tab, "!!document.querySelector('#ph-cpu.running')", 60)
        busy_from = devtools.renderer_cpu_s()
        time.sleep(2.0)
        busy = (devtools.renderer_cpu_s() - busy_from) / 2.0  # the probe workers at work, in cores
        assert devtools.evaluate(join_tab, "document.visibilityState") == "visible"

        devtools.send("Target.createTarget", {"url": "about:blank", "newWindow": False})  # in front
        hidden_at = time.monotonic()
        assert devtools.evaluate(join_tab, "document.visibilityState") == "hidden"
        devtools.wait_for(join_tab, f"/stopped|joined|refused|unreachable/.test({STATUS})", 90)
        stopped_after = time.monotonic() - hidden_at
        status = devtools.evaluate(join_tab, STATUS)
        assert status.startswith("stopped: the tab was hidden during the measurement"), status
        phases = devtools.evaluate(join_tab, "[...document.querySelectorAll('.phase')].map((e) => e.className)")
        assert phases[1] == "phase failed" and all(c == "phase" for c in phases[2:]), phases  # nothing after CPU
        idle_from = devtools.renderer_cpu_s()
        time.sleep(2.0)
        idle = (devtools.renderer_cpu_s() - idle_from) / 2.0
        print(f"hidden -> stopped in {stopped_after:.1f} s; renderer CPU {busy:.2f} -> {idle:.2f} cores")
        assert busy > 0.25, busy  # the workers' load while measuring (so the comparison means something)
        assert idle < 0.25 * busy, (idle, busy)  # a run left going keeps its workers busy
        assert relay.get("/atlas")[1]["nodes"] == []
        assert devtools.evaluate(join_tab, "window.ceProfile === undefined")


@pytest.mark.alone  # challenge answers within deadlines (tests/scheduling.py)
def test_a_hidden_tab_answers_no_challenges_and_answers_again_when_shown(devtools: DevTools, tmp_path: Path,
                                                                          artifacts: Artifacts) -> None:
    """After a join, the relay challenges the tab every second (fast options) and the tab answers in its
    workers. Another tab brought to the front hides it for real: it says so to the relay (hello without
    answers), no challenge is answered or failed any more, and its renderer idles; shown again, it answers
    again."""
    # pings every second: the 5 s window below must see the relay's pings (at the default 10 s it saw none in
    # about half the runs: fresh-clone run #33)
    fast = ["--challenge-first-after", "1", "--challenge-interval-unverified", "1", "--heartbeat-interval", "1"]
    with RelayProcess(tmp_path / "relay", *fast) as relay:
        [tab] = [t for t in devtools.send("Target.getTargets")["targetInfos"] if t["type"] == "page"]
        join_tab = devtools.attach(tab["targetId"])
        devtools.send("Network.enable", {}, join_tab)  # to see the live session's frames
        devtools.send("Page.navigate", {"url": relay.url + "/?heavy_budget_s=0.5"}, join_tab)
        devtools.wait_for(join_tab, "document.getElementById('join') && !document.getElementById('join').disabled",
                          60)
        devtools.click(join_tab, "#join")
        devtools.wait_for(join_tab, f"/stopped|joined|refused|unreachable/.test({STATUS})", 120)
        assert devtools.evaluate(join_tab, STATUS).startswith("joined"), devtools.evaluate(join_tab, STATUS)
        node_id = devtools.evaluate(join_tab, "window.ceProfile.node_id")

        def judged() -> int:
            challenges = relay.get(f"/v1/nodes/{node_id}")[1]["trust"]["challenges"]
            return int(challenges["passed"] + challenges["failed"])

        def wait_judged(more_than: int, timeout: float) -> None:
            deadline = time.monotonic() + timeout
            while judged() <= more_than:
                assert time.monotonic() < deadline, f"no challenge judged beyond {more_than} in {timeout} s"
                time.sleep(0.3)

        deadline = time.monotonic() + 60
        while not any(m["type"] == "challenge_result" for m in devtools.frames_received(join_tab)):
            assert time.monotonic() < deadline, "no challenge judged within 60 s"
            time.sleep(0.05)
        assert judged() >= 1  # answered while visible
        # hidden right after the first challenge was judged, while the node is not verified yet (the relay
        # challenges unverified nodes every second)
        hidden_from = len(devtools.events)
        other = devtools.send("Target.createTarget", {"url": "about:blank", "newWindow": False})["targetId"]
        assert devtools.evaluate(join_tab, "document.visibilityState") == "hidden"
        deadline = time.monotonic() + 10  # through the page's handler and the network service: waited for
        # (the page is cross-origin isolated: it also says it can stop withdrawn work, web/proof/challenges.py)
        opted_out = {"type": "hello", "answers": [], "withdrawable": True}
        while opted_out not in (said := devtools.frames_received(join_tab, hidden_from, "Sent")):
            assert time.monotonic() < deadline, said  # the tab opts out (web/proof/challenges.py protocol)
            time.sleep(0.1)
        time.sleep(3)  # a challenge already answered when the tab was hidden is judged (one that arrived after is
        # ignored: late, in 20 s)
        devtools.frames_received(join_tab)  # read what came so far
        before, cpu_from, since = judged(), devtools.renderer_cpu_s(), len(devtools.events)
        time.sleep(5)  # five challenge intervals
        idle = (devtools.renderer_cpu_s() - cpu_from) / 5
        received = devtools.frames_received(join_tab, since)
        assert [m for m in received if m["type"] == "challenge"] == []  # the relay asks a hidden tab for nothing
        # while the session goes on: the relay's pings, answered (pongs keep the session live)
        assert any(m["type"] == "ping" for m in received), received
        assert any(m["type"] == "pong" for m in devtools.frames_received(join_tab, since, "Sent"))
        assert judged() == before, (before, judged())
        assert idle < 0.1, idle  # no work in the background (a challenge keeps a worker busy for ~0.5 s)
        trust = relay.get(f"/v1/nodes/{node_id}")[1]["trust"]
        assert trust["challenges"]["failed"] == 0, trust  # opted out: not failed for not answering

        shown_from = len(devtools.events)
        devtools.send("Target.activateTarget", {"targetId": tab["targetId"]})  # shown again
        devtools.send("Target.closeTarget", {"targetId": other})
        assert devtools.evaluate(join_tab, "document.visibilityState") == "visible"
        assert {"type": "hello", "answers": ["sgemm", "llm-rank"], "withdrawable": True} in devtools.frames_received(
            join_tab, shown_from, "Sent")
        wait_judged(before, 30)
