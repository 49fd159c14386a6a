// test_gpu_xent_exact.c - the GPU LM head + cross-entropy (src/cuda/xent_cuda.h: the legacy head
// over vocabulary chunks and the fused classifier with either row kernel) on a peaked
// distribution over a Llama-3-sized vocabulary, against float64 (make test-gpu; needs a device).
//
// The twin of tests/test_cpu_ops.c cpu_xent_peaked_vocab_exact: 64 rows, V = 128,256, a few dozen
// candidates within a few nats of each row's maximum and ~128k tokens 10-25 nats below it, as a
// trained model produces. Inputs sit on coarse dyadic grids (n: 1 and s in [1, 2.5] on 1/8; Wh:
// bulk N(0, 2) clipped to [-16, 16] on 1/8, candidates in [6, 10] on 1/16), so every operand is
// exact in bf16 and every logit exact in the GEMM's fp32 accumulator: the float64 reference sees
// the GPU's own logits (the legacy head keeps them fp32; the fused classifier rounds each once to
// bf16, so its reference rounds them the same way), and what remains is the kernel's partition
// sum and its float outputs.
// Error budget per row: the exp of each term (expf, ~2 ulps), the partition sum (block row
// kernel ~2, cluster ~5 fp32 roundings: <= 3e-7), the lse and the NLL rounded to float (half an
// ulp each at 16..32 nats: 9.5e-7 each): <= 3e-6 with an exact partition sum; sum over the 64
// rows: 1e-5 (the roundings are unbiased). A float partition sum drops every term below half an
// ulp of its running sum: on the CPU that made the logsumexp low by up to 2e-4.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

#ifdef KDA_HAVE_CUDA

#include "core/error.h"       // defines: kda_malloc
#include "core/rng.h"         // defines: KdaRng, rng_normal, rng_below
#include "core/util.h"        // defines: f32_to_bf16, bf16_to_f32
#include "cuda/cuda_common.h" // defines: KdaCudaCtx, kda_cuda_*
#include "cuda/xent_cuda.h"   // defines: kda_cuda_xent_fwd, KdaCudaXentWs, kda_cuda_cls_fused
#include "gpu_ctx.h"          // defines: gpu_test_ctx

#define ROW_TOL 3e-6
#define SUM_TOL 1e-5

enum { N = 64, D = 8, V = 128256, NP = 40 }; // D: 2 columns used, 6 zero

// The peaked inputs: n [N, D], W [V, D] (host fp32, every value bf16-exact), targets [N].
static void peaked_inputs_(float *n, float *W, int32_t *tg) {
    KdaRng rng;
    rng_seed(&rng, 17);
    int32_t peak[NP];
    for (int64_t v = 0; v < V; v++) {
        float g = rng_normal(&rng, 0.0f, 2.0f);
        g = g < -16 ? -16 : g > 16 ? 16 : g;
        W[v * D] = roundf(g * 8) / 8;
    }
    for (int64_t p = 0; p < NP; p++) {
        peak[p] = (int32_t)rng_below(&rng, (uint64_t)V);
        W[peak[p] * D + 1] = (float)(96 + rng_below(&rng, 65)) / 16;
    }
    for (int64_t r = 0; r < N; r++) {
        n[r * D] = 1, n[r * D + 1] = (float)(8 + rng_below(&rng, 13)) / 8;
        tg[r] = r % 4 == 3 ? (int32_t)rng_below(&rng, (uint64_t)V) : peak[rng_below(&rng, NP)];
    }
}

// Row r's logit v (exact in double and in the GEMM's fp32 sum); bf16 != 0: rounded to bf16.
static double logit_(const float *n, const float *W, int64_t r, int64_t v, int bf16) {
    double l = (double)W[v * D] + (double)n[r * D + 1] * W[v * D + 1];
    return bf16 ? (double)bf16_to_f32(f32_to_bf16((float)l)) : l;
}

