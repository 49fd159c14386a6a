// test_safetensors.c - safetensors reader/writer: reference file from Python's safetensors,
// round trips of every dtype, bf16/f16 rounding, alignment, every validation error, shards.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "io/safetensors.h"
#include "test.h"

// ------------------------------------------------------------------------------------------
// Helpers

static const char *tmp_path(const char *name) {
    static char buf[4096];
    return path_join(buf, sizeof buf, test_tmpdir(), name);
}

// Saves w as tmp_path(name), frees it and opens the file back into st: 0, or -1 after a failed
// check (st unopened).
static int save_and_open(StWriter *w, const char *name, SafeTensors *st) {
    KdaError err;
    const char *path = tmp_path(name);
    CHECK_MSG(st_writer_save(w, path, &err) == 0, "%s", err.msg);
    st_writer_free(w);
    int rc = st_open(st, path, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    return rc ? -1 : 0;
}

// A file image: u64 LE header length, the header as given (no padding), n_buffer bytes 0xAB.
static unsigned char *make_image(const char *header, size_t n_buffer, size_t *n_out) {
    size_t hn = strlen(header);
    unsigned char *b = malloc(8 + hn + n_buffer + 1);
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)((uint64_t)hn >> (8 * i));
    memcpy(b + 8, header, hn);
    memset(b + 8 + hn, 0xAB, n_buffer);
    *n_out = 8 + hn + n_buffer;
    return b;
}

// Parses the image and expects failure with a message holding "bad.safetensors" and each
// of the up to three given substrings (NULL to skip).
static void expect_bad(const char *header, size_t n_buffer, const char *s1, const char *s2,
                       const char *s3) {
    size_t n;
    unsigned char *img = make_image(header, n_buffer, &n);
    SafeTensors st;
    KdaError err = {{0}};
    int rc = st_parse(&st, img, n, "bad.safetensors", &err);
    CHECK_MSG(rc == -1, "accepted bad header: %s", header);
    const char *want[4] = {"bad.safetensors", s1, s2, s3};
    for (int i = 0; i < 4; i++)
        CHECK_MSG(!want[i] || strstr(err.msg, want[i]), "message \"%s\" lacks \"%s\" (header %s)",
                  err.msg, want[i], header);
    CHECK(strchr(err.msg, '\n') == NULL);           // one line
    CHECK(st.tensors == NULL && st.n_tensors == 0); // left zeroed
    st_close(&st);
    free(img);
}

static int file_bytes(const char *path, unsigned char **out, size_t *n) {
    KdaError err;
    *out = (unsigned char *)read_file(path, n, &err);
    return *out ? 0 : -1;
}

// ------------------------------------------------------------------------------------------
// The reference file (tools/reference/make_safetensors_ref.py, safetensors 0.8.0)

// Expected fp32 value of element i of each reference tensor (same formulas as the script).
static double ref_value(const char *name, int i) {
    if (!strcmp(name, "t_bool")) return i % 2 == 1;
    if (!strcmp(name, "t_u8")) return i * 40 + 1;
    if (!strcmp(name, "t_i8")) return i * 20 - 60;
    if (!strcmp(name, "t_i16")) return i * 1000 - 3000;
    if (!strcmp(name, "t_u16")) return i * 10000 + 7;
    if (!strcmp(name, "t_f16")) return i * 0.25 - 0.5;
    if (!strcmp(name, "t_i32")) return i * 100000 - 7;
    if (!strcmp(name, "t_u32")) return i * 700000000.0;
    if (!strcmp(name, "t_f32")) return i * 0.5 - 1.0;
    if (!strcmp(name, "t_f64")) return i / 3.0;
    if (!strcmp(name, "t_i64")) return i * 1e12 - 5;
    if (!strcmp(name, "t_u64")) return i * 1e15;
    if (!strcmp(name, "t_bf16")) return (float)(i * 0.3f - 0.7f);
    if (!strcmp(name, "t_scalar")) return 3.5;
    return NAN;
}

