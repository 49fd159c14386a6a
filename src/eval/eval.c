// eval.c - request tokenization, loglikelihood engines (shared-prefix prefill/decode and
// batched full forward), lm-eval metrics and standard errors, results.json, perplexity.
#include "eval/eval.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h" // defines: JsonDoc, json_parse_file, json_write_string
#include "core/util.h" // defines: open_atomic, commit_atomic

// ---- tokenization -----------------------------------------------------------------------------

void eval_tokens_free(EvalTokens *t) {
    free(t->ids);
    memset(t, 0, sizeof *t);
}

static int encode(const KdaTokenizer *tok, const char *s, size_t n, TokIds *out, KdaError *err) {
    return tok_encode(tok, s, n, TOK_SPECIALS, out, err);
}

int eval_bos_policy(int flag, const KdaTokenizer *tok, const char **source) {
    *source = flag > 0 ? "--bos" : flag == 0 ? "--no-bos" : "tokenizer";
    return flag >= 0 ? flag : tok_post_adds_bos(tok);
}

int eval_encode_request(const KdaTokenizer *tok, const EvalRequest *rq, int bos, int separate,
                        EvalTokens *out, KdaError *err) {
    memset(out, 0, sizeof *out);
    const char *c = rq->context, *k = rq->continuation;
    size_t cn = strlen(c), kn = strlen(k), keep = separate ? cn : eval_py_rstrip(c, cn);
    // context = c[0..keep), continuation = c[keep..cn) + k
    char *cont = kda_malloc(cn - keep + kn + 1), *whole = kda_malloc(cn + kn + 1);
    memcpy(cont, c + keep, cn - keep), memcpy(cont + cn - keep, k, kn + 1);
    memcpy(whole, c, cn), memcpy(whole + cn, k, kn + 1);
    TokIds ctx = {0}, all = {0};
    int32_t prefix = bos ? tok_bos_id(tok) : -1;
    if (bos && prefix < 0)
        return free(cont), free(whole), kda_fail(err, "--bos: the tokenizer has no BOS token");
    int64_t n_ctx, n_cont;
    int r = 0;
    if (keep == 0) { // empty context: [prefix token] + enc(continuation)
        int32_t p = tok_bos_id(tok) >= 0 ? tok_bos_id(tok) : tok_eos_id(tok);
        if (p < 0)
            r = kda_fail(err, "empty context and the tokenizer has neither BOS nor EOS");
        else
            r = encode(tok, cont, strlen(cont), &all, err);
        prefix = p, n_ctx = 0, n_cont = (int64_t)all.n;
    } else if (separate) {
        r = encode(tok, c, keep, &all, err);
        n_ctx = (int64_t)all.n;
        if (!r) r = encode(tok, k, kn, &all, err);
        n_cont = (int64_t)all.n - n_ctx;
    } else {
        r = encode(tok, whole, cn + kn, &all, err);
        if (!r) r = encode(tok, c, keep, &ctx, err);
        n_ctx = (int64_t)ctx.n;
        n_cont = (int64_t)all.n - n_ctx;
    }
    free(cont), free(whole);
    if (r || n_cont <= 0) {
        tok_ids_free(&ctx), tok_ids_free(&all);
        return r ? -1 : kda_fail(err, "continuation %s has no tokens of its own", rq->continuation);
    }
    int64_t pre = prefix >= 0;
    out->ids = kda_malloc((size_t)(pre + n_ctx + n_cont) * sizeof(int32_t));
    if (pre) out->ids[0] = prefix;
    if (n_ctx) memcpy(out->ids + pre, separate || keep == 0 ? all.ids : ctx.ids, (size_t)n_ctx * 4);
    memcpy(out->ids + pre + n_ctx, all.ids + (all.n - (size_t)n_cont), (size_t)n_cont * 4);
    out->n_ctx = pre + n_ctx, out->n_cont = n_cont;
    tok_ids_free(&ctx), tok_ids_free(&all);
    if (out->n_ctx == 0) return eval_tokens_free(out), kda_fail(err, "empty context without BOS");
    return 0;
}

// ---- engines ----------------------------------------------------------------------------------

