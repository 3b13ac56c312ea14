"""The odds of every check, as pure functions of the relay's config (GET /v1/checks, the README's protocol).

For each check: what it catches, the chance that a node skipping a fraction f of its work passes one answer,
what the check costs the relay as a share of the node's work, and the honest false-reject rate (answers whose
rows were right that counted nothing: the relay's own roll calls say how often, web/proof/roll_caller.py).

- sgemm rows (web/proof/challenges.py): the node commits to every row of the products it finished before it learns
  which rows are opened, so a product (or any row) it did not compute is caught when an opened row falls in
  it. The relay opens `challenge_rows_per_instance` rows per instance, uniformly among the committed rows: an
  instance that skipped a fraction f of its rows passes with (1 - f)^rows, an answer of k such instances
  with (1 - f)^(rows k). A wrong row (not a skipped one) is caught by `challenge_entries_per_row` entries drawn
  after the opening: a row wrong in a fraction g of its entries passes with at most (1 - g)^entries.
- gpu rows: the same rule on the GPU challenge's rows (web/proof/gpu_challenges.py).
- llm tokens: the answer is the token ids, and the relay checks one of every answer, drawn after they arrived
  (web/proof/llm_checks.py): a node that guessed a fraction f of its tokens instead of computing them passes one
  answer with 1 - f (1 - f + f / 31,744: a token at a seeded rank is guessed right that rarely), so an answer
  counts in expectation the tokens computed, and 1 + f / (31,744 (1 - f)) of them at most.
- links: not sampled. A one-sided, forged or unmeasured sample moves nothing (both ends sign; the landmarks'
  triangle refuses what physics forbids and leaves the rest unconfirmed), so the odds are 0 or 1 by rule.

A sampled check is only as strong as the cost of a new identity, and a new identity is cheap: a failed answer
flags its identity for `trust_flag_hold_s`, and a replacement key counts from the first roll call it answers
(its profile posted and a live session open: the next roll call, every ~200 s on average). What keeps that harmless is
that no answer goes unchecked and each is judged on its own: an SGEMM answer skipping a fraction f passes with
(1 - f)^(2k) and then counts its work, so it counts in expectation at most the work done, and the reference
model's check is on every answer. `trust_min_passes` solo challenges make a node `verified` (its page), which
adds nothing to the counted scoreboard by itself.
"""

from __future__ import annotations

from typing import Any

from web.config import RelayConfig
from web.proof.llm_checks import (
    CHECKED_TOKENS_PER_ANSWER,
    GUESS_RIGHT_CHANCE,
    GUESSED_SHARES,
    RANK_FLOOR,
    counted_per_decoded,
    pass_chance,
    relay_cost_share,
)

SKIPPED_FRACTIONS = (0.01, 0.1, 0.5)


def rows_pass_chance(skipped: float, rows: int) -> float:
    """The chance that `rows` rows drawn uniformly (with replacement) among committed rows all miss the
    fraction `skipped` that was not computed."""
    return (1.0 - skipped) ** rows


def sgemm_relay_share(config: RelayConfig, n: int, products: int) -> float:
    """The relay's arithmetic per instance (opened rows x entries x 2n, in float64) over the node's
    (products x 2 n^3): the check's cost as a share of the work it checks (its inputs' draws are of the same
    order: one row of A_t and `entries` columns of B)."""
    entries = min(config.challenge_entries_per_row, n)
    return config.challenge_rows_per_instance * entries * 2 * n / (products * 2 * n**3)


