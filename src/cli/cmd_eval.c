// cmd_eval.c - `kda eval`: lm-eval-compatible 0-shot multiple-choice benchmarks, OLMo request
// files, perplexity over a .bin/.idx, and the comparison of two results files (docs/eval.md).
//
//   kda eval --model DIR --tasks arc_easy,...,race --data DATA_DIR [--limit N]
//            [--batch-tokens N] [--output results.json] [--tokenizer PATH] [--bos|--no-bos]
//            [--max-length N] [--dump-requests FILE] [--no-share-prefix] [--core chunk|recurrent]
//            [--device auto|cpu|cuda] [--precision bf16|fp32]
//   kda eval --model DIR --perplexity PREFIX [--seq-length N] [--limit WINDOWS] [--device ...]
//
// On the GPU every request goes through the batched full forward (eval.h), in bf16 mixed
// precision (the default, as lm-eval's FLA run) or fp32 (--precision fp32; eval/device.h).
// results.json's config.dtype records it (bfloat16 | float32).
//   kda eval --compare A.json B.json
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "core/args.h"    // defines: ArgSpec, ArgTable, ArgList, args_parse_or_die
#include "core/log.h"     // defines: Progress, progress_*, kda_info, kda_warn
#include "core/util.h"    // defines: path_exists, path_join, now_seconds, open_atomic
#include "data/indexed.h" // defines: IndexedDataset, indexed_open
#include "eval/device.h"  // defines: EvalDevice, eval_device_open, eval_device_forward
#include "eval/eval.h"    // defines: eval_run_task, eval_results_*, eval_perplexity
#include "eval/tasks.h"   // defines: EvalTask, eval_task_load
#include "io/model_io.h"  // defines: kda_model_load_dir
#include "model/model.h"  // defines: KdaModel

#define DEFAULT_TOKENIZER "assets/tokenizers/llama3/tokenizer.json"

static void on_progress_(void *ctx, int64_t done) {
    progress_update(ctx, (double)done, NULL);
}

static void load_model_(const char *dir, const char *core, KdaModel *m) {
    KdaError err;
    KdaConfig cfg;
    KdaParamTable pt;
    float *flat;
    if (strcmp(core, "chunk") && strcmp(core, "recurrent"))
        kda_die("--core must be chunk or recurrent, got '%s'", core);
    if (kda_model_load_dir(dir, &cfg, &pt, &flat, &err)) kda_die("%s", err.msg);
    if (kda_model_init_from(m, &cfg, &pt, flat, &err)) kda_die("%s: %s", dir, err.msg);
    m->core = strcmp(core, "recurrent") ? KDA_CORE_CHUNK : KDA_CORE_RECURRENT;
}

