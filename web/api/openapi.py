"""The relay's OpenAPI 3.1 document (served at /openapi.json); request and record schemas come from
capsule/schema, generated from the data model."""

from __future__ import annotations

import json
from typing import Any

from capsule.schemas import SCHEMA_DIR
from web.jobs.openapi import paths as job_paths


def _schema(name: str) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((SCHEMA_DIR / f"{name}.schema.json").read_text())
    schema.pop("$schema", None)
    return schema


PROBLEM = {"type": "object", "required": ["type", "title", "status", "code"], "properties": {
    "type": {"type": "string"}, "title": {"type": "string"}, "status": {"type": "integer"},
    "code": {"type": "string"}, "detail": {"type": "string"}, "field": {"type": "string"}}}
NUM_OR_NULL = {"type": ["number", "null"]}
STATS: dict[str, Any] = {"type": "object", "properties": {
    "nodes": {"type": "integer"}, "cpu_cores": {"type": "integer"}, "cpu_gflops": {"type": "number"},
    "gpus": {"type": "integer"}, "gpu_vram_mb": {"type": "integer"}, "gpu_tflops": {"type": "number"},
    "tokens_per_sec": {"type": "number"}, "storage_free_gb": {"type": "integer"}, "perf_score": {"type": "number"},
    "mesh": {"type": "object", "properties": {"median_rtt_ms": NUM_OR_NULL, "reachable_frac": NUM_OR_NULL,
                                               "regions": {"type": ["integer", "null"]}}}}}
# /stats: the figures count verified capacity only; `claimed` sums the same fields as claimed
SCOREBOARD: dict[str, Any] = {"type": "object", "properties": {
    **STATS["properties"], "cpu_cores": {"type": "null"}, "gpu_vram_mb": {"type": "null"},
    "storage_free_gb": {"type": "null"},
    "unproven": {"type": "object"}, "verified_nodes": {"type": "integer"}, "counting": {"type": "string"},
    "claimed": STATS}}
TRUST = {"type": "object", "required": ["status", "reason", "score", "observed", "counted", "challenges"],
         "properties": {
    "status": {"enum": ["unverified", "verified", "flagged"]}, "reason": {"type": "string"},
    "score": {"type": "number"},
    "observed": {"type": "object", "properties": {"gflops_fp32": NUM_OR_NULL, "gflops_fp32_median": NUM_OR_NULL,
                                                   "tokens_per_sec": NUM_OR_NULL, "method": {"type": "string"}}},
    "counted": {"type": "object", "properties": {"cpu_gflops": {"type": "number"}}},
    "challenges": {"type": "object", "properties": {
        "passed": {"type": "integer"}, "failed": {"type": "integer"}, "last_at": NUM_OR_NULL,
        "last_code": {"type": ["string", "null"]}}}}}


