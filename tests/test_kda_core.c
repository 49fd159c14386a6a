// test_kda_core.c - tests of the fp32 CPU KDA core (src/cpu/kda_*.c): the chunked form against
// the recurrent form (forward and backward), finite-difference gradients of the whole core
// chain (L2 norm, beta sigmoid, gate, recurrence), and structural properties (a token attends
// to itself; a channel-constant gate reduces to Gated DeltaNet's scalar decay).
//
// Metric: kda_case_rel_rms(ref, a) = RMS(a - ref) / RMS(ref), accumulated in double, as FLA's
// assert_close uses (kda-model.md §6.6).
//
// Tolerances and the error each covers: chunked vs recurrent, FORM_TOL 2e-5 rel-RMS: fp32
// rounding of two summation orders (see FORM_TOL below). Formula checks (gate, beta, L2 norm,
// the one-token output) against the same formula in double: 1e-6 absolute for values of
// magnitude <= ~3, 1e-6 (1 + |x|) otherwise (a few fp32 ulps), 1e-5 (1 + |sp|) for the gate,
// whose exp(A_log) softplus reaches ~50 through expf/log1pf. Finite differences of the
// elementwise gate map (h = 1e-2): 2e-3 (1 + |d|), i.e. central-difference truncation
// h^2 f^(3) / 6 ~ 2e-5 plus fp32 noise ~6e-8 |g| / h ~ 2e-5; a wrong factor shows at >= 1e-1.
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"   // defines: kda_malloc, kda_calloc
#include "core/rng.h"     // defines: KdaRng, rng_seed, rng_normal, rng_uniform
#include "cpu/kda_core.h" // defines: KdaDims, KdaGateOpts, kda_*
#include "kda_case.h"     // defines: kda_case_rel_rms, kda_case_max_abs, kda_case_fla_ratio
#include "test.h"

// ---- helpers -------------------------------------------------------------------------------

static int all_finite(const float *a, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(a[i])) return 0;
    return 1;
}

static float *randn(KdaRng *r, size_t n, float std) {
    float *x = kda_malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        x[i] = rng_normal(r, 0.0f, std);
    return x;
}

// A test case: shapes and options.
typedef struct {
    int64_t B, T, H, HV, K, V, chunk;
    int neg_eigval, bounded, init;
    float gate_shift; // added to the raw gate f: > 0 makes decays stronger
} Case;

// Raw (pre-activation) parameters and inputs of the core chain, FLA-like magnitudes:
// A_log = log(U(1, 16)), dt_bias = softplus^-1(dt) with dt log-uniform in [1e-3, 1e-1] (§7).
typedef struct {
    KdaDims d;
    KdaGateOpts gopt;
    int neg;
    size_t nqk, nv, ng, nb, ns;
    float *xq, *xk, *v, *f, *A_log, *dt_bias, *b, *init; // raw inputs
    float *q, *k, *rq, *rk, *g, *beta;                   // derived by the pre-processing ops
} Inputs;

static void inputs_derive(Inputs *in) {
    const KdaDims *d = &in->d;
    kda_l2norm_fwd(in->q, in->rq, in->xq, d->B * d->T * d->H, d->K, 1e-6f);
    kda_l2norm_fwd(in->k, in->rk, in->xk, d->B * d->T * d->H, d->K, 1e-6f);
    kda_gate_fwd(in->g, in->f, in->A_log, in->dt_bias, d->B * d->T, d->HV, d->K, &in->gopt);
    kda_beta_fwd(in->beta, in->b, (int64_t)in->nb, in->neg);
}

