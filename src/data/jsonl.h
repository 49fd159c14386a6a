// jsonl.h - JSON-lines files, plain or gzip-compressed, read whole and handed to a callback one
// parsed row at a time: lm-eval task files (T.jsonl[.gz]) and OLMo request files
// (requests.jsonl.gz). kda tokenize streams its much larger corpora through readers.h instead.
#ifndef KDA_DATA_JSONL_H
#define KDA_DATA_JSONL_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h" // defines: KdaError
#include "core/json.h"  // defines: JsonValue

// Reads the whole file at path, gunzipping it when it is gzip data (zlib's gzread passes a
// plain file through unchanged). Returns a malloc'd, NUL-terminated buffer of *n bytes (the
// caller frees it), or NULL with err set: "LABEL: PATH: cannot open" or "LABEL: PATH: read or
// decompression error". label names the caller's unit of work (a task name) in errors.
char *jsonl_read_all(const char *label, const char *path, size_t *n, KdaError *err);

// Called once per row; row is borrowed (valid for the call only), line is 1-based. Returns 0 to
// go on, a positive value to stop early (not an error), or -1 with err set.
typedef int (*JsonlRowFn)(void *ctx, const JsonValue *row, int64_t line, KdaError *err);

// Calls fn for every line of path that is not whitespace only (Python's str.isspace, as
// lm-eval's reader skips them), in order, until fn returns nonzero. Returns 0 (also after an
// early stop), or -1: the file cannot be read (jsonl_read_all's errors), a line is not JSON
// ("LABEL: PATH:LINE: malformed JSON: ..."), or fn failed (its err kept as it wrote it).
// Single-threaded; holds the whole file in memory for the call.
int jsonl_for_each(const char *label, const char *path, JsonlRowFn fn, void *ctx, KdaError *err);

#endif
