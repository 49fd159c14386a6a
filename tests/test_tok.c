// test_tok.c - tokenizer: exactness against HF `tokenizers` reference ids (test vectors, whole
// books, both Llama-3 and GPT-2), round trips, vocabulary queries, threads, loader errors.
//
// References come from tools/reference/tokenizer_reference.py (HF tokenizers 0.23.3) and are
// stored as FNV-1a-64 hashes of the little-endian uint32 ids: per test case, and per block of
// 256 ids for the books. A mismatch reports the first differing case/block, its text position
// and our ids there. Ids must match exactly (no tolerance: tokenization is discrete).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "core/rng.h"
#include "core/util.h"
#include "test.h"
#include "tok/tok.h"
#include "tok/tok_internal.h"

#define LLAMA3_JSON  "assets/tokenizers/llama3/tokenizer.json"
#define LLAMA3_MODEL "assets/tokenizers/llama3/tokenizer.model"
#define GPT2_JSON    "assets/tokenizers/gpt2/tokenizer.json"

// Tokenizers are loaded once per process (loading Llama-3 parses a 9 MB JSON).
static KdaTokenizer *get_tok(const char *path) {
    static const char *paths[3] = {LLAMA3_JSON, LLAMA3_MODEL, GPT2_JSON};
    static KdaTokenizer *toks[3];
    for (int i = 0; i < 3; i++) {
        if (strcmp(paths[i], path)) continue;
        if (!toks[i]) {
            KdaError err;
            if (tok_load(&toks[i], path, &err)) {
                fprintf(stderr, "%s\n", err.msg);
                return NULL;
            }
        }
        return toks[i];
    }
    return NULL;
}

static uint64_t fnv1a64(const int32_t *ids, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < 4; k++)
            h = (h ^ (((uint32_t)ids[i] >> (8 * k)) & 255)) * 0x100000001b3ull;
    return h;
}

static void print_ids(const char *what, const int32_t *ids, size_t n) {
    fprintf(stderr, "  %s (%zu):", what, n);
    for (size_t i = 0; i < n && i < 40; i++)
        fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, n > 40 ? " ...\n" : "\n");
}

// Test-case texts: testcases.jsonl then extra_cases.jsonl. texts[i] owned by the doc arrays.
typedef struct {
    JsonDoc docs[2];
    const JsonValue *text[512];
    const JsonValue *ids[512]; // Llama-3 ids from testcases.jsonl, NULL for the extra cases
    int n;
} Cases;

static int load_cases(Cases *c) {
    const char *files[2] = {"tok/testcases.jsonl", "tok/extra_cases.jsonl"};
    c->n = 0;
    for (int f = 0; f < 2; f++) {
        size_t len;
        KdaError err;
        char *data = read_file(test_data(files[f]), &len, &err);
        if (!data) return -1;
        // Turn the JSON-lines file into one JSON array.
        char *arr = kda_malloc(len + 3);
        size_t o = 0;
        arr[o++] = '[';
        for (size_t i = 0; i < len; i++) {
            arr[o++] = data[i] == '\n' && i + 1 < len ? ',' : data[i];
        }
        arr[o++] = ']';
        int rc = json_parse(&c->docs[f], arr, o, &err);
        free(arr);
        free(data);
        if (rc) return -1;
        for (size_t i = 0; i < c->docs[f].root.len && c->n < 512; i++, c->n++) {
            c->text[c->n] = json_get(&c->docs[f].root.items[i], "text");
            c->ids[c->n] = json_get(&c->docs[f].root.items[i], "ids");
        }
    }
    return 0;
}

static void free_cases(Cases *c) {
    json_free(&c->docs[0]);
    json_free(&c->docs[1]);
}