static void inputs_make(Inputs *in, const Case *c, uint64_t seed) {
    KdaRng r;
    rng_seed(&r, seed);
    memset(in, 0, sizeof *in);
    in->d = (KdaDims){c->B, c->T, c->H, c->HV, c->K, c->V, 1.0f / sqrtf((float)c->K), c->chunk};
    in->gopt = (KdaGateOpts){c->bounded, -5.0f};
    in->neg = c->neg_eigval;
    in->nqk = (size_t)(c->B * c->T * c->H * c->K);
    in->nv = (size_t)(c->B * c->T * c->HV * c->V);
    in->ng = (size_t)(c->B * c->T * c->HV * c->K);
    in->nb = (size_t)(c->B * c->T * c->HV);
    in->ns = (size_t)(c->B * c->HV * c->K * c->V);
    in->xq = randn(&r, in->nqk, 1.0f);
    in->xk = randn(&r, in->nqk, 1.0f);
    in->v = randn(&r, in->nv, 1.0f);
    in->f = randn(&r, in->ng, 1.0f);
    for (size_t i = 0; i < in->ng; i++)
        in->f[i] += c->gate_shift;
    in->b = randn(&r, in->nb, 1.0f);
    in->init = c->init ? randn(&r, in->ns, 0.5f) : NULL;
    in->A_log = kda_malloc((size_t)c->HV * sizeof(float));
    in->dt_bias = kda_malloc((size_t)(c->HV * c->K) * sizeof(float));
    // The bounded (safe_gate) form initializes A_log = 0; perturb it so dA_log is exercised
    // without saturating the sigmoid (a saturated gate has ~0 gradient and tests nothing).
    for (int64_t j = 0; j < c->HV; j++)
        in->A_log[j] =
            c->bounded ? rng_normal(&r, 0.0f, 0.3f) : (float)log(1.0 + 15.0 * rng_uniform(&r));
    for (int64_t i = 0; i < c->HV * c->K; i++) {
        double dt = exp(log(1e-3) + (log(1e-1) - log(1e-3)) * rng_uniform(&r));
        in->dt_bias[i] = (float)(dt + log(-expm1(-dt)));
    }
    in->q = kda_malloc(in->nqk * sizeof(float));
    in->k = kda_malloc(in->nqk * sizeof(float));
    in->rq = kda_malloc((size_t)(c->B * c->T * c->H) * sizeof(float));
    in->rk = kda_malloc((size_t)(c->B * c->T * c->H) * sizeof(float));
    in->g = kda_malloc(in->ng * sizeof(float));
    in->beta = kda_malloc(in->nb * sizeof(float));
    inputs_derive(in);
}

static void inputs_free(Inputs *in) {
    float *p[] = {in->xq,   in->xk, in->v, in->f,  in->A_log, in->dt_bias, in->b,
                  in->init, in->q,  in->k, in->rq, in->rk,    in->g,       in->beta};
    for (size_t i = 0; i < sizeof p / sizeof *p; i++)
        free(p[i]);
}

// Outputs and gradients of one form of the core.
typedef struct {
    float *o, *fin, *dq, *dk, *dv, *dg, *dbeta, *dinit;
} Result;

typedef void (*FwdFn)(float *, float *, const float *, const float *, const float *, const float *,
                      const float *, const float *, const KdaDims *);
typedef void (*BwdFn)(float *, float *, float *, float *, float *, float *, const float *,
                      const float *, const float *, const float *, const float *, const float *,
                      const float *, const float *, const KdaDims *);

static Result run_form(const Inputs *in, FwdFn fwd, BwdFn bwd, const float *dO, const float *dfin) {
    Result r;
    r.o = kda_malloc(in->nv * sizeof(float));
    r.fin = kda_malloc(in->ns * sizeof(float));
    r.dq = kda_malloc(in->nqk * sizeof(float));
    r.dk = kda_malloc(in->nqk * sizeof(float));
    r.dv = kda_malloc(in->nv * sizeof(float));
    r.dg = kda_malloc(in->ng * sizeof(float));
    r.dbeta = kda_malloc(in->nb * sizeof(float));
    r.dinit = kda_malloc(in->ns * sizeof(float));
    fwd(r.o, r.fin, in->q, in->k, in->v, in->g, in->beta, in->init, &in->d);
    if (bwd)
        bwd(r.dq, r.dk, r.dv, r.dg, r.dbeta, r.dinit, dO, dfin, in->q, in->k, in->v, in->g,
            in->beta, in->init, &in->d);
    return r;
}

static void result_free(Result *r) {
    float *p[] = {r->o, r->fin, r->dq, r->dk, r->dv, r->dg, r->dbeta, r->dinit};
    for (size_t i = 0; i < sizeof p / sizeof *p; i++)
        free(p[i]);
}

// ---- chunked == recurrent ------------------------------------------------------------------

