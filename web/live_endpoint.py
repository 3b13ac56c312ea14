"""WS /v1/live as module-level Starlette handlers over the pure protocol of web/live.py: receive a frame,
let the Session judge it, carry out what it says against the relay, send the answer. One handler per
message type; a bad message gets an error frame and the session goes on (until MAX_ERRORS)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect

from web.challenge_desk import Challengee
from web.live import BW_PROBE_BYTES, LiveError, Session, parse_message
from web.problems import Problem
from web.relay import Relay


@dataclass
class Connection:
    ws: WebSocket
    relay: Relay
    session: Session
    probe_rng: random.Random = field(default_factory=random.Random)
    challengee: Challengee | None = None  # set once the node said hello (it answers challenges)

    async def send(self, message: dict[str, Any] | str) -> None:
        """Sends from outside the receive loop (the challenge desk; a roll call passes JSON text it encoded
        before its first send): a closed socket is not its problem."""
        with contextlib.suppress(WebSocketDisconnect, RuntimeError, OSError):
            if isinstance(message, str):
                await self.ws.send_text(message)
            else:
                await self.ws.send_json(message)


async def on_heartbeat(conn: Connection, message: dict[str, Any]) -> None:
    relay, session = conn.relay, conn.session
    node_id = session.heartbeat(message.get("heartbeat"))
    if not relay.atlas.heartbeat(node_id, time.time(), session.rtt_ms):
        raise LiveError("unknown_node", "post a profile (POST /v1/profiles) before heartbeats")
    relay.metrics.heartbeats += 1
    if conn.challengee is not None:
        conn.challengee.node_id = node_id
    if relay.cluster is not None:
        relay.cluster.local_heartbeat(node_id, time.time())
    await conn.ws.send_json({"type": "ack", "seq": session.last_seq})


def answering_a_challenge(conn: Connection) -> bool:
    """Whether the node owes this relay a challenge's answer now: its pongs may wait behind that work."""
    return conn.challengee is not None and conn.challengee.challenge is not None


async def on_pong(conn: Connection, message: dict[str, Any]) -> None:
    relay, session = conn.relay, conn.session
    rtt = session.pong(message.get("id"), time.perf_counter(), answering_a_challenge(conn))
    if session.node_id:
        relay.atlas.heartbeat(session.node_id, time.time(), rtt)
    if conn.challengee is not None:  # the median: a node cannot buy time with a few delayed pongs
        conn.challengee.rtt_ms = session.rtt_median_ms
    body = session.link_body(relay.relay_id, time.time())
    if body is not None:
        await conn.ws.send_json({"type": "cosign", "sample": relay.sign_link(body)})


async def on_bw_ack(conn: Connection, message: dict[str, Any]) -> None:
    conn.session.bw_ack(message.get("n"), time.perf_counter())


async def on_cosigned(conn: Connection, message: dict[str, Any]) -> None:
    sample = message.get("sample")
    if not isinstance(sample, dict) or sample.get("b") != conn.relay.relay_id:
        raise LiveError("invalid_message", "cosigned needs the sample this relay sent")
    try:
        await conn.relay.add_link(json.dumps(sample).encode(), time.time())
    except Problem as problem:
        raise LiveError(problem.code, problem.detail or problem.title) from None


async def on_hello(conn: Connection, message: dict[str, Any]) -> None:
    answers = message.get("answers")
    if not isinstance(answers, list) or not all(isinstance(a, str) for a in answers):
        raise LiveError("invalid_message", "hello names the challenges this client answers: {\"answers\": [\"sgemm\"]}")
    host = conn.ws.client.host if conn.ws.client else "unknown"
    # without "sgemm" the session opts out (a browser tab that went hidden): no new challenges, though one in
    # flight must still be answered
    conn.challengee = conn.relay.challenges.hello(conn.session.session, host, conn.send, frozenset(answers))
    conn.challengee.node_id = conn.session.node_id
    conn.challengee.rtt_ms = conn.session.rtt_median_ms


def challengee(conn: Connection) -> Challengee:
    if conn.challengee is None or conn.challengee.node_id is None:
        raise LiveError("unknown_challenge", "say hello and send a heartbeat before answering challenges")
    return conn.challengee


