/* A relay's challenge, answered with the sgemm probe's own code (reactor only).
 *
 * Protocol (web/challenges.py): the relay names a seed, the order n of the probe it checks and a number of
 * products; the node computes C_t = A_t * B_t for t < reps with the probe's inputs (ce_sgemm_inputs, seed
 * + t * golden) and kernel, and commits to every C_t by the root of one Merkle tree whose leaves are their
 * rows (product-major: leaf t * n + i is row i of C_t). Only then does the relay name leaves; the node
 * opens each with the row's bytes and the sibling hashes on its path, and the relay recomputes entries of
 * those rows itself. Committing first is what makes the opened rows evidence for all the products: a node
 * cannot know which rows it must get right. Repeating products of the probe's own order (rather than one
 * larger product) keeps the kernel's cache behaviour, and so its speed, that of the figure being checked.
 *
 * Tree: leaf = SHA-256(0x00 || row bytes, fp32 little-endian); node = SHA-256(0x01 || left || right)
 * (RFC 6962's domain separation, so a leaf can never pass for a node); the leaf count is padded to a power
 * of two with all-zero hashes. capsule/challenge.py verifies proofs and holds a reference implementation.
 */
#include "challenge.h"
#include "probe.h"
#include "sgemm.h"
#include "sha256.h"
#include "sha256x4.h"

#include <stdlib.h>
#include <string.h>

static float *g_c;          /* the committed products, reps x n x n */
static int g_n, g_leaves;   /* order, and reps * n rows */
static uint8_t *g_tree;     /* levels bottom-up: width leaves, then width/2 nodes, ..., 1 root; 32 B each */
static int g_width;         /* leaves, a power of two >= reps * n */

void ce_challenge_release(void) {
    free(g_c);
    free(g_tree);
    g_c = NULL;
    g_tree = NULL;
    g_n = g_width = g_leaves = 0;
}

static void hash_node(const uint8_t *left, const uint8_t *right, uint8_t out[32]) {
    static const uint8_t tag = 1;
    ce_sha256 h;
    ce_sha256_init(&h);
    ce_sha256_update(&h, &tag, 1);
    ce_sha256_update(&h, left, 32);
    ce_sha256_update(&h, right, 32);
    ce_sha256_final(&h, out);
}

int ce_challenge_sgemm(uint64_t seed, int n, int reps) {
    ce_challenge_release();
    size_t count = (size_t)n * n;
    if (n < 1 || n > CE_CHALLENGE_MAX_N || reps < 1 || count * (size_t)reps * sizeof(float) > CE_CHALLENGE_MAX_BYTES)
        return 2;
    int leaves = n * reps, width = 1;
    while (width < leaves) width *= 2;
    float *a = malloc(count * sizeof *a), *b = malloc(count * sizeof *b);
    g_c = malloc(count * (size_t)reps * sizeof *g_c);
    g_tree = calloc((size_t)(2 * width - 1), 32);
    if (!a || !b || !g_c || !g_tree) {
        free(a);
        free(b);
        ce_challenge_release();
        return 1;
    }
    int rc = 0;
    for (int t = 0; t < reps && rc == 0; ++t) {
        ce_sgemm_inputs(seed + (uint64_t)t * 0x9e3779b97f4a7c15ULL, n, a, b);
        rc = ce_sgemm(n, n, n, a, n, b, n, g_c + count * (size_t)t, n);
    }
    free(a);
    free(b);
    ce_sgemm_release();
    if (rc != 0) {
        ce_challenge_release();
        return 1;
    }
    static const uint8_t leaf_tag = 0;
    size_t row_bytes = (size_t)n * sizeof *g_c;
    int i = 0;
    for (; i + 4 <= leaves; i += 4) { /* four leaves at a time (multi-buffer SHA-256) */
        const void *rows[4] = {g_c + (size_t)i * n, g_c + (size_t)(i + 1) * n, g_c + (size_t)(i + 2) * n,
                               g_c + (size_t)(i + 3) * n};
        ce_sha256x4_tagged(leaf_tag, rows, row_bytes, (uint8_t(*)[32])(g_tree + (size_t)i * 32));
    }
    for (; i < leaves; ++i) { /* the rest one by one; padding leaves stay all-zero (calloc) */
        ce_sha256 h;
        ce_sha256_init(&h);
        ce_sha256_update(&h, &leaf_tag, 1);
        ce_sha256_update(&h, g_c + (size_t)i * n, (size_t)n * sizeof *g_c);
        ce_sha256_final(&h, g_tree + (size_t)i * 32);
    }
    uint8_t *level = g_tree;
    for (int w = width; w > 1; w /= 2) {
        uint8_t *up = level + (size_t)w * 32;
        for (int i = 0; i < w / 2; ++i) hash_node(level + (size_t)(2 * i) * 32, level + (size_t)(2 * i + 1) * 32, up + (size_t)i * 32);
        level = up;
    }
    g_n = n;
    g_leaves = leaves;
    g_width = width;
    return 0;
}

const uint8_t *ce_challenge_root(void) { return g_tree ? g_tree + (size_t)(2 * g_width - 2) * 32 : NULL; }

const float *ce_challenge_row(int i) { return (g_c && i >= 0 && i < g_leaves) ? g_c + (size_t)i * g_n : NULL; }

int ce_challenge_proof(int i, uint8_t *out) {
    if (!g_tree || i < 0 || i >= g_leaves) return -1;
    int count = 0;
    uint8_t *level = g_tree;
    for (int w = g_width, k = i; w > 1; w /= 2, k /= 2, ++count) {
        memcpy(out + (size_t)count * 32, level + (size_t)(k ^ 1) * 32, 32);
        level += (size_t)w * 32;
    }
    return count;
}