// Both forms are fp32 with different association (cumsum + pairwise exponentials and a
// triangular inverse vs a sequential product), so they differ by rounding only: measured
// rel-RMS is ~1e-7..1e-6 (see the printed maxima). Tolerance 2e-5 leaves margin for other
// compilers/targets while any algebra error (wrong sign, missing term) gives O(1e-2..1).
#define FORM_TOL 2e-5

static const char *g_tensor_names[8] = {"o", "final", "dq", "dk", "dv", "dg", "dbeta", "dinit"};

static void compare_forms(const Case *c, uint64_t seed, double worst[8]) {
    Inputs in;
    inputs_make(&in, c, seed);
    KdaRng r;
    rng_seed(&r, seed + 1000);
    // Cases without an initial state also run without a final-state gradient (NULL).
    float *dO = randn(&r, in.nv, 1.0f), *dfin = c->init ? randn(&r, in.ns, 1.0f) : NULL;
    Result a = run_form(&in, kda_recurrent_fwd, kda_recurrent_bwd, dO, dfin);
    Result b = run_form(&in, kda_chunk_fwd, kda_chunk_bwd, dO, dfin);
    const float *ra[8] = {a.o, a.fin, a.dq, a.dk, a.dv, a.dg, a.dbeta, a.dinit};
    const float *rb[8] = {b.o, b.fin, b.dq, b.dk, b.dv, b.dg, b.dbeta, b.dinit};
    size_t n[8] = {in.nv, in.ns, in.nqk, in.nqk, in.nv, in.ng, in.nb, in.ns};
    for (int i = 0; i < 8; i++) {
        double e = kda_case_rel_rms(ra[i], rb[i], n[i]);
        CHECK_MSG(
            all_finite(rb[i], n[i]) && e <= FORM_TOL,
            "chunk vs recurrent, %s: rel-RMS %.3g (T=%lld H=%lld HV=%lld K=%lld V=%lld C=%lld "
            "neg=%d bounded=%d init=%d)",
            g_tensor_names[i], e, (long long)c->T, (long long)c->H, (long long)c->HV,
            (long long)c->K, (long long)c->V, (long long)c->chunk, c->neg_eigval, c->bounded,
            c->init);
        if (e > worst[i]) worst[i] = e;
    }
    result_free(&a);
    result_free(&b);
    free(dO);
    free(dfin);
    inputs_free(&in);
}

KDA_TEST(kda_chunk_matches_recurrent) {
    const Case cases[] = {
        // B  T    H  HV K   V   C   neg bnd init shift
        {2, 1, 2, 4, 16, 32, 64, 0, 0, 1, 0},   {2, 63, 2, 4, 16, 32, 64, 0, 0, 1, 0},
        {2, 64, 2, 4, 16, 32, 64, 0, 0, 0, 0},  {2, 65, 2, 4, 16, 32, 64, 1, 0, 1, 0},
        {1, 200, 2, 4, 16, 32, 64, 0, 1, 1, 0}, {1, 200, 2, 2, 32, 64, 64, 1, 0, 0, 0},
        {1, 65, 2, 4, 32, 64, 64, 1, 1, 1, 0},  {1, 1, 1, 1, 32, 64, 64, 0, 0, 0, 0},
        {2, 37, 1, 2, 16, 32, 16, 1, 0, 1, 0},  {1, 100, 2, 2, 32, 64, 32, 0, 0, 1, 0},
        {1, 130, 1, 1, 16, 32, 64, 0, 0, 1, 2}, // stronger decays
    };
    double worst[8] = {0};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        compare_forms(&cases[i], 17 + i, worst);
    printf("    max rel-RMS chunk vs recurrent:");
    for (int i = 0; i < 8; i++)
        printf(" %s %.2g", g_tensor_names[i], worst[i]);
    printf("\n");
}

