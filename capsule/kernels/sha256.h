#ifndef CE_SHA256_H
#define CE_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t state[8];
    uint64_t length;
    uint8_t block[64];
    size_t used;
} ce_sha256;

/* FIPS 180-4's round constants and initial hash value. */
extern const uint32_t ce_sha256_k[64];
extern const uint32_t ce_sha256_iv[8];

void ce_sha256_init(ce_sha256 *h);
void ce_sha256_update(ce_sha256 *h, const void *data, size_t len);
void ce_sha256_final(ce_sha256 *h, uint8_t out[32]);
/* Writes 64 lowercase hex digits and a NUL into hex. */
void ce_sha256_hex(const void *data, size_t len, char hex[65]);
void ce_hex(const uint8_t *bytes, size_t len, char *out);

#endif
