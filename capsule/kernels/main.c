/* The capsule's WASI command: parses arguments, runs the probes, prints one JSON ProbeReport on stdout
 * and a human summary on stderr. Exit 0 on success, 2 with a one-line error on bad input, 1 when the
 * host runs out of memory. The same file builds natively (tests and the side-by-side benchmark). */
#include "probe.h"
#include "sha256.h"
#include "simd.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CAPSULE_VERSION "1.0.0"
#define USAGE "usage: capsule.wasm [--probes sgemm,stream,disk,llm] [--seed HEX] [--budget-ms N] " \
              "[--soft-budget] [--sgemm-n N] [--stream-mib N] [--disk-mib N] [--scratch DIR]"

typedef int (*probe_fn)(const ce_probe_config *, ce_json *);
typedef struct {
    const char *name;
    probe_fn run;
    double weight; /* share of the budget when every probe runs */
} probe_entry;

static const probe_entry PROBES[] = {
    {"sgemm", ce_probe_sgemm, 0.25},
    {"stream", ce_probe_stream, 0.20},
    {"disk", ce_probe_disk, 0.15},
    {"llm", ce_probe_llm, 0.40},
};
enum { N_PROBES = sizeof PROBES / sizeof PROBES[0] };

typedef struct {
    int order[N_PROBES], count, disk_named;
    char seed_hex[129];
    long budget_ms, sgemm_n, stream_mib, disk_mib;
    int budget_explicit, soft_budget;
    const char *scratch;
} options;

static double g_budget_total_ms;

static int usage_error(const char *fmt, const char *a, const char *b) {
    fprintf(stderr, "capsule: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\n%s\n", USAGE);
    return 2;
}

static int parse_long(const char *flag, const char *text, long lo, long hi, long *out) {
    char *end = NULL;
    errno = 0;
    long v = text ? strtol(text, &end, 10) : 0;
    if (!text || *text == '\0' || *end != '\0' || errno != 0 || v < lo || v > hi) {
        char range[64];
        snprintf(range, sizeof range, "an integer from %ld to %ld", lo, hi);
        fprintf(stderr, "capsule: %s expects %s, got '%s'\n%s\n", flag, range, text ? text : "", USAGE);
        return 2;
    }
    *out = v;
    return 0;
}

static int parse_probes(const char *text, options *o) {
    o->count = 0;
    char buf[256];
    if (strlen(text) >= sizeof buf || *text == '\0')
        return usage_error("--probes expects a comma-separated subset of sgemm,stream,disk,llm, got '%s'%s", text, "");
    strcpy(buf, text);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int found = -1;
        for (int i = 0; i < N_PROBES; ++i)
            if (strcmp(tok, PROBES[i].name) == 0) found = i;
        if (found < 0) return usage_error("unknown probe '%s' in --probes (expected sgemm, stream, disk or llm)%s", tok, "");
        for (int i = 0; i < o->count; ++i)
            if (o->order[i] == found) return usage_error("probe '%s' is listed twice in --probes%s", tok, "");
        o->order[o->count++] = found;
    }
    if (o->count == 0) return usage_error("--probes names no probe: '%s'%s", text, "");
    return 0;
}

static int parse_seed(const char *text, options *o) {
    size_t n = strlen(text);
    if (n < 2 || n > 128 || n % 2 != 0 || strspn(text, "0123456789abcdefABCDEF") != n)
        return usage_error("--seed expects 2 to 128 hex digits (an even count), got '%s'%s", text, "");
    for (size_t i = 0; i <= n; ++i) o->seed_hex[i] = (char)(text[i] >= 'A' && text[i] <= 'F' ? text[i] + 32 : text[i]);
    return 0;
}

