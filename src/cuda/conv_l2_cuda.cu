// conv_l2_cuda.cu - conv + SiLU fused with the per-head L2 norm of q and k, forward (see
// conv_cuda.h): which head sizes fuse, the forward launcher, and the host twins of the fused
// kernels (forward and backward; tests: test_fuse_host.c). Kernels: conv_kernels.cuh.
#include "cuda/conv_kernels.cuh" // defines: the conv kernels, conv_grid, conv_v2_, CONV_DISPATCH_*

extern "C" {

int kda_cuda_conv_l2_fusable(int64_t K) {
    return K == 8 || K == 16 || K == 32 || K == 64 || K == 128; // K/8 and K/4 lanes: 1..32
}

int kda_cuda_conv_silu_l2_fwd(KdaCudaCtx *ctx, kda_bf16 *y, float *rstd, const kda_bf16 *p,
                              const float *w, int64_t B, int64_t T, int64_t C, int64_t W, int64_t K,
                              float eps) {
    KDA_CUDA_REQUIRE(ctx, B >= 0 && T >= 0 && C > 0 && W >= 1 && W <= CONV_MAX_W);
    KDA_CUDA_REQUIRE(ctx, kda_cuda_conv_l2_fusable(K) && C % K == 0);
    KDA_CUDA_REQUIRE(ctx, aligned_(16, y, p)); // the 16-byte path: a head is K / 8 lanes
    if (B * T == 0) return 0;
    KDA_CUDA_REQUIRE(ctx, conv_i32_ok(B, T, C));
    if (conv_v2_(CONV_K_L2_FWD)) { // K / 4 lanes a head (K <= 128: at most a warp)
        dim3 g2 = conv_grid(B, T, C, 4, CONV2_TT_FWD), b2(32, CONV_BT);
        KDA_CUDA_REQUIRE(ctx, g2.y > 0);
#define CONV_L2_FWD2_(W_, K_, FX_)                                                                 \
    conv_fwd_k<W_, 4, true, true, kda_bf16, CONV2_TT_FWD, CONV2_MINB_FWD, K_ / 4, FX_>             \
        <<<g2, b2, 0, ctx->stream>>>(y, rstd, p, w, B, T, C, eps)
#define CONV_L2_FWD2(W_, K_)  CONV_L2_FWD2_(W_, K_, false)
#define CONV_L2_FWD2F(W_, K_) CONV_L2_FWD2_(W_, K_, true)
#define CONV_L2_FWD2_K(W_)    CONV_DISPATCH_K(K, W_, CONV_L2_FWD2)
#define CONV_L2_FWD2F_K(W_)   CONV_DISPATCH_K(K, W_, CONV_L2_FWD2F)
        if (conv_fx_(W)) {
            CONV_DISPATCH_WFX(W, CONV_L2_FWD2F_K);
        } else {
            CONV_DISPATCH_W(W, CONV_L2_FWD2_K);
        }
#undef CONV_L2_FWD2F_K
#undef CONV_L2_FWD2_K
#undef CONV_L2_FWD2F
#undef CONV_L2_FWD2
#undef CONV_L2_FWD2_
        CUDA_CHECK_LAUNCH(ctx);
        return 0;
    }
    bool pf = conv_pf_();
    dim3 grid = conv_grid(B, T, C, 8, CONV_TT_F(pf)), block(32, CONV_BT);
    KDA_CUDA_REQUIRE(ctx, grid.y > 0);
#define CONV_L2_FWD(W_, K_)                                                                        \
    if (pf)                                                                                        \
        conv_fwd_k<W_, 8, true, true, kda_bf16, 0, 1, K_ / 8>                                      \
            <<<grid, block, 0, ctx->stream>>>(y, rstd, p, w, B, T, C, eps);                        \
    else                                                                                           \
        conv_fwd_k<W_, 8, true, false, kda_bf16, 0, 1, K_ / 8>                                     \
            <<<grid, block, 0, ctx->stream>>>(y, rstd, p, w, B, T, C, eps)
#define CONV_L2_FWD_K(W_) CONV_DISPATCH_K(K, W_, CONV_L2_FWD)
    CONV_DISPATCH_W(W, CONV_L2_FWD_K);
#undef CONV_L2_FWD_K
#undef CONV_L2_FWD
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

// ---- host twins of the fused kernels (tests: test_fuse_host.c) ---------------------------------
// Same per-lane arithmetic (the __host__ __device__ pieces above) and the same group-sum tree;
// the loops run every lane of every row one after another. The weight-gradient sums are added in
// double per column (the device adds fixed tiles in fp32, then double: a different order).

void kda_cuda_conv_silu_l2_fwd_host(kda_bf16 *y, float *rstd, const kda_bf16 *p, const float *w,
                                    int64_t B, int64_t T, int64_t C, int64_t W, int64_t K,
                                    float eps) {
    int lg = (int)(K / 8);
    int64_t H = C / K;
    float out[32][8] = {{0}}, part[32] = {0}; // zeroed: gcc 13 maybe-uninitialized
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < H; h++) {
                for (int s = 0; s < lg; s++) {
                    for (int v = 0; v < 8; v++) {
                        int64_t ch = h * K + 8 * s + v;
                        float acc = 0.0f;
                        for (int64_t i = 0; i < W; i++) {
                            int64_t tau = t - (W - 1) + i;
                            acc +=
                                w[ch * W + i] * (tau >= 0 ? bf2f(p[(b * T + tau) * C + ch]) : 0.0f);
                        }
                        out[s][v] = silu_f(acc);
                    }
                    part[s] = sumsq_lane<8>(out[s]);
                }
                float rs = l2_rs(group_sum_host(part, lg), eps);
                for (int s = 0; s < lg; s++)
                    for (int v = 0; v < 8; v++)
                        y[(b * T + t) * C + h * K + 8 * s + v] = f2bf(out[s][v] * rs);
                rstd[(b * T + t) * H + h] = rs;
            }
}

void kda_cuda_conv_silu_l2_bwd_host(kda_bf16 *dp, float *dw, const float *dy, const kda_bf16 *p,
                                    const float *w, const float *rstd, int64_t B, int64_t T,
                                    int64_t C, int64_t W, int64_t K) {
    int lg = (int)(K / 4);
    int64_t H = C / K, n = B * T * C;
    float *dc = (float *)kda_malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    double *dws = (double *)kda_calloc((size_t)(C * W), sizeof(double));
    auto pv = [&](int64_t b, int64_t tau, int64_t ch) {
        return tau >= 0 && tau < T ? bf2f(p[(b * T + tau) * C + ch]) : 0.0f;
    };
    float c[32][4] = {{0}}, g[32][4] = {{0}}, yh[32][4] = {{0}}, part[32] = {0}; // as above
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < H; h++) {
                int64_t row = (b * T + t) * C;
                float rs = rstd[(b * T + t) * H + h];
                for (int s = 0; s < lg; s++) {
                    for (int v = 0; v < 4; v++) {
                        int64_t ch = h * K + 4 * s + v;
                        c[s][v] = 0.0f;
                        for (int64_t i = 0; i < W; i++)
                            c[s][v] += w[ch * W + i] * pv(b, t - (W - 1) + i, ch);
                        g[s][v] = dy[row + ch];
                    }
                    part[s] = l2_bwd_dot_lane<4>(yh[s], g[s], c[s], rs);
                }
                float dot = group_sum_host(part, lg);
                for (int s = 0; s < lg; s++)
                    for (int v = 0; v < 4; v++)
                        dc[row + h * K + 4 * s + v] =
                            rs * (g[s][v] - dot * yh[s][v]) * dsilu_f(c[s][v]);
            }
    for (int64_t b = 0; b < B; b++)
        for (int64_t tau = 0; tau < T; tau++)
            for (int64_t ch = 0; ch < C; ch++) {
                float a = 0.0f; // dp_τ = Σ_i w_i dc_{τ+(W-1)-i}, i increasing (as the device)
                for (int64_t i = 0; i < W; i++) {
                    int64_t t = tau + (W - 1) - i;
                    a += w[ch * W + i] * (t < T ? dc[(b * T + t) * C + ch] : 0.0f);
                }
                dp[(b * T + tau) * C + ch] = f2bf(a);
                for (int64_t i = 0; i < W; i++) // dw_i += dc_τ p_{τ-(W-1)+i}
                    dws[ch * W + i] +=
                        (double)(dc[(b * T + tau) * C + ch] * pv(b, tau - (W - 1) + i, ch));
            }
    for (int64_t e = 0; e < C * W; e++)
        dw[e] += (float)dws[e];
    free(dc);
    free(dws);
}

} // extern "C"
