// kda_tc.h - the KDA core on the GPU's tensor cores (mma.sync TF32 m16n8k8, fp32 accumulate):
// the chunk-parallel algorithm of kda_fast.h with every GEMM-shaped product on mma, and the
// intra-chunk pair terms factored through 16-token sub-block boundaries. The model's default
// core where it fits (kda_tc_supported) since the GPU run of 2026-12-03; KDA_CORE=simt selects
// the SIMT path of kda_fast.h, which stays the GPU oracle of this one. Kernel versions (the
// context's tc_version): v6, the default since 2026-12-04, v5 with a full chunk's row count at
// compile time, bitwise v5's results; v5 (KDA_TC_V=5; the default from 2026-12-03 session 6), v4
// with operands rounded to TF32 once, bitwise v4's results; v4 (KDA_TC_V=4) and v3 (KDA_TC_V=3),
// kept whole for A/B runs.
//
// Same arguments, layouts and dtypes as kda_fast.h (and kda_cuda.h):
//   q, k   [B, T, H, K]   bf16, L2-normalized          v, o, do  [B, T, HV, V] bf16
//   gcum   [B, T, HV, K]  fp32 chunk-local inclusive cumsum of the log-decay, chunk = d->chunk
//   beta   [B, T, HV]     fp32 post-sigmoid              state     [B, HV, K, V] fp32
//   dq, dk [B, T, H, K]   fp32 (GVA: summed over the value heads of a group)
//   dv     [B, T, HV, V]  bf16    dg [B, T, HV, K] fp32 (w.r.t. the per-token g)   dbeta [B, T, HV]
// The kept buffer of the M0 forms (kda_tc_keep_floats(d) floats, fp32) starts with kda_fast's
// layout (kda_fast_keep_floats(d) floats: h [B·HV·NT, K, V] then Δ [B·HV·NT, C, V]), so
// kda_fast_bwd_kept can read what kda_tc_fwd_keep wrote; then w, kg, qg [B·HV·NT, C, K], Aqk
// [B·HV·NT, C, C] and e^{G_last} [B·HV·NT, K], which let kda_tc_bwd_kept skip the intra kernel;
// then Akk = (I + L)^-1 and KK (L = diag(β) KK, strict lower) [B·HV·NT, C, C], written by kernel
// version 4 at K 32 / V 64 / chunk 32 only, where its main backward reads them instead of
// inverting again.
//
// Numerics (kda-model.md §6.1-6.2, FLA's scheme):
//   * products on TF32 tensor cores: operands rounded to TF32 (10-bit mantissa, round to nearest,
//     ties away) from fp32 shared memory, fp32 accumulation; all scratch stays fp32. Expected
//     error against the fp32 reference ~1e-3 relative RMS, inside FLA's own tolerances
//     (o / final state 5e-3, dq / dk / dv / d initial state 8e-3, dg / dβ 2e-2; kda-model.md §6.6).
//   * the pair terms of Aqk, L and their gradients: on the diagonal 16 x 16 sub-blocks exact fp32
//     pairwise e^{G_i - G_j} (j <= i); off the diagonal factored through the first row R of the
//     row sub-block, (x_i e^{G_i - G_R}) · (k_j e^{G_R - G_j}), both exponents <= 0, so an
//     unbounded gate (cumsums of hundreds of nats) underflows to 0 and never overflows.
//
// Supported dims (kda_tc_supported): chunk 16 or 32, K % 16 == 0, V % 8 == 0, HV % H == 0, and the
// shared memory of the largest kernel fits. The kernel bodies are __host__ __device__ with warp
// tiles: on the host (kda_tc_*_host) one "thread" runs every warp's tiles and an emulation of the
// mma fragments (same fragment coordinates as the device), so the CPU suite checks the algorithm,
// the index arithmetic and the fragment plumbing; only the hardware checks the PTX layouts.
#ifndef KDA_CUDA_KDA_TC_H
#define KDA_CUDA_KDA_TC_H

#include <stddef.h>

#include "cpu/kda_core.h"     // defines: KdaDims
#include "cuda/cuda_common.h" // defines: KdaCudaCtx, kda_bf16

