/* The capsule driver: argument parsing, budget split, probe order and the ProbeReport envelope. */
#include "driver.h"

#include "probe.h"
#include "sha256.h"
#include "simd.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*probe_fn)(const ce_probe_config *, ce_json *);
typedef struct {
    const char *name;
    probe_fn run;
    double weight; /* share of the budget when every probe runs */
} probe_entry;

#ifdef CE_REACTOR
/* The reactor has no filesystem (no WASI): browsers measure storage through OPFS in a worker. */
static int probe_disk_unavailable(const ce_probe_config *config, ce_json *j) {
    (void)config;
    ce_json_key(j, "disk");
    ce_json_begin_object(j);
    ce_json_key(j, "write_mbps"); ce_json_null(j);
    ce_json_key(j, "read_mbps"); ce_json_null(j);
    ce_json_key(j, "skipped");
    ce_json_string(j, "the reactor build has no filesystem; the host measures storage itself (OPFS in browsers)");
    ce_json_end_object(j);
    return 0;
}
#define DISK_PROBE probe_disk_unavailable
#else
#define DISK_PROBE ce_probe_disk
#endif

static const probe_entry PROBES[CE_MAX_PROBES] = {
    {"sgemm", ce_probe_sgemm, 0.25},
    {"stream", ce_probe_stream, 0.20},
    {"disk", DISK_PROBE, 0.15},
    {"llm", ce_probe_llm, 0.40},
};

static double g_budget_total_ms;

void ce_options_default(ce_options *o) {
    memset(o, 0, sizeof *o);
    for (int i = 0; i < CE_MAX_PROBES; ++i) o->order[i] = i;
    o->count = CE_MAX_PROBES;
    o->budget_ms = 6000;
    o->sgemm_n = 1024;
    o->stream_mib = 64;
    o->disk_mib = 32;
    o->scratch = "/scratch";
}

static int fail(char *error, size_t size, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int used = vsnprintf(error, size, fmt, ap);
    va_end(ap);
    if (used >= 0 && (size_t)used < size) snprintf(error + used, size - (size_t)used, "\n%s", CE_USAGE);
    return 2;
}

static int parse_long(const char *flag, const char *text, long lo, long hi, long *out, char *error, size_t size) {
    char *end = NULL;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (*text == '\0' || *end != '\0' || errno != 0 || v < lo || v > hi)
        return fail(error, size, "%s expects an integer from %ld to %ld, got '%s'", flag, lo, hi, text);
    *out = v;
    return 0;
}

static int parse_probes(const char *text, ce_options *o, char *error, size_t size) {
    char buf[256];
    o->count = 0;
    if (strlen(text) >= sizeof buf || *text == '\0')
        return fail(error, size, "--probes expects a comma-separated subset of sgemm,stream,disk,llm, got '%s'", text);
    strcpy(buf, text);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int found = -1;
        for (int i = 0; i < CE_MAX_PROBES; ++i)
            if (strcmp(tok, PROBES[i].name) == 0) found = i;
        if (found < 0) return fail(error, size, "unknown probe '%s' in --probes (expected sgemm, stream, disk or llm)", tok);
        for (int i = 0; i < o->count; ++i)
            if (o->order[i] == found) return fail(error, size, "probe '%s' is listed twice in --probes", tok);
        o->order[o->count++] = found;
    }
    if (o->count == 0) return fail(error, size, "--probes names no probe: '%s'", text);
    o->disk_named = 0;
    for (int k = 0; k < o->count; ++k) o->disk_named |= strcmp(PROBES[o->order[k]].name, "disk") == 0;
    return 0;
}

static int parse_seed(const char *text, ce_options *o, char *error, size_t size) {
    size_t n = strlen(text);
    if (n < 2 || n > 128 || n % 2 != 0 || strspn(text, "0123456789abcdefABCDEF") != n)
        return fail(error, size, "--seed expects 2 to 128 hex digits (an even count), got '%s'", text);
    for (size_t i = 0; i <= n; ++i) o->seed_hex[i] = (char)(text[i] >= 'A' && text[i] <= 'F' ? text[i] + 32 : text[i]);
    return 0;
}

