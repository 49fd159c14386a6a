// test_gpu_decode.c - the GPU's recurrent decode (make test-gpu; needs a device): the one-token
// kernels of cuda/decode_cuda.cu on the device vs their host twins (which test_decode_host.c ties
// to the CPU bit for bit), and the bf16 GPU runtime's prefill + decode (kda_runtime_prefill /
// kda_runtime_decode) vs the CPU runtime's and vs the GPU's own whole-sequence forward, for a
// tied HV = H model and a GVA model, prompts of T = 1, 64 and 70 tokens (70: not a multiple of
// the GPU's chunk 32 nor the CPU's 64), 8 decoded tokens each. `./kda_test --gpu decode`.
//
// Tolerances, each with the error it covers:
//   TOL_KERNEL_S 1e-5 (state, fp32 rel RMS): device vs twin differ only in CUDA's expf (<= 2 ulp)
//     and the FMA contraction of the device's products and sums (~1e-7 per operation).
//   TOL_KERNEL_BF16 1e-2 (bf16 outputs, rel RMS): the same, plus an output rounding to bf16 that
//     may go the other way (one bf16 ulp = 3.9e-3 relative on those elements).
//   TOL_LOGITS 3e-2 (GPU decode vs CPU decode, logits rel RMS per position): bf16 mixed
//     precision against fp32, the budget of test_gpu_eval.c's forward logits (measured 1.35e-2 on
//     its model, initializer_range 0.1). Two broken CPU models must be >= 3x outside it.
//   TOL_REFEED 2e-2 (GPU decode vs the GPU forward of the whole sequence, rel RMS): both bf16 with
//     the same weights and dtypes; they differ where a one-row GEMM accumulates in another order
//     than a T-row GEMM (a bf16 output rounding of 3.9e-3 relative flips for some elements) and in
//     the chunked vs per-token recurrence in fp32 (~1e-6). Not measured yet: the run prints it.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

#ifdef KDA_HAVE_CUDA

#include "core/rng.h"         // defines: KdaRng, rng_seed, rng_normal, rng_uniform
#include "core/util.h"        // defines: f32_to_bf16, bf16_to_f32
#include "cuda/cuda_common.h" // defines: KdaCudaCtx, kda_cuda_init, kda_cuda_put_*, _get_*
#include "cuda/decode_cuda.h" // defines: kda_cuda_decode_*, kda_cuda_decode_*_host
#include "model/model_cuda.h" // defines: KdaCudaModel, KdaCudaDecode (the graph switch)
#include "model/model.h"      // defines: KdaModel
#include "model/runtime.h"    // defines: KdaRuntime, kda_runtime_*
#include "kda_case.h"         // defines: kda_case_rel_rms, kda_case_from_bf16
#include "gpu_ctx.h"          // defines: GpuEnv, gpu_env_set, gpu_env_restore
#include "tiny_model.h"       // defines: tiny_runtime, tiny_random_ids

#define TOL_KERNEL_S    1e-5
#define TOL_KERNEL_BF16 1e-2
#define TOL_LOGITS      3e-2
#define TOL_REFEED      2e-2
#define N_DECODE        8

// ---- kernels vs host twins ---------------------------------------------------------------------

