"""The relay's adapter over the peer-probe broker (web/map/peer_probes.py, pure): it keeps each taking-part
session's send function, pairs the due nodes once a second, carries the signalling, and takes the co-signed
sample through the relay's add_link (signatures, physics, the landmarks' triangle rule). It is given what it
needs: the config, the link book (coordinates, confirmed edges), the multiaddrs live sessions announced, and
the function that takes a sample."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from web.api.problems import Problem
from web.config import RelayConfig
from web.map.links import LinkBook
from web.map.peer_probes import Outgoing, PeerBroker

Send = Callable[[dict[str, Any]], Awaitable[None]]
AddLink = Callable[[bytes, float], Awaitable[dict[str, Any]]]  # Relay.add_link: verifies, stores, returns it


class PeerDesk:
    def __init__(self, config: RelayConfig, links: LinkBook, multiaddrs: Mapping[str, list[str]],
                 add_link: AddLink) -> None:
        self.links = links
        self.multiaddrs = multiaddrs  # node id -> the libp2p multiaddrs its live session announced
        self.add_link = add_link
        self.broker = PeerBroker(config)
        self.sends: dict[str, Send] = {}  # session -> its connection's send (only sessions taking part)
        self.rng = random.Random()

    async def _deliver(self, out: Outgoing) -> None:
        for session, message in out:
            send = self.sends.get(session)
            if send is not None:
                await send(message)

    def _predict_ms(self, a: str, b: str) -> float | None:
        ca, cb = self.links.coordinate(a), self.links.coordinate(b)
        return ca.distance(cb) if ca is not None and cb is not None else None

    async def tick(self) -> None:
        now = time.monotonic()
        await self._deliver(self.broker.expire(now) + self.broker.pair(now, self.rng, self._predict_ms,
                                                                       self._multiaddrs_of))

    def _multiaddrs_of(self, node_id: str) -> list[str]:
        return self.multiaddrs.get(node_id, [])

    async def on_peers(self, session: str, node_id: str | None, send: Send, message: dict[str, Any],
                       host: str = "") -> None:
        out = self.broker.peers(session, node_id, message.get("transports"), host)
        if session in self.broker.participants:
            self.sends[session] = send
        else:
            self.sends.pop(session, None)
        await self._deliver(out)

    async def on_offer(self, session: str, message: dict[str, Any]) -> None:
        await self._deliver(self.broker.offer(session, message))

    async def on_answer(self, session: str, message: dict[str, Any]) -> None:
        await self._deliver(self.broker.answer(session, message))

    async def on_failed(self, session: str, message: dict[str, Any]) -> None:
        await self._deliver(self.broker.failed(session, message))

    async def on_sample(self, session: str, message: dict[str, Any]) -> None:
        probe, sample = self.broker.sample(session, message)
        try:
            stored = await self.add_link(json.dumps(sample).encode(), time.time())
        except Problem as problem:  # told as the probe's end, not as an error frame: an honest pair whose
            # noisy sample the landmarks refuse must not use up the session's MAX_ERRORS
            await self._deliver(self.broker.finish(probe, problem.code))
            return
        confirmed = self.links.confirmed(stored["a"], stored["b"])
        await self._deliver(self.broker.finish(probe, "measured", float(stored["rtt_ms"]), confirmed))

    async def bye(self, session: str) -> None:
        self.sends.pop(session, None)
        await self._deliver(self.broker.leave(session))
