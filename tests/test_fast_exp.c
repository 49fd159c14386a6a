// test_fast_exp.c - the fast exponential, SiLU and SiLU' of KDA_FAST_EXP=1 (src/cuda/fast_math.cuh)
// against float64 over a dense sweep of x plus special values, on the host (the host form, CPU
// suite of every CUDA build) and on the device (gpu_fast_exp_bounds), and the CE row kernel's
// fast sum pass through its host twin against the precise twin. The conv kernels and the model
// with the switch on the device: test_gpu_ops.c's gpu_conv_fast_exp, test_gpu_cls.c's
// gpu_cls_trim_fast_exp, test_gpu_model.c's gpu_model_fast_exp.
//
// Bounds (docs/perf-log.md, "Fast exponentials in SiLU and the CE sum pass"; measured on the host
// form, 2026-12-03: SiLU 1.03e-6 relative for |x| <= 20, SiLU' 9.8e-7 absolute, e^x 9.7e-7 / 3.9e-6
// relative on [-20, 0] / [-87, 0]). The device form differs from the host form by ex2.approx's
// ~2 ulps and rcp.approx's 1 ulp (<= 4e-7 relative; in SiLU' rcp's ulp of σ ~ 1 is 6e-8, times
// x up to 16.6, where 1 - σ still shows in 1 + e^-x: up to 1e-6 absolute), so the device's
// bounds (the second figure where two are given) leave it that room:
//   SiLU   relative 2e-6 / 3e-6 for |x| <= 20, 8e-6 for x in [-87, 100] (the exponent's product
//          x·log2 e is rounded once: its error grows with |x|);
//   SiLU'  absolute 2e-6 / 4e-6 everywhere (|SiLU'| <= 1.1; the precise form's own error is
//          9.8e-7: the cancellation in 1 - σ(x) for large x);
//   e^x    relative 2e-6 / 3e-6 on [-20, 0], 8e-6 on [-87, 0];
//   below x = -87.33 (σ, e^x subnormal) the fast forms flush to 0: absolute 1.2e-38 · max(1, |x|).
// Specials: the fast forms give the precise forms' values at ±inf, NaN, ±0, subnormal x and
// |x| = 100 or 1e30 (0 or 1 where σ saturates: never inf or NaN from finite x).
// A wrong constant breaks them: log2 e written as 1.4427f measured e^x 7.0e-5 / 3.0e-4 relative.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

#ifdef KDA_HAVE_CUDA

#include "core/rng.h"         // defines: KdaRng, rng_normal, rng_below
#include "core/util.h"        // defines: f32_to_bf16, bf16_to_f32
#include "cpu/xent.h"         // defines: XENT_IGNORE
#include "cuda/cuda_common.h" // defines: KdaCudaCtx, kda_cuda_*
#include "cuda/fast_math.h"   // defines: kda_cuda_fast_act_eval, kda_cuda_fast_act_eval_host
#include "cuda/xent_cuda.h"   // defines: kda_cuda_cls_rows_trim_host, _trim_fx_host, _cls_ld
#include "gpu_ctx.h"          // defines: gpu_test_ctx

#define SWEEP_LO   (-100.0)
#define SWEEP_STEP (1.0 / 4096.0) // 819,201 points on [-100, 100]
#define FLT_TINY   1.17549435e-38 // 2^-126

// The sweep: [-100, 100] by SWEEP_STEP, then the specials. Returns the count; x [cap].
static const float SPECIALS[] = {INFINITY, -INFINITY, NAN,     0.0f,    -0.0f, 1e-40f,
                                 -1e-40f,  100.0f,    -100.0f, 1000.0f, 1e30f, -1e30f};
#define N_SPECIALS (int64_t)(sizeof SPECIALS / sizeof *SPECIALS)
static int64_t sweep_(float *x, int64_t cap) {
    int64_t n = 0;
    for (double v = SWEEP_LO; v <= -SWEEP_LO && n < cap - N_SPECIALS; v += SWEEP_STEP)
        x[n++] = (float)v;
    for (int64_t i = 0; i < N_SPECIALS; i++)
        x[n++] = SPECIALS[i];
    return n;
}
#define SWEEP_CAP ((int64_t)(200.0 / SWEEP_STEP) + 64)

