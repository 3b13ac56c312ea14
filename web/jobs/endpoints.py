"""HTTP of dispatched work (docs/jobs.md): POST /v1/jobs, GET /v1/jobs[/{id}[/events]], DELETE /v1/jobs/{id},
GET /v1/blobs/{sha256}. Thin: the intake checks (signature, policy, quota, blobs) are here, the rest is the desk's.
Every refusal is a problem+json with a stable code; nothing a client sends gives a 500."""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from capsule.job_records import JobManifestV2, blob_shas, check_manifest
from capsule.peerid import PeerIdError
from capsule.signing import SignatureError, verify_record
from capsule.typed import ValidationError
from web.api.bodies import read_body
from web.api.ingest import parse_json
from web.api.problems import Problem
from web.jobs.book import TERMINAL, Job
from web.jobs.desk import JobDesk, ResultError, job_json

CLOCK_SKEW_S = 600  # a JobRequest or JobCancel signed further from the relay's clock is refused (replays)
WASM_MAGIC = b"\x00asm\x01\x00\x00\x00"


def desk_of(request: Request) -> JobDesk:
    desk: JobDesk = request.app.state.jobs
    return desk


async def _body(request: Request, limit: int) -> Any:
    return parse_json(await read_body(request, limit))


def _signed(kind: str, data: Any, now: float) -> Any:
    try:
        record = verify_record(kind, data)
    except ValidationError as exc:
        raise Problem(422, "invalid_field", f"a field of the {kind} is invalid", str(exc), exc.path) from None
    except SignatureError as exc:
        raise Problem(422, "bad_signature", "the signature does not verify", str(exc), f"$.{exc.field}") from None
    except (PeerIdError, RecursionError) as exc:
        raise Problem(422, "invalid_field", f"not a {kind}", str(exc)[:200]) from None
    at = data.get("created_at", data.get("at"))
    if abs(at - now) > CLOCK_SKEW_S:
        raise Problem(422, "stale_signature", f"the {kind} was signed too far from the relay's clock",
                      f"signed at {at}, the relay's clock reads {int(now)} (at most {CLOCK_SKEW_S} s apart)")
    return record


def _blobs(data: Any, limit: int) -> dict[str, bytes]:
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise Problem(422, "invalid_field", "blobs is an object of sha256 -> base64", field="$.blobs")
    out, total = {}, 0
    for sha, text in data.items():
        if not isinstance(text, str):
            raise Problem(422, "invalid_field", "a blob is base64 text", field=f"$.blobs.{sha[:64]}")
        try:
            raw = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raise Problem(422, "invalid_field", "a blob is not base64", field=f"$.blobs.{sha[:64]}") from None
        total += len(raw)
        if total > limit:
            raise Problem(413, "blobs_too_large", "the job's blobs are too large", f"more than {limit} bytes")
        if hashlib.sha256(raw).hexdigest() != sha:
            raise Problem(422, "blob_mismatch", "a blob does not hash to its name", f"{sha[:64]}",
                          f"$.blobs.{sha[:64]}")
        out[sha] = raw
    return out


