// util.h - small file, path, time and UTF-8 helpers shared by every module.
#ifndef KDA_UTIL_H
#define KDA_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/error.h"

// Reads a whole file into a NUL-terminated malloc'd buffer (*n = size without the NUL).
// Returns NULL with "<path>: <strerror>" in err.
char *read_file(const char *path, size_t *n, KdaError *err);

// Writes data to path atomically: path.tmp.<pid>, fsync, rename, fsync of the directory.
// A crash leaves either the old file or the new one, never a half-written file under path.
int write_file_atomic(const char *path, const void *data, size_t n, KdaError *err);

// Atomic write through a FILE*: open_atomic gives a temp file next to path; commit_atomic
// fflush+fsync+rename; abort_atomic removes the temp. tmp_path must hold PATH_MAX bytes.
FILE *open_atomic(const char *path, char *tmp_path, KdaError *err);
int commit_atomic(FILE *f, const char *tmp_path, const char *path, KdaError *err);
void abort_atomic(FILE *f, const char *tmp_path);

int mkdir_p(const char *path, KdaError *err); // like `mkdir -p`
int fsync_dir_of(const char *path);           // fsync the directory holding path
int path_exists(const char *path);
int path_is_dir(const char *path);
// Removes a directory holding plain files only (one level: a checkpoint or HF model dir).
// Best effort: errors are ignored (what cannot be removed stays).
void rmdir_flat(const char *dir);
// Number of entries of directory dir other than . and .. (-1 if it cannot be opened).
int dir_count_entries(const char *dir);
// Atomically swaps two existing paths (renameat2 RENAME_EXCHANGE). -1 with errno set when the
// file system or kernel does not support it (EINVAL, ENOSYS): the caller falls back.
int rename_exchange(const char *a, const char *b);
// Joins dir and name with one '/', into out (size cap). Returns out.
char *path_join(char *out, size_t cap, const char *dir, const char *name);

double now_seconds(void); // monotonic clock

// UTF-8: length of the valid code point starting at s (1..4), or 0 if s[0..n) does not start
// with a valid, shortest-form, non-surrogate encoding.
size_t utf8_valid_prefix(const unsigned char *s, size_t n);
// Decodes one valid code point (call utf8_valid_prefix first); returns its byte length.
size_t utf8_decode(const unsigned char *s, uint32_t *cp);
// Encodes cp (< 0x110000) into out (4 bytes room); returns the byte count.
size_t utf8_encode(uint32_t cp, unsigned char *out);
// The code point at s[i] of s[0..n) (i < n) into *cp; returns its byte length. A byte that does
// not start valid UTF-8 is returned as itself (cp = the byte value, length 1).
size_t utf8_next_lenient(const char *s, size_t n, size_t i, uint32_t *cp);
// 1 if cp is whitespace by Python's str.isspace (ASCII 0x09-0x0D, 0x1C-0x20, and the Unicode
// spaces NEL, NBSP, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000).
int py_isspace(uint32_t cp);

// Replaces every maximal invalid subsequence of s[0..n) with U+FFFD, the rule of Rust's
// String::from_utf8_lossy (what HF tokenizers' ByteLevel decoder applies) and of the Unicode
// "substitution of maximal subparts". out needs room for 3*n bytes; returns the bytes written.
size_t utf8_lossy(const unsigned char *s, size_t n, unsigned char *out);

// s[0..n) as shown inside a one-line message: control bytes escaped (\n, \t, \xNN), cut after
// `max` input bytes with "..."; writes at most cap bytes into buf (cap >= 8: stops early rather
// than overflow) and returns buf. Keeps values from files from breaking an error line.
const char *str_shown(const char *s, size_t n, size_t max, char *buf, size_t cap);

// Levenshtein distance of a and b (the first 63 bytes of each), '-' and '_' equal.
int str_edit_distance(const char *a, const char *b);
// The name of names[0..n) closest to s by str_edit_distance when it is close (at most a third
// of s's length, at least 2 edits allowed), else NULL. For "did you mean" hints.
const char *str_closest(const char *s, const char *const *names, int n);

// bf16 <-> fp32 (round to nearest even; NaN stays NaN).
static inline float bf16_to_f32(uint16_t h) {
    union {
        uint32_t u;
        float f;
    } v = {.u = (uint32_t)h << 16};
    return v.f;
}
static inline uint16_t f32_to_bf16(float f) {
    union {
        float f;
        uint32_t u;
    } v = {.f = f};
    if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40); // quiet NaN
    v.u += 0x7fffu + ((v.u >> 16) & 1u);
    return (uint16_t)(v.u >> 16);
}
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

#endif
