/* A relay's challenge, answered with the sgemm probe's kernel (reactor only).
 *
 * Protocol (web/proof/challenges.py, capsule/challenge.py): the relay names a seed, the order n of the probe it
 * checks and at most `reps` products; the node computes C_t = A_t * B for t = 0, 1, ... (B drawn once per
 * instance from the seed, A_t per product from seed + t * golden: every product is a fresh n^3 of work) with
 * the probe's kernel, and, as each product is done, hashes its rows into the product's own Merkle root. At a
 * roll call it stops where its deadline falls and commits to the products it finished (k of them) by one root
 * over their roots. Only then does the relay name rows among those k products; the node opens each with the
 * row's bytes and the sibling hashes on its path (the product is recomputed: only its root was kept), and the
 * relay recomputes entries of those rows itself. Committing first is what makes the opened rows evidence for
 * all k products; counting only the k committed in time is what lets a busy node count what it did.
 *
 * Tree: leaf = BLAKE3 of the row's high halves (the upper 16 bits of each fp32 entry: sign, exponent and 7
 * mantissa bits, as n little-endian uint16; the commit's "leaf": "high16"); node = BLAKE3 keyed with
 * CE_NODE_KEY of (left || right) (a leaf is never a keyed hash, so a leaf can never pass for a node); each
 * level is padded to a power of two with all-zero hashes: n rows per product tree, then the k product roots in
 * the top tree. Why the high halves: hashing is most of the commitment's cost, and half the bytes is half the
 * BLAKE3. The opened row still arrives whole (fp32): its high halves must be the committed ones, and each entry
 * the relay checks must lie within the fp32 summation bound of its recomputation, which is finer than a high
 * half's step for all but the smallest entries (~2^-9 of a typical entry at n = 1024, against 2^-8). So the row
 * is fixed at the commitment as before, and an entry committed wrong fails its check as before.
 * capsule/challenge.py verifies proofs and holds a reference implementation.
 */
#include "challenge.h"
#include "blake3x4.h"
#include "sgemm.h"

#include <stdlib.h>
#include <string.h>
#include <wasm_simd128.h>

/* BLAKE3("ce-bench/v1/merkle-node"): the key of the tree's inner nodes (capsule/challenge.py NODE_KEY) */
static const uint8_t CE_NODE_KEY[32] = {
    0x4e, 0x8b, 0xda, 0x42, 0x72, 0x31, 0x22, 0x31, 0xc1, 0x39, 0xcc, 0xb9, 0x02, 0x1e, 0x3a, 0xa1, 0x4f, 0xf3, 0xd0, 0x52, 0x09, 0x9f, 0x61, 0x2c, 0x1d, 0x3a, 0x2c, 0x50, 0x92, 0x3a, 0xf0, 0xb2
};

#define GOLDEN 0x9e3779b97f4a7c15ULL
#define A_STREAM 0x6368616c2d41ULL /* "chal-A" */
#define B_STREAM 0x6368616c2d42ULL /* "chal-B" */

static uint64_t g_seed;
static int g_n, g_reps, g_done, g_committed = 0;
static int g_width_n, g_width_k;   /* leaves of a product tree, of the top tree (powers of two) */
static float *g_a, *g_b, *g_c;     /* A_t, B, and the product held (g_held) */
static int g_held = -1;
static int g_leaf_high16 = 1;      /* the leaf form (ce_challenge_leaf_form): a setting, kept across challenges */
static uint8_t *g_sub;             /* the held product's tree, levels bottom-up (2 width_n - 1 hashes) */
static uint8_t *g_roots;           /* each product's root, reps x 32 */
static uint8_t *g_top;             /* the committed top tree, levels bottom-up (2 width_k - 1 hashes) */

void ce_challenge_release(void) {
    free(g_a); free(g_b); free(g_c); free(g_sub); free(g_roots); free(g_top);
    g_a = g_b = g_c = NULL;
    g_sub = g_roots = g_top = NULL;
    g_n = g_reps = g_done = g_committed = g_width_n = g_width_k = 0;
    g_held = -1;
    ce_sgemm_release();
}

