// cmd_encode.c - `kda encode` (text on stdin -> JSON id array on stdout) and `kda decode`
// (JSON id array on stdin -> text bytes on stdout).
#include <stdio.h>
#include <stdlib.h>

#include "cli/commands.h"
#include "core/args.h" // defines: ArgSpec, ArgTable, args_parse_or_die
#include "core/json.h" // defines: JsonDoc, json_parse
#include "core/util.h" // defines: utf8_lossy
#include "tok/tok.h"   // defines: KdaTokenizer, tok_load, tok_encode, tok_decode

#define DEFAULT_TOKENIZER "assets/tokenizers/llama3/tokenizer.json"

static char *read_stdin(size_t *n) {
    size_t cap = 1 << 16, len = 0;
    char *buf = kda_malloc(cap);
    for (;;) {
        if (len == cap) buf = kda_realloc(buf, cap *= 2);
        size_t r = fread(buf + len, 1, cap - len, stdin);
        len += r;
        if (r == 0) break;
    }
    if (ferror(stdin)) kda_die("reading stdin failed");
    *n = len;
    return buf;
}

static KdaTokenizer *load_or_die(const char *path) {
    KdaTokenizer *t;
    KdaError err;
    if (tok_load(&t, path, &err)) kda_die("%s", err.msg);
    return t;
}

int cmd_encode(int argc, char **argv) {
    const char *path = DEFAULT_TOKENIZER;
    int bos = 0, eos = 0, specials = 0, post = 1;
    ArgSpec specs[] = {
        {"tokenizer", ARG_STR, &path, "tokenizer.json or tiktoken tokenizer.model", 0},
        {"add-special-tokens", ARG_BOOL, &post,
         "apply tokenizer.json's post_processor, as HF add_special_tokens=True (Llama 3.2: BOS)",
         0},
        {"bos", ARG_BOOL, &bos, "prepend the BOS token (unless the post_processor did)", 0},
        {"eos", ARG_BOOL, &eos, "append the EOS token", 0},
        {"specials", ARG_BOOL, &specials,
         "recognise special tokens written in the text (e.g. <|eot_id|>); off: plain text", 0},
    };
    ArgTable table = {"kda encode", "tokenize stdin (UTF-8 text) and print the ids as a JSON array",
                      NULL, specs, (int)(sizeof specs / sizeof *specs)};
    if (args_parse_or_die(&table, argc, argv)) return 0;
    KdaTokenizer *t = load_or_die(path);
    size_t n;
    char *text = read_stdin(&n);
    TokIds ids = {0};
    KdaError err;
    int flags = (bos ? TOK_ADD_BOS : 0) | (eos ? TOK_ADD_EOS : 0) | (specials ? TOK_SPECIALS : 0) |
                (post ? TOK_POST : 0);
    if (tok_encode(t, text, n, flags, &ids, &err)) kda_die("%s: %s", path, err.msg);
    putchar('[');
    for (size_t i = 0; i < ids.n; i++)
        printf(i ? ", %d" : "%d", ids.ids[i]);
    printf("]\n");
    tok_ids_free(&ids);
    free(text);
    tok_free(t);
    return fflush(stdout) ? 1 : 0;
}

int cmd_decode(int argc, char **argv) {
    const char *path = DEFAULT_TOKENIZER;
    int raw = 0;
    ArgSpec specs[] = {
        {"tokenizer", ARG_STR, &path, "tokenizer.json or tiktoken tokenizer.model", 0},
        {"raw", ARG_BOOL, &raw, "write the token bytes as they are (no UTF-8 repair)", 0},
    };
    ArgTable table = {"kda decode",
                      "read a JSON array of token ids on stdin, write the decoded text to stdout",
                      "Invalid UTF-8 in the decoded bytes (a character split across tokens) is "
                      "replaced by U+FFFD\nper maximal invalid subsequence, as HF tokenizers' "
                      "decode does; --raw keeps the bytes.",
                      specs, 2};
    if (args_parse_or_die(&table, argc, argv)) return 0;
    KdaTokenizer *t = load_or_die(path);
    size_t n;
    char *in = read_stdin(&n);
    JsonDoc doc;
    KdaError err;
    if (json_parse(&doc, in, n, &err)) kda_die("stdin: %s", err.msg);
    if (doc.root.type != JSON_ARRAY) kda_die("stdin: expected a JSON array of token ids");
    int32_t *ids = kda_malloc((doc.root.len + 1) * sizeof *ids);
    for (size_t i = 0; i < doc.root.len; i++) {
        const JsonValue *v = &doc.root.items[i];
        if (v->type != JSON_NUMBER || !v->is_int || v->i < 0 || v->i >= tok_vocab_size(t))
            kda_die("stdin: element %zu: expected a token id in [0, %d)", i, tok_vocab_size(t));
        ids[i] = (int32_t)v->i;
    }
    TokBytes out = {0};
    if (tok_decode(t, ids, doc.root.len, &out, &err)) kda_die("%s", err.msg);
    if (raw) {
        fwrite(out.data, 1, out.n, stdout);
    } else {
        unsigned char *text = kda_malloc(3 * out.n + 1);
        fwrite(text, 1, utf8_lossy((const unsigned char *)out.data, out.n, text), stdout);
        free(text);
    }
    tok_bytes_free(&out);
    free(ids);
    json_free(&doc);
    free(in);
    tok_free(t);
    return fflush(stdout) ? 1 : 0;
}
