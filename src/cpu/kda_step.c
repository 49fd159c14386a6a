// kda_step.c - one decode token of the KDA recurrence (contract in kda_step.h).
//
// Per value head j with state S in R^{K x V}:
//     S~ = Diag(exp(g)) S,  r = S~^T k,  delta = beta (v - r),  S = S~ + k delta^T,
//     o = S^T (scale q)
// through the very function kda_recurrent_fwd uses per token, so a decoded token is the
// per-token reference.
#include "cpu/kda_step.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>

#include "core/error.h"            // defines: kda_malloc, KDA_ASSERT
#include "cpu/kda_core_internal.h" // defines: kda_recurrent_head_step (the reference step)

void kda_recurrent_step(float *o, float *S, const float *q, const float *k, const float *v,
                        const float *g, const float *beta, const KdaDims *d) {
    KDA_ASSERT(d->H > 0 && d->HV % d->H == 0);
    int64_t K = d->K, V = d->V, HV = d->HV, group = d->HV / d->H;
    // Threads only pay off for large states (the 1B model: 16 heads of 128 x 128).
#pragma omp parallel for schedule(static) if (HV * K * V >= (1 << 16))
    for (int64_t j = 0; j < HV; j++) {
        float *scratch = kda_malloc((size_t)(2 * V) * sizeof(float));
        int64_t h = j / group;
        kda_recurrent_head_step(S + j * K * V, scratch, scratch + V, q + h * K, k + h * K,
                                v + j * V, g + j * K, beta[j], d->scale, o + j * V, K, V);
        free(scratch);
    }
}

void kda_matvec(float *y, const float *x, const float *W, const float *bias, int64_t in,
                int64_t out, int accumulate) {
    float beta = accumulate ? 1.0f : 0.0f;
    if (bias) { // not 0 * y: y may be uninitialized (NaN garbage) when overwriting
        for (int64_t o = 0; o < out; o++)
            y[o] = (accumulate ? y[o] : 0.0f) + bias[o];
        beta = 1.0f;
    }
    KDA_ASSERT(in > 0 && in < ((int64_t)1 << 31) && out < ((int64_t)1 << 31));
    cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)out, (int)in, 1.0f, W, (int)in, x, 1, beta, y, 1);
}
