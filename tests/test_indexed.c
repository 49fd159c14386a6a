// test_indexed.c - Megatron indexed dataset: round trip, byte-exact files against the Python
// reference writer (tools/reference/make_indexed_fixture.py), Primus variant, corrupt indexes.
#include <dirent.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/rng.h"
#include "core/util.h"
#include "data/indexed.h"
#include "test.h"

static int dir_entries(const char *dir) { // files in dir, excluding . and ..
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += e->d_name[0] != '.';
    if (d) closedir(d);
    return n;
}

// Writes documents given as a flat token list with sequence lengths and sequences per doc.
static int build(const char *prefix, int dtype, const int32_t *tok, const int *seq_len, int n_seq,
                 const int *seqs_per_doc, int n_doc) {
    IndexedBuilder b;
    KdaError e;
    if (indexed_builder_open(&b, prefix, dtype, &e) != 0) return -1;
    int s = 0;
    for (int d = 0; d < n_doc; d++) {
        for (int k = 0; k < seqs_per_doc[d]; k++, s++) {
            if (indexed_builder_add(&b, tok, seq_len[s], &e) != 0) {
                indexed_builder_abort(&b);
                return -1;
            }
            tok += seq_len[s];
        }
        indexed_builder_end_document(&b);
    }
    KDA_ASSERT(s == n_seq);
    return indexed_builder_finish(&b, &e);
}

KDA_TEST(indexed_byte_exact_vs_reference) {
    char prefix[512], path[600], ref[600];
    // Same documents as make_indexed_fixture.py writes.
    const int32_t t16[] = {5, 6, 7, 8, 65535, 0, 1};
    const int l16[] = {3, 1, 1, 2}, d16[] = {2, 1, 1};
    path_join(prefix, sizeof prefix, test_tmpdir(), "u16");
    CHECK(build(prefix, IDX_DTYPE_UINT16, t16, l16, 4, d16, 3) == 0);
    const int32_t t32[] = {128000, 9906, 1917, 128001, 128000, 42, 128001};
    const int l32[] = {4, 3}, d32[] = {1, 1};
    char prefix32[512];
    path_join(prefix32, sizeof prefix32, test_tmpdir(), "i32");
    CHECK(build(prefix32, IDX_DTYPE_INT32, t32, l32, 2, d32, 2) == 0);
    const char *pairs[][2] = {{prefix, "indexed/std_u16"}, {prefix32, "indexed/std_i32"}};
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 2; k++) {
            const char *ext = k ? ".idx" : ".bin";
            snprintf(path, sizeof path, "%s%s", pairs[i][0], ext);
            snprintf(ref, sizeof ref, "%s%s", pairs[i][1], ext);
            CHECK_MSG(test_files_equal(path, test_data(ref)), "%s differs from tests/data/%s", path,
                      ref);
        }
    // Only the two published files remain: no temporaries.
    CHECK_EQ_INT(dir_entries(test_tmpdir()), 4);
}

KDA_TEST(indexed_reads_reference_files) {
    IndexedDataset ds;
    KdaError e;
    char prefix[600];
    snprintf(prefix, sizeof prefix, "%s", test_data("indexed/std_u16"));
    CHECK_MSG(indexed_open(&ds, prefix, &e) == 0, "%s", e.msg);
    CHECK_EQ_INT(ds.idx.dtype, IDX_DTYPE_UINT16);
    CHECK_EQ_INT(ds.idx.n_seq, 4);
    CHECK_EQ_INT(ds.idx.n_docs, 3);
    CHECK_EQ_INT(ds.idx.doc_base, 0);
    CHECK_EQ_INT(ds.idx.n_tokens, 7);
    int64_t first, end, tok[8];
    indexed_index_doc_range(&ds.idx, 0, &first, &end);
    CHECK(first == 0 && end == 2);
    indexed_index_doc_range(&ds.idx, 2, &first, &end);
    CHECK(first == 3 && end == 4);
    CHECK_EQ_INT(indexed_read_tokens(&ds, 2, 0, tok, 8), 1);
    CHECK_EQ_INT(tok[0], 65535); // uint16 is unsigned
    CHECK_EQ_INT(indexed_read_tokens(&ds, 0, 1, tok, 8), 2);
    CHECK(tok[0] == 6 && tok[1] == 7);
    indexed_close(&ds);

    snprintf(prefix, sizeof prefix, "%s", test_data("indexed/primus"));
    CHECK_MSG(indexed_open(&ds, prefix, &e) == 0, "%s", e.msg);
    CHECK_EQ_INT(ds.idx.doc_base, 1);
    CHECK_EQ_INT(ds.idx.n_docs, 3); // D = N = 3, no leading 0
    CHECK_EQ_INT(ds.idx.n_seq, 3);
    for (int d = 0; d < 3; d++) {
        indexed_index_doc_range(&ds.idx, d, &first, &end);
        CHECK(first == d && end == d + 1);
    }
    CHECK_EQ_INT(indexed_read_tokens(&ds, 2, 0, tok, 8), 4);
    CHECK(tok[0] == 9 && tok[3] == 128255);
    indexed_close(&ds);
}

