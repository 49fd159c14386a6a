// test_fuse_host.c - the fused elementwise kernels of src/cuda/conv_kernels.cuh and norm_cuda.cu
// (conv + SiLU + L2 norm of q/k, q|k|v convs in one launch, gated out-norm with the g_proj.1
// bias) through their HOST twins
// (kda_cuda_*_host: the kernels' per-lane arithmetic and group-sum order, every lane run one
// after another) against the CPU ops they replace (cpu/conv.h conv_silu_*, cpu/norm.h gnorm_*,
// cpu/kda_core.h kda_l2norm_*). Runs in the CPU suite of every CUDA build (CI has nvcc, no GPU);
// the kernels on a device are test_gpu_fuse.c's gpu_fuse_* (fused vs unfused on the GPU).
//
// The CPU gets the same bf16-rounded inputs in fp32 and computes everything in fp32 (z + bias
// too, as the fused kernels do). Tolerances, rel = RMS(out - ref) / RMS(ref):
//   * bf16 outputs (y, dp, dx, dz): 1e-2 - the bf16 rounding of each element alone is ~2e-3
//     relative RMS; a wrong head, channel, tap or row shows at >= 1e-1.
//   * fp32 outputs (rstd, dw): 1e-5 - the same products summed in another order (fp32 lane
//     sums and a tree vs the CPU's serial loops): ~1e-7 per operation.
//   * dbias: 1e-2 - the twin sums the bf16-rounded dz (as the device), the CPU its fp32 dz.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kda_case.h" // defines: kda_case_expect_rel
#include "test.h"

#ifdef KDA_HAVE_CUDA

#include "core/rng.h"       // defines: KdaRng, rng_normal
#include "core/util.h"      // defines: bf16_to_f32, f32_to_bf16
#include "cpu/kda_core.h"   // defines: kda_l2norm_fwd, kda_l2norm_bwd
#include "cpu/conv.h"       // defines: conv_silu_fwd, conv_silu_bwd
#include "cpu/norm.h"       // defines: gnorm_fwd, gnorm_bwd
#include "cuda/conv_cuda.h" // defines: kda_cuda_conv_silu_l2_*_host, kda_cuda_conv_l2_fusable
#include "cuda/gemm_cuda.h" // defines: kda_cuda_cols_split_host, KdaCudaColParts
#include "cuda/norm_cuda.h" // defines: kda_cuda_gnorm_bias_*_host, kda_cuda_gnorm_fusable

#define TOL_BF16 1e-2
#define TOL_F32  1e-5

// n values N(0, std), rounded to bf16: b (bf16) and f (the same values in fp32).
static void rand_bf16_(KdaRng *r, kda_bf16 *b, float *f, int64_t n, float std) {
    for (int64_t i = 0; i < n; i++) {
        b[i] = f32_to_bf16(rng_normal(r, 0.0f, std));
        f[i] = bf16_to_f32(b[i]);
    }
}

static float *bf16_to_f32s_(const kda_bf16 *b, int64_t n) {
    float *f = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        f[i] = bf16_to_f32(b[i]);
    return f;
}

