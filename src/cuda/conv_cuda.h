// conv_cuda.h - the GPU twins of cpu/conv.h's causal depthwise conv + SiLU (kda-model.md §5.3
// step 2), plain and fused with the per-head L2 norm of q and k (§5.3 step 6), a layer's q, k and
// v convs in one launch, the fp32 forward of the scoring path and the host twins of the fused and
// the q|k|v kernels.
// Dtypes follow the bf16 training flow of kda-model.md §8: the residual stream, norms'
// statistics, β, the gate and its cumsum, parameter gradients are fp32; tensors that are GEMM
// operands (norm outputs, projections, their gradients) are bf16. All math is fp32 (reductions
// over rows or tokens in double where the CPU twin uses double).
// Gradient contract (as cpu/conv.h): the weight gradient dw ACCUMULATES; dp is OVERWRITTEN.
// Determinism: every reduction runs in a fixed order that depends only on the shapes (row tiles
// of fixed size, then an ordered sum over tiles): the same inputs give the same bits, on any GPU.
// Every function returns 0, or -1 with the reason in ctx->err; work is queued on ctx->stream.
// Launchers that need scratch use ctx's scratch buffer (kda_cuda_scratch).
#ifndef KDA_CUDA_CONV_H
#define KDA_CUDA_CONV_H

#include "cuda/cuda_common.h" // defines: KdaCudaCtx, kda_bf16

