// jsonl.c - whole-file JSON-lines reading (plain or gzip) with a per-row callback (jsonl.h).
#include "data/jsonl.h"

#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "core/util.h" // defines: utf8_next_lenient, py_isspace

char *jsonl_read_all(const char *label, const char *path, size_t *n, KdaError *err) {
    gzFile f = gzopen(path, "rb");
    if (!f) return kda_fail(err, "%s: %s: cannot open", label, path), NULL;
    char *buf = NULL;
    size_t len = 0, cap = 0;
    char chunk[65536];
    int k;
    while ((k = gzread(f, chunk, sizeof chunk)) > 0) {
        if (len + (size_t)k + 1 > cap) {
            cap = (len + (size_t)k + 1) * 2 + 16;
            buf = kda_realloc(buf, cap);
        }
        memcpy(buf + len, chunk, (size_t)k);
        len += (size_t)k;
    }
    int bad = k < 0;
    gzclose(f);
    if (bad)
        return free(buf), kda_fail(err, "%s: %s: read or decompression error", label, path), NULL;
    if (!buf) buf = kda_realloc(NULL, 1);
    buf[len] = 0;
    *n = len;
    return buf;
}

// 1 if s[0..n) holds Python whitespace only (or nothing).
static int blank(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        i += utf8_next_lenient(s, n, i, &cp);
        if (!py_isspace(cp)) return 0;
    }
    return 1;
}

int jsonl_for_each(const char *label, const char *path, JsonlRowFn fn, void *ctx, KdaError *err) {
    size_t n;
    char *text = jsonl_read_all(label, path, &n, err);
    if (!text) return -1;
    int64_t line = 0;
    int r = 0;
    for (char *p = text; p < text + n && r == 0;) {
        char *nl = memchr(p, '\n', (size_t)(text + n - p));
        size_t len = nl ? (size_t)(nl - p) : (size_t)(text + n - p);
        line++;
        if (!blank(p, len)) {
            JsonDoc doc;
            KdaError e2;
            if (json_parse(&doc, p, len, &e2)) {
                kda_fail(err, "%s: %s:%lld: malformed JSON: %s", label, path, (long long)line,
                         e2.msg);
                r = -1;
                break;
            }
            r = fn(ctx, &doc.root, line, err);
            json_free(&doc);
        }
        p += len + 1;
    }
    free(text);
    return r < 0 ? -1 : 0;
}