// One conv + SiLU + L2 case: forward and backward of the twin against conv_silu + l2norm.
static void conv_l2_case_(KdaRng *r, int64_t B, int64_t T, int64_t H, int64_t K, int64_t W) {
    int64_t C = H * K, n = B * T * C, NH = B * T * H;
    printf("  B=%lld T=%lld H=%lld K=%lld W=%lld\n", (long long)B, (long long)T, (long long)H,
           (long long)K, (long long)W);
    kda_bf16 *pb = malloc((size_t)n * 2), *yb = malloc((size_t)n * 2), *dpb = malloc((size_t)n * 2);
    float *p = malloc((size_t)n * 4), *w = malloc((size_t)(C * W) * 4), *dq = malloc((size_t)n * 4);
    rand_bf16_(r, pb, p, n, 1.0f);
    for (int64_t i = 0; i < C * W; i++)
        w[i] = rng_normal(r, 0.0f, 0.5f);
    for (int64_t i = 0; i < n; i++)
        dq[i] = rng_normal(r, 0.0f, 1.0f);
    // CPU reference: y = l2norm(SiLU(conv(p))); backward through both
    float *qc = malloc((size_t)n * 4), *c = malloc((size_t)n * 4), *y = malloc((size_t)n * 4);
    float *rs = malloc((size_t)NH * 4), *dqc = malloc((size_t)n * 4), *dp = malloc((size_t)n * 4);
    float *dw = calloc((size_t)(C * W), 4), *dw_t = calloc((size_t)(C * W), 4);
    float *rs_t = malloc((size_t)NH * 4);
    conv_silu_fwd(qc, c, p, w, B, T, C, W);
    kda_l2norm_fwd(y, rs, qc, NH, K, 1e-6f);
    kda_l2norm_bwd(dqc, dq, y, rs, NH, K);
    conv_silu_bwd(dp, dw, dqc, p, c, w, B, T, C, W);
    // the twins
    kda_cuda_conv_silu_l2_fwd_host(yb, rs_t, pb, w, B, T, C, W, K, 1e-6f);
    kda_cuda_conv_silu_l2_bwd_host(dpb, dw_t, dq, pb, w, rs_t, B, T, C, W, K);
    float *y_t = bf16_to_f32s_(yb, n), *dp_t = bf16_to_f32s_(dpb, n);
    kda_case_expect_rel("conv+silu+l2 y bf16", y, y_t, n, TOL_BF16);
    kda_case_expect_rel("conv+silu+l2 rstd", rs, rs_t, NH, TOL_F32);
    kda_case_expect_rel("conv+silu+l2 bwd dp bf16", dp, dp_t, n, TOL_BF16);
    kda_case_expect_rel("conv+silu+l2 bwd dw += fp32", dw, dw_t, C * W, TOL_F32);
    free(pb), free(yb), free(dpb), free(p), free(w), free(dq), free(qc), free(c), free(y);
    free(rs), free(dqc), free(dp), free(dw), free(dw_t), free(rs_t), free(y_t), free(dp_t);
}

KDA_TEST(fuse_host_conv_silu_l2) {
    KdaRng r;
    rng_seed(&r, 141);
    CHECK(kda_cuda_conv_l2_fusable(32) && kda_cuda_conv_l2_fusable(8));
    CHECK(!kda_cuda_conv_l2_fusable(24) && !kda_cuda_conv_l2_fusable(256));
    conv_l2_case_(&r, 2, 1, 2, 8, 4);   // T = 1: only zero history
    conv_l2_case_(&r, 2, 37, 3, 16, 4); // a partial tile, H not a power of two
    conv_l2_case_(&r, 1, 70, 8, 32, 4); // the 300M head (8 lanes per head in the backward)
    conv_l2_case_(&r, 1, 20, 2, 64, 3);
    conv_l2_case_(&r, 2, 9, 1, 128, 1); // W = 1: no history at all
}

