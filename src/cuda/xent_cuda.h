// xent_cuda.h - fused LM head + cross-entropy on the GPU over vocabulary chunks (the twin of
// cpu/xent.h xent_fwd/xent_bwd; kda-model.md §5.7, §6.5; FLA's FusedLinearCrossEntropyLoss).
//
// The head is processed in chunks of vocabulary columns for all N rows at once: the chunk's
// logits are one cuBLASLt GEMM (bf16 operands, fp32 accumulate), full-vocabulary logits never
// exist. The forward keeps them in fp32 (chunk/2 columns per pass in the same workspace bytes),
// so lse and the NLL carry no bf16 rounding of the logits; the backward stores them bf16
// ([N, chunk]), as FLA's autocast head, since they feed bf16 GEMMs. Per row an online (max, sum) in
// fp32 carries across chunks; lse = max + log(sum). The backward recomputes each chunk's logits,
// overwrites them IN PLACE with dlogits = (softmax - onehot(target)) · scale (bf16; 0 on ignored
// rows), then dn += dlogits · Wh_chunk (fp32 out) and dWh_chunk += dlogitsᵀ · n (fp32 accumulate).
//
// targets [N] int32: the shifted target of each row, or any negative value (XENT_IGNORE = -100,
// the last position of a sequence) for an ignored row. Valid targets must be < n_vocab (the caller
// validates them). Deterministic: every reduction has a fixed order.
// Pointers handed to cuBLASLt (n, Wh, dWh, ws->logits) should be 256-byte aligned and `chunk` a
// multiple of 128 when n_vocab > chunk, so that every chunk of Wh/dWh stays aligned.
#ifndef KDA_CUDA_XENT_H
#define KDA_CUDA_XENT_H

#include "cuda/cuda_common.h" // defines: KdaCudaCtx, kda_bf16

#ifdef KDA_HAVE_CUDA
#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    kda_bf16 *logits; // [N, chunk] bf16 device workspace (logits, then dlogits in place)
    float *stat;      // [3, N] fp32 device: running max, running sum, target logit
    int64_t chunk;    // vocabulary columns per chunk (>= 1)
} KdaCudaXentWs;

// Chunk width for N rows: the largest multiple of 128 with N·chunk·2 bytes <= budget_bytes, at
// least 128, at most n_vocab rounded up to 128.
int64_t kda_cuda_xent_chunk(int64_t N, int64_t n_vocab, size_t budget_bytes);
// Bytes of the two workspace arrays for N rows and chunk columns (logits, stat).
size_t kda_cuda_xent_logits_bytes(int64_t N, int64_t chunk);
size_t kda_cuda_xent_stat_bytes(int64_t N);

// n [N, D] bf16 (final-norm output), Wh [n_vocab, D] bf16 (head / tied embedding).
// lse [N] fp32 (kept for the backward); nll [N] fp32 = lse - logit[target] on valid rows, 0 on
// ignored rows; loss_sum (device, [1] double) = Σ nll in a fixed order.
int kda_cuda_xent_fwd(KdaCudaCtx *ctx, float *nll, float *lse, double *loss_sum, const kda_bf16 *n,
                      const kda_bf16 *Wh, const int32_t *targets, int64_t N, int64_t D,
                      int64_t n_vocab, const KdaCudaXentWs *ws);
// dn [N, D] fp32 OVERWRITTEN; dWh [n_vocab, D] fp32 ACCUMULATES; scale = 1 / N_valid for the mean
// loss (times any outer factor); lse from kda_cuda_xent_fwd on the same n, Wh.
int kda_cuda_xent_bwd(KdaCudaCtx *ctx, float *dn, float *dWh, const kda_bf16 *n, const kda_bf16 *Wh,
                      const int32_t *targets, const float *lse, int64_t N, int64_t D,
                      int64_t n_vocab, float scale, const KdaCudaXentWs *ws);

