// test_gpu_ops.c - the CUDA kernels of src/cuda (GEMM, norms, conv, gate, beta, SwiGLU,
// embedding, AdamW, grad norm) against their CPU twins, on the GPU (`make test-gpu`).
//
// Method: fresh random inputs for every shape; inputs that the GPU reads as bf16 are rounded to
// bf16 first and the CPU twin gets the same rounded values, so the comparison measures only the
// GPU's arithmetic and the rounding of its outputs. Every GPU output is poisoned with NaN
// (0xFF bytes) before the launch; NaN never passes, so an unwritten element fails.
// Metric (kda-model.md §6.6): rel = RMS(ref - out) / RMS(ref).
// Tolerances:
//   * bf16 outputs: rel <= 1e-2. Rounding an exact value to bf16 alone gives rel ~ 2e-3
//     (8 significand bits: 2^-9 relative half-ulp, RMS ~ 0.6 of it), so 1e-2 leaves room only
//     for fp32 noise on top, not for a wrong formula (those show at rel >= 1e-1).
//   * fp32 outputs: rel <= 1e-5. Both sides compute in fp32 in different orders (warp
//     reductions vs serial loops, FMA vs separate multiply-add on the GPU): ~1e-7 per op, up to
//     ~1e-6 for sums of thousands of terms (the CPU twins sum some weight gradients in fp32).
//   * AdamW, embedding, grad norm: the GPU does the same operations in the same order, so these
//     are held to ~exact (see each test).
// Shapes sweep T = 1, 63, 64, 65, 2048 (chunk edges of 64) and small and large rows.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_case.h" // defines: kda_case_chunk_cumsums, kda_case_expect_rel
#include "test.h"

#ifdef KDA_HAVE_CUDA

#include "core/rng.h"           // defines: KdaRng, rng_normal, rng_uniform, rng_below
#include "core/util.h"          // defines: bf16_to_f32, f32_to_bf16
#include "cpu/gemm.h"           // defines: gemm_fwd, gemm_bwd_dx, gemm_bwd_dw
#include "cpu/kda_core.h"       // defines: kda_gate_*, kda_beta_*, kda_l2norm_*
#include "cpu/conv.h"           // defines: conv_silu_*
#include "cpu/embed.h"          // defines: embed_fwd, embed_bwd
#include "cpu/norm.h"           // defines: rmsnorm_*, gnorm_*
#include "cpu/swiglu.h"         // defines: swiglu_fwd, swiglu_bwd
#include "cuda/conv_cuda.h"     // defines: kda_cuda_conv_silu_*
#include "cuda/embed_cuda.h"    // defines: kda_cuda_embed_fwd, kda_cuda_embed_bwd
#include "cuda/gemm_cuda.h"     // defines: kda_cuda_gemm_*, kda_cuda_bias_*, kda_cuda_cols_*
#include "cuda/kda_gate_cuda.h" // defines: kda_cuda_gate_cumsum_*, _beta_*, _l2norm_*
#include "cuda/norm_cuda.h"     // defines: kda_cuda_rmsnorm_*, kda_cuda_gnorm_*
#include "cuda/optim_cuda.h"    // defines: kda_cuda_adamw, kda_cuda_grad_norm, kda_cuda_clip_coef
#include "cuda/swiglu_cuda.h"   // defines: kda_cuda_swiglu_*
#include "model/params.h"       // defines: KdaParamTable, KdaParamInfo
#include "model/optim.h"        // defines: kda_adamw_*, kda_grad_norm, kda_grad_clip
#include "gpu_ctx.h"            // defines: GpuEnv, gpu_env_set, gpu_env_restore

#define TOL_BF16 1e-2
#define TOL_F32  1e-5

static const int64_t T_SWEEP[] = {1, 63, 64, 65, 2048};
#define N_T_SWEEP 5

// ---- one context for the whole suite; device buffers freed at the end of each test -------------

static KdaCudaCtx g_ctx;
static int g_ctx_state; // 0 untried, 1 ready, -1 failed

static KdaCudaCtx *gpu_(void) {
    if (g_ctx_state == 0) {
        KdaError err = {{0}};
        if (kda_cuda_device_count() < 1) {
            g_ctx_state = -1;
        } else if (kda_cuda_init(&g_ctx, 0, &err) == 0) {
            g_ctx_state = 1;
        } else {
            fprintf(stderr, "cuda init: %s\n", err.msg);
            g_ctx_state = -1;
        }
    }
    CHECK_MSG(g_ctx_state == 1, "no usable CUDA device (GPU tests need one)");
    return g_ctx_state == 1 ? &g_ctx : NULL;
}

#define MAX_DEV 64
static void *g_dev[MAX_DEV];
static int g_ndev;

static void *dalloc_(size_t bytes) {
    KDA_ASSERT(g_ndev < MAX_DEV);
    void *p = kda_cuda_alloc(&g_ctx, bytes);
    KDA_ASSERT(p);
    g_dev[g_ndev++] = p;
    return p;
}

static void dfree_all_(void) {
    kda_cuda_sync(&g_ctx);
    for (int i = 0; i < g_ndev; i++)
        kda_cuda_release(g_dev[i]);
    g_ndev = 0;
}

// Host copies go to the device; poisoned outputs are allocated filled with NaN.
static float *dev_f32_(const float *h, int64_t n) {
    float *d = dalloc_((size_t)n * sizeof(float));
    KDA_ASSERT(kda_cuda_put_f32(&g_ctx, d, h, n) == 0);
    return d;
}
static kda_bf16 *dev_bf16_(const float *h, int64_t n) {
    kda_bf16 *d = dalloc_((size_t)n * sizeof(kda_bf16));
    KDA_ASSERT(kda_cuda_put_bf16(&g_ctx, d, h, n) == 0);
    return d;
}
static void *dev_poison_(size_t bytes) {
    void *d = dalloc_(bytes);
    KDA_ASSERT(kda_cuda_poison(&g_ctx, d, bytes) == 0);
    return d;
}

static float *get_f32_(const float *d, int64_t n) {
    float *h = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    CHECK_MSG(kda_cuda_get_f32(&g_ctx, h, d, n) == 0, "%s", g_ctx.err.msg);
    return h;
}
static float *get_bf16_(const kda_bf16 *d, int64_t n) {
    float *h = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    CHECK_MSG(kda_cuda_get_bf16(&g_ctx, h, d, n) == 0, "%s", g_ctx.err.msg);
    return h;
}

// ---- host data
// -----------------------------------------------------------------------------------

static float *randn_(KdaRng *r, int64_t n, float std) {
    float *x = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        x[i] = rng_normal(r, 0.0f, std);
    return x;
}

// Rounds to bf16 in place: the values the GPU will see.
static float *bf16r_(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        x[i] = bf16_to_f32(f32_to_bf16(x[i]));
    return x;
}

static float *copy_(const float *x, int64_t n) {
    float *y = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    memcpy(y, x, (size_t)n * sizeof(float));
    return y;
}

// Checks and prints one comparison (the log shows every kernel's error): the strict rel-RMS
// check, under the short name this file's many comparisons use.
static void expect_(const char *what, const float *ref, const float *out, int64_t n, double tol) {
    kda_case_expect_rel(what, ref, out, n, tol);
}

static int ok_(int rc) {
    CHECK_MSG(rc == 0, "cuda: %s", g_ctx.err.msg);
    if (rc) kda_cuda_clear_error(&g_ctx);
    return rc == 0;
}

// ---- tests
// ---------------------------------------------------------------------------------------

KDA_TEST_GPU(gpu_device_info) {
    KdaCudaCtx *c = gpu_();
    if (!c) return;
    const KdaCudaDeviceInfo *d = &c->info;
    printf("    %s: cc %d.%d, %d SMs, clock %d MHz, %.1f GiB (%.1f free), L2 %.0f MiB, "
           "peak bf16 %.1f TFLOP/s\n",
           d->name, d->cc_major, d->cc_minor, d->sm_count, d->clock_khz / 1000,
           d->mem_total / 1073741824.0, d->mem_free / 1073741824.0, d->l2_bytes / 1048576.0,
           d->peak_bf16_flops / 1e12);
    CHECK(d->sm_count > 0);
    CHECK(d->mem_total > 0);
    // An invalid launch argument must come back as an error with file:line and the call text.
    CHECK(kda_cuda_rmsnorm_fwd(c, NULL, NULL, NULL, NULL, 4, 0, 1e-6f) == -1);
    CHECK(strstr(c->err.msg, "norm_cuda.cu:") != NULL);
    kda_cuda_clear_error(c);
}

static void gemm_case_(KdaRng *r, int64_t N, int64_t in, int64_t out) {
    char what[96];
    float *x = bf16r_(randn_(r, N * in, 1.0f), N * in);
    float *W = bf16r_(randn_(r, out * in, 0.05f), out * in);
    float *dy = bf16r_(randn_(r, N * out, 1.0f), N * out);
    float *y0 = randn_(r, N * out, 1.0f), *dx0 = randn_(r, N * in, 1.0f);
    float *dW0 = randn_(r, out * in, 1.0f);
    kda_bf16 *dx_ = dev_bf16_(x, N * in), *dW_ = dev_bf16_(W, out * in);
    kda_bf16 *ddy = dev_bf16_(dy, N * out);
    // forward: bf16 out (overwrite), fp32 out (accumulate into y0)
    kda_bf16 *yb = dev_poison_((size_t)(N * out) * 2);
    float *yf = dev_f32_(y0, N * out), *dxf = dev_f32_(dx0, N * in);
    kda_bf16 *dxb = dev_poison_((size_t)(N * in) * 2);
    float *dWf = dev_f32_(dW0, out * in);
    ok_(kda_cuda_gemm_fwd(&g_ctx, yb, KDA_DT_BF16, dx_, dW_, N, in, out, 0));
    ok_(kda_cuda_gemm_fwd(&g_ctx, yf, KDA_DT_F32, dx_, dW_, N, in, out, 1));
    ok_(kda_cuda_gemm_bwd_dx(&g_ctx, dxb, KDA_DT_BF16, ddy, dW_, N, in, out, 0));
    ok_(kda_cuda_gemm_bwd_dx(&g_ctx, dxf, KDA_DT_F32, ddy, dW_, N, in, out, 1));
    ok_(kda_cuda_gemm_bwd_dw(&g_ctx, dWf, ddy, dx_, N, in, out));
    float *y = malloc((size_t)(N * out) * sizeof(float)), *dxr = malloc((size_t)(N * in) * 4);
    gemm_fwd(y, x, W, NULL, N, in, out, 0);
    gemm_bwd_dx(dxr, dy, W, N, in, out, 0);
    float *yacc = copy_(y0, N * out), *dxacc = copy_(dx0, N * in), *dWr = copy_(dW0, out * in);
    gemm_fwd(yacc, x, W, NULL, N, in, out, 1);
    gemm_bwd_dx(dxacc, dy, W, N, in, out, 1);
    gemm_bwd_dw(dWr, NULL, dy, x, N, in, out);
    float *g1 = get_bf16_(yb, N * out), *g2 = get_f32_(yf, N * out);
    float *g3 = get_bf16_(dxb, N * in), *g4 = get_f32_(dxf, N * in), *g5 = get_f32_(dWf, out * in);
    snprintf(what, sizeof what, "gemm %lldx%lldx%lld y bf16", (long long)N, (long long)in,
             (long long)out);
    expect_(what, y, g1, N * out, TOL_BF16);
    snprintf(what, sizeof what, "gemm %lldx%lldx%lld y += fp32", (long long)N, (long long)in,
             (long long)out);
    expect_(what, yacc, g2, N * out, TOL_F32);
    expect_("  dx bf16", dxr, g3, N * in, TOL_BF16);
    expect_("  dx += fp32", dxacc, g4, N * in, TOL_F32);
    expect_("  dW += fp32", dWr, g5, out * in, TOL_F32);
    // bias: y (bf16) += bias; dbias += Σ_rows dy (the CPU twin: gemm_fwd / gemm_bwd_dw's bias)
    float *bias = randn_(r, out, 1.0f), *db0 = randn_(r, out, 1.0f), *dbr = copy_(db0, out);
    float *yb_h = get_bf16_(yb, N * out), *ybias = malloc((size_t)(N * out) * 4);
    for (int64_t i = 0; i < N * out; i++)
        ybias[i] = yb_h[i] + bias[i % out];
    float *dWdummy = calloc((size_t)(out * in), sizeof(float));
    gemm_bwd_dw(dWdummy, dbr, dy, x, N, in, out);
    float *dbias = dev_f32_(bias, out), *ddb = dev_f32_(db0, out);
    ok_(kda_cuda_bias_add(&g_ctx, yb, dbias, N, out));
    ok_(kda_cuda_bias_bwd(&g_ctx, ddb, ddy, N, out));
    float *g6 = get_bf16_(yb, N * out), *g7 = get_f32_(ddb, out);
    expect_("  bias add bf16", ybias, g6, N * out, TOL_BF16);
    expect_("  dbias += fp32", dbr, g7, out, TOL_F32);
    free(bias), free(db0), free(dbr), free(yb_h), free(ybias), free(dWdummy), free(g6), free(g7);
    free(x), free(W), free(dy), free(y0), free(dx0), free(dW0), free(y), free(dxr), free(yacc);
    free(dxacc), free(dWr), free(g1), free(g2), free(g3), free(g4), free(g5);
    dfree_all_();
}

KDA_TEST_GPU(gpu_gemm) {
    if (!gpu_()) return;
    KdaRng r;
    rng_seed(&r, 101);
    gemm_case_(&r, 1, 32, 64);
    gemm_case_(&r, 63, 1024, 96);
    gemm_case_(&r, 65, 96, 1024);
    gemm_case_(&r, 64, 33, 17); // odd sizes: no 16-byte alignment of rows
    gemm_case_(&r, 2048, 1024, 1024);
}

// KDA_GEMM_TUNE=1 (ctx->gemm_tune): each new plan times cuBLASLt's candidates on its first
// repeatable call and keeps the fastest: the products stay right (gemm_case_'s tolerances:
// another algorithm only reorders fp32 sums); kda_cuda_gemm_probe reports >= 1 candidate, the
// heuristic's first with a finite positive time, and refuses an in-place beta = 1 product.
KDA_TEST_GPU(gpu_gemm_tune) {
    if (!gpu_()) return;
    KdaRng r;
    rng_seed(&r, 103);
    g_ctx.gemm_tune = 1;
    gemm_case_(&r, 300, 160, 96); // shapes no other test caches first
    gemm_case_(&r, 2050, 1160, 1024);
    g_ctx.gemm_tune = 0;
    int64_t m = 256, n = 512, k = 128;
    float *a = randn_(&r, m * k, 1.0f), *b = randn_(&r, k * n, 1.0f);
    kda_bf16 *da = dev_bf16_(a, m * k), *db = dev_bf16_(b, k * n);
    float *dd = dev_poison_((size_t)(m * n) * 4), ms[8] = {0};
    int nc = 0;
    ok_(kda_cuda_gemm_probe(&g_ctx, 0, 0, m, n, k, da, m, db, k, 0.0f, NULL, dd, KDA_DT_F32, m, 2,
                            ms, &nc));
    CHECK(nc >= 1 && nc <= 8 && isfinite(ms[0]) && ms[0] > 0.0f);
    printf("    probe 256x512x128: %d candidates, #0 %.4f ms\n", nc, ms[0]);
    CHECK(kda_cuda_gemm_probe(&g_ctx, 0, 0, m, n, k, da, m, db, k, 1.0f, dd, dd, KDA_DT_F32, m, 2,
                              ms, &nc) == -1);
    kda_cuda_clear_error(&g_ctx);
    free(a), free(b);
    dfree_all_();
}

// The forward form's (op_T(A) [m, k] · B [k, n], bf16 out) candidate i described into desc [96],
// the count into *nc and KDA_GEMM_TILES's pick into *picked (NULL: not wanted).
static void fwd_cand_(int64_t m, int64_t n, int64_t k, int i, char *desc, int *nc, int *picked) {
    ok_(kda_cuda_gemm_cand_desc(&g_ctx, 1, 0, m, n, k, k, k, KDA_DT_BF16, m, i, desc, 96, nc,
                                picked));
}

// The same form's candidates' tiles into tile [8] (each read from its description) and the
// context's pick into *picked (NULL: not wanted); returns how many candidates there are.
static int fwd_tiles_(int64_t m, int64_t n, int64_t k, int tile[8], int *picked) {
    char desc[96];
    int nc = 0;
    fwd_cand_(m, n, k, 0, desc, &nc, picked);
    for (int i = 0; i < nc; i++) {
        fwd_cand_(m, n, k, i, desc, &nc, NULL);
        CHECK_MSG(sscanf(desc, "algo %*d tile %d", &tile[i]) == 1, "'%s'", desc);
    }
    return nc;
}

