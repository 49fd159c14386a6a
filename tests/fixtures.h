// fixtures.h - synthetic inputs shared by the tests: small Megatron datasets of a known pattern.
#ifndef KDA_TEST_FIXTURES_H
#define KDA_TEST_FIXTURES_H

#include "core/error.h" // defines: KdaError

// Token k of document d is base + (d + stride * k) % mod; documents have len tokens each, or
// with len 0 the lengths 20 + (7 d) % 40 (20 .. 59, so documents straddle sequence boundaries).
typedef struct {
    int n_docs;
    int len; // 1 .. 64, or 0: 20 + (7 d) % 40
    int stride, mod, base;
} TestDocs;

// The tests' usual corpus: {n_docs, 0, 3, 40, 10}: ids 10 .. 49 (inside any vocabulary >= 50).
#define TEST_DOCS(n) ((TestDocs){.n_docs = (n), .len = 0, .stride = 3, .mod = 40, .base = 10})

// Writes prefix.bin / prefix.idx (uint16 ids, one document per spec document). Returns 0, or
// -1 with err set (a bad spec, or any write error). Not thread-safe per prefix.
int test_write_docs(const char *prefix, TestDocs spec, KdaError *err);

#endif
