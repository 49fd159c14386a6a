// ops.c - RMSNorm, gated RMSNorm, short conv + SiLU, SwiGLU, embedding and the fused linear
// cross-entropy on the CPU (contracts in ops.h; math in kda-model.md §5 and §6.5).
#include "cpu/ops.h"

#include <math.h>
#include <string.h>

#include "core/error.h"
#include "cpu/gemm.h" // defines: gemm_fwd, gemm_bwd_dx, gemm_bwd_dw

#define XENT_ROWS 32 // rows of logits alive at once in xent_fwd / xent_bwd
// Loops with less work than this many elements run on one thread (OpenMP start-up and
// barriers cost more than they save on test-size tensors).
#define PAR_MIN 32768

static inline float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }
static inline float silu_(float x) { return x * sigmoidf_(x); }
// d SiLU(x) / dx = σ(x) (1 + x (1 - σ(x)))
static inline float dsilu_(float x) {
    float s = sigmoidf_(x);
    return s * (1.0f + x * (1.0f - s));
}

// ---- RMSNorm ----------------------------------------------------------------------------------

void rmsnorm_fwd(float *y, float *rstd, const float *x, const float *w, int64_t N, int64_t D,
                 float eps) {
#pragma omp parallel for schedule(static) if (N * D >= PAR_MIN)
    for (int64_t n = 0; n < N; n++) {
        const float *xr = x + n * D;
        double ss = 0.0;
        for (int64_t d = 0; d < D; d++) ss += (double)xr[d] * xr[d];
        float r = (float)(1.0 / sqrt(ss / (double)D + (double)eps));
        rstd[n] = r;
        for (int64_t d = 0; d < D; d++) y[n * D + d] = xr[d] * r * w[d];
    }
}

void rmsnorm_bwd(float *dx, float *dw, const float *dy, const float *x, const float *w,
                 const float *rstd, int64_t N, int64_t D, int accumulate) {
#pragma omp parallel for schedule(static) if (N * D >= PAR_MIN)
    for (int64_t n = 0; n < N; n++) {
        const float *xr = x + n * D, *dyr = dy + n * D;
        float r = rstd[n];
        double dot = 0.0; // Σ gy ⊙ x̂
        for (int64_t d = 0; d < D; d++) dot += (double)dyr[d] * w[d] * xr[d] * r;
        float m = (float)(dot / (double)D);
        float *dxr = dx + n * D;
        for (int64_t d = 0; d < D; d++) {
            float v = r * (dyr[d] * w[d] - xr[d] * r * m);
            dxr[d] = accumulate ? dxr[d] + v : v;
        }
    }
    for (int64_t n = 0; n < N; n++)
        for (int64_t d = 0; d < D; d++) dw[d] += dy[n * D + d] * x[n * D + d] * rstd[n];
}

// ---- gated RMSNorm ------------------------------------------------------------------------------

void gnorm_fwd(float *y, float *rstd, const float *x, const float *z, const float *w, int64_t N,
               int64_t V, float eps) {
#pragma omp parallel for schedule(static) if (N * V >= PAR_MIN)
    for (int64_t n = 0; n < N; n++) {
        const float *xr = x + n * V;
        double ss = 0.0;
        for (int64_t v = 0; v < V; v++) ss += (double)xr[v] * xr[v];
        float r = (float)(1.0 / sqrt(ss / (double)V + (double)eps));
        rstd[n] = r;
        for (int64_t v = 0; v < V; v++) y[n * V + v] = xr[v] * r * w[v] * sigmoidf_(z[n * V + v]);
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
                    if (tau >= 0) acc += dyb[t * C + ch] * dsilu_(cb[t * C + ch]) * pb[tau * C + ch];
                }
                dw[ch * W + i] += acc;
            }
        }
    }
}

void silu_fwd(float *y, const float *x, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (int64_t i = 0; i < n; i++) y[i] = silu_(x[i]);
}

void silu_bwd(float *dx, const float *dy, const float *x, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (int64_t i = 0; i < n; i++) dx[i] = dy[i] * dsilu_(x[i]);
}

// ---- SwiGLU -----------------------------------------------------------------------------------

void swiglu_fwd(float *m, const float *a, const float *b, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (int64_t i = 0; i < n; i++) m[i] = silu_(a[i]) * b[i];
}

