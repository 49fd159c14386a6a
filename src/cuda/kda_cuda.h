// kda_cuda.h - the KDA core on the GPU, correctness-first versions (the twins of
// cpu/kda_core.h's kda_chunk_fwd / kda_recurrent_bwd; kda-model.md §5.3 step 10, §6.1, §6.4).
//
// Layouts as cpu/kda_core.h (row-major, last index fastest):
//   q, k   [B, T, H, K]   bf16, already L2-normalized
//   v      [B, T, HV, V]  bf16
//   g      [B, T, HV, K]  fp32 per-token log-decay (<= 0)   (kda_cuda_gate_cumsum_fwd's g)
//   gcum   [B, T, HV, K]  fp32 chunk-local inclusive cumsum of g, chunk = d->chunk
//   beta   [B, T, HV]     fp32 post-sigmoid
//   state  [B, HV, K, V]  fp32 (math orientation S)
//   o, do  [B, T, HV, V]  bf16
// GVA (HV > H): value head j reads q/k head j / (HV/H) (forward only, see below).
//
// kda_cuda_chunk_fwd / kda_cuda_chunk_bwd dispatch: when kda_fast_supported(d) (chunk <= 64 and
// the shared memory of cuda/kda_fast.h's kernels fits; the model uses chunk 32) they run the
// chunk-parallel fast path of kda_fast.h. Otherwise the correctness-first kernels below run:
//
// Forward: chunked WY/UT form, one block per (b, value head), sequential over chunks of C = 64
// tokens (the last may be shorter); fp32 state, fp32 intra-chunk matrices, every exponential
// is of a difference gcum_i - gcum_j <= 0 (j <= i) or of gcum_last - gcum_i <= 0.
// Requires C <= 64, K <= 64, V <= 128 (shared memory); fails with a message otherwise.
//
// Backward: per (b, value head) a block of V threads, thread v owning column v of the fp32 state
// and of its gradient: it replays the recurrence forward storing the chunk-start states, then walks
// the chunks in reverse, re-deriving the chunk's per-token states from its start state (scratch:
// B·HV·(NC + C)·K·V fp32) and differentiating the per-token recurrence (§6.4). Exact, simple,
// sequential in T (not the fast path). Requires HV == H and K in {16, 32, 64}, V <= 256.
#ifndef KDA_CUDA_KDA_H
#define KDA_CUDA_KDA_H

#include "cpu/kda_core.h"     // defines: KdaDims
#include "cuda/cuda_common.h" // defines: KdaCudaCtx, kda_bf16

#ifdef KDA_HAVE_CUDA
#ifdef __cplusplus
extern "C" {
#endif

// o [B, T, HV, V] bf16; final_state [B, HV, K, V] fp32 (may be NULL); init_state may be NULL
// (zeros). d->chunk must equal the chunk gcum was summed over.
int kda_cuda_chunk_fwd(KdaCudaCtx *ctx, kda_bf16 *o, float *final_state, const kda_bf16 *q,
                       const kda_bf16 *k, const kda_bf16 *v, const float *gcum, const float *beta,
                       const float *init_state, const KdaDims *d);

// dq, dk [B, T, H, K] fp32; dv [B, T, HV, V] bf16; dg [B, T, HV, K] fp32 (w.r.t. the per-token
// g: pass to kda_cuda_gate_cumsum_bwd with from_cumsum = 0); dbeta [B, T, HV] fp32;
// dinit_state [B, HV, K, V] fp32 (may be NULL). dfinal_state and init_state may be NULL (zeros).
// All outputs are overwritten.
int kda_cuda_recurrent_bwd(KdaCudaCtx *ctx, float *dq, float *dk, kda_bf16 *dv, float *dg,
                           float *dbeta, float *dinit_state, const kda_bf16 *d_o,
                           const float *dfinal_state, const kda_bf16 *q, const kda_bf16 *k,
                           const kda_bf16 *v, const float *g, const float *beta,
                           const float *init_state, const KdaDims *d);

// The same gradients by the chunked form (a port of cpu/kda_chunk.c's kda_chunk_bwd: recompute
// the chunk-start states, then per chunk in reverse the backward of every line of §6.1,
// including dL = -Akkᵀ dAkk Akkᵀ). Reads gcum (as kda_cuda_chunk_fwd) instead of g; dg is
// w.r.t. the per-token g as above. One block of 256 threads per (b, value head), the chunk
// workspace in device scratch ((NT + 3)·K·V + 13·C·K + 7·C·V + 8·C² floats per block).
// Requires HV == H and chunk <= 64.
int kda_cuda_chunk_bwd(KdaCudaCtx *ctx, float *dq, float *dk, kda_bf16 *dv, float *dg, float *dbeta,
                       float *dinit_state, const kda_bf16 *d_o, const float *dfinal_state,
                       const kda_bf16 *q, const kda_bf16 *k, const kda_bf16 *v, const float *gcum,
                       const float *beta, const float *init_state, const KdaDims *d);

#ifdef __cplusplus
}
#endif
#endif // KDA_HAVE_CUDA
#endif
