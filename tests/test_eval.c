// test_eval.c - `kda eval`: request construction of every task against hand-written (and,
// for HellaSwag cleaning, capitalize and RACE, Python-computed) contexts/continuations,
// metrics and lm-eval's standard errors on synthetic loglikelihoods, tokenization rules,
// loglikelihoods equal to sums of kda_model_forward NLLs (both engines, truncation), every
// engine within 1e-5 of the float64 log-softmax on a peaked 128k-vocabulary model,
// OLMo request files, perplexity, bad input, and the command end to end on a tiny model.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "core/json.h"
#include "core/rng.h"
#include "core/util.h"
#include "eval/eval.h"
#include "eval/tasks.h"
#include "io/model_io.h"
#include "model/model.h"
#include "test.h"
#include "tiny_model.h" // defines: tiny_runtime, tiny_forward_ll

#define TOKENIZER "assets/tokenizers/llama3/tokenizer.json"

static int build_(const char *task, const char *json, const char *subject, EvalDoc *d,
                  KdaError *err) {
    JsonDoc doc;
    KDA_ASSERT(json_parse(&doc, json, strlen(json), err) == 0);
    int r = eval_build_doc(task, &doc.root, subject, d, err);
    json_free(&doc);
    return r;
}

static int req_is_(const EvalDoc *d, int i, const char *ctx, const char *cont) {
    int ok = !strcmp(d->req[i].context, ctx) && !strcmp(d->req[i].continuation, cont);
    if (!ok)
        printf("    got context %s | continuation %s\n", d->req[i].context, d->req[i].continuation);
    return ok;
}

KDA_TEST(eval_requests_arc_obqa_piqa) {
    EvalDoc d;
    KdaError err;
    CHECK(build_("arc_easy",
                 "{\"id\": \"x\", \"question\": \"What is 2+2?\", \"choices\": {\"text\": "
                 "[\"three\", \"four\"], \"label\": [\"1\", \"2\"]}, \"answerKey\": \"2\"}",
                 NULL, &d, &err) == 0);
    CHECK(d.n_choices == 2 && d.gold == 1);
    CHECK(req_is_(&d, 0, "Question: What is 2+2?\nAnswer:", " three"));
    CHECK(req_is_(&d, 1, "Question: What is 2+2?\nAnswer:", " four"));
    CHECK(d.norm_len[0] == 5 && d.norm_len[1] == 4);
    eval_doc_free(&d);
    CHECK(build_("openbookqa",
                 "{\"question_stem\": \"The sun is\", \"choices\": {\"text\": [\"a star\", "
                 "\"a planet\"], \"label\": [\"A\", \"B\"]}, \"answerKey\": \" A\"}",
                 NULL, &d, &err) == 0);
    CHECK(d.gold == 0 && req_is_(&d, 1, "The sun is", " a planet"));
    eval_doc_free(&d);
    CHECK(build_("piqa",
                 "{\"goal\": \"Open a jar\", \"sol1\": \"twist the lid\", \"sol2\": \"eat it\", "
                 "\"label\": 0}",
                 NULL, &d, &err) == 0);
    CHECK(d.gold == 0 && req_is_(&d, 0, "Question: Open a jar\nAnswer:", " twist the lid"));
    CHECK(req_is_(&d, 1, "Question: Open a jar\nAnswer:", " eat it"));
    eval_doc_free(&d);
}

