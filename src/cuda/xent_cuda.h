// xent_cuda.h - fused LM head + cross-entropy on the GPU over vocabulary chunks (the twin of
// cpu/ops.h xent_fwd/xent_bwd; kda-model.md §5.7, §6.5; FLA's FusedLinearCrossEntropyLoss).
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

#ifdef __cplusplus
}
#endif
#endif // KDA_HAVE_CUDA
#endif
