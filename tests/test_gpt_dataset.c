// test_gpt_dataset.c - numpy legacy MT19937/shuffle and Megatron GPTDataset indices vs goldens
// made by tools/reference/gpt_dataset_reference.py (tests/data/gpt_dataset/). All comparisons
// are exact: the indices must equal Megatron's bit for bit.
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "test.h"
#include "data/gpt_dataset.h"
#include "data/mt19937.h"

// ---- golden file: lines "name v0 v1 ...", '#' comments --------------------------------------

typedef struct {
    char name[64];
    int64_t *v;
    int64_t n;
} Golden;

typedef struct {
    Golden *rows;
    int n;
    char *text;
} GoldenFile;

static int golden_load(GoldenFile *g, const char *rel) {
    memset(g, 0, sizeof *g);
    KdaError e;
    size_t len;
    g->text = read_file(test_data(rel), &len, &e);
    if (!g->text) return -1;
    g->rows = calloc(256, sizeof(Golden));
    for (char *line = strtok(g->text, "\n"); line && g->n < 256; line = strtok(NULL, "\n")) {
        if (line[0] == '#') continue;
        Golden *r = &g->rows[g->n++];
        char *p = line;
        size_t k = strcspn(p, " ");
        snprintf(r->name, sizeof r->name, "%.*s", (int)k, p);
        p += k;
        int64_t cap = 16;
        r->v = malloc((size_t)cap * sizeof(int64_t));
        for (;;) {
            char *end;
            long long x = strtoll(p, &end, 10);
            if (end == p) break;
            if (r->n == cap) r->v = realloc(r->v, (size_t)(cap *= 2) * sizeof(int64_t));
            r->v[r->n++] = x;
            p = end;
        }
    }
    return 0;
}

static const Golden *golden_get(const GoldenFile *g, const char *name) {
    for (int k = 0; k < g->n; k++)
        if (!strcmp(g->rows[k].name, name)) return &g->rows[k];
    return NULL;
}

static void golden_free(GoldenFile *g) {
    for (int k = 0; k < g->n; k++)
        free(g->rows[k].v);
    free(g->rows);
    free(g->text);
}

// ---- MT19937 ---------------------------------------------------------------------------------

KDA_TEST(mt19937_matches_numpy_outputs) {
    GoldenFile g;
    CHECK(golden_load(&g, "gpt_dataset/mt19937.txt") == 0);
    const uint32_t seeds[] = {42, 0, 1234, 4294967295u};
    for (int s = 0; s < 4; s++) {
        char name[64];
        snprintf(name, sizeof name, "next32_%u", seeds[s]);
        const Golden *r = golden_get(&g, name);
        CHECK(r && r->n >= 8);
        if (!r) continue;
        KdaMt19937 mt;
        mt19937_seed(&mt, seeds[s]);
        for (int64_t i = 0; i < r->n; i++) {
            uint32_t x = mt19937_next32(&mt);
            CHECK_MSG(x == (uint32_t)r->v[i], "seed %u draw %lld: %u vs %lld", seeds[s],
                      (long long)i, x, (long long)r->v[i]);
            if (x != (uint32_t)r->v[i]) break;
        }
    }
    // randint(0, 2^40, uint64) = masked rejection over 64-bit draws: checks next64's word order
    const Golden *r = golden_get(&g, "next64masked_42");
    CHECK(r && r->n == 8);
    KdaMt19937 mt;
    mt19937_seed(&mt, 42);
    for (int64_t i = 0; r && i < r->n; i++)
        CHECK_EQ_INT(mt19937_interval(&mt, (1ull << 40) - 1), r->v[i]);
    golden_free(&g);
}

