// test_cpu_ops.c - finite-difference gradient checks of the CPU ops outside the KDA core
// (gemm, RMSNorm, gated RMSNorm, short conv + SiLU, SiLU, SwiGLU, embedding, cross-entropy),
// and the cross-entropy's partition sum on a peaked 128k vocabulary vs float64.
//
// Method: a scalar loss J = Σ r ⊙ y with fixed random r, accumulated in double; the analytic
// gradient comes from the op's backward with dy = r; the numeric one from central differences
// (x ± h, h = 1e-2 on O(1) inputs). Tolerance |fd - an| <= 2e-3 + 1e-2·|an|: the fp32 forward
// rounds y to ~6e-8 relative, so with |J| ~ 10 the FD noise is ~1e-6·10/h ~ 1e-4, and the
// truncation error of central differences is O(h²·|f'''|) ~ 1e-4 for these smooth ops; an
// error in a formula (a missing factor or term) shows up at the 1e-1 level.
// Direct checks of one forward entry against the same formula in double: 1e-5 absolute for
// dot products of <= 32 fp32 products of O(1) values (rounding ~1e-6), 1e-6 for elementwise
// maps of O(1) values (an ulp or two); "a second pass doubles" checks 1e-5 (one fp32 add).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "cpu/gemm.h"
#include "cpu/conv.h"   // defines: conv_silu_*, silu_*
#include "cpu/embed.h"  // defines: embed_fwd, embed_bwd
#include "cpu/norm.h"   // defines: rmsnorm_*, gnorm_*
#include "cpu/swiglu.h" // defines: swiglu_fwd, swiglu_bwd
#include "cpu/xent.h"   // defines: xent_*, XENT_IGNORE
#include "test.h"

#define FD_H    1e-2f
#define FD_ATOL 2e-3
#define FD_RTOL 1e-2

typedef double (*LossFn)(void *ctx);

static float *randn_(KdaRng *r, int64_t n, float std) {
    float *x = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        x[i] = rng_normal(r, 0.0f, std);
    return x;
}

static double dot_(const float *r, const float *y, int64_t n) {
    double s = 0.0;
    for (int64_t i = 0; i < n; i++)
        s += (double)r[i] * y[i];
    return s;
}

// Compares grad[i] with the central difference of f in x[i] for every index (or a strided
// sample when n > 64); reports the first few mismatches.
static void fd_check_(const char *what, LossFn f, void *ctx, float *x, const float *grad,
                      int64_t n) {
    int64_t step = n > 64 ? n / 64 : 1, bad = 0;
    for (int64_t i = 0; i < n; i += step) {
        float s = x[i], xp = s + FD_H, xm = s - FD_H;
        x[i] = xp;
        double a = f(ctx);
        x[i] = xm;
        double b = f(ctx);
        x[i] = s;
        double fd = (a - b) / ((double)xp - (double)xm);
        if (!(fabs(fd - grad[i]) <= FD_ATOL + FD_RTOL * fabs(grad[i])) && bad++ < 3)
            CHECK_MSG(0, "%s[%lld]: finite difference %.6g vs backward %.6g", what, (long long)i,
                      fd, (double)grad[i]);
    }
}

// ---- gemm -------------------------------------------------------------------------------------

typedef struct {
    int64_t N, in, out;
    float *x, *W, *b, *y, *r;
} GemmCtx;

static double gemm_loss_(void *p) {
    GemmCtx *c = p;
    gemm_fwd(c->y, c->x, c->W, c->b, c->N, c->in, c->out, 0);
    return dot_(c->r, c->y, c->N * c->out);
}