// Expected strings computed with the Python definitions (lm-eval hellaswag utils.preprocess,
// str.capitalize) in a throwaway script; see docs/eval.md.
KDA_TEST(eval_requests_hellaswag_cleaning) {
    char *s = eval_hellaswag_preprocess(
        "  How to clean a car [title] Get a bucket.  [step] Fill it   with [water\nand] soap [x] ");
    CHECK(!strcmp(s, "How to clean a car. Get a bucket.  Fill it  with [water\nand] soap "));
    free(s);
    s = eval_hellaswag_preprocess("A [b] c [unclosed");
    CHECK(!strcmp(s, "A c [unclosed"));
    free(s);
    s = eval_hellaswag_preprocess("x\xC2\xA0 "); // U+00A0 is Python whitespace
    CHECK(!strcmp(s, "x"));
    free(s);
    s = eval_py_capitalize("hELLO wORLD");
    CHECK(!strcmp(s, "Hello world"));
    free(s);
    s = eval_py_capitalize("\xC3\xA9lan \xC3\x89"
                           "COLE \xCE\xA9\xCE\xBC"); // élan ÉCOLE Ωμ
    CHECK(!strcmp(s, "\xC3\x89lan \xC3\xA9"
                     "cole \xCF\x89\xCE\xBC"));
    free(s);
    EvalDoc d;
    KdaError err;
    CHECK(build_("hellaswag",
                 "{\"activity_label\": \"Home and Garden\", \"ctx_a\": \"A man is "
                 "[header] kneeling on a rug.\", \"ctx_b\": \"HE picks UP a Brush [step]\", "
                 "\"endings\": "
                 "[\" he brushes the rug. [title] Done \", \"he  leaves.\"], \"label\": \"1\"}",
                 NULL, &d, &err) == 0);
    CHECK(d.gold == 1 && d.n_choices == 2);
    CHECK(req_is_(&d, 0, "Home and Garden: A man is kneeling on a rug. He picks up a brush ",
                  " he brushes the rug.. Done"));
    CHECK(req_is_(&d, 1, "Home and Garden: A man is kneeling on a rug. He picks up a brush ",
                  " he leaves."));
    CHECK(d.norm_len[1] == 10);
    eval_doc_free(&d);
}

KDA_TEST(eval_requests_winogrande_partial) {
    EvalDoc d;
    KdaError err;
    CHECK(build_("winogrande",
                 "{\"sentence\": \"Sarah was a much better surgeon than Maria so _ "
                 "always got the easier cases.\", \"option1\": \"Sarah\", \"option2\": \"Maria\", "
                 "\"answer\": \"2\"}",
                 NULL, &d, &err) == 0);
    CHECK(d.gold == 1);
    CHECK(req_is_(&d, 0, "Sarah was a much better surgeon than Maria so Sarah",
                  " always got the easier cases."));
    CHECK(req_is_(&d, 1, "Sarah was a much better surgeon than Maria so Maria",
                  " always got the easier cases."));
    eval_doc_free(&d);
}

KDA_TEST(eval_requests_mmlu_prompt) {
    EvalDoc d;
    KdaError err;
    CHECK(build_("mmlu",
                 "{\"question\": \"  Find the order of 2 in Z_4.\\n\", \"subject\": "
                 "\"abstract_algebra\", \"choices\": [\"1\", \"2\", \"4\", \"0\"], \"answer\": 1}",
                 NULL, &d, &err) == 0);
    const char *ctx = "The following are multiple choice questions (with answers) about abstract "
                      "algebra.\n\nFind the order of 2 in Z_4.\nA. 1\nB. 2\nC. 4\nD. 0\nAnswer:";
    CHECK(d.gold == 1 && d.n_choices == 4);
    CHECK(req_is_(&d, 0, ctx, " A") && req_is_(&d, 3, ctx, " D"));
    eval_doc_free(&d);
    CHECK(build_("mmlu", "{\"question\": \"q\", \"choices\": [\"1\", \"2\", \"3\"], \"answer\": 0}",
                 "anatomy", &d, &err) == -1);
    CHECK(strstr(err.msg, "expected 4") != NULL);
}

KDA_TEST(eval_requests_race) {
    EvalTask t;
    KdaError err;
    CHECK_MSG(eval_task_load_jsonl(&t, "race", test_data("eval/race.jsonl"), 0, &err) == 0, "%s",
              err.msg);
    size_t n;
    char *exp = read_file(test_data("eval/race.expected.jsonl"), &n, &err);
    CHECK(exp != NULL && t.n_docs == 2);
    char *line = exp;
    for (int64_t i = 0; exp && i < t.n_docs; i++) {
        char *nl = strchr(line, '\n');
        JsonDoc d;
        CHECK(json_parse(&d, line, (size_t)(nl - line), &err) == 0);
        const JsonValue *ch = json_get(&d.root, "choices");
        int64_t gold;
        json_get_int(&d.root, "gold", &gold);
        CHECK(t.docs[i].gold == gold && t.docs[i].n_choices == 4);
        for (int k = 0; k < 4; k++) {
            char cont[256];
            snprintf(cont, sizeof cont, " %s", ch->items[k].str);
            CHECK(req_is_(&t.docs[i], k, json_get_str(&d.root, "context"), cont));
        }
        json_free(&d);
        line = nl + 1;
    }
    free(exp);
    eval_task_free(&t);
}

