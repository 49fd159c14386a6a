// test_gate_host.c - the v2 gate + beta kernels of src/cuda/kda_gate_cuda.cu (KDA_GATE_V=2)
// through their HOST twins (kda_cuda_gate2_*_host: the kernels' per-thread code, each block's
// threads run phase by phase) against the CPU ops they replace (cpu/kda_core.h kda_gate_*,
// kda_beta_*, plus the chunk cumsums written out here). Runs in the CPU suite of every CUDA build
// (no GPU needed); the kernels on a device are test_gpu_ops.c's gpu_gate_cumsum_v2.
//
// Tolerances, rel = RMS(out - ref) / RMS(ref):
//   * fp32 outputs (g, gcum, beta, dA_log, ddt_bias): 1e-5 - another addition order (segment
//     scans, fp32 segment sums then double) and v2's series log1p: a few ulp per element.
//   * bf16 outputs (df, db): 1e-2 - the bf16 rounding alone is ~2e-3.
//   * g elementwise: max |g - g_ref| / |g_ref| <= 1e-6 against a double softplus of the exact
//     f + dt_bias (the series log1p and the shared exponential must hold everywhere, not just in
//     RMS; most of the 4-6e-7 seen is the fp32 rounding of a = f + dt_bias, which v1 has too:
//     up to |a|·2^-24 relative where softplus(a) ≈ e^a).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_case.h" // defines: kda_case_expect_rel, kda_case_chunk_cumsums
#include "test.h"

#ifdef KDA_HAVE_CUDA

#include "core/rng.h"           // defines: KdaRng, rng_normal, rng_uniform
#include "core/util.h"          // defines: bf16_to_f32, f32_to_bf16
#include "cpu/kda_core.h"       // defines: kda_gate_fwd, kda_gate_bwd, kda_beta_fwd, kda_beta_bwd
#include "cuda/kda_gate_cuda.h" // defines: kda_cuda_gate2_fwd_host, kda_cuda_gate2_bwd_host

#define TOL_BF16 1e-2
#define TOL_F32  1e-5

static float *f32s_(const kda_bf16 *b, int64_t n) {
    float *f = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        f[i] = bf16_to_f32(b[i]);
    return f;
}

static float *nan_(int64_t n) { // poisoned fp32 output
    float *x = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        x[i] = NAN;
    return x;
}

