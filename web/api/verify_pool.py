"""Profile verification (JSON + schema + RFC 8785 + Ed25519, ~40% of a relay's ingest time) in worker
processes, so the event loop spends its core on HTTP, storage and the atlas. With no workers it runs
in-process. A worker that dies is replaced; the profile it held is verified in-process, never lost."""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from web.api.ingest import VerifiedProfile, verify_body
from web.api.problems import Problem

log = logging.getLogger("ce.relay")


def verify_in_worker(body: bytes) -> tuple[Any, ...]:
    """verify_body's outcome as plain data: a Problem does not pickle (its __init__ takes more than args)."""
    try:
        return ("ok", verify_body(body))
    except Problem as p:
        return ("problem", p.status, p.code, p.title, p.detail, p.field)


class VerifyPool:
    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._pool = self._start() if workers > 0 else None

    def _start(self) -> ProcessPoolExecutor:
        # spawn, not fork: the relay has threads (the SQLite writer) that a fork would copy mid-state
        return ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"))

    async def verify(self, body: bytes) -> VerifiedProfile:
        if self._pool is None:
            return verify_body(body)
        try:
            outcome = await asyncio.get_running_loop().run_in_executor(self._pool, verify_in_worker, body)
        except BrokenProcessPool:
            log.error("a verification worker died; restarting the pool")
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = self._start()
            return verify_body(body)
        if outcome[0] == "ok":
            verified: VerifiedProfile = outcome[1]
            return verified
        raise Problem(*outcome[1:])

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
