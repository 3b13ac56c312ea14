"""The join journey in the engines phones run besides Chromium, from Debian packages: WebKitGTK (every iOS
browser is WebKit) through WebKitWebDriver + Selenium under a real Xvfb display, and Firefox ESR through
puppeteer-core over WebDriver BiDi (tests/firefox_join.mjs). Each must end with a profile the relay
accepted; what the engine cannot measure must be null with its reason, never a wrong figure."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, Artifacts
from tests.relay_process import RelayProcess

WEBKIT_DRIVER = "/usr/bin/WebKitWebDriver"
MINIBROWSER = "/usr/lib/x86_64-linux-gnu/webkit2gtk-4.1/MiniBrowser"
FIREFOX = "/usr/bin/firefox-esr"
ARTIFACTS = ROOT / "test-artifacts"
PUPPETEER_VERSION = "24.43.1"  # puppeteer-core from npm, pinned (it downloads no browser: PUPPETEER_SKIP_DOWNLOAD)


@pytest.fixture(scope="module")
def relay(tmp_path_factory: pytest.TempPathFactory, artifacts: Artifacts) -> Iterator[RelayProcess]:
    with RelayProcess(tmp_path_factory.mktemp("engines-relay") / "data") as r:
        yield r


@pytest.fixture(scope="module")
def display() -> Iterator[str]:
    """A real X server for WebKitGTK (it has no headless mode), started and stopped here."""
    number = 90 + os.getpid() % 9
    proc = subprocess.Popen(["Xvfb", f":{number}", "-screen", "0", "1280x900x24", "-nolisten", "tcp"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while not Path(f"/tmp/.X11-unix/X{number}").exists():
        assert proc.poll() is None and time.monotonic() < deadline, "Xvfb did not start"
        time.sleep(0.1)
    try:
        yield f":{number}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def accepted(relay: RelayProcess, profile: dict[str, Any]) -> dict[str, Any]:
    status, body, _ = relay.get(f"/v1/nodes/{profile['node_id']}")
    assert status == 200 and body["profile"]["sig"] == profile["sig"], body
    stored: dict[str, Any] = body["profile"]
    evidence = stored["evidence"]
    # what the engine lacks is null with its reason, never a figure; no platform count is believed
    assert stored["runtime"]["kind"] == "browser" and stored["cpu"]["gflops_fp32"] > 0
    assert stored["cpu"]["cores"] <= (os.cpu_count() or 1), stored["cpu"]  # measured, not hardwareConcurrency
    assert evidence["browser"]["hardware_concurrency"] is not None  # kept as a claim only
    return stored


# What each engine must give for storage and GPU (README "Engines tested"): asserted per engine, so a probe
# that stops measuring where the engine can, or invents a figure where it cannot, fails.
NO_WEBGPU = "no WebGPU in this browser (navigator.gpu is missing)"  # browser_node/gpu.js
NO_OPFS = "no Origin Private File System (OPFS) in this browser"  # browser_node/disk-worker.js


def assert_no_gpu_with_reason(stored: dict[str, Any]) -> None:
    assert stored["gpus"] == [], stored["gpus"]
    assert stored["evidence"]["gpu_notes"] == [NO_WEBGPU], stored["evidence"]["gpu_notes"]


def assert_storage_measured(stored: dict[str, Any]) -> None:
    storage, evidence = stored["storage"], stored["evidence"]["storage"]
    assert (storage["write_mbps"] or 0) > 0 and (storage["read_mbps"] or 0) > 0, (storage, evidence)  # None: unmeasured
    assert evidence["method"].startswith("OPFS sync access handle") and "null_reason" not in evidence, evidence


def test_join_in_webkitgtk(relay: RelayProcess, display: str) -> None:
    from selenium import webdriver
    from selenium.webdriver.webkitgtk.options import Options
    from selenium.webdriver.webkitgtk.service import Service

    options = Options()
    options.binary_location = MINIBROWSER
    options.add_argument("--automation")
    service = Service(executable_path=WEBKIT_DRIVER, env={**os.environ, "DISPLAY": display})  # no Selenium Manager
    driver = webdriver.WebKitGTK(options=options, service=service)
    try:
        started = time.monotonic()
        driver.get(relay.url + "/")
        # Join is disabled until join.js has wired it (a press before that would be lost); wait as a person does
        deadline = time.monotonic() + 60
        while not driver.find_element("id", "join").is_enabled():
            assert time.monotonic() < deadline, "the Join button never became enabled"
            time.sleep(0.2)
        ready = driver.find_element("id", "status").text
        assert ready.startswith("Ready") and "cores" not in ready, ready  # WebKit says 4 cores on 2: not repeated
        driver.find_element("id", "join").click()
        deadline = time.monotonic() + 120
        while True:
            status = driver.find_element("id", "status").text
            if any(word in status for word in ("joined", "stopped", "refused", "unreachable")):
                break
            assert time.monotonic() < deadline, status
            time.sleep(0.5)
        assert status.startswith("joined"), status
        seconds = time.monotonic() - started
        profile = driver.execute_script("return window.ceProfile")
        ARTIFACTS.mkdir(exist_ok=True)
        driver.save_screenshot(str(ARTIFACTS / "join-webkitgtk.png"))
    finally:
        driver.quit()
    stored = accepted(relay, profile)
    # WebKitGTK 2.50 (MiniBrowser) offers no OPFS at all (navigator.storage.getDirectory is missing) and no
    # WebGPU: both null, each with its reason (not the phone-safety budget's skip, which would hide a probe
    # that never ran)
    storage, evidence = stored["storage"], stored["evidence"]["storage"]
    assert storage["write_mbps"] is None and storage["read_mbps"] is None, (storage, evidence)
    assert evidence == {"null_reason": NO_OPFS}, evidence
    assert_no_gpu_with_reason(stored)
    print(f"WebKitGTK join: {seconds:.1f} s")  # BENCHMARKS.md records it


@pytest.fixture(scope="module")
def puppeteer() -> Path:
    return puppeteer_modules()


def puppeteer_modules() -> Path:
    """puppeteer-core from npm (pinned), installed once into the build cache; it drives the system Firefox
    (bench/honest_count_browser.py uses it too)."""
    import build

    target = build.CACHE / f"puppeteer-core-{PUPPETEER_VERSION}"
    if not (target / "node_modules" / "puppeteer-core").exists():
        target.mkdir(parents=True, exist_ok=True)
        subprocess.run(["npm", "install", "--silent", "--no-audit", "--no-fund", "--prefix", str(target),
                        f"puppeteer-core@{PUPPETEER_VERSION}"], check=True, timeout=300,
                       env={**os.environ, "PUPPETEER_SKIP_DOWNLOAD": "1"})
    return target / "node_modules"


def test_join_in_firefox_esr(relay: RelayProcess, puppeteer: Path, tmp_path: Path) -> None:
    node = shutil.which("node")
    assert node, "node is needed to drive Firefox with puppeteer-core"
    result = subprocess.run([node, str(ROOT / "tests" / "firefox_join.mjs"), relay.url, FIREFOX,
                             str(ARTIFACTS / "join-firefox.png")], capture_output=True, text=True, timeout=180,
                            env={**os.environ, "NODE_PATH": str(puppeteer), "HOME": str(tmp_path)})
    assert result.returncode == 0, result.stderr[-3000:]
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome["status"].startswith("joined"), outcome
    stored = accepted(relay, outcome["profile"])
    assert_storage_measured(stored)  # Firefox has OPFS sync access handles in workers
    assert_no_gpu_with_reason(stored)  # WebGPU off by dom.webgpu.enabled=false (tests/firefox_join.mjs)
    print(f"Firefox ESR join: {outcome['seconds']:.1f} s")