// ---- fused classifier over TOKEN chunks (llm.c's fused classifier / a fused linear CE) -------
// For each chunk of `rows` tokens: one GEMM writes the chunk's bf16 logits [rows, n_vocab] (row
// stride ld), one row kernel computes each row's logsumexp and NLL and, in training mode,
// overwrites the logits IN PLACE with dlogits = (softmax - onehot(target)) · scale (bf16; 0 on
// ignored rows); then dn_chunk = dlogits · Wh (fp32, overwritten) and dWh += dlogitsᵀ · n_chunk
// (fp32 accumulate). Logits are never recomputed and never stored in fp32. Loss-only mode (dn
// NULL): no dlogits, no dX/dW GEMMs.
//
// Four row kernels compute the same function (KdaCudaClsWs.row_kernel):
// * KDA_CLS_ROW_CLUSTER (a zeroed workspace's; KDA_CLS_ROW=0 in the model): a cluster of
//   CL = kda_cuda_cls_cluster(n_vocab) blocks per row (4 at 128,256), each holding its slice of the
//   row in shared memory, so the logits are read from memory once and the dlogits written once.
//   Block max m_c (exact), block sum of e^(x_j - m_c) (fp32 expf, each term <= 1, groups of 8 in a
//   fixed fp32 tree, the group sums in double), then M = max m_c and S = Σ s_c e^(m_c - M) in
//   double over the cluster in rank order: S is within ~5 fp32 roundings (~3e-7 relative) of the
//   exact Σ e^(x_j - M) whatever the vocabulary size and the distribution's shape.
// * KDA_CLS_ROW_BLOCK (environment KDA_CLS_ROW=1 in the model; the kernel up to 2026-12-03, and
//   the fp32 scoring head's): one block per row reading it twice; each thread keeps an exact
//   running max m_t (a bf16 value) and a double sum of the fp32 terms e^(x_j - m_t) (rescaled by
//   e^(m_old - m_new) in double when its max grows); the block takes the exact max M of the m_t,
//   rescales each partial by e^(m_t - M) in double and adds them in a fixed tree in double: S
//   within ~2 fp32 roundings (~2.4e-7 relative) of the exact sum, whatever the vocabulary size.
// * KDA_CLS_ROW_PIPE (environment KDA_CLS_ROW=2): the cluster kernel's arithmetic per row (the
//   same function of the slicing and the threads per block: with 256 threads the same bits as
//   KDA_CLS_ROW_CLUSTER, with the default 512 the partition sum's group order differs, within
//   the same ~5 roundings), on a persistent grid: as many clusters as fit at once, each taking
//   every G-th row, each block keeping up to 3 slice buffers and copying the next rows' slices
//   while it reduces and writes the current one (one cluster barrier per row).
// * KDA_CLS_ROW_TRIM (the model's default since 2026-12-03, session 6: 1.646 -> 1.375 ms per
//   8192-row chunk on an H200): KDA_CLS_ROW_CLUSTER's kernel instantiated trimmed, the same bits in
//   fewer instructions: 32-bit indices, no test for the row's end but on its last, partial group,
//   bf16 pairs packed in one conversion, and the cluster combine and log S computed by one thread
//   per block instead of all of them. Unless KDA_FAST_EXP=0 (read at every launch): its sum
//   pass takes the fast exponential (fast_math.cuh, ex2.approx: ~2^-21 relative per term), the
//   same terms in the same order; lse within ~3e-7 of the precise kernel's (docs/perf-log.md).
// Either way lse = M + log S (double, stored fp32) and nll = lse - x_target, so |Δnll| <~ 4e-7 +
// 1 fp32 ulp of lse against exact arithmetic on the same bf16 logits; the dlogits are
// (e^(x_j - lse) - [j = target]) · scale per element (ex2.approx; the same formula in both).
// Against fp32 logits (the legacy forward) each logit also carries its bf16 rounding
// (<= 2^-9 relative): unbiased, it averages out of the mean loss, and the target's rounding
// enters lse and x_target alike when the target dominates the softmax (trained-like, peaked
// rows).
#define KDA_CLS_ROW_CLUSTER 0
#define KDA_CLS_ROW_BLOCK   1
#define KDA_CLS_ROW_PIPE    2
#define KDA_CLS_ROW_TRIM    3
typedef struct {
    kda_bf16 *logits; // [rows, ld] bf16 device workspace (16-byte aligned; 256 for cuBLASLt)
    int64_t rows;     // tokens per chunk (>= 1)
    int64_t ld;       // row stride (elements): n_vocab rounded up to a multiple of 64
    int row_kernel; // KDA_CLS_ROW_CLUSTER (0, the default of a zeroed field), _BLOCK, _PIPE, _TRIM
} KdaCudaClsWs;

