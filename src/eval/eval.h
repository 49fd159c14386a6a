// eval.h - loglikelihood scoring of multiple-choice requests as lm-eval-harness's HF backend
// does it (data-formats.md §8.2-8.4), OLMo's variant (§9.2), metrics with lm-eval's standard
// errors, and token-weighted perplexity over a Megatron .bin/.idx.
//
// Tokenization of a request (lm-eval TemplateLM._encode_pair): trailing Python-whitespace of the
// context moves to the front of the continuation; whole = enc(context + continuation),
// ctx = enc(context), cont = whole[len(ctx):]. The model input is ctx + cont (BOS first when
// bos is set), left-truncated to the last max_length + 1 tokens; the loglikelihood is the sum
// of log p(cont token | prefix) in fp32 (natural log). OLMo requests tokenize context and
// continuation separately (no whitespace move, no whole-string split).
//
// Scoring engines, both over the model runtime (model/runtime.h: the CPU or the GPU; same numbers
// up to the device's rounding; tests compare them):
//   shared prefix (default): consecutive requests with identical context tokens run the
//     context once (kda_runtime_prefill) and each continuation continues from a copy of the
//     recurrent state (kda_runtime_decode), i.e. context + sum of continuation lengths tokens
//     per document instead of choices x (context + continuation); used for a group when
//     (choices - 1) x context tokens >= decode_cost x decoded tokens + prefill_cost
//     (decode_cost: what one decode step costs in tokens of a batched forward; prefill_cost:
//     what a group's own B = 1 prefill costs beyond its tokens) and the runtime can decode (the
//     GPU's fp32 scoring model cannot);
//   batched full forward: requests sorted by length, packed into [B, T] batches of at most
//     batch_tokens tokens (eval_plan_batches; right-padded with token 0, labels -100 on context
//     and padding so only continuation tokens are scored; causal, so padding never reaches a
//     scored position), per-position NLL from kda_runtime_forward. Used for requests that need
//     truncation, for groups the rule above does not share, and for everything when
//     share_prefix = 0.
//
// Metrics (lm-eval process_results/aggregation): acc = argmax_i ll_i == gold (first maximum
// wins, like numpy.argmax); acc_norm = argmax_i ll_i / norm_len_i; mean over documents;
// stderr = lm-eval's mean_stderr = sample stddev (n-1) / sqrt(n) = sqrt(p(1-p)/(n-1));
// group aggregation (mmlu) weighted by size with lm-eval's pooled_sample_stderr, applied per
// category (stem, humanities, social_sciences, other) and then over the categories.
#ifndef KDA_EVAL_EVAL_H
#define KDA_EVAL_EVAL_H

#include <stdint.h>
#include <stdio.h>

#include "core/error.h"    // defines: KdaError
#include "data/indexed.h"  // defines: IndexedDataset
#include "eval/tasks.h"    // defines: EvalTask, EvalRequest
#include "model/runtime.h" // defines: KdaRuntime
#include "tok/tok.h"       // defines: KdaTokenizer

#define EVAL_LM_EVAL_VERSION "lm-eval 0.4.x HF backend (see docs/eval.md)"

typedef struct {
    int bos;                // prepend the tokenizer's BOS id to every request
    const char *bos_source; // why (results): "tokenizer", "--bos", "--no-bos" (NULL: unknown)
    int64_t max_length;     // left truncation: at most max_length + 1 tokens per request
    int64_t batch_tokens;   // B*T budget of one batched forward (>= max_length + 1 is best)
    int share_prefix;       // 1: prefill + decode engine where it pays; 0: batched forward only
    int64_t decode_cost;    // a decode step's cost in batched-forward tokens (the rule above;
                            // <= 0: 2, the CPU's: a decode step is a GEMV)
    int64_t prefill_cost;   // a shared group's fixed cost in batched-forward tokens (CPU: 0)
    const char *device;     // results.json "device" ("cpu" when NULL)
    const char *precision;  // "bf16" | "fp32" -> results.json "dtype" bfloat16 | float32 (NULL:
                            // bfloat16 on "cuda", float32 on the CPU)
    int64_t limit;          // --limit (results.json config.limit; 0 = none)
} EvalSettings;

