"""The CE mesh (issue 31) as a js-libp2p peer sees it: gossip delay, relay CPU per gossiped message, bytes per
node per hour, and libp2p ping against a real `ce-bench node`.

    .venv/bin/python bench/mesh.py [--pace 50] [--sizes 100,1000]

Everything runs on this machine (the relay, the node, the js-libp2p peers from tests/mesh_js/package-lock.json,
installed with `npm ci` into the build cache as tests/test_mesh.py does, with bench/mesh_listener.mjs beside
them), on loopback. Method, figure by figure:

1. Gossip delay. A relay (`ce-bench relay`, default config but --ip-rate 1000 so one client may post at the
   pace) and one js-libp2p subscriber dialled to it (all three topics). Fresh sample NodeProfiles
   (tests/samples.py, citing the relay's beacon) are POSTed over one keep-alive HTTP connection at a steady
   --pace; for each, the delay from the HTTP 201 arriving (time.time() here) to the subscriber's receipt
   (Date.now() / 1000 in its message handler), matched by node_id: p50 / p99 / max, and how many arrived.
   Reference, same run: the POST round trip of the same profiles (p50, p99). A negative delay: the subscriber
   had it before the client had read the 201 (the relay publishes before it answers). py-libp2p 0.8.1's
   gossipsub drops a forwarder's messages beyond 10 per topic per second, the relay's own publications
   included, so one more run, 100 profiles at 8/s, shows the delay with nothing dropped.
2. Relay CPU per gossiped message: the relay process's user + system CPU seconds (psutil) from the first POST
   of the largest run to 5 s after its last, minus the same on a relay started with --no-libp2p (no
   subscriber; the reference), divided by the messages the mesh relay published. The relays' idle CPU over
   5 s (the libp2p host's own cost: gossipsub heartbeats every 1 s) is printed beside it.
3. Bytes per node per hour. A relay with short intervals (tests/test_mesh.py's FAST) and a real `ce-bench
   node`; the subscriber dials the relay through a counting TCP proxy here. Measured: the node's real profile,
   its node<->relay LinkSample and the relay's Scoreboard, each as the subscriber receives the payload; the
   gossipsub framing per message (TCP payload bytes through the proxy, both directions, while 40 profiles
   are gossiped at 8/s, minus the payloads, per message: protobuf RPC + the relay's signed peer record +
   Yamux + Noise, the subscriber's IDONTWANTs, and any control traffic of the window); control bytes per
   second with no message (mostly js-libp2p's own connection monitor: a ping every 10 s). Then computed at
   the default config: profiles every remeasure_s (6 h), one node<->relay LinkSample per link_gossip_every_s
   (300 s; up to one per link_gossip_min_interval_s, 60 s, when its RTT moves), one Scoreboard per
   roll_call_interval_s (200 s) per relay. That is what one subscriber receives from one relay; a gossipsub
   peer with D mesh neighbours may receive up to D copies of each message (D = 6 in the relay's host).
4. libp2p ping vs the WebRTC probe: js-libp2p pings the node's libp2p multiaddr (GET /v1/nodes/{id}
   "libp2p"): tests/mesh_js/mesh_peer.mjs ping (5 pings, the library's RTT in whole ms) and 100 pings timed
   around each ping() call (stream open + 32 B each way + close); the bytes one ping costs: TCP payload through
   the counting proxy for 100 pings after a warm-up ping, per ping (IP + TCP headers not counted: ~52 B per
   segment more). Reference, same run: the RTT the relay measured on the node's live session (the LinkSample).
   The WebRTC probe's cost is BENCHMARKS.md's (11.2 KiB per probe, 2026-12-04), not re-run.

Everything shares the machine's cores: delays and CPU are upper bounds for a relay alone.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import http.client
import json
import os
import queue
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402

import build  # noqa: E402
from bench.relay_load import pct  # noqa: E402
from common.keys import NodeKey  # noqa: E402
from host_runner.agent import AgentConfig  # noqa: E402
from tests.relay_process import CLI, RelayProcess  # noqa: E402
from tests.samples import sample_profile  # noqa: E402
from web.config import RelayConfig  # noqa: E402

# tests/test_mesh.py's install dir and its relay flags for short intervals (copied, not imported: importing the test
# module would make mypy check it as part of this file)
HERE = ROOT / "tests" / "mesh_js"
FAST = ["--heartbeat-interval", "0.5", "--beacon-interval", "1", "--roll-call-interval-s", "5",
        "--roll-call-min-gap-s", "4", "--ip-rate", "1000"]
LISTENER = Path(__file__).resolve().parent / "mesh_listener.mjs"
GOSSIPSUB_D = 6
# py-libp2p 0.8's GossipSub drops messages beyond 10 per topic per second per forwarder (its spam protection,
# on by default), the relay's own publications included: runs below that pace show the delay without the loss
BELOW_CAP_PACE = 8.0
FRAMING_N = 40  # common/libp2p_host.py: GossipSub(degree=6)
WEBRTC_PROBE_KIB = 11.2  # BENCHMARKS.md, "Node-to-node probes", 2026-12-04 (bench/peer_probes.py)
WEBRTC_PROBE_RTT_MS = 0.368


T0 = time.monotonic()


def phase(what: str) -> None:
    print(f"[{time.monotonic() - T0:6.1f} s] {what}", file=sys.stderr, flush=True)


def js_scripts() -> tuple[Path, Path]:
    """tests/mesh_js installed as tests/test_mesh.py's js_peer fixture does it (same cache dir: `npm ci` from the
    lock file once per lock), with mesh_peer.mjs and this bench's mesh_listener.mjs beside node_modules."""
    lock = (HERE / "package-lock.json").read_bytes()
    target = build.CACHE / f"mesh-js-{hashlib.sha256(lock).hexdigest()[:12]}"
    target.mkdir(parents=True, exist_ok=True)
    with open(target / ".lock", "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        if not (target / "node_modules" / "libp2p").exists():
            shutil.copy(HERE / "package.json", target)
            shutil.copy(HERE / "package-lock.json", target)
            subprocess.run(["npm", "ci", "--silent", "--no-audit", "--no-fund"], cwd=target, check=True, timeout=300)
    shutil.copy(HERE / "mesh_peer.mjs", target)
    shutil.copy(LISTENER, target)
    return target / "mesh_peer.mjs", target / LISTENER.name


class JsPeer:
    """One node process running a js peer script; its JSON lines arrive on a queue as they are printed."""

    def __init__(self, script: Path, *args: str) -> None:
        self.proc = subprocess.Popen(["node", str(script), *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     cwd=script.parent)
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                self.lines.put(json.loads(raw))
            except ValueError:
                self.lines.put({"noise": raw.decode(errors="replace")[:300]})

    def next(self, timeout_s: float) -> dict[str, Any] | None:
        try:
            line = self.lines.get(timeout=max(0.01, timeout_s))
        except queue.Empty:
            return None
        self.seen.append(line)
        return line

    def until(self, done: Any, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            line = self.next(deadline - time.monotonic())
            if line is not None and "error" in line:
                raise SystemExit(f"js peer failed: {line['error']}")
            if line is not None and done(line):
                return line
        raise SystemExit(f"not seen within {timeout_s} s; seen: {json.dumps(self.seen)[-2000:]}")

    def finish(self, timeout_s: float) -> list[dict[str, Any]]:
        self.proc.wait(timeout=timeout_s)
        while self.next(0.01) is not None:
            pass
        return self.seen

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=5)


def run_js(script: Path, *args: str, timeout_s: float = 60) -> list[dict[str, Any]]:
    peer = JsPeer(script, *args)
    try:
        lines = peer.finish(timeout_s)
        return lines if peer.proc.returncode == 0 else [*lines, {"exit_code": peer.proc.returncode}]
    finally:
        peer.stop()


def mesh_address(relay: RelayProcess) -> str:
    status, info = relay.libp2p()
    if status != 200:
        raise SystemExit(f"GET /v1/libp2p: {status} {info}")
    return str(next(a for a in info["multiaddrs"] if a.startswith("/ip4/127.0.0.1/")))


def wait_for(check: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise SystemExit(f"{what}: not within {timeout_s} s")


class CountingProxy:
    """A loopback TCP forwarder to `target_port` that counts the payload bytes (and reads) each way."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.lock = threading.Lock()
        self.up = self.down = self.up_reads = self.down_reads = 0  # up: client -> target
        threading.Thread(target=self._accept, daemon=True).start()

    def snapshot(self) -> tuple[int, int, int, int]:
        with self.lock:
            return self.up, self.down, self.up_reads, self.down_reads

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            target = socket.create_connection(("127.0.0.1", self.target_port))
            for s in (client, target):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._pump, args=(client, target, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(target, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, up: bool) -> None:
        with contextlib.suppress(OSError):
            while chunk := src.recv(65536):
                with self.lock:
                    if up:
                        self.up += len(chunk)
                        self.up_reads += 1
                    else:
                        self.down += len(chunk)
                        self.down_reads += 1
                dst.sendall(chunk)
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.server.close()


def proxied(addr: str, proxy: CountingProxy) -> str:
    """The same /p2p/ PeerId (Noise checks it) at the proxy's port."""
    parts = addr.split("/")
    parts[parts.index("tcp") + 1] = str(proxy.port)
    return "/".join(parts)


def tcp_port(addr: str) -> int:
    parts = addr.split("/")
    return int(parts[parts.index("tcp") + 1])


def cpu_s(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def spread(values: list[float]) -> str:
    return (f"p50 {pct(values, 0.5):.2f}, p99 {pct(values, 0.99):.2f}, min {min(values):.2f}, "
            f"max {max(values):.2f}") if values else "none"


def post_paced(relay: RelayProcess, profiles: list[dict[str, Any]], pace: float) -> tuple[list[float], list[float]]:
    """POSTs each profile at a steady pace over one keep-alive connection; (round trips in ms, the time.time()
    each 201 arrived). Anything but a 201 ends the run."""
    conn = http.client.HTTPConnection("127.0.0.1", relay.port, timeout=30)
    rtts, done_at = [], []
    t0 = time.perf_counter()
    for i, profile in enumerate(profiles):
        wait = t0 + i / pace - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        body = json.dumps(profile).encode()  # as a node sends it (host_runner/relay_client.py)
        start = time.perf_counter()
        conn.request("POST", "/v1/profiles", body, {"content-type": "application/json"})
        resp = conn.getresponse()
        answer = resp.read()
        rtts.append((time.perf_counter() - start) * 1000)
        done_at.append(time.time())
        if resp.status != 201:
            raise SystemExit(f"POST /v1/profiles answered {resp.status}: {answer[:300]!r}")
    conn.close()
    return rtts, done_at


def fresh_profiles(relay: RelayProcess, n: int) -> list[dict[str, Any]]:
    beacon = relay.get("/beacon")[1]
    return [sample_profile(beacon=beacon)[1] for _ in range(n)]


def drain(listener: JsPeer | None, seconds: float) -> list[dict[str, Any]]:
    lines = []
    deadline = time.monotonic() + seconds
    while listener is not None and time.monotonic() < deadline:
        line = listener.next(deadline - time.monotonic())
        if line is not None:
            lines.append(line)
    return lines


def gossip_run(relay: RelayProcess, listener: JsPeer | None, n: int, pace: float) -> dict[str, Any]:
    """One run of part 1 (and 2): n profiles at the pace; the delays, the round trips, the relay's CPU."""
    assert relay.proc is not None
    profiles = fresh_profiles(relay, n)
    cpu0 = cpu_s(relay.proc.pid)
    rtts, done_at = post_paced(relay, profiles, pace)
    received = {m["node_id"]: m for m in drain(listener, 5.0) if m.get("kind") == "NodeProfile"}
    cpu = cpu_s(relay.proc.pid) - cpu0  # first POST to 5 s after the last
    wanted = {p["node_id"] for p in profiles}
    if listener is not None and not wanted <= set(received):  # late ones still count as arrived, not in the CPU
        received |= {m["node_id"]: m for m in drain(listener, 10.0) if m.get("kind") == "NodeProfile"}
    delays = [(received[p["node_id"]]["at"] - t) * 1000 for p, t in zip(profiles, done_at, strict=True)
              if p["node_id"] in received]
    return {"n": n, "rtts": rtts, "delays": delays, "arrived": len(wanted & set(received)), "cpu_s": cpu,
            "wall_s": done_at[-1] - done_at[0] + 5.0,
            "canonical": sum(1 for m in received.values() if m.get("canonical")),
            "bytes": statistics.median([m["bytes"] for m in received.values()]) if received else 0}


def idle_cpu(relay: RelayProcess, seconds: float = 5.0) -> float:
    assert relay.proc is not None
    cpu0 = cpu_s(relay.proc.pid)
    time.sleep(seconds)
    return (cpu_s(relay.proc.pid) - cpu0) / seconds * 1000  # ms of CPU per s


def parts_1_and_2(sizes: list[int], pace: float, listener_js: Path, tmp: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    phase("parts 1 and 2: the mesh relay")
    with RelayProcess(tmp / "mesh-relay", "--ip-rate", "1000") as relay:
        listener = JsPeer(listener_js, "listen", mesh_address(relay), "900")
        try:
            listener.until(lambda line: "listening" in line, 30)
            time.sleep(3)  # a few gossipsub heartbeats (1 s): the subscriber is in the relay's mesh
            out["idle_mesh"] = idle_cpu(relay)
            out["below_cap"] = gossip_run(relay, listener, sizes[0], BELOW_CAP_PACE)
            phase(f"{sizes} at {pace:g}/s")
            out["mesh"] = [gossip_run(relay, listener, n, pace) for n in sizes]
            out["libp2p_info"] = relay.get("/v1/libp2p")[1]
        finally:
            listener.stop()
    phase("the --no-libp2p relay")
    with RelayProcess(tmp / "plain-relay", "--ip-rate", "1000", "--no-libp2p") as relay:
        time.sleep(3)
        out["idle_plain"] = idle_cpu(relay)
        out["plain"] = [gossip_run(relay, None, n, pace) for n in sizes]
    return out


def parts_3_and_4(peer_js: Path, listener_js: Path, tmp: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    phase("parts 3 and 4: a relay with short intervals, a real node")
    with RelayProcess(tmp / "node-relay", *FAST) as relay:
        relay_id = relay.get("/beacon")[1]["relay"]
        to_relay = CountingProxy(tcp_port(mesh_address(relay)))
        listener = JsPeer(listener_js, "listen", proxied(mesh_address(relay), to_relay), "900")
        node = None
        try:
            listener.until(lambda line: "listening" in line, 30)
            env = dict(os.environ, CE_BENCH_HOME=str(tmp / "home"))
            with open(tmp / "node.log", "wb") as log:
                node = subprocess.Popen([CLI, "node", "--relay", relay.url, "--no-gpu", "--no-jitter", "--budget-ms",
                                         "500", "--no-peer-probes", "--libp2p-listen", "/ip4/127.0.0.1/tcp/0"],
                                        stdout=log, stderr=log, env=env)
            wait_for(lambda: (tmp / "home" / "node.key").exists(), 30, "the node's key")
            node_id = NodeKey.load(tmp / "home" / "node.key").node_id
            phase("node started")
            out["profile"] = listener.until(lambda m: m.get("kind") == "NodeProfile" and m["node_id"] == node_id, 120)
            phase("its profile gossiped")
            out["link"] = listener.until(lambda m: m.get("kind") == "LinkSample"
                                         and node_id in (m["record"]["a"], m["record"]["b"]), 60)
            phase("its edge gossiped")
            out["scoreboard"] = listener.until(lambda m: m.get("kind") == "Scoreboard"
                                               and m["record"]["proven"]["nodes"] >= 1, 90)
            assert relay_id in (out["link"]["record"]["a"], out["link"]["record"]["b"]), out["link"]

            # framing: FRAMING_N sample profiles gossiped through the proxy, below py-libp2p's 10/s cap
            phase("the node's profile, edge and scoreboard seen; framing")
            drain(listener, 0.5)
            before = to_relay.snapshot()
            profiles = fresh_profiles(relay, FRAMING_N)
            post_paced(relay, profiles, BELOW_CAP_PACE)
            wanted = {p["node_id"] for p in profiles}
            window: list[dict[str, Any]] = []
            deadline = time.monotonic() + 5.0
            while wanted - {m.get("node_id") for m in window} and time.monotonic() < deadline:
                line = listener.next(deadline - time.monotonic())
                if line is not None:
                    window.append(line)
            time.sleep(0.3)
            after = to_relay.snapshot()
            window += drain(listener, 0.01)
            phase("quiet")
            tcp_bytes = (after[0] - before[0]) + (after[1] - before[1])
            out["framing"] = {"messages": len(window), "payload": sum(m.get("bytes", 0) for m in window),
                              "tcp": tcp_bytes, "up": after[0] - before[0], "down": after[1] - before[1],
                              "arrived": len(wanted & {m.get("node_id") for m in window})}
            # control traffic with nothing to send (scoreboards of the 5 s roll calls do come: subtracted)
            before = to_relay.snapshot()
            quiet = drain(listener, 10.0)
            after = to_relay.snapshot()
            out["quiet"] = {"seconds": 10.0, "messages": len(quiet), "payload": sum(m.get("bytes", 0) for m in quiet),
                            "tcp": (after[0] - before[0]) + (after[1] - before[1])}

            # ping the node's own libp2p host
            phase("pings")
            addrs = relay.get(f"/v1/nodes/{node_id}")[1]["libp2p"]["multiaddrs"]
            for attempt in range(2):  # a miss is reported with what the js peer printed, and retried once
                lines = run_js(peer_js, "ping", addrs[0])
                pinged = next((line for line in lines if "rtts_ms" in line), None)
                if pinged is not None and pinged["identified"] == node_id:
                    break
                out.setdefault("misses", []).append(f"mesh_peer.mjs ping, attempt {attempt + 1}: {lines}")
                phase(f"mesh_peer.mjs ping missed: {lines}")
            out["ping5"] = pinged or {"rtts_ms": "missed"}
            direct = run_js(listener_js, "pings", addrs[0], "100")
            out["pings"] = next((line for line in direct if "rtts_ms" in line), None)
            if out["pings"] is None:
                raise SystemExit(f"100 pings to the node missed: {direct}")
            to_node = CountingProxy(tcp_port(addrs[0]))
            peer = JsPeer(listener_js, "pings", proxied(addrs[0], to_node), "100")
            try:
                peer.until(lambda line: "warm" in line, 30)
                warm = to_node.snapshot()
                peer.until(lambda line: "rtts_ms" in line, 60)
                pinged_100 = to_node.snapshot()
                peer.finish(30)
            finally:
                peer.stop()
                to_node.close()
            out["ping_bytes"] = {"up": pinged_100[0] - warm[0], "down": pinged_100[1] - warm[1],
                                 "reads_up": pinged_100[2] - warm[2], "reads_down": pinged_100[3] - warm[3],
                                 "setup": warm[0] + warm[1]}
            out["node_link_rtt_ms"] = out["link"]["record"]["rtt_ms"]
        finally:
            listener.stop()
            to_relay.close()
            if node is not None and node.poll() is None:
                node.terminate()
                node.wait(timeout=30)
    return out


def report(p12: dict[str, Any], p34: dict[str, Any], pace: float) -> None:
    print(f"# CE mesh bench, {time.strftime('%Y-%m-%d %H:%M')}, {cpu_model()}, {os.cpu_count()} CPUs")
    print(f"\n1. Gossip delay, HTTP 201 -> js-libp2p subscriber's receipt (ms), {pace:g} profiles/s:")
    for run, plain in zip(p12["mesh"], p12["plain"], strict=True):
        lost = run["n"] - run["arrived"]
        print(f"  N={run['n']:>5}: arrived {run['arrived']}/{run['n']}{f' ({lost} LOST)' if lost else ''}; "
              f"delay {spread(run['delays'])}")
        print(f"           reference, POST round trip of the same profiles: {spread(run['rtts'])}; "
              f"delay p50 / POST p50 = {pct(run['delays'], 0.5) / pct(run['rtts'], 0.5):.2f}x"
              if run["delays"] else "")
        print(f"           POST round trip on the --no-libp2p relay: {spread(plain['rtts'])}")
        print(f"           payload {run['bytes']:.0f} B median; canonical JSON: {run['canonical']} of "
              f"{run['arrived']} (the relay gossips the POSTed bytes)")
    slow = p12["below_cap"]
    print(f"  N={slow['n']:>5} at {BELOW_CAP_PACE:g}/s (below py-libp2p's 10 messages/topic/s): arrived "
          f"{slow['arrived']}/{slow['n']}; delay {spread(slow['delays'])}; POST round trip {spread(slow['rtts'])}")
    info = p12["libp2p_info"]
    sent = sum(r["n"] for r in p12["mesh"]) + slow["n"]
    got = sum(r["arrived"] for r in p12["mesh"]) + slow["arrived"]
    print(f"  relay's /v1/libp2p after: published {info['published']} (profiles posted {sent}, received {got}), "
          f"dropped_queue_full {info['dropped_queue_full']}: the loss is not counted by the relay")

    big, ref = p12["mesh"][-1], p12["plain"][-1]
    per_msg = (big["cpu_s"] - ref["cpu_s"]) / big["n"] * 1000
    print(f"\n2. Relay CPU, {big['n']} profiles at {pace:g}/s (first POST to 5 s after the last):")
    print(f"  mesh on: {big['cpu_s']:.2f} s; --no-libp2p (reference): {ref['cpu_s']:.2f} s "
          f"({big['cpu_s'] / ref['cpu_s']:.2f}x); difference per gossiped message: {per_msg:.2f} ms")
    print(f"  idle (5 s, no posts): mesh on {p12['idle_mesh']:.1f} ms/s (subscriber connected), --no-libp2p "
          f"{p12['idle_plain']:.1f} ms/s; the idle difference over the run's {big['wall_s']:.0f} s: "
          f"{(p12['idle_mesh'] - p12['idle_plain']) * big['wall_s'] / 1000:.2f} s of it")

    cfg, agent = RelayConfig(), AgentConfig()
    prof, link, board = p34["profile"]["bytes"], p34["link"]["bytes"], p34["scoreboard"]["bytes"]
    fr = p34["framing"]
    framing = (fr["tcp"] - fr["payload"]) / fr["messages"]
    quiet = p34["quiet"]
    control_bps = max(0.0, (quiet["tcp"] - quiet["payload"] - framing * quiet["messages"]) / quiet["seconds"])
    links_h, links_h_max = 3600 / cfg.link_gossip_every_s, 3600 / cfg.link_gossip_min_interval_s
    profiles_h, boards_h = 3600 / agent.remeasure_s, 3600 / cfg.roll_call_interval_s
    per_node = profiles_h * (prof + framing) + links_h * (link + framing)
    per_node_max = profiles_h * (prof + framing) + links_h_max * (link + framing)
    per_relay = boards_h * (board + framing)
    print("\n3. Bytes on the mesh per node per hour (one subscriber, one relay; computed from measured sizes):")
    print(f"  measured payloads: the real node's profile {prof} B (canonical: {p34['profile'].get('canonical')}), "
          f"its node<->relay LinkSample {link} B, a Scoreboard {board} B")
    print(f"  gossipsub framing: {framing:.0f} B per message (TCP payload through the proxy {fr['tcp']} B, "
          f"{fr['down']} down / {fr['up']} up, for {fr['messages']} messages of {fr['payload']} B payload; "
          f"{fr['arrived']}/{FRAMING_N} arrived, {BELOW_CAP_PACE:g}/s); control traffic with no message: "
          f"{control_bps:.0f} B/s "
          f"({quiet['tcp']} B in {quiet['seconds']:g} s, {quiet['messages']} messages in it)")
    print(f"  default config: profile every {agent.remeasure_s / 3600:g} h ({profiles_h:.3f}/h), node<->relay "
          f"LinkSample every {cfg.link_gossip_every_s:g} s ({links_h:g}/h; at most {links_h_max:g}/h when its "
          f"RTT moves), Scoreboard every {cfg.roll_call_interval_s:g} s per relay ({boards_h:g}/h)")
    print(f"  per node: {per_node:,.0f} B/h ({per_node / 1024:.1f} KiB/h; {per_node_max / 1024:.1f} KiB/h when every "
          f"RTT moves); per relay: {per_relay:,.0f} B/h of scoreboards; control {control_bps * 3600 / 1024:.0f} "
          f"KiB/h per connection; x up to {GOSSIPSUB_D} for a gossipsub peer with {GOSSIPSUB_D} mesh neighbours")
    probe_edges_h = 3600 / cfg.peer_probe_interval_s
    print(f"  not in the figure: node-to-node probe edges (one offered per node per {cfg.peer_probe_interval_s:g} s,"
          f" each confirmed edge gossiped: up to {probe_edges_h:g} LinkSamples/h per node, "
          f"{probe_edges_h * (link + framing) / 1024:.1f} KiB/h)")

    pb = p34["ping_bytes"]
    calls, rtts = p34["pings"]["call_ms"], p34["pings"]["rtts_ms"]
    per_ping = (pb["up"] + pb["down"]) / 100
    print("\n4. libp2p ping to the real `ce-bench node` (js-libp2p -> py-libp2p, loopback):")
    print(f"  mesh_peer.mjs ping, 5 pings: {p34['ping5']['rtts_ms']} ms (whole ms, the library's)")
    print(f"  100 pings: ping() call {spread(calls)} ms; the library's RTT p50 {pct(rtts, 0.5):g} ms, "
          f"max {max(rtts):g} ms")
    print(f"  reference, same run: the relay's RTT to the node on its live session (LinkSample) "
          f"{p34['node_link_rtt_ms']} ms; ping p50 / that = {pct(calls, 0.5) / p34['node_link_rtt_ms']:.2f}x")
    print(f"  bytes: {per_ping:.0f} B TCP payload per ping ({pb['up'] / 100:.0f} up, {pb['down'] / 100:.0f} down; "
          f"{(pb['reads_up'] + pb['reads_down']) / 100:.1f} reads per ping at the proxy, ~52 B IP+TCP each "
          f"more); connection setup before it (TCP payload, Noise + identify + the first ping) {pb['setup']} B")
    print(f"  WebRTC probe (BENCHMARKS.md 2026-12-04, not re-run): {WEBRTC_PROBE_KIB} KiB per probe, RTT median "
          f"{WEBRTC_PROBE_RTT_MS} ms; a ping is {per_ping / (WEBRTC_PROBE_KIB * 1024):.3f}x its bytes, a new "
          f"connection + ping {(pb['setup'] + per_ping) / (WEBRTC_PROBE_KIB * 1024):.2f}x")


def cpu_model() -> str:
    info = Path("/proc/cpuinfo").read_text()
    field = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in info.splitlines()[:30])}
    return f"{field.get('model name', '?')} (family {field.get('cpu family', '?')}, model {field.get('model', '?')})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pace", type=float, default=50.0, help="profiles per second")
    parser.add_argument("--sizes", default="100,1000")
    parser.add_argument("--json", type=Path, help="also write every raw figure here")
    args = parser.parse_args()
    started = time.monotonic()
    peer_js, listener_js = js_scripts()
    with tempfile.TemporaryDirectory() as tmp:
        p34 = parts_3_and_4(peer_js, listener_js, Path(tmp))
        p12 = parts_1_and_2([int(s) for s in args.sizes.split(",")], args.pace, listener_js, Path(tmp))
    report(p12, p34, args.pace)
    for miss in p34.get("misses", []):
        print(f"  MISS: {miss}")
    print(f"\n(bench wall time {time.monotonic() - started:.0f} s)")
    if args.json:
        args.json.write_text(json.dumps({"parts_1_2": p12, "parts_3_4": p34}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