static KdaTokenizer *load_tokenizer_(const char *flag, const char *model_dir) {
    char p[PATH_MAX];
    const char *path = flag;
    if (!path) {
        path = DEFAULT_TOKENIZER;
        if (path_exists(path_join(p, sizeof p, model_dir, "tokenizer.json"))) path = p;
    }
    KdaTokenizer *t;
    KdaError err;
    if (tok_load(&t, path, &err)) kda_die("%s", err.msg);
    kda_info("tokenizer: %s", path);
    return t;
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

static int perplexity_(KdaModel *m, const EvalSettings *s, const char *prefix, int64_t seq_length,
                       int64_t limit) {
    IndexedDataset ds;
    KdaError err;
    if (indexed_open(&ds, prefix, &err)) kda_die("%s", err.msg);
    Progress p;
    int64_t total = (ds.idx.n_tokens + seq_length - 1) / seq_length;
    progress_init(&p, "perplexity", (double)(limit > 0 && limit < total ? limit : total),
                  "windows");
    double sum, t0 = now_seconds();
    int64_t n;
    if (eval_perplexity(m, &ds, seq_length, limit, s, &sum, &n, on_progress_, &p, &err))
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

int cmd_eval(int argc, char **argv) {
    const char *model_dir = NULL, *tasks = NULL, *data = NULL, *output = NULL, *tok_path = NULL;
    const char *dump_path = NULL, *ppl = NULL, *core = "chunk", *device = "auto";
    const char *precision = NULL;
    int64_t limit = 0, batch_tokens = 0, max_length = 0, seq_length = 2048;
    int bos = -1, share = 1; // bos -1: as the tokenizer's post_processor says (lm-eval 0.4)
    ArgList cmp = {0};
    const char *labels = NULL;
    ArgSpec specs[] = {
        {"model", ARG_STR, &model_dir, "model directory (config.json + model.safetensors)", 0},
        {"tasks", ARG_STR, &tasks,
         "comma-separated: arc_easy, arc_challenge, hellaswag, "
         "openbookqa, piqa, winogrande, mmlu, race, olmo:<task>/<variant>",
         0},
        {"data", ARG_STR, &data,
         "data folder (TASK.jsonl[.gz], hf_datasets/..., oe_eval_tasks/...)", 0},
        {"limit", ARG_INT, &limit,
         "first N documents per task (per subject for mmlu); "
         "perplexity: at most N windows (0 = all)",
         0},
        {"batch-tokens", ARG_INT, &batch_tokens,
         "token budget B*T of one batched forward (0 = 8192 on the CPU, 16384 on the GPU)", 0},
        {"output", ARG_STR, &output, "results.json to write", 0},
        {"tokenizer", ARG_STR, &tok_path,
         "tokenizer.json (default: MODEL/tokenizer.json, else " DEFAULT_TOKENIZER ")", 0},
        {"bos", ARG_BOOL, &bos,
         "BOS before every request; default: when the tokenizer's post_processor adds it, as "
         "lm-eval 0.4's HF backend (add_special_tokens from the tokenizer); --no-bos: never",
         0},
        {"max-length", ARG_INT, &max_length, "left-truncation length (0 = max_position_embeddings)",
         0},
        {"dump-requests", ARG_STR, &dump_path, "JSON lines: every request with token ids and ll",
         0},
        {"share-prefix", ARG_BOOL, &share, "run a document's context once (prefill + decode)", 0},
        {"core", ARG_STR, &core, "KDA core: chunk | recurrent (CPU)", 0},
        {"device", ARG_STR, &device,
         "auto | cpu | cuda (auto: the GPU when the build has CUDA and one is visible)", 0},
        {"precision", ARG_STR, &precision,
         "GPU arithmetic: bf16 (default; bf16 mixed precision, as lm-eval's FLA run with dtype "
         "bfloat16) | fp32 (fp32 weights, activations and GEMMs, no TF32: the CPU's numbers to "
         "~1e-6 per request). The CPU is always fp32: fp32 is accepted there, bf16 is refused",
         0},
        {"perplexity", ARG_STR, &ppl, "PREFIX of a .bin/.idx: token-weighted NLL and perplexity",
         0},
        {"seq-length", ARG_INT, &seq_length, "perplexity window (predicted tokens per window)", 0},
        {"compare", ARG_STRS, &cmp,
         "A B: print the Δ table (B − A); each a results JSON (lm-eval's or kda's) or a directory "
         "(its newest results*.json)",
         0},
        {"labels", ARG_STR, &labels, "names of the two --compare columns, e.g. FLA,kda", 0},
    };
    ArgTable table = {"kda eval", "lm-eval-compatible multiple-choice benchmarks and perplexity",
                      "Scoring follows lm-eval-harness's HF backend, 0-shot (docs/eval.md). "
                      "Prints a table (task | metric | random | score ± stderr).",
                      specs, (int)(sizeof specs / sizeof *specs)};
    if (args_parse_or_die(&table, argc, argv)) return 0;
    if (cmp.n) {
        int rc = compare_(&cmp, labels);
        arglist_free(&cmp);
        return rc;
    }
    if (!model_dir) kda_die("--model is required");
    if (!ppl && (!tasks || !data)) kda_die("--tasks and --data are required (or --perplexity)");
    if (limit < 0 || batch_tokens < 0 || max_length < 0 || seq_length < 1)
        kda_die("--limit, --batch-tokens, --max-length and --seq-length must be positive");
    KdaError err;
    int fp32, pick;
    if (eval_precision_parse(precision, &fp32, &err) || eval_device_pick(device, &pick, &err))
        kda_die("%s", err.msg); // before loading the model
    KdaModel m;
    load_model_(model_dir, core, &m);
    EvalDevice dev;
    if (eval_device_open(&dev, device, precision, &m, &err)) kda_die("%s", err.msg);
    if (dev.note[0]) kda_warn("--device auto: %s; using the CPU", dev.note);
    kda_info("device: %s, precision %s%s", dev.name, dev.precision,
             dev.cuda ? ", batched forward" : "");
    EvalSettings s = {.bos = bos > 0,
                      .batch_tokens = batch_tokens ? batch_tokens
                                      : dev.cuda   ? 16384
                                                   : 8192,
                      .share_prefix = share,
                      .max_length = max_length ? max_length : m.cfg.max_position_embeddings,
                      .forward = dev.cuda ? eval_device_forward : NULL,
                      .forward_ctx = &dev,
                      .device = dev.cuda ? "cuda" : "cpu",
                      .precision = dev.precision,
                      .limit = limit};
    if (ppl) {
        int rc = perplexity_(&m, &s, ppl, seq_length, limit);
        eval_device_close(&dev);
        kda_model_free(&m);
        return rc;
    }
    KdaTokenizer *tok = load_tokenizer_(tok_path, model_dir);
    s.bos = eval_bos_policy(bos, tok, &s.bos_source);
    kda_info("BOS %s (%s; post_processor: %s)", s.bos ? "on" : "off",
             bos < 0 ? "from the tokenizer, as lm-eval 0.4's HF backend" : s.bos_source,
             tok_post_processor(tok, NULL, NULL, NULL, NULL));
    char **names;
    int n_names;
    split_tasks_(tasks, &names, &n_names);
    EvalTask *ts = kda_calloc((size_t)n_names + 1, sizeof *ts);
    for (int i = 0; i < n_names; i++) { // load everything first: data errors before compute
        if (eval_task_load(&ts[i], names[i], data, limit, &err)) kda_die("%s", err.msg);
        kda_info("%s: %lld documents from %s%s%s", names[i], (long long)ts[i].n_docs, ts[i].source,
                 ts[i].split[0] ? ", split " : "", ts[i].split);
        if (!strcmp(names[i], "mmlu") && ts[i].n_subtasks != 57)
            kda_warn("mmlu: %d of 57 subjects found: the aggregate is not lm-eval's",
                     ts[i].n_subtasks);
    }
    char tmp[PATH_MAX];
    FILE *dump = NULL;
    if (dump_path && !(dump = open_atomic(dump_path, tmp, &err))) kda_die("%s", err.msg);
    EvalResults res = {0};
    for (int i = 0; i < n_names; i++) {
        int64_t n_req = 0;
        for (int64_t d = 0; d < ts[i].n_docs; d++)
            n_req += ts[i].docs[d].n_choices;
        Progress p;
        progress_init(&p, ts[i].name, (double)n_req, "requests");
        double t0 = now_seconds();
        if (eval_run_task(&m, tok, &ts[i], &s, &res, dump, on_progress_, &p, &err))
            kda_die("%s", err.msg);
        progress_finish(&p, (double)n_req, NULL);
        kda_info("%s: %lld documents, %lld requests in %.2f s on %s", ts[i].name,
                 (long long)ts[i].n_docs, (long long)n_req, now_seconds() - t0, dev.name);
        eval_task_free(&ts[i]);
        free(names[i]);
    }
    if (dump && commit_atomic(dump, tmp, dump_path, &err)) kda_die("%s", err.msg);
    printf("kda eval: %s, 0-shot, bos=%s (%s), max_length=%lld, device=%s, precision=%s\n\n",
           model_dir, s.bos ? "on" : "off", s.bos_source, (long long)s.max_length, dev.name,
           dev.precision);
    eval_results_print(stdout, &res);
    if (fflush(stdout) || ferror(stdout)) kda_die("writing stdout failed");
    if (output && eval_results_write(output, &res, &s, model_dir, &err)) kda_die("%s", err.msg);
    eval_results_free(&res);
    free(ts), free(names);
    tok_free(tok);
    eval_device_close(&dev);
    kda_model_free(&m);
    return 0;
}
