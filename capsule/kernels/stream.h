#ifndef CE_STREAM_H
#define CE_STREAM_H

#include <stddef.h>

/* The four STREAM kernels over n doubles (McCalpin's definitions). */
void ce_stream_copy(size_t n, double *c, const double *a);
void ce_stream_scale(size_t n, double *b, const double *c, double scalar);
void ce_stream_add(size_t n, double *c, const double *a, const double *b);
void ce_stream_triad(size_t n, double *a, const double *b, const double *c, double scalar);

/* Bytes each kernel moves per element under STREAM's counting rules (reads + writes, 8 B each). */
enum { CE_STREAM_COPY_BYTES = 16, CE_STREAM_SCALE_BYTES = 16, CE_STREAM_ADD_BYTES = 24, CE_STREAM_TRIAD_BYTES = 24 };

#endif
