// cmd_eval.c - `kda eval`: lm-eval-compatible 0-shot multiple-choice benchmarks, OLMo request
// files, perplexity over a .bin/.idx, and the comparison of two results files (docs/eval.md).
//
//   kda eval --model DIR --tasks arc_easy,...,race --data DATA_DIR [--limit N]
//            [--batch-tokens N] [--output results.json] [--tokenizer PATH] [--bos|--no-bos]
//            [--max-length N] [--dump-requests FILE] [--no-share-prefix] [--core chunk|recurrent]
//            [--device auto|cpu|cuda] [--precision bf16|fp32]
//   kda eval --model DIR --perplexity PREFIX [--seq-length N] [--limit WINDOWS] [--device ...]
//
// The engines (eval.h) run on the model runtime of --device: the CPU (fp32), or the GPU in bf16
// mixed precision (the default, as lm-eval's FLA run; shared prefixes through its recurrent
// decode) or fp32 (--precision fp32: the forward-only model, batched forwards only).
// results.json's config.dtype records it (bfloat16 | float32).
//   kda eval --compare A.json B.json
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/open_model.h" // defines: CliModel, cli_open_model, cli_find_tokenizer
#include "core/args.h"      // defines: ArgSpec, ArgTable, ArgList, args_parse_or_die
#include "core/log.h"       // defines: Progress, progress_*, kda_info, kda_warn
#include "core/util.h"      // defines: now_seconds, open_atomic
#include "data/indexed.h"   // defines: IndexedDataset, indexed_open
#include "eval/eval.h"      // defines: eval_run_task, eval_results_*, eval_perplexity
#include "eval/tasks.h"     // defines: EvalTask, eval_task_load

#define DEFAULT_TOKENIZER "assets/tokenizers/llama3/tokenizer.json"

static void on_progress_(void *ctx, int64_t done) {
    progress_update(ctx, (double)done, NULL);
}

// --compare A B [--labels LA,LB]: files or result directories, lm-eval's or kda's.
static int compare_(const ArgList *files, const char *labels) {
    if (files->n != 2)
        kda_die("--compare takes two results files or directories, got %d", files->n);
    char la[64] = "A", lb[64] = "B";
    if (labels) {
        const char *c = strchr(labels, ',');
        if (!c || strchr(c + 1, ','))
            kda_die("--labels: expected two names separated by a comma, got '%s'", labels);
        snprintf(la, sizeof la, "%.*s", (int)(c - labels), labels);
        snprintf(lb, sizeof lb, "%s", c + 1);
    }
    EvalResults a, b;
    KdaError err;
    char fa[PATH_MAX], fb[PATH_MAX];
    if (eval_results_read(files->items[0], &a, fa, sizeof fa, &err)) kda_die("%s", err.msg);
    if (eval_results_read(files->items[1], &b, fb, sizeof fb, &err)) kda_die("%s", err.msg);
    eval_results_compare(stdout, &a, &b, la, lb);
    printf("\n%s = %s (%s)\n%s = %s (%s)\n", la, fa, a.format, lb, fb, b.format);
    char *buf;
    size_t n;
    FILE *m = open_memstream(&buf, &n);
    int k = m ? eval_results_mismatches(m, &a, &b, la, lb) : 0;
    if (m) fclose(m);
    for (char *line = k ? strtok(buf, "\n") : NULL; line; line = strtok(NULL, "\n"))
        kda_warn("not like for like: %s", line);
    if (m) free(buf);
    eval_results_free(&a), eval_results_free(&b);
    return 0;
}

static int perplexity_(KdaRuntime *rt, const char *prefix, int64_t seq_length, int64_t limit) {
    IndexedDataset ds;
    KdaError err;
    if (indexed_open(&ds, prefix, &err)) kda_die("%s", err.msg);
    Progress p;
    int64_t total = (ds.idx.n_tokens + seq_length - 1) / seq_length;
    progress_init(&p, "perplexity", (double)(limit > 0 && limit < total ? limit : total),
                  "windows");
    double sum, t0 = now_seconds();
    int64_t n;
    if (eval_perplexity(rt, &ds, seq_length, limit, &sum, &n, on_progress_, &p, &err))
        kda_die("%s: %s", prefix, err.msg);
    progress_finish(&p, (double)total, NULL);
    double dt = now_seconds() - t0;
    printf("{\"dataset\": \"%s\", \"seq_length\": %lld, \"tokens\": %lld, \"mean_nll\": %.9g, "
           "\"perplexity\": %.9g, \"seconds\": %.3f}\n",
           prefix, (long long)seq_length, (long long)n, sum / (double)n, exp(sum / (double)n), dt);
    indexed_close(&ds);
    return 0;
}

