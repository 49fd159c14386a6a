// fuzz_tokenizer_json.c - libFuzzer target for tokenizer loading from memory (tok_load_buffer):
// HF tokenizer.json, and the tiktoken format when the first byte is '#'. A tokenizer that loads
// must then encode and decode without memory errors: it encodes a fixed text and the input
// itself (both with and without special-token splitting), checks every id is in the vocabulary
// and that decoding gives back exactly the bytes encoded (every byte must have a token for that,
// so the round trip is checked only when all 256 single-byte tokens exist).
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tok/tok.h"

static void exercise(const KdaTokenizer *t, const char *text, size_t n) {
    int all_bytes = 1;
    for (int b = 0; b < 256 && all_bytes; b++) {
        char c = (char)b;
        TokIds one = {0};
        KdaError e;
        tok_encode(t, &c, 1, 0, &one, &e);
        all_bytes = one.n == 1;
        tok_ids_free(&one);
    }
    for (int flags = 0; flags <= TOK_SPECIALS; flags += TOK_SPECIALS) {
        TokIds ids = {0};
        TokBytes out = {0};
        KdaError err;
        if (tok_encode(t, text, n, flags, &ids, &err)) abort();
        for (size_t i = 0; i < ids.n; i++)
            if (ids.ids[i] < 0 || ids.ids[i] >= tok_vocab_size(t)) abort();
        if (tok_decode(t, ids.ids, ids.n, &out, &err)) abort();
        if (all_bytes && (out.n != n || memcmp(out.data, text, n))) abort();
        tok_ids_free(&ids);
        tok_bytes_free(&out);
    }
    for (int32_t id = -1; id <= tok_vocab_size(t) && id < 4096; id++) {
        size_t len;
        const char *s = tok_id_to_token(t, id, &len);
        if (s && tok_token_to_id(t, s, len) < 0) abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *buf = malloc(size ? size : 1); // exact-size copy so ASan sees overreads
    if (!buf) return 0;
    memcpy(buf, data, size);
    TokFormat fmt = size && buf[0] == '#' ? TOK_FORMAT_TIKTOKEN : TOK_FORMAT_HF_JSON;
    size_t skip = fmt == TOK_FORMAT_TIKTOKEN ? 1 : 0;
    KdaTokenizer *t = NULL;
    KdaError err;
    if (tok_load_buffer(&t, buf + skip, size - skip, fmt, NULL, &err) == 0) {
        static const char text[] = "Hello world<|endoftext|>  it's 12345\n\n\t\xe4\xb8\xad\xc3\xa9 "
                                   "\xff\xfe<|begin_of_text|> x";
        exercise(t, text, sizeof text - 1);
        exercise(t, buf, size);
        tok_free(t);
    } else if (t != NULL || !err.msg[0]) {
        abort(); // failure must leave *out NULL and say why
    }
    free(buf);
    return 0;
}
