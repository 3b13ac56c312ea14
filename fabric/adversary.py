"""Seeded worlds with lying nodes, for tests/test_vivaldi_liars.py and bench/vivaldi_liars.py (issue 18).

A world: ~100 nodes in four regions of a plane (RTT = the straight line times a fixed per-pair route stretch
of up to 20 %, so not metric, plus both access links, plus up to 3 % queueing noise per sample; ms), a few
landmarks (the relays: trusted, data-centre access links) and 20 % colluding liars among the other nodes.
Each round every non-landmark node samples one random peer and is measured by one random landmark, the
landmarks measure one another, and each liar seeks out `extra_samples` more honest nodes to lie to; every
sample moves both endpoints through fabric/defence.py's GuardedVivaldi (the relay's view).

Liars lie on the samples they share with honest non-landmark nodes; samples among liars are true. Only the
inflaters also delay their pongs to landmarks at random (the landmark's figure is a true measurement, of a
delayed answer); the others answer landmarks honestly, which keeps their own coordinate, and so their
reputation, looking right (a constant delay on every sample would only become their height). Physically a
liar can only inflate an RTT (delay its pongs); a liar that controls the reported figure (it co-signs what
it likes) can also deflate. The strategies (every honest non-landmark node is a victim):

  inflate   physical   the sample times a random factor in [1.5, 6], landmark samples included
  disorder  control    the sample times a random factor in [1/6, 6] (Zage and Nita-Rotaru's disorder attack)
  isolate   physical   coordinated: every liar reports each victim as if it sat 300 ms from where it is, in a
                       direction fixed per victim (mutually consistent lies, never below the real sample)
  move      control    coordinated: each victim as if it sat 150 ms away in its direction, liars near that spot
                       reporting less than the real RTT (deflation)
  frog      physical   frog-boiling (Chan-Tin et al. 2009): the isolate lie, but the fake offset grows from
                       nothing by 2 ms a round, so no sample differs much from the one before

Units: ms."""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass

from fabric.config import DEFAULT, VivaldiConfig
from fabric.defence import GuardedVivaldi

STRATEGIES = ("inflate", "disorder", "isolate", "move", "frog")
PHYSICAL = {"inflate": True, "disorder": False, "isolate": True, "move": False, "frog": True}
REGION_CENTRES_MS = ((0.0, 0.0), (60.0, 15.0), (25.0, 85.0), (130.0, 55.0))
REGION_SPREAD_MS = 6.0              # standard deviation of a node's position around its region's centre
ACCESS_MS = (0.5, 6.0)              # a node's access link (what heights model)
LANDMARK_ACCESS_MS = (0.1, 0.5)     # relays sit in data centres
ROUTE_STRETCH = 0.2                 # a pair's route is up to 20 % longer than the straight line (fixed per pair)
NOISE_FRACTION = 0.03               # each sample is the truth plus up to 3 % queueing delay


@dataclass(frozen=True)
class Lies:
    """How hard the liars push (the defaults are the strategies above)."""

    extra_samples: int = 2                          # honest nodes each liar seeks out per round, beyond one
    inflate_factor: tuple[float, float] = (1.5, 6.0)
    disorder_factor: float = 6.0                    # lies within [1/f, f] x the sample
    isolate_offset_ms: float = 300.0
    move_offset_ms: float = 150.0
    frog_ms_per_round: float = 2.0


@dataclass(frozen=True)
class World:
    positions_ms: list[tuple[float, float]]
    access_ms: list[float]
    region: list[int]
    landmarks: list[int]
    liars: frozenset[int]
    directions: list[tuple[float, float]]  # each node's unit direction for the coordinated lies
    stretch: list[list[float]]  # each pair's route detour factor (>= 1; not metric: triangle violations)
    seed: int

    @property
    def size(self) -> int:
        return len(self.positions_ms)

    @property
    def honest(self) -> list[int]:
        """Honest nodes other than landmarks: the ones whose predictions are judged."""
        marks = set(self.landmarks)
        return [i for i in range(self.size) if i not in marks and i not in self.liars]

    def rtt_ms(self, i: int, j: int) -> float:
        return (math.dist(self.positions_ms[i], self.positions_ms[j]) * self.stretch[i][j]
                + self.access_ms[i] + self.access_ms[j])


