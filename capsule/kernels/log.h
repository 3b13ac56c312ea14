#ifndef CE_LOG_H
#define CE_LOG_H

/* The human summary of a run. The command writes it to stderr; the reactor hands each line to its host
 * through the import env.ce_log(ptr, len) (the browser shows it, wasmtime-py logs it). */
void ce_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
