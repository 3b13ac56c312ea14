"""The relay's HTTP and WebSocket API (ARCHITECTURE.md, "The relay — API v1"): a thin Starlette adapter
over web.relay.Relay. Every refusal is an RFC 9457 problem; nothing a client sends produces a 500."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import random
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.websockets import WebSocket, WebSocketDisconnect

from capsule.peerid import PeerIdError, public_key_from_peer_id
from web.config import RelayConfig
from web.live import BW_PROBE_BYTES, BW_PROBE_CHANCE, LiveError, Session, parse_message
from web.openapi import document
from web.problems import Problem
from web.relay import Relay
from web.static import IsolationHeaders

log = logging.getLogger("ce.relay")
WEB_BUNDLE = Path(__file__).resolve().parents[1] / "build" / "web"


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refusing past `limit` bytes without reading the rest."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise Problem(413, "body_too_large", "the body is too large", f"{declared} bytes; at most {limit}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise Problem(413, "body_too_large", "the body is too large", f"more than {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def create_app(config: RelayConfig) -> Starlette:
    relay = Relay(config)

    def client_ip(request: Request) -> str:
        return request.client.host if request.client else "unknown"

    async def post_profile(request: Request) -> Response:
        relay.check_ip(client_ip(request))
        body = await read_body(request, config.max_body_bytes)
        status, result = await relay.post_profile(body)
        return JSONResponse(result, status_code=status)

    def node_id_param(text: str) -> str:
        try:
            public_key_from_peer_id(text)
        except PeerIdError as exc:
            raise Problem(400, "invalid_node_id", "not a NodeId", str(exc), "node_id") from None
        return text

    async def get_node(request: Request) -> Response:
        node_id = node_id_param(request.path_params["node_id"])
        status = relay.atlas.status(node_id)
        body = relay.store.profile(node_id)
        if status is None or body is None:
            raise Problem(404, "unknown_node", "no profile of this node is known here", node_id)
        coord = relay.links.coordinate(node_id)
        status["coordinate"] = coord.to_json() if coord else None
        return JSONResponse({"profile": json.loads(body), "status": status})

    async def atlas(request: Request) -> Response:
        try:
            limit = int(request.query_params.get("limit", config.atlas_page_default))
        except ValueError:
            raise Problem(400, "invalid_parameter", "limit must be an integer",
                          request.query_params.get("limit", ""), "limit") from None
        if not 1 <= limit <= config.atlas_page_max:
            raise Problem(400, "invalid_parameter", f"limit must be in [1, {config.atlas_page_max}]", str(limit),
                          "limit")
        cursor = request.query_params.get("cursor", "")
        if len(cursor) > 100:
            raise Problem(400, "invalid_parameter", "cursor is a NodeId", "too long", "cursor")
        page_key = hashlib.sha256(f"{cursor}/{limit}".encode()).hexdigest()[:12]
        tag = f'W/"{relay.epoch}-{relay.atlas.version}-{page_key}"'
        if request.headers.get("if-none-match") == tag:
            return Response(status_code=304, headers={"etag": tag})
        ids, next_cursor = relay.atlas.page(cursor, limit)
        bodies = relay.store.profiles(ids)
        nodes = [json.loads(bodies[i]) for i in ids if i in bodies]
        return JSONResponse({"nodes": nodes, "next_cursor": next_cursor, "live_nodes": len(relay.atlas.live)},
                            headers={"etag": tag})

    async def fabric_stats(request: Request) -> Response:
        return JSONResponse({**relay.atlas.local_stats.snapshot(), "mesh": relay.links.mesh()})

    async def stats(request: Request) -> Response:
        return JSONResponse({**relay.atlas.global_stats.snapshot(), "mesh": relay.links.mesh()})

    async def post_link(request: Request) -> Response:
        relay.check_ip(client_ip(request))
        sample = await relay.add_link(await read_body(request, 8192), time.time())
        return JSONResponse({"a": sample["a"], "b": sample["b"], "status": "stored"}, status_code=201)

    async def netgraph(request: Request) -> Response:
        relay.links.mesh()  # refreshes regions when due
        nodes = []
        for node_id in sorted(set(relay.links.nodes) | relay.atlas.live):
            coord = relay.links.coordinate(node_id)
            nodes.append({"node_id": node_id, "online": node_id in relay.atlas.live or node_id == relay.relay_id,
                          "relay": node_id == relay.relay_id, "coordinate": coord.to_json() if coord else None,
                          "region": relay.links.region_of.get(node_id)})
        return JSONResponse({"relay": relay.relay_id, "nodes": nodes, "edges": list(relay.links.links.values()),
                             "unconfirmed_edges": sorted([a, b] for a, b in relay.links.unconfirmed)})

    async def netgraph_rtt(request: Request) -> Response:
        target = node_id_param(request.query_params.get("to", ""))
        if target not in relay.atlas.nodes and relay.links.coordinate(target) is None:
            raise Problem(404, "unknown_node", "no such node here", target, "to")
        link = relay.links.measured(relay.relay_id, target)
        mine, theirs = relay.links.coordinate(relay.relay_id), relay.links.coordinate(target)
        return JSONResponse({"from": relay.relay_id, "to": target,
                             "measured_rtt_ms": link["rtt_ms"] if link else None,
                             "predicted_rtt_ms": round(mine.distance(theirs), 3) if mine and theirs else None})

    async def beacon(request: Request) -> Response:
        return JSONResponse(relay.beacons.latest)

    async def metrics(request: Request) -> Response:
        gauges = {"ce_relay_live_nodes": len(relay.atlas.live), "ce_relay_atlas_nodes": len(relay.atlas.nodes),
                  "ce_relay_ws_sessions": relay.metrics.ws_sessions,
                  "ce_relay_beacon_round": (relay.beacons.latest or {}).get("round", -1)}
        return PlainTextResponse(relay.metrics.render(gauges), media_type="text/plain; version=0.0.4")

    async def openapi(request: Request) -> Response:
        return JSONResponse(document())

    async def index(request: Request) -> Response:
        s = relay.atlas.global_stats.snapshot()
        return HTMLResponse(
            "<!doctype html><meta charset=utf-8><title>ce-bench relay</title>"
            f"<h1>ce-bench relay</h1><p>relay <code>{relay.relay_id}</code></p>"
            f"<p>{s['nodes']} live nodes, {s['cpu_cores']} cores, {s['cpu_gflops']:.1f} GFLOP/s, "
            f"{s['tokens_per_sec']:.1f} tokens/s.</p>"
            "<p>Servers join with <code>ce-bench run --relay URL</code>. API: <a href=/openapi.json>/openapi.json</a>, "
            "<a href=/atlas>/atlas</a>, <a href=/stats>/stats</a>, <a href=/beacon>/beacon</a>.</p>")

    async def live(ws: WebSocket) -> None:
        await ws.accept()
        session = Session(relay.new_session_id())
        relay.metrics.ws_sessions += 1
        await ws.send_json({"type": "welcome", "relay": relay.relay_id, "session": session.session,
                            "heartbeat_interval_s": config.heartbeat_interval_s})
        pings: dict[int, float] = {}
        probe_rng = random.Random()

        async def pinger() -> None:
            n = 0
            while True:
                await asyncio.sleep(config.heartbeat_interval_s)
                n += 1
                pings[n] = time.perf_counter()
                session.pings_sent += 1
                for old in [k for k in pings if k < n - 10]:
                    del pings[old]
                await ws.send_json({"type": "ping", "id": n})
                if session.node_id and session.bw_sent_at is None and probe_rng.random() < BW_PROBE_CHANCE:
                    session.bw_sent_at = time.perf_counter()
                    await ws.send_bytes(os.urandom(BW_PROBE_BYTES))

        ping_task = asyncio.create_task(pinger())
        try:
            while True:
                frame = await ws.receive()
                if frame["type"] == "websocket.disconnect":
                    raise WebSocketDisconnect(frame.get("code", 1000))
                try:  # a binary frame is parsed like text: JSON or an error frame, never a dead session
                    message = parse_message(frame.get("text") or frame.get("bytes") or b"")
                    if message["type"] == "heartbeat":
                        node_id = session.heartbeat(message.get("heartbeat"))
                        if not relay.atlas.heartbeat(node_id, time.time(), session.rtt_ms):
                            raise LiveError("unknown_node", "post a profile (POST /v1/profiles) before heartbeats")
                        relay.metrics.heartbeats += 1
                        if relay.cluster is not None:
                            relay.cluster.publish_heartbeat(node_id)
                        await ws.send_json({"type": "ack", "seq": session.last_seq})
                    elif message["type"] == "pong":
                        ping_id = message.get("id")
                        sent = pings.pop(ping_id, None) if isinstance(ping_id, int) else None
                        if sent is None:
                            raise LiveError("unknown_ping", "pong for no outstanding ping")
                        rtt = session.pong((time.perf_counter() - sent) * 1000)
                        if session.node_id:
                            relay.atlas.heartbeat(session.node_id, time.time(), rtt)
                        body = session.link_body(relay.relay_id, time.time())
                        if body is not None:
                            await ws.send_json({"type": "cosign", "sample": relay.sign_link(body)})
                    elif message["type"] == "bw_ack":
                        session.bw_ack(message.get("n"), time.perf_counter())
                    elif message["type"] == "cosigned":
                        sample = message.get("sample")
                        if not isinstance(sample, dict) or sample.get("b") != relay.relay_id:
                            raise LiveError("invalid_message", "cosigned needs the sample this relay sent")
                        try:
                            await relay.add_link(json.dumps(sample).encode(), time.time())
                        except Problem as problem:
                            raise LiveError(problem.code, problem.detail or problem.title) from None
                    else:
                        raise LiveError("unknown_type", f"unknown message type {message['type'][:40]!r}")
                except LiveError as exc:
                    session.errors += 1
                    await ws.send_json(exc.message())
                    if session.errors >= 5:
                        await ws.close(code=1008, reason="too many invalid messages")
                        return
        except WebSocketDisconnect:
            pass
        finally:
            ping_task.cancel()
            relay.metrics.ws_sessions -= 1

    async def on_problem(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, Problem)
        return exc.response()

    async def on_error(request: Request, exc: Exception) -> Response:
        log.exception("unhandled error", extra={"path": request.url.path})
        return Problem(500, "internal_error", "the relay failed on this request").response()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await relay.start()
        try:
            yield
        finally:
            await relay.stop()

    routes: list[Any] = [
        Route("/v1/profiles", post_profile, methods=["POST"]), Route("/v1/nodes/{node_id}", get_node),
        Route("/v1/links", post_link, methods=["POST"]), Route("/netgraph", netgraph),
        Route("/netgraph/rtt", netgraph_rtt),
        Route("/atlas", atlas), Route("/fabric/stats", fabric_stats), Route("/stats", stats),
        Route("/beacon", beacon), Route("/metrics", metrics), Route("/openapi.json", openapi),
        WebSocketRoute("/v1/live", live)]
    if (WEB_BUNDLE / "index.html").exists():  # the browser node's pages (python build.py)
        routes.append(Mount("/", StaticFiles(directory=WEB_BUNDLE, html=True)))
    else:
        routes.append(Route("/", index))
    app = Starlette(
        routes=routes,
        middleware=[Middleware(IsolationHeaders), Middleware(GZipMiddleware, minimum_size=1024)],
        exception_handlers={Problem: on_problem, Exception: on_error},
        lifespan=lifespan,
    )
    app.state.relay = relay
    return app

