// test_gpu_pdl.c - programmatic dependent launch (KDA_PDL=1, ctx->pdl; cuda_internal.h
// kda_launch): the same kernels in the same order with the same arguments, only allowed to start
// while their predecessor drains (each waits for it first thing), so every output must have the
// bits of the plain launches. `make test-gpu` runs these.
//   * gpu_pdl_kernel_chain: producer / consumer pairs on one stream (a PDL kernel after a PDL
//     kernel that writes its input, after a cuBLAS GEMM that writes its input, and a PDL kernel
//     that overwrites what its predecessor reads), large enough that an early read would see
//     the poison or the old values; outputs compared bit for bit with a context without PDL.
//   * gpu_pdl_model_bit_identical: training steps of the tiny model (fused classifier, two
//     micro-batches, clip, AdamW) eager and with graphs, KDA_PDL=1 at creation against unset:
//     every step's loss, gradients and parameters bit-identical, and the switch on (a silent
//     fallback to plain launches would keep the bits but fail the flag check).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

#ifdef KDA_HAVE_CUDA

#include "core/error.h"       // defines: KDA_ASSERT, kda_malloc
#include "core/rng.h"         // defines: KdaRng, rng_seed, rng_normal
#include "cuda/cuda_common.h" // defines: KdaCudaCtx, kda_cuda_init, kda_cuda_*
#include "cuda/gemm_cuda.h"   // defines: kda_cuda_gemm_residual
#include "cuda/norm_cuda.h"   // defines: kda_cuda_rmsnorm_fwd, kda_cuda_rmsnorm_residual_fwd
#include "cuda/optim_cuda.h"  // defines: kda_cuda_scale
#include "cuda/xent_cuda.h"   // defines: kda_cuda_cls_ld
#include "model/config.h"     // defines: KdaConfig, kda_config_defaults, kda_config_derive
#include "model/model.h"      // defines: KdaModel, kda_model_free
#include "model/model_cuda.h" // defines: KdaCudaModel, kda_cuda_model_*
#include "tiny_model.h"       // defines: tiny_model_init
#include "gpu_ctx.h"          // defines: gpu_test_have, GpuEnv, gpu_env_set
#include "gpu_step.h"         // defines: GpuStep, gpu_train_step, gpu_bits_differ

// kda_cuda_init with KDA_PDL set to val (NULL: unset) while it runs.
static int init_pdl_(KdaCudaCtx *ctx, const char *val, KdaError *err) {
    GpuEnv e;
    gpu_env_set(&e, "KDA_PDL", val);
    int rc = kda_cuda_init(ctx, 0, err);
    gpu_env_restore(&e);
    return rc;
}

// ---- kernel level -------------------------------------------------------------------------------

// The outputs of one chain (host copies).
typedef struct {
    float *y2, *y3, *y4, *x; // y* bf16 read back as fp32; x the final fp32 residual
} ChainOut;

#define CH_N 16384 // rows: 64 MB of fp32 x at D = 1024, thousands of blocks per kernel
#define CH_D 1024
#define CH_K 256 // the GEMM's inner dimension