KDA_TEST(indexed_round_trip_random) {
    KdaError e;
    char prefix[512];
    path_join(prefix, sizeof prefix, test_tmpdir(), "rt");
    uint64_t s = 12345;
    for (int dt = 0; dt < 2; dt++) {
        int dtype = dt ? IDX_DTYPE_INT32 : IDX_DTYPE_UINT16;
        int64_t maxv = dt ? 128256 : 65536;
        enum { NS = 300 };
        int lens[NS], per_doc[NS], n_doc = 0, total = 0;
        for (int i = 0; i < NS; i++)
            lens[i] = (int)((s = s * 6364136223846793005ull + 1) >> 58),
            total += lens[i]; // 0..63 tokens, empty sequences included
        for (int i = 0; i < NS;) {
            int k = 1 + (int)((s = s * 6364136223846793005ull + 1) >> 62); // 1..4 seqs per doc
            if (k > NS - i) k = NS - i;
            per_doc[n_doc++] = k, i += k;
        }
        int32_t *tok = kda_malloc(sizeof(int32_t) * (size_t)(total + 1));
        for (int i = 0; i < total; i++)
            tok[i] = (int32_t)(((s = s * 6364136223846793005ull + 1) >> 33) % (uint64_t)maxv);
        CHECK(build(prefix, dtype, tok, lens, NS, per_doc, n_doc) == 0);
        IndexedDataset ds;
        CHECK_MSG(indexed_open(&ds, prefix, &e) == 0, "%s", e.msg);
        CHECK_EQ_INT(ds.idx.n_seq, NS);
        CHECK_EQ_INT(ds.idx.n_docs, n_doc);
        CHECK_EQ_INT(ds.idx.n_tokens, total);
        int64_t got[64], off = 0, seq = 0;
        for (int d = 0; d < n_doc && ds.idx.n_seq == NS; d++) {
            int64_t first, end;
            indexed_index_doc_range(&ds.idx, d, &first, &end);
            CHECK_EQ_INT(first, seq);
            CHECK_EQ_INT(end - first, per_doc[d]);
            for (; seq < end; seq++) {
                int64_t n = indexed_read_tokens(&ds, seq, 0, got, 64);
                CHECK_EQ_INT(n, lens[seq]);
                for (int64_t i = 0; i < n; i++)
                    if (got[i] != tok[off + i]) {
                        CHECK_MSG(0, "seq %lld token %lld: %lld vs %d", (long long)seq,
                                  (long long)i, (long long)got[i], tok[off + i]);
                        break;
                    }
                off += lens[seq];
            }
        }
        indexed_close(&ds);
        free(tok);
    }
}

