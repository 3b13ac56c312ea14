"""How many live sessions one relay process holds (issue 11, item 8): the figure that decides how many relays a
network of phones needs.

    .venv/bin/python bench/relay_sessions.py [--steps 100,1000,5000,10000] [--hold-s 30] [--processes N]
                                             [--old-clients] [--probe-sessions 100] [--settle-s 0]

Method: one relay process (default config: heartbeat interval 10 s, a ping every interval, a 256 KiB bandwidth
probe per session at first and then every 600 s on average, within the relay's 64 Mbit/s probe budget). A load
generator (one asyncio process, websockets) registers N nodes (POST /v1/profiles) and opens N live sessions,
each doing what `host_runner/live_client.py` does: its signed heartbeats (below), a pong for every ping, a
bw_ack for every probe, a signature on every cosign request. Sessions ramp up in steps; at each step the
generator holds them for --hold-s and records the time from sending each heartbeat to its ack. Reference in the
same run: the same latency at the first (smallest) step. Liveness (issue 32): a relay's welcome says "liveness":
"pongs", and sessions then sign one heartbeat and keep live by their pongs, as `ce-bench node` and the join page
do; the first --probe-sessions sessions keep signing one every interval / 2 and time its ack: the relay's answer
time under the load of all the others. --old-clients: every session signs a heartbeat every interval / 2 (the
protocol before 2026-12-06, the load the earlier figures were measured under). --settle-s: wait this long after
a step's ramp before holding (each session's first co-signed link sample comes 3 pings, ~30 s, after it
connected: a ramp's sessions all send theirs together; 45 s lets that wave pass and holds the steady state).
Relay RSS is read from /proc. Targets: 10,000 concurrent sessions, heartbeat ack p99 <= 100 ms, relay RSS <= 1
GiB. The generator shares the 2 cores with the relay: figures are lower bounds for the relay. With --processes
N: `ce-bench relay --processes N --nats URL` (N processes on one port, SO_REUSEPORT, each a member of a cluster
on one nats-server started here); CPU is the sum over the processes (nats-server's too, said apart), RSS the
largest process's. With --pin the relay (every process) runs on core 0 and the generator on core 1: a core each,
as on a machine of its own, instead of both taking turns on both.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402
from websockets.asyncio.client import ClientConnection, connect  # noqa: E402

from bench.relay_load import ONE_ADDRESS, pct, post_request, run_closed_loop  # noqa: E402
from capsule.signing import sign  # noqa: E402
from common.keys import NodeKey  # noqa: E402
from tests.nats_process import NatsProcess  # noqa: E402
from tests.relay_process import RelayProcess  # noqa: E402
from tests.samples import sample_profile  # noqa: E402


class Stats:
    def __init__(self) -> None:
        self.ack_s: list[float] = []
        self.errors: list[str] = []
        self.closed = 0
        self.recording = False


async def session(url: str, key: NodeKey, stats: Stats, stop: asyncio.Event, every_half_interval: bool) -> None:
    try:
        async with connect(url, open_timeout=60, max_size=2**20, ping_interval=None) as ws:
            welcome = json.loads(await ws.recv())
            interval = float(welcome["heartbeat_interval_s"])
            # one heartbeat where pongs keep the session live, unless this session times acks (or plays an
            # old client)
            every = interval / 2 if every_half_interval or welcome.get("liveness") != "pongs" else None
            sent: dict[int, float] = {}
            beat_task = asyncio.create_task(beats(ws, key, welcome["session"], every, sent, stop))
            try:
                async for frame in ws:
                    if isinstance(frame, bytes):
                        await ws.send(json.dumps({"type": "bw_ack", "n": len(frame)}))
                        continue
                    message = json.loads(frame)
                    kind = message.get("type")
                    if kind == "ping":
                        await ws.send(json.dumps({"type": "pong", "id": message["id"]}))
                    elif kind == "ack":
                        t0 = sent.pop(message["seq"], None)
                        if t0 is not None and stats.recording:
                            stats.ack_s.append(time.perf_counter() - t0)
                    elif kind == "cosign":
                        await ws.send(json.dumps({"type": "cosigned",
                                                  "sample": sign("LinkSample", message["sample"], key, "sig_a")}))
                    elif kind == "error":
                        stats.errors.append(f"{message.get('code', '?')}: {str(message.get('detail'))[:80]}")
            finally:
                beat_task.cancel()
    except Exception as exc:  # the figure is how many sessions survive: count every way one ends
        stats.errors.append(type(exc).__name__)
    finally:
        stats.closed += 1


async def beats(ws: ClientConnection, key: NodeKey, session_id: str, every_s: float | None,
                sent: dict[int, float], stop: asyncio.Event) -> None:
    seq = 0
    while not stop.is_set():
        beat = sign("Heartbeat", {"node_id": key.node_id, "session": session_id, "seq": seq,
                                  "sent_at": int(time.time())}, key)
        sent[seq] = time.perf_counter()
        await ws.send(json.dumps({"type": "heartbeat", "heartbeat": beat}))
        seq += 1
        if every_s is None:  # pongs keep the session live from here
            await stop.wait()
            break
        await asyncio.sleep(every_s)
    await ws.close()


pauses: list[float] = []  # the generator's garbage collections longer than 20 ms while a step is held
_gc_started: list[float] = []


def _gc_timer(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        _gc_started[:] = [time.perf_counter()]
    elif _gc_started and time.perf_counter() - _gc_started[0] > 0.02:
        pauses.append(time.perf_counter() - _gc_started[0])


gc.callbacks.append(_gc_timer)


def family(pid: int) -> list[int]:
    """The relay's pid and its children's (the processes of --processes N)."""
    return [pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))]


def pin_process(pid: int, core: int) -> None:
    """Every thread of a process and of its children on one core (threads started later inherit it)."""
    for p in family(pid):
        for tid in os.listdir(f"/proc/{p}/task"):
            with contextlib.suppress(OSError):  # a thread that ended meanwhile
                os.sched_setaffinity(int(tid), {core})


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process and its children so far (/proc/PID/stat fields 14 and 15)."""
    total = 0.0
    for p in family(pid):
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def rss_mib(pid: int) -> float:
    """The largest RSS among the relay's processes."""
    largest = float("nan")
    for p in family(pid):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) / 1024
                    largest = rss if largest != largest or rss > largest else largest
    return largest


