#ifndef CE_SGEMM_H
#define CE_SGEMM_H

#include <stddef.h>

/* C = A * B in fp32, row-major: A is m x k (row stride lda), B is k x n (ldb), C is m x n (ldc).
 * Returns 0, or -1 when the packing workspace cannot be allocated. */
int ce_sgemm(int m, int n, int k, const float *a, int lda, const float *b, int ldb, float *c, int ldc);

/* Releases the packing workspace kept between calls. */
void ce_sgemm_release(void);

#endif
