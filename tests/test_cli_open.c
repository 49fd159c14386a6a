// test_cli_open.c - how the inference commands open a model (src/cli/open_model.h): the model
// directory behind a save dir / iter_* checkpoint / HF dir, the checkpoint's tokenizer, the
// tokenizer search order, and cli_open_model end to end on a checkpoint.
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/open_model.h"
#include "core/util.h"
#include "test.h"

#define GPT2  "assets/tokenizers/gpt2/tokenizer.json"
#define LLAMA "assets/tokenizers/llama3/tokenizer.json"

static void put(const char *dir, const char *name, const char *text) {
    char p[PATH_MAX];
    KdaError e;
    KDA_ASSERT(write_file_atomic(path_join(p, sizeof p, dir, name), text, strlen(text), &e) == 0);
}

static void copy(const char *src, const char *dir, const char *name) {
    size_t n;
    KdaError e;
    char *t = read_file(src, &n, &e), p[PATH_MAX];
    KDA_ASSERT(t && write_file_atomic(path_join(p, sizeof p, dir, name), t, n, &e) == 0);
    free(t);
}

// SAVE/latest -> SAVE/iter_0000002 (trainer_state.json, the tiny model, run_config.yaml naming
// the GPT-2 tokenizer), and an HF-style directory HF with only a config and weights.
static void make_dirs(char *save, char *iter, char *hf) {
    KdaError e;
    snprintf(save, PATH_MAX, "%s/save", test_tmpdir());
    snprintf(iter, PATH_MAX, "%s/iter_0000002", save);
    snprintf(hf, PATH_MAX, "%s/hf", test_tmpdir());
    KDA_ASSERT(mkdir_p(iter, &e) == 0 && mkdir_p(hf, &e) == 0);
    put(save, "latest", "iter_0000002\n");
    put(iter, "trainer_state.json", "{}");
    put(iter, "run_config.yaml", "seq_length: 16\ntokenizer: " GPT2 "\n");
    copy("tests/data/golden/model_a/config.json", iter, "config.json");
    copy("tests/data/golden/model_a/model.safetensors", iter, "model.safetensors");
    copy("tests/data/golden/model_a/config.json", hf, "config.json");
}

KDA_TEST(cli_open_resolve_and_tokenizer_search) {
    char save[PATH_MAX], iter[PATH_MAX], hf[PATH_MAX], out[PATH_MAX], tp[PATH_MAX];
    make_dirs(save, iter, hf);
    CHECK_EQ_INT(cli_resolve_model(save, out, sizeof out), 1); // through `latest`
    CHECK_MSG(!strcmp(out, iter), "%s", out);
    CHECK_EQ_INT(cli_resolve_model(iter, out, sizeof out), 1); // a checkpoint as is
    CHECK_MSG(!strcmp(out, iter), "%s", out);
    CHECK_EQ_INT(cli_resolve_model(hf, out, sizeof out), 0); // a model directory as is
    CHECK_MSG(!strcmp(out, hf), "%s", out);

    CHECK(cli_checkpoint_tokenizer(iter, tp, sizeof tp) && !strcmp(tp, GPT2));
    CHECK(cli_checkpoint_tokenizer(hf, tp, sizeof tp) == NULL);

    // flag > dir/tokenizer.json > dir/tokenizer.model > the run config's > fallback > none
    KdaTokenizer *t = cli_find_tokenizer(NULL, hf, NULL, tp, sizeof tp);
    CHECK(t == NULL && tp[0] == 0);
    t = cli_find_tokenizer(NULL, hf, LLAMA, tp, sizeof tp);
    CHECK_MSG(t && !strcmp(tp, LLAMA), "%s", tp);
    tok_free(t);
    t = cli_find_tokenizer(NULL, iter, LLAMA, tp, sizeof tp);
    CHECK_MSG(t && !strcmp(tp, GPT2), "%s", tp);
    tok_free(t);
    copy(LLAMA, iter, "tokenizer.json");
    char want[PATH_MAX];
    path_join(want, sizeof want, iter, "tokenizer.json");
    t = cli_find_tokenizer(NULL, iter, NULL, tp, sizeof tp);
    CHECK_MSG(t && !strcmp(tp, want), "%s", tp);
    tok_free(t);
    t = cli_find_tokenizer(GPT2, iter, NULL, tp, sizeof tp);
    CHECK_MSG(t && !strcmp(tp, GPT2), "%s", tp);
    tok_free(t);
}

// cli_open_model on a save directory: the checkpoint's model on the CPU runtime, its core, and the
// run config's tokenizer.
KDA_TEST(cli_open_model_checkpoint_cpu) {
    char save[PATH_MAX], iter[PATH_MAX], hf[PATH_MAX];
    make_dirs(save, iter, hf);
    CliModel cm;
    CliModelSpec s = {
        .model = save, .core = "recurrent", .device = "cpu", .tok_source = CLI_TOK_FIND};
    cli_open_model(&cm, &s);
    CHECK_MSG(!strcmp(cm.dir, iter), "%s", cm.dir);
    CHECK_EQ_INT(cm.core, KDA_CORE_RECURRENT);
    CHECK(kda_runtime_device(cm.rt) == KDA_DEVICE_CPU);
    CHECK(cm.cfg->vocab_size > 0 && kda_runtime_table(cm.rt)->total_numel > 0);
    CHECK_MSG(cm.tok && !strcmp(cm.tok_path, GPT2), "%s", cm.tok_path);
    cli_close_model(&cm);
    s.tok_source = CLI_TOK_FLAG; // only the flag: none given, none loaded
    s.core = "chunk";
    cli_open_model(&cm, &s);
    CHECK(cm.tok == NULL && cm.core == KDA_CORE_CHUNK);
    cli_close_model(&cm);
}
