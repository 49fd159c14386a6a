// cmd_score.c - `kda score`: per-sequence loss of token-id (or text) sequences under a model.
//
// Input: JSON lines, each {"ids": [int, ...]} or {"text": "..."} (text needs --tokenizer and is
// encoded as HF tokenizer(text) does: the post_processor's specials, e.g. Llama 3.2's BOS). A
// blank line gives {"tokens": 0, "loss": null, "sum_nll": null}, so that output line i is input
// line i; non-finite losses are written as null. Every line is validated before any scoring;
// errors name FILE:LINE. Output: one JSON line per input line, in order:
//   {"tokens": n, "loss": mean NLL of tokens 2..n given their prefix (natural log),
//    "sum_nll": the sum of those n-1 NLLs}
// both printed with 17 significant digits (a 2048-token sum_nll of ~4000 needs 1e-5 nats).
// Each sequence is one B=1 forward of the CPU fp32 model (chunked core unless --core
// recurrent), or on the GPU (--device cuda, or auto with a GPU present; chunked core) in
// --precision bf16 (the default: bf16 mixed precision, what lm-eval's FLA run uses; per-sequence
// losses within ~2e-3 of the CPU's, more at T < 64) or fp32 (fp32 weights, activations and
// GEMMs: within 1e-4 of the CPU at every T; docs/correctness.md); memory grows to the longest
// sequence. The CPU always computes fp32: --precision fp32 is accepted there, bf16 is refused.
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/commands.h"
#include "cli/open_model.h" // defines: CliModel, cli_open_model
#include "core/args.h"      // defines: ArgSpec, ArgTable, args_parse_or_die
#include "core/json.h"      // defines: json_fmt_num
#include "core/util.h"      // defines: open_atomic, commit_atomic
#include "core/log.h"       // defines: kda_die
#include "eval/score.h"     // defines: ScoreSeq, score_read_input
#include "model/runtime.h"  // defines: kda_runtime_forward
#include "tok/tok.h"        // defines: TOK_POST, TOK_ADD_BOS

// Do a and b name the same existing file (device and inode)?
static int same_file(const char *a, const char *b) {
    struct stat x, y;
    return !stat(a, &x) && !stat(b, &y) && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

int cmd_score(int argc, char **argv) {
    const char *model_dir = NULL, *input = NULL, *output = "-", *tok_path = NULL, *core = "chunk";
    const char *device = "auto", *precision = NULL;
    int bos = 0, post = 1;
    ArgSpec specs[] = {
        {"model", ARG_STR, &model_dir,
         "model directory (config.json + model.safetensors), or a training save/iter_* directory",
         1},
        {"input", ARG_STR, &input, "JSON lines: {\"ids\": [...]} or {\"text\": \"...\"}", 1},
        {"output", ARG_STR, &output, "output JSON lines file ('-' = stdout)", 0},
        {"tokenizer", ARG_STR, &tok_path, "tokenizer.json / tokenizer.model for \"text\" lines", 0},
        {"add-special-tokens", ARG_BOOL, &post,
         "\"text\" lines: apply the tokenizer's post_processor (HF add_special_tokens=True)", 0},
        {"bos", ARG_BOOL, &bos, "prepend BOS to \"text\" lines (unless the post_processor did)", 0},
        {"core", ARG_STR, &core, "KDA core: chunk | recurrent", 0},
        {"device", ARG_STR, &device,
         "auto | cpu | cuda (GPU: chunked core; auto: the GPU when the build has CUDA and one "
         "is visible)",
         0},
        {"precision", ARG_STR, &precision,
         "GPU arithmetic: bf16 (default; bf16 mixed precision as lm-eval's FLA run, within "
         "~2e-3 of the CPU) | fp32 (fp32 weights, activations and GEMMs, no TF32: within 1e-4 "
         "of the CPU). The CPU is always fp32: fp32 is accepted there, bf16 is refused",
         0},
    };
    ArgTable table = {
        "kda score", "per-sequence mean NLL (natural log) of tokens 2..n given their prefix",
        "Each input line is scored as its own sequence (B = 1, fp32 CPU or the GPU). Output "
        "lines: {\"tokens\": n, \"loss\": sum_nll/(n-1), \"sum_nll\": ...}.",
        specs, (int)(sizeof specs / sizeof *specs)};
    if (args_parse_or_die(&table, argc, argv)) return 0;
    if (strcmp(core, "chunk") && strcmp(core, "recurrent"))
        kda_die("--core must be chunk or recurrent, got '%s'", core);
    if (strcmp(output, "-") && same_file(output, input))
        kda_die("--output %s is the --input file (it would be overwritten); give another path",
                output);
    KdaError err;
    CliModel cm;
    CliModelSpec spec = {.model = model_dir,
                         .core = core,
                         .device = device,
                         .precision = precision,
                         .log_precision = 1,
                         .tokenizer = tok_path,
                         .tok_source = CLI_TOK_FLAG}; // "text" lines need an explicit one
    cli_open_model(&cm, &spec);
    const KdaTokenizer *tok = cm.tok;
    const KdaConfig cfg = *cm.cfg;

    int64_t n_seq = 0, tmax = 0;
    ScoreSeq *seqs;
    if (score_read_input(input, tok, (bos ? TOK_ADD_BOS : 0) | (post ? TOK_POST : 0),
                         cfg.vocab_size, &seqs, &n_seq, &err))
        kda_die("%s", err.msg);
    for (int64_t i = 0; i < n_seq; i++)
        tmax = seqs[i].n > tmax ? seqs[i].n : tmax;

    char tmp[PATH_MAX];
    FILE *out = stdout;
    if (strcmp(output, "-") && !(out = open_atomic(output, tmp, &err))) kda_die("%s", err.msg);
    float *nll = kda_malloc((size_t)(tmax > 0 ? tmax : 1) * sizeof(float));
    for (int64_t i = 0; i < n_seq; i++) {
        if (seqs[i].n == 0) {
            fprintf(out, "{\"tokens\": 0, \"loss\": null, \"sum_nll\": null}\n");
            continue;
        }
        if (kda_runtime_forward(cm.rt, seqs[i].ids, NULL, 1, seqs[i].n, nll, NULL, &err))
            kda_die("%s: sequence %lld: %s", input, (long long)i + 1, err.msg);
        double sum = 0.0;
        for (int64_t t = 0; t < seqs[i].n; t++)
            sum += nll[t];
        char jl[32], js[32];
        fprintf(out, "{\"tokens\": %lld, \"loss\": %s, \"sum_nll\": %s}\n", (long long)seqs[i].n,
                json_fmt_num(jl, sizeof jl, sum / (double)(seqs[i].n - 1), 17),
                json_fmt_num(js, sizeof js, sum, 17));
    }
    if (out != stdout && commit_atomic(out, tmp, output, &err)) kda_die("%s", err.msg);
    if (out == stdout && fflush(stdout)) kda_die("writing stdout failed");
    free(nll);
    score_seqs_free(seqs, n_seq);
    cli_close_model(&cm);
    return 0;
}
