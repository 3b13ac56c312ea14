"""The relay's job desk: the adapter between the pure book (web/jobs/book.py), the job store, the live sessions
that offered slots, and the rest of the relay through NodeView (web/jobs/ports.py). One loop places work: woken
by a new job, a result, a node that joins or leaves, and every tick_s to give up attempts past their deadline."""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from capsule.job_records import JobManifestV2, blob_shas
from capsule.signing import SignatureError, verify_record
from capsule.typed import ValidationError
from web.jobs.book import TERMINAL, Changes, Dispatch, Job, JobBook, Task
from web.jobs.cluster_jobs import ADOPT_INTERVAL_S, JobMirror
from web.jobs.config import JobsConfig
from web.jobs.job_store import JobStore
from web.jobs.pace import Pace
from web.jobs.ports import NodeView
from web.jobs.rules import Candidate, odds

log = logging.getLogger("ce.jobs")
Send = Callable[[dict[str, Any]], Awaitable[None]]


class ResultError(ValueError):
    """A task_result that cannot be taken; `code` is stable."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


@dataclass
class Worker:
    session_id: str
    node_id: str
    address: str
    slots: int
    send: Send
    kinds: frozenset[str] = frozenset({"wasi"})


@dataclass
class Followers:
    """Who waits for a job's events (SSE): woken on each change."""

    changed: asyncio.Event = field(default_factory=asyncio.Event)


