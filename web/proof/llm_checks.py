"""How a reference-model answer is checked, and what that bounds, as pure functions.

An answer is the token ids themselves (web/proof/challenges.py; capsule/kernels/llm_challenge.h). The relay checks
one token of **every** answer, at an index drawn after the tokens arrived: the prefill of that token's sequence
up to it (keys and values only, no classifier) and one forward pass on the relay's own reactor. It compares
the reference model's greedy token with the node's; a different one is `wrong_tokens` (flags at once).

Why one token of every answer, not a sampled share of whole answers: the earlier rule recomputed a whole token
hash on a share p of answers (a fresh key's first 16 always). A cheater that discards each caught key still
counted 1 + (1 - p) / (p x 16) = 1.19x the work it did, and that composed with the deadline's 1.25x to ~1.48x
(issue 28). Here no answer goes unchecked, so a new identity buys nothing.

The bound (expected_counted): an answer counts the tokens it names (over its time). A token can only be known by
running its step (the classifier's argmax over a model of random weights); a token not computed is a guess,
wrong but for 1 in 32,000. If g of an answer's k tokens are guesses, the check draws one of them with chance g / k
and the answer counts nothing (and the node is flagged); otherwise it counts k. In expectation: k x (1 - g / k) =
k - g, exactly the tokens computed, and never more, whatever the number of identities, since each answer is
checked on its own. A guess saves at most one step's work, so per unit of work done a cheater counts at most
what an honest node counts; with the roll call's deadline (web/proof/rollcall.py shown) at most 1.25x one machine.

The cost: at most one sequence's prefill (32 + 223 positions without the classifier) and one pass per answer,
whatever its length: measured 35-250 ms in wasmtime on the relay (BENCHMARKS.md), ~10% of a 224-token answer.
"""

from __future__ import annotations

import random

from capsule.challenge import LLM_PER_SEQ, LLM_PROMPT

CHECKED_TOKENS_PER_ANSWER = 1
# Multiply-adds of the reference model (capsule/kernels/llm.h shapes: dim 288, hidden 768, 6 layers, vocab
# 32,000): a full pass runs 6 layers (4 dim^2 + 3 dim hidden each) and the classifier (vocab x dim); a prefill
# position 5 layers and the last one's keys and values (2 dim^2). Attention over the cache is left out (<8%).
_LAYER_MACS = 4 * 288 * 288 + 3 * 288 * 768
FULL_PASS_MACS = 6 * _LAYER_MACS + 32000 * 288
PREFILL_MACS = 5 * _LAYER_MACS + 2 * 288 * 288


def draw_checked(tokens: int, rng: random.Random) -> int:
    """The index of the token the relay checks, uniform over the answer's tokens (drawn after they arrived)."""
    if tokens < 1:
        raise ValueError(f"an answer has at least one token; got {tokens}")
    return rng.randrange(tokens)


def pass_chance(guessed: int, tokens: int) -> float:
    """The chance an answer with `guessed` of its `tokens` not computed passes its check (a guess is taken to
    be wrong: it is right 1 in 32,000)."""
    if not 0 <= guessed <= tokens or tokens < 1:
        raise ValueError(f"guessed must be in [0, tokens] and tokens >= 1; got {guessed} of {tokens}")
    return (tokens - guessed) / tokens


def expected_counted(guessed: int, tokens: int) -> float:
    """The tokens an answer counts in expectation: all of them when it passes, none when caught (= tokens
    computed: the bound of the module docstring)."""
    return tokens * pass_chance(guessed, tokens)


def check_positions(index: int) -> tuple[int, int]:
    """What checking the token at `index` costs the relay: (prefill positions, full forward passes)."""
    if index < 0:
        raise ValueError(f"a token index is >= 0; got {index}")
    return LLM_PROMPT - 1 + index % LLM_PER_SEQ, 1


def relay_cost_share(tokens: int) -> float:
    """The relay's check over the node's answer, in multiply-adds, averaged over the drawn index: an answer of
    `tokens` tokens costs the node those passes and each sequence's 31 prefill positions. A machine whose cache
    holds the layers (not the classifier) does a prefill position cheaper than this model says (measured here:
    ~1 ms against ~6.6 ms a pass, BENCHMARKS.md), so the share is an upper estimate."""
    if tokens < 1:
        raise ValueError(f"an answer has at least one token; got {tokens}")
    prefill = sum(check_positions(j)[0] for j in range(tokens)) / tokens
    sequences = -(-tokens // LLM_PER_SEQ)
    node = tokens * FULL_PASS_MACS + sequences * (LLM_PROMPT - 1) * PREFILL_MACS
    return (prefill * PREFILL_MACS + FULL_PASS_MACS) / node
