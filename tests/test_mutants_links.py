"""web/map/links.py's LinkBook beyond tests/test_links.py: the triangle's two bounds at their edges and the refusal
a node reads, the relay's config, newer-only samples, both endpoints moving as Serf clients that see each
other's coordinate from before the sample, rebuilding from storage, and the throttled mesh block (mutation
testing: scripts/mutants). Samples here are verified already (the book does not check signatures)."""

from __future__ import annotations

from typing import Any

import pytest

from fabric.defence import guarded_coordinates
from fabric.vivaldi import Coordinate, VivaldiNode
from web.api.problems import Problem
from web.config import RelayConfig
from web.map.links import MESH_REFRESH_S, REFIT_CONFIG, LinkBook, coordinate_seed

R = "relay"


def sample(a: str, b: str, rtt_ms: float, measured_at: int = 100) -> dict[str, Any]:
    return {"a": a, "b": b, "rtt_ms": rtt_ms, "jitter_ms": 0.1, "loss": 0.0, "bw_mbps": None,
            "measured_at": measured_at, "sig_a": "x", "sig_b": "y"}


def measured_book(config: RelayConfig | None = None, rtt_a: float = 10.0, rtt_b: float = 30.0) -> LinkBook:
    """A book whose relay measured node a at rtt_a and node b at rtt_b (stored as relay->node and node->relay)."""
    book = LinkBook(R, config)
    book.add(sample(R, "a", rtt_a), True)
    book.add(sample("b", R, rtt_b), True)
    return book


def test_the_relay_finds_its_own_edges_whichever_side_it_was_on() -> None:
    book = measured_book()
    assert (book.rtt_via(R, "a"), book.rtt_via(R, "b"), book.rtt_via(R, "c")) == (10.0, 30.0, None)
    assert book.measured("a", R) is book.measured(R, "a") is not None
    assert book.measured("a", "b") is None
    assert book.judge(sample(R, "c", 50.0)) is True  # the relay's own edge: measured by itself


def test_both_bounds_of_the_triangle_at_their_edges() -> None:
    # factor 2, slack 5 ms; the relay measured a at 10 and b at 30: low (|10-30| - 5) / 2 = 7.5, high 2 * 40 + 5
    book = measured_book()
    assert book.judge(sample("a", "b", 7.5)) is True
    assert book.judge(sample("a", "b", 7.4)) is False
    assert book.judge(sample("a", "b", 85.0)) is True
    with pytest.raises(Problem) as refused:
        book.judge(sample("a", "b", 85.5))
    p = refused.value
    assert (p.status, p.code, p.title, p.field) == (422, "inconsistent_rtt",
                                                     "the RTT contradicts a landmark's own measurements", "$.rtt_ms")
    assert p.detail == ("85.5 ms between endpoints this relay measured at 10.0 ms and 30.0 ms; the triangle "
                        "inequality through it allows at most 85.000 ms (factor 2, slack 5 ms)")


def test_samples_are_judged_by_the_landmark_edges_the_cluster_holds() -> None:
    """A relay's own newer edge that it did not send (within link_gossip_change of the copy the cluster
    holds) does not change its verdict: every relay of the cluster judges a sample alike."""
    book = measured_book()
    book.add(sample(R, "a", 5.0, measured_at=101), True, shared=False)
    book.add(sample("b", R, 12.0, measured_at=101), True, shared=False)
    newest = book.measured(R, "a")
    assert newest is not None and newest["rtt_ms"] == 5.0  # served: the newest measurement
    assert book.rtt_via(R, "a") == 10.0 and book.rtt_via(R, "b") == 30.0  # judged: the cluster's copy
    assert book.judge(sample("a", "b", 85.0)) is True  # by its unsent edges (5 + 12) this would be refused
    assert book.judge(sample("a", "b", 7.5)) is True