// On ctx: x <- x0 (host copy, synchronized), then on the stream with no host sync between:
//   A  rmsnorm_residual_fwd: x += a, y1 = norm(x)        (row kernel; writes x)
//   B  rmsnorm_fwd: y2 = norm(x)                          (reads A's x)
//   C  scale: x *= c                                      (overwrites what B reads)
//   D  rmsnorm_fwd: y3 = norm(x)                          (reads C's x)
//   E  gemm_residual: x2 = x + act · Wᵀ (cuBLAS)          (reads C's x)
//   F  rmsnorm_fwd: y4 = norm(x2)                         (a row kernel right after a GEMM)
// Each y is poisoned (NaN) first, on the stream (memset nodes between the kernels).
static int chain_(KdaCudaCtx *ctx, const float *x0, const float *a0, const float *act0,
                  const float *W0, const float *w0, ChainOut *o) {
    const int64_t N = CH_N, D = CH_D, K = CH_K, n = N * D;
    float *x = kda_cuda_alloc(ctx, (size_t)n * 4), *x2 = kda_cuda_alloc(ctx, (size_t)n * 4);
    kda_bf16 *a = kda_cuda_alloc(ctx, (size_t)n * 2),
             *act = kda_cuda_alloc(ctx, (size_t)(N * K) * 2);
    kda_bf16 *W = kda_cuda_alloc(ctx, (size_t)(D * K) * 2),
             *y = kda_cuda_alloc(ctx, (size_t)n * 2 * 4);
    float *w = kda_cuda_alloc(ctx, (size_t)D * 4), *rstd = kda_cuda_alloc(ctx, (size_t)N * 4 * 4);
    float *coef = kda_cuda_alloc(ctx, 4);
    const float c = 0.75f;
    int rc = !x || !x2 || !a || !act || !W || !y || !w || !rstd || !coef;
    rc = rc || kda_cuda_put_f32(ctx, x, x0, n) || kda_cuda_put_bf16(ctx, a, a0, n) ||
         kda_cuda_put_bf16(ctx, act, act0, N * K) || kda_cuda_put_bf16(ctx, W, W0, D * K) ||
         kda_cuda_put_f32(ctx, w, w0, D) || kda_cuda_put_f32(ctx, coef, &c, 1) ||
         kda_cuda_poison(ctx, y, (size_t)n * 2 * 4) || kda_cuda_sync(ctx);
    kda_bf16 *y1 = y, *y2 = y + n, *y3 = y + 2 * n, *y4 = y + 3 * n;
    rc = rc || kda_cuda_rmsnorm_residual_fwd(ctx, y1, rstd, x, a, w, N, D, 1e-6f) ||
         kda_cuda_rmsnorm_fwd(ctx, y2, rstd + N, x, w, N, D, 1e-6f) ||
         kda_cuda_scale(ctx, x, n, coef) ||
         kda_cuda_rmsnorm_fwd(ctx, y3, rstd + 2 * N, x, w, N, D, 1e-6f) ||
         kda_cuda_gemm_residual(ctx, x2, x, act, W, N, K, D) ||
         kda_cuda_rmsnorm_fwd(ctx, y4, rstd + 3 * N, x2, w, N, D, 1e-6f);
    rc = rc || kda_cuda_get_bf16(ctx, o->y2, y2, n) || kda_cuda_get_bf16(ctx, o->y3, y3, n) ||
         kda_cuda_get_bf16(ctx, o->y4, y4, n) || kda_cuda_get_f32(ctx, o->x, x, n) ||
         kda_cuda_sync(ctx);
    kda_cuda_release(x), kda_cuda_release(x2), kda_cuda_release(a), kda_cuda_release(act);
    kda_cuda_release(W), kda_cuda_release(y), kda_cuda_release(w), kda_cuda_release(rstd);
    kda_cuda_release(coef);
    return rc ? -1 : 0;
}

