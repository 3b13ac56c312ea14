"""How a reference-model answer is checked, and what that bounds, as pure functions.

An answer is the token ids themselves (web/proof/challenges.py; capsule/kernels/llm_challenge.h). The relay checks
one token of **every** answer, at an index drawn after the tokens arrived: the prefill of that token's sequence
up to it (keys and values only, no classifier) and one forward pass on the relay's own reactor. It compares
the reference model's token with the node's; a different one is `wrong_tokens` (flags at once). An answer of
several streams (aggregate decode throughput) is one answer: the index is drawn over all its streams' tokens.

Why one token of every answer, not a sampled share of whole answers: the earlier rule recomputed a whole token
hash on a share p of answers (a fresh key's first 16 always). A cheater that discards each caught key still
counted 1 + (1 - p) / (p x 16) = 1.19x the work it did, and that composed with the deadline's 1.25x to ~1.48x
(issue 28). Here no answer goes unchecked, so a new identity buys nothing.

The bound (expected_counted): an answer counts the tokens it names (over its time). A token can only be known by
running its step: it is the token at a rank drawn from the seed, uniform over [256, 32,000), in that step's
logits (capsule/kernels/llm.h, seeded rank sampling). Greedy decoding (rank 0) let a guesser win: this model
often repeats its last token, and guessing the repeat counted up to 1.35x the tokens decoded (issue 45). A rank
in the dense middle of 32,000 logits is known only from the step's exact logits, so a guess is right with
GUESS_RIGHT_CHANCE = 1 / 31,744 (measured by bench/llm_guessers.py for the guessers that beat greedy decoding).
If g of an answer's k tokens are guesses, the check draws one of them with chance g / k and the answer counts
nothing (and the node is flagged) unless that guess was right; otherwise it counts k. In expectation:
k - g (1 - p), the tokens computed plus p of each guess: counted / decoded = 1 + p g / (k - g), at most
1.00003 for any guessed share up to half, and never more, whatever the number of identities, since each answer
is checked on its own. A guess saves at most one step's work, so per unit of work done a cheater counts at most
what an honest node counts; with the roll call's deadline (web/proof/rollcall.py shown) at most 1.25x one machine.

The cost: at most one sequence's prefill (32 + 223 positions without the classifier) and one pass per answer,
whatever its length: measured 35-250 ms in wasmtime on the relay (BENCHMARKS.md), ~10% of a 224-token answer.
"""

from __future__ import annotations

import random

from capsule.challenge import LLM_PER_SEQ, LLM_PROMPT, LLM_VOCAB

CHECKED_TOKENS_PER_ANSWER = 1
RANK_FLOOR = 256           # capsule/kernels/llm.h CE_LLM_RANK_FLOOR: the top ranks are never drawn
GUESS_RIGHT_CHANCE = 1 / (LLM_VOCAB - RANK_FLOOR)  # a token not computed is right this often
GUESSED_SHARES = (0.01, 0.1, 0.5, 0.9)              # published: counted / decoded of a guesser at these shares
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


def pass_chance(guessed: int, tokens: int, right: float = GUESS_RIGHT_CHANCE) -> float:
    """The chance an answer with `guessed` of its `tokens` not computed passes its check: the drawn token was
    computed, or it was a guess that happened to be right (chance `right`)."""
    if not 0 <= guessed <= tokens or tokens < 1:
        raise ValueError(f"guessed must be in [0, tokens] and tokens >= 1; got {guessed} of {tokens}")
    if not 0.0 <= right <= 1.0:
        raise ValueError(f"a chance is in [0, 1]; got {right}")
    return (tokens - guessed + guessed * right) / tokens


def expected_counted(guessed: int, tokens: int, right: float = GUESS_RIGHT_CHANCE) -> float:
    """The tokens an answer counts in expectation: all of them when it passes, none when caught (= the tokens
    computed plus `right` of each guess: the bound of the module docstring)."""
    return tokens * pass_chance(guessed, tokens, right)


def counted_per_decoded(guessed_share: float, right: float = GUESS_RIGHT_CHANCE) -> float:
    """Counted / decoded tokens, in expectation, of a guesser that guesses `guessed_share` of its tokens (and
    decodes the rest) with guesses right at chance `right`: 1 + right x share / (1 - share). The best strategy
    against a check of every answer is the largest share a guesser dares; published for GUESSED_SHARES."""
    if not 0.0 <= guessed_share < 1.0:
        raise ValueError(f"a guessed share is in [0, 1); got {guessed_share}")
    return 1.0 + right * guessed_share / (1.0 - guessed_share)


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