KDA_TEST(eval_metrics_synthetic) {
    double ll[3] = {-10.0, -8.0, -9.0};
    int64_t len[3] = {10, 2, 30};
    int a, an;
    eval_doc_correct(ll, len, 3, 1, &a, &an);
    CHECK(a == 1 && an == 0); // acc: -8 is best; acc_norm: -1, -4, -0.3 -> choice 2
    eval_doc_correct(ll, len, 3, 2, &a, &an);
    CHECK(a == 0 && an == 1);
    double tie[2] = {-1.0, -1.0};
    int64_t one[2] = {1, 1};
    eval_doc_correct(tie, one, 2, 0, &a, &an); // numpy argmax: first maximum
    CHECK(a == 1 && an == 1);
    double x[4] = {1, 0, 1, 1};
    // sample stddev / sqrt(n) = sqrt(p(1-p)/(n-1)) = sqrt(0.1875/3) = 0.25 exactly
    CHECK_NEAR(eval_mean_stderr(x, 4), 0.25, 1e-15);
    CHECK(isnan(eval_mean_stderr(x, 1)));
    double se[2] = {0.25, 0.25};
    int64_t sz[2] = {4, 4};
    // pooled: sqrt(sum((n-1) se^2 n) / (N - k) / N) = sqrt(1.5 / 6 / 8)
    CHECK_NEAR(eval_pooled_stderr(se, sz, 2), sqrt(1.5 / 6.0 / 8.0), 1e-15);
}

// ---- model-based tests ------------------------------------------------------------------------

static KdaTokenizer *g_tok;
static KdaTokenizer *tok_(void) {
    KdaError err;
    if (!g_tok) KDA_ASSERT(tok_load(&g_tok, TOKENIZER, &err) == 0);
    return g_tok;
}

// A tiny random model over the Llama-3 vocabulary (embedding 128256 x 16).
static void tiny_(KdaModel *m) {
    KdaConfig c;
    kda_config_defaults(&c);
    c.hidden_size = 16, c.num_hidden_layers = 2, c.num_heads = 2, c.head_dim = 8;
    c.expand_v = 1.0, c.intermediate_size_raw = 32, c.vocab_size = 128256,
    c.tie_word_embeddings = 1;
    KdaError err;
    KDA_ASSERT(kda_config_derive(&c, "tiny", &err) == 0);
    KDA_ASSERT(kda_model_init(m, &c, &err) == 0);
    kda_params_init(&m->table, &m->cfg, m->params, 11);
}

KDA_TEST(eval_tokenization_rules) {
    KdaTokenizer *tok = tok_();
    KdaError err;
    EvalRequest rq = {"Question: Why?\nAnswer: ", " because"};
    EvalTokens t;
    CHECK(eval_encode_request(tok, &rq, 1, 0, &t, &err) == 0);
    TokIds ctx = {0}, whole = {0};
    tok_encode(tok, "Question: Why?\nAnswer:", 22, 0, &ctx, &err);
    tok_encode(tok, "Question: Why?\nAnswer:  because", 31, 0, &whole, &err);
    CHECK(t.ids[0] == 128000 && t.n_ctx == (int64_t)ctx.n + 1); // BOS + enc(rstripped)
    CHECK(t.n_ctx - 1 + t.n_cont == (int64_t)whole.n);          // whole-string split
    CHECK(!memcmp(t.ids + 1, ctx.ids, ctx.n * 4));
    CHECK(!memcmp(t.ids + t.n_ctx, whole.ids + ctx.n, (size_t)t.n_cont * 4));
    eval_tokens_free(&t);
    CHECK(eval_encode_request(tok, &rq, 0, 1, &t, &err) == 0); // OLMo: separate, no move
    TokIds c2 = {0}, k2 = {0};
    tok_encode(tok, rq.context, strlen(rq.context), 0, &c2, &err);
    tok_encode(tok, rq.continuation, strlen(rq.continuation), 0, &k2, &err);
    CHECK(t.n_ctx == (int64_t)c2.n && t.n_cont == (int64_t)k2.n);
    CHECK(!memcmp(t.ids + t.n_ctx, k2.ids, k2.n * 4));
    eval_tokens_free(&t);
    EvalRequest empty = {"abc", ""};
    CHECK(eval_encode_request(tok, &empty, 0, 0, &t, &err) == -1 && strstr(err.msg, "no tokens"));
    tok_ids_free(&ctx), tok_ids_free(&whole), tok_ids_free(&c2), tok_ids_free(&k2);
}

