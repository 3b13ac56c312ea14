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
  answer with 1 - f, so an answer counts in expectation the tokens computed, and no more.
- links: not sampled. A one-sided, forged or unmeasured sample moves nothing (both ends sign; the landmarks'
  triangle refuses what physics forbids and leaves the rest unconfirmed), so the odds are 0 or 1 by rule.

A sampled check is only as strong as the cost of a new identity: a failed answer flags the identity for
`trust_flag_hold_s` and a new identity counts nothing before `trust_min_passes` solo challenges and a roll
call, each checked with the odds above (the reference model's check is on every answer: no new identity
escapes it).
"""

from __future__ import annotations

from typing import Any

from web.config import RelayConfig
from web.proof.llm_checks import CHECKED_TOKENS_PER_ANSWER, pass_chance, relay_cost_share

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
                "pass_chance_rule": "1 - f for an answer that guessed a fraction f of its tokens; it counts "
                                    "its tokens when it passes, nothing when caught: in expectation the tokens "
                                    "it computed",
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
        "honest_false_reject": after_deadline_rate or {
            "rate": None, "why_null": "no roll-call answer with right rows yet on this relay"},
        "method": "odds from this relay's config (web/proof/checks.py); the false-reject rate is what this relay's "
                  "kept roll calls saw: answers whose rows were right but arrived after the deadline, over "
                  "all answers whose rows were right",
    }
