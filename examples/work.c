/* A small WASI command for dispatched-job tests and benchmarks (issue 44): deterministic work whose output
 * anyone can recompute with `wasmtime run build/work.wasm SEED N`, plus modes that misbehave on purpose.
 *
 *   work SEED N     N rounds of a 64-bit mix from SEED; prints "SEED N HEX" (~1 ns a round)
 *   work cat        copies stdin to stdout
 *   work exit CODE  exits with CODE
 *   work trap       traps (unreachable)
 *   work loop       never ends (only the wall clock or fuel stops it)
 *   work alloc MIB  allocates and touches MIB MiB
 *   work flood      writes to stdout without end
 *   work fs         tries to read /etc/passwd and to write a file in the current directory; prints what happened
 *   work random     prints 16 random bytes and both clocks: the same on every node for one task (docs/jobs.md)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static uint64_t mix(uint64_t x) {
    x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27; x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: work SEED N | cat | exit CODE | trap | loop | alloc MIB | flood | fs\n"); return 2; }
    const char *mode = argv[1];
    if (strcmp(mode, "cat") == 0) {
        char buf[4096]; size_t n;
        while ((n = fread(buf, 1, sizeof buf, stdin)) > 0) fwrite(buf, 1, n, stdout);
        return 0;
    }
    if (strcmp(mode, "exit") == 0 && argc > 2) return atoi(argv[2]);
    if (strcmp(mode, "trap") == 0) __builtin_trap();
    if (strcmp(mode, "loop") == 0) { volatile uint64_t x = 1; for (;;) x = mix(x); }
    if (strcmp(mode, "alloc") == 0 && argc > 2) {
        long mib = atol(argv[2]);
        volatile unsigned sum = 0;
        for (long i = 0; i < mib; i++) {
            volatile char *p = malloc(1 << 20);
            if (!p) { printf("allocation failed after %ld MiB\n", i); return 3; }
            for (int j = 0; j < (1 << 20); j += 4096) p[j] = (char)i;
            sum += p[(i * 4096) % (1 << 20)];
        }
        printf("allocated %ld MiB (%u)\n", mib, sum);
        return 0;
    }
    if (strcmp(mode, "flood") == 0) { for (;;) fputs("flood flood flood flood flood flood flood flood\n", stdout); }
    if (strcmp(mode, "random") == 0) {
        unsigned char b[16];
        if (getentropy(b, sizeof b) != 0) return 4;
        struct timespec rt, mono;
        clock_gettime(CLOCK_REALTIME, &rt);
        clock_gettime(CLOCK_MONOTONIC, &mono);
        for (size_t i = 0; i < sizeof b; i++) printf("%02x", b[i]);
        printf(" %lld.%09ld %lld.%09ld\n", (long long)rt.tv_sec, rt.tv_nsec, (long long)mono.tv_sec, mono.tv_nsec);
        return 0;
    }
    if (strcmp(mode, "fs") == 0) {
        FILE *f = fopen("/etc/passwd", "r");
        printf("read /etc/passwd: %s\n", f ? "opened" : "refused");
        FILE *g = fopen("written.txt", "w");
        printf("write ./written.txt: %s\n", g ? "opened" : "refused");
        return 0;
    }
    if (argc < 3) { fprintf(stderr, "work: expected SEED N\n"); return 2; }
    uint64_t x = strtoull(argv[1], NULL, 10), n = strtoull(argv[2], NULL, 10);
    for (uint64_t i = 0; i < n; i++) x = mix(x + i);
    printf("%s %s %016llx\n", argv[1], argv[2], (unsigned long long)x);
    return 0;
}
