// test_loader_fla.c - the FLA data order of the loader (loader.h, data-formats.md §3.3-3.4):
// chunks come out in the permutation's order and wrap around with the same permutation, the
// split applies, uneven sequences are concatenated and cut (remainder dropped), a row gives
// seq_length - 1 targets through the trainer's CPU runtime, the order is part of the data
// fingerprint, and a trainer run with data_order fla resumes bit-identically.
// Data: small synthetic indexed datasets built in the test's temp dir; model: configs/tiny.json.
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "data/indexed.h"
#include "model/config.h"
#include "model/model.h"
#include "model/params.h"
#include "test.h"
#include "data/gpt_dataset.h"
#include "data/loader.h"
#include "train/run_config.h"
#include "train/trainer.h"
#include "tiny_model.h"   // defines: tiny_runtime
#include "trainer_case.h" // defines: trainer_case_config, trainer_case_expect_same_run

#define L 16 // seq_length of every test

// token k of chunk c in an FLA-style dataset (one L-token sequence per document): the first
// token names the chunk, the rest is a learnable pattern. Values stay in [10, 250).
static int32_t fla_tok(int c, int k) {
    return k == 0 ? 10 + c : 60 + (c + 3 * k) % 40;
}

// FLA-style dataset of n chunks (Primus's converter layout), at TMP/name.
static const char *make_fla_data(const char *name, int n) {
    static char prefix[PATH_MAX];
    snprintf(prefix, sizeof prefix, "%s/%s", test_tmpdir(), name);
    IndexedBuilder b;
    KdaError err;
    if (indexed_builder_open(&b, prefix, IDX_DTYPE_UINT16, &err)) return NULL;
    int32_t tok[L];
    for (int c = 0; c < n; c++) {
        for (int k = 0; k < L; k++)
            tok[k] = fla_tok(c, k);
        if (indexed_builder_add(&b, tok, L, &err)) return NULL;
        indexed_builder_end_document(&b);
    }
    return indexed_builder_finish(&b, &err) ? NULL : prefix;
}

static KdaLoaderSpec fla_spec(const char *const *paths, uint32_t seed) {
    return (KdaLoaderSpec){.paths = paths,
                           .n_paths = 1,
                           .split = "90,10,0",
                           .split_part = 0,
                           .seq_length = L,
                           .num_samples = 64,
                           .seed = seed,
                           .objective = KDA_OBJ_FLA,
                           .n_vocab = 256,
                           .order = KDA_ORDER_FLA,
                           .micro_batch = 4};
}

