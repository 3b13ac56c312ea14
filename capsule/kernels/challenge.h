#ifndef CE_CHALLENGE_H
#define CE_CHALLENGE_H

#include <stdint.h>

/* Largest order a challenge may ask for, and the most products one may name (only each product's 32-byte
 * root is kept: a product is recomputed when one of its rows is opened, so memory is three n x n arrays). */
#define CE_CHALLENGE_MAX_N 2048
#define CE_CHALLENGE_MAX_PRODUCTS 65536

/* The leaf form of the challenges begun after it: 1, each row's high halves ("high16", the default); 0, whole
 * rows ("fp32": what a relay that does not offer "high16" checks). Returns 0, or 2 for another value. */
int ce_challenge_leaf_form(int high16);
/* Starts a challenge of at most `reps` products of order n from `seed`; computes nothing yet. Returns 0,
 * 1 (out of memory) or 2 (n outside [1, CE_CHALLENGE_MAX_N] or reps outside [1, CE_CHALLENGE_MAX_PRODUCTS]). */
int ce_challenge_begin(uint64_t seed, int n, int reps);
/* Computes the next `count` products (each: its inputs, the product, the BLAKE3 leaf of every row and the
 * product's root). Returns how many are done in all, or -1 (no challenge begun, or out of memory). */
int ce_challenge_next(int count);
/* Commits to the first k products done (1 <= k <= done): the root over their roots. Returns 0 or 2. */
int ce_challenge_commit(int k);
/* begin + every product + commit(reps), in one call (0, 1 or 2 as ce_challenge_begin). */
int ce_challenge_sgemm(uint64_t seed, int n, int reps);
/* The 32-byte root of the last commitment, or NULL. */
const uint8_t *ce_challenge_root(void);
/* Leaf i of the commitment (row i % n of product i / n; n floats; the product recomputed if it is not the
 * one held), or NULL. Valid until the next call into the challenge. */
const float *ce_challenge_row(int i);
/* Writes leaf i's sibling hashes, leaf level first (32 bytes each), into out; returns their count or -1. */
int ce_challenge_proof(int i, uint8_t *out);
void ce_challenge_release(void);

#endif
