/* Packed, register-blocked fp32 GEMM for 128-bit vectors (Goto/BLIS loop order).
 *
 * Method: B is packed into KC x NR panels, A into MR x KC panels in which every element is stored
 * pre-broadcast (four copies), so the micro-kernel's inner loop is loads, multiplies and adds only;
 * a splat inside that loop costs ~60% of the throughput under wasmtime (measured, ARCHITECTURE.md).
 * The micro-kernel keeps an MR x NR = 3 x 12 tile of C in nine vector registers, which with three
 * B vectors and one A vector fits the 16 registers of SSE/NEON hosts without spills.
 * Ragged edges are zero-padded while packing and written back through a small tile buffer.
 */
#include "sgemm.h"
#include "simd.h"

#include <stdlib.h>

enum {
    MR = 3,    /* rows of the C tile held in registers */
    NR = 12,   /* columns of the C tile: three vectors of four */
    KC = 256,  /* depth of one packed block: an MR x KC pre-broadcast A panel is 12 KiB (L1) */
    MC = 96,   /* rows of a packed A block: 96 x 256 x 16 B = 384 KiB (L2) */
    NC = 2052, /* columns of a packed B block: 2 MiB (L2/L3), a multiple of NR */
};

static float *g_pack_a; /* MC * KC * 4 floats */
static float *g_pack_b; /* KC * NC floats */

void ce_sgemm_release(void) {
    free(g_pack_a);
    free(g_pack_b);
    g_pack_a = NULL;
    g_pack_b = NULL;
}

static int ensure_workspace(void) {
    if (!g_pack_a) g_pack_a = aligned_alloc(16, sizeof(float) * MC * KC * 4);
    if (!g_pack_b) g_pack_b = aligned_alloc(16, sizeof(float) * KC * NC);
    return (g_pack_a && g_pack_b) ? 0 : -1;
}

/* Packs rows [0, mc) x depth [0, kc) of A into MR-row panels, each element broadcast to 4 lanes. */
static void pack_a(int mc, int kc, const float *a, int lda, float *dst) {
    for (int i0 = 0; i0 < mc; i0 += MR) {
        for (int p = 0; p < kc; ++p) {
            for (int i = 0; i < MR; ++i) {
                float v = (i0 + i < mc) ? a[(size_t)(i0 + i) * lda + p] : 0.0f;
                vf4_store(dst, vf4_splat(v));
                dst += 4;
            }
        }
    }
}

/* Packs depth [0, kc) x columns [0, nc) of B into NR-column panels, zero-padding the last one. */
static void pack_b(int kc, int nc, const float *b, int ldb, float *dst) {
    for (int j0 = 0; j0 < nc; j0 += NR) {
        int w = nc - j0 < NR ? nc - j0 : NR;
        for (int p = 0; p < kc; ++p) {
            const float *src = b + (size_t)p * ldb + j0;
            if (w == NR) {
                vf4_store(dst + 0, vf4_load(src + 0));
                vf4_store(dst + 4, vf4_load(src + 4));
                vf4_store(dst + 8, vf4_load(src + 8));
            } else {
                for (int j = 0; j < NR; ++j) dst[j] = j < w ? src[j] : 0.0f;
            }
            dst += NR;
        }
    }
}

/* tile[MR][NR] = sum over p < kc of Apanel[p][i] * Bpanel[p][j]. */
static void micro_kernel(int kc, const float *ap, const float *bp, float *tile) {
    vf4 c00 = vf4_zero(), c01 = vf4_zero(), c02 = vf4_zero();
    vf4 c10 = vf4_zero(), c11 = vf4_zero(), c12 = vf4_zero();
    vf4 c20 = vf4_zero(), c21 = vf4_zero(), c22 = vf4_zero();
    for (int p = 0; p < kc; ++p) {
        vf4 b0 = vf4_load(bp + 0), b1 = vf4_load(bp + 4), b2 = vf4_load(bp + 8);
        vf4 a0 = vf4_load(ap + 0);
        c00 = vf4_muladd(c00, a0, b0); c01 = vf4_muladd(c01, a0, b1); c02 = vf4_muladd(c02, a0, b2);
        vf4 a1 = vf4_load(ap + 4);
        c10 = vf4_muladd(c10, a1, b0); c11 = vf4_muladd(c11, a1, b1); c12 = vf4_muladd(c12, a1, b2);
        vf4 a2 = vf4_load(ap + 8);
        c20 = vf4_muladd(c20, a2, b0); c21 = vf4_muladd(c21, a2, b1); c22 = vf4_muladd(c22, a2, b2);
        ap += MR * 4;
        bp += NR;
    }
    vf4_store(tile + 0, c00); vf4_store(tile + 4, c01); vf4_store(tile + 8, c02);
    vf4_store(tile + 12, c10); vf4_store(tile + 16, c11); vf4_store(tile + 20, c12);
    vf4_store(tile + 24, c20); vf4_store(tile + 28, c21); vf4_store(tile + 32, c22);
}

/* C[rows x cols] (+)= tile, where accumulate is 0 for the first depth block. */
static void store_tile(const float *tile, int rows, int cols, float *c, int ldc, int accumulate) {
    for (int i = 0; i < rows; ++i) {
        float *dst = c + (size_t)i * ldc;
        const float *src = tile + i * NR;
        if (accumulate) {
            for (int j = 0; j < cols; ++j) dst[j] += src[j];
        } else {
            for (int j = 0; j < cols; ++j) dst[j] = src[j];
        }
    }
}

int ce_sgemm(int m, int n, int k, const float *a, int lda, const float *b, int ldb, float *c, int ldc) {
    if (m <= 0 || n <= 0) return 0;
    if (k <= 0) {
        for (int i = 0; i < m; ++i)
            for (int j = 0; j < n; ++j) c[(size_t)i * ldc + j] = 0.0f;
        return 0;
    }
    if (ensure_workspace() != 0) return -1;
    float tile[MR * NR] __attribute__((aligned(16)));
    for (int jc = 0; jc < n; jc += NC) {
        int nc = n - jc < NC ? n - jc : NC;
        for (int pc = 0; pc < k; pc += KC) {
            int kc = k - pc < KC ? k - pc : KC;
            pack_b(kc, nc, b + (size_t)pc * ldb + jc, ldb, g_pack_b);
            for (int ic = 0; ic < m; ic += MC) {
                int mc = m - ic < MC ? m - ic : MC;
                pack_a(mc, kc, a + (size_t)ic * lda + pc, lda, g_pack_a);
                for (int jr = 0; jr < nc; jr += NR) {
                    const float *bp = g_pack_b + (size_t)jr * kc;
                    int cols = nc - jr < NR ? nc - jr : NR;
                    for (int ir = 0; ir < mc; ir += MR) {
                        const float *ap = g_pack_a + (size_t)ir * kc * 4;
                        int rows = mc - ir < MR ? mc - ir : MR;
                        micro_kernel(kc, ap, bp, tile);
                        store_tile(tile, rows, cols, c + (size_t)(ic + ir) * ldc + jc + jr, ldc, pc > 0);
                    }
                }
            }
        }
    }
    return 0;
}