// KDA_GEMM_CAND=i (ctx->gemm_cand): every GEMM runs the heuristic's candidate i where the shape
// has one: the products stay right (gemm_case_'s tolerances; another algorithm only reorders the
// fp32 sums), on shapes with few and with many candidates; kda_cuda_gemm_cand_desc names each
// candidate ("algo ... tile ..."), the empty string past the last, and agrees with the probe on
// how many there are.
KDA_TEST_GPU(gpu_gemm_cand) {
    if (!gpu_()) return;
    KdaRng r;
    rng_seed(&r, 109);
    int64_t m = 1024, n = 2048, k = 512;
    char desc[96];
    int nc = 0, np = 0;
    fwd_cand_(m, n, k, 0, desc, &nc, NULL);
    CHECK_MSG(nc >= 1 && nc <= 8 && !strncmp(desc, "algo ", 5), "%d candidates, #0 '%s'", nc, desc);
    printf("    cand 1024x2048x512: %d candidates, #0 %s\n", nc, desc);
    fwd_cand_(m, n, k, nc, desc, &np, NULL);
    CHECK(np == nc && desc[0] == '\0');
    float *a = randn_(&r, m * k, 1.0f), *b = randn_(&r, k * n, 1.0f), ms[8];
    kda_bf16 *da = dev_bf16_(a, m * k), *db = dev_bf16_(b, k * n);
    float *dd = dev_poison_((size_t)(m * n) * 4);
    ok_(kda_cuda_gemm_probe(&g_ctx, 1, 0, m, n, k, da, k, db, k, 0.0f, NULL, dd, KDA_DT_F32, m, 1,
                            ms, &np));
    CHECK_MSG(np == nc, "probe %d candidates, desc %d", np, nc);
    for (int i = 1; i < 8; i++) { // past the last candidate: the first runs
        g_ctx.gemm_cand = i;
        gemm_case_(&r, 2048, 1024, 1024); // a shape with several candidates, and a small one
        gemm_case_(&r, 65, 96, 1024);
    }
    g_ctx.gemm_cand = 0;
    free(a), free(b);
    dfree_all_();
}

// KDA_GEMM_TILES's parser (host only): unset gives the default list (201, 197: 176x128 before
// 168x128), empty none; lists of 1-8 ids are read in order; anything else is one error line
// naming the variable and leaves no tiles.
KDA_TEST(cuda_gemm_tiles_parse) {
    int t[KDA_CUDA_GEMM_TILES_MAX] = {0}, n = -1;
    KdaError err = {{0}};
    CHECK(kda_cuda_parse_gemm_tiles(NULL, t, &n, &err) == 0 && n == 2 && t[0] == 201 &&
          t[1] == 197);
    CHECK(kda_cuda_parse_gemm_tiles("", t, &n, &err) == 0 && n == 0);
    CHECK(kda_cuda_parse_gemm_tiles("201,197", t, &n, &err) == 0 && n == 2 && t[0] == 201 &&
          t[1] == 197);
    CHECK(kda_cuda_parse_gemm_tiles("1,2,3,4,5,6,7,8", t, &n, &err) == 0 && n == 8 && t[7] == 8);
    const char *bad[] = {"x",           "201,", ",201",    "201;197",
                         "0",           "-3",   "201 197", "1,2,3,4,5,6,7,8,9",
                         "99999999999", "20a"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err.msg[0] = '\0';
        n = -1;
        CHECK_MSG(kda_cuda_parse_gemm_tiles(bad[i], t, &n, &err) == -1 && n == 0 &&
                      strstr(err.msg, "KDA_GEMM_TILES"),
                  "'%s': n %d, '%s'", bad[i], n, err.msg);
    }
}

// KDA_GEMM_RULES's parser and matcher (host only): unset (the default since 2026-12-04) and "1"
// give the measured rules (the o_proj forward's 128x128 among them), "0" and empty none,
// anything else one error line naming the variable; a rule's tile goes to the GEMM with its
// transposes, m, k and output dtype only.
KDA_TEST(cuda_gemm_rules_parse) {
    static KdaCudaCtx c; // zeroed; host only
    KdaError err = {{0}};
    CHECK(kda_cuda_parse_gemm_rules(NULL, c.gemm_pick.rules, &c.gemm_pick.n_rules, &err) == 0 &&
          c.gemm_pick.n_rules == 3 &&
          kda_cuda_gemm_rule_tile(&c, 1, 0, 1024, 512, KDA_DT_F32) == 20);
    CHECK(kda_cuda_parse_gemm_rules("0", c.gemm_pick.rules, &c.gemm_pick.n_rules, &err) == 0 &&
          c.gemm_pick.n_rules == 0);
    CHECK(kda_cuda_parse_gemm_rules("1", c.gemm_pick.rules, &c.gemm_pick.n_rules, &err) == 0 &&
          c.gemm_pick.n_rules == 3);
    CHECK(kda_cuda_gemm_rule_tile(&c, 1, 0, 1024, 512, KDA_DT_F32) == 20);
    CHECK(kda_cuda_gemm_rule_tile(&c, 0, 0, 1024, 1160, KDA_DT_F32) == 29);
    CHECK(kda_cuda_gemm_rule_tile(&c, 0, 0, 4096, 1024, KDA_DT_BF16) == 29);
    const int64_t miss[][5] = {// each differs from the o_proj rule in one field
                               {0, 0, 1024, 512, KDA_DT_F32},
                               {1, 1, 1024, 512, KDA_DT_F32},
                               {1, 0, 1025, 512, KDA_DT_F32},
                               {1, 0, 1024, 513, KDA_DT_F32},
                               {1, 0, 1024, 512, KDA_DT_BF16}};
    for (size_t i = 0; i < sizeof miss / sizeof *miss; i++)
        CHECK_MSG(kda_cuda_gemm_rule_tile(&c, (int)miss[i][0], (int)miss[i][1], miss[i][2],
                                          miss[i][3], (int)miss[i][4]) == 0,
                  "case %zu matched", i);
    CHECK(kda_cuda_parse_gemm_rules("0", c.gemm_pick.rules, &c.gemm_pick.n_rules, &err) == 0 &&
          c.gemm_pick.n_rules == 0 &&
          kda_cuda_gemm_rule_tile(&c, 1, 0, 1024, 512, KDA_DT_F32) == 0);
    CHECK(kda_cuda_parse_gemm_rules("", c.gemm_pick.rules, &c.gemm_pick.n_rules, &err) == 0 &&
          c.gemm_pick.n_rules == 0);
    const char *bad[] = {"2", "01", "yes", "1 ", "-1"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err.msg[0] = '\0';
        c.gemm_pick.n_rules = -1;
        CHECK_MSG(kda_cuda_parse_gemm_rules(bad[i], c.gemm_pick.rules, &c.gemm_pick.n_rules,
                                            &err) == -1 &&
                      c.gemm_pick.n_rules == 0 && strstr(err.msg, "KDA_GEMM_RULES"),
                  "'%s': n %d, '%s'", bad[i], c.gemm_pick.n_rules, err.msg);
    }
}

// KDA_GEMM_TILES (ctx->gemm_pick.tiles): a new plan runs the first candidate whose tile comes first
// in the list: naming candidate i's tile picks the first candidate with that tile, a list that
// names no candidate's tile (or none) picks the heuristic's first, an earlier entry wins over a
// later one; the products of a plan built with a preference stay right (gemm_case_'s tolerances).
KDA_TEST_GPU(gpu_gemm_tiles) {
    if (!gpu_()) return;
    int64_t m = 1024, n = 4096, k = 1024;
    char desc[96];
    int tile[8], picked = -1;
    KdaCudaGemmPick *pk = &g_ctx.gemm_pick; // put back whole at the end
    const KdaCudaGemmPick saved = *pk;
    int nc = fwd_tiles_(m, n, k, tile, NULL);
    for (int i = 0; i < nc; i++) {
        int first = 0; // the first candidate with candidate i's tile
        while (tile[first] != tile[i])
            first++;
        pk->tiles[0] = 99999, pk->tiles[1] = tile[i], pk->n_tiles = 2;
        fwd_cand_(m, n, k, 0, desc, &nc, &picked);
        CHECK_MSG(picked == first, "tiles {99999, %d}: picked %d, expected %d", tile[i], picked,
                  first);
        pk->tiles[0] = tile[nc - 1], pk->tiles[1] = tile[i]; // the earlier entry wins
        fwd_cand_(m, n, k, 0, desc, &nc, &picked);
        CHECK(tile[picked] == tile[nc - 1]);
    }
    pk->tiles[0] = 99999, pk->n_tiles = 1;
    fwd_cand_(m, n, k, 0, desc, &nc, &picked);
    CHECK(picked == 0);
    KdaRng r;
    rng_seed(&r, 113);
    // docs/log/gpu-2026-12-03.md §26: 176x128 and 168x128
    pk->tiles[0] = 201, pk->tiles[1] = 197, pk->n_tiles = 2;
    gemm_case_(&r, 4100, 1024, 1032); // shapes no other test caches
    *pk = saved;
}

// KDA_GEMM_RULES (ctx->gemm_pick.rules): a rule naming candidate i's tile for the shape picks the
// first candidate with that tile, ahead of a tile list naming another candidate's; a rule for
// another k, or naming no candidate's tile, leaves the list's pick; the products of a plan built
// by a rule stay right.
KDA_TEST_GPU(gpu_gemm_rules) {
    if (!gpu_()) return;
    int64_t m = 1024, n = 4096, k = 1024;
    char desc[96];
    int tile[8], picked = -1;
    KdaCudaGemmPick *pk = &g_ctx.gemm_pick; // put back whole at the end
    const KdaCudaGemmPick saved = *pk;
    int nc = fwd_tiles_(m, n, k, tile, NULL);
    KdaCudaGemmRule *r = &pk->rules[0]; // fwd_cand_'s form: trans_a 1, bf16 out
    *r = (KdaCudaGemmRule){1, 0, m, k, KDA_DT_BF16, 0};
    pk->n_rules = 1, pk->n_tiles = 1;
    for (int i = 0; i < nc; i++) {
        int first = 0, other = 0; // the first candidate with i's tile; one with another tile
        while (tile[first] != tile[i])
            first++;
        while (other < nc - 1 && tile[other] == tile[i])
            other++;
        pk->tiles[0] = tile[other];
        r->tile = tile[i], r->k = k;
        fwd_cand_(m, n, k, 0, desc, &nc, &picked);
        CHECK_MSG(picked == first, "rule tile %d, list {%d}: picked %d, expected %d", tile[i],
                  tile[other], picked, first);
        r->k = k + 8; // the rule no longer matches: the list's pick
        fwd_cand_(m, n, k, 0, desc, &nc, &picked);
        CHECK(tile[picked] == tile[other]);
        r->tile = 99999, r->k = k; // matches, names no candidate: the list's pick
        fwd_cand_(m, n, k, 0, desc, &nc, &picked);
        CHECK(tile[picked] == tile[other]);
    }
    KdaRng rr;
    rng_seed(&rr, 127);
    // gemm_case_'s forward (N 4104, in 1024 -> out 1040): m = 1040, k = 1024, bf16 out; the
    // tile of its last candidate (the heuristic's least preferred)
    int tile2[8], nc2 = fwd_tiles_(1040, 4104, 1024, tile2, NULL);
    *r = (KdaCudaGemmRule){1, 0, 1040, 1024, KDA_DT_BF16, tile2[nc2 - 1]};
    pk->n_tiles = 0;
    fwd_tiles_(1040, 4104, 1024, tile2, &picked);
    CHECK_MSG(tile2[picked] == tile2[nc2 - 1], "picked %d (tile %d), rule %d", picked,
              tile2[picked], tile2[nc2 - 1]);
    gemm_case_(&rr, 4104, 1024, 1040); // shapes no other test caches
    *pk = saved;
}

// GEMM plans cached per shape (gemm_cuda.cu, the default) against a context with KDA_GEMM_PLAN=0
// behaviour (plan_off: descriptors and heuristic afresh per call; residual by copy + in-place
// beta = 1): the heuristic sees the same descriptors, so it picks the same algorithm and the
// outputs must be bit-identical, calls repeated and shapes interleaved (cache hits and misses);
// the residual form with C != D (no copy), C == D and the copy path agree bit for bit too.
KDA_TEST_GPU(gpu_gemm_plan_cache) {
    if (!gpu_()) return;
    KdaCudaCtx off;
    KdaError err = {{0}};
    if (kda_cuda_init(&off, 0, &err)) {
        CHECK_MSG(0, "%s", err.msg);
        return;
    }
    off.plan_off = 1;
    int saved = g_ctx.plan_off;
    g_ctx.plan_off = 0;
    KdaRng r;
    rng_seed(&r, 107);
    const int64_t shapes[][3] = {
        {2048, 1024, 1024}, {63, 1024, 96}, {2048, 1024, 1024}, {65, 96, 8}};
    for (int rep = 0; rep < 2; rep++)
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
            int64_t N = shapes[s][0], in = shapes[s][1], out = shapes[s][2];
            float *x = bf16r_(randn_(&r, N * in, 1.0f), N * in);
            float *W = bf16r_(randn_(&r, out * in, 0.05f), out * in);
            float *res = randn_(&r, N * out, 1.0f);
            kda_bf16 *dx = dev_bf16_(x, N * in), *dW = dev_bf16_(W, out * in);
            float *dres = dev_f32_(res, N * out), *y1 = dev_f32_(res, N * out);
            float *y2 = dalloc_((size_t)(N * out) * 4), *y3 = dalloc_((size_t)(N * out) * 4);
            kda_bf16 *b1 = dalloc_((size_t)(N * out) * 2), *b2 = dalloc_((size_t)(N * out) * 2);
            ok_(kda_cuda_gemm_fwd(&g_ctx, b1, KDA_DT_BF16, dx, dW, N, in, out, 0));
            ok_(kda_cuda_gemm_residual(&g_ctx, y1, y1, dx, dW, N, in, out));   // C == D
            ok_(kda_cuda_gemm_residual(&g_ctx, y2, dres, dx, dW, N, in, out)); // C != D
            ok_(kda_cuda_sync(&g_ctx));
            CHECK(kda_cuda_gemm_fwd(&off, b2, KDA_DT_BF16, dx, dW, N, in, out, 0) == 0);
            CHECK(kda_cuda_gemm_residual(&off, y3, dres, dx, dW, N, in, out) == 0); // copy path
            CHECK(kda_cuda_sync(&off) == 0);
            float *h1 = get_f32_(y1, N * out), *h2 = get_f32_(y2, N * out);
            float *h3 = get_f32_(y3, N * out);
            float *c1 = get_bf16_(b1, N * out), *c2 = get_bf16_(b2, N * out);
            CHECK_MSG(!memcmp(h1, h2, (size_t)(N * out) * 4) &&
                          !memcmp(h1, h3, (size_t)(N * out) * 4),
                      "residual %lldx%lldx%lld: C == D, C != D and the copy path differ",
                      (long long)N, (long long)in, (long long)out);
            CHECK_MSG(!memcmp(c1, c2, (size_t)(N * out) * 4),
                      "gemm %lldx%lldx%lld: cached plan "
                      "and a fresh one differ",
                      (long long)N, (long long)in, (long long)out);
            free(x), free(W), free(res), free(h1), free(h2), free(h3), free(c1), free(c2);
            dfree_all_();
        }
    g_ctx.plan_off = saved;
    kda_cuda_free(&off);
}

KDA_TEST_GPU(gpu_rmsnorm) {
    if (!gpu_()) return;
    KdaRng r;
    rng_seed(&r, 102);
    // D = 24: fused backward, float4 path; 1024, 2048: rows in registers (NV = 8: 8-warp blocks,
    // NV = 16: 4-warp blocks, 64 KB of dynamic shared memory); 1030: fused, scalar path
    // (D % 4 != 0); 2046: fused, scalar, over 48 KB of shared memory (the raised limit); 2176:
    // wider than the fused kernel's 64 KB, separate dx and dw kernels (two-pass).
    const int64_t Ds[] = {24, 1024, 1030, 2048, 2046, 2176};
    for (int di = 0; di < 6; di++)
        for (int ti = 0; ti < N_T_SWEEP; ti++) {
            int64_t N = 2 * T_SWEEP[ti], D = Ds[di], n = N * D;
            printf("  N=%lld D=%lld\n", (long long)N, (long long)D);
            float *x = randn_(&r, n, 1.5f), *w = randn_(&r, D, 1.0f);
            float *a = bf16r_(randn_(&r, n, 1.0f), n);
            float *dy = randn_(&r, n, 1.0f), *dx0 = randn_(&r, n, 1.0f), *dw0 = randn_(&r, D, 1.f);
            // CPU: plain, residual (z = x + a), backward on x with accumulate
            float *y = malloc((size_t)n * 4), *rs = malloc((size_t)N * 4);
            float *y2 = malloc((size_t)n * 4), *rs2 = malloc((size_t)N * 4), *z = copy_(x, n);
            for (int64_t i = 0; i < n; i++)
                z[i] += a[i];
            rmsnorm_fwd(y, rs, x, w, N, D, 1e-6f);
            rmsnorm_fwd(y2, rs2, z, w, N, D, 1e-6f);
            float *dx = copy_(dx0, n), *dw = copy_(dw0, D);
            rmsnorm_bwd(dx, dw, dy, x, w, rs, N, D, 1);
            // GPU
            float *dxg = dev_f32_(x, n), *dwg = dev_f32_(w, D), *dres = dev_f32_(x, n);
            kda_bf16 *da = dev_bf16_(a, n);
            kda_bf16 *dyo = dev_poison_((size_t)n * 2), *dyo2 = dev_poison_((size_t)n * 2);
            float *drs = dev_poison_((size_t)N * 4), *drs2 = dev_poison_((size_t)N * 4);
            float *ddy = dev_f32_(dy, n), *ddx = dev_f32_(dx0, n), *ddw = dev_f32_(dw0, D);
            ok_(kda_cuda_rmsnorm_fwd(&g_ctx, dyo, drs, dxg, dwg, N, D, 1e-6f));
            ok_(kda_cuda_rmsnorm_residual_fwd(&g_ctx, dyo2, drs2, dres, da, dwg, N, D, 1e-6f));
            ok_(kda_cuda_rmsnorm_bwd(&g_ctx, ddx, ddw, ddy, dxg, dwg, drs, N, D, 1));
            float *g_y = get_bf16_(dyo, n), *g_rs = get_f32_(drs, N);
            float *g_y2 = get_bf16_(dyo2, n), *g_z = get_f32_(dres, n);
            float *g_dx = get_f32_(ddx, n), *g_dw = get_f32_(ddw, D);
            expect_("rmsnorm y bf16", y, g_y, n, TOL_BF16);
            expect_("rmsnorm rstd", rs, g_rs, N, TOL_F32);
            expect_("rmsnorm+residual residual fp32", z, g_z, n, TOL_F32);
            expect_("rmsnorm+residual y bf16", y2, g_y2, n, TOL_BF16);
            expect_("rmsnorm bwd dx += fp32", dx, g_dx, n, TOL_F32);
            expect_("rmsnorm bwd dw += fp32", dw, g_dw, D, TOL_F32);
            // accumulate = 0: dx overwritten (poisoned first), dw still accumulates
            float *dx_o = malloc((size_t)n * 4), *dw_o = copy_(dw0, D);
            rmsnorm_bwd(dx_o, dw_o, dy, x, w, rs, N, D, 0);
            float *ddx_o = dev_poison_((size_t)n * 4), *ddw_o = dev_f32_(dw0, D);
            ok_(kda_cuda_rmsnorm_bwd(&g_ctx, ddx_o, ddw_o, ddy, dxg, dwg, drs, N, D, 0));
            float *g_dx_o = get_f32_(ddx_o, n), *g_dw_o = get_f32_(ddw_o, D);
            expect_("rmsnorm bwd dx = fp32", dx_o, g_dx_o, n, TOL_F32);
            expect_("rmsnorm bwd (acc 0) dw += fp32", dw_o, g_dw_o, D, TOL_F32);
            CHECK_MSG(!memcmp(g_dw, g_dw_o, (size_t)D * 4), "rmsnorm dw differs between runs");
            free(dx_o), free(dw_o), free(g_dx_o), free(g_dw_o);
            free(x), free(w), free(a), free(dy), free(dx0), free(dw0), free(y), free(rs), free(y2);
            free(rs2), free(z), free(dx), free(dw), free(g_y), free(g_rs), free(g_y2), free(g_z);
            free(g_dx), free(g_dw);
            dfree_all_();
        }
}

