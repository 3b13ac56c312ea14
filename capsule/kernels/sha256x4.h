#ifndef CE_SHA256X4_H
#define CE_SHA256X4_H

#include <stddef.h>
#include <stdint.h>

/* SHA-256 of four messages of the same length at once, each prefixed by one tag byte:
 * out[i] = SHA-256(tag || msg[i][0..len)). Four 32-bit lanes of a 128-bit vector carry the four messages
 * (multi-buffer hashing): the challenge's leaves are equal-length rows, and scalar SHA-256 in wasm
 * (~80 MB/s measured on AMD EPYC) would otherwise take ~40% of a challenge's time. */
void ce_sha256x4_tagged(uint8_t tag, const void *const msg[4], size_t len, uint8_t out[4][32]);

#endif
