"""fabric/vivaldi.py step by step against Serf (hashicorp/serf coordinate/coordinate.go and client.go, and the
cases of their coordinate_test.go and client_test.go, in milliseconds): distances with heights and
adjustments, the force, the latency filter, one update against Serf's three steps (Vivaldi, adjustment,
gravity), the refusals and the reset, the JSON form, and coordinates_from_links (mutation testing:
scripts/mutants). tests/test_vivaldi.py holds the accuracy on whole topologies."""

from __future__ import annotations

import math
import random

import pytest

from fabric import vivaldi
from fabric.config import VivaldiConfig
from fabric.vivaldi import ZERO, ZERO_ERROR, Coordinate, CoordinateError, VivaldiNode, coordinates_from_links

FLAT = VivaldiConfig(dimensionality=3, height_min_ms=0.0)


def test_origin_is_zero_with_the_largest_error_and_the_smallest_height() -> None:
    config = VivaldiConfig(dimensionality=3, error_max=2.5, height_min_ms=0.5)
    assert Coordinate.origin(config) == Coordinate([0.0, 0.0, 0.0], 2.5, 0.0, 0.5)


def test_a_node_starts_at_the_origin_of_its_own_config() -> None:
    """Fixed with this test: the node's coordinate came from a default_factory that could not see the config,
    so a node of 2 dimensions started with 8 and refused every 2-dimensional peer."""
    config = VivaldiConfig(dimensionality=2, error_max=1.0, height_min_ms=0.5)
    node = VivaldiNode(config)
    assert node.coord == Coordinate([0.0, 0.0], 1.0, 0.0, 0.5)
    node.update("peer", Coordinate([3.0, 4.0], 1.0, 0.0, 0.5), 6.0)
    assert node.updates == 1 and len(node.coord.vec) == 2
    start = Coordinate([1.0, 1.0], 0.5)
    assert VivaldiNode(config, start).coord is start


def test_distance_with_adjustments_and_heights_as_serf() -> None:
    """Serf's TestCoordinate_DistanceTo."""
    c1 = Coordinate([-0.5, 1.3, 2.4], 1.5, 0.0, 0.0)
    c2 = Coordinate([1.2, -2.3, 3.4], 1.5, 0.0, 0.0)
    base = 4.104875150354758
    assert c1.distance(c2) == pytest.approx(base) and c2.distance(c1) == pytest.approx(base)
    c1.adjustment = -1.0e6  # a negative total adjustment is ignored
    assert c1.distance(c2) == pytest.approx(base)
    c1.adjustment, c2.adjustment = 0.1, 0.2
    assert c1.distance(c2) == pytest.approx(base + 0.3) and c2.distance(c1) == pytest.approx(base + 0.3)
    c1.height, c2.height = 0.7, 0.1
    assert c1.distance(c2) == pytest.approx(base + 0.3 + 0.8) and c2.distance(c1) == pytest.approx(base + 1.1)
    assert c1.raw_distance(c2) == pytest.approx(base + 0.8) and c2.raw_distance(c1) == pytest.approx(base + 0.8)


def test_an_adjusted_distance_must_be_positive_to_count() -> None:
    a = Coordinate([0.0, 0.0, 0.0], 1.0, -2.5, 0.0)
    b = Coordinate([3.0, 4.0, 0.0], 1.0, -2.5, 0.0)
    assert a.distance(b) == 5.0  # adjusted to exactly 0: the raw distance
    b.adjustment = -2.0
    assert a.distance(b) == pytest.approx(0.5)  # small but positive: it counts