#ifdef KDA_HAVE_CUDA
#ifdef __cplusplus
extern "C" {
#endif

// ---- causal depthwise conv + SiLU (§5.3 step 2), 1 <= W <= 8 -------------------------------
// p [B, T, C] bf16; w [C, W] fp32 (tap W-1 = current token); y [B, T, C] bf16 = SiLU(conv).
// The pre-activation is not stored: the backward recomputes it from p.
int kda_cuda_conv_silu_fwd(KdaCudaCtx *ctx, kda_bf16 *y, const kda_bf16 *p, const float *w,
                           int64_t B, int64_t T, int64_t C, int64_t W);
// dy [B, T, C] bf16 -> dp [B, T, C] bf16 (overwritten), dw [C, W] fp32 +=.
int kda_cuda_conv_silu_bwd(KdaCudaCtx *ctx, kda_bf16 *dp, float *dw, const kda_bf16 *dy,
                           const kda_bf16 *p, const float *w, int64_t B, int64_t T, int64_t C,
                           int64_t W);

// The same with dp's rows at stride ldo (>= C; dp may be columns of a wider matrix, e.g. the
// fused input projection's dY buffer): dp [B, T, ldo] bf16, columns [0, C) written.
int kda_cuda_conv_silu_bwd_ld(KdaCudaCtx *ctx, kda_bf16 *dp, int64_t ldo, float *dw,
                              const kda_bf16 *dy, const kda_bf16 *p, const float *w, int64_t B,
                              int64_t T, int64_t C, int64_t W);

// fp32 forward twin (the scoring path, --precision fp32, model/model_cuda_f32.h): shapes as
// kda_cuda_conv_silu_fwd, all tensors fp32.
int kda_cuda_conv_silu_fwd_f32(KdaCudaCtx *ctx, float *y, const float *p, const float *w, int64_t B,
                               int64_t T, int64_t C, int64_t W);

// ---- fused causal conv + SiLU + per-head L2 norm (q and k; §5.3 steps 2 and 6) ---------------
// One kernel instead of conv_silu + l2norm: the conv output is neither stored nor read back.
// True when head dim K takes the fused kernels (K = 8, 16, 32, 64 or 128).
int kda_cuda_conv_l2_fusable(int64_t K);
// p [B, T, C] bf16 (C = H·K, 16-byte aligned); w [C, W] fp32 -> y [B, T, C] bf16 =
// L2norm_K(SiLU(conv(p))) and rstd [B·T·H] fp32 = 1 / sqrt(|SiLU(conv)|² + eps) per head, the
// sum of squares of the fp32 SiLU output (the unfused path normalizes its bf16 rounding).
int kda_cuda_conv_silu_l2_fwd(KdaCudaCtx *ctx, kda_bf16 *y, float *rstd, const kda_bf16 *p,
                              const float *w, int64_t B, int64_t T, int64_t C, int64_t W, int64_t K,
                              float eps);
// dy [B, T, C] fp32 (gradient w.r.t. y, 16-byte aligned) -> dp [B, T, C] bf16 (overwritten),
// dw [C, W] fp32 +=; recomputes SiLU(conv(p)) and ŷ = it · rstd from p and the forward's rstd.
int kda_cuda_conv_silu_l2_bwd(KdaCudaCtx *ctx, kda_bf16 *dp, float *dw, const float *dy,
                              const kda_bf16 *p, const float *w, const float *rstd, int64_t B,
                              int64_t T, int64_t C, int64_t W, int64_t K);
// The same with dp's rows at stride ldo (>= C, a multiple of 4): dp [B, T, ldo] bf16.
int kda_cuda_conv_silu_l2_bwd_ld(KdaCudaCtx *ctx, kda_bf16 *dp, int64_t ldo, float *dw,
                                 const float *dy, const kda_bf16 *p, const float *w,
                                 const float *rstd, int64_t B, int64_t T, int64_t C, int64_t W,
                                 int64_t K);

// ---- q, k and v of one layer in one launch (the model's KDA_CONV_QKV; its default forward) ----
// part[0] = q and part[1] = k take the fused conv + SiLU + L2 path (C = HK = H·K, head dim K),
// part[2] = v the plain conv + SiLU (C = HVV). The three convs run as one grid whose blocks are
// the separate launches' blocks (the same kernels' bodies, the default versions of conv_v2_), so
// every output is bit for bit that of kda_cuda_conv_silu_l2_fwd (q, k) + kda_cuda_conv_silu_fwd
// (v), resp. kda_cuda_conv_silu_l2_bwd_ld + kda_cuda_conv_silu_bwd_ld. Where one launch does
// not apply (W > 4; KDA_CONV_V or KDA_CONV_PREFETCH picking other kernels; the alignments below
// not met; B·T = 0) the launchers make exactly those separate calls instead, with their checks
// and errors; kda_cuda_conv_qkv_*_one says which. Checked for one launch: part != NULL (else an
// error), 1 <= W <= 4, K fusable with HK % K == 0, HVV % 4 (forward) / % 2 (backward) == 0, each
// ldo >= C and a multiple of 4 (q, k) / 2 (v), the 32-bit index and grid limits, the alignments
// below; anything else goes to the separate launchers and their checks. Not checked: that the
// parts' outputs do not overlap each other or any input (they must not). Returns 0, or -1 with
// the reason in ctx->err (never exits).
typedef struct {
    kda_bf16 *y;       // [B, T, C] bf16, overwritten (q, k, v: 16, 16, 8-byte aligned)
    float *rstd;       // q, k: [B·T·H] fp32, overwritten; v: unused (NULL)
    const kda_bf16 *p; // [B, T, C] bf16 (q, k, v: 16, 16, 8-byte aligned)
    const float *w;    // [C, W] fp32 (tap W-1 = current token)
} KdaConvQkvFwd;
typedef struct {
    kda_bf16 *dp;       // [B, T, ldo] bf16, columns [0, C) overwritten (q, k: 8-byte, v: 4-byte
                        // aligned)
    int64_t ldo;        // row stride of dp: >= C; q, k: a multiple of 4, v: of 2
    float *dw;          // [C, W] fp32, accumulated (+=)
    const float *dq;    // q, k: [B, T, C] fp32 gradient w.r.t. y, 16-byte aligned; v: NULL
    const kda_bf16 *dy; // v: [B, T, C] bf16 gradient w.r.t. y, 4-byte aligned; q, k: NULL
    const kda_bf16 *p;  // [B, T, C] bf16 (q, k: 8-byte, v: 4-byte aligned)
    const float *w;     // [C, W] fp32
    const float *rstd;  // q, k: the forward's [B·T·H] fp32; v: NULL
} KdaConvQkvBwd;
int kda_cuda_conv_qkv_fwd(KdaCudaCtx *ctx, const KdaConvQkvFwd part[3], int64_t B, int64_t T,
                          int64_t HK, int64_t HVV, int64_t W, int64_t K, float eps);
// Backward: one conv launch, then one launch of the three weight gradients' column sums.
int kda_cuda_conv_qkv_bwd(KdaCudaCtx *ctx, const KdaConvQkvBwd part[3], int64_t B, int64_t T,
                          int64_t HK, int64_t HVV, int64_t W, int64_t K);
// The separate launches the two launchers above fall back to (q and k through the fused conv +
// L2 launcher, v through the plain one): the baseline bench_gpu times the one launch against.
int kda_cuda_conv_qkv_fwd_separate(KdaCudaCtx *ctx, const KdaConvQkvFwd part[3], int64_t B,
                                   int64_t T, int64_t HK, int64_t HVV, int64_t W, int64_t K,
                                   float eps);
int kda_cuda_conv_qkv_bwd_separate(KdaCudaCtx *ctx, const KdaConvQkvBwd part[3], int64_t B,
                                   int64_t T, int64_t HK, int64_t HVV, int64_t W, int64_t K);
// 1 when the call with these arguments (and the environment now) runs as one launch, else 0.
int kda_cuda_conv_qkv_fwd_one(const KdaConvQkvFwd part[3], int64_t B, int64_t T, int64_t HK,
                              int64_t HVV, int64_t W, int64_t K);
int kda_cuda_conv_qkv_bwd_one(const KdaConvQkvBwd part[3], int64_t B, int64_t T, int64_t HK,
                              int64_t HVV, int64_t W, int64_t K);

// ---- host twins of the fused kernels (CPU suite of a CUDA build: test_fuse_host.c) ------------
// Same arguments as the launchers above with host pointers; the same per-lane arithmetic and
// group-sum order; weight gradients summed per column in double (the device: fixed tiles).
void kda_cuda_conv_silu_l2_fwd_host(kda_bf16 *y, float *rstd, const kda_bf16 *p, const float *w,
                                    int64_t B, int64_t T, int64_t C, int64_t W, int64_t K,
                                    float eps);
void kda_cuda_conv_silu_l2_bwd_host(kda_bf16 *dp, float *dw, const float *dy, const kda_bf16 *p,
                                    const float *w, const float *rstd, int64_t B, int64_t T,
                                    int64_t C, int64_t W, int64_t K);
// The q|k|v launchers' host twins, any 1 <= W <= 8 (host pointers, same arguments). They emulate
// the kernels block by block: the default versions (forward: v2 q/k + L2 and v2 v; backward: v1
// q/k + L2, v2 v), their threads' per-lane arithmetic and group-sum trees, the dw partial rows
// per block (fp32 per thread over its tiles, double over the block's tiles) and their column sums
// in colsum_finish's order. one = 1: the combined grid, every block's job decoded as the kernel
// decodes it; one = 0: the three separate launches' grids one after another. Both give the same
// bits (the test); one = 1 is what the combined kernels compute (up to the device's FMA).
void kda_cuda_conv_qkv_fwd_host(const KdaConvQkvFwd part[3], int64_t B, int64_t T, int64_t HK,
                                int64_t HVV, int64_t W, int64_t K, float eps, int one);
void kda_cuda_conv_qkv_bwd_host(const KdaConvQkvBwd part[3], int64_t B, int64_t T, int64_t HK,
                                int64_t HVV, int64_t W, int64_t K, int one);

#ifdef __cplusplus
}
#endif
#endif // KDA_HAVE_CUDA
#endif
