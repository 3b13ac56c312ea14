"""A newcomer's path, run as the docs write it (issue 47): the README's Quickstart (`scripts/run`), `ce-bench up`
and its join page in a browser, `ce-bench status` and `ce-bench nodes`, then a two-relay cluster as
docs/manual.md starts it: its nats.conf as printed, the nats-server command in its first line, the password
files, `keys show --file` for the relays' ids and the relay command. Each command is read from the docs' own
code blocks (only a host's particulars are replaced: ports, paths, passwords, ids), so a doc that drifts from
the code fails here."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import secrets
import shlex
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page

from tests.relay_process import free_port
from tests.samples import sample_profile

# scripts/run reinstalls the editable package (pip install -e) and rebuilds: nothing may start a ce-bench beside it
pytestmark = pytest.mark.alone

REPO = Path(__file__).resolve().parents[1]
BIN = REPO / ".venv" / "bin"
JOIN_DONE = "() => /joined|stopped|refused|unreachable|busy/.test(document.getElementById('status').textContent)"


def code_blocks(path: Path, after: str = "") -> list[str]:
    text = path.read_text()
    if after:
        text = text.split(after, 1)[1]
    return re.findall(r"```[a-z]*\n(.*?)```", text, re.S)


def commands(block: str) -> list[list[str]]:
    """The block's command lines, continuations joined and comments dropped, as argv lists."""
    joined = block.replace("\\\n", " ")
    return [shlex.split(line, comments=True) for line in joined.splitlines() if line.split("#")[0].strip()]


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


def until(what: str, timeout_s: float, probe: Callable[[], Any]) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = probe()
        except OSError as exc:  # not up yet
            last = exc
        else:
            if last:
                return last
        time.sleep(0.3)
    raise AssertionError(f"{what}: not within {timeout_s} s (last: {last!r:.300})")


@contextmanager
def started(argv: list[str], cwd: Path, env: dict[str, str], log: Path,
            read_stdout: bool = False) -> Iterator[subprocess.Popen[str]]:
    """The process, its stderr (and stdout, unless read here) in `log`; SIGTERM at the end, kill after 20 s."""
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE if read_stdout else out, stderr=out,
                                text=True)
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def lines_of(proc: subprocess.Popen[str]) -> queue.Queue[str]:
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line.rstrip("\n"))

    threading.Thread(target=pump, daemon=True).start()
    return lines


def ce_bench(argv: list[str]) -> list[str]:
    assert argv[0] == "ce-bench", argv
    return [str(BIN / "ce-bench"), *argv[1:]]


def quickstart(env: dict[str, str]) -> None:
    """README: `scripts/run` (extra arguments go to `ce-bench run`: a short budget, no GPU) writes a verified
    profile.json; `scripts/test` is what CI runs (and what runs this test)."""
    [first] = code_blocks(REPO / "README.md", "## Quickstart")[:1]
    assert commands(first) == [["scripts/run"], ["scripts/test"]], first
    assert "exec scripts/test" in (REPO / ".ci" / "run").read_text()
    out = REPO / "profile.json"
    kept = out.read_bytes() if out.exists() else None
    try:
        run = subprocess.run([str(REPO / "scripts" / "run"), "--no-gpu", "--no-jitter", "--budget-ms", "500"],
                             cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
        profile = json.loads(out.read_text())
        said = run.stdout.strip().splitlines()[-1]
        assert said == f"profile.json: valid NodeProfile signed by {profile['node_id']}", run.stdout
        assert profile["cpu"]["gflops_fp32"] > 0
    finally:
        if kept is None:
            out.unlink(missing_ok=True)
        else:
            out.write_bytes(kept)


def up_join_and_status(page: Page, tmp: Path, env: dict[str, str]) -> None:
    """The manual: `ce-bench up` prints the URL to open; the page joins; `status` and `nodes` show both."""
    port = free_port()
    argv = ce_bench(["ce-bench", "up", "--port", str(port), "--data-dir", str(tmp / "up-data"), "--no-gpu",
                     "--budget-ms", "500", "--name", "first relay"])
    with started(argv, tmp, env, tmp / "up.log", read_stdout=True) as up:
        lines = lines_of(up)
        url = None
        deadline = time.monotonic() + 180
        while url is None:
            assert up.poll() is None, (tmp / "up.log").read_text()[-3000:]
            try:
                line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty as exc:
                raise AssertionError("no join: line from ce-bench up: " + (tmp / "up.log").read_text()[-3000:]) from exc
            if line.startswith("join: "):
                url = line.split()[1].rstrip("/")
        assert url == f"http://127.0.0.1:{port}"
        page.goto(url + "/")
        assert "Ready" in page.locator("#status").inner_text()
        page.fill("#node-name", "a browser")
        page.click("#join")
        page.wait_for_function(JOIN_DONE, timeout=180_000)
        assert page.locator("#status").inner_text().startswith("joined"), page.locator("#status").inner_text()
        joined = page.evaluate("() => window.ceProfile")["node_id"]
        until("the browser's node live at the relay", 30,
              lambda: get(f"{url}/v1/nodes/{joined}")["status"]["online"])
        status = subprocess.run(ce_bench(["ce-bench", "status", "--relay", url]), env=env, capture_output=True,
                                text=True, timeout=60)
        assert status.returncode == 0, status.stderr
        first = status.stdout.splitlines()[0]
        assert first.startswith("node 12D3KooW") and f'("first relay") at {url}: online' in first, status.stdout
        assert "trust: " in status.stdout and "counted" in status.stdout
        nodes = subprocess.run(ce_bench(["ce-bench", "nodes"]), env={**env, "CE_RELAY": url}, capture_output=True,
                               text=True, timeout=60)
        assert nodes.returncode == 0, nodes.stderr
        listed = nodes.stdout.strip().splitlines()[1:]
        assert sorted(line.rsplit("  ", 1)[-1] for line in listed) == ["a browser", "first relay"], nodes.stdout


def nats_from_the_manual(tmp: Path) -> tuple[list[str], Path, int, dict[str, str]]:
    """The manual's whole nats.conf with this host's port, store and fresh passwords, and its command line."""
    [conf] = [b for b in code_blocks(REPO / "docs" / "manual.md") if b.startswith("# nats.conf")]
    command = conf.splitlines()[0].split(": ", 1)[1]
    assert command == ".venv/bin/nats-server -c nats.conf", command
    port = free_port()
    passwords = {"relay-a": secrets.token_urlsafe(24), "relay-b": secrets.token_urlsafe(24)}
    text = (conf.replace('"0.0.0.0:4222"', f'"127.0.0.1:{port}"').replace("/var/lib/nats", str(tmp / "js"))
            .replace("A-LONG-RANDOM-PASSWORD", passwords["relay-a"])
            .replace("ANOTHER-LONG-RANDOM-PASSWORD", passwords["relay-b"]))
    assert text.count(f'"127.0.0.1:{port}"') == 1 and all(text.count(p) == 1 for p in passwords.values())
    path = tmp / "nats.conf"
    path.write_text(text)
    path.chmod(0o600)
    argv = shlex.split(command)
    return [str(REPO / argv[0]), *argv[1:-1], str(path)], path, port, passwords


def listening(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), 1):
        return True


