/* A relay's challenge, answered with the sgemm probe's own code (reactor only).
 *
 * Protocol (web/challenges.py): the relay names a seed and an order n; the node computes C = A * B with the
 * probe's inputs (ce_sgemm_inputs) and kernel, and commits to C by the root of a Merkle tree whose leaves are
 * C's rows. Only then does the relay name rows; the node opens each with the row's bytes and the sibling
 * hashes on its path, and the relay recomputes those rows itself. Committing first is what makes the
 * opened rows evidence for the whole product: a node cannot know which rows it must get right.
 *
 * Tree: leaf = SHA-256(0x00 || row bytes, fp32 little-endian); node = SHA-256(0x01 || left || right)
 * (RFC 6962's domain separation, so a leaf can never pass for a node); the leaf count is padded to a power
 * of two with all-zero hashes. capsule/challenge.py verifies proofs and holds a reference implementation.
 */
#include "challenge.h"
#include "probe.h"
#include "sgemm.h"
#include "sha256.h"

#include <stdlib.h>
#include <string.h>

static float *g_c;          /* the committed product, n x n */
static int g_n;
static uint8_t *g_tree;     /* levels bottom-up: width leaves, then width/2 nodes, ..., 1 root; 32 B each */
static int g_width;         /* leaves, a power of two >= n */

void ce_challenge_release(void) {
    free(g_c);
    free(g_tree);
    g_c = NULL;
    g_tree = NULL;
    g_n = g_width = 0;
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

int ce_challenge_sgemm(uint64_t seed, int n) {
    ce_challenge_release();
    if (n < 1 || n > CE_CHALLENGE_MAX_N) return 2;
    size_t count = (size_t)n * n;
    int width = 1;
    while (width < n) width *= 2;
    float *a = malloc(count * sizeof *a), *b = malloc(count * sizeof *b);
    g_c = malloc(count * sizeof *g_c);
    g_tree = calloc((size_t)(2 * width - 1), 32);
    if (!a || !b || !g_c || !g_tree) {
        free(a);
        free(b);
        ce_challenge_release();
        return 1;
    }
    ce_sgemm_inputs(seed, n, a, b);
    int rc = ce_sgemm(n, n, n, a, n, b, n, g_c, n);
    free(a);
    free(b);
    ce_sgemm_release();
    if (rc != 0) {
        ce_challenge_release();
        return 1;
    }
    static const uint8_t leaf_tag = 0;
    for (int i = 0; i < n; ++i) { /* padding leaves stay all-zero (calloc) */
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
    g_width = width;
    return 0;
}

const uint8_t *ce_challenge_root(void) { return g_tree ? g_tree + (size_t)(2 * g_width - 2) * 32 : NULL; }

const float *ce_challenge_row(int i) { return (g_c && i >= 0 && i < g_n) ? g_c + (size_t)i * g_n : NULL; }

int ce_challenge_proof(int i, uint8_t *out) {
    if (!g_tree || i < 0 || i >= g_n) return -1;
    int count = 0;
    uint8_t *level = g_tree;
    for (int w = g_width, k = i; w > 1; w /= 2, k /= 2, ++count) {
        memcpy(out + (size_t)count * 32, level + (size_t)(k ^ 1) * 32, 32);
        level += (size_t)w * 32;
    }
    return count;
}