typedef struct {
    int32_t *ids;   // [n_ctx + n_cont] int32 owned: context tokens then continuation tokens
    int64_t n_ctx;  // >= 1 (lm-eval inserts the prefix token when the context is empty)
    int64_t n_cont; // >= 1
} EvalTokens;

// Tokenizes one request. separate = 1: OLMo rules. An empty context becomes [BOS] (or [EOS]
// when the tokenizer has no BOS), as lm-eval's HF backend does. Errors when the continuation
// has no tokens.
// lm-eval 0.4's HF backend leaves special tokens to the tokenizer (add_special_tokens): BOS
// when its post_processor adds it (Llama 3.2), none for GPT-2's. flag: -1 follow the tokenizer,
// 0 never (--no-bos), 1 always (--bos). *source gets "tokenizer", "--bos" or "--no-bos".
int eval_bos_policy(int flag, const KdaTokenizer *tok, const char **source);

int eval_encode_request(const KdaTokenizer *tok, const EvalRequest *rq, int bos, int separate,
                        EvalTokens *out, KdaError *err);
void eval_tokens_free(EvalTokens *t);

// ---- batched engine: device-independent planning (tested on the CPU) -------------------------

// One padded batch: rows order[first .. first + B) of a plan, right-padded to T tokens (T = the
// length of its first, longest row).
typedef struct {
    int64_t first, B, T;
} EvalBatch;

// Plans the batched engine for n rows of lengths len [n] (>= 1): order [n] gets 0..n-1 sorted by
// length, longest first (ties: lower index first), cut into consecutive batches, each as large as
// possible with B*T <= budget (a row longer than the budget runs alone). Returns the number of
// batches; *batches (malloc'ed, NULL when n == 0) is the caller's to free.
int64_t eval_plan_batches(const int64_t *len, int64_t n, int64_t budget, int64_t *order,
                          EvalBatch **batches);
// Tokens a request feeds the model: min(n_ctx + n_cont, max_length + 1) (left truncation).
int64_t eval_input_len(const EvalTokens *r, int64_t max_length);
// Fills one padded batch from the requests r[rows[0..B)]: ids [B, T] int32 = the row's last
// eval_input_len tokens then token 0; labels [B, T] int32 = the token at continuation positions
// (the last min(n_cont, len - 1) of the row), -100 on context and padding positions.
void eval_fill_batch(const EvalTokens *r, const int64_t *rows, int64_t B, int64_t T,
                     int64_t max_length, int32_t *ids, int32_t *labels);

// Progress callback: requests scored so far (monotone).
typedef void (*EvalProgressFn)(void *ctx, int64_t done);

// ll[i] = loglikelihood of request i (natural log, double accumulation of fp32 log-probs).
int eval_loglik(KdaRuntime *rt, const EvalTokens *reqs, int64_t n, const EvalSettings *s,
                double *ll, EvalProgressFn progress, void *pctx, KdaError *err);

typedef struct {
    char task[96];   // "arc_easy", "mmlu", "mmlu_stem", "mmlu_abstract_algebra", "olmo:..."
    char metric[16]; // "acc" | "acc_norm"
    double value;    // fraction in [0, 1]
    double stderr;   // NaN when undefined (n < 2)
    int64_t n;       // documents
    double random;   // chance level in percent (0 when unknown)
} EvalMetric;

typedef struct {
    char task[64];      // a task as run ("arc_easy", "mmlu")
    char split[32];     // split read ("" for JSONL files and OLMo requests)
    int split_fallback; // 1: lm-eval's split was missing, the other one was read
    int64_t n_docs;     // documents evaluated
} EvalTaskInfo;

