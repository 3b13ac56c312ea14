"""Jobs in their own SQLite file (WAL): a job is acknowledged only once its row, its tasks and its blobs are
written, and a result only once its attempt row is; a relay killed with -9 loses neither (WAL survives the
process; synchronous=NORMAL risks only the last transactions of an OS crash). Blobs are content-addressed."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Any

from capsule.job_records import JobManifestV2
from capsule.typed import parse
from web.jobs.book import TERMINAL, Attempt, Job, Task

SCHEMA = """
CREATE TABLE IF NOT EXISTS blobs (sha256 TEXT PRIMARY KEY, data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, submitter TEXT NOT NULL, request TEXT NOT NULL,
    created_at REAL NOT NULL, seed TEXT NOT NULL, secret TEXT NOT NULL, audit_share REAL NOT NULL,
    state TEXT NOT NULL, finished_at REAL, pool TEXT NOT NULL DEFAULT '[]');
CREATE TABLE IF NOT EXISTS tasks (job_id TEXT NOT NULL, idx INTEGER NOT NULL, state TEXT NOT NULL,
    replicas INTEGER NOT NULL, audited INTEGER, exit_code INTEGER, output_sha256 TEXT, stdout BLOB, error TEXT,
    PRIMARY KEY (job_id, idx));
CREATE TABLE IF NOT EXISTS attempts (job_id TEXT NOT NULL, idx INTEGER NOT NULL, n INTEGER NOT NULL,
    node_id TEXT NOT NULL, address TEXT NOT NULL, placed_at REAL NOT NULL, reason TEXT NOT NULL, state TEXT NOT NULL,
    exit_code INTEGER, output_sha256 TEXT, error TEXT, wall_ms REAL, receipt TEXT, verdict TEXT, ended_at REAL,
    stdout BLOB, PRIMARY KEY (job_id, idx, n));