static double log_prob(const float *logits, int64_t V, int32_t target) {
    float mx = logits[0];
    for (int64_t v = 1; v < V; v++)
        mx = logits[v] > mx ? logits[v] : mx;
    double s = 0.0;
    for (int64_t v = 0; v < V; v++)
        s += exp((double)(logits[v] - mx));
    return (double)(logits[target] - mx) - log(s);
}

static int same_ctx(const EvalTokens *a, const EvalTokens *b) {
    return a->n_ctx == b->n_ctx && !memcmp(a->ids, b->ids, (size_t)a->n_ctx * 4);
}

// Requests [i0, i1) share their context tokens and need no truncation.
static int score_group(KdaRuntime *rt, const EvalTokens *r, int64_t i0, int64_t i1, double *ll,
                       KdaRtState *st0, KdaRtState *st, float *first, float *logits,
                       KdaError *err) {
    const int64_t V = kda_runtime_config(rt)->vocab_size;
    if (kda_runtime_prefill(rt, st0, r[i0].ids, r[i0].n_ctx, first, err)) return -1;
    for (int64_t i = i0; i < i1; i++) {
        const int32_t *cont = r[i].ids + r[i].n_ctx;
        double s = log_prob(first, V, cont[0]);
        if (r[i].n_cont > 1 && kda_runtime_state_copy(rt, st, st0, err)) return -1;
        for (int64_t t = 1; t < r[i].n_cont; t++) {
            if (kda_runtime_decode(rt, st, cont[t - 1], logits, err)) return -1;
            s += log_prob(logits, V, cont[t]);
        }
        ll[i] = s;
    }
    return 0;
}

int64_t eval_input_len(const EvalTokens *r, int64_t max_length) {
    int64_t n = r->n_ctx + r->n_cont;
    return n > max_length + 1 ? max_length + 1 : n;
}

static const int64_t *g_len; // qsort has no context argument; only used in eval_plan_batches

static int by_len_desc(const void *a, const void *b) {
    int64_t ia = *(const int64_t *)a, ib = *(const int64_t *)b;
    if (g_len[ia] != g_len[ib]) return g_len[ia] > g_len[ib] ? -1 : 1;
    return ia < ib ? -1 : ia > ib;
}

int64_t eval_plan_batches(const int64_t *len, int64_t n, int64_t budget, int64_t *order,
                          EvalBatch **batches) {
    *batches = NULL;
    if (n <= 0) return 0;
    for (int64_t i = 0; i < n; i++)
        order[i] = i;
    g_len = len;
    qsort(order, (size_t)n, sizeof *order, by_len_desc);
    g_len = NULL;
    EvalBatch *bt = kda_malloc((size_t)n * sizeof *bt); // at most one batch per row
    int64_t nb = 0;
    for (int64_t b0 = 0; b0 < n;) {
        int64_t T = len[order[b0]], B = 1;
        while (b0 + B < n && (B + 1) * T <= budget)
            B++;
        bt[nb++] = (EvalBatch){b0, B, T};
        b0 += B;
    }
    *batches = kda_realloc(bt, (size_t)nb * sizeof *bt);
    return nb;
}

void eval_fill_batch(const EvalTokens *r, const int64_t *rows, int64_t B, int64_t T,
                     int64_t max_length, int32_t *ids, int32_t *labels) {
    for (int64_t i = 0; i < B * T; i++)
        ids[i] = 0, labels[i] = -100;
    for (int64_t b = 0; b < B; b++) {
        const EvalTokens *q = &r[rows[b]];
        int64_t tot = q->n_ctx + q->n_cont, L = eval_input_len(q, max_length);
        int64_t nc = q->n_cont < L - 1 ? q->n_cont : L - 1;
        memcpy(ids + b * T, q->ids + (tot - L), (size_t)L * sizeof *ids);
        memcpy(labels + b * T + (L - nc), q->ids + (tot - nc), (size_t)nc * sizeof *labels);
    }
}

