// ops_cuda.h - the GPU twins of the CPU's non-GEMM operators (cpu/ops.h, cpu/kda_core.h
// pre-processing, model/optim.h): RMSNorm (+ fused residual add), L2 norm, causal depthwise conv
// + SiLU, gate + chunk-local cumsum, beta sigmoid, gated RMSNorm, SwiGLU, embedding, AdamW and
// the global gradient norm. Same math as the CPU twins (kda-model.md §5, §6.3, §6.5); dtypes
// follow the bf16 training flow of kda-model.md §8:
//   * residual stream, norms' statistics, β, the gate and its cumsum, parameter gradients: fp32
//   * tensors that are GEMM operands (norm outputs, projections, their gradients): bf16
// All math is fp32 (reductions over rows or tokens in double where the CPU twin uses double).
//
// Gradient contract (as cpu/ops.h): parameter gradients (dw, dA_log, ddt_bias, dE) ACCUMULATE;
// activation gradients OVERWRITE, except rmsnorm_bwd's dx when accumulate = 1.
// Determinism: every reduction runs in a fixed order that depends only on the shapes (row tiles
// of fixed size, then an ordered sum over tiles): the same inputs give the same bits, on any GPU.
// Every function returns 0, or -1 with the reason in ctx->err; work is queued on ctx->stream.
// Launchers that need scratch use ctx's scratch buffer (kda_cuda_scratch).
#ifndef KDA_CUDA_OPS_H
#define KDA_CUDA_OPS_H

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

// ---- L2 norm of q/k heads (§5.3 step 6): y = x / sqrt(|x|² + eps) per row of dim ----------
// x, y [N, dim] bf16 (N = tokens·heads); rstd [N] fp32.
int kda_cuda_l2norm_fwd(KdaCudaCtx *ctx, kda_bf16 *y, float *rstd, const kda_bf16 *x, int64_t N,
                        int64_t dim, float eps);
// dy [N, dim] fp32; dx [N, dim] bf16 = rstd (dy - (dy·ŷ) ŷ), ŷ = x·rstd recomputed in fp32.
int kda_cuda_l2norm_bwd(KdaCudaCtx *ctx, kda_bf16 *dx, const float *dy, const kda_bf16 *x,
                        const float *rstd, int64_t N, int64_t dim);

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

// ---- gate + chunk-local cumsum (§5.3 step 8, §6.2 step 2), unbounded form ------------------
// f [B, T, HV, K] bf16 raw gate; A_log [HV], dt_bias [HV*K] fp32.
// g_t = -exp(A_log) softplus(f_t + dt_bias) (fp32; g may be NULL), and
// gcum [B, T, HV, K] fp32 = inclusive cumsum of g that restarts every `chunk` tokens and at
// every row b (natural-log units: e^{gcum} is the decay since the chunk start).
int kda_cuda_gate_cumsum_fwd(KdaCudaCtx *ctx, float *gcum, float *g, const kda_bf16 *f,
                             const float *A_log, const float *dt_bias, int64_t B, int64_t T,
                             int64_t HV, int64_t K, int64_t chunk);
// dgrad [B, T, HV, K] fp32 -> dg -> df [B, T, HV, K] bf16 (overwritten); dA_log [HV] and
// ddt_bias [HV*K] fp32 +=. With from_cumsum = 1 dgrad is the gradient w.r.t. gcum (FLA's dΓ)
// and dg = its reverse chunk-local cumsum; with from_cumsum = 0 dgrad is already dg (the
// gradient w.r.t. the per-token log-decay g, what kda_cuda_chunk_bwd returns).
int kda_cuda_gate_cumsum_bwd(KdaCudaCtx *ctx, kda_bf16 *df, float *dA_log, float *ddt_bias,
                             const float *dgrad, const kda_bf16 *f, const float *A_log,
                             const float *dt_bias, int64_t B, int64_t T, int64_t HV, int64_t K,
                             int64_t chunk, int from_cumsum);

// ---- beta (§5.3 step 7): beta = s·σ(b), s = 2 if allow_neg_eigval else 1 -----------------
// b [n] bf16 logits -> beta [n] fp32; backward dbeta [n] fp32 -> db [n] bf16.
int kda_cuda_beta_fwd(KdaCudaCtx *ctx, float *beta, const kda_bf16 *b, int64_t n,
                      int allow_neg_eigval);
int kda_cuda_beta_bwd(KdaCudaCtx *ctx, kda_bf16 *db, const float *dbeta, const kda_bf16 *b,
                      int64_t n, int allow_neg_eigval);