void swiglu_bwd(float *da, float *db, const float *dm, const float *a, const float *b, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        float g = dm[i];
        da[i] = g * b[i] * dsilu_(a[i]);
        db[i] = g * silu_(a[i]);
    }
}

// ---- embedding ----------------------------------------------------------------------------------

void embed_fwd(float *h, const float *E, const int32_t *ids, int64_t N, int64_t D) {
#pragma omp parallel for schedule(static) if (N * D >= PAR_MIN)
    for (int64_t n = 0; n < N; n++) memcpy(h + n * D, E + (int64_t)ids[n] * D, D * sizeof(float));
}

void embed_bwd(float *dE, const float *dh, const int32_t *ids, int64_t N, int64_t D,
               int64_t pad_id) {
    for (int64_t n = 0; n < N; n++) { // serial: two tokens may share an id
        if (ids[n] == pad_id) continue;
        float *row = dE + (int64_t)ids[n] * D;
        for (int64_t d = 0; d < D; d++) row[d] += dh[n * D + d];
    }
}

// ---- cross-entropy ------------------------------------------------------------------------------

int64_t xent_targets(int32_t *targets, const int32_t *labels, int64_t B, int64_t T) {
    int64_t valid = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) {
            int32_t y = t + 1 < T ? labels[b * T + t + 1] : XENT_IGNORE;
            targets[b * T + t] = y;
            valid += y != XENT_IGNORE;
        }
    return valid;
}

int64_t xent_work_floats(int64_t n_vocab) { return (int64_t)XENT_ROWS * n_vocab; }

// logsumexp of one row, max-shifted, sum in double.
static double logsumexp_(const float *row, int64_t n) {
    float mx = row[0];
    for (int64_t i = 1; i < n; i++) mx = row[i] > mx ? row[i] : mx;
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += exp((double)(row[i] - mx));
    return (double)mx + log(s);
}

double xent_fwd(float *nll, float *logits_out, const float *n, const float *Wh,
                const int32_t *targets, int64_t N, int64_t D, int64_t n_vocab, float *work) {
    double total = 0.0;
    for (int64_t r0 = 0; r0 < N; r0 += XENT_ROWS) {
        int64_t rows = N - r0 < XENT_ROWS ? N - r0 : XENT_ROWS;
        gemm_fwd(work, n + r0 * D, Wh, NULL, rows, D, n_vocab, 0);
        if (logits_out) memcpy(logits_out + r0 * n_vocab, work, rows * n_vocab * sizeof(float));
#pragma omp parallel for schedule(static) reduction(+ : total) if (rows * n_vocab >= PAR_MIN)
        for (int64_t r = 0; r < rows; r++) {
            int32_t y = targets[r0 + r];
            double l = 0.0;
            if (y != XENT_IGNORE) {
                const float *row = work + r * n_vocab;
                l = logsumexp_(row, n_vocab) - (double)row[y];
            }
            if (nll) nll[r0 + r] = (float)l;
            total += l;
        }
    }
    return total;
}

void xent_bwd(float *dn, float *dWh, const float *n, const float *Wh, const int32_t *targets,
              int64_t N, int64_t D, int64_t n_vocab, float scale, float *work) {
    for (int64_t r0 = 0; r0 < N; r0 += XENT_ROWS) {
        int64_t rows = N - r0 < XENT_ROWS ? N - r0 : XENT_ROWS;
        gemm_fwd(work, n + r0 * D, Wh, NULL, rows, D, n_vocab, 0);
#pragma omp parallel for schedule(static) if (rows * n_vocab >= PAR_MIN)
        for (int64_t r = 0; r < rows; r++) {
            int32_t y = targets[r0 + r];
            float *row = work + r * n_vocab;
            if (y == XENT_IGNORE) {
                memset(row, 0, n_vocab * sizeof(float));
                continue;
            }
            double lse = logsumexp_(row, n_vocab);
            for (int64_t i = 0; i < n_vocab; i++)
                row[i] = (float)exp((double)row[i] - lse) * scale;
            row[y] -= scale;
        }
        gemm_bwd_dx(dn + r0 * D, work, Wh, rows, D, n_vocab, 0);
        gemm_bwd_dw(dWh, NULL, work, n + r0 * D, rows, D, n_vocab);
    }
}