KDA_TEST(eval_loglik_equals_forward_nll) {
    KdaModel m;
    tiny_(&m);
    KdaRuntime *rt = tiny_runtime(&m, "cpu", NULL);
    KdaTokenizer *tok = tok_();
    KdaError err;
    EvalRequest rq[4] = {{"Question: Which is a fruit?\nAnswer:", " an apple"},
                         {"Question: Which is a fruit?\nAnswer:", " a rock"},
                         {"Question: Which is a fruit?\nAnswer:", " x"},
                         {"Other context", " with a longer continuation here"}};
    EvalTokens t[4];
    for (int i = 0; i < 4; i++)
        CHECK(eval_encode_request(tok, &rq[i], 1, 0, &t[i], &err) == 0);
    double ref[4], ll_shared[4], ll_full[4], ll_trunc[4];
    for (int i = 0; i < 4; i++)
        ref[i] = tiny_forward_ll(&m, t[i].ids, t[i].n_ctx + t[i].n_cont, t[i].n_cont);
    EvalSettings s = {.bos = 1, .max_length = 2048, .batch_tokens = 64, .share_prefix = 1};
    CHECK(eval_loglik(rt, t, 4, &s, ll_shared, NULL, NULL, &err) == 0);
    s.share_prefix = 0;
    CHECK(eval_loglik(rt, t, 4, &s, ll_full, NULL, NULL, &err) == 0);
    // fp32 model: prefill (chunked) + recurrent decode vs one chunked forward differ by the
    // model body's fp32 rounding and the float per-position NLLs (|ll| ~ 12 nats per token,
    // half an ulp ~5e-7 each); both log-softmaxes sum in double. 1e-5 absolute (seen ~1e-6).
    for (int i = 0; i < 4; i++) {
        CHECK_NEAR(ll_shared[i], ref[i], 1e-5);
        CHECK_NEAR(ll_full[i], ref[i], 1e-5); // batched + right-padded: same positions
        CHECK(ref[i] < 0);
    }
    // Left truncation to max_length + 1 = 6 tokens: the scored input is the last 6 tokens.
    s.max_length = 5, s.share_prefix = 1;
    CHECK(eval_loglik(rt, t, 4, &s, ll_trunc, NULL, NULL, &err) == 0);
    for (int i = 0; i < 4; i++) {
        int64_t n = t[i].n_ctx + t[i].n_cont, L = n < 6 ? n : 6,
                nc = t[i].n_cont < L - 1 ? t[i].n_cont : L - 1;
        // the same fp32 rounding as the untruncated check above (a shorter input): 1e-5
        CHECK_NEAR(ll_trunc[i], tiny_forward_ll(&m, t[i].ids + (n - L), L, nc), 1e-5);
    }
    for (int i = 0; i < 4; i++)
        eval_tokens_free(&t[i]);
    kda_runtime_close(rt);
    kda_model_free(&m);
}

// ll of tokens ids[n - n_cont .. n) from one B = 1 forward's fp32 logits, log-softmax in double
// with libm exp: the float64 log-softmax of exactly the logits the model computed.
static double logits_ll_(KdaModel *m, const int32_t *ids, int64_t n, int64_t n_cont) {
    const int64_t V = m->cfg.vocab_size;
    float *lg = kda_malloc((size_t)(n * V) * sizeof *lg);
    KdaError err;
    KDA_ASSERT(kda_model_forward(m, ids, NULL, 1, n, NULL, lg, NULL, &err) == 0);
    double ll = 0.0;
    for (int64_t p = n - n_cont; p < n; p++) {
        const float *row = lg + (p - 1) * V;
        double mx = row[0], s = 0.0;
        for (int64_t v = 1; v < V; v++)
            mx = row[v] > mx ? row[v] : mx;
        for (int64_t v = 0; v < V; v++)
            s += exp((double)row[v] - mx);
        ll += (double)row[ids[p]] - mx - log(s);
    }
    free(lg);
    return ll;
}

