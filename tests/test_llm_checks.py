"""Reference-model answers against free identities (issue 28, attack 1): every answer is the token ids, and the
relay checks one token of every answer (web/proof/llm_checks.py). Cheaters run through the relay's own commit rule
(web/challenges.on_commit draws the checked token) and roll-call arithmetic (web/rollcall.shown); the model's
own check runs on the real reactor."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from common.reactor import Reactor
from web.config import RelayConfig
from web.proof.challenges import new_llm_challenge, on_commit
from web.proof.llm_checks import check_positions, draw_checked, expected_counted, pass_chance, relay_cost_share
from web.proof.rollcall import shown, stop_after_s, work_s

CONFIG = RelayConfig()
BEACON = {"round": 7, "value": "ab" * 32, "issued_at": 1000.0}
SENT = 100.0


def answer(tokens: int, guessed: set[int], rng: random.Random) -> int:
    """Tokens the relay counts for one roll-call answer of `tokens` tokens whose indices in `guessed` were not
    computed, through on_commit's draw: all of them on a pass, none when the drawn token is a guess."""
    ch = new_llm_challenge("node", 200.0, BEACON, f"{rng.getrandbits(128):032x}", 0.0, SENT, CONFIG,
                           work_s(CONFIG), stop_after_s(CONFIG))
    on_commit(ch, {"tokens": [rng.randrange(32000) for _ in range(tokens)]}, SENT + 1.0, rng, CONFIG)
    assert ch.checked_token is not None
    return 0 if ch.checked_token in guessed else tokens


def cheater(identities: int, roll_calls: int, strategy: str, seed: int) -> tuple[int, int, int]:
    """(tokens counted, tokens computed, answers caught) of `identities` identities answering every roll call
    with 200 tokens, a caught key thrown away for a fresh one (free: nothing carries over, since every answer
    is checked on its own). Strategies: "tail" computes a random prefix and guesses the rest (no work at all
    past it); "sprinkle" guesses a random share of the steps anywhere (a guess saves that step's classifier;
    the next steps are computed on the guessed token, so only the guess itself is wrong)."""
    rng = random.Random(seed)
    counted = computed = caught = 0
    for _ in range(roll_calls):
        for _ in range(identities):
            k = 200
            if strategy == "tail":
                m = rng.randrange(k)
                guessed = set(range(m, k))
            else:
                share = rng.choice((0.05, 0.25, 0.5, 0.9))
                guessed = {i for i in range(k) if rng.random() < share}
            got = answer(k, guessed, rng)
            counted += got
            computed += k - len(guessed)
            caught += got == 0
    return counted, computed, caught


@pytest.mark.parametrize("strategy", ["tail", "sprinkle"])
def test_guessed_tokens_count_in_expectation_only_what_was_computed(strategy: str) -> None:
    """40 identities, 60 roll calls each: counted tokens over computed tokens stay at 1 (sampling spread:
    ~1.5%), where the sampled hash checks let the same free-key cheater count 1.19x (and 9.9x before the full
    checks, issue 28). The precondition: the cheater was caught often, so the check really ran."""
    counted, computed, caught = cheater(40, 60, strategy, seed=1)
    ratio = counted / computed
    print(f"{strategy}: {counted} tokens counted for {computed} computed ({ratio:.4f}x), {caught} answers caught")
    assert caught >= 600, caught
    assert ratio <= 1.05
    assert ratio == pytest.approx(1.0, abs=0.05)


def test_with_the_deadline_one_machine_counts_at_most_1_25x_its_tokens_per_sec() -> None:
    """The Done-when's bound on tokens/s: a machine decoding C tokens/s can have computed at most C x the
    deadline (1.25 s at target 1 s) by the time its answers must be in, however it splits them among
    identities; each answer counts at most its tokens / the target, and in expectation only those computed.
    Here 10 identities split a 200 tokens/s machine; each commits 10x its share, guessing the rest."""
    assert (CONFIG.roll_call_target_s, CONFIG.roll_call_deadline_factor) == (1.0, 1.25)
    rng = random.Random(3)
    machine_tps, ids, deadline = 200.0, 10, 1.25
    per_id_computed = int(machine_tps * deadline / ids)  # 25 tokens each by the deadline
    total = 0.0
    trials = 400
    for _ in range(trials):
        for _ in range(ids):
            k = 250
            got = answer(k, set(range(per_id_computed, k)), rng)  # a computed prefix, the rest guessed
            total += shown(got, deadline, CONFIG)
    per_roll_call = total / trials
    print(f"10 identities of one 200 tokens/s machine: {per_roll_call:.1f} tokens/s counted per roll call")
    assert per_roll_call <= 1.25 * machine_tps * 1.05  # sampling spread over 4,000 answers
    assert per_roll_call > 0.5 * machine_tps  # the precondition: the computed part did count


