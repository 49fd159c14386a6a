// conv_qkv_cuda.cu - a layer's q, k and v convs in one launch each way (see conv_cuda.h): the
// combined backward's dw finish kernel, the job plans, the launchers, and their host twins
// (tests: test_fuse_host.c). The conv kernels themselves: conv_kernels.cuh.
#include "cuda/conv_kernels.cuh" // defines: the conv kernels, conv_grid, conv_v2_, CONV_DISPATCH_*

namespace {

// The three weight gradients' column sums in one launch: job j's blocks [start[j], start[j+1])
// are colsum_finish's blocks for dw_j (out[j] += Σ_p part[j][p, :], P[j] partial rows of ncols[j]
// = C·W columns): the same body, the same order.
struct ConvQkvFin {
    float *out[3];
    const double *part[3];
    int64_t P[3], ncols[3];
    int start[3];
};
__global__ void conv_qkv_finish_k(const ConvQkvFin f) {
    // selects, not f.x[jn]: a run-time index into the parameter arrays copies them to the stack
    const int blk = (int)blockIdx.x, jn = blk >= f.start[2] ? 2 : blk >= f.start[1] ? 1 : 0;
#define FIN_PICK(x) (jn == 0 ? f.x[0] : jn == 1 ? f.x[1] : f.x[2])
    colsum_finish_body(FIN_PICK(out), FIN_PICK(part), FIN_PICK(P), FIN_PICK(ncols),
                       (int64_t)(blk - FIN_PICK(start)));
#undef FIN_PICK
}

// Blocks of the combined grid (the last job's end).
int conv_qkv_blocks(const ConvQkvArgs &a) {
    return a.j[2].start + a.j[2].gx * a.j[2].gy;
}

// The host twins' walk over a's blocks: run(job, block index within the job) for every block,
// in the combined grid's order (one != 0: block after block, each block's job decoded as the
// kernels decode it) or job after job (the three separate launches).
template <class F> void conv_qkv_each_block_host(const ConvQkvArgs &a, int one, F run) {
    if (one) {
        for (int blk = 0; blk < conv_qkv_blocks(a); blk++) {
            int jn = conv_qkv_job(a, blk);
            run(jn, blk - a.j[jn].start);
        }
    } else {
        for (int jn = 0; jn < 3; jn++)
            for (int loc = 0; loc < a.j[jn].gx * a.j[jn].gy; loc++)
                run(jn, loc);
    }
}

} // namespace

