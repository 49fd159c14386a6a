// bench_proj.c - the KDA sublayer's projection pieces at the 300M shapes for one micro-batch-16
// step's layer (N = 32768 tokens, D = 1024, in-proj width 1160 = q 256 | k 256 | v 512 | f0 64
// | g0 64 | b 8, o_proj 512 -> 1024): the profile rows "in-proj GEMMs fwd/bwd" and "o_proj
// fwd" split into their GEMMs and copies, the copies both ways (cudaMemcpy2DAsync, the path
// before 2026-12-03, and the column kernels), and cuBLASLt's heuristic candidates timed for the
// GEMMs that run at a third of peak (kda_cuda_gemm_probe: is the heuristic's first pick the
// problem?). CUDA events, 2 warm-ups, median of 10; random inputs. Prints ms and the rate; the
// profile's rows are 12 x these (one per layer).
//
// Build and run: bash bench/kda_kernel/run_cls.sh proj (on the GPU machine; < 60 s).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_NAME "bench_proj"
#include "bench_common.h"     // defines: g, die_, time_ms_, rand_bf16_, BenchFn
#include "core/rng.h"         // defines: KdaRng, rng_normal
#include "cuda/cuda_common.h" // defines: KdaCudaCtx, kda_cuda_*
#include "cuda/gemm_cuda.h"   // defines: kda_cuda_gemm_*, kda_cuda_matmul, kda_cuda_cols_*

enum { N = 32768, D = 1024, WI = 1160, HVV = 512, R = 64 };
static const int64_t COL[6] = {0, 256, 512, 1024, 1088, 1152}, WID[6] = {256, 256, 512, 64, 64, 8};

static struct {
    kda_bf16 *xa, *Win, *inb, *part[6], *f0, *Wf1, *y256, *Wg1, *y512, *on, *Wo, *ybf;
    float *res, *out, *dx, *dWin;
} z;

static int f_inproj(void) {
    return kda_cuda_gemm_fwd(&g, z.inb, KDA_DT_BF16, z.xa, z.Win, N, D, WI, 0);
}
static int f_split_memcpy2d(void) {
    for (int k = 0; k < 6; k++)
        if (cudaMemcpy2DAsync(z.part[k], (size_t)WID[k] * 2, z.inb + COL[k], (size_t)WI * 2,
                              (size_t)WID[k] * 2, N, cudaMemcpyDeviceToDevice, g.stream))
            return -1;
    return 0;
}
static int f_split_kernel(void) {
    KdaCudaColParts pp;
    memset(&pp, 0, sizeof pp);
    pp.n = 6;
    for (int k = 0; k < 6; k++)
        pp.dst[k] = z.part[k], pp.col[k] = COL[k], pp.cols[k] = WID[k], pp.ld[k] = WID[k];
    return kda_cuda_cols_split(&g, z.inb, WI, N, &pp);
}
static int f_put_memcpy2d(void) {
    for (int k = 0; k < 6; k++)
        if (cudaMemcpy2DAsync(z.inb + COL[k], (size_t)WI * 2, z.part[k], (size_t)WID[k] * 2,
                              (size_t)WID[k] * 2, N, cudaMemcpyDeviceToDevice, g.stream))
            return -1;
    return 0;
}
static int f_put_kernel(void) {
    for (int k = 0; k < 6; k++)
        if (kda_cuda_cols_copy(&g, z.inb + COL[k], WI, z.part[k], WID[k], N, WID[k])) return -1;
    return 0;
}
static int f_f1(void) {
    return kda_cuda_gemm_fwd(&g, z.y256, KDA_DT_BF16, z.f0, z.Wf1, N, R, 256, 0);
}
static int f_g1(void) {
    return kda_cuda_gemm_fwd(&g, z.y512, KDA_DT_BF16, z.f0, z.Wg1, N, R, 512, 0);
}
static int f_oproj_res(void) {
    return kda_cuda_gemm_residual(&g, z.out, z.res, z.on, z.Wo, N, HVV, D);
}
static int f_oproj_bf16(void) {
    return kda_cuda_gemm_fwd(&g, z.ybf, KDA_DT_BF16, z.on, z.Wo, N, HVV, D, 0);
}
static int f_oproj_f32(void) {
    return kda_cuda_gemm_fwd(&g, z.out, KDA_DT_F32, z.on, z.Wo, N, HVV, D, 0);
}
static int f_copy_res(void) {
    return cudaMemcpyAsync(z.out, z.res, (size_t)N * D * 4, cudaMemcpyDeviceToDevice, g.stream);
}
static int f_f1_dw(void) { // dW [256, 64] += dyᵀ x over N: a tiny output, K = N
    return kda_cuda_gemm_bwd_dw(&g, z.dWin, z.y256, z.f0, N, R, 256);
}
static int f_g1_dw(void) {
    return kda_cuda_gemm_bwd_dw(&g, z.dWin, z.y512, z.f0, N, R, 512);
}
static int f_g1_dx(void) { // dx [N, 64] bf16 = dy [N, 512] · W
    return kda_cuda_gemm_bwd_dx(&g, z.f0, KDA_DT_BF16, z.y512, z.Wg1, N, R, 512, 0);
}
static int f_inproj_dx(void) {
    return kda_cuda_gemm_bwd_dx(&g, z.dx, KDA_DT_F32, z.inb, z.Win, N, D, WI, 0);
}
static int f_inproj_dw(void) {
    return kda_cuda_gemm_bwd_dw(&g, z.dWin, z.inb, z.xa, N, D, WI);
}

