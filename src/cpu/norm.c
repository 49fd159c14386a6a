// norm.c - RMSNorm and gated RMSNorm on the CPU (contracts in norm.h; math in kda-model.md §5).
#include "cpu/norm.h"

#include <math.h>

#include "cpu/ops_common.h" // defines: PAR_MIN, sigmoidf_

// ---- RMSNorm ----------------------------------------------------------------------------------

void rmsnorm_fwd(float *y, float *rstd, const float *x, const float *w, int64_t N, int64_t D,
                 float eps) {
#pragma omp parallel for schedule(static) if (N * D >= PAR_MIN)
    for (int64_t n = 0; n < N; n++) {
        const float *xr = x + n * D;
        double ss = 0.0;
        for (int64_t d = 0; d < D; d++)
            ss += (double)xr[d] * xr[d];
        float r = (float)(1.0 / sqrt(ss / (double)D + (double)eps));
        rstd[n] = r;
        for (int64_t d = 0; d < D; d++)
            y[n * D + d] = xr[d] * r * w[d];
    }
}

void rmsnorm_bwd(float *dx, float *dw, const float *dy, const float *x, const float *w,
                 const float *rstd, int64_t N, int64_t D, int accumulate) {
#pragma omp parallel for schedule(static) if (N * D >= PAR_MIN)
    for (int64_t n = 0; n < N; n++) {
        const float *xr = x + n * D, *dyr = dy + n * D;
        float r = rstd[n];
        double dot = 0.0; // Σ gy ⊙ x̂
        for (int64_t d = 0; d < D; d++)
            dot += (double)dyr[d] * w[d] * xr[d] * r;
        float m = (float)(dot / (double)D);
        float *dxr = dx + n * D;
        for (int64_t d = 0; d < D; d++) {
            float v = r * (dyr[d] * w[d] - xr[d] * r * m);
            dxr[d] = accumulate ? dxr[d] + v : v;
        }
    }
    for (int64_t n = 0; n < N; n++)
        for (int64_t d = 0; d < D; d++)
            dw[d] += dy[n * D + d] * x[n * D + d] * rstd[n];
}

// ---- gated RMSNorm ------------------------------------------------------------------------------

void gnorm_fwd(float *y, float *rstd, const float *x, const float *z, const float *w, int64_t N,
               int64_t V, float eps) {
#pragma omp parallel for schedule(static) if (N * V >= PAR_MIN)
    for (int64_t n = 0; n < N; n++) {
        const float *xr = x + n * V;
        double ss = 0.0;
        for (int64_t v = 0; v < V; v++)
            ss += (double)xr[v] * xr[v];
        float r = (float)(1.0 / sqrt(ss / (double)V + (double)eps));
        rstd[n] = r;
        for (int64_t v = 0; v < V; v++)
            y[n * V + v] = xr[v] * r * w[v] * sigmoidf_(z[n * V + v]);
    }
}

void gnorm_bwd(float *dx, float *dz, float *dw, const float *dy, const float *x, const float *z,
               const float *w, const float *rstd, int64_t N, int64_t V) {
#pragma omp parallel for schedule(static) if (N * V >= PAR_MIN)
    for (int64_t n = 0; n < N; n++) {
        const float *xr = x + n * V, *dyr = dy + n * V, *zr = z + n * V;
        float r = rstd[n];
        double dot = 0.0;
        for (int64_t v = 0; v < V; v++) {
            float s = sigmoidf_(zr[v]), xh = xr[v] * r;
            dz[n * V + v] = dyr[v] * xh * w[v] * s * (1.0f - s);
            dot += (double)dyr[v] * s * w[v] * xh;
        }
        float m = (float)(dot / (double)V);
        for (int64_t v = 0; v < V; v++)
            dx[n * V + v] = r * (dyr[v] * sigmoidf_(zr[v]) * w[v] - xr[v] * r * m);
    }
    for (int64_t n = 0; n < N; n++)
        for (int64_t v = 0; v < V; v++)
            dw[v] += dy[n * V + v] * sigmoidf_(z[n * V + v]) * x[n * V + v] * rstd[n];
}
