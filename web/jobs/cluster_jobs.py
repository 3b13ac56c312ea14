"""Jobs in a relay cluster (docs/jobs.md "Faults"): the cluster's copy of every job lives in a JetStream key-value
bucket (`<bucket>-jobs`), so when the relay that took a job dies another relay of the cluster carries it on.

    job.<id>            the JobRequest, its seed and secret, its owner (the relay placing it) and its state
    task.<id>.<index>   a decided task: state, exit code, output, the attempts behind it
    blob.<sha256>.<n>   the job's module and stdin blobs, in chunks of BLOB_CHUNK_BYTES (a KV value is one NATS
                        message: at most the server's max_payload, 1 MiB by default)

The owner writes a job before it is acknowledged and each task once it is decided. Every relay looks every
ADOPT_INTERVAL_S for jobs not ended whose owner is no longer among the live peers (the cluster's beacon presence);
one of them takes the job over with a compare-and-set on its key (the bucket's revision), reads the decided
tasks and the blobs, and places the rest on its own sessions (the nodes moved there when their relay died).
A task the dead relay decided but had not written yet is run again: it is never lost, at worst computed twice.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from nats.js.errors import Error as JetStreamError
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError, NoKeysError

from capsule.job_records import JobManifestV2
from capsule.typed import parse
from web.jobs.book import TERMINAL, Attempt, Job, Task

log = logging.getLogger("ce.jobs.cluster")
BLOB_CHUNK_BYTES = 512 * 1024
ADOPT_INTERVAL_S = 2.0


def task_json(task: Task) -> dict[str, Any]:
    return {"state": task.state, "replicas": task.replicas, "audited": task.audited, "exit_code": task.exit_code,
            "output_sha256": task.output_sha256, "error": task.error,
            "stdout": None if task.stdout is None else base64.b64encode(task.stdout).decode(),
            "attempts": [{k: v for k, v in a.to_json().items() if k != "attempt"} | {"n": a.n, "address": a.address}
                         for a in task.attempts]}


def task_of(index: int, spec: Any, body: dict[str, Any]) -> Task:
    task = Task(index, spec, body["replicas"], body["state"], [], body["audited"], body["exit_code"],
                body["output_sha256"], None if body["stdout"] is None else base64.b64decode(body["stdout"]),
                body["error"])
    for a in body["attempts"]:
        task.attempts.append(Attempt(a["n"], a["node_id"], a["address"], a["placed_at"], a["reason"], a["state"],
                                     a["exit_code"], a["output_sha256"], a["error"], a["wall_ms"], a["receipt"],
                                     a["verdict"], a["ended_at"]))
    return task


def decided_by_receipts(task: Task) -> bool:
    """A task read back from the bucket counts as decided only with its output's signed receipts (a failed or
    cancelled task has none to show and is simply run again)."""
    from capsule.signing import verify_record

    if task.state != "done" or task.output_sha256 is None or task.stdout is None:
        return False
    if hashlib.sha256(task.stdout).hexdigest() != task.output_sha256:
        return False
    backing = [a for a in task.attempts if a.verdict in ("agreed", "unchecked") and a.receipt is not None]
    for a in backing:
        receipt = verify_record("TaskReceipt", a.receipt)
        if receipt.node_id != a.node_id or receipt.output_sha256 != task.output_sha256:
            return False
    return bool(backing)


class JobMirror:
    def __init__(self, relay_id: str, bucket: Callable[[], Awaitable[Any]],
                 alive_peers: Callable[[float], set[str]], submitters: frozenset[str] = frozenset()) -> None:
        self.relay_id = relay_id
        self.submitters = submitters  # this relay's policy: a job of another key is not taken over
        self._bucket = bucket          # the KV bucket (made on first use; the cluster's connection)
        self.alive_peers = alive_peers
        self._writes: asyncio.Queue[tuple[str, bytes]] = asyncio.Queue()
        self.adopted = 0

    # --- the owner's writes --------------------------------------------------------------------------

    def _job_value(self, job: Job) -> bytes:
        return json.dumps({"request": job.request, "created_at": job.created_at, "seed": job.seed,
                           "secret": job.secret, "audit_share": job.audit_share, "owner": self.relay_id,
                           "state": job.state}).encode()

    async def job_added(self, job: Job, blobs: dict[str, bytes]) -> None:
        """Written before the job is acknowledged (a relay that dies next loses nothing it answered)."""
        kv = await self._bucket()
        for sha, data in blobs.items():
            chunks = [data[i:i + BLOB_CHUNK_BYTES] for i in range(0, len(data), BLOB_CHUNK_BYTES)] or [b""]
            for n, chunk in enumerate(chunks):
                await kv.put(f"blob.{sha}.{n}", chunk)
            await kv.put(f"blob.{sha}", str(len(chunks)).encode())
        await kv.put(f"job.{job.id}", self._job_value(job))

    def task_ended(self, job: Job, task: Task) -> None:
        self._writes.put_nowait((f"task.{job.id}.{task.index}", json.dumps(task_json(task)).encode()))

    def job_ended(self, job: Job) -> None:
        self._writes.put_nowait((f"job.{job.id}", self._job_value(job)))

    async def write_loop(self) -> None:
        """Writes in order (a job's end after its tasks), one at a time; one that fails is tried again."""
        while True:
            key, value = await self._writes.get()
            while True:
                try:
                    await (await self._bucket()).put(key, value)
                    break
                except (TimeoutError, JetStreamError, OSError) as exc:
                    log.warning("job state not written to the cluster yet", extra={"key": key, "error": str(exc)})
                    await asyncio.sleep(1.0)

    # --- adoption ------------------------------------------------------------------------------------

    async def orphans(self, known: Callable[[str], bool]) -> list[Job]:
        """Jobs not ended whose owner is gone, each taken over by this relay (compare-and-set on its key)."""
        kv = await self._bucket()
        try:
            keys = [k for k in await kv.keys() if k.startswith("job.")]
        except NoKeysError:
            return []
        alive = {self.relay_id, *self.alive_peers(time.time())}
        taken = []
        for key in keys:
            try:
                entry = await kv.get(key)
                body = json.loads(entry.value)
                if body["state"] in TERMINAL or body["owner"] in alive or known(key[4:]):
                    continue
                self._check_request(key[4:], body["request"])
                body["owner"] = self.relay_id
                try:
                    await kv.update(key, json.dumps(body).encode(), last=entry.revision)
                except KeyWrongLastSequenceError:
                    continue  # another relay took it first
                taken.append(await self._load(kv, key[4:], body))
            except (ValueError, KeyError, TypeError, JetStreamError) as exc:
                # what a relay user wrote into the bucket is a claim: a job that does not verify is skipped
                # (and said), never run, and never stops the other jobs' adoption
                log.warning("a job in the cluster's bucket was not taken over",
                            extra={"key": key[:80], "error": f"{type(exc).__name__}: {str(exc)[:200]}"})
                continue
            self.adopted += 1
            log.info("job adopted from a relay that is gone", extra={"job": key[4:]})
        return taken

    def _check_request(self, job_id: str, request: Any) -> None:
        """The stored request must be the signed JobRequest of a submitter this relay admits, named by its hash."""
        from capsule.canonical import canonical_bytes
        from capsule.job_records import check_manifest
        from capsule.signing import verify_record

        record = verify_record("JobRequest", request)  # ValidationError / SignatureError: ValueErrors
        check_manifest(record.manifest)
        if hashlib.sha256(canonical_bytes(request)).hexdigest() != job_id:
            raise ValueError("the job's key is not the hash of its request")
        if record.submitter not in self.submitters:
            raise ValueError(f"submitter {record.submitter} is not admitted by this relay")

    async def _load(self, kv: Any, job_id: str, body: dict[str, Any]) -> Job:
        request = body["request"]
        manifest = parse(JobManifestV2, request["manifest"])
        job = Job(job_id, request["submitter"], manifest, request, body["created_at"], body["seed"],
                  hashlib.sha256(bytes.fromhex(body["secret"])).hexdigest(), body["secret"], body["audit_share"],
                  "running")
        tasks = []
        for index, spec in enumerate(manifest.tasks):
            try:
                entry = await kv.get(f"task.{job_id}.{index}")
                task = task_of(index, spec, json.loads(entry.value))
                if not decided_by_receipts(task):
                    raise ValueError("a decided task without the signed receipts behind its output")
                tasks.append(task)
            except (KeyNotFoundError, ValueError, KeyError, TypeError):  # missing or unverifiable: run again
                tasks.append(Task(index, spec, manifest.placement.redundancy))
        job.tasks = tasks
        return job

    async def blobs(self, shas: list[str]) -> dict[str, bytes]:
        kv = await self._bucket()
        out = {}
        for sha in shas:
            count = int((await kv.get(f"blob.{sha}")).value)
            if not 0 < count <= 64:  # 64 chunks of 512 KiB: beyond any job's blob limit
                raise ValueError(f"blob {sha[:16]}... has {count} chunks")
            data = b"".join([(await kv.get(f"blob.{sha}.{n}")).value for n in range(count)])
            if hashlib.sha256(data).hexdigest() != sha:
                raise ValueError(f"blob {sha[:16]}... in the bucket does not hash to its name")
            out[sha] = data
        return out
