// test_seed_yaml.c - the seed's YAML (Primus kda-guide.md Step 5.1, verbatim, paths
// substituted) trains; Megatron/Primus keys keep their meaning (finetune + load from an HF dir
// or a kda checkpoint, layernorm_epsilon checked, dropout 0, lr_warmup_fraction,
// exit_duration_in_mins), no-op keys are listed, unknown keys are all reported at once, block
// scalars and the blend string parse.
// Model: tests/data/golden/init42 (FLA's own init of a D 64, L 2, vocab 256 model); data: a
// small synthetic indexed dataset in the test's temp dir. The recipe's sizes (micro 128 x
// 2048 tokens, 4768 iterations) are overridden on the command line, as a user would to try it.
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "fixtures.h" // defines: TestDocs, TEST_DOCS, test_write_docs
#include "test.h"
#include "train/run_config.h"
#include "train/trainer.h"

// 200 documents of 20..59 tokens below 256.
static const char *make_data_(void) {
    static char prefix[PATH_MAX];
    snprintf(prefix, sizeof prefix, "%s/fla_fineweb_edu_10BT_text_sentence", test_tmpdir());
    KdaError err;
    return test_write_docs(prefix, TEST_DOCS(200), &err) ? NULL : prefix;
}

// Replaces every @NAME@ of the template file with its value; writes the result to out.
static int substitute_(const char *tmpl, const char *out, const char *load, const char *data) {
    size_t n;
    KdaError err;
    char *t = read_file(tmpl, &n, &err);
    if (!t) return -1;
    size_t cap = n + 2 * (strlen(load) + strlen(data)) + 1, k = 0;
    char *s = malloc(cap);
    for (const char *c = t; *c;) {
        const char *v = !strncmp(c, "@LOAD@", 6) ? load : !strncmp(c, "@DATA@", 6) ? data : NULL;
        if (v) {
            k += (size_t)snprintf(s + k, cap - k, "%s", v);
            c += 6;
        } else {
            s[k++] = *c++;
        }
    }
    int rc = write_file_atomic(out, s, k, &err);
    free(s);
    free(t);
    return rc;
}

// The seed's file with paths substituted, then the overrides a CPU smoke run needs.
static int seed_rc_(KdaRunConfig *rc, const char *load, const char *save, KdaError *err) {
    const char *data = make_data_();
    char yaml[PATH_MAX];
    path_join(yaml, sizeof yaml, test_tmpdir(), "seed.yaml");
    if (!data || substitute_(test_data("run_config/seed_step5_1.yaml"), yaml, load, data))
        return kda_fail(err, "cannot build the seed YAML");
    char *argv[] = {"--config",
                    yaml,
                    "--train_iters",
                    "2",
                    "--micro_batch_size",
                    "2",
                    "--global_batch_size",
                    "4",
                    "--seq_length",
                    "16",
                    "--lr_warmup_iters",
                    "1",
                    "--lr_decay_iters",
                    "2",
                    "--save",
                    (char *)save};
    // kda_run_config_from_cli starts from the defaults (applying them here too leaked them)
    if (kda_run_config_from_cli(rc, (int)(sizeof argv / sizeof *argv), argv, err)) return -1;
    return kda_run_config_validate(rc, err);
}

typedef struct {
    float loss[8];
    int n;
} Losses;

static void on_step_(void *u, const KdaStepInfo *s) {
    Losses *l = u;
    if (l->n < 8) l->loss[l->n++] = s->loss;
}

static int train_(KdaRunConfig *rc, const char *init_from, Losses *l, KdaTrainResult *res,
                  KdaError *err) {
    KdaTrainOptions o = {
        .rc = rc, .init_from = init_from, .quiet = 1, .on_step = on_step_, .user = l};
    return kda_train(&o, res, err);
}

