"""Guessing reference-model tokens against the relay's own check (issue 45). Greedy decoding let a guesser
count more than it decoded (the model repeated its last token: 1.35x at R = 3); with seeded rank sampling
(capsule/kernels/llm.h) a token is right without its step's exact logits 1 in 31,744, and the published odds
(GET /v1/checks, web/proof/llm_checks.py) say what each guesser counts. Real reactors on both sides; the relay's
commit rule, check and verdict (tests/llm_guessers.py). bench/llm_guessers.py runs >= 1,000 answers each."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from common.reactor import Reactor
from tests.llm_guessers import Tally, honest_answers, previous_tail, random_tail, repeat, run
from web.proof.checks import odds
from web.proof.llm_checks import counted_per_decoded

ANSWERS, LENGTH = 100, 16


@pytest.fixture(scope="module")
def answers(artifacts: Any) -> tuple[Reactor, list[tuple[str, list[int]]]]:
    wasm = Path(artifacts.reactor)
    node, relay = Reactor(wasm), Reactor(wasm)
    return relay, honest_answers(node, ANSWERS, LENGTH, salt=45)


def within_odds(t: Tally) -> None:
    """Counted / decoded at most what the published odds give, and equal to it within the sampling spread."""
    assert t.published_ratio <= 1.0003  # what /v1/checks promises for any share guessed up to 90%
    assert abs(t.ratio - t.published_ratio) <= 4 * t.sigma_ratio + 1e-9, (t.ratio, t.published_ratio)


@pytest.mark.parametrize("r", [3, 6, 10])
def test_the_repeated_token_guesser_never_gets_a_repeat_to_guess(answers: Any, r: int) -> None:
    """The guesser that beat greedy decoding waits for R equal tokens in a row: with rank sampling no answer
    gives it one, so it decodes everything and counts exactly that (and every honest answer passes: no false
    reject over 100 answers)."""
    relay, honest = answers
    t = run(relay, honest, repeat(r), seed=r)
    assert not any(h[i] == h[i - 1] == h[i - 2] for _, h in honest for i in range(2, len(h)))  # none settles
    assert (t.guessed, t.caught, t.ratio) == (0, 0, 1.0)
    within_odds(t)


@pytest.mark.parametrize("guesser", ["random", "previous"])
def test_guessing_half_of_every_answer_counts_what_was_decoded(answers: Any, guesser: str) -> None:
    """Half of every answer guessed (uniformly, or the last decoded token repeated): caught about half the
    time, so counted / decoded is ~1.0, the published 1 + p (p = 1 / 31,744), within the sampling spread."""
    relay, honest = answers
    t = run(relay, honest, (random_tail if guesser == "random" else previous_tail)(0.5), seed=7)
    assert t.guessed * 2 == t.answers * LENGTH and t.caught >= 30  # the precondition: the check ran and caught
    within_odds(t)
    published = odds_table()["counted_per_decoded_of_a_guesser"]["0.5"]
    assert t.published_ratio == pytest.approx(published, abs=1e-9) == counted_per_decoded(0.5)


def odds_table() -> dict[str, Any]:
    from web.config import RelayConfig

    return dict(odds(RelayConfig())["checks"]["llm"])


def test_an_answer_of_two_streams_is_checked_in_the_stream_its_token_lies_in(answers: Any, artifacts: Any) -> None:
    """Aggregate decode (issue 45): a two-stream answer, each stream decoded on the real reactor from its own seed,
    passes the relay's check at every drawn index; the same answer with its streams swapped, or one token of the
    second stream guessed, fails where the drawn token lies (each stream is checked against its own seed)."""
    import random

    from tests.llm_guessers import BEACON, CONFIG, SENT
    from web.proof.challenges import checked_stream, new_llm_challenge, on_commit, token_mismatch

    relay, _ = answers
    node = Reactor(Path(artifacts.reactor))
    ch = new_llm_challenge("node", 24.0, BEACON, "ab" * 16, 0.0, SENT, CONFIG, target_s=1.0, streams=2)
    streams = []
    for seed in ch.seeds:
        node.llm_begin(seed)
        streams.append([node.llm_next() for _ in range(6)])

    def verdicts(tokens: list[list[int]]) -> dict[int, bool]:
        out = {}
        for draw in range(40):
            c = new_llm_challenge("node", 24.0, BEACON, "ab" * 16, 0.0, SENT, CONFIG, target_s=1.0, streams=2)
            on_commit(c, {"tokens": tokens}, SENT + 1.0, random.Random(draw), CONFIG)
            seed, stream, at = checked_stream(c)
            out[c.checked_token or 0] = token_mismatch(c, relay.llm_expected(seed, stream, at)) is None
        return out

    honest = verdicts(streams)
    assert set(honest) == set(range(12)) and all(honest.values())  # every index drawn, every one passes
    swapped = verdicts([streams[1], streams[0]])
    assert not any(swapped.values())
    guessed = [streams[0], streams[1][:3] + [(streams[1][3] + 1) % 32000] + streams[1][4:]]
    caught = verdicts(guessed)
    # the guess is caught at its index; the first stream and the second's tokens before the guess still pass
    assert caught[6 + 3] is False and all(caught[j] for j in range(9))
