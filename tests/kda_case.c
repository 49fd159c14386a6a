// kda_case.c - random KDA-core inputs for the kernel tests, their CPU references and the tests'
// relative-error checks (see kda_case.h).
#include "kda_case.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h" // defines: CHECK_MSG

#include "core/error.h"   // defines: kda_malloc
#include "core/util.h"    // defines: bf16_to_f32, f32_to_bf16
#include "cpu/kda_core.h" // defines: kda_chunk_fwd, kda_chunk_bwd

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

uint16_t *kda_case_to_bf16(const float *x, int64_t n) {
    uint16_t *b = kda_malloc((size_t)n * sizeof(uint16_t)); // kda_malloc(0): one byte
    for (int64_t i = 0; i < n; i++)
        b[i] = f32_to_bf16(x[i]);
    return b;
}

float *kda_case_from_bf16(const uint16_t *b, int64_t n) {
    float *x = kda_malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        x[i] = bf16_to_f32(b[i]);
    return x;
}

void kda_case_bf16_make(KdaCaseBf16 *f, KdaRng *r, int64_t B, int64_t T, int64_t H, int64_t HV,
                        int64_t K, int64_t V, int64_t chunk, int with_state, float gmax) {
    kda_case_make(&f->c, r, B, T, H, HV, K, V, chunk, with_state);
    if (gmax > 0) kda_case_strong_gate(&f->c, r, gmax);
    f->qb = kda_case_to_bf16(f->c.q, f->c.nqk), f->kb = kda_case_to_bf16(f->c.k, f->c.nqk);
    f->vb = kda_case_to_bf16(f->c.v, f->c.nv), f->dOb = kda_case_to_bf16(f->c.dO, f->c.nv);
}

void kda_case_shape_make(KdaCaseBf16 *f, KdaRng *r, const KdaCaseShape *s, const char *tag) {
    printf("  %sB=%lld T=%lld H=%lld HV=%lld K=%lld V=%lld chunk=%lld state=%d gmax=%g\n", tag,
           (long long)s->B, (long long)s->T, (long long)s->H, (long long)s->HV, (long long)s->K,
           (long long)s->V, (long long)s->C, s->state, (double)s->gmax);
    kda_case_bf16_make(f, r, s->B, s->T, s->H, s->HV, s->K, s->V, s->C, s->state, s->gmax);
}

void kda_case_bf16_free(KdaCaseBf16 *f) {
    kda_case_free(&f->c);
    free(f->qb), free(f->kb), free(f->vb), free(f->dOb);
}

void kda_case_ref_fwd(const KdaCase *c, float **o, float **fs) {
    KdaDims dc = kda_case_cpu_dims(c);
    *o = kda_malloc((size_t)c->nv * 4), *fs = kda_malloc((size_t)c->ns * 4);
    kda_chunk_fwd(*o, *fs, c->q, c->k, c->v, c->g, c->beta, c->S0, &dc);
}

void kda_case_ref_bwd(const KdaCase *c, KdaCaseGrads *ref) {
    KdaDims dc = kda_case_cpu_dims(c);
    ref->dq = kda_malloc((size_t)c->nqk * 4), ref->dk = kda_malloc((size_t)c->nqk * 4);
    ref->dv = kda_malloc((size_t)c->nv * 4), ref->dg = kda_malloc((size_t)c->ng * 4);
    ref->db = kda_malloc((size_t)c->nb * 4), ref->dS0 = kda_malloc((size_t)c->ns * 4);
    kda_chunk_bwd(ref->dq, ref->dk, ref->dv, ref->dg, ref->db, ref->dS0, c->dO, c->dST, c->q, c->k,
                  c->v, c->g, c->beta, c->S0, &dc);
}

static void *poisoned_(int64_t n, size_t size) {
    void *p = kda_malloc((size_t)n * size);
    memset(p, 0xff, (size_t)n * size);
    return p;
}

void kda_case_fwd_poisoned(const KdaCase *c, uint16_t **ob, float **fs) {
    *ob = poisoned_(c->nv, 2), *fs = poisoned_(c->ns, 4);
}

void kda_case_grads_poisoned(const KdaCase *c, KdaCaseGrads *got, uint16_t **dvb) {
    got->dq = poisoned_(c->nqk, 4), got->dk = poisoned_(c->nqk, 4), got->dv = NULL;
    got->dg = poisoned_(c->ng, 4), got->db = poisoned_(c->nb, 4), got->dS0 = poisoned_(c->ns, 4);
    *dvb = poisoned_(c->nv, 2);
}

void kda_case_expect_grads(const char *prefix, const KdaCaseGrads *ref, const KdaCaseGrads *got,
                           const KdaCase *c, double tol_f32, double tol_bf16) {
    const float *r[6] = {ref->dq, ref->dk, ref->dv, ref->dg, ref->db, ref->dS0};
    const float *g[6] = {got->dq, got->dk, got->dv, got->dg, got->db, got->dS0};
    const int64_t n[6] = {c->nqk, c->nqk, c->nv, c->ng, c->nb, c->ns};
    static const char *const names[6] = {"dq", "dk", "dv (bf16)", "dg", "dbeta", "d initial state"};
    for (int i = 0; i < 6; i++) {
        char what[96];
        snprintf(what, sizeof what, "%s %s", prefix, names[i]);
        kda_case_expect(what, r[i], g[i], n[i], i == 2 ? tol_bf16 : tol_f32);
    }
}

void kda_case_grads_free(KdaCaseGrads *g) {
    free(g->dq), free(g->dk), free(g->dv), free(g->dg), free(g->db), free(g->dS0);
    memset(g, 0, sizeof *g);
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
