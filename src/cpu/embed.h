// embed.h - the token embedding on the CPU (kda-model.md §5.1), fp32: gather forward and
// scatter-add backward. The GPU twin: cuda/embed_cuda.h. The table gradient dE ACCUMULATES (+=).
#ifndef KDA_CPU_EMBED_H
#define KDA_CPU_EMBED_H

#include <stdint.h>

// ---- embedding ------------------------------------------------------------------------------
// h [N, D] = E [n_vocab, D] rows at ids [N] (ids already validated to be in range).
void embed_fwd(float *h, const float *E, const int32_t *ids, int64_t N, int64_t D);
// dE [n_vocab, D] += scatter of dh [N, D] rows at ids; rows with ids == pad_id are skipped
// (torch's padding_idx; pass -1 for none).
void embed_bwd(float *dE, const float *dh, const int32_t *ids, int64_t N, int64_t D,
               int64_t pad_id);

#endif
