// kda_fast.h - the KDA core on the GPU in chunk-parallel form (the fast path of kda_cuda.h;
// same math as cpu/kda_chunk.c, kda-model.md §6.1-6.3).
//
// Layouts and dtypes as kda_cuda.h:
//   q, k   [B, T, H, K]   bf16, L2-normalized          v, o, do  [B, T, HV, V] bf16
//   (fp32 q, k, v, o for kda_fast_fwd_f32, the scoring path's forward)
//   gcum   [B, T, HV, K]  fp32 chunk-local inclusive cumsum of the log-decay, chunk = d->chunk
//   beta   [B, T, HV]     fp32 post-sigmoid              state     [B, HV, K, V] fp32
//   dq, dk [B, T, H, K]   fp32 (GVA: summed over the value heads of a group)
//   dv     [B, T, HV, V]  bf16    dg [B, T, HV, K] fp32 (w.r.t. the per-token g)   dbeta [B, T, HV]
//
// Structure (one launch each; "chunk-parallel" = one block per (b, value head, chunk)):
//   forward : intra (Aqk, L, Akk = (I+L)^-1, w, u, kg, qg)   chunk-parallel
//             state  (h[n] = chunk-start states, Δ = u - w h)  one block per (b, head, V tile),
//                                                               sequential over chunks
//             output (o = qg h + Aqk Δ)                         chunk-parallel
//   backward: intra (as forward, plus dΔ_intra = Aqkᵀ dO), state (recomputes h and Δ),
//             reverse state pass (dh[n], dΔ = dΔ_intra + kg dh)  per (b, head, V tile),
//             main backward (everything else of cpu/kda_chunk.c's chunk_backward) chunk-parallel.
// All intermediates are fp32 in device scratch (ctx->ws, about (3CK + 4CV + C² + K + 2KV) floats
// per chunk and head); state, cumsum and every product are fp32 (CUDA cores). Exponentials are
// of differences G_i - G_j (j <= i), G_i or G_last - G_i only: never positive, so an unbounded
// gate cannot overflow them.
//
// The kernel bodies are written as block-strided loops separated by barriers, so the very same
// functions also run on the host, serially ("one thread per block"): kda_fast_*_host. The CPU
// test suite uses that to check the algorithm and all index arithmetic in CI, without a GPU.
#ifndef KDA_CUDA_KDA_FAST_H
#define KDA_CUDA_KDA_FAST_H

#include <stddef.h>

#include "cpu/kda_core.h"     // defines: KdaDims
#include "cuda/cuda_common.h" // defines: KdaCudaCtx, kda_bf16

