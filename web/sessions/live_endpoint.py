"""WS /v1/live as module-level Starlette handlers over the pure protocol of web/sessions/live.py: receive a frame,
let the Session judge it, carry out what it says against the relay, send the answer. One handler per
message type; a bad message gets an error frame and the session goes on (until MAX_ERRORS). Before any of
that, web/sessions/live_guard.py: sessions and bytes per source address, and each frame's size for its type, read
before it is parsed. A frame's arrival is stamped as soon as receive() returns, before parsing or any other
await: answers and pongs are timed from it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect

from common.multiaddrs import parse_multiaddrs
from web.api.problems import Problem
from web.jobs.desk import ResultError
from web.map.links import landmark_sample_due
from web.proof.challenge_desk import Challengee
from web.relay import Relay
from web.sessions.direct_frames import SCOPE_KEY, FrameWriter
from web.sessions.live import BW_PROBE_BYTES, MAX_ERRORS, LiveError, Session, parse_message
from web.sessions.live_guard import Refusal, address_key, close_reason, screen

log = logging.getLogger("ce.live")


@dataclass
class Connection:
    ws: WebSocket
    relay: Relay
    session: Session
    probe_rng: random.Random = field(default_factory=random.Random)
    challengee: Challengee | None = None  # set once the node said hello (it answers challenges)
    address: str = "unknown"  # what the per-address limits count (web/sessions/live_guard.py address_key)
    arrived: float = 0.0  # perf_counter when the frame being handled was received, before it was parsed

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
    first = session.node_id is None
    node_id = session.heartbeat(message.get("heartbeat"))
    if not relay.atlas.heartbeat(node_id, time.time(), session.rtt_ms):
        raise LiveError("unknown_node", "post a profile (POST /v1/profiles) before heartbeats")
    if first:
        await bind(conn, node_id)
    relay.metrics.heartbeats += 1
    if conn.challengee is not None:
        conn.challengee.node_id = node_id
    if relay.cluster is not None:
        relay.cluster.local_heartbeat(node_id, time.time())
    await conn.ws.send_json({"type": "ack", "seq": session.last_seq})


async def bind(conn: Connection, node_id: str) -> None:
    """One key is one node: a session whose first signed heartbeat names a node that already has a live session
    here supersedes that one. Both are told (the older is closed with code 4409 "superseded", and a client
    that gets it stops instead of reconnecting: two processes with one key would otherwise take turns forever);
    before, a second `ce-bench node` with a running `up`'s key went live beside it without a word."""
    older: Connection | None = conn.relay.bound.get(node_id)
    conn.relay.bound[node_id] = conn
    if older is None or older is conn:
        return
    conn.relay.metrics.superseded += 1
    await older.send({"type": "error", "code": "superseded",
                      "detail": f"another session of this node ({node_id}, the same key) connected from "
                                f"{conn.address}: one key is one node, so this session is closed. Two processes "
                                "share this key: stop one, or give it its own key (ce-bench keys rotate)."})
    with contextlib.suppress(WebSocketDisconnect, RuntimeError, OSError):
        await older.ws.close(code=4409, reason="superseded by a newer session of this node")
    await conn.send({"type": "notice", "code": "superseded_older",
                     "detail": f"this node ({node_id}) had a live session from {older.address}; it was closed: "
                               "one key is one node. If another process uses this key, stop one of them."})
    log.warning("a second session of one node superseded the first",
                extra={"node": node_id, "older": older.address, "newer": conn.address})


def answering_a_challenge(conn: Connection) -> bool:
    """Whether the node owes this relay a challenge's answer now: its pongs may wait behind that work."""
    return conn.challengee is not None and conn.challengee.answering


async def on_pong(conn: Connection, message: dict[str, Any]) -> None:
    relay, session = conn.relay, conn.session
    rtt = session.pong(message.get("id"), conn.arrived, answering_a_challenge(conn))
    if session.node_id:  # the pong of a random ping id on a session the node's signed heartbeat bound: it is live
        relay.metrics.pongs += 1
        now = time.time()
        relay.atlas.heartbeat(session.node_id, now, rtt)
        if relay.cluster is not None:
            relay.cluster.local_heartbeat(session.node_id, now)
    if conn.challengee is not None:  # the median: a node cannot buy time with a few delayed pongs
        conn.challengee.rtt_ms = session.rtt_median_ms
    body = session.link_body(relay.relay_id, time.time())
    held = relay.links.measured(body["a"], relay.relay_id) if body is not None else None
    # a session's first sample always (a node that reconnects is measured afresh), later ones when they tell more
    if body is not None and (not session.cosigns_asked or landmark_sample_due(held, body, relay.config)):
        session.cosigns_asked += 1
        await conn.ws.send_json({"type": "cosign", "sample": relay.sign_link(body)})