KDA_TEST_GPU(gpu_l2norm) {
    if (!gpu_()) return;
    KdaRng r;
    rng_seed(&r, 103);
    const int64_t dims[] = {32, 128};
    for (int di = 0; di < 2; di++)
        for (int ti = 0; ti < N_T_SWEEP; ti++) {
            int64_t N = 2 * T_SWEEP[ti] * 4, dim = dims[di], n = N * dim; // 4 heads
            printf("  N=%lld dim=%lld\n", (long long)N, (long long)dim);
            float *x = bf16r_(randn_(&r, n, 0.7f), n), *dy = randn_(&r, n, 1.0f);
            float *y = malloc((size_t)n * 4), *rs = malloc((size_t)N * 4);
            float *dx = malloc((size_t)n * 4);
            kda_l2norm_fwd(y, rs, x, N, dim, 1e-6f);
            kda_l2norm_bwd(dx, dy, y, rs, N, dim);
            kda_bf16 *dxg = dev_bf16_(x, n), *dyo = dev_poison_((size_t)n * 2);
            float *drs = dev_poison_((size_t)N * 4), *ddy = dev_f32_(dy, n);
            kda_bf16 *ddx = dev_poison_((size_t)n * 2);
            ok_(kda_cuda_l2norm_fwd(&g_ctx, dyo, drs, dxg, N, dim, 1e-6f));
            ok_(kda_cuda_l2norm_bwd(&g_ctx, ddx, ddy, dxg, drs, N, dim));
            float *g_y = get_bf16_(dyo, n), *g_rs = get_f32_(drs, N), *g_dx = get_bf16_(ddx, n);
            expect_("l2norm y bf16", y, g_y, n, TOL_BF16);
            expect_("l2norm rstd", rs, g_rs, N, TOL_F32);
            expect_("l2norm bwd dx bf16", dx, g_dx, n, TOL_BF16);
            free(x), free(dy), free(y), free(rs), free(dx), free(g_y), free(g_rs), free(g_dx);
            dfree_all_();
        }
}

// One conv case. misalign = 1 passes every bf16 tensor one element past a 16-byte boundary,
// which must take the scalar path (results as the vector path's).
static void conv_case_(KdaRng *r, int64_t B, int64_t T, int64_t C, int64_t W, int misalign) {
    int64_t n = B * T * C, o = misalign ? 1 : 0;
    printf("  B=%lld T=%lld C=%lld W=%lld%s\n", (long long)B, (long long)T, (long long)C,
           (long long)W, misalign ? " (misaligned)" : "");
    float *p = bf16r_(randn_(r, n, 1.0f), n), *w = randn_(r, C * W, 0.5f);
    float *dy = bf16r_(randn_(r, n, 1.0f), n), *dw0 = randn_(r, C * W, 1.0f);
    float *y = malloc((size_t)n * 4), *c = malloc((size_t)n * 4);
    float *dp = malloc((size_t)n * 4), *dw = copy_(dw0, C * W);
    conv_silu_fwd(y, c, p, w, B, T, C, W);
    conv_silu_bwd(dp, dw, dy, p, c, w, B, T, C, W);
    kda_bf16 *dpg = dev_poison_((size_t)(n + o) * 2), *dyg = dev_poison_((size_t)(n + o) * 2);
    ok_(kda_cuda_put_bf16(&g_ctx, dpg + o, p, n));
    ok_(kda_cuda_put_bf16(&g_ctx, dyg + o, dy, n));
    float *dwg = dev_f32_(w, C * W), *ddw = dev_f32_(dw0, C * W);
    kda_bf16 *dyo = dev_poison_((size_t)(n + o) * 2), *ddp = dev_poison_((size_t)(n + o) * 2);
    ok_(kda_cuda_conv_silu_fwd(&g_ctx, dyo + o, dpg + o, dwg, B, T, C, W));
    ok_(kda_cuda_conv_silu_bwd(&g_ctx, ddp + o, ddw, dyg + o, dpg + o, dwg, B, T, C, W));
    float *g_y = get_bf16_(dyo + o, n), *g_dp = get_bf16_(ddp + o, n);
    float *g_dw = get_f32_(ddw, C * W);
    expect_("conv+silu y bf16", y, g_y, n, TOL_BF16);
    expect_("conv+silu bwd dp bf16", dp, g_dp, n, TOL_BF16);
    expect_("conv+silu bwd dw += fp32", dw, g_dw, C * W, TOL_F32);
    // Determinism contract: a second backward into a fresh dw gives the same bits.
    float *ddw2 = dev_f32_(dw0, C * W);
    ok_(kda_cuda_conv_silu_bwd(&g_ctx, ddp + o, ddw2, dyg + o, dpg + o, dwg, B, T, C, W));
    float *g_dw2 = get_f32_(ddw2, C * W);
    CHECK_MSG(!memcmp(g_dw, g_dw2, (size_t)(C * W) * 4), "conv dw differs between two runs");
    free(p), free(w), free(dy), free(dw0), free(y), free(c), free(dp), free(dw);
    free(g_y), free(g_dp), free(g_dw), free(g_dw2);
    dfree_all_();
}

