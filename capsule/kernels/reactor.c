/* The reactor variant of the capsule: no main and no WASI, for hosts that drive it directly (Web Workers
 * in browsers, wasmtime-py). `ce_run` takes the command's own arguments and produces the same
 * ProbeReport through the same driver, so browsers and servers run one probe implementation. The
 * kernels are exported too (tests, the relay's spot checks). Pointers are offsets into the exported
 * memory; allocate with ce_alloc and release with ce_free.
 *
 * Imports (module "env"): ce_clock_us() -> f64, unix time in microseconds (clock.h);
 * ce_log(ptr, len), one line of the human summary. */
#include "challenge.h"
#include "driver.h"
#include "llm.h"
#include "llm_challenge.h"
#include "probe.h"
#include "log.h"
#include "sgemm.h"
#include "stream.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT(name) __attribute__((export_name(name)))

__attribute__((import_module("env"), import_name("ce_log"))) void ce_host_log(const char *text, size_t len);

void ce_log(const char *fmt, ...) {
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n > 0) ce_host_log(line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

double ce_clock_anchor_unix_ms(void) { return 0.0; } /* the host clock already reads unix time */

EXPORT("ce_alloc") void *x_alloc(size_t bytes) { return aligned_alloc(16, (bytes + 15) & ~(size_t)15); }
EXPORT("ce_free") void x_free(void *p) { free(p); }

static char *g_result; /* the last ce_run's ProbeReport, or its error message */
static size_t g_result_len;

/* argline: the command's arguments separated by spaces (e.g. "--probes sgemm --seed 00ff"). Returns the
 * command's exit status: 0 (ce_result is the ProbeReport JSON), 2 (ce_result is the usage error), 1. */
EXPORT("ce_run") int x_run(const char *argline) {
    enum { MAX_ARGS = 64 };
    char *copy = strdup(argline ? argline : "");
    char *argv[MAX_ARGS + 1] = {"capsule-reactor"};
    int argc = 1;
    char error[768] = "";
    free(g_result);
    g_result = NULL;
    g_result_len = 0;
    if (!copy) return 1;
    for (char *save = NULL, *tok = strtok_r(copy, " ", &save); tok && argc <= MAX_ARGS; tok = strtok_r(NULL, " ", &save))
        argv[argc++] = tok;
    ce_options o;
    ce_options_default(&o);
    int rc = ce_parse_args(argc, argv, &o, error, sizeof error);
    if (rc == 0 && argc > MAX_ARGS) rc = 2, snprintf(error, sizeof error, "more than %d arguments", MAX_ARGS - 1);
    if (rc == 0 && o.seed_hex[0] == '\0') rc = 2, snprintf(error, sizeof error, "the reactor needs --seed HEX");
    ce_json j;
    ce_json_init(&j);
    if (rc == 0) rc = ce_run_report(&o, &j, error, sizeof error);
    free(copy);
    if (rc == 0) {
        g_result = j.buf;
        g_result_len = j.len;
    } else {
        ce_json_free(&j);
        g_result = strdup(error);
        g_result_len = g_result ? strlen(g_result) : 0;
    }
    return rc;
}
EXPORT("ce_result_ptr") const char *x_result_ptr(void) { return g_result; }
EXPORT("ce_result_len") size_t x_result_len(void) { return g_result_len; }

EXPORT("ce_sgemm") int x_sgemm(int m, int n, int k, const float *a, int lda, const float *b, int ldb, float *c, int ldc) {
    return ce_sgemm(m, n, k, a, lda, b, ldb, c, ldc);
}
EXPORT("ce_sgemm_release") void x_sgemm_release(void) { ce_sgemm_release(); }

EXPORT("ce_stream_copy") void x_copy(size_t n, double *c, const double *a) { ce_stream_copy(n, c, a); }
EXPORT("ce_stream_scale") void x_scale(size_t n, double *b, const double *c, double s) { ce_stream_scale(n, b, c, s); }
EXPORT("ce_stream_add") void x_add(size_t n, double *c, const double *a, const double *b) { ce_stream_add(n, c, a, b); }
EXPORT("ce_stream_triad") void x_triad(size_t n, double *a, const double *b, const double *c, double s) {
    ce_stream_triad(n, a, b, c, s);
}

/* The seed is passed as two 32-bit halves: JavaScript hosts cannot pass an i64 without BigInt. */
EXPORT("ce_llm_new") ce_llm *x_llm_new(uint32_t seed_lo, uint32_t seed_hi) {
    return ce_llm_new((uint64_t)seed_hi << 32 | seed_lo);
}
EXPORT("ce_llm_free") void x_llm_free(ce_llm *m) { ce_llm_free(m); }
EXPORT("ce_llm_forward") int x_llm_forward(ce_llm *m, int token, int pos) { return ce_llm_forward(m, token, pos); }
EXPORT("ce_llm_logits") const float *x_llm_logits(const ce_llm *m) { return ce_llm_logits(m); }
EXPORT("ce_llm_draw_rank") int x_llm_draw_rank(uint32_t seed_lo, uint32_t seed_hi, int seq, int step) {
    return ce_llm_draw_rank((uint64_t)seed_hi << 32 | seed_lo, seq, step);
}
EXPORT("ce_llm_token_at_rank") int x_llm_token_at_rank(ce_llm *m, int rank) { return ce_llm_token_at_rank(m, rank); }

/* A relay's challenge (challenge.c): compute and commit, then open rows on request. */
EXPORT("ce_challenge_sgemm") int x_challenge_sgemm(uint32_t seed_lo, uint32_t seed_hi, int n, int reps) {
    return ce_challenge_sgemm((uint64_t)seed_hi << 32 | seed_lo, n, reps);
}
EXPORT("ce_challenge_leaf_form") int x_challenge_leaf_form(int high16) { return ce_challenge_leaf_form(high16); }
EXPORT("ce_challenge_begin") int x_challenge_begin(uint32_t seed_lo, uint32_t seed_hi, int n, int reps) {
    return ce_challenge_begin((uint64_t)seed_hi << 32 | seed_lo, n, reps);
}
EXPORT("ce_challenge_next") int x_challenge_next(int count) { return ce_challenge_next(count); }
EXPORT("ce_challenge_commit") int x_challenge_commit(int k) { return ce_challenge_commit(k); }
EXPORT("ce_challenge_root") const uint8_t *x_challenge_root(void) { return ce_challenge_root(); }
EXPORT("ce_challenge_row") const float *x_challenge_row(int i) { return ce_challenge_row(i); }
EXPORT("ce_challenge_proof") int x_challenge_proof(int i, uint8_t *out) { return ce_challenge_proof(i, out); }
EXPORT("ce_challenge_release") void x_challenge_release(void) { ce_challenge_release(); }
EXPORT("ce_llm_challenge") int x_llm_challenge(uint32_t seed_lo, uint32_t seed_hi, int decode, char *hex65) {
    return ce_llm_challenge((uint64_t)seed_hi << 32 | seed_lo, decode, hex65);
}

/* A reference-model challenge token by token (llm_challenge.h): the node's side, then the relay's check. */
EXPORT("ce_llmc_begin") int x_llmc_begin(uint32_t seed_lo, uint32_t seed_hi) {
    return ce_llmc_begin((uint64_t)seed_hi << 32 | seed_lo);
}
EXPORT("ce_llmc_next") int x_llmc_next(void) { return ce_llmc_next(); }
EXPORT("ce_llmc_expected") int x_llmc_expected(uint32_t seed_lo, uint32_t seed_hi, const int32_t *tokens, int j) {
    return ce_llmc_expected((uint64_t)seed_hi << 32 | seed_lo, tokens, j);
}
EXPORT("ce_llmc_release") void x_llmc_release(void) { ce_llmc_release(); }
