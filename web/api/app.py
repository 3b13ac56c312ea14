"""The relay's HTTP and WebSocket API (ARCHITECTURE.md, "The relay — API v1"): a thin Starlette adapter
over web.relay.Relay. Every refusal is an RFC 9457 problem; nothing a client sends produces a 500."""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import logging
import math
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles

from capsule.peerid import PeerIdError, public_key_from_peer_id
from web.api.api_page import api_page
from web.api.bodies import read_body
from web.api.openapi import document
from web.api.problems import Problem
from web.api.static import IsolationHeaders
from web.config import RelayConfig
from web.jobs.endpoints import ROUTES as JOB_ROUTES
from web.map.probe_endpoint import probe
from web.map.stats import FabricStats
from web.proof.checks import odds as check_odds
from web.relay import Relay
from web.sessions.direct_frames import DirectFrames
from web.sessions.live_endpoint import live

log = logging.getLogger("ce.relay")
WEB_BUNDLE = Path(__file__).resolve().parents[2] / "build" / "web"


def relay_of(request: Request) -> Relay:
    relay: Relay = request.app.state.relay
    return relay


def client_ip(request: Request) -> str:
    return request.client.host if request.client else "unknown"


async def post_profile(request: Request) -> Response:
    relay = relay_of(request)
    relay.check_ip(client_ip(request))
    body = await read_body(request, relay.config.max_body_bytes)
    status, result = await relay.post_profile(body)
    return JSONResponse(result, status_code=status)


def node_id_param(text: str) -> str:
    try:
        public_key_from_peer_id(text)
    except PeerIdError as exc:
        raise Problem(400, "invalid_node_id", "not a NodeId", str(exc), "node_id") from None
    return text


async def get_node(request: Request) -> Response:
    relay = relay_of(request)
    node_id = node_id_param(request.path_params["node_id"])
    status = relay.atlas.status(node_id)
    body = relay.store.profile(node_id)
    if status is None or body is None:
        raise Problem(404, "unknown_node", "no profile of this node is known here", node_id)
    coord = relay.links.coordinate(node_id)
    status["coordinate"] = coord.to_json() if coord else None
    return JSONResponse({"profile": json.loads(body), "status": status,
                         "trust": relay.challenges.trust_json(node_id, time.time()),
                         # where a libp2p peer dials the node (ping, identify): what its live session announced
                         "libp2p": {"multiaddrs": relay.multiaddrs.get(node_id, [])}})


async def libp2p(request: Request) -> Response:
    relay = relay_of(request)
    if relay.mesh is None and relay.mesh_error is not None:
        raise Problem(503, "libp2p_failed", "this relay's libp2p host did not start", relay.mesh_error)
    if relay.mesh is None and relay.mesh_starting is not None and not relay.mesh_starting.done():
        raise Problem(503, "libp2p_starting", "this relay's libp2p host is starting",
                      "it comes up beside the relay within seconds of its start; ask again",
                      headers={"retry-after": "1"})
    if relay.mesh is None:
        raise Problem(404, "no_libp2p", "this relay runs no libp2p host", "it was started with --no-libp2p")
    return JSONResponse(relay.mesh.info())


async def node_history(request: Request) -> Response:
    relay = relay_of(request)
    node_id = node_id_param(request.path_params["node_id"])
    if node_id not in relay.atlas.nodes:
        raise Problem(404, "unknown_node", "no profile of this node is known here", node_id)
    raw = request.query_params.get("limit", str(relay.config.history_kept))
    if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= relay.config.history_kept:
        raise Problem(400, "invalid_parameter", f"limit must be an integer in [1, {relay.config.history_kept}]",
                      raw[:40], "limit")
    return JSONResponse({"node_id": node_id, "events": relay.history(node_id, int(raw)),
                         # dispatched tasks it ran (web/jobs/): kept apart, so they never push its challenges out
                         "delivered": relay.jobs.delivered(node_id)})


