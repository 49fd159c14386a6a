// test_cli_usage.c - the CLI's usage contract: `kda --version`, usage errors exit 2 with a
// "did you mean" (commands, flags of table-driven commands, run-config keys), `kda train --help`
// lists every key with its default and meaning, `--print-config` / `--dry-run`.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "core/util.h"
#include "test.h"
#include "train/run_config.h"

static char g_out[1 << 16];

static int kda_(const char *args) {
    return test_run_kda(g_out, sizeof g_out, NULL, args);
}

KDA_TEST(cli_usage_version) {
    CHECK(kda_("--version") == 0);
    CHECK_MSG(!strncmp(g_out, "kda 0.", 6) && strstr(g_out, "(commit ") &&
                  strstr(g_out, "CUDA architectures: ") && strstr(g_out, "NCCL: "),
              "%s", g_out);
}

KDA_TEST(cli_usage_errors_exit_2_with_suggestions) {
    struct {
        const char *args, *want;
    } cases[] = {
        {"trian", "did you mean 'train'?"},
        {"tokenize --json_key text", "did you mean '--json-key'?"},
        {"eval --compair a b", "did you mean '--compare'?"},
        {"score --modle x", "did you mean '--model'?"},
        {"compare only_one.json", "two inputs"},
        {"train --lr_warmup_iter 3", "did you mean '--lr_warmup_iters'?"},
        {"train --norm_eps 1e-6", "did you mean '--layernorm_epsilon'?"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        int rc = kda_(cases[k].args);
        CHECK_MSG(rc == 2 && strstr(g_out, cases[k].want), "kda %s: rc %d: %s", cases[k].args, rc,
                  g_out);
    }
}

KDA_TEST(cli_usage_train_help_lists_every_key) {
    CHECK(kda_("train --help") == 0);
    const char *keys[] = {"train_iters",     "layernorm_epsilon",     "finetune",
                          "tensorboard_dir", "recompute_granularity", "lr_warmup_fraction"};
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++)
        CHECK_MSG(strstr(g_out, keys[k]) != NULL, "no %s in kda train --help", keys[k]);
    CHECK(strstr(g_out, "adam_beta2                 float default 0.95") != NULL);
    CHECK(strstr(g_out, "spec, use_fla_*") != NULL);
}

KDA_TEST(cli_usage_train_print_config_and_dry_run) {
    char yaml[4096], args[9000];
    path_join(yaml, sizeof yaml, test_tmpdir(), "eff.yaml");
    snprintf(args, sizeof args,
             "train --config configs/train_kda_300M.yaml --train_iters 7 --print-config > %s",
             yaml);
    CHECK_MSG(kda_(args) == 0, "%s", g_out);
    KdaRunConfig c;
    KdaError e;
    kda_run_config_defaults(&c);
    CHECK_MSG(kda_run_config_load(&c, yaml, &e) == 0, "%s", e.msg); // reads back
    CHECK(c.train_iters == 7 && c.global_batch_size == 1024);
    kda_run_config_free(&c);
    CHECK(kda_("train --config configs/train_kda_300M.yaml --dry-run") == 0);
    CHECK_MSG(strstr(g_out, "# model: configs/kda_300M.json, 303549280 parameters") &&
                  strstr(g_out, "global batch 1024 = micro 16 x 64 accumulation steps") &&
                  strstr(g_out, "2097152 tokens per iteration, 4768 iterations"),
              "%s", g_out);
}

// `kda generate --model CHECKPOINT` takes the tokenizer its run_config.yaml names.
KDA_TEST(cli_usage_generate_uses_checkpoint_tokenizer) {
    const char *d = test_tmpdir();
    char args[9000], p[4096];
    snprintf(args, sizeof args,
             "cp tests/data/golden/init42/config.json "
             "tests/data/golden/init42/model.safetensors %s/",
             d);
    CHECK(system(args) == 0);
    path_join(p, sizeof p, d, "run_config.yaml");
    const char *y = "tokenizer: \"assets/tokenizers/gpt2/tokenizer.json\"\n";
    KdaError e;
    CHECK(write_file_atomic(p, y, strlen(y), &e) == 0);
    snprintf(args, sizeof args,
             "generate --model %s --prompt a --max-new-tokens 2 --temperature 0 --device cpu", d);
    CHECK_MSG(kda_(args) == 0 && !strstr(g_out, "needs --tokenizer"), "%s", g_out);
}
