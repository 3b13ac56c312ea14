/* disk probe: sequential write (fsync included) and read of one file in the scratch directory.
 *
 * Method: write disk_mib MiB of seeded data in 1 MiB blocks, fsync, close; then ask the kernel to drop
 * the file's cached pages (posix_fadvise DONTNEED, which WASI passes to the host) and read it back,
 * comparing every byte. MB/s = 1e6 bytes/s. WASI cannot open files with O_DIRECT and cannot confirm the
 * page cache was bypassed, so the report says the read may have been served from it.
 */
#include "probe.h"
#include "rng.h"
#include "stats.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef ENOTCAPABLE /* WASI's "not granted by a preopen"; absent natively */
#define ENOTCAPABLE EACCES
#endif

enum { BLOCK = 1 << 20, MIN_SAMPLES = 2, MAX_SAMPLES = 12 };

static int write_all(int fd, const unsigned char *p, size_t len) {
    while (len > 0) {
        size_t want = len < BLOCK ? len : BLOCK;
        ssize_t got = write(fd, p, want);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return -1;
        p += got;
        len -= (size_t)got;
    }
    return 0;
}

static int read_all(int fd, unsigned char *p, size_t len) {
    while (len > 0) {
        size_t want = len < BLOCK ? len : BLOCK;
        ssize_t got = read(fd, p, want);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return -1;
        p += got;
        len -= (size_t)got;
    }
    return 0;
}