static void split_tasks_(const char *list, char ***names, int *n) {
    *names = NULL, *n = 0;
    const char *p = list;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len) {
            *names = kda_realloc(*names, (size_t)(*n + 1) * sizeof **names);
            char *s = kda_malloc(len + 1);
            memcpy(s, p, len), s[len] = 0;
            (*names)[(*n)++] = s;
        }
        p += len + (e != NULL);
    }
}

// The flags of `kda eval`.
typedef struct {
    const char *model, *tasks, *data, *output, *tokenizer, *dump, *ppl, *core, *device;
    const char *precision; // --precision bf16 | fp32 (NULL: the device's default)
    int64_t limit, batch_tokens, max_length, seq_length;
    int bos, share; // bos -1: as the tokenizer's post_processor says (lm-eval 0.4)
    ArgList cmp;
    const char *labels;
} EvalArgs;

// Parses and validates the flags (dies on a bad one, before anything is loaded). Returns 1 when
// --help was printed.
static int parse_(EvalArgs *a, int argc, char **argv) {
    *a = (EvalArgs){.core = "chunk", .device = "auto", .seq_length = 2048, .bos = -1, .share = 1};
    ArgSpec specs[] = {
        {"model", ARG_STR, &a->model,
         "model directory (config.json + model.safetensors), or a training save/iter_* directory",
         0},
        {"tasks", ARG_STR, &a->tasks,
         "comma-separated: arc_easy, arc_challenge, hellaswag, "
         "openbookqa, piqa, winogrande, mmlu, race, olmo:<task>/<variant>",
         0},
        {"data", ARG_STR, &a->data,
         "data folder (TASK.jsonl[.gz], hf_datasets/..., oe_eval_tasks/...)", 0},
        {"limit", ARG_INT, &a->limit,
         "first N documents per task (per subject for mmlu); "
         "perplexity: at most N windows (0 = all)",
         0},
        {"batch-tokens", ARG_INT, &a->batch_tokens,
         "token budget B*T of one batched forward (0 = 8192 on the CPU, 16384 on the GPU)", 0},
        {"output", ARG_STR, &a->output, "results.json to write", 0},
        {"tokenizer", ARG_STR, &a->tokenizer,
         "tokenizer.json (default: MODEL/tokenizer.json or .model, else the tokenizer of a "
         "checkpoint's run config, else " DEFAULT_TOKENIZER ")",
         0},
        {"bos", ARG_BOOL, &a->bos,
         "BOS before every request; default: when the tokenizer's post_processor adds it, as "
         "lm-eval 0.4's HF backend (add_special_tokens from the tokenizer); --no-bos: never",
         0},
        {"max-length", ARG_INT, &a->max_length,
         "left-truncation length (0 = max_position_embeddings)", 0},
        {"dump-requests", ARG_STR, &a->dump, "JSON lines: every request with token ids and ll", 0},
        {"share-prefix", ARG_BOOL, &a->share, "run a document's context once (prefill + decode)",
         0},
        {"core", ARG_STR, &a->core, "KDA core: chunk | recurrent (CPU)", 0},
        {"device", ARG_STR, &a->device,
         "auto | cpu | cuda (auto: the GPU when the build has CUDA and one is visible)", 0},
        {"precision", ARG_STR, &a->precision,
         "GPU arithmetic: bf16 (default; bf16 mixed precision, as lm-eval's FLA run with dtype "
         "bfloat16) | fp32 (fp32 weights, activations and GEMMs, no TF32: the CPU's numbers to "
         "~1e-6 per request). The CPU is always fp32: fp32 is accepted there, bf16 is refused",
         0},
        {"perplexity", ARG_STR, &a->ppl, "PREFIX of a .bin/.idx: token-weighted NLL and perplexity",
         0},
        {"seq-length", ARG_INT, &a->seq_length, "perplexity window (predicted tokens per window)",
         0},
        {"compare", ARG_STRS, &a->cmp,
         "A B: print the Δ table (B − A); each a results JSON (lm-eval's or kda's) or a directory "
         "(its newest results*.json)",
         0},
        {"labels", ARG_STR, &a->labels, "names of the two --compare columns, e.g. FLA,kda", 0},
    };
    ArgTable table = {"kda eval", "lm-eval-compatible multiple-choice benchmarks and perplexity",
                      "Scoring follows lm-eval-harness's HF backend, 0-shot (docs/eval.md). "
                      "Prints a table (task | metric | random | score ± stderr).",
                      specs, (int)(sizeof specs / sizeof *specs)};
    if (args_parse_or_die(&table, argc, argv)) return 1;
    if (a->cmp.n) return 0; // --compare needs nothing else
    if (!a->model) kda_die("--model is required");
    if (!a->ppl && (!a->tasks || !a->data))
        kda_die("--tasks and --data are required (or --perplexity)");
    if (a->limit < 0 || a->batch_tokens < 0 || a->max_length < 0 || a->seq_length < 1)
        kda_die("--limit, --batch-tokens, --max-length and --seq-length must be positive");
    return 0;
}

