// test_readers.c - document readers (jsonl / txt, plain, gzip, zstd, directories, globs) and
// `kda tokenize` end to end with the bundled Llama-3 tokenizer.
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "cli/commands.h"
#include "core/util.h"
#include "data/indexed.h"
#include "data/jsonl.h"
#include "data/readers.h"
#include "test.h"
#include "tok/tok.h"

static const char *tmp(const char *name) { // path in the test's tmpdir (static buffer)
    static char buf[4][1024];
    static int k;
    k = (k + 1) % 4;
    return path_join(buf[k], sizeof buf[k], test_tmpdir(), name);
}

static void put(const char *path, const char *data, size_t n) {
    KdaError e;
    KDA_ASSERT(write_file_atomic(path, data, n, &e) == 0);
}

static void put_gz(const char *path, const char *data, size_t n, int members) {
    FILE *f = fopen(path, "wb");
    KDA_ASSERT(f);
    size_t at = 0;
    for (int m = 0; m < members; m++) { // concatenated gzip members, like `cat a.gz b.gz`
        size_t part = m == members - 1 ? n - at : n / (size_t)members;
        uLong cap = compressBound((uLong)part) + 64;
        unsigned char *out = kda_malloc(cap);
        z_stream z = {0};
        KDA_ASSERT(deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
        z.next_in = (unsigned char *)data + at, z.avail_in = (uInt)part;
        z.next_out = out, z.avail_out = (uInt)cap;
        KDA_ASSERT(deflate(&z, Z_FINISH) == Z_STREAM_END);
        fwrite(out, 1, cap - z.avail_out, f);
        deflateEnd(&z);
        free(out);
        at += part;
    }
    fclose(f);
}

static void put_zst(const char *path, const char *data, size_t n) {
    size_t cap = ZSTD_compressBound(n);
    char *out = kda_malloc(cap);
    size_t m = ZSTD_compress(out, cap, data, n, 3);
    KDA_ASSERT(!ZSTD_isError(m));
    put(path, out, m);
    free(out);
}

// Reads all documents of the inputs, joined with '|' into out. Returns the reader's rc.
static int read_all(const char *const *inputs, int n, DocReaderOptions *o, char *out, size_t cap,
                    DocReaderStats *st, KdaError *e) {
    char **paths;
    int np;
    if (docreader_expand(inputs, n, &paths, &np, e) != 0) return -1;
    DocReader *r;
    int rc = docreader_open(&r, paths, np, o, e);
    docreader_free_paths(paths, np);
    if (rc != 0) return -1;
    size_t used = 0;
    out[0] = 0;
    const char *s;
    size_t len;
    while ((rc = docreader_next(r, &s, &len, e)) == 1) {
        KDA_ASSERT(used + len + 2 < cap);
        memcpy(out + used, s, len);
        used += len;
        out[used++] = '|';
        out[used] = 0;
    }
    if (st) docreader_stats(r, st);
    docreader_close(r);
    return rc;
}

static const char k_jsonl[] = "{\"text\": \"one\", \"id\": 1}\n"
                              "\n"
                              "{\"id\": 2, \"text\": \"two \\u00e9 \xff raw\"}\n"
                              "   \n"
                              "{\"text\": \"\"}\n"
                              "{\"text\": \"last, no newline\"}";

KDA_TEST(readers_jsonl_plain_gz_zst) {
    size_t n = sizeof k_jsonl - 1;
    put(tmp("a.jsonl"), k_jsonl, n);
    put_gz(tmp("b.jsonl.gz"), k_jsonl, n, 3);
    put_zst(tmp("c.jsonl.zst"), k_jsonl, n);
    const char *want = "one|two \xc3\xa9 \xff raw||last, no newline|"; // invalid byte kept
    DocReaderOptions o = {"text", 0, 0, 0};
    char out[4096];
    KdaError e;
    DocReaderStats st;
    const char *names[] = {"a.jsonl", "b.jsonl.gz", "c.jsonl.zst"};
    for (int i = 0; i < 3; i++) {
        const char *in[] = {tmp(names[i])};
        CHECK_MSG(read_all(in, 1, &o, out, sizeof out, &st, &e) == 0, "%s: %s", names[i], e.msg);
        CHECK_MSG(strcmp(out, want) == 0, "%s: got '%s'", names[i], out);
        CHECK_EQ_INT(st.docs, 4);
        CHECK(st.bytes_read > 0 && st.bytes_read <= st.total_bytes);
    }
    // The directory: sorted, all three files, nothing else.
    put(tmp("notes.md"), "ignored", 7);
    const char *in[] = {test_tmpdir()};
    CHECK_MSG(read_all(in, 1, &o, out, sizeof out, &st, &e) == 0, "%s", e.msg);
    CHECK_EQ_INT(st.docs, 12);
    CHECK_EQ_INT(st.n_files, 3);
    // Glob.
    char pat[1024];
    snprintf(pat, sizeof pat, "%s/*.jsonl*", test_tmpdir());
    const char *g[] = {pat};
    CHECK_MSG(read_all(g, 1, &o, out, sizeof out, &st, &e) == 0, "%s", e.msg);
    CHECK_EQ_INT(st.n_files, 3);
}

typedef struct {
    int64_t lines[8];
    int n, stop_at; // stop_at: return 1 (stop) on that row count; 0 = never
} RowLog;

static int log_row(void *ctx, const JsonValue *row, int64_t line, KdaError *err) {
    RowLog *l = ctx;
    if (!json_get_str(row, "k")) return kda_fail(err, "row %lld: no k", (long long)line);
    l->lines[l->n++] = line;
    return l->n == l->stop_at;
}

// jsonl_for_each (eval task files): blank lines by Python's isspace (an ideographic space
// U+3000 line too) are skipped but counted, gzip is read, an early stop is no error, and every
// error names label, file and line.
KDA_TEST(readers_jsonl_rows_callback) {
    const char text[] = "{\"k\": \"a\"}\n\n \xe3\x80\x80\t\n{\"k\": \"b\"}\n{\"k\": \"c\"}";
    put(tmp("r.jsonl"), text, sizeof text - 1);
    put_gz(tmp("r.jsonl.gz"), text, sizeof text - 1, 2);
    KdaError e;
    for (int gz = 0; gz < 2; gz++) {
        RowLog l = {.stop_at = 0};
        CHECK_MSG(jsonl_for_each("t", tmp(gz ? "r.jsonl.gz" : "r.jsonl"), log_row, &l, &e) == 0,
                  "%s", e.msg);
        CHECK_EQ_INT(l.n, 3);
        CHECK_EQ_INT(l.lines[0], 1);
        CHECK_EQ_INT(l.lines[1], 4);
        CHECK_EQ_INT(l.lines[2], 5);
    }
    RowLog l = {.stop_at = 2};
    CHECK_EQ_INT(jsonl_for_each("t", tmp("r.jsonl"), log_row, &l, &e), 0);
    CHECK_EQ_INT(l.n, 2);
    put(tmp("bad.jsonl"), "{\"k\": \"a\"}\n{\"k\": \n", 18);
    l = (RowLog){.stop_at = 0};
    CHECK_EQ_INT(jsonl_for_each("t", tmp("bad.jsonl"), log_row, &l, &e), -1);
    CHECK_MSG(strstr(e.msg, "t: ") == e.msg && strstr(e.msg, "bad.jsonl:2: malformed JSON"), "%s",
              e.msg);
    put(tmp("nok.jsonl"), "{\"j\": 1}\n", 9);
    CHECK_EQ_INT(jsonl_for_each("t", tmp("nok.jsonl"), log_row, &l, &e), -1);
    CHECK_MSG(strcmp(e.msg, "row 1: no k") == 0, "%s", e.msg);
    CHECK_EQ_INT(jsonl_for_each("t", tmp("missing.jsonl"), log_row, &l, &e), -1);
    CHECK_MSG(strstr(e.msg, "missing.jsonl: cannot open") != NULL, "%s", e.msg);
}

KDA_TEST(readers_expand_errors_and_order) {
    KdaError e;
    char **paths;
    int np;
    const char *missing[] = {tmp("nope.jsonl")};
    CHECK(docreader_expand(missing, 1, &paths, &np, &e) != 0 && strstr(e.msg, "no such file"));
    put(tmp("x.csv"), "a", 1);
    const char *bad[] = {tmp("x.csv")};
    CHECK(docreader_expand(bad, 1, &paths, &np, &e) != 0 && strstr(e.msg, "unsupported input"));
    char pat[1024];
    snprintf(pat, sizeof pat, "%s/*.zzz", test_tmpdir());
    const char *nomatch[] = {pat};
    CHECK(docreader_expand(nomatch, 1, &paths, &np, &e) != 0 && strstr(e.msg, "no files match"));
    // Nested directories come out sorted by full path.
    char d[1024];
    KDA_ASSERT(mkdir_p(strcpy(d, tmp("d/b")), &e) == 0);
    KDA_ASSERT(mkdir_p(strcpy(d, tmp("d/a")), &e) == 0);
    put(tmp("d/b/1.txt"), "b1", 2);
    put(tmp("d/a/2.txt"), "a2", 2);
    put(tmp("d/a/1.txt"), "a1", 2);
    put(tmp("d/c.txt"), "c", 1);
    const char *dir[] = {tmp("d")};
    DocReaderOptions o = {"text", 0, 0, 0};
    char out[256];
    CHECK(read_all(dir, 1, &o, out, sizeof out, NULL, &e) == 0);
    CHECK_MSG(strcmp(out, "a1|a2|b1|c|") == 0, "%s", out);
}

KDA_TEST(readers_txt_file_and_lines) {
    const char txt[] = "line one\r\nline two\n\nline four";
    put(tmp("t.txt"), txt, sizeof txt - 1);
    put_gz(tmp("t2.txt.gz"), txt, sizeof txt - 1, 1);
    DocReaderOptions o = {"text", 1, 0, 0};
    char out[256];
    KdaError e;
    const char *in[] = {tmp("t.txt"), tmp("t2.txt.gz")};
    CHECK(read_all(in, 2, &o, out, sizeof out, NULL, &e) == 0);
    CHECK_MSG(strcmp(out, "line one|line two||line four|line one|line two||line four|") == 0, "%s",
              out);
    o.txt_lines = 0;
    CHECK(read_all(in, 2, &o, out, sizeof out, NULL, &e) == 0);
    CHECK_MSG(strcmp(out, "line one\r\nline two\n\nline four|line one\r\nline two\n\nline four|") ==
                  0,
              "%s", out);
}

KDA_TEST(readers_long_lines) {
    // Lines longer than the 1 MiB initial buffer force growth and compaction.
    size_t big = 3u << 20;
    char *data = kda_malloc(2 * big + 64);
    size_t n = 0;
    for (int k = 0; k < 2; k++) {
        n += (size_t)sprintf(data + n, "{\"text\":\"");
        memset(data + n, 'a' + k, big), n += big;
        n += (size_t)sprintf(data + n, "\"}\n");
    }
    put(tmp("big.jsonl"), data, n);
    free(data);
    char **paths;
    int np;
    KdaError e;
    const char *in[] = {tmp("big.jsonl")};
    KDA_ASSERT(docreader_expand(in, 1, &paths, &np, &e) == 0);
    DocReader *r;
    DocReaderOptions o = {"text", 0, 0, 0};
    KDA_ASSERT(docreader_open(&r, paths, np, &o, &e) == 0);
    const char *s;
    size_t len;
    for (int k = 0; k < 2; k++) {
        CHECK(docreader_next(r, &s, &len, &e) == 1);
        CHECK(len == big && s[0] == 'a' + k && s[big - 1] == 'a' + k);
    }
    CHECK(docreader_next(r, &s, &len, &e) == 0);
    docreader_close(r);
    docreader_free_paths(paths, np);
}

KDA_TEST(readers_bad_records) {
    const char bad[] = "{\"text\": \"ok\"}\n{\"text\": \"unterminated}\n{\"body\": \"x\"}\n"
                       "{\"text\": 5}\n[1]\n{\"text\": \"end\"}\n";
    char bad_path[1024];
    snprintf(bad_path, sizeof bad_path, "%s", tmp("bad.jsonl")); // tmp() buffers rotate
    put(bad_path, bad, sizeof bad - 1);
    const char *in[] = {bad_path};
    DocReaderOptions o = {"text", 0, 0, 0};
    char out[256], want[1200];
    KdaError e;
    CHECK(read_all(in, 1, &o, out, sizeof out, NULL, &e) != 0);
    snprintf(want, sizeof want, "%s:2: malformed JSON", bad_path);
    CHECK_MSG(strstr(e.msg, want) == e.msg, "%s", e.msg);
    // Each kind of bad record on its own names file:line (and the key).
    const char *cases[][2] = {
        {"{\"body\": \"x\"}\n", ":1: record has no \"text\" key"},
        {"{\"a\":1}\n{\"text\": 5}\n", ":1: record has no"},
        {"{\"text\":\"a\"}\n{\"text\": 5}\n", ":2: \"text\" is a JSON number"},
        {"[1]\n", ":1: record is a JSON array"}};
    for (int i = 0; i < 4; i++) {
        put(tmp("c.jsonl"), cases[i][0], strlen(cases[i][0]));
        const char *ci[] = {tmp("c.jsonl")};
        CHECK(read_all(ci, 1, &o, out, sizeof out, NULL, &e) != 0);
        snprintf(want, sizeof want, "%s%s", tmp("c.jsonl"), cases[i][1]);
        CHECK_MSG(strstr(e.msg, want) == e.msg, "case %d: %s", i, e.msg);
    }
    o.skip_bad = 1;
    DocReaderStats st;
    CHECK(read_all(in, 1, &o, out, sizeof out, &st, &e) == 0);
    CHECK_MSG(strcmp(out, "ok|end|") == 0, "%s", out);
    CHECK_EQ_INT(st.bad_records, 4);
    snprintf(want, sizeof want, "%s:2:", bad_path);
    CHECK_MSG(strstr(st.first_bad, want) == st.first_bad, "%s", st.first_bad);
    // Damaged compressed input: an error naming the file, not a crash.
    put(tmp("z.jsonl.zst"), "\x28\xb5\x2f\xfd garbage", 12);
    const char *zi[] = {tmp("z.jsonl.zst")};
    CHECK(read_all(zi, 1, &o, out, sizeof out, NULL, &e) != 0 && strstr(e.msg, "zstd"));
    put_gz(tmp("t.jsonl.gz"), bad, sizeof bad - 1, 1);
    KdaError e2;
    size_t gn;
    char *gz = read_file(tmp("t.jsonl.gz"), &gn, &e2);
    put(tmp("t.jsonl.gz"), gz, gn / 2); // truncated
    free(gz);
    const char *ti[] = {tmp("t.jsonl.gz")};
    CHECK(read_all(ti, 1, &o, out, sizeof out, NULL, &e) != 0 && strstr(e.msg, "gzip"));
}

KDA_TEST(readers_parquet_input) {
    const char *in[] = {test_data("parquet/snappy_dict_groups.parquet")};
    DocReaderOptions o = {"text", 0, 0, 0};
    char out[1024];
    KdaError e;
    DocReaderStats st;
    CHECK_MSG(read_all(in, 1, &o, out, sizeof out, &st, &e) == 0, "%s", e.msg);
    CHECK_EQ_INT(st.docs, 10);
    CHECK(st.nulls > 0);
    CHECK_EQ_INT(st.bytes_read, st.total_bytes);
}

// ---- kda tokenize end to end
// ----------------------------------------------------------------------

#define TOKENIZER "assets/tokenizers/llama3/tokenizer.json"

static int run_tokenize(const char *input, const char *prefix, const char *workers, int skip) {
    char *argv[] = {
        "--tokenizer",  TOKENIZER,         "--input",
        (char *)input,  "--output-prefix", (char *)prefix,
        "--append-eod", "--bos",           "--quiet",
        "--workers",    (char *)workers,   skip ? "--skip-bad-records" : "--no-skip-bad-records"};
    return cmd_tokenize((int)(sizeof argv / sizeof *argv), argv);
}

KDA_TEST(tokenize_end_to_end_workers_identical) {
    if (!path_exists(TOKENIZER)) {
        CHECK_MSG(0, "%s missing", TOKENIZER);
        return;
    }
    // 300 documents of varied length, some empty, some with special-token text and raw bytes.
    size_t cap = 1 << 20, n = 0;
    char *data = kda_malloc(cap);
    for (int i = 0; i < 300; i++) {
        n += (size_t)snprintf(data + n, cap - n, "{\"text\": \"");
        if (i % 50 != 7)
            for (int k = 0; k <= i % 17; k++)
                n += (size_t)snprintf(data + n, cap - n,
                                      "Doc %d, part %d: In the beginning "
                                      "God created the heavens and the earth. \\u00e9\\u65e5 ",
                                      i, k);
        if (i % 41 == 3) n += (size_t)snprintf(data + n, cap - n, "<|end_of_text|> \xfe");
        n += (size_t)snprintf(data + n, cap - n, "\"}\n");
    }
    put(tmp("in.jsonl"), data, n);
    free(data);
    char p1[1024], p3[1024], a[1100], b[1100];
    snprintf(p1, sizeof p1, "%s", tmp("w1"));
    snprintf(p3, sizeof p3, "%s", tmp("w3"));
    CHECK(run_tokenize(tmp("in.jsonl"), p1, "1", 0) == 0);
    CHECK(run_tokenize(tmp("in.jsonl"), p3, "3", 0) == 0);
    for (int k = 0; k < 2; k++) {
        snprintf(a, sizeof a, "%s%s", p1, k ? ".idx" : ".bin");
        snprintf(b, sizeof b, "%s%s", p3, k ? ".idx" : ".bin");
        CHECK_MSG(test_files_equal(a, b), "%s differs between --workers 1 and 3",
                  k ? ".idx" : ".bin");
    }
    IndexedDataset ds;
    KdaError e;
    CHECK_MSG(indexed_open(&ds, p1, &e) == 0, "%s", e.msg);
    CHECK_EQ_INT(ds.idx.dtype, IDX_DTYPE_INT32); // vocab 128256 >= 65500
    CHECK_EQ_INT(ds.idx.n_docs, 294);            // 6 empty documents skipped
    CHECK_EQ_INT(ds.idx.n_seq, 294);
    // Document 0 equals a direct encode with BOS and EOS (EOD = EOS = 128001).
    KdaTokenizer *tok;
    KDA_ASSERT(tok_load(&tok, TOKENIZER, &e) == 0);
    const char *doc0 = "Doc 0, part 0: In the beginning God created the heavens and the earth. "
                       "\xc3\xa9\xe6\x97\xa5 ";
    TokIds ids = {0};
    KDA_ASSERT(tok_encode(tok, doc0, strlen(doc0), TOK_ADD_BOS | TOK_ADD_EOS | TOK_SPECIALS, &ids,
                          &e) == 0);
    int64_t got[256];
    int64_t m = indexed_read_tokens(&ds, 0, 0, got, 256);
    CHECK_EQ_INT(m, (int64_t)ids.n);
    for (int64_t i = 0; i < m && i < (int64_t)ids.n; i++)
        CHECK_EQ_INT(got[i], ids.ids[i]);
    CHECK_EQ_INT(got[0], 128000);
    CHECK_EQ_INT(got[m - 1], 128001);
    tok_ids_free(&ids);
    tok_free(tok);
    indexed_close(&ds);
}

static int count_prefix(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *x; d && (x = readdir(d));)
        n += strncmp(x->d_name, prefix, strlen(prefix)) == 0;
    if (d) closedir(d);
    return n;
}

