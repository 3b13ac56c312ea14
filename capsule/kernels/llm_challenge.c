/* A reference-model challenge answered token by token: see llm_challenge.h. */
#include "llm_challenge.h"

#include "llm.h"
#include "rng.h"

#include <stddef.h>

static struct {
    ce_llm *model;
    uint64_t seed;
    int begun, made, prev;
} st;

static int ensure_model(void) {
    if (!st.model) st.model = ce_llm_new(CE_LLMC_WEIGHTS);
    return st.model != NULL;
}

/* Sequence r's prompt: for r = 0 the same tokens as the probe's prompt of this seed (probe_llm.c). */
static ce_rng prompt_rng(uint64_t seed, int r) {
    ce_rng rng = {(seed ^ 0x70726f6d7074ULL) + (uint64_t)r * 0x9e3779b97f4a7c15ULL};
    return rng;
}

/* Fills the KV cache with sequence r's prompt up to (not including) its last token; returns the last token. */
static int prefill_prompt(uint64_t seed, int r) {
    ce_rng rng = prompt_rng(seed, r);
    for (int pos = 0; pos < CE_LLMC_PROMPT - 1; ++pos)
        ce_llm_prefill(st.model, (int)(ce_rng_next(&rng) % CE_LLM_VOCAB), pos);
    return (int)(ce_rng_next(&rng) % CE_LLM_VOCAB);
}

int ce_llmc_begin(uint64_t seed) {
    if (!ensure_model()) return 1;
    st.seed = seed;
    st.begun = 1;
    st.made = 0;
    st.prev = 0;
    return 0;
}

int ce_llmc_next(void) {
    if (!st.begun || !st.model) return -1;
    int r = st.made / CE_LLMC_PER_SEQ, m = st.made % CE_LLMC_PER_SEQ;
    int input = m == 0 ? prefill_prompt(st.seed, r) : st.prev;
    if (ce_llm_forward(st.model, input, CE_LLMC_PROMPT - 1 + m) < 0) return -1;
    int token = ce_llm_token_at_rank(st.model, ce_llm_draw_rank(st.seed, r, m));
    st.prev = token;
    st.made += 1;
    return token;
}

int ce_llmc_expected(uint64_t seed, const int32_t *tokens, int j) {
    if (j < 0 || (j > 0 && !tokens)) return -1;
    int r = j / CE_LLMC_PER_SEQ, m = j % CE_LLMC_PER_SEQ;
    const int32_t *seq = tokens + (ptrdiff_t)r * CE_LLMC_PER_SEQ;
    for (int i = 0; i < m; ++i)
        if (seq[i] < 0 || seq[i] >= CE_LLM_VOCAB) return -1;
    if (!ensure_model()) return -2;
    st.begun = 0; /* the model's cache now holds this check, not a challenge in progress */
    int input = prefill_prompt(seed, r);
    for (int i = 0; i < m; ++i) {
        ce_llm_prefill(st.model, input, CE_LLMC_PROMPT - 1 + i);
        input = seq[i];
    }
    if (ce_llm_forward(st.model, input, CE_LLMC_PROMPT - 1 + m) < 0) return -1;
    return ce_llm_token_at_rank(st.model, ce_llm_draw_rank(seed, r, m));
}

void ce_llmc_release(void) {
    ce_llm_free(st.model);
    st.model = NULL;
    st.begun = 0;
}
