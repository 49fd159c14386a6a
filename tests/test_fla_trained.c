// test_fla_trained.c - the CPU model on models trained by FLA itself (tests/data/fla_trained/,
// README.md there; made by tools/reference/train_fla_goldens.py): per-sequence scores of both
// C cores vs FLA's fp32 fused_recurrent path, FLA's chunk path and the float64 spec
// (kda_ref64), and every eval engine on requests cut from the same held-out windows.
//
// Each model has 8 held-out windows, T = 2 .. 2048. Errors and the tolerances that cover them:
//   C vs float64, per-sequence mean NLL (the `kda score` "loss"): 1e-5, the bar. Covers
//     fp32 rounding of the model body and head: ~1e-6 per token, random in sign (score_model
//     measured <= 8.5e-7 at T = 2, <= 1.2e-7 for T >= 17).
//   C vs float64, per-token NLL: 2e-5 (the same ~1e-6 per token; the worst token of the 3,553
//     measured 1e-5 on gva's chunk core (allow_neg_eigval: beta up to 2 makes the fp32
//     triangular solve less contractive; its recurrent core 3.2e-6; tied 5.4e-6 / 3.0e-6).
//   C vs float64, sum_nll: 7.5e-6 sqrt(T - 1): five times the sqrt(T) growth of a per-token
//     error of 1.5e-6 (score_model: 1.5e-5..2.9e-5 at T = 257..2048). A systematic per-token
//     bias above ~2e-7 fails it at T = 2048, so the old float partition sum (-6e-5 per token on
//     a 128k vocabulary) would.
//   C vs FLA fp32 fused_recurrent: mean 1e-5, sum 1e-5 sqrt(T - 1) (both sides fp32, random).
//   C vs FLA chunk: mean 1e-3: chunk_kda's intra-chunk tl.dot runs TF32 (10-bit mantissa);
//     FLA 0.5.2's chunk path was <= 6.2e-5 from float64 on score_model; on gva FLA 0.6.0's
//     chunk path itself is 5.96e-4 from float64 at T = 2 (run.json), so 5e-4 would test FLA.
//   Eval engines (shared-prefix, batched at budgets of 1, 100 and 8192 tokens) vs each other and
//     vs float64 on the natural continuation: 1e-5 per request (<= 9 tokens of ~1e-6 each).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"  // defines: KdaError, kda_malloc
#include "core/json.h"   // defines: JsonDoc, json_parse, json_get, json_get_num
#include "core/util.h"   // defines: read_file
#include "eval/eval.h"   // defines: EvalTokens, EvalSettings, eval_loglik
#include "model/model.h" // defines: KdaModel, kda_model_forward
#include "tiny_model.h"  // defines: tiny_runtime, tiny_load_model
#include "test.h"

#define N_SEQ      8
#define MEAN_TOL   1e-5
#define TOKEN_TOL  2e-5
#define F64_SUM_K  7.5e-6 // sum_nll tolerance vs float64: F64_SUM_K sqrt(T - 1)
#define FLA_SUM_K  1e-5   // vs FLA fp32 recurrent: FLA_SUM_K sqrt(T - 1)
#define CHUNK_TOL  1e-3
#define ENGINE_TOL 1e-5

// One line of scores.jsonl: the ids and, per source, the per-token NLL and its sum.
typedef struct {
    int32_t *ids;
    int64_t n;
    double *nll[3]; // [n - 1] per source: float64, FLA recurrent, FLA chunk
    double sum[3];
} FlaSeq;

static const char *SOURCES[3] = {"ref64", "fla_recurrent", "fla_chunk"};

static int read_source_(FlaSeq *s, int k, const JsonValue *root, KdaError *err) {
    const JsonValue *o = json_get(root, SOURCES[k]), *a = o ? json_get(o, "nll") : NULL;
    if (!a || a->type != JSON_ARRAY || (int64_t)a->len != s->n - 1 ||
        json_get_num(o, "sum_nll", &s->sum[k]))
        return kda_fail(err, "\"%s\" needs \"nll\" [%lld] and \"sum_nll\"", SOURCES[k],
                        (long long)s->n - 1);
    s->nll[k] = kda_malloc((size_t)a->len * sizeof(double));
    for (size_t i = 0; i < a->len; i++) {
        if (a->items[i].type != JSON_NUMBER) return kda_fail(err, "%s.nll[%zu]", SOURCES[k], i);
        s->nll[k][i] = a->items[i].num;
    }
    return 0;
}

