// swiglu_cuda.h - the GPU twin of cpu/swiglu.h's SwiGLU (kda-model.md §5.6): m = SiLU(a) ⊙ b over
// flat tensors and over the gate|up output of one GEMM, with the fp32 forward of the scoring path.
// bf16 storage, fp32 math; gradients (da, db, dgu) are OVERWRITTEN.
// Every function returns 0, or -1 with the reason in ctx->err; work is queued on ctx->stream.
// Launchers that need scratch use ctx's scratch buffer (kda_cuda_scratch).
#ifndef KDA_CUDA_SWIGLU_H
#define KDA_CUDA_SWIGLU_H

#include "cuda/cuda_common.h" // defines: KdaCudaCtx, kda_bf16

#ifdef KDA_HAVE_CUDA
#ifdef __cplusplus
extern "C" {
#endif

// ---- SwiGLU (§5.6): m = SiLU(a) ⊙ b, all [n] bf16, fp32 math -------------------------------
int kda_cuda_swiglu_fwd(KdaCudaCtx *ctx, kda_bf16 *m, const kda_bf16 *a, const kda_bf16 *b,
                        int64_t n);
int kda_cuda_swiglu_bwd(KdaCudaCtx *ctx, kda_bf16 *da, kda_bf16 *db, const kda_bf16 *dm,
                        const kda_bf16 *a, const kda_bf16 *b, int64_t n);

// gate|up from one GEMM: gu [N, 2I] bf16, row r = gate_r (I) | up_r (I) -> m [N, I] bf16.
int kda_cuda_swiglu_gu_fwd(KdaCudaCtx *ctx, kda_bf16 *m, const kda_bf16 *gu, int64_t N, int64_t I);
// dm [N, I] bf16 with row stride ld_dm (>= I; dm may be dgu's gate half: dm = dgu, ld_dm = 2I,
// each group read before it is written) -> dgu [N, 2I] bf16 = d(gate) | d(up) per row. m: NULL,
// or [N, I] bf16 OVERWRITTEN with the forward's product recomputed from gu, bit-identical to
// kda_cuda_swiglu_gu_fwd's (the model's MLP recompute, KDA_MLP_RECOMPUTE=1: the backward's
// down_proj weight gradient reads it instead of a per-layer saved copy).
int kda_cuda_swiglu_gu_bwd(KdaCudaCtx *ctx, kda_bf16 *dgu, kda_bf16 *m, const kda_bf16 *dm,
                           int64_t ld_dm, const kda_bf16 *gu, int64_t N, int64_t I);

// fp32 forward twin (the scoring path, --precision fp32, model/model_cuda_f32.h): all [n] fp32.
int kda_cuda_swiglu_fwd_f32(KdaCudaCtx *ctx, float *m, const float *a, const float *b, int64_t n);

#ifdef __cplusplus
}
#endif
#endif // KDA_HAVE_CUDA
#endif