extern "C" {

// ---- q|k|v in one launch: plans, launchers ----------------------------------------------------
// The job table of the combined launch (conv_qkv_fwd_k / conv_qkv_bwd_k). dev: the launchers'
// plan (false where one launch does not apply: the versions the environment picks, alignment,
// W > CONV_QKV_MAX_W, grid limits); else the host twins' (geometry only, any W <= CONV_MAX_W).
// Each job's grid is its separate launcher's: forward conv_grid(.., 4, CONV2_TT_FWD) for all
// three; backward conv_grid(.., 4, CONV_TT_BWD) for q, k and conv2_bwd_grid for v.
static bool conv_qkv_fwd_plan(ConvQkvArgs *a, const KdaConvQkvFwd *pt, int64_t B, int64_t T,
                              int64_t HK, int64_t HVV, int64_t W, int64_t K, float eps, bool dev) {
    if (!pt || B <= 0 || T <= 0 || HK <= 0 || HVV <= 0 || W < 1 || W > CONV_MAX_W) return false;
    if (!kda_cuda_conv_l2_fusable(K) || HK % K != 0 || HVV % 4 != 0) return false;
    if (!conv_i32_ok(B, T, HK) || !conv_i32_ok(B, T, HVV)) return false;
    if (dev) {
        if (W > CONV_QKV_MAX_W || !conv_v2_(CONV_K_L2_FWD) || !conv_v2_(CONV_K_FWD)) return false;
        if (!aligned_(16, pt[0].y, pt[0].p, pt[1].y, pt[1].p) || !aligned_(8, pt[2].y, pt[2].p))
            return false;
    }
    int start = 0;
    for (int i = 0; i < 3; i++) {
        int64_t C = i < 2 ? HK : HVV;
        dim3 g = conv_grid(B, T, C, 4, CONV2_TT_FWD);
        if (g.y == 0 || (int64_t)start + (int64_t)g.x * g.y > INT32_MAX) return false;
        ConvQkvJob j = {};
        j.out = pt[i].y, j.rstd = i < 2 ? pt[i].rstd : NULL, j.p = pt[i].p, j.w = pt[i].w;
        j.C = (int)C, j.ldo = (int)C, j.gx = (int)g.x, j.gy = (int)g.y, j.start = start;
        a->j[i] = j;
        start += j.gx * j.gy;
    }
    a->B = (int)B, a->T = (int)T, a->eps = eps;
    return true;
}

static bool conv_qkv_bwd_plan(ConvQkvArgs *a, const KdaConvQkvBwd *pt, int64_t B, int64_t T,
                              int64_t HK, int64_t HVV, int64_t W, int64_t K, bool dev) {
    if (!pt || B <= 0 || T <= 0 || HK <= 0 || HVV <= 0 || W < 1 || W > CONV_MAX_W) return false;
    if (!kda_cuda_conv_l2_fusable(K) || HK % K != 0 || HVV % 2 != 0) return false;
    for (int i = 0; i < 3; i++) {
        int64_t C = i < 2 ? HK : HVV, ldo = pt[i].ldo;
        if (ldo < C || ldo % (i < 2 ? 4 : 2) != 0 || !conv_i32_ok(B, T, ldo)) return false;
    }
    if (dev) {
        // q, k: the v1 fused backward (conv_v2_ picks v2 only for K <= 64), without prefetch;
        // v: the v2 plain backward
        if (W > CONV_QKV_MAX_W || (conv_v2_(CONV_K_L2_BWD) && K <= 64) || conv_pf_() ||
            !conv_v2_(CONV_K_BWD))
            return false;
        for (int i = 0; i < 2; i++)
            if (!aligned_(16, pt[i].dq) || !aligned_(8, pt[i].dp, pt[i].p)) return false;
        if (!aligned_(4, pt[2].dp, pt[2].dy, pt[2].p)) return false;
    }
    int start = 0;
    for (int i = 0; i < 3; i++) {
        int64_t C = i < 2 ? HK : HVV;
        dim3 g = i < 2 ? conv_grid(B, T, C, 4, CONV_TT_BWD) : conv2_bwd_grid(B, T, C);
        if (g.y == 0 || (int64_t)start + (int64_t)g.x * g.y > INT32_MAX) return false;
        ConvQkvJob j = {};
        j.out = pt[i].dp, j.p = pt[i].p, j.w = pt[i].w;
        j.rstd_in = i < 2 ? pt[i].rstd : NULL, j.dq = i < 2 ? pt[i].dq : NULL;
        j.dy = i < 2 ? NULL : pt[i].dy;
        j.C = (int)C, j.ldo = (int)pt[i].ldo, j.gx = (int)g.x, j.gy = (int)g.y, j.start = start;
        a->j[i] = j;
        start += j.gx * j.gy;
    }
    a->B = (int)B, a->T = (int)T, a->eps = 0.0f;
    return true;
}

int kda_cuda_conv_qkv_fwd_one(const KdaConvQkvFwd part[3], int64_t B, int64_t T, int64_t HK,
                              int64_t HVV, int64_t W, int64_t K) {
    ConvQkvArgs a;
    return conv_qkv_fwd_plan(&a, part, B, T, HK, HVV, W, K, 0.0f, true);
}

int kda_cuda_conv_qkv_bwd_one(const KdaConvQkvBwd part[3], int64_t B, int64_t T, int64_t HK,
                              int64_t HVV, int64_t W, int64_t K) {
    ConvQkvArgs a;
    return conv_qkv_bwd_plan(&a, part, B, T, HK, HVV, W, K, true);
}

int kda_cuda_conv_qkv_fwd_separate(KdaCudaCtx *ctx, const KdaConvQkvFwd part[3], int64_t B,
                                   int64_t T, int64_t HK, int64_t HVV, int64_t W, int64_t K,
                                   float eps) {
    KDA_CUDA_REQUIRE(ctx, part != NULL);
    for (int i = 0; i < 2; i++)
        if (kda_cuda_conv_silu_l2_fwd(ctx, part[i].y, part[i].rstd, part[i].p, part[i].w, B, T, HK,
                                      W, K, eps))
            return -1;
    return kda_cuda_conv_silu_fwd(ctx, part[2].y, part[2].p, part[2].w, B, T, HVV, W);
}

int kda_cuda_conv_qkv_bwd_separate(KdaCudaCtx *ctx, const KdaConvQkvBwd part[3], int64_t B,
                                   int64_t T, int64_t HK, int64_t HVV, int64_t W, int64_t K) {
    KDA_CUDA_REQUIRE(ctx, part != NULL);
    for (int i = 0; i < 2; i++) {
        const KdaConvQkvBwd *q = &part[i];
        if (kda_cuda_conv_silu_l2_bwd_ld(ctx, q->dp, q->ldo, q->dw, q->dq, q->p, q->w, q->rstd, B,
                                         T, HK, W, K))
            return -1;
    }
    const KdaConvQkvBwd *v = &part[2];
    return kda_cuda_conv_silu_bwd_ld(ctx, v->dp, v->ldo, v->dw, v->dy, v->p, v->w, B, T, HVV, W);
}

int kda_cuda_conv_qkv_fwd(KdaCudaCtx *ctx, const KdaConvQkvFwd part[3], int64_t B, int64_t T,
                          int64_t HK, int64_t HVV, int64_t W, int64_t K, float eps) {
    KDA_CUDA_REQUIRE(ctx, part != NULL);
    ConvQkvArgs a;
    if (!conv_qkv_fwd_plan(&a, part, B, T, HK, HVV, W, K, eps, true))
        return kda_cuda_conv_qkv_fwd_separate(ctx, part, B, T, HK, HVV, W, K, eps);
    unsigned nb = (unsigned)conv_qkv_blocks(a);
#define CONV_QKV_FWD(W_, K_)                                                                       \
    conv_qkv_fwd_k<W_, K_ / 4><<<nb, dim3(32, CONV_BT), 0, ctx->stream>>>(a)
#define CONV_QKV_FWDF(W_, K_)                                                                      \
    conv_qkv_fwd_k<W_, K_ / 4, true><<<nb, dim3(32, CONV_BT), 0, ctx->stream>>>(a)
#define CONV_QKV_FWD_K(W_)  CONV_DISPATCH_K(K, W_, CONV_QKV_FWD)
#define CONV_QKV_FWDF_K(W_) CONV_DISPATCH_K(K, W_, CONV_QKV_FWDF)
    if (conv_fx_(W)) { // the separate launchers' choice (W <= 4 here): the same bits
        CONV_DISPATCH_W4(W, CONV_QKV_FWDF_K);
    } else {
        CONV_DISPATCH_W4(W, CONV_QKV_FWD_K);
    }
#undef CONV_QKV_FWDF_K
#undef CONV_QKV_FWD_K
#undef CONV_QKV_FWDF
#undef CONV_QKV_FWD
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

int kda_cuda_conv_qkv_bwd(KdaCudaCtx *ctx, const KdaConvQkvBwd part[3], int64_t B, int64_t T,
                          int64_t HK, int64_t HVV, int64_t W, int64_t K) {
    KDA_CUDA_REQUIRE(ctx, part != NULL);
    ConvQkvArgs a;
    if (!conv_qkv_bwd_plan(&a, part, B, T, HK, HVV, W, K, true))
        return kda_cuda_conv_qkv_bwd_separate(ctx, part, B, T, HK, HVV, W, K);
    // dw partials: job i's [gy_i, C_i, W] double, back to back in the scratch buffer
    int64_t np = 0;
    for (int i = 0; i < 3; i++)
        np += (int64_t)a.j[i].gy * a.j[i].C * W;
    double *ws = (double *)kda_cuda_scratch(ctx, (size_t)np * sizeof(double));
    if (!ws) return -1;
    ConvQkvFin f;
    int64_t off = 0;
    int fstart = 0;
    for (int i = 0; i < 3; i++) {
        a.j[i].part = ws + off;
        f.out[i] = part[i].dw, f.part[i] = ws + off, f.P[i] = a.j[i].gy;
        f.ncols[i] = (int64_t)a.j[i].C * W, f.start[i] = fstart;
        fstart += (int)CEIL_DIV(f.ncols[i], (int64_t)32);
        off += (int64_t)a.j[i].gy * a.j[i].C * W;
    }
    unsigned nb = (unsigned)conv_qkv_blocks(a);
#define CONV_QKV_BWD(W_, K_)                                                                       \
    conv_qkv_bwd_k<W_, K_ / 4><<<nb, dim3(32, CONV_BT), 0, ctx->stream>>>(a)
#define CONV_QKV_BWDF(W_, K_)                                                                      \
    conv_qkv_bwd_k<W_, K_ / 4, true><<<nb, dim3(32, CONV_BT), 0, ctx->stream>>>(a)
#define CONV_QKV_BWD_K(W_)  CONV_DISPATCH_K(K, W_, CONV_QKV_BWD)
#define CONV_QKV_BWDF_K(W_) CONV_DISPATCH_K(K, W_, CONV_QKV_BWDF)
    if (conv_fx_(W)) {
        CONV_DISPATCH_W4(W, CONV_QKV_BWDF_K);
    } else {
        CONV_DISPATCH_W4(W, CONV_QKV_BWD_K);
    }
#undef CONV_QKV_BWDF_K
#undef CONV_QKV_BWD_K
#undef CONV_QKV_BWDF
#undef CONV_QKV_BWD
    CUDA_CHECK_LAUNCH(ctx);
    conv_qkv_finish_k<<<(unsigned)fstart, dim3(32, FIN_SEG), 0, ctx->stream>>>(f);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

// ---- the q|k|v launchers' host twins (tests: test_fuse_host.c) ----------------------------------
// Each emulates one block (bx, by) of a conv launch: its CONV_BT warps' tiles, their lanes in
// order, a head's lg lanes together (the L2 group sum: group_sum_host, the butterfly's tree).

// Forward block: tiles of tt tokens, vec channels a lane (vec = 4: the v2 kernels), L2 heads of
// lg lanes (l2 false: one lane at a time).
static void conv_fwd_block_host(const ConvQkvJob &j, int B, int T, int W, float eps, bool l2,
                                int vec, int tt, int lg, int bx, int by) {
    const int C = j.C, ncg = C / vec, ntile = (T + tt - 1) / tt, K = l2 ? lg * vec : 1, H = C / K;
    float out[32][4] = {{0}}, part[32] = {0}; // zeroed: gcc 13 maybe-uninitialized
    for (int ty = 0; ty < CONV_BT; ty++) {
        int q = by * CONV_BT + ty, b = q / ntile;
        if (b >= B) continue;
        int t0 = (q - b * ntile) * tt, t1 = t0 + tt < T ? t0 + tt : T;
        const int64_t row0 = (int64_t)b * T;
        for (int t = t0; t < t1; t++)
            for (int g0 = 0; g0 < 32 && bx * 32 + g0 < ncg; g0 += lg) { // a head's lanes
                for (int s = 0; s < lg; s++) {
                    int ch0 = (bx * 32 + g0 + s) * vec;
                    for (int v = 0; v < vec; v++) {
                        float acc = 0.0f;
                        for (int i = 0; i < W; i++) {
                            int tau = t - (W - 1) + i;
                            acc += j.w[(ch0 + v) * W + i] *
                                   (tau >= 0 ? bf2f(j.p[(row0 + tau) * C + ch0 + v]) : 0.0f);
                        }
                        out[s][v] = silu_f(acc);
                    }
                    if (l2) part[s] = sumsq_lane<4>(out[s]);
                }
                float rs = l2 ? l2_rs(group_sum_host(part, lg), eps) : 1.0f;
                for (int s = 0; s < lg; s++) {
                    int ch0 = (bx * 32 + g0 + s) * vec;
                    for (int v = 0; v < vec; v++)
                        j.out[(row0 + t) * C + ch0 + v] = f2bf(l2 ? out[s][v] * rs : out[s][v]);
                }
                if (l2) j.rstd[(row0 + t) * H + (bx * 32 + g0) * vec / K] = rs;
            }
    }
}

// Backward block: block rows by, by + gy, ... (gy = j.gy), tiles of tt tokens, vec channels a
// lane, L2 heads of lg lanes; dp rows at stride j.ldo; the block's dw partial row by of j.part.
static void conv_bwd_block_host(const ConvQkvJob &j, int B, int T, int W, bool l2, int vec, int tt,
                                int lg, int bx, int by) {
    const int C = j.C, ncg = C / vec, ntile = (T + tt - 1) / tt, K = l2 ? lg * vec : 1, H = C / K;
    const int nrows = (B * ntile + CONV_BT - 1) / CONV_BT, NS = tt + W - 1;
    // per thread (ty, lane) fp32 dw sums, as the kernel's acc registers
    float(*acc)[32][CONV_MAX_W][4] = (float(*)[32][CONV_MAX_W][4])kda_calloc(CONV_BT, sizeof *acc);
    float pw[32][CONV_MAX_W][4], dcw[32][CONV_MAX_W][4];
    float c[32][4] = {{0}}, g[32][4] = {{0}}, yh[32][4] = {{0}}, dc[32][4] = {{0}}, part[32] = {0};
    for (int row = by; row < nrows; row += j.gy)
        for (int ty = 0; ty < CONV_BT; ty++) {
            int q = row * CONV_BT + ty, b = q / ntile;
            if (b >= B) continue;
            int t0 = (q - b * ntile) * tt, t1 = t0 + tt < T ? t0 + tt : T;
            const int64_t row0 = (int64_t)b * T;
            for (int g0 = 0; g0 < 32 && bx * 32 + g0 < ncg; g0 += lg) { // a head's lanes
                auto ch0 = [&](int s) { return (bx * 32 + g0 + s) * vec; };
                for (int s = 0; s < lg; s++)
                    for (int i = 0; i < W; i++)
                        for (int v = 0; v < vec; v++) {
                            int tau = t0 - (W - 1) + i;
                            pw[s][i][v] = i < W - 1 && tau >= 0
                                              ? bf2f(j.p[(row0 + tau) * C + ch0(s) + v])
                                              : 0.0f;
                            dcw[s][i][v] = 0.0f;
                        }
                for (int st = 0; st < NS; st++) {
                    int t = t0 + st;
                    if (t - (W - 1) >= t1) break;
                    if (t < T) {
                        float rs = l2 ? j.rstd_in[(row0 + t) * H + ch0(0) / K] : 0.0f;
                        for (int s = 0; s < lg; s++) {
                            for (int v = 0; v < vec; v++) {
                                int64_t e = (row0 + t) * C + ch0(s) + v;
                                pw[s][W - 1][v] = bf2f(j.p[e]);
                                g[s][v] = l2 ? j.dq[e] : bf2f(j.dy[e]);
                                c[s][v] = 0.0f;
                                for (int i = 0; i < W; i++)
                                    c[s][v] += j.w[(ch0(s) + v) * W + i] * pw[s][i][v];
                            }
                            if (l2) part[s] = l2_bwd_dot_lane<4>(yh[s], g[s], c[s], rs);
                        }
                        float dot = l2 ? group_sum_host(part, lg) : 0.0f;
                        for (int s = 0; s < lg; s++)
                            for (int v = 0; v < vec; v++) {
                                if (l2) g[s][v] = rs * (g[s][v] - dot * yh[s][v]);
                                dc[s][v] = g[s][v] * dsilu_f(c[s][v]);
                            }
                    } else {
                        for (int s = 0; s < lg; s++)
                            for (int v = 0; v < vec; v++)
                                dc[s][v] = 0.0f;
                    }
                    int tau = t - (W - 1);
                    for (int s = 0; s < lg; s++) {
                        for (int v = 0; v < vec; v++)
                            dcw[s][W - 1][v] = dc[s][v];
                        if (t < t1)
                            for (int i = 0; i < W; i++)
                                for (int v = 0; v < vec; v++)
                                    acc[ty][g0 + s][i][v] += dc[s][v] * pw[s][i][v];
                        if (tau >= t0)
                            for (int v = 0; v < vec; v++) {
                                float a = 0.0f;
                                for (int i = 0; i < W; i++)
                                    a += j.w[(ch0(s) + v) * W + i] * dcw[s][W - 1 - i][v];
                                j.out[(row0 + tau) * j.ldo + ch0(s) + v] = f2bf(a);
                            }
                        for (int i = 0; i < W - 1; i++)
                            for (int v = 0; v < vec; v++) {
                                pw[s][i][v] = pw[s][i + 1][v];
                                dcw[s][i][v] = dcw[s][i + 1][v];
                            }
                    }
                }
            }
        }
    // the block's sums over its CONV_BT tiles in double, in increasing ty
    for (int i = 0; i < W; i++)
        for (int k = 0; k < 32 * vec; k++) {
            int ch = bx * 32 * vec + k;
            if (ch >= C) continue;
            double s = 0.0;
            for (int y = 0; y < CONV_BT; y++)
                s += (double)acc[y][k / vec][i][k % vec];
            j.part[((int64_t)by * C + ch) * W + i] = s;
        }
    free(acc);
}

// colsum_finish's order on the host: per column FIN_SEG strided sums in increasing p, then those
// in increasing segment, in double; out += the float of it.
static void colsum_finish_host(float *out, const double *part, int64_t P, int64_t ncols) {
    for (int64_t c = 0; c < ncols; c++) {
        double t = 0.0;
        for (int k = 0; k < FIN_SEG; k++) {
            double s = 0.0;
            for (int64_t p = k; p < P; p += FIN_SEG)
                s += part[p * ncols + c];
            t += s;
        }
        out[c] += (float)t;
    }
}

void kda_cuda_conv_qkv_fwd_host(const KdaConvQkvFwd part[3], int64_t B, int64_t T, int64_t HK,
                                int64_t HVV, int64_t W, int64_t K, float eps, int one) {
    ConvQkvArgs a;
    if (!conv_qkv_fwd_plan(&a, part, B, T, HK, HVV, W, K, eps, false)) return; // B·T = 0
    auto run = [&](int jn, int loc) { // q, k: v2 fused (K / 4 lanes a head); v: v2 plain
        const ConvQkvJob &j = a.j[jn];
        conv_fwd_block_host(j, a.B, a.T, (int)W, eps, jn < 2, 4, CONV2_TT_FWD,
                            jn < 2 ? (int)K / 4 : 1, loc % j.gx, loc / j.gx);
    };
    conv_qkv_each_block_host(a, one, run);
}

void kda_cuda_conv_qkv_bwd_host(const KdaConvQkvBwd part[3], int64_t B, int64_t T, int64_t HK,
                                int64_t HVV, int64_t W, int64_t K, int one) {
    ConvQkvArgs a;
    if (!conv_qkv_bwd_plan(&a, part, B, T, HK, HVV, W, K, false)) return; // B·T = 0
    for (int i = 0; i < 3; i++)
        a.j[i].part =
            (double *)kda_calloc((size_t)a.j[i].gy * (size_t)a.j[i].C * (size_t)W, sizeof(double));
    auto run = [&](int jn, int loc) { // q, k: v1 fused (K / 4 lanes a head, tiles of 32); v: v2
        const ConvQkvJob &j = a.j[jn];
        if (jn < 2)
            conv_bwd_block_host(j, a.B, a.T, (int)W, true, 4, CONV_TT_BWD, (int)K / 4, loc % j.gx,
                                loc / j.gx);
        else
            conv_bwd_block_host(j, a.B, a.T, (int)W, false, 2, CONV2_TT_BWD, 1, loc % j.gx,
                                loc / j.gx);
    };
    conv_qkv_each_block_host(a, one, run);
    for (int i = 0; i < 3; i++) {
        colsum_finish_host(part[i].dw, a.j[i].part, a.j[i].gy, (int64_t)a.j[i].C * W);
        free(a.j[i].part);
    }
}

} // extern "C"
