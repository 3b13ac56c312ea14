"""The published odds (web/proof/checks.py, GET /v1/checks) against a simulated cheater run through the relay's own
code: a node that computes some of its products and commits garbage rows for the rest (its proofs hold: it
commits to what it has) passes on_commit -> parse_opening -> check_opened at the rate the relay publishes."""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np
import pytest

from capsule.challenge import ChallengeError, encode_row
from capsule.cpu_challenge import inputs_of, leaf_hash
from tests.test_mutants_challenges import proof, tree
from web.config import RelayConfig
from web.proof.challenges import check_opened, new_challenge, on_commit, parse_opening
from web.proof.checks import odds, rows_pass_chance

BEACON: dict[str, Any] = {"round": 3, "value": "cd" * 32}
N, PRODUCTS = 8, 4


class Skipper:
    """Computes the products in `honest` and fills the others with rows it made up; commits to all of them
    (so every proof opens) and opens whatever is asked."""

    def __init__(self, seed: int, honest: set[int], rng: np.random.Generator) -> None:
        self.rows: list[np.ndarray] = []
        for t in range(PRODUCTS):
            a, b = inputs_of(seed, N, t)
            product = (a.astype(np.float64) @ b.astype(np.float64)).astype("<f4")
            self.rows.append(product if t in honest else rng.standard_normal((N, N)).astype("<f4"))
        self.products = [tree([leaf_hash(r.tobytes()) for r in rows]) for rows in self.rows]
        self.top = tree([p[-1][0] for p in self.products])

    def root(self) -> str:
        return self.top[-1][0].hex()

    def open(self, leaf: int) -> dict[str, Any]:
        t, i = divmod(leaf, N)
        return {"instance": 0, "row": leaf, "values": encode_row(self.rows[t][i]),
                "proof": proof(self.products[t], i) + proof(self.top, t)}


def passes(config: RelayConfig, skipped: int, trials: int, seed: int) -> int:
    rng, gen, passed = random.Random(seed), np.random.default_rng(seed), 0
    for trial in range(trials):
        ch = new_challenge("cheater", 1.0, 1, N, BEACON, f"{trial:032x}", 0.0, 0.0, config)
        ch.n, ch.reps = N, PRODUCTS  # (new_challenge holds n to the probe's range; the arithmetic is the same)
        node = Skipper(ch.seeds[0], set(rng.sample(range(PRODUCTS), PRODUCTS - skipped)), gen)
        asked = on_commit(ch, {"leaf": "high16", "roots": [node.root()], "products": [PRODUCTS]}, 0.5, rng, config)
        assert asked is not None
        try:
            opened = parse_opening(ch, {"rows": [node.open(leaf) for _, leaf in asked["rows"]]}, 0.6, config)
            check_opened(ch, opened, rng, config)
        except ChallengeError as exc:
            assert exc.code == "wrong_rows", exc.code  # proofs hold: only the recomputed entries catch it
            continue
        passed += 1
    return passed


@pytest.mark.parametrize(("skipped", "rows"), [(1, 2), (2, 2), (2, 1), (1, 3)])
def test_a_skipping_node_passes_at_the_published_rate(skipped: int, rows: int) -> None:
    """f = skipped / 4 of the products made up: the pass rate over 1,500 seeded answers lies within 4.5
    standard deviations of (1 - f)^rows, the figure GET /v1/checks publishes for this config."""
    config = RelayConfig(challenge_rows_per_instance=rows)
    f = skipped / PRODUCTS
    published = odds(config)["checks"]["sgemm"]["pass_chance_one_instance"]
    expected = rows_pass_chance(f, rows)
    assert published.get(str(f), expected) == expected  # the table holds the same function where it lists f
    trials = 1500
    got = passes(config, skipped, trials, seed=1000 * skipped + rows)
    sd = math.sqrt(expected * (1 - expected) / trials)
    assert abs(got / trials - expected) <= 4.5 * sd, (got / trials, expected, sd)
    assert got < trials  # the precondition: some answers were caught


def test_an_honest_node_always_passes() -> None:
    assert passes(RelayConfig(), 0, 200, seed=7) == 200


