#ifndef CE_CLOCK_H
#define CE_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Monotonic wall clock in nanoseconds. WASI offers no CPU-time clock, so every figure is wall time;
 * the driver reports the clock's resolution and per-call overhead beside the results. */
static inline int64_t ce_now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

#endif
