"""The knobs of dispatched work, each with its unit (the jobs part reads only this, not RelayConfig)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class JobsConfig:
    # The keys (NodeIds) allowed to submit jobs (`--job-submitter`, repeatable; `ce-bench up` adds its own node
    # key). Empty: this relay takes no jobs, and POST /v1/jobs answers 403 to everyone.
    submitters: tuple[str, ...] = ()
    # Per submitter: tasks queued or running at once, across its jobs (a job beyond it is refused, 429)
    tasks_in_flight_max: int = 10_000
    # Per job: bytes of module and stdin blobs uploaded with it (beyond: 413); the body limit of POST /v1/jobs
    blob_bytes_max: int = 16 * 1024 * 1024
    # With redundancy 1, the share of tasks run again on another node to check them (a manifest may ask more or
    # less); every task of a node with no delivered work yet is checked (docs/jobs.md, "Every result checked")
    audit_share: float = 0.05
    # Every task of a node is checked until this many of its outputs were confirmed by another node: a fresh
    # identity (free to make) must do this much honest, checked work before it is sampled at all
    audit_all_until_checked: int = 20
    # Tasks whose results agree are accepted; a node whose output lost is flagged (trust) and gets no more work
    # until it clears. Attempts that end in a node-side error (a wall-clock limit, a fetch that failed) are
    # placed again, up to this many attempts of one task, then the task fails with the last error.
    max_attempts: int = 4
    # A running attempt is given up (and the task placed again) this long after its wall_ms: fetching the module
    # and the network's round trips fit in it, a node that vanished without closing its session does not
    deadline_grace_s: float = 10.0
    # How often placement runs when nothing woke it (a result or a new job wakes it at once), seconds
    tick_s: float = 0.5
    # Events kept per job for GET /v1/jobs/{id}/events (a follower that reconnects resumes from its last id)
    events_kept: int = 2_000
    # Finished jobs kept in memory (the SQLite file keeps them all; GET /v1/jobs/{id} reads it for older ones)
    finished_kept: int = 200
