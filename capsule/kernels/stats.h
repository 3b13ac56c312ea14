#ifndef CE_STATS_H
#define CE_STATS_H

#include <stddef.h>

#include "json.h"

/* Order statistics of a sample, the way STREAM and llama-bench report: the median is the figure,
 * min/max/quartiles/MAD are its spread. */
typedef struct {
    size_t n;
    double median, min, max, p25, p75, mad;
} ce_stats;

ce_stats ce_stats_of(const double *samples, size_t n);
/* Writes {"n":..,"median":..,"min":..,"max":..,"p25":..,"p75":..,"mad":..,"spread_pct":..}
 * where spread_pct = 100 * (p75 - p25) / median. */
void ce_stats_json(ce_json *j, const ce_stats *s);

/* A growable array of samples. */
typedef struct {
    double *v;
    size_t n, cap;
} ce_samples;

int ce_samples_push(ce_samples *s, double x);
void ce_samples_free(ce_samples *s);

#endif