KDA_TEST_GPU(gpu_pdl_kernel_chain) {
    if (!gpu_test_have()) return;
    const int64_t N = CH_N, D = CH_D, K = CH_K, n = N * D;
    KdaRng r;
    rng_seed(&r, 4242);
    float *x0 = kda_malloc((size_t)n * 4), *a0 = kda_malloc((size_t)n * 4);
    float *act0 = kda_malloc((size_t)(N * K) * 4), *W0 = kda_malloc((size_t)(D * K) * 4);
    float *w0 = kda_malloc((size_t)D * 4);
    for (int64_t i = 0; i < n; i++)
        x0[i] = rng_normal(&r, 0.0f, 1.0f), a0[i] = rng_normal(&r, 0.0f, 1.0f);
    for (int64_t i = 0; i < N * K; i++)
        act0[i] = rng_normal(&r, 0.0f, 1.0f);
    for (int64_t i = 0; i < D * K; i++)
        W0[i] = rng_normal(&r, 0.0f, 0.05f);
    for (int64_t i = 0; i < D; i++)
        w0[i] = rng_normal(&r, 1.0f, 0.1f);
    ChainOut out[2];
    for (int p = 0; p < 2; p++) {
        out[p].y2 = kda_malloc((size_t)n * 4), out[p].y3 = kda_malloc((size_t)n * 4);
        out[p].y4 = kda_malloc((size_t)n * 4), out[p].x = kda_malloc((size_t)n * 4);
    }
    for (int p = 0; p < 2; p++) { // 0: plain launches, 1: KDA_PDL=1
        KdaCudaCtx ctx;
        KdaError err = {{0}};
        int rc = init_pdl_(&ctx, p ? "1" : NULL, &err);
        CHECK_MSG(rc == 0, "%s", err.msg);
        if (rc) break;
        CHECK_MSG(ctx.pdl == p, "KDA_PDL %s: ctx.pdl %d (device cc %d.%d; want %d)",
                  p ? "1" : "unset", ctx.pdl, ctx.info.cc_major, ctx.info.cc_minor, p);
        rc = chain_(&ctx, x0, a0, act0, W0, w0, &out[p]);
        CHECK_MSG(rc == 0, "chain (pdl %d): %s", p, ctx.err.msg);
        kda_cuda_free(&ctx);
        if (rc) break;
    }
    if (!kda_test_failed()) {
        int64_t d2 = gpu_bits_differ(out[1].y2, out[0].y2, n);
        int64_t d3 = gpu_bits_differ(out[1].y3, out[0].y3, n);
        int64_t d4 = gpu_bits_differ(out[1].y4, out[0].y4, n);
        int64_t dx = gpu_bits_differ(out[1].x, out[0].x, n);
        int64_t nan = 0;
        for (int64_t i = 0; i < n; i++)
            nan += isnan(out[0].y2[i]) || isnan(out[0].y3[i]) || isnan(out[0].y4[i]);
        printf("    PDL chain: %lld / %lld / %lld of %lld outputs and %lld of x differ, %lld NaN\n",
               (long long)d2, (long long)d3, (long long)d4, (long long)n, (long long)dx,
               (long long)nan);
        CHECK(d2 == 0 && d3 == 0 && d4 == 0 && dx == 0 && nan == 0);
    }
    for (int p = 0; p < 2; p++)
        free(out[p].y2), free(out[p].y3), free(out[p].y4), free(out[p].x);
    free(x0), free(a0), free(act0), free(W0), free(w0);
}

// ---- model level --------------------------------------------------------------------------------