#ifdef KDA_HAVE_CUDA
#ifdef __cplusplus
extern "C" {
#endif

// 0 when KDA_CORE=simt is set in the environment, else 1 (read on every call; the caller caches
// it).
int kda_tc_selected(void);
// The kernel version of ctx's next calls (ctx->tc_version): 6, the default, 5 (KDA_TC_V=5 at
// kda_cuda_init), 4 (KDA_TC_V=4) or 3 (KDA_TC_V=3). v4: the output's tiles and the main backward's
// inputs through cp.async, the reverse state pass computing dΔ_intra itself, and (at K 32, V 64,
// chunk 32) the main backward with compile-time dims and side-by-side warp groups; v3 stays whole
// for A/B runs (bench/kda_kernel/bench_gpu.c) and as a fallback. v5 (measured in the
// model 2026-12-03: core rows 17.2 → 15.8 ms): v4 with every tensor that only mma reads rounded to
// TF32 once, where it is produced (w, kg, qg, Aqk, the kept Akk, Δ, dΔ and some of the main
// backward's own tiles), and its fragments loaded without the per-element cvt; cvt.rna is
// idempotent, so the results are bitwise v4's. At K 32, V 64, chunk 32; other dims run v4. v6
// (the default since 2026-12-04; alone, no gain measured in the step, session 8): v5 (its state
// passes unchanged) with the intra kernel and the main backward dispatching per chunk, at run time,
// between their bodies instantiated for a full chunk (n = C rows at compile time: the loops over
// the rows fully unroll, the row guards fold away) and v5's run-time-n bodies for a sequence's
// partial last chunk. The same arithmetic in the same order: bitwise v5's results. At K 32, V 64,
// chunk 32; other dims run v4.
// Sets ctx's version (3, 4, 5 or 6; anything else: 4) and returns the previous one. For tests and
// benchmarks; the context's thread only.
int kda_tc_set_version(KdaCudaCtx *ctx, int v);
// The main backward's version for dims d at kernel version `version`: 4 (5, 6) where bwd4 is
// instantiated (K 32, V 64, chunk 32) and version is 4 (5, 6), else 3.
int kda_tc_bwd_main_version(int version, const KdaDims *d);
// 1 when the tensor-core kernels take these dims with `smem_optin` bytes of shared memory per
// block (see the list above), else 0.
int kda_tc_supported(const KdaDims *d, size_t smem_optin);

// Device launchers (pointers on the device), the contracts of kda_fast_fwd / kda_fast_bwd: every
// output is overwritten; final_state, init_state, dinit_state, dfinal_state may be NULL. Errors
// (unsupported dims, launch failures) set ctx->err and return -1. Queued on ctx->stream; scratch
// from kda_cuda_scratch (not thread-safe, like every launcher on one ctx).
int kda_tc_fwd(KdaCudaCtx *ctx, kda_bf16 *o, float *final_state, const kda_bf16 *q,
               const kda_bf16 *k, const kda_bf16 *v, const float *gcum, const float *beta,
               const float *init_state, const KdaDims *d);
int kda_tc_bwd(KdaCudaCtx *ctx, float *dq, float *dk, kda_bf16 *dv, float *dg, float *dbeta,
               float *dinit_state, const kda_bf16 *d_o, const float *dfinal_state,
               const kda_bf16 *q, const kda_bf16 *k, const kda_bf16 *v, const float *gcum,
               const float *beta, const float *init_state, const KdaDims *d);
// M0 forms: keep (written) / kept (read) are kda_tc_keep_floats(d) floats (layout above); kept
// must hold kda_tc_fwd_keep's values for the same inputs, dims and kernel version
// (ctx->tc_version).
size_t kda_tc_keep_floats(const KdaDims *d);
int kda_tc_fwd_keep(KdaCudaCtx *ctx, kda_bf16 *o, float *final_state, const kda_bf16 *q,
                    const kda_bf16 *k, const kda_bf16 *v, const float *gcum, const float *beta,
                    const float *init_state, const KdaDims *d, float *keep);
int kda_tc_bwd_kept(KdaCudaCtx *ctx, float *dq, float *dk, kda_bf16 *dv, float *dg, float *dbeta,
                    float *dinit_state, const kda_bf16 *d_o, const float *dfinal_state,
                    const kda_bf16 *q, const kda_bf16 *k, const kda_bf16 *v, const float *gcum,
                    const float *beta, const float *init_state, const KdaDims *d,
                    const float *kept);

// Per-kernel timing for benchmarks (as kda_fast_profile): forward + backward `reps` times on
// internal pseudo-random inputs of dims d, each launch's minimum milliseconds in ms: intra, state,
// output (forward); intra, state, reverse state, main backward, GVA sum (backward).
int kda_tc_profile(KdaCudaCtx *ctx, const KdaDims *d, int reps, float ms[8]);
// The same for the M0 forms (kda_tc_fwd_keep, kda_tc_bwd_kept: the model's path): intra, state,
// output (forward); ddi (v3; 0 in v4, which has none), reverse state, main backward, GVA sum
// (backward); ms[7] = 0.
int kda_tc_profile_kept(KdaCudaCtx *ctx, const KdaDims *d, int reps, float ms[8]);

// Host emulation: the same kernel bodies on host memory (same arguments, host pointers), kernel
// version `version` (3, 4, 5 or 6, as a context's tc_version); keep / kept NULL: the plain forms.
void kda_tc_fwd_host(kda_bf16 *o, float *final_state, const kda_bf16 *q, const kda_bf16 *k,
                     const kda_bf16 *v, const float *gcum, const float *beta,
                     const float *init_state, const KdaDims *d, float *keep, int version);
void kda_tc_bwd_host(float *dq, float *dk, kda_bf16 *dv, float *dg, float *dbeta,
                     float *dinit_state, const kda_bf16 *d_o, const float *dfinal_state,
                     const kda_bf16 *q, const kda_bf16 *k, const kda_bf16 *v, const float *gcum,
                     const float *beta, const float *init_state, const KdaDims *d,
                     const float *kept, int version);

// The building blocks, exposed for the CPU suite (tests/test_kda_tc.c):
// D [M, N] = A [M, Kd] · B [Kd, N] (row-major, fp32) through the warp-tile mma code path of the
// kernels (on the host: the fragment emulation, operands rounded to TF32). M % 16 == 0,
// N % 8 == 0, Kd % 8 == 0.
void kda_tc_matmul_host(float *D, const float *A, const float *B, int M, int N, int Kd);
// x rounded to TF32 as cvt.rna.tf32.f32 does (10 mantissa bits, nearest, ties away from zero).
float kda_tc_round_tf32(float x);

#ifdef __cplusplus
}
#endif
#endif // KDA_HAVE_CUDA
#endif