typedef struct {
    EvalMetric *m; // owned [n]
    int n;
    EvalTaskInfo *tasks; // owned [n_tasks]: eval_run_task adds one per task
    int n_tasks;
    // What a results file says (eval_results_read); -1 when it does not say.
    int bos;
    int64_t limit;   // 0: no limit
    char format[16]; // "lm-eval" (0.4 schema, kda's own included), "kda-legacy"
} EvalResults;

// Per-document correctness from the loglikelihoods of its n choices.
void eval_doc_correct(const double *ll, const int64_t *norm_len, int n, int gold, int *acc,
                      int *acc_norm);
double eval_mean_stderr(const double *x, int64_t n);
double eval_pooled_stderr(const double *stderrs, const int64_t *sizes, int k);

// Scores every document of t and appends its metrics to res (mmlu: the aggregate, the 4
// categories and each subject). dump (may be NULL): one JSON line per request with task, doc,
// idx, gold, context, continuation, token ids, norm_len (the acc_norm divisor) and ll (input of
// tools/reference/eval_reference.py).
int eval_run_task(KdaRuntime *rt, const KdaTokenizer *tok, const EvalTask *t, const EvalSettings *s,
                  EvalResults *res, FILE *dump, EvalProgressFn progress, void *pctx, KdaError *err);
void eval_results_free(EvalResults *r);

// ---- results files (results.c) ----------------------------------------------------------------

// Writes lm-eval 0.4's results schema (results.<task>."acc,none", "acc_stderr,none",
// "acc_norm,none", "acc_norm_stderr,none", alias; groups and group_subtasks for mmlu; configs,
// versions, n-shot, higher_is_better, n-samples; config with model_args, device, dtype, limit,
// bos, bos_source, max_length; date) plus kda's: task_splits (split used, fallback), kda_version,
// kda_commit. Atomic (temp + rename).
int eval_results_write(const char *path, const EvalResults *r, const EvalSettings *s,
                       const char *model_dir, KdaError *err);
// Reads lm-eval's results_*.json (any 0.4 version), kda's own (the same schema) and kda's
// pre-0.2 file ({"results": [...]}). path may be a directory: the newest results*.json in it
// or in its subdirectories (lm-eval's --output_path layout). *resolved (cap bytes, may be NULL)
// gets the file read.
int eval_results_read(const char *path, EvalResults *r, char *resolved, size_t cap, KdaError *err);
// Table like training-recipe.md §2.3: task | metric | random | score ± stderr | n (percent);
// a task whose split was a fallback is marked and explained under the table.
void eval_results_print(FILE *f, const EvalResults *r);
// Δ table (b - a, percentage points) of the (task, metric) pairs present in both, and the
// mean absolute Δ; columns named name_a / name_b.
void eval_results_compare(FILE *f, const EvalResults *a, const EvalResults *b, const char *name_a,
                          const char *name_b);
// One line per difference that makes the comparison unfair: BOS, limit, the split of a task
// (or that a file does not say). Returns the number of lines written to f.
int eval_results_mismatches(FILE *f, const EvalResults *a, const EvalResults *b, const char *name_a,
                            const char *name_b);
// The lm-eval task version kda.c's template follows (results "versions"); 0 when unknown.
double eval_task_version(const char *task);

// Perplexity over the token stream of ds (sequences in order, back to back): non-overlapping
// windows of seq_length + 1 tokens that overlap by one token (window w = tokens
// [w*S, w*S + S]), so every token but the first is predicted exactly once, with at most S
// tokens of context; the last partial window is scored too. max_windows > 0 stops early.
// Outputs the NLL sum and the number of predicted tokens.
int eval_perplexity(KdaRuntime *rt, const IndexedDataset *ds, int64_t seq_length,
                    int64_t max_windows, double *sum_nll, int64_t *n_tokens,
                    EvalProgressFn progress, void *pctx, KdaError *err);

#endif
