/* Four-lane BLAKE3 (the BLAKE3 paper's compression, chunking and tree; see blake3x4.h). Under wasm the lanes
 * are SIMD128 i32x4; natively GCC/Clang vector extensions. Rotations by 16 and 8 are byte shuffles. */
#include "blake3x4.h"

#include <string.h>

typedef uint32_t u32x4 __attribute__((vector_size(16)));
typedef uint8_t u8x16 __attribute__((vector_size(16)));

enum { CHUNK_START = 1, CHUNK_END = 2, PARENT = 4, ROOT = 8, KEYED_HASH = 16 };
enum { BLOCK = 64, CHUNK = 1024, MAX_DEPTH = 54 };

static const uint32_t IV[8] = {0x6A09E667, 0xBB67AE85, 0x3C6EF372, 0xA54FF53A,
                               0x510E527F, 0x9B05688C, 0x1F83D9AB, 0x5BE0CD19};
static const uint8_t SCHEDULE[7][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8},
    {3, 4, 10, 12, 13, 2, 7, 14, 6, 5, 9, 0, 11, 15, 8, 1}, {10, 7, 12, 9, 14, 3, 13, 15, 4, 0, 11, 2, 5, 8, 1, 6},
    {12, 13, 9, 11, 15, 10, 14, 8, 7, 2, 5, 3, 0, 1, 6, 4}, {9, 14, 11, 5, 8, 12, 15, 1, 13, 3, 0, 10, 2, 6, 4, 7},
    {11, 15, 5, 0, 1, 9, 8, 6, 14, 10, 2, 12, 3, 4, 7, 13}};

static inline u32x4 splat(uint32_t x) { return (u32x4){x, x, x, x}; }
static inline u32x4 rotr16(u32x4 x) {
    return (u32x4)__builtin_shufflevector((u8x16)x, (u8x16)x, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13);
}
static inline u32x4 rotr8(u32x4 x) {
    return (u32x4)__builtin_shufflevector((u8x16)x, (u8x16)x, 1, 2, 3, 0, 5, 6, 7, 4, 9, 10, 11, 8, 13, 14, 15, 12);
}
static inline u32x4 rotr12(u32x4 x) { return (x >> 12) | (x << 20); }
static inline u32x4 rotr7(u32x4 x) { return (x >> 7) | (x << 25); }

#define G(a, b, c, d, x, y)                                                                                    \
    do {                                                                                                       \
        a = a + b + (x); d = rotr16(d ^ a); c = c + d; b = rotr12(b ^ c);                                     \
        a = a + b + (y); d = rotr8(d ^ a); c = c + d; b = rotr7(b ^ c);                                       \
    } while (0)

/* cv <- the first half of BLAKE3's compression of block m (each lane its own cv and block; counter, length
 * and flags shared: the four messages have the same shape). */
static void compress4(u32x4 cv[8], const u32x4 m[16], uint64_t counter, uint32_t block_len, uint32_t flags) {
    u32x4 v0 = cv[0], v1 = cv[1], v2 = cv[2], v3 = cv[3], v4 = cv[4], v5 = cv[5], v6 = cv[6], v7 = cv[7];
    u32x4 v8 = splat(IV[0]), v9 = splat(IV[1]), v10 = splat(IV[2]), v11 = splat(IV[3]);
    u32x4 v12 = splat((uint32_t)counter), v13 = splat((uint32_t)(counter >> 32)), v14 = splat(block_len),
          v15 = splat(flags);
    /* unrolled (constant schedule indices): the message words stay in registers where they fit */
#pragma clang loop unroll(full)
    for (int r = 0; r < 7; ++r) {
        const uint8_t *s = SCHEDULE[r];
        G(v0, v4, v8, v12, m[s[0]], m[s[1]]);
        G(v1, v5, v9, v13, m[s[2]], m[s[3]]);
        G(v2, v6, v10, v14, m[s[4]], m[s[5]]);
        G(v3, v7, v11, v15, m[s[6]], m[s[7]]);
        G(v0, v5, v10, v15, m[s[8]], m[s[9]]);
        G(v1, v6, v11, v12, m[s[10]], m[s[11]]);
        G(v2, v7, v8, v13, m[s[12]], m[s[13]]);
        G(v3, v4, v9, v14, m[s[14]], m[s[15]]);
    }
    cv[0] = v0 ^ v8; cv[1] = v1 ^ v9; cv[2] = v2 ^ v10; cv[3] = v3 ^ v11;
    cv[4] = v4 ^ v12; cv[5] = v5 ^ v13; cv[6] = v6 ^ v14; cv[7] = v7 ^ v15;
}

