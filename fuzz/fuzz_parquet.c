// fuzz_parquet.c - libFuzzer target for the Parquet text-column reader (parquet_open_buffer +
// parquet_next) from memory. The reader decodes the Thrift compact footer and page headers,
// dictionary and RLE/bit-packed levels, and four codecs: every offset and length comes from the
// file. Contract checked on top of the sanitizers: every returned value lies inside a buffer the
// reader owns or inside the input (ASan checks the read), rows_read never exceeds the footer's
// row count, and every error message is one non-empty line.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data/parquet.h"

static void check_message(const KdaError *err) {
    if (!err->msg[0] || strchr(err->msg, '\n')) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    // Copy so that ASan sees reads past the end of exactly `size` bytes.
    unsigned char *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    ParquetReader *r = NULL;
    KdaError err = {{0}};
    if (parquet_open_buffer(&r, buf, size, "fuzz.parquet", "text", &err) == 0) {
        const char *s;
        size_t len;
        int is_null, rc;
        volatile unsigned char sink = 0;
        while ((rc = parquet_next(r, &s, &len, &is_null, &err)) == 1) {
            if (!is_null && len) sink ^= (unsigned char)(s[0] ^ s[len - 1]); // touch both ends
            if (parquet_rows_read(r) > parquet_num_rows(r)) abort();
        }
        if (rc < 0) check_message(&err);
        (void)sink;
        parquet_close(r);
    } else {
        check_message(&err);
    }
    free(buf);
    return 0;
}
