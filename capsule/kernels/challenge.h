#ifndef CE_CHALLENGE_H
#define CE_CHALLENGE_H

#include <stdint.h>

/* Largest order a challenge may ask for, and the most memory its products may take (a phone's budget). */
#define CE_CHALLENGE_MAX_N 2048
#define CE_CHALLENGE_MAX_BYTES (64u << 20)

/* Computes C_t = A_t * B_t for t < reps (the sgemm probe's inputs for seed + t * golden, order n) and one
 * Merkle tree over all their rows; keeps both for the openings. Returns 0, 1 (out of memory) or 2 (n outside
 * [1, CE_CHALLENGE_MAX_N], reps < 1, or the products beyond CE_CHALLENGE_MAX_BYTES). */
int ce_challenge_sgemm(uint64_t seed, int n, int reps);
/* The 32-byte root of the last challenge's tree, or NULL. */
const uint8_t *ce_challenge_root(void);
/* Leaf i (row i % n of product i / n; n floats), or NULL. */
const float *ce_challenge_row(int i);
/* Writes leaf i's sibling hashes, leaf level first (32 bytes each), into out; returns their count or -1. */
int ce_challenge_proof(int i, uint8_t *out);
void ce_challenge_release(void);

#endif