class JobDesk:
    def __init__(self, config: JobsConfig, store: JobStore, view: NodeView) -> None:
        self.config = config
        self.store = store
        self.view = view
        self.book = JobBook(config)
        self.workers: dict[str, Worker] = {}      # session id -> a session that offered slots
        self.by_node: dict[str, str] = {}         # node id -> its latest such session
        self._wake = asyncio.Event()
        self._followers: dict[str, Followers] = {}
        self._background: set[asyncio.Task[None]] = set()
        self.verdicts: dict[str, int] = {"agreed": 0, "wrong": 0}  # checked outputs, since the relay started
        self.pace = Pace()  # delivered work against proven speed (web/jobs/pace.py)
        self.mirror: JobMirror | None = None  # the cluster's copy of the jobs (web/jobs/cluster_jobs.py), with --nats

    def load(self, now: float) -> int:
        """Jobs not finished when the relay stopped: their running attempts are placed again (a late result of
        one is ignored: its attempt is no longer running)."""
        self.book.checked.update(self.store.checked())
        jobs = self.store.unfinished()
        for job in jobs:
            changes = Changes()
            for task in job.tasks:
                for a in task.running():
                    a.state, a.error, a.ended_at = "lost", "the relay restarted", now
                    changes.attempts.append((job, task, a))
            self.book.add(job, now)
            self._save(changes)
        return len(jobs)

    # --- jobs ----------------------------------------------------------------------------------------

    def submit(self, request: dict[str, Any], manifest: JobManifestV2, blobs: dict[str, bytes], now: float) -> Job:
        """A verified JobRequest (web/jobs/endpoints.py checked it and the policy): stored, then queued."""
        from capsule.canonical import canonical_bytes

        job_id = hashlib.sha256(canonical_bytes(request)).hexdigest()
        if job_id in self.book.jobs or self.store.load_job(job_id) is not None:
            raise ResultError("duplicate_job", f"job {job_id} exists (a new nonce makes a new job)")
        secret = secrets.token_hex(32)
        seed = hashlib.sha256(f"{self.view.beacon_value()}:{secret}".encode()).hexdigest()
        share = manifest.placement.audit if manifest.placement.audit is not None else self.config.audit_share
        job = Job(job_id, request["submitter"], manifest, request, now, seed,
                  hashlib.sha256(bytes.fromhex(secret)).hexdigest(), secret, share)
        self.book.add(job, now)
        self.store.add_job(job, blobs)  # before the answer: an acknowledged job survives kill -9
        self._wake.set()
        return job

    def cancel(self, job_id: str) -> Job | None:
        job = self.book.jobs.get(job_id)
        if job is None:
            return None
        changes = self.book.cancel(job_id, time.time())
        self._after(changes)
        for node_id, jid in changes.cancel:
            worker = self._worker_of(node_id)
            if worker is not None:
                self._spawn(worker.send({"type": "task_cancel", "job": jid}))
        return job

    def job(self, job_id: str) -> Job | None:
        job = self.book.jobs.get(job_id)
        return job if job is not None else self.store.load_job(job_id)

    def followers(self, job_id: str) -> Followers:
        return self._followers.setdefault(job_id, Followers())

    def blobs_of(self, job: Job, uploaded: dict[str, bytes]) -> dict[str, bytes]:
        """Every blob the job names (uploaded now or held here)."""
        return {sha: uploaded[sha] if sha in uploaded else (self.store.blob(sha) or b"")
                for sha in blob_shas(job.manifest)}

    async def adopt_loop(self) -> None:
        """Carries on the jobs of relays of the cluster that are gone (web/jobs/cluster_jobs.py)."""
        mirror = self.mirror
        if mirror is None:
            return
        while True:
            await asyncio.sleep(ADOPT_INTERVAL_S)
            try:
                for job in await mirror.orphans(lambda job_id: job_id in self.book.jobs):
                    blobs = await mirror.blobs([s for s in blob_shas(job.manifest) if not self.store.has_blob(s)])
                    if self.store.load_job(job.id) is None:
                        self.store.add_job(job, blobs)
                    # the gone relay's running attempts are placed again here, as after a restart (load()): a
                    # node that never comes to this relay held them forever (CI, 2026-12-07: 14 tasks "running"
                    # on two nodes that did not move, for 180 s); a late result of one is ignored
                    now = time.time()
                    for task in job.tasks:
                        for a in task.running():
                            a.state, a.error, a.ended_at = "lost", "the relay that placed it is gone", now
                    self.store.save([job], [(job, t) for t in job.tasks],
                                    [(job, t, a) for t in job.tasks for a in t.attempts], {})
                    self.book.add(job, time.time())
                    self._wake.set()
            except Exception:  # noqa: BLE001 - NATS away, a bucket being made: tried again at the next pass
                log.exception("adopting jobs failed")

    # --- sessions ------------------------------------------------------------------------------------

    def join(self, session_id: str, node_id: str, address: str, slots: int, send: Send,
             kinds: frozenset[str] = frozenset({"wasi"})) -> None:
        if slots <= 0:
            self.leave(session_id)
            return
        old = self.by_node.get(node_id)
        if old is not None and old != session_id:
            self.workers.pop(old, None)
        self.workers[session_id] = Worker(session_id, node_id, address, slots, send, kinds)
        self.by_node[node_id] = session_id
        self._wake.set()

    def leave(self, session_id: str) -> None:
        worker = self.workers.pop(session_id, None)
        if worker is None or self.by_node.get(worker.node_id) != session_id:
            return
        del self.by_node[worker.node_id]
        self._after(self.book.lost(worker.node_id, time.time(), "the node's session closed"))
        self._wake.set()

    def _worker_of(self, node_id: str) -> Worker | None:
        sid = self.by_node.get(node_id)
        return self.workers.get(sid) if sid is not None else None

    # --- results -------------------------------------------------------------------------------------

    async def on_result(self, node_id: str, message: dict[str, Any]) -> None:
        receipt, stdout_b64 = message.get("receipt"), message.get("stdout")
        try:
            verify_record("TaskReceipt", receipt)
        except (ValidationError, SignatureError) as exc:
            raise ResultError("invalid_receipt", str(exc)) from None
        if not isinstance(receipt, dict):  # (verify_record parsed it as an object; said, not asserted)
            raise ResultError("invalid_receipt", "a receipt is an object")
        if receipt["node_id"] != node_id:
            raise ResultError("invalid_receipt", "the receipt is signed by another node than this session's")
        found = self.book.attempt_of(receipt["job_id"], receipt["task"], receipt["attempt"], node_id)
        if found is None:  # late (given up, cancelled), unknown, or another node's: ignored, never counted twice
            raise ResultError("stale_result", f"no running attempt {receipt['job_id'][:16]}.../{receipt['task']}/"
                                              f"{receipt['attempt']} of this node")
        job, task, attempt = found
        standing = self.view.standing(node_id)
        if standing is not None and standing.flagged:  # caught lying: what it still returns is placed again
            self._after(self.book.lost(node_id, time.time(), "the node is flagged: its result is not taken"))
            self._wake.set()
            raise ResultError("stale_result", "this node is flagged (a wrong answer or output): results are not taken")
        if not isinstance(stdout_b64, str):
            raise ResultError("invalid_message", "task_result needs stdout (base64)")
        try:
            stdout = base64.b64decode(stdout_b64, validate=True)
        except (binascii.Error, ValueError):
            raise ResultError("invalid_message", "stdout is not base64") from None
        error = receipt["error"]
        expected = job.manifest.module.sha256 if job.manifest.module else (job.manifest.capsule.sha256 if
                                                                            job.manifest.capsule else "")
        if receipt["module_sha256"] != expected:
            error = f"the node ran module {receipt['module_sha256'][:16]}..., not the job's"
        elif len(stdout) > job.manifest.limits.output_bytes:
            error = f"stdout of {len(stdout)} bytes exceeds output_bytes {job.manifest.limits.output_bytes}"
        elif error is None and (receipt["output_sha256"] != hashlib.sha256(stdout).hexdigest()
                                or receipt["exit_code"] is None or receipt["output_bytes"] != len(stdout)):
            error = "the receipt does not describe the stdout sent"
        if error is None and job.manifest.kind == "capsule":
            error = capsule_output_problem(stdout, node_id, attempt.beacon)
        out_sha = receipt["output_sha256"] if error is None else None
        changes = self.book.result(job, task, attempt, receipt["exit_code"] if error is None else None, out_sha,
                                   error, float(receipt["wall_ms"]), receipt, stdout, time.time())
        self._after(changes)
        if task.state == "done" and changes.verdicts:  # replicas agreed: their pace is comparable
            runs = []
            for a in task.attempts:
                s = self.view.standing(a.node_id) if a.verdict == "agreed" and a.wall_ms is not None else None
                if s is not None and a.wall_ms is not None:
                    runs.append((a.node_id, a.wall_ms, s.cpu_gflops))
            self.pace.add_task(runs)
        for verdict in changes.verdicts:
            self.verdicts["agreed" if verdict.agreed else "wrong"] += 1
            if not verdict.agreed:  # its unchecked outputs in running jobs are checked; its attempts placed again
                self._after(self.book.suspect(verdict.node_id, time.time()))
                self._after(self.book.lost(verdict.node_id, time.time(), "the node's output lost a majority"))
                await self.view.wrong_output(verdict.node_id, f"job {verdict.job_id[:16]}... task {verdict.task}: "
                                                              "its output lost the majority")
        self._wake.set()

    def delivered(self, node_id: str) -> dict[str, Any]:
        """A node's delivered work, and how its pace compares with its peers' on the same tasks."""
        return {**self.store.delivered(node_id), "pace": self.pace.of(node_id)}

    def checks(self) -> dict[str, Any]:
        """GET /v1/checks "jobs": the odds, and the verdicts this relay gave (a wrong verdict on an honest node
        is a false reject: bench/dispatch.py measures their rate on honest nodes, BENCHMARKS.md)."""
        return {**odds(self.config.audit_share, self.config.audit_all_until_checked),
                "verdicts_since_start": dict(self.verdicts),
                "honest_false_reject": "an honest node's output is rejected only when colluders outvote it (the "
                                       "odds above); honest replicas agree bit for bit (a deterministic world for "
                                       "the module). Measured on honest nodes: bench/dispatch.py part 4, its "
                                       "figure and date in BENCHMARKS.md"}

    # --- the loop ------------------------------------------------------------------------------------

    async def run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.config.tick_s)
            self._wake.clear()
            try:
                await self.step(time.time())
            except Exception:  # noqa: BLE001 - the loop must go on; the bug is logged
                log.exception("job placement failed")

    async def step(self, now: float) -> list[Dispatch]:
        self._after(self.book.expire(now))
        if not self.book.active:
            return []
        dispatches, changes = self.book.place(self.candidates(), self._rtt_for, now)
        self._after(changes)
        beacon = self.view.beacon()
        for d in dispatches:
            worker = self._worker_of(d.attempt.node_id)
            if worker is not None:
                self._spawn(worker.send(task_message(d, beacon)))
        return dispatches

    def candidates(self) -> list[Candidate]:
        out = []
        for worker in self.workers.values():
            if self.by_node.get(worker.node_id) != worker.session_id:
                continue
            s = self.view.standing(worker.node_id)
            if s is None or not s.live:
                continue
            out.append(Candidate(worker.node_id, worker.address, s.proven, worker.slots, region=s.region,
                                 slow=self.pace.slow(worker.node_id), kinds=worker.kinds,
                                 cpu_gflops=s.cpu_gflops, tokens_per_sec=s.tokens_per_sec, gpu_tflops=s.gpu_tflops,
                                 mem_bw_gbps=s.mem_bw_gbps, memory_mb=s.memory_mb,
                                 storage_free_gb=s.storage_free_gb))
        return out

    def _rtt_for(self, job: Job) -> Callable[[str], float | None] | None:
        near = job.manifest.placement.near
        if near is None:
            return None
        table = self.view.rtt_from(near) or {}
        return table.get

    def _after(self, changes: Changes) -> None:
        self._save(changes)
        if self.mirror is not None:  # decided tasks and ended jobs, for a relay that may carry the job on
            for job, task in changes.tasks:
                if task.state in TERMINAL:
                    self.mirror.task_ended(job, task)
            for job in changes.jobs:
                if job.state in TERMINAL:
                    self.mirror.job_ended(job)
        for job in {id(j): j for j in [*changes.jobs, *(j for j, _ in changes.tasks),
                                       *(j for j, _, _ in changes.attempts)]}.values():
            self.followers(job.id).changed.set()
            if job.state in TERMINAL:  # its followers read the end and leave; nothing wakes them again
                self._followers.pop(job.id, None)
        if len(self.book.jobs) > self.config.finished_kept * 2:
            self.book.forget(self.config.finished_kept)

    def _save(self, changes: Changes) -> None:
        if changes.attempts or changes.tasks or changes.jobs:
            nodes = {v.node_id for v in changes.verdicts}
            self.store.save(changes.jobs, changes.tasks, changes.attempts, {n: self.book.checked[n] for n in nodes})

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)