async def on_commit(conn: Connection, message: dict[str, Any]) -> None:
    await conn.relay.challenges.on_commit(challengee(conn), message)


async def on_opening(conn: Connection, message: dict[str, Any]) -> None:
    await conn.relay.challenges.on_opening(challengee(conn), message)


async def on_peers(conn: Connection, message: dict[str, Any]) -> None:
    await conn.relay.peers.on_peers(conn.session.session, conn.session.node_id, conn.send, message)


async def on_peer_offer(conn: Connection, message: dict[str, Any]) -> None:
    await conn.relay.peers.on_offer(conn.session.session, message)


async def on_peer_answer(conn: Connection, message: dict[str, Any]) -> None:
    await conn.relay.peers.on_answer(conn.session.session, message)


async def on_peer_sample(conn: Connection, message: dict[str, Any]) -> None:
    await conn.relay.peers.on_sample(conn.session.session, message)


async def on_peer_failed(conn: Connection, message: dict[str, Any]) -> None:
    await conn.relay.peers.on_failed(conn.session.session, message)


HANDLERS: dict[str, Callable[[Connection, dict[str, Any]], Awaitable[None]]] = {
    "heartbeat": on_heartbeat, "pong": on_pong, "bw_ack": on_bw_ack, "cosigned": on_cosigned, "hello": on_hello,
    "commit": on_commit, "opening": on_opening, "peers": on_peers, "peer_offer": on_peer_offer,
    "peer_answer": on_peer_answer, "peer_sample": on_peer_sample, "peer_failed": on_peer_failed}


# The probe's payload: random once per process, so it cannot be compressed, without paying os.urandom for
# 256 KiB on every probe (measured: at 10,000 sessions that alone was a visible share of the relay's CPU).
BW_PROBE_PAYLOAD = os.urandom(BW_PROBE_BYTES)


async def pinger(conn: Connection) -> None:
    """Pings every heartbeat interval (RTT), and now and then a bandwidth probe right behind the ping, within
    the relay-wide probe budget (a mass reconnect must not turn into gigabytes of probes at once)."""
    config, session = conn.relay.config, conn.session
    while True:
        await asyncio.sleep(config.heartbeat_interval_s)
        await conn.ws.send_json(session.ping(time.perf_counter(), answering_a_challenge(conn)))
        if (session.wants_bw_probe(conn.probe_rng.random(), config.bw_probe_chance)
                and conn.relay.bw_probe_budget.take("probes", time.monotonic()) == 0):
            session.start_bw_probe(time.perf_counter())
            await conn.ws.send_bytes(BW_PROBE_PAYLOAD)


async def receive_message(ws: WebSocket) -> dict[str, Any]:
    """The next message; a binary frame is parsed like text (JSON or LiveError), never a dead session."""
    frame = await ws.receive()
    if frame["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(frame.get("code", 1000))
    return parse_message(frame.get("text") or frame.get("bytes") or b"")


async def live(ws: WebSocket) -> None:
    relay: Relay = ws.app.state.relay
    await ws.accept()
    conn = Connection(ws, relay, Session(relay.new_session_id()))
    relay.metrics.ws_sessions += 1
    await ws.send_json({"type": "welcome", "relay": relay.relay_id, "session": conn.session.session,
                        "heartbeat_interval_s": relay.config.heartbeat_interval_s})
    ping_task = asyncio.create_task(pinger(conn))
    try:
        while True:
            try:
                message = await receive_message(ws)
                handler = HANDLERS.get(message["type"])
                if handler is None:
                    raise LiveError("unknown_type", f"unknown message type {message['type'][:40]!r}")
                await handler(conn, message)
            except LiveError as exc:
                frame, close = conn.session.refuse(exc)
                await ws.send_json(frame)
                if close:
                    await ws.close(code=1008, reason="too many invalid messages")
                    return
    except WebSocketDisconnect:
        pass
    finally:
        ping_task.cancel()
        relay.challenges.bye(conn.session.session)
        relay.metrics.ws_sessions -= 1
        await relay.peers.bye(conn.session.session)  # last: it sends (the other side of a probe in flight)