KDA_TEST(cpu_gemm_grad) {
    KdaRng rng;
    rng_seed(&rng, 1);
    GemmCtx c = {5, 7, 3, NULL, NULL, NULL, NULL, NULL};
    c.x = randn_(&rng, c.N * c.in, 1), c.W = randn_(&rng, c.out * c.in, 1);
    c.b = randn_(&rng, c.out, 1), c.r = randn_(&rng, c.N * c.out, 1);
    c.y = calloc((size_t)(c.N * c.out), sizeof(float));
    float *dx = calloc((size_t)(c.N * c.in), sizeof(float));
    float *dW = calloc((size_t)(c.out * c.in), sizeof(float));
    float *db = calloc((size_t)c.out, sizeof(float));
    // exact check of one entry of the forward
    gemm_loss_(&c);
    double y12 = c.b[2];
    for (int64_t i = 0; i < c.in; i++)
        y12 += (double)c.x[1 * c.in + i] * c.W[2 * c.in + i];
    CHECK_NEAR(c.y[1 * c.out + 2], y12, 1e-5);
    gemm_bwd_dx(dx, c.r, c.W, c.N, c.in, c.out, 0);
    gemm_bwd_dw(dW, db, c.r, c.x, c.N, c.in, c.out);
    fd_check_("gemm dx", gemm_loss_, &c, c.x, dx, c.N * c.in);
    fd_check_("gemm dW", gemm_loss_, &c, c.W, dW, c.out * c.in);
    fd_check_("gemm db", gemm_loss_, &c, c.b, db, c.out);
    // accumulate semantics: a second dW pass doubles, dx with accumulate doubles
    float w0 = dW[4], x0 = dx[3];
    gemm_bwd_dw(dW, db, c.r, c.x, c.N, c.in, c.out);
    gemm_bwd_dx(dx, c.r, c.W, c.N, c.in, c.out, 1);
    CHECK_NEAR(dW[4], 2 * w0, 1e-5);
    CHECK_NEAR(dx[3], 2 * x0, 1e-5);
    free(c.x), free(c.W), free(c.b), free(c.r), free(c.y), free(dx), free(dW), free(db);
}

// ---- RMSNorm and gated RMSNorm ------------------------------------------------------------------

typedef struct {
    int64_t N, D;
    float *x, *z, *w, *y, *rstd, *r;
} NormCtx;

static double rmsnorm_loss_(void *p) {
    NormCtx *c = p;
    rmsnorm_fwd(c->y, c->rstd, c->x, c->w, c->N, c->D, 1e-6f);
    return dot_(c->r, c->y, c->N * c->D);
}

static double gnorm_loss_(void *p) {
    NormCtx *c = p;
    gnorm_fwd(c->y, c->rstd, c->x, c->z, c->w, c->N, c->D, 1e-6f);
    return dot_(c->r, c->y, c->N * c->D);
}

static NormCtx norm_ctx_(KdaRng *rng, int64_t N, int64_t D) {
    NormCtx c = {N,
                 D,
                 randn_(rng, N * D, 1),
                 randn_(rng, N * D, 1),
                 randn_(rng, D, 1),
                 calloc((size_t)(N * D), sizeof(float)),
                 calloc((size_t)N, sizeof(float)),
                 randn_(rng, N * D, 1)};
    for (int64_t d = 0; d < D; d++)
        c.w[d] += 1.0f;
    return c;
}

static void norm_ctx_free_(NormCtx *c) {
    free(c->x), free(c->z), free(c->w), free(c->y), free(c->rstd), free(c->r);
}

KDA_TEST(cpu_rmsnorm_grad) {
    KdaRng rng;
    rng_seed(&rng, 2);
    NormCtx c = norm_ctx_(&rng, 4, 16);
    rmsnorm_loss_(&c);
    double ss = 0; // exact check: row 1, channel 5
    for (int d = 0; d < 16; d++)
        ss += (double)c.x[16 + d] * c.x[16 + d];
    CHECK_NEAR(c.y[16 + 5], c.x[16 + 5] / sqrt(ss / 16 + 1e-6) * c.w[5], 1e-5);
    float *dx = calloc(64, sizeof(float)), *dw = calloc(16, sizeof(float));
    for (int i = 0; i < 64; i++)
        dx[i] = 0.5f; // accumulate = 1 adds on top of this
    rmsnorm_bwd(dx, dw, c.r, c.x, c.w, c.rstd, 4, 16, 1);
    for (int i = 0; i < 64; i++)
        dx[i] -= 0.5f;
    fd_check_("rmsnorm dx", rmsnorm_loss_, &c, c.x, dx, 64);
    fd_check_("rmsnorm dw", rmsnorm_loss_, &c, c.w, dw, 16);
    free(dx), free(dw);
    norm_ctx_free_(&c);
}