// 40 chunks, split 90/10/0 -> 36 train chunks (documents 0..35), 4 valid chunks (36..39).
// Sample g is sequence perm[g] verbatim; the first 36 samples visit every chunk once; samples
// past 36 repeat the same order (g mod 36); prefetched batches equal direct reads.
KDA_TEST(loader_fla_permutation_order_and_wrap) {
    const char *data = make_fla_data("fla40", 40);
    CHECK(data != NULL);
    const char *paths[1] = {data};
    KdaLoaderSpec sp = fla_spec(paths, 5);
    KdaLoader *l;
    KdaError err;
    CHECK_MSG(kda_loader_open(&l, &sp, &err) == 0, "%s", err.msg);
    if (!l) return;
    CHECK_EQ_INT(kda_loader_row_tokens(l), L);
    CHECK_EQ_INT(kda_loader_n_chunks(l), 36);
    CHECK_EQ_INT(kda_loader_n_samples(l), 36);
    KdaFlaOrder o;
    CHECK(kda_fla_order_build(&o, 36, 1, 5, &err) == 0);
    int seen[36] = {0}, identity = 1;
    int32_t row[L];
    for (int64_t g = 0; g < 36 * 3 + 5; g++) {
        CHECK(kda_loader_read(l, g, 1, row, &err) == 0);
        int64_t c = o.perm[g % 36];
        CHECK_EQ_INT(kda_loader_fla_chunk(l, g), c);
        for (int k = 0; k < L; k++)
            CHECK_MSG(row[k] == fla_tok((int)c, k), "sample %lld token %d: %d, expected %d",
                      (long long)g, k, row[k], fla_tok((int)c, k));
        if (g < 36) seen[row[0] - 10]++;
        if (g < 36 && c != g) identity = 0;
    }
    for (int c = 0; c < 36; c++)
        CHECK_MSG(seen[c] == 1, "chunk %d seen %d times in the first epoch", c, seen[c]);
    CHECK_MSG(!identity, "the order is the identity: not shuffled");
    kda_fla_order_free(&o);
    // prefetch == direct reads, starting mid-epoch and crossing the wrap
    int32_t direct[4 * L];
    CHECK(kda_loader_start(l, 30, 4, 2, &err) == 0);
    for (int k = 0; k < 4; k++) {
        const int32_t *b = kda_loader_next(l, &err);
        CHECK(b != NULL);
        CHECK(kda_loader_read(l, 30 + 4 * k, 4, direct, &err) == 0);
        CHECK(b && memcmp(b, direct, sizeof direct) == 0);
    }
    CHECK(strstr(kda_loader_describe(l), "order=fla chunks=36 dropped=0 dp=1") != NULL);
    uint64_t fp = kda_loader_fingerprint(l);
    kda_loader_free(l);
    // another seed gives another order; the valid part holds only chunks 36..39
    sp.seed = 6;
    CHECK(kda_loader_open(&l, &sp, &err) == 0);
    int differ = 0;
    for (int64_t g = 0; g < 36; g++) {
        CHECK(kda_loader_read(l, g, 1, row, &err) == 0);
        KdaFlaOrder o5;
        CHECK(kda_fla_order_build(&o5, 36, 1, 5, &err) == 0);
        differ |= row[0] - 10 != o5.perm[g];
        kda_fla_order_free(&o5);
    }
    CHECK(differ);
    CHECK(kda_loader_fingerprint(l) != fp);
    kda_loader_free(l);
    sp.split_part = 1;
    CHECK(kda_loader_open(&l, &sp, &err) == 0);
    CHECK_EQ_INT(kda_loader_n_chunks(l), 4);
    for (int64_t g = 0; g < 8; g++) {
        CHECK(kda_loader_read(l, g, 1, row, &err) == 0);
        CHECK_MSG(row[0] >= 10 + 36 && row[0] < 10 + 40, "valid sample %lld is chunk %d",
                  (long long)g, row[0] - 10);
    }
    kda_loader_free(l);
}

// The order is part of the fingerprint: the same data in Megatron order (objective fla, so
// rows are also L tokens) describes differently; FLA order needs the FLA objective and one
// dataset; dp > 1 follows kda_fla_order_chunk's strided mapping.
KDA_TEST(loader_fla_fingerprint_and_checks) {
    const char *data = make_fla_data("fla40b", 40);
    CHECK(data != NULL);
    const char *paths[2] = {data, data};
    KdaLoaderSpec sp = fla_spec(paths, 5);
    KdaLoader *l;
    KdaError err;
    CHECK(kda_loader_open(&l, &sp, &err) == 0);
    uint64_t fp_fla = kda_loader_fingerprint(l);
    kda_loader_free(l);
    sp.order = KDA_ORDER_MEGATRON;
    CHECK(kda_loader_open(&l, &sp, &err) == 0);
    CHECK(kda_loader_fingerprint(l) != fp_fla);
    CHECK(strstr(kda_loader_describe(l), "order=") == NULL); // Megatron descriptions unchanged
    CHECK_EQ_INT(kda_loader_fla_chunk(l, 0), -1);
    kda_loader_free(l);
    sp.order = KDA_ORDER_FLA;
    sp.objective = KDA_OBJ_MEGATRON;
    CHECK(kda_loader_open(&l, &sp, &err) == -1 && l == NULL);
    CHECK_MSG(strstr(err.msg, "FLA objective") != NULL, "%s", err.msg);
    sp.objective = KDA_OBJ_FLA;
    sp.n_paths = 2;
    CHECK(kda_loader_open(&l, &sp, &err) == -1);
    CHECK_MSG(strstr(err.msg, "one dataset") != NULL, "%s", err.msg);
    sp.n_paths = 1;
    sp.dp = 2;
    CHECK(kda_loader_open(&l, &sp, &err) == 0);
    KdaFlaOrder o;
    CHECK(kda_fla_order_build(&o, 36, 2, 5, &err) == 0);
    for (int64_t g = 0; g < 40; g++)
        CHECK_EQ_INT(kda_loader_fla_chunk(l, g), kda_fla_order_chunk(&o, g, 4));
    CHECK(strstr(kda_loader_describe(l), "dp=2 mbs=4") != NULL);
    kda_fla_order_free(&o);
    kda_loader_free(l);
}

