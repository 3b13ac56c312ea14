#ifndef CE_LLM_H
#define CE_LLM_H

#include <stdint.h>

/* ce-ref-15m-f32: a llama-architecture decoder with the shapes of llama2.c's stories15M (ARCHITECTURE.md,
 * "The reference model"). Weights are generated from a seed: decode speed depends on shapes and dtype,
 * not on weight values, so nothing is downloaded. */
#define CE_LLM_REF_MODEL "ce-ref-15m-f32"
enum {
    CE_LLM_DIM = 288,
    CE_LLM_HIDDEN = 768,
    CE_LLM_LAYERS = 6,
    CE_LLM_HEADS = 6,
    CE_LLM_HEAD_SIZE = CE_LLM_DIM / CE_LLM_HEADS,
    CE_LLM_VOCAB = 32000,
    CE_LLM_SEQ_LEN = 256,
};

typedef struct ce_llm ce_llm;

/* Allocates the model and generates its weights from seed; NULL when memory runs out. */
ce_llm *ce_llm_new(uint64_t seed);
void ce_llm_free(ce_llm *m);
/* Number of fp32 parameters (for the report). */
long ce_llm_param_count(void);
/* Runs one token at position pos (0 <= pos < CE_LLM_SEQ_LEN) through the model, filling the KV cache,
 * and returns the greedy next token (argmax of the logits, lowest id on ties: the legacy challenge's; the probe
 * and the relay's challenge pick the next token with ce_llm_token_at_rank); -1 on a bad argument. */
int ce_llm_forward(ce_llm *m, int token, int pos);

/* Fills the KV cache for one token at pos without computing its output (no classifier, and the last layer
 * only as far as its keys and values): a prompt position whose next token is not wanted. 0, or -1 on a bad
 * argument. */
int ce_llm_prefill(ce_llm *m, int token, int pos);

/* The logits of the last forward pass (CE_LLM_VOCAB floats). */
const float *ce_llm_logits(const ce_llm *m);

/* Seeded rank sampling (docs/protocol.md, "A checked token nobody can guess"): the next token is the one at a
 * rank drawn from the seed in the last pass's logits, ordered by logit (highest first; equal logits by lower
 * id), the rank uniform over [CE_LLM_RANK_FLOOR, CE_LLM_VOCAB). Greedy decoding (rank 0) let a cheater guess:
 * this model often repeats its last token. A rank in the dense middle of 32,000 logits is known only from the
 * exact logits of that step (adjacent logits differ by ~1e-4 there), so a token not computed is right about 1
 * in 31,744; the top ranks, where a cheaper approximate model could find the order, are never drawn. */
enum { CE_LLM_RANK_FLOOR = 256 };
/* The rank drawn for step `step` of sequence `seq` of this seed. */
int ce_llm_draw_rank(uint64_t seed, int seq, int step);
/* The token at `rank` in the last pass's logits; -1 on a bad argument. Linear time (the logits counted into
 * 4,096 slices of their range, then a quickselect among the ~10 of the rank's slice): ~0.1 ms in wasmtime
 * here, ~3% of a forward pass. */
int ce_llm_token_at_rank(ce_llm *m, int rank);

#endif
