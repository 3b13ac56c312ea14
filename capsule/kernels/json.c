#include "json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ce_json_init(ce_json *j) { memset(j, 0, sizeof *j); }

void ce_json_free(ce_json *j) {
    free(j->buf);
    memset(j, 0, sizeof *j);
}

static void put(ce_json *j, const char *s, size_t n) {
    if (j->failed) return;
    if (j->len + n + 1 > j->cap) {
        size_t cap = j->cap ? j->cap * 2 : 4096;
        while (cap < j->len + n + 1) cap *= 2;
        char *grown = realloc(j->buf, cap);
        if (!grown) {
            j->failed = 1;
            return;
        }
        j->buf = grown;
        j->cap = cap;
    }
    memcpy(j->buf + j->len, s, n);
    j->len += n;
    j->buf[j->len] = '\0';
}

static void puts_(ce_json *j, const char *s) { put(j, s, strlen(s)); }

/* Per nesting level: 0 = nothing written yet, 1 = a member written (the next one needs a comma),
 * 2 = a key written (its value follows the colon directly). */
static void before_value(ce_json *j) {
    if (j->depth == 0) return;
    if (j->need_comma[j->depth] == 1) puts_(j, ",");
    j->need_comma[j->depth] = 1;
}

static void open_(ce_json *j, const char *c) {
    before_value(j);
    puts_(j, c);
    if (j->depth < 31) j->need_comma[++j->depth] = 0;
    else j->failed = 1;
}

static void close_(ce_json *j, const char *c) {
    puts_(j, c);
    if (j->depth > 0) --j->depth;
}

void ce_json_begin_object(ce_json *j) { open_(j, "{"); }
void ce_json_end_object(ce_json *j) { close_(j, "}"); }
void ce_json_begin_array(ce_json *j) { open_(j, "["); }
void ce_json_end_array(ce_json *j) { close_(j, "]"); }

static void quoted(ce_json *j, const char *s) {
    puts_(j, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; ++p) {
        char esc[8];
        if (*p == '"' || *p == '\\') {
            esc[0] = '\\'; esc[1] = (char)*p; put(j, esc, 2);
        } else if (*p < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", *p);
            puts_(j, esc);
        } else {
            put(j, (const char *)p, 1);
        }
    }
    puts_(j, "\"");
}

void ce_json_key(ce_json *j, const char *key) {
    if (j->need_comma[j->depth] == 1) puts_(j, ",");
    quoted(j, key);
    puts_(j, ":");
    j->need_comma[j->depth] = 2; /* the value follows without a comma */
}

void ce_json_string(ce_json *j, const char *s) { before_value(j); quoted(j, s); }

void ce_json_number(ce_json *j, double v) {
    before_value(j);
    if (!isfinite(v)) {
        puts_(j, "null");
        return;
    }
    /* The fewest significant digits (15 to 17) that read back as the same double, and always a decimal
     * point or an exponent: a measured figure stays a JSON float even when it lands on an integer (%.6g
     * once wrote 1196.0002 as the integer 1196, and 123456.7 as 123457). */
    char tmp[48];
    for (int digits = 15; digits <= 17; ++digits) {
        snprintf(tmp, sizeof tmp, "%.*g", digits, v);
        if (strtod(tmp, NULL) == v) break;
    }
    if (!strpbrk(tmp, ".eE")) strcat(tmp, ".0");
    puts_(j, tmp);
}

void ce_json_fixed(ce_json *j, double v, int decimals) {
    before_value(j);
    if (!isfinite(v)) {
        puts_(j, "null");
        return;
    }
    char tmp[64];
    snprintf(tmp, sizeof tmp, "%.*f", decimals, v);
    puts_(j, tmp);
}

void ce_json_int(ce_json *j, long long v) {
    before_value(j);
    char tmp[32];
    snprintf(tmp, sizeof tmp, "%lld", v);
    puts_(j, tmp);
}

void ce_json_bool(ce_json *j, int v) { before_value(j); puts_(j, v ? "true" : "false"); }
void ce_json_null(ce_json *j) { before_value(j); puts_(j, "null"); }

void ce_json_numbers(ce_json *j, const double *v, size_t n) {
    ce_json_begin_array(j);
    for (size_t i = 0; i < n; ++i) ce_json_number(j, v[i]);
    ce_json_end_array(j);
}