// Extreme decays (g down to ~-100 per token, chunk cumsums of ~-6000): exponentials of raw
// cumsums would overflow to inf/NaN; differences stay finite. Outputs must still agree.
KDA_TEST(kda_chunk_strong_decay_finite) {
    Case c = {1, 130, 1, 2, 16, 32, 64, 0, 0, 1, 4.0f};
    Inputs in;
    inputs_make(&in, &c, 5);
    for (size_t i = 0; i < in.ng; i++)
        in.f[i] *= 3.0f;
    for (int64_t j = 0; j < c.HV; j++)
        in.A_log[j] = logf(16.0f);
    inputs_derive(&in);
    float gmin = 0;
    for (size_t i = 0; i < in.ng; i++)
        gmin = fminf(gmin, in.g[i]);
    CHECK(gmin < -50.0f);
    double worst[8] = {0};
    // compare_forms regenerates inputs, so compare directly here.
    KdaRng r;
    rng_seed(&r, 99);
    float *dO = randn(&r, in.nv, 1.0f), *dfin = randn(&r, in.ns, 1.0f);
    Result a = run_form(&in, kda_recurrent_fwd, kda_recurrent_bwd, dO, dfin);
    Result b = run_form(&in, kda_chunk_fwd, kda_chunk_bwd, dO, dfin);
    const float *ra[8] = {a.o, a.fin, a.dq, a.dk, a.dv, a.dg, a.dbeta, a.dinit};
    const float *rb[8] = {b.o, b.fin, b.dq, b.dk, b.dv, b.dg, b.dbeta, b.dinit};
    size_t n[8] = {in.nv, in.ns, in.nqk, in.nqk, in.nv, in.ng, in.nb, in.ns};
    for (int i = 0; i < 8; i++) {
        worst[i] = kda_case_rel_rms(ra[i], rb[i], n[i]);
        CHECK_MSG(all_finite(rb[i], n[i]) && worst[i] <= FORM_TOL, "strong decay %s: %.3g",
                  g_tensor_names[i], worst[i]);
    }
    result_free(&a);
    result_free(&b);
    free(dO);
    free(dfin);
    inputs_free(&in);
}

// Same inputs, 1 thread vs 2 threads: bitwise identical (no thread-order-dependent sums).
KDA_TEST(kda_core_deterministic_across_threads) {
    Case c = {2, 70, 1, 2, 16, 32, 32, 0, 0, 1, 0};
    Inputs in;
    inputs_make(&in, &c, 3);
    KdaRng r;
    rng_seed(&r, 4);
    float *dO = randn(&r, in.nv, 1.0f), *dfin = randn(&r, in.ns, 1.0f);
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    Result a = run_form(&in, kda_chunk_fwd, kda_chunk_bwd, dO, dfin);
    omp_set_num_threads(2);
    Result b = run_form(&in, kda_chunk_fwd, kda_chunk_bwd, dO, dfin);
    omp_set_num_threads(saved);
    CHECK(memcmp(a.o, b.o, in.nv * sizeof(float)) == 0);
    CHECK(memcmp(a.dq, b.dq, in.nqk * sizeof(float)) == 0);
    CHECK(memcmp(a.dg, b.dg, in.ng * sizeof(float)) == 0);
    result_free(&a);
    result_free(&b);
    free(dO);
    free(dfin);
    inputs_free(&in);
}

// Optional outputs: final_state and dinit_state may be NULL without changing the rest.
KDA_TEST(kda_core_optional_outputs) {
    Case c = {1, 40, 1, 1, 16, 32, 16, 0, 0, 1, 0};
    Inputs in;
    inputs_make(&in, &c, 6);
    KdaRng r;
    rng_seed(&r, 7);
    float *dO = randn(&r, in.nv, 1.0f);
    FwdFn fwds[2] = {kda_recurrent_fwd, kda_chunk_fwd};
    BwdFn bwds[2] = {kda_recurrent_bwd, kda_chunk_bwd};
    for (int fi = 0; fi < 2; fi++) {
        Result a = run_form(&in, fwds[fi], bwds[fi], dO, NULL);
        float *o = kda_malloc(in.nv * sizeof(float)), *dq = kda_malloc(in.nqk * sizeof(float));
        float *dk = kda_malloc(in.nqk * sizeof(float)), *dv = kda_malloc(in.nv * sizeof(float));
        float *dg = kda_malloc(in.ng * sizeof(float)), *db = kda_malloc(in.nb * sizeof(float));
        fwds[fi](o, NULL, in.q, in.k, in.v, in.g, in.beta, in.init, &in.d);
        bwds[fi](dq, dk, dv, dg, db, NULL, dO, NULL, in.q, in.k, in.v, in.g, in.beta, in.init,
                 &in.d);
        CHECK(memcmp(o, a.o, in.nv * sizeof(float)) == 0);
        CHECK(memcmp(dq, a.dq, in.nqk * sizeof(float)) == 0);
        CHECK(memcmp(dg, a.dg, in.ng * sizeof(float)) == 0);
        free(o), free(dq), free(dk), free(dv), free(dg), free(db);
        result_free(&a);
    }
    free(dO);
    inputs_free(&in);
}

