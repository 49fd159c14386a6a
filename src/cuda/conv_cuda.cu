// conv_cuda.cu - the causal depthwise conv + SiLU on the GPU (see conv_cuda.h): the plain
// launchers, bf16 forward and backward and the fp32 forward. The kernels are conv_kernels.cuh's;
// the launchers fused with the L2 norm are conv_l2_cuda.cu and conv_l2_bwd_cuda.cu, the q|k|v
// launch conv_qkv_cuda.cu.
#include "cuda/conv_kernels.cuh" // defines: the conv kernels, conv_grid, conv_v2_, CONV_DISPATCH_*

extern "C" {

int kda_cuda_conv_silu_fwd(KdaCudaCtx *ctx, kda_bf16 *y, const kda_bf16 *p, const float *w,
                           int64_t B, int64_t T, int64_t C, int64_t W) {
    KDA_CUDA_REQUIRE(ctx, B >= 0 && T >= 0 && C > 0 && W >= 1 && W <= CONV_MAX_W);
    if (B * T == 0) return 0;
    KDA_CUDA_REQUIRE(ctx, conv_i32_ok(B, T, C));
    // 16-byte path when every row of channels splits into whole, aligned 8-element groups.
    if (conv_v2_(CONV_K_FWD) && C % 4 == 0 && aligned_(8, y, p)) {
        dim3 g2 = conv_grid(B, T, C, 4, CONV2_TT_FWD), b2(32, CONV_BT);
        KDA_CUDA_REQUIRE(ctx, g2.y > 0); // B·T up to 4.2M tokens
#define CONV_FWD2_(W_, FX_)                                                                        \
    conv_fwd_k<W_, 4, false, true, kda_bf16, CONV2_TT_FWD,                                         \
               FX_ ? CONV2_MINB_FWD_FX : CONV2_MINB_FWD, 1, FX_>                                   \
        <<<g2, b2, 0, ctx->stream>>>(y, NULL, p, w, B, T, C, 0.0f)
#define CONV_FWD2(W_)  CONV_FWD2_(W_, false)
#define CONV_FWD2F(W_) CONV_FWD2_(W_, true)
        if (conv_fx_(W)) {
            CONV_DISPATCH_WFX(W, CONV_FWD2F);
        } else {
            CONV_DISPATCH_W(W, CONV_FWD2);
        }
#undef CONV_FWD2F
#undef CONV_FWD2
#undef CONV_FWD2_
        CUDA_CHECK_LAUNCH(ctx);
        return 0;
    }
    bool v8 = C % 8 == 0 && aligned_(16, y, p), pf = conv_pf_();
    dim3 grid = conv_grid(B, T, C, v8 ? 8 : 1, CONV_TT_F(pf)), block(32, CONV_BT);
    KDA_CUDA_REQUIRE(ctx, grid.y > 0); // B·T up to 4.2M tokens (forward) / 16.7M (backward)
#define CONV_FWD_PF(W_, PF_)                                                                       \
    if (v8)                                                                                        \
        conv_fwd_k<W_, 8, false, PF_>                                                              \
            <<<grid, block, 0, ctx->stream>>>(y, NULL, p, w, B, T, C, 0.0f);                       \
    else                                                                                           \
        conv_fwd_k<W_, 1, false, PF_><<<grid, block, 0, ctx->stream>>>(y, NULL, p, w, B, T, C, 0.0f)
#define CONV_FWD(W_)                                                                               \
    if (pf) {                                                                                      \
        CONV_FWD_PF(W_, true);                                                                     \
    } else {                                                                                       \
        CONV_FWD_PF(W_, false);                                                                    \
    }
    CONV_DISPATCH_W(W, CONV_FWD);
#undef CONV_FWD
#undef CONV_FWD_PF
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

int kda_cuda_conv_silu_bwd(KdaCudaCtx *ctx, kda_bf16 *dp, float *dw, const kda_bf16 *dy,
                           const kda_bf16 *p, const float *w, int64_t B, int64_t T, int64_t C,
                           int64_t W) {
    return kda_cuda_conv_silu_bwd_ld(ctx, dp, C, dw, dy, p, w, B, T, C, W);
}

int kda_cuda_conv_silu_bwd_ld(KdaCudaCtx *ctx, kda_bf16 *dp, int64_t ldo, float *dw,
                              const kda_bf16 *dy, const kda_bf16 *p, const float *w, int64_t B,
                              int64_t T, int64_t C, int64_t W) {
    KDA_CUDA_REQUIRE(ctx, B >= 0 && T >= 0 && C > 0 && W >= 1 && W <= CONV_MAX_W && ldo >= C);
    if (B * T == 0) return 0;
    KDA_CUDA_REQUIRE(ctx, conv_i32_ok(B, T, ldo));
    if (conv_v2_(CONV_K_BWD) && C % 2 == 0 && ldo % 2 == 0 && aligned_(4, dp, dy, p)) {
        dim3 g2 = conv2_bwd_grid(B, T, C), b2(32, CONV_BT);
#define CONV_BWD2_(W_, FX_)                                                                        \
    conv_bwd_k<W_, 2, false, true, CONV2_TT_BWD, CONV2_TT_BWD + W_ - 1, CONV2_MINB_BWD, 1, FX_>    \
        <<<g2, b2, 0, ctx->stream>>>(dp, part, dy, p, w, NULL, NULL, B, T, C, ldo)
#define CONV_BWD2(W_)  CONV_BWD2_(W_, false)
#define CONV_BWD2F(W_) CONV_BWD2_(W_, true)
        bool fx = conv_fx_(W);
        // dw partials: one per block
        return conv_dw_finish(ctx, dw, g2.y, C, W, [&](double *part) {
            if (fx) {
                CONV_DISPATCH_WFX(W, CONV_BWD2F);
            } else {
                CONV_DISPATCH_W(W, CONV_BWD2);
            }
        });
#undef CONV_BWD2F
#undef CONV_BWD2
#undef CONV_BWD2_
    }
    // 8-byte groups of 4 channels: the backward holds 4 W-long windows per channel (weights,
    // p, dc, dw sums), so 8 channels per thread would cost ~2x the registers for W = 4.
    bool v4 = C % 4 == 0 && ldo % 4 == 0 && aligned_(8, dp, dy, p);
    dim3 grid = conv_grid(B, T, C, v4 ? 4 : 1, CONV_TT_BWD), block(32, CONV_BT);
    KDA_CUDA_REQUIRE(ctx, grid.y > 0); // B·T up to 4.2M tokens (forward) / 16.7M (backward)
    bool pf = conv_pf_();
#define CONV_BWD_PF(W_, PF_)                                                                       \
    if (v4)                                                                                        \
        conv_bwd_k<W_, 4, false, PF_>                                                              \
            <<<grid, block, 0, ctx->stream>>>(dp, part, dy, p, w, NULL, NULL, B, T, C, ldo);       \
    else                                                                                           \
        conv_bwd_k<W_, 1, false, PF_>                                                              \
            <<<grid, block, 0, ctx->stream>>>(dp, part, dy, p, w, NULL, NULL, B, T, C, ldo)
#define CONV_BWD(W_)                                                                               \
    if (pf) {                                                                                      \
        CONV_BWD_PF(W_, true);                                                                     \
    } else {                                                                                       \
        CONV_BWD_PF(W_, false);                                                                    \
    }
    // dw partials: one per block row
    return conv_dw_finish(ctx, dw, grid.y, C, W,
                          [&](double *part) { CONV_DISPATCH_W(W, CONV_BWD); });
#undef CONV_BWD
#undef CONV_BWD_PF
}

int kda_cuda_conv_silu_fwd_f32(KdaCudaCtx *ctx, float *y, const float *p, const float *w, int64_t B,
                               int64_t T, int64_t C, int64_t W) {
    KDA_CUDA_REQUIRE(ctx, B >= 0 && T >= 0 && C > 0 && W >= 1 && W <= CONV_MAX_W);
    if (B * T == 0) return 0;
    KDA_CUDA_REQUIRE(ctx, conv_i32_ok(B, T, C));
    bool v4 = C % 4 == 0 && aligned_(16, y, p); // float4 groups of 4 channels
    dim3 grid = conv_grid(B, T, C, v4 ? 4 : 1, CONV_TT_FWD), block(32, CONV_BT);
    KDA_CUDA_REQUIRE(ctx, grid.y > 0);
#define CONV_FWD(W_)                                                                               \
    if (v4)                                                                                        \
        conv_fwd_k<W_, 4, false, true>                                                             \
            <<<grid, block, 0, ctx->stream>>>(y, NULL, p, w, B, T, C, 0.0f);                       \
    else                                                                                           \
        conv_fwd_k<W_, 1, false, true>                                                             \
            <<<grid, block, 0, ctx->stream>>>(y, NULL, p, w, B, T, C, 0.0f)
    CONV_DISPATCH_W(W, CONV_FWD);
#undef CONV_FWD
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

} // extern "C"
