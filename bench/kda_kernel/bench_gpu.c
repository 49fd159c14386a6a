// bench_gpu.c - timings of the CUDA kernels at the 300M model's shapes (kda-model.md §1.2:
// D = 1024, H = HV = 8, K = 32, V = 64, I = 4096, W = 4) for one 16 x 2048-token micro-batch,
// and of the RMSNorm at KDA-1B's (D = 2048, an 8 x 2048-token micro-batch).
// CUDA events around each launch, 3 warm-ups, median of 10 runs; random (never zero) inputs.
// Prints ms, the bytes or FLOPs that the time implies, and ns per token-head for the KDA core.
// KDA_BENCH_ENERGY=all (or a part of the rows' names, e.g. "kept") adds each selected row's energy
// per call at the sustained power draw (bench_energy.h: what a change saves in the capped step).
//
// Build: see bench/kda_kernel/device_run.sh (links the src/cuda objects, core/error.o and
// core/rng.o with cuBLASLt and the static CUDA runtime).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"         // defines: KdaRng, rng_normal
#include "cuda/cuda_common.h" // defines: KdaCudaCtx, kda_cuda_*
#include "cuda/gemm_cuda.h"   // defines: kda_cuda_gemm_*
#include "cuda/kda_cuda.h"    // defines: kda_cuda_chunk_fwd, kda_cuda_recurrent_bwd
#include "cuda/kda_fast.h"    // defines: kda_fast_chunk
#include "cuda/kda_tc.h"      // defines: kda_tc_fwd, kda_tc_bwd, kda_tc_profile, kda_tc_set_version
#include "cuda/conv_cuda.h"   // defines: kda_cuda_conv_silu_fwd, kda_cuda_conv_silu_bwd
#include "cuda/kda_gate_cuda.h" // defines: kda_cuda_gate_cumsum_fwd, kda_cuda_gate_cumsum_bwd
#include "cuda/norm_cuda.h"     // defines: kda_cuda_rmsnorm_fwd, kda_cuda_rmsnorm_bwd
#include "cuda/optim_cuda.h"  // defines: kda_cuda_adam_scalars, kda_cuda_adamw, kda_cuda_grad_norm
#include "cuda/swiglu_cuda.h" // defines: kda_cuda_swiglu_fwd

static KdaCudaCtx g;

static void die_(const char *what) {
    fprintf(stderr, "bench_gpu: %s: %s\n", what, g.err.msg);
    exit(1);
}

// Device buffer of n elements of `size` bytes (bf16 when size == 2) filled from N(mean, std):
// a tile of at most 4M host draws, repeated by device copies (host draws are slow for 300M).
static void *rand_buf_(KdaRng *r, int64_t n, int size, float mean, float std) {
    int64_t tile = n < ((int64_t)1 << 22) ? n : ((int64_t)1 << 22);
    float *h = malloc((size_t)tile * sizeof(float));
    for (int64_t i = 0; i < tile; i++)
        h[i] = rng_normal(r, mean, std);
    char *d = kda_cuda_alloc(&g, (size_t)n * size);
    if (!d) die_("alloc");
    int rc = size == 2 ? kda_cuda_put_bf16(&g, (kda_bf16 *)d, h, tile)
                       : kda_cuda_put_f32(&g, (float *)d, h, tile);
    if (rc) die_("upload");
    for (int64_t at = tile; at < n; at += tile) {
        int64_t m = n - at < tile ? n - at : tile;
        if (cudaMemcpyAsync(d + at * size, d, (size_t)(m * size), cudaMemcpyDeviceToDevice,
                            g.stream) != cudaSuccess)
            die_("tile copy");
    }
    if (kda_cuda_sync(&g)) die_("fill");
    free(h);
    return d;
}