KDA_TEST(st_reads_python_reference) {
    SafeTensors st;
    KdaError err;
    int rc = st_open(&st, test_data("safetensors/reference.safetensors"), &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (rc) return;
    CHECK_EQ_INT(st.n_tensors, 15);
    CHECK(st_meta(&st, "format") && strcmp(st_meta(&st, "format"), "pt") == 0);
    CHECK(st_meta(&st, "nope") == NULL);
    float buf[16];
    for (int64_t k = 0; k < st.n_tensors; k++) {
        const StTensor *t = &st.tensors[k];
        CHECK(st_find(&st, t->name) == t);
        CHECK(st_to_f32(t, buf, &err) == 0);
        for (int64_t i = 0; i < t->numel; i++) {
            double want = ref_value(t->name, (int)i);
            // bf16 keeps 8 significant bits: |error| <= 2^-9 relative; others are exact in
            // fp32 except large ints and f64 thirds, which fp32 rounds to 2^-24 relative.
            double tol = t->dtype == ST_BF16 ? fabs(want) / 256 : fabs(want) * 1.2e-7;
            CHECK_NEAR(buf[i], want, tol);
        }
        CHECK_EQ_INT(t->offset % st_dtype_size(t->dtype), 0);
    }
    const StTensor *s = st_find(&st, "t_scalar"), *e = st_find(&st, "t_empty");
    CHECK(s && s->ndim == 0 && s->numel == 1 && s->nbytes == 4);
    CHECK(e && e->ndim == 2 && e->shape[0] == 0 && e->shape[1] == 4 && e->numel == 0 &&
          e->nbytes == 0);
    const StTensor *f16 = st_find(&st, "t_f16");
    CHECK(f16 && f16->dtype == ST_F16 && f16->ndim == 2 && f16->shape[0] == 3 &&
          f16->shape[1] == 2);
    st_close(&st);
    CHECK(st.tensors == NULL && st.map == NULL);
    st_close(&st); // closing twice is allowed
}

// Writes the reference tensors from C: the file must be byte-identical to Python's.
KDA_TEST(st_writer_matches_python_bytes) {
    uint8_t b_bool[6], b_u8[6];
    int8_t b_i8[6];
    int16_t b_i16[6];
    uint16_t b_u16[6];
    int32_t b_i32[6];
    uint32_t b_u32[6];
    int64_t b_i64[6];
    uint64_t b_u64[6];
    float f16src[6], f32[6], bf[6], scalar = 3.5f;
    double f64[6];
    for (int i = 0; i < 6; i++) {
        b_bool[i] = i % 2 == 1, b_u8[i] = (uint8_t)(i * 40 + 1), b_i8[i] = (int8_t)(i * 20 - 60);
        b_i16[i] = (int16_t)(i * 1000 - 3000), b_u16[i] = (uint16_t)(i * 10000 + 7);
        b_i32[i] = i * 100000 - 7, b_u32[i] = (uint32_t)i * 700000000u;
        b_i64[i] = i * 1000000000000LL - 5, b_u64[i] = (uint64_t)i * 1000000000000000ULL;
        f16src[i] = i * 0.25f - 0.5f, f32[i] = i * 0.5f - 1.0f, f64[i] = i / 3.0;
        bf[i] = i * 0.3f - 0.7f;
    }
    int64_t s23[2] = {2, 3}, s32[2] = {3, 2}, s6[1] = {6}, s16[2] = {1, 6}, s04[2] = {0, 4};
    StWriter *w = st_writer_new();
    st_writer_add(w, "t_bool", ST_BOOL, 2, s23, b_bool);
    st_writer_add(w, "t_u8", ST_U8, 2, s23, b_u8);
    st_writer_add(w, "t_i8", ST_I8, 2, s23, b_i8);
    st_writer_add(w, "t_i16", ST_I16, 2, s23, b_i16);
    st_writer_add(w, "t_u16", ST_U16, 2, s23, b_u16);
    st_writer_add_f32(w, "t_f16", ST_F16, 2, s32, f16src);
    st_writer_add(w, "t_i32", ST_I32, 1, s6, b_i32);
    st_writer_add(w, "t_u32", ST_U32, 2, s16, b_u32);
    st_writer_add_f32(w, "t_f32", ST_F32, 2, s23, f32);
    st_writer_add(w, "t_f64", ST_F64, 2, s23, f64);
    st_writer_add(w, "t_i64", ST_I64, 2, s32, b_i64);
    st_writer_add(w, "t_u64", ST_U64, 2, s23, b_u64);
    st_writer_add_f32(w, "t_scalar", ST_F32, 0, NULL, &scalar);
    st_writer_add(w, "t_empty", ST_F32, 2, s04, NULL);
    st_writer_add_f32(w, "t_bf16", ST_BF16, 2, s23, bf);
    KdaError err;
    const char *out = tmp_path("c.safetensors");
    int rc = st_writer_save(w, out, &err);
    st_writer_free(w);
    CHECK_MSG(rc == 0, "%s", err.msg);
    unsigned char *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    CHECK(file_bytes(out, &a, &na) == 0);
    CHECK(file_bytes(test_data("safetensors/reference.safetensors"), &b, &nb) == 0);
    CHECK_EQ_INT(na, nb);
    CHECK_MSG(a && b && na == nb && memcmp(a, b, na) == 0, "C output differs from Python's");
    free(a);
    free(b);
}

// ------------------------------------------------------------------------------------------
// Round trips, conversion, alignment

KDA_TEST(st_round_trip_every_dtype_aligned) {
    // one tensor per dtype with 5 elements (odd, so unpadded offsets would misalign) of
    // distinct byte patterns, plus a scalar and a zero-size tensor
    unsigned char src[ST_N_DTYPES][40];
    int64_t shape5[1] = {5}, shape0[3] = {2, 0, 3};
    StWriter *w = st_writer_new();
    char names[ST_N_DTYPES][16];
    for (int d = 0; d < ST_N_DTYPES; d++) {
        for (int i = 0; i < 40; i++)
            src[d][i] = (unsigned char)(d * 41 + i * 7 + 1);
        if (d == ST_BOOL)
            for (int i = 0; i < 5; i++)
                src[d][i] &= 1;
        snprintf(names[d], sizeof names[d], "x.%s", st_dtype_name((StDtype)d));
        st_writer_add(w, names[d], (StDtype)d, 1, shape5, src[d]);
    }
    double sc = -1.25;
    st_writer_add(w, "scalar", ST_F64, 0, NULL, &sc);
    st_writer_add(w, "empty", ST_BF16, 3, shape0, NULL);
    st_writer_meta(w, "note", "hello \"world\"\n");
    SafeTensors st;
    if (save_and_open(w, "all.safetensors", &st)) return;
    CHECK_EQ_INT(st.n_tensors, ST_N_DTYPES + 2);
    CHECK(strcmp(st_meta(&st, "format"), "pt") == 0);
    CHECK(strcmp(st_meta(&st, "note"), "hello \"world\"\n") == 0);
    uint64_t hn;
    memcpy(&hn, st.map, 8);
    CHECK_EQ_INT((8 + hn) % 8, 0); // header padded: the byte buffer starts 8-aligned
    for (int d = 0; d < ST_N_DTYPES; d++) {
        const StTensor *t = st_find(&st, names[d]);
        CHECK(t != NULL);
        if (!t) continue;
        size_t isz = st_dtype_size((StDtype)d);
        CHECK(t->dtype == (StDtype)d && t->ndim == 1 && t->shape[0] == 5 && t->numel == 5);
        CHECK_EQ_INT(t->nbytes, 5 * isz);
        CHECK(memcmp(t->data, src[d], t->nbytes) == 0);
        CHECK_EQ_INT((uintptr_t)t->data % isz, 0); // mmap is page aligned
    }
    // buffer order: decreasing dtype size, then name
    const StTensor *u64 = st_find(&st, "x.U64"), *b = st_find(&st, "x.BOOL");
    CHECK(u64 && u64->offset == 0);
    CHECK(b && b->offset + b->nbytes == st.map_bytes - 8 - hn);
    const StTensor *s = st_find(&st, "scalar"), *e = st_find(&st, "empty");
    CHECK(s && s->ndim == 0 && s->numel == 1 && s->dtype == ST_F64);
    float v = 0;
    KdaError err;
    CHECK(s && st_to_f32(s, &v, &err) == 0 && v == -1.25f);
    CHECK(e && e->ndim == 3 && e->numel == 0 && e->nbytes == 0);
    st_close(&st);
}

KDA_TEST(st_bf16_f16_conversion) {
    // BF16 ties round to even: 1+2^-8 is halfway between 1 and 1+2^-7 -> 1; 1+3*2^-8 is
    // halfway between 1+2^-7 and 1+2^-6 -> 1+2^-6. F16: 65504 is max, 2^-24 smallest
    // subnormal, 1+2^-11 ties to 1, 70000 overflows to inf.
    float x[8] = {1.0f,     -2.5f,    1.0f + 0x1p-8f,  1.0f + 3 * 0x1p-8f,
                  65504.0f, 0x1p-24f, 1.0f + 0x1p-11f, 70000.0f};
    float bf_want[8] = {1.0f, -2.5f, 1.0f, 1.0f + 0x1p-6f, 65536.0f, 0x1p-24f, 1.0f, 70144.0f};
    float h_want[8] = {1.0f,     -2.5f,    1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f,
                       65504.0f, 0x1p-24f, 1.0f,           INFINITY};
    int64_t shape[1] = {8};
    StWriter *w = st_writer_new();
    st_writer_add_f32(w, "bf", ST_BF16, 1, shape, x);
    st_writer_add_f32(w, "h", ST_F16, 1, shape, x);
    st_writer_add_f32(w, "f", ST_F32, 1, shape, x);
    SafeTensors st;
    if (save_and_open(w, "conv.safetensors", &st)) return;
    float out[8];
    KdaError err;
    CHECK(st_to_f32(st_find(&st, "bf"), out, &err) == 0);
    for (int i = 0; i < 8; i++)
        CHECK_MSG(out[i] == bf_want[i], "bf16[%d] %g vs %g", i, out[i], bf_want[i]);
    CHECK(st_to_f32(st_find(&st, "h"), out, &err) == 0);
    for (int i = 0; i < 8; i++)
        CHECK_MSG(out[i] == h_want[i], "f16[%d] %g vs %g", i, out[i], h_want[i]);
    CHECK(st_to_f32(st_find(&st, "f"), out, &err) == 0);
    CHECK(memcmp(out, x, sizeof x) == 0);
    st_close(&st);
}

KDA_TEST(st_tensor_equal_tied_head) {
    float a[4] = {1, 2, 3, 4}, b[4] = {1, 2, 3, 5};
    int64_t shape[2] = {2, 2};
    StWriter *w = st_writer_new();
    st_writer_add_f32(w, "model.embeddings.weight", ST_F32, 2, shape, a);
    st_writer_add_f32(w, "lm_head.weight", ST_F32, 2, shape, a);
    st_writer_add_f32(w, "other", ST_F32, 2, shape, b);
    st_writer_add_f32(w, "as_bf16", ST_BF16, 2, shape, a);
    SafeTensors st;
    if (save_and_open(w, "tied.safetensors", &st)) return;
    const StTensor *e = st_find(&st, "model.embeddings.weight");
    CHECK(st_tensor_equal(e, st_find(&st, "lm_head.weight")));
    CHECK(!st_tensor_equal(e, st_find(&st, "other")));
    CHECK(!st_tensor_equal(e, st_find(&st, "as_bf16")));
    st_close(&st);
}

KDA_TEST(st_writer_errors_and_empty_file) {
    int64_t shape[1] = {1};
    float x = 1;
    KdaError err;
    StWriter *w = st_writer_new();
    st_writer_add_f32(w, "a", ST_F32, 1, shape, &x);
    st_writer_add_f32(w, "a", ST_BF16, 1, shape, &x);
    const char *path = tmp_path("dup.safetensors");
    CHECK(st_writer_save(w, path, &err) == -1);
    CHECK(strstr(err.msg, "'a'") && strstr(err.msg, "twice") && strstr(err.msg, path));
    CHECK(!path_exists(path));
    st_writer_free(w);
    w = st_writer_new();
    st_writer_add_f32(w, "__metadata__", ST_F32, 1, shape, &x);
    CHECK(st_writer_save(w, path, &err) == -1 && strstr(err.msg, "reserved"));
    st_writer_free(w);
    w = st_writer_new(); // no tensors at all: still a valid file
    path = tmp_path("empty.safetensors");
    CHECK(st_writer_save(w, path, &err) == 0);
    st_writer_free(w);
    SafeTensors st;
    CHECK_MSG(st_open(&st, path, &err) == 0, "%s", err.msg);
    CHECK(st.n_tensors == 0 && strcmp(st_meta(&st, "format"), "pt") == 0);
    st_close(&st);
    st_writer_free(NULL);
}

// ------------------------------------------------------------------------------------------
// Validation: one handcrafted bad file per error class

KDA_TEST(st_rejects_bad_headers) {
    const char *ok1 = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    size_t n;
    unsigned char *img = make_image(ok1, 8, &n);
    SafeTensors st;
    KdaError err;
    CHECK_MSG(st_parse(&st, img, n, "good", &err) == 0, "%s", err.msg); // control: valid
    st_close(&st);
    // truncated below 8 bytes and header length past the end
    CHECK(st_parse(&st, img, 5, "bad.safetensors", &err) == -1 && strstr(err.msg, "truncated"));
    CHECK(st_parse(&st, img, 20, "bad.safetensors", &err) == -1 && strstr(err.msg, "truncated"));
    // a tensor's bytes cut off: out of range
    CHECK(st_parse(&st, img, n - 1, "bad.safetensors", &err) == -1 && strstr(err.msg, "'w'") &&
          strstr(err.msg, "out of range"));
    // header length above 100 MB
    unsigned char big[16] = {0x01, 0xe1, 0xf5, 0x05, 0, 0, 0, 0, '{', '}'}; // 100000001
    CHECK(st_parse(&st, big, sizeof big, "bad.safetensors", &err) == -1 &&
          strstr(err.msg, "exceeds"));
    free(img);

    expect_bad("[]", 0, "'{'", NULL, NULL);
    expect_bad("{\"w\":", 0, "header JSON", NULL, NULL);
    expect_bad("{\"w\":{}} \x01", 0, "header JSON", NULL, NULL);
    expect_bad("{\"w\":[1]}", 0, "'w'", "expected an object", NULL);
    expect_bad("{\"w\":{\"dtype\":\"Q7\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "'w'", "Q7",
               "unknown dtype");
    expect_bad("{\"w8\":{\"dtype\":\"F8_E4M3\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "'w8'",
               "F8_E4M3", "not supported");
    expect_bad("{\"w\":{\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "'w'", "dtype", NULL);
    expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,1]}}", 1, "'w'",
               "shape[0]", NULL);
    expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[1.0],\"data_offsets\":[0,1]}}", 1, "'w'",
               "shape[0]", NULL);
    expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":7,\"data_offsets\":[0,1]}}", 1, "'w'", "shape",
               NULL);
    expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1,
               "'w'", "9 dims", NULL);
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,12]}}", 12, "'w'",
               "16 bytes", "span 12");
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4],"
               "\"data_offsets\":[0,0]}}",
               0, "'w'", "overflows", NULL);
    expect_bad("{\"w\":{\"dtype\":\"I64\",\"shape\":[2305843009213693952],"
               "\"data_offsets\":[0,0]}}",
               0, "'w'", "byte size overflows", NULL);
    expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0]}}", 1, "'w'",
               "data_offsets", NULL);
    expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[3,2]}}", 3, "'w'",
               "end before begin", NULL);
    expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,99999999999999999999]}}",
               1, "'w'", "data_offsets", NULL);
    // tiling: gap, overlap, late start, unused trailing bytes, out of range
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
               12, "gap", "'b'", "'a'");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
               12, "overlaps", "'b'", "'a'");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]}}",
               8, "overlaps", "'z'", "'a'");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "gap", "'a'",
               "offset 0");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8, "'a'",
               "unused trailing", NULL);
    expect_bad("{}", 3, "unused trailing", NULL, NULL);
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 4, "'a'",
               "out of range", NULL);
    // names
    expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
               "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
               2, "duplicate key \"a\"", NULL, NULL); // core/json rejects it
    expect_bad("{\"a\\u0000b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "NUL",
               NULL, NULL);
    expect_bad("{\"line\\nbreak\":{\"dtype\":\"Q\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
               "'line?break'", NULL, NULL); // control bytes never break the one-line message
    { // a long name is cut at a UTF-8 boundary: 'x' + 60 x U+00E9 (2 bytes each)
        char h[400] = "{\"x", *w = h + strlen(h);
        for (int i = 0; i < 60; i++)
            w += sprintf(w, "\xc3\xa9");
        strcpy(w, "\":{\"dtype\":\"Q\",\"shape\":[1],\"data_offsets\":[0,1]}}");
        size_t n2;
        unsigned char *im = make_image(h, 1, &n2);
        CHECK(st_parse(&st, im, n2, "bad.safetensors", &err) == -1);
        const char *dots = strstr(err.msg, "...'");
        CHECK_MSG(dots != NULL, "%s", err.msg);
        const unsigned char *m = (const unsigned char *)err.msg;
        size_t len = strlen(err.msg), k;
        for (size_t i = 0; i < len; i += k) // the message stays valid UTF-8
            if (!(k = utf8_valid_prefix(m + i, len - i))) {
                CHECK_MSG(0, "invalid UTF-8 at byte %zu of %s", i, err.msg);
                break;
            }
        free(im);
    }
    // metadata
    expect_bad("{\"__metadata__\":{\"format\":\"pt\",\"n\":3}}", 0, "__metadata__", "'n'",
               "string");
    expect_bad("{\"__metadata__\":[\"pt\"]}", 0, "__metadata__", "object", NULL);
    expect_bad("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0, "duplicate key \"k\"", NULL,
               NULL);
    expect_bad("{\"__metadata__\":{},\"__metadata__\":{}}", 0, "duplicate key \"__metadata__\"",
               NULL, NULL);
}