static int width_of(int count) {
    int w = 1;
    while (w < count) w *= 2;
    return w;
}

/* Two inputs per splitmix64 draw (bits 63..40, then 39..16: 24 random bits each, exact floats in [-1, 1)):
 * element j is half j % 2 of draw j / 2 of the stream started at state. */
static void draw_inputs(uint64_t state, size_t count, float *out) {
    uint64_t s = state;
    for (size_t j = 0; j < count; j += 2) {
        uint64_t z = (s += GOLDEN);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        z ^= z >> 31;
        out[j] = (float)(int32_t)((uint32_t)(z >> 40) - (1u << 23)) * (1.0f / (float)(1u << 23));
        if (j + 1 < count)
            out[j + 1] = (float)(int32_t)((uint32_t)((z >> 16) & 0xffffff) - (1u << 23)) * (1.0f / (float)(1u << 23));
    }
}

/* Hashes `count` equal-length messages of `len` bytes, msg(i) = base + i * stride, four at a time. */
static void hash_many(const uint8_t *base, size_t stride, size_t len, int count, const uint8_t *key, uint8_t *out) {
    for (int i = 0; i < count; i += 4) {
        const void *msg[4];
        uint8_t digests[4][32];
        for (int l = 0; l < 4; ++l) msg[l] = base + (size_t)(i + l < count ? i + l : i) * stride;
        ce_blake3x4(msg, len, key, digests);
        memcpy(out + (size_t)i * 32, digests, (size_t)(count - i < 4 ? count - i : 4) * 32);
    }
}

/* The leaves of the held product's n rows: BLAKE3 of each row's high halves, packed four rows at a time into
 * a scratch that stays in L1 (4 x 2 n bytes; the row itself is read once). */
static void hash_leaves_high16(const float *c, int n, uint8_t *out) {
    static uint16_t scratch[4][CE_CHALLENGE_MAX_N];
    for (int i = 0; i < n; i += 4) {
        const void *msg[4];
        uint8_t digests[4][32];
        for (int l = 0; l < 4; ++l) {
            int r = i + l < n ? i + l : i;
            const float *row = c + (size_t)r * n;
            uint16_t *half = scratch[l];
            int j = 0;
            for (; j + 8 <= n; j += 8) {  /* bytes 2-3 of each float (little-endian): its high half */
                v128_t lo = wasm_v128_load(row + j), hi = wasm_v128_load(row + j + 4);
                wasm_v128_store(half + j, wasm_i8x16_shuffle(lo, hi, 2, 3, 6, 7, 10, 11, 14, 15,
                                                            18, 19, 22, 23, 26, 27, 30, 31));
            }
            for (; j < n; ++j) {
                uint32_t bits;
                memcpy(&bits, row + j, 4);
                half[j] = (uint16_t)(bits >> 16);
            }
            msg[l] = half;
        }
        ce_blake3x4(msg, (size_t)n * 2, NULL, digests);
        memcpy(out + (size_t)i * 32, digests, (size_t)(n - i < 4 ? n - i : 4) * 32);
    }
}

/* The levels above `width` hashes at `level` (contiguous: each pair is the 64-byte message of its node). */
static void build_levels(uint8_t *level, int width) {
    for (int w = width; w > 1; w /= 2) {
        hash_many(level, 64, 64, w / 2, CE_NODE_KEY, level + (size_t)w * 32);
        level += (size_t)w * 32;
    }
}