KDA_TEST(mt19937_shuffle_matches_numpy) {
    GoldenFile g;
    CHECK(golden_load(&g, "gpt_dataset/mt19937.txt") == 0);
    const int64_t cases[][2] = {{42, 1}, {42, 2}, {42, 5}, {42, 100}, {7, 1000}, {3, 65537}};
    for (int c = 0; c < 6; c++) {
        char name[64];
        snprintf(name, sizeof name, "shuffle_%lld_%lld", (long long)cases[c][0],
                 (long long)cases[c][1]);
        const Golden *r = golden_get(&g, name);
        CHECK_MSG(r != NULL, "missing %s", name);
        if (!r) continue;
        int64_t n = cases[c][1];
        int64_t *x = malloc((size_t)n * sizeof *x);
        int32_t *y = malloc((size_t)n * sizeof *y);
        for (int64_t i = 0; i < n; i++)
            x[i] = y[i] = (int32_t)i;
        KdaMt19937 a, b;
        mt19937_seed(&a, (uint32_t)cases[c][0]);
        mt19937_seed(&b, (uint32_t)cases[c][0]);
        mt19937_shuffle_i64(&a, x, n);
        mt19937_shuffle_i32(&b, y, n);
        int bad = 0;
        for (int64_t i = 0; i < r->n; i++)
            bad += x[i] != r->v[i] || y[i] != r->v[i];
        CHECK_MSG(bad == 0, "%s: %d mismatches", name, bad);
        free(x);
        free(y);
    }
    golden_free(&g);
}

// ---- GPTDataset indices --------------------------------------------------------------------

static void check_array(const char *what, const char *case_name, const Golden *r,
                        const int64_t *got, int64_t n) {
    CHECK_MSG(r != NULL, "%s: missing %s", case_name, what);
    if (!r) return;
    CHECK_MSG(r->n == n, "%s %s: %lld values vs golden %lld", case_name, what, (long long)n,
              (long long)r->n);
    for (int64_t i = 0; i < n && i < r->n; i++)
        if (got[i] != r->v[i]) {
            kda_test_fail(__FILE__, __LINE__, "%s %s[%lld]: %lld vs golden %lld", case_name, what,
                          (long long)i, (long long)got[i], (long long)r->v[i]);
            return;
        }
}

static void check_gpt_case(const char *case_name, int expect_epochs, int expect_separate) {
    char rel[128];
    snprintf(rel, sizeof rel, "gpt_dataset/gpt_%s.txt", case_name);
    GoldenFile g;
    CHECK(golden_load(&g, rel) == 0);
    const Golden *len = golden_get(&g, "lengths"), *par = golden_get(&g, "params");
    CHECK(len && par && par->n == 5);
    if (!len || !par) return;
    int32_t *lengths = malloc((size_t)len->n * sizeof *lengths);
    for (int64_t i = 0; i < len->n; i++)
        lengths[i] = (int32_t)len->v[i];
    KdaGptIndex ix;
    KdaError e;
    int rc = kda_gpt_index_build(&ix, lengths, len->n, par->v[0], par->v[1], par->v[2], par->v[3],
                                 (uint32_t)par->v[4], &e);
    CHECK_MSG(rc == 0, "%s: %s", case_name, e.msg);
    if (rc) return;
    CHECK_EQ_INT(ix.num_epochs, expect_epochs);
    CHECK_EQ_INT(ix.separate_last_epoch, expect_separate);
    const Golden *es = golden_get(&g, "epochs_separate");
    CHECK(es && es->v[0] == ix.num_epochs && es->v[1] == ix.separate_last_epoch);

    int64_t *doc = malloc((size_t)ix.n_document_index * sizeof *doc);
    for (int64_t i = 0; i < ix.n_document_index; i++)
        doc[i] = ix.document_index[i];
    check_array("document_index", case_name, golden_get(&g, "document_index"), doc,
                ix.n_document_index);
    check_array("sample_index", case_name, golden_get(&g, "sample_index"), ix.sample_index,
                2 * (ix.n_samples + 1));
    check_array("shuffle_index", case_name, golden_get(&g, "shuffle_index"), ix.shuffle_index,
                ix.n_samples);

    // Samples: gather tokens (id = 1000 * sequence + offset) from the spans.
    for (int i = 0; i < 6 && i < ix.n_samples; i++) {
        char name[32];
        snprintf(name, sizeof name, "sample_%d", i);
        KdaSpan spans[64];
        int64_t ns = kda_gpt_sample_spans(&ix, lengths, i, spans, 64);
        CHECK(ns <= 64);
        int64_t toks[512], nt = 0;
        for (int64_t s = 0; s < ns && s < 64; s++)
            for (int64_t k = 0; k < spans[s].length && nt < 512; k++)
                toks[nt++] = 1000 * spans[s].seq + spans[s].offset + k;
        CHECK_EQ_INT(nt, ix.seq_length + 1);
        check_array(name, case_name, golden_get(&g, name), toks, nt);
    }
    free(doc);
    kda_gpt_index_free(&ix);
    free(lengths);
    golden_free(&g);
}