// The same over [N, HV] with db's rows at stride ldo (>= HV): db [N, ldo] bf16, columns [0, HV).
int kda_cuda_beta_bwd_ld(KdaCudaCtx *ctx, kda_bf16 *db, int64_t ldo, const float *dbeta,
                         const kda_bf16 *b, int64_t N, int64_t HV, int allow_neg_eigval);

// ---- gated RMSNorm (§5.3 step 11): y = RMSNorm(x; w) ⊙ σ(z), one row per value head ------
// x = o [N, V] bf16, z [N, V] bf16, w [V] fp32 -> y [N, V] bf16, rstd [N] fp32.
int kda_cuda_gnorm_fwd(KdaCudaCtx *ctx, kda_bf16 *y, float *rstd, const kda_bf16 *x,
                       const kda_bf16 *z, const float *w, int64_t N, int64_t V, float eps);
// dy [N, V] bf16 -> dx, dz [N, V] bf16 (overwritten), dw [V] fp32 +=.
int kda_cuda_gnorm_bwd(KdaCudaCtx *ctx, kda_bf16 *dx, kda_bf16 *dz, float *dw, const kda_bf16 *dy,
                       const kda_bf16 *x, const kda_bf16 *z, const float *w, const float *rstd,
                       int64_t N, int64_t V);

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
void kda_cuda_conv_silu_l2_fwd_host(kda_bf16 *y, float *rstd, const kda_bf16 *p, const float *w,
                                    int64_t B, int64_t T, int64_t C, int64_t W, int64_t K,
                                    float eps);
void kda_cuda_conv_silu_l2_bwd_host(kda_bf16 *dp, float *dw, const float *dy, const kda_bf16 *p,
                                    const float *w, const float *rstd, int64_t B, int64_t T,
                                    int64_t C, int64_t W, int64_t K);
void kda_cuda_gnorm_bias_fwd_host(kda_bf16 *y, float *rstd, const kda_bf16 *x, const kda_bf16 *z,
                                  const float *bias, const float *w, int64_t N, int64_t HV,
                                  int64_t V, float eps);
void kda_cuda_gnorm_bias_bwd_host(kda_bf16 *dx, kda_bf16 *dz, float *dw, float *dbias,
                                  const kda_bf16 *dy, const kda_bf16 *x, const kda_bf16 *z,
                                  const float *bias, const float *w, const float *rstd, int64_t N,
                                  int64_t HV, int64_t V);

// ---- Linear bias (g_proj.1 is the one Linear with a bias, §5.3 step 11) ----------------------
// y [N, out] bf16 += bias [out] fp32 (fp32 add, one rounding); the GEMM wrapper has no epilogue.
int kda_cuda_bias_add(KdaCudaCtx *ctx, kda_bf16 *y, const float *bias, int64_t N, int64_t out);
// dbias [out] fp32 += Σ_rows dy [N, out] bf16 (deterministic column sum).
int kda_cuda_bias_bwd(KdaCudaCtx *ctx, float *dbias, const kda_bf16 *dy, int64_t N, int64_t out);

// ---- SwiGLU (§5.6): m = SiLU(a) ⊙ b, all [n] bf16, fp32 math -------------------------------
int kda_cuda_swiglu_fwd(KdaCudaCtx *ctx, kda_bf16 *m, const kda_bf16 *a, const kda_bf16 *b,
                        int64_t n);
int kda_cuda_swiglu_bwd(KdaCudaCtx *ctx, kda_bf16 *da, kda_bf16 *db, const kda_bf16 *dm,
                        const kda_bf16 *a, const kda_bf16 *b, int64_t n);

// gate|up from one GEMM: gu [N, 2I] bf16, row r = gate_r (I) | up_r (I) -> m [N, I] bf16.
int kda_cuda_swiglu_gu_fwd(KdaCudaCtx *ctx, kda_bf16 *m, const kda_bf16 *gu, int64_t N, int64_t I);
// dm [N, I] bf16 with row stride ld_dm (>= I; dm may be dgu's gate half: dm = dgu, ld_dm = 2I,
// each group read before it is written) -> dgu [N, 2I] bf16 = d(gate) | d(up) per row.
int kda_cuda_swiglu_gu_bwd(KdaCudaCtx *ctx, kda_bf16 *dgu, const kda_bf16 *dm, int64_t ld_dm,
                           const kda_bf16 *gu, int64_t N, int64_t I);