// ---- finite differences of the whole chain -------------------------------------------------

// loss = sum(o * R) + sum(final * R2), in double, for the raw inputs in `in`.
static double chain_loss(Inputs *in, FwdFn fwd, const float *R, const float *R2) {
    inputs_derive(in);
    float *o = kda_malloc(in->nv * sizeof(float)), *fin = kda_malloc(in->ns * sizeof(float));
    fwd(o, fin, in->q, in->k, in->v, in->g, in->beta, in->init, &in->d);
    double loss = 0.0;
    for (size_t i = 0; i < in->nv; i++)
        loss += (double)o[i] * R[i];
    for (size_t i = 0; i < in->ns; i++)
        loss += (double)fin[i] * R2[i];
    free(o);
    free(fin);
    return loss;
}

// Central differences with step h = 1e-2 on fp32 forwards: truncation error ~h^2/6 |f'''|
// ~ 2e-5 and rounding noise ~1e-7 |loss| / h ~ 1e-5 per element (measured ~1e-5). Per raw
// tensor we require RMS(analytic - fd) <= 2e-3 RMS(fd) + 3e-5 and check that the gradient is
// well above that floor, so a wrong term in any backward formula (error ~ RMS(grad)) fails.
static double g_fd_worst; // largest RMS error / RMS grad seen, printed

static void check_chain_fd(const Case *c, FwdFn fwd, BwdFn bwd, uint64_t seed) {
    Inputs in;
    inputs_make(&in, c, seed);
    KdaRng r;
    rng_seed(&r, seed + 7);
    float *R = randn(&r, in.nv, 1.0f), *R2 = randn(&r, in.ns, 1.0f);
    const KdaDims *d = &in.d;
    int64_t N = d->B * d->T;

    // Analytic gradients: core backward, then gate, beta and L2-norm backward.
    Result res = run_form(&in, fwd, bwd, R, R2);
    float *dxq = kda_malloc(in.nqk * sizeof(float)), *dxk = kda_malloc(in.nqk * sizeof(float));
    float *df = kda_malloc(in.ng * sizeof(float)), *db = kda_malloc(in.nb * sizeof(float));
    float *dA = kda_calloc((size_t)d->HV, sizeof(float));
    float *ddt = kda_calloc((size_t)(d->HV * d->K), sizeof(float));
    kda_l2norm_bwd(dxq, res.dq, in.q, in.rq, N * d->H, d->K);
    kda_l2norm_bwd(dxk, res.dk, in.k, in.rk, N * d->H, d->K);
    kda_gate_bwd(df, dA, ddt, res.dg, in.f, in.A_log, in.dt_bias, N, d->HV, d->K, &in.gopt);
    kda_beta_bwd(db, res.dbeta, in.b, (int64_t)in.nb, in.neg);

    struct {
        const char *name;
        float *x, *grad;
        size_t n;
    } t[] = {{"xq", in.xq, dxq, in.nqk},
             {"xk", in.xk, dxk, in.nqk},
             {"v", in.v, res.dv, in.nv},
             {"f", in.f, df, in.ng},
             {"A_log", in.A_log, dA, (size_t)d->HV},
             {"dt_bias", in.dt_bias, ddt, (size_t)(d->HV * d->K)},
             {"b", in.b, db, in.nb},
             {"init", in.init, res.dinit, in.init ? in.ns : 0}};
    const float h = 1e-2f;
    for (size_t ti = 0; ti < sizeof t / sizeof *t; ti++) {
        float *fd = kda_malloc((t[ti].n + 1) * sizeof(float));
        for (size_t i = 0; i < t[ti].n; i++) {
            float x0 = t[ti].x[i];
            t[ti].x[i] = x0 + h;
            double lp = chain_loss(&in, fwd, R, R2);
            t[ti].x[i] = x0 - h;
            double lm = chain_loss(&in, fwd, R, R2);
            t[ti].x[i] = x0;
            fd[i] = (float)((lp - lm) / ((double)(x0 + h) - (double)(x0 - h)));
        }
        if (t[ti].n) {
            double num = 0, den = 0;
            for (size_t i = 0; i < t[ti].n; i++) {
                num += ((double)t[ti].grad[i] - fd[i]) * ((double)t[ti].grad[i] - fd[i]);
                den += (double)fd[i] * fd[i];
            }
            double err = sqrt(num / t[ti].n), scale = sqrt(den / t[ti].n);
            if (getenv("KDA_FD_DEBUG"))
                for (size_t i = 0; i < t[ti].n; i++)
                    printf("%s[%zu] an %.6g fd %.6g\n", t[ti].name, i, t[ti].grad[i], fd[i]);
            CHECK_MSG(err <= 2e-3 * scale + 3e-5 && scale > 3e-3,
                      "finite differences, d%s: RMS error %.3g, RMS grad %.3g (neg=%d bounded=%d "
                      "C=%lld)",
                      t[ti].name, err, scale, c->neg_eigval, c->bounded, (long long)c->chunk);
            if (err / scale > g_fd_worst) g_fd_worst = err / scale;
        }
        free(fd);
    }
    inputs_derive(&in);
    free(dxq), free(dxk), free(df), free(db), free(dA), free(ddt);
    result_free(&res);
    free(R);
    free(R2);
    inputs_free(&in);
}

