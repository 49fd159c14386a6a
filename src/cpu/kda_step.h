// kda_step.h - one token of the KDA delta rule for one sequence (decode; kda-model.md §5.3
// step 10, §5.8 Inference): the state is carried, so a token costs O(HV·K·V) whatever its
// position. Same arithmetic as kda_recurrent_fwd on one token.
#ifndef KDA_CPU_KDA_STEP_H
#define KDA_CPU_KDA_STEP_H

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

#endif
