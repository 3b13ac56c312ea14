#ifndef CE_PROBE_H
#define CE_PROBE_H

#include <stdint.h>

#include "clock.h"
#include "json.h"
#include "log.h"

/* What every probe gets from the driver. */
typedef struct {
    uint64_t seed;         /* 64-bit seed derived from --seed; each probe mixes in its own constant */
    double share_ms;       /* this probe's part of --budget-ms */
    int budget_explicit;   /* 1 when the user set --budget-ms: a share too small is then an error */
    int sgemm_n;           /* matrix order for sgemm */
    int stream_mib;        /* MiB per STREAM array */
    int stream_triad_only; /* 1: triad passes only (the whole-device memory figure), else all four kernels */
    int disk_mib;          /* MiB written and read per disk sample */
    const char *scratch;   /* directory the disk probe writes into */
    int scratch_required;  /* 1 when the user asked for the disk probe by name */
    char *error;           /* where a probe writes a one-line usage error (exit 2) */
    int error_size;
} ce_probe_config;

/* Each probe writes its member object ("sgemm": {...}) into j and a summary line to stderr.
 * Returns 0 on success (including a reported skip or a failed check, which the report states),
 * 2 with config->error set for a usage problem, 1 for an internal failure such as out-of-memory. */
int ce_probe_sgemm(const ce_probe_config *config, ce_json *j);
/* The sgemm probe's inputs: A then B (n x n, row-major), uniform in [-1, 1) from the splitmix64 stream of
 * seed ^ "sgemm". The relay's challenge checks regenerate them the same way (capsule/challenge.py). */
void ce_sgemm_inputs(uint64_t seed, int n, float *a, float *b);
int ce_probe_stream(const ce_probe_config *config, ce_json *j);
int ce_probe_disk(const ce_probe_config *config, ce_json *j);
int ce_probe_llm(const ce_probe_config *config, ce_json *j);
/* The legacy reference-model challenge (greedy; a token hash no relay takes any more, kept for benches): the
 * model and prompt of seed, `decode` greedy steps, hex = sha256 of the decoded ids. 0, 1 (out of memory) or 2
 * (decode out of range). */
int ce_llm_challenge(uint64_t seed, int decode, char hex[65]);

/* Checks the scratch directory before any probe runs, so a bad --dir fails fast: 0 = usable,
 * 1 = absent and not required (reason set, the probe will be skipped), 2 = usage error (config->error). */
int ce_disk_preflight(const ce_probe_config *config, char *reason, int reason_size);

/* Sampling policy shared by the probes: take at least min samples, then more while the probe's share of
 * the budget lasts, never more than max. */
static inline int ce_want_sample(int taken, int min, int max, int64_t start_ns, double share_ms) {
    if (taken < min) return 1;
    if (taken >= max) return 0;
    return (double)(ce_now_ns() - start_ns) * 1e-6 < share_ms;
}

/* After the warm-up: with an explicit budget, refuse when the minimum number of samples cannot fit in
 * this probe's share. Returns 2 with the message set, else 0. */
int ce_check_budget(const ce_probe_config *config, const char *probe, double warmup_ms, int min_samples);

/* Work spans for whole-device figures: [start, end] in ms on this instance's clock (add the report's
 * clock.anchor_unix_ms for unix time) with the work done in between, so a host can add up the work of
 * concurrent instances over the window they all ran in. Written as {"unit":..,"spans_ms":[[s,e,w],..]}. */
void ce_work_json(ce_json *j, const char *unit, const double *spans, size_t count);

#define CE_PROBE_ERROR(config, ...) snprintf((config)->error, (size_t)(config)->error_size, __VA_ARGS__)

#endif
