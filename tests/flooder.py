"""Flooding clients of WS /v1/live (issue 28, attack 6), for tests/test_flood.py and bench/relay_flood.py: each
client connects from its own loopback source address (127.0.0.0/8 is all loopback on Linux, so each is
another address to the relay) and sends big junk JSON frames back to back, reading whatever the relay answers,
and reconnects as soon as the relay closes or refuses it, until the time is up.

    .venv/bin/python -m tests.flooder URL --clients 8 --seconds 30 [--first-address 20] [--sizes 2097000,1500000]

The frames are what parses slowest for their size (arrays of small numbers: ~27 ms per 2 MiB here, where a
base64 opening of the same size takes ~1 ms), typed as messages the relay must not parse whole: heartbeat,
commit, opening (none is due) and one whose type comes late. Prints one JSON line of counts at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time
from collections import Counter
from typing import Any

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException

KINDS = ("heartbeat", "commit", "opening", None)  # None: the type comes after the junk


def junk(kind: str | None, size: int) -> str:
    """A JSON object of exactly `size` characters whose bulk is an array of zeros."""
    head = '{"type": "' + kind + '", "x": [' if kind else '{"x": ['
    tail = "]}" if kind else '], "type": "heartbeat"}'
    count = max(1, (size - len(head) - len(tail) + 1) // 3)
    body = ", ".join(["0"] * count)
    text = head + body + tail
    return text + " " * max(0, size - len(text))  # whitespace after the object is valid JSON


async def client(url: str, source: str, frames: list[str], stop_at: float, counts: Counter[str]) -> None:
    i = 0
    while time.monotonic() < stop_at:
        counts["connects"] += 1
        try:
            async with connect(url, open_timeout=5, close_timeout=1, max_size=2**22, ping_interval=None,
                               compression=None, local_addr=(source, 0)) as ws:
                reader = asyncio.create_task(drain(ws, counts))
                try:
                    while time.monotonic() < stop_at:
                        await ws.send(frames[i % len(frames)])
                        i += 1
                        counts["frames"] += 1
                finally:
                    reader.cancel()
        except InvalidStatus as exc:
            counts[f"refused_{exc.response.status_code}"] += 1  # and at once again: a cheater does not wait
        except ConnectionClosed as exc:
            counts[f"closed_{exc.rcvd.code if exc.rcvd else 'none'}"] += 1
        except (OSError, WebSocketException, TimeoutError) as exc:
            counts[type(exc).__name__] += 1
            await asyncio.sleep(0.05)


async def drain(ws: Any, counts: Counter[str]) -> None:
    with contextlib.suppress(ConnectionClosed):
        async for frame in ws:
            if isinstance(frame, str) and '"error"' in frame[:40]:
                counts["error_" + str(json.loads(frame).get("code"))] += 1


async def flood(url: str, clients: int, seconds: float, first_address: int, sizes: list[int]) -> Counter[str]:
    frames = [junk(kind, size) for size in sizes for kind in KINDS]
    counts: Counter[str] = Counter()
    stop_at = time.monotonic() + seconds
    await asyncio.gather(*(client(url, f"127.0.0.{first_address + i}", frames, stop_at, counts)
                           for i in range(clients)))
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="ws://HOST:PORT/v1/live")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--first-address", type=int, default=20, help="clients use 127.0.0.N, N from this on")
    parser.add_argument("--sizes", default=f"{2 * 1024 * 1024 - 1024}", help="frame sizes in bytes, comma-separated")
    args = parser.parse_args()
    counts = asyncio.run(flood(args.url, args.clients, args.seconds, args.first_address,
                               [int(s) for s in args.sizes.split(",")]))
    print(json.dumps(dict(counts), sort_keys=True), flush=True)


if __name__ == "__main__":
    main()