def test_apply_force_as_serf() -> None:
    """Serf's TestCoordinate_ApplyForce (heights off, then on)."""
    origin = Coordinate.origin(FLAT)
    above = Coordinate([0.0, 0.0, 2.9], 1.5, 0.0, 0.0)
    c = Coordinate.origin(FLAT)
    c.apply_force(FLAT, 5.3, above, random.Random(0))
    assert c.vec == pytest.approx([0.0, 0.0, -5.3])
    right = Coordinate([3.4, 0.0, -5.3], 1.5, 0.0, 0.0)
    c.apply_force(FLAT, 2.0, right, random.Random(0))
    assert c.vec == pytest.approx([-2.0, 0.0, -5.3])

    tall = VivaldiConfig(dimensionality=3, height_min_ms=10.0)
    above.height = 10.0
    c = Coordinate.origin(tall)
    c.apply_force(tall, 5.3, above, random.Random(0))
    assert c.vec == pytest.approx([0.0, 0.0, -5.3])
    assert c.height == pytest.approx(10.0 + 5.3 * 20.0 / 2.9)
    c = Coordinate.origin(tall)
    c.apply_force(tall, -5.3, above, random.Random(0))
    assert c.vec == pytest.approx([0.0, 0.0, 5.3]) and c.height == 10.0  # never below the minimum
    assert origin.vec == [0.0, 0.0, 0.0]


def test_the_same_spot_pushes_a_unit_step_in_a_random_direction_without_height() -> None:
    """Serf: `origin.ApplyForce(config, 1.0, origin)` moves by exactly 1; heights change only with a distance.
    A peer within ZERO (1 microsecond) counts as the same spot."""
    config = VivaldiConfig(dimensionality=3, height_min_ms=0.25)
    for peer_vec in ([0.0, 0.0, 0.0], [ZERO, 0.0, 0.0]):
        c = Coordinate.origin(config)
        c.apply_force(config, 2.0, Coordinate(peer_vec, 1.5, 0.0, 0.25), random.Random(7))
        assert math.hypot(*c.vec) == pytest.approx(2.0)
        assert c.height == 0.25


def test_random_pushes_are_unbiased() -> None:
    rng = random.Random(3)
    config = VivaldiConfig(dimensionality=3)
    sums = [0.0, 0.0, 0.0]
    for _ in range(400):
        c = Coordinate.origin(config)
        c.apply_force(config, 1.0, Coordinate.origin(config), rng)
        sums = [s + v for s, v in zip(sums, c.vec, strict=True)]
    assert all(abs(s / 400) < 0.1 for s in sums), sums  # a biased direction would put each mean near 0.5


def test_coordinates_of_different_dimensionality_do_not_mix() -> None:
    c = Coordinate([1.0, 2.0], 1.0)
    with pytest.raises(ValueError):
        c.apply_force(VivaldiConfig(dimensionality=2), 1.0, Coordinate([0.0, 0.0, 5.0], 1.0), random.Random(0))


def test_latency_filter_as_serf() -> None:
    """Serf's TestClient_latencyFilter: the upper median of the last 3 samples, per peer."""
    node = VivaldiNode(VivaldiConfig(latency_filter_size=3))
    for sample, median in [(201.0, 201.0), (200.0, 201.0), (207.0, 201.0), (1900.0, 207.0), (203.0, 207.0),
                           (199.0, 203.0), (211.0, 203.0)]:
        assert node._filtered("alice", sample) == median
    assert node._filtered("bob", 310.0) == 310.0


# Serf's client.go in milliseconds, written out on plain lists: the reference one update must match.
def ref_distance(a: Coordinate, b: Coordinate) -> tuple[float, float]:
    raw = math.sqrt(sum((x - y) ** 2 for x, y in zip(a.vec, b.vec, strict=True))) + a.height + b.height
    adjusted = raw + a.adjustment + b.adjustment
    return raw, adjusted if adjusted > 0 else raw


def ref_force(c: Coordinate, config: VivaldiConfig, force: float, other: Coordinate) -> None:
    diff = [x - y for x, y in zip(c.vec, other.vec, strict=True)]
    mag = math.sqrt(sum(d * d for d in diff))
    assert mag > ZERO  # the reference cases never coincide (that branch is random)
    c.vec = [x + d / mag * force for x, d in zip(c.vec, diff, strict=True)]
    c.height = max((c.height + other.height) * force / mag + c.height, config.height_min_ms)