// Batched full forward of the requests idx[0..n).
static int full_forward(KdaRuntime *rt, const EvalTokens *r, const int64_t *idx, int64_t n,
                        const EvalSettings *s, double *ll, int64_t *done, EvalProgressFn progress,
                        void *pctx, KdaError *err) {
    int64_t *len = kda_malloc((size_t)n * sizeof *len), *order = kda_malloc((size_t)n * 8);
    int64_t *rows = kda_malloc((size_t)n * sizeof *rows);
    for (int64_t i = 0; i < n; i++)
        len[i] = eval_input_len(&r[idx[i]], s->max_length);
    EvalBatch *bt;
    int64_t nb = eval_plan_batches(len, n, s->batch_tokens, order, &bt);
    int32_t *ids = NULL, *lab = NULL;
    float *nll = NULL;
    size_t cap = 0;
    int rc = 0;
    for (int64_t k = 0; k < nb && rc == 0; k++) {
        int64_t B = bt[k].B, T = bt[k].T;
        if ((size_t)(B * T) > cap) {
            cap = (size_t)(B * T);
            ids = kda_realloc(ids, cap * sizeof *ids), lab = kda_realloc(lab, cap * sizeof *lab);
            nll = kda_realloc(nll, cap * sizeof *nll);
        }
        for (int64_t b = 0; b < B; b++)
            rows[b] = idx[order[bt[k].first + b]];
        eval_fill_batch(r, rows, B, T, s->max_length, ids, lab);
        if (kda_runtime_forward(rt, ids, lab, B, T, nll, NULL, err)) {
            rc = -1;
            break;
        }
        for (int64_t b = 0; b < B; b++) {
            const EvalTokens *q = &r[rows[b]];
            int64_t L = eval_input_len(q, s->max_length),
                    nc = q->n_cont < L - 1 ? q->n_cont : L - 1;
            double sum = 0.0;
            for (int64_t p = L - nc; p < L; p++)
                sum -= nll[b * T + p - 1];
            ll[rows[b]] = sum;
        }
        *done += B;
        if (progress) progress(pctx, *done);
    }
    free(len), free(order), free(rows), free(bt), free(ids), free(lab), free(nll);
    return rc;
}

// The shared-prefix engine over requests [0, n): groups it shares go through score_group, the
// rest into full[*n_full].
static int share_groups(KdaRuntime *rt, const EvalTokens *r, int64_t n, const EvalSettings *s,
                        double *ll, int64_t *full, int64_t *n_full, int64_t *done,
                        EvalProgressFn progress, void *pctx, KdaError *err) {
    int64_t V = kda_runtime_config(rt)->vocab_size, cost = s->decode_cost > 0 ? s->decode_cost : 2;
    KdaRtState *st0 = NULL, *st = NULL;
    if (kda_runtime_state_new(rt, &st0, err) || kda_runtime_state_new(rt, &st, err)) {
        kda_runtime_state_free(rt, st0);
        return -1;
    }
    float *first = kda_malloc((size_t)V * 2 * sizeof(float));
    int rc = 0;
    for (int64_t i = 0; i < n && rc == 0;) {
        if (r[i].n_ctx + r[i].n_cont > s->max_length + 1) {
            full[(*n_full)++] = i++;
            continue;
        }
        int64_t j = i + 1;
        while (j < n && same_ctx(&r[i], &r[j]) && r[j].n_ctx + r[j].n_cont <= s->max_length + 1)
            j++;
        // A decode step costs `cost` tokens of a batched forward (a GEMV vs a GEMM on the CPU), and
        // the group's own prefill s->prefill_cost more, so share only when the saved context
        // tokens outweigh them.
        int64_t decoded = 0;
        for (int64_t q = i; q < j; q++)
            decoded += r[q].n_cont - 1;
        if ((j - i - 1) * r[i].n_ctx < cost * decoded + s->prefill_cost) {
            while (i < j)
                full[(*n_full)++] = i++;
            continue;
        }
        rc = score_group(rt, r, i, j, ll, st0, st, first, first + V, err);
        *done += j - i, i = j;
        if (progress && rc == 0) progress(pctx, *done);
    }
    free(first);
    kda_runtime_state_free(rt, st0), kda_runtime_state_free(rt, st);
    return rc;
}

int eval_loglik(KdaRuntime *rt, const EvalTokens *r, int64_t n, const EvalSettings *s, double *ll,
                EvalProgressFn progress, void *pctx, KdaError *err) {
    int64_t *full = kda_malloc((size_t)(n ? n : 1) * sizeof *full), n_full = 0, done = 0;
    int rc = 0;
    if (s->share_prefix && kda_runtime_can_decode(rt)) {
        rc = share_groups(rt, r, n, s, ll, full, &n_full, &done, progress, pctx, err);
    } else {
        for (int64_t i = 0; i < n; i++)
            full[n_full++] = i;
    }
    if (rc == 0 && n_full)
        rc = full_forward(rt, r, full, n_full, s, ll, &done, progress, pctx, err);
    free(full);
    return rc;
}

