#ifndef CE_BLAKE3X4_H
#define CE_BLAKE3X4_H

#include <stddef.h>
#include <stdint.h>

/* BLAKE3 (hash mode, or keyed_hash mode with a key) of four messages of the same length at once, 32-byte
 * output each: out[i] = BLAKE3(msg[i][0..len)). Four 32-bit lanes of a 128-bit vector carry the four
 * messages, one lane each (the challenge's leaves are equal-length rows, its tree nodes equal-length
 * pairs). BLAKE3's 7 rounds of add-xor-rotate cost about a third of SHA-256's 64 rounds per byte, which is
 * what lets a challenge's commitment stay a small share of its products (capsule/kernels/challenge.c). The
 * tests compare every output with the PyPI `blake3` package (the Rust reference). */
void ce_blake3x4(const void *const msg[4], size_t len, const uint8_t key[32] /* NULL: hash mode */,
                 uint8_t out[4][32]);

#endif
