// error.c - error reporting and checked allocation.
#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int kda_fail(KdaError *err, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}

void kda_die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("kda: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

void kda_usage_die(const char *command, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("kda: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (%s --help)\n", command);
    va_end(ap);
    exit(2);
}

void kda_abort_at(const char *file, int line, const char *what) {
    fprintf(stderr, "kda: fatal: %s (%s:%d)\n", what, file, line);
    abort();
}

static void out_of_memory(size_t n, const char *file, int line) {
    char what[128];
    snprintf(what, sizeof what, "out of memory allocating %zu bytes", n);
    kda_abort_at(file, line, what);
}

void *kda_malloc_at(size_t n, const char *file, int line) {
    void *p = malloc(n ? n : 1);
    if (!p) out_of_memory(n, file, line);
    return p;
}

void *kda_calloc_at(size_t count, size_t size, const char *file, int line) {
    if (size && count > (size_t)-1 / size) out_of_memory((size_t)-1, file, line);
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) out_of_memory(count * size, file, line);
    return p;
}

void *kda_realloc_at(void *p, size_t n, const char *file, int line) {
    void *q = realloc(p, n ? n : 1);
    if (!q) out_of_memory(n, file, line);
    return q;
}

char *kda_strdup_at(const char *s, const char *file, int line) {
    size_t n = strlen(s) + 1;
    char *d = kda_malloc_at(n, file, line);
    memcpy(d, s, n);
    return d;
}