// Every engine on a model whose next-token distributions are peaked over the 128,256-token
// vocabulary (the tied embedding scaled to std 1: logits ~ N(0, 16), the top few within a nat or
// two, ~1e5 tokens 10-30 nats below), as a trained model's are: shared-prefix (prefill + decode,
// log-softmax in double), batched at three budgets (1, 2-3 and all requests per forward; the
// vocabulary chunking of xent_fwd changes with the batch), and the float64 log-softmax of the
// per-request forward's own logits. Before xent_fwd summed in double the batched engine was
// 1e-4..1e-3 low here and depended on the budget. Tolerance 1e-5 absolute per request:
// what is left is fp32 rounding of the model body (chunked core on padded rows, recurrent
// decode vs chunked prefill; seen <= 3e-6 here), exp_nonpos_ (<= 2.5e-7 relative per term)
// and the float per-position NLLs (half an ulp, <= 1e-6 at 8..16 nats, unbiased).
KDA_TEST(eval_engines_agree_on_peaked_model) {
    KdaModel m;
    tiny_(&m);
    for (int64_t i = 0; i < m.cfg.vocab_size * m.cfg.hidden_size; i++)
        m.w.embed[i] *= 50.0f; // std 0.02 -> 1
    KdaRuntime *rt = tiny_runtime(&m, "cpu", NULL);
    KdaRng rng;
    rng_seed(&rng, 31);
    enum { N = 12 };
    EvalTokens r[N];
    int32_t ctx[40], cont[8];
    int64_t nx = 0;
    for (int i = 0; i < N; i++) { // 4 documents of 3 choices; contexts 6..39, continuations 1..8
        if (i % 3 == 0) {
            nx = 6 + (i * 11) % 34;
            for (int j = 0; j < 40; j++)
                ctx[j] = (int32_t)rng_below(&rng, (uint64_t)m.cfg.vocab_size);
        }
        int64_t nc = 1 + (int64_t)rng_below(&rng, 8);
        for (int j = 0; j < nc; j++)
            cont[j] = (int32_t)rng_below(&rng, (uint64_t)m.cfg.vocab_size);
        r[i] = (EvalTokens){kda_malloc((size_t)(nx + nc) * 4), nx, nc};
        memcpy(r[i].ids, ctx, (size_t)nx * 4), memcpy(r[i].ids + nx, cont, (size_t)nc * 4);
    }
    double ref[N], ll[4][N];
    for (int i = 0; i < N; i++)
        ref[i] = logits_ll_(&m, r[i].ids, r[i].n_ctx + r[i].n_cont, r[i].n_cont);
    EvalSettings s = {.bos = 0, .max_length = 2048, .batch_tokens = 8192, .share_prefix = 1};
    KdaError err;
    CHECK_MSG(eval_loglik(rt, r, N, &s, ll[0], NULL, NULL, &err) == 0, "%s", err.msg);
    s.share_prefix = 0;
    const int64_t budgets[3] = {1, 100, 8192};
    for (int k = 0; k < 3; k++) {
        s.batch_tokens = budgets[k];
        CHECK_MSG(eval_loglik(rt, r, N, &s, ll[k + 1], NULL, NULL, &err) == 0, "%s", err.msg);
    }
    double worst = 0.0;
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < N; i++) {
            CHECK_MSG(fabs(ll[k][i] - ref[i]) <= 1e-5, "engine %d, request %d: %.9g vs %.9g", k, i,
                      ll[k][i], ref[i]);
            worst = fmax(worst, fabs(ll[k][i] - ref[i]));
        }
    printf("    engines vs float64 log-softmax, peaked 128k vocabulary: worst |dll| = %.3g\n",
           worst);
    for (int i = 0; i < N; i++)
        eval_tokens_free(&r[i]);
    kda_runtime_close(rt);
    kda_model_free(&m);
}