int ce_parse_args(int argc, char **argv, ce_options *o, char *error, size_t size) {
    for (int i = 1; i < argc; ++i) {
        const char *flag = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
        int rc = 0;
        if (strcmp(flag, "--help") == 0 || strcmp(flag, "-h") == 0) {
            o->help = 1;
            return 0;
        }
        if (strcmp(flag, "--soft-budget") == 0) { /* take the minimum samples even past the budget */
            o->soft_budget = 1;
            continue;
        }
        if (strcmp(flag, "--stream-triad-only") == 0) {
            o->stream_triad_only = 1;
            continue;
        }
        if (!value) return fail(error, size, "%s needs a value", flag);
        ++i;
        if (strcmp(flag, "--probes") == 0) rc = parse_probes(value, o, error, size);
        else if (strcmp(flag, "--seed") == 0) rc = parse_seed(value, o, error, size);
        else if (strcmp(flag, "--budget-ms") == 0) {
            rc = parse_long(flag, value, 1, 3600000, &o->budget_ms, error, size);
            o->budget_explicit = 1;
        } else if (strcmp(flag, "--sgemm-n") == 0) rc = parse_long(flag, value, 16, 4096, &o->sgemm_n, error, size);
        else if (strcmp(flag, "--stream-mib") == 0) rc = parse_long(flag, value, 1, 1024, &o->stream_mib, error, size);
        else if (strcmp(flag, "--disk-mib") == 0) rc = parse_long(flag, value, 1, 4096, &o->disk_mib, error, size);
        else if (strcmp(flag, "--scratch") == 0) o->scratch = value;
        else return fail(error, size, "unknown argument '%s'", flag);
        if (rc) return rc;
    }
    return 0;
}

int ce_check_budget(const ce_probe_config *config, const char *probe, double warmup_ms, int min_samples) {
    double need_ms = warmup_ms * min_samples;
    if (!config->budget_explicit || need_ms <= config->share_ms) return 0;
    CE_PROBE_ERROR(config,
                   "--budget-ms %.0f is too small: %s gets %.0f ms of it but needs about %.0f ms for %d "
                   "sample(s) on this machine (try --budget-ms %.0f)",
                   g_budget_total_ms, probe, config->share_ms, need_ms, min_samples,
                   g_budget_total_ms * need_ms / config->share_ms * 1.2);
    return 2;
}

void ce_work_json(ce_json *j, const char *unit, const double *spans, size_t count) {
    ce_json_begin_object(j);
    ce_json_key(j, "unit"); ce_json_string(j, unit);
    ce_json_key(j, "spans_ms");
    ce_json_begin_array(j);
    for (size_t i = 0; i < count; ++i) {
        ce_json_begin_array(j);
        ce_json_fixed(j, spans[3 * i], 4);
        ce_json_fixed(j, spans[3 * i + 1], 4);
        ce_json_fixed(j, spans[3 * i + 2], 0);
        ce_json_end_array(j);
    }
    ce_json_end_array(j);
    ce_json_end_object(j);
}

static uint64_t seed64_of(const char *hex) {
    unsigned char bytes[64], digest[32];
    size_t n = strlen(hex) / 2;
    for (size_t i = 0; i < n; ++i) {
        unsigned v;
        sscanf(hex + 2 * i, "%2x", &v);
        bytes[i] = (unsigned char)v;
    }
    ce_sha256 h;
    ce_sha256_init(&h);
    ce_sha256_update(&h, bytes, n);
    ce_sha256_final(&h, digest);
    uint64_t s = 0;
    for (int i = 7; i >= 0; --i) s = s << 8 | digest[i];
    return s;
}

