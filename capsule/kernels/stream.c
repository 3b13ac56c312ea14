/* STREAM kernels. Plain loops: clang (wasm32 + simd128) and gcc/clang natively both vectorize them to
 * 128-bit f64x2 operations, so the capsule and the native reference run the same code shape. */
#include "stream.h"

void ce_stream_copy(size_t n, double *restrict c, const double *restrict a) {
    for (size_t j = 0; j < n; ++j) c[j] = a[j];
}

void ce_stream_scale(size_t n, double *restrict b, const double *restrict c, double scalar) {
    for (size_t j = 0; j < n; ++j) b[j] = scalar * c[j];
}

void ce_stream_add(size_t n, double *restrict c, const double *restrict a, const double *restrict b) {
    for (size_t j = 0; j < n; ++j) c[j] = a[j] + b[j];
}

void ce_stream_triad(size_t n, double *restrict a, const double *restrict b, const double *restrict c,
                     double scalar) {
    for (size_t j = 0; j < n; ++j) a[j] = b[j] + scalar * c[j];
}