#ifdef KDA_HAVE_CUDA
#ifdef __cplusplus
extern "C" {
#endif

// 1 when the fast kernels take these dims with `smem_optin` bytes of shared memory per block
// (chunk <= 64 and the largest kernel's shared memory fits), else 0.
int kda_fast_supported(const KdaDims *d, size_t smem_optin);
// The chunk size the GPU should use for head dims K, V: 32 where the kernels' shared memory
// fits (K = 32, V = 64: see docs/perf-log.md, KDA v2), else 16, else 8; 64 (the correctness-first
// kernels of kda_cuda.h) when none fits.
int64_t kda_fast_chunk(int64_t K, int64_t V, size_t smem_optin);

// Device launchers (pointers on the device). final_state, init_state may be NULL.
int kda_fast_fwd(KdaCudaCtx *ctx, kda_bf16 *o, float *final_state, const kda_bf16 *q,
                 const kda_bf16 *k, const kda_bf16 *v, const float *gcum, const float *beta,
                 const float *init_state, const KdaDims *d);
// dinit_state, dfinal_state, init_state may be NULL. All outputs are overwritten.
int kda_fast_bwd(KdaCudaCtx *ctx, float *dq, float *dk, kda_bf16 *dv, float *dg, float *dbeta,
                 float *dinit_state, const kda_bf16 *d_o, const float *dfinal_state,
                 const kda_bf16 *q, const kda_bf16 *k, const kda_bf16 *v, const float *gcum,
                 const float *beta, const float *init_state, const KdaDims *d);

// M0 of the tensor-core plan: the forward keeps its chunk-start states h [B·HV·NT, K, V] and
// Δ [B·HV·NT, C, V] (fp32, NT = ceil(T / chunk)) in a caller buffer `keep` of
// kda_fast_keep_floats(d) floats (h first), and the backward reads them instead of recomputing
// them (its state pass is skipped: ~10 % of forward + backward at the 300M shape). The kept
// values are those the recompute would produce, bit for bit (the same intra kernel computes the
// w, u, kg both use). kept must hold the forward's values for the same inputs and dims.
size_t kda_fast_keep_floats(const KdaDims *d);
int kda_fast_fwd_keep(KdaCudaCtx *ctx, kda_bf16 *o, float *final_state, const kda_bf16 *q,
                      const kda_bf16 *k, const kda_bf16 *v, const float *gcum, const float *beta,
                      const float *init_state, const KdaDims *d, float *keep);
int kda_fast_bwd_kept(KdaCudaCtx *ctx, float *dq, float *dk, kda_bf16 *dv, float *dg, float *dbeta,
                      float *dinit_state, const kda_bf16 *d_o, const float *dfinal_state,
                      const kda_bf16 *q, const kda_bf16 *k, const kda_bf16 *v, const float *gcum,
                      const float *beta, const float *init_state, const KdaDims *d,
                      const float *kept);

// The forward with q, k, v and o in fp32 (the --precision fp32 scoring path,
// model/model_cuda_f32.h): the same kernels, instantiated for fp32 storage (every intermediate is
// fp32 in both forms; only the loads of q, k, v and the store of o differ). Layouts as above.
int kda_fast_fwd_f32(KdaCudaCtx *ctx, float *o, float *final_state, const float *q, const float *k,
                     const float *v, const float *gcum, const float *beta, const float *init_state,
                     const KdaDims *d);

// Per-kernel timing for benchmarks: runs forward + backward `reps` times on internal
// pseudo-random inputs of dims d and stores each launch's minimum milliseconds in ms: intra,
// state, output (forward); intra, state, reverse state, main backward, GVA sum (backward).
int kda_fast_profile(KdaCudaCtx *ctx, const KdaDims *d, int reps, float ms[8]);

// Host emulation: the same kernel bodies on host memory (same arguments, host pointers).
void kda_fast_fwd_host(kda_bf16 *o, float *final_state, const kda_bf16 *q, const kda_bf16 *k,
                       const kda_bf16 *v, const float *gcum, const float *beta,
                       const float *init_state, const KdaDims *d);
void kda_fast_bwd_host(float *dq, float *dk, kda_bf16 *dv, float *dg, float *dbeta,
                       float *dinit_state, const kda_bf16 *d_o, const float *dfinal_state,
                       const kda_bf16 *q, const kda_bf16 *k, const kda_bf16 *v, const float *gcum,
                       const float *beta, const float *init_state, const KdaDims *d);
void kda_fast_fwd_f32_host(float *o, float *final_state, const float *q, const float *k,
                           const float *v, const float *gcum, const float *beta,
                           const float *init_state, const KdaDims *d);
// The M0 forms on the host (keep / kept NULL: the plain forms above).
void kda_fast_fwd_keep_host(kda_bf16 *o, float *final_state, const kda_bf16 *q, const kda_bf16 *k,
                            const kda_bf16 *v, const float *gcum, const float *beta,
                            const float *init_state, const KdaDims *d, float *keep);
void kda_fast_bwd_kept_host(float *dq, float *dk, kda_bf16 *dv, float *dg, float *dbeta,
                            float *dinit_state, const kda_bf16 *d_o, const float *dfinal_state,
                            const kda_bf16 *q, const kda_bf16 *k, const kda_bf16 *v,
                            const float *gcum, const float *beta, const float *init_state,
                            const KdaDims *d, const float *kept);

#ifdef __cplusplus
}
#endif
#endif // KDA_HAVE_CUDA
#endif