// ---- metrics ----------------------------------------------------------------------------------

void eval_doc_correct(const double *ll, const int64_t *norm_len, int n, int gold, int *acc,
                      int *acc_norm) {
    int best = 0, best_n = 0;
    for (int i = 1; i < n; i++) {
        if (ll[i] > ll[best]) best = i;
        // lm-eval divides by float(len(choice)); a zero length gives inf/nan like numpy
        double a = ll[i] / (double)norm_len[i], b = ll[best_n] / (double)norm_len[best_n];
        if (a > b) best_n = i;
    }
    *acc = best == gold;
    *acc_norm = best_n == gold;
}

double eval_mean_stderr(const double *x, int64_t n) {
    if (n < 2) return NAN;
    double mu = 0.0, ss = 0.0;
    for (int64_t i = 0; i < n; i++)
        mu += x[i];
    mu /= (double)n;
    for (int64_t i = 0; i < n; i++)
        ss += (x[i] - mu) * (x[i] - mu);
    return sqrt(ss / (double)(n - 1)) / sqrt((double)n);
}

double eval_pooled_stderr(const double *se, const int64_t *size, int k) {
    double num = 0.0, tot = 0.0;
    for (int i = 0; i < k; i++) {
        num += (double)(size[i] - 1) * se[i] * se[i] * (double)size[i];
        tot += (double)size[i];
    }
    if (tot - k <= 0) return NAN;
    return sqrt(num / (tot - k) / tot);
}

static void res_add(EvalResults *r, const char *task, const char *metric, double value, double se,
                    int64_t n, double random) {
    r->m = kda_realloc(r->m, (size_t)(r->n + 1) * sizeof *r->m);
    EvalMetric *e = &r->m[r->n++];
    memset(e, 0, sizeof *e);
    snprintf(e->task, sizeof e->task, "%s", task);
    snprintf(e->metric, sizeof e->metric, "%s", metric);
    e->value = value, e->stderr = se, e->n = n, e->random = random;
}

void eval_results_free(EvalResults *r) {
    free(r->m);
    free(r->tasks);
    memset(r, 0, sizeof *r);
}

static void res_add_task(EvalResults *r, const EvalTask *t) {
    r->tasks = kda_realloc(r->tasks, (size_t)(r->n_tasks + 1) * sizeof *r->tasks);
    EvalTaskInfo *ti = &r->tasks[r->n_tasks++];
    memset(ti, 0, sizeof *ti);
    snprintf(ti->task, sizeof ti->task, "%s", t->name);
    snprintf(ti->split, sizeof ti->split, "%s", t->split);
    ti->split_fallback = t->split_fallback;
    ti->n_docs = t->n_docs;
}

static double mean(const double *x, int64_t n) {
    double s = 0.0;
    for (int64_t i = 0; i < n; i++)
        s += x[i];
    return n ? s / (double)n : NAN;
}