static void clock_json(ce_json *j) {
    int64_t t0 = ce_now_ns();
    for (int i = 0; i < 1000; ++i) (void)ce_now_ns();
    double overhead_ns = (double)(ce_now_ns() - t0) / 1000.0;
    int64_t step = 0; /* smallest tick seen over a few transitions (coarse in browsers not isolated) */
    for (int r = 0; r < 5; ++r) {
        int64_t a = ce_now_ns(), b;
        long spins = 0;
        while ((b = ce_now_ns()) == a && ++spins < 100000000L) {}
        if (b > a && (step == 0 || b - a < step)) step = b - a;
    }
    ce_json_key(j, "clock");
    ce_json_begin_object(j);
    ce_json_key(j, "source");
#ifdef CE_REACTOR
    ce_json_string(j, "host import env.ce_clock_us (unix time in us), wall time");
#else
    ce_json_string(j, "clock_gettime(CLOCK_MONOTONIC), wall time");
#endif
    ce_json_key(j, "observed_step_ns"); ce_json_number(j, (double)step);
    ce_json_key(j, "call_overhead_ns"); ce_json_number(j, overhead_ns);
    ce_json_key(j, "anchor_unix_ms"); ce_json_fixed(j, ce_clock_anchor_unix_ms(), 4);
    ce_json_end_object(j);
}

int ce_run_report(const ce_options *o, ce_json *j, char *error, size_t error_size) {
    double weight_sum = 0.0;
    for (int k = 0; k < o->count; ++k) weight_sum += PROBES[o->order[k]].weight;
    g_budget_total_ms = (double)o->budget_ms;
    ce_probe_config config = {.seed = seed64_of(o->seed_hex), .budget_explicit = o->budget_explicit && !o->soft_budget,
                              .sgemm_n = (int)o->sgemm_n, .stream_mib = (int)o->stream_mib,
                              .stream_triad_only = o->stream_triad_only, .disk_mib = (int)o->disk_mib,
                              .scratch = o->scratch, .scratch_required = o->disk_named,
                              .error = error, .error_size = (int)error_size};
#ifndef CE_REACTOR
    for (int k = 0; k < o->count; ++k) {
        char reason[256];
        if (PROBES[o->order[k]].run == ce_probe_disk && ce_disk_preflight(&config, reason, sizeof reason) == 2)
            return 2;
    }
#endif
    int64_t t0 = ce_now_ns();
    ce_log("ce-bench capsule %s (%s), seed %.16s..., budget %ld ms\n", CE_CAPSULE_VERSION, CE_SIMD_NAME,
           o->seed_hex, o->budget_ms);
    ce_json_begin_object(j);
    ce_json_key(j, "schema"); ce_json_string(j, "ce-bench/probe-report/v1");
    ce_json_key(j, "capsule_version"); ce_json_string(j, CE_CAPSULE_VERSION);
    ce_json_key(j, "simd"); ce_json_string(j, CE_SIMD_NAME);
#ifdef CE_REACTOR
    ce_json_key(j, "build"); ce_json_string(j, "reactor");
#else
    ce_json_key(j, "build"); ce_json_string(j, "command");
#endif
    ce_json_key(j, "seed"); ce_json_string(j, o->seed_hex);
    ce_json_key(j, "budget_ms"); ce_json_int(j, o->budget_ms);
    clock_json(j);
    ce_json_key(j, "probe_order");
    ce_json_begin_array(j);
    for (int k = 0; k < o->count; ++k) ce_json_string(j, PROBES[o->order[k]].name);
    ce_json_end_array(j);
    ce_json_key(j, "probes");
    ce_json_begin_object(j);
    for (int k = 0; k < o->count; ++k) {
        const probe_entry *p = &PROBES[o->order[k]];
        config.share_ms = (double)o->budget_ms * p->weight / weight_sum;
        int rc = p->run(&config, j);
        if (rc == 2) return 2;
        if (rc != 0) {
            snprintf(error, error_size, "the %s probe failed (out of memory?)", p->name);
            return 1;
        }
    }
    ce_json_end_object(j);
    double wall_ms = (double)(ce_now_ns() - t0) * 1e-6;
    ce_json_key(j, "wall_ms"); ce_json_number(j, wall_ms);
    ce_json_end_object(j);
    if (j->failed) {
        snprintf(error, error_size, "out of memory while writing the report");
        return 1;
    }
    ce_log("done in %.0f ms\n", wall_ms);
    return 0;
}
