// fixtures.c - synthetic Megatron datasets for the tests (fixtures.h).
#include "fixtures.h"

#include "data/indexed.h" // defines: IndexedBuilder, indexed_builder_*

int test_write_docs(const char *prefix, TestDocs s, KdaError *err) {
    if (s.n_docs < 1 || s.len < 0 || s.len > 64 || s.mod < 1)
        return kda_fail(err, "test_write_docs: bad spec (n_docs %d, len %d, mod %d)", s.n_docs,
                        s.len, s.mod);
    IndexedBuilder b;
    if (indexed_builder_open(&b, prefix, IDX_DTYPE_UINT16, err)) return -1;
    int32_t tok[64];
    for (int d = 0; d < s.n_docs; d++) {
        int n = s.len ? s.len : 20 + (d * 7) % 40;
        for (int k = 0; k < n; k++)
            tok[k] = s.base + (d + s.stride * k) % s.mod;
        if (indexed_builder_add(&b, tok, n, err)) {
            indexed_builder_abort(&b);
            return -1;
        }
        indexed_builder_end_document(&b);
    }
    return indexed_builder_finish(&b, err);
}