async def run_steps(relay: RelayProcess, keys: list[NodeKey], steps: list[int], hold_s: float,
                    old_clients: bool = False, probe_sessions: int = 100, settle_s: float = 0.0) -> None:
    url = relay.url.replace("http://", "ws://") + "/v1/live"
    stats, stop = Stats(), asyncio.Event()
    tasks: list[asyncio.Task[None]] = []
    reference_p99: float | None = None
    assert relay.proc is not None
    for n in steps:
        t0 = time.perf_counter()
        while len(tasks) < n:
            timed = old_clients or len(tasks) < probe_sessions
            tasks.append(asyncio.create_task(session(url, keys[len(tasks)], stats, stop, timed)))
            if len(tasks) % 200 == 0:
                await asyncio.sleep(0.2)  # ramp ~1,000 handshakes/s
        ramp_s = time.perf_counter() - t0
        await asyncio.sleep(6 + settle_s)  # every session has sent its first heartbeat (and settled)
        gc.freeze()  # the generator's own full collections would stall its loop and read as relay latency
        pauses.clear()
        stats.ack_s, stats.errors, stats.recording = [], [], True
        relay_cpu0, gen_cpu0 = cpu_s(relay.proc.pid), time.process_time()
        await asyncio.sleep(hold_s)
        stats.recording = False
        lag = relay.get("/v1/checks")[1].get("relay_loop_lag") or {}
        relay_cpu = (cpu_s(relay.proc.pid) - relay_cpu0) / hold_s * 100
        gen_cpu = (time.process_time() - gen_cpu0) / hold_s * 100
        acks = stats.ack_s
        open_now = len(tasks) - stats.closed
        p50, p99 = (pct(acks, 0.5) * 1000, pct(acks, 0.99) * 1000) if acks else (float("nan"),) * 2
        reference_p99 = reference_p99 or p99
        errors = {e: stats.errors.count(e) for e in sorted(set(stats.errors))}
        held = f", generator GC pauses >20 ms: {len(pauses)} (max {max(pauses, default=0) * 1000:.0f} ms)"
        print(f"{n:>6} sessions (ramp {ramp_s:.0f} s): {open_now} open, {len(acks)} acks in {hold_s:.0f} s "
              f"({len(acks) / hold_s:.0f}/s), ack p50 {p50:.1f} ms, p99 {p99:.1f} ms "
              f"(x{p99 / reference_p99:.1f} the {steps[0]}-session p99), relay RSS {rss_mib(relay.proc.pid):.0f} MiB"
              f", CPU relay {relay_cpu:.0f}% generator {gen_cpu:.0f}% (of one core), errors {errors or 'none'}{held}"
              f"; relay's own loop lag {json.dumps(lag)[:160]}", flush=True)
        if open_now < n * 0.99:
            print(f"broke at {n}: only {open_now} sessions open", flush=True)
            break
    stop.set()
    await asyncio.wait(tasks, timeout=30)


