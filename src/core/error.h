// error.h - error reporting: caller-supplied message buffers, check macros with file:line.
//
// Contract: library functions return 0 on success and -1 on failure, with one human-readable
// line in a caller-supplied KdaError (kda_fail fills it). Only the CLI prints and exits.
// Allocation failure and broken invariants are not recoverable: the KDA_* macros below abort
// with the failing expression, file and line.
#ifndef KDA_ERROR_H
#define KDA_ERROR_H

#include <stddef.h>

typedef struct {
    char msg[1024];
} KdaError;

// Formats msg into err (if non-NULL) and returns -1, so callers can `return kda_fail(...)`.
int kda_fail(KdaError *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// Prints "kda: error: <msg>" to stderr and exits with status 1. CLI code only.
void kda_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

// A usage error (bad flag, missing or malformed argument): "kda: error: <msg> (<command>
// --help)" on stderr, exit status 2 (as getopt/argparse tools do). CLI code only.
void kda_usage_die(const char *command, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));

// Aborts with file:line; used by the macros below.
void kda_abort_at(const char *file, int line, const char *what) __attribute__((noreturn));

void *kda_malloc_at(size_t n, const char *file, int line);
void *kda_calloc_at(size_t count, size_t size, const char *file, int line);
void *kda_realloc_at(void *p, size_t n, const char *file, int line);
char *kda_strdup_at(const char *s, const char *file, int line);

#define kda_malloc(n)     kda_malloc_at((n), __FILE__, __LINE__)
#define kda_calloc(c, s)  kda_calloc_at((c), (s), __FILE__, __LINE__)
#define kda_realloc(p, n) kda_realloc_at((p), (n), __FILE__, __LINE__)
#define kda_strdup(s)     kda_strdup_at((s), __FILE__, __LINE__)

// Invariant that must hold whatever the input; violation is a bug in kda.c itself.
#define KDA_ASSERT(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) kda_abort_at(__FILE__, __LINE__, "assertion failed: " #cond);                 \
    } while (0)

#endif
