"""Coordinates that resist lies (issue 18, item 4; seed §9 "Vivaldi error as a lie detector").

On fabric/adversary.py's seeded world (100 nodes in 4 regions, 6 landmarks, 20 % colluding liars that seek out
honest nodes) the honest nodes' median relative prediction error, over every honest pair (most never sampled),
must stay within 1.5x of the liar-free run of the same seed for every strategy, frog-boiling included; and the
attack must be real: with the defence off (DefenceConfig(enabled=False), plain Serf Vivaldi) the same lies make
that error at least 2x worse, or the first assertion would prove nothing. Fixed seed, no wall-clock: the
figures are the same on every run (seed 1, 120 rounds: defended 0.97-0.99x, undefended 2.6-6.0x). Runs in
~10 s of CPU; bench/vivaldi_liars.py prints the same figures for more seeds."""

from __future__ import annotations

import functools
import math
import random

import pytest

from fabric.adversary import PHYSICAL, STRATEGIES, Lies, honest_error, lie, make_world, name, run
from fabric.config import DefenceConfig, VivaldiConfig
from fabric.defence import GuardedVivaldi, log_residual, ramp
from fabric.vivaldi import Coordinate, CoordinateError, VivaldiNode

SEED, ROUNDS = 1, 120
ON, OFF = VivaldiConfig(), VivaldiConfig(defence=DefenceConfig(enabled=False))


@functools.cache
def error(strategy: str | None, defended: bool) -> float:
    world = make_world(SEED)
    return honest_error(world, run(world, strategy, ROUNDS, ON if defended else OFF))


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_honest_error_with_liars_stays_within_1_05x_and_the_attack_is_real(strategy: str) -> None:
    """docs/sdk.md: "honest nodes' median error stays within 1.05x of the liar-free run" (seeded: 0.97-0.99x
    measured for the five strategies; 2.6-5.9x without the defence)."""
    defended, undefended = error(strategy, True) / error(None, True), error(strategy, False) / error(None, False)
    assert undefended >= 2.0, f"{strategy}: without the defence only {undefended:.2f}x worse: the attack is not real"
    assert defended <= 1.05, f"{strategy}: with the defence {defended:.2f}x the liar-free error (target <= 1.05)"


def test_the_defence_leaves_the_honest_world_as_it_was() -> None:
    """No liars: the defence costs at most 5 % of plain Vivaldi's accuracy (seed 1: 4 %; 0-3 % over 6 seeds)."""
    assert error(None, True) <= 1.05 * error(None, False), (error(None, True), error(None, False))
    assert 0.02 < error(None, False) < 0.08  # the world is not trivially embeddable, nor beyond Vivaldi


def test_physical_liars_only_inflate_and_controlling_liars_also_deflate() -> None:
    world, rng = make_world(2, nodes=40, landmarks=4), random.Random(0)
    liars, honest = sorted(world.liars), world.honest
    for strategy in STRATEGIES:
        ratios = [lie(world, strategy, liar, victim, world.rtt_ms(liar, victim), 75, rng) / world.rtt_ms(liar, victim)
                  for liar in liars for victim in honest]
        if PHYSICAL[strategy]:
            assert min(ratios) >= 1.0, strategy
        else:
            assert min(ratios) < 0.9, strategy
        assert max(ratios) > 1.4, strategy
    # frog-boiling starts from the truth and grows by at most its speed a round
    liar, victim = liars[0], honest[0]
    reports = [lie(world, "frog", liar, victim, world.rtt_ms(liar, victim), t, rng) for t in range(50)]
    assert reports[0] == world.rtt_ms(liar, victim)
    assert all(0.0 <= b - a <= Lies().frog_ms_per_round + 1e-9 for a, b in zip(reports, reports[1:], strict=False))


def test_the_simulation_is_deterministic() -> None:
    world = make_world(3, nodes=30, landmarks=4)
    first = run(world, "disorder", 20).coordinates()
    assert run(world, "disorder", 20).coordinates() == first
    with pytest.raises(ValueError, match="unknown strategy"):
        run(world, "sybil", 1)


def test_ramp_and_residual() -> None:
    assert ramp(0.1, 0.2) == 1.0 and ramp(0.2, 0.2) == 1.0
    assert ramp(0.3, 0.2) == pytest.approx(0.5) and ramp(0.4, 0.2) == 0.0 and ramp(9.0, 0.2) == 0.0
    assert log_residual(20.0, 10.0) == pytest.approx(math.log(2)) == pytest.approx(log_residual(5.0, 10.0))
    assert log_residual(0.0, 10.0) > 9.0  # a zero RTT is a huge lie, not a division by zero