// ---- column blocks of a bf16 matrix (the fused input projection's parts) --------------------
// Up to KDA_CUDA_SPLIT_MAX parts of a row-major src [rows, lds] bf16: part i is the columns
// [col[i], col[i] + cols[i]) of every row, copied to dst[i] [rows, ld[i]] (row stride ld[i] >=
// cols[i]; the parts must not overlap src or each other). One launch for all parts; 16-byte
// accesses when every part's columns, strides and pointers are multiples of 8 elements (16
// bytes), else 2-byte ones (same result).
#define KDA_CUDA_SPLIT_MAX 8
typedef struct {
    kda_bf16 *dst[KDA_CUDA_SPLIT_MAX];
    int64_t col[KDA_CUDA_SPLIT_MAX], cols[KDA_CUDA_SPLIT_MAX], ld[KDA_CUDA_SPLIT_MAX];
    int n; // parts (1 .. KDA_CUDA_SPLIT_MAX)
} KdaCudaColParts;
int kda_cuda_cols_split(KdaCudaCtx *ctx, const kda_bf16 *src, int64_t lds, int64_t rows,
                        const KdaCudaColParts *parts);
// The reverse for one part: dst [rows, ldd] columns [0, cols) = src [rows, lds] columns [0, cols)
// (bf16; a 2-D copy: cudaMemcpy2DAsync's job, as a kernel with 16-byte accesses when aligned).
int kda_cuda_cols_copy(KdaCudaCtx *ctx, kda_bf16 *dst, int64_t ldd, const kda_bf16 *src,
                       int64_t lds, int64_t rows, int64_t cols);
// Host twin of kda_cuda_cols_split (the same per-group body; test_fuse_host.c).
void kda_cuda_cols_split_host(const kda_bf16 *src, int64_t lds, int64_t rows,
                              const KdaCudaColParts *parts);

// ---- embedding (§5.1) --------------------------------------------------------------------------
// h [N, D] fp32 = E [n_vocab, D] fp32 rows at ids [N] (int32, validated to be in range).
int kda_cuda_embed_fwd(KdaCudaCtx *ctx, float *h, const float *E, const int32_t *ids, int64_t N,
                       int64_t D);
// dE [n_vocab, D] fp32 += dh [N, D] rows at ids, skipping ids == pad_id (-1: none).
// Deterministic: tokens are grouped by id with a stable radix sort and each row is accumulated
// in increasing token order, the same order as the CPU twin (bitwise equal to it).
int kda_cuda_embed_bwd(KdaCudaCtx *ctx, float *dE, const float *dh, const int32_t *ids, int64_t N,
                       int64_t D, int64_t n_vocab, int64_t pad_id);

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

// ---- fp32 forward twins: the scoring path (--precision fp32, cuda/model_cuda_f32.h) ----------
// The same kernels and math as the forwards above with every bf16 tensor in fp32 (the kernels
// are templates on the storage type; the bf16 instantiations are the training path's, unchanged).
// Shapes as above; all tensors fp32.
int kda_cuda_rmsnorm_fwd_f32(KdaCudaCtx *ctx, float *y, float *rstd, const float *x, const float *w,
                             int64_t N, int64_t D, float eps);
int kda_cuda_l2norm_fwd_f32(KdaCudaCtx *ctx, float *y, float *rstd, const float *x, int64_t N,
                            int64_t dim, float eps);
int kda_cuda_conv_silu_fwd_f32(KdaCudaCtx *ctx, float *y, const float *p, const float *w, int64_t B,
                               int64_t T, int64_t C, int64_t W);
int kda_cuda_gate_cumsum_fwd_f32(KdaCudaCtx *ctx, float *gcum, const float *f, const float *A_log,
                                 const float *dt_bias, int64_t B, int64_t T, int64_t HV, int64_t K,
                                 int64_t chunk);
int kda_cuda_beta_fwd_f32(KdaCudaCtx *ctx, float *beta, const float *b, int64_t n,
                          int allow_neg_eigval);
int kda_cuda_gnorm_fwd_f32(KdaCudaCtx *ctx, float *y, float *rstd, const float *x, const float *z,
                           const float *w, int64_t N, int64_t V, float eps);
int kda_cuda_bias_add_f32(KdaCudaCtx *ctx, float *y, const float *bias, int64_t N, int64_t out);
int kda_cuda_swiglu_fwd_f32(KdaCudaCtx *ctx, float *m, const float *a, const float *b, int64_t n);

#ifdef __cplusplus
}
#endif
#endif // KDA_HAVE_CUDA
#endif