// One shape: forward (g, gcum, beta) and backward from gcum's gradient and from g's gradient
// (db at a row stride HV + 3 whose extra columns must stay untouched), the parameter gradients
// accumulating onto non-zero starts.
static void gate2_case_(KdaRng *r, int64_t B, int64_t T, int64_t HV, int64_t K, int64_t chunk) {
    int64_t HK = HV * K, N = B * T, n = N * HK, nb = N * HV, ldb = HV + 3;
    printf("  B=%lld T=%lld HV=%lld K=%lld chunk=%lld\n", (long long)B, (long long)T, (long long)HV,
           (long long)K, (long long)chunk);
    kda_bf16 *fb = malloc((size_t)n * 2), *bb = malloc((size_t)(nb > 0 ? nb : 1) * 2);
    for (int64_t i = 0; i < n; i++)
        fb[i] = f32_to_bf16(i % 97 ? rng_normal(r, 0.0f, 2.0f) : 24.0f); // and the threshold
    for (int64_t i = 0; i < nb; i++)
        bb[i] = f32_to_bf16(rng_normal(r, 0.0f, 3.0f));
    float *f = f32s_(fb, n), *b = f32s_(bb, nb);
    float *A_log = malloc((size_t)HV * 4), *dtb = malloc((size_t)HK * 4);
    for (int64_t j = 0; j < HV; j++)
        A_log[j] = (float)log(1.0 + 15.0 * rng_uniform(r));
    for (int64_t i = 0; i < HK; i++)
        dtb[i] = (float)(-4.0 + 3.0 * rng_uniform(r));
    float *dgc = malloc((size_t)n * 4), *dbeta = malloc((size_t)(nb > 0 ? nb : 1) * 4);
    float *dA0 = malloc((size_t)HV * 4), *ddt0 = malloc((size_t)HK * 4);
    for (int64_t i = 0; i < n; i++)
        dgc[i] = rng_normal(r, 0.0f, 1.0f);
    for (int64_t i = 0; i < nb; i++)
        dbeta[i] = rng_normal(r, 0.0f, 1.0f);
    for (int64_t j = 0; j < HV; j++)
        dA0[j] = rng_normal(r, 0.0f, 1.0f);
    for (int64_t i = 0; i < HK; i++)
        ddt0[i] = rng_normal(r, 0.0f, 1.0f);

    // CPU: gate, its chunk cumsum, dgcum's reverse chunk cumsum, gate and beta backwards
    float *g = malloc((size_t)n * 4), *gc = malloc((size_t)n * 4), *dg = malloc((size_t)n * 4);
    float *df = malloc((size_t)n * 4), *dA = malloc((size_t)HV * 4), *ddt = malloc((size_t)HK * 4);
    float *beta = malloc((size_t)(nb > 0 ? nb : 1) * 4),
          *db = malloc((size_t)(nb > 0 ? nb : 1) * 4);
    memcpy(dA, dA0, (size_t)HV * 4), memcpy(ddt, ddt0, (size_t)HK * 4);
    kda_gate_fwd(g, f, A_log, dtb, N, HV, K, NULL);
    kda_case_chunk_cumsums(gc, dg, g, dgc, B, T, HK, chunk);
    kda_gate_bwd(df, dA, ddt, dg, f, A_log, dtb, N, HV, K, NULL);
    kda_beta_fwd(beta, b, nb, 1);
    kda_beta_bwd(db, dbeta, b, nb, 1);

    // twin forward
    float *t_g = nan_(n), *t_gc = nan_(n), *t_beta = nan_(nb);
    CHECK(kda_cuda_gate2_fwd_host(t_gc, t_g, t_beta, fb, bb, A_log, dtb, B, T, HV, K, chunk, 1) ==
          0);
    kda_case_expect_rel("gate g fp32", g, t_g, n, TOL_F32);
    kda_case_expect_rel("gate chunk cumsum fp32", gc, t_gc, n, TOL_F32);
    kda_case_expect_rel("beta fp32 (neg eig)", beta, t_beta, nb, TOL_F32);
    double worst = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double a = (double)f[i] + dtb[i % HK], A = exp((double)A_log[i % HK / K]);
        double ref = -A * (a > 20.0 ? a : log1p(exp(a))), e = fabs(t_g[i] - ref) / fabs(ref);
        worst = e > worst || !(e == e) ? e : worst;
    }
    printf("    %-34s max %.2e\n", "gate g elementwise vs double", worst);
    CHECK_MSG(worst <= 1e-6, "gate g: max rel error %.3g > 1e-6", worst);

    // twin backward, twice: from dgcum (from_cumsum = 1) and from dg
    for (int from_cumsum = 1; from_cumsum >= 0; from_cumsum--) {
        kda_bf16 *t_df = malloc((size_t)n * 2), *t_db = malloc((size_t)(N * ldb) * 2);
        memset(t_df, 0xFF, (size_t)n * 2), memset(t_db, 0xFF, (size_t)(N * ldb) * 2);
        float *t_dA = malloc((size_t)HV * 4), *t_ddt = malloc((size_t)HK * 4);
        memcpy(t_dA, dA0, (size_t)HV * 4), memcpy(t_ddt, ddt0, (size_t)HK * 4);
        CHECK(kda_cuda_gate2_bwd_host(t_df, t_dA, t_ddt, t_db, ldb, from_cumsum ? dgc : dg, dbeta,
                                      fb, bb, A_log, dtb, B, T, HV, K, chunk, from_cumsum, 1) == 0);
        float *o_df = f32s_(t_df, n), *o_db = malloc((size_t)(nb > 0 ? nb : 1) * 4);
        int64_t bad = 0;
        for (int64_t i = 0; i < N; i++)
            for (int64_t j = 0; j < ldb; j++) {
                if (j < HV)
                    o_db[i * HV + j] = bf16_to_f32(t_db[i * ldb + j]);
                else
                    bad += t_db[i * ldb + j] != 0xFFFF;
            }
        kda_case_expect_rel(from_cumsum ? "gate bwd df bf16 (dgcum)" : "gate bwd df bf16 (dg)", df,
                            o_df, n, TOL_BF16);
        kda_case_expect_rel("gate bwd dA_log += fp32", dA, t_dA, HV, TOL_F32);
        kda_case_expect_rel("gate bwd ddt_bias += fp32", ddt, t_ddt, HK, TOL_F32);
        kda_case_expect_rel("beta bwd db bf16 (row stride)", db, o_db, nb, TOL_BF16);
        CHECK_MSG(bad == 0, "beta bwd wrote %lld elements outside its columns", (long long)bad);
        free(t_df), free(t_db), free(t_dA), free(t_ddt), free(o_df), free(o_db);
    }
    free(fb), free(bb), free(f), free(b), free(A_log), free(dtb), free(dgc), free(dbeta);
    free(dA0), free(ddt0), free(g), free(gc), free(dg), free(df), free(dA), free(ddt), free(beta);
    free(db), free(t_g), free(t_gc), free(t_beta);
}

// T = 1 (warps 1..7 without tokens), chunk remainders (63, 65, 130), HK not a multiple of the
// 128-column tile (K = 20, 12, 300), several chunks per block (32, 16, 7, 5, 1: chunk starts and
// ends inside segments), 48 (one chunk of 6 segments), the model's heads and chunk at T = 2048.
KDA_TEST(gate2_host) {
    KdaRng r;
    rng_seed(&r, 205);
    static const int64_t Ts[] = {1, 63, 64, 65, 130};
    for (int i = 0; i < 5; i++)
        gate2_case_(&r, 2, Ts[i], 4, 32, 64);
    gate2_case_(&r, 3, 130, 3, 20, 64);
    gate2_case_(&r, 2, 200, 3, 12, 64);
    gate2_case_(&r, 2, 100, 2, 300, 48);
    gate2_case_(&r, 1, 37, 5, 8, 5);
    gate2_case_(&r, 2, 65, 4, 32, 32);  // the model's chunk: two per block
    gate2_case_(&r, 2, 130, 4, 32, 16); // four per block, segments of 8 = half a chunk
    gate2_case_(&r, 1, 100, 3, 8, 7);   // nine per block, chunk starts inside segments
    gate2_case_(&r, 2, 70, 2, 4, 1);    // every token its own chunk
    gate2_case_(&r, 2, 2048, 8, 32, 32);
}

// Shapes v2 does not take: the twins refuse them (the launchers run v1 instead).
KDA_TEST(gate2_host_refuses) {
    float x[64] = {0};
    kda_bf16 h[64] = {0};
    CHECK(kda_cuda_gate2_fwd_host(x, NULL, NULL, h, NULL, x, x, 1, 1, 1, 6, 64, 0) == -1);
    CHECK(kda_cuda_gate2_fwd_host(x, NULL, NULL, h, NULL, x, x, 1, 1, 1, 8, 65, 0) == -1);
    CHECK(kda_cuda_gate2_bwd_host(h, x, x, NULL, 1, x, NULL, h, NULL, x, x, 1, 1, 1, 6, 64, 0, 0) ==
          -1);
}

#endif // KDA_HAVE_CUDA
