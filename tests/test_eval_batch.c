// test_eval_batch.c - the device-independent parts of evaluation and generation, on the CPU: the
// batch planner (sorting, budget, rows longer than the budget), padded batches (right padding,
// labels -100 off the continuation, left truncation), the batched engine on the CPU runtime (vs
// one unpadded forward per request), and the whole-sequence generation loop (kda_generate_refeed,
// the GPU's path before its decode step) vs prefill + decode.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "eval/eval.h"
#include "eval/generate.h"
#include "model/model.h"
#include "test.h"
#include "tiny_model.h" // defines: tiny_runtime, tiny_forward_ll

// A tiny random model; vocab 64 unless a fixture needs more (the batched path does not depend
// on the vocabulary size).
static void tiny_vocab_(KdaModel *m, int64_t vocab) {
    KdaConfig c;
    kda_config_defaults(&c);
    c.hidden_size = 32, c.num_hidden_layers = 2, c.num_heads = 2, c.head_dim = 8;
    c.expand_v = 1.0, c.intermediate_size_raw = 48, c.vocab_size = vocab, c.conv_size = 4;
    c.tie_word_embeddings = 1, c.initializer_range = 0.2;
    KdaError err;
    KDA_ASSERT(kda_config_derive(&c, "tiny", &err) == 0);
    KDA_ASSERT(kda_model_init(m, &c, &err) == 0);
    kda_params_init(&m->table, &m->cfg, m->params, 5);
}
static void tiny_(KdaModel *m) {
    tiny_vocab_(m, 64);
}

static EvalTokens toks_(const int32_t *ctx, int64_t n_ctx, const int32_t *cont, int64_t n_cont) {
    EvalTokens t = {kda_malloc((size_t)(n_ctx + n_cont) * sizeof(int32_t)), n_ctx, n_cont};
    memcpy(t.ids, ctx, (size_t)n_ctx * 4), memcpy(t.ids + n_ctx, cont, (size_t)n_cont * 4);
    return t;
}

KDA_TEST(eval_batch_plan_sort_budget) {
    int64_t len[] = {3, 10, 5, 10, 1, 7}, order[6];
    EvalBatch *b;
    int64_t nb = eval_plan_batches(len, 6, 20, order, &b);
    int64_t want_order[] = {1, 3, 5, 2, 0, 4}; // longest first, ties by index
    for (int i = 0; i < 6; i++)
        CHECK_EQ_INT(order[i], want_order[i]);
    CHECK_EQ_INT(nb, 3);
    EvalBatch want[] = {{0, 2, 10}, {2, 2, 7}, {4, 2, 3}}; // 2x10, 2x7 (3x7 = 21 > 20), 2x3
    for (int i = 0; i < 3 && i < nb; i++)
        CHECK(b[i].first == want[i].first && b[i].B == want[i].B && b[i].T == want[i].T);
    free(b);
    // A row longer than the budget runs alone; every row appears once, batches are contiguous
    // and within the budget otherwise.
    int64_t len2[] = {30, 4, 4, 4, 4, 4, 25, 2}, order2[8];
    nb = eval_plan_batches(len2, 8, 12, order2, &b);
    int seen[8] = {0};
    int64_t next = 0;
    for (int64_t k = 0; k < nb; k++) {
        CHECK_EQ_INT(b[k].first, next);
        CHECK(b[k].B == 1 || b[k].B * b[k].T <= 12);
        CHECK_EQ_INT(b[k].T, len2[order2[b[k].first]]);
        for (int64_t i = 0; i < b[k].B; i++) {
            CHECK(len2[order2[b[k].first + i]] <= b[k].T); // padding only, never truncation
            seen[order2[b[k].first + i]]++;
        }
        next += b[k].B;
    }
    CHECK_EQ_INT(next, 8);
    for (int i = 0; i < 8; i++)
        CHECK_EQ_INT(seen[i], 1);
    CHECK(b[0].B == 1 && b[0].T == 30 && b[1].B == 1 && b[1].T == 25);
    CHECK(b[2].B == 3 && b[2].T == 4); // 3 x 4 = 12 fits, 4 x 4 does not
    free(b);
    CHECK_EQ_INT(eval_plan_batches(len, 0, 20, order, &b), 0);
    CHECK(b == NULL);
}

KDA_TEST(eval_batch_fill_padding_labels_truncation) {
    int32_t c0[] = {5, 6, 7}, k0[] = {8, 9}, c1[] = {1}, k1[] = {2};
    EvalTokens r[2] = {toks_(c0, 3, k0, 2), toks_(c1, 1, k1, 1)};
    int64_t rows[] = {0, 1};
    int32_t ids[10], lab[10];
    eval_fill_batch(r, rows, 2, 5, 100, ids, lab);
    int32_t want_ids[] = {5, 6, 7, 8, 9, 1, 2, 0, 0, 0};
    int32_t want_lab[] = {-100, -100, -100, 8, 9, -100, 2, -100, -100, -100};
    for (int i = 0; i < 10; i++)
        CHECK_MSG(ids[i] == want_ids[i] && lab[i] == want_lab[i], "position %d: %d/%d", i, ids[i],
                  lab[i]);
    // max_length 3: the last 4 tokens; max_length 1: the last 2, one continuation token scored.
    CHECK_EQ_INT(eval_input_len(&r[0], 3), 4);
    eval_fill_batch(r, rows, 1, 4, 3, ids, lab);
    CHECK(ids[0] == 6 && ids[3] == 9 && lab[0] == -100 && lab[1] == -100 && lab[2] == 8);
    eval_fill_batch(r, rows, 1, 2, 1, ids, lab);
    CHECK(ids[0] == 8 && ids[1] == 9 && lab[0] == -100 && lab[1] == 9);
    eval_tokens_free(&r[0]), eval_tokens_free(&r[1]);
}

