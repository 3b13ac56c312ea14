#ifndef CE_DRIVER_H
#define CE_DRIVER_H

#include <stddef.h>

#include "json.h"

/* The capsule's driver, shared by the WASI command (main.c) and the reactor (reactor.c): one argument
 * syntax, one probe table, one ProbeReport. Browsers and servers therefore run the same probe code. */

#define CE_CAPSULE_VERSION "1.0.0"
#define CE_USAGE "usage: capsule.wasm [--probes sgemm,stream,disk,llm] [--seed HEX] [--budget-ms N] " \
                 "[--soft-budget] [--sgemm-n N] [--stream-mib N] [--stream-triad-only] [--disk-mib N] " \
                 "[--scratch DIR]"
enum { CE_MAX_PROBES = 4 };

typedef struct {
    int order[CE_MAX_PROBES], count, disk_named;
    char seed_hex[129]; /* empty: the command draws a random seed; the reactor requires one */
    long budget_ms, sgemm_n, stream_mib, disk_mib;
    int budget_explicit, soft_budget, stream_triad_only, help;
    const char *scratch;
} ce_options;

void ce_options_default(ce_options *o);

/* Parses argv[1..argc-1]. Returns 0, or 2 with a one-line message (usage line appended) in error. */
int ce_parse_args(int argc, char **argv, ce_options *o, char *error, size_t error_size);

/* Runs the probes and writes the ProbeReport object into j; the summary goes through ce_log.
 * Returns 0, 2 for a usage problem (message in error), 1 for an internal failure (out of memory). */
int ce_run_report(const ce_options *o, ce_json *j, char *error, size_t error_size);

#endif
