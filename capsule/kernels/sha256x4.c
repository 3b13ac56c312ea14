/* Four-lane SHA-256 (FIPS 180-4) on 128-bit vectors; see sha256x4.h. Under wasm the lanes are SIMD128
 * i32x4; natively GCC/Clang vector extensions (the tests compare every leaf with hashlib's SHA-256). */
#include "sha256x4.h"
#include "sha256.h"

#include <string.h>

typedef uint32_t u32x4 __attribute__((vector_size(16)));


static inline u32x4 rotr(u32x4 x, int n) { return (x >> n) | (x << (32 - n)); }

static inline uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* One 64-byte block of each lane's message. */
static void compress(u32x4 s[8], const uint8_t *const block[4]) {
    u32x4 w[64];
    for (int t = 0; t < 16; ++t)
        w[t] = (u32x4){be32(block[0] + 4 * t), be32(block[1] + 4 * t), be32(block[2] + 4 * t), be32(block[3] + 4 * t)};
    for (int t = 16; t < 64; ++t) {
        u32x4 s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
        u32x4 s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
        w[t] = w[t - 16] + s0 + w[t - 7] + s1;
    }
    u32x4 a = s[0], b = s[1], c = s[2], d = s[3], e = s[4], f = s[5], g = s[6], h = s[7];
    for (int t = 0; t < 64; ++t) {
        u32x4 t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + ce_sha256_k[t] + w[t];
        u32x4 t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        h = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
    }
    s[0] += a; s[1] += b; s[2] += c; s[3] += d; s[4] += e; s[5] += f; s[6] += g; s[7] += h;
}

void ce_sha256x4_tagged(uint8_t tag, const void *const msg[4], size_t len, uint8_t out[4][32]) {
    u32x4 s[8];
    for (int i = 0; i < 8; ++i) s[i] = (u32x4){ce_sha256_iv[i], ce_sha256_iv[i], ce_sha256_iv[i], ce_sha256_iv[i]};
    size_t total = len + 1;                       /* tag || message */
    size_t padded = (total + 8) / 64 * 64 + 64;   /* room for 0x80 and the 64-bit length */
    uint8_t buf[4][64];
    const uint8_t *block[4];
    for (size_t at = 0; at < padded; at += 64) {
        for (int l = 0; l < 4; ++l) {
            const uint8_t *m = msg[l];
            if (at >= 1 && at + 64 <= total) { /* a whole block inside the message: read it in place */
                block[l] = m + at - 1;
                continue;
            }
            for (size_t k = 0; k < 64; ++k) {
                size_t i = at + k;
                uint8_t v = 0;
                if (i == 0) v = tag;
                else if (i < total) v = m[i - 1];
                else if (i == total) v = 0x80;
                else if (i >= padded - 8) v = (uint8_t)((uint64_t)total * 8 >> (8 * (padded - 1 - i)));
                buf[l][k] = v;
            }
            block[l] = buf[l];
        }
        compress(s, (const uint8_t *const *)block);
    }
    for (int l = 0; l < 4; ++l)
        for (int i = 0; i < 8; ++i) {
            uint32_t v = s[i][l];
            out[l][4 * i] = (uint8_t)(v >> 24); out[l][4 * i + 1] = (uint8_t)(v >> 16);
            out[l][4 * i + 2] = (uint8_t)(v >> 8); out[l][4 * i + 3] = (uint8_t)v;
        }
}
