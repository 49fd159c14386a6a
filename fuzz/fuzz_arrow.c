// fuzz_arrow.c - libFuzzer target for the Arrow IPC reader (arrow_open) from memory.
// An accepted table must render every row as valid JSON (the row accessors cannot fail, so any
// out-of-bounds read is a reader bug that ASan reports); a rejection must give a one-line
// message. Seeds: tests/data/eval/*.arrow and the HF files under tests/data/eval/hf_datasets.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "data/arrow.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    // Copy so that ASan sees reads past the end of exactly `size` bytes.
    unsigned char *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    ArrowTable t;
    KdaError err;
    if (arrow_open(&t, buf, size, "fuzz.arrow", &err) == 0) {
        ArrowText txt = {0};
        int64_t rows = t.n_rows < 64 ? t.n_rows : 64; // bound the work per input
        for (int64_t r = 0; r < rows; r++) {
            arrow_row_json(&t, r, &txt);
            JsonDoc d;
            if (json_parse(&d, txt.data, txt.n, &err)) abort(); // invalid JSON from a row
            json_free(&d);
        }
        free(txt.data);
        arrow_free(&t);
    } else if (!err.msg[0] || strchr(err.msg, '\n')) {
        abort();
    }
    free(buf);
    return 0;
}