def test_the_bounds_come_from_the_relays_config() -> None:
    book = measured_book(RelayConfig(link_tiv_factor=1.5, link_slack_ms=1.0))
    # low (20 - 1) / 1.5 = 12.67, high 1.5 * 40 + 1 = 61
    assert book.judge(sample("a", "b", 12.6)) is False and book.judge(sample("a", "b", 12.7)) is True
    assert book.judge(sample("a", "b", 61.0)) is True
    with pytest.raises(Problem):
        book.judge(sample("a", "b", 61.5))


def test_only_a_newer_sample_replaces_the_stored_one() -> None:
    book = LinkBook(R)
    assert book.add(sample("a", "b", 20.0, measured_at=200), False) is True
    assert book.add(sample("b", "a", 90.0, measured_at=100), True) is False
    stored = book.measured("a", "b")
    assert stored is not None and (stored["rtt_ms"], stored["measured_at"]) == (20.0, 200)
    assert book.unconfirmed == {("a", "b")}  # the refused older sample changed nothing
    assert book.add(sample("b", "a", 25.0, measured_at=200), True) is True  # same time: taken
    assert book.unconfirmed == set() and book.measured("a", "b") == sample("b", "a", 25.0, measured_at=200)


def test_unknown_nodes_have_no_coordinate() -> None:
    book = measured_book()
    assert book.coordinate("nobody") is None and book.coordinate("a") is not None


def copy(c: Coordinate) -> Coordinate:
    return Coordinate(list(c.vec), c.error, c.adjustment, c.height)


def test_confirmed_samples_move_both_endpoints_as_serf_clients() -> None:
    """Each endpoint updates against the other's coordinate from before the sample, under its own filter per
    peer, seeded by its NodeId: replayed here on bare VivaldiNodes."""
    edges = [(R, "a", 10.0), (R, "b", 30.0), ("a", "b", 35.0), (R, "c", 12.0), ("a", "c", 14.0),
             ("a", "b", 33.0), ("a", "c", 60.0), ("a", "c", 58.0), ("a", "b", 36.0), ("c", "b", 31.0)]
    book = LinkBook(R)
    ref: dict[str, VivaldiNode] = {}
    for t, (x, y, rtt) in enumerate(edges):
        assert book.add(sample(x, y, rtt, measured_at=t), True) is True
        nx = ref.setdefault(x, VivaldiNode(seed=coordinate_seed(x)))
        ny = ref.setdefault(y, VivaldiNode(seed=coordinate_seed(y)))
        before = copy(nx.coord)
        nx.update(y, ny.coord, rtt)
        ny.update(x, before, rtt)
    for node, expected in ref.items():
        assert book.coordinate(node) == expected.coord, node


def test_two_books_fed_alike_agree() -> None:
    books = [measured_book(), measured_book()]
    for book in books:
        book.add(sample("a", "b", 35.0, measured_at=101), True)
    assert [books[0].coordinate(n) for n in (R, "a", "b")] == [books[1].coordinate(n) for n in (R, "a", "b")]


def test_an_unconfirmed_sample_puts_its_endpoints_on_the_map_unmoved() -> None:
    book = LinkBook(R)
    assert book.add(sample("a", "b", 20.0), False) is True
    origin = Coordinate.origin()
    assert book.coordinate("a") == origin and book.coordinate("b") == origin


def test_load_refits_from_every_sample_whatever_their_order() -> None:
    stored = [sample("a", "b", 35.0, measured_at=1),   # fits once a and b are measured (they come later)
              sample("a", "c", 20.0, measured_at=2),   # c is never measured by the relay
              sample("b", "a", 200.0, measured_at=3),  # newer, beyond the triangle: kept, moves nothing
              sample(R, "a", 10.0, measured_at=4), sample("b", R, 30.0, measured_at=5)]
    book = LinkBook(R)
    book.load(stored)
    assert book.unconfirmed == {("a", "b"), ("a", "c")}
    assert book.measured("a", "b") == stored[2] and book.rtt_via(R, "b") == 30.0
    assert set(book.nodes) == {R, "a", "b", "c"} and book.coordinate("c") == Coordinate.origin()
    assert not book.refit_due()

    fitting, reversed_order = LinkBook(R), LinkBook(R)
    fitting.load(stored[:2] + stored[3:])
    reversed_order.load(list(reversed(stored[:2] + stored[3:])))
    assert fitting.unconfirmed == reversed_order.unconfirmed == {("a", "c")}
    for node in ("a", "b", R):  # one answer whatever the order the samples came in (every relay of a cluster)
        assert fitting.coordinate(node) == reversed_order.coordinate(node)
    assert fitting.coordinate("a") != Coordinate.origin() != fitting.coordinate("b")
    confirmed = sorted([stored[0], stored[3], stored[4]], key=lambda s: (s["a"], s["b"]))  # as refit orders them
    expected = guarded_coordinates(confirmed, {R}, cycles=200, seed=0, config=REFIT_CONFIG, seed_of=coordinate_seed)
    assert fitting.coordinate("a") == expected["a"] and fitting.coordinate("b") == expected["b"]