KDA_TEST(eval_batch_cpu_batched_matches_unbatched) {
    KdaModel m;
    tiny_(&m);
    KdaRuntime *rt = tiny_runtime(&m, "cpu", NULL);
    KdaRng rng;
    rng_seed(&rng, 77);
    enum { N = 11 };
    EvalTokens r[N];
    int32_t ctx[80], cont[12];
    int64_t nx = 0;
    for (int i = 0; i < N; i++) { // documents of 3 choices sharing a context, 2..92 tokens
        if (i % 3 == 0) {
            nx = 1 + (i * 29) % 80;
            for (int j = 0; j < 80; j++)
                ctx[j] = (int32_t)(rng_below(&rng, 64));
        }
        int64_t nc = 1 + (int64_t)rng_below(&rng, 12);
        for (int j = 0; j < nc; j++)
            cont[j] = (int32_t)(rng_below(&rng, 64));
        r[i] = toks_(ctx, nx, cont, nc);
    }
    double ref[N], ll[N], ll_trunc[N];
    for (int i = 0; i < N; i++)
        ref[i] = tiny_forward_ll(&m, r[i].ids, r[i].n_ctx + r[i].n_cont, r[i].n_cont);
    // share_prefix 0: every request through padded [B, T] batches of at most 200 tokens
    EvalSettings s = {.bos = 0, .max_length = 2048, .batch_tokens = 200, .share_prefix = 0};
    KdaError err;
    CHECK_MSG(eval_loglik(rt, r, N, &s, ll, NULL, NULL, &err) == 0, "%s", err.msg);
    // The same fp32 CPU forward on a right-padded [B, T] batch vs [1, n]: causal, so the scored
    // positions see the same inputs; only the summation order inside the chunked core's padded
    // matrices can differ: fp32 rounding, 1e-5 relative to |ll| (seen: ~2e-7).
    double worst = 0.0;
    for (int i = 0; i < N; i++) {
        CHECK_NEAR(ll[i], ref[i], 1e-5 * fmax(1.0, fabs(ref[i])));
        worst = fmax(worst, fabs(ll[i] - ref[i]) / fmax(1.0, fabs(ref[i])));
    }
    printf("    padded batches vs unbatched: worst rel |dll| = %.3g over %d requests\n", worst, N);
    // Left truncation: max_length 20 scores the last 21 tokens of each row.
    s.max_length = 20;
    CHECK(eval_loglik(rt, r, N, &s, ll_trunc, NULL, NULL, &err) == 0);
    for (int i = 0; i < N; i++) {
        int64_t n = r[i].n_ctx + r[i].n_cont, L = n < 21 ? n : 21;
        int64_t nc = r[i].n_cont < L - 1 ? r[i].n_cont : L - 1;
        double want = tiny_forward_ll(&m, r[i].ids + (n - L), L, nc);
        CHECK_NEAR(ll_trunc[i], want, 1e-5 * fmax(1.0, fabs(want)));
    }
    for (int i = 0; i < N; i++)
        eval_tokens_free(&r[i]);
    kda_runtime_close(rt);
    kda_model_free(&m);
}

KDA_TEST(eval_generate_refeed_matches_decode) {
    KdaModel m;
    tiny_(&m);
    KdaRuntime *rt = tiny_runtime(&m, "cpu", NULL);
    int32_t prompt[9] = {3, 14, 15, 9, 26, 53, 58, 9, 7}, a[24], b[24];
    KdaGenOpts o = {{0.0, 0, 1.0}, 24, 1, NULL, 0, 0};
    KdaGenStats sa, sb;
    KdaError err;
    CHECK(kda_generate(rt, prompt, 9, &o, a, NULL, NULL, &sa, &err) == 0);
    CHECK(kda_generate_refeed(rt, prompt, 9, &o, b, NULL, NULL, &sb, &err) == 0);
    CHECK(sa.n_new == 24 && sb.n_new == 24 && sb.n_steps == sa.n_steps);
    for (int i = 0; i < 24; i++) // greedy; fp32 decode vs re-forward differ by ~1e-6 in logits
        CHECK_MSG(a[i] == b[i], "token %d: decode %d, refeed %d", i, a[i], b[i]);
    // EOS stops after being emitted; max_new_tokens 0 runs no forward.
    int32_t eos = b[5];
    KdaGenOpts oe = o;
    oe.eos_ids = &eos, oe.n_eos = 1;
    CHECK(kda_generate_refeed(rt, prompt, 9, &oe, b, NULL, NULL, &sb, &err) == 0);
    int first = 0;
    while (a[first] != eos)
        first++;
    CHECK(sb.stopped_eos && sb.n_new == first + 1);
    oe.max_new_tokens = 0;
    CHECK(kda_generate_refeed(rt, prompt, 9, &oe, b, NULL, NULL, &sb, &err) == 0);
    CHECK(sb.n_new == 0);
    kda_runtime_close(rt);
    kda_model_free(&m);
}