// The largest errors of one evaluation against float64 (bounds above).
typedef struct {
    double silu20, silu87, dsilu, exp20, exp87, flush; // see the file's top
    int64_t special_bad;                               // specials unlike the precise forms'
} FastErr;

// Same value, NaN equal to NaN, or both within the flush of x's region (a subnormal result of
// the precise form is 0 in the fast one): the specials' check.
static int same_(float a, float b, float x) {
    return (isnan(a) && isnan(b)) || a == b ||
           (isfinite(a) && isfinite(b) && fabs((double)a - b) <= FLT_TINY * fmax(1.0, fabs(x)));
}

// out [3, n] = SiLU, SiLU', e^x of x (kda_cuda_fast_act_eval's layout); ref the precise forms'
// out for the specials.
static FastErr fast_errors_(const float *x, const float *out, const float *ref, int64_t n) {
    FastErr e = {0};
    for (int64_t i = 0; i < n; i++) {
        float s = out[i], d = out[n + i], ex = out[2 * n + i];
        if (i >= n - N_SPECIALS) {
            e.special_bad += !same_(s, ref[i], x[i]) || !same_(d, ref[n + i], x[i]) ||
                             !same_(ex, ref[2 * n + i], x[i]) ||
                             (isfinite(x[i]) && !(isfinite(s) && isfinite(d)));
            continue;
        }
        double X = x[i], S = 1.0 / (1.0 + exp(-X)), SI = X * S, DS = S * (1.0 + X * (1.0 - S));
        double E = exp(X);
        e.dsilu = fmax(e.dsilu, fabs(d - DS));
        if (X >= -87.0) { // σ normal: relative
            double r = SI != 0.0 ? fabs(s - SI) / fabs(SI) : fabs(s);
            if (fabs(X) <= 20.0) e.silu20 = fmax(e.silu20, r);
            e.silu87 = fmax(e.silu87, r);
            if (X <= 0.0) {
                double re = fabs(ex - E) / E;
                if (X >= -20.0) e.exp20 = fmax(e.exp20, re);
                e.exp87 = fmax(e.exp87, re);
            }
        } else { // flushed region: absolute, scaled by |x| (SiLU = x·σ)
            double a = fmax(fabs(s - SI) / fmax(1.0, fabs(X)), fabs(ex - E));
            e.flush = fmax(e.flush, a);
        }
    }
    return e;
}

// Asserts the bounds of the file's top; `who` names the form.
// dev: the device form's bounds (the file's top: ex2.approx's and rcp.approx's room).
static void check_bounds_(const char *who, FastErr e, int dev) {
    double b20 = dev ? 3e-6 : 2e-6, bd = dev ? 4e-6 : 2e-6;
    printf("    %s: SiLU rel %.3g (|x|<=20) %.3g (x>=-87), SiLU' abs %.3g, e^x rel %.3g ([-20,0]) "
           "%.3g ([-87,0]), flushed abs %.3g, specials unlike precise %lld\n",
           who, e.silu20, e.silu87, e.dsilu, e.exp20, e.exp87, e.flush, (long long)e.special_bad);
    CHECK_MSG(e.silu20 <= b20 && e.silu87 <= 8e-6, "%s: SiLU relative error %.3g / %.3g", who,
              e.silu20, e.silu87);
    CHECK_MSG(e.dsilu <= bd, "%s: SiLU' absolute error %.3g", who, e.dsilu);
    CHECK_MSG(e.exp20 <= b20 && e.exp87 <= 8e-6, "%s: e^x relative error %.3g / %.3g", who, e.exp20,
              e.exp87);
    CHECK_MSG(e.flush <= 1.2e-38, "%s: flushed region's absolute error %.3g", who, e.flush);
    CHECK_MSG(e.special_bad == 0, "%s: %lld special values unlike the precise forms'", who,
              (long long)e.special_bad);
}

