/* The reactor variant of the capsule: no main, the kernels exported for hosts that drive them directly
 * (wasmtime-py for the whole-CPU figure and tests, Web Workers in browsers). Pointers are offsets into
 * the module's exported memory; allocate with ce_alloc and release with ce_free. */
#include "llm.h"
#include "sgemm.h"
#include "stream.h"

#include <stdint.h>
#include <stdlib.h>

#define EXPORT(name) __attribute__((export_name(name)))

EXPORT("ce_alloc") void *x_alloc(size_t bytes) { return aligned_alloc(16, (bytes + 15) & ~(size_t)15); }
EXPORT("ce_free") void x_free(void *p) { free(p); }

EXPORT("ce_sgemm") int x_sgemm(int m, int n, int k, const float *a, int lda, const float *b, int ldb, float *c, int ldc) {
    return ce_sgemm(m, n, k, a, lda, b, ldb, c, ldc);
}
EXPORT("ce_sgemm_release") void x_sgemm_release(void) { ce_sgemm_release(); }

EXPORT("ce_stream_copy") void x_copy(size_t n, double *c, const double *a) { ce_stream_copy(n, c, a); }
EXPORT("ce_stream_scale") void x_scale(size_t n, double *b, const double *c, double s) { ce_stream_scale(n, b, c, s); }
EXPORT("ce_stream_add") void x_add(size_t n, double *c, const double *a, const double *b) { ce_stream_add(n, c, a, b); }
EXPORT("ce_stream_triad") void x_triad(size_t n, double *a, const double *b, const double *c, double s) {
    ce_stream_triad(n, a, b, c, s);
}

/* The seed is passed as two 32-bit halves: JavaScript hosts cannot pass an i64 without BigInt. */
EXPORT("ce_llm_new") ce_llm *x_llm_new(uint32_t seed_lo, uint32_t seed_hi) {
    return ce_llm_new((uint64_t)seed_hi << 32 | seed_lo);
}
EXPORT("ce_llm_free") void x_llm_free(ce_llm *m) { ce_llm_free(m); }
EXPORT("ce_llm_forward") int x_llm_forward(ce_llm *m, int token, int pos) { return ce_llm_forward(m, token, pos); }
EXPORT("ce_llm_logits") const float *x_llm_logits(const ce_llm *m) { return ce_llm_logits(m); }
