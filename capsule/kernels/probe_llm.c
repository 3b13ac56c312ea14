/* llm probe: decode throughput of the reference model ce-ref-15m-f32 (llm.h).
 *
 * Method (llama-bench's "tg" figure): a 32-token prompt drawn from the seed is run through the model
 * (prefill, untimed; the first prefill is the warm-up), then 128 tokens are decoded, one forward pass each,
 * each token picked at a rank drawn from the seed (llm.h: seeded rank sampling, as a relay's challenge asks); tokens/sec = 128 / decode time. Each run repeats prompt + decode from position 0; the figure
 * is the median over runs. The 128 decoded ids are hashed (sha256 of uint32 little-endian ids) so anyone
 * can recompute them from the seed; every run must produce the same hash. The logits of the last step
 * are hashed too: every reduction has a fixed order (llm.c), so they are bit-exact in any build.
 */
#include "llm.h"
#include "probe.h"
#include "rng.h"
#include "sha256.h"
#include "stats.h"

#include <stdio.h>
#include <string.h>

enum { PROMPT = 32, DECODE = 128, BLOCK = 16, MIN_RUNS = 1, MAX_RUNS = 8 };

/* Prefill + decode; returns the decode time in ns (or -1), fills ids and per-block token rates. Each step picks
 * its token as a relay's challenge does (seeded rank sampling, llm.h): the probe times what an answer costs. */
static double run_once(ce_llm *m, uint64_t seed, const int *prompt, int ids[DECODE], ce_samples *blocks) {
    for (int pos = 0; pos < PROMPT; ++pos)
        if (ce_llm_forward(m, prompt[pos], pos) < 0) return -1;
    int next = ce_llm_token_at_rank(m, ce_llm_draw_rank(seed, 0, 0));
    int64_t t0 = ce_now_ns(), block_start = t0;
    for (int i = 0; i < DECODE; ++i) {
        if (ce_llm_forward(m, next, PROMPT + i) < 0) return -1;
        next = ce_llm_token_at_rank(m, ce_llm_draw_rank(seed, 0, i + 1));
        ids[i] = next;
        if ((i + 1) % BLOCK == 0) {
            int64_t now = ce_now_ns();
            ce_samples_push(blocks, BLOCK * 1e9 / (double)(now - block_start));
            block_start = now;
        }
    }
    return (double)(ce_now_ns() - t0);
}

static void hash_ids(const int ids[DECODE], char hex[65]) {
    unsigned char bytes[DECODE * 4];
    for (int i = 0; i < DECODE; ++i) {
        uint32_t v = (uint32_t)ids[i];
        bytes[4 * i] = (unsigned char)v;
        bytes[4 * i + 1] = (unsigned char)(v >> 8);
        bytes[4 * i + 2] = (unsigned char)(v >> 16);
        bytes[4 * i + 3] = (unsigned char)(v >> 24);
    }
    ce_sha256_hex(bytes, sizeof bytes, hex);
}