// The kernels tile tokens (16 forward, 32 backward, 8 tiles per block) and take 8 (forward) or
// 4 (backward) channels per thread when C and the alignment allow. The sweep covers: C with no
// vector path (5), backward-only vector path (12, 36), both (384, 1000: 125 groups of 8, not a
// multiple of the 32 groups per block), every W from 1 to 4 and W = 8, T at the tile edges
// (1, 31, 32, 33 and the chunk sweep), and misaligned pointers.
KDA_TEST_GPU(gpu_conv_silu) {
    if (!gpu_()) return;
    KdaRng r;
    rng_seed(&r, 104);
    const int64_t Cs[] = {5, 384}, Ws[] = {4, 2};
    for (int ci = 0; ci < 2; ci++)
        for (int ti = 0; ti < N_T_SWEEP; ti++)
            conv_case_(&r, 2, T_SWEEP[ti], Cs[ci], Ws[ci], 0);
    static const struct {
        int64_t B, T, C, W;
        int mis;
    } cases[] = {
        {2, 63, 12, 3, 0}, {3, 33, 36, 8, 0}, {1, 1, 1000, 4, 0},    {2, 65, 1000, 4, 0},
        {2, 31, 8, 1, 0},  {2, 32, 16, 2, 0}, {1, 2048, 1000, 3, 0}, {2, 63, 384, 4, 1},
        {17, 7, 24, 4, 0}, {2, 2, 8, 8, 0},   {2, 200, 1024, 4, 0},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        conv_case_(&r, cases[k].B, cases[k].T, cases[k].C, cases[k].W, cases[k].mis);
}

// One conv case's inputs, host and device: p [B, T, C] (bf16 values), w [C, W], dy [B, T, C]
// (bf16 for the plain backward, fp32 for the fused one), dw0 [C, W] (the accumulated dw's start);
// n = B·T·C, nr = the rstd rows (1 without the L2 norm). K > 0: the fused q/k kernels (conv +
// SiLU + L2 norm, C = H·K), else conv + SiLU.
typedef struct {
    int64_t B, T, C, W, K, n, nr;
    float *p, *w, *dy, *dw0, *dyf, *dw_;
    kda_bf16 *dp_, *dyb;
} ConvIn;

static ConvIn conv_in_(KdaRng *r, int64_t B, int64_t T, int64_t C, int64_t W, int64_t K) {
    ConvIn c = {.B = B, .T = T, .C = C, .W = W, .K = K, .n = B * T * C};
    c.nr = K > 0 ? B * T * (C / K) : 1;
    c.p = bf16r_(randn_(r, c.n, 1.0f), c.n), c.w = randn_(r, C * W, 0.5f);
    c.dy = randn_(r, c.n, 1.0f), c.dw0 = randn_(r, C * W, 1.0f);
    c.dp_ = dev_bf16_(c.p, c.n), c.dyb = dev_bf16_(c.dy, c.n);
    c.dyf = dev_f32_(c.dy, c.n), c.dw_ = dev_f32_(c.w, C * W);
    return c;
}

// c's forward and backward with the environment variable var = val (put back afterwards), into
// out [4] = y [n], rstd [nr], dp [n], dw [C·W] (host fp32 copies, the caller frees them).
static void conv_run_env_(const ConvIn *c, const char *var, const char *val, float *out[4]) {
    int64_t n = c->n, nr = c->nr, B = c->B, T = c->T, C = c->C, W = c->W, K = c->K;
    GpuEnv e;
    gpu_env_set(&e, var, val);
    kda_bf16 *y = dev_poison_((size_t)n * 2), *dp = dev_poison_((size_t)n * 2);
    float *rs = dev_poison_((size_t)nr * 4), *dwg = dev_f32_(c->dw0, C * W);
    if (K > 0) {
        ok_(kda_cuda_conv_silu_l2_fwd(&g_ctx, y, rs, c->dp_, c->dw_, B, T, C, W, K, 1e-6f));
        ok_(kda_cuda_conv_silu_l2_bwd(&g_ctx, dp, dwg, c->dyf, c->dp_, c->dw_, rs, B, T, C, W, K));
    } else {
        ok_(kda_cuda_conv_silu_fwd(&g_ctx, y, c->dp_, c->dw_, B, T, C, W));
        ok_(kda_cuda_conv_silu_bwd(&g_ctx, dp, dwg, c->dyb, c->dp_, c->dw_, B, T, C, W));
    }
    gpu_env_restore(&e);
    out[0] = get_bf16_(y, n), out[1] = get_f32_(rs, nr);
    out[2] = get_bf16_(dp, n), out[3] = get_f32_(dwg, C * W);
}

// Frees c's host inputs, both runs' outputs and every device buffer of the case.
static void conv_case_free_(ConvIn *c, float *out[2][4]) {
    for (int v = 0; v < 2; v++)
        for (int k = 0; k < 4; k++)
            free(out[v][k]);
    free(c->p), free(c->w), free(c->dy), free(c->dw0);
    dfree_all_();
}

// gpu_env_set / gpu_env_restore (tests/gpu_ctx.h; host only): a variable set for a stretch goes
// back to its value, or back to unset, so a suite run under KDA_FAST_EXP=0 keeps it past a test
// that toggles it.
KDA_TEST(test_env_restores) {
    const char *var = "KDA_TEST_ENV_RESTORE";
    unsetenv(var);
    GpuEnv e;
    gpu_env_set(&e, var, "1");
    CHECK(getenv(var) && !strcmp(getenv(var), "1"));
    gpu_env_restore(&e);
    CHECK(getenv(var) == NULL);
    setenv(var, "was", 1);
    gpu_env_set(&e, var, "0");
    CHECK(getenv(var) && !strcmp(getenv(var), "0"));
    gpu_env_restore(&e);
    CHECK(getenv(var) && !strcmp(getenv(var), "was"));
    gpu_env_set(&e, var, NULL); // NULL: unset for the stretch
    CHECK(getenv(var) == NULL);
    gpu_env_restore(&e);
    CHECK(getenv(var) && !strcmp(getenv(var), "was"));
    unsetenv(var);
}

// One conv case run with the prefetching kernels (KDA_CONV_PREFETCH=1) and without (the
// default): the same arithmetic in the same order, so y (and rstd), dp and dw bit for
// bit. The prefetching kernels have no fast SiLU: both runs precise (KDA_FAST_EXP=0).
static void conv_pf_case_(KdaRng *r, int64_t B, int64_t T, int64_t C, int64_t W, int64_t K) {
    ConvIn c = conv_in_(r, B, T, C, W, K);
    int64_t n = c.n, nr = c.nr;
    float *out[2][4]; // [pf][y, rstd, dp, dw]
    GpuEnv fx;
    gpu_env_set(&fx, "KDA_FAST_EXP", "0");
    conv_run_env_(&c, "KDA_CONV_PREFETCH", "1", out[1]);
    conv_run_env_(&c, "KDA_CONV_PREFETCH", "0", out[0]);
    gpu_env_restore(&fx);
    const int64_t sz[4] = {n, nr, n, C * W};
    const char *nm[4] = {"y", "rstd", "dp", "dw"};
    for (int k = 0; k < 4; k++) {
        if (k == 1 && K == 0) continue; // no rstd without the L2 norm
        CHECK_MSG(!memcmp(out[0][k], out[1][k], (size_t)sz[k] * 4),
                  "B %lld T %lld C %lld W %lld K %lld: %s differs with the prefetch", (long long)B,
                  (long long)T, (long long)C, (long long)W, (long long)K, nm[k]);
    }
    conv_case_free_(&c, out);
}

KDA_TEST_GPU(gpu_conv_prefetch_matches) {
    if (!gpu_()) return;
    KdaRng r;
    rng_seed(&r, 161);
    conv_pf_case_(&r, 2, 63, 384, 4, 0); // 16/8-byte paths, tiles cut by T
    conv_pf_case_(&r, 2, 2048, 512, 4, 0);
    conv_pf_case_(&r, 3, 33, 36, 8, 0); // backward vector path only, W = 8
    conv_pf_case_(&r, 2, 1, 5, 2, 0);   // scalar paths, T = 1
    conv_pf_case_(&r, 1, 65, 1000, 3, 0);
    conv_pf_case_(&r, 2, 63, 256, 4, 32); // the fused q/k kernels (H 8 x K 32)
    conv_pf_case_(&r, 2, 2048, 256, 4, 32);
    conv_pf_case_(&r, 1, 17, 128, 2, 64);
}

// The backward kernels that write the fused input projection's dY columns in place (row stride
// ldo > C: kda_cuda_conv_silu_bwd_ld, _conv_silu_l2_bwd_ld, _beta_bwd_ld) against the same
// kernels writing contiguous rows: the same values bit for bit in the columns, and the columns
// outside untouched (poison). The 300M layout: q at column 0 (fused), v at 512 (unfused conv), b
// at 1152 of 1160; and an odd one (scalar conv path).
KDA_TEST_GPU(gpu_bwd_strided_outputs) {
    if (!gpu_()) return;
    KdaRng r;
    rng_seed(&r, 167);
    const struct {
        int64_t B, T, C, W, K, col, ld; // K > 0: fused q/k kernel
    } cs[] = {{2, 65, 256, 4, 32, 0, 1160}, {2, 65, 512, 4, 0, 512, 1160}, {1, 33, 5, 3, 0, 2, 9}};
    for (int cv = 0; cv < 6; cv++) { // the v1 kernels, then v2 (KDA_CONV_V=2)
        int c = cv % 3;
        GpuEnv cvv;
        gpu_env_set(&cvv, "KDA_CONV_V", cv < 3 ? "1" : "2");
        int64_t B = cs[c].B, T = cs[c].T, C = cs[c].C, W = cs[c].W, K = cs[c].K, ld = cs[c].ld;
        int64_t n = B * T * C, nw = B * T * ld, nr = K > 0 ? B * T * (C / K) : 1;
        float *p = bf16r_(randn_(&r, n, 1.0f), n), *w = randn_(&r, C * W, 0.5f);
        float *dy = randn_(&r, n, 1.0f), *dw0 = randn_(&r, C * W, 1.0f), *rs = randn_(&r, nr, 0.1f);
        for (int64_t i = 0; i < nr; i++)
            rs[i] = 1.0f + fabsf(rs[i]);
        kda_bf16 *dp_ = dev_bf16_(p, n), *dyb = dev_bf16_(dy, n);
        float *dyf = dev_f32_(dy, n), *dw_ = dev_f32_(w, C * W), *drs = dev_f32_(rs, nr);
        kda_bf16 *o1 = dev_poison_((size_t)n * 2), *o2 = dev_poison_((size_t)nw * 2);
        float *g1 = dev_f32_(dw0, C * W), *g2 = dev_f32_(dw0, C * W);
        if (K > 0) {
            ok_(kda_cuda_conv_silu_l2_bwd(&g_ctx, o1, g1, dyf, dp_, dw_, drs, B, T, C, W, K));
            ok_(kda_cuda_conv_silu_l2_bwd_ld(&g_ctx, o2 + cs[c].col, ld, g2, dyf, dp_, dw_, drs, B,
                                             T, C, W, K));
        } else {
            ok_(kda_cuda_conv_silu_bwd(&g_ctx, o1, g1, dyb, dp_, dw_, B, T, C, W));
            ok_(kda_cuda_conv_silu_bwd_ld(&g_ctx, o2 + cs[c].col, ld, g2, dyb, dp_, dw_, B, T, C,
                                          W));
        }
        kda_bf16 *h1 = malloc((size_t)n * 2), *h2 = malloc((size_t)nw * 2);
        ok_(kda_cuda_get_bytes(&g_ctx, h1, o1, (size_t)n * 2));
        ok_(kda_cuda_get_bytes(&g_ctx, h2, o2, (size_t)nw * 2));
        int64_t bad = 0;
        for (int64_t i = 0; i < B * T; i++)
            for (int64_t j = 0; j < ld; j++) {
                int64_t k = j - cs[c].col;
                kda_bf16 want = k >= 0 && k < C ? h1[i * C + k] : 0xFFFF;
                bad += h2[i * ld + j] != want;
            }
        float *a = get_f32_(g1, C * W), *b = get_f32_(g2, C * W);
        gpu_env_restore(&cvv);
        CHECK_MSG(bad == 0 && !memcmp(a, b, (size_t)(C * W) * 4),
                  "case %d (v%d): %lld dp elements differ (or dw) with the row stride", c,
                  cv < 3 ? 1 : 2, (long long)bad);
        free(p), free(w), free(dy), free(dw0), free(rs), free(h1), free(h2), free(a), free(b);
        dfree_all_();
    }
    // beta: db [N, 8] at columns 1152.. of [N, 1160]
    int64_t N = 777, HV = 8, ld = 1160, n = N * HV;
    float *bl = bf16r_(randn_(&r, n, 2.0f), n), *dbeta = randn_(&r, n, 1.0f);
    kda_bf16 *db_ = dev_bf16_(bl, n), *o1 = dev_poison_((size_t)n * 2);
    kda_bf16 *o2 = dev_poison_((size_t)(N * ld) * 2);
    float *ddb = dev_f32_(dbeta, n);
    ok_(kda_cuda_beta_bwd(&g_ctx, o1, ddb, db_, n, 1));
    ok_(kda_cuda_beta_bwd_ld(&g_ctx, o2 + 1152, ld, ddb, db_, N, HV, 1));
    kda_bf16 *h1 = malloc((size_t)n * 2), *h2 = malloc((size_t)(N * ld) * 2);
    ok_(kda_cuda_get_bytes(&g_ctx, h1, o1, (size_t)n * 2));
    ok_(kda_cuda_get_bytes(&g_ctx, h2, o2, (size_t)(N * ld) * 2));
    int64_t bad = 0;
    for (int64_t i = 0; i < N; i++)
        for (int64_t j = 0; j < ld; j++)
            bad += h2[i * ld + j] != (j >= 1152 ? h1[i * HV + j - 1152] : 0xFFFF);
    CHECK_MSG(bad == 0, "beta bwd: %lld elements differ with the row stride", (long long)bad);
    free(bl), free(dbeta), free(h1), free(h2);
    dfree_all_();
}

// ver: the context's gate_version for the case (1 or 2; shapes v2 does not take run v1); the
// context's own version is restored after it.
static void gate_case_(KdaRng *r, int ver, int64_t B, int64_t T, int64_t HV, int64_t K,
                       int64_t chunk) {
    int64_t HK = HV * K, N = B * T, n = N * HK;
    printf("  v%d B=%lld T=%lld HV=%lld K=%lld chunk=%lld\n", ver, (long long)B, (long long)T,
           (long long)HV, (long long)K, (long long)chunk);
    int ver0 = g_ctx.gate_version;
    g_ctx.gate_version = ver;
    int v2 = ver == 2 && K % 4 == 0 && chunk <= 64; // the v2 kernels run
    float *f = randn_(r, n, 2.0f);
    for (int64_t i = 0; i < n; i += 97)
        f[i] = 24.0f; // the softplus threshold branch
    bf16r_(f, n);
    float *A_log = malloc((size_t)HV * 4), *dtb = malloc((size_t)HK * 4);
    for (int64_t j = 0; j < HV; j++)
        A_log[j] = (float)log(1.0 + 15.0 * rng_uniform(r));
    for (int64_t i = 0; i < HK; i++)
        dtb[i] = (float)(-4.0 + 3.0 * rng_uniform(r));
    float *dgc = randn_(r, n, 1.0f), *dA0 = randn_(r, HV, 1.0f), *ddt0 = randn_(r, HK, 1.f);
    // CPU: gate, chunk cumsum; reverse cumsum of dgcum, gate backward
    float *g = malloc((size_t)n * 4), *gc = malloc((size_t)n * 4), *dg = malloc((size_t)n * 4);
    float *df = malloc((size_t)n * 4), *dA = copy_(dA0, HV), *ddt = copy_(ddt0, HK);
    kda_gate_fwd(g, f, A_log, dtb, N, HV, K, NULL);
    kda_case_chunk_cumsums(gc, dg, g, dgc, B, T, HK, chunk);
    kda_gate_bwd(df, dA, ddt, dg, f, A_log, dtb, N, HV, K, NULL);
    // GPU
    kda_bf16 *dfr = dev_bf16_(f, n);
    float *dAl = dev_f32_(A_log, HV), *ddtb = dev_f32_(dtb, HK), *ddgc = dev_f32_(dgc, n);
    float *dgo = dev_poison_((size_t)n * 4), *dgco = dev_poison_((size_t)n * 4);
    kda_bf16 *ddf = dev_poison_((size_t)n * 2);
    float *ddA = dev_f32_(dA0, HV), *dddt = dev_f32_(ddt0, HK);
    ok_(kda_cuda_gate_cumsum_fwd(&g_ctx, dgco, dgo, dfr, dAl, ddtb, B, T, HV, K, chunk));
    ok_(kda_cuda_gate_cumsum_bwd(&g_ctx, ddf, ddA, dddt, ddgc, dfr, dAl, ddtb, B, T, HV, K, chunk,
                                 1));
    float *g_g = get_f32_(dgo, n), *g_gc = get_f32_(dgco, n), *g_df = get_bf16_(ddf, n);
    float *g_dA = get_f32_(ddA, HV), *g_ddt = get_f32_(dddt, HK);
    expect_("gate g fp32", g, g_g, n, TOL_F32);
    expect_("gate chunk cumsum fp32", gc, g_gc, n, TOL_F32);
    expect_("gate bwd df bf16", df, g_df, n, TOL_BF16);
    expect_("gate bwd dA_log += fp32", dA, g_dA, HV, TOL_F32);
    expect_("gate bwd ddt_bias += fp32", ddt, g_ddt, HK, TOL_F32);
    // from_cumsum = 0: the input is already dg (what the KDA core backward returns)
    float *ddg = dev_f32_(dg, n), *ddA2 = dev_f32_(dA0, HV), *dddt2 = dev_f32_(ddt0, HK);
    kda_bf16 *ddf2 = dev_poison_((size_t)n * 2);
    ok_(kda_cuda_gate_cumsum_bwd(&g_ctx, ddf2, ddA2, dddt2, ddg, dfr, dAl, ddtb, B, T, HV, K, chunk,
                                 0));
    float *g_df2 = get_bf16_(ddf2, n), *g_dA2 = get_f32_(ddA2, HV);
    float *g_ddt2 = get_f32_(dddt2, HK);
    expect_("gate bwd (dg input) df bf16", df, g_df2, n, TOL_BF16);
    expect_("gate bwd (dg input) dA_log fp32", dA, g_dA2, HV, TOL_F32);
    // v1's running sum of dgcum adds in the CPU loop's order (fp32, no FMA), so both runs see
    // the same dg bits; fixed-order reductions then give the same sums. v2 adds dgcum in
    // segments (another order): its check is a second identical call giving the same bits.
    if (!v2) {
        CHECK_MSG(!memcmp(g_dA, g_dA2, (size_t)HV * 4), "gate dA_log differs between runs");
        CHECK_MSG(!memcmp(g_ddt, g_ddt2, (size_t)HK * 4), "gate ddt_bias differs between runs");
    } else {
        float *ddA3 = dev_f32_(dA0, HV), *dddt3 = dev_f32_(ddt0, HK);
        kda_bf16 *ddf3 = dev_poison_((size_t)n * 2);
        ok_(kda_cuda_gate_cumsum_bwd(&g_ctx, ddf3, ddA3, dddt3, ddg, dfr, dAl, ddtb, B, T, HV, K,
                                     chunk, 0));
        float *g_df3 = get_bf16_(ddf3, n), *g_dA3 = get_f32_(ddA3, HV);
        float *g_ddt3 = get_f32_(dddt3, HK);
        CHECK_MSG(!memcmp(g_dA2, g_dA3, (size_t)HV * 4) &&
                      !memcmp(g_ddt2, g_ddt3, (size_t)HK * 4) &&
                      !memcmp(g_df2, g_df3, (size_t)n * 4),
                  "gate v2 backward differs between two identical calls");
        free(g_df3), free(g_dA3), free(g_ddt3);
    }
    g_ctx.gate_version = ver0;
    free(g_df2), free(g_dA2), free(g_ddt2);
    free(f), free(A_log), free(dtb), free(dgc), free(dA0), free(ddt0), free(g), free(gc);
    free(dg), free(df), free(dA), free(ddt), free(g_g), free(g_gc), free(g_df), free(g_dA);
    free(g_ddt);
    dfree_all_();
}

// The backward walks each chunk in groups of 8 tokens (partial groups at T = 1, 63, 65, 130
// and chunk 48) and reduces dA_log over (chunk, d) with a stride of 256 entries (K = 20 does not
// divide 256). dA_log and ddt_bias must be the same bits in two runs (fixed-order reductions).
KDA_TEST_GPU(gpu_gate_cumsum) {
    if (!gpu_()) return;
    KdaRng r;
    rng_seed(&r, 105);
    for (int ti = 0; ti < N_T_SWEEP; ti++)
        gate_case_(&r, 1, 2, T_SWEEP[ti], 4, 32, 64);
    gate_case_(&r, 1, 3, 130, 3, 20, 64);
    gate_case_(&r, 1, 2, 100, 2, 300, 48);  // K > 256: the reduction's step is 0 chunks + 256 d
    gate_case_(&r, 1, 16, 2048, 8, 32, 64); // the 300M model's shape
}

// The v2 kernels (gate_version 2): T = 1 (7 of 8 segments empty), chunk remainders, HK not a
// multiple of the 128-column tile (K = 20, 12, 300), several chunks per block (32, 16, 7, 5, 1),
// 48, B·T large (64 x 2048, 512k tokens), the model's shape and chunk; K = 6 and chunk 128 take
// v1.
KDA_TEST_GPU(gpu_gate_cumsum_v2) {
    if (!gpu_()) return;
    KdaRng r;
    rng_seed(&r, 115);
    for (int ti = 0; ti < N_T_SWEEP; ti++)
        gate_case_(&r, 2, 2, T_SWEEP[ti], 4, 32, 64);
    gate_case_(&r, 2, 3, 130, 3, 20, 64);
    gate_case_(&r, 2, 2, 200, 3, 12, 64);
    gate_case_(&r, 2, 2, 100, 2, 300, 48);
    gate_case_(&r, 2, 1, 37, 5, 8, 5);
    gate_case_(&r, 2, 2, 65, 4, 32, 32);
    gate_case_(&r, 2, 2, 130, 4, 32, 16);
    gate_case_(&r, 2, 1, 100, 3, 8, 7);
    gate_case_(&r, 2, 2, 70, 2, 4, 1);
    gate_case_(&r, 2, 16, 2048, 8, 32, 64);
    gate_case_(&r, 2, 16, 2048, 8, 32, 32); // the model's chunk
    gate_case_(&r, 2, 64, 2048, 8, 32, 32);
    gate_case_(&r, 2, 2, 65, 3, 6, 64);    // K % 4 != 0: v1
    gate_case_(&r, 2, 2, 300, 2, 32, 128); // chunk > 64: v1
}

// The fused launchers (kda_cuda_gate_beta_fwd / _bwd, the model's calls) with v1 and v2: gcum
// and beta, df, dA_log and ddt_bias accumulating onto non-zero starts, db at a row stride with
// its other columns untouched; v2 against v1 within the tolerances, and v2's fallback shapes
// (K = 6) bit-identical to v1.
static void gate_beta_case_(KdaRng *r, int64_t B, int64_t T, int64_t HV, int64_t K, int64_t chunk) {
    int64_t HK = HV * K, N = B * T, n = N * HK, nb = N * HV, ldb = HV + 5;
    printf("  fused B=%lld T=%lld HV=%lld K=%lld chunk=%lld\n", (long long)B, (long long)T,
           (long long)HV, (long long)K, (long long)chunk);
    float *f = randn_(r, n, 2.0f), *b = bf16r_(randn_(r, nb, 3.0f), nb);
    bf16r_(f, n);
    float *A_log = malloc((size_t)HV * 4), *dtb = malloc((size_t)HK * 4);
    for (int64_t j = 0; j < HV; j++)
        A_log[j] = (float)log(1.0 + 15.0 * rng_uniform(r));
    for (int64_t i = 0; i < HK; i++)
        dtb[i] = (float)(-4.0 + 3.0 * rng_uniform(r));
    float *dg = randn_(r, n, 1.0f), *dbeta = randn_(r, nb, 1.0f);
    float *dA0 = randn_(r, HV, 1.0f), *ddt0 = randn_(r, HK, 1.0f);
    kda_bf16 *dfr = dev_bf16_(f, n), *dbr = dev_bf16_(b, nb);
    float *dAl = dev_f32_(A_log, HV), *ddtb = dev_f32_(dtb, HK), *ddg = dev_f32_(dg, n);
    float *ddbeta = dev_f32_(dbeta, nb);
    float *out[2][4];              // per version: gcum, beta, dA_log, ddt_bias
    kda_bf16 *bout[2][2];          // per version: df, db [N, ldb]
    int ver0 = g_ctx.gate_version; // the context's own, restored after the two versions
    for (int ver = 1; ver <= 2; ver++) {
        g_ctx.gate_version = ver;
        float *gc = dev_poison_((size_t)n * 4), *be = dev_poison_((size_t)nb * 4);
        float *dA = dev_f32_(dA0, HV), *ddt = dev_f32_(ddt0, HK);
        kda_bf16 *df = dev_poison_((size_t)n * 2), *db = dev_poison_((size_t)(N * ldb) * 2);
        ok_(kda_cuda_gate_beta_fwd(&g_ctx, gc, NULL, be, dfr, dbr, dAl, ddtb, B, T, HV, K, chunk,
                                   1));
        ok_(kda_cuda_gate_beta_bwd(&g_ctx, df, dA, ddt, db, ldb, ddg, ddbeta, dfr, dbr, dAl, ddtb,
                                   B, T, HV, K, chunk, 0, 1));
        out[ver - 1][0] = get_f32_(gc, n), out[ver - 1][1] = get_f32_(be, nb);
        out[ver - 1][2] = get_f32_(dA, HV), out[ver - 1][3] = get_f32_(ddt, HK);
        bout[ver - 1][0] = malloc((size_t)n * 2), bout[ver - 1][1] = malloc((size_t)(N * ldb) * 2);
        ok_(kda_cuda_get_bytes(&g_ctx, bout[ver - 1][0], df, (size_t)n * 2));
        ok_(kda_cuda_get_bytes(&g_ctx, bout[ver - 1][1], db, (size_t)(N * ldb) * 2));
    }
    g_ctx.gate_version = ver0;
    // CPU: gate, chunk cumsum, gate and beta backwards
    float *g = malloc((size_t)n * 4), *gc = malloc((size_t)n * 4), *df = malloc((size_t)n * 4);
    float *dA = copy_(dA0, HV), *ddt = copy_(ddt0, HK);
    float *be = malloc((size_t)nb * 4), *db = malloc((size_t)nb * 4);
    kda_gate_fwd(g, f, A_log, dtb, N, HV, K, NULL);
    for (int64_t i = 0; i < n; i++) {
        int64_t t = i / HK % T;
        gc[i] = g[i] + (t % chunk ? gc[i - HK] : 0.0f);
    }
    kda_gate_bwd(df, dA, ddt, dg, f, A_log, dtb, N, HV, K, NULL);
    kda_beta_fwd(be, b, nb, 1);
    kda_beta_bwd(db, dbeta, b, nb, 1);
    for (int v = 0; v < 2; v++) {
        float *hdf = malloc((size_t)n * 4), *hdb = malloc((size_t)nb * 4);
        int64_t bad = 0;
        for (int64_t i = 0; i < n; i++)
            hdf[i] = bf16_to_f32(bout[v][0][i]);
        for (int64_t i = 0; i < N; i++)
            for (int64_t j = 0; j < ldb; j++) {
                if (j < HV)
                    hdb[i * HV + j] = bf16_to_f32(bout[v][1][i * ldb + j]);
                else
                    bad += bout[v][1][i * ldb + j] != 0xFFFF;
            }
        printf("    v%d\n", v + 1);
        expect_("fused gate chunk cumsum fp32", gc, out[v][0], n, TOL_F32);
        expect_("fused beta fp32", be, out[v][1], nb, TOL_F32);
        expect_("fused gate bwd dA_log += fp32", dA, out[v][2], HV, TOL_F32);
        expect_("fused gate bwd ddt_bias += fp32", ddt, out[v][3], HK, TOL_F32);
        expect_("fused gate bwd df bf16", df, hdf, n, TOL_BF16);
        expect_("fused beta bwd db bf16", db, hdb, nb, TOL_BF16);
        CHECK_MSG(bad == 0, "fused beta bwd (v%d): %lld elements outside db's columns", v + 1,
                  (long long)bad);
        free(hdf), free(hdb);
    }
    // beta's expressions are v1's in both versions; K % 4 != 0 runs v1 whole
    CHECK_MSG(!memcmp(out[0][1], out[1][1], (size_t)nb * 4), "fused beta differs v1 vs v2");
    CHECK_MSG(!memcmp(bout[0][1], bout[1][1], (size_t)(N * ldb) * 2), "fused db differs v1/v2");
    if (K % 4)
        CHECK_MSG(!memcmp(out[0][0], out[1][0], (size_t)n * 4) &&
                      !memcmp(out[0][2], out[1][2], (size_t)HV * 4) &&
                      !memcmp(out[0][3], out[1][3], (size_t)HK * 4) &&
                      !memcmp(bout[0][0], bout[1][0], (size_t)n * 2),
                  "v2's fallback (K = %lld) differs from v1", (long long)K);
    for (int v = 0; v < 2; v++) {
        for (int k = 0; k < 4; k++)
            free(out[v][k]);
        free(bout[v][0]), free(bout[v][1]);
    }
    free(f), free(b), free(A_log), free(dtb), free(dg), free(dbeta), free(dA0), free(ddt0);
    free(g), free(gc), free(df), free(dA), free(ddt), free(be), free(db);
    dfree_all_();
}

KDA_TEST_GPU(gpu_gate_beta_fused) {
    if (!gpu_()) return;
    KdaRng r;
    rng_seed(&r, 116);
    gate_beta_case_(&r, 2, 1, 4, 32, 64);
    gate_beta_case_(&r, 3, 130, 3, 20, 64);
    gate_beta_case_(&r, 2, 100, 3, 8, 7);
    gate_beta_case_(&r, 16, 2048, 8, 32, 32); // the 300M model's shape and chunk
    gate_beta_case_(&r, 2, 65, 3, 6, 64);     // v2 falls back to v1
}

KDA_TEST_GPU(gpu_beta) {
    if (!gpu_()) return;
    KdaRng r;
    rng_seed(&r, 106);
    for (int neg = 0; neg < 2; neg++)
        for (int ti = 0; ti < N_T_SWEEP; ti++) {
            int64_t n = 2 * T_SWEEP[ti] * 8;
            float *b = bf16r_(randn_(&r, n, 3.0f), n), *dbeta = randn_(&r, n, 1.0f);
            float *beta = malloc((size_t)n * 4), *db = malloc((size_t)n * 4);
            kda_beta_fwd(beta, b, n, neg);
            kda_beta_bwd(db, dbeta, b, n, neg);
            kda_bf16 *dbg = dev_bf16_(b, n), *ddb = dev_poison_((size_t)n * 2);
            float *dbo = dev_poison_((size_t)n * 4), *ddbeta = dev_f32_(dbeta, n);
            ok_(kda_cuda_beta_fwd(&g_ctx, dbo, dbg, n, neg));
            ok_(kda_cuda_beta_bwd(&g_ctx, ddb, ddbeta, dbg, n, neg));
            float *g_beta = get_f32_(dbo, n), *g_db = get_bf16_(ddb, n);
            expect_(neg ? "beta (neg eig) fp32" : "beta fp32", beta, g_beta, n, TOL_F32);
            expect_("beta bwd db bf16", db, g_db, n, TOL_BF16);
            free(b), free(dbeta), free(beta), free(db), free(g_beta), free(g_db);
            dfree_all_();
        }
}

KDA_TEST_GPU(gpu_gnorm) {
    if (!gpu_()) return;
    KdaRng r;
    rng_seed(&r, 107);
    const int64_t Vs[] = {64, 20};
    for (int vi = 0; vi < 2; vi++)
        for (int ti = 0; ti < N_T_SWEEP; ti++) {
            int64_t N = 2 * T_SWEEP[ti] * 4, V = Vs[vi], n = N * V; // 4 value heads
            printf("  N=%lld V=%lld\n", (long long)N, (long long)V);
            float *x = bf16r_(randn_(&r, n, 0.3f), n), *z = bf16r_(randn_(&r, n, 2.0f), n);
            float *w = randn_(&r, V, 1.0f), *dy = bf16r_(randn_(&r, n, 1.0f), n);
            float *dw0 = randn_(&r, V, 1.0f);
            float *y = malloc((size_t)n * 4), *rs = malloc((size_t)N * 4);
            float *dx = malloc((size_t)n * 4), *dz = malloc((size_t)n * 4), *dw = copy_(dw0, V);
            gnorm_fwd(y, rs, x, z, w, N, V, 1e-6f);
            gnorm_bwd(dx, dz, dw, dy, x, z, w, rs, N, V);
            kda_bf16 *dxg = dev_bf16_(x, n), *dzg = dev_bf16_(z, n), *ddy = dev_bf16_(dy, n);
            float *dwg = dev_f32_(w, V), *ddw = dev_f32_(dw0, V), *drs = dev_poison_((size_t)N * 4);
            kda_bf16 *dyo = dev_poison_((size_t)n * 2), *ddx = dev_poison_((size_t)n * 2);
            kda_bf16 *ddz = dev_poison_((size_t)n * 2);
            ok_(kda_cuda_gnorm_fwd(&g_ctx, dyo, drs, dxg, dzg, dwg, N, V, 1e-6f));
            ok_(kda_cuda_gnorm_bwd(&g_ctx, ddx, ddz, ddw, ddy, dxg, dzg, dwg, drs, N, V));
            float *g_y = get_bf16_(dyo, n), *g_rs = get_f32_(drs, N), *g_dx = get_bf16_(ddx, n);
            float *g_dz = get_bf16_(ddz, n), *g_dw = get_f32_(ddw, V);
            expect_("gated rmsnorm y bf16", y, g_y, n, TOL_BF16);
            expect_("gated rmsnorm rstd", rs, g_rs, N, TOL_F32);
            expect_("gated rmsnorm bwd dx bf16", dx, g_dx, n, TOL_BF16);
            expect_("gated rmsnorm bwd dz bf16", dz, g_dz, n, TOL_BF16);
            expect_("gated rmsnorm bwd dw += fp32", dw, g_dw, V, TOL_F32);
            free(x), free(z), free(w), free(dy), free(dw0), free(y), free(rs), free(dx), free(dz);
            free(dw), free(g_y), free(g_rs), free(g_dx), free(g_dz), free(g_dw);
            dfree_all_();
        }
}

// One SwiGLU case over n elements, the bf16 tensors `off` elements past a 16-byte boundary.
// The kernels take 16-byte groups when every pointer is aligned and finish the n % 8 tail
// one element at a time; off != 0 takes the scalar path throughout.
static void swiglu_case_(KdaRng *r, int64_t n, int64_t off) {
    printf("  n=%lld offset=%lld\n", (long long)n, (long long)off);
    float *a = bf16r_(randn_(r, n, 2.0f), n), *b = bf16r_(randn_(r, n, 1.0f), n);
    float *dm = bf16r_(randn_(r, n, 1.0f), n);
    float *m = malloc((size_t)n * 4), *da = malloc((size_t)n * 4), *db = malloc((size_t)n * 4);
    swiglu_fwd(m, a, b, n);
    swiglu_bwd(da, db, dm, a, b, n);
    size_t bytes = (size_t)(n + off) * 2;
    kda_bf16 *dag = dev_poison_(bytes), *dbg = dev_poison_(bytes), *ddm = dev_poison_(bytes);
    ok_(kda_cuda_put_bf16(&g_ctx, dag + off, a, n));
    ok_(kda_cuda_put_bf16(&g_ctx, dbg + off, b, n));
    ok_(kda_cuda_put_bf16(&g_ctx, ddm + off, dm, n));
    kda_bf16 *dmo = dev_poison_(bytes), *dda = dev_poison_(bytes), *ddb = dev_poison_(bytes);
    ok_(kda_cuda_swiglu_fwd(&g_ctx, dmo + off, dag + off, dbg + off, n));
    ok_(kda_cuda_swiglu_bwd(&g_ctx, dda + off, ddb + off, ddm + off, dag + off, dbg + off, n));
    float *g_m = get_bf16_(dmo + off, n), *g_da = get_bf16_(dda + off, n);
    float *g_db = get_bf16_(ddb + off, n);
    expect_("swiglu m bf16", m, g_m, n, TOL_BF16);
    expect_("swiglu bwd da bf16", da, g_da, n, TOL_BF16);
    expect_("swiglu bwd db bf16", db, g_db, n, TOL_BF16);
    // In place (m = b, as the benchmark calls it): the same values as out of place.
    ok_(kda_cuda_swiglu_fwd(&g_ctx, dbg + off, dag + off, dbg + off, n));
    float *g_m2 = get_bf16_(dbg + off, n);
    CHECK_MSG(!memcmp(g_m, g_m2, (size_t)n * 4), "swiglu in place differs");
    free(a), free(b), free(dm), free(m), free(da), free(db), free(g_m), free(g_da), free(g_db);
    free(g_m2);
    dfree_all_();
}

KDA_TEST_GPU(gpu_swiglu) {
    if (!gpu_()) return;
    KdaRng r;
    rng_seed(&r, 108);
    for (int ti = 0; ti < N_T_SWEEP; ti++)
        swiglu_case_(&r, 2 * T_SWEEP[ti] * 352, 0); // rows of I = 352 (small MLP)
    swiglu_case_(&r, 1, 0);                         // tail only
    swiglu_case_(&r, 7, 0);
    swiglu_case_(&r, 2 * 63 * 353, 0);  // n % 8 = 6: vector groups + a 6-element tail
    swiglu_case_(&r, 2 * 63 * 353, 1);  // misaligned: scalar path
    swiglu_case_(&r, (1 << 22) + 3, 0); // large: one 8-group per thread, then a 3-element tail
}

// Embedding forward is a copy and the backward adds in the CPU's order: both must be exact.
KDA_TEST_GPU(gpu_embed) {
    if (!gpu_()) return;
    KdaRng r;
    rng_seed(&r, 109);
    const int64_t Ds[] = {64, 1024};
    for (int di = 0; di < 2; di++)
        for (int ti = 0; ti < N_T_SWEEP; ti++) {
            int64_t N = 2 * T_SWEEP[ti], D = Ds[di], nv = 1000;
            int64_t pad = di ? 3 : -1;
            float *E = randn_(&r, nv * D, 1.0f), *dh = randn_(&r, N * D, 1.0f);
            float *dE = randn_(&r, nv * D, 1.0f);
            int32_t *ids = malloc((size_t)N * 4);
            for (int64_t i = 0; i < N; i++) // many repeats, and the vocabulary's last row
                ids[i] = i % 5 == 4 ? (int32_t)(nv - 1) : (int32_t)rng_below(&r, 40);
            float *h = malloc((size_t)(N * D) * 4), *dEr = copy_(dE, nv * D);
            embed_fwd(h, E, ids, N, D);
            embed_bwd(dEr, dh, ids, N, D, pad);
            float *dEg = dev_f32_(E, nv * D), *ddh = dev_f32_(dh, N * D);
            float *ddE = dev_f32_(dE, nv * D), *dho = dev_poison_((size_t)(N * D) * 4);
            int32_t *dids = dalloc_((size_t)N * 4);
            ok_(kda_cuda_put_bytes(&g_ctx, dids, ids, (size_t)N * 4));
            ok_(kda_cuda_embed_fwd(&g_ctx, dho, dEg, dids, N, D));
            ok_(kda_cuda_embed_bwd(&g_ctx, ddE, ddh, dids, N, D, nv, pad));
            float *g_h = get_f32_(dho, N * D), *g_dE = get_f32_(ddE, nv * D);
            int exact_h = !memcmp(h, g_h, (size_t)(N * D) * 4);
            int exact_dE = !memcmp(dEr, g_dE, (size_t)(nv * D) * 4);
            printf("    embed N=%lld D=%lld pad=%lld: fwd %s, bwd %s\n", (long long)N, (long long)D,
                   (long long)pad, exact_h ? "exact" : "DIFFERS", exact_dE ? "exact" : "DIFFERS");
            CHECK(exact_h);
            CHECK(exact_dE);
            free(E), free(dh), free(dE), free(ids), free(h), free(dEr), free(g_h), free(g_dE);
            dfree_all_();
        }
}

// AdamW: the GPU kernel does the CPU's fp32 operations in the CPU's order without FMA
// contraction; sqrt and division are correctly rounded on both. Expect equality; allow 1e-6
// relative in case the host compiler contracts differently. Two decay groups, two steps, and the
// fused clip coefficient (gscale) against the CPU's in-place clipping.
KDA_TEST_GPU(gpu_adamw) {
    if (!gpu_()) return;
    KdaRng r;
    rng_seed(&r, 110);
    const int64_t n0 = 70001, n1 = 1234, n = n0 + n1;
    KdaParamInfo rows[2];
    memset(rows, 0, sizeof rows);
    rows[0].numel = n0, rows[0].offset = 0, rows[0].weight_decay = 1;
    rows[1].numel = n1, rows[1].offset = n0, rows[1].weight_decay = 0;
    KdaParamTable tab = {rows, 2, n};
    KdaAdamWConfig cfg = {0.9, 0.95, 1e-8, 0.1};
    KdaAdamW opt;
    KdaError err = {{0}};
    CHECK(kda_adamw_init(&opt, n, &cfg, &err) == 0);
    float *p = randn_(&r, n, 0.02f), *g = randn_(&r, n, 1.0f);
    float *dp = dev_f32_(p, n), *dg = dev_f32_(g, n), *dm = dalloc_((size_t)n * 4);
    float *dv = dalloc_((size_t)n * 4), *dcoef = dalloc_(4);
    double *dnorm = dalloc_(8);
    kda_bf16 *dpb = dev_poison_((size_t)n * 2);
    ok_(kda_cuda_zero(&g_ctx, dm, (size_t)n * 4));
    ok_(kda_cuda_zero(&g_ctx, dv, (size_t)n * 4));
    const double lrs[2] = {3e-4, 2e-4}, max_norm = 1.0;
    for (int step = 1; step <= 2; step++) {
        // CPU: clip in place, then the update
        float *gc = copy_(g, n);
        double coef = 1.0;
        kda_grad_clip(gc, n, max_norm, &coef);
        kda_adamw_step(&opt, &tab, p, gc, lrs[step - 1]);
        // GPU: norm -> coef -> AdamW with gscale, one call per decay group
        ok_(kda_cuda_grad_norm(&g_ctx, dnorm, dg, n));
        ok_(kda_cuda_clip_coef(&g_ctx, dcoef, dnorm, max_norm));
        for (int k = 0; k < 2; k++) {
            KdaCudaAdamScalars s = kda_cuda_adam_scalars(
                cfg.beta1, cfg.beta2, cfg.eps, rows[k].weight_decay ? cfg.weight_decay : 0.0, step,
                lrs[step - 1]);
            int64_t o = rows[k].offset;
            ok_(kda_cuda_adamw(&g_ctx, dp + o, dpb + o, dg + o, dm + o, dv + o, rows[k].numel, &s,
                               dcoef));
        }
        float coef_g = 0;
        ok_(kda_cuda_get_f32(&g_ctx, &coef_g, dcoef, 1));
        printf("    step %d: clip coef CPU %.9g GPU %.9g\n", step, coef, coef_g);
        CHECK(coef_g == (float)coef);
        free(gc);
        float *g_p = get_f32_(dp, n), *g_m = get_f32_(dm, n), *g_v = get_f32_(dv, n);
        float *g_pb = get_bf16_(dpb, n);
        int64_t same = 0;
        for (int64_t i = 0; i < n; i++)
            same += g_p[i] == p[i];
        printf("    step %d: %lld of %lld params bit-equal\n", step, (long long)same, (long long)n);
        expect_("adamw p", p, g_p, n, 1e-6);
        expect_("adamw m", opt.m, g_m, n, 1e-6);
        expect_("adamw v", opt.v, g_v, n, 1e-6);
        float *pr = bf16r_(copy_(g_p, n), n);
        CHECK(!memcmp(pr, g_pb, (size_t)n * 4)); // the bf16 copy is exactly bf16(p)
        free(g_p), free(g_m), free(g_v), free(g_pb), free(pr);
    }
    kda_adamw_free(&opt);
    free(p), free(g);
    dfree_all_();
}

// AdamW in one launch over runs (kda_cuda_adamw_runs, KDA_ADAMW_ONE=1) against one
// kda_cuda_adamw call per run: p, m, v and the bf16 copy bit for bit. Runs of 1-3 elements
// straddle the 16-byte groups. Case 0: n a multiple of 4, aligned (the vector kernel), no clip
// coefficient; case 1: n = 70003 (the scalar kernel); case 2: the buffers one float past their
// alignment (the scalar kernel), both with the clip coefficient.
KDA_TEST_GPU(gpu_adamw_runs_one_launch) {
    if (!gpu_()) return;
    KdaRng r;
    rng_seed(&r, 113);
    int64_t ends[] = {1, 2, 5, 8, 9, 100, 513, 1000, 4096, 70000, 70004};
    const unsigned char dec[] = {1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1};
    const int nr = (int)(sizeof ends / sizeof ends[0]);
    KdaCudaAdamScalars sd = kda_cuda_adam_scalars(0.9, 0.95, 1e-8, 0.1, 3, 3e-4);
    KdaCudaAdamScalars sn = kda_cuda_adam_scalars(0.9, 0.95, 1e-8, 0.0, 3, 3e-4);
    int64_t *dends = dalloc_(sizeof ends);
    unsigned char *ddec = dalloc_(sizeof dec);
    CHECK(kda_cuda_put_bytes(&g_ctx, ddec, dec, sizeof dec) == 0);
    float coef = 0.73f, *dcoef = dev_f32_(&coef, 1);
    for (int c = 0; c < 3; c++) {
        ends[nr - 1] = c == 1 ? 70003 : 70004;
        CHECK(kda_cuda_put_bytes(&g_ctx, dends, ends, sizeof ends) == 0);
        int64_t off = c == 2 ? 1 : 0, n = ends[nr - 1], nt = n + 1;
        float *p = randn_(&r, nt, 0.02f), *g = randn_(&r, nt, 1.0f);
        float *m = randn_(&r, nt, 0.01f), *v = randn_(&r, nt, 0.001f);
        for (int64_t i = 0; i < nt; i++)
            v[i] = fabsf(v[i]);
        float *P[2], *M[2], *V[2];
        kda_bf16 *PB[2];
        float *dg = dev_f32_(g, nt);
        for (int k = 0; k < 2; k++) {
            P[k] = dev_f32_(p, nt), M[k] = dev_f32_(m, nt), V[k] = dev_f32_(v, nt);
            PB[k] = dev_poison_((size_t)nt * 2);
        }
        const float *gs = c == 0 ? NULL : dcoef;
        ok_(kda_cuda_adamw_runs(&g_ctx, P[0] + off, PB[0] + off, dg + off, M[0] + off, V[0] + off,
                                n, dends, ddec, nr, &sd, &sn, gs));
        for (int k = 0; k < nr; k++) {
            int64_t a = off + (k ? ends[k - 1] : 0), b = off + ends[k];
            ok_(kda_cuda_adamw(&g_ctx, P[1] + a, PB[1] + a, dg + a, M[1] + a, V[1] + a, b - a,
                               dec[k] ? &sd : &sn, gs));
        }
        float *h[2][3];
        kda_bf16 *hb[2];
        for (int k = 0; k < 2; k++) {
            h[k][0] = get_f32_(P[k], nt), h[k][1] = get_f32_(M[k], nt),
            h[k][2] = get_f32_(V[k], nt);
            hb[k] = malloc((size_t)nt * 2);
            CHECK(kda_cuda_get_bytes(&g_ctx, hb[k], PB[k], (size_t)nt * 2) == 0);
        }
        int64_t moved = 0;
        for (int64_t i = 0; i < n; i++)
            moved += h[0][0][off + i] != p[off + i];
        CHECK_MSG(!memcmp(h[0][0], h[1][0], (size_t)nt * 4) &&
                      !memcmp(h[0][1], h[1][1], (size_t)nt * 4) &&
                      !memcmp(h[0][2], h[1][2], (size_t)nt * 4) &&
                      !memcmp(hb[0], hb[1], (size_t)nt * 2),
                  "case %d: one launch differs from one launch per run", c);
        CHECK_MSG(moved > n / 2, "case %d: only %lld of %lld parameters moved", c, (long long)moved,
                  (long long)n);
        printf("    case %d: n %lld, %d runs, offset %lld: bit-identical, %lld parameters moved\n",
               c, (long long)n, nr, (long long)off, (long long)moved);
        for (int k = 0; k < 2; k++)
            free(h[k][0]), free(h[k][1]), free(h[k][2]), free(hb[k]);
        free(p), free(g), free(m), free(v);
    }
    dfree_all_();
}

// Grad norm: double accumulation on both sides, different orders: rel 1e-12. Two runs on the
// GPU must give the same bits (fixed two-stage order).
KDA_TEST_GPU(gpu_grad_norm) {
    if (!gpu_()) return;
    KdaRng r;
    rng_seed(&r, 111);
    const int64_t ns[] = {1, 1000, 262145, 10000019};
    for (int k = 0; k < 4; k++) {
        int64_t n = ns[k];
        float *g = randn_(&r, n, 1e-3f);
        double ref = kda_grad_norm(g, n);
        float *dg = dev_f32_(g, n);
        double *dn = dalloc_(16);
        ok_(kda_cuda_grad_norm(&g_ctx, dn, dg, n));
        ok_(kda_cuda_grad_norm(&g_ctx, dn + 1, dg, n));
        double got[2] = {0, 0};
        ok_(kda_cuda_get_bytes(&g_ctx, got, dn, 16));
        printf("    grad norm n=%lld: CPU %.17g GPU %.17g\n", (long long)n, ref, got[0]);
        CHECK(fabs(got[0] - ref) <= 1e-12 * ref);
        CHECK(got[0] == got[1]);
        // a NaN anywhere makes the norm non-finite, and the clip coefficient 1
        float nan = NAN;
        ok_(kda_cuda_put_f32(&g_ctx, dg + n / 2, &nan, 1));
        float *dc = dalloc_(4);
        ok_(kda_cuda_grad_norm(&g_ctx, dn, dg, n));
        ok_(kda_cuda_clip_coef(&g_ctx, dc, dn, 1.0));
        float c = 0;
        ok_(kda_cuda_get_f32(&g_ctx, &c, dc, 1));
        ok_(kda_cuda_get_bytes(&g_ctx, got, dn, 8));
        CHECK(!isfinite(got[0]));
        CHECK(c == 1.0f);
        free(g);
        dfree_all_();
    }
}

// ---- fused elementwise kernels (model_cuda's default; KDA_FUSE=0 runs the unfused ones) --------
// Each fused kernel on the device against (a) its host twin (test_fuse_host.c checks the twin
// against the CPU ops) and (b) the unfused device kernels it replaces. Tolerances: bf16 outputs
// 1e-2 (the twin differs by FMA contraction and the device's expf; the unfused path rounds the
// conv output and z + bias to bf16 first), fp32 outputs 1e-5 (rstd) and dw/dbias as their unfused
// twins' tests (fp32 1e-5); dbias, a column sum of the bf16 dz, 1e-3 against the twin (a dz
// rounding may flip) and 1e-2 against the unfused path (its dz come from bf16(z + bias)).

static kda_bf16 *dev_bf16_off_(const float *h, int64_t n) { // 16-byte aligned (fresh allocation)
    return dev_bf16_(h, n);
}

static void fuse_conv_l2_case_(KdaRng *r, int64_t B, int64_t T, int64_t H, int64_t K, int64_t W) {
    int64_t C = H * K, n = B * T * C, NH = B * T * H;
    printf("  B=%lld T=%lld H=%lld K=%lld W=%lld\n", (long long)B, (long long)T, (long long)H,
           (long long)K, (long long)W);
    float *p = bf16r_(randn_(r, n, 1.0f), n), *w = randn_(r, C * W, 0.5f);
    float *dq = randn_(r, n, 1.0f), *dw0 = randn_(r, C * W, 1.0f);
    kda_bf16 *dp_ = dev_bf16_off_(p, n), *dy = dev_poison_((size_t)n * 2);
    kda_bf16 *dqc = dev_poison_((size_t)n * 2), *ddp = dev_poison_((size_t)n * 2);
    kda_bf16 *dy_u = dev_poison_((size_t)n * 2), *dt = dev_poison_((size_t)n * 2);
    kda_bf16 *ddp_u = dev_poison_((size_t)n * 2);
    float *dw_ = dev_f32_(w, C * W), *ddq = dev_f32_(dq, n), *drs = dev_poison_((size_t)NH * 4);
    float *drs_u = dev_poison_((size_t)NH * 4), *ddw = dev_f32_(dw0, C * W);
    float *ddw_u = dev_f32_(dw0, C * W);
    // fused
    ok_(kda_cuda_conv_silu_l2_fwd(&g_ctx, dy, drs, dp_, dw_, B, T, C, W, K, 1e-6f));
    ok_(kda_cuda_conv_silu_l2_bwd(&g_ctx, ddp, ddw, ddq, dp_, dw_, drs, B, T, C, W, K));
    // unfused: conv -> l2norm; l2norm_bwd -> conv_bwd
    ok_(kda_cuda_conv_silu_fwd(&g_ctx, dqc, dp_, dw_, B, T, C, W));
    ok_(kda_cuda_l2norm_fwd(&g_ctx, dy_u, drs_u, dqc, NH, K, 1e-6f));
    ok_(kda_cuda_l2norm_bwd(&g_ctx, dt, ddq, dqc, drs_u, NH, K));
    ok_(kda_cuda_conv_silu_bwd(&g_ctx, ddp_u, ddw_u, dt, dp_, dw_, B, T, C, W));
    float *g_y = get_bf16_(dy, n), *g_rs = get_f32_(drs, NH), *g_dp = get_bf16_(ddp, n);
    float *g_dw = get_f32_(ddw, C * W), *u_y = get_bf16_(dy_u, n), *u_rs = get_f32_(drs_u, NH);
    float *u_dp = get_bf16_(ddp_u, n), *u_dw = get_f32_(ddw_u, C * W);
    // host twin on the same inputs
    kda_bf16 *pb = malloc((size_t)n * 2), *yb = malloc((size_t)n * 2), *dpb = malloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++)
        pb[i] = f32_to_bf16(p[i]);
    float *h_rs = malloc((size_t)NH * 4), *h_dw = copy_(dw0, C * W);
    kda_cuda_conv_silu_l2_fwd_host(yb, h_rs, pb, w, B, T, C, W, K, 1e-6f);
    kda_cuda_conv_silu_l2_bwd_host(dpb, h_dw, dq, pb, w, h_rs, B, T, C, W, K);
    float *h_y = malloc((size_t)n * 4), *h_dp = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++)
        h_y[i] = bf16_to_f32(yb[i]), h_dp[i] = bf16_to_f32(dpb[i]);
    expect_("fused conv+l2 y vs host twin", h_y, g_y, n, TOL_BF16);
    expect_("fused conv+l2 rstd vs host twin", h_rs, g_rs, NH, TOL_F32);
    expect_("fused conv+l2 dp vs host twin", h_dp, g_dp, n, TOL_BF16);
    expect_("fused conv+l2 dw vs host twin", h_dw, g_dw, C * W, TOL_F32);
    expect_("fused conv+l2 y vs unfused", u_y, g_y, n, TOL_BF16);
    expect_("fused conv+l2 rstd vs unfused", u_rs, g_rs, NH, TOL_BF16); // bf16 vs fp32 qc
    expect_("fused conv+l2 dp vs unfused", u_dp, g_dp, n, TOL_BF16);
    expect_("fused conv+l2 dw vs unfused", u_dw, g_dw, C * W, TOL_BF16); // bf16 dqc unfused
    // determinism: a second backward gives the same bits
    float *ddw2 = dev_f32_(dw0, C * W);
    ok_(kda_cuda_conv_silu_l2_bwd(&g_ctx, ddp, ddw2, ddq, dp_, dw_, drs, B, T, C, W, K));
    float *g_dw2 = get_f32_(ddw2, C * W);
    CHECK_MSG(!memcmp(g_dw, g_dw2, (size_t)(C * W) * 4), "fused conv dw differs between runs");
    free(p), free(w), free(dq), free(dw0), free(g_y), free(g_rs), free(g_dp), free(g_dw);
    free(u_y), free(u_rs), free(u_dp), free(u_dw), free(pb), free(yb), free(dpb), free(h_rs);
    free(h_dw), free(h_y), free(h_dp), free(g_dw2);
    dfree_all_();
}