// Pass 0: eager, plain launches (the reference); 1: eager, KDA_PDL=1; 2: graphs, plain; 3:
// graphs, KDA_PDL=1 (programmatic edges captured into the graph). Every pass must give pass 0's
// bits at every step; the graph passes must have captured and replayed.
KDA_TEST_GPU(gpu_pdl_model_bit_identical) {
    if (!gpu_test_have()) return;
    static const GpuStep SCHED[] = {{{64, 64}, {0, 1}},
                                    {{64, 64}, {0, 0}},
                                    {{64, 64}, {1, 0}},
                                    {{48, 64}, {0, 0}},
                                    {{64, 64}, {0, 1}}};
    const int n_steps = (int)(sizeof SCHED / sizeof SCHED[0]);
    KdaConfig c;
    kda_config_defaults(&c);
    c.hidden_size = 64, c.num_hidden_layers = 2, c.num_heads = 2, c.head_dim = 32;
    c.expand_v = 2.0, c.intermediate_size_raw = 96, c.vocab_size = 300, c.conv_size = 4;
    c.tie_word_embeddings = 0;
    c.initializer_range = 0.05;
    KdaError err = {{0}};
    KDA_ASSERT(kda_config_derive(&c, "tiny_pdl", &err) == 0);
    KdaModel m;
    tiny_model_init(&m, &c, 83);
    int64_t n = m.table.total_numel;
    float *g[4], *p[4], loss[4];
    KdaCudaModel *dm[4] = {NULL, NULL, NULL, NULL};
    int rc = 0;
    for (int pass = 0; pass < 4; pass++)
        g[pass] = kda_malloc((size_t)n * 4), p[pass] = kda_malloc((size_t)n * 4);
    for (int pass = 0; pass < 4 && !rc; pass++) {
        int pdl = pass & 1, graph = pass >= 2;
        GpuEnv e_pdl, e_graph;
        gpu_env_set(&e_pdl, "KDA_PDL", pdl ? "1" : NULL);
        gpu_env_set(&e_graph, "KDA_GRAPH", graph ? NULL : "0"); // graphs: the default
        rc = kda_cuda_model_create(&dm[pass], &m.cfg, &m.table, m.params, 0, &err);
        gpu_env_restore(&e_pdl), gpu_env_restore(&e_graph);
        // 64 rows per logits chunk: 2 token chunks per micro-batch
        size_t budget = (size_t)64 * (size_t)kda_cuda_cls_ld(m.cfg.vocab_size) * 2;
        if (!rc) rc = kda_cuda_model_set_cls_budget(dm[pass], budget, &err);
        if (!rc)
            CHECK_MSG(kda_cuda_model_pdl(dm[pass]) == pdl, "pass %d: ctx pdl %d, want %d", pass,
                      kda_cuda_model_pdl(dm[pass]), pdl);
    }
    CHECK_MSG(rc == 0, "%s", err.msg);
    for (int s = 0; s < n_steps && !rc && !kda_test_failed(); s++) {
        for (int pass = 0; pass < 4 && !rc; pass++)
            rc = gpu_train_step(dm[pass], &SCHED[s], s + 1, &loss[pass], g[pass], p[pass], &err);
        CHECK_MSG(rc == 0, "step %d: %s", s + 1, err.msg);
        for (int pass = 1; pass < 4 && !rc; pass++) {
            int64_t dg = gpu_bits_differ(g[pass], g[0], n), dp = gpu_bits_differ(p[pass], p[0], n);
            CHECK_MSG(memcmp(&loss[pass], &loss[0], sizeof(float)) == 0 && !dg && !dp,
                      "step %d pass %d: loss %.9g vs %.9g, %lld grads and %lld params of %lld "
                      "differ",
                      s + 1, pass, loss[pass], loss[0], (long long)dg, (long long)dp, (long long)n);
        }
    }
    int64_t st[4][3] = {{0}};
    for (int pass = 0; pass < 4 && dm[pass]; pass++)
        kda_cuda_model_graph_stats(dm[pass], &st[pass][0], &st[pass][1], &st[pass][2]);
    for (int pass = 0; pass < 4 && !rc; pass++)
        printf("    pass %d (%s, %s): last loss %.6f, graphs captured %lld, replayed %lld, "
               "failed %lld\n",
               pass, pass >= 2 ? "graphs" : "eager", pass & 1 ? "KDA_PDL=1" : "plain", loss[pass],
               (long long)st[pass][0], (long long)st[pass][1], (long long)st[pass][2]);
    for (int pass = 2; pass < 4 && !rc; pass++)
        CHECK_MSG(st[pass][0] >= 1 && st[pass][1] >= 1 && st[pass][2] == 0,
                  "pass %d: %lld captures, %lld replays, %lld failures (want >= 1, >= 1, 0)", pass,
                  (long long)st[pass][0], (long long)st[pass][1], (long long)st[pass][2]);
    for (int pass = 0; pass < 4; pass++)
        kda_cuda_model_free(dm[pass]), free(g[pass]), free(p[pass]);
    kda_model_free(&m);
}

#endif // KDA_HAVE_CUDA