int ce_probe_llm(const ce_probe_config *config, ce_json *j) {
    int64_t t_gen = ce_now_ns();
    ce_llm *m = ce_llm_new(config->seed);
    if (!m) {
        ce_log("llm: cannot allocate the %ld-parameter reference model\n", ce_llm_param_count());
        return 1;
    }
    double weights_ms = (double)(ce_now_ns() - t_gen) * 1e-6;
    ce_rng rng = {config->seed ^ 0x70726f6d7074ULL};
    int prompt[PROMPT], ids[DECODE], first_ids[DECODE];
    for (int i = 0; i < PROMPT; ++i) prompt[i] = (int)(ce_rng_next(&rng) % CE_LLM_VOCAB);

    int64_t t0 = ce_now_ns();
    for (int pos = 0; pos < PROMPT; ++pos) ce_llm_forward(m, prompt[pos], pos); /* warm-up */
    double warmup_ms = (double)(ce_now_ns() - t0) * 1e-6;
    /* One run costs about (PROMPT + DECODE) forwards; the warm-up measured PROMPT of them. */
    if (ce_check_budget(config, "llm", warmup_ms * (PROMPT + DECODE) / PROMPT, MIN_RUNS)) {
        ce_llm_free(m);
        return 2;
    }
    ce_samples runs = {0}, blocks = {0};
    char hash[65] = "", run_hash[65], logits_hash[65] = "";
    int reproducible = 1;
    int64_t start = ce_now_ns();
    while (ce_want_sample((int)runs.n, MIN_RUNS, MAX_RUNS, start, config->share_ms)) {
        double ns = run_once(m, config->seed, prompt, ids, &blocks);
        if (ns < 0) break;
        hash_ids(ids, run_hash);
        if (runs.n == 0) {
            memcpy(hash, run_hash, sizeof hash);
            ce_sha256_hex(ce_llm_logits(m), CE_LLM_VOCAB * sizeof(float), logits_hash);
            memcpy(first_ids, ids, sizeof ids);
        } else if (strcmp(hash, run_hash) != 0) {
            reproducible = 0;
        }
        ce_samples_push(&runs, DECODE * 1e9 / ns);
    }
    ce_llm_free(m);
    ce_stats sr = ce_stats_of(runs.v, runs.n), sb = ce_stats_of(blocks.v, blocks.n);
    int ok = runs.n > 0 && reproducible;

    ce_json_key(j, "llm");
    ce_json_begin_object(j);
    ce_json_key(j, "ref_model"); ce_json_string(j, CE_LLM_REF_MODEL);
    ce_json_key(j, "tokens_per_sec");
    if (ok) ce_json_number(j, sr.median); else ce_json_null(j);
    ce_json_key(j, "unit"); ce_json_string(j, "tokens/s, seeded rank-sampling decode, batch 1, one instance");
    ce_json_key(j, "method");
    ce_json_string(j, "llama-bench tg128: 32-token seeded prompt (prefill untimed), then 128 decode steps "
                      "timed, each token at a rank drawn from the seed (seeded rank sampling, llm.h); "
                      "tokens/s = 128 / decode time; median over runs");
    ce_json_key(j, "params"); ce_json_int(j, ce_llm_param_count());
    ce_json_key(j, "shape");
    ce_json_string(j, "dim 288, layers 6, heads 6, hidden 768, vocab 32000, context 256, fp32, tied classifier");
    ce_json_key(j, "prompt_tokens"); ce_json_int(j, PROMPT);
    ce_json_key(j, "decode_tokens"); ce_json_int(j, DECODE);
    ce_json_key(j, "run_stats"); ce_stats_json(j, &sr);
    ce_json_key(j, "runs"); ce_json_numbers(j, runs.v, runs.n);
    ce_json_key(j, "block_stats"); ce_stats_json(j, &sb);
    ce_json_key(j, "weights_ms"); ce_json_number(j, weights_ms);
    ce_json_key(j, "warmup_ms"); ce_json_number(j, warmup_ms);
    ce_json_key(j, "token_ids_sha256"); ce_json_string(j, hash);
    ce_json_key(j, "last_logits_sha256"); ce_json_string(j, logits_hash);
    ce_json_key(j, "token_ids_head");
    ce_json_begin_array(j);
    for (int i = 0; i < 8 && runs.n > 0; ++i) ce_json_int(j, first_ids[i]);
    ce_json_end_array(j);
    ce_json_key(j, "reproducible"); ce_json_bool(j, reproducible);
    if (!ok) {
        ce_json_key(j, "reason");
        ce_json_string(j, reproducible ? "the model could not run" : "runs decoded different tokens");
    }
    ce_json_end_object(j);
    if (ok)
        ce_log("  llm     %8.1f tokens/s  %s decode, median of %zu run(s), block spread %.1f%%\n",
                sr.median, CE_LLM_REF_MODEL, sr.n, 100.0 * (sb.p75 - sb.p25) / sb.median);
    else
        ce_log("  llm     FAILED: %s\n", reproducible ? "the model could not run" : "runs decoded different tokens");
    ce_samples_free(&runs);
    ce_samples_free(&blocks);
    return 0;
}

/* The legacy reference-model challenge (greedy; a token hash no relay takes any more): the model of `seed`, the
 * probe's 32-token prompt of that seed, then `decode` greedy steps; hex = sha256 of the decoded ids (uint32 LE), as the probe's
 * token_ids_sha256. Returns 0, 1 (out of memory) or 2 (decode outside [1, CE_LLM_SEQ_LEN - 32]). */
int ce_llm_challenge(uint64_t seed, int decode, char hex[65]) {
    if (decode < 1 || decode > CE_LLM_SEQ_LEN - PROMPT) return 2;
    ce_llm *m = ce_llm_new(seed);
    if (!m) return 1;
    ce_rng rng = {seed ^ 0x70726f6d7074ULL};
    int next = 0;
    for (int pos = 0; pos < PROMPT; ++pos) next = ce_llm_forward(m, (int)(ce_rng_next(&rng) % CE_LLM_VOCAB), pos);
    unsigned char bytes[4 * (CE_LLM_SEQ_LEN - PROMPT)];
    for (int i = 0; i < decode && next >= 0; ++i) {
        next = ce_llm_forward(m, next, PROMPT + i);
        uint32_t v = (uint32_t)next;
        bytes[4 * i] = (unsigned char)v;
        bytes[4 * i + 1] = (unsigned char)(v >> 8);
        bytes[4 * i + 2] = (unsigned char)(v >> 16);
        bytes[4 * i + 3] = (unsigned char)(v >> 24);
    }
    ce_llm_free(m);
    if (next < 0) return 1;
    ce_sha256_hex(bytes, (size_t)decode * 4, hex);
    return 0;
}
