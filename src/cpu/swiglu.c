// swiglu.c - SwiGLU on the CPU (contract in swiglu.h; math in kda-model.md §5.6).
#include "cpu/swiglu.h"

#include "cpu/ops_common.h" // defines: PAR_MIN, silu_, dsilu_

// ---- SwiGLU -----------------------------------------------------------------------------------

void swiglu_fwd(float *m, const float *a, const float *b, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        m[i] = silu_(a[i]) * b[i];
}

void swiglu_bwd(float *da, float *db, const float *dm, const float *a, const float *b, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        float g = dm[i];
        da[i] = g * b[i] * dsilu_(a[i]);
        db[i] = g * silu_(a[i]);
    }
}