KDA_TEST(cpu_gated_rmsnorm_grad) {
    KdaRng rng;
    rng_seed(&rng, 3);
    NormCtx c = norm_ctx_(&rng, 6, 8); // 3 tokens x 2 heads sharing w [8]
    gnorm_loss_(&c);
    double ss = 0;
    for (int d = 0; d < 8; d++)
        ss += (double)c.x[8 + d] * c.x[8 + d];
    CHECK_NEAR(c.y[8 + 3], c.x[8 + 3] / sqrt(ss / 8 + 1e-6) * c.w[3] / (1 + exp(-c.z[8 + 3])),
               1e-5);
    float *dx = calloc(48, sizeof(float)), *dz = calloc(48, sizeof(float));
    float *dw = calloc(8, sizeof(float));
    gnorm_bwd(dx, dz, dw, c.r, c.x, c.z, c.w, c.rstd, 6, 8);
    fd_check_("gnorm dx", gnorm_loss_, &c, c.x, dx, 48);
    fd_check_("gnorm dz", gnorm_loss_, &c, c.z, dz, 48);
    fd_check_("gnorm dw", gnorm_loss_, &c, c.w, dw, 8);
    free(dx), free(dz), free(dw);
    norm_ctx_free_(&c);
}

// ---- short conv + SiLU ------------------------------------------------------------------------

typedef struct {
    int64_t B, T, C, W;
    float *p, *w, *c, *y, *r;
} ConvCtx;

static double conv_loss_(void *p) {
    ConvCtx *c = p;
    conv_silu_fwd(c->y, c->c, c->p, c->w, c->B, c->T, c->C, c->W);
    return dot_(c->r, c->y, c->B * c->T * c->C);
}

static void conv_case_(int64_t B, int64_t T, int64_t C, int64_t W, uint64_t seed) {
    KdaRng rng;
    rng_seed(&rng, seed);
    int64_t n = B * T * C;
    ConvCtx c = {B,
                 T,
                 C,
                 W,
                 randn_(&rng, n, 1),
                 randn_(&rng, C * W, 1),
                 calloc((size_t)n, sizeof(float)),
                 calloc((size_t)n, sizeof(float)),
                 randn_(&rng, n, 1)};
    conv_loss_(&c);
    // exact check of the last row's first token: history is zero, only tap W-1 contributes
    int64_t i0 = (B - 1) * T * C + 1;
    double a = (double)c.w[1 * W + W - 1] * c.p[i0];
    CHECK_NEAR(c.y[i0], a / (1 + exp(-a)), 1e-6);
    if (T >= 2 && W >= 2) { // token 1 of row 0, channel 0: taps W-2 and W-1
        double a1 = (double)c.w[W - 2] * c.p[0] + (double)c.w[W - 1] * c.p[C];
        CHECK_NEAR(c.y[C], a1 / (1 + exp(-a1)), 1e-5);
    }
    float *dp = calloc((size_t)n, sizeof(float)), *dw = calloc((size_t)(C * W), sizeof(float));
    conv_silu_bwd(dp, dw, c.r, c.p, c.c, c.w, B, T, C, W);
    fd_check_("conv dp", conv_loss_, &c, c.p, dp, n);
    fd_check_("conv dw", conv_loss_, &c, c.w, dw, C * W);
    free(dp), free(dw), free(c.p), free(c.w), free(c.c), free(c.y), free(c.r);
}

KDA_TEST(cpu_conv_silu_grad) {
    conv_case_(2, 9, 3, 4, 4); // T > W, two rows (history restarts per row)
    conv_case_(2, 3, 3, 4, 5); // T < W
    conv_case_(3, 1, 2, 4, 6); // T = 1
    conv_case_(1, 5, 2, 1, 7); // W = 1
}

// ---- SiLU and SwiGLU ----------------------------------------------------------------------------

typedef struct {
    int64_t n;
    float *a, *b, *y, *r;
} EwCtx;

static double silu_loss_(void *p) {
    EwCtx *c = p;
    silu_fwd(c->y, c->a, c->n);
    return dot_(c->r, c->y, c->n);
}

static double swiglu_loss_(void *p) {
    EwCtx *c = p;
    swiglu_fwd(c->y, c->a, c->b, c->n);
    return dot_(c->r, c->y, c->n);
}