def ref_update(config: VivaldiConfig, c: Coordinate, samples: list[float], index: int, other: Coordinate,
               rtt: float) -> int:
    # updateVivaldi
    _, dist = ref_distance(c, other)
    wrongness = abs(dist - rtt) / rtt
    weight = c.error / max(c.error + other.error, ZERO_ERROR)
    c.error = min(config.ce * weight * wrongness + c.error * (1.0 - config.ce * weight), config.error_max)
    ref_force(c, config, config.cc * weight * (rtt - dist), other)
    # updateAdjustment
    samples[index] = rtt - ref_distance(c, other)[0]
    index = (index + 1) % config.adjustment_window
    c.adjustment = sum(samples) / (2.0 * config.adjustment_window)
    # updateGravity: (d / rho)^2 seconds towards the origin, d in seconds
    d_s = ref_distance(c, Coordinate.origin(config))[1] / 1000.0
    ref_force(c, config, -1000.0 * (d_s / config.gravity_rho_s) ** 2, Coordinate.origin(config))
    return index


def test_updates_follow_serf_step_by_step() -> None:
    # gravity strong enough to matter (rho 0.5 s), a short adjustment window that wraps, no latency filter
    config = VivaldiConfig(dimensionality=3, error_max=1.5, ce=0.3, cc=0.2, adjustment_window=3,
                           height_min_ms=0.01, latency_filter_size=1, gravity_rho_s=0.5)
    node = VivaldiNode(config, Coordinate([1.0, 2.0, 3.0], 1.2, 0.0, 0.5), seed=1)
    ref = Coordinate([1.0, 2.0, 3.0], 1.2, 0.0, 0.5)
    samples, index = [0.0] * 3, 0
    peers = [("a", Coordinate([10.0, -4.0, 2.0], 0.4, 0.3, 1.5), 20.0),
             ("b", Coordinate([-6.0, 1.0, 8.0], 0.9, -0.2, 0.3), 9.0),
             ("c", Coordinate([3.0, 3.0, -9.0], 1.5, 0.1, 2.0), 35.0),
             ("a", Coordinate([10.0, -4.0, 2.0], 0.4, 0.3, 1.5), 18.0),
             ("b", Coordinate([-6.0, 1.0, 8.0], 0.9, -0.2, 0.3), 12.0)]
    for i, (peer, other, rtt) in enumerate(peers, 1):
        node.update(peer, other, rtt)
        index = ref_update(config, ref, samples, index, other, rtt)
        got = node.coord
        assert got.vec == pytest.approx(ref.vec, rel=1e-12), i
        assert (got.error, got.adjustment, got.height) == pytest.approx((ref.error, ref.adjustment, ref.height),
                                                                        rel=1e-12), i
        assert node.updates == i


def test_rtts_from_zero_to_the_ceiling_are_taken() -> None:
    config = VivaldiConfig()
    for rtt in (0.0, 0.5, config.rtt_max_ms):
        node = VivaldiNode(config)
        node.update("peer", Coordinate([1.0] + [0.0] * 7, 1.5), rtt)
        assert node.updates == 1 and node.coord.is_valid()


def test_a_peer_on_the_same_spot_at_the_predicted_rtt_leaves_the_node_in_place() -> None:
    node = VivaldiNode(seed=5)
    node.update("twin", Coordinate.origin(), 2 * node.config.height_min_ms)
    assert math.hypot(*node.coord.vec) < 1e-6 and node.coord.is_valid()


def test_the_same_seed_gives_the_same_random_pushes() -> None:
    a, b = VivaldiNode(seed=11), VivaldiNode(seed=11)
    for node in (a, b):
        node.update("twin", Coordinate.origin(), 10.0)
    assert a.coord == b.coord and math.hypot(*a.coord.vec) > 0.1


