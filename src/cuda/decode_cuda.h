// decode_cuda.h - the one-token kernels of the GPU's recurrent decode (kda-model.md §5.3 steps
// 5-10 on one token, §5.8 Inference): the twins of cpu/kda_step.h's kda_recurrent_step and of
// model.c's conv step, for the bf16 GPU model (model/model_cuda.h kda_cuda_model_decode). The
// other ops of a decode step (norms, GEMMs, gate, β, gated norm, SwiGLU, head) are the forward's
// launchers with N = 1 token (norm_cuda.h, kda_gate_cuda.h, swiglu_cuda.h, gemm_cuda.h, ...).
//
// Dtypes follow the forward's (kda-model.md §8): projections and core inputs/outputs bf16, the
// recurrent state S, the conv tails, the gate and β fp32. One sequence per call (B = 1).
//
// Host twins (kda_cuda_decode_*_host): the kernels' bodies run on the host, one thread's work
// after another in the same order, so the CPU suite of a CUDA build tests the arithmetic without
// a GPU (tests/test_decode_host.c, against cpu/kda_step.c and model.c's decode). Every sum runs
// serially in index order on both sides (one thread per value column, or per head in shared
// memory), the exact order of the CPU reference: with the same inputs a twin equals the CPU bit
// for bit; the device differs from its twin only in expf (CUDA's expf: <= 2 ulp).
//
// Launchers return 0, or -1 with the reason in ctx->err; work is queued on ctx->stream.
#ifndef KDA_CUDA_DECODE_CUDA_H
#define KDA_CUDA_DECODE_CUDA_H

#include "cuda/cuda_common.h" // defines: KdaCudaCtx, kda_bf16

#ifdef KDA_HAVE_CUDA
#ifdef __cplusplus
extern "C" {
#endif

// Causal depthwise conv of one token + SiLU (+ L2 norm per group), advancing the conv tail:
//   p     [C] bf16: this token's conv input (the projection output)
//   tail  [C, W-1] fp32: the previous W-1 inputs of each channel, oldest first (zeros before
//         the sequence start); on exit shifted by one with p appended. May be NULL when W = 1.
//   w     [C, W] fp32: the conv weights, tap W-1 = the current token
//   y     [C] bf16 (overwritten) = SiLU(Σ_i w[c, i] · x_i), taps oldest first then p; when
//         l2 != 0 each group of `group` channels is L2-normalized: y · (Σ y² + eps)^-1/2 with the
//         sum in double (kda_l2norm_fwd); the SiLU output stays fp32 until this rounding.
// C % group == 0, group in [1, 1024], W in [1, 8].
int kda_cuda_decode_conv(KdaCudaCtx *ctx, kda_bf16 *y, float *tail, const kda_bf16 *p,
                         const float *w, int64_t C, int64_t W, int64_t group, int l2, float eps);
void kda_cuda_decode_conv_host(kda_bf16 *y, float *tail, const kda_bf16 *p, const float *w,
                               int64_t C, int64_t W, int64_t group, int l2, float eps);

// One token of the delta rule per value head j (GVA: q/k head j / (HV / H)):
//   S~ = Diag(exp(g_j)) S_j,  r = S~ᵀ k,  δ = β_j (v_j - r),  S_j = S~ + k δᵀ,  o_j = S_jᵀ (scale
//   q) S     [HV, K, V] fp32: S_{t-1} on entry, S_t on exit (math orientation) q, k  [H, K] bf16,
//   L2-normalized;  v [HV, V] bf16;  g [HV, K] fp32 log-decay;  beta [HV] fp32 o     [HV, V] bf16
//   (overwritten)
// HV % H == 0, V <= 1024. The arithmetic is kda_recurrent_head_step's, element by element.
int kda_cuda_decode_delta(KdaCudaCtx *ctx, kda_bf16 *o, float *S, const kda_bf16 *q,
                          const kda_bf16 *k, const kda_bf16 *v, const float *g, const float *beta,
                          int64_t H, int64_t HV, int64_t K, int64_t V, float scale);
void kda_cuda_decode_delta_host(kda_bf16 *o, float *S, const kda_bf16 *q, const kda_bf16 *k,
                                const kda_bf16 *v, const float *g, const float *beta, int64_t H,
                                int64_t HV, int64_t K, int64_t V, float scale);

// The conv tail a prefill leaves: tail [C, W-1] fp32 (overwritten) = the last W-1 rows of
// p [T, C] bf16 (one sequence), oldest first, zeros where the row would precede the sequence.
int kda_cuda_decode_tail(KdaCudaCtx *ctx, float *tail, const kda_bf16 *p, int64_t T, int64_t C,
                         int64_t W);
void kda_cuda_decode_tail_host(float *tail, const kda_bf16 *p, int64_t T, int64_t C, int64_t W);

#ifdef __cplusplus
}
#endif
#endif // KDA_HAVE_CUDA
#endif