static int read_line_(FlaSeq *s, const char *line, size_t len, int64_t vocab, KdaError *err) {
    JsonDoc d;
    if (json_parse(&d, line, len, err)) return -1;
    const JsonValue *ids = json_get(&d.root, "ids");
    int rc = 0;
    if (!ids || ids->type != JSON_ARRAY || ids->len < 2)
        rc = kda_fail(err, "\"ids\" must be an array of >= 2 ids");
    for (size_t i = 0; rc == 0 && i < ids->len; i++)
        if (!ids->items[i].is_int || ids->items[i].i < 0 || ids->items[i].i >= vocab)
            rc = kda_fail(err, "ids[%zu] is not an id below %lld", i, (long long)vocab);
    if (rc == 0) {
        s->n = (int64_t)ids->len;
        s->ids = kda_malloc((size_t)s->n * sizeof(int32_t));
        for (int64_t i = 0; i < s->n; i++)
            s->ids[i] = (int32_t)ids->items[i].i;
        for (int k = 0; k < 3 && rc == 0; k++)
            rc = read_source_(s, k, &d.root, err);
    }
    json_free(&d);
    return rc;
}

static void seqs_free_(FlaSeq *s, int n) {
    for (int i = 0; i < n; i++) {
        free(s[i].ids);
        for (int k = 0; k < 3; k++)
            free(s[i].nll[k]);
    }
}

// Loads fla_trained/<name>/ and its scores.jsonl (exactly N_SEQ lines); 0 on success.
static int load_(const char *name, KdaModel *m, FlaSeq *s) {
    char rel[256];
    KdaError err;
    snprintf(rel, sizeof rel, "fla_trained/%s", name);
    if (tiny_load_model(m, rel)) return -1;
    snprintf(rel, sizeof rel, "fla_trained/%s/scores.jsonl", name);
    size_t len;
    char *text = read_file(test_data(rel), &len, &err), *line = text;
    CHECK_MSG(text != NULL, "%s", err.msg);
    int n = 0;
    for (char *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        if (n == N_SEQ) {
            CHECK_MSG(0, "%s: more than %d lines", rel, N_SEQ);
            break;
        }
        memset(&s[n], 0, sizeof *s);
        if (read_line_(&s[n], line, strlen(line), m->cfg.vocab_size, &err)) {
            CHECK_MSG(0, "%s:%d: %s", rel, n + 1, err.msg);
            break;
        }
        n++;
    }
    free(text);
    CHECK_MSG(n == N_SEQ, "%s: %d lines, want %d", rel, n, N_SEQ);
    if (n != N_SEQ) seqs_free_(s, n), kda_model_free(m);
    return n == N_SEQ ? 0 : -1;
}

// Both C cores against the three sources, per sequence; prints one line per sequence.
static void check_scores_(const char *name, KdaModel *m, const FlaSeq *s) {
    for (int core = 0; core < 2; core++) {
        m->core = core ? KDA_CORE_RECURRENT : KDA_CORE_CHUNK;
        double worst[3] = {0}, worst_tok = 0;
        for (int i = 0; i < N_SEQ; i++) {
            int64_t T = s[i].n;
            float *nll = kda_malloc((size_t)T * sizeof(float));
            KdaError err;
            int rc = kda_model_forward(m, s[i].ids, NULL, 1, T, nll, NULL, NULL, &err);
            CHECK_MSG(rc == 0, "%s", err.msg);
            double sum = 0.0, tok = 0.0, root = sqrt((double)(T - 1));
            for (int64_t t = 0; t < T - 1; t++) {
                sum += nll[t];
                tok = fmax(tok, fabs(nll[t] - s[i].nll[0][t]));
            }
            double d[3];
            for (int k = 0; k < 3; k++) {
                d[k] = sum - s[i].sum[k];
                worst[k] = fmax(worst[k], fabs(d[k]) / (double)(T - 1));
            }
            worst_tok = fmax(worst_tok, tok);
            const char *c = core ? "recurrent" : "chunk";
            CHECK_MSG(fabs(d[0]) / (T - 1) <= MEAN_TOL && fabs(d[0]) <= F64_SUM_K * root,
                      "%s %s T=%lld: sum_nll %.9f vs float64 %.9f", name, c, (long long)T, sum,
                      s[i].sum[0]);
            CHECK_MSG(tok <= TOKEN_TOL, "%s %s T=%lld: a token NLL %.3g from float64", name, c,
                      (long long)T, tok);
            CHECK_MSG(fabs(d[1]) / (T - 1) <= MEAN_TOL && fabs(d[1]) <= FLA_SUM_K * root,
                      "%s %s T=%lld: sum_nll %.9f vs FLA recurrent %.9f", name, c, (long long)T,
                      sum, s[i].sum[1]);
            CHECK_MSG(fabs(d[2]) / (T - 1) <= CHUNK_TOL,
                      "%s %s T=%lld: mean %.9f vs FLA chunk %.9f", name, c, (long long)T,
                      sum / (T - 1), s[i].sum[2] / (T - 1));
            printf("    fla_trained %s %-9s T=%-4lld d_sum vs f64 %+.1e  FLA rec %+.1e  FLA chunk "
                   "%+.1e\n",
                   name, c, (long long)T, d[0], d[1], d[2]);
            free(nll);
        }
        printf("    fla_trained %s %s worst |d mean|: f64 %.2e, FLA rec %.2e, FLA chunk %.2e; "
               "worst token vs f64 %.2e\n",
               name, core ? "recurrent" : "chunk", worst[0], worst[1], worst[2], worst_tok);
    }
    m->core = KDA_CORE_CHUNK;
}