// The shared-prefix rule's costs (eval.h), in tokens of a batched forward: a decode step on the
// CPU is a GEMV (2 tokens' worth) and a shared group's prefill costs nothing extra there; on the
// GPU a one-token step is a few hundred small kernel launches and a group's B = 1 prefill is
// latency- bound, against a batched forward's ~µs per token, so sharing pays only for long
// contexts. The GPU values are estimates until bench/eval/device_decode.sh has measured them;
// KDA_EVAL_DECODE_COST and KDA_EVAL_PREFILL_COST override them (to measure, e.g. 1 and 0 share
// every document).
#define DECODE_COST_CPU  2
#define DECODE_COST_GPU  32
#define PREFILL_COST_GPU 4096

static int64_t env_cost_(const char *name, int64_t dflt) {
    const char *v = getenv(name);
    char *end = NULL;
    long long x = v && *v ? strtoll(v, &end, 10) : -1;
    if (v && *v && (*end || x < 0)) kda_die("%s=%s: expected a non-negative integer", name, v);
    return x >= 0 ? (int64_t)x : dflt;
}

// The scoring settings of the opened model and device (BOS is decided with the tokenizer).
static EvalSettings settings_(const EvalArgs *a, CliModel *cm) {
    int cuda = kda_runtime_device(cm->rt) == KDA_DEVICE_CUDA;
    return (EvalSettings){
        .bos = a->bos > 0,
        .batch_tokens = a->batch_tokens ? a->batch_tokens
                        : cuda          ? 16384
                                        : 8192,
        .share_prefix = a->share,
        .decode_cost = env_cost_("KDA_EVAL_DECODE_COST", cuda ? DECODE_COST_GPU : DECODE_COST_CPU),
        .prefill_cost = env_cost_("KDA_EVAL_PREFILL_COST", cuda ? PREFILL_COST_GPU : 0),
        .max_length = a->max_length ? a->max_length : cm->cfg->max_position_embeddings,
        .device = cuda ? "cuda" : "cpu",
        .precision = kda_runtime_precision(cm->rt),
        .limit = a->limit};
}

// Loads every task first (data errors before any compute); *names and *ts are owned.
static void load_tasks_(const EvalArgs *a, char ***names, EvalTask **ts, int *n) {
    KdaError err;
    split_tasks_(a->tasks, names, n);
    *ts = kda_calloc((size_t)*n + 1, sizeof **ts);
    for (int i = 0; i < *n; i++) {
        EvalTask *t = &(*ts)[i];
        if (eval_task_load(t, (*names)[i], a->data, a->limit, &err)) kda_die("%s", err.msg);
        kda_info("%s: %lld documents from %s%s%s", (*names)[i], (long long)t->n_docs, t->source,
                 t->split[0] ? ", split " : "", t->split);
        if (!strcmp((*names)[i], "mmlu") && t->n_subtasks != 57)
            kda_warn("mmlu: %d of 57 subjects found: the aggregate is not lm-eval's",
                     t->n_subtasks);
    }
}

