// test_cli.c - end-to-end tests of the `kda` program itself: the commands a user types, run as
// child processes, chained the way the README chains them (tokenize -> dataset-info -> train ->
// export -> score / generate), plus exit codes and one-line errors on bad input.
//
// The binary is $KDA_BIN (the Makefile's test target sets it to the build's kda).
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "core/util.h"
#include "test.h"

static const char *kda_bin(void) {
    const char *b = getenv("KDA_BIN");
    return b ? b : "build/kda";
}

// Runs `kda ARGS` through the shell with stdout+stderr captured into out (NUL-terminated,
// truncated to cap). Returns the exit status (-1 if it did not exit normally).
static int run_kda(char *out, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int run_kda(char *out, size_t cap, const char *fmt, ...) {
    char args[4096], cmd[5000];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "OMP_NUM_THREADS=2 %s %s 2>&1", kda_bin(), args);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t n = 0;
    int c;
    while ((c = fgetc(p)) != EOF)
        if (n + 1 < cap) out[n++] = (char)c;
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static char g_out[1 << 16];

KDA_TEST(cli_binary_runs) {
    CHECK_MSG(path_exists(kda_bin()), "no kda binary at %s (set KDA_BIN)", kda_bin());
    CHECK(run_kda(g_out, sizeof g_out, "--help") == 0 && strstr(g_out, "tokenize"));
}

KDA_TEST(cli_info_parameter_counts) {
    CHECK(run_kda(g_out, sizeof g_out, "info --model configs/kda_300M.json") == 0);
    CHECK_MSG(strstr(g_out, "parameters: 303549280"), "300M count not printed");
    CHECK(run_kda(g_out, sizeof g_out, "info --model configs/kda_1B.json") == 0);
    CHECK_MSG(strstr(g_out, "parameters: 1175153920"), "1B count not printed");
    // kda.c's own buffers on the CPU and the GPU (with and without recompute), no GPU needed
    CHECK(run_kda(g_out, sizeof g_out, "info --model configs/kda_300M.json --micro-batch 16") == 0);
    CHECK_MSG(strstr(g_out, "training memory of kda.c's buffers") &&
                  strstr(g_out, "GPU recompute") && strstr(g_out, "activations"),
              "%s", g_out);
}

KDA_TEST(cli_errors_are_one_line) {
    CHECK(run_kda(g_out, sizeof g_out, "frobnicate") == 2 && strstr(g_out, "unknown command"));
    CHECK(run_kda(g_out, sizeof g_out, "info --bogus 1") == 2 && strstr(g_out, "--bogus"));
    CHECK(run_kda(g_out, sizeof g_out, "score --model /nonexistent/dir --input x.jsonl") == 1);
    CHECK(strstr(g_out, "/nonexistent/dir") && strchr(g_out, '\n') == strrchr(g_out, '\n'));
    // --precision is checked before the model is read (score and eval alike)
    CHECK(run_kda(g_out, sizeof g_out, "score --model x --input y --precision fp16") == 1);
    CHECK_MSG(strstr(g_out, "--precision must be bf16 or fp32, got 'fp16'") &&
                  strchr(g_out, '\n') == strrchr(g_out, '\n'),
              "%s", g_out);
    CHECK(run_kda(g_out, sizeof g_out, "eval --model x --perplexity y --precision half") == 1);
    CHECK_MSG(strstr(g_out, "got 'half'") && strchr(g_out, '\n') == strrchr(g_out, '\n'), "%s",
              g_out);
}

// A model small enough to train a few steps in seconds, with the Llama-3 vocabulary so the
// bundled tokenizer's ids fit.
static void write_tiny_llama_config(const char *path) {
    FILE *f = fopen(path, "w");
    KDA_ASSERT(f);
    fputs("{\"model_type\": \"kda\", \"hidden_size\": 16, \"num_hidden_layers\": 1, "
          "\"num_heads\": 1, \"head_dim\": 16, \"expand_v\": 1.0, \"intermediate_size\": 32, "
          "\"vocab_size\": 128256, \"tie_word_embeddings\": true, \"norm_eps\": 1e-6, "
          "\"bos_token_id\": 128000, \"eos_token_id\": 128001}\n",
          f);
    fclose(f);
}

KDA_TEST(cli_pipeline_tokenize_train_export_score_generate) {
    const char *d = test_tmpdir();
    char cfg[512], docs[512];
    snprintf(cfg, sizeof cfg, "%s/model.json", d);
    write_tiny_llama_config(cfg);
    snprintf(docs, sizeof docs, "%s/docs.jsonl", d);
    FILE *f = fopen(docs, "w");
    KDA_ASSERT(f);
    for (int i = 0; i < 200; i++)
        fprintf(f,
                "{\"text\": \"Call me Ishmael. Some years ago, never mind how long "
                "precisely, having little or no money in my purse (%d).\"}\n",
                i);
    fclose(f);
    const char *tok = "assets/tokenizers/llama3/tokenizer.json";

    CHECK_MSG(run_kda(g_out, sizeof g_out,
                      "tokenize --tokenizer %s --input %s --output-prefix %s/data --bos "
                      "--append-eod --quiet",
                      tok, docs, d) == 0,
              "%s", g_out);
    CHECK_MSG(run_kda(g_out, sizeof g_out, "dataset-info %s/data --vocab-size 128256", d) == 0,
              "%s", g_out);
    CHECK_MSG(strstr(g_out, "OK") && strstr(g_out, "200"), "dataset-info: %s", g_out);

    CHECK_MSG(
        run_kda(
            g_out, sizeof g_out,
            "train --config configs/train_demo.yaml --model %s --train_data_path %s/data "
            "--save %s/ckpt --split 80,20,0 --train_iters 4 --seq_length 32 --micro_batch_size 2 "
            "--global_batch_size 2 --eval_interval 2 --eval_iters 1 --save_interval 2 "
            "--log_interval 1 --no-progress",
            cfg, d, d) == 0,
        "%s", g_out);
    CHECK_MSG(strstr(g_out, "iteration        4/") && strstr(g_out, "validation loss"),
              "train log: %.400s", g_out);
    CHECK_MSG(strstr(g_out, ": 1 micro-batches of 2 x 33 tokens"), "train banner: %.400s", g_out);
    char latest[600];
    snprintf(latest, sizeof latest, "%s/ckpt/iter_0000004/model.safetensors", d);
    CHECK(path_exists(latest));

    CHECK_MSG(run_kda(g_out, sizeof g_out,
                      "export --checkpoint %s/ckpt --output %s/hf --dtype fp32 --tokenizer %s", d,
                      d, tok) == 0,
              "%s", g_out);
    char p[600];
    snprintf(p, sizeof p, "%s/hf/config.json", d);
    CHECK(path_exists(p));
    snprintf(p, sizeof p, "%s/hf/tokenizer.json", d);
    CHECK(path_exists(p));
    // generation_config.json: the tokenizer's BOS/EOS, no made-up transformers_version
    snprintf(p, sizeof p, "%s/hf/generation_config.json", d);
    size_t gn;
    KdaError ge;
    char *gc = read_file(p, &gn, &ge);
    CHECK_MSG(gc && strstr(gc, "\"bos_token_id\": 128000") &&
                  strstr(gc, "\"eos_token_id\": 128001") && !strstr(gc, "transformers_version"),
              "%s", gc ? gc : ge.msg);
    free(gc);

    snprintf(p, sizeof p, "%s/score.jsonl", d);
    f = fopen(p, "w");
    KDA_ASSERT(f);
    fputs(
        "{\"text\": \"Call me Ishmael.\"}\n{\"ids\": [128000, 7368, 757, 57704, 1764, 301, 13]}\n",
        f);
    fclose(f);
    CHECK_MSG(run_kda(g_out, sizeof g_out, "score --model %s/hf --input %s --tokenizer %s --bos", d,
                      p, tok) == 0,
              "%s", g_out);
    // "Call me Ishmael." with BOS is exactly the ids of the second line: same loss twice.
    char *l1 = strstr(g_out, "\"loss\": "), *l2 = l1 ? strstr(l1 + 1, "\"loss\": ") : NULL;
    CHECK_MSG(l1 && l2 && atof(l1 + 8) > 0 && atof(l1 + 8) == atof(l2 + 8), "score: %s", g_out);
    // --precision fp32 on the CPU is the CPU's fp32 (the same numbers); bf16 has no CPU path
    double loss_cpu = l1 ? atof(l1 + 8) : 0.0;
    CHECK_MSG(run_kda(g_out, sizeof g_out,
                      "score --model %s/hf --input %s --tokenizer %s --bos --device cpu "
                      "--precision fp32",
                      d, p, tok) == 0,
              "%s", g_out);
    l1 = strstr(g_out, "\"loss\": ");
    CHECK_MSG(l1 && atof(l1 + 8) == loss_cpu && strstr(g_out, "precision fp32"), "%s", g_out);
    CHECK(run_kda(g_out, sizeof g_out,
                  "score --model %s/hf --input %s --device cpu --precision bf16", d, p) == 1);
    CHECK_MSG(strstr(g_out, "--precision bf16 needs the GPU"), "%s", g_out);

    CHECK_MSG(
        run_kda(g_out, sizeof g_out,
                "generate --model %s/hf --prompt 'Call me' --max-new-tokens 5 --temperature 0 "
                "--ignore-eos",
                d) == 0,
        "%s", g_out);
    CHECK_MSG(strstr(g_out, "Call me") && strstr(g_out, "5 new tokens"), "generate: %s", g_out);
}

// kda score --output the --input file is refused before anything is written (issue 15,
// finding 13: the input used to be overwritten); the input is left as it was.
KDA_TEST(cli_score_output_is_input) {
    char in[1024];
    snprintf(in, sizeof in, "%s/in.jsonl", test_tmpdir());
    KdaError err;
    CHECK(write_file_atomic(in, "{\"ids\": [1, 2]}\n", 16, &err) == 0);
    CHECK(run_kda(g_out, sizeof g_out, "score --model nowhere --input %s --output %s", in, in) ==
          1);
    CHECK_MSG(strstr(g_out, "is the --input file"), "%s", g_out);
    size_t n;
    char *s = read_file(in, &n, &err);
    CHECK(s && n == 16);
    free(s);
}

// kda generate validates its flags before loading anything (issue 15, finding 13: --prompt-ids
// "1,,2" was read as [1, 2] and --top-k -5 accepted).
KDA_TEST(cli_generate_rejects_bad_flags) {
    CHECK(run_kda(g_out, sizeof g_out, "generate --model nowhere --prompt-ids 1,,2") == 1);
    CHECK_MSG(strstr(g_out, "--prompt-ids") && strstr(g_out, "empty"), "%s", g_out);
    CHECK(run_kda(g_out, sizeof g_out, "generate --model nowhere --prompt-ids '[1, 2,]'") == 1);
    CHECK(run_kda(g_out, sizeof g_out, "generate --model nowhere --prompt-ids 1,2 --top-k -5") ==
          1);
    CHECK_MSG(strstr(g_out, "--top-k"), "%s", g_out);
}