CREATE TABLE IF NOT EXISTS checked (node_id TEXT PRIMARY KEY, n INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS attempts_by_node ON attempts (node_id, ended_at);
"""


class JobStore:
    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript(SCHEMA)

    def close(self) -> None:
        self.db.close()

    # --- blobs ---------------------------------------------------------------------------------------

    def has_blob(self, sha256: str) -> bool:
        return self.db.execute("SELECT 1 FROM blobs WHERE sha256 = ?", (sha256,)).fetchone() is not None

    def blob(self, sha256: str) -> bytes | None:
        row = self.db.execute("SELECT data FROM blobs WHERE sha256 = ?", (sha256,)).fetchone()
        return None if row is None else bytes(row[0])

    # --- writes --------------------------------------------------------------------------------------

    def add_job(self, job: Job, blobs: dict[str, bytes]) -> None:
        with self.db:
            self.db.execute("BEGIN")
            self.db.executemany("INSERT OR IGNORE INTO blobs VALUES (?, ?)", list(blobs.items()))
            self.db.execute("INSERT INTO jobs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                            (job.id, job.submitter, json.dumps(job.request), job.created_at, job.seed, job.secret,
                             job.audit_share, job.state, job.finished_at, json.dumps(job.pool)))
            self.db.executemany("INSERT INTO tasks (job_id, idx, state, replicas) VALUES (?, ?, ?, ?)",
                                [(job.id, t.index, t.state, t.replicas) for t in job.tasks])

    def save(self, jobs: list[Job], tasks: list[tuple[Job, Task]], attempts: list[tuple[Job, Task, Attempt]],
             checked: dict[str, int]) -> None:
        """One transaction of what a call of the book changed."""
        with self.db:
            self.db.execute("BEGIN")
            self.db.executemany(
                "INSERT OR REPLACE INTO attempts VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(j.id, t.index, a.n, a.node_id, a.address, a.placed_at, a.reason, a.state, a.exit_code,
                  a.output_sha256, a.error, a.wall_ms, json.dumps(a.receipt) if a.receipt else None, a.verdict,
                  a.ended_at, t.outputs.get(a.output_sha256) if a.output_sha256 else None)
                 for j, t, a in attempts])
            self.db.executemany(
                "UPDATE tasks SET state = ?, replicas = ?, audited = ?, exit_code = ?, output_sha256 = ?, stdout = ?, "
                "error = ? WHERE job_id = ? AND idx = ?",
                [(t.state, t.replicas, t.audited, t.exit_code, t.output_sha256, t.stdout, t.error, j.id, t.index)
                 for j, t in tasks])
            self.db.executemany("UPDATE jobs SET state = ?, finished_at = ?, pool = ? WHERE id = ?",
                                [(j.state, j.finished_at, json.dumps(j.pool), j.id) for j in jobs])
            self.db.executemany("INSERT OR REPLACE INTO checked VALUES (?, ?)", list(checked.items()))

    # --- reads ---------------------------------------------------------------------------------------

    def delivered(self, node_id: str, recent: int = 20) -> dict[str, Any]:
        """The work a node delivered (its attempts that ended with a result): totals by verdict, wall time, and the
        latest `recent` (GET /v1/nodes/{id}/history "delivered")."""
        totals = {"tasks": 0, "agreed": 0, "wrong": 0, "unchecked": 0, "undecided": 0, "errors": 0, "wall_s": 0.0}
        for verdict, error, count, wall_ms in self.db.execute(
                "SELECT verdict, error IS NOT NULL, COUNT(*), SUM(wall_ms) FROM attempts WHERE node_id = ? AND "
                "state = 'done' GROUP BY verdict, error IS NOT NULL", (node_id,)):
            totals["tasks"] += count
            totals["wall_s"] += (wall_ms or 0) / 1000
            if error:
                totals["errors"] += count
            else:
                totals[verdict if verdict in ("agreed", "wrong", "unchecked") else "undecided"] += count
        rows = self.db.execute(
            "SELECT a.job_id, a.idx, a.n, a.ended_at, a.wall_ms, a.exit_code, a.error, a.verdict, a.receipt, "
            "json_extract(j.request, '$.manifest.module.sha256') FROM attempts a JOIN jobs j ON j.id = a.job_id "
            "WHERE a.node_id = ? AND a.state = 'done' ORDER BY a.ended_at DESC LIMIT ?", (node_id, recent))
        totals["wall_s"] = round(totals["wall_s"], 3)
        return {**totals, "recent": [
            {"job_id": job_id, "task": idx, "attempt": n, "at": at, "wall_ms": wall_ms, "exit_code": exit_code,
             "error": error, "verdict": verdict, "module_sha256": module,
             "fuel_used": json.loads(receipt).get("fuel_used") if receipt else None}
            for job_id, idx, n, at, wall_ms, exit_code, error, verdict, receipt, module in rows]}

    def checked(self) -> dict[str, int]:
        return {node: n for node, n in self.db.execute("SELECT node_id, n FROM checked")}

    def load_job(self, job_id: str) -> Job | None:
        row = self.db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return None if row is None else self._job(row)

    def unfinished(self) -> list[Job]:
        rows = self.db.execute("SELECT * FROM jobs WHERE state NOT IN (?, ?, ?) ORDER BY created_at", TERMINAL)
        return [self._job(row) for row in rows.fetchall()]

    def _job(self, row: tuple[Any, ...]) -> Job:
        job_id, submitter, request, created_at, seed, secret, audit_share, state, finished_at, pool = row
        body = json.loads(request)
        job = Job(job_id, submitter, parse(JobManifestV2, body["manifest"]), body, created_at, seed,
                  hashlib.sha256(bytes.fromhex(secret)).hexdigest(), secret, audit_share, state,
                  finished_at=finished_at, pool=json.loads(pool))
        tasks = {}
        for idx, t_state, replicas, audited, exit_code, out_sha, stdout, error in self.db.execute(
                "SELECT idx, state, replicas, audited, exit_code, output_sha256, stdout, error FROM tasks "
                "WHERE job_id = ? ORDER BY idx", (job_id,)):
            tasks[idx] = Task(idx, job.manifest.tasks[idx], replicas, t_state, [],
                              None if audited is None else bool(audited), exit_code, out_sha,
                              None if stdout is None else bytes(stdout), error)
        for (idx, n, node_id, address, placed_at, reason, a_state, exit_code, out_sha, error, wall_ms, receipt,
             verdict, ended_at, stdout) in self.db.execute(
                "SELECT idx, n, node_id, address, placed_at, reason, state, exit_code, output_sha256, error, wall_ms, "
                "receipt, verdict, ended_at, stdout FROM attempts WHERE job_id = ? ORDER BY idx, n", (job_id,)):
            task = tasks[idx]
            task.attempts.append(Attempt(n, node_id, address, placed_at, reason, a_state, exit_code, out_sha, error,
                                         wall_ms, json.loads(receipt) if receipt else None, verdict, ended_at))
            if out_sha is not None and stdout is not None and task.state not in TERMINAL:
                task.outputs.setdefault(out_sha, bytes(stdout))
        job.tasks = [tasks[i] for i in sorted(tasks)]
        return job
