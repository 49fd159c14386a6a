// test_gpu_eval.c - GPU evaluation and generation through the model runtime (make test-gpu;
// needs a device): kda eval's padded GPU batches and its shared-prefix engine on the GPU (prefill
// of the context once, each continuation decoded from a copy of the device state) vs the fp32 CPU
// scores, GPU batched vs GPU one-request-per-forward, the logits of a GPU position vs the CPU
// forward's, and greedy generation on the GPU (recurrent decode and re-feed) vs the CPU.
//
// Tolerances. The GPU runs bf16 GEMM operands (~2-4e-3 relative error per GEMM output); the test
// model uses initializer_range 0.1 (5x the real 0.02), which sharpens the logits and amplifies
// that noise through its 2 layers. Measured on an H200 (run of 2026-11-30): per-request
// loglikelihood worst rel 4.32e-3 (request 23: gpu -20.037716, cpu -20.124631), last-position
// logits rel RMS 1.35e-2. The tolerances sit 2-3x above those. So that they still catch a wrong
// term, each test also scores two deliberately broken CPU models (one conv tap dropped, the gate
// without dt_bias; measured on the CPU: loglik worst rel 0.23 / 0.14, mean 0.046 / 0.030; logits
// rel RMS 0.52 / 0.45) and checks that they are far outside the tolerance and that the GPU sits
// much nearer the correct model than either.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

#ifdef KDA_HAVE_CUDA

#include "core/rng.h"      // defines: KdaRng, rng_seed, rng_below
#include "eval/eval.h"     // defines: EvalTokens, EvalSettings, eval_loglik
#include "eval/generate.h" // defines: kda_generate, kda_generate_refeed
#include "model/model.h"   // defines: KdaModel
#include "model/runtime.h" // defines: KdaRuntime, kda_runtime_*
#include "kda_case.h"      // defines: kda_case_rel_rms
#include "tiny_model.h"    // defines: tiny_runtime

#define TOL_LL       1e-2 // per request, |gpu - cpu| / max(1, |cpu|); measured worst 4.32e-3
#define TOL_LL_MEAN  5e-3 // the same, averaged over the requests (<= the measured worst 4.32e-3)
#define TOL_LL_BATCH 1e-6 // GPU batched vs GPU one request per forward: measured exactly 0
// GPU shared prefix (prefill + decode steps) vs the CPU: the same bf16 error as the batched
// forward's (TOL_LL, measured 4.32e-3 worst for the forward); the decode's one-row GEMMs round
// some bf16 outputs the other way (3.9e-3 relative each), within the same budget. Not measured
// yet (first run: see the printed worst).
#define TOL_LOGITS 3e-2 // last-position logits rel RMS; measured 1.35e-2

// A small model in the GPU path's supported set (short conv, unbounded gate), vocab 512.
static void model_(KdaModel *m) {
    KdaConfig c;
    kda_config_defaults(&c);
    c.hidden_size = 64, c.num_hidden_layers = 2, c.num_heads = 2, c.head_dim = 32;
    c.expand_v = 1.0, c.intermediate_size_raw = 128, c.vocab_size = 512, c.conv_size = 4;
    c.tie_word_embeddings = 1, c.initializer_range = 0.1;
    KdaError err;
    KDA_ASSERT(kda_config_derive(&c, "gpu-eval", &err) == 0);
    KDA_ASSERT(kda_model_init(m, &c, &err) == 0);
    kda_params_init(&m->table, &m->cfg, m->params, 17);
}

// The model with one deliberate bug, the size of the ones a GPU port makes: variant 1 drops the
// oldest tap of layer 0's key short conv (a conv window shifted by one token), variant 2 zeroes
// layer 1's dt_bias (the forget gate without its bias).
static void model_broken_(KdaModel *m, int variant) {
    model_(m);
    const KdaConfig *c = &m->cfg;
    if (variant == 1)
        for (int64_t i = 0; i < c->key_dim; i++)
            m->w.layers[0].k_conv[i * c->conv_size] = 0.0f;
    else
        memset(m->w.layers[1].dt_bias, 0, (size_t)c->gate_dim * sizeof(float));
}

// max and mean over n of |a - b| / max(1, |b|)
static void rel_err_(const double *a, const double *b, int n, double *worst, double *mean) {
    *worst = 0.0, *mean = 0.0;
    for (int i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]) / fmax(1.0, fabs(b[i]));
        *worst = fmax(*worst, d), *mean += d / n;
    }
}

// The bf16 GPU runtime and the CPU runtime of m (*gpu NULL, and a failed check, without a GPU).
static int open_pair_(const KdaModel *m, KdaRuntime **gpu, KdaRuntime **cpu) {
    *gpu = tiny_runtime(m, "cuda", NULL);
    *cpu = tiny_runtime(m, "cpu", NULL);
    CHECK_MSG(*gpu != NULL, "the GPU runtime did not open");
    if (!*gpu) kda_runtime_close(*cpu);
    return *gpu ? 0 : -1;
}