// Compares every case against "<n> <hash>" lines of a reference file; returns ids compared.
static long check_cases(KdaTokenizer *t, const Cases *c, const char *ref, int flags) {
    size_t len;
    KdaError err;
    char *data = read_file(test_data(ref), &len, &err);
    CHECK_MSG(data, "%s", err.msg);
    if (!data) return 0;
    long total = 0;
    int bad = 0;
    char *line = data;
    TokIds ids = {0};
    for (int i = 0; i < c->n && !bad; i++) {
        unsigned long long h = 0;
        long n = -1;
        if (sscanf(line, "%ld %llx", &n, &h) != 2) {
            CHECK_MSG(0, "%s: line %d unreadable", ref, i + 1);
            break;
        }
        line = strchr(line, '\n') + 1;
        ids.n = 0;
        tok_encode(t, c->text[i]->str, c->text[i]->len, flags, &ids, &err);
        if ((long)ids.n != n || fnv1a64(ids.ids, ids.n) != h) {
            CHECK_MSG(0, "%s: case %d differs (%zu ids, reference %ld)", ref, i + 1, ids.n, n);
            print_ids("ours", ids.ids, ids.n);
            bad = 1;
        }
        total += (long)ids.n;
    }
    tok_ids_free(&ids);
    free(data);
    return total;
}

// Whole text file as one string vs "<n> <block>" + per-block hashes.
static long check_book(KdaTokenizer *t, const char *text_path, const char *ref) {
    size_t len, rlen;
    KdaError err;
    char *text = read_file(text_path, &len, &err);
    CHECK_MSG(text, "%s", err.msg);
    char *rdata = read_file(test_data(ref), &rlen, &err);
    CHECK_MSG(rdata, "%s", err.msg);
    if (!text || !rdata) return free(text), free(rdata), 0;
    TokIds ids = {0};
    tok_encode(t, text, len, 0, &ids, &err);
    long n, block;
    char *p = rdata;
    CHECK(sscanf(p, "%ld %ld", &n, &block) == 2);
    p = strchr(p, '\n') + 1;
    size_t nb = ((size_t)n + (size_t)block - 1) / (size_t)block;
    for (size_t b = 0; b < nb; b++) {
        unsigned long long h = strtoull(p, &p, 16);
        size_t lo = b * (size_t)block,
               hi = lo + (size_t)block < (size_t)n ? lo + (size_t)block : (size_t)n;
        if (hi > ids.n || fnv1a64(ids.ids + lo, hi - lo) != h) {
            TokBytes pre = {0};
            tok_decode(t, ids.ids, lo < ids.n ? lo : ids.n, &pre, &err);
            CHECK_MSG(0, "%s: first differing block %zu (ids %zu..%zu, text byte ~%zu)", ref, b, lo,
                      hi, pre.n);
            if (lo < ids.n) print_ids("ours", ids.ids + lo, (hi < ids.n ? hi : ids.n) - lo);
            tok_bytes_free(&pre);
            break;
        }
    }
    CHECK_EQ_INT(ids.n, n);
    long total = (long)ids.n;
    tok_ids_free(&ids);
    free(text);
    free(rdata);
    return total;
}

// Pre-tokenizer alone: byte offsets where pieces end, vs HF pre_tokenize_str (reference file of
// "<n> <hash>" lines). Catches split differences that the BPE would hide (e.g. "'\u017f" + "x").
static void check_pieces(TokPretok p, const Cases *c, const char *ref) {
    size_t len;
    KdaError err;
    char *data = read_file(test_data(ref), &len, &err);
    CHECK_MSG(data, "%s", err.msg);
    if (!data) return;
    char *line = data;
    int32_t *ends = kda_malloc(65536 * sizeof *ends);
    for (int i = 0; i < c->n; i++) {
        long n = -1;
        unsigned long long h = 0;
        if (sscanf(line, "%ld %llx", &n, &h) != 2) break;
        line = strchr(line, '\n') + 1;
        size_t k = 0, pos = 0, tl = c->text[i]->len;
        const uint8_t *s = (const uint8_t *)c->text[i]->str;
        while (pos < tl && k < 65536)
            ends[k++] = (int32_t)(pos = tok_pretok_next(p, s, pos, tl));
        if ((long)k != n || fnv1a64(ends, k) != h) {
            CHECK_MSG(0, "%s: case %d: pre-tokenizer pieces differ (%zu pieces, reference %ld)",
                      ref, i + 1, k, n);
            print_ids("our piece ends", ends, k);
            break;
        }
    }
    free(ends);
    free(data);
}