KDA_TEST_GPU(gpu_decode_kernels_match_host_twins) {
    KdaCudaCtx ctx;
    KdaError err;
    if (kda_cuda_init(&ctx, 0, &err)) {
        CHECK_MSG(0, "%s", err.msg);
        return;
    }
    enum { H = 2, HV = 4, K = 16, V = 32, W = 4, C = H * K };
    KdaRng r;
    rng_seed(&r, 9);
    float S[HV * K * V], q[H * K], k[H * K], v[HV * V], g[HV * K], beta[HV], w[C * W], p[C];
    float tail[C * (W - 1)], o_dev[HV * V], S_dev[HV * K * V], y_dev[C], tail_dev[C * (W - 1)];
    for (int i = 0; i < HV * K * V; i++)
        S[i] = rng_normal(&r, 0.0f, 0.3f);
    for (int i = 0; i < H * K; i++)
        q[i] = bf16_to_f32(f32_to_bf16(rng_normal(&r, 0.0f, 0.35f))),
        k[i] = bf16_to_f32(f32_to_bf16(rng_normal(&r, 0.0f, 0.35f)));
    for (int i = 0; i < HV * V; i++)
        v[i] = bf16_to_f32(f32_to_bf16(rng_normal(&r, 0.0f, 1.0f)));
    for (int i = 0; i < HV * K; i++)
        g[i] = -(float)rng_uniform(&r) * 0.5f;
    for (int i = 0; i < HV; i++)
        beta[i] = (float)rng_uniform(&r);
    for (int i = 0; i < C * W; i++)
        w[i] = rng_normal(&r, 0.0f, 0.5f);
    for (int i = 0; i < C; i++)
        p[i] = bf16_to_f32(f32_to_bf16(rng_normal(&r, 0.0f, 1.0f)));
    for (int i = 0; i < C * (W - 1); i++)
        tail[i] = bf16_to_f32(f32_to_bf16(rng_normal(&r, 0.0f, 1.0f)));
    // device buffers
    float *dS = kda_cuda_alloc(&ctx, sizeof S), *dg = kda_cuda_alloc(&ctx, sizeof g);
    float *dbeta = kda_cuda_alloc(&ctx, sizeof beta), *dw = kda_cuda_alloc(&ctx, sizeof w);
    float *dtail = kda_cuda_alloc(&ctx, sizeof tail);
    kda_bf16 *dq = kda_cuda_alloc(&ctx, H * K * 2), *dk = kda_cuda_alloc(&ctx, H * K * 2);
    kda_bf16 *dv = kda_cuda_alloc(&ctx, HV * V * 2), *dout = kda_cuda_alloc(&ctx, HV * V * 2);
    kda_bf16 *dp = kda_cuda_alloc(&ctx, C * 2), *dy = kda_cuda_alloc(&ctx, C * 2);
    CHECK(dS && dg && dbeta && dw && dtail && dq && dk && dv && dout && dp && dy);
    int ok = dS && dg && dbeta && dw && dtail && dq && dk && dv && dout && dp && dy &&
             !kda_cuda_put_f32(&ctx, dS, S, HV * K * V) && !kda_cuda_put_f32(&ctx, dg, g, HV * K) &&
             !kda_cuda_put_f32(&ctx, dbeta, beta, HV) && !kda_cuda_put_f32(&ctx, dw, w, C * W) &&
             !kda_cuda_put_f32(&ctx, dtail, tail, C * (W - 1)) &&
             !kda_cuda_put_bf16(&ctx, dq, q, H * K) && !kda_cuda_put_bf16(&ctx, dk, k, H * K) &&
             !kda_cuda_put_bf16(&ctx, dv, v, HV * V) && !kda_cuda_put_bf16(&ctx, dp, p, C) &&
             !kda_cuda_decode_delta(&ctx, dout, dS, dq, dk, dv, dg, dbeta, H, HV, K, V, 0.25f) &&
             !kda_cuda_decode_conv(&ctx, dy, dtail, dp, dw, C, W, K, 1, 1e-6f) &&
             !kda_cuda_get_f32(&ctx, S_dev, dS, HV * K * V) &&
             !kda_cuda_get_bf16(&ctx, o_dev, dout, HV * V) &&
             !kda_cuda_get_bf16(&ctx, y_dev, dy, C) &&
             !kda_cuda_get_f32(&ctx, tail_dev, dtail, C * (W - 1)) && !kda_cuda_sync(&ctx);
    CHECK_MSG(ok, "%s", ctx.err.msg);
    // host twins on the same inputs
    kda_bf16 qb[H * K], kb[H * K], vb[HV * V], ob[HV * V], pb[C], yb[C];
    for (int i = 0; i < H * K; i++)
        qb[i] = f32_to_bf16(q[i]), kb[i] = f32_to_bf16(k[i]);
    for (int i = 0; i < HV * V; i++)
        vb[i] = f32_to_bf16(v[i]);
    for (int i = 0; i < C; i++)
        pb[i] = f32_to_bf16(p[i]);
    kda_cuda_decode_delta_host(ob, S, qb, kb, vb, g, beta, H, HV, K, V, 0.25f);
    kda_cuda_decode_conv_host(yb, tail, pb, w, C, W, K, 1, 1e-6f);
    float *of = kda_case_from_bf16(ob, HV * V), *yf = kda_case_from_bf16(yb, C);
    if (ok) {
        double es = kda_case_rel_rms(S, S_dev, HV * K * V),
               eo = kda_case_rel_rms(of, o_dev, HV * V);
        double ey = kda_case_rel_rms(yf, y_dev, C);
        printf("    device vs twin: state %.3g, output %.3g, conv %.3g, tail %s\n", es, eo, ey,
               memcmp(tail_dev, tail, sizeof tail) ? "differs" : "equal");
        CHECK(es <= TOL_KERNEL_S && eo <= TOL_KERNEL_BF16 && ey <= TOL_KERNEL_BF16);
        CHECK(memcmp(tail_dev, tail, sizeof tail) == 0); // a shift: no arithmetic
    }
    free(of), free(yf);
    kda_cuda_release(dS), kda_cuda_release(dg), kda_cuda_release(dbeta), kda_cuda_release(dw);
    kda_cuda_release(dtail), kda_cuda_release(dq), kda_cuda_release(dk), kda_cuda_release(dv);
    kda_cuda_release(dout), kda_cuda_release(dp), kda_cuda_release(dy);
    kda_cuda_free(&ctx);
}

