/* sgemm probe: GFLOPS of the packed SIMD128 fp32 GEMM at order n, GFLOPS = 2 n^3 / t.
 * Inputs are uniform in [-1, 1) from the seed. The first product is checked against a float64
 * reference at sampled entries before any figure is reported, and its bytes are hashed (checksum). */
#include "probe.h"
#include "rng.h"
#include "sgemm.h"
#include "sha256.h"
#include "stats.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { CHECK_ENTRIES = 97, MIN_SAMPLES = 3, MAX_SAMPLES = 40 };

/* Largest |c - ref| / bound over sampled entries, where bound = k * 2^-24 * sum |a_ip * b_pj| is the
 * worst-case fp32 summation error; a correct kernel stays far below 1. */
static double check_product(int n, const float *a, const float *b, const float *c, uint64_t seed) {
    ce_rng rng = {seed ^ 0x636865636bULL};
    double worst = 0.0;
    for (int e = 0; e < CHECK_ENTRIES; ++e) {
        int i = (int)(ce_rng_next(&rng) % (uint64_t)n), jj = (int)(ce_rng_next(&rng) % (uint64_t)n);
        if (e == 0) { i = n - 1; jj = n - 1; } /* always check the ragged corner */
        double ref = 0.0, mag = 0.0;
        for (int p = 0; p < n; ++p) {
            double t = (double)a[(size_t)i * n + p] * (double)b[(size_t)p * n + jj];
            ref += t;
            mag += fabs(t);
        }
        double bound = (double)n * ldexp(1.0, -24) * mag + 1e-30;
        double err = fabs((double)c[(size_t)i * n + jj] - ref) / bound;
        if (!(err <= worst)) worst = err; /* NaN propagates as a failure */
    }
    return worst;
}

void ce_sgemm_inputs(uint64_t seed, int n, float *a, float *b) {
    size_t count = (size_t)n * n;
    ce_rng rng = {seed ^ 0x7367656d6dULL};
    for (size_t i = 0; i < count; ++i) a[i] = ce_rng_uniform(&rng);
    for (size_t i = 0; i < count; ++i) b[i] = ce_rng_uniform(&rng);
}

int ce_probe_sgemm(const ce_probe_config *config, ce_json *j) {
    int n = config->sgemm_n;
    size_t count = (size_t)n * n;
    float *a = malloc(count * sizeof *a), *b = malloc(count * sizeof *b), *c = malloc(count * sizeof *c);
    if (!a || !b || !c) {
        free(a); free(b); free(c);
        ce_log("sgemm: cannot allocate 3 x %d x %d floats\n", n, n);
        return 1;
    }
    ce_sgemm_inputs(config->seed, n, a, b);

    int64_t t0 = ce_now_ns();
#if defined(CE_INJECT_FAULT) && CE_INJECT_FAULT == 1
    int rc = ce_sgemm(n, n, n - 1, a, n, b, n, c, n); /* test build: a kernel that drops one term */
#else
    int rc = ce_sgemm(n, n, n, a, n, b, n, c, n); /* warm-up, and the product that is checked */
#endif
    double warmup_ms = (double)(ce_now_ns() - t0) * 1e-6;
    if (rc != 0) {
        free(a); free(b); free(c);
        ce_log("sgemm: cannot allocate the packing workspace\n");
        return 1;
    }
    double err = check_product(n, a, b, c, config->seed);
    char checksum[65];
    ce_sha256_hex(c, count * sizeof *c, checksum);
    int verified = err < 1.0;
    if (ce_check_budget(config, "sgemm", warmup_ms, MIN_SAMPLES)) {
        free(a); free(b); free(c);
        return 2;
    }

    ce_samples gflops = {0}, spans = {0};
    double flops = 2.0 * (double)n * (double)n * (double)n;
    int64_t start = ce_now_ns();
    while (verified && ce_want_sample((int)gflops.n, MIN_SAMPLES, MAX_SAMPLES, start, config->share_ms)) {
        int64_t s = ce_now_ns();
        ce_sgemm(n, n, n, a, n, b, n, c, n);
        int64_t e = ce_now_ns();
        ce_samples_push(&gflops, flops / (double)(e - s));
        ce_samples_push(&spans, (double)s * 1e-6);
        ce_samples_push(&spans, (double)e * 1e-6);
        ce_samples_push(&spans, flops);
    }
    ce_stats st = ce_stats_of(gflops.v, gflops.n);

    ce_json_key(j, "sgemm");
    ce_json_begin_object(j);
    ce_json_key(j, "gflops");
    if (verified) ce_json_number(j, st.median); else ce_json_null(j);
    ce_json_key(j, "unit"); ce_json_string(j, "GFLOP/s (1e9 fp32 multiply-adds x 2 per second), one instance");
    ce_json_key(j, "method");
    ce_json_string(j, "C = A*B, n x n x n fp32, packed 3x12 register-blocked SIMD128 kernel; "
                      "GFLOPS = 2n^3/t per product after one warm-up product; median of samples");
    ce_json_key(j, "n"); ce_json_int(j, n);
    ce_json_key(j, "stats"); ce_stats_json(j, &st);
    ce_json_key(j, "samples"); ce_json_numbers(j, gflops.v, gflops.n);
    ce_json_key(j, "warmup_ms"); ce_json_number(j, warmup_ms);
    ce_json_key(j, "work"); ce_work_json(j, "flop", spans.v, spans.n / 3);
    ce_json_key(j, "verified"); ce_json_bool(j, verified);
    ce_json_key(j, "check");
    ce_json_string(j, "97 sampled entries vs a float64 dot product; error / (n * 2^-24 * sum|a*b|) < 1");
    ce_json_key(j, "max_error_ratio"); ce_json_number(j, err);
    ce_json_key(j, "checksum"); ce_json_string(j, checksum);
    ce_json_key(j, "checksum_method"); ce_json_string(j, "sha256 of C (row-major little-endian fp32)");
    if (!verified) { ce_json_key(j, "reason"); ce_json_string(j, "the product failed its float64 check"); }
    ce_json_end_object(j);

    if (verified)
        ce_log("  sgemm   %8.1f GFLOP/s   median of %zu, spread %.1f%%, n=%d, checked\n", st.median,
                st.n, 100.0 * (st.p75 - st.p25) / st.median, n);
    else
        ce_log("  sgemm   FAILED its float64 check (error ratio %.3g): no figure reported\n", err);
    ce_samples_free(&gflops);
    ce_samples_free(&spans);
    ce_sgemm_release();
    free(a); free(b); free(c);
    return 0;
}