// Uneven documents: the split's sequences are concatenated in order and cut into L-token
// chunks, the remainder of the split dropped. Token at stream position p is 1 + p % 200, so
// chunk c of a split starting at stream position p0 must be 1 + (p0 + c*L + t) % 200.
KDA_TEST(loader_fla_concatenate_and_cut) {
    static const int lens[10] = {5, 23, 0, 1, 40, 16, 7, 31, 12, 9}; // 144 tokens
    char prefix[PATH_MAX];
    snprintf(prefix, sizeof prefix, "%s/uneven", test_tmpdir());
    IndexedBuilder b;
    KdaError err;
    CHECK(indexed_builder_open(&b, prefix, IDX_DTYPE_UINT16, &err) == 0);
    int32_t tok[64];
    int p = 0;
    for (int d = 0; d < 10; d++) {
        for (int k = 0; k < lens[d]; k++, p++)
            tok[k] = 1 + p % 200;
        CHECK(indexed_builder_add(&b, tok, lens[d], &err) == 0);
        indexed_builder_end_document(&b);
    }
    CHECK_MSG(indexed_builder_finish(&b, &err) == 0, "%s", err.msg);
    const char *paths[1] = {prefix};
    KdaLoaderSpec sp = fla_spec(paths, 9);
    sp.split = "80,20,0"; // documents 0..7 (123 tokens) and 8..9 (21 tokens)
    struct {
        int part;
        int64_t p0, n_chunks, dropped;
    } cases[2] = {{0, 0, 7, 123 - 7 * L}, {1, 123, 1, 21 - L}};
    for (int ci = 0; ci < 2; ci++) {
        sp.split_part = cases[ci].part;
        KdaLoader *l;
        CHECK_MSG(kda_loader_open(&l, &sp, &err) == 0, "%s", err.msg);
        if (!l) continue;
        CHECK_EQ_INT(kda_loader_n_chunks(l), cases[ci].n_chunks);
        char want[64];
        snprintf(want, sizeof want, "chunks=%lld dropped=%lld", (long long)cases[ci].n_chunks,
                 (long long)cases[ci].dropped);
        CHECK_MSG(strstr(kda_loader_describe(l), want) != NULL, "%s", kda_loader_describe(l));
        int32_t row[L];
        for (int64_t g = 0; g < 2 * cases[ci].n_chunks; g++) {
            CHECK(kda_loader_read(l, g, 1, row, &err) == 0);
            int64_t c = kda_loader_fla_chunk(l, g);
            CHECK(c >= 0 && c < cases[ci].n_chunks);
            for (int t = 0; t < L; t++)
                CHECK_MSG(row[t] == 1 + (cases[ci].p0 + c * L + t) % 200,
                          "part %d chunk %lld token %d: %d", cases[ci].part, (long long)c, t,
                          row[t]);
        }
        kda_loader_free(l);
    }
    // a split with fewer than L tokens has no chunk
    sp.split = "90,10,0"; // valid = document 9 (9 tokens)
    sp.split_part = 1;
    KdaLoader *l;
    CHECK(kda_loader_open(&l, &sp, &err) == -1);
    CHECK_MSG(strstr(err.msg, "one chunk") != NULL, "%s", err.msg);
}