KDA_TEST_GPU(gpu_fuse_conv_silu_l2) {
    if (!gpu_()) return;
    KdaRng r;
    rng_seed(&r, 151);
    fuse_conv_l2_case_(&r, 2, 1, 2, 8, 4);
    fuse_conv_l2_case_(&r, 2, 65, 3, 16, 4);
    fuse_conv_l2_case_(&r, 2, 2048, 8, 32, 4); // the 300M shape at B = 2
    fuse_conv_l2_case_(&r, 1, 63, 2, 64, 3);
    fuse_conv_l2_case_(&r, 1, 64, 1, 128, 1);
}

static void fuse_gnorm_case_(KdaRng *r, int64_t N, int64_t HV, int64_t V) {
    int64_t NR = N * HV, n = NR * V, HVV = HV * V;
    printf("  N=%lld HV=%lld V=%lld\n", (long long)N, (long long)HV, (long long)V);
    float *x = bf16r_(randn_(r, n, 0.3f), n), *z = bf16r_(randn_(r, n, 2.0f), n);
    float *g = bf16r_(randn_(r, n, 1.0f), n), *bias = randn_(r, HVV, 0.5f);
    float *w = randn_(r, V, 1.0f), *dw0 = randn_(r, V, 1.0f), *db0 = randn_(r, HVV, 1.0f);
    kda_bf16 *dx_ = dev_bf16_(x, n), *dz_ = dev_bf16_(z, n), *dg = dev_bf16_(g, n);
    kda_bf16 *dzu = dev_bf16_(z, n); // the unfused path adds the bias into z in place
    float *dbias = dev_f32_(bias, HVV), *dw_ = dev_f32_(w, V);
    kda_bf16 *dy = dev_poison_((size_t)n * 2), *ddx = dev_poison_((size_t)n * 2);
    kda_bf16 *ddz = dev_poison_((size_t)n * 2), *dy_u = dev_poison_((size_t)n * 2);
    kda_bf16 *ddx_u = dev_poison_((size_t)n * 2), *ddz_u = dev_poison_((size_t)n * 2);
    float *drs = dev_poison_((size_t)NR * 4), *drs_u = dev_poison_((size_t)NR * 4);
    float *ddw = dev_f32_(dw0, V), *ddb = dev_f32_(db0, HVV);
    float *ddw_u = dev_f32_(dw0, V), *ddb_u = dev_f32_(db0, HVV);
    ok_(kda_cuda_gnorm_bias_fwd(&g_ctx, dy, drs, dx_, dz_, dbias, dw_, N, HV, V, 1e-6f));
    ok_(kda_cuda_gnorm_bias_bwd(&g_ctx, ddx, ddz, ddw, ddb, dg, dx_, dz_, dbias, dw_, drs, N, HV,
                                V));
    ok_(kda_cuda_bias_add(&g_ctx, dzu, dbias, N, HVV));
    ok_(kda_cuda_gnorm_fwd(&g_ctx, dy_u, drs_u, dx_, dzu, dw_, NR, V, 1e-6f));
    ok_(kda_cuda_gnorm_bwd(&g_ctx, ddx_u, ddz_u, ddw_u, dg, dx_, dzu, dw_, drs_u, NR, V));
    ok_(kda_cuda_bias_bwd(&g_ctx, ddb_u, ddz_u, N, HVV));
    float *g_y = get_bf16_(dy, n), *g_rs = get_f32_(drs, NR), *g_dx = get_bf16_(ddx, n);
    float *g_dz = get_bf16_(ddz, n), *g_dw = get_f32_(ddw, V), *g_db = get_f32_(ddb, HVV);
    float *u_y = get_bf16_(dy_u, n), *u_dx = get_bf16_(ddx_u, n), *u_dz = get_bf16_(ddz_u, n);
    float *u_rs = get_f32_(drs_u, NR), *u_dw = get_f32_(ddw_u, V), *u_db = get_f32_(ddb_u, HVV);
    // host twin
    kda_bf16 *xb = malloc((size_t)n * 2), *zb = malloc((size_t)n * 2), *gb = malloc((size_t)n * 2);
    kda_bf16 *yb = malloc((size_t)n * 2), *dxb = malloc((size_t)n * 2),
             *dzb = malloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++)
        xb[i] = f32_to_bf16(x[i]), zb[i] = f32_to_bf16(z[i]), gb[i] = f32_to_bf16(g[i]);
    float *h_rs = malloc((size_t)NR * 4), *h_dw = copy_(dw0, V), *h_db = copy_(db0, HVV);
    kda_cuda_gnorm_bias_fwd_host(yb, h_rs, xb, zb, bias, w, N, HV, V, 1e-6f);
    kda_cuda_gnorm_bias_bwd_host(dxb, dzb, h_dw, h_db, gb, xb, zb, bias, w, h_rs, N, HV, V);
    float *h_y = malloc((size_t)n * 4), *h_dx = malloc((size_t)n * 4),
          *h_dz = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++)
        h_y[i] = bf16_to_f32(yb[i]), h_dx[i] = bf16_to_f32(dxb[i]), h_dz[i] = bf16_to_f32(dzb[i]);
    expect_("fused gnorm+bias y vs host twin", h_y, g_y, n, TOL_BF16);
    expect_("fused gnorm+bias rstd vs host twin", h_rs, g_rs, NR, TOL_F32);
    expect_("fused gnorm+bias dx vs host twin", h_dx, g_dx, n, TOL_BF16);
    expect_("fused gnorm+bias dz vs host twin", h_dz, g_dz, n, TOL_BF16);
    expect_("fused gnorm+bias dw vs host twin", h_dw, g_dw, V, TOL_F32);
    // dbias sums the bf16 dz: one dz rounding that flips between device and twin (their fp32
    // dz differ by FMA / expf ulps) moves a column by ~2^-8 |dz|: 1e-3 covers a few flips
    expect_("fused gnorm+bias dbias vs host twin", h_db, g_db, HVV, 1e-3);
    expect_("fused gnorm+bias y vs unfused", u_y, g_y, n, TOL_BF16);
    expect_("fused gnorm+bias rstd vs unfused", u_rs, g_rs, NR, TOL_F32);
    expect_("fused gnorm+bias dx vs unfused", u_dx, g_dx, n, TOL_BF16);
    expect_("fused gnorm+bias dz vs unfused", u_dz, g_dz, n, TOL_BF16);
    expect_("fused gnorm+bias dw vs unfused", u_dw, g_dw, V, TOL_BF16); // σ of bf16 z + bias
    expect_("fused gnorm+bias dbias vs unfused", u_db, g_db, HVV, TOL_BF16);
    free(x), free(z), free(g), free(bias), free(w), free(dw0), free(db0), free(g_y), free(g_rs);
    free(g_dx), free(g_dz), free(g_dw), free(g_db), free(u_y), free(u_dx), free(u_dz), free(u_rs);
    free(u_dw), free(u_db), free(xb), free(zb), free(gb), free(yb), free(dxb), free(dzb);
    free(h_rs), free(h_dw), free(h_db), free(h_y), free(h_dx), free(h_dz);
    dfree_all_();
}

