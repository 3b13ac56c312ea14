"""The browser the tests drive (Debian's Chromium, never a downloaded build) and the join page's steps, shared by
the tests and benches that open the join page."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import Page

from tests.relay_process import RelayProcess

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless=new", "--no-sandbox", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run"]
# what tests/conftest.py's browser_type_launch_args gives pytest-playwright: that Chromium, with WebGPU (lavapipe)
WEBGPU_LAUNCH_ARGS: dict[str, Any] = {"executable_path": CHROMIUM, "args": [*FLAGS, "--enable-unsafe-webgpu"]}
JOIN_DONE = "() => /joined|stopped|refused|unreachable|busy/.test(document.getElementById('status').textContent)"
# The join page's query for joins that judge no figure: the heavy-work budget spent by the CPU phases, so the
# disk and GPU phases are skipped (~5 s less per join; the skip itself is test_heavy_work_budget_skips_later_phases)
CPU_ONLY = "?heavy_budget_s=0.5"


def join(page: Page, relay: RelayProcess, query: str = "", name: str = "") -> dict[str, Any]:
    page.goto(relay.url + "/" + query)
    assert "Ready" in page.locator("#status").inner_text()
    if name:
        page.fill("#node-name", name)
    page.click("#join")
    page.wait_for_function(JOIN_DONE, timeout=120_000)
    status = page.locator("#status").inner_text()
    assert status.startswith("joined"), status
    profile: dict[str, Any] = page.evaluate("() => window.ceProfile")
    return profile