KDA_TEST(cpu_silu_swiglu_grad) {
    KdaRng rng;
    rng_seed(&rng, 8);
    int64_t n = 40;
    EwCtx c = {n, randn_(&rng, n, 2), randn_(&rng, n, 1), calloc((size_t)n, sizeof(float)),
               randn_(&rng, n, 1)};
    float *da = calloc((size_t)n, sizeof(float)), *db = calloc((size_t)n, sizeof(float));
    silu_loss_(&c);
    CHECK_NEAR(c.y[0], c.a[0] / (1 + exp(-c.a[0])), 1e-6);
    silu_bwd(da, c.r, c.a, n);
    fd_check_("silu dx", silu_loss_, &c, c.a, da, n);
    swiglu_loss_(&c);
    CHECK_NEAR(c.y[1], c.a[1] / (1 + exp(-c.a[1])) * c.b[1], 1e-6);
    swiglu_bwd(da, db, c.r, c.a, c.b, n);
    fd_check_("swiglu da", swiglu_loss_, &c, c.a, da, n);
    fd_check_("swiglu db", swiglu_loss_, &c, c.b, db, n);
    free(c.a), free(c.b), free(c.y), free(c.r), free(da), free(db);
}

// ---- embedding ----------------------------------------------------------------------------------

KDA_TEST(cpu_embedding) {
    float E[4 * 2] = {0, 1, 2, 3, 4, 5, 6, 7}, h[3 * 2];
    int32_t ids[3] = {2, 0, 2};
    embed_fwd(h, E, ids, 3, 2);
    CHECK(h[0] == 4 && h[1] == 5 && h[2] == 0 && h[5] == 5);
    float dE[8] = {0}, dh[6] = {1, 2, 3, 4, 5, 6};
    embed_bwd(dE, dh, ids, 3, 2, -1); // repeated id 2 sums its rows
    CHECK(dE[4] == 6 && dE[5] == 8 && dE[0] == 3 && dE[1] == 4 && dE[2] == 0);
    float dE2[8] = {0};
    embed_bwd(dE2, dh, ids, 3, 2, 2); // pad id 2: no gradient for that row
    CHECK(dE2[4] == 0 && dE2[5] == 0 && dE2[0] == 3);
}

// ---- cross-entropy ------------------------------------------------------------------------------

typedef struct {
    int64_t N, D, Vo, n_valid;
    float *n, *W, *nll, *work;
    int32_t *tg;
    int64_t work_n;
} XentCtx;

static double xent_loss_(void *p) {
    XentCtx *c = p;
    return xent_fwd(c->nll, NULL, NULL, c->n, c->W, c->tg, c->N, c->D, c->Vo, c->work, c->work_n) /
           (double)c->n_valid;
}

KDA_TEST(cpu_xent_grad) {
    KdaRng rng;
    rng_seed(&rng, 9);
    // work of N·10 floats: vocabulary chunks of 10 columns, the last one partial (37 = 3·10 + 7)
    int64_t B = 2, T = 23, N = B * T, D = 6, Vo = 37;
    int32_t *labels = malloc((size_t)N * sizeof(int32_t));
    for (int64_t i = 0; i < N; i++)
        labels[i] = (int32_t)rng_below(&rng, (uint64_t)Vo);
    labels[5] = XENT_IGNORE; // ignored label inside a row
    XentCtx c = {N,
                 D,
                 Vo,
                 0,
                 randn_(&rng, N * D, 1),
                 randn_(&rng, Vo * D, 1),
                 calloc((size_t)N, sizeof(float)),
                 calloc((size_t)xent_work_floats(N, Vo), sizeof(float)),
                 malloc((size_t)N * sizeof(int32_t)),
                 N * 10};
    CHECK(xent_work_floats(N, Vo) >= N * Vo); // small problem: one chunk by default
    c.n_valid = xent_targets(c.tg, labels, B, T);
    CHECK_EQ_INT(c.n_valid, B * (T - 1) - 1);
    CHECK(c.tg[T - 1] == XENT_IGNORE && c.tg[4] == XENT_IGNORE && c.tg[0] == labels[1]);
    float *logits = calloc((size_t)(N * Vo), sizeof(float));
    float *lse = calloc((size_t)N, sizeof(float)), *nll1 = calloc((size_t)N, sizeof(float));
    double sum = xent_fwd(c.nll, lse, logits, c.n, c.W, c.tg, N, D, Vo, c.work, c.work_n);
    double sum1 = xent_fwd(nll1, NULL, NULL, c.n, c.W, c.tg, N, D, Vo, c.work, N * Vo);
    CHECK_NEAR(sum, sum1, 1e-5 * sum); // chunked == one chunk
    // reference NLL of row 30 in double from the logits it returned
    double mx = -1e30, s = 0, l30 = 0;
    for (int64_t v = 0; v < Vo; v++)
        mx = fmax(mx, logits[30 * Vo + v]);
    for (int64_t v = 0; v < Vo; v++)
        s += exp(logits[30 * Vo + v] - mx);
    l30 = mx + log(s) - logits[30 * Vo + c.tg[30]];
    CHECK_NEAR(c.nll[30], l30, 1e-5);
    CHECK_NEAR(lse[30], mx + log(s), 1e-5);
    double l = 0;
    for (int64_t d = 0; d < D; d++)
        l += (double)c.n[30 * D + d] * c.W[c.tg[30] * D + d];
    CHECK_NEAR(logits[30 * Vo + c.tg[30]], l, 1e-5);
    double sum2 = 0;
    for (int64_t i = 0; i < N; i++)
        sum2 += c.nll[i];
    CHECK_NEAR(sum, sum2, 1e-4);
    CHECK(c.nll[T - 1] == 0 && c.nll[4] == 0);

    float *dn = calloc((size_t)(N * D), sizeof(float)),
          *dW = calloc((size_t)(Vo * D), sizeof(float));
    xent_bwd(dn, dW, c.n, c.W, c.tg, lse, N, D, Vo, 1.0f / (float)c.n_valid, c.work, c.work_n);
    fd_check_("xent dn", xent_loss_, &c, c.n, dn, N * D);
    fd_check_("xent dW", xent_loss_, &c, c.W, dW, Vo * D);
    for (int64_t d = 0; d < D; d++)
        CHECK(dn[(T - 1) * D + d] == 0); // ignored row: no grad
    free(labels), free(c.n), free(c.W), free(c.nll), free(c.work), free(c.tg), free(logits);
    free(lse), free(nll1);
    free(dn), free(dW);
}

