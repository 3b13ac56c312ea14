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
 * and returns the greedy next token (argmax of the logits, lowest id on ties); -1 on a bad argument. */
int ce_llm_forward(ce_llm *m, int token, int pos);

/* Fills the KV cache for one token at pos without computing its output (no classifier, and the last layer
 * only as far as its keys and values): a prompt position whose next token is not wanted. 0, or -1 on a bad
 * argument. */
int ce_llm_prefill(ce_llm *m, int token, int pos);

/* The logits of the last forward pass (CE_LLM_VOCAB floats). */
const float *ce_llm_logits(const ce_llm *m);

#endif
