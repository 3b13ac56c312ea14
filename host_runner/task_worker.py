"""A node's side of dispatched work (docs/jobs.md): the tasks its relay sends on the live session, run in
`slots` worker threads under the manifest's limits, each answered with a signed TaskReceipt and its stdout.

    relay -> node  {"type": "task", "job": HEX64, "task": I, "attempt": A, "kind": "wasi", "module": HEX64,
                    "args": [...], "stdin": HEX64 | null, "limits": {...}}
    node -> relay  {"type": "task_result", "receipt": TaskReceipt, "stdout": BASE64}
    relay -> node  {"type": "task_cancel", "job": HEX64}     (tasks of that job not begun are dropped)
    node -> relay  {"type": "jobs", "slots": N}              (after the first heartbeat; 0: no more work)

Modules and stdin blobs are fetched from the relay by sha256 (GET /v1/blobs/{sha256}) and checked against it;
a node runs nothing whose bytes do not hash to the name the task gave.
"""

from __future__ import annotations

import base64
import hashlib
import json
import queue
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from capsule.signing import Signer, node_id, sign
from host_runner.wasi_task import ModuleError, TaskLimitsRt, TaskOutcome, run_task, task_seed

BLOB_CACHE_BYTES = 256 << 20  # modules and stdin blobs kept in memory, least recently used first out
MAX_BLOB_BYTES = 64 << 20     # the largest blob a node fetches


class BlobCache:
    def __init__(self, fetch: Callable[[str], bytes]) -> None:
        self._fetch = fetch
        self._blobs: OrderedDict[str, bytes] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, sha256: str) -> bytes:
        with self._lock:
            if sha256 in self._blobs:
                self._blobs.move_to_end(sha256)
                return self._blobs[sha256]
        data = self._fetch(sha256)
        if hashlib.sha256(data).hexdigest() != sha256:
            raise ModuleError(f"the relay's blob {sha256[:16]}... does not hash to its name; not run")
        with self._lock:
            self._blobs[sha256] = data
            while sum(len(b) for b in self._blobs.values()) > BLOB_CACHE_BYTES and len(self._blobs) > 1:
                self._blobs.popitem(last=False)
        return data


def http_fetcher(relay_url: Callable[[], str], ssl_context: ssl.SSLContext | None) -> Callable[[str], bytes]:
    def fetch(sha256: str) -> bytes:
        url = f"{relay_url()}/v1/blobs/{sha256}"
        try:
            with urllib.request.urlopen(url, timeout=30, context=ssl_context) as resp:
                data: bytes = resp.read(MAX_BLOB_BYTES + 1)
        except (OSError, urllib.error.URLError) as exc:
            raise ModuleError(f"cannot fetch blob {sha256[:16]}... from the relay: {exc}") from None
        if len(data) > MAX_BLOB_BYTES:
            raise ModuleError(f"blob {sha256[:16]}... is larger than {MAX_BLOB_BYTES} bytes; not run")
        return data
    return fetch


def parse_capsule_task(message: dict[str, Any]) -> tuple[str, int, int, str, list[str], int, dict[str, Any],
                                                        TaskLimitsRt]:
    """A capsule task: the capsule's sha256, the probes, the budget per phase, the beacon its inputs come from."""
    job, task, attempt = message.get("job"), message.get("task"), message.get("attempt")
    capsule, probes, budget_ms, beacon = (message.get(k) for k in ("capsule", "probes", "budget_ms", "beacon"))
    if (not isinstance(job, str) or len(job) != 64 or type(task) is not int or type(attempt) is not int
            or not isinstance(capsule, str) or len(capsule) != 64 or not isinstance(probes, list)
            or not all(isinstance(p, str) for p in probes) or type(budget_ms) is not int
            or not isinstance(beacon, dict) or not isinstance(beacon.get("value"), str)):
        raise ValueError("malformed capsule task")
    limits = parse_task({**message, "module": capsule, "args": [], "stdin": None})[6]
    return job, task, attempt, capsule, probes, budget_ms, beacon, limits


def parse_task(message: dict[str, Any]) -> tuple[str, int, int, str, list[str], str | None, TaskLimitsRt]:
    """The fields of a task message, strictly typed (a relay is a peer, not a trusted source)."""
    job, task, attempt = message.get("job"), message.get("task"), message.get("attempt")
    module, args = message.get("module"), message.get("args")
    stdin, limits = message.get("stdin"), message.get("limits")
    if (not isinstance(job, str) or len(job) != 64 or type(task) is not int or type(attempt) is not int
            or not isinstance(module, str) or len(module) != 64 or not isinstance(args, list)
            or not all(isinstance(a, str) for a in args) or not (stdin is None or isinstance(stdin, str))
            or not isinstance(limits, dict)):
        raise ValueError("malformed task message")
    memory_mib, wall_ms, fuel, output_bytes = (limits.get(k) for k in ("memory_mib", "wall_ms", "fuel", "output_bytes"))
    if (type(memory_mib) is not int or not 1 <= memory_mib <= 4096 or type(wall_ms) is not int
            or not 1 <= wall_ms <= 3_600_000 or not (fuel is None or (type(fuel) is int and fuel > 0))
            or type(output_bytes) is not int or not 0 <= output_bytes <= 1 << 20):
        raise ValueError("malformed task limits")
    return job, task, attempt, module, args, stdin, TaskLimitsRt(memory_mib << 20, wall_ms, fuel, output_bytes)