def problem(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/problem+json": {"schema": PROBLEM}}}


def json_ok(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def document() -> dict[str, Any]:
    profile = _schema("NodeProfile")
    return {
        "openapi": "3.1.0",
        "info": {"title": "ce-bench relay", "version": "1"},
        "paths": {
            "/v1/profiles": {"post": {
                "summary": "Verify and store a signed NodeProfile",
                "requestBody": {"required": True, "content": {"application/json": {"schema": profile}}},
                "responses": {"201": json_ok("stored (new node)", {"type": "object"}),
                              "200": json_ok("stored, replacing an older profile", {"type": "object"}),
                              "400": problem("not JSON"), "409": problem("replayed or stale profile"),
                              "413": problem("too large"), "422": problem("invalid field, signature or beacon"),
                              "429": problem("rate limited"), "503": problem("store unavailable")}}},
            "/v1/nodes/{node_id}": {"get": {
                "summary": "A node's latest profile and status",
                "parameters": [{"name": "node_id", "in": "path", "required": True, "schema": {"type": "string"}}],
                "responses": {"200": json_ok("profile, status and trust (what the relay's challenges observed)",
                                             {"type": "object", "properties": {"trust": TRUST}}),
                              "400": problem("not a NodeId"), "404": problem("unknown node")}}},
            "/v1/nodes/{node_id}/history": {"get": {
                "summary": "A node's profiles (their figures) and challenge results over time, oldest first",
                "parameters": [{"name": "node_id", "in": "path", "required": True, "schema": {"type": "string"}},
                               {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1}}],
                "responses": {"200": json_ok("events", {"type": "object"}), "400": problem("bad parameter"),
                              "404": problem("unknown node")}}},
            "/atlas": {"get": {
                "summary": "Live nodes' latest profiles, paged by node id",
                "parameters": [
                    {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 1000}},
                    {"name": "cursor", "in": "query", "schema": {"type": "string"}}],
                "responses": {"200": json_ok("a page", {"type": "object"}), "304": {"description": "not modified"},
                              "400": problem("bad parameter")}}},
            "/fabric/stats": {"get": {"summary": "FabricStats of this relay's live nodes",
                                      "responses": {"200": json_ok("FabricStats", SCOREBOARD)}}},
            "/stats": {"get": {"summary": "FabricStats of the whole atlas this relay knows",
                               "responses": {"200": json_ok("FabricStats", SCOREBOARD)}}},
            "/stats/history": {"get": {"summary": "The verified and claimed totals over time (in memory)",
                                       "responses": {"200": json_ok("samples", {"type": "object"})}}},
            "/v1/roll-calls": {"get": {
                "summary": "Roll calls, latest first: id, beacon round, moment, sessions challenged, answered, "
                           "proven totals, send spread",
                "parameters": [
                    {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 1000}},
                    {"name": "before", "in": "query", "schema": {"type": "number"}}],
                "responses": {"200": json_ok("a page", {"type": "object", "properties": {
                    "relay": {"type": "string"}, "roll_calls": {"type": "array"}, "next_before": NUM_OR_NULL}}),
                    "400": problem("bad parameter")}}},
            "/v1/checks": {"get": {
                "summary": "Each check's catch, the chance a node skipping 1%, 10% or 50% of its work passes one "
                           "answer, the relay's cost share, the honest false-reject rate seen here, and this "
                           "relay's own event-loop lag (which never counts against a node)",
                "responses": {"200": json_ok("the odds", {"type": "object", "properties": {
                    "checks": {"type": "object"}, "honest_false_reject": {"type": "object"},
                    "relay_loop_lag": {"type": "object"}}})}}},
            "/v1/libp2p": {"get": {
                "summary": "The relay's libp2p host (docs/mesh.md): its PeerId (= relay id), multiaddrs, the "
                           "gossipsub topics with the signed record each carries, and what crossed them",
                "responses": {"200": json_ok("the host", {"type": "object", "properties": {
                    "peer_id": {"type": "string"}, "multiaddrs": {"type": "array", "items": {"type": "string"}},
                    "topics": {"type": "object"}}}),
                    "404": problem("the relay runs no libp2p host (--no-libp2p)"),
                    "503": problem("the relay's libp2p host did not start (libp2p_failed, with the reason; the "
                                   "relay serves on), or is still starting (libp2p_starting, with Retry-After)")}}},
            "/beacon": {"get": {"summary": "The current signed beacon round",
                                "responses": {"200": json_ok("Beacon", _schema("Beacon"))}}},
            "/metrics": {"get": {"summary": "Prometheus metrics", "responses": {"200": {"description": "text"}}}},
            "/api": {"get": {"summary": "This API reference as a page (from /openapi.json)",
                             "responses": {"200": {"description": "HTML"}}}},
            "/v1/links": {"post": {
                "summary": "Store a LinkSample both endpoints signed (RTT, jitter, loss, bandwidth)",
                "requestBody": {"required": True, "content": {"application/json": {"schema": _schema("LinkSample")}}},
                "responses": {"201": json_ok("stored", {"type": "object"}), "400": problem("not JSON"),
                              "413": problem("too large (8 KiB)"),
                              "422": problem("invalid field, signature, an endpoint without a profile")}}},
            "/netgraph": {"get": {"summary": "The network graph: nodes with coordinates, measured edges, regions, "
                                             "what the coordinates were fitted from",
                                  "responses": {"200": json_ok("the graph", {"type": "object"})}}},
            "/netgraph/rtt": {"get": {
                "summary": "Measured and predicted RTT from this relay to a node (?to=NODE_ID)",
                "parameters": [{"name": "to", "in": "query", "required": True, "schema": {"type": "string"}}],
                "responses": {"200": json_ok("RTTs", {"type": "object"}), "400": problem("not a NodeId"),
                              "404": problem("unknown node")}}},
            "/v1/relays": {"get": {"summary": "The relays of this relay's cluster, with their URLs (live sessions "
                                              "fail over to them)",
                                   "responses": {"200": json_ok("relays", {"type": "object"})}}},
            "/v1/live": {"get": {"summary": "WebSocket: a node's live session (heartbeats, pings, challenges, "
                                            "roll calls, tasks; the protocol in web/sessions/live.py)",
                                 "responses": {"101": {"description": "switching to WebSocket"},
                                               "429": problem("over this address's live-session limits")}}},
            "/v1/probe": {"get": {"summary": "WebSocket: a landmark probe (another relay's node measures its RTT "
                                             "to this relay)",
                                  "responses": {"101": {"description": "switching to WebSocket"}}}},
            **job_paths(),
        },
    }
