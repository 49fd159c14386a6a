// fuzz_idx.c - libFuzzer target for the Megatron .idx parser (indexed_index_parse) from memory.
// On success every accessor must stay inside the buffer: walk all documents and sequences.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data/indexed.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    // Copy so that ASan sees reads past the end of exactly `size` bytes.
    unsigned char *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    IndexedIndex idx;
    KdaError err;
    if (indexed_index_parse(&idx, buf, size, "fuzz.idx", &err) == 0) {
        int64_t total = 0;
        for (int64_t d = 0; d < idx.n_docs; d++) {
            int64_t first, end;
            indexed_index_doc_range(&idx, d, &first, &end);
            if (first < 0 || end < first || end > idx.n_seq) abort();
            for (int64_t s = first; s < end; s++) {
                int32_t len = indexed_index_length(&idx, s);
                int64_t ptr = indexed_index_pointer(&idx, s);
                if (len < 0 || ptr < 0 || ptr + (int64_t)len * idx.itemsize > idx.bin_size) abort();
                total += len;
            }
        }
        if (idx.doc_base == 0 && total != idx.n_tokens) abort(); // docs cover all sequences
    }
    free(buf);
    return 0;
}