static int parse_args(int argc, char **argv, options *o) {
    for (int i = 1; i < argc; ++i) {
        const char *flag = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
        int rc;
        if (strcmp(flag, "--help") == 0 || strcmp(flag, "-h") == 0) {
            printf("%s\n", USAGE);
            exit(0);
        }
        if (strcmp(flag, "--soft-budget") == 0) { /* take the minimum samples even past the budget */
            o->soft_budget = 1;
            continue;
        }
        if (!value) return usage_error("%s needs a value%s", flag, "");
        ++i;
        if (strcmp(flag, "--probes") == 0) {
            rc = parse_probes(value, o);
            o->disk_named = 0;
            for (int k = 0; k < o->count; ++k) o->disk_named |= strcmp(PROBES[o->order[k]].name, "disk") == 0;
        } else if (strcmp(flag, "--seed") == 0) {
            rc = parse_seed(value, o);
        } else if (strcmp(flag, "--budget-ms") == 0) {
            rc = parse_long(flag, value, 1, 3600000, &o->budget_ms);
            o->budget_explicit = 1;
        } else if (strcmp(flag, "--sgemm-n") == 0) {
            rc = parse_long(flag, value, 16, 4096, &o->sgemm_n);
        } else if (strcmp(flag, "--stream-mib") == 0) {
            rc = parse_long(flag, value, 1, 1024, &o->stream_mib);
        } else if (strcmp(flag, "--disk-mib") == 0) {
            rc = parse_long(flag, value, 1, 4096, &o->disk_mib);
        } else if (strcmp(flag, "--scratch") == 0) {
            o->scratch = value;
            rc = 0;
        } else {
            return usage_error("unknown argument '%s'%s", flag, "");
        }
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
    struct timespec res;
    clock_getres(CLOCK_MONOTONIC, &res);
    int64_t t0 = ce_now_ns();
    for (int i = 0; i < 1000; ++i) (void)ce_now_ns();
    ce_json_key(j, "clock");
    ce_json_begin_object(j);
    ce_json_key(j, "source"); ce_json_string(j, "clock_gettime(CLOCK_MONOTONIC), wall time");
    ce_json_key(j, "resolution_ns"); ce_json_number(j, (double)res.tv_sec * 1e9 + (double)res.tv_nsec);
    ce_json_key(j, "call_overhead_ns"); ce_json_number(j, (double)(ce_now_ns() - t0) / 1000.0);
    ce_json_end_object(j);
}

int main(int argc, char **argv) {
    options o = {.order = {0, 1, 2, 3}, .count = N_PROBES, .budget_ms = 6000, .sgemm_n = 1024,
                 .stream_mib = 64, .disk_mib = 32, .scratch = "/scratch"};
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc;
    if (o.seed_hex[0] == '\0') {
        unsigned char entropy[32];
        if (getentropy(entropy, sizeof entropy) != 0) {
            fprintf(stderr, "capsule: no entropy source for a random seed; pass --seed HEX\n");
            return 1;
        }
        ce_hex(entropy, sizeof entropy, o.seed_hex);
    }
    double weight_sum = 0.0;
    for (int k = 0; k < o.count; ++k) weight_sum += PROBES[o.order[k]].weight;
    g_budget_total_ms = (double)o.budget_ms;

    char error[512] = "";
    ce_probe_config config = {.seed = seed64_of(o.seed_hex), .budget_explicit = o.budget_explicit && !o.soft_budget,
                              .sgemm_n = (int)o.sgemm_n, .stream_mib = (int)o.stream_mib,
                              .disk_mib = (int)o.disk_mib, .scratch = o.scratch, .scratch_required = o.disk_named,
                              .error = error, .error_size = sizeof error};
    for (int k = 0; k < o.count; ++k) {
        char reason[256];
        if (PROBES[o.order[k]].run == ce_probe_disk && ce_disk_preflight(&config, reason, sizeof reason) == 2) {
            fprintf(stderr, "capsule: %s\n", error);
            return 2;
        }
    }
    ce_json j;
    ce_json_init(&j);
    int64_t t0 = ce_now_ns();
    fprintf(stderr, "ce-bench capsule %s (%s), seed %.16s..., budget %ld ms\n", CAPSULE_VERSION, CE_SIMD_NAME,
            o.seed_hex, o.budget_ms);
    ce_json_begin_object(&j);
    ce_json_key(&j, "schema"); ce_json_string(&j, "ce-bench/probe-report/v1");
    ce_json_key(&j, "capsule_version"); ce_json_string(&j, CAPSULE_VERSION);
    ce_json_key(&j, "simd"); ce_json_string(&j, CE_SIMD_NAME);
    ce_json_key(&j, "seed"); ce_json_string(&j, o.seed_hex);
    ce_json_key(&j, "budget_ms"); ce_json_int(&j, o.budget_ms);
    clock_json(&j);
    ce_json_key(&j, "probe_order");
    ce_json_begin_array(&j);
    for (int k = 0; k < o.count; ++k) ce_json_string(&j, PROBES[o.order[k]].name);
    ce_json_end_array(&j);
    ce_json_key(&j, "probes");
    ce_json_begin_object(&j);
    for (int k = 0; k < o.count; ++k) {
        const probe_entry *p = &PROBES[o.order[k]];
        config.share_ms = (double)o.budget_ms * p->weight / weight_sum;
        rc = p->run(&config, &j);
        if (rc == 2) {
            fprintf(stderr, "capsule: %s\n", error);
            ce_json_free(&j);
            return 2;
        }
        if (rc != 0) {
            fprintf(stderr, "capsule: the %s probe failed (out of memory?)\n", p->name);
            ce_json_free(&j);
            return 1;
        }
    }
    ce_json_end_object(&j);
    double wall_ms = (double)(ce_now_ns() - t0) * 1e-6;
    ce_json_key(&j, "wall_ms"); ce_json_number(&j, wall_ms);
    ce_json_end_object(&j);
    if (j.failed) {
        fprintf(stderr, "capsule: out of memory while writing the report\n");
        return 1;
    }
    fputs(j.buf, stdout);
    fputc('\n', stdout);
    fprintf(stderr, "done in %.0f ms\n", wall_ms);
    ce_json_free(&j);
    return 0;
}
