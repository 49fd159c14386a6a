// swiglu.h - SwiGLU on the CPU (kda-model.md §5.6), fp32, forward and backward. The GPU twin:
// cuda/swiglu_cuda.h. Activation gradients OVERWRITE.
#ifndef KDA_CPU_SWIGLU_H
#define KDA_CPU_SWIGLU_H

#include <stdint.h>

// ---- SwiGLU: m = SiLU(a) ⊙ b -------------------------------------------------------------
// a, b, m [n]; da, db [n] overwritten.
void swiglu_fwd(float *m, const float *a, const float *b, int64_t n);
void swiglu_bwd(float *da, float *db, const float *dm, const float *a, const float *b, int64_t n);

#endif