def odds(config: RelayConfig, after_deadline_rate: dict[str, Any] | None = None) -> dict[str, Any]:
    """The published odds (GET /v1/checks): computed from this relay's config, never written by hand."""
    rows = config.challenge_rows_per_instance
    per_instance = {str(f): rows_pass_chance(f, rows) for f in SKIPPED_FRACTIONS}
    row_check = {
        "catches": "a product or row that was not computed (rows opened after the commitment), a row that is "
                   "not the product (entries recomputed at columns drawn after the opening)",
        "rows_opened_per_instance": rows, "entries_recomputed_per_row": config.challenge_entries_per_row,
        "pass_chance_one_instance": per_instance,
        "pass_chance_rule": "(1 - f)^(rows x instances) for an answer of several instances each skipping f",
        "relay_cost_share_n1024": {"products_per_instance_16": sgemm_relay_share(config, 1024, 16),
                                   "products_per_instance_1": sgemm_relay_share(config, 1024, 1)},
    }
    return {
        "skipped_fractions": list(SKIPPED_FRACTIONS),
        "checks": {
            "sgemm": row_check,
            "gpu": {**row_check, "catches": "as sgemm, on the GPU challenge's products (the probe's WGSL)"},
            "llm": {
                "catches": "a token guessed instead of decoded by the reference model (the token at an index "
                           "drawn after the answer arrived is decoded again after the node's tokens before it)",
                "checked_tokens_per_answer": CHECKED_TOKENS_PER_ANSWER,
                "checked_answers_share": 1.0,
                "pass_chance_one_answer": {str(f): pass_chance(round(f * 1000), 1000) for f in SKIPPED_FRACTIONS},
                "pass_chance_rule": "1 - f + f p for an answer that guessed a fraction f of its tokens, a "
                                    "guess right at chance p; it counts its tokens when it passes, nothing "
                                    "when caught: in expectation the tokens it computed, and p of each guess",
                "guess_right_chance": GUESS_RIGHT_CHANCE,
                "guess_right_rule": f"each token is the one at a rank drawn from the seed, uniform over "
                                    f"[{RANK_FLOOR}, 32000), in its step's logits (seeded rank sampling, "
                                    "capsule/kernels/llm.h): without that step's exact logits a guess is right "
                                    "1 in 32000 - 256",
                "counted_per_decoded_of_a_guesser": {str(f): counted_per_decoded(f) for f in GUESSED_SHARES},
                "counted_per_decoded_rule": "1 + p f / (1 - f): the expected counted over decoded tokens of a "
                                            "guesser that guesses a fraction f; a guesser that repeats the last "
                                            "token (the greedy model's weakness) is right 1 in 32,000 here",
                "relay_cost_share_224_tokens": relay_cost_share(224),
                "relay_cost_rule": "the prefill of the checked token's sequence up to it (no classifier) and "
                                   "one forward pass, in multiply-adds over the answer's",
            },
            "links": {
                "catches": "one-sided or forged samples (both ends sign), RTTs beyond what the landmarks' "
                           f"triangle allows (factor {config.link_tiv_factor:g} + "
                           f"{config.link_slack_ms:g} ms); an unmeasured sample stays unconfirmed",
                "pass_chance_one_answer": {str(f): None for f in SKIPPED_FRACTIONS},
                "why_null": "not sampled: every sample is judged by rule, so it moves a coordinate or it does not",
            },
        },
        "flag": {"hold_s": config.trust_flag_hold_s, "passes_to_verify": config.trust_min_passes},
        "new_identity": {
            "counts_from": "the first roll call it answers (a profile posted and a live session open)",
            "replacement_cost": "a caught key's replacement pays a measurement and a session, and carries "
                                "nothing over: every answer is checked on its own, so it counts in expectation "
                                "the work it does, like any identity",
            "verified_after": f"{config.trust_min_passes} passed challenges, one of them in the last "
                              f"{config.trust_fresh_s / 60:g} min (shown on its page; adds nothing to the "
                              "counted scoreboard by itself)"},
        "honest_false_reject": after_deadline_rate or {
            "rate": None, "why_null": "no roll-call answer with right rows yet on this relay"},
        "method": "odds from this relay's config (web/proof/checks.py); the false-reject rate is what this relay's "
                  "kept roll calls saw: answers whose rows were right but arrived after the deadline, over "
                  "all answers whose rows were right",
    }
