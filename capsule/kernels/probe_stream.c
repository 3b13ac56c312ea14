/* stream probe: STREAM copy/scale/add/triad (McCalpin) over three arrays of doubles.
 *
 * Method: every pass runs the four kernels over the whole arrays in STREAM's order, each kernel chunk by
 * chunk with every chunk timed on its own; a chunk's rate is bytes (STREAM's counting: 2 or 3 doubles
 * per element) / time. The first pass is the warm-up. The figure is the median chunk rate over the
 * remaining passes, so a busy host that steals some chunks still yields a stable figure. Results are
 * checked against STREAM's closed-form expected values before anything is reported.
 *
 * With stream_triad_only (the whole-device memory figure, many instances at once) every pass is a triad
 * pass, and each pass's span is reported as work ("work": bytes moved between start and end), so the
 * host can add up what all instances moved over the window in which they all ran.
 */
#include "probe.h"
#include "stats.h"
#include "stream.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#if defined(__linux__) && !defined(__wasm__)
#include <sys/mman.h>
#endif

/* Native builds (the benchmarks' "same C" reference) ask for transparent huge pages as the capsule's
 * hosts do for its wasm memory (common/reactor.py advise_huge_pages), so both sides measure memory, not
 * the TLB. Under wasm the host decides. */
static void advise_huge_pages(void *p, size_t bytes) {
#if defined(__linux__) && !defined(__wasm__) && defined(MADV_HUGEPAGE)
    uintptr_t start = ((uintptr_t)p + 4095) & ~(uintptr_t)4095, end = ((uintptr_t)p + bytes) & ~(uintptr_t)4095;
    if (end > start) madvise((void *)start, end - start, MADV_HUGEPAGE);
#else
    (void)p;
    (void)bytes;
#endif
}

enum { CHUNK = 1 << 17, MIN_PASSES = 3, MAX_PASSES = 40, MAX_TRIAD_PASSES = 400, KERNELS = 4, TRIAD = 3 };
/* The three arrays share one block, each starting GAP_BYTES after the end of the one before (STREAM's
 * OFFSET, for the same reason). Three separate mallocs of 64 MiB land exactly 128 MiB apart in wasi-libc,
 * a power of two: a[j], b[j] and c[j] then fall on the same DRAM banks and cache sets, and triad ran at
 * 0.70x of the same arrays 66 MiB apart -- native code on the same wasm memory slowed alike (AMD EPYC
 * Zen 4, bench/kernels_paired.py, 2026-12-03). glibc happens to space them 64 MiB + 4 KiB apart. */
enum { GAP_BYTES = (2 << 20) + 4096 + 64 };
static const char *const KERNEL_NAMES[KERNELS] = {"copy", "scale", "add", "triad"};
static const int KERNEL_BYTES[KERNELS] = {CE_STREAM_COPY_BYTES, CE_STREAM_SCALE_BYTES, CE_STREAM_ADD_BYTES,
                                          CE_STREAM_TRIAD_BYTES};
static const double SCALAR = 3.0;

#if defined(CE_INJECT_FAULT) && CE_INJECT_FAULT == 2
static const double TRIAD_SCALAR = 3.0 * (1.0 + 1e-9); /* test build: a triad kernel that is slightly off */
#else
static const double TRIAD_SCALAR = 3.0;
#endif

/* One pass over the arrays (all four kernels, or triad only). Appends each timed chunk's rate to rates[k]
 * and, when spans is given, the triad pass's [start_ms, end_ms, bytes] to spans. */