// Heuristic candidates of one product (kda_cuda_matmul's column-major form).
static void probe_(const char *name, int ta, int tb, int64_t m, int64_t n, int64_t k,
                   const kda_bf16 *A, int64_t lda, const kda_bf16 *B, int64_t ldb, float beta,
                   const void *C, void *Dp, KdaDtype dt, int64_t ldd, double flops) {
    float ms[8];
    int nc = 0;
    if (kda_cuda_gemm_probe(&g, ta, tb, m, n, k, A, lda, B, ldb, beta, C, Dp, dt, ldd, 5, ms, &nc))
        die_("probe");
    int best = 0;
    printf("  %-40s candidates:", name);
    for (int i = 0; i < nc; i++) {
        printf(" %.3f", ms[i]);
        if (ms[i] < ms[best]) best = i;
    }
    printf("\n  %-40s heuristic #0 %.3f ms (%.0f TFLOP/s), fastest #%d %.3f ms (%.0f TFLOP/s)\n",
           "", ms[0], flops / ms[0] / 1e9, best, ms[best], flops / ms[best] / 1e9);
}

int main(void) {
    KdaError err = {{0}};
    if (kda_cuda_init(&g, 0, &err)) {
        fprintf(stderr, "bench_proj: %s\n", err.msg);
        return 1;
    }
    printf("%s, %d SMs; one layer of the 300M model at N = %d tokens\n", g.info.name,
           g.info.sm_count, N);
    KdaRng r;
    rng_seed(&r, 5);
    z.xa = rand_bf16_(&r, (int64_t)N * D, 1.0f), z.Win = rand_bf16_(&r, (int64_t)WI * D, 0.03f);
    z.inb = rand_bf16_(&r, (int64_t)N * WI, 1.0f);
    for (int k = 0; k < 6; k++)
        z.part[k] = rand_bf16_(&r, (int64_t)N * WID[k], 1.0f);
    z.f0 = rand_bf16_(&r, (int64_t)N * R, 1.0f), z.Wf1 = rand_bf16_(&r, 256 * R, 0.1f);
    z.Wg1 = rand_bf16_(&r, 512 * R, 0.1f);
    z.y256 = rand_bf16_(&r, (int64_t)N * 256, 1.0f), z.y512 = rand_bf16_(&r, (int64_t)N * 512, 1);
    z.on = rand_bf16_(&r, (int64_t)N * HVV, 1.0f), z.Wo = rand_bf16_(&r, (int64_t)D * HVV, 0.04f);
    z.ybf = rand_bf16_(&r, (int64_t)N * D, 1.0f);
    z.res = kda_cuda_alloc(&g, (size_t)N * D * 4), z.out = kda_cuda_alloc(&g, (size_t)N * D * 4);
    z.dx = kda_cuda_alloc(&g, (size_t)N * D * 4), z.dWin = kda_cuda_alloc(&g, (size_t)WI * D * 4);
    if (!z.res || !z.out || !z.dx || !z.dWin || kda_cuda_zero(&g, z.dWin, (size_t)WI * D * 4))
        die_("alloc");
    if (f_oproj_f32() || cudaMemcpy(z.res, z.out, (size_t)N * D * 4, cudaMemcpyDeviceToDevice))
        die_("res"); // a random-ish fp32 residual
    double inb_by = 4.0 * N * WI, fl_in = 2.0 * N * D * WI, fl_o = 2.0 * N * HVV * D;
    const struct {
        const char *name;
        BenchFn fn;
        double flops, bytes;
    } rows[] = {
        {"in-proj GEMM 1024 -> 1160 bf16", f_inproj, fl_in, 0},
        {"in-proj split: 6 x cudaMemcpy2DAsync", f_split_memcpy2d, 0, inb_by},
        {"in-proj split: cols_split kernel", f_split_kernel, 0, inb_by},
        {"f_proj.1 GEMM 64 -> 256 bf16", f_f1, 2.0 * N * R * 256, 0},
        {"g_proj.1 GEMM 64 -> 512 bf16", f_g1, 2.0 * N * R * 512, 0},
        {"o_proj residual 512 -> 1024 fp32 (C=res)", f_oproj_res, fl_o, 0},
        {"o_proj 512 -> 1024 bf16 out, beta 0", f_oproj_bf16, fl_o, 0},
        {"o_proj 512 -> 1024 fp32 out, beta 0", f_oproj_f32, fl_o, 0},
        {"copy of the fp32 residual (read + write)", f_copy_res, 0, 8.0 * N * D},
        {"in-proj bwd: 6 x cudaMemcpy2DAsync in", f_put_memcpy2d, 0, inb_by},
        {"in-proj bwd: 6 x cols_copy kernel in", f_put_kernel, 0, inb_by},
        {"f_proj.1 dW [256, 64] += over N", f_f1_dw, 2.0 * N * R * 256, 0},
        {"g_proj.1 dW [512, 64] += over N", f_g1_dw, 2.0 * N * R * 512, 0},
        {"g_proj.1 dX 512 -> 64 bf16", f_g1_dx, 2.0 * N * R * 512, 0},
        {"in-proj dX 1160 -> 1024 fp32", f_inproj_dx, fl_in, 0},
        {"in-proj dW [1160, 1024] +=", f_inproj_dw, fl_in, 0},
    };
    printf("%-44s %9s %14s\n", "op (one layer)", "ms", "rate");
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        float t = time_ms_(rows[i].fn, NULL);
        if (rows[i].flops > 0)
            printf("%-44s %9.4f %8.1f TFLOP/s\n", rows[i].name, t, rows[i].flops / t / 1e9);
        else
            printf("%-44s %9.4f %8.0f GB/s\n", rows[i].name, t, rows[i].bytes / t / 1e6);
    }
    printf("cuBLASLt candidates (ms, heuristic order):\n");
    // y = x·Wᵀ -> yᵀ [out, N] = op_T(W) · x_cm (gemm_cuda.cu's forward form)
    probe_("in-proj fwd", 1, 0, WI, N, D, z.Win, D, z.xa, D, 0.0f, NULL, z.inb, KDA_DT_BF16, WI,
           fl_in);
    probe_("o_proj fwd residual (beta 1, C = res)", 1, 0, D, N, HVV, z.Wo, HVV, z.on, HVV, 1.0f,
           z.res, z.out, KDA_DT_F32, D, fl_o);
    probe_("o_proj fwd bf16 (beta 0)", 1, 0, D, N, HVV, z.Wo, HVV, z.on, HVV, 0.0f, NULL, z.ybf,
           KDA_DT_BF16, D, fl_o);
    probe_("in-proj dX (beta 0)", 0, 0, D, N, WI, z.Win, D, z.inb, WI, 0.0f, NULL, z.dx, KDA_DT_F32,
           D, fl_in);
    probe_("f_proj.1 fwd", 1, 0, 256, N, R, z.Wf1, R, z.f0, R, 0.0f, NULL, z.y256, KDA_DT_BF16, 256,
           2.0 * N * R * 256);
    // dWᵀ [in, out] = x_cm [in, N] · op_T(dy_cm [out, N]) (gemm_cuda.cu's weight-gradient form;
    // beta 0 here so that the probe may repeat it)
    probe_("g_proj.1 dW (beta 0)", 0, 1, R, 512, N, z.f0, R, z.y512, 512, 0.0f, NULL, z.dWin,
           KDA_DT_F32, R, 2.0 * N * R * 512);
    kda_cuda_free(&g);
    return 0;
}