/* Computes product t into g_c and its tree into g_sub. */
static int compute(int t) {
    size_t count = (size_t)g_n * g_n;
    draw_inputs((g_seed + (uint64_t)t * GOLDEN) ^ A_STREAM, count, g_a);
    if (ce_sgemm(g_n, g_n, g_n, g_a, g_n, g_b, g_n, g_c, g_n) != 0) return -1;
    memset(g_sub, 0, (size_t)(2 * g_width_n - 1) * 32);
    if (g_leaf_high16)
        hash_leaves_high16(g_c, g_n, g_sub);
    else
        hash_many((const uint8_t *)g_c, (size_t)g_n * sizeof *g_c, (size_t)g_n * sizeof *g_c, g_n, NULL, g_sub);
    build_levels(g_sub, g_width_n);
    g_held = t;
    return 0;
}

int ce_challenge_leaf_form(int high16) {
    if (high16 != 0 && high16 != 1) return 2;
    g_leaf_high16 = high16;
    return 0;
}

int ce_challenge_begin(uint64_t seed, int n, int reps) {
    ce_challenge_release();
    if (n < 1 || n > CE_CHALLENGE_MAX_N || reps < 1 || reps > CE_CHALLENGE_MAX_PRODUCTS) return 2;
    size_t count = (size_t)n * n;
    g_width_n = width_of(n);
    g_a = malloc(count * sizeof *g_a);
    g_b = malloc(count * sizeof *g_b);
    g_c = malloc(count * sizeof *g_c);
    g_sub = malloc((size_t)(2 * g_width_n - 1) * 32);
    g_roots = malloc((size_t)reps * 32);
    if (!g_a || !g_b || !g_c || !g_sub || !g_roots) {
        ce_challenge_release();
        return 1;
    }
    g_seed = seed;
    g_n = n;
    g_reps = reps;
    draw_inputs(seed ^ B_STREAM, count, g_b);
    return 0;
}

int ce_challenge_next(int count) {
    if (!g_roots) return -1;
    for (int i = 0; i < count && g_done < g_reps; ++i) {
        if (compute(g_done) != 0) return -1;
        memcpy(g_roots + (size_t)g_done * 32, g_sub + (size_t)(2 * g_width_n - 2) * 32, 32);
        ++g_done;
    }
    return g_done;
}

int ce_challenge_commit(int k) {
    if (!g_roots || k < 1 || k > g_done) return 2;
    free(g_top);
    g_width_k = width_of(k);
    g_top = calloc((size_t)(2 * g_width_k - 1), 32);
    if (!g_top) return 1;
    memcpy(g_top, g_roots, (size_t)k * 32);
    build_levels(g_top, g_width_k);
    g_committed = k;
    return 0;
}

int ce_challenge_sgemm(uint64_t seed, int n, int reps) {
    int rc = ce_challenge_begin(seed, n, reps);
    if (rc != 0) return rc;
    if (ce_challenge_next(reps) != reps) {
        ce_challenge_release();
        return 1;
    }
    return ce_challenge_commit(reps);
}

const uint8_t *ce_challenge_root(void) { return g_top ? g_top + (size_t)(2 * g_width_k - 2) * 32 : NULL; }

/* Holds the product of leaf i (recomputed when another is held); 0, or -1 for a leaf not committed. */
static int hold(int i) {
    if (!g_top || i < 0 || i / g_n >= g_committed) return -1;
    return i / g_n == g_held ? 0 : compute(i / g_n);
}

const float *ce_challenge_row(int i) { return hold(i) == 0 ? g_c + (size_t)(i % g_n) * g_n : NULL; }

int ce_challenge_proof(int i, uint8_t *out) {
    if (hold(i) != 0) return -1;
    int count = 0;
    const uint8_t *level = g_sub;
    for (int w = g_width_n, k = i % g_n; w > 1; w /= 2, k /= 2, ++count) {
        memcpy(out + (size_t)count * 32, level + (size_t)(k ^ 1) * 32, 32);
        level += (size_t)w * 32;
    }
    level = g_top;
    for (int w = g_width_k, k = i / g_n; w > 1; w /= 2, k /= 2, ++count) {
        memcpy(out + (size_t)count * 32, level + (size_t)(k ^ 1) * 32, 32);
        level += (size_t)w * 32;
    }
    return count;
}