static void run_pass(size_t n, double *a, double *b, double *c, ce_samples rates[KERNELS], int record,
                     int triad_only, ce_samples *spans) {
    for (int k = triad_only ? TRIAD : 0; k < KERNELS; ++k) {
        int64_t pass_start = ce_now_ns(), t1 = pass_start;
        for (size_t off = 0; off < n; off += CHUNK) {
            size_t len = n - off < CHUNK ? n - off : CHUNK;
            int64_t t0 = ce_now_ns();
            switch (k) {
            case 0: ce_stream_copy(len, c + off, a + off); break;
            case 1: ce_stream_scale(len, b + off, c + off, SCALAR); break;
            case 2: ce_stream_add(len, c + off, a + off, b + off); break;
            default: ce_stream_triad(len, a + off, b + off, c + off, TRIAD_SCALAR); break;
            }
            t1 = ce_now_ns();
            int64_t dt = t1 - t0;
            if (record && dt > 0) ce_samples_push(&rates[k], (double)(KERNEL_BYTES[k] * len) / (double)dt);
        }
        if (record && spans && k == TRIAD) {
            ce_samples_push(spans, (double)pass_start * 1e-6);
            ce_samples_push(spans, (double)t1 * 1e-6);
            ce_samples_push(spans, (double)KERNEL_BYTES[TRIAD] * (double)n);
        }
    }
}

/* STREAM's checkSTREAMresults: replay the recurrences on scalars and compare every element. */
static double max_relative_error(size_t n, const double *a, const double *b, const double *c, int passes,
                                 int triad_only) {
    double aj = 2.0, bj = 2.0, cj = 0.0; /* a was doubled after initialisation, as in STREAM */
    if (triad_only) { /* a = b + 3c from b = 2, c = 1, every pass */
        aj = 5.0;
        cj = 1.0;
        passes = 0;
    }
    for (int p = 0; p < passes; ++p) {
        cj = aj;
        bj = SCALAR * cj;
        cj = aj + bj;
        aj = bj + SCALAR * cj;
    }
    double worst = 0.0;
    for (size_t i = 0; i < n; ++i) {
        double e = fmax(fabs(a[i] - aj) / aj, fmax(fabs(b[i] - bj) / bj, fabs(c[i] - cj) / cj));
        if (!(e <= worst)) worst = e;
    }
    return worst;
}