KDA_TEST(kda_recurrent_finite_differences) {
    //           B  T  H  HV K  V  C  neg bnd init
    Case plain = {1, 6, 1, 1, 4, 3, 4, 0, 0, 1, 0};
    Case gva = {2, 5, 1, 2, 4, 3, 4, 1, 0, 1, 0};
    Case bounded = {1, 6, 1, 2, 4, 3, 4, 1, 1, 0, 0};
    check_chain_fd(&plain, kda_recurrent_fwd, kda_recurrent_bwd, 1);
    check_chain_fd(&gva, kda_recurrent_fwd, kda_recurrent_bwd, 2);
    check_chain_fd(&bounded, kda_recurrent_fwd, kda_recurrent_bwd, 3);
    printf("    max FD rel-RMS so far: %.2g\n", g_fd_worst);
}

// The chunked form on its own (chunk 4, T = 7: one full and one partial chunk).
KDA_TEST(kda_chunk_finite_differences) {
    Case c = {1, 7, 1, 2, 4, 3, 4, 1, 1, 1, 0};
    Case d = {1, 7, 2, 2, 4, 3, 4, 0, 0, 1, 0};
    check_chain_fd(&c, kda_chunk_fwd, kda_chunk_bwd, 4);
    check_chain_fd(&d, kda_chunk_fwd, kda_chunk_bwd, 5);
    printf("    max FD rel-RMS so far: %.2g\n", g_fd_worst);
}

// Bounded gate without A_log (FLA's optional A_log): g = lb * sigmoid(f + dt_bias).
KDA_TEST(kda_gate_bounded_without_A_log) {
    KdaRng r;
    rng_seed(&r, 8);
    const int64_t N = 3, HV = 2, K = 4, n = N * HV * K;
    float *f = randn(&r, n, 1.0f), *bias = randn(&r, HV * K, 1.0f), *dg = randn(&r, n, 1.0f);
    float g[24], gp[24], gm[24], df[24], ddt[8] = {0};
    KdaGateOpts o = {1, -3.0f};
    kda_gate_fwd(g, f, NULL, bias, N, HV, K, &o);
    for (int64_t i = 0; i < n; i++) {
        float s = 1.0f / (1.0f + expf(-(f[i] + bias[i % (HV * K)])));
        CHECK_NEAR(g[i], -3.0f * s, 1e-6);
    }
    kda_gate_bwd(df, NULL, ddt, dg, f, NULL, bias, N, HV, K, &o);
    for (int64_t i = 0; i < n; i++) { // elementwise map: check each derivative directly
        float x0 = f[i], h = 1e-2f;
        f[i] = x0 + h, kda_gate_fwd(gp, f, NULL, bias, N, HV, K, &o);
        f[i] = x0 - h, kda_gate_fwd(gm, f, NULL, bias, N, HV, K, &o);
        f[i] = x0;
        CHECK_NEAR(df[i], dg[i] * (gp[i] - gm[i]) / (2 * h), 2e-3 * (1 + fabsf(df[i])));
    }
    free(f), free(bias), free(dg);
}