static inline u32x4 load(const uint8_t *p) {
    u32x4 x;
    memcpy(&x, p, 16); /* little-endian words, as BLAKE3 reads them (wasm and x86 are little-endian) */
    return x;
}

/* m[w] = word w of each lane's 64-byte block: four loads per lane, then 4x4 transposes. */
static void load_block(const uint8_t *const p[4], u32x4 m[16]) {
    for (int q = 0; q < 4; ++q) {
        u32x4 a = load(p[0] + 16 * q), b = load(p[1] + 16 * q), c = load(p[2] + 16 * q), d = load(p[3] + 16 * q);
        u32x4 ab_lo = __builtin_shufflevector(a, b, 0, 4, 1, 5), ab_hi = __builtin_shufflevector(a, b, 2, 6, 3, 7);
        u32x4 cd_lo = __builtin_shufflevector(c, d, 0, 4, 1, 5), cd_hi = __builtin_shufflevector(c, d, 2, 6, 3, 7);
        m[4 * q + 0] = __builtin_shufflevector(ab_lo, cd_lo, 0, 1, 4, 5);
        m[4 * q + 1] = __builtin_shufflevector(ab_lo, cd_lo, 2, 3, 6, 7);
        m[4 * q + 2] = __builtin_shufflevector(ab_hi, cd_hi, 0, 1, 4, 5);
        m[4 * q + 3] = __builtin_shufflevector(ab_hi, cd_hi, 2, 3, 6, 7);
    }
}

static void parent(const u32x4 key[8], const u32x4 left[8], u32x4 right_and_out[8], uint32_t flags) {
    u32x4 m[16];
    for (int i = 0; i < 8; ++i) { m[i] = left[i]; m[8 + i] = right_and_out[i]; }
    for (int i = 0; i < 8; ++i) right_and_out[i] = key[i];
    compress4(right_and_out, m, 0, BLOCK, flags | PARENT);
}

void ce_blake3x4(const void *const msg[4], size_t len, const uint8_t key_bytes[32], uint8_t out[4][32]) {
    uint32_t flags = key_bytes ? KEYED_HASH : 0;
    u32x4 key[8], cv[8], stack[MAX_DEPTH][8];
    for (int i = 0; i < 8; ++i) {
        uint32_t w = IV[i];
        if (key_bytes) memcpy(&w, key_bytes + 4 * i, 4);
        key[i] = splat(w);
    }
    size_t chunks = len == 0 ? 1 : (len + CHUNK - 1) / CHUNK;
    int depth = 0;
    uint8_t pad[4][BLOCK];
    for (size_t c = 0; c < chunks; ++c) {
        size_t start = c * CHUNK, clen = len - start < CHUNK ? len - start : CHUNK;
        size_t blocks = clen == 0 ? 1 : (clen + BLOCK - 1) / BLOCK;
        memcpy(cv, key, sizeof cv);
        for (size_t b = 0; b < blocks; ++b) {
            size_t at = start + b * BLOCK, blen = clen - b * BLOCK < BLOCK ? clen - b * BLOCK : BLOCK;
            uint32_t f = flags | (b == 0 ? CHUNK_START : 0) | (b + 1 == blocks ? CHUNK_END : 0);
            if (chunks == 1 && b + 1 == blocks) f |= ROOT;
            const uint8_t *p[4];
            for (int l = 0; l < 4; ++l) {
                p[l] = (const uint8_t *)msg[l] + at;
                if (blen < BLOCK) { /* the last, partial block: zero-padded, its length in the compression */
                    memset(pad[l], 0, BLOCK);
                    if (blen) memcpy(pad[l], p[l], blen);
                    p[l] = pad[l];
                }
            }
            u32x4 m[16];
            load_block(p, m);
            compress4(cv, m, c, (uint32_t)blen, f);
        }
        if (c + 1 == chunks) break; /* the last chunk's cv is merged below, the root among them */
        for (size_t total = c + 1; (total & 1) == 0; total >>= 1) parent(key, stack[--depth], cv, flags);
        memcpy(stack[depth++], cv, sizeof cv);
    }
    while (depth > 0) {
        --depth;
        parent(key, stack[depth], cv, flags | (depth == 0 ? ROOT : 0));
    }
    for (int l = 0; l < 4; ++l)
        for (int i = 0; i < 8; ++i) memcpy(out[l] + 4 * i, (const uint32_t *)&cv[i] + l, 4);
}