// The v2 conv kernels (KDA_CONV_V=2: forward 4 channels x 8 tokens per thread, backward 2 x 8,
// loads issued at the tile start, the backward's blocks walking several block rows) against the
// CPU reference and the host twin: T = 1 and T not a multiple of the 8-token tiles, C with
// partial channel groups (36: 9 and 18 groups of a 32-lane block; 6 takes the backward's 2-channel
// path only), odd C and misaligned pointers (the v1 fallback), W 1..8, the model's B·T (512 block
// rows, the backward's 256-row cap walked twice) and the fused q/k kernels with K 8..128 (K = 128
// keeps the v1 backward: K / 2 lanes would exceed a warp).
KDA_TEST_GPU(gpu_conv_v2) {
    if (!gpu_()) return;
    KdaRng r;
    rng_seed(&r, 171);
    GpuEnv cvv;
    gpu_env_set(&cvv, "KDA_CONV_V", "2");
    conv_case_(&r, 2, 1, 36, 4, 0);
    conv_case_(&r, 3, 65, 36, 4, 0);
    conv_case_(&r, 2, 33, 6, 3, 0);
    conv_case_(&r, 1, 31, 5, 2, 0);
    conv_case_(&r, 2, 63, 384, 4, 1);
    conv_case_(&r, 2, 97, 256, 8, 0);
    conv_case_(&r, 1, 17, 512, 1, 0);
    conv_case_(&r, 16, 2048, 512, 4, 0);
    fuse_conv_l2_case_(&r, 2, 65, 8, 32, 4);
    fuse_conv_l2_case_(&r, 1, 1, 2, 8, 4);
    fuse_conv_l2_case_(&r, 3, 17, 3, 64, 8);
    fuse_conv_l2_case_(&r, 1, 40, 2, 128, 2);
    fuse_conv_l2_case_(&r, 16, 2048, 8, 32, 4);
    gpu_env_restore(&cvv);
}