async def atlas(request: Request) -> Response:
    relay = relay_of(request)
    try:
        limit = int(request.query_params.get("limit", relay.config.atlas_page_default))
    except ValueError:
        raise Problem(400, "invalid_parameter", "limit must be an integer",
                      request.query_params.get("limit", ""), "limit") from None
    if not 1 <= limit <= relay.config.atlas_page_max:
        raise Problem(400, "invalid_parameter", f"limit must be in [1, {relay.config.atlas_page_max}]", str(limit),
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
    now = time.time()
    trust = {i: relay.challenges.status(i, now) for i in ids if i in bodies}  # full state: /v1/nodes/{id}
    return JSONResponse({"nodes": nodes, "trust": trust, "next_cursor": next_cursor,
                         "live_nodes": len(relay.atlas.live)}, headers={"etag": tag})


def scoreboard(relay: Relay, verified: FabricStats, claimed: FabricStats) -> dict[str, Any]:
    """FabricStats where each node adds only what the relay's challenges observed (web/proof/trust.py); `claimed`
    sums the same fields as the live nodes claim them."""
    claimed_block = claimed.snapshot()
    return {**verified.snapshot(), "nodes": claimed_block["nodes"], "verified_nodes": len(verified),
            # no challenge measures these: null here (what cannot be proven is not a zero), figures under claimed
            "cpu_cores": None, "gpu_vram_mb": None, "storage_free_gb": None,
            "unproven": {"cpu_cores": "a challenge proves throughput, not how many cores produced it "
                                      "(instances time-sliced on fewer cores each show as one): see claimed",
                         "gpu_vram_mb": "no challenge measures GPU memory: see claimed",
                         "storage_free_gb": "no challenge measures storage: see claimed"},
            "counting": "the latest roll call: every live node that answers challenges is challenged at one "
                        "moment; a node adds its GFLOP/s, tokens/s, GPUs (instances of its GPU challenge proven, "
                        f"each at >= {relay.config.gpu_floor_tflops:g} fp32 TFLOP/s) and GPU TFLOP/s capped at "
                        "what it showed within the common deadline; nothing while it is not answering. "
                        "gpu_tflops here is proven fp32 (the GPU "
                        "challenge's WGSL matmul); claimed.gpu_tflops sums what profiles claim (fp16). Figures "
                        "no challenge proves (cores, GPU memory, storage, memory bandwidth) appear only under "
                        "claimed",
            "claimed": {k: v for k, v in claimed_block.items() if k != "mesh"}, "mesh": relay.links.mesh(),
            **network_block(relay)}


def network_block(relay: Relay) -> dict[str, Any]:
    """With a region (web/cluster/regions.py): the network's verified totals, this region's latest finished roll call
    plus every other region's as its relays signed them; the figures above are this region's."""
    regions = relay.cluster.regions if relay.cluster is not None else None
    if regions is None:
        return {}
    network = regions.board.network(relay.challenges.roll.last_proven(), time.time())
    return {"region": regions.region, "network": {
        **network, "method": "each region's verified totals of its latest finished roll call, signed by its "
                             "relays (the lowest-id relay of a region that reported it); a region silent for "
                             "two roll-call gaps counts nothing"}}


async def fabric_stats(request: Request) -> Response:
    relay = relay_of(request)
    return JSONResponse(scoreboard(relay, relay.atlas.local_verified, relay.atlas.local_stats))


async def stats(request: Request) -> Response:
    relay = relay_of(request)
    return JSONResponse(scoreboard(relay, relay.atlas.global_verified, relay.atlas.global_stats))


async def stats_history(request: Request) -> Response:
    relay = relay_of(request)
    return JSONResponse({"interval_s": relay.config.stats_history_interval_s,
                         "note": "kept in the relay's store: the series survives restarts",
                         "points": list(relay.stats_history)})


async def checks(request: Request) -> Response:
    """What each check catches, the odds that a node skipping part of its work passes one answer, the relay's
    cost, and the honest false-reject rate this relay saw (web/proof/checks.py)."""
    relay = relay_of(request)
    body = check_odds(relay.config, relay.challenges.roll.after_deadline_rate())
    body["jobs"] = relay.jobs.checks()  # dispatched work: quorum and audit odds (web/jobs/rules.py)
    config = relay.config
    body["relay_loop_lag"] = {
        **relay.loop_lag.summary(time.perf_counter()),
        "forgiven": f"an answer is forgiven the relay's longest event-loop stall during its window when over "
                    f"{config.loop_lag_allowance_min_s:g} s, at most {config.loop_lag_allowance_max_s:g} s: its "
                    "timeouts extended by it, and a roll-call answer after the deadline by no more than it counted "
                    "as arriving at the deadline (docs/protocol.md)"}
    return JSONResponse(body)


async def roll_calls(request: Request) -> Response:
    """Roll calls, latest first, paged by time: ?limit=N (1-1000) &before=UNIX (the `at` of the last seen)."""
    relay = relay_of(request)
    try:
        limit = int(request.query_params.get("limit", 20))
        before_text = request.query_params.get("before")
        before = float(before_text) if before_text is not None else None
    except ValueError:
        raise Problem(400, "invalid_parameter", "limit is an integer and before a unix time",
                      str(dict(request.query_params))[:200]) from None
    if not 1 <= limit <= 1000 or (before is not None and not math.isfinite(before)):
        raise Problem(400, "invalid_parameter", "limit must be in [1, 1000] and before finite", str(limit), "limit")
    config = relay.config
    calls = relay.challenges.roll.page(limit, before)
    # `relay`: which relay (of --processes N on one port, which process) ran these roll calls
    return JSONResponse({"relay": relay.relay_id, "roll_calls": calls,
                         "next_before": calls[-1]["at"] if len(calls) == limit else None,
                         "interval_s": config.roll_call_interval_s,
                         "method": "each beacon round starts a roll call with probability beacon_interval_s / "
                                   "interval_s; every live session that answers challenges is challenged at once "
                                   "(SGEMM, then the reference model, then the GPU); proven totals are capped at "
                                   "claims"})


async def relays(request: Request) -> Response:
    """The relays of this cluster: this one and the peers heard from, with the leader whose beacon draws
    roll calls."""
    relay = relay_of(request)
    now = time.time()
    cluster = relay.cluster
    seen = dict(cluster.peers_seen) if cluster is not None else {}
    leader = cluster.leader(now) if cluster is not None else relay.relay_id
    views = cluster.book.views if cluster is not None else {}
    rows = [{"relay": relay.relay_id, "self": True, "last_seen": now, "url": relay.config.public_url}] + [
        {"relay": r, "self": False, "last_seen": seen.get(r), "url": views[r].url if r in views else None}
        for r in relay.config.cluster_peers]
    for row in rows:
        row["leader"] = row["relay"] == leader
    return JSONResponse({"relays": rows, "leader": leader})


async def post_link(request: Request) -> Response:
    relay = relay_of(request)
    relay.check_ip(client_ip(request))
    sample = await relay.add_link(await read_body(request, 8192), time.time())
    return JSONResponse({"a": sample["a"], "b": sample["b"], "status": "stored"}, status_code=201)


async def netgraph(request: Request) -> Response:
    relay = relay_of(request)
    relay.links.mesh()  # refreshes regions when due
    nodes = []
    for node_id in sorted(set(relay.links.nodes) | relay.atlas.live):
        coord = relay.links.coordinate(node_id)
        nodes.append({"node_id": node_id, "online": node_id in relay.atlas.live or node_id == relay.relay_id,
                      "relay": node_id == relay.relay_id, "coordinate": coord.to_json() if coord else None,
                      "region": relay.links.region_of.get(node_id)})
    return JSONResponse({"relay": relay.relay_id, "nodes": nodes, "edges": list(relay.links.links.values()),
                         "unconfirmed_edges": sorted([a, b] for a, b in relay.links.unconfirmed),
                         "fit": relay.links.fit()})


async def netgraph_rtt(request: Request) -> Response:
    relay = relay_of(request)
    target = node_id_param(request.query_params.get("to", ""))
    if target not in relay.atlas.nodes and relay.links.coordinate(target) is None:
        raise Problem(404, "unknown_node", "no such node here", target, "to")
    link = relay.links.measured(relay.relay_id, target)
    mine, theirs = relay.links.coordinate(relay.relay_id), relay.links.coordinate(target)
    return JSONResponse({"from": relay.relay_id, "to": target,
                         "measured_rtt_ms": link["rtt_ms"] if link else None,
                         "predicted_rtt_ms": round(mine.distance(theirs), 3) if mine and theirs else None})


async def beacon(request: Request) -> Response:
    relay = relay_of(request)
    return JSONResponse(relay.beacons.latest)


def scoreboard_gauges(relay: Relay) -> dict[str, float]:
    """The verified scoreboard as gauges (what this relay's latest finished roll call proved, capped at the
    claims: /stats' "verified"), and that roll call's answers over its challenges: the figures an operator
    graphs (docs/grafana-dashboard.json). -1 before a roll call finished."""
    roll = relay.challenges.roll
    proven = roll.last_proven()
    latest = next((c for c in reversed(roll.calls) if c.proven), None)
    out: dict[str, float] = {
        "ce_relay_verified_nodes": proven["nodes"] if proven else -1,
        "ce_relay_verified_cpu_gflops": proven["cpu_gflops"] if proven else -1,
        "ce_relay_verified_tokens_per_sec": proven["tokens_per_sec"] if proven else -1,
        "ce_relay_verified_gpus": proven["gpus"] if proven else -1,
        "ce_relay_verified_gpu_tflops": proven["gpu_tflops"] if proven else -1,
        "ce_relay_roll_calls_kept": len(roll.calls),  # this run's, at most roll_calls_kept
    }
    if latest is not None and latest.challenged:
        out["ce_relay_roll_call_answered_ratio"] = round(len(latest.answered) / len(latest.challenged), 6)
    else:
        out["ce_relay_roll_call_answered_ratio"] = -1
    return out


async def metrics(request: Request) -> Response:
    relay = relay_of(request)
    gauges = {"ce_relay_live_nodes": len(relay.atlas.live), "ce_relay_atlas_nodes": len(relay.atlas.nodes),
              "ce_relay_ws_sessions": relay.metrics.ws_sessions,
              "ce_relay_beacon_round": (relay.beacons.latest or {}).get("round", -1),
              "ce_relay_gc_full_seconds": relay.gc.last_full_s if relay.gc.last_full_s is not None else -1,
              "ce_relay_gc_frozen_objects": gc.get_freeze_count()}
    gauges.update(scoreboard_gauges(relay))
    lag = relay.loop_lag.summary(time.perf_counter())
    gauges["ce_relay_loop_lag_max_seconds"] = lag["max_s"] if lag["max_s"] is not None else -1  # the last 60 s
    gauges["ce_relay_loop_lag_p50_seconds"] = lag["p50_s"] if lag["p50_s"] is not None else -1
    nc = relay.cluster.nc if relay.cluster is not None else None
    if nc is not None:  # what crosses the cluster to and from this relay (NATS client counters since connect)
        for name in ("in_bytes", "out_bytes", "in_msgs", "out_msgs"):
            gauges[f"ce_relay_nats_{name}"] = int(nc.stats.get(name, 0))
    text = relay.metrics.render(gauges) + "\n".join([
        "# HELP ce_relay_loop_lag_seconds How late the relay's event loop woke a task that sleeps loop_lag_interval_s.",
        "# TYPE ce_relay_loop_lag_seconds histogram", *relay.loop_lag.histogram.render("ce_relay_loop_lag_seconds")])
    return PlainTextResponse(text + "\n", media_type="text/plain; version=0.0.4")


async def node_page(request: Request) -> Response:
    """The shareable page of one node (/nodes/{id}); it reads the public API itself."""
    node_id_param(request.path_params["node_id"])
    page = WEB_BUNDLE / "node.html"
    if not page.exists():
        raise Problem(404, "no_pages", "this relay serves no pages", "build them with `python build.py`")
    return FileResponse(page, media_type="text/html")


async def openapi(request: Request) -> Response:
    return JSONResponse(document())


async def index(request: Request) -> Response:
    relay = relay_of(request)
    s = relay.atlas.global_stats.snapshot()
    return HTMLResponse(
        "<!doctype html><meta charset=utf-8><title>ce-bench relay</title>"
        f"<h1>ce-bench relay</h1><p>relay <code>{relay.relay_id}</code></p>"
        f"<p>{s['nodes']} live nodes, {s['cpu_cores']} cores, {s['cpu_gflops']:.1f} GFLOP/s, "
        f"{s['tokens_per_sec']:.1f} tokens/s.</p>"
        "<p>Servers join with <code>ce-bench run --relay URL</code>. API: <a href=/api>/api</a> "
        "(<a href=/openapi.json>/openapi.json</a>), "
        "<a href=/atlas>/atlas</a>, <a href=/stats>/stats</a>, <a href=/beacon>/beacon</a>.</p>")


async def on_problem(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, Problem)
    return exc.response()


async def on_error(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error", extra={"path": request.url.path})
    return Problem(500, "internal_error", "the relay failed on this request").response()


def create_app(config: RelayConfig) -> Starlette:
    relay = Relay(config)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await relay.start()
        try:
            yield
        finally:
            await relay.stop()
            # the server's process ends next, and the interpreter's last collection would scan every object
            # once more: frozen (web/gc_policy.py), they go with the process. 0.13 s of each relay's 0.33 s
            # from SIGINT to exit (2026-12-06, 2 vCPU); a test suite stops relays by the hundred
            gc.freeze()

    routes: list[Any] = [
        Route("/v1/profiles", post_profile, methods=["POST"]), Route("/v1/nodes/{node_id}", get_node),
        Route("/v1/nodes/{node_id}/history", node_history),
        Route("/v1/links", post_link, methods=["POST"]), Route("/netgraph", netgraph),
        Route("/netgraph/rtt", netgraph_rtt),
        Route("/atlas", atlas), Route("/fabric/stats", fabric_stats), Route("/stats", stats),
        Route("/stats/history", stats_history), Route("/v1/roll-calls", roll_calls),
        Route("/v1/checks", checks), Route("/v1/libp2p", libp2p),
        Route("/v1/relays", relays),
        Route("/beacon", beacon), Route("/metrics", metrics), Route("/openapi.json", openapi), Route("/api", api_page),
        Route("/nodes/{node_id}", node_page),
        WebSocketRoute("/v1/live", live), WebSocketRoute("/v1/probe", probe), *JOB_ROUTES]
    if (WEB_BUNDLE / "index.html").exists():  # the browser node's pages (python build.py)
        routes.append(Mount("/", StaticFiles(directory=WEB_BUNDLE, html=True)))
    else:
        routes.append(Route("/", index))
    app = Starlette(
        routes=routes,
        # DirectFrames first: it must see the server's own send (web/sessions/direct_frames.py)
        middleware=[Middleware(DirectFrames), Middleware(IsolationHeaders),
                    Middleware(GZipMiddleware, minimum_size=1024)],
        exception_handlers={Problem: on_problem, Exception: on_error},
        lifespan=lifespan,
    )
    app.state.relay = relay
    app.state.jobs = relay.jobs  # web/jobs/endpoints.py asks for the job desk only
    return app