KDA_TEST(fast_exp_bounds) {
    float *x = malloc((size_t)SWEEP_CAP * sizeof *x);
    float *f = malloc((size_t)SWEEP_CAP * 3 * sizeof *f), *p = malloc((size_t)SWEEP_CAP * 3 * 4);
    int64_t n = sweep_(x, SWEEP_CAP);
    kda_cuda_fast_act_eval_host(f, x, n, 1);
    kda_cuda_fast_act_eval_host(p, x, n, 0);
    check_bounds_("host fast form", fast_errors_(x, f, p, n), 0);
    // the precise forms hold the same bounds (so they are the approximation's, not looser)
    FastErr ep = fast_errors_(x, p, p, n);
    CHECK(ep.silu20 <= 2e-6 && ep.dsilu <= 2e-6 && ep.exp87 <= 8e-6);
    free(x), free(f), free(p);
}

// The device form over the same sweep (needs a GPU): the device's bounds (the file's top).
KDA_TEST_GPU(gpu_fast_exp_bounds) {
    KdaCudaCtx ctx;
    if (!gpu_test_ctx(&ctx)) return;
    float *x = malloc((size_t)SWEEP_CAP * sizeof *x);
    float *f = malloc((size_t)SWEEP_CAP * 3 * 4), *p = malloc((size_t)SWEEP_CAP * 3 * 4);
    int64_t n = sweep_(x, SWEEP_CAP);
    size_t xb = (size_t)n * 4, ob = 3 * xb;
    float *dx = kda_cuda_alloc(&ctx, xb), *df = kda_cuda_alloc(&ctx, ob);
    float *dp = kda_cuda_alloc(&ctx, ob);
    int rc = !dx || !df || !dp || kda_cuda_put_bytes(&ctx, dx, x, xb) ||
             kda_cuda_fast_act_eval(&ctx, df, dx, n, 1) ||
             kda_cuda_fast_act_eval(&ctx, dp, dx, n, 0) || kda_cuda_sync(&ctx) ||
             kda_cuda_get_bytes(&ctx, f, df, ob) || kda_cuda_get_bytes(&ctx, p, dp, ob);
    CHECK_MSG(rc == 0, "%s", ctx.err.msg);
    if (rc == 0) {
        check_bounds_("device fast form", fast_errors_(x, f, p, n), 1);
        float *h = malloc(ob); // the host form: within the hardware approximations' few ulps
        kda_cuda_fast_act_eval_host(h, x, n, 1);
        double d = 0.0;
        for (int64_t i = 0; i < 3 * n; i++)
            if (isfinite(h[i]) && fabs(h[i]) >= FLT_TINY)
                d = fmax(d, fabs((double)f[i] - h[i]) / fabs(h[i]));
        printf("    device vs host fast form: max relative difference %.3g\n", d);
        free(h);
    }
    kda_cuda_release(dx), kda_cuda_release(df), kda_cuda_release(dp);
    kda_cuda_free(&ctx);
    free(x), free(f), free(p);
}

// Trained-like rows: N(0, 2), the target +14, row 1 flat, row 2 at +40, row 3 ignored.
static void fx_rows_(kda_bf16 *lg, int32_t *tg, int64_t rows, int64_t V, int64_t ld) {
    KdaRng r;
    rng_seed(&r, 211);
    for (int64_t i = 0; i < rows; i++) {
        int32_t t = (int32_t)rng_below(&r, (uint64_t)V);
        tg[i] = i == 3 ? XENT_IGNORE : t;
        for (int64_t j = 0; j < ld; j++) {
            float x = rng_normal(&r, 0.0f, i == 1 ? 0.5f : 2.0f) + (i == 2 ? 40.0f : 0.0f);
            lg[i * ld + j] = f32_to_bf16(j < V ? x + (j == t && i != 1 ? 14.0f : 0.0f) : NAN);
        }
    }
}

