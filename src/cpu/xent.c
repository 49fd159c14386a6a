// xent.c - the fused linear cross-entropy on the CPU (contract in xent.h; math in kda-model.md
// §5.7 and §6.5).
#include "cpu/xent.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "cpu/gemm.h"       // defines: gemm_fwd, gemm_bwd_dx, gemm_bwd_dw
#include "cpu/ops_common.h" // defines: PAR_MIN

#define XENT_WORK (1 << 22) // target size (floats) of the logits chunk [N, Vc]

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

// e^x for x <= 0 (every softmax term is exp(logit - max) or exp(logit - lse)), written so the
// compiler vectorizes it (libm's exp/expf are scalar calls): x = n ln2 + r with |r| <= ln2/2,
// e^r by its Taylor series to r^6 (truncation < 1.3e-7 relative), 2^n through the exponent bits.
// Below -87 the result would be subnormal; it returns 0 there (these terms are < 1e-37 of
// the sum's largest term, which is 1).
static inline float exp_nonpos_(float x) {
    x = x < -87.0f ? -87.0f : x;
    float n = floorf(x * 1.44269504f + 0.5f);
    float r = x - n * 0.693145751953125f - n * 1.428606765330187e-06f; // ln2 in two parts
    float p =
        1.0f +
        r * (1.0f +
             r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720))))));
    union {
        int32_t i;
        float f;
    } two_n = {.i = (int32_t)((uint32_t)((int32_t)(n == n ? n : 0) + 127) << 23)};
    // (NaN x: the scale is 1 and p carries the NaN; a select, so the loop still vectorizes)
    return x <= -87.0f ? 0.0f : p * two_n.f;
}

// Columns per vocabulary chunk for N rows.
static int64_t xent_cols_(int64_t N, int64_t n_vocab) {
    int64_t vc = XENT_WORK / (N > 0 ? N : 1);
    vc = vc < 256 ? 256 : vc;
    return vc < n_vocab ? vc : n_vocab;
}

int64_t xent_work_floats(int64_t N, int64_t n_vocab) {
    return N * xent_cols_(N, n_vocab);
}

// work [N, vc] = n [N, D] · Wh[v0 : v0+vc]ᵀ
static void xent_chunk_logits_(float *work, const float *n, const float *Wh, int64_t N, int64_t D,
                               int64_t v0, int64_t vc) {
    gemm_fwd(work, n, Wh + v0 * D, NULL, N, D, vc, 0);
}

double xent_fwd(float *nll, float *lse, float *logits_out, const float *n, const float *Wh,
                const int32_t *targets, int64_t N, int64_t D, int64_t n_vocab, float *work,
                int64_t work_floats) {
    int64_t VC = work_floats / (N > 0 ? N : 1);
    KDA_ASSERT(VC >= 1);
    double *mx = kda_malloc((size_t)N * sizeof(double)),
           *se = kda_malloc((size_t)N * sizeof(double));
    double *tl = kda_calloc((size_t)N, sizeof(double)); // target logits
    for (int64_t r = 0; r < N; r++)
        mx[r] = -INFINITY, se[r] = 0.0;
    for (int64_t v0 = 0; v0 < n_vocab; v0 += VC) {
        int64_t vc = n_vocab - v0 < VC ? n_vocab - v0 : VC;
        xent_chunk_logits_(work, n, Wh, N, D, v0, vc);
#pragma omp parallel for schedule(static) if (N * vc >= PAR_MIN)
        for (int64_t r = 0; r < N; r++) {
            const float *row = work + r * vc;
            if (logits_out) memcpy(logits_out + r * n_vocab + v0, row, vc * sizeof(float));
            float cm = row[0];
            for (int64_t i = 1; i < vc; i++)
                cm = row[i] > cm ? row[i] : cm;
            double m = mx[r] > cm ? mx[r] : cm;
            // This chunk's sum of <= vc terms, each <= 1, accumulated in double: a float sum
            // drops every term below half an ulp of itself (2^-25 near 1), and a trained
            // model's distribution has ~1e5 such terms, so its logsumexp came out low by up to
            // 2e-4 at 128k vocabulary (tests/test_cpu_ops.c cpu_xent_peaked_vocab_exact).
            float mf = (float)m;
            double cs = 0.0;
#pragma omp simd reduction(+ : cs)
            for (int64_t i = 0; i < vc; i++)
                cs += (double)exp_nonpos_(row[i] - mf);
            se[r] = se[r] * exp(mx[r] - m) + cs; // rescale the running sum to the new max
            mx[r] = m;
            int32_t y = targets[r];
            if (y != XENT_IGNORE && y >= v0 && y < v0 + vc) tl[r] = row[y - v0];
        }
    }
    double total = 0.0;
    for (int64_t r = 0; r < N; r++) {
        double l = mx[r] + log(se[r]);
        if (lse) lse[r] = (float)l;
        double x = targets[r] != XENT_IGNORE ? l - tl[r] : 0.0;
        if (nll) nll[r] = (float)x;
        total += x;
    }
    free(mx), free(se), free(tl);
    return total;
}

void xent_bwd(float *dn, float *dWh, const float *n, const float *Wh, const int32_t *targets,
              const float *lse, int64_t N, int64_t D, int64_t n_vocab, float scale, float *work,
              int64_t work_floats) {
    int64_t VC = work_floats / (N > 0 ? N : 1);
    KDA_ASSERT(VC >= 1);
    for (int64_t v0 = 0; v0 < n_vocab; v0 += VC) {
        int64_t vc = n_vocab - v0 < VC ? n_vocab - v0 : VC;
        xent_chunk_logits_(work, n, Wh, N, D, v0, vc);
#pragma omp parallel for schedule(static) if (N * vc >= PAR_MIN)
        for (int64_t r = 0; r < N; r++) {
            float *row = work + r * vc;
            int32_t y = targets[r];
            if (y == XENT_IGNORE) {
                memset(row, 0, vc * sizeof(float));
                continue;
            }
            float l = lse[r];
#pragma omp simd
            for (int64_t i = 0; i < vc; i++)
                row[i] = exp_nonpos_(row[i] - l) * scale;
            if (y >= v0 && y < v0 + vc) row[y - v0] -= scale;
        }
        gemm_bwd_dx(dn, work, Wh + v0 * D, N, D, vc, v0 > 0);
        gemm_bwd_dw(dWh + v0 * D, NULL, work, n, N, D, vc);
    }
}
