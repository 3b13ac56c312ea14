#include "stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Linear interpolation between closest ranks (the "R-7" definition numpy uses by default). */
static double quantile_sorted(const double *v, size_t n, double q) {
    double pos = q * (double)(n - 1);
    size_t lo = (size_t)pos;
    double frac = pos - (double)lo;
    return lo + 1 < n ? v[lo] + frac * (v[lo + 1] - v[lo]) : v[lo];
}

ce_stats ce_stats_of(const double *samples, size_t n) {
    ce_stats s = {n, NAN, NAN, NAN, NAN, NAN, NAN};
    if (n == 0) return s;
    double *v = malloc(n * sizeof *v);
    if (!v) return s;
    memcpy(v, samples, n * sizeof *v);
    qsort(v, n, sizeof *v, cmp_double);
    s.min = v[0];
    s.max = v[n - 1];
    s.median = quantile_sorted(v, n, 0.5);
    s.p25 = quantile_sorted(v, n, 0.25);
    s.p75 = quantile_sorted(v, n, 0.75);
    for (size_t i = 0; i < n; ++i) v[i] = fabs(v[i] - s.median);
    qsort(v, n, sizeof *v, cmp_double);
    s.mad = quantile_sorted(v, n, 0.5);
    free(v);
    return s;
}

void ce_stats_json(ce_json *j, const ce_stats *s) {
    ce_json_begin_object(j);
    ce_json_key(j, "n"); ce_json_int(j, (long long)s->n);
    ce_json_key(j, "median"); ce_json_number(j, s->median);
    ce_json_key(j, "min"); ce_json_number(j, s->min);
    ce_json_key(j, "max"); ce_json_number(j, s->max);
    ce_json_key(j, "p25"); ce_json_number(j, s->p25);
    ce_json_key(j, "p75"); ce_json_number(j, s->p75);
    ce_json_key(j, "mad"); ce_json_number(j, s->mad);
    ce_json_key(j, "spread_pct"); ce_json_number(j, s->median > 0 ? 100.0 * (s->p75 - s->p25) / s->median : NAN);
    ce_json_end_object(j);
}

int ce_samples_push(ce_samples *s, double x) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        double *grown = realloc(s->v, cap * sizeof *grown);
        if (!grown) return -1;
        s->v = grown;
        s->cap = cap;
    }
    s->v[s->n++] = x;
    return 0;
}

void ce_samples_free(ce_samples *s) {
    free(s->v);
    memset(s, 0, sizeof *s);
}
