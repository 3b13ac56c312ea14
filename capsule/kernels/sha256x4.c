/* Four-lane SHA-256 (FIPS 180-4) on 128-bit vectors; see sha256x4.h. Under wasm the lanes are SIMD128
 * i32x4; natively GCC/Clang vector extensions (the tests compare every leaf with hashlib's SHA-256). */
#include "sha256x4.h"

#include <string.h>

typedef uint32_t u32x4 __attribute__((vector_size(16)));

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

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
        u32x4 t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K[t] + w[t];
        u32x4 t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        h = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
    }
    s[0] += a; s[1] += b; s[2] += c; s[3] += d; s[4] += e; s[5] += f; s[6] += g; s[7] += h;
}

void ce_sha256x4_tagged(uint8_t tag, const void *const msg[4], size_t len, uint8_t out[4][32]) {
    u32x4 s[8] = {{0x6a09e667, 0x6a09e667, 0x6a09e667, 0x6a09e667}, {0xbb67ae85, 0xbb67ae85, 0xbb67ae85, 0xbb67ae85},
                  {0x3c6ef372, 0x3c6ef372, 0x3c6ef372, 0x3c6ef372}, {0xa54ff53a, 0xa54ff53a, 0xa54ff53a, 0xa54ff53a},
                  {0x510e527f, 0x510e527f, 0x510e527f, 0x510e527f}, {0x9b05688c, 0x9b05688c, 0x9b05688c, 0x9b05688c},
                  {0x1f83d9ab, 0x1f83d9ab, 0x1f83d9ab, 0x1f83d9ab}, {0x5be0cd19, 0x5be0cd19, 0x5be0cd19, 0x5be0cd19}};
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