// The fused q/k kernels are instantiated per head size K (its lane group, K / VEC lanes, is a
// compile-time constant of the kernel): every K of kda_cuda_conv_l2_fusable through the v1 and the
// v2 kernels, forward and backward (K = 128's v2 backward runs v1), against the host twin and the
// unfused path, with H = 3 (a partial 32-lane block: whole heads of lanes idle); and the v1
// kernels with and without the prefetch, bit for bit.
KDA_TEST_GPU(gpu_fuse_conv_l2_each_k) {
    if (!gpu_()) return;
    KdaRng r;
    rng_seed(&r, 173);
    const int64_t Ks[] = {8, 16, 32, 64, 128};
    for (int v = 1; v <= 2; v++) {
        GpuEnv cvv;
        gpu_env_set(&cvv, "KDA_CONV_V", v == 1 ? "1" : "2");
        for (int k = 0; k < 5; k++) {
            fuse_conv_l2_case_(&r, 2, 37, 3, Ks[k], 4);
            if (v == 1) conv_pf_case_(&r, 1, 33, 3 * Ks[k], 3, Ks[k]);
        }
        gpu_env_restore(&cvv);
    }
}

// q, k and v's convs in one launch (kda_cuda_conv_qkv_fwd / _bwd, the model's KDA_CONV_QKV=1)
// against the three separate launchers on the same inputs, bit for bit: y, rstd, dp (poisoned
// first; with ldo > 0 the three dp share one [B·T, ldo] buffer, q | k | v then unused columns, as
// the model's fused dY, and the unused columns must stay poisoned) and dw (+= onto the same
// values). want_one: whether the call must run as one launch (kda_cuda_conv_qkv_*_one; W > 4 and
// KDA_CONV_V=1 run the separate launches inside the launcher, still the same bits).
static void conv_qkv_gpu_case_(KdaRng *r, int64_t B, int64_t T, int64_t H, int64_t K, int64_t HVV,
                               int64_t W, int64_t ldo, int want_one) {
    int64_t HK = H * K, N = B * T, C[3] = {HK, HK, HVV}, NH = N * H;
    int64_t col[3] = {0, HK, 2 * HK}, dpn = ldo > 0 ? N * ldo : N * (2 * HK + HVV);
    printf("  B=%lld T=%lld H=%lld K=%lld HVV=%lld W=%lld ldo=%lld one=%d\n", (long long)B,
           (long long)T, (long long)H, (long long)K, (long long)HVV, (long long)W, (long long)ldo,
           want_one);
    kda_bf16 *p[3], *y[2][3], *dpb[2], *dy;
    float *w[3], *dw[2][3], *dq[2], *rs[2][2];
    float *hdw0[3];
    for (int i = 0; i < 3; i++) {
        int64_t n = N * C[i];
        float *hp = randn_(r, n, 1.0f), *hw = randn_(r, C[i] * W, 0.5f);
        hdw0[i] = randn_(r, C[i] * W, 1.0f);
        p[i] = dev_bf16_off_(hp, n), w[i] = dev_f32_(hw, C[i] * W);
        for (int o = 0; o < 2; o++) {
            y[o][i] = dev_poison_((size_t)n * 2), dw[o][i] = dev_f32_(hdw0[i], C[i] * W);
            if (i < 2) rs[o][i] = dev_poison_((size_t)NH * 4);
        }
        if (i < 2) {
            float *hq = randn_(r, n, 1.0f);
            dq[i] = dev_f32_(hq, n);
            free(hq);
        }
        free(hp), free(hw);
    }
    float *hdy = randn_(r, N * HVV, 1.0f);
    dy = dev_bf16_off_(hdy, N * HVV);
    free(hdy);
    for (int o = 0; o < 2; o++)
        dpb[o] = dev_poison_((size_t)dpn * 2);
    // o = 0: the combined launcher; o = 1: the separate launchers
    KdaConvQkvFwd f[2][3];
    KdaConvQkvBwd b[2][3];
    for (int o = 0; o < 2; o++)
        for (int i = 0; i < 3; i++) {
            f[o][i] = (KdaConvQkvFwd){y[o][i], i < 2 ? rs[o][i] : NULL, p[i], w[i]};
            kda_bf16 *dp = ldo > 0 ? dpb[o] + col[i] : dpb[o] + N * col[i];
            b[o][i] = (KdaConvQkvBwd){dp,
                                      ldo > 0 ? ldo : C[i],
                                      dw[o][i],
                                      i < 2 ? dq[i] : NULL,
                                      i < 2 ? NULL : dy,
                                      p[i],
                                      w[i],
                                      i < 2 ? rs[o][i] : NULL};
        }
    CHECK_MSG(kda_cuda_conv_qkv_fwd_one(f[0], B, T, HK, HVV, W, K) == want_one &&
                  kda_cuda_conv_qkv_bwd_one(b[0], B, T, HK, HVV, W, K) == want_one,
              "one launch: want %d", want_one);
    ok_(kda_cuda_conv_qkv_fwd(&g_ctx, f[0], B, T, HK, HVV, W, K, 1e-6f));
    ok_(kda_cuda_conv_qkv_bwd(&g_ctx, b[0], B, T, HK, HVV, W, K));
    for (int i = 0; i < 2; i++)
        ok_(kda_cuda_conv_silu_l2_fwd(&g_ctx, y[1][i], rs[1][i], p[i], w[i], B, T, HK, W, K,
                                      1e-6f));
    ok_(kda_cuda_conv_silu_fwd(&g_ctx, y[1][2], p[2], w[2], B, T, HVV, W));
    for (int i = 0; i < 2; i++)
        ok_(kda_cuda_conv_silu_l2_bwd_ld(&g_ctx, b[1][i].dp, b[1][i].ldo, dw[1][i], dq[i], p[i],
                                         w[i], rs[1][i], B, T, HK, W, K));
    ok_(kda_cuda_conv_silu_bwd_ld(&g_ctx, b[1][2].dp, b[1][2].ldo, dw[1][2], dy, p[2], w[2], B, T,
                                  HVV, W));
    for (int i = 0; i < 3; i++) {
        int64_t n = N * C[i];
        float *ya = get_bf16_(y[0][i], n), *yb = get_bf16_(y[1][i], n);
        float *wa = get_f32_(dw[0][i], C[i] * W), *wb = get_f32_(dw[1][i], C[i] * W);
        int64_t nan = 0;
        for (int64_t e = 0; e < n; e++)
            nan += isnan(ya[e]);
        CHECK_MSG(!memcmp(ya, yb, (size_t)n * 4) && nan == 0,
                  "part %d: y of the combined launch differs (%lld unwritten)", i, (long long)nan);
        CHECK_MSG(!memcmp(wa, wb, (size_t)(C[i] * W) * 4), "part %d: dw differs", i);
        if (i < 2) {
            float *ra = get_f32_(rs[0][i], NH), *rb = get_f32_(rs[1][i], NH);
            CHECK_MSG(!memcmp(ra, rb, (size_t)NH * 4), "part %d: rstd differs", i);
            free(ra), free(rb);
        }
        free(ya), free(yb), free(wa), free(wb), free(hdw0[i]);
    }
    float *da = get_bf16_(dpb[0], dpn), *db = get_bf16_(dpb[1], dpn);
    int64_t nan = 0;
    for (int i = 0; i < 3; i++) // the parts' columns all written
        for (int64_t rr = 0; rr < N; rr++)
            for (int64_t c = 0; c < C[i]; c++)
                nan += isnan(ldo > 0 ? da[rr * ldo + col[i] + c] : da[N * col[i] + rr * C[i] + c]);
    CHECK_MSG(!memcmp(da, db, (size_t)dpn * 4) && nan == 0,
              "dp of the combined launch differs (%lld unwritten)", (long long)nan);
    if (ldo > 0) {
        int64_t kept = 0, w0 = 2 * HK + HVV;
        for (int64_t rr = 0; rr < N; rr++)
            for (int64_t c = w0; c < ldo; c++)
                kept += isnan(da[rr * ldo + c]);
        CHECK_MSG(kept == N * (ldo - w0), "dp columns past the parts written");
    }
    free(da), free(db);
    dfree_all_();
}

KDA_TEST_GPU(gpu_conv_qkv_matches_separate) {
    if (!gpu_()) return;
    KdaRng r;
    rng_seed(&r, 191);
    GpuEnv cvv, pf; // the default kernels whatever the suite runs under, put back at the end
    gpu_env_set(&cvv, "KDA_CONV_V", NULL), gpu_env_set(&pf, "KDA_CONV_PREFETCH", NULL);
    conv_qkv_gpu_case_(&r, 16, 2048, 8, 32, 512, 4, 0, 1);   // the 300M shapes, mb 16
    conv_qkv_gpu_case_(&r, 2, 2048, 8, 32, 512, 4, 1160, 1); // the fused dY: ldo 1160
    conv_qkv_gpu_case_(&r, 3, 37, 3, 16, 40, 3, 0, 1);       // partial tiles and blocks, B = 3
    conv_qkv_gpu_case_(&r, 1, 1, 2, 8, 24, 1, 0, 1);         // T = 1, W = 1
    conv_qkv_gpu_case_(&r, 2, 45, 1, 128, 64, 2, 328, 1);    // K = 128 (v1 backward), ldo > C
    conv_qkv_gpu_case_(&r, 1, 300, 2, 64, 256, 4, 0, 1);
    conv_qkv_gpu_case_(&r, 2, 33, 2, 32, 64, 8, 0, 0); // W = 8: the separate launches inside
    setenv("KDA_CONV_V", "1", 1);                      // other kernels: the separate launches
    conv_qkv_gpu_case_(&r, 2, 33, 2, 32, 64, 4, 0, 0); // (cvv puts the suite's value back)
    gpu_env_restore(&cvv), gpu_env_restore(&pf);
}

// One conv case with KDA_FAST_EXP=1 (the fast SiLU / SiLU', src/cuda/fast_math.cuh) against the
// same launchers without it. Tolerances (docs/perf-log.md, "Fast exponentials in SiLU and the CE
// sum pass"): the fast SiLU is within 2e-6 relative of the precise one for |x| <= 20 (8e-6 to
// -87), SiLU' within 2e-6 absolute, so
//   * y (bf16): each element within one bf16 ulp (2^-7 |ref|: the fp32 values differ by ~1e-6
//     relative, which moves a value across a rounding boundary at most), and at most 1 % of the
//     elements differ at all (expected ~2 · 1e-6 / 2^-9 ≈ 0.1 %); rel RMS 1e-3;
//   * dp (bf16): rel RMS 1e-3 (the same flips; dp = Σ_i w_i g SiLU'(c) carries SiLU''s 2e-6
//     absolute times Σ|w g|, far below a bf16 ulp of typical values);
//   * rstd, dw (fp32): rel RMS 1e-5 (sums of terms each within ~2e-6 relative).
// And the switch must change something (dw, fp32, always differs): a dead switch fails.
static void conv_fx_case_(KdaRng *r, int64_t B, int64_t T, int64_t C, int64_t W, int64_t K) {
    printf("  B=%lld T=%lld C=%lld W=%lld K=%lld\n", (long long)B, (long long)T, (long long)C,
           (long long)W, (long long)K);
    ConvIn c = conv_in_(r, B, T, C, W, K);
    int64_t n = c.n, nr = c.nr;
    float *out[2][4]; // [fast][y, rstd, dp, dw]
    conv_run_env_(&c, "KDA_FAST_EXP", "0", out[0]);
    conv_run_env_(&c, "KDA_FAST_EXP", "1", out[1]);
    int64_t flips = 0, far = 0;
    for (int64_t i = 0; i < n; i++) {
        float a = out[1][0][i], b = out[0][0][i];
        flips += a != b;
        far += !(fabs(a - b) <= ldexp(fabs(b), -7) + 1e-30);
    }
    printf("    y: %lld of %lld differ (%.3f %%), %lld beyond one bf16 ulp\n", (long long)flips,
           (long long)n, 100.0 * (double)flips / (double)n, (long long)far);
    CHECK_MSG(far == 0 && flips <= n / 100, "fast y: %lld beyond one ulp, %lld differing",
              (long long)far, (long long)flips);
    expect_("fast-exp conv y", out[0][0], out[1][0], n, 1e-3);
    if (K > 0) expect_("fast-exp conv rstd", out[0][1], out[1][1], nr, 1e-5);
    expect_("fast-exp conv dp", out[0][2], out[1][2], n, 1e-3);
    expect_("fast-exp conv dw", out[0][3], out[1][3], C * W, 1e-5);
    CHECK_MSG(W > 4 || memcmp(out[0][3], out[1][3], (size_t)(C * W) * 4) != 0,
              "KDA_FAST_EXP=1 changed nothing (W %lld <= 4 takes the fast kernels)", (long long)W);
    conv_case_free_(&c, out);
}

// KDA_FAST_EXP=1 through every conv launcher the model uses (plain and fused q/k + L2, v1 and
// v2, the 300M shapes at mb 16) against the precise kernels (conv_fx_case_'s tolerances); W = 8
// (no fast instantiation: the precise kernels, the same bits); and the q|k|v launch with the
// switch on against its separate launches, bit for bit (both take the fast kernels).
KDA_TEST_GPU(gpu_conv_fast_exp) {
    if (!gpu_()) return;
    KdaRng r;
    rng_seed(&r, 197);
    GpuEnv cvv, pf; // the default kernels whatever the suite runs under, put back at the end
    gpu_env_set(&cvv, "KDA_CONV_V", NULL), gpu_env_set(&pf, "KDA_CONV_PREFETCH", NULL);
    conv_fx_case_(&r, 16, 2048, 512, 4, 0);  // v: the model's shape
    conv_fx_case_(&r, 16, 2048, 256, 4, 32); // q, k: H 8 x K 32
    conv_fx_case_(&r, 2, 65, 36, 3, 0);
    conv_fx_case_(&r, 3, 37, 3 * 64, 2, 64);
    conv_fx_case_(&r, 2, 33, 256, 8, 0); // W = 8: precise under the switch
    setenv("KDA_CONV_V", "2", 1);        // the v2 fused backward
    conv_fx_case_(&r, 2, 2048, 256, 4, 32);
    conv_fx_case_(&r, 2, 63, 3 * 16, 1, 16);
    unsetenv("KDA_CONV_V"); // (cvv puts the suite's value back at the end)
    GpuEnv fx;
    gpu_env_set(&fx, "KDA_FAST_EXP", "1");
    conv_qkv_gpu_case_(&r, 16, 2048, 8, 32, 512, 4, 0, 1);
    conv_qkv_gpu_case_(&r, 2, 2048, 8, 32, 512, 4, 1160, 1);
    conv_qkv_gpu_case_(&r, 3, 37, 3, 16, 40, 3, 0, 1);
    gpu_env_restore(&fx);
    gpu_env_restore(&cvv), gpu_env_restore(&pf);
}

