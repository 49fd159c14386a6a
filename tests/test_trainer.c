// test_trainer.c - the training loop: exact resume, accumulation equivalence, learning, NaN
// skipping/abort, SIGINT checkpoint, incompatible resume config, loader determinism.
// Model: configs/tiny.json (D 64, L 2, vocab 256); data: a small synthetic indexed dataset
// built in the test's temp dir (a learnable arithmetic token pattern).
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/json.h"
#include "core/util.h"
#include "io/model_io.h"
#include "fixtures.h" // defines: TestDocs, TEST_DOCS, test_write_docs
#include "test.h"
#include "train/checkpoint.h"
#include "data/loader.h"
#include "train/run_config.h"
#include "train/trainer.h"
#include "trainer_case.h" // defines: trainer_case_config, trainer_case_expect_same_run

// 120 documents of 20..59 tokens (fixtures.h TEST_DOCS).
static const char *make_data(void) {
    static char prefix[PATH_MAX];
    snprintf(prefix, sizeof prefix, "%s/data", test_tmpdir());
    KdaError err;
    return test_write_docs(prefix, TEST_DOCS(120), &err) ? NULL : prefix;
}

// A run config for the tiny model; extra is YAML applied on top (overrides).
static int make_rc(KdaRunConfig *rc, const char *data, const char *save, const char *extra) {
    char y[8192]; // room for a PATH_MAX data prefix: nothing is cut (-Wformat-truncation)
    snprintf(y, sizeof y,
             "model: configs/tiny.json\ntrain_data_path: [%s]\nsplit: \"90,10,0\"\n"
             "seq_length: 16\ntrain_iters: 8\nglobal_batch_size: 8\nmicro_batch_size: 4\n"
             "lr: 3.0e-3\nmin_lr: 3.0e-4\nlr_warmup_iters: 2\nlog_interval: 100\n"
             "save: %s\nseed: 7\n",
             data, save);
    return trainer_case_config(rc, y, extra);
}

typedef struct {
    float loss[64];
    double norm[64];
    int skipped[64];
    int n;
    int64_t poison_from, poison_to; // iterations [from, to] get a NaN loss in micro-batch 0
    int64_t raise_at;               // raise SIGINT after this iteration
} Rec;

static void rec_step(void *u, const KdaStepInfo *s) {
    Rec *r = u;
    if (s->iteration <= 64) {
        r->loss[s->iteration - 1] = s->loss;
        r->norm[s->iteration - 1] = s->grad_norm;
        r->skipped[s->iteration - 1] = s->skipped;
    }
    r->n++;
    if (r->raise_at && s->iteration == r->raise_at) raise(SIGINT);
}

static int rec_poison(void *u, int64_t it, int micro) {
    Rec *r = u;
    return micro == 0 && it >= r->poison_from && it <= r->poison_to;
}

static int run(KdaRunConfig *rc, Rec *rec, int64_t stop_after, KdaTrainResult *res, KdaError *err) {
    KdaTrainOptions o = {.rc = rc,
                         .quiet = 1,
                         .stop_after = stop_after,
                         .on_step = rec_step,
                         .poison = rec_poison,
                         .user = rec};
    return kda_train(&o, res, err);
}

