// embed_cuda.h - the GPU twin of cpu/embed.h, the token embedding (kda-model.md §5.1): gather
// forward and scatter-add backward, fp32. The table gradient dE ACCUMULATES, deterministically.
// Every function returns 0, or -1 with the reason in ctx->err; work is queued on ctx->stream.
// Launchers that need scratch use ctx's scratch buffer (kda_cuda_scratch).
#ifndef KDA_CUDA_EMBED_H
#define KDA_CUDA_EMBED_H

#include "cuda/cuda_common.h" // defines: KdaCudaCtx, kda_bf16

#ifdef KDA_HAVE_CUDA
#ifdef __cplusplus
extern "C" {
#endif

// ---- embedding (§5.1) --------------------------------------------------------------------------
// h [N, D] fp32 = E [n_vocab, D] fp32 rows at ids [N] (int32, validated to be in range).
int kda_cuda_embed_fwd(KdaCudaCtx *ctx, float *h, const float *E, const int32_t *ids, int64_t N,
                       int64_t D);
// dE [n_vocab, D] fp32 += dh [N, D] rows at ids, skipping ids == pad_id (-1: none).
// Deterministic: tokens are grouped by id with a stable radix sort and each row is accumulated
// in increasing token order, the same order as the CPU twin (bitwise equal to it).
int kda_cuda_embed_bwd(KdaCudaCtx *ctx, float *dE, const float *dh, const int32_t *ids, int64_t N,
                       int64_t D, int64_t n_vocab, int64_t pad_id);

#ifdef __cplusplus
}
#endif
#endif // KDA_HAVE_CUDA
#endif