// ---- the runtime: prefill + decode
// ---------------------------------------------------------------

// gva 0: D 64, L 2, H = HV = 2, K = V = 32, tied, vocab 512 (test_gpu_eval.c's model); gva 1:
// configs/tiny_gva.json's shape (H 2, HV 4, K 16, V 32, untied, allow_neg_eigval), vocab 256.
// initializer_range 0.1 sharpens the logits (as test_gpu_eval.c). broken 1 drops the oldest tap
// of layer 0's key conv, broken 2 zeroes layer 1's dt_bias (bugs of a GPU port's size).
static void model_(KdaModel *m, int gva, int broken) {
    KdaConfig c;
    kda_config_defaults(&c);
    c.hidden_size = 64, c.num_hidden_layers = 2, c.num_heads = 2, c.head_dim = 32;
    c.expand_v = 1.0, c.intermediate_size_raw = 128, c.vocab_size = 512, c.conv_size = 4;
    c.tie_word_embeddings = 1, c.initializer_range = 0.1;
    if (gva) {
        c.head_dim = 16, c.num_v_heads_raw = 4, c.expand_v = 2.0, c.vocab_size = 256;
        c.tie_word_embeddings = 0, c.allow_neg_eigval = 1;
    }
    KdaError err;
    KDA_ASSERT(kda_config_derive(&c, "gpu-decode", &err) == 0);
    KDA_ASSERT(kda_model_init(m, &c, &err) == 0);
    kda_params_init(&m->table, &m->cfg, m->params, 23);
    if (broken == 1)
        for (int64_t i = 0; i < m->cfg.key_dim; i++)
            m->w.layers[0].k_conv[i * m->cfg.conv_size] = 0.0f;
    if (broken == 2) memset(m->w.layers[1].dt_bias, 0, (size_t)m->cfg.gate_dim * sizeof(float));
}

// Prefill of ids [T] then N_DECODE tokens ids [T .. T + N_DECODE): logits [N_DECODE + 1, V] of
// positions T-1 .. T-1+N_DECODE. -1 (checked) on a failure.
static int decode_run_(KdaRuntime *rt, const int32_t *ids, int64_t T, float *logits) {
    int64_t V = kda_runtime_config(rt)->vocab_size;
    KdaRtState *st;
    KdaError err;
    int rc =
        kda_runtime_state_new(rt, &st, &err) || kda_runtime_prefill(rt, st, ids, T, logits, &err);
    for (int k = 0; k < N_DECODE && !rc; k++)
        rc = kda_runtime_decode(rt, st, ids[T + k], logits + (k + 1) * V, &err);
    CHECK_MSG(rc == 0, "%s: T %lld: %s", kda_runtime_name(rt), (long long)T, err.msg);
    if (!rc) CHECK_EQ_INT(kda_runtime_state_pos(st), T + N_DECODE);
    kda_runtime_state_free(rt, st);
    return rc ? -1 : 0;
}

