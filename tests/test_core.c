// test_core.c - tests of src/core: JSON parser, UTF-8 and half-float helpers, args, rng.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/args.h"
#include "core/json.h"
#include "core/rng.h"
#include "core/util.h"
#include "test.h"

static int parse(JsonDoc *d, const char *s) {
    KdaError e;
    return json_parse(d, s, strlen(s), &e);
}

KDA_TEST(json_values) {
    JsonDoc d;
    CHECK(parse(&d, " {\"a\": [1, -2.5e1, true, null, \"x\\u00e9\\ud83d\\ude00\"], \"b\": {}} ") ==
          0);
    const JsonValue *a = json_get(&d.root, "a");
    CHECK(a && a->type == JSON_ARRAY && a->len == 5);
    CHECK(a->items[0].is_int && a->items[0].i == 1);
    CHECK_NEAR(a->items[1].num, -25.0, 0);
    CHECK(a->items[2].type == JSON_TRUE && a->items[3].type == JSON_NULL);
    CHECK(strcmp(a->items[4].str, "x\xc3\xa9\xf0\x9f\x98\x80") == 0);
    CHECK(json_get(&d.root, "b")->type == JSON_OBJECT && json_get(&d.root, "b")->len == 0);
    json_free(&d);
}

KDA_TEST(json_rejects_bad_input) {
    const char *bad[] = {
        "",    "{",        "[1,]",       "{\"a\" 1}", "01", "\"\\x\"",         "[1] 2",
        "tru", "\"a\nb\"", "{\"a\":1,}", "-",         "1e", "[\"\\ud800\\u\"]"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        JsonDoc d;
        CHECK_MSG(parse(&d, bad[i]) != 0, "accepted bad JSON: %s", bad[i]);
    }
    char deep[JSON_MAX_DEPTH + 10];
    memset(deep, '[', sizeof deep - 1);
    deep[sizeof deep - 1] = 0;
    JsonDoc d;
    KdaError e;
    CHECK(json_parse(&d, deep, strlen(deep), &e) != 0 && strstr(e.msg, "deep"));
    CHECK(json_parse(&d, "[1,\n  x]", 8, &e) != 0 && strstr(e.msg, "line 2, column 3"));
}

KDA_TEST(utf8_and_halfs) {
    unsigned char buf[4];
    for (uint32_t cp = 0; cp < 0x110000; cp += 97) {
        if (cp >= 0xD800 && cp <= 0xDFFF) continue;
        size_t n = utf8_encode(cp, buf);
        uint32_t back;
        CHECK(utf8_valid_prefix(buf, n) == n);
        CHECK(utf8_decode(buf, &back) == n && back == cp);
    }
    CHECK(utf8_valid_prefix((const unsigned char *)"\xc0\x80", 2) == 0);     // overlong
    CHECK(utf8_valid_prefix((const unsigned char *)"\xed\xa0\x80", 3) == 0); // surrogate
    CHECK(bf16_to_f32(f32_to_bf16(1.0f)) == 1.0f);
    CHECK(f32_to_bf16(1.00390625f) == 0x3f80); // tie rounds to even
    CHECK(f32_to_bf16(1.01171875f) == 0x3f82);
    for (int h = 0; h < 0x7c00; h += 7)
        CHECK(f32_to_f16(f16_to_f32((uint16_t)h)) == h);
    CHECK(f32_to_f16(65520.0f) == 0x7c00 && f32_to_f16(65504.0f) == 0x7bff);
}

KDA_TEST(args_parse_table) {
    const char *s = "x";
    int64_t n = 3;
    double f = 0.5;
    int b = 0;
    ArgList l = {0};
    ArgSpec specs[] = {{"name", ARG_STR, &s, "a string", 1},
                       {"n", ARG_INT, &n, "an int", 0},
                       {"lr", ARG_FLOAT, &f, "a float", 0},
                       {"flag", ARG_BOOL, &b, "a bool", 0},
                       {"input", ARG_STRS, &l, "inputs", 0}};
    ArgTable t = {"kda t", "test", NULL, specs, 5};
    char *argv[] = {"--name", "y", "--n=7", "--lr", "3e-4", "--flag", "--input", "a", "b"};
    KdaError e;
    CHECK(args_parse(&t, 9, argv, &e) == 0);
    CHECK(!strcmp(s, "y") && n == 7 && f == 3e-4 && b == 1 && l.n == 2);
    char *bad1[] = {"--name", "y", "--bogus", "1"};
    CHECK(args_parse(&t, 4, bad1, &e) < 0 && strstr(e.msg, "--bogus"));
    char *bad2[] = {"--n", "7"};
    CHECK(args_parse(&t, 2, bad2, &e) < 0 && strstr(e.msg, "--name"));
    char *bad3[] = {"--name", "y", "--n", "seven"};
    CHECK(args_parse(&t, 4, bad3, &e) < 0 && strstr(e.msg, "integer"));
    arglist_free(&l);
}