KDA_TEST(eval_olmo_requests) {
    EvalTask t;
    KdaError err;
    CHECK_MSG(eval_task_load(&t, "olmo:arc_challenge/rc_0shot", test_data("eval"), 0, &err) == 0,
              "%s", err.msg);
    CHECK(t.olmo && t.n_docs == 3 && !strcmp(t.primary, "acc_per_char")); // uncond. lines skipped
    CHECK(t.docs[0].n_choices == 4 && t.docs[0].gold == 3);
    CHECK(!strcmp(t.docs[0].req[0].continuation, " Put the objects in groups."));
    CHECK(t.docs[0].norm_len[0] == 26);
    eval_task_free(&t);
    CHECK(eval_task_load(&t, "olmo:winogrande/rc_0shot", test_data("eval"), 1, &err) == 0);
    CHECK(t.n_docs == 1 && t.docs[0].gold == 1);
    CHECK(req_is_(&t.docs[0], 1, "Sarah was a much better surgeon than Maria so Maria",
                  " always got the easier cases."));
    eval_task_free(&t);
    CHECK(eval_task_load(&t, "olmo:piqa/rc_0shot", test_data("eval"), 0, &err) == -1);
    CHECK(strstr(err.msg, "olmo:piqa/rc_0shot") && strstr(err.msg, "requests.jsonl.gz"));
}

// Found by fuzz/fuzz_eval_tasks: a malformed line of an OLMo requests file gave
// "<dir>/requests.jsonl.gz:2: malformed JSON" without the task name (the path of an OLMo task
// does not contain it). Every loader message now starts with the task name.
KDA_TEST(eval_olmo_malformed_line_names_task) {
    EvalTask t;
    KdaError err;
    CHECK(eval_task_load_olmo(&t, "olmo:arc_easy/rc_0shot", test_data("eval/fuzz_olmo_malformed"),
                              0, &err) == -1);
    CHECK_MSG(!strncmp(err.msg, "olmo:arc_easy/rc_0shot: ", 24) &&
                  strstr(err.msg, "requests.jsonl.gz:2: malformed JSON") && !strchr(err.msg, '\n'),
              "%s", err.msg);
}

// Found by review of fuzz/fuzz_eval_tasks's one-line contract: an answerKey (or a RACE answer,
// or an OLMo request_type) holding a newline was quoted raw into the message.
KDA_TEST(eval_errors_stay_on_one_line) {
    EvalTask t;
    KdaError err;
    CHECK(eval_task_load_jsonl(&t, "arc_easy", test_data("eval/fuzz_answerkey_newline.jsonl"), 0,
                               &err) == -1);
    CHECK_MSG(!strchr(err.msg, '\n') && strstr(err.msg, "fuzz_answerkey_newline.jsonl:1") &&
                  strstr(err.msg, "answerKey 'B\\nC'"),
              "%s", err.msg);
}

static void write_(const char *dir, const char *name, const char *text) {
    char p[1024];
    KdaError err;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    KDA_ASSERT(write_file_atomic(p, text, strlen(text), &err) == 0);
}