// A row through the trainer's path: the CPU runtime's training forward (labels = ids, shifted by
// the model) on FLA-order rows averages exactly L - 1 targets per row, the last position ignored.
// Reference: log-softmax of the logits of an identically initialized model, summed in double
// over t < L - 1 and divided by B*(L-1). Tolerance 1e-5 relative: both sides reduce the same
// fp32 logits (the model's own loss sum is float), ~30 terms of size ~5.5.
KDA_TEST(loader_fla_labels_last_ignored) {
    const char *data = make_fla_data("fla40c", 40);
    CHECK(data != NULL);
    const char *paths[1] = {data};
    KdaLoaderSpec sp = fla_spec(paths, 5);
    KdaLoader *l;
    KdaError err;
    CHECK(kda_loader_open(&l, &sp, &err) == 0);
    if (!l) return;
    enum { B = 2 };
    int32_t ids[B * L];
    CHECK(kda_loader_read(l, 3, B, ids, &err) == 0);
    kda_loader_free(l);

    KdaConfig cfg;
    CHECK(kda_config_load(&cfg, "configs/tiny.json", &err) == 0);
    CHECK(kda_config_derive(&cfg, "tiny", &err) == 0);
    KdaModel m, ref;
    CHECK(kda_model_init(&m, &cfg, &err) == 0);
    CHECK(kda_model_init(&ref, &cfg, &err) == 0);
    kda_params_init(&m.table, &m.cfg, m.params, 17);
    kda_params_init(&ref.table, &ref.cfg, ref.params, 17);
    KdaRuntime *rt = tiny_runtime(&m, "cpu", NULL);
    KdaAdamWConfig oc = {0.9, 0.95, 1e-8, 0.01};
    CHECK(rt && kda_runtime_train_init(rt, &oc, &err) == 0);
    float loss = NAN;
    CHECK_MSG(kda_runtime_train_step(rt, ids, B, L, 0, &loss, &err) == 0, "%s", err.msg);

    int64_t V = cfg.vocab_size;
    float *logits = kda_malloc((size_t)(B * L * V) * sizeof(float));
    float nll[B * L];
    CHECK(kda_model_forward(&ref, ids, NULL, B, L, nll, logits, NULL, &err) == 0);
    double sum = 0;
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < L - 1; t++) {
            const float *z = logits + ((int64_t)b * L + t) * V;
            double mx = z[0], se = 0;
            for (int64_t v = 1; v < V; v++)
                mx = z[v] > mx ? z[v] : mx;
            for (int64_t v = 0; v < V; v++)
                se += exp(z[v] - mx);
            sum += mx + log(se) - z[ids[b * L + t + 1]];
        }
        CHECK_MSG(nll[b * L + L - 1] == 0.0f, "row %d: the last position has a target", b);
    }
    double want = sum / (B * (L - 1));
    CHECK_MSG(fabs(loss - want) <= 1e-5 * want, "runtime loss %.9g, mean over %d targets %.9g",
              loss, B * (L - 1), want);
    fprintf(stderr, "  labels: loss %.7f = mean over %d = B*(L-1) targets (ref %.7f)\n", loss,
            B * (L - 1), want);
    free(logits);
    kda_runtime_close(rt);
    kda_model_free(&m);
    kda_model_free(&ref);
}

// ---- trainer with data_order fla ----

static int make_rc(KdaRunConfig *rc, const char *data, const char *save, const char *extra) {
    char y[4096];
    snprintf(y, sizeof y,
             "model: configs/tiny.json\ntrain_data_path: [%s]\nsplit: \"90,10,0\"\n"
             "seq_length: %d\ntrain_iters: 8\nglobal_batch_size: 8\nmicro_batch_size: 4\n"
             "lr: 3.0e-3\nmin_lr: 3.0e-4\nlr_warmup_iters: 2\nlog_interval: 100\n"
             "save: %s\nseed: 7\nobjective: fla\ndata_order: fla\n"
             "eval_interval: 3\neval_iters: 1\n",
             data, L, save);
    return trainer_case_config(rc, y, extra);
}