KDA_TEST(st_accepts_edge_cases) {
    // trailing spaces inside N, zero tensors, several zero-size tensors at one offset,
    // unknown extra fields ignored (like serde), unaligned header length
    const char *h =
        "{\"__metadata__\":{},\"e1\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\""
        ":[0,0]},\"a\":{\"dtype\":\"I16\",\"shape\":[3],\"data_offsets\":[0,6],\"x\":1},"
        "\"e2\":{\"dtype\":\"U8\",\"shape\":[5,0],\"data_offsets\":[6,6]}}   ";
    size_t n;
    unsigned char *img = make_image(h, 6, &n);
    SafeTensors st;
    KdaError err;
    CHECK_MSG(st_parse(&st, img, n, NULL, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(st.n_tensors, 3);
    CHECK_EQ_INT(st.n_meta, 0);
    const StTensor *a = st_find(&st, "a");
    float v[3];
    CHECK(a && st_to_f32(a, v, &err) == 0 && v[0] == (float)(int16_t)0xABAB); // unaligned read
    st_close(&st);
    free(img);
    CHECK(st_parse(&st, "\x02\0\0\0\0\0\0\0{}", 10, NULL, &err) == 0 && st.n_tensors == 0);
    st_close(&st);
    CHECK(st_parse(&st, "\x01\0\0\0\0\0\0\0{", 9, NULL, &err) == -1 && strstr(err.msg, "<buffer>"));
}

KDA_TEST(st_open_errors_name_the_path) {
    KdaError err;
    SafeTensors st;
    const char *missing = tmp_path("missing.safetensors");
    CHECK(st_open(&st, missing, &err) == -1 && strstr(err.msg, missing));
    const char *tiny = tmp_path("tiny.safetensors");
    CHECK(write_file_atomic(tiny, "abc", 3, &err) == 0);
    CHECK(st_open(&st, tiny, &err) == -1 && strstr(err.msg, tiny) && strstr(err.msg, "truncated"));
    // a valid file with its last byte cut off
    float x[2] = {1, 2};
    int64_t shape[1] = {2};
    StWriter *w = st_writer_new();
    st_writer_add_f32(w, "w", ST_F32, 1, shape, x);
    const char *path = tmp_path("cut.safetensors");
    CHECK(st_writer_save(w, path, &err) == 0);
    st_writer_free(w);
    unsigned char *b;
    size_t n;
    CHECK(file_bytes(path, &b, &n) == 0);
    CHECK(write_file_atomic(path, b, n - 1, &err) == 0);
    free(b);
    CHECK(st_open(&st, path, &err) == -1);
    CHECK(strstr(err.msg, path) && strstr(err.msg, "'w'") && strstr(err.msg, "out of range"));
    CHECK(st_open(&st, test_tmpdir(), &err) == -1); // a directory
}

// ------------------------------------------------------------------------------------------
// Model directories

static void write_shard(const char *dir, const char *file, const char *const *names, int n,
                        const float *data) {
    char path[4096];
    int64_t shape[1] = {2};
    StWriter *w = st_writer_new();
    for (int i = 0; i < n; i++)
        st_writer_add_f32(w, names[i], ST_F32, 1, shape, data + 2 * i);
    KdaError err;
    CHECK_MSG(st_writer_save(w, path_join(path, sizeof path, dir, file), &err) == 0, "%s", err.msg);
    st_writer_free(w);
}

static void write_index(const char *dir, const char *json) {
    char path[4096];
    KdaError err;
    path_join(path, sizeof path, dir, "model.safetensors.index.json");
    CHECK(write_file_atomic(path, json, strlen(json), &err) == 0);
}

static void expect_model_bad(const char *dir, const char *s1, const char *s2) {
    StModel m;
    KdaError err;
    CHECK(st_model_open(&m, dir, &err) == -1);
    CHECK_MSG(strstr(err.msg, s1) && (!s2 || strstr(err.msg, s2)), "message \"%s\" lacks %s/%s",
              err.msg, s1, s2 ? s2 : "");
    CHECK(m.files == NULL && m.entries == NULL);
}

KDA_TEST(st_model_sharded_and_single) {
    const float data[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    const char *s1[2] = {"a.weight", "b.weight"}, *s2[2] = {"c.weight", "lm_head.weight"};
    char dir[4096];
    path_join(dir, sizeof dir, test_tmpdir(), "sharded");
    KdaError err;
    CHECK(mkdir_p(dir, &err) == 0);
    expect_model_bad(dir, "no model.safetensors", NULL);
    write_shard(dir, "model-00001-of-00002.safetensors", s1, 2, data);
    write_shard(dir, "model-00002-of-00002.safetensors", s2, 2, data + 4);
    write_index(dir, "{\"metadata\":{\"total_size\":32},\"weight_map\":{"
                     "\"a.weight\":\"model-00001-of-00002.safetensors\","
                     "\"b.weight\":\"model-00001-of-00002.safetensors\","
                     "\"c.weight\":\"model-00002-of-00002.safetensors\","
                     "\"lm_head.weight\":\"model-00002-of-00002.safetensors\"}}");
    StModel m;
    int rc = st_model_open(&m, dir, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (rc == 0) {
        CHECK_EQ_INT(m.n_files, 2);
        CHECK_EQ_INT(m.n_entries, 4);
        const char *file = NULL;
        const StTensor *t = st_model_find(&m, "c.weight", &file);
        float v[2];
        CHECK(t && st_to_f32(t, v, &err) == 0 && v[0] == 5 && v[1] == 6);
        CHECK(file && strstr(file, "model-00002-of-00002.safetensors"));
        CHECK(st_model_find(&m, "nope", &file) == NULL && file == NULL);
        for (int64_t i = 1; i < m.n_entries; i++) // iteration in name order
            CHECK(strcmp(m.entries[i - 1].tensor->name, m.entries[i].tensor->name) < 0);
        st_model_close(&m);
    }
    // index faults
    write_index(dir, "{\"weight_map\":{\"a.weight\":\"model-00002-of-00002.safetensors\","
                     "\"b.weight\":\"model-00001-of-00002.safetensors\","
                     "\"c.weight\":\"model-00002-of-00002.safetensors\","
                     "\"lm_head.weight\":\"model-00002-of-00002.safetensors\"}}");
    expect_model_bad(dir, "'a.weight'", "another shard");
    write_index(dir, "{\"weight_map\":{\"a.weight\":\"model-00001-of-00002.safetensors\","
                     "\"b.weight\":\"model-00001-of-00002.safetensors\","
                     "\"c.weight\":\"model-00002-of-00002.safetensors\"}}");
    expect_model_bad(dir, "'lm_head.weight'", "does not list");
    write_index(dir, "{\"weight_map\":{\"a.weight\":\"model-00001-of-00002.safetensors\","
                     "\"zz\":\"model-00001-of-00002.safetensors\","
                     "\"b.weight\":\"model-00001-of-00002.safetensors\"}}");
    expect_model_bad(dir, "'zz'", "no shard holds it");
    write_index(dir, "{\"weight_map\":{\"a.weight\":\"../x.safetensors\"}}");
    expect_model_bad(dir, "'a.weight'", "file name");
    write_index(dir, "{\"weight_map\":{\"a.weight\":\"missing.safetensors\"}}");
    expect_model_bad(dir, "missing.safetensors", "cannot open");
    write_index(dir, "{\"weight_map\":[]}");
    expect_model_bad(dir, "weight_map", NULL);
    // a tensor in two shards
    write_shard(dir, "model-00002-of-00002.safetensors", s1, 1, data);
    write_index(dir, "{\"weight_map\":{\"a.weight\":\"model-00001-of-00002.safetensors\","
                     "\"b.weight\":\"model-00001-of-00002.safetensors\","
                     "\"x\":\"model-00002-of-00002.safetensors\"}}");
    expect_model_bad(dir, "'a.weight'", "in both");
    // the single file form, as a directory and as a path
    write_shard(dir, "model.safetensors", s2, 2, data);
    rc = st_model_open(&m, dir, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (rc == 0) {
        CHECK(m.n_files == 1 && m.n_entries == 2 && st_model_find(&m, "lm_head.weight", NULL));
        st_model_close(&m);
    }
    char single[4096];
    rc = st_model_open(&m, path_join(single, sizeof single, dir, "model.safetensors"), &err);
    CHECK_MSG(rc == 0 && m.n_entries == 2, "%s", err.msg);
    st_model_close(&m);
    st_model_close(&m); // closing twice is allowed
}