// Straight 8 iterations == 4 + stop/save + resume + 4: every loss and grad norm bit-equal, the
// final weights and Adam moments byte-identical (evaluation included, so the valid cursor is
// part of the resumed state too).
KDA_TEST(trainer_resume_bit_identical) {
    const char *data = make_data();
    CHECK(data != NULL);
    char sa[1024], sb[1024];
    snprintf(sa, sizeof sa, "%s/a", test_tmpdir());
    snprintf(sb, sizeof sb, "%s/b", test_tmpdir());
    const char *ev = "eval_interval: 3\neval_iters: 1\n";
    KdaRunConfig rc;
    Rec ra = {0}, rb = {0};
    KdaTrainResult res;
    KdaError err;
    CHECK(make_rc(&rc, data, sa, ev) == 0);
    CHECK_MSG(run(&rc, &ra, 0, &res, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(res.iteration, 8);
    kda_run_config_free(&rc);

    CHECK(make_rc(&rc, data, sb, ev) == 0);
    CHECK_MSG(run(&rc, &rb, 4, &res, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(res.iteration, 4);
    CHECK(res.interrupted);
    CHECK_MSG(run(&rc, &rb, 0, &res, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(res.start_iteration, 4);
    CHECK_EQ_INT(res.iteration, 8);
    kda_run_config_free(&rc);
    trainer_case_expect_same_run(ra.loss, ra.norm, rb.loss, rb.norm, 8, sa, sb);
    fprintf(stderr,
            "  resume: 8 losses bit-equal (first %.6f, last %.6f), weights and moments "
            "byte-identical\n",
            ra.loss[0], ra.loss[7]);
}

// Loads the weights of SAVE/iter_NNNNNNN into a malloc'd buffer.
static float *load_weights(const char *save, int it, int64_t *n) {
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/iter_%07d", save, it);
    KdaConfig c;
    KdaParamTable t;
    float *w = NULL;
    KdaError err;
    if (kda_model_load_dir(dir, &c, &t, &w, &err)) return NULL;
    *n = t.total_numel;
    kda_params_free(&t);
    return w;
}

// One update from 1 x micro 8 equals one from 2 x micro 4 (mean of micro-batch means; every
// row has the same target count). adam_eps 1 makes the update smooth in g (no sign-like first
// Adam step), so the 1e-6 tolerance on the weights bounds the fp32 summation-order differences
// of gradients; losses agree to 1e-5 and grad norms to 1e-5 relative (the mean of two
// micro-batch means vs one mean of 8 rows: fp32 rounding of the per-row sums, ~1e-7 relative).
KDA_TEST(trainer_accumulation_equivalence) {
    const char *data = make_data();
    char s1[PATH_MAX], s2[PATH_MAX];
    snprintf(s1, sizeof s1, "%s/m8", test_tmpdir());
    snprintf(s2, sizeof s2, "%s/m4", test_tmpdir());
    const char *x = "train_iters: 2\nlr_warmup_iters: 0\nlr: 1.0e-2\nmin_lr: 1.0e-2\n"
                    "adam_eps: 1.0\nclip_grad: 0\n";
    char e1[256], e2[256];
    snprintf(e1, sizeof e1, "%smicro_batch_size: 8\n", x);
    snprintf(e2, sizeof e2, "%smicro_batch_size: 4\n", x);
    KdaRunConfig rc;
    Rec r1 = {0}, r2 = {0};
    KdaTrainResult res;
    KdaError err;
    CHECK(make_rc(&rc, data, s1, e1) == 0);
    CHECK_MSG(run(&rc, &r1, 0, &res, &err) == 0, "%s", err.msg);
    kda_run_config_free(&rc);
    CHECK(make_rc(&rc, data, s2, e2) == 0);
    CHECK_MSG(run(&rc, &r2, 0, &res, &err) == 0, "%s", err.msg);
    kda_run_config_free(&rc);
    for (int i = 0; i < 2; i++) {
        CHECK_NEAR(r1.loss[i], r2.loss[i], 1e-5);
        CHECK_NEAR(r1.norm[i], r2.norm[i], 1e-5 * r1.norm[i]);
    }
    int64_t n1 = 0, n2 = 0;
    float *w1 = load_weights(s1, 2, &n1), *w2 = load_weights(s2, 2, &n2);
    CHECK(w1 && w2 && n1 == n2);
    double worst = 0;
    for (int64_t i = 0; w1 && w2 && i < n1; i++)
        if (fabs((double)w1[i] - w2[i]) > worst) worst = fabs((double)w1[i] - w2[i]);
    CHECK_MSG(worst <= 1e-6, "max |w(1x8) - w(2x4)| = %g", worst);
    free(w1);
    free(w2);
}

// A short run on the patterned data learns: the last loss is well below the first, and the
// validation loss is finite and below ln(256) (uniform over the vocabulary).
KDA_TEST(trainer_loss_falls) {
    const char *data = make_data();
    char s[1024];
    snprintf(s, sizeof s, "%s/run", test_tmpdir());
    KdaRunConfig rc;
    Rec r = {0};
    KdaTrainResult res;
    KdaError err;
    CHECK(make_rc(&rc, data, s,
                  "train_iters: 20\nlr: 1.0e-2\nmin_lr: 1.0e-3\neval_interval: 10\neval_iters: 1\n"
                  "save_interval: 0\n") == 0);
    CHECK_MSG(run(&rc, &r, 0, &res, &err) == 0, "%s", err.msg);
    kda_run_config_free(&rc);
    CHECK_MSG(r.loss[19] < r.loss[0] - 2.0, "loss %.4f -> %.4f", r.loss[0], r.loss[19]);
    CHECK(isfinite(res.last_valid_loss) && res.last_valid_loss < log(256.0) - 1.0);
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/metrics.jsonl", s);
    CHECK(path_exists(p));
    fprintf(stderr, "  loss %.4f -> %.4f, valid %.4f\n", r.loss[0], r.loss[19],
            res.last_valid_loss);
}

// NaN in a micro-batch: the update is skipped and counted; optimizer step does not advance.
KDA_TEST(trainer_nan_skip_and_abort) {
    const char *data = make_data();
    char s[1024];
    snprintf(s, sizeof s, "%s/nan", test_tmpdir());
    KdaRunConfig rc;
    Rec r = {0};
    r.poison_from = 3;
    r.poison_to = 4;
    KdaTrainResult res;
    KdaError err;
    CHECK(make_rc(&rc, data, s, "train_iters: 6\nmax_nan_steps: 3\n") == 0);
    CHECK_MSG(run(&rc, &r, 0, &res, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(res.nan_iters, 2);
    CHECK_EQ_INT(res.skipped_iters, 2);
    CHECK(r.skipped[2] && r.skipped[3] && !r.skipped[4] && !r.skipped[1]);
    CHECK(isnan(r.loss[2]));
    // the checkpoint's optimizer took 4 updates in 6 iterations
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/iter_0000006/trainer_state.json", s);
    size_t n;
    char *st = read_file(dir, &n, &err);
    CHECK(st && strstr(st, "\"nan_iterations\": 2"));
    free(st);
    kda_run_config_free(&rc);

    // three consecutive NaN iterations abort with max_nan_steps 3
    snprintf(s, sizeof s, "%s/nan2", test_tmpdir());
    Rec r2 = {0};
    r2.poison_from = 2;
    r2.poison_to = 100;
    CHECK(make_rc(&rc, data, s, "train_iters: 8\nmax_nan_steps: 3\n") == 0);
    CHECK(run(&rc, &r2, 0, &res, &err) == -1);
    CHECK_MSG(strstr(err.msg, "consecutive") != NULL, "%s", err.msg);
    CHECK_EQ_INT(res.iteration, 4);
    kda_run_config_free(&rc);
}

// SIGINT during a step: the step finishes, a checkpoint is written, the run returns 0.
KDA_TEST(trainer_sigint_checkpoint) {
    const char *data = make_data();
    char s[1024], p[PATH_MAX];
    snprintf(s, sizeof s, "%s/sig", test_tmpdir());
    KdaRunConfig rc;
    Rec r = {0};
    r.raise_at = 3;
    KdaTrainResult res;
    KdaError err;
    CHECK(make_rc(&rc, data, s, NULL) == 0);
    kda_train_clear_stop();
    kda_train_install_signal_handlers();
    int rcode = run(&rc, &r, 0, &res, &err);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    kda_train_clear_stop();
    CHECK_MSG(rcode == 0, "%s", err.msg);
    CHECK(res.interrupted);
    CHECK_EQ_INT(res.iteration, 3);
    snprintf(p, sizeof p, "%s/iter_0000003/model.safetensors", s);
    CHECK(path_exists(p));
    char got[PATH_MAX];
    CHECK(kda_checkpoint_resolve(s, got, sizeof got, &err) == 0);
    CHECK(strstr(got, "iter_0000003") != NULL);
    kda_run_config_free(&rc);
}

// Resuming with a different model config fails and names the key.
KDA_TEST(trainer_resume_incompatible_config) {
    const char *data = make_data();
    char s[1024], cfgp[1024], extra[1200];
    snprintf(s, sizeof s, "%s/inc", test_tmpdir());
    KdaRunConfig rc;
    Rec r = {0};
    KdaTrainResult res;
    KdaError err;
    CHECK(make_rc(&rc, data, s, "train_iters: 3\n") == 0);
    CHECK_MSG(run(&rc, &r, 0, &res, &err) == 0, "%s", err.msg);
    kda_run_config_free(&rc);
    size_t n;
    char *txt = read_file("configs/tiny.json", &n, &err);
    CHECK(txt != NULL);
    char *at = txt ? strstr(txt, "\"intermediate_size\": 128") : NULL;
    CHECK(at != NULL);
    if (!at) return;
    memcpy(at, "\"intermediate_size\": 192", 24);
    snprintf(cfgp, sizeof cfgp, "%s/other.json", test_tmpdir());
    CHECK(write_file_atomic(cfgp, txt, n, &err) == 0);
    free(txt);
    snprintf(extra, sizeof extra, "train_iters: 4\nmodel: %s\n", cfgp);
    CHECK(make_rc(&rc, data, s, extra) == 0);
    CHECK(run(&rc, &r, 0, &res, &err) == -1);
    CHECK_MSG(strstr(err.msg, "intermediate_size") != NULL, "%s", err.msg);
    kda_run_config_free(&rc);
}

// The loader is a pure function of the sample index: prefetched batches equal direct reads,
// restarts at any cursor give the same rows, and rows are seq_length + 1 (megatron) long.
KDA_TEST(trainer_loader_deterministic) {
    const char *data = make_data();
    const char *paths[1] = {data};
    KdaLoaderSpec sp = {.paths = paths,
                        .n_paths = 1,
                        .split = "90,10,0",
                        .split_part = 0,
                        .seq_length = 16,
                        .num_samples = 64,
                        .seed = 3,
                        .objective = KDA_OBJ_MEGATRON,
                        .n_vocab = 256};
    KdaLoader *l;
    KdaError err;
    CHECK_MSG(kda_loader_open(&l, &sp, &err) == 0, "%s", err.msg);
    if (!l) return;
    CHECK_EQ_INT(kda_loader_row_tokens(l), 17);
    int32_t direct[4 * 17];
    CHECK(kda_loader_start(l, 8, 4, 2, &err) == 0);
    for (int k = 0; k < 5; k++) {
        const int32_t *b = kda_loader_next(l, &err);
        CHECK(b != NULL);
        CHECK(kda_loader_read(l, 8 + 4 * k, 4, direct, &err) == 0);
        CHECK(b && memcmp(b, direct, sizeof direct) == 0);
    }
    kda_loader_free(l);
    // the valid split is disjoint in documents, and a wrong vocabulary is reported
    sp.n_vocab = 20;
    CHECK(kda_loader_open(&l, &sp, &err) == 0);
    CHECK(kda_loader_read(l, 0, 1, direct, &err) == -1);
    CHECK_MSG(strstr(err.msg, "outside") != NULL, "%s", err.msg);
    kda_loader_free(l);
}

// A rollback into the same save dir with keep_last 1 (issue 15, finding 1): resumed from
// iter_0000004 of a dir holding iter_2..8, every checkpoint the run writes exists after its
// save, the one it resumed from is never deleted, and the newer ones of the abandoned run stay.
KDA_TEST(trainer_rollback_keeps_checkpoints) {
    const char *data = make_data();
    char s[1024], p[PATH_MAX], extra[1400];
    snprintf(s, sizeof s, "%s/rb", test_tmpdir());
    KdaRunConfig rc;
    Rec r = {0};
    KdaTrainResult res;
    KdaError err;
    CHECK(make_rc(&rc, data, s, "save_interval: 2\n") == 0);
    CHECK_MSG(run(&rc, &r, 0, &res, &err) == 0, "%s", err.msg);
    kda_run_config_free(&rc);
    snprintf(extra, sizeof extra,
             "load: %s/iter_0000004\ntrain_iters: 6\nsave_interval: 1\nkeep_last: 1\n", s);
    CHECK(make_rc(&rc, data, s, extra) == 0);
    CHECK_MSG(run(&rc, &r, 0, &res, &err) == 0, "%s", err.msg);
    kda_run_config_free(&rc);
    const int want[] = {0, 0, 0, 1, 0, 1, 0, 1}; // iter_1..8 present after the rollback
    for (int it = 1; it <= 8; it++) {
        snprintf(p, sizeof p, "%s/iter_%07d", s, it);
        CHECK_MSG(path_is_dir(p) == want[it - 1], "iter_%07d: present %d, want %d", it,
                  path_is_dir(p), want[it - 1]);
    }
    CHECK(kda_checkpoint_resolve(s, p, sizeof p, &err) == 0 && strstr(p, "iter_0000006"));
}

// Non-finite updated weights (issue 15, finding 2): lr 1e300 makes every weight inf after the
// first update although its loss and grad norm were finite. The run stops at that iteration
// with an error naming it and the last good checkpoint, saves nothing (latest keeps naming the
// finite iter_0000002), and skipping (max_nan_steps 5) does not apply to weights.
KDA_TEST(trainer_nonfinite_weights_stop) {
    const char *data = make_data();
    char s[1024];
    snprintf(s, sizeof s, "%s/w", test_tmpdir());
    KdaRunConfig rc;
    Rec r = {0};
    KdaTrainResult res;
    KdaError err;
    CHECK(make_rc(&rc, data, s, "train_iters: 2\nlr_warmup_iters: 1\nsave_interval: 1\n") == 0);
    CHECK_MSG(run(&rc, &r, 0, &res, &err) == 0, "%s", err.msg);
    kda_run_config_free(&rc);
    CHECK(make_rc(&rc, data, s,
                  "train_iters: 6\nsave_interval: 1\nlr: 1.0e300\nmin_lr: 1.0e300\n"
                  "max_nan_steps: 5\n") == 0);
    CHECK(run(&rc, &r, 0, &res, &err) == -1);
    kda_run_config_free(&rc);
    CHECK_MSG(strstr(err.msg, "iteration 3") && strstr(err.msg, "weights") &&
                  strstr(err.msg, "iter_0000002"),
              "%s", err.msg);
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/iter_0000003", s);
    CHECK(!path_exists(p));
    CHECK(kda_checkpoint_resolve(s, p, sizeof p, &err) == 0 && strstr(p, "iter_0000002"));
}

// The default on a non-finite loss (max_nan_steps 0) is to stop with an error naming the
// iteration and the last good checkpoint (it used to skip every such step and exit 0).
KDA_TEST(trainer_nan_loss_stops_by_default) {
    const char *data = make_data();
    char s[1024];
    snprintf(s, sizeof s, "%s/n", test_tmpdir());
    KdaRunConfig rc;
    Rec r = {0};
    r.poison_from = 3;
    r.poison_to = 100;
    KdaTrainResult res;
    KdaError err;
    CHECK(make_rc(&rc, data, s, "train_iters: 6\nsave_interval: 2\n") == 0);
    CHECK(run(&rc, &r, 0, &res, &err) == -1);
    kda_run_config_free(&rc);
    CHECK_MSG(strstr(err.msg, "iteration 3") && strstr(err.msg, "loss") &&
                  strstr(err.msg, "iter_0000002"),
              "%s", err.msg);
    CHECK_EQ_INT(res.iteration, 3);
}

// kda train --profile on the CPU: every op of a step appears with the number of calls the model
// makes (2 layers, 2 micro-batches of 4 x 16 tokens), and the rows fit inside the step's wall
// time (the CPU times disjoint intervals of one thread, so Σ rows <= wall by construction).
KDA_TEST(trainer_profile_cpu) {
    const char *data = make_data();
    char s[1024];
    snprintf(s, sizeof s, "%s/prof", test_tmpdir());
    KdaRunConfig rc;
    KdaTrainResult res;
    KdaError err;
    CHECK(make_rc(&rc, data, s, "train_iters: 3\nsave_interval: 0\n") == 0);
    KdaProf p;
    memset(&p, 0, sizeof p);
    KdaTrainOptions o = {.rc = &rc, .quiet = 1, .profile_iter = 2, .profile_out = &p};
    CHECK_MSG(kda_train(&o, &res, &err) == 0, "%s", err.msg);
    kda_run_config_free(&rc);
    const int64_t L = 2, mb = 2; // layers (configs/tiny.json), micro-batches per iteration
    const struct {
        KdaOp op;
        int64_t calls;
    } want[] = {
        {KDA_OP_EMBED_FWD, mb},
        {KDA_OP_EMBED_BWD, mb},
        {KDA_OP_NORM_FWD, (2 * L + 1) * mb}, // attn_norm, mlp_norm per layer + final norm
        {KDA_OP_NORM_BWD, (2 * L + 1) * mb},
        {KDA_OP_PROJ_FWD, 8 * L * mb},  // q k v f0 f1 b g0 g1
        {KDA_OP_PROJ_BWD, 16 * L * mb}, // their dX and dW
        {KDA_OP_CONV_FWD, 3 * L * mb},
        {KDA_OP_CONV_BWD, 3 * L * mb},
        {KDA_OP_L2NORM_FWD, 2 * L * mb},
        {KDA_OP_L2NORM_BWD, 2 * L * mb},
        {KDA_OP_GATE_FWD, 2 * L * mb}, // gate, beta
        {KDA_OP_GATE_BWD, 2 * L * mb},
        {KDA_OP_CORE_FWD, L * mb},
        {KDA_OP_CORE_BWD, L * mb},
        {KDA_OP_ONORM_FWD, L * mb},
        {KDA_OP_ONORM_BWD, L * mb},
        {KDA_OP_OPROJ_FWD, L * mb},
        {KDA_OP_OPROJ_BWD, 2 * L * mb},
        {KDA_OP_MLP_FWD, 3 * L * mb},
        {KDA_OP_MLP_BWD, 6 * L * mb},
        {KDA_OP_SWIGLU_FWD, L * mb},
        {KDA_OP_SWIGLU_BWD, L * mb},
        {KDA_OP_HEAD_FWD, mb},
        {KDA_OP_HEAD_ROW, 0}, // GPU fused classifier only
        {KDA_OP_HEAD_BWD, mb},
        {KDA_OP_ZERO_GRADS, 1},
        {KDA_OP_GRAD_NORM, 1},
        {KDA_OP_ADAMW, 1},
        {KDA_OP_CAST, 0}, // GPU only
        {KDA_OP_SYNC, 0},
    };
    CHECK_EQ_INT(sizeof want / sizeof *want, KDA_OP_COUNT);
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        CHECK_MSG(p.row[want[i].op].calls == want[i].calls, "%s: %lld calls, expected %lld",
                  kda_prof_op_name(want[i].op), (long long)p.row[want[i].op].calls,
                  (long long)want[i].calls);
    double wall = kda_prof_wall_ms(&p), sum = kda_prof_sum_ms(&p);
    CHECK(wall > 0 && sum > 0 && sum <= wall);
    CHECK(p.row[KDA_OP_MLP_FWD].flops > 0 && p.row[KDA_OP_SWIGLU_FWD].bytes > 0);
}

// Every metrics.jsonl line of a run is valid JSON, and a skipped (NaN) step logs its loss and
// grad norm as null, not as a real-looking -1 (issue 15, finding 4).
KDA_TEST(trainer_metrics_nan_is_null) {
    const char *data = make_data();
    char s[1024], p[PATH_MAX];
    snprintf(s, sizeof s, "%s/m", test_tmpdir());
    KdaRunConfig rc;
    Rec r = {0};
    r.poison_from = 1;
    r.poison_to = 1;
    KdaTrainResult res;
    KdaError err;
    CHECK(make_rc(&rc, data, s, "train_iters: 3\nmax_nan_steps: 3\nlog_interval: 1\n") == 0);
    CHECK_MSG(run(&rc, &r, 0, &res, &err) == 0, "%s", err.msg);
    kda_run_config_free(&rc);
    size_t n;
    char *txt = read_file(path_join(p, sizeof p, s, "metrics.jsonl"), &n, &err);
    CHECK(txt != NULL);
    int lines = 0;
    for (char *line = txt, *nl; txt && (nl = strchr(line, '\n')); line = nl + 1, lines++) {
        JsonDoc d;
        CHECK_MSG(json_parse(&d, line, (size_t)(nl - line), &err) == 0, "%.*s: %s",
                  (int)(nl - line), line, err.msg);
        if (lines == 0) {
            const JsonValue *l = json_get(&d.root, "loss"), *g = json_get(&d.root, "grad_norm");
            CHECK(l && l->type == JSON_NULL && g && g->type == JSON_NULL);
        }
        if (!kda_test_failed()) json_free(&d);
    }
    CHECK_EQ_INT(lines, 3);
    free(txt);
}

// metrics.jsonl's two kinds of line (one writer, trainer.c write_metrics_): a log line has its
// keys in this order, and an evaluation between log lines (eval_interval 2, log_interval 4)
// has iteration, consumed_samples and valid_loss only.
KDA_TEST(trainer_metrics_line_keys) {
    const char *data = make_data();
    char s[1024], p[PATH_MAX];
    snprintf(s, sizeof s, "%s/k", test_tmpdir());
    KdaRunConfig rc;
    Rec r = {0};
    KdaTrainResult res;
    KdaError err;
    CHECK(make_rc(&rc, data, s,
                  "train_iters: 4\nlog_interval: 4\neval_interval: 2\neval_iters: 1\n") == 0);
    CHECK_MSG(run(&rc, &r, 0, &res, &err) == 0, "%s", err.msg);
    kda_run_config_free(&rc);
    size_t n;
    char *txt = read_file(path_join(p, sizeof p, s, "metrics.jsonl"), &n, &err);
    CHECK(txt != NULL);
    static const char *want[3][16] = {
        {"iteration", "time", "consumed_samples", "lr", "loss", "grad_norm", "ms_per_iter",
         "tokens_per_s", "skipped", "nan", NULL},
        {"iteration", "consumed_samples", "valid_loss", NULL},
        {"iteration", "time", "consumed_samples", "lr", "loss", "grad_norm", "ms_per_iter",
         "tokens_per_s", "skipped", "nan", "valid_loss", NULL}};
    int lines = 0;
    for (char *line = txt, *nl; txt && (nl = strchr(line, '\n')); line = nl + 1, lines++) {
        if (lines >= 3) break;
        const char *q = line;
        for (int k = 0; want[lines][k]; k++) { // each key, in order, as "key":
            char key[40];
            snprintf(key, sizeof key, "\"%s\":", want[lines][k]);
            const char *at = strstr(q, key);
            CHECK_MSG(at && at < nl, "line %d: no key %s after offset %d: %.*s", lines + 1, key,
                      (int)(q - line), (int)(nl - line), line);
            if (!at || at >= nl) break;
            q = at + strlen(key);
        }
        int keys = 0;
        for (const char *c = line; c < nl; c++)
            keys += *c == ':';
        int nwant = 0;
        while (want[lines][nwant])
            nwant++;
        CHECK_MSG(keys == nwant, "line %d: %d keys, expected %d: %.*s", lines + 1, keys, nwant,
                  (int)(nl - line), line);
    }
    CHECK_EQ_INT(lines, 3);
    free(txt);
}

// A metrics.jsonl write that fails (here: the file is /dev/full, ENOSPC) is an error naming the
// file, not a silent loss with exit status 0 (issue 15, finding 3).
KDA_TEST(trainer_metrics_write_error) {
    const char *data = make_data();
    char s[1024], p[PATH_MAX];
    snprintf(s, sizeof s, "%s/full", test_tmpdir());
    KdaError err;
    CHECK(mkdir_p(s, &err) == 0);
    CHECK(symlink("/dev/full", path_join(p, sizeof p, s, "metrics.jsonl")) == 0);
    KdaRunConfig rc;
    Rec r = {0};
    KdaTrainResult res;
    CHECK(make_rc(&rc, data, s, "train_iters: 3\nlog_interval: 1\n") == 0);
    CHECK(run(&rc, &r, 0, &res, &err) == -1);
    kda_run_config_free(&rc);
    CHECK_MSG(strstr(err.msg, "metrics.jsonl") && strstr(err.msg, "write failed"), "%s", err.msg);
}

// A second trainer on a save dir that another holds stops at once with the holder's pid
// (issue 15, finding 8), and writes nothing there.
KDA_TEST(trainer_save_dir_locked) {
    const char *data = make_data();
    char s[1024], want[64];
    snprintf(s, sizeof s, "%s/lk", test_tmpdir());
    KdaSaveLock l;
    KdaError err;
    CHECK(kda_save_lock(&l, s, &err) == 0);
    KdaRunConfig rc;
    Rec r = {0};
    KdaTrainResult res;
    CHECK(make_rc(&rc, data, s, "train_iters: 3\n") == 0);
    CHECK(run(&rc, &r, 0, &res, &err) == -1);
    snprintf(want, sizeof want, "pid %ld", (long)getpid());
    CHECK_MSG(strstr(err.msg, "in use") && strstr(err.msg, want), "%s", err.msg);
    CHECK_EQ_INT(r.n, 0);
    kda_save_unlock(&l);
    CHECK_MSG(run(&rc, &r, 0, &res, &err) == 0, "%s", err.msg);
    kda_run_config_free(&rc);
}

// A damaged `latest` (truncated optimizer file) fails the resume with a message naming the
// previous checkpoint to load instead (issue 15, finding 12: no hint that one existed).
KDA_TEST(trainer_damaged_latest_names_older) {
    const char *data = make_data();
    char s[1024], p[PATH_MAX];
    snprintf(s, sizeof s, "%s/dmg", test_tmpdir());
    KdaRunConfig rc;
    Rec r = {0};
    KdaTrainResult res;
    KdaError err;
    CHECK(make_rc(&rc, data, s, "train_iters: 4\nsave_interval: 2\n") == 0);
    CHECK_MSG(run(&rc, &r, 0, &res, &err) == 0, "%s", err.msg);
    kda_run_config_free(&rc);
    snprintf(p, sizeof p, "%s/iter_0000004/optimizer.safetensors", s);
    CHECK(truncate(p, 1000) == 0);
    CHECK(make_rc(&rc, data, s, "train_iters: 6\nsave_interval: 2\n") == 0);
    CHECK(run(&rc, &r, 0, &res, &err) == -1);
    kda_run_config_free(&rc);
    CHECK_MSG(strstr(err.msg, "optimizer.safetensors") && strstr(err.msg, "--load") &&
                  strstr(err.msg, "iter_0000002"),
              "%s", err.msg);
}