// ---- structure -----------------------------------------------------------------------------

// With zero initial state the first token sees only itself: o_0 = scale (q_0.k_0) beta_0 v_0.
KDA_TEST(kda_first_token_attends_to_itself) {
    Case c = {1, 3, 1, 2, 16, 8, 64, 1, 0, 0, 0};
    Inputs in;
    inputs_make(&in, &c, 11);
    const KdaDims *d = &in.d;
    FwdFn forms[2] = {kda_recurrent_fwd, kda_chunk_fwd};
    for (int fi = 0; fi < 2; fi++) {
        Result res = run_form(&in, forms[fi], NULL, NULL, NULL);
        for (int64_t j = 0; j < d->HV; j++) {
            float qk = 0;
            for (int64_t cc = 0; cc < d->K; cc++)
                qk += in.q[cc] * in.k[cc];
            for (int64_t e = 0; e < d->V; e++) {
                float want = d->scale * qk * in.beta[j] * in.v[j * d->V + e];
                CHECK_NEAR(res.o[j * d->V + e], want, 1e-6 * (1 + fabsf(want)));
            }
        }
        result_free(&res);
    }
    inputs_free(&in);
}

// A gate constant over channels is Gated DeltaNet's scalar decay. Reference written here in
// double in the other arrangement: S_t = alpha_t (I - beta k k^T) S_{t-1} + beta k v^T.
// Tolerance 1e-5: fp32 forms vs a double reference over 150 tokens.
KDA_TEST(kda_scalar_decay_reduces_to_gated_deltanet) {
    Case c = {1, 150, 1, 2, 16, 32, 64, 0, 0, 1, 0};
    Inputs in;
    inputs_make(&in, &c, 12);
    const KdaDims *d = &in.d;
    int64_t K = d->K, V = d->V;
    for (int64_t t = 0; t < d->T; t++)
        for (int64_t j = 0; j < d->HV; j++)
            for (int64_t cc = 1; cc < K; cc++)
                in.g[(t * d->HV + j) * K + cc] = in.g[(t * d->HV + j) * K];
    float *ref = kda_malloc(in.nv * sizeof(float));
    double *S = kda_malloc((size_t)(K * V) * sizeof(double)),
           *kS = kda_malloc((size_t)V * sizeof(double));
    for (int64_t j = 0; j < d->HV; j++) {
        for (int64_t i = 0; i < K * V; i++)
            S[i] = in.init[j * K * V + i];
        for (int64_t t = 0; t < d->T; t++) {
            const float *qt = in.q + t * K, *kt = in.k + t * K, *vt = in.v + (t * d->HV + j) * V;
            double a = exp((double)in.g[(t * d->HV + j) * K]), bt = in.beta[t * d->HV + j];
            for (int64_t e = 0; e < V; e++) {
                kS[e] = 0;
                for (int64_t cc = 0; cc < K; cc++)
                    kS[e] += kt[cc] * S[cc * V + e];
            }
            for (int64_t cc = 0; cc < K; cc++)
                for (int64_t e = 0; e < V; e++)
                    S[cc * V + e] = a * (S[cc * V + e] - bt * kt[cc] * kS[e]) + bt * kt[cc] * vt[e];
            for (int64_t e = 0; e < V; e++) {
                double acc = 0;
                for (int64_t cc = 0; cc < K; cc++)
                    acc += S[cc * V + e] * qt[cc];
                ref[(t * d->HV + j) * V + e] = (float)(d->scale * acc);
            }
        }
    }
    FwdFn forms[2] = {kda_recurrent_fwd, kda_chunk_fwd};
    for (int fi = 0; fi < 2; fi++) {
        Result res = run_form(&in, forms[fi], NULL, NULL, NULL);
        double e = kda_case_rel_rms(ref, res.o, in.nv);
        CHECK_MSG(e <= 1e-5, "form %d vs scalar-decay reference: rel-RMS %.3g", fi, e);
        result_free(&res);
    }
    free(ref), free(S), free(kS);
    inputs_free(&in);
}