async def on_bw_ack(conn: Connection, message: dict[str, Any]) -> None:
    conn.session.bw_ack(message.get("n"), conn.arrived)


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
    withdrawable = message.get("withdrawable", False)
    if not isinstance(withdrawable, bool):
        raise LiveError("invalid_message", f"hello's withdrawable is true or false, not {withdrawable!r:.40}")
    writer = conn.ws.scope.get(SCOPE_KEY)  # the roll call's fast path, where the server offers it
    conn.challengee = conn.relay.challenges.hello(conn.session.session, host, conn.send, frozenset(answers),
                                                  writer.writer if isinstance(writer, FrameWriter) else None,
                                                  withdrawable)
    conn.challengee.node_id = conn.session.node_id
    conn.challengee.rtt_ms = conn.session.rtt_median_ms


async def on_libp2p(conn: Connection, message: dict[str, Any]) -> None:
    """A server node's libp2p host (docs/mesh.md): where any peer pings and identifies it, shown at GET
    /v1/nodes/{id}. Each must end in /p2p/ and this session's NodeId, so a session names only itself."""
    node_id = conn.session.node_id
    if not node_id:
        raise LiveError("invalid_message", "send a heartbeat before libp2p: its multiaddrs must name the "
                                           "session's node")
    try:
        conn.relay.multiaddrs[node_id] = parse_multiaddrs(message.get("multiaddrs"), node_id)
    except ValueError as exc:
        raise LiveError("invalid_message", f"multiaddrs: {exc}") from None


def challengee(conn: Connection) -> Challengee:
    if conn.challengee is None or conn.challengee.node_id is None:
        raise LiveError("unknown_challenge", "say hello and send a heartbeat before answering challenges")
    return conn.challengee


def relay_lag(conn: Connection, since: float | None) -> float:
    """The relay's longest event-loop stall from `since` (when the relay sent what is being answered) to this
    frame's arrival: what the answer is forgiven (web/sessions/loop_lag.py lag_allowance)."""
    return conn.relay.loop_lag.worst_between(since, conn.arrived) if since is not None else 0.0


async def on_commit(conn: Connection, message: dict[str, Any]) -> None:
    who = challengee(conn)
    ch = who.in_flight(message.get("id"))  # the challenge this commitment names
    lag = relay_lag(conn, ch.sent_at if ch else None)
    await conn.relay.challenges.on_commit(who, message, conn.arrived, lag)


async def on_opening(conn: Connection, message: dict[str, Any]) -> None:
    who = challengee(conn)
    ch = who.in_flight(message.get("id"))
    lag = relay_lag(conn, ch.open_sent_at if ch else None)
    await conn.relay.challenges.on_opening(who, message, conn.arrived, lag)


def opening_due(conn: Connection) -> bool:
    """Whether the relay waits for an opening on this session (of any challenge in flight): the only frame
    that may be large."""
    who = conn.challengee
    return who is not None and any(ch.open_sent_at is not None and not ch.checking
                                   for ch in who.challenges.values())


async def on_jobs(conn: Connection, message: dict[str, Any]) -> None:
    """The node offers `slots` for dispatched work (web/jobs/; 0 withdraws): after its heartbeat."""
    slots = message.get("slots")
    if conn.session.node_id is None:
        raise LiveError("invalid_message", "send a heartbeat before jobs: the slots are the session's node's")
    if type(slots) is not int or not 0 <= slots <= 256:
        raise LiveError("invalid_message", f"jobs: slots is an integer 0-256, not {slots!r:.40}")
    kinds = message.get("kinds", ["wasi"])
    if not isinstance(kinds, list) or not kinds or not set(kinds) <= {"wasi", "capsule"}:
        raise LiveError("invalid_message", f"jobs: kinds is a list of \"wasi\", \"capsule\", not {kinds!r:.60}")
    conn.relay.jobs.join(conn.session.session, conn.session.node_id, conn.address, slots, conn.send,
                         frozenset(kinds))


async def on_task_result(conn: Connection, message: dict[str, Any]) -> None:
    node_id = conn.session.node_id
    if node_id is None:
        raise LiveError("invalid_message", "send a heartbeat before task results")
    try:
        await conn.relay.jobs.on_result(node_id, message)
    except ResultError as exc:
        if exc.code == "stale_result":  # a late answer of an attempt given up: said, not held against the session
            await conn.send({"type": "error", "code": exc.code, "detail": exc.detail})
            return
        raise LiveError(exc.code, exc.detail) from None