KDA_TEST_GPU(gpu_fuse_gnorm_bias) {
    if (!gpu_()) return;
    KdaRng r;
    rng_seed(&r, 153);
    fuse_gnorm_case_(&r, 1, 1, 8);
    fuse_gnorm_case_(&r, 65, 3, 16);   // rows not a multiple of the tile
    fuse_gnorm_case_(&r, 4096, 8, 64); // the 300M head, 128 tiles
    fuse_gnorm_case_(&r, 63, 2, 256);  // 32 lanes per row
}

// The RMSNorm backward's bf16 copy of dx is bf16(dx) exactly (every path: rows in registers at
// D = 1024 and 2048, fused with the dw sums at 36, wider rows separate at 2176), and dx and dw are
// the plain launcher's bits.
KDA_TEST_GPU(gpu_fuse_rmsnorm_bwd_bf16) {
    if (!gpu_()) return;
    KdaRng r;
    rng_seed(&r, 155);
    const int64_t Ds[] = {1024, 2048, 36, 2176};
    for (int di = 0; di < 4; di++)
        for (int acc = 0; acc < 2; acc++) {
            int64_t N = 300, D = Ds[di], n = N * D;
            printf("  N=%lld D=%lld accumulate=%d\n", (long long)N, (long long)D, acc);
            float *x = randn_(&r, n, 1.0f), *dy = randn_(&r, n, 1.0f), *w = randn_(&r, D, 1.0f);
            float *dx0 = randn_(&r, n, 1.0f), *rs = malloc((size_t)N * 4);
            for (int64_t i = 0; i < N; i++)
                rs[i] = 0.5f + 0.001f * (float)i;
            float *dxa = dev_f32_(dx0, n), *dxb_ = dev_f32_(dx0, n), *dwa = dev_f32_(w, D);
            float *dwb = dev_f32_(w, D), *dx_ = dev_f32_(x, n), *ddy = dev_f32_(dy, n);
            float *dw_ = dev_f32_(w, D), *drs = dev_f32_(rs, N);
            kda_bf16 *dh = dev_poison_((size_t)n * 2);
            ok_(kda_cuda_rmsnorm_bwd(&g_ctx, dxa, dwa, ddy, dx_, dw_, drs, N, D, acc));
            ok_(kda_cuda_rmsnorm_bwd_bf16(&g_ctx, dxb_, dh, dwb, ddy, dx_, dw_, drs, N, D, acc));
            float *a = get_f32_(dxa, n), *b = get_f32_(dxb_, n), *h = get_bf16_(dh, n);
            float *wa = get_f32_(dwa, D), *wb = get_f32_(dwb, D);
            int64_t bad = 0;
            for (int64_t i = 0; i < n; i++)
                bad += h[i] != bf16_to_f32(f32_to_bf16(b[i]));
            CHECK_MSG(bad == 0, "%lld of %lld bf16 dh elements are not bf16(dx)", (long long)bad,
                      (long long)n);
            CHECK_MSG(!memcmp(a, b, (size_t)n * 4) && !memcmp(wa, wb, (size_t)D * 4),
                      "dx / dw differ with the bf16 copy on");
            free(x), free(dy), free(w), free(dx0), free(rs), free(a), free(b), free(h);
            free(wa), free(wb);
            dfree_all_();
        }
}

// The RMSNorm backward's register kernel (D = 128·NV <= 2048, the default) against the loop
// kernel it replaced (rmsnorm_bwd_fused_k, KDA_RMS_BWD=loop): the same arithmetic in the same
// order, so dx, its bf16 copy and dw bit for bit; N = 300 leaves a partial 64-row tile.
// D = 128 .. 1536: 8-warp blocks; 1664 .. 2048 (NV = 13 .. 16): 4-warp blocks, acc in dynamic
// shared memory (the loop kernel's over 48 KB too), N = 2113 also (34 tiles, the last partial);
// 2176: over the limit, both runs take the separate dx and dw kernels.
KDA_TEST_GPU(gpu_rmsnorm_bwd_reg_matches_loop) {
    if (!gpu_()) return;
    KdaRng r;
    rng_seed(&r, 159);
    const int64_t Ns[] = {300, 300, 300, 300, 300, 300, 300, 300, 2113, 300};
    const int64_t Ds[] = {128, 384, 1024, 1536, 1664, 1792, 1920, 2048, 2048, 2176};
    for (int di = 0; di < 10; di++)
        for (int acc = 0; acc < 2; acc++) {
            int64_t N = Ns[di], D = Ds[di], n = N * D;
            float *x = randn_(&r, n, 1.0f), *dy = randn_(&r, n, 1.0f), *w = randn_(&r, D, 1.0f);
            float *dx0 = randn_(&r, n, 1.0f), *rs = malloc((size_t)N * 4);
            for (int64_t i = 0; i < N; i++)
                rs[i] = 0.5f + 0.001f * (float)i;
            float *dxa = dev_f32_(dx0, n), *dxb_ = dev_f32_(dx0, n), *dwa = dev_f32_(w, D);
            float *dwb = dev_f32_(w, D), *dx_ = dev_f32_(x, n), *ddy = dev_f32_(dy, n);
            float *dw_ = dev_f32_(w, D), *drs = dev_f32_(rs, N);
            kda_bf16 *ha = dev_poison_((size_t)n * 2), *hb = dev_poison_((size_t)n * 2);
            GpuEnv rb; // the register kernel (unset), then the loop kernel; then the suite's value
            gpu_env_set(&rb, "KDA_RMS_BWD", NULL);
            ok_(kda_cuda_rmsnorm_bwd_bf16(&g_ctx, dxa, ha, dwa, ddy, dx_, dw_, drs, N, D, acc));
            setenv("KDA_RMS_BWD", "loop", 1);
            ok_(kda_cuda_rmsnorm_bwd_bf16(&g_ctx, dxb_, hb, dwb, ddy, dx_, dw_, drs, N, D, acc));
            gpu_env_restore(&rb);
            float *a = get_f32_(dxa, n), *b = get_f32_(dxb_, n), *wa = get_f32_(dwa, D);
            float *wb = get_f32_(dwb, D), *h1 = get_bf16_(ha, n), *h2 = get_bf16_(hb, n);
            CHECK_MSG(!memcmp(a, b, (size_t)n * 4) && !memcmp(h1, h2, (size_t)n * 4) &&
                          !memcmp(wa, wb, (size_t)D * 4),
                      "N %lld D %lld accumulate %d: register and loop kernels differ", (long long)N,
                      (long long)D, acc);
            free(x), free(dy), free(w), free(dx0), free(rs), free(a), free(b), free(wa), free(wb);
            free(h1), free(h2);
            dfree_all_();
        }
}

// The RMSNorm forward's register kernel (D = 128·NV <= 2048, the default) against the loop kernel
// (KDA_RMS_FWD=loop): y and rstd bit for bit; N = 301 leaves a partial block of rows. D = 2176:
// over the limit, the loop kernel both times.
KDA_TEST_GPU(gpu_rmsnorm_fwd_reg_matches_loop) {
    if (!gpu_()) return;
    KdaRng r;
    rng_seed(&r, 163);
    const int64_t Ds[] = {128, 640, 1024, 1536, 1664, 1920, 2048, 2176};
    for (int di = 0; di < 8; di++) {
        int64_t N = 301, D = Ds[di], n = N * D;
        float *x = randn_(&r, n, 1.0f), *w = randn_(&r, D, 1.0f);
        float *dx_ = dev_f32_(x, n), *dw_ = dev_f32_(w, D);
        kda_bf16 *ya = dev_poison_((size_t)n * 2), *yb = dev_poison_((size_t)n * 2);
        float *ra = dev_poison_((size_t)N * 4), *rb = dev_poison_((size_t)N * 4);
        GpuEnv rf; // the register kernel (unset), then the loop kernel; then the suite's value
        gpu_env_set(&rf, "KDA_RMS_FWD", NULL);
        ok_(kda_cuda_rmsnorm_fwd(&g_ctx, ya, ra, dx_, dw_, N, D, 1e-6f));
        setenv("KDA_RMS_FWD", "loop", 1);
        ok_(kda_cuda_rmsnorm_fwd(&g_ctx, yb, rb, dx_, dw_, N, D, 1e-6f));
        gpu_env_restore(&rf);
        float *a = get_bf16_(ya, n), *b = get_bf16_(yb, n), *sa = get_f32_(ra, N);
        float *sb = get_f32_(rb, N);
        CHECK_MSG(!memcmp(a, b, (size_t)n * 4) && !memcmp(sa, sb, (size_t)N * 4),
                  "D %lld: register and loop kernels differ", (long long)D);
        free(x), free(w), free(a), free(b), free(sa), free(sb);
        dfree_all_();
    }
}

// gate|up SwiGLU (model_cuda's KDA_GATEUP=1 path): gu [N, 2I] rows gate | up against the flat
// kernels on the halves copied out; the same per-element math, so the same bits. The backward
// also in place (dm = dgu's gate half, ld 2I, as the model calls it), and with the product
// recomputed (KDA_MLP_RECOMPUTE's call): the forward's bits, the gradients unchanged. I = 4096
// (16-byte path) and I = 20 (the scalar path).
KDA_TEST_GPU(gpu_swiglu_gate_up) {
    if (!gpu_()) return;
    KdaRng r;
    rng_seed(&r, 157);
    const int64_t Is[] = {4096, 20};
    for (int ii = 0; ii < 2; ii++) {
        int64_t N = 77, I = Is[ii], n = N * I;
        printf("  N=%lld I=%lld\n", (long long)N, (long long)I);
        float *gu = bf16r_(randn_(&r, 2 * n, 2.0f), 2 * n), *dm = bf16r_(randn_(&r, n, 1.0f), n);
        float *a = malloc((size_t)n * 4), *b = malloc((size_t)n * 4);
        for (int64_t i = 0; i < N; i++)
            for (int64_t c = 0; c < I; c++)
                a[i * I + c] = gu[i * 2 * I + c], b[i * I + c] = gu[i * 2 * I + I + c];
        kda_bf16 *dgu_in = dev_bf16_(gu, 2 * n), *da_ = dev_bf16_(a, n), *db_ = dev_bf16_(b, n);
        kda_bf16 *ddm = dev_bf16_(dm, n), *m1 = dev_poison_((size_t)n * 2);
        kda_bf16 *m2 = dev_poison_((size_t)n * 2), *dgu = dev_poison_((size_t)n * 4);
        kda_bf16 *dA = dev_poison_((size_t)n * 2), *dB = dev_poison_((size_t)n * 2);
        ok_(kda_cuda_swiglu_gu_fwd(&g_ctx, m1, dgu_in, N, I));
        ok_(kda_cuda_swiglu_fwd(&g_ctx, m2, da_, db_, n));
        ok_(kda_cuda_swiglu_gu_bwd(&g_ctx, dgu, NULL, ddm, I, dgu_in, N, I));
        ok_(kda_cuda_swiglu_bwd(&g_ctx, dA, dB, ddm, da_, db_, n));
        float *g1 = get_bf16_(m1, n), *g2 = get_bf16_(m2, n), *gd = get_bf16_(dgu, 2 * n);
        float *gA = get_bf16_(dA, n), *gB = get_bf16_(dB, n);
        int64_t bad = 0;
        for (int64_t i = 0; i < N; i++)
            for (int64_t c = 0; c < I; c++)
                bad += g1[i * I + c] != g2[i * I + c] || gd[i * 2 * I + c] != gA[i * I + c] ||
                       gd[i * 2 * I + I + c] != gB[i * I + c] || !isfinite(gd[i * 2 * I + c]);
        CHECK_MSG(bad == 0, "gate|up swiglu: %lld of %lld elements differ from the flat kernels",
                  (long long)bad, (long long)n);
        // in place: dm in the gate half of the gradient buffer (row stride 2I)
        kda_bf16 *dip = dev_poison_((size_t)n * 4);
        for (int64_t i = 0; i < N; i++)
            ok_(kda_cuda_put_bf16(&g_ctx, dip + i * 2 * I, dm + i * I, I));
        ok_(kda_cuda_swiglu_gu_bwd(&g_ctx, dip, NULL, dip, 2 * I, dgu_in, N, I));
        float *gi = get_bf16_(dip, 2 * n);
        CHECK_MSG(!memcmp(gi, gd, (size_t)(2 * n) * 4), "in-place gate|up backward differs");
        // in place again, the product recomputed into a poisoned buffer
        kda_bf16 *dip2 = dev_poison_((size_t)n * 4), *mr = dev_poison_((size_t)n * 2);
        for (int64_t i = 0; i < N; i++)
            ok_(kda_cuda_put_bf16(&g_ctx, dip2 + i * 2 * I, dm + i * I, I));
        ok_(kda_cuda_swiglu_gu_bwd(&g_ctx, dip2, mr, dip2, 2 * I, dgu_in, N, I));
        float *gi2 = get_bf16_(dip2, 2 * n), *gm = get_bf16_(mr, n);
        CHECK_MSG(!memcmp(gi2, gd, (size_t)(2 * n) * 4),
                  "gate|up backward with the product recomputed: gradients differ");
        CHECK_MSG(!memcmp(gm, g1, (size_t)n * 4),
                  "gate|up backward: the recomputed product differs from the forward's");
        free(gu), free(dm), free(a), free(b), free(g1), free(g2), free(gd), free(gA), free(gB);
        free(gi), free(gi2), free(gm);
        dfree_all_();
    }
}

// The fused input projection's column split and copy (kda_cuda_cols_split / _cols_copy, which
// replaced six cudaMemcpy2DAsync calls each way) against the host twin: a copy, so the same
// bits; destination elements outside the parts keep their poison. The 300M layout (16-byte
// path, N = 2048 + 3 rows) and odd widths with a gap (2-byte path); then one part copied back
// into a wider matrix with kda_cuda_cols_copy.
KDA_TEST_GPU(gpu_cols_split) {
    if (!gpu_()) return;
    const struct {
        int64_t rows, lds;
        int n;
        int64_t col[6], cols[6], ld[6];
    } cs[] = {{2051,
               1160,
               6,
               {0, 256, 512, 1024, 1088, 1152},
               {256, 256, 512, 64, 64, 8},
               {256, 256, 512, 64, 64, 8}},
              {77, 40, 3, {1, 9, 30}, {7, 20, 3}, {7, 24, 5}}};
    for (int c = 0; c < 2; c++) {
        int64_t rows = cs[c].rows, lds = cs[c].lds, ns = rows * lds;
        kda_bf16 *src = malloc((size_t)ns * 2);
        for (int64_t i = 0; i < ns; i++)
            src[i] = (kda_bf16)(i * 2654435761u >> 9);
        kda_bf16 *dsrc = dalloc_((size_t)ns * 2);
        ok_(kda_cuda_put_bytes(&g_ctx, dsrc, src, (size_t)ns * 2));
        KdaCudaColParts hp, dp;
        memset(&hp, 0, sizeof hp), memset(&dp, 0, sizeof dp);
        hp.n = dp.n = cs[c].n;
        for (int k = 0; k < cs[c].n; k++) {
            size_t b = (size_t)(rows * cs[c].ld[k]) * 2;
            hp.col[k] = dp.col[k] = cs[c].col[k], hp.cols[k] = dp.cols[k] = cs[c].cols[k];
            hp.ld[k] = dp.ld[k] = cs[c].ld[k];
            hp.dst[k] = malloc(b), memset(hp.dst[k], 0xFF, b); // the device poison's bytes
            dp.dst[k] = dev_poison_(b);
        }
        kda_cuda_cols_split_host(src, lds, rows, &hp);
        ok_(kda_cuda_cols_split(&g_ctx, dsrc, lds, rows, &dp));
        for (int k = 0; k < cs[c].n; k++) {
            size_t b = (size_t)(rows * cs[c].ld[k]) * 2;
            kda_bf16 *got = malloc(b);
            ok_(kda_cuda_get_bytes(&g_ctx, got, dp.dst[k], b));
            CHECK_MSG(!memcmp(got, hp.dst[k], b), "case %d part %d differs from the host twin", c,
                      k);
            free(got), free(hp.dst[k]);
        }
        free(src);
        dfree_all_();
    }
    // kda_cuda_cols_copy: a [rows, 64] block into columns 1024.. of a [rows, 1160] matrix
    int64_t rows = 1000, n = rows * 64, nd = rows * 1160;
    kda_bf16 *h = malloc((size_t)n * 2), *got = malloc((size_t)nd * 2);
    for (int64_t i = 0; i < n; i++)
        h[i] = (kda_bf16)(i * 40503u);
    kda_bf16 *ds = dalloc_((size_t)n * 2), *dd = dev_poison_((size_t)nd * 2);
    ok_(kda_cuda_put_bytes(&g_ctx, ds, h, (size_t)n * 2));
    ok_(kda_cuda_cols_copy(&g_ctx, dd + 1024, 1160, ds, 64, rows, 64));
    ok_(kda_cuda_get_bytes(&g_ctx, got, dd, (size_t)nd * 2));
    int64_t bad = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < 1160; c++)
            bad += got[r * 1160 + c] != (c >= 1024 && c < 1088 ? h[r * 64 + c - 1024] : 0xFFFF);
    CHECK_MSG(bad == 0, "cols_copy: %lld elements wrong", (long long)bad);
    free(h), free(got);
    dfree_all_();
}

#else // !KDA_HAVE_CUDA

// Built without CUDA: asking for the GPU suite must not look like a pass.
KDA_TEST_GPU(gpu_unavailable) {
    CHECK_MSG(0, "built without CUDA (KDA_CUDA=0 or no nvcc): no GPU tests");
}

#endif