// Regression: the partition sum of a peaked distribution over a Llama-3-sized vocabulary
// (128,256), as a trained model produces: a few dozen candidates within a few nats of the
// maximum, ~128k tokens 10-25 nats below it. Each of those terms is e^-10..e^-25 of the largest
// and below half an ulp of a float running sum near 1, so a float accumulator drops them all
// and the logsumexp comes out low (it did: 2e-5..1e-4 per row, see docs/correctness.md).
// The logits are exact in float (n and Wh on dyadic grids, D = 2 products of <= 19 bits), so
// the float64 reference below sees the same logits and the only error left is xent_fwd's own.
// Error budget per row: exp_nonpos_ <= 3e-7 relative per term (Taylor truncation 1.3e-7 + a
// few float roundings), i.e. <= 3e-7 on the logsumexp; the double sum of <= 128k terms <= 1
// each, < 1e-10; the float result nll <= 1.9e-6 / 2 (half an ulp at 16..32 nats). Bars: 2e-6
// per row, 1e-5 for the sum over the 64 rows (the "sequence"); the roundings are unbiased, so
// the sum's error grows like sqrt(64) times a row's, not 64 times.
KDA_TEST(cpu_xent_peaked_vocab_exact) {
    KdaRng rng;
    rng_seed(&rng, 17);
    const int64_t N = 64, D = 2, V = 128256, NP = 40; // NP candidate tokens
    float *n = malloc((size_t)(N * D) * sizeof(float)),
          *W = malloc((size_t)(V * D) * sizeof(float));
    int32_t *tg = malloc((size_t)N * sizeof(int32_t)), peak[40];
    for (int64_t v = 0; v < V; v++) { // bulk: N(0, 2) on a 1/1024 grid; no candidate share
        float g = rng_normal(&rng, 0.0f, 2.0f);
        g = g < -30 ? -30 : g > 30 ? 30 : g;
        W[v * D] = roundf(g * 1024) / 1024, W[v * D + 1] = 0;
    }
    for (int64_t p = 0; p < NP; p++) { // candidates: a 1/64-grid share in [6, 10]
        peak[p] = (int32_t)rng_below(&rng, (uint64_t)V);
        W[peak[p] * D + 1] = (float)(384 + rng_below(&rng, 257)) / 64;
    }
    for (int64_t r = 0; r < N; r++) { // row r scales the candidates by s in [1, 2.5]
        n[r * D] = 1, n[r * D + 1] = (float)(8 + rng_below(&rng, 13)) / 8;
        tg[r] = r % 4 == 3 ? (int32_t)rng_below(&rng, (uint64_t)V) : peak[rng_below(&rng, NP)];
    }
    int64_t work_n = xent_work_floats(N, V);
    float *work = malloc((size_t)work_n * sizeof(float)), *nll = malloc((size_t)N * sizeof(float));
    float *lse = malloc((size_t)N * sizeof(float));
    double sum = xent_fwd(nll, lse, NULL, n, W, tg, N, D, V, work, work_n);
    double ref_sum = 0, worst = 0, worst_bulk = 0;
    for (int64_t r = 0; r < N; r++) {
        double mx = -INFINITY, s = 0, lt = 0;
        for (int64_t v = 0; v < V; v++) {
            double l = (double)n[r * D] * W[v * D] + (double)n[r * D + 1] * W[v * D + 1];
            mx = l > mx ? l : mx;
        }
        for (int64_t v = 0; v < V; v++) {
            double l = (double)n[r * D] * W[v * D] + (double)n[r * D + 1] * W[v * D + 1];
            s += exp(l - mx);
            if (v == tg[r]) lt = l;
        }
        double bulk = 0; // mass of the terms below half an ulp of 1 in float: what was dropped
        for (int64_t v = 0; v < V; v++) {
            double t = exp((double)W[v * D] + (double)n[r * D + 1] * W[v * D + 1] - mx);
            bulk += t < 0x1p-24 ? t : 0;
        }
        worst_bulk = bulk / s > worst_bulk ? bulk / s : worst_bulk;
        double ref = mx + log(s) - lt;
        ref_sum += ref;
        worst = fabs(nll[r] - ref) > worst ? fabs(nll[r] - ref) : worst;
        CHECK_MSG(fabs(nll[r] - ref) <= 2e-6, "row %lld: nll %.9g vs float64 %.9g (%.3g)",
                  (long long)r, (double)nll[r], ref, nll[r] - ref);
        CHECK_NEAR(lse[r], mx + log(s), 2e-6);
    }
    CHECK_NEAR(sum, ref_sum, 1e-5);
    CHECK(worst_bulk > 2e-4); // the fixture is peaked as intended: >= 0.02 % of the mass sits
                              // in terms a float sum would drop
    fprintf(stderr, "    xent peaked: worst row %.3g, sum %.3g, dropped-term mass up to %.3g\n",
            worst, sum - ref_sum, worst_bulk);
    free(n), free(W), free(tg), free(work), free(nll), free(lse);
}

