"""A relay user can neither remove nor alter another relay's records in the cluster's buckets (issue 46).

The attacker is a user of the cluster's nats-server that the relays do not name as a peer ("mallory": a relay
operator of the cluster turned hostile). Before, any relay user could purge any key of the profiles' bucket and
overwrite another with garbage, and a relay started later answered 404 for both nodes. Now each relay writes its
keys under its own user (web/cluster/nats_auth.py writer_prefix; the server's permissions allow nothing else):
mallory's purge and overwrite of relay-a's keys are refused by the server, and so is a rollup (a message with
`Nats-Rollup: all` on mallory's own key, which purges every key of a bucket that allows rollups, as nats.py makes
them; web/cluster/buckets.py makes them without); a relay that starts afterwards catches both nodes up from the
bucket, and what mallory may write (under its own prefix) is verified before use and skipped. The control: the
overwrite under mallory's own prefix is taken by the server (a purge is refused there too: it is a rollup).
And a bucket a relay user made first, with rollups allowed, is fixed by a relay that may update streams and
reported loudly by one that may not."""

from __future__ import annotations

import asyncio
import functools
import json
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.errors import Error as NatsError
from nats.js.errors import Error as JetStreamError

from common.keys import load_or_create
from tests.nats_process import NatsProcess
from tests.relay_process import RelayProcess, free_port, metric
from tests.roll_call_helpers import until
from tests.samples import sample_profile
from tests.threaded import in_thread

pytestmark = pytest.mark.timed  # waits on the bucket's writes crossing to a relay

INVALID = 'ce_relay_cluster_received_total{result="invalid"}'


def attack(url: str, password: str, keys: list[str]) -> dict[str, str | None]:
    """mallory's purge of keys[0] and overwrite of keys[1..]; for each call, None where the server took it, else
    what refused it (a forbidden publish is dropped: the JetStream acknowledgement never comes)."""
    async def go() -> dict[str, str | None]:
        async def quiet(exc: Exception) -> None:
            return None

        nc = await nats.connect(url, user="mallory", password=password, error_cb=quiet)
        outcome: dict[str, str | None] = {}
        try:
            kv = await nc.jetstream(timeout=3).key_value("ce-atlas")
            for i, key in enumerate(keys):
                try:
                    if i == 0:
                        await kv.purge(key)
                    else:
                        await kv.put(key, b'{"origin": "x", "body": "garbage"}')
                    outcome[key] = None
                except (NatsError, JetStreamError, TimeoutError) as exc:
                    outcome[key] = repr(exc)
        finally:
            await nc.close()
        return outcome

    return in_thread(asyncio.run, go())


def rollup(url: str, user: str | None, password: str | None, subject: str) -> str | None:
    """One empty message with `Nats-Rollup: all` on `subject`: in a stream that allows rollups it purges every key
    of the bucket. None where the stream took it, else what refused it."""
    async def go() -> str | None:
        async def quiet(exc: Exception) -> None:
            return None

        nc = await nats.connect(url, user=user, password=password, error_cb=quiet)
        try:
            await nc.jetstream(timeout=3).publish(subject, b"", headers={"Nats-Rollup": "all"})
            return None
        except (NatsError, JetStreamError, TimeoutError) as exc:
            return repr(exc)
        finally:
            await nc.close()

    refused: str | None = in_thread(asyncio.run, go())
    return refused


def bucket_keys(url: str, password: str) -> list[str]:
    async def go() -> list[str]:
        nc = await nats.connect(url, user="mallory", password=password)
        try:
            return list(await (await nc.jetstream(timeout=3).key_value("ce-atlas")).keys())
        finally:
            await nc.close()

    return in_thread(asyncio.run, go())


def serves(relay: RelayProcess, node_id: str) -> bool:
    return relay.get(f"/v1/nodes/{node_id}")[0] == 200


