"""`ce-bench job submit | status | cancel`: a submitter's side of dispatched work (docs/jobs.md). The manifest
(v2) is read, its module and stdin files are read and named by sha256, the JobRequest is signed with this
machine's key and posted; `--wait` / `--follow` read the job's server-sent events until it ends."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import ssl
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from capsule.job_records import JobManifestV2, check_manifest
from capsule.signing import Signer, node_id, sign
from capsule.typed import ValidationError, parse
from common.errors import UserError


def read_manifest(path: Path) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The manifest as it will be signed (files replaced by their sha256) and the blobs to upload."""
    try:
        raw = json.loads(path.read_text())
    except OSError as exc:
        raise UserError(f"cannot read the manifest {path}: {exc.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"the manifest {path} is not JSON: {exc}") from None
    except RecursionError:  # thousands of nested arrays: a bad file, not a traceback
        raise UserError(f"the manifest {path} is nested too deeply to be a manifest") from None
    if not isinstance(raw, dict):
        raise UserError(f"the manifest {path} is not a JSON object")
    blobs: dict[str, bytes] = {}

    def load(name: object, what: str) -> str:
        file = (path.parent / str(name)).resolve()
        try:
            data = file.read_bytes()
        except OSError as exc:
            raise UserError(f"cannot read {what} {file}: {exc.strerror}") from None
        sha = hashlib.sha256(data).hexdigest()
        blobs[sha] = data
        return sha

    module = raw.get("module")
    if isinstance(module, dict) and module.get("path") is not None:
        sha = load(module["path"], "the module")
        if module.get("sha256") not in (None, sha):
            raise UserError(f"the manifest names module sha256 {str(module['sha256'])[:16]}..., but "
                            f"{module['path']} is {sha[:16]}...")
        raw["module"] = {"sha256": sha}
    capsule = raw.get("capsule")
    if isinstance(capsule, dict) and capsule.get("path") is not None:  # named by its hash; not uploaded
        file = (path.parent / str(capsule["path"])).resolve()
        try:
            raw["capsule"] = {"sha256": hashlib.sha256(file.read_bytes()).hexdigest()}
        except OSError as exc:
            raise UserError(f"cannot read the capsule {file}: {exc.strerror}") from None
    for task in raw.get("tasks") or []:
        if isinstance(task, dict) and task.get("stdin_path") is not None:
            task["stdin_sha256"] = load(task.pop("stdin_path"), "a task's stdin")
    try:
        check_manifest(parse(JobManifestV2, raw))
    except ValidationError as exc:
        raise UserError(f"invalid manifest {path}: {exc}") from None
    return raw, blobs


class JobClient:
    def __init__(self, relay: str, ssl_context: ssl.SSLContext | None = None) -> None:
        self.relay = relay.rstrip("/")
        self.ssl_context = ssl_context

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.relay + path, data=data, method=method,
                                         headers={"content-type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=60, context=self.ssl_context) as resp:
                answer: dict[str, Any] = json.loads(resp.read())
                return answer
        except urllib.error.HTTPError as exc:
            try:
                problem = json.loads(exc.read())
                detail = f"{problem.get('title')}" + (f": {problem['detail']}" if problem.get("detail") else "")
                raise UserError(f"the relay refused ({exc.code} {problem.get('code')}): {detail}") from None
            except (ValueError, AttributeError):
                raise UserError(f"the relay answered HTTP {exc.code} at {path}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise UserError(f"cannot reach the relay at {self.relay}: {getattr(exc, 'reason', exc)}") from None

    def submit(self, manifest: dict[str, Any], blobs: dict[str, bytes], signer: Signer) -> dict[str, Any]:
        request = sign("JobRequest", {"v": 1, "submitter": node_id(signer), "manifest": manifest,
                                      "nonce": secrets.token_hex(16), "created_at": int(time.time())}, signer)
        return self._call("POST", "/v1/jobs", {"request": request,
                                               "blobs": {k: base64.b64encode(v).decode() for k, v in blobs.items()}})

    def status(self, job_id: str, tasks: bool = True) -> dict[str, Any]:
        return self._call("GET", f"/v1/jobs/{job_id}" + ("" if tasks else "?tasks=false"))

    def cancel(self, job_id: str, signer: Signer) -> dict[str, Any]:
        body = sign("JobCancel", {"job_id": job_id, "submitter": node_id(signer), "at": int(time.time())}, signer)
        return self._call("DELETE", f"/v1/jobs/{job_id}", body)

    def events(self, job_id: str) -> Iterator[dict[str, Any]]:
        """The job's events until it ends (reconnecting from the last id if the stream breaks)."""
        last = 0
        while True:
            request = urllib.request.Request(f"{self.relay}/v1/jobs/{job_id}/events",
                                             headers={"last-event-id": str(last), "accept": "text/event-stream"})
            try:
                with urllib.request.urlopen(request, timeout=60, context=self.ssl_context) as resp:
                    for raw in resp:
                        line = raw.decode("utf-8", "replace").rstrip("\n")
                        if line.startswith("data: "):
                            event = json.loads(line[6:])
                            last = event.get("id", last)
                            yield event
                return
            except (urllib.error.URLError, OSError, ValueError):
                time.sleep(1.0)  # the relay restarted or the stream broke: resume from the last event


def follow(client: JobClient, job_id: str, json_out: bool) -> dict[str, Any]:
    """Shows progress until the job ends; returns its final state."""
    tty = sys.stderr.isatty() and not json_out
    total = None
    with _Bar(tty) as bar:
        for event in client.events(job_id):
            if event.get("event") == "job":
                counts = event.get("counts") or {}
                total = total or sum(counts.values())
                bar.show(counts, total or 0)
            elif not json_out and event.get("state") == "waiting":  # said on a terminal too: it may wait for ever
                click.echo(f"\ntask {event.get('task')} waits: {event.get('reason')}", err=True)
            elif not tty and not json_out and event.get("state") in ("failed", "requeued", "disputed"):
                click.echo(f"task {event.get('task')}: {event.get('state')}"
                           + (f" ({event.get('reason') or event.get('error')})" if event.get("reason") or
                              event.get("error") else ""), err=True)
            if event.get("event") == "task":
                bar.tick(client, job_id)
    return client.status(job_id)


class _Bar:
    """A one-line progress bar on a terminal; a line per change of the counts otherwise."""

    def __init__(self, tty: bool) -> None:
        self.tty = tty
        self.last = ""
        self.polled = 0.0

    def __enter__(self) -> _Bar:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.tty:
            click.echo("", err=True)

    def show(self, counts: dict[str, int], total: int) -> None:
        done = counts.get("done", 0) + counts.get("failed", 0) + counts.get("cancelled", 0)
        words = (f"queued {counts.get('queued', 0)}  running {counts.get('running', 0)}  done {counts.get('done', 0)}"
                 f"  failed {counts.get('failed', 0)}")
        if self.tty:
            width = 30
            filled = int(width * done / total) if total else 0
            click.echo(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total}  {words}", err=True, nl=False)
        elif words != self.last:
            click.echo(words, err=True)
        self.last = words

    def tick(self, client: JobClient, job_id: str) -> None:
        if time.monotonic() - self.polled < 1.0:  # task events say little of the counts; a poll a second does
            return
        self.polled = time.monotonic()
        counts = client.status(job_id, tasks=False).get("counts") or {}
        self.show(counts, sum(counts.values()))
