"""A server node's side of node-to-node probes (issue 18, item 1; the relay's broker and the protocol are
web/map/peer_probes.py; the browser's side is browser_node/peer-probe.js). The relay pairs two live nodes and
carries their WebRTC offer and answer; they measure their RTT on a data channel (aiortc here) and both sign the
LinkSample: the offerer proposes its lowest RTT (sig_a), the answerer co-signs only if its own pings agree
(sig_b) and hands the sample to the relay. Runs its own asyncio loop on a thread beside the live session.

On the data channel ("ce-probe", unordered, no retransmits: a lost ping is loss, not a late RTT), JSON text:
    {"t": "ping", "i": N} -> {"t": "pong", "i": N}     PEER_PINGS each way, PEER_PING_GAP_S apart
    A -> B {"t": "cosign", "sample": LinkSample (sig_a)};  B -> A {"t": "cosigned", "sample": (sig_a, sig_b)}"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

from capsule.model import LINK_RTT_MAX_MS, LINK_RTT_MIN_MS
from capsule.signing import Signer, check_signature, default_verify, node_id, sign

PEER_PINGS = 5
PEER_PING_GAP_S = 0.1
PONG_WAIT_S = 2.0         # a ping unanswered this long is lost
PROBE_DEADLINE_S = 25.0   # the node's own end of a probe (the relay's is peer_probe_timeout_s, 30 s)
# The answerer co-signs a proposed RTT within this factor (and slack, ms) of its own median: both sides time
# the same path, so only event-loop noise separates them; a bigger gap is a lie or a broken clock.
AGREE_FACTOR = 1.5
AGREE_SLACK_MS = 3.0


def summarize(rtts: list[float], sent: int) -> dict[str, float]:
    """rtt (the lowest: queueing and busy event loops only ever add to a ping, so the least delayed one is
    the path's; web/sessions/live.py says more beside PING_ID_LIMIT), jitter (mean absolute difference of successive
    samples) and loss."""
    if not rtts:
        raise ValueError("no pong came back")
    jitter = sum(abs(x - y) for x, y in zip(rtts, rtts[1:], strict=False)) / max(1, len(rtts) - 1)
    return {"rtt_ms": round(max(LINK_RTT_MIN_MS, min(rtts)), 3), "jitter_ms": round(jitter, 3),
            "loss": round(max(0.0, 1 - len(rtts) / max(1, sent)), 3)}


def agrees(proposed_ms: float, own_ms: float) -> bool:
    return own_ms / AGREE_FACTOR - AGREE_SLACK_MS <= proposed_ms <= own_ms * AGREE_FACTOR + AGREE_SLACK_MS


class _Channel:
    """One probe's data channel: answers the peer's pings and times its own."""

    def __init__(self, channel: Any) -> None:
        self.channel = channel
        self.rtts: list[float] = []
        self.sent = 0
        self._pings: dict[int, float] = {}
        self.inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.opened = asyncio.Event()
        channel.on("open", self.opened.set)
        channel.on("message", self._on_message)
        if channel.readyState == "open":
            self.opened.set()

    def _on_message(self, text: Any) -> None:
        try:
            message = json.loads(text)
        except (TypeError, ValueError):
            return
        if not isinstance(message, dict):
            return
        if message.get("t") == "ping":
            self.channel.send(json.dumps({"t": "pong", "i": message.get("i")}))
        elif message.get("t") == "pong" and type(message.get("i")) is int:
            sent = self._pings.pop(message["i"], None)
            if sent is not None:
                self.rtts.append((time.perf_counter() - sent) * 1000)
        else:
            self.inbox.put_nowait(message)

    async def measure(self) -> dict[str, float]:
        await asyncio.wait_for(self.opened.wait(), PROBE_DEADLINE_S)
        for _ in range(PEER_PINGS):
            i = secrets.randbits(32)  # unpredictable: a pong sent before its ping arrived cannot match it
            self._pings[i] = time.perf_counter()
            self.sent += 1
            self.channel.send(json.dumps({"t": "ping", "i": i}))
            await asyncio.sleep(PEER_PING_GAP_S)
        deadline = time.monotonic() + PONG_WAIT_S
        while self._pings and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        return summarize(self.rtts, self.sent)

    async def expect(self, kind: str) -> dict[str, Any]:
        message = await asyncio.wait_for(self.inbox.get(), PROBE_DEADLINE_S)
        if message.get("t") != kind:
            raise ValueError(f"expected {kind} on the data channel, got {str(message.get('t'))[:40]}")
        return message


class PeerProber:
    """Takes the relay's peer-probe messages (from the live session's thread) and runs each probe on its own
    event loop; `send` puts a message on the current live session (thread-safe)."""

    def __init__(self, signer: Signer, send: Callable[[dict[str, Any]], None], libp2p: Any = None) -> None:
        self.signer = signer
        self.libp2p = libp2p  # common.libp2p_host.Libp2pHost: probes over libp2p ping where the relay asks
        self.me = node_id(signer)
        self.send = send
        self.measured: list[dict[str, Any]] = []  # co-signed samples this node took part in
        self.done: list[dict[str, Any]] = []      # the relay's peer_done messages
        self.failures: list[str] = []
        self._answers: dict[str, asyncio.Future[str]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="peer-probes", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Ends the probes in flight (their connections closed), then the loop."""
        async def drain() -> None:
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(drain(), self._loop).result(timeout=5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    def proposal(self, own: dict[str, float]) -> dict[str, float]:
        """What the offerer proposes from its own pings (tests play a liar through this hook)."""
        return own

    def handle(self, message: dict[str, Any]) -> None:
        """One relay message of type peer_probe, peer_answer or peer_done."""
        kind = message.get("type")
        if kind == "peer_done":
            self.done.append(message)
            self._loop.call_soon_threadsafe(self._ended, str(message.get("probe")), str(message.get("code")))
            return
        if kind == "peer_answer":
            self._loop.call_soon_threadsafe(self._answered, str(message.get("probe")), message.get("sdp"))
            return
        self._loop.call_soon_threadsafe(self._start, message)

    def _start(self, message: dict[str, Any]) -> None:
        task = self._loop.create_task(self._probe(message))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _ended(self, probe: str, code: str) -> None:
        """The relay ended the probe (the other side left, failed or went silent): stop waiting for it."""
        future = self._answers.get(probe)
        if future is not None and not future.done():
            future.set_exception(RuntimeError(f"the relay ended the probe ({code})"))

    def _answered(self, probe: str, sdp: Any) -> None:
        future = self._answers.get(probe)
        if future is not None and not future.done():
            future.set_result(str(sdp))

    async def _probe(self, message: dict[str, Any]) -> None:
        probe, peer = str(message.get("probe")), str(message.get("peer"))
        if message.get("transport") == "libp2p":
            try:
                await asyncio.wait_for(self._ping_probe(message, probe, peer), PROBE_DEADLINE_S)
            except Exception as exc:  # noqa: BLE001 - whatever broke, the relay is told
                self._failed(probe, exc)
            return
        await self._webrtc_probe(message, probe, peer)

    def _failed(self, probe: str, exc: BaseException) -> None:
        reason = f"{type(exc).__name__}: {exc}"[:200]
        self.failures.append(reason)
        with contextlib.suppress(Exception):
            self.send({"type": "peer_failed", "probe": probe, "reason": reason})

    async def _ping_probe(self, message: dict[str, Any], probe: str, peer: str) -> None:
        """libp2p ping (docs/mesh.md): each side pings the other itself; the offerer proposes, the answerer
        co-signs only what its own pings agree with (as on the WebRTC data channel)."""
        addrs = [a for a in message.get("multiaddrs") or [] if isinstance(a, str) and a.endswith(f"/p2p/{peer}")]
        if self.libp2p is None or not addrs:
            raise ValueError("no libp2p host here, or no multiaddr of the peer that names it")
        rtts, sent = await asyncio.to_thread(self.libp2p.ping, addrs[:8], PEER_PINGS, PEER_PING_GAP_S,
                                             PROBE_DEADLINE_S - 5)
        own = summarize(rtts, sent)
        if message.get("role") == "offer":
            body = {"a": self.me, "b": peer, **self.proposal(own), "bw_mbps": None, "measured_at": int(time.time())}
            self.send({"type": "peer_offer", "probe": probe, "sample": sign("LinkSample", body, self.signer, "sig_a")})
            return
        cosigned = self._cosign(message.get("sample"), peer, own)
        self.send({"type": "peer_sample", "probe": probe, "sample": cosigned})
        self.measured.append(cosigned)

    def _cosign(self, sample: Any, peer: str, own: dict[str, float]) -> dict[str, Any]:
        """The answerer's checks of the offerer's proposal, then its signature (sig_b)."""
        if not isinstance(sample, dict) or sample.get("a") != peer or sample.get("b") != self.me:
            raise ValueError("the peer proposed a sample that is not of our link")
        check_signature("LinkSample", sample, "sig_a", peer, default_verify())
        rtt = sample.get("rtt_ms")
        if not isinstance(rtt, int | float) or not LINK_RTT_MIN_MS <= rtt <= LINK_RTT_MAX_MS:
            raise ValueError("the peer proposed an RTT outside physics")
        if not agrees(float(rtt), own["rtt_ms"]):
            raise ValueError(f"the peer proposed {rtt} ms; this side measured {own['rtt_ms']} ms")
        return sign("LinkSample", sample, self.signer, "sig_b")

    async def _webrtc_probe(self, message: dict[str, Any], probe: str, peer: str) -> None:
        from aiortc import RTCConfiguration, RTCIceServer, RTCPeerConnection  # imported only where probes run

        servers = [RTCIceServer(urls=u) for u in message.get("ice_servers") or [] if isinstance(u, str)]
        pc = RTCPeerConnection(RTCConfiguration(iceServers=servers))  # [] : no default (Google) STUN server
        try:
            if message.get("role") == "offer":
                await asyncio.wait_for(self._offer(pc, probe, peer), PROBE_DEADLINE_S)
            else:
                await asyncio.wait_for(self._answer(pc, probe, peer, str(message.get("sdp"))), PROBE_DEADLINE_S)
        except Exception as exc:  # whatever broke (ICE, DTLS, a lying peer), the relay is told and the pc closed
            self._failed(probe, exc)
        finally:
            self._answers.pop(probe, None)
            await pc.close()

    async def _offer(self, pc: Any, probe: str, peer: str) -> None:
        from aiortc import RTCSessionDescription

        channel = _Channel(pc.createDataChannel("ce-probe", ordered=False, maxRetransmits=0))
        self._answers[probe] = asyncio.get_running_loop().create_future()
        await pc.setLocalDescription(await pc.createOffer())  # aiortc gathers every candidate first
        self.send({"type": "peer_offer", "probe": probe, "sdp": pc.localDescription.sdp})
        answer = await self._answers[probe]
        await pc.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
        own = await channel.measure()
        body = {"a": self.me, "b": peer, **self.proposal(own), "bw_mbps": None, "measured_at": int(time.time())}
        channel.channel.send(json.dumps({"t": "cosign", "sample": sign("LinkSample", body, self.signer, "sig_a")}))
        sample = (await channel.expect("cosigned")).get("sample")
        if not isinstance(sample, dict) or any(sample.get(k) != v for k, v in body.items()):
            raise ValueError("the peer co-signed something else than the proposed sample")
        check_signature("LinkSample", sample, "sig_b", peer, default_verify())
        self.measured.append(sample)

    async def _answer(self, pc: Any, probe: str, peer: str, offer: str) -> None:
        from aiortc import RTCSessionDescription

        opened: asyncio.Future[_Channel] = asyncio.get_running_loop().create_future()
        def on_datachannel(ch: Any) -> None:
            if not opened.done():
                opened.set_result(_Channel(ch))

        pc.on("datachannel", on_datachannel)
        await pc.setRemoteDescription(RTCSessionDescription(sdp=offer, type="offer"))
        await pc.setLocalDescription(await pc.createAnswer())
        self.send({"type": "peer_answer", "probe": probe, "sdp": pc.localDescription.sdp})
        channel = await opened
        own = await channel.measure()
        cosigned = self._cosign((await channel.expect("cosign")).get("sample"), peer, own)
        channel.channel.send(json.dumps({"t": "cosigned", "sample": cosigned}))
        self.send({"type": "peer_sample", "probe": probe, "sample": cosigned})
        self.measured.append(cosigned)
        await asyncio.sleep(0.2)  # the cosigned message leaves before the connection closes