KDA_TEST_GPU(gpu_eval_loglik_batched_vs_cpu) {
    KdaModel m;
    model_(&m);
    KdaRuntime *d, *cr;
    if (open_pair_(&m, &d, &cr)) {
        kda_model_free(&m);
        return;
    }
    CHECK(strstr(kda_runtime_name(d), "cuda:0") != NULL);
    enum { N = 40 };
    EvalTokens r[N];
    KdaRng rng;
    rng_seed(&rng, 3);
    for (int i = 0; i < N; i++) { // 4 choices per document, contexts 1..300 tokens
        int64_t nx = i % 4 == 0 ? 1 + (int64_t)rng_below(&rng, 300) : r[i - i % 4].n_ctx;
        int64_t nc = 1 + (int64_t)rng_below(&rng, 20);
        r[i].ids = kda_malloc((size_t)(nx + nc) * sizeof(int32_t)), r[i].n_ctx = nx;
        r[i].n_cont = nc;
        for (int64_t j = 0; j < nx + nc; j++)
            r[i].ids[j] = j < nx && i % 4 ? r[i - i % 4].ids[j] : (int32_t)rng_below(&rng, 512);
    }
    double cpu[N], gpu[N], gpu1[N], shared[N], bad[2][N];
    KdaError err;
    EvalSettings s = {.max_length = 2048, .batch_tokens = 2048, .share_prefix = 0};
    CHECK(eval_loglik(cr, r, N, &s, cpu, NULL, NULL, &err) == 0);
    for (int v = 0; v < 2; v++) {
        KdaModel mb;
        model_broken_(&mb, v + 1);
        KdaRuntime *rb = tiny_runtime(&mb, "cpu", NULL);
        CHECK(eval_loglik(rb, r, N, &s, bad[v], NULL, NULL, &err) == 0);
        kda_runtime_close(rb);
        kda_model_free(&mb);
    }
    CHECK_MSG(eval_loglik(d, r, N, &s, gpu, NULL, NULL, &err) == 0, "%s", err.msg);
    EvalSettings one = s;
    one.batch_tokens = 1; // one request per forward: padding-free GPU reference
    CHECK_MSG(eval_loglik(d, r, N, &one, gpu1, NULL, NULL, &err) == 0, "%s", err.msg);
    // The shared-prefix engine on the GPU: decode_cost 1 shares every document whose saved
    // context outweighs its decoded tokens (most of the 10 here).
    EvalSettings sh = s;
    sh.share_prefix = 1, sh.decode_cost = 1;
    CHECK_MSG(eval_loglik(d, r, N, &sh, shared, NULL, NULL, &err) == 0, "%s", err.msg);
    for (int i = 0; i < N; i++) {
        double sc = fmax(1.0, fabs(cpu[i]));
        CHECK_MSG(fabs(gpu[i] - cpu[i]) <= TOL_LL * sc, "request %d: gpu %.6f cpu %.6f", i, gpu[i],
                  cpu[i]);
        // Padding and batch composition must not change a request's score at all.
        CHECK_MSG(fabs(gpu[i] - gpu1[i]) <= TOL_LL_BATCH * sc,
                  "request %d: batched %.9f alone %.9f", i, gpu[i], gpu1[i]);
        CHECK_MSG(fabs(shared[i] - cpu[i]) <= TOL_LL * sc, "request %d: gpu shared %.6f cpu %.6f",
                  i, shared[i], cpu[i]);
    }
    double worst, mean, worst1, mean1, worst_sh, mean_sh;
    rel_err_(gpu, cpu, N, &worst, &mean);
    rel_err_(gpu, gpu1, N, &worst1, &mean1);
    rel_err_(shared, cpu, N, &worst_sh, &mean_sh);
    CHECK_MSG(mean <= TOL_LL_MEAN, "GPU vs CPU mean rel %.3g > %.3g", mean, TOL_LL_MEAN);
    CHECK_MSG(mean_sh <= TOL_LL_MEAN, "GPU shared vs CPU mean rel %.3g > %.3g", mean_sh,
              TOL_LL_MEAN);
    printf("    %d requests: GPU batched vs CPU worst rel %.3g mean %.3g; GPU batched vs GPU B=1 "
           "%.3g; GPU shared prefix vs CPU worst %.3g mean %.3g\n",
           N, worst, mean, worst1, worst_sh, mean_sh);
    // The tolerances must see a real bug: each broken model is >= 3x outside them, and the GPU is
    // >= 3x nearer the correct CPU model than the broken one (mean over the requests).
    for (int v = 0; v < 2; v++) {
        double bw, bm, gw, gm;
        rel_err_(bad[v], cpu, N, &bw, &bm);
        rel_err_(gpu, bad[v], N, &gw, &gm);
        printf("    broken model %d vs CPU: worst rel %.3g mean %.3g; GPU vs it: mean %.3g\n",
               v + 1, bw, bm, gm);
        CHECK_MSG(bw >= 3 * TOL_LL && bm >= 3 * TOL_LL_MEAN,
                  "broken model %d: worst %.3g mean %.3g, too near the tolerance", v + 1, bw, bm);
        CHECK_MSG(gm >= 3 * mean, "GPU vs broken model %d: mean %.3g, vs the correct one %.3g",
                  v + 1, gm, mean);
    }
    for (int i = 0; i < N; i++)
        eval_tokens_free(&r[i]);
    kda_runtime_close(d), kda_runtime_close(cr);
    kda_model_free(&m);
}

