"""Beacon rounds are taken only fresh and in order, also after a restart (issue 46; web/cluster/beacon_gate.py).

The attacker is a relay user of the cluster's nats-server that the relays do not name as a peer: it cannot sign a
round, but it can re-publish the genuine rounds it heard. Before the gate, re-publishing a relay's old rounds
re-ran the roll calls they drew, and re-publishing a stopped relay's rounds kept it "alive" and leader (its
rounds draw the cluster's roll calls), so no roll call came at all. Here, on real relays and a real nats-server
with authorization: every replayed round is refused and counted by name in /metrics, the stopped relay stops
leading, none of its rounds draws a roll call after it stopped, and after a restart the same rounds are still
refused as replayed (the latest round taken is in the relay's SQLite file)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import nats
import pytest

from common.keys import load_or_create
from tests.nats_process import NatsProcess
from tests.relay_process import RECEIVED, RelayProcess, start_all
from tests.relay_process import metric_sum as metric
from tests.roll_call_helpers import until
from tests.threaded import in_thread
from web.cluster.beacon_gate import window_s
from web.config import RelayConfig
from web.proof.rollcall import gap_rounds

pytestmark = pytest.mark.timed  # beacon rounds every second

ROUNDS = ["--beacon-interval", "1", "--roll-call-interval-s", "6", "--roll-call-min-gap-s", "6"]


def captured_rounds(url: str, password: str, relay_id: str, rounds: int) -> list[dict[str, Any]]:
    """`rounds` consecutive beacon rounds of relay_id, as a listener with relay credentials hears them."""
    async def go() -> list[dict[str, Any]]:
        nc = await nats.connect(url, user="mallory", password=password)
        got: list[dict[str, Any]] = []
        done = asyncio.Event()

        async def on(msg: Any) -> None:
            body = json.loads(msg.data)
            if body["relay"] == relay_id:
                got.append(body)
                if len(got) >= rounds:
                    done.set()

        await nc.subscribe("ce.relays.beacons", cb=on)
        await asyncio.wait_for(done.wait(), timeout=30 + 2 * rounds)
        await nc.close()
        return got

    return in_thread(asyncio.run, go())


def republish(url: str, password: str, rounds: list[dict[str, Any]], times: int) -> None:
    """Every round again, `times` times, a second apart (the issue's attack re-published every 3 s)."""
    async def go() -> None:
        nc = await nats.connect(url, user="mallory", password=password)
        for _ in range(times):
            for body in rounds:
                await nc.publish("ce.relays.beacons", json.dumps(body).encode())
            await nc.flush()
            await asyncio.sleep(1.0)
        await nc.close()

    in_thread(asyncio.run, go())


def refused_rounds(relay: RelayProcess) -> float:
    return (metric(relay, f'{RECEIVED}{{result="beacon_replayed"}}')
            + metric(relay, f'{RECEIVED}{{result="beacon_stale"}}'))


def test_replayed_rounds_draw_no_roll_call_keep_no_stopped_relay_leading_and_stay_refused_after_a_restart(
        tmp_path: Path) -> None:
    keys = [load_or_create(tmp_path / f"r{i}" / "relay.key") for i in range(2)]
    with NatsProcess(tmp_path / "nats", users=["relay-0", "relay-1", "mallory"]) as server:
        relays = start_all([RelayProcess(tmp_path / f"r{i}", *ROUNDS, *server.relay_args(f"relay-{i}"),
                                         "--cluster-peer", keys[1 - i].node_id) for i in range(2)])
        low, high = sorted(zip(keys, relays, strict=True), key=lambda kr: kr[0].node_id)
        try:
            until("the lower relay leads both", 20, lambda: high[1].get("/v1/relays")[1]["leader"] == low[0].node_id)
            gap = gap_rounds(RelayConfig(beacon_interval_s=1.0, roll_call_min_gap_s=6.0))
            rounds = captured_rounds(server.url, server.passwords["mallory"], low[0].node_id, gap + 1)
            # the precondition: a captured round is one that may draw a roll call (its replay would re-run it)
            assert any(r["round"] % gap == 0 for r in rounds), [r["round"] for r in rounds]
            low[1].stop()
            stopped_at = time.time()
            until("the higher relay leads once the lower fell silent", 20,
                  lambda: high[1].get("/v1/relays")[1]["leader"] == high[0].node_id)
            before = refused_rounds(high[1])
            republish(server.url, server.passwords["mallory"], rounds, times=8)
            until("every replayed round refused", 10, lambda: refused_rounds(high[1]) >= before + 8 * len(rounds))
            assert high[1].get("/v1/relays")[1]["leader"] == high[0].node_id  # the stopped relay leads nothing
            calls = high[1].get("/v1/roll-calls?limit=1000")[1]["roll_calls"]  # ids: "<round>-<relay's tail>"
            assert not [c for c in calls if c["at"] > stopped_at + 1 and c["id"].endswith(low[0].node_id[-8:])], calls

            high[1].stop()
            high[1].start()
            window = window_s(RelayConfig().clock_skew_s, 1.0)
            assert time.time() - rounds[-1]["issued_at"] < window - 5  # the precondition: still fresh by its time
            republish(server.url, server.passwords["mallory"], rounds[-1:], times=1)
            until("the latest round refused as replayed after the restart", 10,
                  lambda: metric(high[1], f'{RECEIVED}{{result="beacon_replayed"}}') >= 1)
            assert high[1].get("/v1/relays")[1]["leader"] == high[0].node_id
        finally:
            for r in relays:
                r.stop()
