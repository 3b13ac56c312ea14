"""A genuine passed SGEMM challenge transcript, answered in-process by the capsule's reactor (what a relay
publishes after a node answered it): for tests of transcript handling and for bench/capacity.py."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

from host_runner.challenge_answer import SgemmAnswer
from web.config import RelayConfig
from web.proof.challenges import check_opened, new_challenge, on_commit, parse_opening
from web.proof.transcripts import transcript_body


def answered_transcript(reactor: Path, relay_id: str, node_id: str, claimed_gflops: float = 40.0,
                        instances: int = 2, target_s: float = 1.0) -> dict[str, Any]:
    """The unsigned Transcript of a passed challenge of `node_id` run by `relay_id` (checked as the relay
    checks it before publishing)."""
    config = RelayConfig()
    beacon: dict[str, Any] = {"round": 1, "value": "ab" * 32}
    ch = new_challenge(node_id, claimed_gflops, instances, None, beacon, "cd" * 16, 1.0, time.perf_counter(), config,
                       target_s)
    answer = SgemmAnswer(reactor, ch.seeds, ch.n, ch.reps)
    rng = random.Random(1)
    try:
        opening = on_commit(ch, {"roots": answer.commit(), "leaf": answer.leaf}, time.perf_counter(), rng, config)
        if opening is None:
            raise RuntimeError("an SGEMM commitment is always followed by an opening")
        rows = answer.open(opening["rows"])
    finally:
        answer.release()
    check_opened(ch, parse_opening(ch, {"rows": rows}, time.perf_counter(), config), rng, config)
    ch.opened_items = rows
    return transcript_body(relay_id, ch, beacon["value"], True, "passed", None, False, time.time())
