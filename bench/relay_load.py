"""A small load generator for relay benchmarks: keep-alive HTTP/1.1 over asyncio streams, requests
pre-serialised, so the client spends as little of the shared CPU as possible."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

# `ce-bench relay` options for a load generator that opens every live session from one address (loopback): the
# per-address limits of WS /v1/live (web/sessions/live_guard.py: 256 sessions, 128 KiB/s) would stop it, not the relay
ONE_ADDRESS = ["--live-sessions-per-address", "1000000", "--live-bytes-per-s-per-address", "1e12",
               "--live-bytes-burst-per-address", str(2**40)]


async def _read_response(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    if length:
        await reader.readexactly(length)
    return status


def post_request(host: str, port: int, path: str, body: bytes) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def get_request(host: str, port: int, path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode()


async def run_closed_loop(host: str, port: int, requests: Sequence[bytes], connections: int
                          ) -> tuple[list[float], list[int], float]:
    """Sends every request as fast as `connections` keep-alive connections allow.
    Returns per-request latencies (s), statuses and the wall time."""
    latencies: list[float] = []
    statuses: list[int] = []
    queue = iter(requests)

    async def worker() -> None:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            for req in queue:
                t0 = time.perf_counter()
                writer.write(req)
                statuses.append(await _read_response(reader))
                latencies.append(time.perf_counter() - t0)
        finally:
            writer.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(connections)))
    return latencies, statuses, time.perf_counter() - t0


async def run_open_loop(host: str, port: int, requests: Sequence[bytes], rate_per_s: float, connections: int
                        ) -> tuple[list[float], list[int]]:
    """Sends requests at a fixed rate (open loop: latency includes any queueing at the relay)."""
    latencies: list[float] = []
    statuses: list[int] = []
    pool: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()
    for _ in range(connections):
        pool.put_nowait(await asyncio.open_connection(host, port))

    async def one(req: bytes, due: float) -> None:
        reader, writer = await pool.get()
        try:
            writer.write(req)
            statuses.append(await _read_response(reader))
            latencies.append(time.perf_counter() - due)
        finally:
            pool.put_nowait((reader, writer))

    start = time.perf_counter()
    tasks = []
    for i, req in enumerate(requests):
        due = start + i / rate_per_s
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(req, due)))
    await asyncio.gather(*tasks)
    while not pool.empty():
        _, writer = pool.get_nowait()
        writer.close()
    return latencies, statuses


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
