"""Solo challenges (those that verify newcomers) of one source address come at one moment: the relay's tick
challenges every unverified session of a host together, so identities behind one address cannot be answered
one after another by one machine; another address has its own moment. In-process: a real Relay (its store on
disk) and sessions whose sends are captured."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from tests.samples import sample_profile
from tests.threaded import in_thread
from web.api.summary import ProfileSummary
from web.config import RelayConfig
from web.relay import Relay


def test_solo_challenges_of_one_address_come_at_one_moment(tmp_path: Path) -> None:
    relay = Relay(RelayConfig(data_dir=tmp_path / "relay", challenge_first_after_s=0.0, roll_call_interval_s=1e12))
    sent: dict[str, list[dict[str, Any]]] = {}

    async def go() -> None:
        await relay.issue_beacon()
        desk = relay.challenges
        sessions = [("s1", "198.51.100.7"), ("s2", "198.51.100.7"), ("s3", "198.51.100.7"), ("s4", "203.0.113.9")]
        for session_id, host in sessions:
            key, profile = sample_profile(gflops=20.0)
            relay.atlas.put(ProfileSummary.of_profile(profile), relay.relay_id, 0.0)
            relay.atlas.heartbeat(key.node_id, 0.0)
            sent[session_id] = []

            async def send(message: Any, box: list[dict[str, Any]] = sent[session_id]) -> None:
                box.append(json.loads(message) if isinstance(message, str) else message)

            who = desk.hello(session_id, host, send, frozenset({"sgemm"}))
            who.node_id = key.node_id
        desk.next_at["203.0.113.9"] = 10**12  # that address's moment is later: only the first one's now
        await desk.tick()

    try:
        in_thread(asyncio.run, go())
    finally:
        relay.store.close()
    same = [sent[s] for s in ("s1", "s2", "s3")]
    assert all(len(box) == 1 and box[0]["type"] == "challenge" for box in same), sent  # each asked, once
    moments = {ch.issued_at for s in ("s1", "s2", "s3") for ch in relay.challenges.sessions[s].challenges.values()}
    assert len(moments) == 1, moments  # one moment for the whole address
    assert sent["s4"] == []  # another address: its own moment