// One gated-norm case: y = RMSNorm(o) ⊙ σ(z + bias), backward with dbias.
static void gnorm_bias_case_(KdaRng *r, int64_t N, int64_t HV, int64_t V) {
    int64_t NR = N * HV, n = NR * V;
    printf("  N=%lld HV=%lld V=%lld\n", (long long)N, (long long)HV, (long long)V);
    kda_bf16 *xb = malloc((size_t)n * 2), *zb = malloc((size_t)n * 2), *gb = malloc((size_t)n * 2);
    kda_bf16 *yb = malloc((size_t)n * 2), *dxb = malloc((size_t)n * 2),
             *dzb = malloc((size_t)n * 2);
    float *x = malloc((size_t)n * 4), *z = malloc((size_t)n * 4), *g = malloc((size_t)n * 4);
    float *bias = malloc((size_t)(HV * V) * 4), *w = malloc((size_t)V * 4);
    rand_bf16_(r, xb, x, n, 0.3f);
    rand_bf16_(r, zb, z, n, 2.0f);
    rand_bf16_(r, gb, g, n, 1.0f);
    for (int64_t i = 0; i < HV * V; i++)
        bias[i] = rng_normal(r, 0.0f, 0.5f);
    for (int64_t i = 0; i < V; i++)
        w[i] = rng_normal(r, 1.0f, 0.3f);
    // CPU reference on zsum = z + bias in fp32 (what the fused kernels use)
    float *zs = malloc((size_t)n * 4), *y = malloc((size_t)n * 4), *rs = malloc((size_t)NR * 4);
    float *dx = malloc((size_t)n * 4), *dz = malloc((size_t)n * 4);
    float *dw = calloc((size_t)V, 4), *db = calloc((size_t)(HV * V), 4);
    for (int64_t i = 0; i < n; i++)
        zs[i] = z[i] + bias[(i / V) % HV * V + i % V];
    gnorm_fwd(y, rs, x, zs, w, NR, V, 1e-6f);
    gnorm_bwd(dx, dz, dw, g, x, zs, w, rs, NR, V);
    for (int64_t i = 0; i < n; i++)
        db[(i / V) % HV * V + i % V] += dz[i];
    float *rs_t = malloc((size_t)NR * 4), *dw_t = calloc((size_t)V, 4);
    float *db_t = calloc((size_t)(HV * V), 4);
    kda_cuda_gnorm_bias_fwd_host(yb, rs_t, xb, zb, bias, w, N, HV, V, 1e-6f);
    kda_cuda_gnorm_bias_bwd_host(dxb, dzb, dw_t, db_t, gb, xb, zb, bias, w, rs_t, N, HV, V);
    float *y_t = bf16_to_f32s_(yb, n), *dx_t = bf16_to_f32s_(dxb, n), *dz_t = bf16_to_f32s_(dzb, n);
    kda_case_expect_rel("gnorm+bias y bf16", y, y_t, n, TOL_BF16);
    kda_case_expect_rel("gnorm+bias rstd", rs, rs_t, NR, TOL_F32);
    kda_case_expect_rel("gnorm+bias bwd dx bf16", dx, dx_t, n, TOL_BF16);
    kda_case_expect_rel("gnorm+bias bwd dz bf16", dz, dz_t, n, TOL_BF16);
    kda_case_expect_rel("gnorm+bias bwd dw += fp32", dw, dw_t, V, TOL_F32);
    kda_case_expect_rel("gnorm+bias bwd dbias += (bf16 dz)", db, db_t, HV * V, TOL_BF16);
    free(xb), free(zb), free(gb), free(yb), free(dxb), free(dzb), free(x), free(z), free(g);
    free(bias), free(w), free(zs), free(y), free(rs), free(dx), free(dz), free(dw), free(db);
    free(rs_t), free(dw_t), free(db_t), free(y_t), free(dx_t), free(dz_t);
}

KDA_TEST(fuse_host_gnorm_bias) {
    KdaRng r;
    rng_seed(&r, 143);
    CHECK(kda_cuda_gnorm_fusable(64) && kda_cuda_gnorm_fusable(8));
    CHECK(!kda_cuda_gnorm_fusable(20) && !kda_cuda_gnorm_fusable(512));
    gnorm_bias_case_(&r, 1, 1, 8);
    gnorm_bias_case_(&r, 37, 3, 16);
    gnorm_bias_case_(&r, 70, 8, 64); // the 300M head
    gnorm_bias_case_(&r, 9, 2, 256); // 32 lanes per row
}

// The fused input projection's column split (kda_cuda_cols_split) on the host twin: every part
// equal to a naive copy of its columns, bytes of the destinations outside the parts untouched
// (the 16-byte path: the 300M layout 256 | 256 | 512 | 64 | 64 | 8 columns, strides of 8; the
// 2-byte path: odd widths, a gap between parts, a wider destination stride). Exact: a copy.
static void split_case_(int64_t rows, int64_t lds, int n, const int64_t *col, const int64_t *cols,
                        const int64_t *ld) {
    kda_bf16 *src = malloc((size_t)(rows * lds) * 2);
    for (int64_t i = 0; i < rows * lds; i++)
        src[i] = (kda_bf16)(i * 2654435761u >> 7); // distinct, arbitrary bits
    KdaCudaColParts pp;
    memset(&pp, 0, sizeof pp);
    pp.n = n;
    for (int k = 0; k < n; k++) {
        pp.col[k] = col[k], pp.cols[k] = cols[k], pp.ld[k] = ld[k];
        pp.dst[k] = malloc((size_t)(rows * ld[k]) * 2);
        memset(pp.dst[k], 0xAB, (size_t)(rows * ld[k]) * 2);
    }
    kda_cuda_cols_split_host(src, lds, rows, &pp);
    for (int k = 0; k < n; k++) {
        int64_t bad = 0;
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < ld[k]; c++) {
                kda_bf16 want = c < cols[k] ? src[r * lds + col[k] + c] : 0xABAB;
                bad += pp.dst[k][r * ld[k] + c] != want;
            }
        CHECK_MSG(bad == 0, "part %d (cols %lld at %lld): %lld elements wrong", k,
                  (long long)cols[k], (long long)col[k], (long long)bad);
        free(pp.dst[k]);
    }
    free(src);
}