async def on_peers(conn: Connection, message: dict[str, Any]) -> None:
    await conn.relay.peers.on_peers(conn.session.session, conn.session.node_id, conn.send, message,
                                    conn.ws.client.host if conn.ws.client else "")


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
    "libp2p": on_libp2p, "jobs": on_jobs, "task_result": on_task_result,
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


class OverBudget(Exception):
    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.detail)
        self.refusal = refusal


async def receive_message(conn: Connection) -> dict[str, Any]:
    """The next message; a binary frame is parsed like text (JSON or LiveError), never a dead session.
    Raises OverBudget when the address has sent more than its bytes."""
    frame = await conn.ws.receive()
    conn.arrived = time.perf_counter()  # first: an answer's time is when it came, not when it was parsed
    guard = conn.relay.live_guard
    if frame["type"] == "websocket.disconnect":
        if frame.get("code") == 1009:  # the protocol layer refused a frame beyond the largest legitimate one
            conn.relay.metrics.live_refused["frame_too_large"] += 1
            guard.charge(conn.address, guard.max_frame, time.monotonic())
        raise WebSocketDisconnect(frame.get("code", 1000))
    data = frame.get("text") or frame.get("bytes") or b""
    refusal = guard.charge(conn.address, len(data), time.monotonic())
    if refusal is not None:
        raise OverBudget(refusal)
    try:
        screen(data, opening_due(conn), guard.max_opening)
    except LiveError as exc:
        conn.relay.metrics.live_refused[exc.code] += 1
        raise
    return parse_message(data)


async def refuse(ws: WebSocket, refusal: Refusal) -> None:
    """A session refused for its address's limits: HTTP 429 with the reason before the upgrade (cheap: no
    session), or where the server cannot answer so, accepted and closed at once (1013, try again later)."""
    problem = Problem(429, refusal.code, "over this address's live-session limits", refusal.detail,
                      headers={"retry-after": str(max(1, round(refusal.retry_after_s)))})
    if "websocket.http.response" in ws.scope.get("extensions", {}):
        await ws.send_denial_response(problem.response())
        return
    await ws.accept()
    await ws.close(code=1013, reason=close_reason(f"{refusal.code}: {refusal.detail}"))


async def live(ws: WebSocket) -> None:
    relay: Relay = ws.app.state.relay
    address = address_key(ws.client.host if ws.client else "unknown")
    refusal = relay.live_guard.admit(address, time.monotonic())
    if refusal is not None:
        relay.metrics.live_refused[refusal.code] += 1
        await refuse(ws, refusal)
        return
    try:
        await ws.accept()
        await session(Connection(ws, relay, Session(relay.new_session_id()), address=address))
    finally:
        relay.live_guard.leave(address)


async def session(conn: Connection) -> None:
    ws, relay = conn.ws, conn.relay
    relay.metrics.ws_sessions += 1
    welcome = {"type": "welcome", "relay": relay.relay_id, "session": conn.session.session,
               "heartbeat_interval_s": relay.config.heartbeat_interval_s}
    if relay.config.liveness_by_pongs:
        welcome["liveness"] = "pongs"  # one signed heartbeat binds the session; pongs keep it live
    await ws.send_json(welcome)
    ping_task = asyncio.create_task(pinger(conn))
    try:
        while True:
            try:
                message = await receive_message(conn)
                handler = HANDLERS.get(message["type"])
                if handler is None:
                    raise LiveError("unknown_type", f"unknown message type {message['type'][:40]!r}")
                await handler(conn, message)
            except LiveError as exc:
                frame, close = conn.session.refuse(exc)
                await ws.send_json(frame)
                if close:
                    await ws.close(code=1008, reason=close_reason(f"{MAX_ERRORS} invalid messages; the last: "
                                                                  f"{frame['code']}"))
                    return
    except OverBudget as over:
        relay.metrics.live_refused[over.refusal.code] += 1
        await conn.send({"type": "error", "code": over.refusal.code, "detail": over.refusal.detail})
        with contextlib.suppress(WebSocketDisconnect, RuntimeError, OSError):
            await ws.close(code=1013, reason=close_reason(f"{over.refusal.code}: {over.refusal.detail}"))
    except WebSocketDisconnect:
        pass
    finally:
        ping_task.cancel()
        if conn.session.node_id is not None and relay.bound.get(conn.session.node_id) is conn:
            del relay.bound[conn.session.node_id]
        relay.challenges.bye(conn.session.session)
        relay.jobs.leave(conn.session.session)  # its running tasks are placed again
        relay.metrics.ws_sessions -= 1
        await relay.peers.bye(conn.session.session)  # last: it sends (the other side of a probe in flight)