// Regression: gemm_fwd with a bias and accumulate = 0 must overwrite y, even when y holds NaN
// (0 * NaN is NaN; activation arenas are reused memory).
KDA_TEST(cpu_gemm_bias_overwrites_garbage) {
    float x[2 * 3] = {1, 2, 3, 4, 5, 6}, W[2 * 3] = {1, 0, 0, 0, 1, 0}, b[2] = {0.5f, -1};
    float y[4] = {NAN, NAN, NAN, NAN};
    gemm_fwd(y, x, W, b, 2, 3, 2, 0);
    CHECK(y[0] == 1.5f && y[1] == 1.0f && y[2] == 4.5f && y[3] == 4.0f);
}

// A NaN logit gives a NaN loss (it must propagate: the trainer's NaN policy depends on it)
// without undefined behaviour in the fast exp (issue 15, finding 10: UBSan reported a left
// shift of a negative value on NaN input; the sanitizer suite runs with halt_on_error).
KDA_TEST(cpu_xent_nan_logit_propagates) {
    const int64_t N = 2, D = 2, V = 300;
    float n[4] = {1, 0.5f, -1, 2}, *W = malloc((size_t)(V * D) * sizeof(float));
    for (int64_t i = 0; i < V * D; i++)
        W[i] = (float)((i * 37) % 11) / 11.0f - 0.5f;
    W[5 * D] = NAN;
    int32_t tg[2] = {1, 7};
    int64_t wn = xent_work_floats(N, V);
    float *work = malloc((size_t)wn * sizeof(float)), nll[2], lse[2];
    double sum = xent_fwd(nll, lse, NULL, n, W, tg, N, D, V, work, wn);
    CHECK(isnan(sum) && isnan(nll[0]));
    free(W);
    free(work);
}