KDA_TEST(gpt_index_one_epoch) {
    check_gpt_case("one_epoch", 1, 0);
}
KDA_TEST(gpt_index_three_epochs_separate_last) {
    check_gpt_case("three_epochs_separate", 3, 1);
}
KDA_TEST(gpt_index_three_epochs_joint) {
    check_gpt_case("three_epochs_joint", 3, 0);
}
KDA_TEST(gpt_index_split_with_empty_sequences) {
    check_gpt_case("split_zero_len", 1, 0);
}
KDA_TEST(gpt_index_fixed_chunks) {
    check_gpt_case("chunks", 3, 1);
}

KDA_TEST(gpt_index_rejects_bad_input) {
    int32_t lengths[4] = {5, 3, -1, 4};
    KdaGptIndex ix;
    KdaError e;
    CHECK(kda_gpt_index_build(&ix, lengths, 4, 0, 2, 16, 10, 42, &e) == -1); // 8 < 17 tokens
    CHECK(strstr(e.msg, "fewer than") != NULL);
    CHECK(kda_gpt_index_build(&ix, lengths, 4, 0, 4, 2, 10, 42, &e) == -1); // negative length
    CHECK(kda_gpt_index_build(&ix, lengths, 4, 3, 2, 2, 10, 42, &e) == -1); // out of range
    CHECK(kda_gpt_index_build(&ix, lengths, 4, 0, 2, 1, 10, 42, &e) == -1); // seq_length 1
    CHECK(ix.document_index == NULL);
}

// ---- splits and blends ---------------------------------------------------------------------

KDA_TEST(split_bounds_match_megatron) {
    // Pairs "split n b0..b3" (Megatron's bounds) with the next "str <split string>" line.
    KdaError e;
    size_t len;
    char *text = read_file(test_data("gpt_dataset/split.txt"), &len, &e);
    CHECK(text != NULL);
    int pairs = 0;
    long long n = 0, b[4] = {0};
    for (char *line = text ? strtok(text, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        if (!strncmp(line, "split ", 6)) {
            CHECK(sscanf(line + 6, "%lld %lld %lld %lld %lld", &n, &b[0], &b[1], &b[2], &b[3]) ==
                  5);
        } else if (!strncmp(line, "str ", 4)) {
            double split[3];
            CHECK_MSG(kda_split_parse(line + 4, split, &e) == 0, "%s", e.msg);
            int64_t got[4];
            kda_split_bounds(split, n, got);
            for (int k = 0; k < 4; k++)
                CHECK_MSG(got[k] == b[k], "split %s n=%lld: bound %d is %lld, Megatron %lld",
                          line + 4, n, k, (long long)got[k], b[k]);
            pairs++;
        }
    }
    CHECK_EQ_INT(pairs, 7);
    free(text);
    double split[3];
    CHECK(kda_split_parse("1,2,3,4", split, &e) == -1);
    CHECK(kda_split_parse("0,0", split, &e) == -1);
    // a sign or any other character is not a separator (issue 15, finding 13: "-1,2,0" read as
    // 1,2,0); Megatron's separators ',' and '/' (and blanks) are
    CHECK(kda_split_parse("-1,2,0", split, &e) == -1 && strstr(e.msg, "'-'"));
    CHECK(kda_split_parse("98x1,1", split, &e) == -1);
    CHECK(kda_split_parse("98/1/1", split, &e) == 0 && split[0] == 0.98);
    CHECK(kda_split_parse(" 969, 30, 1 ", split, &e) == 0);
    CHECK(kda_split_parse("1.2.3", split, &e) == -1);
}

KDA_TEST(blend_indices_match_megatron) {
    KdaError e;
    size_t len;
    char *text = read_file(test_data("gpt_dataset/blend.txt"), &len, &e);
    CHECK(text != NULL);
    if (!text) return;
    double w[8];
    int nw = 0, blends = 0;
    int64_t size = 0;
    int16_t di[256];
    int64_t dsi[256];
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char *p;
        if (!strncmp(line, "weights ", 8)) {
            nw = 0;
            for (p = line + 8; nw < 8;) {
                char *end;
                double x = strtod(p, &end);
                if (end == p) break;
                w[nw++] = x;
                p = end;
            }
            CHECK(kda_blend_normalize(w, nw, &e) == 0);
        } else if ((p = strstr(line, "_size "))) {
            size = strtoll(p + 6, NULL, 10);
            CHECK(size > 0 && size <= 256);
            kda_blend_build(w, nw, size, di, dsi);
        } else if ((p = strstr(line, "_dataset ")) || (p = strstr(line, "_sample "))) {
            int is_ds = strstr(line, "_dataset ") != NULL;
            p = strchr(line, ' ');
            for (int64_t s = 0; s < size; s++) {
                long long x = strtoll(p, &p, 10);
                long long got = is_ds ? di[s] : dsi[s];
                if (got != x) {
                    kda_test_fail(__FILE__, __LINE__, "%s[%lld]: %lld vs Megatron %lld", line,
                                  (long long)s, got, x);
                    break;
                }
            }
            blends += is_ds;
        }
    }
    CHECK_EQ_INT(blends, 3);
    free(text);
    CHECK_EQ_INT(kda_blend_dataset_size(1000000, 0.3, 0.005), 301500);
    CHECK_EQ_INT(kda_blend_dataset_size(10000, 0.7, 0.005), 7035);
    double bad[2] = {1, -1};
    CHECK(kda_blend_normalize(bad, 2, &e) == -1);
}