async def post_job(request: Request) -> Response:
    desk = desk_of(request)
    limit = desk.config.blob_bytes_max * 4 // 3 + (1 << 20)
    body = await _body(request, limit)
    if not isinstance(body, dict) or "request" not in body:
        raise Problem(422, "invalid_field", "expected {\"request\": JobRequest, \"blobs\": {sha256: base64}}")
    now = time.time()
    job_request = _signed("JobRequest", body["request"], now)
    submitter = job_request.submitter
    if submitter not in desk.config.submitters:
        raise Problem(403, "unknown_submitter", "this relay does not take jobs from this key",
                      f"{submitter} is not among the relay's job submitters (ce-bench relay --job-submitter ID)")
    manifest: JobManifestV2 = job_request.manifest
    try:
        check_manifest(manifest, "$.request.manifest")
    except ValidationError as exc:
        raise Problem(422, "invalid_field", "a field of the manifest is invalid", str(exc), exc.path) from None
    blobs = _blobs(body.get("blobs"), desk.config.blob_bytes_max)
    if manifest.kind == "capsule":
        _capsule_job(manifest)
        if blobs:
            raise Problem(422, "unexpected_blob", "a capsule job uploads no blobs (every node has its capsule)",
                          field="$.blobs")
    else:
        _wasi_job(desk, manifest, blobs)
    in_flight = desk.book.in_flight(submitter)
    if in_flight + len(manifest.tasks) > desk.config.tasks_in_flight_max:
        raise Problem(429, "quota_exceeded", "too many tasks in flight for this submitter",
                      f"{in_flight} in flight + {len(manifest.tasks)} asked > {desk.config.tasks_in_flight_max}",
                      headers={"retry-after": "10"})
    try:
        job = desk.submit(body["request"], manifest, blobs, now)
    except ResultError as exc:
        raise Problem(409, exc.code, "the job exists", exc.detail) from None
    answer = {"id": job.id, "state": job.state, "tasks": len(job.tasks), "status": f"/v1/jobs/{job.id}",
              "events": f"/v1/jobs/{job.id}/events"}
    if desk.mirror is not None:  # in a cluster: in JetStream before the answer, so another relay can carry it on
        try:
            await asyncio.wait_for(desk.mirror.job_added(job, desk.blobs_of(job, blobs)), 10)
            answer["cluster"] = "stored in the cluster's bucket"
        except Exception as exc:  # noqa: BLE001 - NATS away: the job runs here; said, not hidden
            answer["cluster"] = f"not stored in the cluster ({type(exc).__name__}): only this relay holds it"
    return JSONResponse(answer, status_code=201)


CAPSULE_OUTPUT_MIN = 32 * 1024  # a capsule task's output is the node's signed NodeProfile (~10-20 KB of JSON)


def _capsule_job(manifest: JobManifestV2) -> None:
    """The ce-bench probes dispatched as a job: each task is one capsule run, its output the node's profile."""
    field = "$.request.manifest"
    if manifest.capsule is None or not manifest.probes or manifest.budget_ms is None:
        raise Problem(422, "invalid_field", "a capsule job names its capsule (sha256), probes and budget_ms",
                      field=field)
    if manifest.placement.redundancy != 1:
        raise Problem(422, "invalid_field", "a capsule job measures each node it runs on: redundancy must be 1",
                      f"redundancy {manifest.placement.redundancy}", f"{field}.placement.redundancy")
    if manifest.limits.output_bytes < CAPSULE_OUTPUT_MIN:
        raise Problem(422, "invalid_field", "a capsule task returns a NodeProfile: output_bytes too small",
                      f"{manifest.limits.output_bytes}; at least {CAPSULE_OUTPUT_MIN}", f"{field}.limits.output_bytes")


def _wasi_job(desk: JobDesk, manifest: JobManifestV2, blobs: dict[str, bytes]) -> None:
    if manifest.module is None:
        raise Problem(422, "invalid_field", "a wasi job names its module", field="$.request.manifest.module")
    wanted = blob_shas(manifest)
    unnamed = set(blobs) - set(wanted)
    if unnamed:  # stored and served for ever otherwise: only what the job runs is kept
        raise Problem(422, "unexpected_blob", "a blob the job does not name was sent", sorted(unnamed)[0],
                      "$.blobs")
    for sha in wanted:
        if sha not in blobs and not desk.store.has_blob(sha):
            raise Problem(422, "unknown_blob", "a blob the job names is neither uploaded nor held here",
                          f"{sha}: send it in blobs", "$.blobs")
    module = blobs.get(manifest.module.sha256) or desk.store.blob(manifest.module.sha256) or b""
    if not module.startswith(WASM_MAGIC):
        raise Problem(422, "not_wasm", "the module is not a WebAssembly binary (version 1)",
                      f"it starts with {module[:8].hex()}", "$.request.manifest.module")


