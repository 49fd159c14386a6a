// test_cli_bos.c - BOS as HF puts it: `kda encode` / `kda tokenize` apply tokenizer.json's
// post_processor by default (HF add_special_tokens=True) and --no-add-special-tokens turns it
// off; the recipe's data (BOS before every document, no EOS) is tokenize's default with the
// shipped Llama 3.2-style tokenizer; kda eval's BOS follows the tokenizer as lm-eval 0.4 does.
// Expected ids: tests/data/tok/post_processor_goldens.jsonl (HF tokenizers).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "core/util.h"
#include "data/indexed.h"
#include "eval/eval.h"
#include "test.h"
#include "tok/tok.h"

static char g_out[1 << 14];

// Runs `printf TEXT | kda ARGS`, output in g_out; returns the exit status.
static int kda_stdin_(const char *text, const char *args) {
    const char *bin = getenv("KDA_BIN") ? getenv("KDA_BIN") : "build/kda";
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "printf '%s' | %s %s 2>&1", text, bin, args);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t n = fread(g_out, 1, sizeof g_out - 1, p);
    g_out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

KDA_TEST(cli_bos_encode_as_hf) {
    const char *llama = "--tokenizer assets/tokenizers/llama3/tokenizer.json";
    char a[256];
    snprintf(a, sizeof a, "encode %s", llama);
    CHECK(kda_stdin_("The quick brown fox", a) == 0);
    CHECK_MSG(!strcmp(g_out, "[128000, 791, 4062, 14198, 39935]\n"), "%s", g_out);
    snprintf(a, sizeof a, "encode %s --no-add-special-tokens", llama);
    CHECK(kda_stdin_("The quick brown fox", a) == 0);
    CHECK_MSG(!strcmp(g_out, "[791, 4062, 14198, 39935]\n"), "%s", g_out);
    snprintf(a, sizeof a, "encode %s --bos", llama); // no second BOS
    CHECK(kda_stdin_("Hello", a) == 0 && !strcmp(g_out, "[128000, 9906]\n"));
    CHECK(kda_stdin_("The quick brown fox",
                     "encode --tokenizer assets/tokenizers/gpt2/tokenizer.json") == 0);
    CHECK_MSG(!strcmp(g_out, "[464, 2068, 7586, 21831]\n"), "gpt2 adds none: %s", g_out);
}

// The recipe's data (training-recipe.md §1): BOS before every document, no EOS.
KDA_TEST(cli_bos_tokenize_fla_layout) {
    const char *d = test_tmpdir();
    char docs[600], args[2000], prefix[600];
    snprintf(docs, sizeof docs, "%s/docs.jsonl", d);
    FILE *f = fopen(docs, "w");
    CHECK(f != NULL);
    if (!f) return;
    fputs("{\"text\": \"Hello\"}\n{\"text\": \"The quick brown fox\"}\n", f);
    fclose(f);
    for (int post = 1; post >= 0; post--) {
        snprintf(prefix, sizeof prefix, "%s/data%d", d, post);
        snprintf(args, sizeof args,
                 "tokenize --tokenizer assets/tokenizers/llama3/tokenizer.json --input %s "
                 "--output-prefix %s --quiet%s",
                 docs, prefix, post ? "" : " --no-add-special-tokens");
        CHECK_MSG(kda_stdin_("", args) == 0, "%s", g_out);
        IndexedDataset ds;
        KdaError err;
        CHECK_MSG(indexed_open(&ds, prefix, &err) == 0, "%s", err.msg);
        int64_t t[8] = {0};
        int64_t n0 = indexed_read_tokens(&ds, 0, 0, t, 8);
        CHECK(n0 == 1 + post && t[0] == (post ? 128000 : 9906) && t[n0 - 1] == 9906);
        int64_t n1 = indexed_read_tokens(&ds, 1, 0, t, 8);
        CHECK(n1 == 4 + post && t[0] == (post ? 128000 : 791) && t[n1 - 1] == 39935);
        indexed_close(&ds);
    }
}

KDA_TEST(cli_bos_eval_follows_tokenizer) {
    KdaTokenizer *llama, *gpt2;
    KdaError err;
    const char *src;
    CHECK(tok_load(&llama, "assets/tokenizers/llama3/tokenizer.json", &err) == 0);
    CHECK(tok_load(&gpt2, "assets/tokenizers/gpt2/tokenizer.json", &err) == 0);
    CHECK(eval_bos_policy(-1, llama, &src) == 1 && !strcmp(src, "tokenizer"));
    CHECK(eval_bos_policy(-1, gpt2, &src) == 0 && !strcmp(src, "tokenizer"));
    CHECK(eval_bos_policy(1, gpt2, &src) == 1 && !strcmp(src, "--bos"));
    CHECK(eval_bos_policy(0, llama, &src) == 0 && !strcmp(src, "--no-bos"));
    tok_free(llama);
    tok_free(gpt2);
}