KDA_TEST(indexed_failed_run_leaves_no_index) {
    KdaError e;
    char prefix[512], path[600];
    path_join(prefix, sizeof prefix, test_tmpdir(), "out");
    // An old dataset under the prefix, then a new run that fails (token too large for uint16).
    const int32_t ok[] = {1, 2, 3}, bad[] = {1, 70000};
    const int l1[] = {3}, d1[] = {1};
    CHECK(build(prefix, IDX_DTYPE_UINT16, ok, l1, 1, d1, 1) == 0);
    IndexedBuilder b;
    CHECK(indexed_builder_open(&b, prefix, IDX_DTYPE_UINT16, &e) == 0);
    CHECK(indexed_builder_add(&b, bad, 2, &e) != 0);
    CHECK_MSG(strstr(e.msg, "70000") != NULL, "%s", e.msg);
    indexed_builder_abort(&b);
    CHECK_EQ_INT(dir_entries(test_tmpdir()), 2); // temporaries removed, old pair untouched
    // A run that is never finished (killed): only a temporary exists, no new .idx.
    unlink(strcat(strcpy(path, prefix), ".idx"));
    unlink(strcat(strcpy(path, prefix), ".bin"));
    CHECK(indexed_builder_open(&b, prefix, IDX_DTYPE_UINT16, &e) == 0);
    CHECK(indexed_builder_add(&b, ok, 3, &e) == 0);
    fflush(b.bin);
    CHECK(!path_exists(strcat(strcpy(path, prefix), ".idx")));
    CHECK(!path_exists(strcat(strcpy(path, prefix), ".bin")));
    indexed_builder_abort(&b);
    CHECK_EQ_INT(dir_entries(test_tmpdir()), 0);
}

// ---- corrupt indexes: every check fires with its own message -----------------------------------

static unsigned char *good_index(size_t *n) { // 3 docs: [2 seqs, 1 seq, 1 seq], int32
    const int32_t lens[] = {3, 1, 1, 2};
    const int64_t docs[] = {0, 2, 3, 4};
    return indexed_index_serialize(IDX_DTYPE_INT32, lens, 4, docs, 4, n);
}

static void put64(unsigned char *p, int64_t v) {
    memcpy(p, &v, 8);
}

static int expect_error(const unsigned char *buf, size_t n, const char *what) {
    IndexedIndex idx;
    KdaError e = {{0}};
    if (indexed_index_parse(&idx, buf, n, "x.idx", &e) == 0) return 0;
    return strstr(e.msg, what) != NULL && strncmp(e.msg, "x.idx: ", 7) == 0;
}

KDA_TEST(indexed_corrupt_index_errors) {
    size_t n;
    unsigned char *g = good_index(&n), *b = kda_malloc(n + 8);
    IndexedIndex idx;
    KdaError e;
    CHECK(indexed_index_parse(&idx, g, n, NULL, &e) == 0);
    const size_t L = IDX_HEADER_SIZE, P = L + 16, D = P + 32;
#define CASE(what, edit, size)                                                                     \
    do {                                                                                           \
        memcpy(b, g, n);                                                                           \
        edit;                                                                                      \
        CHECK_MSG(expect_error(b, (size), what), "expected '%s'", what);                           \
    } while (0)
    CASE("shorter than", (void)0, 20);
    CASE("bad magic", b[3] = 'X', n);
    CASE("version 2", b[9] = 2, n);
    CASE("unknown dtype code 9", b[17] = 9, n);
    CASE("not a token dtype", b[17] = IDX_DTYPE_FLOAT32, n);
    CASE("do not fit", put64(b + 18, INT64_MAX), n);
    CASE("expected", (void)0, n - 1);             // truncated
    CASE("expected", (void)0, n + 3);             // trailing garbage
    CASE("negative length", put64(b + L, -1), n); // also breaks length[1]; first error wins
    CASE("pointer of sequence 1 is 8", put64(b + P + 8, 8), n);
    CASE("pointer of sequence 0", put64(b + P, 4), n);
    CASE("document index entry 2 is 1", put64(b + D + 16, 1), n); // decreasing
    CASE("document index entry 1 is 9", put64(b + D + 8, 9), n);  // > N
    CASE("last document index entry is 3", put64(b + D + 24, 3), n);
    CASE("document index is empty", (b[26] = 0, b[18] = 4), L + 48); // D = 0
#undef CASE
    // Primus (no leading 0) is valid; its document count is D.
    memcpy(b, g, n);
    put64(b + 26, 3);
    memmove(b + D, b + D + 8, 24);
    CHECK(indexed_index_parse(&idx, b, n - 8, NULL, &e) == 0 && idx.doc_base == 1 &&
          idx.n_docs == 3);
    // .bin of the wrong size.
    char prefix[512], path[600];
    path_join(prefix, sizeof prefix, test_tmpdir(), "c");
    CHECK(write_file_atomic(strcat(strcpy(path, prefix), ".idx"), g, n, &e) == 0);
    CHECK(write_file_atomic(strcat(strcpy(path, prefix), ".bin"), g, 27, &e) == 0);
    IndexedDataset ds;
    CHECK(indexed_open(&ds, prefix, &e) != 0);
    CHECK_MSG(strstr(e.msg, "27 bytes, but the index describes 28 bytes") != NULL, "%s", e.msg);
    free(g), free(b);
}

