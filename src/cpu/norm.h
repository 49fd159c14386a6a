// norm.h - RMSNorm and gated RMSNorm on the CPU, fp32, forward and backward (kda-model.md §5.2,
// §5.3 step 11). The GPU twins: cuda/norm_cuda.h.
//
// Gradient contract (same as llm.c): parameter gradients (dw) ACCUMULATE (+=); activation
// gradients OVERWRITE, except rmsnorm_bwd's dx with accumulate = 1 (its input is always the
// residual stream). Tensors are row-major fp32, last index fastest. N is a number of rows
// (tokens, or tokens x heads). Row statistics use double accumulators.
#ifndef KDA_CPU_NORM_H
#define KDA_CPU_NORM_H

#include <stdint.h>

// ---- RMSNorm: y = x · (mean(x²) + eps)^-1/2 ⊙ w -------------------------------------------
// x, y [N, D]; w [D]; rstd [N] saved for backward.
void rmsnorm_fwd(float *y, float *rstd, const float *x, const float *w, int64_t N, int64_t D,
                 float eps);
// dx [N, D] += (accumulate = 1) or = (accumulate = 0) the input gradient; dw [D] += Σ dy ⊙ x̂.
void rmsnorm_bwd(float *dx, float *dw, const float *dy, const float *x, const float *w,
                 const float *rstd, int64_t N, int64_t D, int accumulate);

// ---- gated RMSNorm (o_norm): y = RMSNorm(x; w) ⊙ σ(z), per value head ---------------------
// x, z, y [N, V] with N = tokens·HV (one row per value head); w [V] shared by all heads.
void gnorm_fwd(float *y, float *rstd, const float *x, const float *z, const float *w, int64_t N,
               int64_t V, float eps);
// dx, dz [N, V] overwritten; dw [V] accumulates over tokens and heads.
void gnorm_bwd(float *dx, float *dz, float *dw, const float *dy, const float *x, const float *z,
               const float *w, const float *rstd, int64_t N, int64_t V);

#endif
