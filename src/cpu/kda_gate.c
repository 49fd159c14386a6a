// kda_gate.c - the per-token pre-processing of the KDA core on the CPU (fp32): the log-decay
// gate (plain and lower-bound forms), the beta sigmoid and the L2 norm of q/k, with their
// backward passes. kda-model.md §5.3 steps 6-8, §5.8, §6.3 steps 8-10.
//
// Contract (see kda_core.h): activation gradients (df, db, dx) are overwritten; parameter
// gradients (dA_log, ddt_bias) accumulate (+=). Sums over tokens run in a fixed order in double,
// so results do not depend on the thread count.
#include <math.h>
#include <stddef.h>

#include "cpu/kda_core.h"          // defines: KdaGateOpts, kda_gate_*, kda_beta_*, kda_l2norm_*
#include "cpu/kda_core_internal.h" // defines: KDA_PAR_MIN

static float sigmoidf_(float x) {
    return 1.0f / (1.0f + expf(-x));
}

// softplus as FLA writes it (§5.3 step 8): identity above 20, ln(1 + e^a) below.
static float softplusf_(float a) {
    return a > 20.0f ? a : log1pf(expf(a));
}

// ---- gate (§5.3 step 8, §5.8 lower_bound) ------------------------------------------------------

void kda_gate_fwd(float *g, const float *f, const float *A_log, const float *dt_bias, int64_t N,
                  int64_t HV, int64_t K, const KdaGateOpts *opt) {
    int bounded = opt && opt->bounded;
#pragma omp parallel for schedule(static) if (N * HV * K >= KDA_PAR_MIN)
    for (int64_t n = 0; n < N; n++) {
        for (int64_t j = 0; j < HV; j++) {
            float A = A_log ? expf(A_log[j]) : 1.0f; // exp(A_log[j]); 1 when A_log is absent
            for (int64_t d = 0; d < K; d++) {
                size_t i = ((size_t)n * HV + j) * K + d;
                float a = f[i] + (dt_bias ? dt_bias[j * K + d] : 0.0f);
                // plain:   g = -exp(A_log) * softplus(f + dt_bias)       in (-inf, 0)
                // bounded: g = lb * sigmoid(exp(A_log) * (f + dt_bias))  in (lb, 0)
                g[i] = bounded ? opt->lower_bound * sigmoidf_(A * a) : -A * softplusf_(a);
            }
        }
    }
}

void kda_gate_bwd(float *df, float *dA_log, float *ddt_bias, const float *dg, const float *f,
                  const float *A_log, const float *dt_bias, int64_t N, int64_t HV, int64_t K,
                  const KdaGateOpts *opt) {
    int bounded = opt && opt->bounded;
    // One value head per iteration: its dA_log and ddt_bias sums are private to it and run over
    // tokens in order, so the result is deterministic.
#pragma omp parallel for schedule(static) if (N * HV * K >= KDA_PAR_MIN)
    for (int64_t j = 0; j < HV; j++) {
        float A = A_log ? expf(A_log[j]) : 1.0f;
        double dA = 0.0;
        for (int64_t d = 0; d < K; d++) {
            double dbias = 0.0;
            for (int64_t n = 0; n < N; n++) {
                size_t i = ((size_t)n * HV + j) * K + d;
                float a = f[i] + (dt_bias ? dt_bias[j * K + d] : 0.0f);
                float dfi;
                if (bounded) {
                    // g = lb * s, s = sigmoid(z), z = A * a:  dg/da = lb * s(1-s) * A and
                    // dg/dA_log = lb * s(1-s) * z = (dg/da) * a   (§6.3 step 8, bounded form)
                    float s = sigmoidf_(A * a);
                    dfi = dg[i] * opt->lower_bound * s * (1.0f - s) * A;
                    dA += (double)dfi * a;
                } else {
                    // g = -A * softplus(a):  dg/da = -A * sigmoid(a) (1 above the threshold)
                    // and dg/dA_log = g, because dA/dA_log = A.
                    float sp_grad = a > 20.0f ? 1.0f : sigmoidf_(a);
                    dfi = -dg[i] * A * sp_grad;
                    dA += (double)dg[i] * (-A * softplusf_(a));
                }
                df[i] = dfi;
                dbias += dfi; // dt_bias enters as f + dt_bias, so its gradient is df
            }
            if (ddt_bias) ddt_bias[j * K + d] += (float)dbias;
        }
        if (dA_log) dA_log[j] += (float)dA;
    }
}

// ---- beta (§5.3 step 7, §5.8 allow_neg_eigval) -------------------------------------------------

void kda_beta_fwd(float *beta, const float *b, int64_t n, int allow_neg_eigval) {
    float s = allow_neg_eigval ? 2.0f : 1.0f; // beta in (0, 2) allows negative eigenvalues
    for (int64_t i = 0; i < n; i++)
        beta[i] = s * sigmoidf_(b[i]);
}

void kda_beta_bwd(float *db, const float *dbeta, const float *b, int64_t n, int allow_neg_eigval) {
    float s = allow_neg_eigval ? 2.0f : 1.0f;
    for (int64_t i = 0; i < n; i++) {
        float sg = sigmoidf_(b[i]);
        db[i] = dbeta[i] * s * sg * (1.0f - sg); // §6.3 step 9
    }
}

// ---- L2 norm (§5.3 step 6, §6.3 step 10) -------------------------------------------------------

void kda_l2norm_fwd(float *y, float *rstd, const float *x, int64_t N, int64_t dim, float eps) {
#pragma omp parallel for schedule(static) if (N * dim >= KDA_PAR_MIN)
    for (int64_t n = 0; n < N; n++) {
        const float *xr = x + n * dim;
        double ss = 0.0;
        for (int64_t i = 0; i < dim; i++)
            ss += (double)xr[i] * xr[i];
        float r = (float)(1.0 / sqrt(ss + eps)); // eps INSIDE the square root
        if (rstd) rstd[n] = r;
        for (int64_t i = 0; i < dim; i++)
            y[n * dim + i] = xr[i] * r;
    }
}

void kda_l2norm_bwd(float *dx, const float *dy, const float *y, const float *rstd, int64_t N,
                    int64_t dim) {
#pragma omp parallel for schedule(static) if (N * dim >= KDA_PAR_MIN)
    for (int64_t n = 0; n < N; n++) {
        const float *dyr = dy + n * dim, *yr = y + n * dim;
        // y = x * r with r = (|x|^2 + eps)^-1/2 gives dy/dx = r (I - y y^T), so
        // dx = r * (dy - (dy . y) y).
        double dot = 0.0;
        for (int64_t i = 0; i < dim; i++)
            dot += (double)dyr[i] * yr[i];
        for (int64_t i = 0; i < dim; i++)
            dx[n * dim + i] = rstd[n] * (dyr[i] - (float)dot * yr[i]);
    }
}