// indexed_builder_open checks the output up front (issue 15, finding 13: a PREFIX.bin that is
// a directory failed only after the whole corpus was tokenized) and removes the temporaries of
// dead writers (finding 11: PREFIX.bin.tmp.PID of killed runs were never removed); a live
// writer's temporaries are kept.
KDA_TEST(indexed_builder_checks_output_and_stale_temps) {
    char prefix[PATH_MAX], p[PATH_MAX + 64];
    snprintf(prefix, sizeof prefix, "%s/out", test_tmpdir());
    snprintf(p, sizeof p, "%s.bin", prefix);
    KdaError e;
    CHECK(mkdir_p(p, &e) == 0);
    IndexedBuilder b;
    CHECK(indexed_builder_open(&b, prefix, IDX_DTYPE_UINT16, &e) == -1);
    CHECK_MSG(strstr(e.msg, "out.bin") && strstr(e.msg, "directory"), "%s", e.msg);
    rmdir(p);
    pid_t dead = fork();
    if (dead == 0) _exit(0);
    waitpid(dead, NULL, 0);
    char stale[PATH_MAX + 64], live[PATH_MAX + 64];
    snprintf(stale, sizeof stale, "%s.bin.tmp.%ld", prefix, (long)dead);
    snprintf(live, sizeof live, "%s.idx.tmp.%ld", prefix, (long)getppid());
    CHECK(write_file_atomic(stale, "x", 1, &e) == 0 && write_file_atomic(live, "x", 1, &e) == 0);
    CHECK_MSG(indexed_builder_open(&b, prefix, IDX_DTYPE_UINT16, &e) == 0, "%s", e.msg);
    CHECK(!path_exists(stale));
    CHECK(path_exists(live));
    indexed_builder_abort(&b);
    unlink(live);
}

// The old .idx is moved aside, not unlinked, before the new pair is published, and put back
// when the new .bin cannot be published (issue 15, finding 11: it was unlinked first, so a
// failure there lost the old dataset's index). The failure is forced by a non-empty directory
// appearing at PREFIX.bin after the builder opened.
KDA_TEST(indexed_publish_keeps_old_index_on_failure) {
    char prefix[PATH_MAX], p[PATH_MAX + 64], q[PATH_MAX + 64];
    snprintf(prefix, sizeof prefix, "%s/pair", test_tmpdir());
    KdaError e;
    IndexedBuilder b;
    int32_t tok[3] = {1, 2, 3};
    CHECK(indexed_builder_open(&b, prefix, IDX_DTYPE_UINT16, &e) == 0);
    CHECK(indexed_builder_add(&b, tok, 3, &e) == 0);
    CHECK(indexed_builder_finish(&b, &e) == 0);
    CHECK(indexed_builder_open(&b, prefix, IDX_DTYPE_UINT16, &e) == 0);
    CHECK(indexed_builder_add(&b, tok, 2, &e) == 0);
    snprintf(p, sizeof p, "%s.bin", prefix);
    snprintf(q, sizeof q, "%s.bin/x", prefix);
    CHECK(unlink(p) == 0 && mkdir_p(p, &e) == 0 && write_file_atomic(q, "x", 1, &e) == 0);
    CHECK(indexed_builder_finish(&b, &e) == -1);
    snprintf(p, sizeof p, "%s.idx", prefix);
    CHECK_MSG(path_exists(p), "the old index was lost: %s", e.msg);
}