KDA_TEST(fuse_host_cols_split) {
    const int64_t col[] = {0, 256, 512, 1024, 1088, 1152}, cols[] = {256, 256, 512, 64, 64, 8};
    split_case_(37, 1160, 6, col, cols, cols); // the 300M input projection (16-byte path)
    const int64_t col2[] = {1, 9, 30}, cols2[] = {7, 20, 3}, ld2[] = {7, 24, 5};
    split_case_(11, 40, 3, col2, cols2, ld2); // 2-byte path, a gap (columns 29, 33.. unused)
}

// ---- q|k|v in one launch (kda_cuda_conv_qkv_*_host) -------------------------------------------
// The combined grid (one = 1: every block's job decoded as the kernel decodes it) against the three
// separate launches' grids (one = 0), bit for bit: y, rstd, dp (its columns past C untouched:
// outputs poisoned with NaN bytes first), dw (accumulating onto the same random values). Then
// against what the parts replace: q and k's dp bit for bit with kda_cuda_conv_silu_l2_bwd_host
// (the same v1 lane arithmetic), the forward's q/k (v2: K / 4 lanes a head against the twin's
// K / 8) and v, and the weight gradients within the tolerances above. ldo > 0: the three dp
// share one [B·T, ldo] buffer, q | k | v side by side then ldo - 2HK - HVV unused columns (the
// model's fused dY), else each its own contiguous buffer.
#define QKV_POISON 0xFF // bf16 0xFFFF, fp32 0xFFFFFFFF: NaN
typedef struct {
    kda_bf16 *p[3], *y[2][3], *dy, *dpb[2];
    float *pf[3], *w[3], *dq[2], *rstd[2][2], *dw0[3], *dw[2][3];
} QkvBufs;

static int64_t nan_count_(const kda_bf16 *b, int64_t rows, int64_t cols, int64_t ld) {
    int64_t bad = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            bad += isnan(bf16_to_f32(b[r * ld + c]));
    return bad;
}

