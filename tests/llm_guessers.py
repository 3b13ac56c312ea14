"""Guessers of reference-model tokens against the relay's own check (issue 45; tests/test_llm_guessers.py and
bench/llm_guessers.py). Each answer is a one-stream roll-call answer: the node decodes a prefix with the capsule's
reactor and guesses the rest; the relay's commit rule draws the checked index (web/proof/challenges.on_commit),
its reactor recomputes that token (ce_llmc_expected) and its verdict decides (token_mismatch). Counted: the
answer's tokens on a pass, none when caught; decoded: the tokens the guesser computed.

Guessers:
- repeat R: decodes until its last R tokens are equal, then guesses that token for the rest (the greedy model
  repeated its last token in 122 of 223 steps: counted / decoded reached 1.35 at R = 3);
- random f: decodes the first 1 - f of the answer and guesses the rest uniformly;
- previous f: decodes the first 1 - f and repeats its last decoded token for the rest.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from common.reactor import Reactor
from web.config import RelayConfig
from web.proof.challenges import checked_stream, new_llm_challenge, on_commit, token_mismatch
from web.proof.llm_checks import GUESS_RIGHT_CHANCE

CONFIG = RelayConfig()
BEACON: dict[str, Any] = {"round": 45, "value": "5e" * 32}
SENT = 100.0
VOCAB = 32000

Guess = Callable[[list[int], random.Random], tuple[list[int], int]]  # honest tokens -> (answer, tokens decoded)


def repeat(r: int) -> Guess:
    def guess(honest: list[int], rng: random.Random) -> tuple[list[int], int]:
        for i in range(r - 1, len(honest)):
            if len(set(honest[i - r + 1:i + 1])) == 1:
                return honest[:i + 1] + [honest[i]] * (len(honest) - i - 1), i + 1
        return list(honest), len(honest)
    return guess


def random_tail(share: float) -> Guess:
    def guess(honest: list[int], rng: random.Random) -> tuple[list[int], int]:
        m = max(1, round(len(honest) * (1 - share)))
        return honest[:m] + [rng.randrange(VOCAB) for _ in honest[m:]], m
    return guess


def previous_tail(share: float) -> Guess:
    def guess(honest: list[int], rng: random.Random) -> tuple[list[int], int]:
        m = max(1, round(len(honest) * (1 - share)))
        return honest[:m] + [honest[m - 1]] * (len(honest) - m), m
    return guess


@dataclass
class Tally:
    answers: int = 0
    counted: int = 0
    decoded: int = 0
    guessed: int = 0
    caught: int = 0
    expected: float = 0.0   # the published odds' expectation of counted: tokens decoded + p x each guess
    variance: float = 0.0   # of counted, over the answers (Bernoulli per answer)
    shares: list[float] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        return self.counted / self.decoded if self.decoded else float("inf")

    @property
    def published_ratio(self) -> float:
        return self.expected / self.decoded if self.decoded else float("inf")

    @property
    def sigma_ratio(self) -> float:
        return self.variance ** 0.5 / self.decoded if self.decoded else float("inf")


def honest_answers(node: Reactor, count: int, length: int, salt: int) -> list[tuple[str, list[int]]]:
    """`count` answers' nonces and the tokens the reference model gives for each (one stream of `length`)."""
    out = []
    for a in range(count):
        nonce = f"{salt:08x}{a:024x}"
        ch = new_llm_challenge("guesser", float(length), BEACON, nonce, 0.0, SENT, CONFIG, target_s=1.0)
        node.llm_begin(ch.seeds[0])
        out.append((nonce, [node.llm_next() for _ in range(length)]))
    return out


def judge(relay: Reactor, nonce: str, answer: list[int], rng: random.Random) -> bool:
    """The relay's verdict on one answer, through its own commit rule, reactor and verdict."""
    ch = new_llm_challenge("guesser", float(len(answer)), BEACON, nonce, 0.0, SENT, CONFIG, target_s=1.0)
    on_commit(ch, {"tokens": answer}, SENT + 1.0, rng, CONFIG)
    seed, stream, at = checked_stream(ch)
    return token_mismatch(ch, relay.llm_expected(seed, stream, at)) is None


def run(relay: Reactor, answers: list[tuple[str, list[int]]], guess: Guess, seed: int) -> Tally:
    rng, draws = random.Random(seed), random.Random(seed + 1)
    t = Tally()
    for nonce, honest in answers:
        answer, decoded = guess(honest, rng)
        k, g = len(answer), len(answer) - decoded
        passed = judge(relay, nonce, answer, draws)
        t.answers += 1
        t.counted += k if passed else 0
        t.decoded += decoded
        t.guessed += g
        t.caught += not passed
        q = (k - g + g * GUESS_RIGHT_CHANCE) / k  # the published chance this answer passes
        t.expected += k * q
        t.variance += k * k * q * (1 - q)
        t.shares.append(g / k)
    return t