def two_relays(tmp: Path, env: dict[str, str]) -> None:
    nats_argv, _, nats_port, passwords = nats_from_the_manual(tmp)
    blocks = [b for b in code_blocks(REPO / "docs" / "manual.md") if "ce-bench keys show --file" in b]
    assert len(blocks) == 1, blocks
    keys_show, printf, relay = commands(blocks[0])
    assert keys_show[:4] == ["ce-bench", "keys", "show", "--file"] and printf[0] == "printf", blocks[0]
    hosts = {name: tmp / name for name in ("relay-a", "relay-b")}
    ids = {}
    for name, home in hosts.items():  # each "machine": its own directory, the commands run in it
        home.mkdir()
        shown = subprocess.run(ce_bench(keys_show), cwd=home, env=env, capture_output=True, text=True, timeout=60)
        assert shown.returncode == 0, shown.stderr
        ids[name] = shown.stdout.split()[1]
        etc = home / "etc"
        etc.mkdir()
        [shell] = [line for line in blocks[0].splitlines() if line.startswith("printf")]  # a shell line, as pasted
        shell = shell.replace("/etc/ce-relay", str(etc))
        done = subprocess.run(["bash", "-c", shell], cwd=home, capture_output=True, text=True, timeout=30,
                              env={**env, "RELAY_A_PASSWORD": passwords[name]})
        assert done.returncode == 0 and (etc / "nats-password").stat().st_mode & 0o777 == 0o600, done.stderr
    with started(nats_argv, tmp, env, tmp / "nats.log"):
        until("nats-server listening", 30, lambda: listening(nats_port))
        ports = {name: free_port() for name in hosts}
        procs = []
        try:
            with contextlib.ExitStack() as stack:
                for name, home in hosts.items():
                    other = next(n for n in hosts if n != name)
                    argv = [a.replace("nats.example:4222", f"127.0.0.1:{nats_port}").replace("relay-a", name)
                            .replace("/etc/ce-relay", str(home / "etc")).replace("RELAY_B_ID", ids[other])
                            for a in relay]
                    procs.append(stack.enter_context(started([*ce_bench(argv), "--port", str(ports[name])], home,
                                                             env, home / "relay.log")))
                for name in hosts:
                    url = f"http://127.0.0.1:{ports[name]}"
                    beacon = until(f"{name} serving", 60, lambda: get(url + "/beacon"))  # noqa: B023 - called here
                    assert beacon["relay"] == ids[name]  # the id keys show printed is the relay's
                a, b = (f"http://127.0.0.1:{ports[n]}" for n in hosts)
                until("each relay hears the other", 60, lambda: all(
                    all(r["last_seen"] for r in get(u + "/v1/relays")["relays"]) for u in (a, b)))
                assert get(a + "/v1/relays")["leader"] == get(b + "/v1/relays")["leader"] == min(ids.values())
                _, profile = sample_profile(beacon=get(a + "/beacon"))
                request = urllib.request.Request(a + "/v1/profiles", json.dumps(profile).encode(),
                                                 {"content-type": "application/json"})
                assert urllib.request.urlopen(request, timeout=10).status == 201
                until("the profile posted to A served by B", 30,
                      lambda: get(f"{b}/v1/nodes/{profile['node_id']}")["profile"] == profile)
        except BaseException:
            for name, home in hosts.items():
                print(name, (home / "relay.log").read_text()[-3000:])
            raise
        for proc, home in zip(procs, hosts.values(), strict=True):
            # SIGTERM: a clean stop (uvicorn shuts down, then re-raises the signal it caught, as supervisors expect)
            assert proc.returncode in (0, -signal.SIGTERM), proc.returncode
            assert "Traceback" not in (home / "relay.log").read_text()


def test_a_newcomers_path_as_the_docs_write_it(page: Page, tmp_path: Path) -> None:
    env = {**os.environ, "CE_BENCH_HOME": str(tmp_path / "home")}
    env.pop("CE_RELAY", None)
    quickstart(env)
    up_join_and_status(page, tmp_path, env)
    two_relays(tmp_path, env)