KDA_TEST(tok_pretokenizer_pieces) {
    Cases c;
    CHECK(!load_cases(&c));
    check_pieces(TOK_PRE_LLAMA3, &c, "tok/llama3_cases_pieces.hash");
    check_pieces(TOK_PRE_GPT2, &c, "tok/gpt2_cases_pieces.hash");
    free_cases(&c);
}

KDA_TEST(tok_known_vectors) {
    KdaTokenizer *t = get_tok(LLAMA3_JSON);
    CHECK(t);
    if (!t) return;
    struct {
        const char *text;
        int32_t ids[8];
        int n;
    } v[] = {{"Hello world", {9906, 1917}, 2},
             {"\n", {198}, 1},
             {"This is a test sentence.", {2028, 374, 264, 1296, 11914, 13}, 6}};
    for (int i = 0; i < 3; i++) {
        TokIds ids = {0};
        KdaError err;
        CHECK(!tok_encode(t, v[i].text, strlen(v[i].text), 0, &ids, &err));
        CHECK_EQ_INT(ids.n, v[i].n);
        for (int k = 0; k < v[i].n && k < (int)ids.n; k++)
            CHECK_EQ_INT(ids.ids[k], v[i].ids[k]);
        tok_ids_free(&ids);
    }
    TokIds ids = {0};
    KdaError err;
    CHECK(!tok_encode(t, "Hi", 2, TOK_ADD_BOS | TOK_ADD_EOS, &ids, &err));
    CHECK(ids.n == 3 && ids.ids[0] == 128000 && ids.ids[1] == 13347 && ids.ids[2] == 128001);
    tok_ids_free(&ids);
}

KDA_TEST(tok_llama3_testcases) {
    Cases c;
    CHECK(!load_cases(&c));
    KdaTokenizer *tj = get_tok(LLAMA3_JSON), *tm = get_tok(LLAMA3_MODEL);
    CHECK(tj && tm);
    if (!tj || !tm) return;
    // 1. ids stored in testcases.jsonl (JS encoders + tiktoken-style check), both loaders.
    KdaTokenizer *both[2] = {tj, tm};
    long compared = 0;
    for (int k = 0; k < 2; k++) {
        TokIds ids = {0};
        KdaError err;
        for (int i = 0; i < c.n; i++) {
            if (!c.ids[i]) continue;
            ids.n = 0;
            tok_encode(both[k], c.text[i]->str, c.text[i]->len, 0, &ids, &err);
            size_t n = c.ids[i]->len, j = 0;
            while (j < n && j < ids.n && ids.ids[j] == (int32_t)c.ids[i]->items[j].i)
                j++;
            if (j < n || ids.n != n) {
                CHECK_MSG(0, "%s: testcases.jsonl line %d: first difference at id %zu",
                          k ? "tokenizer.model" : "tokenizer.json", i + 1, j);
                print_ids("ours", ids.ids, ids.n);
                break;
            }
            compared += (long)n;
        }
        tok_ids_free(&ids);
    }
    CHECK_EQ_INT(compared, 2 * 17005);
    // 2. HF reference hashes, with and without special-token splitting (incl. extra cases).
    CHECK(check_cases(tj, &c, "tok/llama3_cases_plain.hash", 0) > 17005);
    CHECK(check_cases(tm, &c, "tok/llama3_cases_plain.hash", 0) > 17005);
    CHECK(check_cases(tj, &c, "tok/llama3_cases_specials.hash", TOK_SPECIALS) > 17005);
    CHECK(check_cases(tm, &c, "tok/llama3_cases_specials.hash", TOK_SPECIALS) > 17005);
    free_cases(&c);
}