def test_a_bad_peer_is_refused_with_the_reason() -> None:
    with pytest.raises(CoordinateError) as refused:
        VivaldiNode().update("peer", Coordinate([0.0] * 3, 1.0), 10.0)
    assert str(refused.value) == "the peer's coordinate is not finite or has the wrong dimensionality"


def test_an_update_that_overflows_resets_the_coordinate() -> None:
    node = VivaldiNode(seed=2)
    node.update("a", Coordinate([3.0] + [0.0] * 7, 1.5), 5.0)
    with pytest.raises(CoordinateError) as refused:
        node.update("far", Coordinate([1e308] * 8, 1.5), 10.0)
    assert str(refused.value) == "the update produced a non-finite coordinate; it was reset"
    assert node.coord == Coordinate.origin(node.config) and node.updates == 1


def test_to_json_rounds_to_a_tenth_of_a_microsecond() -> None:
    c = Coordinate([1.234567, -0.000049], 0.123456, -0.987654, 0.011111)
    assert c.to_json() == {"vec": [1.2346, -0.0], "error": 0.1235, "adjustment": -0.9877, "height": 0.0111}


def rtt(coords: dict[str, Coordinate], a: str, b: str) -> float:
    return coords[a].distance(coords[b])


def test_coordinates_from_links_fit_a_known_layout() -> None:
    side, diagonal = 10.0, 10.0 * math.sqrt(2)
    square = {("n0", "n1"): side, ("n1", "n2"): side, ("n2", "n3"): side, ("n3", "n0"): side,
              ("n0", "n2"): diagonal, ("n1", "n3"): diagonal}
    links: list[dict[str, object]] = [{"a": a, "b": b, "rtt_ms": ms} for (a, b), ms in square.items()]
    coords = coordinates_from_links(links)
    assert sorted(coords) == ["n0", "n1", "n2", "n3"]
    for (a, b), ms in square.items():
        assert rtt(coords, a, b) == pytest.approx(ms, rel=0.05), (a, b)
    assert coordinates_from_links(links) == coords  # the same seed: the same map
    assert coordinates_from_links(links, seed=1) != coords


def test_two_nodes_with_one_link_move_apart() -> None:
    coords = coordinates_from_links([{"a": "x", "b": "y", "rtt_ms": 25.0}], cycles=100)
    assert rtt(coords, "x", "y") == pytest.approx(25.0, rel=0.05)
    # the coordinates carry most of it, not the adjustment terms (nodes seeded alike would never part)
    assert math.dist(coords["x"].vec, coords["y"].vec) > 12.5


def test_each_endpoint_moves_against_the_others_coordinate_from_before_the_sample(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, Coordinate, Coordinate]] = []

    class Recording(VivaldiNode):
        def update(self, peer: str, other: Coordinate, rtt_ms: float, trust: float = 1.0) -> Coordinate:
            calls.append((id(self), copy(self.coord), copy(other)))
            return super().update(peer, other, rtt_ms, trust)

    monkeypatch.setattr(vivaldi, "VivaldiNode", Recording)
    links: list[dict[str, object]] = [{"a": "x", "b": "y", "rtt_ms": 20.0}, {"a": "y", "b": "z", "rtt_ms": 30.0}]
    coordinates_from_links(links, cycles=5)
    assert len(calls) == 2 * 2 * 5
    for (first, first_before, first_saw), (second, second_before, second_saw) in zip(calls[::2], calls[1::2],
                                                                                    strict=True):
        assert first != second
        assert first_saw == second_before and second_saw == first_before


def copy(c: Coordinate) -> Coordinate:
    return Coordinate(list(c.vec), c.error, c.adjustment, c.height)


def test_coordinates_from_links_use_the_config() -> None:
    config = VivaldiConfig(dimensionality=2)
    coords = coordinates_from_links([{"a": "x", "b": "y", "rtt_ms": 25.0}], cycles=20, config=config)
    assert all(len(c.vec) == 2 for c in coords.values())