// The same positions from whole-sequence forwards of ids [0 .. p] and the logits of p.
static int refeed_run_(KdaRuntime *rt, const int32_t *ids, int64_t T, float *logits) {
    int64_t V = kda_runtime_config(rt)->vocab_size;
    KdaError err;
    for (int k = 0; k <= N_DECODE; k++) {
        int64_t n = T + k;
        if (kda_runtime_forward(rt, ids, NULL, 1, n, NULL, NULL, &err) ||
            kda_runtime_logits(rt, 0, n - 1, logits + k * V, &err)) {
            CHECK_MSG(0, "re-feed T %lld: %s", (long long)n, err.msg);
            return -1;
        }
    }
    return 0;
}

static void decode_case_(int gva) {
    KdaModel m;
    model_(&m, gva, 0);
    KdaRuntime *gpu = tiny_runtime(&m, "cuda", NULL), *cpu = tiny_runtime(&m, "cpu", NULL);
    CHECK_MSG(gpu != NULL, "the GPU runtime did not open");
    KdaRuntime *bad[2];
    KdaModel mb[2];
    for (int b = 0; b < 2; b++) {
        model_(&mb[b], gva, b + 1);
        bad[b] = tiny_runtime(&mb[b], "cpu", NULL);
    }
    int64_t V = m.cfg.vocab_size, n_pos = N_DECODE + 1;
    const int64_t lengths[3] = {1, 64, 70};
    int32_t ids[70 + N_DECODE];
    tiny_random_ids(ids, 70 + N_DECODE, V, 31 + (uint64_t)gva);
    float *lg = malloc((size_t)(n_pos * V) * 4), *lc = malloc((size_t)(n_pos * V) * 4);
    float *lr = malloc((size_t)(n_pos * V) * 4), *lb = malloc((size_t)(n_pos * V) * 4);
    for (int i = 0; gpu && i < 3; i++) {
        int64_t T = lengths[i];
        if (decode_run_(gpu, ids, T, lg) || decode_run_(cpu, ids, T, lc) ||
            refeed_run_(gpu, ids, T, lr))
            continue;
        double worst_cpu = 0.0, worst_refeed = 0.0;
        for (int64_t k = 0; k < n_pos; k++) {
            double ec = kda_case_rel_rms(lc + k * V, lg + k * V, V);
            double er = kda_case_rel_rms(lr + k * V, lg + k * V, V);
            CHECK_MSG(ec <= TOL_LOGITS, "gva %d T %lld position %lld: vs CPU rel RMS %.3g", gva,
                      (long long)T, (long long)(T - 1 + k), ec);
            CHECK_MSG(er <= TOL_REFEED, "gva %d T %lld position %lld: vs re-feed rel RMS %.3g", gva,
                      (long long)T, (long long)(T - 1 + k), er);
            worst_cpu = fmax(worst_cpu, ec), worst_refeed = fmax(worst_refeed, er);
        }
        printf("    gva %d T %3lld: GPU decode vs CPU decode worst rel RMS %.3g, vs GPU re-feed "
               "%.3g\n",
               gva, (long long)T, worst_cpu, worst_refeed);
        for (int b = 0; b < 2; b++) { // the tolerance sees a real bug
            if (decode_run_(bad[b], ids, T, lb)) continue;
            double eb = 0.0;
            for (int64_t k = 0; k < n_pos; k++)
                eb = fmax(eb, kda_case_rel_rms(lc + k * V, lb + k * V, V));
            CHECK_MSG(T == 1 || eb >= 3 * TOL_LOGITS, "broken model %d, T %lld: only %.3g", b + 1,
                      (long long)T, eb);
        }
    }
    free(lg), free(lc), free(lr), free(lb);
    for (int b = 0; b < 2; b++)
        kda_runtime_close(bad[b]), kda_model_free(&mb[b]);
    kda_runtime_close(gpu), kda_runtime_close(cpu);
    kda_model_free(&m);
}