// Greedy ids b [n] of a GPU path vs the CPU's a [n]: identical unless bf16 flips a near-tie; at
// the first difference the CPU's logit gap between the two ids must be tiny (then the sequences
// legitimately diverge). Measured for the re-feed: 7 of 24 identical, gap < 0.05.
static void check_greedy_(KdaModel *m, const int32_t *prompt, int64_t P, const int32_t *a,
                          const int32_t *b, int64_t n, const char *what) {
    int64_t V = m->cfg.vocab_size, same = 0;
    while (same < n && a[same] == b[same])
        same++;
    printf("    greedy %s: %lld of %lld tokens identical to the CPU\n", what, (long long)same,
           (long long)n);
    if (same == n) return;
    int32_t seq[64];
    memcpy(seq, prompt, (size_t)P * 4), memcpy(seq + P, a, (size_t)same * 4);
    float *all = kda_malloc((size_t)((P + same) * V) * sizeof(float));
    KdaError err;
    CHECK(kda_model_forward(m, seq, NULL, 1, P + same, NULL, all, NULL, &err) == 0);
    const float *x = all + (P + same - 1) * V;
    float g = fabsf(x[a[same]] - x[b[same]]);
    printf("    first difference at token %lld: CPU logit gap %.4f\n", (long long)same, g);
    CHECK_MSG(g < 0.05f, "%s token %lld: CPU %d vs GPU %d with a logit gap of %.4f", what,
              (long long)same, a[same], b[same], g);
    free(all);
}

KDA_TEST_GPU(gpu_eval_logits_and_greedy_generate) {
    KdaModel m;
    model_(&m);
    KdaRuntime *d, *cr;
    if (open_pair_(&m, &d, &cr)) {
        kda_model_free(&m);
        return;
    }
    int64_t V = m.cfg.vocab_size, P = 9, NEW = 24;
    int32_t prompt[9] = {3, 14, 15, 92, 65, 35, 89, 79, 323};
    float *lg = kda_malloc((size_t)(P * V) * sizeof(float)), *gl = kda_malloc((size_t)V * 4);
    float *bl = kda_malloc((size_t)(P * V) * sizeof(float));
    KdaError err;
    CHECK(kda_model_forward(&m, prompt, NULL, 1, P, NULL, lg, NULL, &err) == 0);
    CHECK_MSG(kda_runtime_forward(d, prompt, NULL, 1, P, NULL, NULL, &err) == 0 &&
                  kda_runtime_logits(d, 0, P - 1, gl, &err) == 0,
              "%s", err.msg);
    const float *cl = lg + (P - 1) * V; // the CPU's last position
    double rel = kda_case_rel_rms(cl, gl, V);
    printf("    last-position logits GPU vs CPU: rel RMS %.3g\n", rel);
    CHECK_MSG(rel <= TOL_LOGITS, "rel RMS %.3g > %.3g", rel, TOL_LOGITS);
    for (int v = 0; v < 2; v++) { // the broken models (see model_broken_) must be far outside
        KdaModel mb;
        model_broken_(&mb, v + 1);
        CHECK(kda_model_forward(&mb, prompt, NULL, 1, P, NULL, bl, NULL, &err) == 0);
        double rb = kda_case_rel_rms(cl, bl + (P - 1) * V, V),
               rg = kda_case_rel_rms(bl + (P - 1) * V, gl, V);
        printf("    broken model %d: logits rel RMS vs CPU %.3g, vs GPU %.3g\n", v + 1, rb, rg);
        CHECK_MSG(rb >= 3 * TOL_LOGITS && rg >= 3 * rel, "broken model %d: %.3g / %.3g", v + 1, rb,
                  rg);
        kda_model_free(&mb);
    }
    int32_t a[24], b[24], c[24];
    KdaGenOpts o = {{0.0, 0, 1.0}, NEW, 1, NULL, 0, 0};
    CHECK(kda_generate(cr, prompt, P, &o, a, NULL, NULL, NULL, &err) == 0);
    CHECK_MSG(kda_generate(d, prompt, P, &o, b, NULL, NULL, NULL, &err) == 0, "%s", err.msg);
    CHECK_MSG(kda_generate_refeed(d, prompt, P, &o, c, NULL, NULL, NULL, &err) == 0, "%s", err.msg);
    // GPU recurrent decode and GPU re-feed vs the CPU: identical unless bf16 flips a near-tie.
    check_greedy_(&m, prompt, P, a, b, NEW, "GPU decode");
    check_greedy_(&m, prompt, P, a, c, NEW, "GPU re-feed");
    free(lg), free(gl), free(bl);
    kda_runtime_close(d), kda_runtime_close(cr);
    kda_model_free(&m);
}

#endif // KDA_HAVE_CUDA