// mmlu: per-subject means, categories pooled over subjects, the group pooled over categories.
static int mmlu_metrics(const EvalTask *t, const double *acc, EvalResults *res, KdaError *err) {
    int ns = t->n_subtasks;
    double *x = kda_malloc((size_t)t->n_docs * sizeof *x), val_c[4] = {0}, se_c[4];
    int64_t size_c[4] = {0};
    double cat_se[4][64];
    int64_t cat_n[4][64];
    int cat_k[4] = {0};
    for (int s = 0; s < ns; s++) {
        int c = eval_mmlu_category(t->subtasks[s]);
        if (c < 0) return free(x), kda_fail(err, "mmlu: unknown subject '%s'", t->subtasks[s]);
        int64_t k = 0;
        for (int64_t d = 0; d < t->n_docs; d++)
            if (t->docs[d].subtask == s) x[k++] = acc[d];
        char name[96];
        snprintf(name, sizeof name, "mmlu_%s", t->subtasks[s]);
        double se = eval_mean_stderr(x, k);
        res_add(res, name, "acc", mean(x, k), se, k, t->random);
        if (cat_k[c] == 64) return free(x), kda_fail(err, "mmlu: too many subjects");
        cat_se[c][cat_k[c]] = se, cat_n[c][cat_k[c]++] = k;
        val_c[c] += mean(x, k) * (double)k, size_c[c] += k;
    }
    double tot = 0.0, se_g[4];
    int64_t n_g[4], k_g = 0, n_all = 0;
    for (int c = 0; c < 4; c++) {
        if (!size_c[c]) continue;
        se_c[c] = eval_pooled_stderr(cat_se[c], cat_n[c], cat_k[c]);
        char name[96];
        snprintf(name, sizeof name, "mmlu_%s", eval_mmlu_category_name(c));
        res_add(res, name, "acc", val_c[c] / (double)size_c[c], se_c[c], size_c[c], t->random);
        tot += val_c[c], se_g[k_g] = se_c[c], n_g[k_g++] = size_c[c], n_all += size_c[c];
    }
    res_add(res, "mmlu", "acc", tot / (double)n_all, eval_pooled_stderr(se_g, n_g, (int)k_g), n_all,
            t->random);
    free(x);
    return 0;
}

static void dump_request(FILE *f, const EvalTask *t, int64_t doc, int idx, const EvalRequest *rq,
                         const EvalTokens *tk, double ll) {
    fprintf(f, "{\"task\": ");
    json_write_string(f, t->name, strlen(t->name));
    if (t->n_subtasks > 0) { // mmlu: the subject's lm-eval task name, as its results key
        char sub[160];
        snprintf(sub, sizeof sub, "%s_%s", t->name, t->subtasks[t->docs[doc].subtask]);
        fprintf(f, ", \"subtask\": ");
        json_write_string(f, sub, strlen(sub));
    }
    fprintf(f, ", \"doc\": %lld, \"idx\": %d, \"gold\": %d, \"context\": ", (long long)doc, idx,
            t->docs[doc].gold);
    json_write_string(f, rq->context, strlen(rq->context));
    fprintf(f, ", \"continuation\": ");
    json_write_string(f, rq->continuation, strlen(rq->continuation));
    fprintf(f, ", \"olmo\": %s, \"ctx_ids\": [", t->olmo ? "true" : "false");
    for (int64_t i = 0; i < tk->n_ctx; i++)
        fprintf(f, "%s%d", i ? ", " : "", tk->ids[i]);
    fprintf(f, "], \"cont_ids\": [");
    for (int64_t i = 0; i < tk->n_cont; i++)
        fprintf(f, "%s%d", i ? ", " : "", tk->ids[tk->n_ctx + i]);
    char jl[32]; // a non-finite log-likelihood is written as null (valid JSON)
    fprintf(f, "], \"norm_len\": %lld, \"ll\": %s}\n", (long long)t->docs[doc].norm_len[idx],
            json_fmt_num(jl, sizeof jl, ll, 10));
}