KDA_TEST(seed_yaml_step5_1_trains) {
    char init[PATH_MAX];
    snprintf(init, sizeof init, "%s", test_data("golden/init42")); // test_data's buffer is reused
    char save[PATH_MAX];
    path_join(save, sizeof save, test_tmpdir(), "out");
    KdaRunConfig rc;
    KdaError err;
    CHECK_MSG(seed_rc_(&rc, init, save, &err) == 0, "%s", err.msg);
    // the recipe's keys, with their meaning
    CHECK(rc.finetune && rc.no_load_optim && rc.no_load_rng && !rc.use_distributed_optimizer);
    CHECK(rc.model == NULL && rc.layernorm_epsilon == 1e-6 && rc.hidden_dropout == 0);
    CHECK(rc.train_data_path.n == 1 && !strchr(rc.train_data_path.items[0], '\n'));
    CHECK_EQ_INT(rc.ignored.n, 4); // spec + the three use_fla_* keys
    CHECK(rc.ignored.n == 4 && !strcmp(rc.ignored.items[0], "spec") &&
          !strcmp(rc.ignored.items[3], "use_fla_fused_norm_gated"));
    Losses a = {0}, b = {0};
    KdaTrainResult res;
    CHECK_MSG(train_(&rc, NULL, &a, &res, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(res.iteration, 2);
    CHECK_EQ_INT(res.start_iteration, 0);
    kda_run_config_free(&rc);
    // the same run through --init-from (the model given explicitly): the same first losses,
    // bit for bit, so finetune + load loaded init42's weights and config
    char save2[PATH_MAX];
    path_join(save2, sizeof save2, test_tmpdir(), "out2");
    CHECK(seed_rc_(&rc, init, save2, &err) == 0);
    rc.finetune = rc.no_load_optim = rc.no_load_rng = 0;
    free(rc.load);
    rc.load = NULL;
    const char *m[] = {init};
    CHECK(kda_run_config_set(&rc, "model", m, 1, &err) == 0);
    CHECK_MSG(train_(&rc, init, &b, &res, &err) == 0, "%s", err.msg);
    CHECK(a.n == 2 && b.n == 2 && a.loss[0] == b.loss[0] && a.loss[1] == b.loss[1]);
    // own init instead: a different first loss (so the comparison above can fail)
    Losses c = {0};
    char save3[PATH_MAX];
    path_join(save3, sizeof save3, test_tmpdir(), "out3");
    free(rc.save);
    rc.save = kda_strdup(save3);
    CHECK(train_(&rc, NULL, &c, &res, &err) == 0);
    CHECK(c.n == 2 && c.loss[0] != a.loss[0]);
    kda_run_config_free(&rc);
}

// load: a kda save directory (followed through `latest`) with finetune: its weights, a fresh
// optimizer and iteration 0 (not a resume), the model config from the checkpoint.
KDA_TEST(seed_yaml_finetune_from_kda_checkpoint) {
    char init[PATH_MAX];
    snprintf(init, sizeof init, "%s", test_data("golden/init42")); // test_data's buffer is reused
    char first[PATH_MAX], second[PATH_MAX];
    path_join(first, sizeof first, test_tmpdir(), "first");
    path_join(second, sizeof second, test_tmpdir(), "second");
    KdaRunConfig rc;
    KdaError err;
    Losses a = {0}, b = {0};
    KdaTrainResult res;
    CHECK(seed_rc_(&rc, init, first, &err) == 0);
    CHECK_MSG(train_(&rc, NULL, &a, &res, &err) == 0, "%s", err.msg);
    kda_run_config_free(&rc);
    CHECK_MSG(seed_rc_(&rc, first, second, &err) == 0, "%s", err.msg);
    CHECK_MSG(train_(&rc, NULL, &b, &res, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(res.start_iteration, 0);
    CHECK_EQ_INT(res.iteration, 2);
    CHECK(b.n == 2 && b.loss[0] != a.loss[0]); // trained weights, not init42's
    kda_run_config_free(&rc);
    // without finetune the same load is a resume: already at train_iters, nothing to run
    CHECK(seed_rc_(&rc, first, second, &err) == 0);
    rc.finetune = rc.no_load_optim = rc.no_load_rng = 0;
    CHECK(kda_run_config_validate(&rc, &err) == -1 && strstr(err.msg, "model"));
    kda_run_config_free(&rc);
}

static int parse_(KdaRunConfig *c, const char *yaml, KdaError *e) {
    kda_run_config_defaults(c);
    return kda_run_config_parse(c, yaml, strlen(yaml), "t.yaml", e);
}

// Values kda.c cannot honour fail with the key, the value and what to do.
KDA_TEST(seed_yaml_checked_keys) {
    char init[PATH_MAX];
    snprintf(init, sizeof init, "%s", test_data("golden/init42")); // test_data's buffer is reused
    char save[PATH_MAX];
    path_join(save, sizeof save, test_tmpdir(), "out");
    KdaRunConfig rc;
    KdaError err;
    Losses l = {0};
    KdaTrainResult res;
    CHECK(seed_rc_(&rc, init, save, &err) == 0);
    rc.layernorm_epsilon = 1e-5; // Megatron's default, the Primus parity bug
    CHECK(train_(&rc, NULL, &l, &res, &err) == -1);
    CHECK_MSG(strstr(err.msg, "layernorm_epsilon 1e-05") && strstr(err.msg, "norm_eps 1e-06"), "%s",
              err.msg);
    kda_run_config_free(&rc);
    struct {
        const char *yaml, *want;
    } bad[] = {
        {"hidden_dropout: 0.1\n", "no dropout"},
        {"no_load_optim: true\nload: x\n", "without finetune"},
        {"finetune: true\n", "needs load"},
        {"bf16: false\ndevice: cuda\n", "computes in bf16"},
        {"lr_warmup_fraction: 0.1\nlr_warmup_iters: 3\n", "both set"},
        {"finetune: maybe\n", "expected true or false"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        char y[256];
        snprintf(y, sizeof y, "train_iters: 50\nmodel: m\ntrain_data_path: d\n%s", bad[k].yaml);
        int rc2 = parse_(&rc, y, &err);
        if (rc2 == 0) rc2 = kda_run_config_validate(&rc, &err);
        CHECK_MSG(rc2 == -1 && strstr(err.msg, bad[k].want), "case %zu: %s", k, err.msg);
        kda_run_config_free(&rc);
    }
    // lr_warmup_fraction: Megatron's warmup = fraction x lr_decay_iters
    CHECK(parse_(&rc, "train_iters: 50\nmodel: m\ntrain_data_path: d\nlr_warmup_fraction: 0.1\n",
                 &err) == 0);
    CHECK_MSG(kda_run_config_validate(&rc, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(rc.lr_warmup_iters, 5);
    CHECK(rc.lr_warmup_fraction == 0); // resolved, so the saved run_config.yaml reads back
    kda_run_config_free(&rc);
}

KDA_TEST(seed_yaml_unknown_keys_all_at_once) {
    KdaRunConfig c;
    KdaError e;
    CHECK(parse_(&c, "lr: 1e-3\nlearning_rate: 1\nnum_layers: 12\nfrobnicate: 1\n", &e) == -1);
    CHECK_MSG(strstr(e.msg, "t.yaml: 3 unknown keys") &&
                  strstr(e.msg, "line 2 'learning_rate' "
                                "(did you mean 'lr'?)") &&
                  strstr(e.msg, "line 3 'num_layers' (did you mean 'model'?)") &&
                  strstr(e.msg, "line 4 'frobnicate' (kda train --help"),
              "%s", e.msg);
    kda_run_config_free(&c);
    kda_run_config_defaults(&c);
    char *argv[] = {"--lr", "1", "--bogus_key", "1", "2", "--norm_eps", "1e-6", "--spec", "a"};
    CHECK(kda_run_config_apply_args(&c, 9, argv, &e) == -1);
    CHECK_MSG(strstr(e.msg, "2 unknown flags") && strstr(e.msg, "'--bogus_key'") &&
                  strstr(e.msg, "'--norm_eps' (did you mean '--layernorm_epsilon'?)"),
              "%s", e.msg);
    kda_run_config_free(&c);
    // --key=value of an unknown flag does not swallow the next flag; Megatron-fixed keys on the
    // command line are checked like in YAML
    kda_run_config_defaults(&c);
    char *argv2[] = {"--bogus=1", "--lr", "0.5", "--tensor_model_parallel_size", "1"};
    CHECK(kda_run_config_apply_args(&c, 5, argv2, &e) == -1);
    CHECK_MSG(!strstr(e.msg, "unknown flags") && strstr(e.msg, "'--bogus'") && c.lr == 0.5, "%s",
              e.msg);
    char *argv3[] = {"--tensor_model_parallel_size", "2"};
    CHECK(kda_run_config_apply_args(&c, 2, argv3, &e) == -1 && strstr(e.msg, "supports only 1"));
    kda_run_config_free(&c);
    // the misleading suggestions the issue found are gone: Megatron names map by alias
    CHECK(!strcmp(kda_run_config_suggest("tokenizer_model"), "tokenizer"));
    CHECK(!strcmp(kda_run_config_suggest("train-samples"), "train_iters"));
}

// Folded/literal block scalars lose the newline YAML keeps; a list key's single scalar is split
// into words (Megatron's blend string); data_path and norm_epsilon are synonyms.
KDA_TEST(seed_yaml_block_scalars_and_blend) {
    KdaRunConfig c;
    KdaError e;
    CHECK(parse_(&c,
                 "data_path: \"0.3 a/x_text_document 0.7 b/y_text_document\"\n"
                 "tokenizer: |\n  tok/tokenizer.json\n"
                 "valid_data_path: >\n  v/one\n  v/two\nnorm_epsilon: 1.0e-6\n",
                 &e) == 0);
    const char **paths;
    double *w;
    int n;
    CHECK(kda_run_config_blend(&c.train_data_path, &paths, &w, &n, &e) == 0);
    CHECK(n == 2 && w && !strcmp(paths[1], "b/y_text_document"));
    CHECK(n == 2 && w && w[0] > 0.29999 && w[0] < 0.30001); // normalized 0.3 / 1.0
    free(paths);
    free(w);
    CHECK(c.tokenizer && !strcmp(c.tokenizer, "tok/tokenizer.json"));
    CHECK(c.valid_data_path.n == 2 && !strcmp(c.valid_data_path.items[1], "v/two"));
    CHECK(c.layernorm_epsilon == 1e-6);
    kda_run_config_free(&c);
    CHECK(parse_(&c, "data_path: a\ntrain_data_path: b\n", &e) == -1 &&
          strstr(e.msg, "appears twice"));
    kda_run_config_free(&c);
}

// exit_duration_in_mins: stop (with a checkpoint) once the wall time is spent.
KDA_TEST(seed_yaml_exit_duration) {
    char save[PATH_MAX];
    path_join(save, sizeof save, test_tmpdir(), "out");
    KdaRunConfig rc;
    KdaError err;
    Losses l = {0};
    KdaTrainResult res;
    char init[PATH_MAX];
    snprintf(init, sizeof init, "%s", test_data("golden/init42"));
    CHECK(seed_rc_(&rc, init, save, &err) == 0);
    rc.exit_duration_in_mins = 1e-9; // spent after the first iteration
    CHECK_MSG(train_(&rc, NULL, &l, &res, &err) == 0, "%s", err.msg);
    CHECK(res.interrupted && res.iteration == 1 && res.checkpoint[0]);
    kda_run_config_free(&rc);
}

// Primus's whole experiment file (the seed's run, verbatim): the Megatron keys under
// modules.pre_trainer.overrides apply; parallelism and runtime knobs with kda.c's values are
// accepted and listed; a value kda.c cannot honour is an error.
KDA_TEST(seed_yaml_primus_experiment_file) {
    KdaRunConfig rc;
    KdaError err;
    kda_run_config_defaults(&rc);
    int r = kda_run_config_load(&rc, test_data("run_config/primus_kda_300M_pretrain.yaml"), &err);
    CHECK_MSG(r == 0, "%s", err.msg);
    CHECK(rc.train_iters == 4768 && rc.micro_batch_size == 128 && rc.layernorm_epsilon == 1e-6);
    CHECK(rc.save && !strcmp(rc.save, "./output/zebra_llama_300M_kda_pure-pretrain"));
    int has_tp = 0, has_wg = 0, has_model = 0, has_wandb = 0;
    for (int i = 0; i < rc.ignored.n; i++) {
        has_tp |= !strcmp(rc.ignored.items[i], "tensor_model_parallel_size");
        has_wg |= !strcmp(rc.ignored.items[i], "work_group");
        has_model |= !strncmp(rc.ignored.items[i], "modules.pre_trainer.model", 25);
        has_wandb |= !strcmp(rc.ignored.items[i], "wandb_project");
    }
    CHECK(has_tp && has_wg && has_model && has_wandb);
    const char *v[] = {"configs/tiny.json"}, *d[] = {"data/x"};
    CHECK(kda_run_config_set(&rc, "model", v, 1, &err) == 0);
    CHECK(kda_run_config_set(&rc, "train_data_path", d, 1, &err) == 0);
    CHECK_MSG(kda_run_config_validate(&rc, &err) == 0, "%s", err.msg);
    kda_run_config_free(&rc);
    const char *bad =
        "modules:\n  pre_trainer:\n    overrides:\n      tensor_model_parallel_size: 2\n";
    kda_run_config_defaults(&rc);
    CHECK(kda_run_config_parse(&rc, bad, strlen(bad), "p.yaml", &err) == -1);
    CHECK_MSG(strstr(err.msg, "p.yaml:4: key 'tensor_model_parallel_size': kda.c supports only 1"),
              "%s", err.msg);
    kda_run_config_free(&rc);
    const char *nope = "modules:\n  post_trainer: {}\n";
    kda_run_config_defaults(&rc);
    CHECK(kda_run_config_parse(&rc, nope, strlen(nope), "p.yaml", &err) == -1 &&
          strstr(err.msg, "modules.pre_trainer.overrides"));
    kda_run_config_free(&rc);
}