KDA_TEST(tokenize_failed_run_leaves_no_index) {
    const char bad[] = "{\"text\": \"fine\"}\n{\"text\": broken}\n{\"text\": \"also fine\"}\n";
    put(tmp("bad.jsonl"), bad, sizeof bad - 1);
    char p[1024], idx[1100];
    snprintf(p, sizeof p, "%s", tmp("out"));
    snprintf(idx, sizeof idx, "%s.idx", p);
    CHECK(run_tokenize(tmp("bad.jsonl"), p, "2", 0) == 1);
    CHECK(!path_exists(idx));
    CHECK_EQ_INT(count_prefix(test_tmpdir(), "out"), 0);   // no .bin, no temporaries
    CHECK(run_tokenize(tmp("bad.jsonl"), p, "2", 1) == 0); // --skip-bad-records
    IndexedDataset ds;
    KdaError e;
    CHECK_MSG(indexed_open(&ds, p, &e) == 0, "%s", e.msg);
    CHECK_EQ_INT(ds.idx.n_docs, 2);
    indexed_close(&ds);
    CHECK_EQ_INT(count_prefix(test_tmpdir(), "out"), 2);
}

// A record longer than max_record_bytes is an error naming FILE:LINE and the limit, before the
// buffer grows past it (issue 15, finding 7: one 4 GiB line drove tokenize to 4.4 GB RSS and
// SIGABRT). A whole-file .txt document is bounded the same way.
KDA_TEST(readers_record_size_limit) {
    size_t big = 3u << 20;
    char *data = kda_malloc(big + 64);
    size_t n = (size_t)sprintf(data, "{\"text\":\"ok\"}\n{\"text\":\"");
    memset(data + n, 'a', big), n += big;
    n += (size_t)sprintf(data + n, "\"}\n");
    put(tmp("huge.jsonl"), data, n);
    put(tmp("huge.txt"), data, n);
    free(data);
    const char *names[2] = {"huge.jsonl", "huge.txt"};
    for (int k = 0; k < 2; k++) {
        char **paths;
        int np;
        KdaError e;
        const char *in[] = {tmp(names[k])};
        KDA_ASSERT(docreader_expand(in, 1, &paths, &np, &e) == 0);
        DocReader *r;
        DocReaderOptions o = {"text", 0, 0, 2u << 20};
        KDA_ASSERT(docreader_open(&r, paths, np, &o, &e) == 0);
        const char *s;
        size_t len;
        int rc;
        while ((rc = docreader_next(r, &s, &len, &e)) == 1)
            ;
        CHECK_EQ_INT(rc, -1);
        CHECK_MSG(strstr(e.msg, names[k]) && strstr(e.msg, "2097152") &&
                      (k == 1 || strstr(e.msg, ":2:")),
                  "%s", e.msg);
        docreader_close(r);
        docreader_free_paths(paths, np);
    }
}