def test_the_fabric_map_holds_the_coordinates_and_the_measured_edges() -> None:
    book = measured_book()
    book.add(sample("a", "b", 35.0, measured_at=101), True)
    fmap = book.fabric_map()
    assert fmap.node_ids == sorted([R, "a", "b"])
    a, b = book.coordinate("a"), book.coordinate("b")
    assert a is not None and b is not None
    assert fmap.predicted_rtt("a", "b") == a.distance(b)
    assert (fmap.measured_rtt("b", "a"), fmap.measured_rtt("a", R), fmap.measured_rtt("b", R)) == (35.0, 10.0, 30.0)


EMPTY_MESH = {"median_rtt_ms": None, "reachable_frac": None, "regions": None}


def test_the_mesh_block_is_recomputed_at_most_every_refresh_interval() -> None:
    book = LinkBook(R)
    assert book.mesh(now=100.0) == EMPTY_MESH and book.region_of == {}
    book.add(sample(R, "a", 10.0), True)
    book.add(sample(R, "b", 30.0), True)
    assert book.mesh(now=MESH_REFRESH_S / 2) == EMPTY_MESH  # not yet: the mesh is from time 0
    first = book.mesh(now=MESH_REFRESH_S)
    assert first == {"median_rtt_ms": 20.0, "reachable_frac": 1.0, "regions": len(book.fabric_map().regions())}
    assert set(book.region_of) == {R, "a", "b"}
    book.add(sample("a", "b", 35.0, measured_at=101), True)
    assert book.mesh(now=MESH_REFRESH_S + 1.0) == first  # dirty, but computed a second ago
    assert book.mesh(now=2 * MESH_REFRESH_S)["median_rtt_ms"] == 30.0


def test_the_mesh_block_uses_the_monotonic_clock_by_default() -> None:
    book = LinkBook(R)
    book.add(sample(R, "a", 10.0), True)
    assert book.mesh()["median_rtt_ms"] == 10.0


def test_a_relays_own_edge_is_sent_again_only_when_it_moved_or_aged() -> None:
    from web.map.links import worth_gossiping

    config = RelayConfig()  # 20% and 2 ms, 60 s apart at least; or 300 s
    sent = sample(R, "a", 40.0, measured_at=1000)
    assert worth_gossiping(None, sent, config)
    assert not worth_gossiping(sent, sample(R, "a", 47.9, measured_at=1060), config)
    assert worth_gossiping(sent, sample(R, "a", 48.1, measured_at=1060), config)
    assert worth_gossiping(sent, sample(R, "a", 31.9, measured_at=1060), config)
    assert not worth_gossiping(sent, sample(R, "a", 90.0, measured_at=1059), config)  # moved, but too soon
    assert not worth_gossiping(sent, sample(R, "a", 40.0, measured_at=1299), config)
    assert worth_gossiping(sent, sample(R, "a", 40.0, measured_at=1300), config)
    near = sample(R, "a", 0.5, measured_at=1000)  # loopback: 0.5 -> 0.9 ms is 80% but noise
    assert not worth_gossiping(near, sample(R, "a", 0.9, measured_at=1060), config)
    assert worth_gossiping(near, sample(R, "a", 2.6, measured_at=1060), config)