KDA_TEST(tok_gpt2_testcases) {
    Cases c;
    CHECK(!load_cases(&c));
    KdaTokenizer *t = get_tok(GPT2_JSON);
    CHECK(t);
    if (!t) return;
    CHECK(check_cases(t, &c, "tok/gpt2_cases_plain.hash", 0) > 17005);
    CHECK(check_cases(t, &c, "tok/gpt2_cases_specials.hash", TOK_SPECIALS) > 17005);
    // Same with every piece merged by the heap path, then by the quadratic path.
    int saved = tok_bpe_heap_threshold;
    tok_bpe_heap_threshold = 0;
    CHECK(check_cases(t, &c, "tok/gpt2_cases_plain.hash", 0) > 17005);
    tok_bpe_heap_threshold = 1 << 30;
    CHECK(check_cases(t, &c, "tok/gpt2_cases_plain.hash", 0) > 17005);
    tok_bpe_heap_threshold = saved;
    free_cases(&c);
}

KDA_TEST(tok_books_exact) {
    KdaTokenizer *l = get_tok(LLAMA3_JSON), *m = get_tok(LLAMA3_MODEL), *g = get_tok(GPT2_JSON);
    CHECK(l && m && g);
    if (!l || !m || !g) return;
    CHECK_EQ_INT(check_book(l, "assets/text/moby_dick.txt", "tok/llama3_moby_dick.hash"), 298553);
    CHECK_EQ_INT(check_book(l, "assets/text/web_bible.txt", "tok/llama3_web_bible.hash"), 1181419);
    CHECK_EQ_INT(check_book(m, "assets/text/moby_dick.txt", "tok/llama3_moby_dick.hash"), 298553);
    CHECK_EQ_INT(check_book(g, "assets/text/moby_dick.txt", "tok/gpt2_moby_dick.hash"), 317756);
    CHECK_EQ_INT(check_book(g, "assets/text/web_bible.txt", "tok/gpt2_web_bible.hash"), 1269129);
}

KDA_TEST(tok_vocab_queries) {
    KdaTokenizer *l = get_tok(LLAMA3_JSON), *m = get_tok(LLAMA3_MODEL), *g = get_tok(GPT2_JSON);
    CHECK(l && m && g);
    if (!l || !m || !g) return;
    CHECK_EQ_INT(tok_vocab_size(l), 128256);
    CHECK_EQ_INT(tok_vocab_size(m), 128256); // specials from the sibling tokenizer_config.json
    CHECK_EQ_INT(tok_vocab_size(g), 50257);
    CHECK_EQ_INT(tok_bos_id(l), 128000);
    CHECK_EQ_INT(tok_eos_id(l), 128001);
    CHECK_EQ_INT(tok_bos_id(m), 128000);
    CHECK_EQ_INT(tok_eos_id(m), 128001);
    CHECK_EQ_INT(tok_eos_id(g), 50256);
    CHECK_EQ_INT(tok_token_to_id(l, "\xc4\xa0the", 5), 279); // "Ġthe"
    CHECK_EQ_INT(tok_token_to_id(m, "\xc4\xa0the", 5), 279);
    CHECK_EQ_INT(tok_token_to_id(l, "<|eot_id|>", 10), 128009);
    CHECK_EQ_INT(tok_token_to_id(l, "no-such-token-xyz", 17), -1);
    size_t n;
    const char *s = tok_id_to_token(m, 279, &n);
    CHECK(s && n == 5 && !memcmp(s, "\xc4\xa0the", 5));
    s = tok_token_bytes(l, 279, &n);
    CHECK(s && n == 4 && !memcmp(s, " the", 4));
    CHECK(tok_is_special(l, 128001) && !tok_is_special(l, 279));
    CHECK(!tok_id_to_token(l, 128256, NULL) && !tok_id_to_token(l, -1, NULL));
    // Every id has the same bytes under tokenizer.json and tokenizer.model.
    int same = 1;
    for (int32_t id = 0; id < 128256 && same; id++) {
        size_t a, b;
        const char *x = tok_token_bytes(l, id, &a), *y = tok_token_bytes(m, id, &b);
        same = x && y && a == b && !memcmp(x, y, a);
        CHECK_MSG(same, "id %d: bytes differ between tokenizer.json and tokenizer.model", id);
    }
}