KDA_TEST(eval_bad_input_names_task_and_record) {
    const char *dir = test_tmpdir();
    EvalTask t;
    KdaError err;
    CHECK(eval_task_load(&t, "piqa", dir, 0, &err) == -1);
    CHECK(strstr(err.msg, "piqa") && strstr(err.msg, "no data"));
    CHECK(eval_task_load(&t, "squad", dir, 0, &err) == -1 && strstr(err.msg, "unknown task"));
    write_(dir, "arc_easy.jsonl",
           "{\"question\": \"q\", \"choices\": {\"text\": [\"a\"], \"label\": [\"A\"]}, "
           "\"answerKey\": \"A\"}\n{\"question\": \n");
    CHECK(eval_task_load(&t, "arc_easy", dir, 0, &err) == -1);
    CHECK(strstr(err.msg, "arc_easy") && strstr(err.msg, "arc_easy.jsonl:2") &&
          strstr(err.msg, "malformed JSON"));
    write_(dir, "arc_challenge.jsonl",
           "\n{\"question\": \"q\", \"choices\": {\"text\": [\"a\", \"b\"], "
           "\"label\": [\"A\"]}, \"answerKey\": \"A\"}\n");
    CHECK(eval_task_load(&t, "arc_challenge", dir, 0, &err) == -1);
    CHECK(strstr(err.msg, "arc_challenge.jsonl:2") && strstr(err.msg, "choices.text has 2"));
    write_(dir, "mmlu.jsonl",
           "{\"question\": \"q\", \"subject\": \"anatomy\", \"choices\": [\"1\", \"2\", \"3\"], "
           "\"answer\": 0}\n");
    CHECK(eval_task_load(&t, "mmlu", dir, 0, &err) == -1);
    CHECK(strstr(err.msg, "mmlu: ") && strstr(err.msg, "mmlu.jsonl:1") &&
          strstr(err.msg, "3 entries, expected 4"));
    write_(dir, "winogrande.jsonl",
           "{\"sentence\": \"no blank\", \"option1\": \"a\", \"option2\": \"b\", \"answer\": "
           "\"1\"}\n");
    CHECK(eval_task_load(&t, "winogrande", dir, 0, &err) == -1 &&
          strstr(err.msg, "winogrande.jsonl:1"));
    write_(dir, "hellaswag.jsonl",
           "{\"activity_label\": \"a\", \"ctx_a\": \"b\", \"ctx_b\": \"c\", "
           "\"endings\": [\"x\", \"y\"], \"label\": \"2\"}\n");
    CHECK(eval_task_load(&t, "hellaswag", dir, 0, &err) == -1 &&
          strstr(err.msg, "'label' is 2, expected 0..1"));
}

KDA_TEST(eval_perplexity_windows) {
    KdaModel m;
    tiny_(&m);
    KdaRuntime *rt = tiny_runtime(&m, "cpu", NULL);
    IndexedDataset ds;
    KdaError err;
    CHECK_MSG(indexed_open(&ds, test_data("indexed/std_i32"), &err) == 0, "%s", err.msg);
    int64_t n_all = ds.idx.n_tokens, S = 3;
    int64_t *all = kda_malloc((size_t)n_all * sizeof *all), k = 0;
    for (int64_t q = 0; q < ds.idx.n_seq; q++)
        k += indexed_read_tokens(&ds, q, 0, all + k, indexed_index_length(&ds.idx, q));
    double sum, ref = 0.0;
    int64_t n;
    CHECK(eval_perplexity(rt, &ds, S, 0, &sum, &n, NULL, NULL, &err) == 0);
    CHECK_EQ_INT(n, n_all - 1);                   // every token but the first is predicted once
    for (int64_t w = 0; w * S < n_all - 1; w++) { // windows [wS, wS+S] overlapping by one token
        int32_t ids[4];
        int64_t L = n_all - w * S < S + 1 ? n_all - w * S : S + 1;
        for (int64_t i = 0; i < L; i++)
            ids[i] = (int32_t)all[w * S + i];
        ref -= tiny_forward_ll(&m, ids, L, L - 1);
    }
    // The same forwards (windows of S + 1 = 4 tokens), summed in another order: the float NLLs
    // rounded to double sums of ~n_all terms of ~5 nats, a few double ulps, plus the fp32
    // rounding of each window's NLLs (~1e-6 each): 1e-5 relative.
    CHECK_NEAR(sum, ref, 1e-5 * fmax(1.0, fabs(ref)));
    free(all);
    indexed_close(&ds);
    kda_runtime_close(rt);
    kda_model_free(&m);
}

