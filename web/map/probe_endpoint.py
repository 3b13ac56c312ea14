"""WS /v1/probe: a relay as a landmark (issue 18, item 2). A node keeps its live session with one relay and,
now and then, asks the others of the cluster for a short RTT probe: it proves who it is with a signed
Heartbeat bound to this probe's session, the relay pings it `SAMPLES_PER_LINK` times, `probe_ping_gap_s`
apart, and sends the node <-> relay LinkSample it measured, signed, for the node to co-sign. The sample is
then taken as any other (web/relay.py add_link) and travels to the whole cluster. A probe makes nobody live
here and excuses nobody from a roll call: it is a measurement, not a session.

    relay -> node  {"type": "welcome", "relay": ID, "session": HEX32, "probe": true}
    node  -> relay {"type": "heartbeat", "heartbeat": Heartbeat}
    relay -> node  {"type": "ping", "id": N}       x SAMPLES_PER_LINK
    node  -> relay {"type": "pong", "id": N}
    relay -> node  {"type": "cosign", "sample": LinkSample (sig_b)}
    node  -> relay {"type": "cosigned", "sample": LinkSample (sig_a, sig_b)}
    relay -> node  {"type": "probed", "rtt_ms": F}  (then closes)

The relays of a cluster probe each other the same way (Relay.probe_peer_relays, every
landmark_mesh_interval_s): the landmarks' own mesh, which places them relative to each other so that their
edges to nodes place the nodes (without it every landmark sat at the origin of the fit and no node could be
told from another by its landmark RTTs).

Bytes: ~1.5 KB each way per probe (three pings, two signed records). A node delaying its pongs only makes
its own edge look longer, which loosens (never tightens) what the edge confirms about others."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect

from web.api.problems import Problem
from web.relay import Relay
from web.sessions.live import SAMPLES_PER_LINK, LiveError, Session, parse_message
from web.sessions.live_guard import screen


async def _next(ws: WebSocket, timeout_s: float, expected: str) -> dict[str, Any]:
    try:
        frame = await asyncio.wait_for(ws.receive(), timeout_s)
    except TimeoutError:
        raise LiveError("late", f"no {expected} within {timeout_s:g} s") from None
    if frame["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(frame.get("code", 1000))
    data = frame.get("text") or frame.get("bytes") or b""
    screen(data, False, 0)  # sized before it is parsed: no probe message is large (web/sessions/live_guard.py)
    message = parse_message(data)
    if message["type"] != expected:
        raise LiveError("unexpected_message", f"expected {expected}, got {str(message['type'])[:40]!r}")
    return message


async def run_probe(ws: WebSocket, relay: Relay) -> float:
    """The probe's exchange; the RTT stored (ms). Raises LiveError naming what went wrong."""
    config, session = relay.config, Session(relay.new_session_id())
    await ws.send_json({"type": "welcome", "relay": relay.relay_id, "session": session.session, "probe": True})
    node_id = session.heartbeat((await _next(ws, config.probe_step_timeout_s, "heartbeat")).get("heartbeat"))
    if node_id not in relay.atlas.nodes and node_id not in relay.links.landmarks:  # a node, or a peer relay
        raise LiveError("unknown_node", "post a profile (POST /v1/profiles) before asking for a probe")
    while len(session.rtt_samples) < SAMPLES_PER_LINK:
        await ws.send_json(session.ping(time.perf_counter()))
        pong = await _next(ws, config.probe_step_timeout_s, "pong")
        session.pong(pong.get("id"), time.perf_counter())
        await asyncio.sleep(config.probe_ping_gap_s)
    body = session.link_body(relay.relay_id, time.time())
    if body is None:  # pragma: no cover - the loop above collected the pongs it needs
        raise LiveError("late", "no pongs")
    await ws.send_json({"type": "cosign", "sample": relay.sign_link(body)})
    sample = (await _next(ws, config.probe_step_timeout_s, "cosigned")).get("sample")
    if not isinstance(sample, dict) or sample.get("b") != relay.relay_id or sample.get("a") != node_id:
        raise LiveError("invalid_message", "cosigned needs the sample this relay sent")
    try:
        stored = await relay.add_link(json.dumps(sample).encode(), time.time())
    except Problem as problem:
        raise LiveError(problem.code, problem.detail or problem.title) from None
    return float(stored["rtt_ms"])


async def probe(ws: WebSocket) -> None:
    relay: Relay = ws.app.state.relay
    await ws.accept()
    try:
        try:
            relay.check_ip(ws.client.host if ws.client else "unknown")
            rtt_ms = await run_probe(ws, relay)
        except Problem as problem:  # rate limited
            await ws.send_json({"type": "error", "code": problem.code, "detail": problem.detail or problem.title})
        except LiveError as exc:
            await ws.send_json(exc.message())
        else:
            relay.metrics.probes += 1
            await ws.send_json({"type": "probed", "rtt_ms": rtt_ms})
        await ws.close()
    except (WebSocketDisconnect, RuntimeError, OSError):
        pass  # the node went away: nothing was taken