def task_message(d: Dispatch, beacon: dict[str, Any] | None) -> dict[str, Any]:
    m, spec = d.job.manifest, d.task.spec
    message = {"type": "task", "job": d.job.id, "task": d.task.index, "attempt": d.attempt.n, "kind": m.kind,
               "module": m.module.sha256 if m.module else None, "args": list(spec.args), "stdin": spec.stdin_sha256,
               "limits": {"memory_mib": m.limits.memory_mib, "wall_ms": m.limits.wall_ms, "fuel": m.limits.fuel,
                          "output_bytes": m.limits.output_bytes}}
    if m.kind == "capsule" and m.capsule is not None:  # the probes, with the beacon round their inputs come from
        message.update(capsule=m.capsule.sha256, probes=list(m.probes or []), budget_ms=m.budget_ms,
                       beacon=beacon)
        d.attempt.beacon = beacon
    return message


def job_json(job: Job, with_tasks: bool = True) -> dict[str, Any]:
    body = job.summary()
    body["audit_share"] = job.audit_share
    body["redundancy"] = job.manifest.placement.redundancy
    # the draws' secret: committed to from the start, shown once the job ended (anyone can recheck the draws)
    body["seed_commitment"] = job.secret_sha256
    body["secret"] = job.secret if job.state in TERMINAL else None
    if with_tasks:
        body["tasks"] = [task_json(t) for t in job.tasks]
    return body