def make_world(seed: int, nodes: int = 100, landmarks: int = 6, liar_fraction: float = 0.2) -> World:
    rng = random.Random(seed)
    regions = len(REGION_CENTRES_MS)
    region = [i % regions if i < landmarks else rng.randrange(regions) for i in range(nodes)]
    positions = []
    for r in region:
        cx, cy = REGION_CENTRES_MS[r]
        positions.append((rng.gauss(cx, REGION_SPREAD_MS), rng.gauss(cy, REGION_SPREAD_MS)))
    access = [rng.uniform(*(LANDMARK_ACCESS_MS if i < landmarks else ACCESS_MS)) for i in range(nodes)]
    liars = frozenset(rng.sample(range(landmarks, nodes), round(liar_fraction * nodes)))
    angles = [rng.uniform(0.0, 2.0 * math.pi) for _ in range(nodes)]
    stretch = [[1.0] * nodes for _ in range(nodes)]
    for i in range(nodes):
        for j in range(i + 1, nodes):
            stretch[i][j] = stretch[j][i] = 1.0 + rng.uniform(0.0, ROUTE_STRETCH)
    return World(positions, access, region, list(range(landmarks)), liars,
                 [(math.cos(t), math.sin(t)) for t in angles], stretch, seed)


def name(i: int) -> str:
    return f"n{i:04d}"


def lie(world: World, strategy: str, liar: int, victim: int, sample_ms: float, round_: int, rng: random.Random,
        lies: Lies = Lies()) -> float:
    """What `liar` reports for a sample with `victim` whose real measurement was sample_ms."""
    if strategy == "inflate":
        return sample_ms * rng.uniform(*lies.inflate_factor)
    if strategy == "disorder":
        return sample_ms * math.exp(rng.uniform(-math.log(lies.disorder_factor), math.log(lies.disorder_factor)))
    offset = {"isolate": lies.isolate_offset_ms, "move": lies.move_offset_ms}.get(
        strategy, lies.frog_ms_per_round * round_)
    (vx, vy), (dx, dy) = world.positions_ms[victim], world.directions[victim]
    fake = (vx + offset * dx, vy + offset * dy)
    claimed = math.dist(world.positions_ms[liar], fake) + world.access_ms[liar] + world.access_ms[victim]
    return max(claimed, sample_ms) if PHYSICAL[strategy] else claimed


def run(world: World, strategy: str | None, rounds: int, config: VivaldiConfig = DEFAULT,
        lies: Lies = Lies()) -> GuardedVivaldi:
    """Feeds `rounds` rounds of samples (lies included when strategy is not None) and returns the map. The
    schedule and the noise depend on the world's seed only, so runs with and without liars or the defence
    differ only where the liars make them."""
    if strategy is not None and strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; one of {', '.join(STRATEGIES)}")
    schedule = random.Random(world.seed * 7 + 1)
    liar_rng = random.Random(world.seed * 7 + 2)
    guard = GuardedVivaldi([name(i) for i in world.landmarks], config, seed_of=lambda node: int(node[1:]) + 1)
    marks = world.landmarks
    others = [i for i in range(world.size) if i not in set(marks)]
    honest = world.honest
    honest_set = set(honest)
    for round_ in range(rounds):
        pairs = [(m, schedule.choice([x for x in marks if x != m])) for m in marks]
        for i in others:
            j = schedule.randrange(world.size - 1)
            pairs.append((i, j if j < i else j + 1))
            pairs.append((schedule.choice(marks), i))
        schedule.shuffle(pairs)
        samples = [(i, j, schedule.uniform(0.0, NOISE_FRACTION)) for i, j in pairs]
        if strategy is not None:  # liars seek out honest nodes to lie to (their own dice: the rest stays the same)
            for liar in sorted(world.liars):
                for _ in range(lies.extra_samples):
                    extra = (liar, liar_rng.choice(honest), liar_rng.uniform(0.0, NOISE_FRACTION))
                    samples.insert(liar_rng.randrange(len(samples) + 1), extra)
        for i, j, noise in samples:
            sample = world.rtt_ms(i, j) * (1.0 + noise)
            if strategy is not None:
                for liar, other in ((i, j), (j, i)):
                    if liar in world.liars and (other in honest_set or (strategy == "inflate" and other in marks)):
                        sample = lie(world, strategy, liar, other, sample, round_, liar_rng, lies)
                        break
            guard.add(name(i), name(j), min(sample, config.rtt_max_ms))
    return guard


def honest_error(world: World, guard: GuardedVivaldi) -> float:
    """Median relative error |predicted - true| / true over every pair of honest non-landmark nodes (most were
    never sampled directly)."""
    coords = guard.coordinates()
    honest = world.honest
    errors = []
    for k, i in enumerate(honest):
        for j in honest[k + 1:]:
            truth = world.rtt_ms(i, j)
            errors.append(abs(coords[name(i)].distance(coords[name(j)]) - truth) / truth)
    return statistics.median(errors)
