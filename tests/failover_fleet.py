"""Many node sessions in one asyncio loop (a thread), for tests that need thousands beside real relays on two
cores: each speaks WS /v1/live as host_runner/live_client.LiveSession does (a signed heartbeat, pongs,
bandwidth acks) and, when its connection drops or cannot be made, waits a random 0.5-2 s
and tries the next relay of its list, as LiveSession does with the relays GET /v1/relays named. A thread per
session (LiveSession) costs the test process more CPU than the relays it tests at 1,000 sessions here."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import threading
from typing import Any

from websockets.asyncio.client import connect
from websockets.exceptions import WebSocketException

from bench.relay_sessions import beats
from common.keys import NodeKey


class Fleet:
    def __init__(self, relay_urls: list[str], keys: list[NodeKey], seed: int = 1) -> None:
        self.urls = [u.replace("http://", "ws://").rstrip("/") + "/v1/live" for u in relay_urls]
        self.keys = keys
        self.at = [0] * len(keys)    # index into urls of the relay each session is with (or trying)
        self.acks = [0] * len(keys)  # heartbeat acks received, per session
        self._rng = random.Random(seed)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), name="fleet", daemon=True)

    def start(self) -> Fleet:
        self._thread.start()
        self._ready.wait(10)
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=30)

    async def _main(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        self._ready.set()
        tasks = [asyncio.create_task(self._session(i)) for i in range(len(self.keys))]
        await self._stop.wait()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _session(self, i: int) -> None:
        assert self._stop is not None
        await asyncio.sleep(self._rng.uniform(0, 3))  # the sessions arrive over 3 s, not in one burst
        while not self._stop.is_set():
            with contextlib.suppress(OSError, WebSocketException, TimeoutError, ValueError, KeyError):
                await self._connected(i)  # returns or raises when the connection ends or cannot be made
            self.at[i] = (self.at[i] + 1) % len(self.urls)
            await asyncio.sleep(self._rng.uniform(0.5, 2.0))

    async def _connected(self, i: int) -> None:
        assert self._stop is not None
        async with connect(self.urls[self.at[i]], open_timeout=20, ping_interval=None, max_size=2**22) as ws:
            welcome: dict[str, Any] = json.loads(await ws.recv())
            # one heartbeat where the relay keeps sessions live by their pongs, else one every interval / 2
            every = None if welcome.get("liveness") == "pongs" else float(welcome["heartbeat_interval_s"]) / 2
            beat = asyncio.create_task(beats(ws, self.keys[i], welcome["session"], every, {}, self._stop))
            try:
                async for frame in ws:
                    if isinstance(frame, bytes):  # the relay's bandwidth probe
                        await ws.send(json.dumps({"type": "bw_ack", "n": len(frame)}))
                        continue
                    message = json.loads(frame)
                    if message.get("type") == "ping":
                        await ws.send(json.dumps({"type": "pong", "id": message["id"]}))
                    elif message.get("type") == "ack":
                        self.acks[i] += 1
            finally:
                beat.cancel()
