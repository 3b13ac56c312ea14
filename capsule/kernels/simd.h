/* 128-bit float vectors, one source for wasm SIMD128 and native builds.
 *
 * Under wasm the operations are the wasm_simd128.h intrinsics; natively they are GCC/Clang vector
 * extensions, which lower to SSE on x86-64 and NEON on arm64. The benchmark compares the capsule with
 * "the same C built natively with 128-bit vectors", and the reference model's token hash must match
 * across both builds, so every operation here is plain IEEE mul/add (no fused multiply-add) and the
 * horizontal sum has one fixed order. Build with -ffp-contract=off.
 */
#ifndef CE_SIMD_H
#define CE_SIMD_H

#include <string.h>

#if defined(__wasm_simd128__)
#include <wasm_simd128.h>
typedef v128_t vf4;
static inline vf4 vf4_load(const float *p) { return wasm_v128_load(p); }
static inline void vf4_store(float *p, vf4 v) { wasm_v128_store(p, v); }
static inline vf4 vf4_splat(float x) { return wasm_f32x4_splat(x); }
static inline vf4 vf4_zero(void) { return wasm_f32x4_splat(0.0f); }
static inline vf4 vf4_add(vf4 a, vf4 b) { return wasm_f32x4_add(a, b); }
static inline vf4 vf4_mul(vf4 a, vf4 b) { return wasm_f32x4_mul(a, b); }
static inline float vf4_lane(vf4 v, int i) {
    switch (i) {
    case 0: return wasm_f32x4_extract_lane(v, 0);
    case 1: return wasm_f32x4_extract_lane(v, 1);
    case 2: return wasm_f32x4_extract_lane(v, 2);
    default: return wasm_f32x4_extract_lane(v, 3);
    }
}
#define CE_SIMD_NAME "wasm-simd128"
#else
typedef float vf4 __attribute__((vector_size(16)));
static inline vf4 vf4_load(const float *p) { vf4 v; memcpy(&v, p, sizeof v); return v; }
static inline void vf4_store(float *p, vf4 v) { memcpy(p, &v, sizeof v); }
static inline vf4 vf4_splat(float x) { vf4 v = {x, x, x, x}; return v; }
static inline vf4 vf4_zero(void) { vf4 v = {0.0f, 0.0f, 0.0f, 0.0f}; return v; }
static inline vf4 vf4_add(vf4 a, vf4 b) { return a + b; }
static inline vf4 vf4_mul(vf4 a, vf4 b) { return a * b; }
static inline float vf4_lane(vf4 v, int i) { return v[i]; }
#define CE_SIMD_NAME "native-vector-128"
#endif

/* acc + a*b as two rounded operations (never fused), identical in every build. */
static inline vf4 vf4_muladd(vf4 acc, vf4 a, vf4 b) { return vf4_add(acc, vf4_mul(a, b)); }

/* Sum of the four lanes in one fixed order: (l0 + l1) + (l2 + l3). */
static inline float vf4_hsum(vf4 v) {
    return (vf4_lane(v, 0) + vf4_lane(v, 1)) + (vf4_lane(v, 2) + vf4_lane(v, 3));
}

#endif