KDA_TEST(rng_deterministic_and_normal) {
    KdaRng a, b;
    rng_seed(&a, 42);
    rng_seed(&b, 42);
    for (int i = 0; i < 100; i++)
        CHECK(rng_u64(&a) == rng_u64(&b));
    double s = 0, s2 = 0;
    int n = 200000;
    for (int i = 0; i < n; i++) {
        double x = rng_normal(&a, 0, 2);
        s += x, s2 += x * x;
    }
    // sampling error of n = 200,000 draws of N(0, 2^2): the mean's std error is 2/sqrt(n) =
    // 0.0045, the std's 2/sqrt(2n) = 0.0032; 0.02 is > 4 standard errors (a wrong scale or
    // offset of the sampler shows at >= 0.1)
    CHECK_NEAR(s / n, 0.0, 0.02);
    CHECK_NEAR(sqrt(s2 / n), 2.0, 0.02);
}

KDA_TEST(atomic_write) {
    char path[512];
    path_join(path, sizeof path, test_tmpdir(), "f.txt");
    KdaError e;
    CHECK(write_file_atomic(path, "hello", 5, &e) == 0);
    size_t n;
    char *s = read_file(path, &n, &e);
    CHECK(s && n == 5 && !strcmp(s, "hello"));
    free(s);
    CHECK(read_file("/nonexistent/x", &n, &e) == NULL && strstr(e.msg, "/nonexistent/x"));
}

// Expected strings follow Python's bytes.decode("utf-8", "replace"), which implements the same
// "maximal subpart" rule as Rust's from_utf8_lossy (HF tokenizers' decoder).
KDA_TEST(utf8_lossy_maximal_subparts) {
    struct {
        const char *in, *out;
    } cases[] = {
        {"ok \xc3\xa9", "ok \xc3\xa9"},
        {"\xff", "\xef\xbf\xbd"},
        {"\xe2\x82", "\xef\xbf\xbd"}, // truncated 3-byte: one U+FFFD
        {"\xe2\x82x", "\xef\xbf\xbdx"},
        {"\xf0\x9f\x98", "\xef\xbf\xbd"},                         // truncated emoji
        {"\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, // surrogate: 3
        {"\xc0\xaf", "\xef\xbf\xbd\xef\xbf\xbd"},                 // overlong: 2
        {"\xf4\x90\x80\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
        {"\xe0\x80", "\xef\xbf\xbd\xef\xbf\xbd"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        unsigned char out[64];
        size_t n = utf8_lossy((const unsigned char *)cases[i].in, strlen(cases[i].in), out);
        CHECK_MSG(n == strlen(cases[i].out) && memcmp(out, cases[i].out, n) == 0, "case %zu", i);
    }
}

// str_shown: control bytes escaped, cut after `max` input bytes with "...", never past cap.
KDA_TEST(core_str_shown) {
    char buf[64];
    CHECK(strcmp(str_shown("a\nb\tc\x01", 6, 40, buf, sizeof buf), "a\\nb\\tc\\x01") == 0);
    CHECK(strcmp(str_shown("abcdefgh", 8, 4, buf, sizeof buf), "abcd...") == 0);
    CHECK(strcmp(str_shown("abc", 3, 40, buf, sizeof buf), "abc") == 0);
    char small[10];
    str_shown("\n\n\n\n\n\n\n\n", 8, 40, small, sizeof small); // stops early, stays terminated
    CHECK(strlen(small) < sizeof small && strchr(small, '\n') == NULL);
}

// Non-finite numbers become JSON null (issue 15, finding 4: "-nan" and "nan" were written).
KDA_TEST(json_fmt_num_nonfinite_null) {
    char b[32];
    CHECK(!strcmp(json_fmt_num(b, sizeof b, 1.5, 9), "1.5"));
    CHECK(!strcmp(json_fmt_num(b, sizeof b, -NAN, 9), "null"));
    CHECK(!strcmp(json_fmt_num(b, sizeof b, INFINITY, 9), "null"));
    CHECK(!strcmp(json_fmt_num(b, sizeof b, -INFINITY, 17), "null"));
}

// Duplicate object keys are an error (issue 15, finding 6: the first one won here while Python
// keeps the last, so kda and FLA could read different models from one config.json). Small
// objects report the key's position; large ones (the sorted check) name the key too.
KDA_TEST(json_rejects_duplicate_keys) {
    JsonDoc d;
    KdaError e;
    const char *s = "{\"a\": 1,\n \"allow_neg_eigval\": true, \"allow_neg_eigval\": false}";
    CHECK(json_parse(&d, s, strlen(s), &e) != 0);
    CHECK_MSG(strstr(e.msg, "duplicate key \"allow_neg_eigval\"") && strstr(e.msg, "line 2"), "%s",
              e.msg);
    s = "{\"x\": {\"k\": 1}, \"y\": {\"k\": 2}, \"a\\u0000b\": 1, \"a\": 2}"; // nested, NUL
    CHECK_MSG(json_parse(&d, s, strlen(s), &e) == 0, "%s", e.msg);
    json_free(&d);
    char big[40000];
    int n = snprintf(big, sizeof big, "{");
    for (int i = 0; i < 2000; i++)
        n += snprintf(big + n, sizeof big - (size_t)n, "\"k%d\": %d, ", i, i);
    snprintf(big + n, sizeof big - (size_t)n, "\"k1234\": 0}");
    CHECK(json_parse(&d, big, strlen(big), &e) != 0);
    CHECK_MSG(strstr(e.msg, "duplicate key \"k1234\""), "%s", e.msg);
    big[n - 2] = '}', big[n - 1] = 0; // the same object without the duplicate parses
    CHECK_MSG(json_parse(&d, big, strlen(big), &e) == 0, "%s", e.msg);
    json_free(&d);
}
