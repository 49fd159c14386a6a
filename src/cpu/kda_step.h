// kda_step.h - one decode token on the CPU: the KDA delta rule for one sequence (kda-model.md
// §5.3 step 10, §5.8 Inference; the state is carried, so a token costs O(HV·K·V) whatever its
// position; same arithmetic as kda_recurrent_fwd on one token) and a one-row Linear.
#ifndef KDA_CPU_KDA_STEP_H
#define KDA_CPU_KDA_STEP_H

#include <stdint.h>

#include "cpu/kda_core.h" // defines: KdaDims

// Uses d->H, d->HV, d->K, d->V, d->scale (B, T and chunk are ignored: one token).
//   S     [HV, K, V] fp32, S_{t-1} on entry, S_t on exit (math orientation)
//   q, k  [H, K]  L2-normalized
//   v     [HV, V]
//   g     [HV, K] log-decay
//   beta  [HV]    post-sigmoid
//   o     [HV, V] = S_tᵀ (scale · q) per value head (GVA: head j reads q/k head j / (HV/H))
void kda_recurrent_step(float *o, float *S, const float *q, const float *k, const float *v,
                        const float *g, const float *beta, const KdaDims *d);

// y [out] (+)= W [out, in] · x [in] (+ bias [out], may be NULL): gemm_fwd for one row
// (same contract as gemm_fwd(y, x, W, bias, 1, in, out, accumulate)) through cblas_sgemv,
// because sgemm with a single row repacks all of W on every call (70% of the decode time with
// a 128K-vocabulary head). in > 0.
void kda_matvec(float *y, const float *x, const float *W, const float *bias, int64_t in,
                int64_t out, int accumulate);

#endif