KDA_TEST(tok_decode_specials_and_errors) {
    KdaTokenizer *t = get_tok(LLAMA3_JSON);
    CHECK(t);
    if (!t) return;
    const char *text = "<|begin_of_text|>Hi there<|eot_id|>";
    TokIds ids = {0};
    TokBytes out = {0};
    KdaError err;
    CHECK(!tok_encode(t, text, strlen(text), TOK_SPECIALS, &ids, &err));
    CHECK(ids.n == 4 && ids.ids[0] == 128000 && ids.ids[3] == 128009);
    CHECK(!tok_decode(t, ids.ids, ids.n, &out, &err));
    CHECK(out.n == strlen(text) && !strcmp(out.data, text));
    ids.n = 0;
    CHECK(!tok_encode(t, text, strlen(text), 0, &ids, &err)); // specials as plain text
    CHECK(ids.n > 4 && ids.ids[0] != 128000);
    int32_t bad[2] = {5, 128256};
    size_t before = out.n;
    CHECK(tok_decode(t, bad, 2, &out, &err) == -1 && out.n == before);
    CHECK(strstr(err.msg, "128256") != NULL);
    tok_ids_free(&ids);
    tok_bytes_free(&out);
}

// Random valid UTF-8 from many scripts, whitespace runs and digits.
static size_t random_utf8(KdaRng *r, unsigned char *buf, size_t max_chars) {
    static const uint32_t ranges[][2] = {
        {0x20, 0x7E},        {0x09, 0x0D},     {0x30, 0x39},     {0xA0, 0x24F},
        {0x370, 0x3FF},      {0x400, 0x4FF},   {0x590, 0x6FF},   {0x900, 0x97F},
        {0xE00, 0xE7F},      {0x1680, 0x1680}, {0x2000, 0x206F}, {0x3000, 0x30FF},
        {0x4E00, 0x4FFF},    {0xAC00, 0xAD00}, {0xFE00, 0xFEFF}, {0x1F300, 0x1F6FF},
        {0x10000, 0x10FFFF}, {0x85, 0x85},     {0x17F, 0x17F},   {0x27, 0x27}};
    size_t nr = sizeof ranges / sizeof *ranges, o = 0;
    size_t nchars = rng_u64(r) % (max_chars + 1);
    for (size_t i = 0; i < nchars; i++) {
        const uint32_t *rg = ranges[rng_u64(r) % nr];
        uint32_t cp = rg[0] + (uint32_t)(rng_u64(r) % (rg[1] - rg[0] + 1));
        if (cp >= 0xD800 && cp <= 0xDFFF) cp = ' ';
        size_t reps = rng_u64(r) % 8 == 0 ? 1 + rng_u64(r) % 12 : 1; // runs
        for (size_t k = 0; k < reps; k++)
            o += utf8_encode(cp, buf + o);
    }
    return o;
}