int eval_run_task(KdaRuntime *rt, const KdaTokenizer *tok, const EvalTask *t, const EvalSettings *s,
                  EvalResults *res, FILE *dump, EvalProgressFn progress, void *pctx,
                  KdaError *err) {
    int64_t n_req = 0, vocab = kda_runtime_config(rt)->vocab_size;
    for (int64_t d = 0; d < t->n_docs; d++)
        n_req += t->docs[d].n_choices;
    EvalTokens *tk = kda_calloc((size_t)n_req + 1, sizeof *tk);
    double *ll = kda_calloc((size_t)n_req + 1, sizeof *ll);
    double *acc = kda_malloc((size_t)t->n_docs * sizeof *acc),
           *accn = kda_malloc((size_t)t->n_docs * sizeof *accn);
    int rc = 0;
    for (int64_t d = 0, k = 0; d < t->n_docs && rc == 0; d++)
        for (int i = 0; i < t->docs[d].n_choices && rc == 0; i++, k++)
            if (eval_encode_request(tok, &t->docs[d].req[i], s->bos, t->olmo, &tk[k], err))
                rc = kda_fail(err, "%s: document %lld, choice %d: %s", t->name, (long long)d, i,
                              err->msg);
    for (int64_t k = 0; k < n_req && rc == 0; k++)
        for (int64_t j = 0; j < tk[k].n_ctx + tk[k].n_cont; j++)
            if (tk[k].ids[j] >= vocab) {
                rc = kda_fail(err,
                              "%s: token id %d >= the model's vocab_size %lld (wrong "
                              "tokenizer?)",
                              t->name, tk[k].ids[j], (long long)vocab);
                break;
            }
    if (rc == 0) rc = eval_loglik(rt, tk, n_req, s, ll, progress, pctx, err);
    if (rc == 0) {
        const double *p = ll;
        for (int64_t d = 0; d < t->n_docs; d++) {
            const EvalDoc *doc = &t->docs[d];
            int a, an;
            eval_doc_correct(p, doc->norm_len, doc->n_choices, doc->gold, &a, &an);
            acc[d] = a, accn[d] = an;
            if (dump)
                for (int i = 0; i < doc->n_choices; i++)
                    dump_request(dump, t, d, i, &doc->req[i], &tk[p - ll + i], p[i]);
            p += doc->n_choices;
        }
        res_add_task(res, t);
        if (t->n_subtasks > 0 && !strcmp(t->name, "mmlu")) {
            rc = mmlu_metrics(t, acc, res, err);
        } else {
            if (t->metrics & EVAL_ACC)
                res_add(res, t->name, "acc", mean(acc, t->n_docs), eval_mean_stderr(acc, t->n_docs),
                        t->n_docs, t->random);
            if (t->metrics & EVAL_ACC_NORM)
                res_add(res, t->name, "acc_norm", mean(accn, t->n_docs),
                        eval_mean_stderr(accn, t->n_docs), t->n_docs, t->random);
        }
    }
    for (int64_t k = 0; k < n_req; k++)
        eval_tokens_free(&tk[k]);
    free(tk), free(ll), free(acc), free(accn);
    return rc;
}

// ---- perplexity -------------------------------------------------------------------------------

int eval_perplexity(KdaRuntime *rt, const IndexedDataset *ds, int64_t S, int64_t max_windows,
                    double *sum_nll, int64_t *n_tokens, EvalProgressFn progress, void *pctx,
                    KdaError *err) {
    int64_t vocab = kda_runtime_config(rt)->vocab_size;
    if (S < 1) return kda_fail(err, "--seq-length must be >= 1");
    int32_t *win = kda_malloc((size_t)(S + 1) * sizeof *win);
    float *nll = kda_malloc((size_t)(S + 1) * sizeof *nll);
    int64_t *buf = kda_malloc(4096 * sizeof *buf), fill = 0, windows = 0;
    *sum_nll = 0.0, *n_tokens = 0;
    int rc = 0, stop = 0;
    for (int64_t seq = 0; seq < ds->idx.n_seq && rc == 0 && !stop; seq++) {
        int64_t len = indexed_index_length(&ds->idx, seq);
        for (int64_t off = 0; off < len && rc == 0 && !stop;) {
            int64_t got = indexed_read_tokens(ds, seq, off, buf, 4096);
            for (int64_t i = 0; i < got && rc == 0 && !stop; i++) {
                if (buf[i] < 0 || buf[i] >= vocab) {
                    rc = kda_fail(err, "sequence %lld: token %lld outside the model's vocabulary",
                                  (long long)seq, (long long)buf[i]);
                    break;
                }
                win[fill++] = (int32_t)buf[i];
                if (fill < S + 1) continue;
                if (kda_runtime_forward(rt, win, win, 1, S + 1, nll, NULL, err)) rc = -1;
                for (int64_t t = 0; t < S; t++)
                    *sum_nll += nll[t];
                *n_tokens += S;
                win[0] = win[S], fill = 1, windows++;
                if (progress) progress(pctx, windows);
                if (max_windows > 0 && windows >= max_windows) stop = 1;
            }
            off += got > 0 ? got : len;
        }
    }
    if (rc == 0 && !stop && fill >= 2) { // last partial window
        if (kda_runtime_forward(rt, win, win, 1, fill, nll, NULL, err)) rc = -1;
        for (int64_t t = 0; t + 1 < fill; t++)
            *sum_nll += nll[t];
        *n_tokens += fill - 1;
    }
    free(win), free(nll), free(buf);
    if (rc == 0 && *n_tokens == 0) rc = kda_fail(err, "dataset has fewer than 2 tokens");
    return rc;
}
