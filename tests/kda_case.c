// kda_case.c - random KDA-core inputs for the kernel tests (see kda_case.h).
#include "kda_case.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h" // defines: CHECK_MSG

#include "core/error.h" // defines: kda_malloc
#include "core/util.h"  // defines: bf16_to_f32, f32_to_bf16

static float *randn_(KdaRng *r, int64_t n, float mean, float std) {
    float *x = kda_malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        x[i] = rng_normal(r, mean, std);
    return x;
}

static void bf16_round_(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        x[i] = bf16_to_f32(f32_to_bf16(x[i]));
}

static void l2_normalize_rows_(float *x, int64_t rows, int64_t K) {
    for (int64_t row = 0; row < rows; row++) {
        float *p = x + row * K;
        double ss = 0.0;
        for (int64_t i = 0; i < K; i++)
            ss += (double)p[i] * p[i];
        for (int64_t i = 0; i < K; i++)
            p[i] = (float)(p[i] / sqrt(ss + 1e-6));
    }
}

static void gcum_sum_(KdaCase *c) {
    int64_t B = c->d.B, T = c->d.T, HK = c->d.HV * c->d.K, C = c->d.chunk;
    for (int64_t b = 0; b < B; b++)
        for (int64_t jd = 0; jd < HK; jd++)
            for (int64_t t0 = 0; t0 < T; t0 += C) {
                float acc = 0.0f;
                for (int64_t t = t0; t < T && t < t0 + C; t++) {
                    int64_t i = (b * T + t) * HK + jd;
                    acc += c->g[i];
                    c->gcum[i] = acc;
                }
            }
}

void kda_case_make(KdaCase *c, KdaRng *r, int64_t B, int64_t T, int64_t H, int64_t HV, int64_t K,
                   int64_t V, int64_t C, int with_state) {
    memset(c, 0, sizeof *c);
    c->d = (KdaDims){B, T, H, HV, K, V, 1.0f / sqrtf((float)K), C};
    c->nqk = B * T * H * K, c->nv = B * T * HV * V, c->ng = B * T * HV * K, c->nb = B * T * HV;
    c->ns = B * HV * K * V;
    c->q = randn_(r, c->nqk, 0.0f, 1.0f), c->k = randn_(r, c->nqk, 0.0f, 1.0f);
    l2_normalize_rows_(c->q, B * T * H, K), l2_normalize_rows_(c->k, B * T * H, K);
    bf16_round_(c->q, c->nqk), bf16_round_(c->k, c->nqk);
    c->v = randn_(r, c->nv, 0.0f, 1.0f), bf16_round_(c->v, c->nv);
    c->dO = randn_(r, c->nv, 0.0f, 1.0f), bf16_round_(c->dO, c->nv);
    c->g = randn_(r, c->ng, -2.5f, 1.5f);
    for (int64_t i = 0; i < c->ng; i++)
        c->g[i] = -expf(c->g[i]);
    c->gcum = kda_malloc((size_t)(c->ng > 0 ? c->ng : 1) * sizeof(float));
    gcum_sum_(c);
    c->beta = randn_(r, c->nb, 0.0f, 1.0f);
    for (int64_t i = 0; i < c->nb; i++)
        c->beta[i] = 1.0f / (1.0f + expf(-c->beta[i]));
    if (with_state) {
        c->S0 = randn_(r, c->ns, 0.0f, 0.5f);
        c->dST = randn_(r, c->ns, 0.0f, 0.5f);
    }
}

void kda_case_strong_gate(KdaCase *c, KdaRng *r, float gmax) {
    for (int64_t i = 0; i < c->ng; i++) {
        int64_t t = i / (c->d.HV * c->d.K) % c->d.T;
        c->g[i] = t % 7 == 3 ? -gmax : -gmax * (float)rng_uniform(r) - 1e-3f;
    }
    gcum_sum_(c);
}

void kda_case_free(KdaCase *c) {
    free(c->q), free(c->k), free(c->v), free(c->g), free(c->gcum), free(c->beta), free(c->S0);
    free(c->dO), free(c->dST);
    memset(c, 0, sizeof *c);
}

KdaDims kda_case_cpu_dims(const KdaCase *c) {
    KdaDims d = c->d;
    d.chunk = 64;
    return d;
}

void kda_case_chunk_cumsums(float *gc, float *dg, const float *g, const float *dgc, int64_t B,
                            int64_t T, int64_t HK, int64_t chunk) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t c0 = 0; c0 < T; c0 += chunk)
            for (int64_t jd = 0; jd < HK; jd++) {
                int64_t c1 = c0 + chunk < T ? c0 + chunk : T;
                float acc = 0.0f;
                for (int64_t t = c0; t < c1; t++) {
                    int64_t i = (b * T + t) * HK + jd;
                    acc += g[i];
                    gc[i] = acc;
                }
                acc = 0.0f;
                for (int64_t t = c1 - 1; t >= c0; t--) {
                    int64_t i = (b * T + t) * HK + jd;
                    acc += dgc[i];
                    dg[i] = acc;
                }
            }
}

double kda_case_rel_rms(const float *ref, const float *out, int64_t n) {
    double se = 0.0, sr = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double e = (double)out[i] - ref[i];
        se += e * e, sr += (double)ref[i] * ref[i];
    }
    if (!isfinite(se)) return INFINITY; // a float squared cannot overflow a double sum
    if (sr == 0.0) return se == 0.0 ? 0.0 : INFINITY;
    return sqrt(se / sr);
}

double kda_case_max_abs(const float *ref, const float *out, int64_t n) {
    double m = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)out[i] - ref[i]);
        if (!isfinite(e)) return INFINITY; // a max that kept a NaN would lose it to the next e
        m = e > m ? e : m;
    }
    return m;
}

double kda_case_fla_ratio(const float *ref, const float *out, int64_t n) {
    return kda_case_max_abs(ref, out, n) <= 1e-6 ? 0.0 : kda_case_rel_rms(ref, out, n);
}

void kda_case_expect_rel(const char *what, const float *ref, const float *out, int64_t n,
                         double tol) {
    double rel = kda_case_rel_rms(ref, out, n);
    printf("    %-40s n=%-9lld rel %.2e (tol %.0e)%s\n", what, (long long)n, rel, tol,
           rel <= tol ? "" : "  FAIL");
    CHECK_MSG(rel <= tol, "%s: rel RMS error %.3g > %g", what, rel, tol);
}

void kda_case_expect(const char *what, const float *ref, const float *out, int64_t n, double tol) {
    double rel = kda_case_rel_rms(ref, out, n), maxabs = kda_case_max_abs(ref, out, n);
    int ok = rel <= tol || maxabs <= 1e-6; // kda_case_fla_ratio <= tol, both terms printed
    printf("    %-34s n=%-9lld rel %.2e max|d| %.1e (tol %.0e)%s\n", what, (long long)n, rel,
           maxabs, tol, ok ? "" : "  FAIL");
    CHECK_MSG(ok, "%s: rel RMS error %.3g > %g and max abs error %.3g > 1e-6", what, rel, tol,
              maxabs);
}