class TaskWorker:
    """Runs tasks in `slots` threads; `send` puts a message on the current live session."""

    def __init__(self, signer: Signer, send: Callable[[dict[str, Any]], None], blobs: BlobCache, slots: int = 1,
                 say: Callable[[str], None] | None = None,
                 tamper: Callable[[dict[str, Any], TaskOutcome], TaskOutcome] | None = None,
                 capsule: Path | None = None) -> None:
        self.signer = signer
        self.node_id = node_id(signer)
        self.send = send
        self.blobs = blobs
        self.slots = max(0, slots)
        self.say = say
        self.tamper = tamper  # tests play a node that lies about its output (failure injection)
        # capsule.wasm, for capsule tasks (the probes as a job; a NodeProfile as the output); None: wasi only
        self.capsule = capsule if capsule is not None and capsule.exists() else None
        self.capsule_sha256 = hashlib.sha256(self.capsule.read_bytes()).hexdigest() if self.capsule else None
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._cancelled: set[str] = set()
        self.done = 0
        self._threads = [threading.Thread(target=self._loop, name=f"task-{i}", daemon=True) for i in range(self.slots)]
        for thread in self._threads:
            thread.start()

    def hello(self) -> dict[str, Any]:
        return {"type": "jobs", "slots": self.slots, "kinds": ["wasi", "capsule"] if self.capsule else ["wasi"]}

    def handle(self, message: dict[str, Any]) -> None:
        if message.get("type") == "task":
            self._queue.put(message)
        elif message.get("type") == "task_cancel" and isinstance(message.get("job"), str):
            self._cancelled = {*list(self._cancelled)[-255:], message["job"]}

    def stop(self) -> None:
        for _ in self._threads:
            self._queue.put(None)

    def _capsule(self, message: dict[str, Any]) -> tuple[str, int, int, str, TaskOutcome]:
        """The capsule's probes as a task: its output is this node's signed NodeProfile (JSON)."""
        from host_runner.jobs import run_capsule

        job, task, attempt, capsule, probes, budget_ms, beacon, limits = parse_capsule_task(message)
        if self.capsule is None or capsule != self.capsule_sha256:
            have = self.capsule_sha256[:16] + "..." if self.capsule_sha256 else "none"
            return job, task, attempt, capsule, TaskOutcome(None, b"", f"capsule mismatch: the task names "
                                                            f"{capsule[:16]}..., this node has {have}", None, 0.0)
        ref = {k: beacon.get(k) for k in ("relay", "round", "value")}
        run = run_capsule(self.capsule, self.signer, ref, probes, budget_ms, limits.memory_bytes >> 20, limits.wall_ms,
                          limits.fuel)
        out = json.dumps(run.profile, separators=(",", ":"), sort_keys=True).encode() if run.profile else b""
        if len(out) > limits.output_bytes:
            return job, task, attempt, capsule, TaskOutcome(None, b"", f"the profile ({len(out)} bytes) exceeds "
                                                            f"output_bytes {limits.output_bytes}", None, run.wall_ms)
        return job, task, attempt, capsule, TaskOutcome(0 if run.profile else None, out, run.error, None, run.wall_ms)

    def _loop(self) -> None:
        while True:
            message = self._queue.get()
            if message is None:
                return
            if message.get("job") in self._cancelled:
                continue
            try:
                result: dict[str, Any] = self._run(message)
            except ValueError as exc:  # a malformed task: said, not run
                result = {"type": "error", "code": "bad_task", "detail": str(exc)}
            try:
                self.send(result)
            except Exception as exc:  # noqa: BLE001 - the session closed (its relay died): the relay that places
                # the task again gets the work; this thread must live on for the next session's tasks
                if self.say is not None:
                    self.say(f"a task result was not sent ({type(exc).__name__}): the relay places it again")

    def _run(self, message: dict[str, Any]) -> dict[str, Any]:
        if message.get("kind") == "capsule":
            job, task, attempt, module_sha, outcome = self._capsule(message)
        else:
            job, task, attempt, module_sha, args, stdin_sha, limits = parse_task(message)
            started = time.perf_counter()
            try:
                wasm = self.blobs.get(module_sha)
                stdin = self.blobs.get(stdin_sha) if stdin_sha else b""
                outcome = run_task(module_sha, wasm, args, stdin, limits, task_seed(job, task, args))
            except ModuleError as exc:
                outcome = TaskOutcome(None, b"", str(exc), None, (time.perf_counter() - started) * 1000)
        if self.tamper is not None:
            outcome = self.tamper(message, outcome)
        self.done += 1
        if self.say is not None:
            self.say(f"task {job[:8]}/{task} attempt {attempt}: "
                     + (f"exit {outcome.exit_code}" if outcome.error is None else outcome.error)
                     + f" in {outcome.wall_ms:.0f} ms")
        receipt = sign("TaskReceipt", {
            "v": 1, "job_id": job, "task": task, "attempt": attempt, "node_id": self.node_id,
            "module_sha256": module_sha, "exit_code": outcome.exit_code,
            "output_sha256": hashlib.sha256(outcome.stdout).hexdigest() if outcome.error is None else None,
            "output_bytes": len(outcome.stdout), "error": outcome.error, "fuel_used": outcome.fuel_used,
            "wall_ms": round(outcome.wall_ms, 3), "finished_at": int(time.time())}, self.signer)
        return {"type": "task_result", "receipt": receipt, "stdout": base64.b64encode(outcome.stdout).decode()}