def test_the_odds_and_costs_as_stated() -> None:
    """docs/protocol.md: a guessed share f passes with 1 - f + f p (p: a guess right); the check costs one
    sequence's prefill up to the token (at most 254 positions) and one pass, ~21% of a 224-token answer in
    multiply-adds."""
    assert pass_chance(0, 200) == 1.0 and pass_chance(50, 200, 0.0) == 0.75 and pass_chance(200, 200, 0.0) == 0.0
    assert pass_chance(200, 200) == pytest.approx(1 / 31744) and pass_chance(50, 200, 1.0) == 1.0
    assert expected_counted(50, 200, 0.0) == 150.0 and expected_counted(50, 200) == pytest.approx(150 + 50 / 31744)
    assert check_positions(0) == (31, 1) and check_positions(223) == (254, 1) and check_positions(224) == (31, 1)
    assert relay_cost_share(224) == pytest.approx(0.21, abs=0.005)
    for bad in ((-1, 10), (11, 10), (0, 0)):
        with pytest.raises(ValueError):
            pass_chance(*bad)
    with pytest.raises(ValueError):
        draw_checked(0, random.Random(1))


@pytest.fixture(scope="module")
def reactors(artifacts: Any) -> tuple[Reactor, Reactor]:
    wasm = Path(artifacts.reactor)
    return Reactor(wasm), Reactor(wasm)


def test_the_real_model_passes_honest_tokens_and_catches_a_guess(reactors: tuple[Reactor, Reactor]) -> None:
    """On the capsule's reactor: a node's tokens (two sequences) pass the relay's check at any index, the first
    of each sequence included; one guessed token is caught at its index; random tokens are caught nearly
    everywhere (a guess is right 1 in 32,000)."""
    node, relay = reactors
    seed = 0x0123456789ABCDEF
    node.llm_begin(seed)
    tokens = [node.llm_next() for _ in range(230)]
    assert len(set(tokens)) > 20, tokens[:20]  # the precondition: the sequence varies, so a token witnesses work
    for j in (0, 1, 117, 223, 224, 229):
        assert relay.llm_expected(seed, tokens, j) == tokens[j], j
    guessed = list(tokens)
    guessed[117] = (tokens[117] + 1) % 32000
    assert relay.llm_expected(seed, guessed, 117) != guessed[117]
    assert relay.llm_expected(seed, guessed, 116) == guessed[116]  # before the guess nothing changed
    rng = random.Random(9)
    noise = [rng.randrange(32000) for _ in range(230)]
    wrong = sum(relay.llm_expected(seed, noise, j) != noise[j] for j in rng.sample(range(230), 12))
    assert wrong == 12
    assert relay.llm_expected(seed ^ 1, tokens, 5) != tokens[5] or relay.llm_expected(seed ^ 1, tokens, 6) != tokens[6]
    with pytest.raises(ValueError):
        relay.llm_expected(seed, [32000, 1], 1)
    with pytest.raises(ValueError):
        relay.llm_expected(seed, tokens, 230)


def test_the_relays_draws_come_from_the_os(tmp_path: Path) -> None:
    """The rows a relay opens and the token it checks are drawn after the answer, from the OS's entropy: every
    open message reveals draws, and a seeded Mersenne Twister's state can be rebuilt from enough of them."""
    from web.relay import Relay

    relay = Relay(RelayConfig(data_dir=tmp_path / "relay"))
    try:
        assert isinstance(relay.challenges.rng, random.SystemRandom)
    finally:
        relay.store.close()
