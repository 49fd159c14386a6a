// ops_common.h - helpers shared by the CPU operator files (norm.c, conv.c, swiglu.c, embed.c,
// xent.c): the OpenMP threshold and the activations. Internal: included by those .c files only.
#ifndef KDA_CPU_OPS_COMMON_H
#define KDA_CPU_OPS_COMMON_H

#include <math.h>

// Loops with less work than this many elements run on one thread (OpenMP start-up and
// barriers cost more than they save on test-size tensors).
#define PAR_MIN 32768

static inline float sigmoidf_(float x) {
    return 1.0f / (1.0f + expf(-x));
}
static inline float silu_(float x) {
    return x * sigmoidf_(x);
}
// d SiLU(x) / dx = σ(x) (1 + x (1 - σ(x)))
static inline float dsilu_(float x) {
    float s = sigmoidf_(x);
    return s * (1.0f + x * (1.0f - s));
}

#endif