def test_a_relay_user_cannot_purge_or_overwrite_another_relays_keys(tmp_path: Path) -> None:
    keys = {n: load_or_create(tmp_path / n / "relay.key") for n in ("a", "c")}
    with NatsProcess(tmp_path / "nats", users=["relay-a", "relay-c", "mallory"]) as server:
        a = RelayProcess(tmp_path / "a", *server.relay_args("relay-a"), "--cluster-peer", keys["c"].node_id,
                         port=free_port())
        c = RelayProcess(tmp_path / "c", *server.relay_args("relay-c"), "--cluster-peer", keys["a"].node_id,
                         port=free_port())
        try:
            a.start()
            _, beacon, _ = a.get("/beacon")
            nodes: list[Any] = []
            for _ in range(2):
                key, profile = sample_profile(beacon=beacon)
                assert a.post("/v1/profiles", profile)[0] == 201
                nodes.append(key)
            mallory = server.passwords["mallory"]
            theirs = [f"relay-a.{k.node_id}" for k in nodes]
            until("relay-a's keys in the bucket", 20, lambda: set(theirs) <= set(bucket_keys(server.url, mallory)))
            refused = attack(server.url, mallory, theirs)
            assert all(refused.values()), refused  # the server took neither the purge nor the overwrite
            # the control: the overwrite under mallory's own key is taken (so its refusal above means scope); a
            # purge is refused even there (a purge is a rollup of one key, and the stream refuses rollups)
            own = [f"mallory.{k.node_id}" for k in nodes]
            control = attack(server.url, mallory, own)
            assert control[own[1]] is None and control[own[0]] is not None, control
            # a rollup on mallory's own key would purge everyone's keys: the stream refuses rollups
            assert rollup(server.url, "mallory", mallory, f"$KV.ce-atlas.mallory.{nodes[0].node_id}") is not None
            assert set(theirs) <= set(bucket_keys(server.url, mallory))
            c.start()  # catches up from the bucket: both nodes, from relay-a's keys; mallory's garbage skipped
            for k in nodes:
                until("c serves the node from the bucket", 20, functools.partial(serves, c, k.node_id))
                assert c.get(f"/v1/nodes/{k.node_id}")[1]["profile"]["sig"] == json.loads(
                    json.dumps(a.get(f"/v1/nodes/{k.node_id}")[1]["profile"]))["sig"]
            until("mallory's garbage counted invalid, not used", 10, lambda: metric(c, INVALID) >= 1)
        finally:
            for r in (a, c):
                r.stop()
    for r in (a, c):
        assert "permissions violation" not in r.log.read_text().lower(), r.log.read_text()[-3000:]


def make_bucket_with_rollups(url: str, user: str | None, password: str | None) -> None:
    """The profiles' bucket as nats.py makes it (rollup headers allowed), before any relay starts."""
    async def go() -> None:
        nc = await nats.connect(url, user=user, password=password)
        try:
            await nc.jetstream(timeout=3).create_key_value(bucket="ce-atlas", history=1)
        finally:
            await nc.close()

    in_thread(asyncio.run, go())


def test_a_bucket_made_with_rollups_is_fixed_where_the_relay_may_and_reported_where_it_may_not(
        tmp_path: Path) -> None:
    with NatsProcess(tmp_path / "open") as server:  # no users: the relay may update the stream
        make_bucket_with_rollups(server.url, None, None)
        assert rollup(server.url, None, None, "$KV.ce-atlas.x.y") is None  # the precondition: rollups taken
        with RelayProcess(tmp_path / "r1", *server.relay_args()) as relay:
            until("the relay fixed the bucket", 20, lambda: "refused from now on" in relay.log.read_text())
            assert rollup(server.url, None, None, "$KV.ce-atlas.x.y") is not None
    with NatsProcess(tmp_path / "auth", users=["relay-a", "mallory"]) as server:
        make_bucket_with_rollups(server.url, "mallory", server.passwords["mallory"])  # mallory made it first
        with RelayProcess(tmp_path / "r2", *server.relay_args("relay-a")) as relay:
            until("the relay reported the bucket", 20, lambda: "is not safe to share" in relay.log.read_text())
            assert "nats stream edit KV_ce-atlas --no-allow-rollup" in relay.log.read_text()