def test_the_published_odds_are_the_documented_numbers() -> None:
    """The README's protocol table: 2 rows per instance, 64 entries per row; skipping 1%, 10%, 50% of one
    instance's rows passes with 0.9801, 0.81, 0.25; an llm answer that guessed 1%, 50% of its tokens passes
    with 0.99, 0.5 (one token of every answer checked; a guess right 1 in 31,744 adds that share of the
    guesses); a flag holds 24 h."""
    table = odds(RelayConfig())
    sgemm = table["checks"]["sgemm"]
    assert sgemm["rows_opened_per_instance"] == 2 and sgemm["entries_recomputed_per_row"] == 64
    assert sgemm["pass_chance_one_instance"] == pytest.approx({"0.01": 0.9801, "0.1": 0.81, "0.5": 0.25})
    llm = table["checks"]["llm"]["pass_chance_one_answer"]
    assert llm["0.01"] == pytest.approx(0.99 + 0.01 / 31744) and llm["0.5"] == pytest.approx(0.5 + 0.5 / 31744)
    assert table["flag"] == {"hold_s": 24 * 3600.0, "passes_to_verify": 2}
    # the relay's check is a tiny share of what it checks: 2 rows x 64 entries of n = 1024 over 16 products
    assert sgemm["relay_cost_share_n1024"]["products_per_instance_16"] == pytest.approx(2 * 64 / (16 * 1024**2))
    assert table["honest_false_reject"]["rate"] is None
    live = odds(RelayConfig(), {"rate": 0.01, "after_deadline": 1, "right_answers": 100, "roll_calls": 50})
    assert live["honest_false_reject"]["rate"] == 0.01


def test_the_table_has_the_documented_fields_and_values() -> None:
    """GET /v1/checks' shape (a client reads these names) and every number in it, from the default config;
    the prose fields ("catches", "method", "why_null") are free text, only required to be there."""
    def shape(d: dict[str, Any]) -> dict[str, Any]:
        return {k: shape(v) if isinstance(v, dict) else None for k, v in d.items()}

    fractions = {"0.01": None, "0.1": None, "0.5": None}
    rows = {"catches": None, "entries_recomputed_per_row": None, "pass_chance_one_instance": fractions,
            "pass_chance_rule": None, "relay_cost_share_n1024": {"products_per_instance_1": None,
                                                                 "products_per_instance_16": None},
            "rows_opened_per_instance": None}
    table = odds(RelayConfig())
    assert shape(table) == {
        "checks": {"gpu": rows, "sgemm": rows,
                   "links": {"catches": None, "pass_chance_one_answer": fractions, "why_null": None},
                   "llm": {"catches": None, "checked_tokens_per_answer": None, "checked_answers_share": None,
                           "pass_chance_one_answer": fractions, "pass_chance_rule": None,
                           "guess_right_chance": None, "guess_right_rule": None,
                           "counted_per_decoded_of_a_guesser": {"0.01": None, "0.1": None, "0.5": None, "0.9": None},
                           "counted_per_decoded_rule": None,
                           "relay_cost_share_224_tokens": None, "relay_cost_rule": None}},
        "flag": {"hold_s": None, "passes_to_verify": None}, "honest_false_reject": {"rate": None, "why_null": None},
        "new_identity": {"counts_from": None, "replacement_cost": None, "verified_after": None},
        "method": None, "skipped_fractions": None}
    assert table["skipped_fractions"] == [0.01, 0.1, 0.5]
    checks = table["checks"]
    assert checks["gpu"]["pass_chance_one_instance"] == checks["sgemm"]["pass_chance_one_instance"]
    assert checks["sgemm"]["relay_cost_share_n1024"]["products_per_instance_1"] == pytest.approx(2 * 64 / 1024**2)
    # every answer, one token each: a guessed share f passes with 1 - f (docs/protocol.md)
    assert (checks["llm"]["checked_tokens_per_answer"], checks["llm"]["checked_answers_share"]) == (1, 1.0)
    assert checks["llm"]["pass_chance_one_answer"] == pytest.approx({"0.01": 0.99, "0.1": 0.9, "0.5": 0.5}, abs=2e-5)
    # the best guesser's counted / decoded: 1 + p f / (1 - f), p = 1 / 31,744: within 1.0003 up to 90% guessed
    assert checks["llm"]["guess_right_chance"] == 1 / 31744
    assert checks["llm"]["counted_per_decoded_of_a_guesser"]["0.5"] == pytest.approx(1 + 1 / 31744)
    assert max(checks["llm"]["counted_per_decoded_of_a_guesser"].values()) < 1.0003
    assert checks["llm"]["relay_cost_share_224_tokens"] == pytest.approx(0.21, abs=0.005)
    assert checks["links"]["pass_chance_one_answer"] == fractions  # not sampled: no chance to state
    assert "factor 2 + 5 ms" in checks["links"]["catches"]
    for text in (checks["sgemm"]["catches"], checks["gpu"]["catches"], checks["llm"]["catches"],
                 checks["links"]["why_null"], checks["sgemm"]["pass_chance_rule"], table["method"],
                 table["honest_false_reject"]["why_null"]):
        assert isinstance(text, str) and len(text) > 20
    assert rows_pass_chance(0.1, 3) == pytest.approx(0.729) and rows_pass_chance(0.0, 5) == 1.0
