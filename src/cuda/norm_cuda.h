// norm_cuda.h - the GPU twins of cpu/norm.h: RMSNorm (+ fused residual add), gated RMSNorm, and
// the gated RMSNorm with the g_proj.1 bias folded in (kda-model.md §5.2, §5.3 step 11), with the
// fp32 forwards of the scoring path and the host twins of the fused kernels.
// Dtypes follow the bf16 training flow of kda-model.md §8: the residual stream, norms'
// statistics, β, the gate and its cumsum, parameter gradients are fp32; tensors that are GEMM
// operands (norm outputs, projections, their gradients) are bf16. All math is fp32 (reductions
// over rows or tokens in double where the CPU twin uses double).
// Gradient contract (as cpu/norm.h): parameter gradients (dw, dbias) ACCUMULATE; activation
// gradients OVERWRITE, except rmsnorm_bwd's dx when accumulate = 1.
// Determinism: every reduction runs in a fixed order that depends only on the shapes (row tiles
// of fixed size, then an ordered sum over tiles): the same inputs give the same bits, on any GPU.
// Every function returns 0, or -1 with the reason in ctx->err; work is queued on ctx->stream.
// Launchers that need scratch use ctx's scratch buffer (kda_cuda_scratch).
#ifndef KDA_CUDA_NORM_H
#define KDA_CUDA_NORM_H

#include "cuda/cuda_common.h" // defines: KdaCudaCtx, kda_bf16

#ifdef KDA_HAVE_CUDA
#ifdef __cplusplus
extern "C" {
#endif

// ---- RMSNorm (§5.2): y = x · (mean(x²) + eps)^-1/2 ⊙ w ------------------------------------
// x [N, D] fp32 (residual stream); w [D] fp32; y [N, D] bf16; rstd [N] fp32.
int kda_cuda_rmsnorm_fwd(KdaCudaCtx *ctx, kda_bf16 *y, float *rstd, const float *x, const float *w,
                         int64_t N, int64_t D, float eps);
// Fused pre-norm with residual: residual [N, D] fp32 += a [N, D] bf16 (the sublayer output,
// added in fp32), then y = RMSNorm(residual) as above.
int kda_cuda_rmsnorm_residual_fwd(KdaCudaCtx *ctx, kda_bf16 *y, float *rstd, float *residual,
                                  const kda_bf16 *a, const float *w, int64_t N, int64_t D,
                                  float eps);
// dy [N, D] fp32 (sum of the dX GEMMs); dx [N, D] fp32 (+)= ; dw [D] fp32 +=.
int kda_cuda_rmsnorm_bwd(KdaCudaCtx *ctx, float *dx, float *dw, const float *dy, const float *x,
                         const float *w, const float *rstd, int64_t N, int64_t D, int accumulate);

// Same, also writing dxb [N, D] bf16 = bf16(dx) (the written dx, after the accumulate): the
// next GEMM's operand without a separate fp32 -> bf16 pass over dx. dxb NULL: as above.
int kda_cuda_rmsnorm_bwd_bf16(KdaCudaCtx *ctx, float *dx, kda_bf16 *dxb, float *dw, const float *dy,
                              const float *x, const float *w, const float *rstd, int64_t N,
                              int64_t D, int accumulate);

// fp32 forward twin (the scoring path, --precision fp32, model/model_cuda_f32.h); shapes as
// kda_cuda_rmsnorm_fwd, all tensors fp32 (the kernels are templates on the storage type).
int kda_cuda_rmsnorm_fwd_f32(KdaCudaCtx *ctx, float *y, float *rstd, const float *x, const float *w,
                             int64_t N, int64_t D, float eps);

// ---- gated RMSNorm (§5.3 step 11): y = RMSNorm(x; w) ⊙ σ(z), one row per value head ------
// x = o [N, V] bf16, z [N, V] bf16, w [V] fp32 -> y [N, V] bf16, rstd [N] fp32.
int kda_cuda_gnorm_fwd(KdaCudaCtx *ctx, kda_bf16 *y, float *rstd, const kda_bf16 *x,
                       const kda_bf16 *z, const float *w, int64_t N, int64_t V, float eps);
// dy [N, V] bf16 -> dx, dz [N, V] bf16 (overwritten), dw [V] fp32 +=.
int kda_cuda_gnorm_bwd(KdaCudaCtx *ctx, kda_bf16 *dx, kda_bf16 *dz, float *dw, const kda_bf16 *dy,
                       const kda_bf16 *x, const kda_bf16 *z, const float *w, const float *rstd,
                       int64_t N, int64_t V);

// fp32 forward twin (scoring path): shapes as kda_cuda_gnorm_fwd, all tensors fp32.
int kda_cuda_gnorm_fwd_f32(KdaCudaCtx *ctx, float *y, float *rstd, const float *x, const float *z,
                           const float *w, int64_t N, int64_t V, float eps);

// ---- gated RMSNorm with the g_proj.1 bias folded in (the fused path) ------------------------
// True when value head dim V takes the fused kernels (V = 8, 16, ..., 256).
int kda_cuda_gnorm_fusable(int64_t V);
// x = o [N, HV, V] bf16, z [N, HV, V] bf16 the raw g_proj.1 output (no bias), bias [HV·V] fp32,
// w [V] fp32 -> y [N, HV, V] bf16 = RMSNorm(x; w) ⊙ σ(z + bias) (fp32 z + bias: no bf16
// rounding of it), rstd [N·HV] fp32. All pointers 16-byte aligned. Replaces bias_add + gnorm_fwd.
int kda_cuda_gnorm_bias_fwd(KdaCudaCtx *ctx, kda_bf16 *y, float *rstd, const kda_bf16 *x,
                            const kda_bf16 *z, const float *bias, const float *w, int64_t N,
                            int64_t HV, int64_t V, float eps);
// dy [N, HV, V] bf16 -> dx, dz [N, HV, V] bf16 (overwritten; dz = the gradient w.r.t. z + bias),
// dw [V] fp32 +=, dbias [HV·V] fp32 += Σ_tokens dz (the bf16 dz, as bias_bwd). One pass computes
// dx, dz and the dw tile sums (deterministic), then the dbias column sum reads dz.
int kda_cuda_gnorm_bias_bwd(KdaCudaCtx *ctx, kda_bf16 *dx, kda_bf16 *dz, float *dw, float *dbias,
                            const kda_bf16 *dy, const kda_bf16 *x, const kda_bf16 *z,
                            const float *bias, const float *w, const float *rstd, int64_t N,
                            int64_t HV, int64_t V);

// ---- host twins of the fused kernels (CPU suite of a CUDA build: test_fuse_host.c) ------------
// Same arguments as the launchers above with host pointers; the same per-lane arithmetic and
// group-sum order; weight gradients summed per column in double (the device: fixed tiles).
void kda_cuda_gnorm_bias_fwd_host(kda_bf16 *y, float *rstd, const kda_bf16 *x, const kda_bf16 *z,
                                  const float *bias, const float *w, int64_t N, int64_t HV,
                                  int64_t V, float eps);
void kda_cuda_gnorm_bias_bwd_host(kda_bf16 *dx, kda_bf16 *dz, float *dw, float *dbias,
                                  const kda_bf16 *dy, const kda_bf16 *x, const kda_bf16 *z,
                                  const float *bias, const float *w, const float *rstd, int64_t N,
                                  int64_t HV, int64_t V);

#ifdef __cplusplus
}
#endif
#endif // KDA_HAVE_CUDA
#endif
