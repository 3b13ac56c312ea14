#ifndef CE_CHALLENGE_H
#define CE_CHALLENGE_H

#include <stdint.h>

/* Largest order a challenge may ask for: A, B and C of 2048^2 fp32 are 48 MiB, within a phone's budget. */
#define CE_CHALLENGE_MAX_N 2048

/* Computes C = A * B (the sgemm probe's inputs for seed, order n) and its Merkle tree over rows; keeps both
 * for the openings. Returns 0, 1 (out of memory) or 2 (n outside [1, CE_CHALLENGE_MAX_N]). */
int ce_challenge_sgemm(uint64_t seed, int n);
/* The 32-byte root of the last challenge's tree, or NULL. */
const uint8_t *ce_challenge_root(void);
/* Row i of the committed product (n floats), or NULL. */
const float *ce_challenge_row(int i);
/* Writes row i's sibling hashes, leaf level first (32 bytes each), into out; returns their count or -1. */
int ce_challenge_proof(int i, uint8_t *out);
void ce_challenge_release(void);

#endif