// Scores every task into *res (and the requests into --dump-requests); frees the tasks.
static void run_tasks_(const EvalArgs *a, CliModel *cm, const KdaTokenizer *tok,
                       const EvalSettings *s, char **names, EvalTask *ts, int n, EvalResults *res) {
    KdaError err;
    char tmp[PATH_MAX];
    FILE *dump = NULL;
    if (a->dump && !(dump = open_atomic(a->dump, tmp, &err))) kda_die("%s", err.msg);
    for (int i = 0; i < n; i++) {
        int64_t n_req = 0;
        for (int64_t d = 0; d < ts[i].n_docs; d++)
            n_req += ts[i].docs[d].n_choices;
        Progress p;
        progress_init(&p, ts[i].name, (double)n_req, "requests");
        double t0 = now_seconds();
        if (eval_run_task(cm->rt, tok, &ts[i], s, res, dump, on_progress_, &p, &err))
            kda_die("%s", err.msg);
        progress_finish(&p, (double)n_req, NULL);
        kda_info("%s: %lld documents, %lld requests in %.2f s on %s", ts[i].name,
                 (long long)ts[i].n_docs, (long long)n_req, now_seconds() - t0,
                 kda_runtime_name(cm->rt));
        eval_task_free(&ts[i]);
        free(names[i]);
    }
    if (dump && commit_atomic(dump, tmp, a->dump, &err)) kda_die("%s", err.msg);
}

// The table on stdout and --output's results.json.
static void report_(const EvalArgs *a, const CliModel *cm, const EvalSettings *s,
                    const EvalResults *res) {
    KdaError err;
    printf("kda eval: %s, 0-shot, bos=%s (%s), max_length=%lld, device=%s, precision=%s\n\n",
           a->model, s->bos ? "on" : "off", s->bos_source, (long long)s->max_length,
           kda_runtime_name(cm->rt), kda_runtime_precision(cm->rt));
    eval_results_print(stdout, res);
    if (fflush(stdout) || ferror(stdout)) kda_die("writing stdout failed");
    if (a->output && eval_results_write(a->output, res, s, a->model, &err)) kda_die("%s", err.msg);
}

int cmd_eval(int argc, char **argv) {
    EvalArgs a;
    if (parse_(&a, argc, argv)) return 0;
    if (a.cmp.n) {
        int rc = compare_(&a.cmp, a.labels);
        arglist_free(&a.cmp);
        return rc;
    }
    CliModel cm;
    CliModelSpec spec = {
        .model = a.model,
        .core = a.core,
        .device = a.device,
        .precision = a.precision,
        .log_precision = 1,
        .tok_source = CLI_TOK_NONE, // perplexity needs none: found below
    };
    cli_open_model(&cm, &spec);
    EvalSettings s = settings_(&a, &cm);
    if (a.ppl) {
        int rc = perplexity_(cm.rt, a.ppl, a.seq_length, a.limit);
        cli_close_model(&cm);
        return rc;
    }
    char tok_path[PATH_MAX];
    KdaTokenizer *tok =
        cli_find_tokenizer(a.tokenizer, cm.dir, DEFAULT_TOKENIZER, tok_path, sizeof tok_path);
    kda_info("tokenizer: %s", tok_path);
    s.bos = eval_bos_policy(a.bos, tok, &s.bos_source);
    kda_info("BOS %s (%s; post_processor: %s)", s.bos ? "on" : "off",
             a.bos < 0 ? "from the tokenizer, as lm-eval 0.4's HF backend" : s.bos_source,
             tok_post_processor(tok, NULL, NULL, NULL, NULL));
    char **names = NULL;
    EvalTask *ts = NULL;
    int n = 0;
    load_tasks_(&a, &names, &ts, &n);
    EvalResults res = {0};
    run_tasks_(&a, &cm, tok, &s, names, ts, n, &res);
    report_(&a, &cm, &s, &res);
    eval_results_free(&res);
    free(ts), free(names);
    tok_free(tok);
    cli_close_model(&cm);
    return 0;
}
