// conv.h - the causal depthwise conv + SiLU (short conv, kda-model.md §5.3 step 2) and plain
// SiLU on the CPU, fp32, forward and backward. The GPU twins: cuda/conv_cuda.h.
//
// Gradient contract (same as llm.c): the weight gradient dw ACCUMULATES (+=); activation
// gradients OVERWRITE. Tensors are row-major fp32, last index fastest.
#ifndef KDA_CPU_CONV_H
#define KDA_CPU_CONV_H

#include <stdint.h>

// ---- causal depthwise conv + SiLU (short conv, §5.3 step 2) --------------------------------
// p [B, T, C] input; w [C, W] (torch [C, 1, W]; tap W-1 = current token); c [B, T, C] the
// pre-activation (saved for backward); y [B, T, C] = SiLU(c). History is zero at t = 0 of
// every row b. W >= 1; T < W is fine.
void conv_silu_fwd(float *y, float *c, const float *p, const float *w, int64_t B, int64_t T,
                   int64_t C, int64_t W);
// dp [B, T, C] overwritten; dw [C, W] accumulates.
void conv_silu_bwd(float *dp, float *dw, const float *dy, const float *p, const float *c,
                   const float *w, int64_t B, int64_t T, int64_t C, int64_t W);
// The use_short_conv = false variant: y = SiLU(x), x, y [n]; dx [n] overwritten.
void silu_fwd(float *y, const float *x, int64_t n);
void silu_bwd(float *dx, const float *dy, const float *x, int64_t n);

#endif