int ce_probe_stream(const ce_probe_config *config, ce_json *j) {
    size_t n = (size_t)config->stream_mib * 1024 * 1024 / sizeof(double);
    size_t gap = GAP_BYTES / sizeof(double);
    double *block = malloc((3 * n + 2 * gap) * sizeof *block);
    if (!block) {
        ce_log("stream: cannot allocate 3 arrays of %d MiB\n", config->stream_mib);
        return 1;
    }
    advise_huge_pages(block, (3 * n + 2 * gap) * sizeof *block);
    double *a = block, *b = a + n + gap, *c = b + n + gap;
    int triad_only = config->stream_triad_only;
    for (size_t i = 0; i < n; ++i) { a[i] = 1.0; b[i] = 2.0; c[i] = triad_only ? 1.0 : 0.0; }
    for (size_t i = 0; i < n; ++i) a[i] = 2.0 * a[i];

    ce_samples rates[KERNELS] = {{0}}, spans = {0};
    int64_t t0 = ce_now_ns();
    run_pass(n, a, b, c, rates, 0, triad_only, NULL); /* warm-up: touches every page */
    double warmup_ms = (double)(ce_now_ns() - t0) * 1e-6;
    int passes = 1;
    if (ce_check_budget(config, "stream", warmup_ms, MIN_PASSES)) {
        free(block);
        return 2;
    }
    int64_t start = ce_now_ns();
    int timed = 0;
    ce_samples pass_medians[KERNELS] = {{0}};
    int max_passes = triad_only ? MAX_TRIAD_PASSES : MAX_PASSES, first = triad_only ? TRIAD : 0;
    while (ce_want_sample(timed, MIN_PASSES, max_passes, start, config->share_ms)) {
        size_t before[KERNELS];
        for (int k = 0; k < KERNELS; ++k) before[k] = rates[k].n;
        /* spans only in triad-only mode: with all four kernels a triad pass is a quarter of the time */
        run_pass(n, a, b, c, rates, 1, triad_only, triad_only ? &spans : NULL);
        for (int k = first; k < KERNELS; ++k) {
            ce_stats pass = ce_stats_of(rates[k].v + before[k], rates[k].n - before[k]);
            ce_samples_push(&pass_medians[k], pass.median);
        }
        ++timed;
        ++passes;
    }
    double err = max_relative_error(n, a, b, c, passes, triad_only);
    int verified = err <= 1e-13;

    ce_stats st[KERNELS];
    for (int k = 0; k < KERNELS; ++k) st[k] = ce_stats_of(rates[k].v, rates[k].n);
    ce_json_key(j, "stream");
    ce_json_begin_object(j);
    for (int k = 0; k < KERNELS; ++k) {
        char key[16];
        snprintf(key, sizeof key, "%s_gbps", KERNEL_NAMES[k]);
        ce_json_key(j, key);
        if (verified && k >= first) ce_json_number(j, st[k].median); else ce_json_null(j);
    }
    ce_json_key(j, "mode"); ce_json_string(j, triad_only ? "triad-only" : "all-kernels");
    ce_json_key(j, "unit"); ce_json_string(j, "GB/s (1e9 bytes/s), STREAM byte counting, one instance");
    ce_json_key(j, "method");
    ce_json_string(j, triad_only ? "STREAM triad a = b + 3c on 3 double arrays, triad passes only; each 1 MiB "
                                   "chunk timed separately; first pass is warm-up; figure = median chunk rate; "
                                   "work = bytes per pass with the pass's span"
                                 : "STREAM kernels on 3 double arrays; each 1 MiB chunk timed separately; first "
                                   "pass is warm-up; figure = median chunk rate over the timed passes");
    ce_json_key(j, "array_mib"); ce_json_int(j, config->stream_mib);
    ce_json_key(j, "chunk_mib"); ce_json_number(j, (double)CHUNK * sizeof(double) / (1024.0 * 1024.0));
    ce_json_key(j, "timed_passes"); ce_json_int(j, timed);
    ce_json_key(j, "kernels");
    ce_json_begin_object(j);
    for (int k = first; k < KERNELS; ++k) {
        ce_json_key(j, KERNEL_NAMES[k]);
        ce_json_begin_object(j);
        ce_json_key(j, "chunk_stats"); ce_stats_json(j, &st[k]);
        ce_json_key(j, "pass_medians"); ce_json_numbers(j, pass_medians[k].v, pass_medians[k].n);
        ce_json_end_object(j);
    }
    ce_json_end_object(j);
    ce_json_key(j, "work"); ce_work_json(j, "byte", spans.v, spans.n / 3);
    ce_json_key(j, "verified"); ce_json_bool(j, verified);
    ce_json_key(j, "check"); ce_json_string(j, "every element vs STREAM's closed-form values, rel. error <= 1e-13");
    ce_json_key(j, "max_rel_error"); ce_json_number(j, err);
    if (!verified) { ce_json_key(j, "reason"); ce_json_string(j, "array contents failed STREAM's check"); }
    ce_json_end_object(j);

    if (verified && triad_only)
        ce_log("  stream  %8.2f GB/s triad (triad passes only), spread %.1f%%, %d MiB arrays\n", st[3].median,
               100.0 * (st[3].p75 - st[3].p25) / st[3].median, config->stream_mib);
    else if (verified)
        ce_log("  stream  %8.2f GB/s triad  (copy %.2f, scale %.2f, add %.2f), spread %.1f%%, %d MiB arrays\n",
                st[3].median, st[0].median, st[1].median, st[2].median,
                100.0 * (st[3].p75 - st[3].p25) / st[3].median, config->stream_mib);
    else
        ce_log("  stream  FAILED its result check (error %.3g): no figure reported\n", err);
    ce_samples_free(&spans);
    for (int k = 0; k < KERNELS; ++k) {
        ce_samples_free(&rates[k]);
        ce_samples_free(&pass_medians[k]);
    }
    free(block);
    return 0;
}