static void conv_qkv_case_(KdaRng *r, int64_t B, int64_t T, int64_t H, int64_t K, int64_t HVV,
                           int64_t W, int64_t ldo) {
    int64_t HK = H * K, N = B * T, C[3] = {HK, HK, HVV}, NH = N * H;
    int64_t ld = ldo > 0 ? ldo : 0, col[3] = {0, HK, 2 * HK};
    printf("  B=%lld T=%lld H=%lld K=%lld HVV=%lld W=%lld ldo=%lld\n", (long long)B, (long long)T,
           (long long)H, (long long)K, (long long)HVV, (long long)W, (long long)ldo);
    QkvBufs z;
    memset(&z, 0, sizeof z);
    int64_t dpn = ld > 0 ? N * ld : N * (2 * HK + HVV); // one buffer either way
    for (int i = 0; i < 3; i++) {
        int64_t n = N * C[i];
        z.p[i] = malloc((size_t)n * 2), z.pf[i] = malloc((size_t)n * 4);
        rand_bf16_(r, z.p[i], z.pf[i], n, 1.0f);
        z.w[i] = malloc((size_t)(C[i] * W) * 4), z.dw0[i] = malloc((size_t)(C[i] * W) * 4);
        for (int64_t e = 0; e < C[i] * W; e++)
            z.w[i][e] = rng_normal(r, 0.0f, 0.5f), z.dw0[i][e] = rng_normal(r, 0.0f, 1.0f);
        for (int o = 0; o < 2; o++) {
            z.y[o][i] = malloc((size_t)n * 2);
            memset(z.y[o][i], QKV_POISON, (size_t)n * 2);
            z.dw[o][i] = malloc((size_t)(C[i] * W) * 4);
            memcpy(z.dw[o][i], z.dw0[i], (size_t)(C[i] * W) * 4);
            if (i < 2) {
                z.rstd[o][i] = malloc((size_t)NH * 4);
                memset(z.rstd[o][i], QKV_POISON, (size_t)NH * 4);
            }
        }
        if (i < 2) {
            z.dq[i] = malloc((size_t)n * 4);
            for (int64_t e = 0; e < n; e++)
                z.dq[i][e] = rng_normal(r, 0.0f, 1.0f);
        }
    }
    float *dyf = malloc((size_t)(N * HVV) * 4);
    z.dy = malloc((size_t)(N * HVV) * 2);
    rand_bf16_(r, z.dy, dyf, N * HVV, 1.0f);
    for (int o = 0; o < 2; o++) {
        z.dpb[o] = malloc((size_t)dpn * 2);
        memset(z.dpb[o], QKV_POISON, (size_t)dpn * 2);
    }
    // forward, both ways
    for (int o = 0; o < 2; o++) {
        KdaConvQkvFwd f[3];
        for (int i = 0; i < 3; i++)
            f[i] = (KdaConvQkvFwd){z.y[o][i], i < 2 ? z.rstd[o][i] : NULL, z.p[i], z.w[i]};
        kda_cuda_conv_qkv_fwd_host(f, B, T, HK, HVV, W, K, 1e-6f, 1 - o);
    }
    for (int i = 0; i < 3; i++) {
        CHECK_MSG(!memcmp(z.y[0][i], z.y[1][i], (size_t)(N * C[i]) * 2),
                  "forward part %d: y of the combined grid differs from the separate launches", i);
        CHECK_MSG(nan_count_(z.y[0][i], N, C[i], C[i]) == 0, "forward part %d: y not all written",
                  i);
        if (i < 2) {
            CHECK_MSG(!memcmp(z.rstd[0][i], z.rstd[1][i], (size_t)NH * 4),
                      "forward part %d: rstd of the combined grid differs", i);
            int64_t bad = 0;
            for (int64_t e = 0; e < NH; e++)
                bad += isnan(z.rstd[0][i][e]);
            CHECK_MSG(bad == 0, "forward part %d: rstd not all written", i);
        }
    }
    // backward, both ways (rstd: the forward's)
    for (int o = 0; o < 2; o++) {
        KdaConvQkvBwd b[3];
        for (int i = 0; i < 3; i++) {
            kda_bf16 *dp = ld > 0 ? z.dpb[o] + col[i] : z.dpb[o] + N * col[i];
            b[i] = (KdaConvQkvBwd){dp,
                                   ld > 0 ? ld : C[i],
                                   z.dw[o][i],
                                   i < 2 ? z.dq[i] : NULL,
                                   i < 2 ? NULL : z.dy,
                                   z.p[i],
                                   z.w[i],
                                   i < 2 ? z.rstd[0][i] : NULL};
        }
        kda_cuda_conv_qkv_bwd_host(b, B, T, HK, HVV, W, K, 1 - o);
    }
    CHECK_MSG(!memcmp(z.dpb[0], z.dpb[1], (size_t)dpn * 2),
              "backward: dp of the combined grid differs from the separate launches");
    for (int i = 0; i < 3; i++) {
        CHECK_MSG(!memcmp(z.dw[0][i], z.dw[1][i], (size_t)(C[i] * W) * 4),
                  "backward part %d: dw of the combined grid differs", i);
        const kda_bf16 *dp = ld > 0 ? z.dpb[0] + col[i] : z.dpb[0] + N * col[i];
        CHECK_MSG(nan_count_(dp, N, C[i], ld > 0 ? ld : C[i]) == 0,
                  "backward part %d: dp not all written", i);
    }
    if (ld > 0) { // the columns past q | k | v keep their poison
        int64_t kept = 0, w0 = 2 * HK + HVV;
        for (int64_t rr = 0; rr < N; rr++)
            for (int64_t c = w0; c < ld; c++)
                kept += z.dpb[0][rr * ld + c] == 0xFFFF;
        CHECK_MSG(kept == N * (ld - w0), "backward: %lld of %lld columns past the parts written",
                  (long long)(N * (ld - w0) - kept), (long long)(N * (ld - w0)));
    }
    // against the separate twins and the CPU ops
    for (int i = 0; i < 3; i++) {
        int64_t n = N * C[i];
        const kda_bf16 *dpc = ld > 0 ? z.dpb[0] + col[i] : z.dpb[0] + N * col[i];
        int64_t ldc = ld > 0 ? ld : C[i];
        kda_bf16 *yr = malloc((size_t)n * 2), *dpr = malloc((size_t)n * 2);
        float *dwr = malloc((size_t)(C[i] * W) * 4), *ref = malloc((size_t)n * 4);
        float *cc = malloc((size_t)n * 4), *out = malloc((size_t)n * 4);
        memcpy(dwr, z.dw0[i], (size_t)(C[i] * W) * 4);
        if (i < 2) {
            float *rsr = malloc((size_t)NH * 4);
            kda_cuda_conv_silu_l2_fwd_host(yr, rsr, z.p[i], z.w[i], B, T, HK, W, K, 1e-6f);
            kda_cuda_conv_silu_l2_bwd_host(dpr, dwr, z.dq[i], z.p[i], z.w[i], z.rstd[0][i], B, T,
                                           HK, W, K);
            int64_t bad = 0;
            for (int64_t rr = 0; rr < N; rr++)
                bad += memcmp(dpc + rr * ldc, dpr + rr * HK, (size_t)HK * 2) != 0;
            CHECK_MSG(bad == 0, "part %d: %lld dp rows differ from kda_cuda_conv_silu_l2_bwd_host",
                      i, (long long)bad);
            kda_case_expect_rel("qkv rstd vs l2 twin", rsr, z.rstd[0][i], NH, TOL_F32);
            free(rsr);
        } else {
            float *dwc = malloc((size_t)(C[i] * W) * 4), *dpf = malloc((size_t)n * 4);
            memcpy(dwc, z.dw0[i], (size_t)(C[i] * W) * 4);
            conv_silu_fwd(ref, cc, z.pf[i], z.w[i], B, T, HVV, W);
            for (int64_t e = 0; e < n; e++)
                yr[e] = f32_to_bf16(ref[e]);
            conv_silu_bwd(dpf, dwc, dyf, z.pf[i], cc, z.w[i], B, T, HVV, W);
            for (int64_t e = 0; e < n; e++)
                dpr[e] = f32_to_bf16(dpf[e]);
            memcpy(dwr, dwc, (size_t)(C[i] * W) * 4);
            free(dwc), free(dpf);
        }
        float *a = bf16_to_f32s_(yr, n), *b = bf16_to_f32s_(z.y[0][i], n);
        kda_case_expect_rel(i < 2 ? "qkv y (q/k) vs twin" : "qkv y (v) vs cpu", a, b, n, TOL_BF16);
        free(a), free(b);
        for (int64_t rr = 0; rr < N; rr++)
            for (int64_t c = 0; c < C[i]; c++)
                ref[rr * C[i] + c] = bf16_to_f32(dpr[rr * C[i] + c]),
                                out[rr * C[i] + c] = bf16_to_f32(dpc[rr * ldc + c]);
        kda_case_expect_rel("qkv dp vs twin / cpu", ref, out, n, TOL_BF16);
        kda_case_expect_rel("qkv dw += vs twin / cpu", dwr, z.dw[0][i], C[i] * W, TOL_F32);
        free(yr), free(dpr), free(dwr), free(ref), free(cc), free(out);
    }
    for (int i = 0; i < 3; i++) {
        free(z.p[i]), free(z.pf[i]), free(z.w[i]), free(z.dw0[i]);
        for (int o = 0; o < 2; o++)
            free(z.y[o][i]), free(z.dw[o][i]);
        if (i < 2) free(z.dq[i]), free(z.rstd[0][i]), free(z.rstd[1][i]);
    }
    free(z.dy), free(dyf), free(z.dpb[0]), free(z.dpb[1]);
}

KDA_TEST(fuse_host_conv_qkv) {
    KdaRng r;
    rng_seed(&r, 181);
    conv_qkv_case_(&r, 2, 37, 3, 16, 40, 4, 0);     // T not a multiple of 8 or 32, H = 3
    conv_qkv_case_(&r, 3, 1, 2, 8, 24, 2, 0);       // T = 1, B = 3
    conv_qkv_case_(&r, 1, 70, 8, 32, 512, 4, 0);    // the 300M heads (HVV 512: 4 v block columns)
    conv_qkv_case_(&r, 3, 45, 2, 32, 96, 1, 1160);  // W = 1; one dY buffer, ldo > 2HK + HVV
    conv_qkv_case_(&r, 1, 66, 1, 128, 64, 8, 0);    // W = 8, K = 128 (32 lanes a head)
    conv_qkv_case_(&r, 2, 300, 2, 64, 256, 4, 648); // ldo = 2HK + HVV + 136
    conv_qkv_case_(&r, 1, 16500, 1, 8, 8, 3, 0);    // v's 258 block rows > 256: blocks walk rows
}

#endif // KDA_HAVE_CUDA