def register_nodes(relay: RelayProcess, count: int) -> tuple[list[tuple[NodeKey, dict[str, Any]]], float]:
    """Registers `count` sample nodes against the relay's current beacon (32 connections); keys, profiles
    and the wall time it took."""
    with urllib.request.urlopen(relay.url + "/beacon") as r:
        beacon: dict[str, Any] = json.loads(r.read())
    pairs = [sample_profile(beacon=beacon) for _ in range(count)]
    reqs = [post_request("127.0.0.1", relay.port, "/v1/profiles", json.dumps(p).encode()) for _, p in pairs]
    _, statuses, wall = asyncio.run(run_closed_loop("127.0.0.1", relay.port, reqs, 32))
    if not all(s == 201 for s in statuses):
        raise SystemExit(f"registration failed: {sorted(Counter(statuses).items())}")
    return pairs, wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", default="100,1000,5000,10000")
    parser.add_argument("--hold-s", type=float, default=30.0)
    parser.add_argument("--processes", type=int, default=1, help="relay processes on the port (needs NATS)")
    parser.add_argument("--old-clients", action="store_true",
                        help="every session signs a heartbeat every interval / 2 (the protocol before 2026-12-06)")
    parser.add_argument("--settle-s", type=float, default=0.0,
                        help="seconds after a step's ramp before its hold (45: past the first link samples' wave)")
    parser.add_argument("--probe-sessions", type=int, default=100,
                        help="sessions that keep signing heartbeats to time the relay's acks")
    parser.add_argument("--pin", action="store_true", help="the relay on core 0, the generator on core 1")
    args = parser.parse_args()
    if args.pin and len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("--pin needs two cores (the relay on one, the generator on the other)")
    steps = [int(x) for x in args.steps.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        nats = NatsProcess(Path(tmp) / "nats").start() if args.processes > 1 else None
        cluster = [*nats.relay_args(), "--processes", str(args.processes), "--beacon-interval", "2"] if nats else []
        relay = RelayProcess(Path(tmp) / "relay", "--ip-rate", "1000000", "--log-level", "warning", *ONE_ADDRESS,
                             *cluster)
        relay.start(timeout=60)
        if args.pin:
            assert relay.proc is not None
            pin_process(relay.proc.pid, 0)
            os.sched_setaffinity(0, {1})
        if nats:
            time.sleep(5)  # every process has heard the others' rounds: the profiles cite one of them
        try:
            pairs, wall = register_nodes(relay, max(steps))
            assert relay.proc is not None
            if nats:
                known_everywhere(relay, [k.node_id for k, _ in pairs[-20:]])
            print(f"registered {len(pairs)} nodes in {wall:.0f} s; relay RSS {rss_mib(relay.proc.pid):.0f} MiB "
                  "before any session", flush=True)
            mode = ("every session signs a heartbeat every interval / 2 (old clients)" if args.old_clients else
                    f"pongs keep sessions live; {args.probe_sessions} sessions sign heartbeats to time acks")
            print(f"liveness: {mode}", flush=True)
            asyncio.run(run_steps(relay, [k for k, _ in pairs], steps, args.hold_s, args.old_clients,
                                  args.probe_sessions, args.settle_s))
        finally:
            relay.stop()
            if nats:
                nats.stop()
    return 0


def known_everywhere(relay: RelayProcess, node_ids: list[str], within_s: float = 120) -> None:
    """Waits until the last registered nodes are known to whichever process answers (each request a new
    connection, so the kernel picks a process): a heartbeat may reach any of them."""
    deadline = time.monotonic() + within_s
    for node_id in node_ids * 3:
        while relay.get(f"/v1/nodes/{node_id}")[0] != 200:
            assert time.monotonic() < deadline, f"{node_id} not known to every relay process in {within_s} s"
            time.sleep(0.5)


if __name__ == "__main__":
    sys.exit(main())
