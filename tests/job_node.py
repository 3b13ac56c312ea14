"""A node process for dispatch tests: a registered key's live session that answers challenges (when given the
reactor) and runs dispatched tasks, from its own loopback address, until killed (kill -9 is the point).

    python -m tests.job_node RELAY_URL KEY_FILE SOURCE_ADDRESS [--reactor PATH] [--slots N] [--lie-every K]

--lie-every K: failure injection, a cheater's client — every K-th task's output is replaced by a made-up one
(its receipt signed as usual, so only a comparison with another node's output can tell). Prints "ready" once
its session is up, and one line per task."""

from __future__ import annotations

import argparse
import hashlib
import threading
from pathlib import Path
from typing import Any

from common.keys import load_or_create
from host_runner.live_client import LiveSession
from host_runner.wasi_task import TaskOutcome


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("relay")
    parser.add_argument("key", type=Path)
    parser.add_argument("address")
    parser.add_argument("--reactor", type=Path)
    parser.add_argument("--slots", type=int, default=1)
    parser.add_argument("--lie-every", type=int, default=0)
    parser.add_argument("--peer-probes", action="store_true", help="measure RTTs to the nodes the relay pairs it with")
    args = parser.parse_args()
    key = load_or_create(args.key)
    seen = 0
    lock = threading.Lock()

    def lie(message: dict[str, Any], outcome: TaskOutcome) -> TaskOutcome:
        nonlocal seen
        with lock:
            seen += 1
            if not args.lie_every or seen % args.lie_every:
                return outcome
        made_up = hashlib.sha256(outcome.stdout).hexdigest()[:16].encode() + b"\n"  # cheap, plausible, wrong
        print(f"lied on task {message.get('task')}", flush=True)
        return TaskOutcome(0, made_up, None, outcome.fuel_used, outcome.wall_ms)

    session = LiveSession(args.relay, key, reactor_wasm=args.reactor, job_slots=args.slots,
                          connect_options={"source_address": (args.address, 0)},
                          say=lambda line: print(line, flush=True), task_tamper=lie if args.lie_every else None,
                          peer_probes=args.peer_probes)
    session.start()
    print("ready", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