// Blocks per row of the cluster row kernel: the fewest of 1, 2, 4, 8 whose slices hold at most
// 4096 groups of 8 logits (64 KB of shared memory per block); 0 when n_vocab > 262,144 (the
// block kernel runs instead).
int kda_cuda_cls_cluster(int64_t n_vocab);
// One row kernel over logits [rows, ld] bf16 (device, 16-byte aligned, ld % 64 == 0, ld >=
// n_vocab), in place when grad != 0 (padding columns >= n_vocab are neither used nor written);
// nll [rows], lse [rows] fp32 written; targets [rows] (negative: ignored row). kernel:
// KDA_CLS_ROW_*; cl (cluster, trimmed and pipelined kernels): blocks per row, 0 =
// kda_cuda_cls_cluster(n_vocab), else 1, 2, 4 or 8 with slices of at most 4096 groups (tests and
// benchmarks pick it; a vocabulary too large for 8 slices runs the block kernel). Returns 0 or -1
// (ctx->err).
int kda_cuda_cls_row_kernel(KdaCudaCtx *ctx, kda_bf16 *logits, float *nll, float *lse,
                            const int32_t *targets, int64_t rows, int64_t n_vocab, int64_t ld,
                            float scale, int grad, int kernel, int cl);

// KDA_CLS_ROW_PIPE with its shape chosen (tests, benchmarks; kda_cuda_cls_row_kernel passes 0s):
// cl blocks per row as above (0: kda_cuda_cls_cluster), nth threads per block (256, 512 or 1024;
// 0: 512), nbuf slice buffers per block (1..3, nbuf · slice bytes within the device's opt-in
// shared memory; 0: the most of 3 that fit), clusters in the persistent grid (0: as many as fit
// on the device at once; any other count takes the rows round-robin: tests force several rows
// per cluster). Arguments as kda_cuda_cls_row_kernel's; a vocabulary too large for 8 slices is
// an error here. The host twin: kda_cuda_cls_rows2_host(nth, cl). Returns 0 or -1 (ctx->err).
int kda_cuda_cls_row_pipe(KdaCudaCtx *ctx, kda_bf16 *logits, float *nll, float *lse,
                          const int32_t *targets, int64_t rows, int64_t n_vocab, int64_t ld,
                          float scale, int grad, int cl, int nth, int nbuf, int clusters);

int64_t kda_cuda_cls_ld(int64_t n_vocab);
// Tokens per chunk for N rows: the fewest chunks whose [rows, ld] bf16 logits fit
// budget_bytes, rows rounded up to a multiple of 128 (at most N; at least 1).
int64_t kda_cuda_cls_rows(int64_t N, int64_t n_vocab, size_t budget_bytes);
size_t kda_cuda_cls_bytes(int64_t rows, int64_t n_vocab);

// n [N, D] bf16 (final-norm output), Wh [n_vocab, D] bf16, targets [N] (negative: ignored).
// nll [N], lse [N] fp32 written; loss_sum (device double) = Σ nll in a fixed order.
// dn non-NULL (training): dn [N, D] fp32 OVERWRITTEN with dLoss/dn, dWh [n_vocab, D] fp32
// ACCUMULATES, scale = 1 / N_valid (times any outer factor). dn NULL: loss only (dWh unused).
// ws->logits must be 256-byte aligned; n and Wh should be (cuBLASLt).
int kda_cuda_cls_fused(KdaCudaCtx *ctx, float *nll, float *lse, double *loss_sum, float *dn,
                       float *dWh, const kda_bf16 *n, const kda_bf16 *Wh, const int32_t *targets,
                       int64_t N, int64_t D, int64_t n_vocab, float scale, const KdaCudaClsWs *ws);

// The pieces of kda_cuda_cls_fused, for callers that time them apart (the model's profile):
// chunk_fwd = chunk_logits (the logits GEMM of the chunk of rows [r0, r0 + ws->rows) ∩ [0, N)
// into ws->logits) + chunk_rows (ws->row_kernel on them: nll, lse of those rows; grad != 0:
// dlogits in place), chunk_bwd = that chunk's dX (overwrite) and dW (accumulate) GEMMs on the
// dlogits chunk_fwd left, loss_sum = Σ nll [N] into the device double.
int kda_cuda_cls_chunk_logits(KdaCudaCtx *ctx, const kda_bf16 *n, const kda_bf16 *Wh, int64_t N,
                              int64_t D, int64_t n_vocab, int64_t r0, const KdaCudaClsWs *ws);
int kda_cuda_cls_chunk_rows(KdaCudaCtx *ctx, float *nll, float *lse, const int32_t *targets,
                            int64_t N, int64_t n_vocab, float scale, int grad, int64_t r0,
                            const KdaCudaClsWs *ws);
