"""Every job a relay holds, as pure state (no I/O; time passed in): placing tasks, taking results, moving work
off nodes that dropped, and the verdicts a quorum gives. The desk (web/jobs/desk.py) carries out what each call
returns: the attempts to send, and the rows to store.

A task wants `replicas` agreeing outputs: the manifest's redundancy R, or 2 when an R = 1 task is audited, one
more each time the replicas disagree without a majority (at most max(3, R + 2)). An attempt is
(job, task, attempt number): a result names it, so a late result of an attempt given up is ignored, and no task
is ever counted twice.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from capsule.job_records import JobManifestV2, TaskSpec
from web.jobs.config import JobsConfig
from web.jobs.rules import Candidate, Ranked, audit_drawn, draw, majority, rank

TERMINAL = ("done", "failed", "cancelled")


@dataclass
class Attempt:
    n: int
    node_id: str
    address: str
    placed_at: float
    reason: str
    state: str = "running"          # running | done | lost (session closed) | expired (deadline) | cancelled
    exit_code: int | None = None
    output_sha256: str | None = None
    error: str | None = None
    wall_ms: float | None = None
    receipt: dict[str, Any] | None = None
    verdict: str | None = None      # agreed | wrong | unchecked (set when the task is decided)
    ended_at: float | None = None
    beacon: dict[str, Any] | None = None  # a capsule task: the beacon round it was sent with (not stored)

    @property
    def output(self) -> tuple[int, str] | None:
        if self.state != "done" or self.error is not None or self.exit_code is None or self.output_sha256 is None:
            return None
        return (self.exit_code, self.output_sha256)

    def to_json(self) -> dict[str, Any]:
        return {"attempt": self.n, "node_id": self.node_id, "state": self.state, "placed_at": self.placed_at,
                "reason": self.reason, "exit_code": self.exit_code, "output_sha256": self.output_sha256,
                "error": self.error, "wall_ms": self.wall_ms, "verdict": self.verdict, "ended_at": self.ended_at,
                "receipt": self.receipt}


@dataclass
class Task:
    index: int
    spec: TaskSpec
    replicas: int
    state: str = "queued"           # queued | running | done | failed | cancelled
    attempts: list[Attempt] = field(default_factory=list)
    audited: bool | None = None     # decided at the first placement (R = 1 only)
    exit_code: int | None = None
    output_sha256: str | None = None
    stdout: bytes | None = None     # the accepted output (within output_bytes)
    error: str | None = None
    outputs: dict[str, bytes] = field(default_factory=dict)  # sha256 -> stdout, until the task is decided
    waiting: str | None = None      # why no node can take it now, when that is not just busy slots

    def running(self) -> list[Attempt]:
        return [a for a in self.attempts if a.state == "running"]

    def wanted(self) -> int:
        """Attempts to place now."""
        if self.state in TERMINAL:
            return 0
        return max(0, self.replicas - len(self.running()) - sum(1 for a in self.attempts if a.output is not None))


@dataclass
class Job:
    id: str
    submitter: str
    manifest: JobManifestV2
    request: dict[str, Any]
    created_at: float
    seed: str                       # the beacon value at submission with the job's secret (rules.draw)
    secret_sha256: str              # published from the start; the secret itself once the job ends
    secret: str
    audit_share: float
    state: str = "queued"           # queued | running | done | failed | cancelled
    tasks: list[Task] = field(default_factory=list)
    pool: list[str] = field(default_factory=list)  # the nodes the job spreads on (placement.nodes of them)
    finished_at: float | None = None
    events: deque[dict[str, Any]] = field(default_factory=deque)
    seq: int = 0
    tally: Counter[str] = field(default_factory=Counter)   # tasks by state (kept as states change: O(1) reads)
    pending: deque[int] = field(default_factory=deque)     # tasks that may want an attempt, retries first
    pending_set: set[int] = field(default_factory=set)

    def counts(self) -> dict[str, int]:
        return {k: self.tally.get(k, 0) for k in ("queued", "running", "done", "failed", "cancelled")}

    def summary(self) -> dict[str, Any]:
        return {"id": self.id, "state": self.state, "kind": self.manifest.kind, "submitter": self.submitter,
                "created_at": self.created_at, "finished_at": self.finished_at, "counts": self.counts(),
                "nodes": list(self.pool)}


@dataclass(frozen=True)
class Dispatch:
    """An attempt to send to its node now."""

    job: Job
    task: Task
    attempt: Attempt


@dataclass(frozen=True)
class Verdict:
    """A node's output was compared with others': `agreed`, or `wrong` (it lost the majority)."""

    node_id: str
    job_id: str
    task: int
    attempt: int
    agreed: bool


@dataclass
class Changes:
    """What one call changed, for the desk to store and act on."""

    attempts: list[tuple[Job, Task, Attempt]] = field(default_factory=list)
    tasks: list[tuple[Job, Task]] = field(default_factory=list)
    jobs: list[Job] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    cancel: list[tuple[str, str]] = field(default_factory=list)  # (node_id, job_id): stop its queued tasks


class JobBook:
    def __init__(self, config: JobsConfig) -> None:
        self.config = config
        self.jobs: dict[str, Job] = {}
        self.active: list[str] = []                 # jobs with tasks not finished, oldest first
        self.running: Counter[str] = Counter()      # node -> attempts running there, of every job
        self.checked: Counter[str] = Counter()      # node -> its outputs another node confirmed
        self.flying: dict[tuple[str, int, int], tuple[Job, Task, Attempt]] = {}  # every running attempt

    # --- jobs ----------------------------------------------------------------------------------------

    def add(self, job: Job, now: float) -> None:
        if not job.tasks:
            job.tasks = [Task(i, spec, job.manifest.placement.redundancy) for i, spec in enumerate(job.manifest.tasks)]
        self.jobs[job.id] = job
        job.tally = Counter(t.state for t in job.tasks)
        if job.state not in TERMINAL:
            self.active.append(job.id)
            for task in job.tasks:
                for a in task.running():
                    self.running[a.node_id] += 1
                    self.flying[(job.id, task.index, a.n)] = (job, task, a)
                if task.state not in TERMINAL:
                    if task.audited and task.replicas < 2 and any(a.output is not None for a in task.attempts):
                        task.replicas = 2  # an audit decided before a restart (a store of an older relay)
                    self._want(job, task, first=False)  # in their order
        self._event(job, "job", {"state": job.state, "counts": job.counts()}, now)

    def in_flight(self, submitter: str) -> int:
        return sum(self.jobs[j].tally["queued"] + self.jobs[j].tally["running"]
                   for j in self.active if self.jobs[j].submitter == submitter)

    def cancel(self, job_id: str, now: float) -> Changes:
        changes = Changes()
        job = self.jobs.get(job_id)
        if job is None or job.state in TERMINAL:
            return changes
        nodes = set()
        for task in job.tasks:
            if task.state in TERMINAL:
                continue
            for a in task.running():
                self._end_attempt(job, task, a, "cancelled", now, changes)
                nodes.add(a.node_id)
            self._set_state(job, task, "cancelled")
            changes.tasks.append((job, task))
        changes.cancel = [(n, job_id) for n in sorted(nodes)]
        self._finish_job(job, "cancelled", now, changes)
        return changes

    # --- placement -----------------------------------------------------------------------------------

    def place(self, candidates: Sequence[Candidate], rtt_for: Callable[[Job], Callable[[str], float | None] | None],
              now: float) -> tuple[list[Dispatch], Changes]:
        """Places every task that wants an attempt and has an eligible node with a free slot."""
        changes = Changes()
        out: list[Dispatch] = []
        live = {c.node_id: c for c in candidates}
        free = {c.node_id: c.slots - self.running[c.node_id] for c in candidates}
        free_total = sum(max(0, v) for v in free.values())
        for job_id in list(self.active):
            if free_total <= 0:
                break
            job = self.jobs[job_id]
            if not job.pending:
                continue
            want = job.manifest.placement
            fresh = [Candidate(**{**c.__dict__, "running": self.running[c.node_id],
                                  "checked": self.checked[c.node_id]}) for c in candidates
                     if job.manifest.kind in c.kinds]
            ranked = rank(fresh, want.min, want.region, rtt_for(job), job.seed, job.id)
            order = {r.candidate.node_id: i for i, r in enumerate(ranked)}
            job.pool = [n for n in job.pool if n in order]  # a pool node that dropped or is no longer proven leaves
            kept: list[int] = []  # tasks that still want an attempt no node can take now, in their order
            while job.pending and free_total > 0:
                index = job.pending.popleft()
                task = job.tasks[index]
                while task.wanted() > 0:  # (an audit decided at the first placement asks one more)
                    chosen = self._choose(job, task, ranked, order, free, want.nodes)
                    if chosen is None:
                        self._waiting(job, task, ranked, now)
                        break
                    task.waiting = None
                    out.append(self._dispatch(job, task, chosen, live, now, changes))
                    free[chosen.candidate.node_id] -= 1
                    free_total -= 1
                if task.wanted() > 0:
                    kept.append(index)
                else:
                    job.pending_set.discard(index)
            job.pending.extendleft(reversed(kept))
        return out, changes

    def _waiting(self, job: Job, task: Task, ranked: list[Ranked], now: float) -> None:
        """Says (once, as an event and in the task) why no node can take the task, when more slots would not
        help: a network of one machine cannot check itself, and a job whose minimums no node meets waits."""
        used_nodes = {a.node_id for a in task.attempts}
        used_addresses = {a.address for a in task.attempts if a.state == "running" or a.output is not None}
        why = None
        if not ranked:
            why = "no proven node meets the job's minimums, kind and region"
        elif not any(r.candidate.node_id not in used_nodes and r.candidate.address not in used_addresses
                     for r in ranked):
            why = ("no eligible node at another address to check it (replicas and audits need other machines)"
                   if used_addresses else "every eligible node has run this task already")
        if why != task.waiting:
            task.waiting = why
            if why is not None:
                self._event(job, "task", {"task": task.index, "state": "waiting", "reason": why}, now)

    def _want(self, job: Job, task: Task, first: bool = True) -> None:
        """`task` may want an attempt: the next placement looks at it (first: before the job's other tasks)."""
        if task.index not in job.pending_set and task.state not in TERMINAL:
            job.pending_set.add(task.index)
            if first:
                job.pending.appendleft(task.index)
            else:
                job.pending.append(task.index)

    def _set_state(self, job: Job, task: Task, state: str) -> None:
        job.tally[task.state] -= 1
        task.state = state
        job.tally[state] += 1

    def _choose(self, job: Job, task: Task, ranked: list[Ranked], order: dict[str, int], free: dict[str, int],
                pool_size: int) -> Ranked | None:
        # a node runs a task once (an error or a lost attempt included: a retry goes elsewhere); replicas go to
        # different addresses (identities of one machine check nothing)
        used_nodes = {a.node_id for a in task.attempts}
        live_attempts = [a for a in task.attempts if a.state == "running" or a.output is not None]
        used_addresses = {a.address for a in live_attempts}

        def fits(r: Ranked) -> bool:
            c = r.candidate
            return free.get(c.node_id, 0) > 0 and c.node_id not in used_nodes and c.address not in used_addresses

        if live_attempts:
            # a checking replica (redundancy, an audit, a dispute): drawn from the job's seed among every eligible
            # node, whatever its load or slots or pool, so a node cannot make itself the checker of its own work
            # by offering many slots and answering fast
            fitting = [r for r in ranked if fits(r)]
            return min(fitting, key=lambda r: draw(job.seed, "check", job.id, task.index, len(task.attempts),
                                                   r.candidate.node_id)) if fitting else None
        in_pool = [ranked[order[n]] for n in job.pool if fits(ranked[order[n]])]
        if in_pool:  # the least loaded pool node (rank breaks ties)
            return min(in_pool, key=lambda r: (self.running[r.candidate.node_id] / r.candidate.slots,
                                               order[r.candidate.node_id]))
        for r in ranked:
            if not fits(r):
                continue
            if len(job.pool) < pool_size:
                job.pool.append(r.candidate.node_id)
                return r
            return None  # the pool is full and busy: the task waits for a slot there
        return None

    def _dispatch(self, job: Job, task: Task, chosen: Ranked, live: dict[str, Candidate], now: float,
                  changes: Changes) -> Dispatch:
        c = chosen.candidate
        reason = chosen.reason
        if job.manifest.placement.redundancy == 1 and job.manifest.kind == "wasi":
            # audited when drawn (once per task), and always when this attempt's node has few checked outputs (on
            # every attempt: a retry on a fresh identity is checked too). The second node is placed only after
            # the first output arrived (_settle): nothing differs for the node before it has answered.
            if task.audited is None:
                task.audited = audit_drawn(job.seed, job.id, task.index, job.audit_share)
            if self.checked[c.node_id] < self.config.audit_all_until_checked:
                task.audited = True
        attempt = Attempt(len(task.attempts), c.node_id, c.address, now, reason)
        task.attempts.append(attempt)
        self.running[c.node_id] += 1
        self.flying[(job.id, task.index, attempt.n)] = (job, task, attempt)
        if task.state == "queued":
            self._set_state(job, task, "running")
            changes.tasks.append((job, task))
            self._event(job, "task", {"task": task.index, "state": "running", "node_id": c.node_id}, now)
        if job.state == "queued":
            job.state = "running"
            changes.jobs.append(job)
            self._event(job, "job", {"state": "running", "counts": job.counts()}, now)
        changes.attempts.append((job, task, attempt))
        return Dispatch(job, task, attempt)

    # --- results -------------------------------------------------------------------------------------

    def attempt_of(self, job_id: str, task: int, attempt: int, node_id: str) -> tuple[Job, Task, Attempt] | None:
        """The running attempt a result names, or None (unknown, ended, or another node's)."""
        job = self.jobs.get(job_id)
        if job is None or not 0 <= task < len(job.tasks):
            return None
        t = job.tasks[task]
        if not 0 <= attempt < len(t.attempts):
            return None
        a = t.attempts[attempt]
        if a.node_id != node_id:
            return None
        if a.state == "cancelled":  # its node finished it after all: the slot is free, the result ignored
            self.release(job_id, task, attempt)
        if a.state != "running":
            return None
        return job, t, a

    def result(self, job: Job, task: Task, attempt: Attempt, exit_code: int | None, output_sha256: str | None,
               error: str | None, wall_ms: float, receipt: dict[str, Any], stdout: bytes, now: float) -> Changes:
        changes = Changes()
        attempt.exit_code, attempt.output_sha256, attempt.error = exit_code, output_sha256, error
        attempt.wall_ms, attempt.receipt = wall_ms, receipt
        self._end_attempt(job, task, attempt, "done", now, changes)
        if attempt.output_sha256 is not None and attempt.output is not None:
            task.outputs.setdefault(attempt.output_sha256, stdout)
        self._settle(job, task, now, changes)
        return changes

    def lost(self, node_id: str, now: float, why: str) -> Changes:
        """Every attempt running on `node_id` ends (its session closed, it went offline): placed again."""
        changes = Changes()
        for job, task, a in [f for f in self.flying.values() if f[2].node_id == node_id]:
            if a.state == "cancelled":
                self.release(job.id, task.index, a.n)
                continue
            a.error = why
            self._end_attempt(job, task, a, "lost", now, changes)
            self._event(job, "task", {"task": task.index, "state": "requeued", "node_id": node_id,
                                      "reason": why}, now)
            self._settle(job, task, now, changes)
        return changes

    def suspect(self, node_id: str, now: float) -> Changes:
        """A node's output just lost a majority: every output of it accepted unchecked in a job still running is
        checked now (one more node must agree with it before it stands)."""
        changes = Changes()
        for job_id in list(self.active):
            job = self.jobs[job_id]
            for task in job.tasks:
                if task.state != "done" or not any(a.node_id == node_id and a.verdict == "unchecked"
                                                   for a in task.attempts):
                    continue
                if task.output_sha256 is not None and task.stdout is not None:
                    task.outputs[task.output_sha256] = task.stdout
                self._set_state(job, task, "running")
                task.replicas, task.stdout = max(task.replicas, 2), None
                task.exit_code = task.output_sha256 = None
                changes.tasks.append((job, task))
                self._want(job, task)
                self._event(job, "task", {"task": task.index, "state": "rechecked", "node_id": node_id}, now)
        return changes

    def expire(self, now: float) -> Changes:
        """Attempts past their wall_ms and the grace are given up (placed again)."""
        changes = Changes()
        for job, task, a in list(self.flying.values()):
            limit_s = job.manifest.limits.wall_ms / 1000 + self.config.deadline_grace_s
            if now - a.placed_at > limit_s and a.state == "cancelled":
                self.release(job.id, task.index, a.n)
            elif now - a.placed_at > limit_s:
                a.error = f"no result within {limit_s:.0f} s"
                self._end_attempt(job, task, a, "expired", now, changes)
                self._settle(job, task, now, changes)
        return changes

    def _end_attempt(self, job: Job, task: Task, a: Attempt, state: str, now: float, changes: Changes) -> None:
        """Ends an attempt. A cancelled one (its task was decided or cancelled) may still be running on its node,
        which was not stopped: it keeps its slot until its result arrives (ignored), its node leaves, or its
        deadline passes (`release`), so the node is never sent more than its slots."""
        a.state, a.ended_at = state, now
        if state != "cancelled":
            self.release(job.id, task.index, a.n)
        changes.attempts.append((job, task, a))

    def release(self, job_id: str, task: int, n: int) -> None:
        """The attempt's slot is free again."""
        flying = self.flying.pop((job_id, task, n), None)
        if flying is None:
            return
        node = flying[2].node_id
        self.running[node] -= 1
        if self.running[node] <= 0:
            del self.running[node]

    def _settle(self, job: Job, task: Task, now: float, changes: Changes) -> None:
        """Decides the task where its outputs allow."""
        if task.state in TERMINAL:
            return
        outputs = [a.output for a in task.attempts if a.output is not None]
        if task.audited and task.replicas < 2 and outputs:
            task.replicas = 2  # the audit: a second node now (placed after the first output: web/jobs/rules.py)
            # stored now: a relay restarted before the task ended loaded replicas 1 beside its one output, wanted
            # nothing more, and the task stayed "running" forever (full suite, 2026-12-07)
            changes.tasks.append((job, task))
        winner = majority(outputs, task.replicas)
        if winner is not None:
            checked = len(outputs) > 1
            for a in task.attempts:
                if a.output is not None:
                    a.verdict = ("agreed" if a.output == winner else "wrong") if checked else "unchecked"
                    if checked:
                        changes.verdicts.append(Verdict(a.node_id, job.id, task.index, a.n, a.output == winner))
                        if a.output == winner:
                            self.checked[a.node_id] += 1
                    changes.attempts.append((job, task, a))
                elif a.state == "running":
                    self._end_attempt(job, task, a, "cancelled", now, changes)
            task.exit_code, task.output_sha256 = winner
            task.stdout = task.outputs.get(winner[1])
            task.outputs.clear()
            self._end_task(job, task, "done", None, now, changes)
            return
        done = len(outputs)
        if done >= task.replicas and not task.running():
            cap = max(3, job.manifest.placement.redundancy + 2)
            if task.replicas < cap:
                task.replicas += 1  # no majority yet: one more node decides
                changes.tasks.append((job, task))
                self._event(job, "task", {"task": task.index, "state": "disputed", "outputs": done}, now)
            else:
                self._end_task(job, task, "failed", f"no majority among {done} outputs", now, changes)
                return
        # a session that closed says nothing about the task; an error or a missed deadline may (a module that
        # outruns every node's wall clock fails after max_attempts, not never)
        errors = [a for a in task.attempts if a.state in ("done", "expired") and a.output is None]
        # a failure two nodes both met (a trap, a limit: the module's, not a node's) fails the task; any failures
        # fail it after max_attempts
        confirmed = len({a.node_id for a in errors}) >= 2 and not outputs
        if (confirmed or len(errors) >= self.config.max_attempts) and task.wanted() > 0:
            self._end_task(job, task, "failed", errors[-1].error or "failed", now, changes)
        elif task.wanted() > 0:
            self._want(job, task)

    def _end_task(self, job: Job, task: Task, state: str, error: str | None, now: float, changes: Changes) -> None:
        self._set_state(job, task, state)
        task.error = error
        if state != "done":
            task.stdout = None
            task.outputs.clear()
        changes.tasks.append((job, task))
        self._event(job, "task", {"task": task.index, "state": state, "exit_code": task.exit_code,
                                  "output_sha256": task.output_sha256, "error": error}, now)
        if job.tally["queued"] + job.tally["running"] == 0:
            self._finish_job(job, "done" if job.tally["done"] == len(job.tasks) else "failed", now, changes)

    def _finish_job(self, job: Job, state: str, now: float, changes: Changes) -> None:
        job.state, job.finished_at = state, now
        if job.id in self.active:
            self.active.remove(job.id)
        changes.jobs.append(job)
        self._event(job, "job", {"state": state, "counts": job.counts()}, now)

    def forget(self, keep: int) -> None:
        """Drops the oldest finished jobs beyond `keep` from memory (the store keeps them)."""
        finished = [j for j in self.jobs.values() if j.state in TERMINAL]
        for job in sorted(finished, key=lambda j: j.finished_at or 0)[:max(0, len(finished) - keep)]:
            del self.jobs[job.id]

    def _event(self, job: Job, kind: str, data: dict[str, Any], now: float) -> None:
        job.seq += 1
        job.events.append({"id": job.seq, "event": kind, "at": round(now, 3), **data})
        while len(job.events) > self.config.events_kept:
            job.events.popleft()
