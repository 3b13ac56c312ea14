"""The relay on the mesh: a libp2p host with the relay's own key (PeerId = relay id) that publishes what the
relay accepted and hands what other peers published to the relay's own entry points.

Narrow on purpose (h11's rule): it needs two intake callables (the ones HTTP uses) and a signer, not the
relay. What it publishes (docs/mesh.md): every profile the relay accepts from a node, every LinkSample it
confirms, each roll call's signed Scoreboard. What it takes: profiles and LinkSamples, through the same
`post_profile` / `add_link` as POST /v1/profiles and /v1/links, so a mesh message meets every rule an HTTP
one does; it never publishes again what it took from the mesh (gossipsub has already carried it on).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from capsule.signing import Signer, sign
from common.libp2p_host import Libp2pHost
from web.api.problems import Problem
from web.api.ratelimit import TokenBuckets
from web.mesh.messages import (
    KIND_OF_TOPIC,
    TOPIC_DESCRIPTIONS,
    TOPIC_NETGRAPH,
    TOPIC_PROFILES,
    TOPIC_SCOREBOARD,
    canonical_message,
    judge,
    scoreboard_body,
)

log = logging.getLogger("ce.relay.mesh")

TakeProfile = Callable[[bytes], Awaitable[Any]]
TakeLink = Callable[[bytes, float], Awaitable[Any]]
# (the sample of the edge last published or None, the new one) -> publish it? (web/map/links.py worth_gossiping)
WorthSending = Callable[[dict[str, Any] | None, dict[str, Any]], bool]


def _validator(topic: str) -> Callable[[bytes], bool]:
    return lambda data: judge(topic, data).valid


class RelayMesh:
    def __init__(self, seed: bytes, listen: str, announce: tuple[str, ...], signer: Signer,
                 take_profile: TakeProfile, take_link: TakeLink, worth_sending: WorthSending,
                 intake_max: int = 256, intake_rate_per_s: float = 50.0, intake_burst: int = 100) -> None:
        self.signer = signer
        self.worth_sending = worth_sending
        # each edge as last published: a relay re-measures its landmark edges at every pong, and the mesh gets an
        # edge again only when it moved or aged (the cluster's rule), not 360 times an hour
        self.links_sent: dict[tuple[str, str], dict[str, Any]] = {}
        self.take_profile = take_profile
        self.take_link = take_link
        self.intake_max = intake_max  # mesh messages being judged at once; beyond it they are dropped (counted)
        # what the whole mesh may hand the relay's entry points, one client's HTTP allowance (--ip-rate, --ip-burst):
        # free PeerIds must not buy more than one address gets over HTTP
        self.intake = TokenBuckets(intake_rate_per_s, intake_burst)
        self.outcomes: Counter[str] = Counter()  # "<kind>:<outcome>": what the relay made of mesh messages
        self._pending: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.host = Libp2pHost(seed, listen, {topic: _validator(topic) for topic in KIND_OF_TOPIC},
                               self._on_message, announce)

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        await asyncio.to_thread(self.host.start)
        log.info("libp2p host listening", extra={"peer_id": self.host.peer_id, "multiaddrs": self.host.multiaddrs})

    async def stop(self) -> None:
        await asyncio.to_thread(self.host.stop)
        for task in list(self._pending):
            task.cancel()

    def info(self) -> dict[str, Any]:
        """GET /v1/libp2p."""
        counts = self.host.counts
        return {"peer_id": self.host.peer_id, "multiaddrs": self.host.multiaddrs,
                "topics": {t: {"record": KIND_OF_TOPIC[t], "carries": TOPIC_DESCRIPTIONS[t]} for t in KIND_OF_TOPIC},
                "protocols": ["/ipfs/id/1.0.0", "/ipfs/ping/1.0.0", "/meshsub/1.1.0"],
                "published": counts.published, "dropped_queue_full": counts.dropped_queue_full,
                "received": dict(counts.accepted), "refused_at_validation": dict(counts.rejected),
                "taken": dict(self.outcomes),
                "peer_scores": dict(self.host.scores)}

    # --- what the relay publishes ---

    def publish_profile(self, body: bytes) -> None:
        self.host.publish(TOPIC_PROFILES, body)

    def publish_link(self, sample: dict[str, Any]) -> None:
        a, b = str(sample["a"]), str(sample["b"])
        key = (a, b) if a < b else (b, a)
        if self.worth_sending(self.links_sent.get(key), sample):
            self.links_sent[key] = sample
            self.host.publish(TOPIC_NETGRAPH, canonical_message(sample))

    def publish_scoreboard(self, relay_id: str, call: dict[str, Any]) -> None:
        self.host.publish(TOPIC_SCOREBOARD, canonical_message(sign("Scoreboard", scoreboard_body(relay_id, call),
                                                                   self.signer)))

    # --- what it takes ---

    def _on_message(self, topic: str, data: bytes, sender: str) -> None:
        """On the host's thread: moves the message to the relay's loop."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._spawn, topic, data)

    def _spawn(self, topic: str, data: bytes) -> None:
        if topic == TOPIC_SCOREBOARD:
            self.outcomes["Scoreboard:read"] += 1  # another relay's totals: served by that relay, summed by none
            return
        if len(self._pending) >= self.intake_max:
            self.outcomes[f"{KIND_OF_TOPIC.get(topic, '?')}:dropped_busy"] += 1
            return
        if self.intake.take("mesh", time.monotonic()) > 0:
            self.outcomes[f"{KIND_OF_TOPIC.get(topic, '?')}:rate_limited"] += 1
            return
        task = asyncio.get_running_loop().create_task(self._take(topic, data))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _take(self, topic: str, data: bytes) -> None:
        kind = KIND_OF_TOPIC.get(topic, "?")
        try:
            if topic == TOPIC_PROFILES:
                await self.take_profile(data)
            elif topic == TOPIC_NETGRAPH:
                await self.take_link(data, time.time())
            self.outcomes[f"{kind}:taken"] += 1
        except Problem as problem:  # the rules every other way in meets: counted, never raised
            self.outcomes[f"{kind}:{problem.code}"] += 1
        except Exception:  # noqa: BLE001 - a relay bug on one message must not stop the mesh
            self.outcomes[f"{kind}:error"] += 1
            log.exception("a mesh message failed")