def task_json(t: Task) -> dict[str, Any]:
    """A task as anyone may read it. Until it is decided, whether it is audited (and so how many outputs it
    waits for) is not shown: a node that could read it before answering would lie only where unchecked."""
    decided = t.state in TERMINAL
    return {"task": t.index, "state": t.state,
            "node_id": next((a.node_id for a in t.attempts if a.verdict in ("agreed", "unchecked")), None),
            "exit_code": t.exit_code, "output_sha256": t.output_sha256, "stdout": _text(t.stdout),
            "stdout_base64": None if t.stdout is None else base64.b64encode(t.stdout).decode(), "error": t.error,
            "waiting": t.waiting,
            "audited": t.audited if decided else None, "replicas": t.replicas if decided else None,
            "attempts": [a.to_json() for a in t.attempts]}


def capsule_output_problem(stdout: bytes, node_id: str, beacon: dict[str, Any] | None) -> str | None:
    """What is wrong with a capsule task's output (None: a NodeProfile of this node, signed by it, on the beacon
    round it was sent)."""
    try:
        profile = json.loads(stdout)
        verify_record("NodeProfile", profile)
    except (ValueError, ValidationError, SignatureError) as exc:
        return f"the output is not a signed NodeProfile: {str(exc)[:200]}"
    if profile["node_id"] != node_id:
        return "the profile is another node's"
    if beacon is not None and profile["beacon"].get("value") != beacon.get("value"):
        return "the profile was not measured on the beacon round the task named"
    return None


def _text(data: bytes | None) -> str | None:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None
