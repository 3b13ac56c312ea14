#ifndef CE_LLM_CHALLENGE_H
#define CE_LLM_CHALLENGE_H

#include <stdint.h>

/* A reference-model challenge answered token by token (web/proof/challenges.py, "kind": "llm").
 *
 * The model is one fixed set of weights (CE_LLMC_WEIGHTS): a node keeps it loaded between challenges, so
 * its answer's time is decode, not weight generation (147 ms in wasmtime, ~20 forward passes). The seed
 * names the prompts: sequence r's 32 prompt tokens come from it, and the node decodes from each prompt for up
 * to CE_LLMC_PER_SEQ tokens, then starts sequence r + 1. Token j is step j % CE_LLMC_PER_SEQ of sequence
 * j / CE_LLMC_PER_SEQ: the token at the rank ce_llm_draw_rank(seed, sequence, step) draws in that step's
 * logits (llm.h, seeded rank sampling: no token is predictable without its step's exact logits).
 *
 * The node sends the tokens themselves; the relay checks one token drawn after they arrived
 * (ce_llmc_expected): the prefill of its sequence up to that step, without the classifier, and one full pass.
 * A token guessed instead of computed is caught with the chance of being drawn (a guess is right about 1 in
 * 31,744), so an answer counts, in expectation, the work it holds (docs/protocol.md). */

enum { CE_LLMC_PROMPT = 32, CE_LLMC_PER_SEQ = 224 };
#define CE_LLMC_WEIGHTS 0x63652d6c6c6d2d31ULL /* "ce-llm-1" */

/* Starts a challenge of this seed (the model is made once and kept); 0, or 1 when memory runs out. */
int ce_llmc_begin(uint64_t seed);
/* Decodes the challenge's next token and returns it; -1 when no challenge was begun. */
int ce_llmc_next(void);
/* The token at index j that the reference model gives for this seed after tokens[0 .. j) of its sequence
 * (only that sequence's earlier tokens are read); -1 on a bad argument (j < 0, a token out of range), -2 when
 * memory runs out. */
int ce_llmc_expected(uint64_t seed, const int32_t *tokens, int j);
/* Frees the model. */
void ce_llmc_release(void);

#endif
