/* exp, sin and cos computed the same way in every build.
 *
 * libm differs between wasi-libc (musl) and glibc in the last bit, and a one-ulp difference in a logit
 * can flip a greedy argmax, which would break the promise that anyone can recompute the reference
 * model's token ids from the seed. These use only IEEE double add/mul/floor (exact everywhere when
 * built with -ffp-contract=off) with a range reduction and Taylor polynomials; accurate to ~1e-15
 * relative on the ranges the model uses.
 */
#ifndef CE_DETMATH_H
#define CE_DETMATH_H

#include <stdint.h>
#include <string.h>

static inline double ce_exp(double x) {
    if (x < -700.0) return 0.0;
    if (x > 700.0) x = 700.0;
    const double ln2_hi = 6.93147180369123816490e-01, ln2_lo = 1.90821492927058770002e-10;
    double kf = __builtin_floor(x * 1.44269504088896338700 + 0.5);
    double r = (x - kf * ln2_hi) - kf * ln2_lo; /* |r| <= ln2/2 */
    double term = 1.0, sum = 1.0;
    for (int i = 1; i <= 13; ++i) {
        term = term * r / (double)i;
        sum = sum + term;
    }
    int64_t k = (int64_t)kf;
    uint64_t bits = (uint64_t)(k + 1023) << 52; /* 2^k, k in [-1010, 1010] */
    double scale;
    memcpy(&scale, &bits, sizeof scale);
    return sum * scale;
}

/* exp for activations, flushing results below FLT_MIN to zero: wasm has no flush-to-zero mode and
 * denormal arithmetic is 10-100x slower on x86, which would make the timing depend on the seed. */
static inline float ce_expf_nodenormal(float x) {
    if (x < -87.0f) return 0.0f;
    return (float)ce_exp((double)x);
}

/* sin(r) and cos(r) for |r| <= pi/4. */
static inline double ce_sin_small(double r) {
    double r2 = r * r, term = r, sum = r;
    for (int i = 1; i <= 9; ++i) {
        term = -term * r2 / (double)((2 * i) * (2 * i + 1));
        sum = sum + term;
    }
    return sum;
}

static inline double ce_cos_small(double r) {
    double r2 = r * r, term = 1.0, sum = 1.0;
    for (int i = 1; i <= 9; ++i) {
        term = -term * r2 / (double)((2 * i - 1) * (2 * i));
        sum = sum + term;
    }
    return sum;
}

/* sin and cos of x for |x| up to ~1e5 (Cody-Waite reduction by pi/2 in three parts). */
static inline void ce_sincos(double x, double *s, double *c) {
    const double p1 = 1.57079632673412561417e+00, p2 = 6.07710050630396597660e-11,
                 p3 = 2.02226624879595063154e-21;
    double kf = __builtin_floor(x * 6.36619772367581382433e-01 + 0.5);
    double r = ((x - kf * p1) - kf * p2) - kf * p3;
    double sr = ce_sin_small(r), cr = ce_cos_small(r);
    switch ((int64_t)kf & 3) {
    case 0: *s = sr; *c = cr; break;
    case 1: *s = cr; *c = -sr; break;
    case 2: *s = -sr; *c = -cr; break;
    default: *s = -cr; *c = sr; break;
    }
}

#endif
