"""The jobs routes in the relay's OpenAPI document (web/api/openapi.py merges them)."""

from __future__ import annotations

import json
from typing import Any

from capsule.schemas import SCHEMA_DIR

PROBLEM_REF = {"application/problem+json": {"schema": {"type": "object", "required": ["code"]}}}
JOB_ID = {"name": "job_id", "in": "path", "required": True, "schema": {"type": "string", "pattern": "^[0-9a-f]{64}$"}}


def _schema(name: str) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((SCHEMA_DIR / f"{name}.schema.json").read_text())
    schema.pop("$schema", None)
    return schema


def _problem(text: str) -> dict[str, Any]:
    return {"description": text, "content": PROBLEM_REF}


def _ok(text: str) -> dict[str, Any]:
    return {"description": text, "content": {"application/json": {"schema": {"type": "object"}}}}


def paths() -> dict[str, Any]:
    submit = {"type": "object", "required": ["request"], "properties": {
        "request": _schema("JobRequest"),
        "blobs": {"type": "object", "description": "sha256 -> base64 of the module and stdin blobs the job names",
                  "additionalProperties": {"type": "string"}}}}
    return {
        "/v1/jobs": {
            "post": {"summary": "Submit a CE job (a JobRequest signed by a submitter the relay's policy names, with "
                                "its blobs); docs/jobs.md",
                     "requestBody": {"required": True, "content": {"application/json": {"schema": submit}}},
                     "responses": {"201": _ok("queued: id, tasks, status and events URLs"),
                                   "400": _problem("not JSON"), "403": _problem("unknown_submitter"),
                                   "409": _problem("duplicate_job (the same signed request twice)"),
                                   "413": _problem("body_too_large, blobs_too_large"),
                                   "422": _problem("invalid_field, bad_signature, stale_signature, unknown_blob, "
                                                   "blob_mismatch, not_wasm"),
                                   "429": _problem("quota_exceeded (tasks in flight for this submitter)")}},
            "get": {"summary": "Recent jobs and the tasks running on each node",
                    "responses": {"200": _ok("jobs, running_by_node, workers")}}},
        "/v1/jobs/{job_id}": {
            "get": {"summary": "A job's state and, per task: state, accepted node, attempts (node, reason of the "
                               "placement, verdict, signed TaskReceipt), exit code, stdout, output sha256",
                    "parameters": [JOB_ID],
                    "responses": {"200": _ok("the job"), "400": _problem("invalid_job_id"),
                                  "404": _problem("unknown_job")}},
            "delete": {"summary": "Cancel a job (a JobCancel signed by its submitter)", "parameters": [JOB_ID],
                       "requestBody": {"required": True,
                                       "content": {"application/json": {"schema": _schema("JobCancel")}}},
                       "responses": {"200": _ok("the job, cancelled"), "403": _problem("not_submitter"),
                                     "404": _problem("unknown_job"), "422": _problem("invalid_field")}}},
        "/v1/jobs/{job_id}/events": {
            "get": {"summary": "Server-sent events of the job (job and task changes); resumes after Last-Event-ID; "
                               "ends when the job has ended", "parameters": [JOB_ID],
                    "responses": {"200": {"description": "text/event-stream"}, "404": _problem("unknown_job")}}},
        "/v1/blobs/{sha256}": {
            "get": {"summary": "A module or stdin blob by its sha256 (what nodes fetch before running a task)",
                    "parameters": [{"name": "sha256", "in": "path", "required": True, "schema": {"type": "string"}}],
                    "responses": {"200": {"description": "the bytes"}, "404": _problem("unknown_blob")}}},
    }
