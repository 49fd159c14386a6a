// kda_gate_cuda.h - the per-token pre-processing of the KDA core on the GPU, the twins of
// cpu/kda_gate.c (cpu/kda_core.h kda_gate_*, kda_beta_*, kda_l2norm_*): the gate with its
// chunk-local cumsum, the beta sigmoid and the L2 norm of q/k heads (kda-model.md §5.3 steps
// 6-8, §6.2 step 2), with the fp32 forwards of the scoring path.
// Dtypes follow the bf16 training flow of kda-model.md §8: the residual stream, norms'
// statistics, β, the gate and its cumsum, parameter gradients are fp32; tensors that are GEMM
// operands (norm outputs, projections, their gradients) are bf16. All math is fp32 (reductions
// over rows or tokens in double where the CPU twin uses double).
// Gradient contract (as cpu/kda_core.h): parameter gradients (dA_log, ddt_bias) ACCUMULATE;
// activation gradients (df, db, dx) are OVERWRITTEN.
// Determinism: every reduction runs in a fixed order that depends only on the shapes (row tiles
// of fixed size, then an ordered sum over tiles): the same inputs give the same bits, on any GPU.
// Every function returns 0, or -1 with the reason in ctx->err; work is queued on ctx->stream.
// Launchers that need scratch use ctx's scratch buffer (kda_cuda_scratch).
#ifndef KDA_CUDA_KDA_GATE_H
#define KDA_CUDA_KDA_GATE_H

#include "cuda/cuda_common.h" // defines: KdaCudaCtx, kda_bf16

#ifdef KDA_HAVE_CUDA
#ifdef __cplusplus
extern "C" {
#endif

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

// Kernel versions (ctx->gate_version; KDA_GATE_V=1 at init selects v1; tests may set the field):
// v1 one thread per column walking the chunk; v2, the default, one block per 128 columns x the
// whole chunks of a row that fit in 64 tokens (kda_gate_cuda.cu's v2 section). v2 takes
// K % 4 == 0, chunk <= 64, f / df 8-byte and the fp32 tensors 16-byte aligned; other calls run
// v1. v2's outputs are not v1's bits (another fp32 addition order in the chunk cumsum and the
// partial sums, a series log1p and a fast division: a few ulp per element; beta's are v1's bits);
// each version is bit-deterministic by shape. v2 with from_cumsum = 1 adds dgcum in segments, not
// in one serial order.

// The model's form of the gate and beta together (one launch with v2, the two above with v1):
// kda_cuda_gate_cumsum_fwd's outputs plus beta [B*T*HV] fp32 = s·σ(b), b [B*T, HV] bf16 (s as
// kda_cuda_beta_fwd).
int kda_cuda_gate_beta_fwd(KdaCudaCtx *ctx, float *gcum, float *g, float *beta, const kda_bf16 *f,
                           const kda_bf16 *b, const float *A_log, const float *dt_bias, int64_t B,
                           int64_t T, int64_t HV, int64_t K, int64_t chunk, int allow_neg_eigval);
// kda_cuda_gate_cumsum_bwd plus beta's backward: db [B*T, ldb] bf16 (columns [0, HV), ldb >= HV,
// overwritten) from dbeta [B*T, HV] fp32 and b (as kda_cuda_beta_bwd_ld). Two launches with v2
// (main, then the ordered finish of dA_log and ddt_bias), four with v1.
int kda_cuda_gate_beta_bwd(KdaCudaCtx *ctx, kda_bf16 *df, float *dA_log, float *ddt_bias,
                           kda_bf16 *db, int64_t ldb, const float *dgrad, const float *dbeta,
                           const kda_bf16 *f, const kda_bf16 *b, const float *A_log,
                           const float *dt_bias, int64_t B, int64_t T, int64_t HV, int64_t K,
                           int64_t chunk, int from_cumsum, int allow_neg_eigval);

// Host twins of the v2 kernels (host pointers; the kernels' per-thread code, threads run one
// after another): the fused launchers' arguments (g, beta, db may be NULL). Single-threaded.
// Return 0, or -1 for shapes v2 does not take (K % 4, chunk > 64) or no memory.
int kda_cuda_gate2_fwd_host(float *gcum, float *g, float *beta, const kda_bf16 *f,
                            const kda_bf16 *b, const float *A_log, const float *dt_bias, int64_t B,
                            int64_t T, int64_t HV, int64_t K, int64_t chunk, int allow_neg_eigval);
int kda_cuda_gate2_bwd_host(kda_bf16 *df, float *dA_log, float *ddt_bias, kda_bf16 *db, int64_t ldb,
                            const float *dgrad, const float *dbeta, const kda_bf16 *f,
                            const kda_bf16 *b, const float *A_log, const float *dt_bias, int64_t B,
                            int64_t T, int64_t HV, int64_t K, int64_t chunk, int from_cumsum,
                            int allow_neg_eigval);

// fp32 forward twin (the scoring path, --precision fp32, model/model_cuda_f32.h): shapes as
// kda_cuda_gate_cumsum_fwd (no g output), all tensors fp32; always v1.
int kda_cuda_gate_cumsum_fwd_f32(KdaCudaCtx *ctx, float *gcum, const float *f, const float *A_log,
                                 const float *dt_bias, int64_t B, int64_t T, int64_t HV, int64_t K,
                                 int64_t chunk);

// ---- beta (§5.3 step 7): beta = s·σ(b), s = 2 if allow_neg_eigval else 1 -----------------
// b [n] bf16 logits -> beta [n] fp32; backward dbeta [n] fp32 -> db [n] bf16.
int kda_cuda_beta_fwd(KdaCudaCtx *ctx, float *beta, const kda_bf16 *b, int64_t n,
                      int allow_neg_eigval);
int kda_cuda_beta_bwd(KdaCudaCtx *ctx, kda_bf16 *db, const float *dbeta, const kda_bf16 *b,
                      int64_t n, int allow_neg_eigval);
// The same over [N, HV] with db's rows at stride ldo (>= HV): db [N, ldo] bf16, columns [0, HV).
int kda_cuda_beta_bwd_ld(KdaCudaCtx *ctx, kda_bf16 *db, int64_t ldo, const float *dbeta,
                         const kda_bf16 *b, int64_t N, int64_t HV, int allow_neg_eigval);

// fp32 forward twin (scoring path): b [n] fp32.
int kda_cuda_beta_fwd_f32(KdaCudaCtx *ctx, float *beta, const float *b, int64_t n,
                          int allow_neg_eigval);

// ---- L2 norm of q/k heads (§5.3 step 6): y = x / sqrt(|x|² + eps) per row of dim ----------
// x, y [N, dim] bf16 (N = tokens·heads); rstd [N] fp32.
int kda_cuda_l2norm_fwd(KdaCudaCtx *ctx, kda_bf16 *y, float *rstd, const kda_bf16 *x, int64_t N,
                        int64_t dim, float eps);
// dy [N, dim] fp32; dx [N, dim] bf16 = rstd (dy - (dy·ŷ) ŷ), ŷ = x·rstd recomputed in fp32.
int kda_cuda_l2norm_bwd(KdaCudaCtx *ctx, kda_bf16 *dx, const float *dy, const kda_bf16 *x,
                        const float *rstd, int64_t N, int64_t dim);

// fp32 forward twin (scoring path): x, y [N, dim] fp32.
int kda_cuda_l2norm_fwd_f32(KdaCudaCtx *ctx, float *y, float *rstd, const float *x, int64_t N,
                            int64_t dim, float eps);

#ifdef __cplusplus
}
#endif
#endif // KDA_HAVE_CUDA
#endif