// The gate, beta and L2-norm forwards against their formulas (§5.3 steps 6-8).
KDA_TEST(kda_preprocessing_formulas) {
    float f[4] = {-3.0f, 0.5f, 19.0f, 25.0f}, A_log[1] = {0.7f},
          bias[4] = {0.1f, -0.2f, 0.3f, 0.0f};
    float g[4];
    KdaGateOpts plain = {0, 0};
    kda_gate_fwd(g, f, A_log, bias, 1, 1, 4, &plain);
    for (int i = 0; i < 4; i++) {
        double a = (double)f[i] + bias[i], sp = a > 20 ? a : log1p(exp(a));
        CHECK_NEAR(g[i], -exp(0.7) * sp, 1e-5 * (1 + fabs(sp)));
    }
    float b[3] = {-1.0f, 0.0f, 2.0f}, beta[3];
    kda_beta_fwd(beta, b, 3, 1);
    for (int i = 0; i < 3; i++)
        CHECK_NEAR(beta[i], 2.0 / (1.0 + exp(-b[i])), 1e-6);
    float x[3] = {1e-4f, 0.0f, 0.0f}, y[3], rstd;
    kda_l2norm_fwd(y, &rstd, x, 1, 3, 1e-6f); // eps inside the sqrt: tiny vectors stay tiny
    CHECK_NEAR(y[0], 1e-4 / sqrt(1e-8 + 1e-6), 1e-6);
}

// ---- production shape ------------------------------------------------------------------------

// The 300M layer shape at full length (T = 2048, 8 heads): every gradient finite. Speed lives
// in bench/, not here.
KDA_TEST(kda_chunk_production_shape_finite) {
    Case c = {1, 2048, 8, 8, 32, 64, 64, 0, 0, 0, 0};
    Inputs in;
    inputs_make(&in, &c, 21);
    KdaRng r;
    rng_seed(&r, 22);
    float *dO = randn(&r, in.nv, 1.0f);
    Result res = run_form(&in, kda_chunk_fwd, kda_chunk_bwd, dO, NULL);
    CHECK(all_finite(res.dg, in.ng));
    CHECK(all_finite(res.dq, in.nqk) && all_finite(res.dk, in.nqk) && all_finite(res.dv, in.nv));
    result_free(&res);
    free(dO);
    inputs_free(&in);
}

// ---- the metric --------------------------------------------------------------------------------

// kda_case_rel_rms and kda_case_fla_ratio, the rule every float comparison of the suite uses:
// the value on a known pair, the all-zero reference (0 or infinite; FLA's 1e-6 absolute clause
// passes a residue), and a NaN output, which must come back infinite (never NaN: fmax would
// drop it from a worst-of).
KDA_TEST(kda_case_rel_rms_rules) {
    const float ref[3] = {3.0f, 0.0f, 4.0f}, out[3] = {3.0f, 0.0f, 4.5f};
    const float zero[3] = {0}, tiny[3] = {0.0f, 1e-7f, 0.0f}, nan_out[3] = {3.0f, NAN, 4.0f};
    CHECK_NEAR(kda_case_rel_rms(ref, out, 3), 0.1, 1e-12); // sqrt(0.25 / 25)
    CHECK_NEAR(kda_case_max_abs(ref, out, 3), 0.5, 0.0);
    CHECK(kda_case_fla_ratio(ref, out, 3) == kda_case_rel_rms(ref, out, 3));
    CHECK(kda_case_rel_rms(zero, zero, 3) == 0.0 && kda_case_rel_rms(ref, ref, 0) == 0.0);
    CHECK(isinf(kda_case_rel_rms(zero, tiny, 3)));
    CHECK(kda_case_fla_ratio(zero, tiny, 3) == 0.0);
    CHECK(isinf(kda_case_rel_rms(ref, nan_out, 3)) && isinf(kda_case_max_abs(ref, nan_out, 3)));
    CHECK(isinf(kda_case_fla_ratio(ref, nan_out, 3)));
}
