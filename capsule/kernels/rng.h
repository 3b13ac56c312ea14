#ifndef CE_RNG_H
#define CE_RNG_H

#include <stdint.h>

/* splitmix64: integer-only, so every build (wasm, native, any CPU) draws the same stream from a seed. */
typedef struct { uint64_t s; } ce_rng;

static inline uint64_t ce_rng_next(ce_rng *r) {
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Uniform in [-1, 1): 24 random bits, exactly representable as a float. */
static inline float ce_rng_uniform(ce_rng *r) {
    return (float)(int32_t)((ce_rng_next(r) >> 40) - (1u << 23)) * (1.0f / (float)(1u << 23));
}

#endif
