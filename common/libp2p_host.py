"""A libp2p host for relays and server nodes (issue 31): py-libp2p with TCP + Noise + Yamux, identify and ping
(`/ipfs/ping/1.0.0`), and gossipsub v1.1 with message validation and peer scoring where topics are given.

py-libp2p runs on trio; relays and nodes run on asyncio. The host therefore lives on a thread of its own with
its own trio loop, and this class is the narrow bridge between the two: `publish` hands a message over without
waiting (a bounded queue: a mesh that cannot keep up loses gossip, never the caller's time), validators run on
the host's thread (they must be pure and quick: a signature check), and accepted messages of other peers are
handed to `on_message` on the host's thread (the caller moves them to its own loop).

Why py-libp2p and not a js-libp2p sidecar: measured interop on 2026-12-06 (py-libp2p 0.8.1 host, js-libp2p
3.3.11 peer with @libp2p/gossipsub 17.1.1, Noise, Yamux, TCP on loopback): dial, identify, ping and gossipsub in
both directions worked, a message the Python validator refused was dropped (docs/mesh.md).
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("ce.libp2p")

# (topic, data) -> accept? Runs on the host's thread; must not block.
Validator = Callable[[bytes], bool]
# (topic, data, the PeerId that published it): an accepted message of another peer, on the host's thread.
OnMessage = Callable[[str, bytes, str], None]


SCORES_KEPT = 1024  # peers whose last gossipsub score /v1/libp2p shows
# py-libp2p drops a forwarder's messages beyond this many per topic per second (its default, 10, also counted
# this host's own publications and silently dropped 80% of them at 50 profiles/s: BENCHMARKS.md "The CE
# mesh"). Own messages are exempt below; other peers get room for a relay of 10,000 nodes (~33 link samples/s).
PEER_MESSAGES_PER_TOPIC_PER_S = 200.0


class Libp2pError(RuntimeError):
    """The libp2p host could not start (bad listen address, port taken, library missing); says which."""


@dataclass
class MeshCounts:
    """What crossed the host, for /v1/libp2p and /metrics (plain ints: read from the caller's thread)."""

    published: int = 0
    dropped_queue_full: int = 0
    accepted: dict[str, int] = field(default_factory=dict)   # topic -> messages of other peers accepted
    rejected: dict[str, int] = field(default_factory=dict)   # topic -> messages refused at validation


def expand_wildcard(addrs: list[str], interfaces: list[str]) -> list[str]:
    """/ip4/0.0.0.0/tcp/P is where the host listens, not where anyone can reach it: one address per local
    IPv4 interface instead (loopback last, for peers on the same machine)."""
    out: list[str] = []
    for addr in addrs:
        parts = addr.split("/")
        if len(parts) > 2 and parts[1] == "ip4" and parts[2] == "0.0.0.0":
            ordered = sorted(interfaces, key=lambda ip: ipaddress.ip_address(ip).is_loopback)
            out += ["/".join([*parts[:2], ip, *parts[3:]]) for ip in ordered]
        else:
            out.append(addr)
    return list(dict.fromkeys(out))


def local_ipv4() -> list[str]:
    import socket

    import psutil

    return [a.address for addrs in psutil.net_if_addrs().values() for a in addrs if a.family == socket.AF_INET]


class Libp2pHost:
    """One libp2p host on its own thread. `topics` maps each gossipsub topic to its validator (none: ping and
    identify only, as a server node runs it)."""

    def __init__(self, seed: bytes, listen: str, topics: Mapping[str, Validator] | None = None,
                 on_message: OnMessage | None = None, announce: tuple[str, ...] = (),
                 queue_max: int = 1024, heartbeat_interval_s: int = 1, publish_max_per_s: float = 50.0) -> None:
        if len(seed) != 32:
            raise Libp2pError(f"an Ed25519 seed is 32 bytes, got {len(seed)}")
        self._seed = seed
        self.listen = listen
        self.topics = dict(topics or {})
        self.on_message = on_message
        self.announce = announce
        self.queue_max = queue_max
        # py-libp2p signs, re-verifies and encodes each publication in Python (~1.3 ms): back to back they held
        # the GIL beside the relay's event loop (22% of its samples while 10,000 sessions sent their first link
        # samples); paced, the rest waits in the queue and what overflows it is dropped and counted
        self.publish_max_per_s = publish_max_per_s
        self.heartbeat_interval_s = heartbeat_interval_s
        self.counts = MeshCounts()
        self.peer_id = ""
        self.multiaddrs: list[str] = []
        self.scores: dict[str, float] = {}  # connected pubsub peer -> its gossipsub score (heartbeat-fresh)
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._token: Any = None
        self._host: Any = None
        self._send: Any = None
        self._cancel: Any = None

    def start(self, timeout_s: float = 20.0) -> None:
        """Starts the host and waits until it listens; raises Libp2pError saying why it could not."""
        try:
            import multiaddr

            multiaddr.Multiaddr(self.listen)
        except ImportError as exc:
            raise Libp2pError(f"libp2p needs the py-libp2p package (pip install libp2p): {exc}") from None
        except Exception as exc:  # the library raises several types for a malformed address
            raise Libp2pError(f"not a multiaddr: {self.listen!r} ({exc})") from None
        self._thread = threading.Thread(target=self._run, name="libp2p", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout_s):
            raise Libp2pError(f"the libp2p host did not listen on {self.listen} within {timeout_s:g} s")
        if self._error is not None:
            raise Libp2pError(f"the libp2p host could not listen on {self.listen}: {self._error}") from None

    def publish(self, topic: str, data: bytes) -> bool:
        """Hands a message to the host without waiting; False when the host is not running or its queue is
        full (counted)."""
        token, send = self._token, self._send
        if token is None or send is None:
            return False

        def put() -> None:
            import trio

            try:
                send.send_nowait((topic, data))
            except (trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
                self.counts.dropped_queue_full += 1

        try:
            token.run_sync_soon(put)
        except RuntimeError:  # trio.RunFinishedError: the host stopped meanwhile
            return False
        return True

    def ping(self, multiaddrs: list[str], count: int, gap_s: float, timeout_s: float) -> tuple[list[float], int]:
        """Pings the peer at the first of its multiaddrs that connects, `count` times `gap_s` apart on one
        /ipfs/ping/1.0.0 stream (32 random bytes each way): (the RTTs in ms of the pongs that came back, pings
        sent). Blocking: call it from another thread than the host's (asyncio.to_thread). Raises Libp2pError."""
        import trio

        token = self._token
        if token is None:
            raise Libp2pError("the libp2p host is not running")
        try:
            result: tuple[list[float], int] = trio.from_thread.run(self._ping, multiaddrs, count, gap_s, timeout_s,
                                                                    trio_token=token)
        except (trio.TooSlowError, trio.RunFinishedError) as exc:
            raise Libp2pError(f"libp2p ping did not finish within {timeout_s:g} s ({type(exc).__name__})") from None
        return result

    async def _ping(self, multiaddrs: list[str], count: int, gap_s: float,
                    timeout_s: float) -> tuple[list[float], int]:
        import secrets
        import time

        import multiaddr
        import trio
        from libp2p.host.ping import ID as PING_PROTOCOL
        from libp2p.peer.peerinfo import info_from_p2p_addr

        rtts: list[float] = []
        sent = 0
        with trio.fail_after(timeout_s):
            info, failures = None, []
            for text in multiaddrs:
                try:
                    candidate = info_from_p2p_addr(multiaddr.Multiaddr(text))
                    await self._host.connect(candidate)
                    info = candidate
                    break
                except Exception as exc:  # noqa: BLE001 - the next address may connect; all failures are reported
                    failures.append(f"{text}: {type(exc).__name__}")
            if info is None:
                raise Libp2pError(f"no multiaddr of the peer connects ({'; '.join(failures)[:300]})")
            stream = await self._host.new_stream(info.peer_id, [PING_PROTOCOL])
            try:
                for i in range(count):
                    if i:
                        await trio.sleep(gap_s)
                    payload = secrets.token_bytes(32)
                    started = time.perf_counter()
                    sent += 1
                    await stream.write(payload)
                    echoed = b""
                    while len(echoed) < len(payload):
                        chunk = await stream.read(len(payload) - len(echoed))
                        if not chunk:
                            raise Libp2pError("the peer closed the ping stream")
                        echoed += chunk
                    if echoed == payload:  # a pong that is not the ping's is lost, not timed
                        rtts.append((time.perf_counter() - started) * 1000)
            finally:
                with contextlib.suppress(Exception):
                    await stream.close()
        return rtts, sent

    def stop(self, timeout_s: float = 5.0) -> None:
        token, cancel = self._token, self._cancel
        if token is not None and cancel is not None:
            with contextlib.suppress(RuntimeError):
                token.run_sync_soon(cancel.cancel)
        if self._thread is not None:
            self._thread.join(timeout_s)
        self._token = None

    # --- the host's own thread ---

    def _run(self) -> None:
        import trio

        try:
            trio.run(self._main)
        except BaseException as exc:  # noqa: BLE001 - reported to start() or logged; the thread ends either way
            if not self._ready.is_set():
                self._error = exc
            else:
                log.error("the libp2p host stopped", extra={"error": repr(exc)[:300]})
        finally:
            self._token = None
            self._ready.set()

    async def _main(self) -> None:
        import multiaddr
        import trio
        from libp2p import new_host
        from libp2p.crypto.ed25519 import create_new_key_pair

        host = new_host(key_pair=create_new_key_pair(self._seed),
                        announce_addrs=[multiaddr.Multiaddr(a) for a in self.announce] or None)
        send, receive = trio.open_memory_channel[tuple[str, bytes]](self.queue_max)
        async with host.run([multiaddr.Multiaddr(self.listen)]):
            self._host = host
            self.peer_id = host.get_id().to_base58()
            listened = [str(a).split("/p2p/")[0] for a in host.get_addrs()]
            if not listened:  # py-libp2p 0.8.1 logs a failed bind (a port in use) and runs on, listening nowhere
                raise Libp2pError(f"nothing listens on {self.listen} (the port may be in use)")
            self.multiaddrs = [f"{a}/p2p/{self.peer_id}" for a in expand_wildcard(listened, local_ipv4())]
            with trio.CancelScope() as scope:
                self._cancel = scope
                if self.topics:
                    await self._serve_topics(host, send, receive)
                else:  # ping and identify only: the host answers them by itself
                    self._token = trio.lowlevel.current_trio_token()
                    self._ready.set()
                    await trio.sleep_forever()

    async def _serve_topics(self, host: Any, send: Any, receive: Any) -> None:
        import trio
        from libp2p.tools.anyio_service.context import background_trio_service

        pubsub, gossipsub = self._pubsub(host)
        async with background_trio_service(pubsub), background_trio_service(gossipsub):
            await pubsub.wait_until_ready()
            async with trio.open_nursery() as nursery:
                for topic in self.topics:
                    nursery.start_soon(self._deliver, await pubsub.subscribe(topic), topic, host)
                nursery.start_soon(self._publish_loop, pubsub, receive)
                nursery.start_soon(self._watch_scores, pubsub, gossipsub)
                self._send = send
                self._token = trio.lowlevel.current_trio_token()
                self._ready.set()

    def _pubsub(self, host: Any) -> tuple[Any, Any]:
        from libp2p.pubsub.gossipsub import PROTOCOL_ID, PROTOCOL_ID_V11, GossipSub
        from libp2p.pubsub.pubsub import Pubsub
        from libp2p.pubsub.score import ScoreParams, TopicScoreParams

        own = host.get_id()

        class OwnMessagesUnthrottled(GossipSub):
            def _check_spam_protection(self, peer_id: Any, msg: Any) -> bool:
                return bool(peer_id == own or super()._check_spam_protection(peer_id, msg))

        # v1.1 peer scoring, P4 only: every message a peer sends that validation refuses costs it 10 points,
        # decaying by 1% a heartbeat (half in ~70 s at 1 s); below -50 nothing it publishes is taken and below
        # -100 its gossip is ignored (graylist): six bad messages mute a peer for about a minute. py-libp2p
        # 0.8.1 subtracts weight x count (the spec adds a negative weight x count squared), so the weight here
        # is positive; tests/test_mesh.py watches the score fall. The other terms stay off: they need a mesh of
        # many peers to mean anything and punish a quiet honest peer.
        params = ScoreParams(p4_invalid_messages=TopicScoreParams(weight=10.0, cap=1000.0, decay=0.99),
                             publish_threshold=-50.0, gossip_threshold=-50.0, graylist_threshold=-100.0)
        gossipsub = OwnMessagesUnthrottled(protocols=[PROTOCOL_ID_V11, PROTOCOL_ID], degree=6, degree_low=4,
                                           degree_high=12, heartbeat_interval=self.heartbeat_interval_s,
                                           score_params=params,
                                           max_messages_per_topic_per_second=PEER_MESSAGES_PER_TOPIC_PER_S)
        pubsub = Pubsub(host, gossipsub)
        for topic, validator in self.topics.items():
            pubsub.set_topic_validator(topic, self._validator(topic, validator, own.to_bytes()), False)
        return pubsub, gossipsub

    def _validator(self, topic: str, validator: Validator, own: bytes) -> Callable[[Any, Any], bool]:
        def validate(_peer: Any, msg: Any) -> bool:
            if bytes(msg.from_id) == own:
                return True  # this host's own publication: its caller checked it already (py-libp2p asks again)
            try:
                ok = bool(validator(bytes(msg.data)))
            except Exception:  # noqa: BLE001 - a validator bug refuses the message; it never stops the host
                log.exception("mesh validator failed")
                ok = False
            if not ok:
                self.counts.rejected[topic] = self.counts.rejected.get(topic, 0) + 1
            return ok
        return validate

    async def _deliver(self, subscription: Any, topic: str, host: Any) -> None:
        from libp2p.peer.id import ID

        own = host.get_id()
        while True:
            msg = await subscription.get()
            sender = ID(msg.from_id)
            if sender == own:
                continue
            self.counts.accepted[topic] = self.counts.accepted.get(topic, 0) + 1
            if self.on_message is not None:
                try:
                    self.on_message(topic, bytes(msg.data), sender.to_base58())
                except Exception:  # noqa: BLE001 - the caller's bug must not stop delivery
                    log.exception("mesh message handler failed")

    async def _watch_scores(self, pubsub: Any, gossipsub: Any) -> None:
        """Every heartbeat: each connected pubsub peer's gossipsub score, read on this thread (the scorer's
        dicts are not safe to read from another); a peer that left keeps its last score (the latest
        SCORES_KEPT peers), and the whole dict is swapped in for /v1/libp2p."""
        import trio

        topics = list(self.topics)
        while True:
            scorer = gossipsub.scorer
            if scorer is not None:
                now = {peer.to_base58(): round(scorer.score(peer, topics), 3) for peer in list(pubsub.peers)}
                kept = {p: s for p, s in self.scores.items() if p not in now}
                self.scores = dict(list(kept.items())[-(SCORES_KEPT - len(now)):] if len(now) < SCORES_KEPT else [])
                self.scores.update(now)
            await trio.sleep(self.heartbeat_interval_s)

    async def _publish_loop(self, pubsub: Any, receive: Any) -> None:
        import trio

        gap_s = 1.0 / max(self.publish_max_per_s, 1e-3)
        async for topic, data in receive:
            started = trio.current_time()
            try:
                await pubsub.publish(topic, data)
                self.counts.published += 1
            except Exception as exc:  # noqa: BLE001 - one failed publish (no peers yet) must not end the loop
                log.debug("mesh publish failed", extra={"topic": topic, "error": repr(exc)[:200]})
            await trio.sleep(max(0.0, gap_s - (trio.current_time() - started)))