KDA_TEST_GPU(gpu_decode_matches_cpu_tied) {
    decode_case_(0);
}

KDA_TEST_GPU(gpu_decode_matches_cpu_gva) {
    decode_case_(1);
}

// Decoding from a copy of a prefilled device state gives the original's logits bit for bit (the
// same kernels on the same inputs), and the copy is independent of the original afterwards.
KDA_TEST_GPU(gpu_decode_state_copy) {
    KdaModel m;
    model_(&m, 0, 0);
    KdaRuntime *gpu = tiny_runtime(&m, "cuda", NULL);
    CHECK_MSG(gpu != NULL, "the GPU runtime did not open");
    int64_t V = m.cfg.vocab_size;
    int32_t ids[40];
    tiny_random_ids(ids, 40, V, 5);
    float *a = malloc((size_t)V * 4), *b = malloc((size_t)V * 4);
    KdaRtState *s0 = NULL, *s1 = NULL;
    KdaError err;
    int rc =
        !gpu || kda_runtime_state_new(gpu, &s0, &err) || kda_runtime_state_new(gpu, &s1, &err) ||
        kda_runtime_prefill(gpu, s0, ids, 33, a, &err) || kda_runtime_state_copy(gpu, s1, s0, &err);
    CHECK_MSG(!rc, "%s", gpu ? err.msg : "no GPU");
    for (int k = 0; k < 5 && !rc; k++) {
        rc = kda_runtime_decode(gpu, s1, ids[33 + k], b, &err) ||
             kda_runtime_decode(gpu, s0, ids[33 + k], a, &err);
        CHECK(!rc && memcmp(a, b, (size_t)V * 4) == 0);
    }
    free(a), free(b);
    if (gpu) kda_runtime_state_free(gpu, s0), kda_runtime_state_free(gpu, s1);
    kda_runtime_close(gpu);
    kda_model_free(&m);
}

// The step replayed as a CUDA graph (the default) gives the eager step's logits
// (KDA_DECODE_GRAPH=0) bit for bit (the same kernels and GEMM plans on the same buffers), and the
// capture really happened.
KDA_TEST_GPU(gpu_decode_graph_equals_eager) {
    KdaModel m;
    model_(&m, 1, 0);
    KdaCudaModel *g = NULL;
    KdaCudaDecode *eager = NULL, *graph = NULL;
    KdaError err = {{0}};
    GpuEnv dg; // eager, then the default (unset: the graph), then the suite's value back
    gpu_env_set(&dg, "KDA_DECODE_GRAPH", "0");
    int rc = kda_cuda_model_create(&g, &m.cfg, &m.table, m.params, 0, &err) ||
             kda_cuda_decode_create(g, &eager, &err);
    unsetenv("KDA_DECODE_GRAPH"); // inside dg's stretch: restored below
    rc = rc || kda_cuda_decode_create(g, &graph, &err);
    gpu_env_restore(&dg);
    CHECK_MSG(rc == 0, "%s", err.msg);
    int64_t V = m.cfg.vocab_size;
    int32_t ids[48];
    tiny_random_ids(ids, 48, V, 13);
    float *a = malloc((size_t)V * 4), *b = malloc((size_t)V * 4);
    rc = rc || kda_cuda_model_prefill(g, eager, ids, 40, a, &err) ||
         kda_cuda_model_prefill(g, graph, ids, 40, b, &err);
    for (int k = 0; k < 6 && !rc; k++) {
        rc = kda_cuda_model_decode(g, eager, ids[40 + k], a, &err) ||
             kda_cuda_model_decode(g, graph, ids[40 + k], b, &err);
        CHECK_MSG(!rc && memcmp(a, b, (size_t)V * 4) == 0, "step %d: graph != eager (%s)", k,
                  err.msg);
    }
    if (!rc) CHECK_MSG(kda_cuda_decode_graphed(graph), "the step was not captured");
    free(a), free(b);
    kda_cuda_decode_free(eager), kda_cuda_decode_free(graph);
    kda_cuda_model_free(g);
    kda_model_free(&m);
}

#endif // KDA_HAVE_CUDA