// Requests cut from windows 1..5 (T = 17 .. 257): context = all but the last k tokens, three
// continuations of k tokens: the natural one (float64 reference known) and two taken from the
// T = 2048 window. All engines must agree with each other, and the natural one with float64.
static void check_engines_(const char *name, KdaModel *m, const FlaSeq *s) {
    enum { DOCS = 5, CH = 3, N = DOCS * CH };
    EvalTokens r[N];
    double ref[DOCS];
    const FlaSeq *donor = &s[N_SEQ - 1];
    for (int d = 0; d < DOCS; d++) {
        const FlaSeq *q = &s[d + 1];
        int64_t k = 1 + d % 8 + d, nx = q->n - k;
        ref[d] = 0.0;
        for (int64_t t = nx; t < q->n; t++)
            ref[d] -= q->nll[0][t - 1];
        for (int c = 0; c < CH; c++) {
            EvalTokens *e = &r[d * CH + c];
            *e = (EvalTokens){kda_malloc((size_t)q->n * sizeof(int32_t)), nx, k};
            memcpy(e->ids, q->ids, (size_t)nx * sizeof(int32_t));
            const int32_t *cont = c == 0 ? q->ids + nx : donor->ids + 100 * (d * CH + c);
            memcpy(e->ids + nx, cont, (size_t)k * sizeof(int32_t));
        }
    }
    double ll[4][N];
    EvalSettings st = {.bos = 0, .max_length = 2048, .batch_tokens = 8192, .share_prefix = 1};
    KdaError err;
    KdaRuntime *rt = tiny_runtime(m, "cpu", NULL);
    CHECK_MSG(eval_loglik(rt, r, N, &st, ll[0], NULL, NULL, &err) == 0, "%s", err.msg);
    st.share_prefix = 0;
    const int64_t budgets[3] = {1, 100, 8192};
    for (int b = 0; b < 3; b++) {
        st.batch_tokens = budgets[b];
        CHECK_MSG(eval_loglik(rt, r, N, &st, ll[b + 1], NULL, NULL, &err) == 0, "%s", err.msg);
    }
    kda_runtime_close(rt);
    double worst = 0.0, worst_ref = 0.0;
    for (int i = 0; i < N; i++) {
        for (int e = 1; e < 4; e++) {
            CHECK_MSG(fabs(ll[e][i] - ll[0][i]) <= ENGINE_TOL,
                      "%s request %d: engine %d %.9f vs shared-prefix %.9f", name, i, e, ll[e][i],
                      ll[0][i]);
            worst = fmax(worst, fabs(ll[e][i] - ll[0][i]));
        }
        if (i % CH == 0)
            for (int e = 0; e < 4; e++) {
                CHECK_MSG(fabs(ll[e][i] - ref[i / CH]) <= ENGINE_TOL,
                          "%s request %d: engine %d %.9f vs float64 %.9f", name, i, e, ll[e][i],
                          ref[i / CH]);
                worst_ref = fmax(worst_ref, fabs(ll[e][i] - ref[i / CH]));
            }
    }
    printf("    fla_trained %s engines: worst |d ll| between engines %.2e, vs float64 %.2e\n", name,
           worst, worst_ref);
    for (int i = 0; i < N; i++)
        eval_tokens_free(&r[i]);
}

static void run_(const char *name) {
    KdaModel m;
    memset(&m, 0, sizeof m);
    FlaSeq s[N_SEQ];
    if (load_(name, &m, s)) return;
    CHECK(s[0].n == 2 && s[N_SEQ - 1].n == 2048); // the windows of the script: 2 .. 2048
    check_scores_(name, &m, s);
    if (s[N_SEQ - 1].n >= 100 * 15 + 16) check_engines_(name, &m, s);
    seqs_free_(s, N_SEQ);
    kda_model_free(&m);
}

KDA_TEST(fla_trained_tied) {
    run_("tied");
}

// GVA (num_v_heads 4 over 2 q/k heads), allow_neg_eigval (beta in (0, 2)), untied LM head: the
// second FLA-trained golden (train_fla_goldens.py --models gva, GPU run of 2026-12-01 23:04 UTC).
KDA_TEST(fla_trained_gva_negeig_untied) {
    run_("gva");
}
