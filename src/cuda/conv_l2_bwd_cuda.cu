// conv_l2_bwd_cuda.cu - conv + SiLU fused with the per-head L2 norm of q and k, backward (see
// conv_cuda.h): the launchers (dY contiguous or with a row stride). Kernels: conv_kernels.cuh.
#include "cuda/conv_kernels.cuh" // defines: the conv kernels, conv_grid, conv_v2_, CONV_DISPATCH_*

extern "C" {

int kda_cuda_conv_silu_l2_bwd(KdaCudaCtx *ctx, kda_bf16 *dp, float *dw, const float *dy,
                              const kda_bf16 *p, const float *w, const float *rstd, int64_t B,
                              int64_t T, int64_t C, int64_t W, int64_t K) {
    return kda_cuda_conv_silu_l2_bwd_ld(ctx, dp, C, dw, dy, p, w, rstd, B, T, C, W, K);
}

int kda_cuda_conv_silu_l2_bwd_ld(KdaCudaCtx *ctx, kda_bf16 *dp, int64_t ldo, float *dw,
                                 const float *dy, const kda_bf16 *p, const float *w,
                                 const float *rstd, int64_t B, int64_t T, int64_t C, int64_t W,
                                 int64_t K) {
    KDA_CUDA_REQUIRE(ctx, B >= 0 && T >= 0 && C > 0 && W >= 1 && W <= CONV_MAX_W);
    KDA_CUDA_REQUIRE(ctx, kda_cuda_conv_l2_fusable(K) && C % K == 0 && ldo >= C && ldo % 4 == 0);
    KDA_CUDA_REQUIRE(ctx, aligned_(16, dy) && aligned_(8, dp, p)); // a head is K / 4 lanes
    if (B * T == 0) return 0;
    KDA_CUDA_REQUIRE(ctx, conv_i32_ok(B, T, ldo));
    if (conv_v2_(CONV_K_L2_BWD) && K <= 64) { // K / 2 lanes a head: at most a warp
        dim3 g2 = conv2_bwd_grid(B, T, C), b2(32, CONV_BT);
        // K_ = 128 never gets here; its case names K = 64's instantiation (no extra kernel)
#define CONV_L2_BWD2_(W_, K_, FX_)                                                                 \
    conv_bwd_k<W_, 2, true, true, CONV2_TT_BWD, CONV2_TT_BWD + W_ - 1, CONV2_MINB_L2,              \
               (K_ <= 64 ? K_ : 64) / 2, FX_>                                                      \
        <<<g2, b2, 0, ctx->stream>>>(dp, part, NULL, p, w, dy, rstd, B, T, C, ldo)
#define CONV_L2_BWD2(W_, K_)  CONV_L2_BWD2_(W_, K_, false)
#define CONV_L2_BWD2F(W_, K_) CONV_L2_BWD2_(W_, K_, true)
#define CONV_L2_BWD2_K(W_)    CONV_DISPATCH_K(K, W_, CONV_L2_BWD2)
#define CONV_L2_BWD2F_K(W_)   CONV_DISPATCH_K(K, W_, CONV_L2_BWD2F)
        bool fx = conv_fx_(W);
        // dw partials: one per block
        return conv_dw_finish(ctx, dw, g2.y, C, W, [&](double *part) {
            if (fx) {
                CONV_DISPATCH_WFX(W, CONV_L2_BWD2F_K);
            } else {
                CONV_DISPATCH_W(W, CONV_L2_BWD2_K);
            }
        });
#undef CONV_L2_BWD2F_K
#undef CONV_L2_BWD2_K
#undef CONV_L2_BWD2F
#undef CONV_L2_BWD2
#undef CONV_L2_BWD2_
    }
    dim3 grid = conv_grid(B, T, C, 4, CONV_TT_BWD), block(32, CONV_BT);
    KDA_CUDA_REQUIRE(ctx, grid.y > 0);
    bool pf = conv_pf_(), fx = !pf && conv_fx_(W); // the prefetching kernels: precise only
#define CONV_L2_BWD(W_, K_)                                                                        \
    if (pf)                                                                                        \
        conv_bwd_k<W_, 4, true, true, CONV_TT_BWD, CONV_PD, 1, K_ / 4>                             \
            <<<grid, block, 0, ctx->stream>>>(dp, part, NULL, p, w, dy, rstd, B, T, C, ldo);       \
    else                                                                                           \
        conv_bwd_k<W_, 4, true, false, CONV_TT_BWD, CONV_PD, 1, K_ / 4>                            \
            <<<grid, block, 0, ctx->stream>>>(dp, part, NULL, p, w, dy, rstd, B, T, C, ldo)
#define CONV_L2_BWDF(W_, K_)                                                                       \
    conv_bwd_k<W_, 4, true, false, CONV_TT_BWD, CONV_PD, 1, K_ / 4, true>                          \
        <<<grid, block, 0, ctx->stream>>>(dp, part, NULL, p, w, dy, rstd, B, T, C, ldo)
#define CONV_L2_BWD_K(W_)  CONV_DISPATCH_K(K, W_, CONV_L2_BWD)
#define CONV_L2_BWDF_K(W_) CONV_DISPATCH_K(K, W_, CONV_L2_BWDF)
    // dw partials: one per block row
    return conv_dw_finish(ctx, dw, grid.y, C, W, [&](double *part) {
        if (fx) {
            CONV_DISPATCH_WFX(W, CONV_L2_BWDF_K);
        } else {
            CONV_DISPATCH_W(W, CONV_L2_BWD_K);
        }
    });
#undef CONV_L2_BWDF_K
#undef CONV_L2_BWD_K
#undef CONV_L2_BWDF
#undef CONV_L2_BWD
}

} // extern "C"
