// embed.c - the token embedding on the CPU (contract in embed.h; math in kda-model.md §5.1).
#include "cpu/embed.h"

#include <string.h>

#include "cpu/ops_common.h" // defines: PAR_MIN

// ---- embedding ----------------------------------------------------------------------------------

void embed_fwd(float *h, const float *E, const int32_t *ids, int64_t N, int64_t D) {
#pragma omp parallel for schedule(static) if (N * D >= PAR_MIN)
    for (int64_t n = 0; n < N; n++)
        memcpy(h + n * D, E + (int64_t)ids[n] * D, D * sizeof(float));
}

void embed_bwd(float *dE, const float *dh, const int32_t *ids, int64_t N, int64_t D,
               int64_t pad_id) {
    for (int64_t n = 0; n < N; n++) { // serial: two tokens may share an id
        if (ids[n] == pad_id) continue;
        float *row = dE + (int64_t)ids[n] * D;
        for (int64_t d = 0; d < D; d++)
            row[d] += dh[n * D + d];
    }
}