KDA_TEST(tok_roundtrip_property) {
    KdaTokenizer *toks[2] = {get_tok(LLAMA3_JSON), get_tok(GPT2_JSON)};
    CHECK(toks[0] && toks[1]);
    if (!toks[0] || !toks[1]) return;
    KdaRng r;
    rng_seed(&r, 1234);
    unsigned char *buf = kda_malloc(4 * 12 * 400 + 16);
    TokIds ids = {0};
    TokBytes out = {0};
    KdaError err;
    for (int iter = 0; iter < 3000 && !kda_test_failed(); iter++) {
        size_t n;
        if (iter % 2) { // arbitrary bytes
            n = rng_u64(&r) % 300;
            for (size_t i = 0; i < n; i++)
                buf[i] = (unsigned char)rng_u64(&r);
        } else {
            n = random_utf8(&r, buf, 400);
        }
        for (int k = 0; k < 2; k++) {
            ids.n = out.n = 0;
            int flags = (iter % 3) ? 0 : TOK_SPECIALS;
            CHECK(!tok_encode(toks[k], (const char *)buf, n, flags, &ids, &err));
            CHECK(!tok_decode(toks[k], ids.ids, ids.n, &out, &err));
            CHECK_MSG(out.n == n && !memcmp(out.data, buf, n),
                      "round trip failed: iter %d tokenizer %d (%zu bytes -> %zu)", iter, k, n,
                      out.n);
        }
    }
    free(buf);
    tok_ids_free(&ids);
    tok_bytes_free(&out);
}

// Several threads encoding with one tokenizer give the single-thread ids.
KDA_TEST(tok_threads) {
    KdaTokenizer *t = get_tok(GPT2_JSON);
    CHECK(t);
    if (!t) return;
    size_t len;
    KdaError err;
    char *text = read_file("assets/text/moby_dick.txt", &len, &err);
    CHECK(text);
    if (!text) return;
    len = len < 300000 ? len : 300000;
    TokIds ref = {0};
    tok_encode(t, text, len, 0, &ref, &err);
    int ok = 1;
#pragma omp parallel for num_threads(4) reduction(&& : ok)
    for (int k = 0; k < 8; k++) {
        TokIds ids = {0};
        KdaError e;
        tok_encode(t, text, len, 0, &ids, &e);
        ok = ok && ids.n == ref.n && !memcmp(ids.ids, ref.ids, ref.n * sizeof *ref.ids);
        tok_ids_free(&ids);
    }
    CHECK(ok);
    tok_ids_free(&ref);
    free(text);
}

KDA_TEST(tok_load_errors) {
    struct {
        const char *json, *expect;
    } v[] = {
        {"{", "line"},
        {"{\"model\": 3}", "model"},
        {"{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", "model.type"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -1}}, \"pre_tokenizer\": "
         "{\"type\": \"ByteLevel\"}}",
         "model.vocab"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a b\"]}, "
         "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}}",
         "merges[0]"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}}, \"pre_tokenizer\": "
         "{\"type\": \"Whitespace\"}}",
         "pre_tokenizer"},
    };
    for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
        KdaTokenizer *t = (KdaTokenizer *)1;
        KdaError err;
        CHECK(tok_load_buffer(&t, v[i].json, strlen(v[i].json), TOK_FORMAT_HF_JSON, NULL, &err) ==
              -1);
        CHECK(t == NULL);
        CHECK_MSG(strstr(err.msg, v[i].expect), "case %zu: message '%s' lacks '%s'", i, err.msg,
                  v[i].expect);
    }
    KdaTokenizer *t;
    KdaError err;
    const char *tik = "YQ== 0\nYg== 1\nYWI= 2\n";
    CHECK(!tok_load_buffer(&t, tik, strlen(tik), TOK_FORMAT_AUTO, NULL, &err));
    if (t) {
        TokIds ids = {0};
        tok_encode(t, "ab", 2, 0, &ids, &err);
        CHECK(ids.n == 1 && ids.ids[0] == 2);
        CHECK_EQ_INT(tok_bos_id(t), -1);
        CHECK(tok_encode(t, "ab", 2, TOK_ADD_BOS, &ids, &err) == -1);
        tok_ids_free(&ids);
        tok_free(t);
    }
    CHECK(tok_load_buffer(&t, "YQ== x\n", 7, TOK_FORMAT_TIKTOKEN, NULL, &err) == -1);
    CHECK(tok_load(&t, "no/such/tokenizer.json", &err) == -1);
}
