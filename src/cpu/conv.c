// conv.c - the causal depthwise conv + SiLU and plain SiLU on the CPU (contracts in conv.h;
// math in kda-model.md §5.3 step 2).
#include "cpu/conv.h"

#include "cpu/ops_common.h" // defines: PAR_MIN, silu_, dsilu_

// ---- causal depthwise conv + SiLU -------------------------------------------------------------

void conv_silu_fwd(float *y, float *c, const float *p, const float *w, int64_t B, int64_t T,
                   int64_t C, int64_t W) {
#pragma omp parallel for collapse(2) schedule(static) if (B * T * C >= PAR_MIN)
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) {
            const float *pb = p + b * T * C;
            float *cr = c + (b * T + t) * C, *yr = y + (b * T + t) * C;
            for (int64_t ch = 0; ch < C; ch++) {
                float acc = 0.0f;
                for (int64_t i = 0; i < W; i++) {
                    int64_t tau = t - (W - 1) + i;
                    if (tau >= 0) acc += w[ch * W + i] * pb[tau * C + ch];
                }
                cr[ch] = acc;
                yr[ch] = silu_(acc);
            }
        }
}

void conv_silu_bwd(float *dp, float *dw, const float *dy, const float *p, const float *c,
                   const float *w, int64_t B, int64_t T, int64_t C, int64_t W) {
    // dc overwrites dp's storage row by row is not possible (dp_τ reads dc at τ..τ+W-1), so
    // parallelize over channels: each channel is an independent 1-D problem.
#pragma omp parallel for schedule(static) if (B * T * C >= PAR_MIN)
    for (int64_t ch = 0; ch < C; ch++) {
        for (int64_t b = 0; b < B; b++) {
            const float *pb = p + b * T * C, *cb = c + b * T * C, *dyb = dy + b * T * C;
            float *dpb = dp + b * T * C;
            for (int64_t tau = 0; tau < T; tau++) {
                float acc = 0.0f;
                for (int64_t i = 0; i < W; i++) {
                    int64_t t = tau + (W - 1) - i;
                    if (t < T) acc += w[ch * W + i] * dyb[t * C + ch] * dsilu_(cb[t * C + ch]);
                }
                dpb[tau * C + ch] = acc;
            }
            for (int64_t i = 0; i < W; i++) {
                float acc = 0.0f;
                for (int64_t t = 0; t < T; t++) {
                    int64_t tau = t - (W - 1) + i;
                    if (tau >= 0)
                        acc += dyb[t * C + ch] * dsilu_(cb[t * C + ch]) * pb[tau * C + ch];
                }
                dw[ch * W + i] += acc;
            }
        }
    }
}

void silu_fwd(float *y, const float *x, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        y[i] = silu_(x[i]);
}

void silu_bwd(float *dx, const float *dy, const float *x, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        dx[i] = dy[i] * dsilu_(x[i]);
}
