#ifndef CE_CLOCK_H
#define CE_CLOCK_H

#include <stdint.h>

/* Monotonic wall clock in nanoseconds. WASI offers no CPU-time clock, so every figure is wall time;
 * the driver reports the clock's source, resolution and per-call overhead beside the results.
 *
 * The command build reads CLOCK_MONOTONIC. The reactor build has no WASI: its host passes the clock in
 * as the import env.ce_clock_us (microseconds since the unix epoch as a double: performance.timeOrigin +
 * performance.now() in a Web Worker, time.time_ns()/1e3 anchored on perf_counter_ns in wasmtime-py), so
 * every instance of a page or a process reads one shared timeline. */
#ifdef CE_REACTOR
__attribute__((import_module("env"), import_name("ce_clock_us"))) double ce_host_clock_us(void);
static inline int64_t ce_now_ns(void) { return (int64_t)(ce_host_clock_us() * 1e3); }
#else
#include <time.h>
static inline int64_t ce_now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}
#endif

/* Unix time in ms of ce_now_ns() == 0, so that spans reported by instances that do not share a
 * monotonic clock (one wasmtime WASI context each) can be placed on one timeline. Measured once. */
double ce_clock_anchor_unix_ms(void);

#endif
