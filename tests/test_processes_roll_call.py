"""Roll calls across `ce-bench relay --processes 2` (issue 32): every live session of every process is asked at
one moment. 40 registered nodes open live sessions on the one port (the kernel spreads the connections over the
two processes; each session's welcome names the process that took it). Once every node is live on both
processes, all 40 say hello together (answering SGEMM, never answering a challenge). Each process's
`GET /v1/roll-calls` (asked on new connections until both processes answered, by the `relay` it names) must
then show a roll call of the same id (the leader's beacon round: one moment) whose sessions_challenged is the
number of sessions that process holds: 100%, by count, on both."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect

from bench.relay_sessions import beats, known_everywhere, register_nodes
from common.keys import NodeKey
from tests.nats_process import NatsProcess
from tests.relay_process import RelayProcess, eventually
from tests.threaded import in_thread

NODES = 40
# a roll call every 6 s (rounds of 1 s, every 6th draws one with chance 1); no solo challenges
RELAY = ["--processes", "2", "--ip-rate", "100000", "--beacon-interval", "1", "--roll-call-interval-s", "6",
         "--roll-call-min-gap-s", "6", "--roll-call-target-s", "1", "--challenge-first-after", "100000"]
# both processes start the leader's roll call at issued_at + roll_call_delay_s on their own clocks (one
# machine's clock here); what separates them is each loop's delay, bounded here for a busy machine. A roll call
# of another round would be at least a beacon interval (1 s) apart, so 0.9 s still tells one moment from two
SAME_MOMENT_S = 0.9


class Sessions:
    """NODES live sessions in a thread of their own: each beats once (pongs keep it live after), says hello
    when told, and lets every challenge go unanswered."""

    def __init__(self, url: str, keys: list[NodeKey]) -> None:
        self.url, self.keys = url, keys
        self.welcomed_by: dict[str, str] = {}   # node id -> the relay process that welcomed its session
        self.challenged: Counter[str] = Counter()  # node id -> challenges received
        self.hello_at = 0.0
        self._loop = asyncio.new_event_loop()
        self._go = asyncio.Event()
        self._stop = asyncio.Event()
        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(self._main(),), daemon=True)

    async def _session(self, key: NodeKey) -> None:
        async with connect(self.url, open_timeout=30, max_size=2**22, ping_interval=None) as ws:
            welcome = json.loads(await ws.recv())
            self.welcomed_by[key.node_id] = str(welcome["relay"])
            beat = asyncio.create_task(beats(ws, key, welcome["session"], None, {}, self._stop))
            hello = asyncio.create_task(self._hello(ws))
            try:
                async for frame in ws:
                    message = json.loads(frame) if isinstance(frame, str) else {}
                    if message.get("type") == "ping":
                        await ws.send(json.dumps({"type": "pong", "id": message["id"]}))
                    elif message.get("type") == "challenge":
                        self.challenged[key.node_id] += 1
            finally:
                beat.cancel()
                hello.cancel()

    async def _hello(self, ws: Any) -> None:
        await self._go.wait()
        await ws.send(json.dumps({"type": "hello", "answers": ["sgemm"]}))

    async def _main(self) -> None:
        tasks = [asyncio.create_task(self._session(k)) for k in self.keys]
        await self._stop.wait()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def start(self) -> Sessions:
        self._thread.start()
        return self

    def hello(self) -> None:
        self.hello_at = time.time()
        self._loop.call_soon_threadsafe(self._go.set)

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)


def roll_calls_of_each_process(relay: RelayProcess, members: set[str]) -> dict[str, list[dict[str, Any]]]:
    """Each process's roll calls, latest first: GET /v1/roll-calls on new connections until every member
    answered (the kernel picks the process of each)."""
    pages: dict[str, list[dict[str, Any]]] = {}
    deadline = time.monotonic() + 30
    while set(pages) != members:
        assert time.monotonic() < deadline, f"only {sorted(pages)} of {sorted(members)} answered GET /v1/roll-calls"
        status, body, _ = relay.get("/v1/roll-calls?limit=50")
        if status == 200:
            pages[str(body["relay"])] = list(body["roll_calls"])
    return pages


def online(relay: RelayProcess, node_id: str) -> bool:
    """Whether the process that answers (the kernel picks it) has the node online."""
    status, body, _ = relay.get(f"/v1/nodes/{node_id}")
    return status == 200 and bool(body["status"]["online"])


@pytest.mark.timed  # a roll call's sends to 40 sessions, timed across two processes
def test_every_session_of_every_process_is_asked_at_one_roll_call(tmp_path: Path) -> None:
    nats = NatsProcess(tmp_path / "nats", users=["relay"]).start()
    relay = RelayProcess(tmp_path / "relay", *nats.relay_args("relay"), *RELAY)
    sessions: Sessions | None = None
    try:
        relay.start(timeout=60)
        members = {r["relay"] for r in relay.get("/v1/relays")[1]["relays"]}
        assert len(members) == 2, members
        # profiles cite one process's beacon and may reach the other: both must have heard each other's rounds
        eventually(lambda: all(all(r["last_seen"] for r in relay.get("/v1/relays")[1]["relays"]) for _ in range(6)),
                   30, "each process has heard the other's beacon rounds")
        time.sleep(1.5)  # a round issued since then: known to both
        pairs, _ = in_thread(register_nodes, relay, NODES)  # asyncio: a browser test's loop may hold this thread
        keys = [key for key, _ in pairs]
        known_everywhere(relay, [k.node_id for k in keys[-3:]], within_s=60)
        sessions = Sessions(relay.url.replace("http://", "ws://") + "/v1/live", keys).start()
        deadline = time.monotonic() + 60
        while not (len(sessions.welcomed_by) == NODES and all(online(relay, k.node_id) for k in keys)):
            assert time.monotonic() < deadline, f"{len(sessions.welcomed_by)} of {NODES} sessions live"
            time.sleep(0.5)
        held = Counter(sessions.welcomed_by.values())
        # the precondition: the kernel gave both processes sessions, so "every process" means two
        assert set(held) == members and min(held.values()) >= 1, held
        sessions.hello()

        def complete() -> tuple[str, dict[str, dict[str, Any]]] | None:
            """The first roll call after the hellos that both processes ran, with each process's row of it."""
            pages = roll_calls_of_each_process(relay, members)
            rows = {m: {c["id"]: c for c in pages[m] if c["at"] > sessions.hello_at + 0.5} for m in members}
            common = sorted(set.intersection(*(set(r) for r in rows.values())), key=lambda i: int(i.split("-")[0]))
            return (common[0], {m: rows[m][common[0]] for m in members}) if common else None

        deadline = time.monotonic() + 40
        while (found := complete()) is None:
            assert time.monotonic() < deadline, "no roll call on both processes within 40 s of the hellos"
            time.sleep(1.0)
        call_id, rows = found
        # the sessions' counters: the frames were sent before the relay's row was written (waited for)
        deadline = time.monotonic() + 10
        while len(sessions.challenged) < NODES and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.3)  # (a second challenge to one session, which must not come, would show by now)
        asked = {m: rows[m]["sessions_challenged"] for m in members}
        assert asked == dict(held), (call_id, asked, dict(held), rows)  # every session of every process: 100%
        assert all(rows[m]["sessions_not_asked"] == {} for m in members), rows  # none left out, for any reason
        assert sum(asked.values()) == NODES
        ats = [rows[m]["at"] for m in members]
        assert max(ats) - min(ats) <= SAME_MOMENT_S, (call_id, ats)
        # and the sessions themselves: each was sent one challenge at that roll call, none twice, none missed
        assert sorted(sessions.challenged) == sorted(k.node_id for k in keys), (len(sessions.challenged), NODES)
    finally:
        if sessions is not None:
            sessions.stop()
        relay.stop()
        nats.stop()
