"""Cluster liveness digests (web/cluster/digests.py), the pure core: what a writer publishes, what a book believes,
signed and parsed as the relay does (capsule.signing.verify_record), with lost, replayed and foreign
digests. The real relays and NATS are in tests/test_proven_cluster.py."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from capsule.signing import sign, verify_record
from common.keys import NodeKey
from web.cluster.digests import DigestBook, DigestWriter

RELAY = NodeKey.generate()
STRANGER = NodeKey.generate()
NODES = [NodeKey.generate().node_id for _ in range(12)]


def signed(body: dict[str, Any], key: NodeKey = RELAY) -> Any:
    return verify_record("LiveDigest", sign("LiveDigest", body, key))


def book() -> DigestBook:
    return DigestBook(frozenset({RELAY.node_id}), max_age_s=130.0)


def test_full_then_changes_only_then_full_again() -> None:
    w = DigestWriter(RELAY.node_id, full_every=3, epoch=1)
    first = w.next({NODES[0]: 100}, 1000.0)
    assert first is not None and first["full"] and first["seq"] == 0
    assert w.next({NODES[0]: 100}, 1001.0) is None  # nothing changed, no full digest due: nothing sent
    change = w.next({NODES[0]: 100, NODES[1]: 101}, 1002.0)
    assert change is not None and not change["full"] and change["seq"] == 1
    assert change["added"] == [{"node_id": NODES[1], "since": 101}] and change["removed"] == []
    full = w.next({NODES[1]: 101}, 1003.0)  # the third interval: the whole set, and NODES[0] is not in it
    assert full is not None and full["full"] and full["added"] == [{"node_id": NODES[1], "since": 101}]
    assert full["seq"] == 2 and full["removed"] == []
    assert w.next({NODES[1]: 101}, 1004.0) is None and w.next({NODES[1]: 101}, 1005.0) is None
    again = w.next({NODES[1]: 101}, 1006.0)  # nothing changed for three intervals: the whole set all the same
    assert again is not None and again["full"] and again["seq"] == 3


def test_a_change_names_who_came_and_who_went() -> None:
    w = DigestWriter(RELAY.node_id, full_every=10, epoch=1)
    w.next({NODES[0]: 1, NODES[1]: 2}, 1000.0)
    change = w.next({NODES[1]: 2, NODES[2]: 3}, 1001.0)
    assert change is not None and not change["full"]
    assert change["added"] == [{"node_id": NODES[2], "since": 3}] and change["removed"] == [NODES[0]]
    back = w.next({NODES[1]: 5, NODES[2]: 3}, 1002.0)  # a new session of NODES[1]: live since later
    assert back is not None and back["added"] == [{"node_id": NODES[1], "since": 5}] and back["removed"] == []


def test_book_follows_changes_and_names_holders() -> None:
    w, b = DigestWriter(RELAY.node_id, 6, epoch=1), book()
    alive = {RELAY.node_id}
    assert b.apply(signed(w.next({NODES[0]: 1}, 1000.0) or {}), 1000.0) == ("applied", [NODES[0]])
    assert b.holders(NODES[0], alive) == [RELAY.node_id] and not b.held(NODES[1], alive)
    assert not b.held(NODES[0], set())  # a peer not heard from lately holds nothing
    assert b.apply(signed(w.next({NODES[1]: 2}, 1001.0) or {}), 1001.0) == ("applied", [NODES[1]])
    assert b.held(NODES[1], alive) and not b.held(NODES[0], alive)


def test_strangers_replays_and_gaps() -> None:
    w, b = DigestWriter(RELAY.node_id, 6, epoch=5), book()
    d0 = w.next({NODES[0]: 1}, 1000.0) or {}
    foreign = {**d0, "relay": STRANGER.node_id}
    assert b.apply(signed(foreign, STRANGER), 1000.0) == ("not_a_peer", [])
    assert b.apply(signed(d0), 1000.0)[0] == "applied"
    assert b.apply(signed(d0), 1000.5) == ("old", [])  # the same digest again
    d1 = w.next({NODES[0]: 1, NODES[1]: 2}, 1001.0) or {}
    d2 = w.next({NODES[1]: 2}, 1002.0) or {}
    assert b.apply(signed(d2), 1002.0) == ("gap", [])  # d1 was lost: the view waits for a full digest
    assert not b.held(NODES[1], {RELAY.node_id}) and not b.held(NODES[0], {RELAY.node_id})
    assert b.apply(signed(d1), 1002.5) == ("gap", [])  # late d1 does not revive a stale view either
    restarted = DigestWriter(RELAY.node_id, 6, epoch=6).next({NODES[2]: 3}, 1003.0) or {}
    assert b.apply(signed(restarted), 1003.0) == ("applied", [NODES[2]])  # a new run starts afresh
    assert b.apply(signed(d0), 1003.5) == ("old", [])  # the earlier run's digest, replayed
    late = DigestWriter(RELAY.node_id, 6, epoch=7).next({NODES[3]: 4}, 1000.0) or {}
    assert b.apply(signed(late), 1000.0 + 131) == ("old", [])  # older than max_age_s on arrival


@given(st.integers(0, 2**32 - 1), st.floats(0.0, 0.6))
@example(seed=0, loss=0.0)
@example(seed=7, loss=0.5)
def test_a_view_is_the_truth_or_stale_whatever_is_lost(seed: int, loss: float) -> None:
    """Random joins and leaves, each digest lost with probability `loss`: after every digest delivered, the
    book's view is either exactly the writer's set or stale (holds nothing); after a full digest arrives it is
    exact again. Never a node the relay did not say was live."""
    rng = random.Random(seed)
    w, b = DigestWriter(RELAY.node_id, 4, epoch=1), book()
    live: dict[str, int] = {}
    alive = {RELAY.node_id}
    for step in range(60):
        for n in rng.sample(NODES, 2):
            if n in live:
                del live[n]
            else:
                live[n] = step
        body = w.next(dict(live), 1000.0 + step)
        if body is None or rng.random() < loss:
            continue
        b.apply(signed(body), 1000.0 + step)
        held = {n for n in NODES if b.held(n, alive)}
        assert held in (set(live), set()), (step, held, set(live))
        if body["full"]:
            assert held == set(live)


def test_full_digests_every_nth_interval_and_what_a_view_keeps() -> None:
    w = DigestWriter(RELAY.node_id, full_every=4, epoch=1, url="http://127.0.0.1:8001")
    fulls = [d is not None and d["full"] for d in (w.next({}, 1000.0 + i) for i in range(9))]
    assert fulls == [True, False, False, False, True, False, False, False, True]
    b = book()
    first = DigestWriter(RELAY.node_id, 4, epoch=2, url="http://127.0.0.1:8001")
    assert b.apply(signed(first.next({NODES[0]: 1}, 1000.0) or {}), 1000.5) == ("applied", [NODES[0]])
    view = b.views[RELAY.node_id]
    assert (view.url, view.heard_at, view.live) == ("http://127.0.0.1:8001", 1000.5, {NODES[0]: 1})
    again = DigestWriter(RELAY.node_id, 4, epoch=3).next({NODES[0]: 1, NODES[1]: 2}, 1001.0) or {}
    assert b.apply(signed(again), 1001.0) == ("applied", [NODES[1]])  # only who was not live there before
    gone = {"v": 1, "relay": RELAY.node_id, "epoch": 3, "seq": 1, "at": 1001, "full": False, "added": [],
            "removed": [NODES[5]], "url": None}  # a node the view never held: nothing breaks
    assert b.apply(signed(gone), 1001.0) == ("applied", [])
    edge = DigestWriter(RELAY.node_id, 4, epoch=4).next({}, 1000.0) or {}
    assert b.apply(signed(edge), 1000.0 + 130.0)[0] == "applied"  # exactly max_age_s old: still taken