// --dump-requests names each mmlu request's subject (its lm-eval task, mmlu_<subject>).
KDA_TEST(eval_dump_labels_mmlu_subjects) {
    KdaModel m;
    tiny_(&m);
    char dir[512], model[1024], dump[1024];
    snprintf(dir, sizeof dir, "%s", test_tmpdir());
    snprintf(model, sizeof model, "%s/model", dir);
    KdaError err;
    CHECK(kda_model_save_dir(model, &m.cfg, &m.table, m.params, KDA_DTYPE_F32, &err) == 0);
    write_(dir, "mmlu.jsonl",
           "{\"question\": \"q\", \"subject\": \"anatomy\", \"choices\": [\"1\", \"2\", \"3\", "
           "\"4\"], \"answer\": 0}\n{\"question\": \"r\", \"subject\": \"virology\", \"choices\": "
           "[\"a\", \"b\", \"c\", \"d\"], \"answer\": 1}\n");
    snprintf(dump, sizeof dump, "%s/requests.jsonl", dir);
    char *argv[] = {"--model",     model,     "--tasks",         "mmlu", "--data",   dir,
                    "--tokenizer", TOKENIZER, "--dump-requests", dump,   "--device", "cpu"};
    CHECK_EQ_INT(cmd_eval(12, argv), 0);
    size_t n;
    char *d = read_file(dump, &n, &err);
    CHECK_MSG(d && strstr(d, "{\"task\": \"mmlu\", \"subtask\": \"mmlu_anatomy\", \"doc\": 0") &&
                  strstr(d, "\"subtask\": \"mmlu_virology\", \"doc\": 1"),
              "%s", d ? d : err.msg);
    free(d);
    kda_model_free(&m);
}

KDA_TEST(eval_command_end_to_end) {
    KdaModel m;
    tiny_(&m);
    char dir[512], model[1024], out[1024], out2[1024], dump[1024];
    snprintf(dir, sizeof dir, "%s", test_tmpdir());
    snprintf(model, sizeof model, "%s/model", dir);
    KdaError err;
    CHECK(kda_model_save_dir(model, &m.cfg, &m.table, m.params, KDA_DTYPE_F32, &err) == 0);
    write_(dir, "piqa.jsonl",
           "{\"goal\": \"Open a jar\", \"sol1\": \"twist the lid\", \"sol2\": \"eat it\", "
           "\"label\": 0}\n"
           "{\"goal\": \"Dry hair\", \"sol1\": \"use a towel\", \"sol2\": \"use a rock\", "
           "\"label\": 0}\n");
    size_t n;
    char *race = read_file(test_data("eval/race.jsonl"), &n, &err);
    KDA_ASSERT(race != NULL);
    write_(dir, "race.jsonl", race);
    free(race);
    snprintf(out, sizeof out, "%s/results.json", dir);
    snprintf(dump, sizeof dump, "%s/requests.jsonl", dir);
    char *argv[] = {"--model",  model, "--tasks",     "piqa,race", "--data",          dir,
                    "--output", out,   "--tokenizer", TOKENIZER,   "--dump-requests", dump,
                    "--device", "cpu"};
    CHECK_EQ_INT(cmd_eval(14, argv), 0);
    EvalResults r;
    CHECK(eval_results_read(out, &r, NULL, 0, &err) == 0);
    CHECK_EQ_INT(r.n, 3); // piqa acc, acc_norm; race acc
    CHECK(!strcmp(r.m[0].task, "piqa") && !strcmp(r.m[1].metric, "acc_norm") && r.m[2].n == 2);
    for (int i = 0; i < r.n; i++)
        CHECK(r.m[i].value >= 0 && r.m[i].value <= 1);
    CHECK_NEAR(r.m[0].random, 50.0, 1e-9);
    char *d = read_file(dump, &n, &err);
    CHECK(d && strstr(d, "\"continuation\": \" use a rock\"") &&
          strstr(d, "\"ctx_ids\": [128000,"));
    free(d);
    snprintf(out2, sizeof out2, "%s/results2.json", dir);
    char *argv2[] = {"--model",
                     model,
                     "--tasks",
                     "piqa",
                     "--data",
                     dir,
                     "--output",
                     out2,
                     "--tokenizer",
                     TOKENIZER,
                     "--no-share-prefix",
                     "--batch-tokens",
                     "16",
                     "--device",
                     "cpu"};
    CHECK_EQ_INT(cmd_eval(15, argv2), 0);
    EvalResults r2;
    CHECK(eval_results_read(out2, &r2, NULL, 0, &err) == 0);
    CHECK(r2.n == 2 && r2.m[0].value == r.m[0].value); // engines agree on the decisions
    char *argv3[] = {"--compare", out, out2};
    CHECK_EQ_INT(cmd_eval(3, argv3), 0);
    eval_results_free(&r), eval_results_free(&r2);
    kda_model_free(&m);
}
