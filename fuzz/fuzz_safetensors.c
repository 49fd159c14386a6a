// fuzz_safetensors.c - libFuzzer target for the safetensors parser (st_parse only: no files).
//
// Build: make fuzz BUILD=build-st   (clang -fsanitize=fuzzer,address,undefined)
// Run:   build-st/fuzz/fuzz_safetensors -max_total_time=600 fuzz/corpus-st fuzz/corpus/safetensors
// Besides memory safety it checks the parser's contract on every accepted input: each tensor
// lies inside the byte buffer, nbytes == numel * itemsize, the ranges tile the buffer, lookups
// find every name, and st_to_f32 can read every element.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"

static void check_accepted(const SafeTensors *st, const uint8_t *data, size_t size) {
    uint64_t hn;
    memcpy(&hn, data, 8);
    const uint8_t *buffer = data + 8 + hn;
    size_t total = 0;
    for (int64_t i = 0; i < st->n_tensors; i++) {
        const StTensor *t = &st->tensors[i];
        const uint8_t *p = t->data;
        if (p < buffer || p + t->nbytes > data + size) abort();
        if (t->nbytes != (size_t)t->numel * st_dtype_size(t->dtype)) abort();
        if (st_find(st, t->name) != t) abort();
        total += t->nbytes;
        if (t->numel <= 4096) { // reads every byte of the tensor through the converter
            float *out = malloc((size_t)(t->numel ? t->numel : 1) * sizeof *out);
            KdaError err;
            if (st_to_f32(t, out, &err) != 0) abort();
            free(out);
        }
    }
    if (total != size - 8 - hn) abort(); // exact tiling: sizes add up to the buffer
    for (int64_t i = 0; i < st->n_meta; i++)
        if (st_meta(st, st->meta_keys[i]) != st->meta_vals[i]) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    SafeTensors st;
    KdaError err;
    if (st_parse(&st, data, size, "fuzz", &err) == 0) {
        check_accepted(&st, data, size);
        st_close(&st);
    } else if (strchr(err.msg, '\n') || err.msg[0] == 0) {
        abort(); // every rejection gives one non-empty line
    }
    return 0;
}