def _job_id(request: Request) -> str:
    job_id: str = request.path_params["job_id"]
    if len(job_id) != 64 or any(c not in "0123456789abcdef" for c in job_id):
        raise Problem(400, "invalid_job_id", "a job id is 64 hex digits", job_id[:80], "job_id")
    return job_id


def _job(desk: JobDesk, request: Request) -> Job:
    job = desk.job(_job_id(request))
    if job is None:
        raise Problem(404, "unknown_job", "no such job here", request.path_params["job_id"])
    return job


async def get_job(request: Request) -> Response:
    """?tasks=false: the job's summary only (its counts), which a follower can poll cheaply."""
    with_tasks = request.query_params.get("tasks", "true") != "false"
    return JSONResponse(job_json(_job(desk_of(request), request), with_tasks=with_tasks))


async def list_jobs(request: Request) -> Response:
    desk = desk_of(request)
    jobs = sorted(desk.book.jobs.values(), key=lambda j: j.created_at, reverse=True)[:100]
    running: dict[str, int] = dict(desk.book.running)
    slow = sorted(n for n in desk.pace.ratios if desk.pace.slow(n))
    return JSONResponse({"jobs": [j.summary() for j in jobs], "running_by_node": running,
                         "workers": len(desk.by_node), "slow_nodes": slow})


async def delete_job(request: Request) -> Response:
    desk = desk_of(request)
    job = _job(desk, request)
    body = await _body(request, 16 * 1024)
    cancel = _signed("JobCancel", body, time.time())
    if cancel.job_id != job.id:
        raise Problem(422, "invalid_field", "the JobCancel names another job", cancel.job_id, "$.job_id")
    if cancel.submitter != job.submitter:
        raise Problem(403, "not_submitter", "only the job's submitter may cancel it", cancel.submitter)
    desk.cancel(job.id)
    return JSONResponse(job_json(job, with_tasks=False))


async def job_events(request: Request) -> Response:
    """Server-sent events: each change of the job and its tasks; ends once the job has ended."""
    desk = desk_of(request)
    job = _job(desk, request)
    last = request.headers.get("last-event-id", "0")
    after = int(last) if last.isascii() and last.isdigit() and len(last) < 19 else 0

    async def stream() -> AsyncIterator[str]:
        nonlocal after
        followers = desk.followers(job.id)
        yield "retry: 2000\n\n"
        while True:
            followers.changed.clear()  # before reading: a change from here on wakes the wait below
            fresh = [e for e in list(job.events) if e["id"] > after]
            for event in fresh:
                after = event["id"]
                yield f"id: {event['id']}\nevent: {event['event']}\ndata: {json.dumps(event)}\n\n"
            if fresh:
                continue  # read again before waiting: the job may have ended meanwhile
            if job.state in TERMINAL:
                return
            try:
                await asyncio.wait_for(followers.changed.wait(), 15)
            except TimeoutError:
                yield ": keep-alive\n\n"

    return StreamingResponse(stream(), media_type="text/event-stream",
                             headers={"cache-control": "no-store", "x-accel-buffering": "no"})


async def get_blob(request: Request) -> Response:
    sha = request.path_params["sha256"]
    if len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
        raise Problem(400, "invalid_sha256", "a blob is named by 64 hex digits", sha[:80], "sha256")
    data = desk_of(request).store.blob(sha)
    if data is None:
        raise Problem(404, "unknown_blob", "no such blob here", sha)
    return Response(data, media_type="application/wasm" if data.startswith(WASM_MAGIC) else "application/octet-stream",
                    headers={"cache-control": "public, max-age=31536000, immutable"})


ROUTES = [Route("/v1/jobs", post_job, methods=["POST"]), Route("/v1/jobs", list_jobs),
          Route("/v1/jobs/{job_id}", get_job), Route("/v1/jobs/{job_id}", delete_job, methods=["DELETE"]),
          Route("/v1/jobs/{job_id}/events", job_events), Route("/v1/blobs/{sha256}", get_blob)]