// The trimmed CE row kernel's fast sum pass (host twin) against the precise twin: lse and nll
// within 2e-6 · max(1, |lse|) (each term's relative error <= 1.2e-6 where it carries the sum,
// e^(x - m) >= e^-20; the rest weigh < 1e-3 of S), dlogits (the same __expf formula, lse moved by
// that much) within one bf16 ulp: 2^-7 |ref| + 2^-22 · scale.
KDA_TEST(fast_exp_cls_host) {
    const int64_t Vs[] = {1003, 9, 32768, 128256};
    int64_t flips = 0, total = 0;
    double dl = 0.0;
    for (size_t v = 0; v < sizeof Vs / sizeof *Vs; v++) {
        int64_t V = Vs[v], ld = kda_cuda_cls_ld(V), rows = 6;
        int cl = kda_cuda_cls_cluster(V);
        size_t n = (size_t)(rows * ld);
        kda_bf16 *a = malloc(n * 2), *b = malloc(n * 2);
        int32_t tg[6];
        float na[6], sa[6], nb[6], sb[6], scale = 1.0f / 31.0f;
        fx_rows_(a, tg, rows, V, ld);
        memcpy(b, a, n * 2);
        kda_cuda_cls_rows_trim_host(a, na, sa, tg, rows, V, ld, scale, 1, 256, cl);
        kda_cuda_cls_rows_trim_fx_host(b, nb, sb, tg, rows, V, ld, scale, 1, 256, cl);
        for (int64_t i = 0; i < rows; i++) {
            double tol = 2e-6 * fmax(1.0, fabs(sa[i]));
            dl = fmax(dl, fabs(sb[i] - sa[i]) / fmax(1.0, fabs(sa[i])));
            CHECK_MSG(fabs(sb[i] - sa[i]) <= tol && fabs(nb[i] - na[i]) <= tol,
                      "V %lld row %lld: lse %.9g vs %.9g, nll %.9g vs %.9g", (long long)V,
                      (long long)i, sb[i], sa[i], nb[i], na[i]);
            int bad = 0;
            for (int64_t j = 0; j < V; j++) {
                float x = bf16_to_f32(b[i * ld + j]), y = bf16_to_f32(a[i * ld + j]);
                flips += x != y, total++;
                if (!(fabs(x - y) <= fabs(y) / 128.0 + ldexp(scale, -22)) && !bad++)
                    CHECK_MSG(0, "V %lld row %lld col %lld: dlogit %.9g vs %.9g", (long long)V,
                              (long long)i, (long long)j, x, y);
            }
        }
        free(a), free(b);
    }
    printf("    fast vs precise sum pass: lse max |d|/max(1,|lse|) %.3g, dlogits differing %lld of "
           "%lld\n",
           dl, (long long)flips, (long long)total);
    // special rows (V 64): row 0 -inf outside its target's group (those terms e^-inf = 0, the
    // slices of -inf max summing e^x), row 1 a NaN logit (lse NaN, as the precise kernel)
    int64_t V = 64, ld = kda_cuda_cls_ld(V);
    kda_bf16 *a = malloc((size_t)(2 * ld) * 2), *b = malloc((size_t)(2 * ld) * 2);
    int32_t tg[2];
    float na[2], sa[2], nb[2], sb[2];
    fx_rows_(a, tg, 2, V, ld);
    for (int64_t j = 0; j < V; j++)
        if (j / 8 != tg[0] / 8) a[j] = f32_to_bf16(-INFINITY);
    a[ld + 7] = f32_to_bf16(NAN);
    memcpy(b, a, (size_t)(2 * ld) * 2);
    kda_cuda_cls_rows_trim_host(a, na, sa, tg, 2, V, ld, 1.0f, 1, 32, 2);
    kda_cuda_cls_rows_trim_fx_host(b, nb, sb, tg, 2, V, ld, 1.0f, 1, 32, 2);
    CHECK_MSG(isfinite(sb[0]) && fabs(sb[0] - sa[0]) <= 2e-6 * fmax(1.0, fabs(sa[0])),
              "-inf row: lse %.9g vs %.9g", sb[0], sa[0]);
    CHECK_MSG(isnan(sa[1]) && isnan(sb[1]), "NaN row: lse %g vs %g (want NaN)", sb[1], sa[1]);
    free(a), free(b);
}

#endif // KDA_HAVE_CUDA
