// optim_cuda.h - the GPU twin of model/optim.h: AdamW (torch's fused form) over fp32 master
// weights with their bf16 copy, the global gradient norm (and its ZeRO-1 partial), the clip
// coefficient and the gradient scale. Deterministic: the norm sums in a fixed order.
// Every function returns 0, or -1 with the reason in ctx->err; work is queued on ctx->stream.
// Launchers that need scratch use ctx's scratch buffer (kda_cuda_scratch).
#ifndef KDA_CUDA_OPTIM_H
#define KDA_CUDA_OPTIM_H

#include "cuda/cuda_common.h" // defines: KdaCudaCtx, kda_bf16

#ifdef KDA_HAVE_CUDA
#ifdef __cplusplus
extern "C" {
#endif

// ---- AdamW (model/optim.h's torch fused form) over fp32 master weights ---------------------
// Per-step scalars, computed on the host exactly like the CPU optimizer (double, rounded once).
typedef struct {
    float decay, b1, b2, one_m_b1, one_m_b2, step_size, bc2_sqrt, eps;
} KdaCudaAdamScalars;
// step = the update number u (1-based); weight_decay = 0 for rows that do not decay.
KdaCudaAdamScalars kda_cuda_adam_scalars(double beta1, double beta2, double eps,
                                         double weight_decay, int64_t step, double lr);
// p, g, m, v [n] fp32; p_bf16 [n] bf16 copy of the updated p for the next forward (may be NULL);
// gscale (device, [1] fp32, may be NULL) multiplies g first (the clip coefficient).
int kda_cuda_adamw(KdaCudaCtx *ctx, float *p, kda_bf16 *p_bf16, const float *g, float *m, float *v,
                   int64_t n, const KdaCudaAdamScalars *s, const float *gscale);
// The same update over runs of elements with two sets of scalars, in one launch instead of one
// per run (the model's layout alternates decayed matrices and non-decayed vectors: ~100 runs at
// 12 layers, many of them a few thousand elements): run r covers [ends[r-1], ends[r]) (ends[-1]
// = 0, ends[nruns-1] = n, increasing) and takes s_decay when decay[r] != 0, else s_plain.
// ends (device, [nruns] int64) and decay (device, [nruns] uint8) are read only; 1 <= nruns <=
// KDA_ADAMW_MAX_RUNS. Each element gets exactly kda_cuda_adamw's operations with its run's
// scalars: the same bits as one kda_cuda_adamw call per run.
#define KDA_ADAMW_MAX_RUNS 2048
int kda_cuda_adamw_runs(KdaCudaCtx *ctx, float *p, kda_bf16 *p_bf16, const float *g, float *m,
                        float *v, int64_t n, const int64_t *ends, const unsigned char *decay,
                        int nruns, const KdaCudaAdamScalars *s_decay,
                        const KdaCudaAdamScalars *s_plain, const float *gscale);
// p_bf16 [n] = bf16(p [n]) (initial copy of the master weights).
int kda_cuda_f32_to_bf16(KdaCudaCtx *ctx, kda_bf16 *dst, const float *src, int64_t n);

// ---- global gradient norm and clipping (model/optim.h) -------------------------------------
// norm (device, [1] double) = sqrt(Σ g²), two stages in a fixed order (deterministic).
int kda_cuda_grad_norm(KdaCudaCtx *ctx, double *norm, const float *g, int64_t n);
// sumsq (device, [1] double) = Σ g² in the same order, without the square root (ZeRO-1: one
// shard's part, summed over the ranks): sqrt of it is bitwise kda_cuda_grad_norm's result.
int kda_cuda_grad_sumsq(KdaCudaCtx *ctx, double *sumsq, const float *g, int64_t n);
// coef (device, [1] fp32) = max_norm / (norm + 1e-6) when that is < 1 and norm is finite,
// else 1 (torch clip_grad_norm_; the caller skips the step on a non-finite norm).
int kda_cuda_clip_coef(KdaCudaCtx *ctx, float *coef, const double *norm, double max_norm);
// g [n] *= coef (device scalar).
int kda_cuda_scale(KdaCudaCtx *ctx, float *g, int64_t n, const float *coef);

#ifdef __cplusplus
}
#endif
#endif // KDA_HAVE_CUDA
#endif
