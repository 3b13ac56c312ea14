/* The capsule's WASI command: parses arguments, runs the probes, prints one JSON ProbeReport on stdout
 * and a human summary on stderr. Exit 0 on success, 2 with a one-line error on bad input, 1 when the
 * host runs out of memory. The same file builds natively (tests and the side-by-side benchmark). */
#include "driver.h"
#include "probe.h"
#include "sha256.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

void ce_log(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
}

double ce_clock_anchor_unix_ms(void) {
    static double anchor = -1.0;
    if (anchor < 0) { /* realtime - monotonic, read back to back; the smallest gap of a few tries */
        double best_gap = 1e300;
        for (int i = 0; i < 5; ++i) {
            struct timespec real;
            int64_t m0 = ce_now_ns();
            clock_gettime(CLOCK_REALTIME, &real);
            int64_t m1 = ce_now_ns();
            double real_ms = (double)real.tv_sec * 1e3 + (double)real.tv_nsec * 1e-6;
            if ((double)(m1 - m0) < best_gap) {
                best_gap = (double)(m1 - m0);
                anchor = real_ms - (double)(m0 + m1) * 0.5e-6;
            }
        }
    }
    return anchor;
}

int main(int argc, char **argv) {
    ce_options o;
    char error[768] = "";
    ce_options_default(&o);
    int rc = ce_parse_args(argc, argv, &o, error, sizeof error);
    if (rc) {
        fprintf(stderr, "capsule: %s\n", error);
        return rc;
    }
    if (o.help) {
        printf("%s\n", CE_USAGE);
        return 0;
    }
    if (o.seed_hex[0] == '\0') {
        unsigned char entropy[32];
        if (getentropy(entropy, sizeof entropy) != 0) {
            fprintf(stderr, "capsule: no entropy source for a random seed; pass --seed HEX\n");
            return 1;
        }
        ce_hex(entropy, sizeof entropy, o.seed_hex);
    }
    ce_json j;
    ce_json_init(&j);
    rc = ce_run_report(&o, &j, error, sizeof error);
    if (rc == 0) {
        fputs(j.buf, stdout);
        fputc('\n', stdout);
    } else {
        fprintf(stderr, "capsule: %s\n", error);
    }
    ce_json_free(&j);
    return rc;
}