typedef struct {
    float loss[16];
    double norm[16];
} Rec;

static void rec_step(void *u, const KdaStepInfo *s) {
    Rec *r = u;
    if (s->iteration <= 16) {
        r->loss[s->iteration - 1] = s->loss;
        r->norm[s->iteration - 1] = s->grad_norm;
    }
}

static int run(KdaRunConfig *rc, Rec *rec, int64_t stop_after, KdaTrainResult *res, KdaError *err) {
    KdaTrainOptions o = {
        .rc = rc, .quiet = 1, .stop_after = stop_after, .on_step = rec_step, .user = rec};
    return kda_train(&o, res, err);
}

// 8 iterations x 8 samples = 64 samples over 36 train chunks: the order wraps at sample 36
// (iteration 5), after the resume point (iteration 4). Straight 8 == 4 + stop/save + resume + 4:
// every loss and grad norm bit-equal, final weights and moments byte-identical, and the
// checkpoint's data description records the FLA order.
KDA_TEST(loader_fla_trainer_resume_bit_identical) {
    const char *data = make_fla_data("fla40d", 40);
    CHECK(data != NULL);
    char sa[1024], sb[1024], pa[PATH_MAX];
    snprintf(sa, sizeof sa, "%s/fla_a", test_tmpdir());
    snprintf(sb, sizeof sb, "%s/fla_b", test_tmpdir());
    KdaRunConfig rc;
    Rec ra = {0}, rb = {0};
    KdaTrainResult res;
    KdaError err;
    CHECK(make_rc(&rc, data, sa, NULL) == 0);
    CHECK_MSG(run(&rc, &ra, 0, &res, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(res.iteration, 8);
    CHECK_EQ_INT(res.consumed_samples, 64);
    kda_run_config_free(&rc);

    CHECK(make_rc(&rc, data, sb, NULL) == 0);
    CHECK_MSG(run(&rc, &rb, 4, &res, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(res.iteration, 4);
    CHECK_MSG(run(&rc, &rb, 0, &res, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(res.start_iteration, 4);
    CHECK_EQ_INT(res.iteration, 8);
    kda_run_config_free(&rc);
    trainer_case_expect_same_run(ra.loss, ra.norm, rb.loss, rb.norm, 8, sa, sb);
    snprintf(pa, sizeof pa, "%s/iter_0000008/trainer_state.json", sa);
    size_t n;
    char *st = read_file(pa, &n, &err);
    CHECK_MSG(st && strstr(st, "order=fla chunks=36") && strstr(st, "order=fla chunks=4"),
              "trainer_state.json lacks the FLA order in its data descriptions");
    free(st);
    fprintf(stderr,
            "  fla resume: 8 losses bit-equal (first %.6f, last %.6f), wraps at sample 36\n",
            ra.loss[0], ra.loss[7]);
}

// Run config: data_order is a checked enum; fla needs objective fla.
KDA_TEST(loader_fla_run_config) {
    KdaRunConfig rc;
    KdaError err;
    const char *y = "model: m.json\ntrain_data_path: d\ntrain_iters: 1\ndata_order: fla\n";
    kda_run_config_defaults(&rc);
    CHECK(!strcmp(rc.data_order, "megatron"));
    CHECK(kda_run_config_parse(&rc, y, strlen(y), "t.yaml", &err) == 0);
    CHECK(kda_run_config_validate(&rc, &err) == -1);
    CHECK_MSG(strstr(err.msg, "objective: fla") != NULL, "%s", err.msg);
    const char *v[1] = {"fla"};
    CHECK(kda_run_config_set(&rc, "objective", v, 1, &err) == 0);
    CHECK(kda_run_config_validate(&rc, &err) == 0);
    const char *bad[1] = {"hf"};
    CHECK(kda_run_config_set(&rc, "data-order", bad, 1, &err) == -1);
    kda_run_config_free(&rc);
}