def test_trust_scales_a_vivaldi_update() -> None:
    peer = Coordinate([10.0] + [0.0] * 7, 0.5)
    full, half, plain = VivaldiNode(seed=1), VivaldiNode(seed=1), VivaldiNode(seed=1)
    full.update("p", peer, 30.0, 1.0)
    plain.update("p", peer, 30.0)
    half.update("p", peer, 30.0, 0.5)
    assert full.coord == plain.coord  # trust 1 is Serf's update, bit for bit
    moved_full, moved_half = math.hypot(*full.coord.vec), math.hypot(*half.coord.vec)
    assert moved_half == pytest.approx(moved_full / 2, rel=0.05)
    for bad in (-0.1, 1.5, math.nan):
        with pytest.raises(CoordinateError, match="trust must be in"):
            VivaldiNode().update("p", peer, 30.0, bad)


def test_without_the_defence_every_sample_moves_both_ends_as_plain_vivaldi() -> None:
    guard = GuardedVivaldi(["L"], OFF, seed_of=lambda node: 7)
    a, b = VivaldiNode(OFF, seed=7), VivaldiNode(OFF, seed=7)
    for rtt in (20.0, 25.0, 5000.0, 22.0):
        before = Coordinate(list(a.coord.vec), a.coord.error, a.coord.adjustment, a.coord.height)
        a.update("y", b.coord, rtt)
        b.update("x", before, rtt)
        assert guard.add("x", "y", rtt) == 1.0
    assert guard.coordinates() == {"x": a.coord, "y": b.coord}


def warmed(guard: GuardedVivaldi, nodes: dict[str, float]) -> None:
    """Every node measured by landmark L at the given RTT until its anchor counts."""
    for _ in range(guard.config.defence.anchor_warmup_samples):
        for node, rtt in nodes.items():
            guard.add("L", node, rtt)


def test_peer_samples_wait_for_the_landmarks_and_must_fit_their_envelope() -> None:
    guard = GuardedVivaldi(["L"])
    assert guard.add("x", "y", 10.0) == 0.0 and guard.refused == 1  # no landmark has measured them: no say
    assert guard.coordinates()["x"] == Coordinate.origin()
    warmed(guard, {"x": 10.0, "y": 12.0})
    assert guard.add("x", "y", 60.0) == 0.0  # beyond 2 x (10 + 12) + 5 ms: contradicts the landmark
    assert guard.add("x", "y", 0.5) == 0.0   # one 2 ms from L, the other 10: not 0.5 ms apart (at the slack)
    before = guard.coordinates()["x"].vec
    assert guard.add("x", "y", 20.0) > 0.0 and guard.coordinates()["x"].vec != before


def test_a_landmark_moves_only_on_its_own_mesh_until_a_node_has_a_reputation() -> None:
    guard = GuardedVivaldi(["L", "M"])
    guard.add("L", "M", 30.0)
    mark = guard.coordinates()["L"]
    fixed = Coordinate(list(mark.vec), mark.error, mark.adjustment, mark.height)
    for _ in range(20):
        assert guard.add("L", "liar", 900.0) == 1.0  # the node moves; the landmark does not
    assert guard.coordinates()["L"] == fixed
    with pytest.raises(CoordinateError, match="two different endpoints"):
        guard.add("L", "L", 1.0)
    with pytest.raises(CoordinateError, match="rtt_ms must be finite"):
        guard.add("L", "x", math.inf)
    with pytest.raises(ValueError, match="at least one landmark"):
        GuardedVivaldi([])


def test_a_node_that_lies_to_everyone_loses_its_vote() -> None:
    """Fifteen nodes in a plane measured by five landmarks (which measure one another), one node reporting 4x
    every RTT it shares with a peer: once the anchors are warm the liar's samples move nothing, while honest
    samples keep (nearly) full weight."""
    rng = random.Random(4)
    where = {f"L{i}": p for i, p in enumerate([(0.0, 0.0), (100.0, 0.0), (50.0, 90.0), (0.0, 90.0), (100.0, 90.0)])}
    marks = list(where)
    where |= {f"h{i:02d}": (rng.uniform(10, 90), rng.uniform(10, 80)) for i in range(15)}
    nodes = [n for n in where if n not in marks]
    guard = GuardedVivaldi(marks, VivaldiConfig(defence=DefenceConfig(refresh_every=16)))
    trusts: dict[str, list[float]] = {"liar": [], "honest": []}
    for _ in range(40):
        for a in marks:
            b = rng.choice([m for m in marks if m != a])
            guard.add(a, b, math.dist(where[a], where[b]) + 1.0)
        for node in nodes:
            mark = rng.choice(marks)
            guard.add(mark, node, math.dist(where[mark], where[node]) + 1.0)
        for _ in range(15):
            a, b = rng.sample(nodes, 2)
            rtt = math.dist(where[a], where[b]) + 1.0
            liar = "h00" in (a, b)
            trusts["liar" if liar else "honest"].append(guard.add(a, b, 4.0 * rtt if liar else rtt))
    assert sum(trusts["liar"][:20]) == 0.0  # before the anchors are warm nothing counts
    assert sum(trusts["liar"][-30:]) == 0.0
    assert sum(trusts["honest"][-200:]) / 200 > 0.95
    assert name(7) == "n0007"