// ---- FLA order -----------------------------------------------------------------------------

KDA_TEST(fla_order_structure) {
    KdaFlaOrder o;
    KdaError e;
    // N = 10 chunks, dp = 4 -> total 12, padded with perm[0], perm[1]
    CHECK(kda_fla_order_build(&o, 10, 4, 42, &e) == 0);
    CHECK_EQ_INT(o.total, 12);
    CHECK(o.perm[10] == o.perm[0] && o.perm[11] == o.perm[1]);
    int seen[10] = {0};
    for (int k = 0; k < 10; k++)
        seen[o.perm[k]]++;
    for (int k = 0; k < 10; k++)
        CHECK_EQ_INT(seen[k], 1);
    // perm is RandomState(42).shuffle(arange(10)), the same draws as the numpy golden
    int64_t ref[10];
    for (int k = 0; k < 10; k++)
        ref[k] = k;
    KdaMt19937 mt;
    mt19937_seed(&mt, 42);
    mt19937_shuffle_i64(&mt, ref, 10);
    for (int k = 0; k < 10; k++)
        CHECK_EQ_INT(o.perm[k], ref[k]);
    // mbs 1, dp 4: global sample g at step t, rank r -> perm[r + t*4] = perm[g]
    for (int g = 0; g < 12; g++)
        CHECK_EQ_INT(kda_fla_order_chunk(&o, g, 1), o.perm[g]);
    // mbs 2, dp 4 (gb 8): g = 3 -> t 0, r 1, j 1 -> k = 1 + 1*4 = 5
    CHECK_EQ_INT(kda_fla_order_chunk(&o, 3, 2), o.perm[5]);
    // g = 9 -> t 1, r 0, j 1 -> k = 0 + (2 + 1)*4 = 12 >= 12 -> chunk 0 (Primus's fallback)
    CHECK_EQ_INT(kda_fla_order_chunk(&o, 9, 2), 0);
    // wrap: g = 12 + 3 behaves as g = 3
    CHECK_EQ_INT(kda_fla_order_chunk(&o, 15, 2), o.perm[5]);
    kda_fla_order_free(&o);
}