int kda_cuda_cls_chunk_fwd(KdaCudaCtx *ctx, float *nll, float *lse, const kda_bf16 *n,
                           const kda_bf16 *Wh, const int32_t *targets, int64_t N, int64_t D,
                           int64_t n_vocab, float scale, int grad, int64_t r0,
                           const KdaCudaClsWs *ws);
int kda_cuda_cls_chunk_bwd(KdaCudaCtx *ctx, float *dn, float *dWh, const kda_bf16 *n,
                           const kda_bf16 *Wh, int64_t N, int64_t D, int64_t n_vocab, int64_t r0,
                           const KdaCudaClsWs *ws);
int kda_cuda_cls_loss_sum(KdaCudaCtx *ctx, double *loss_sum, const float *nll, int64_t N);

// ---- the fp32 head of the scoring path (--precision fp32, model/model_cuda_f32.h) -------------
// Loss only: per chunk of `rows` tokens one fp32 GEMM (fp32 operands and products, no TF32)
// writes the logits [rows, ld] fp32 (ld = kda_cuda_cls_ld) into `logits`, and the fused
// classifier's block row kernel (KDA_CLS_ROW_BLOCK), instantiated for fp32 logits, turns each
// row into lse and nll. Its partition sum (above: each fp32 term added in double) is within ~2
// fp32 roundings of the exact sum whatever the vocabulary size or the distribution's shape.
// n [N, D] fp32, Wh [n_vocab, D] fp32 (256-byte aligned), logits 256-byte aligned with
// kda_cuda_cls_f32_bytes(rows, n_vocab) bytes; nll, lse [N] fp32; loss_sum as above.
size_t kda_cuda_cls_f32_bytes(int64_t rows, int64_t n_vocab);
int kda_cuda_cls_loss_f32(KdaCudaCtx *ctx, float *nll, float *lse, double *loss_sum, const float *n,
                          const float *Wh, const int32_t *targets, int64_t N, int64_t D,
                          int64_t n_vocab, float *logits, int64_t rows);

#ifdef __cplusplus
}
#endif
#endif // KDA_HAVE_CUDA

// Host emulations of the fused classifier's row kernels (CPU suite; present in CUDA builds): the
// same bodies, logical threads (and blocks) one after another, the same reduction trees.
// logits [rows, ld] bf16 bits, in place as on the device when grad != 0.
// kda_cuda_cls_rows_host: KDA_CLS_ROW_BLOCK with `nthreads` threads per row (device: 512).
#ifdef KDA_HAVE_CUDA
#ifdef __cplusplus
extern "C" {
#endif
void kda_cuda_cls_rows_host(kda_bf16 *logits, float *nll, float *lse, const int32_t *targets,
                            int64_t rows, int64_t n_vocab, int64_t ld, float scale, int grad,
                            int nthreads);
// KDA_CLS_ROW_CLUSTER with cl blocks per row (1, 2, 4, 8) of `nthreads` threads (any >= 1; the
// device runs 256, in warps of 32); also KDA_CLS_ROW_PIPE's twin (the device: 512 by default).
void kda_cuda_cls_rows2_host(kda_bf16 *logits, float *nll, float *lse, const int32_t *targets,
                             int64_t rows, int64_t n_vocab, int64_t ld, float scale, int grad,
                             int nthreads, int cl);
// KDA_CLS_ROW_TRIM's twin, arguments as kda_cuda_cls_rows2_host's (the same bits as it: tests).
void kda_cuda_cls_rows_trim_host(kda_bf16 *logits, float *nll, float *lse, const int32_t *targets,
                                 int64_t rows, int64_t n_vocab, int64_t ld, float scale, int grad,
                                 int nthreads, int cl);
// KDA_CLS_ROW_TRIM with the fast sum pass's twin (the default; KDA_FAST_EXP=0: off; the terms by
// fast_math.cuh's host form of the fast exponential): the device's lse within the tolerance of
// docs/perf-log.md ("Fast exponentials in SiLU and the CE sum pass"), not its bits. Arguments as
// above.
void kda_cuda_cls_rows_trim_fx_host(kda_bf16 *logits, float *nll, float *lse,
                                    const int32_t *targets, int64_t rows, int64_t n_vocab,
                                    int64_t ld, float scale, int grad, int nthreads, int cl);
// The block kernel on fp32 logits [rows, ld] (the scoring path's head; loss only).
void kda_cuda_cls_rows_f32_host(const float *logits, float *nll, float *lse, const int32_t *targets,
                                int64_t rows, int64_t n_vocab, int64_t ld, int nthreads);
#ifdef __cplusplus
}
#endif
#endif
#endif
