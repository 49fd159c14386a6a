// main.c - `kda <command>`: dispatch only; every command lives in its module.
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "core/util.h"    // defines: str_closest
#include "core/version.h" // defines: kda_version, kda_commit, kda_cuda_archs, kda_nccl

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} Command;

static const Command g_commands[] = {
    {"info", cmd_info, "model config summary, parameter count, memory estimate"},
    {"score", cmd_score, "per-sequence loss of token ids or text under a model"},
    {"tokenize", cmd_tokenize, "tokenize jsonl/txt/parquet corpora into a Megatron .bin/.idx"},
    {"dataset-info", cmd_dataset_info, "summary and integrity check of a Megatron .bin/.idx"},
    {"encode", cmd_encode, "tokenize stdin text, print token ids as a JSON array"},
    {"decode", cmd_decode, "decode a JSON array of token ids from stdin to text"},
    {"train", cmd_train, "train or resume a KDA model from a run config (CPU or CUDA)"},
    {"export", cmd_export, "export a training checkpoint as an HF model directory"},
    {"plot", cmd_plot, "SVG of loss and learning rate from a metrics.jsonl"},
    {"compare", cmd_compare,
     "two runs' loss curves side by side (kda / HF trainer_state / Megatron)"},
    {"generate", cmd_generate,
     "sample a continuation of a prompt (CPU: recurrent decode; GPU: re-runs the forward)"},
    {"eval", cmd_eval, "lm-eval-compatible multiple-choice benchmarks, perplexity, compare"},
};

static void usage(FILE *f) {
    fprintf(f, "kda - pretraining stack for Kimi-Delta-Attention language models\n\n"
               "usage: kda <command> [flags]    (kda <command> --help for its flags)\n"
               "       kda --version\n\ncommands:\n");
    for (size_t i = 0; i < sizeof g_commands / sizeof *g_commands; i++)
        fprintf(f, "  %-14s %s\n", g_commands[i].name, g_commands[i].summary);
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
        !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        printf("kda %s (commit %s)\nCUDA architectures: %s\nNCCL: %s\n", kda_version(),
               kda_commit(), kda_cuda_archs(), kda_nccl());
        return 0;
    }
    const int n = (int)(sizeof g_commands / sizeof *g_commands);
    const char *names[sizeof g_commands / sizeof *g_commands];
    for (int i = 0; i < n; i++) {
        if (!strcmp(argv[1], g_commands[i].name)) return g_commands[i].run(argc - 2, argv + 2);
        names[i] = g_commands[i].name;
    }
    const char *near = str_closest(argv[1], names, n);
    if (near)
        fprintf(stderr, "kda: error: unknown command '%s' (did you mean '%s'?)\n", argv[1], near);
    else
        fprintf(stderr, "kda: error: unknown command '%s' (kda --help lists them)\n", argv[1]);
    return 2;
}