/* One write + read pair; returns 0 and the two durations, or -1 with errno set. */
static int sample(const char *path, const unsigned char *data, unsigned char *back, size_t len,
                  double *write_ns, double *read_ns) {
    int64_t t0 = ce_now_ns();
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
    if (fd < 0) return -1;
    if (write_all(fd, data, len) != 0 || fsync(fd) != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    *write_ns = (double)(ce_now_ns() - t0);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    int64_t t1 = ce_now_ns();
    fd = open(path, O_RDONLY);
    if (fd < 0) return -1;
    int rc = read_all(fd, back, len);
    close(fd);
    *read_ns = (double)(ce_now_ns() - t1);
    return rc;
}

static void write_skipped(ce_json *j, const char *reason) {
    ce_json_key(j, "disk");
    ce_json_begin_object(j);
    ce_json_key(j, "write_mbps"); ce_json_null(j);
    ce_json_key(j, "read_mbps"); ce_json_null(j);
    ce_json_key(j, "skipped"); ce_json_string(j, reason);
    ce_json_end_object(j);
    ce_log("  disk    skipped: %s\n", reason);
}

int ce_disk_preflight(const ce_probe_config *config, char *reason, int reason_size) {
    int dir = open(config->scratch, O_RDONLY | O_DIRECTORY);
    if (dir < 0) {
        snprintf(reason, (size_t)reason_size, "no scratch directory %s (%s); grant one with --dir HOSTDIR::%s",
                 config->scratch, strerror(errno), config->scratch);
        if (!config->scratch_required) return 1;
        CE_PROBE_ERROR(config, "the disk probe needs a writable %s: %s", config->scratch, reason);
        return 2;
    }
    close(dir);
    char path[512];
    snprintf(path, sizeof path, "%s/ce-bench-preflight-%016llx.tmp", config->scratch,
             (unsigned long long)config->seed);
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
    if (fd < 0) {
        int err = errno;
        if (err == EROFS || err == EACCES || err == EPERM || err == ENOTCAPABLE)
            CE_PROBE_ERROR(config, "%s is read-only (%s): the disk probe needs to write a %d MiB file there",
                           config->scratch, strerror(err), config->disk_mib);
        else
            CE_PROBE_ERROR(config, "cannot create a file in %s (%s)", config->scratch, strerror(err));
        return 2;
    }
    close(fd);
    unlink(path);
    return 0;
}

int ce_probe_disk(const ce_probe_config *config, ce_json *j) {
    char reason[256];
    int pre = ce_disk_preflight(config, reason, sizeof reason);
    if (pre == 1) {
        write_skipped(j, reason);
        return 0;
    }
    if (pre == 2) return 2;

    char path[512];
    snprintf(path, sizeof path, "%s/ce-bench-disk-%016llx.tmp", config->scratch,
             (unsigned long long)config->seed);
    size_t len = (size_t)config->disk_mib << 20;
    unsigned char *data = malloc(len), *back = malloc(len);
    if (!data || !back) {
        free(data); free(back);
        ce_log("disk: cannot allocate 2 x %d MiB\n", config->disk_mib);
        return 1;
    }
    ce_rng rng = {config->seed ^ 0x6469736bULL};
    for (size_t i = 0; i + 8 <= len; i += 8) {
        uint64_t v = ce_rng_next(&rng);
        memcpy(data + i, &v, 8);
    }

    double w_ns, r_ns;
    int64_t t0 = ce_now_ns();
    if (sample(path, data, back, len, &w_ns, &r_ns) != 0) { /* warm-up */
        int err = errno;
        unlink(path);
        free(data); free(back);
        if (err == EROFS || err == EACCES || err == EPERM || err == ENOTCAPABLE)
            CE_PROBE_ERROR(config, "%s is read-only (%s): the disk probe needs to write a %d MiB file there",
                           config->scratch, strerror(err), config->disk_mib);
        else
            CE_PROBE_ERROR(config, "cannot write and read %s (%s)", path, strerror(err));
        return 2;
    }
    if (ce_check_budget(config, "disk", (double)(ce_now_ns() - t0) * 1e-6, MIN_SAMPLES)) {
        unlink(path);
        free(data); free(back);
        return 2;
    }
    ce_samples wr = {0}, rd = {0};
    int intact = memcmp(data, back, len) == 0;
    int64_t start = ce_now_ns();
    while (intact && ce_want_sample((int)wr.n, MIN_SAMPLES, MAX_SAMPLES, start, config->share_ms)) {
        memset(back, 0, len);
        if (sample(path, data, back, len, &w_ns, &r_ns) != 0) break;
#if defined(CE_INJECT_FAULT) && CE_INJECT_FAULT == 3
        back[len / 2] ^= 0x20; /* test build: storage that flips a bit */
#endif
        intact = memcmp(data, back, len) == 0;
        ce_samples_push(&wr, (double)len / w_ns * 1e3); /* bytes/ns * 1e3 = MB/s */
        ce_samples_push(&rd, (double)len / r_ns * 1e3);
    }
    unlink(path);
    free(data); free(back);
    if (!intact) {
        ce_json_key(j, "disk");
        ce_json_begin_object(j);
        ce_json_key(j, "write_mbps"); ce_json_null(j);
        ce_json_key(j, "read_mbps"); ce_json_null(j);
        ce_json_key(j, "verified"); ce_json_bool(j, 0);
        ce_json_key(j, "check"); ce_json_string(j, "every byte read back vs the bytes written");
        ce_json_key(j, "reason"); ce_json_string(j, "data read back differed from data written");
        ce_json_end_object(j);
        ce_log("  disk    FAILED: data read back differed from data written; no figure reported\n");
        ce_samples_free(&wr); ce_samples_free(&rd);
        return 0;
    }
    if (wr.n == 0) {
        write_skipped(j, "the scratch file could not be rewritten");
        ce_samples_free(&wr); ce_samples_free(&rd);
        return 0;
    }
    ce_stats sw = ce_stats_of(wr.v, wr.n), sr = ce_stats_of(rd.v, rd.n);
    ce_json_key(j, "disk");
    ce_json_begin_object(j);
    ce_json_key(j, "write_mbps"); ce_json_number(j, sw.median);
    ce_json_key(j, "read_mbps"); ce_json_number(j, sr.median);
    ce_json_key(j, "unit"); ce_json_string(j, "MB/s (1e6 bytes/s)");
    ce_json_key(j, "method");
    ce_json_string(j, "sequential 1 MiB writes of one file + fsync, then posix_fadvise(DONTNEED) and a full "
                      "read-back compared byte for byte; first pair is warm-up; median of pairs");
    ce_json_key(j, "file_mib"); ce_json_int(j, config->disk_mib);
    ce_json_key(j, "read_cache");
    ce_json_string(j, "WASI has no O_DIRECT: the read may be served from the host page cache even after "
                      "DONTNEED; treat read_mbps as an upper bound");
    ce_json_key(j, "write_stats"); ce_stats_json(j, &sw);
    ce_json_key(j, "write_samples"); ce_json_numbers(j, wr.v, wr.n);
    ce_json_key(j, "read_stats"); ce_stats_json(j, &sr);
    ce_json_key(j, "read_samples"); ce_json_numbers(j, rd.v, rd.n);
    ce_json_key(j, "verified"); ce_json_bool(j, 1);
    ce_json_end_object(j);
    ce_log("  disk    %8.0f MB/s write (fsync)  %.0f MB/s read (may be page cache), %d MiB file\n",
            sw.median, sr.median, config->disk_mib);
    ce_samples_free(&wr); ce_samples_free(&rd);
    return 0;
}