// mode 0: the legacy head (kda_cuda_xent_fwd, fp32 logits); 1, 2, 3: the fused classifier's
// loss-only mode (bf16 logits) with the cluster (1), block (2) or pipelined (3) row kernel, in
// token chunks of 16.
static void peaked_case_(int mode) {
    KdaCudaCtx ctx;
    if (!gpu_test_ctx(&ctx)) return;
    const int64_t CH = 16384, ROWS = 16;
    float *n = kda_calloc((size_t)(N * D), sizeof(float)), *W = kda_calloc((size_t)(V * D), 4);
    int32_t *tg = kda_malloc((size_t)N * sizeof(int32_t));
    peaked_inputs_(n, W, tg);
    kda_bf16 *dn = kda_cuda_alloc(&ctx, (size_t)(N * D) * 2),
             *dW = kda_cuda_alloc(&ctx, (size_t)(V * D) * 2);
    int32_t *dtg = kda_cuda_alloc(&ctx, (size_t)N * 4);
    float *dnll = kda_cuda_alloc(&ctx, (size_t)N * 4), *dlse = kda_cuda_alloc(&ctx, (size_t)N * 4);
    double *dsum = kda_cuda_alloc(&ctx, 8);
    KdaCudaXentWs ws = {NULL, NULL, CH};
    KdaCudaClsWs cws = {NULL, ROWS, kda_cuda_cls_ld(V),
                        mode == 2   ? KDA_CLS_ROW_BLOCK
                        : mode == 3 ? KDA_CLS_ROW_PIPE
                                    : KDA_CLS_ROW_CLUSTER};
    if (mode == 0) {
        ws.logits = kda_cuda_alloc(&ctx, kda_cuda_xent_logits_bytes(N, CH));
        ws.stat = kda_cuda_alloc(&ctx, kda_cuda_xent_stat_bytes(N));
    } else {
        cws.logits = kda_cuda_alloc(&ctx, kda_cuda_cls_bytes(ROWS, V));
    }
    KDA_ASSERT(dn && dW && dtg && dnll && dlse && dsum &&
               (mode ? cws.logits != NULL : ws.logits && ws.stat));
    int rc = kda_cuda_put_bf16(&ctx, dn, n, N * D) || kda_cuda_put_bf16(&ctx, dW, W, V * D) ||
             kda_cuda_put_bytes(&ctx, dtg, tg, (size_t)N * 4) ||
             kda_cuda_poison(&ctx, dnll, (size_t)N * 4) ||
             kda_cuda_poison(&ctx, dlse, (size_t)N * 4) ||
             (mode == 0 ? kda_cuda_xent_fwd(&ctx, dnll, dlse, dsum, dn, dW, dtg, N, D, V, &ws)
                        : kda_cuda_cls_fused(&ctx, dnll, dlse, dsum, NULL, NULL, dn, dW, dtg, N, D,
                                             V, 0.0f, &cws)) ||
             kda_cuda_sync(&ctx);
    CHECK_MSG(rc == 0, "%s", ctx.err.msg);
    float *nll = kda_malloc((size_t)N * 4), *lse = kda_malloc((size_t)N * 4);
    double sum = NAN;
    if (!rc) {
        CHECK(kda_cuda_get_f32(&ctx, nll, dnll, N) == 0);
        CHECK(kda_cuda_get_f32(&ctx, lse, dlse, N) == 0);
        CHECK(cudaMemcpy(&sum, dsum, 8, cudaMemcpyDeviceToHost) == cudaSuccess);
        double ref_sum = 0, worst = 0;
        for (int64_t r = 0; r < N; r++) {
            double mx = -INFINITY, s = 0, lt = 0;
            for (int64_t v = 0; v < V; v++) {
                double l = logit_(n, W, r, v, mode != 0);
                mx = l > mx ? l : mx;
            }
            for (int64_t v = 0; v < V; v++) {
                double l = logit_(n, W, r, v, mode != 0);
                s += exp(l - mx);
                if (v == tg[r]) lt = l;
            }
            double ref = mx + log(s) - lt;
            ref_sum += ref;
            worst = fabs(nll[r] - ref) > worst ? fabs(nll[r] - ref) : worst;
            CHECK_MSG(fabs(nll[r] - ref) <= ROW_TOL, "row %lld: nll %.9g vs float64 %.9g (%.3g)",
                      (long long)r, (double)nll[r], ref, nll[r] - ref);
            CHECK_NEAR(lse[r], mx + log(s), ROW_TOL);
        }
        CHECK_NEAR(sum, ref_sum, SUM_TOL);
        printf("    gpu %s peaked: worst row %.3g, sum %.3g (bars %g, %g)\n",
               mode == 0   ? "xent"
               : mode == 1 ? "cls (cluster rows)"
                           : "cls (block rows)",
               worst, sum - ref_sum, ROW_TOL, SUM_TOL);
    }
    void *bufs[] = {dn, dW, dtg, dnll, dlse, dsum, ws.logits, ws.stat, cws.logits};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        kda_cuda_release(bufs[i]);
    kda_cuda_free(&ctx);
    free(n), free(W), free(tg), free(nll), free(lse);
}

KDA_TEST_GPU(gpu_xent_peaked_vocab_exact) {
    peaked_case_(0);
}

KDA_TEST_GPU(gpu_cls_peaked_vocab_exact) {
    peaked_case_(1);
    peaked_case_(2);
    peaked_case_(3);
}

#endif // KDA_HAVE_CUDA
