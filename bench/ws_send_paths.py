"""What one roll-call send costs by each path (issue 32, item 3): the same text frame to N WebSocket sessions
through Starlette and uvicorn's ASGI send, written straight to each uvicorn transport (what a roll call does,
web/sessions/direct_frames.py), and the plain loopback socket `send` underneath both, in one run.

    .venv/bin/python bench/ws_send_paths.py [--sessions 10000] [--rounds 5]

Method: a uvicorn + Starlette server (uvicorn's default WebSocket protocol, no permessage-deflate, as the relay)
on core 0; N websockets clients in one process on core 0 at the idle scheduling class (they stand in for N other
machines, so they take only the time the server leaves); the timing loop in the server. Per round, every path
sends one ~300-byte challenge-like text frame to every session (frames and JSON built before the clock starts);
the figure is the time from the first send to the last, median over the rounds. The reference is the plain
socket path: 200-byte `send`s from a loop over N connected loopback TCP sockets, on core 0, the receiver in the
same idle-class process kind. On loopback the sender's system call also runs the receiver's TCP input, so the
plain path is the floor here, not on a real network.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import resource
import socket
import statistics
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MESSAGE = {"type": "challenge", "id": "0" * 32, "kind": "sgemm", "n": 512, "reps": 4,
           "seeds": ["0123456789abcdef"] * 4, "beacon_round": 123456, "nonce": "ab" * 16,
           "commit_within_s": 20.0, "stop_after_s": 1.25, "leaves": ["sha256", "blake3"]}


def _idle_on_core0() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)
    os.sched_setaffinity(0, {0})
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


def ws_clients(port: int, n: int, ready: Any) -> None:
    _idle_on_core0()
    from websockets.asyncio.client import connect

    async def one() -> None:
        async with connect(f"ws://127.0.0.1:{port}/ws", ping_interval=None, open_timeout=300) as ws:
            async for frame in ws:
                json.loads(frame)

    async def main() -> None:
        tasks = []
        for i in range(n):
            tasks.append(asyncio.create_task(one()))
            if i % 200 == 199:
                await asyncio.sleep(0.2)
        await asyncio.sleep(5)
        ready.set()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(main())


def ws_server(port: int, rounds: int) -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)
    os.sched_setaffinity(0, {0})
    import uvicorn
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route, WebSocketRoute
    from starlette.websockets import WebSocket

    from web.sessions.direct_frames import SCOPE_KEY, FrameWriter, text_frame

    sessions: list[WebSocket] = []

    async def endpoint(ws: WebSocket) -> None:
        await ws.accept()
        sessions.append(ws)
        try:
            while True:
                await ws.receive_text()
        except Exception:  # noqa: BLE001 - a client that went is no longer measured
            sessions.remove(ws)

    async def measure(request: Request) -> JSONResponse:
        texts = [json.dumps({**MESSAGE, "id": f"{i:032x}"}) for i in range(len(sessions))]
        asgi, direct = [], []
        for _ in range(rounds):
            t0 = time.perf_counter()
            for ws, text in zip(sessions, texts, strict=True):
                await ws.send_text(text)
            asgi.append(time.perf_counter() - t0)
            await asyncio.sleep(1.0)  # the clients read what came
            found = [ws.scope.get(SCOPE_KEY) for ws in sessions]
            writers = [f.writer() for f in found if isinstance(f, FrameWriter)]
            ready = [w for w in writers if w is not None]
            if len(ready) != len(sessions):
                return JSONResponse({"error": f"{len(ready)} of {len(sessions)} sessions had a direct writer"})
            frames = [text_frame(text) for text in texts]
            t0 = time.perf_counter()
            for write, frame in zip(ready, frames, strict=True):
                write(frame)
            direct.append(time.perf_counter() - t0)
            await asyncio.sleep(1.0)
        return JSONResponse({"sessions": len(sessions), "asgi_s": asgi, "direct_s": direct})

    from web.sessions.direct_frames import DirectFrames

    app = Starlette(routes=[WebSocketRoute("/ws", endpoint), Route("/measure", measure)],
                    middleware=[Middleware(DirectFrames)])
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", ws_per_message_deflate=False, backlog=4096)


def tcp_receiver(port: int, n: int, ready: Any) -> None:
    _idle_on_core0()

    async def main() -> None:
        async def one() -> None:
            reader, _ = await asyncio.open_connection("127.0.0.1", port)
            while await reader.read(65536):
                pass

        tasks = []
        for i in range(n):
            tasks.append(asyncio.create_task(one()))
            if i % 500 == 499:
                await asyncio.sleep(0.01)
        ready.set()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(main())


def plain_sends(n: int, rounds: int) -> list[float]:
    """The floor: 200-byte sends over n loopback TCP connections from one loop on core 0."""
    os.sched_setaffinity(0, {0})
    server = socket.create_server(("127.0.0.1", 0), backlog=4096)
    port = server.getsockname()[1]
    ready = multiprocessing.get_context("spawn").Event()
    receiver = multiprocessing.get_context("spawn").Process(target=tcp_receiver, args=(port, n, ready))
    receiver.start()
    conns: list[socket.socket] = []
    while len(conns) < n:
        conn, _ = server.accept()
        conn.setblocking(False)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conns.append(conn)
    ready.wait(300)
    time.sleep(2)
    frame, spans = b"\x81\x7e\x00\xc8" + b"x" * 200, []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for conn in conns:
            conn.send(frame)
        spans.append(time.perf_counter() - t0)
        time.sleep(1.0)
    for conn in conns:
        conn.close()
    receiver.join(timeout=30)
    if receiver.is_alive():
        receiver.kill()
    os.sched_setaffinity(0, set(range(os.cpu_count() or 1)))
    return spans


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("needs two cores: the senders on core 0, this process's waiting on core 1")
    resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)
    os.sched_setaffinity(0, {1})
    spawn = multiprocessing.get_context("spawn")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = spawn.Process(target=ws_server, args=(port, args.rounds))
    server.start()
    time.sleep(3)
    ready = spawn.Event()
    clients = spawn.Process(target=ws_clients, args=(port, args.sessions, ready))
    clients.start()
    try:
        if not ready.wait(600):
            raise SystemExit("the clients did not connect within 600 s")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/measure", timeout=600) as r:
            got = json.loads(r.read())
    finally:
        clients.kill()
        server.kill()
    if "error" in got:
        raise SystemExit(got["error"])
    plain = plain_sends(args.sessions, args.rounds)
    n = got["sessions"]
    floor = statistics.median(plain)
    for name, spans in (("plain socket send (the floor)", plain), ("ASGI send_text", got["asgi_s"]),
                        ("direct transport write", got["direct_s"])):
        med = statistics.median(spans)
        print(f"{name:>30}: {n} sessions in {med * 1000:.1f} ms median ({min(spans) * 1000:.1f}-"
              f"{max(spans) * 1000:.1f} over {len(spans)} rounds), {med / n * 1e6:.1f} us a send, "
              f"x{med / floor:.2f} the plain send", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