static int cmp_f_(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

typedef int (*BenchFn)(void *arg);

// Median milliseconds of fn over 10 timed runs after 3 warm-ups.
static float time_ms_(BenchFn fn, void *arg) {
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    float ms[10];
    for (int i = 0; i < 13; i++) {
        cudaEventRecord(e0, g.stream);
        if (fn(arg)) die_("launch");
        cudaEventRecord(e1, g.stream);
        if (kda_cuda_sync(&g)) die_("sync");
        if (i >= 3) cudaEventElapsedTime(&ms[i - 3], e0, e1);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    qsort(ms, 10, sizeof *ms, cmp_f_);
    return (ms[4] + ms[5]) / 2;
}

#include "bench_energy.h" // defines: BenchNvml, bench_energy_* (uses g and die_ above)

// ---- the shapes and buffers -----------------------------------------------------------------

enum { B = 16, T = 2048, N = B * T, D = 1024, H = 8, K = 32, V = 64, I = 4096, W = 4 };
#define NPARAM 300000000LL

typedef struct {
    void *x16, *w16, *dy16, *y16, *yf, *wf; // GEMM: x [N, D], W [I, D], dy [N, I]
    float *res, *rstd, *dxf, *dwf, *normw;  // RMSNorm
    float *rdy, *dwf2, *normw2; // RMSNorm's own dy [N·D]; dw, w [2048] for the 16384 x 2048 rows
    void *cp, *cy, *cdy, *cdp;  // conv over 2HK + HV·V = 1024 channels
    float *cw, *cdw;
    float *crs;                            // the fused q/k conv's rstd [N, H] (positive)
    void *q, *k, *v, *o, *dO, *f16, *df16; // KDA core
    void *b16, *db16;                      // beta's logits and their gradient [N, H]
    float *gcum, *g, *beta, *Alog, *dtb, *dAlog, *ddtb;
    float *dq, *dk, *dg, *dbeta;
    void *dv;
    float *p, *grad, *m, *vv; // AdamW over NPARAM
    void *pb;
    double *norm;
    KdaDims d, d32; // chunk 64 (the v1 kernels) and the fast path's chunk
    float *gcum32;  // gcum summed over the fast chunk
    float *keep;    // the M0 kept state at d32 (kda_tc_keep_floats >= kda_fast_keep_floats)
    float *keep128; // the same at d128 (tensor-core rows)
    void *q128, *k128, *v128, *o128, *dO128, *dv128; // K = V = 128 (fast path only)
    float *gcum128, *dq128, *dk128, *dg128;
    KdaDims d128;
    KdaCudaAdamScalars s;
} Bufs;

static Bufs z;

static int b_gemm_fwd(void *a) {
    (void)a;
    return kda_cuda_gemm_fwd(&g, z.y16, KDA_DT_BF16, z.x16, z.w16, N, D, I, 0);
}
static int b_gemm_dx(void *a) {
    (void)a;
    return kda_cuda_gemm_bwd_dx(&g, z.dxf, KDA_DT_F32, z.dy16, z.w16, N, D, I, 1);
}
static int b_gemm_dw(void *a) {
    (void)a;
    return kda_cuda_gemm_bwd_dw(&g, z.wf, z.dy16, z.x16, N, D, I);
}
static int b_rms_fwd(void *a) {
    (void)a;
    return kda_cuda_rmsnorm_fwd(&g, z.x16, z.rstd, z.res, z.normw, N, D, 1e-6f);
}
static int b_rms_bwd(void *a) {
    (void)a;
    return kda_cuda_rmsnorm_bwd(&g, z.dxf, z.dwf, z.res, z.res, z.normw, z.rstd, N, D, 1);
}
// The model's RMSNorm calls (model_cuda.c) at KDA-1B's mb-8 shape, 16384 x 2048 (the same
// N·D as the rows above), with the register kernels (default) or the loop kernels (KDA_RMS_FWD /
// KDA_RMS_BWD=loop, read at every launch): the backward as the blocks call it, dy and x separate
// buffers, dx accumulated (read and written) and its bf16 copy written, 18 B per element. The
// 32768 x 1024 bwd row above reads x for dy (one buffer: 12 B of the 16 it counts reach HBM);
// its model-form twin follows.
static void rms_loop_env_(const char *var, int loop) {
    if (loop)
        setenv(var, "loop", 1);
    else
        unsetenv(var);
}
static int b_rms_fwd_(int64_t n, int64_t d, const float *w, int loop) {
    rms_loop_env_("KDA_RMS_FWD", loop);
    int rc = kda_cuda_rmsnorm_fwd(&g, z.x16, z.rstd, z.res, w, n, d, 1e-6f);
    unsetenv("KDA_RMS_FWD");
    return rc;
}
static int b_rms_bwd_model_(int64_t n, int64_t d, float *dw, const float *w, int loop) {
    rms_loop_env_("KDA_RMS_BWD", loop);
    int rc = kda_cuda_rmsnorm_bwd_bf16(&g, z.dxf, z.y16, dw, z.rdy, z.res, w, z.rstd, n, d, 1);
    unsetenv("KDA_RMS_BWD");
    return rc;
}
static int b_rms_fwd_2k(void *a) {
    (void)a;
    return b_rms_fwd_(N / 2, 2 * D, z.normw2, 0);
}
static int b_rms_fwd_2k_loop(void *a) {
    (void)a;
    return b_rms_fwd_(N / 2, 2 * D, z.normw2, 1);
}
static int b_rms_bwd_2k(void *a) {
    (void)a;
    return b_rms_bwd_model_(N / 2, 2 * D, z.dwf2, z.normw2, 0);
}
static int b_rms_bwd_2k_loop(void *a) {
    (void)a;
    return b_rms_bwd_model_(N / 2, 2 * D, z.dwf2, z.normw2, 1);
}
static int b_rms_bwd_1k_model(void *a) {
    (void)a;
    return b_rms_bwd_model_(N, D, z.dwf, z.normw, 0);
}
static int b_conv_fwd(void *a) {
    (void)a;
    return kda_cuda_conv_silu_fwd(&g, z.cy, z.cp, z.cw, B, T, 1024, W);
}
static int b_conv_bwd(void *a) {
    (void)a;
    return kda_cuda_conv_silu_bwd(&g, z.cdp, z.cdw, z.cdy, z.cp, z.cw, B, T, 1024, W);
}
// The model's conv calls (model_cuda.c block_fwd_ / conv_l2_bwd_): q (and k) fused with the L2
// norm over C = H·K = 256 channels, v plain over HV·V = 512, as v1 and as v2 (KDA_CONV_V, read
// at every launch). Inputs are prefixes of the conv buffers; dq is the core's [N, H, K] fp32.
static void conv_v_(int v) {
    setenv("KDA_CONV_V", v == 2 ? "2" : "1", 1);
}
static int b_qconv_fwd_(int v) {
    conv_v_(v);
    return kda_cuda_conv_silu_l2_fwd(&g, z.cy, z.crs, z.cp, z.cw, B, T, H * K, W, K, 1e-6f);
}
static int b_qconv_bwd_(int v) {
    conv_v_(v);
    return kda_cuda_conv_silu_l2_bwd(&g, z.cdp, z.cdw, z.dq, z.cp, z.cw, z.crs, B, T, H * K, W, K);
}
static int b_vconv_fwd_(int v) {
    conv_v_(v);
    return kda_cuda_conv_silu_fwd(&g, z.cy, z.cp, z.cw, B, T, H * V, W);
}
static int b_vconv_bwd_(int v) {
    conv_v_(v);
    return kda_cuda_conv_silu_bwd(&g, z.cdp, z.cdw, z.cdy, z.cp, z.cw, B, T, H * V, W);
}
static int b_qconv_fwd1(void *a) {
    (void)a;
    return b_qconv_fwd_(1);
}
static int b_qconv_fwd2(void *a) {
    (void)a;
    return b_qconv_fwd_(2);
}
static int b_qconv_bwd1(void *a) {
    (void)a;
    return b_qconv_bwd_(1);
}
static int b_qconv_bwd2(void *a) {
    (void)a;
    return b_qconv_bwd_(2);
}
static int b_vconv_fwd1(void *a) {
    (void)a;
    return b_vconv_fwd_(1);
}
static int b_vconv_fwd2(void *a) {
    (void)a;
    return b_vconv_fwd_(2);
}
static int b_vconv_bwd1(void *a) {
    (void)a;
    return b_vconv_bwd_(1);
}
static int b_vconv_bwd2(void *a) {
    (void)a;
    return b_vconv_bwd_(2);
}
// A layer's three convs as the model makes them (KDA_CONV_V unset: the default versions): q and k
// fused with the L2 norm (C = 256, the fwd's q rstd in crs, k's in crk), v plain (C = 512), as
// three launches (KDA_CONV_QKV=0) and as one (kda_cuda_conv_qkv_*; the model's default forward).
// The three parts are disjoint column blocks of the conv buffers: q [0, 256), k [256, 512), v [512,
// 1024).
static float *crk; // k's rstd [N, H]
static void conv_qkv_parts_(KdaConvQkvFwd f[3], KdaConvQkvBwd b[3]) {
    unsetenv("KDA_CONV_V");
    kda_bf16 *p = z.cp, *y = z.cy, *dp = z.cdp, *dy = z.cdy;
    const int64_t off[3] = {0, (int64_t)N * H * K, (int64_t)N * 2 * H * K};
    const int64_t woff[3] = {0, H * K * W, 2 * H * K * W};
    float *rs[2] = {z.crs, crk}, *dq[2] = {z.dq, z.dk};
    for (int i = 0; i < 3; i++) {
        f[i] = (KdaConvQkvFwd){y + off[i], i < 2 ? rs[i] : NULL, p + off[i], z.cw + woff[i]};
        b[i] = (KdaConvQkvBwd){dp + off[i],          i < 2 ? H * K : H * V,      z.cdw + woff[i],
                               i < 2 ? dq[i] : NULL, i < 2 ? NULL : dy + off[i], p + off[i],
                               z.cw + woff[i],       i < 2 ? rs[i] : NULL};
    }
}
static int b_qkv_fwd3(void *a) {
    (void)a;
    KdaConvQkvFwd f[3];
    KdaConvQkvBwd b[3];
    conv_qkv_parts_(f, b);
    return kda_cuda_conv_qkv_fwd_separate(&g, f, B, T, H * K, H * V, W, K, 1e-6f);
}
static int b_qkv_fwd1(void *a) {
    (void)a;
    KdaConvQkvFwd f[3];
    KdaConvQkvBwd b[3];
    conv_qkv_parts_(f, b);
    return kda_cuda_conv_qkv_fwd(&g, f, B, T, H * K, H * V, W, K, 1e-6f);
}
static int b_qkv_bwd3(void *a) {
    (void)a;
    KdaConvQkvFwd f[3];
    KdaConvQkvBwd b[3];
    conv_qkv_parts_(f, b);
    return kda_cuda_conv_qkv_bwd_separate(&g, b, B, T, H * K, H * V, W, K);
}
static int b_qkv_bwd1(void *a) {
    (void)a;
    KdaConvQkvFwd f[3];
    KdaConvQkvBwd b[3];
    conv_qkv_parts_(f, b);
    return kda_cuda_conv_qkv_bwd(&g, b, B, T, H * K, H * V, W, K);
}
// The same four with the fast SiLU / SiLU' (src/cuda/fast_math.cuh; KDA_FAST_EXP is read at
// every launch; main sets it to 0 so that the other rows run the precise kernels).
static int fast_exp_(int (*fn)(void *)) {
    setenv("KDA_FAST_EXP", "1", 1);
    int rc = fn(NULL);
    setenv("KDA_FAST_EXP", "0", 1);
    return rc;
}
static int b_qkv_fwd3_fx(void *a) {
    (void)a;
    return fast_exp_(b_qkv_fwd3);
}
static int b_qkv_fwd1_fx(void *a) {
    (void)a;
    return fast_exp_(b_qkv_fwd1);
}
static int b_qkv_bwd3_fx(void *a) {
    (void)a;
    return fast_exp_(b_qkv_bwd3);
}
static int b_qkv_bwd1_fx(void *a) {
    (void)a;
    return fast_exp_(b_qkv_bwd1);
}
static int b_beta_fwd(void *a) {
    (void)a;
    return kda_cuda_beta_fwd(&g, z.beta, z.f16, (int64_t)N * H, 1);
}
static int b_beta_bwd(void *a) {
    (void)a;
    return kda_cuda_beta_bwd(&g, z.df16, z.dbeta, z.f16, (int64_t)N * H, 1);
}
static int b_gate_fwd(void *a) {
    (void)a;
    return kda_cuda_gate_cumsum_fwd(&g, z.gcum, z.g, z.f16, z.Alog, z.dtb, B, T, H, K, 64);
}
static int b_gate_bwd(void *a) {
    (void)a;
    return kda_cuda_gate_cumsum_bwd(&g, z.df16, z.dAlog, z.ddtb, z.dg, z.f16, z.Alog, z.dtb, B, T,
                                    H, K, 64, 0);
}
// The model's gate + beta calls (kda_cuda_gate_beta_*: no g output, dg input, db [N, H], the
// model's chunk: the fast path's, 32 at K32 V64) on gate kernel version v (1: gate and beta
// launches, four backward; 2: one forward launch, two backward).
static int b_gate_beta_(int v, int bwd) {
    int v0 = g.gate_version; // the context's (KDA_GATE_V at init), restored after the call
    g.gate_version = v;
    int rc =
        bwd ? kda_cuda_gate_beta_bwd(&g, z.df16, z.dAlog, z.ddtb, z.db16, H, z.dg, z.dbeta, z.f16,
                                     z.b16, z.Alog, z.dtb, B, T, H, K, z.d32.chunk, 0, 1)
            : kda_cuda_gate_beta_fwd(&g, z.gcum, NULL, z.beta, z.f16, z.b16, z.Alog, z.dtb, B, T, H,
                                     K, z.d32.chunk, 1);
    g.gate_version = v0;
    return rc;
}
static int b_gb_fwd1(void *a) {
    (void)a;
    return b_gate_beta_(1, 0);
}
static int b_gb_fwd2(void *a) {
    (void)a;
    return b_gate_beta_(2, 0);
}
static int b_gb_bwd1(void *a) {
    (void)a;
    return b_gate_beta_(1, 1);
}
static int b_gb_bwd2(void *a) {
    (void)a;
    return b_gate_beta_(2, 1);
}
static int b_swiglu_fwd(void *a) {
    (void)a;
    return kda_cuda_swiglu_fwd(&g, z.y16, z.dy16, z.y16, (int64_t)N * I);
}
static int b_kda_fwd(void *a) {
    (void)a;
    return kda_cuda_chunk_fwd(&g, z.o, NULL, z.q, z.k, z.v, z.gcum, z.beta, NULL, &z.d);
}
static int b_kda_bwd(void *a) {
    (void)a;
    return kda_cuda_recurrent_bwd(&g, z.dq, z.dk, z.dv, z.dg, z.dbeta, NULL, z.dO, NULL, z.q, z.k,
                                  z.v, z.g, z.beta, NULL, &z.d);
}
static int b_kda_cbwd(void *a) {
    (void)a;
    return kda_cuda_chunk_bwd(&g, z.dq, z.dk, z.dv, z.dg, z.dbeta, NULL, z.dO, NULL, z.q, z.k, z.v,
                              z.gcum, z.beta, NULL, &z.d);
}
static int b_fast_fwd(void *a) {
    (void)a;
    return kda_cuda_chunk_fwd(&g, z.o, NULL, z.q, z.k, z.v, z.gcum32, z.beta, NULL, &z.d32);
}
static int b_fast_bwd(void *a) {
    (void)a;
    return kda_cuda_chunk_bwd(&g, z.dq, z.dk, z.dv, z.dg, z.dbeta, NULL, z.dO, NULL, z.q, z.k, z.v,
                              z.gcum32, z.beta, NULL, &z.d32);
}
static int b_fast_fwdbwd(void *a) {
    return b_fast_fwd(a) || b_fast_bwd(a);
}
static int b_fast128_fwd(void *a) {
    (void)a;
    return kda_cuda_chunk_fwd(&g, z.o128, NULL, z.q128, z.k128, z.v128, z.gcum128, z.beta, NULL,
                              &z.d128);
}
static int b_fast128_fwdbwd(void *a) {
    (void)a;
    return b_fast128_fwd(a) ||
           kda_cuda_chunk_bwd(&g, z.dq128, z.dk128, z.dv128, z.dg128, z.dbeta, NULL, z.dO128, NULL,
                              z.q128, z.k128, z.v128, z.gcum128, z.beta, NULL, &z.d128);
}
// The tensor-core core (kda_tc.h, the model's default core) on the same inputs and dims as the
// fast rows above; each row runs kernel version tc_ver_ (kda_tc_set_version on g: 4 in the
// 'kda tc ...' rows; 3 in the 'kda tc3 ...' rows; 5, v4 with operands rounded once, in the
// 'kda tc5 ...' rows; 6, v5 with a full chunk's rows at compile time and the model's default
// since 2026-12-04, in the 'kda tc6 ...' rows).
static int tc_ver_ = 4;
static int b_tc_fwd(void *a) {
    (void)a;
    kda_tc_set_version(&g, tc_ver_);
    return kda_tc_fwd(&g, z.o, NULL, z.q, z.k, z.v, z.gcum32, z.beta, NULL, &z.d32);
}
static int b_tc_bwd(void *a) {
    (void)a;
    kda_tc_set_version(&g, tc_ver_);
    return kda_tc_bwd(&g, z.dq, z.dk, z.dv, z.dg, z.dbeta, NULL, z.dO, NULL, z.q, z.k, z.v,
                      z.gcum32, z.beta, NULL, &z.d32);
}
static int b_tc_fwdbwd(void *a) {
    return b_tc_fwd(a) || b_tc_bwd(a);
}
static int b_tc128_fwd(void *a) {
    (void)a;
    kda_tc_set_version(&g, tc_ver_);
    return kda_tc_fwd(&g, z.o128, NULL, z.q128, z.k128, z.v128, z.gcum128, z.beta, NULL, &z.d128);
}
static int b_tc128_bwd(void *a) {
    (void)a;
    kda_tc_set_version(&g, tc_ver_);
    return kda_tc_bwd(&g, z.dq128, z.dk128, z.dv128, z.dg128, z.dbeta, NULL, z.dO128, NULL, z.q128,
                      z.k128, z.v128, z.gcum128, z.beta, NULL, &z.d128);
}
static int b_tc128_fwdbwd(void *a) {
    return b_tc128_fwd(a) || b_tc128_bwd(a);
}
// M0, what the model runs (KDA_CORE_KEEP default): the forward keeps h and Δ, the backward reads
// them and skips its state pass.
static int b_fast_kept(void *a) {
    (void)a;
    return kda_fast_fwd_keep(&g, z.o, NULL, z.q, z.k, z.v, z.gcum32, z.beta, NULL, &z.d32,
                             z.keep) ||
           kda_fast_bwd_kept(&g, z.dq, z.dk, z.dv, z.dg, z.dbeta, NULL, z.dO, NULL, z.q, z.k, z.v,
                             z.gcum32, z.beta, NULL, &z.d32, z.keep);
}
static int b_tc_kept(void *a) {
    (void)a;
    kda_tc_set_version(&g, tc_ver_);
    return kda_tc_fwd_keep(&g, z.o, NULL, z.q, z.k, z.v, z.gcum32, z.beta, NULL, &z.d32, z.keep) ||
           kda_tc_bwd_kept(&g, z.dq, z.dk, z.dv, z.dg, z.dbeta, NULL, z.dO, NULL, z.q, z.k, z.v,
                           z.gcum32, z.beta, NULL, &z.d32, z.keep);
}
static int b_tc128_kept(void *a) {
    (void)a;
    kda_tc_set_version(&g, tc_ver_);
    return kda_tc_fwd_keep(&g, z.o128, NULL, z.q128, z.k128, z.v128, z.gcum128, z.beta, NULL,
                           &z.d128, z.keep128) ||
           kda_tc_bwd_kept(&g, z.dq128, z.dk128, z.dv128, z.dg128, z.dbeta, NULL, z.dO128, NULL,
                           z.q128, z.k128, z.v128, z.gcum128, z.beta, NULL, &z.d128, z.keep128);
}
// The same with the copies done without cp.async (KDA_TC_ASYNC=0): what the prefetch buys.
static int b_tc_kept_sync(void *a) {
    setenv("KDA_TC_ASYNC", "0", 1);
    int rc = b_tc_kept(a);
    unsetenv("KDA_TC_ASYNC");
    return rc;
}
// The 'kda tc3 ...', 'kda tc5 ...' and 'kda tc6 ...' rows: the same calls on kernel version 3, 5
// or 6 (5 and 6 at K 32 / V 64 only: other dims run v4).
#define TCV_(name, v)                                                                              \
    static int name##v(void *a) {                                                                  \
        tc_ver_ = v;                                                                               \
        int rc = name(a);                                                                          \
        tc_ver_ = 4;                                                                               \
        return rc;                                                                                 \
    }
TCV_(b_tc_fwd, 3)
TCV_(b_tc_bwd, 3)
TCV_(b_tc_fwdbwd, 3)
TCV_(b_tc_kept, 3)
TCV_(b_tc_kept_sync, 3)
TCV_(b_tc128_fwd, 3)
TCV_(b_tc128_bwd, 3)
TCV_(b_tc128_fwdbwd, 3)
TCV_(b_tc128_kept, 3)
TCV_(b_tc_fwd, 5)
TCV_(b_tc_bwd, 5)
TCV_(b_tc_fwdbwd, 5)
TCV_(b_tc_kept, 5)
TCV_(b_tc_fwd, 6)
TCV_(b_tc_bwd, 6)
TCV_(b_tc_fwdbwd, 6)
TCV_(b_tc_kept, 6)
static int b_adamw(void *a) {
    (void)a;
    return kda_cuda_adamw(&g, z.p, z.pb, z.grad, z.m, z.vv, NPARAM, &z.s, NULL);
}
static int b_norm(void *a) {
    (void)a;
    return kda_cuda_grad_norm(&g, z.norm, z.grad, NPARAM);
}

int main(void) {
    KdaError err = {{0}};
    // the rows not named fast-exp: the precise kernels (the fast ones are the model's default)
    setenv("KDA_FAST_EXP", "0", 1);
    if (kda_cuda_init(&g, 0, &err)) {
        fprintf(stderr, "bench_gpu: %s\n", err.msg);
        return 1;
    }
    printf("%s, %d SMs, peak bf16 %.0f TFLOP/s\n", g.info.name, g.info.sm_count,
           g.info.peak_bf16_flops / 1e12);
    KdaRng r;
    rng_seed(&r, 7);
    z.x16 = rand_buf_(&r, (int64_t)N * D, 2, 0, 1),
    z.w16 = rand_buf_(&r, (int64_t)I * D, 2, 0, .02f);
    z.dy16 = rand_buf_(&r, (int64_t)N * I, 2, 0, 1), z.y16 = rand_buf_(&r, (int64_t)N * I, 2, 0, 1);
    z.wf = rand_buf_(&r, (int64_t)I * D, 4, 0, 1), z.dxf = rand_buf_(&r, (int64_t)N * D, 4, 0, 1);
    z.res = rand_buf_(&r, (int64_t)N * D, 4, 0, 1), z.rstd = rand_buf_(&r, N, 4, 1, .1f);
    z.dwf = rand_buf_(&r, D, 4, 0, 1), z.normw = rand_buf_(&r, D, 4, 1, .1f);
    z.rdy = rand_buf_(&r, (int64_t)N * D, 4, 0, 1);
    z.dwf2 = rand_buf_(&r, 2 * D, 4, 0, 1), z.normw2 = rand_buf_(&r, 2 * D, 4, 1, .1f);
    z.cp = rand_buf_(&r, (int64_t)N * 1024, 2, 0, 1),
    z.cy = rand_buf_(&r, (int64_t)N * 1024, 2, 0, 1);
    z.cdy = rand_buf_(&r, (int64_t)N * 1024, 2, 0, 1),
    z.cdp = rand_buf_(&r, (int64_t)N * 1024, 2, 0, 1);
    z.cw = rand_buf_(&r, 1024 * W, 4, 0, .3f), z.cdw = rand_buf_(&r, 1024 * W, 4, 0, 1);
    z.crs = rand_buf_(&r, (int64_t)N * H, 4, 1, .1f);
    crk = rand_buf_(&r, (int64_t)N * H, 4, 1, .1f);
    int64_t nqk = (int64_t)N * H * K, nv = (int64_t)N * H * V;
    z.q = rand_buf_(&r, nqk, 2, 0, .18f), z.k = rand_buf_(&r, nqk, 2, 0, .18f);
    z.v = rand_buf_(&r, nv, 2, 0, 1), z.o = rand_buf_(&r, nv, 2, 0, 1),
    z.dO = rand_buf_(&r, nv, 2, 0, 1);
    z.f16 = rand_buf_(&r, nqk, 2, 0, 1), z.df16 = rand_buf_(&r, nqk, 2, 0, 1);
    z.gcum = rand_buf_(&r, nqk, 4, 0, 1), z.g = rand_buf_(&r, nqk, 4, -0.05f, 0.01f);
    z.beta = rand_buf_(&r, (int64_t)N * H, 4, 0.5f, 0.1f);
    z.Alog = rand_buf_(&r, H, 4, 1, .5f), z.dtb = rand_buf_(&r, H * K, 4, -3, 1);
    z.dAlog = rand_buf_(&r, H, 4, 0, 1), z.ddtb = rand_buf_(&r, H * K, 4, 0, 1);
    z.dq = rand_buf_(&r, nqk, 4, 0, 1), z.dk = rand_buf_(&r, nqk, 4, 0, 1),
    z.dg = rand_buf_(&r, nqk, 4, 0, 1);
    z.dbeta = rand_buf_(&r, (int64_t)N * H, 4, 0, 1), z.dv = rand_buf_(&r, nv, 2, 0, 1);
    z.b16 = rand_buf_(&r, (int64_t)N * H, 2, 0, 2), z.db16 = rand_buf_(&r, (int64_t)N * H, 2, 0, 1);
    z.d = (KdaDims){B, T, H, H, K, V, 0.17677670f, 64};
    int64_t C32 = kda_fast_chunk(K, V, g.info.smem_per_block_optin);
    z.d32 = z.d, z.d32.chunk = C32;
    // the gate's cumsum for the KDA forward: real log-decays
    z.gcum32 = rand_buf_(&r, nqk, 4, 0, 1);
    z.keep = rand_buf_(&r, (int64_t)kda_tc_keep_floats(&z.d32), 4, 0, 1);
    if (kda_cuda_gate_cumsum_fwd(&g, z.gcum32, z.g, z.f16, z.Alog, z.dtb, B, T, H, K, C32))
        die_("gate 32");
    if (b_gate_fwd(NULL) || kda_cuda_sync(&g)) die_("gate");
    // K = V = 128 (same token-heads): q/k/v/o/dO and gradients; the gate cumsum is summed over
    // the chunk the fast path picks for these dims
    int64_t n128 = (int64_t)N * H * 128;
    z.d128 = (KdaDims){
        B, T, H, H, 128, 128, 0.08838835f, kda_fast_chunk(128, 128, g.info.smem_per_block_optin)};
    z.q128 = rand_buf_(&r, n128, 2, 0, .09f), z.k128 = rand_buf_(&r, n128, 2, 0, .09f);
    z.v128 = rand_buf_(&r, n128, 2, 0, 1), z.o128 = rand_buf_(&r, n128, 2, 0, 1);
    z.dO128 = rand_buf_(&r, n128, 2, 0, 1), z.dv128 = rand_buf_(&r, n128, 2, 0, 1);
    z.gcum128 = rand_buf_(&r, n128, 4, 0, 1), z.dq128 = rand_buf_(&r, n128, 4, 0, 1);
    z.dk128 = rand_buf_(&r, n128, 4, 0, 1), z.dg128 = rand_buf_(&r, n128, 4, 0, 1);
    {
        float *g128 = rand_buf_(&r, n128, 4, -0.05f, 0.01f);
        void *f128 = rand_buf_(&r, n128, 2, 0, 1);
        float *dtb128 = rand_buf_(&r, H * 128, 4, -3, 1);
        if (kda_cuda_gate_cumsum_fwd(&g, z.gcum128, g128, f128, z.Alog, dtb128, B, T, H, 128,
                                     z.d128.chunk))
            die_("gate 128");
    }
    z.keep128 = rand_buf_(&r, (int64_t)kda_tc_keep_floats(&z.d128), 4, 0, 1);
    printf("fast path chunk: %lld (K32 V64), %lld (K128 V128)\n", (long long)C32,
           (long long)z.d128.chunk);
    double th = (double)B * T * H; // token-heads
    struct {
        const char *name;
        BenchFn fn;
        double bytes, flops;
        int kda;
    } rows[] = {
        {"gemm fwd  32768x1024 -> 4096 bf16", b_gemm_fwd, 0, 2.0 * N * D * I, 0},
        {"gemm dx   32768x4096 -> 1024 fp32+=", b_gemm_dx, 0, 2.0 * N * D * I, 0},
        {"gemm dW   4096x1024 += over 32768", b_gemm_dw, 0, 2.0 * N * D * I, 0},
        {"rmsnorm fwd 32768x1024", b_rms_fwd, (double)N * D * 6, 0, 0},
        {"rmsnorm bwd 32768x1024", b_rms_bwd, (double)N * D * 16, 0, 0},
        {"rmsnorm bwd 32768x1024 acc+bf16 (model)", b_rms_bwd_1k_model, (double)N * D * 18, 0, 0},
        {"rmsnorm fwd 16384x2048", b_rms_fwd_2k, (double)N * D * 6, 0, 0},
        {"rmsnorm fwd 16384x2048 loop", b_rms_fwd_2k_loop, (double)N * D * 6, 0, 0},
        {"rmsnorm bwd 16384x2048 acc+bf16 (model)", b_rms_bwd_2k, (double)N * D * 18, 0, 0},
        {"rmsnorm bwd 16384x2048 acc+bf16 loop", b_rms_bwd_2k_loop, (double)N * D * 18, 0, 0},
        {"conv+silu fwd 16x2048x1024", b_conv_fwd, (double)N * 1024 * 4, 0, 0},
        {"conv+silu bwd 16x2048x1024", b_conv_bwd, (double)N * 1024 * 6, 0, 0},
        {"conv+silu+l2 q fwd v1 16x2048x256", b_qconv_fwd1, (double)N * (256 * 4 + H * 4), 0, 0},
        {"conv+silu+l2 q fwd v2 16x2048x256", b_qconv_fwd2, (double)N * (256 * 4 + H * 4), 0, 0},
        {"conv+silu+l2 q bwd v1 16x2048x256", b_qconv_bwd1, (double)N * (256 * 8 + H * 4), 0, 0},
        {"conv+silu+l2 q bwd v2 16x2048x256", b_qconv_bwd2, (double)N * (256 * 8 + H * 4), 0, 0},
        {"conv+silu v fwd v1 16x2048x512", b_vconv_fwd1, (double)N * 512 * 4, 0, 0},
        {"conv+silu v fwd v2 16x2048x512", b_vconv_fwd2, (double)N * 512 * 4, 0, 0},
        {"conv+silu v bwd v1 16x2048x512", b_vconv_bwd1, (double)N * 512 * 6, 0, 0},
        {"conv+silu v bwd v2 16x2048x512", b_vconv_bwd2, (double)N * 512 * 6, 0, 0},
        {"conv q|k|v fwd 3 launches 16x2048", b_qkv_fwd3, (double)N * (1024 * 4 + 2 * H * 4), 0, 0},
        {"conv q|k|v fwd 1 launch 16x2048", b_qkv_fwd1, (double)N * (1024 * 4 + 2 * H * 4), 0, 0},
        {"conv q|k|v bwd 3 launches 16x2048", b_qkv_bwd3,
         (double)N * (512 * 8 + 512 * 6 + 2 * H * 4), 0, 0},
        {"conv q|k|v bwd 1 launch 16x2048", b_qkv_bwd1, (double)N * (512 * 8 + 512 * 6 + 2 * H * 4),
         0, 0},
        {"conv q|k|v fwd 3 launches fast-exp 16x2048", b_qkv_fwd3_fx,
         (double)N * (1024 * 4 + 2 * H * 4), 0, 0},
        {"conv q|k|v fwd 1 launch fast-exp 16x2048", b_qkv_fwd1_fx,
         (double)N * (1024 * 4 + 2 * H * 4), 0, 0},
        {"conv q|k|v bwd 3 launches fast-exp 16x2048", b_qkv_bwd3_fx,
         (double)N * (512 * 8 + 512 * 6 + 2 * H * 4), 0, 0},
        {"conv q|k|v bwd 1 launch fast-exp 16x2048", b_qkv_bwd1_fx,
         (double)N * (512 * 8 + 512 * 6 + 2 * H * 4), 0, 0},
        {"beta fwd 16x2048x8", b_beta_fwd, (double)N * H * 6, 0, 0},
        {"beta bwd 16x2048x8", b_beta_bwd, (double)N * H * 8, 0, 0},
        {"gate+cumsum fwd 16x2048x8x32", b_gate_fwd, (double)N * 256 * 10, 0, 0},
        {"gate bwd 16x2048x8x32", b_gate_bwd, (double)N * 256 * 6, 0, 0},
        {"gate+beta fwd v1 16x2048x8x32 (model)", b_gb_fwd1, (double)N * (256 * 6 + H * 6), 0, 0},
        {"gate+beta fwd v2 16x2048x8x32 (model)", b_gb_fwd2, (double)N * (256 * 6 + H * 6), 0, 0},
        {"gate+beta bwd v1 16x2048x8x32 (model)", b_gb_bwd1, (double)N * (256 * 8 + H * 8), 0, 0},
        {"gate+beta bwd v2 16x2048x8x32 (model)", b_gb_bwd2, (double)N * (256 * 8 + H * 8), 0, 0},
        {"swiglu fwd 32768x4096", b_swiglu_fwd, (double)N * I * 6, 0, 0},
        {"kda fast fwd 16x2048 H8 K32 V64", b_fast_fwd, 0, 0, 1},
        {"kda fast bwd 16x2048 H8 K32 V64", b_fast_bwd, 0, 0, 1},
        {"kda fast fwd+bwd 16x2048 H8 K32 V64", b_fast_fwdbwd, 0, 0, 1},
        {"kda fast fwd 16x2048 H8 K128 V128", b_fast128_fwd, 0, 0, 1},
        {"kda fast fwd+bwd 16x2048 H8 K128 V128", b_fast128_fwdbwd, 0, 0, 1},
        {"kda fast fwd+bwd kept 16x2048 H8 K32 V64", b_fast_kept, 0, 0, 1},
        {"kda tc3 fwd 16x2048 H8 K32 V64", b_tc_fwd3, 0, 0, 1},
        {"kda tc fwd 16x2048 H8 K32 V64", b_tc_fwd, 0, 0, 1},
        {"kda tc5 fwd 16x2048 H8 K32 V64", b_tc_fwd5, 0, 0, 1},
        {"kda tc6 fwd 16x2048 H8 K32 V64", b_tc_fwd6, 0, 0, 1},
        {"kda tc3 bwd 16x2048 H8 K32 V64", b_tc_bwd3, 0, 0, 1},
        {"kda tc bwd 16x2048 H8 K32 V64", b_tc_bwd, 0, 0, 1},
        {"kda tc5 bwd 16x2048 H8 K32 V64", b_tc_bwd5, 0, 0, 1},
        {"kda tc6 bwd 16x2048 H8 K32 V64", b_tc_bwd6, 0, 0, 1},
        {"kda tc3 fwd+bwd 16x2048 H8 K32 V64", b_tc_fwdbwd3, 0, 0, 1},
        {"kda tc fwd+bwd 16x2048 H8 K32 V64", b_tc_fwdbwd, 0, 0, 1},
        {"kda tc5 fwd+bwd 16x2048 H8 K32 V64", b_tc_fwdbwd5, 0, 0, 1},
        {"kda tc6 fwd+bwd 16x2048 H8 K32 V64", b_tc_fwdbwd6, 0, 0, 1},
        {"kda tc3 fwd+bwd kept 16x2048 H8 K32 V64", b_tc_kept3, 0, 0, 1},
        {"kda tc fwd+bwd kept 16x2048 H8 K32 V64", b_tc_kept, 0, 0, 1},
        {"kda tc5 fwd+bwd kept 16x2048 H8 K32 V64", b_tc_kept5, 0, 0, 1},
        {"kda tc6 fwd+bwd kept 16x2048 H8 K32 V64", b_tc_kept6, 0, 0, 1},
        {"kda tc3 fwd+bwd kept sync 16x2048 H8 K32 V64", b_tc_kept_sync3, 0, 0, 1},
        {"kda tc fwd+bwd kept sync 16x2048 H8 K32 V64", b_tc_kept_sync, 0, 0, 1},
        {"kda tc3 fwd 16x2048 H8 K128 V128", b_tc128_fwd3, 0, 0, 1},
        {"kda tc fwd 16x2048 H8 K128 V128", b_tc128_fwd, 0, 0, 1},
        {"kda tc3 bwd 16x2048 H8 K128 V128", b_tc128_bwd3, 0, 0, 1},
        {"kda tc bwd 16x2048 H8 K128 V128", b_tc128_bwd, 0, 0, 1},
        {"kda tc3 fwd+bwd 16x2048 H8 K128 V128", b_tc128_fwdbwd3, 0, 0, 1},
        {"kda tc fwd+bwd 16x2048 H8 K128 V128", b_tc128_fwdbwd, 0, 0, 1},
        {"kda tc3 fwd+bwd kept 16x2048 H8 K128 V128", b_tc128_kept3, 0, 0, 1},
        {"kda tc fwd+bwd kept 16x2048 H8 K128 V128", b_tc128_kept, 0, 0, 1},
        {"kda v1 chunk fwd 16x2048 H8 K32 V64", b_kda_fwd, 0, 0, 1},
        {"kda v1 recurrent bwd 16x2048 H8 K32 V64", b_kda_bwd, 0, 0, 1},
        {"kda v1 chunk bwd 16x2048 H8 K32 V64", b_kda_cbwd, 0, 0, 1},
    };
    printf("%-40s %10s %12s\n", "kernel", "ms", "rate");
    BenchNvml nvml;
    int energy = getenv("KDA_BENCH_ENERGY") && bench_energy_open(&nvml, g.device);
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        float ms = time_ms_(rows[i].fn, NULL);
        if (rows[i].kda)
            printf("%-40s %10.3f %9.2f ns/token-head\n", rows[i].name, ms, ms * 1e6 / th);
        else if (rows[i].flops > 0)
            printf("%-40s %10.3f %9.1f TFLOP/s\n", rows[i].name, ms, rows[i].flops / ms / 1e9);
        else
            printf("%-40s %10.3f %9.0f GB/s\n", rows[i].name, ms, rows[i].bytes / ms / 1e6);
        if (energy && bench_energy_wanted(rows[i].name)) { // KDA_BENCH_ENERGY: bench_energy.h
            BenchEnergy e = bench_energy_run(&nvml, rows[i].fn, NULL);
            bench_energy_print("sustained", &e);
        }
    }
    // Per-kernel breakdown of the fast path and of the tensor-core path, v3, v4, v5 then v6, plain
    // forms (kda_fast_profile / kda_tc_profile: min of 10, own inputs; v4's backward intra is the
    // forward's form and its reverse state pass includes dΔ_intra), then the tensor-core kept
    // forms (kda_tc_profile_kept: what the model runs); v5 and v6 at K 32 / V 64 only (elsewhere
    // they are v4)
    for (int path = 0; path < 9; path++) {
        static const char *names[8] = {
            "fwd intra",         "fwd state", "fwd output", "bwd intra", "bwd state (recompute)",
            "bwd reverse state", "bwd main",  "bwd gva sum"};
        static const char *kept_names[8] = {
            "fwd intra",         "fwd state", "fwd output",  "bwd ddi",
            "bwd reverse state", "bwd main",  "bwd gva sum", "-"};
        static const char *paths[9] = {"fast",       "tc v3",      "tc v4",
                                       "tc v5",      "tc v6",      "tc v3 kept",
                                       "tc v4 kept", "tc v5 kept", "tc v6 kept"};
        KdaDims dd[2] = {z.d32, z.d128};
        const int ver = path > 0 ? 3 + (path - 1) % 4 : 0, kept = path >= 5;
        for (int s = 0; s < 2; s++) {
            float kms[8];
            if (path > 0 && !kda_tc_supported(&dd[s], g.info.smem_per_block_optin)) continue;
            if (ver >= 5 && kda_tc_bwd_main_version(ver, &dd[s]) != ver) continue;
            if (path > 0) kda_tc_set_version(&g, ver);
            int rc = path == 0 ? kda_fast_profile(&g, &dd[s], 10, kms)
                     : !kept   ? kda_tc_profile(&g, &dd[s], 10, kms)
                               : kda_tc_profile_kept(&g, &dd[s], 10, kms);
            if (rc) die_("profile");
            printf("%s path per kernel, K%lld V%lld chunk %lld:\n", paths[path], (long long)dd[s].K,
                   (long long)dd[s].V, (long long)dd[s].chunk);
            float sum = 0.0f;
            for (int i = 0; i < (kept ? 7 : 8); i++) {
                printf("  %-28s %8.3f ms %7.2f ns/token-head\n", kept ? kept_names[i] : names[i],
                       kms[i], kms[i] * 1e6 / th);
                sum += kms[i];
            }
            printf("  %-28s %8.3f ms\n", "sum", sum);
        }
    }
    kda_tc_set_version(&g, 4);
    // AdamW and grad norm over 300M fp32 parameters (separate buffers, allocated last)
    z.p = rand_buf_(&r, NPARAM, 4, 0, .02f), z.grad = rand_buf_(&r, NPARAM, 4, 0, 1e-3f);
    z.m = rand_buf_(&r, NPARAM, 4, 0, 1e-3f), z.vv = rand_buf_(&r, NPARAM, 4, 1e-6f, 1e-7f);
    z.pb = rand_buf_(&r, NPARAM, 2, 0, 1);
    z.norm = kda_cuda_alloc(&g, 8);
    z.s = kda_cuda_adam_scalars(0.9, 0.95, 1e-8, 0.01, 10, 2e-4);
    float ms = time_ms_(b_adamw, NULL);
    printf("%-40s %10.3f %9.0f GB/s\n", "adamw 300M (p,g,m,v fp32 + bf16 copy)", ms,
           (double)NPARAM * 30 / ms / 1e6);
    ms = time_ms_(b_norm, NULL);
    printf("%-40s %10.3f %9.0f GB/s\n", "grad norm 300M fp32", ms, (double)NPARAM * 4 / ms / 1e6);
    kda_cuda_free(&g);
    return 0;
}
