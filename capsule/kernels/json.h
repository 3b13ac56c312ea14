#ifndef CE_JSON_H
#define CE_JSON_H

#include <stddef.h>

/* A small streaming JSON writer into a growable buffer: the capsule's only output format, so every
 * consumer (wasmtime CLI users, wasmtime-py, the browser) reads one schema. Non-finite numbers are
 * written as null, never as invalid JSON. */
typedef struct {
    char *buf;
    size_t len, cap;
    int need_comma[32];
    int depth;
    int failed;
} ce_json;

void ce_json_init(ce_json *j);
void ce_json_free(ce_json *j);
void ce_json_begin_object(ce_json *j);
void ce_json_end_object(ce_json *j);
void ce_json_begin_array(ce_json *j);
void ce_json_end_array(ce_json *j);
void ce_json_key(ce_json *j, const char *key);
void ce_json_string(ce_json *j, const char *s);
/* A double as the shortest text that reads back as the same double, always a JSON float (1196.0). */
void ce_json_number(ce_json *j, double v);
/* A number with a fixed count of decimals (timestamps, whose digits past the millisecond mean nothing). */
void ce_json_fixed(ce_json *j, double v, int decimals);
void ce_json_int(ce_json *j, long long v);
void ce_json_bool(ce_json *j, int v);
void ce_json_null(ce_json *j);
void ce_json_numbers(ce_json *j, const double *v, size_t n);

#endif
