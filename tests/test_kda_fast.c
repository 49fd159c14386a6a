// test_kda_fast.c - the chunk-parallel GPU KDA kernels (src/cuda/kda_fast.cu) run on the HOST
// (kda_fast_*_host: the same kernel bodies, one "thread" per block, barriers as no-ops) against
// the CPU reference kda_chunk_fwd / kda_chunk_bwd. This runs in the CPU suite of every CUDA
// build (CI has nvcc but no GPU): it checks the algorithm, the shared-memory carving and all index
// arithmetic of the kernels before they ever reach a GPU. What it cannot see - races between
// threads, device-only code - is left to test_gpu_kda.c and compute-sanitizer on the GPU.
//
// Inputs as test_gpu_kda.c: q, k L2-normalized then bf16-rounded, v and dO bf16-rounded (the CPU
// gets the same values), g = -exp(N(-2.5, 1.5)), β = σ(N(0, 1)), random S0 / dS_T or none.
// The kernels' chunk (8, 16 or 32) differs from the CPU's 64 on purpose: the chunked form is exact
// for any chunk, so agreement also checks that nothing depends on the chunk size.
// Tolerances (rel RMS): o and dv are stored in bf16: 1e-2 (the rounding alone is ~2e-3); fp32
// outputs 2e-5 (the CPU's chunked vs recurrent forms agree to ~1e-6; a wrong term is >= 1e-2).
// The fp32 instantiation (kda_fast_fwd_f32_host, the scoring path) stores o in fp32: 2e-5 there
// too, which a bf16 rounding anywhere on the way (~2e-3) fails.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

#ifdef KDA_HAVE_CUDA

#include "core/rng.h"      // defines: KdaRng, rng_seed
#include "cuda/kda_fast.h" // defines: kda_fast_fwd_host, kda_fast_bwd_host
#include "kda_case.h" // defines: KdaCaseBf16, kda_case_ref_fwd, kda_case_ref_bwd (shared with test_kda_tc.c)

static void check_fwd_(const KdaCaseBf16 *f) {
    const KdaCase *c = &f->c;
    float *o, *fs, *hfs;
    kda_bf16 *ho;
    kda_case_ref_fwd(c, &o, &fs);
    kda_case_fwd_poisoned(c, &ho, &hfs);
    kda_fast_fwd_host(ho, hfs, f->qb, f->kb, f->vb, c->gcum, c->beta, c->S0, &c->d);
    float *hof = kda_case_from_bf16(ho, c->nv);
    kda_case_expect("fwd o (bf16)", o, hof, c->nv, 1e-2);
    kda_case_expect("fwd final state", fs, hfs, c->ns, 2e-5);
    free(o), free(fs), free(hfs), free(ho), free(hof);
}

static void check_bwd_(const KdaCaseBf16 *f) {
    const KdaCase *c = &f->c;
    KdaCaseGrads ref, h;
    kda_bf16 *hv;
    kda_case_ref_bwd(c, &ref);
    kda_case_grads_poisoned(c, &h, &hv);
    kda_fast_bwd_host(h.dq, h.dk, hv, h.dg, h.db, h.dS0, f->dOb, c->dST, f->qb, f->kb, f->vb,
                      c->gcum, c->beta, c->S0, &c->d);
    h.dv = kda_case_from_bf16(hv, c->nv);
    kda_case_expect_grads("bwd", &ref, &h, c, 2e-5, 1e-2);
    kda_case_grads_free(&ref), kda_case_grads_free(&h), free(hv);
}

typedef struct {
    int64_t B, T, H, HV, K, V, C;
    int state;
} Shape;

// T not a multiple of the chunk, a single token, exact multiples, GVA, odd head dims, the
// models' K = 32 / V = 64 with the chunk the GPU picks (32), and chunks 8 and 16.
static const Shape SHAPES[] = {
    {2, 1, 2, 2, 32, 64, 32, 0},   {2, 63, 2, 2, 32, 64, 32, 1},  {1, 64, 2, 2, 32, 64, 32, 0},
    {2, 65, 2, 2, 32, 64, 32, 1},  {1, 130, 1, 2, 16, 20, 16, 1}, {1, 77, 2, 4, 16, 24, 8, 1},
    {1, 40, 1, 1, 64, 128, 32, 1}, {1, 50, 1, 1, 20, 21, 16, 1},
};

static void sweep_(int bwd, uint64_t seed) {
    KdaRng r;
    rng_seed(&r, seed);
    for (size_t i = 0; i < sizeof SHAPES / sizeof SHAPES[0]; i++) {
        const Shape *s = &SHAPES[i];
        printf("  B=%lld T=%lld H=%lld HV=%lld K=%lld V=%lld chunk=%lld state=%d\n",
               (long long)s->B, (long long)s->T, (long long)s->H, (long long)s->HV, (long long)s->K,
               (long long)s->V, (long long)s->C, s->state);
        KdaCaseBf16 c;
        kda_case_bf16_make(&c, &r, s->B, s->T, s->H, s->HV, s->K, s->V, s->C, s->state, 0);
        if (bwd)
            check_bwd_(&c);
        else
            check_fwd_(&c);
        kda_case_bf16_free(&c);
    }
}

KDA_TEST(kda_fast_host_fwd) {
    sweep_(0, 301);
}

// The forward instantiated for fp32 q, k, v, o (kda_fast_fwd_f32, --precision fp32) on the same
// cases: every output fp32, so o gets the fp32 tolerance; o is poisoned (NaN) first.
KDA_TEST(kda_fast_host_fwd_f32) {
    KdaRng r;
    rng_seed(&r, 304);
    for (size_t i = 0; i < sizeof SHAPES / sizeof SHAPES[0]; i++) {
        const Shape *s = &SHAPES[i];
        KdaCaseBf16 f;
        kda_case_bf16_make(&f, &r, s->B, s->T, s->H, s->HV, s->K, s->V, s->C, s->state, 0);
        const KdaCase *c = &f.c;
        float *o, *fs;
        kda_case_ref_fwd(c, &o, &fs);
        float *ho = malloc((size_t)c->nv * 4), *hfs = malloc((size_t)c->ns * 4);
        memset(ho, 0xff, (size_t)c->nv * 4), memset(hfs, 0xff, (size_t)c->ns * 4);
        kda_fast_fwd_f32_host(ho, hfs, c->q, c->k, c->v, c->gcum, c->beta, c->S0, &c->d);
        kda_case_expect("fwd f32 o", o, ho, c->nv, 2e-5);
        kda_case_expect("fwd f32 final state", fs, hfs, c->ns, 2e-5);
        free(o), free(fs), free(ho), free(hfs);
        kda_case_bf16_free(&f);
    }
}

KDA_TEST(kda_fast_host_bwd) {
    sweep_(1, 302);
}

// M0 (kda_fast_fwd_keep / kda_fast_bwd_kept): the forward's kept h and Δ replace the backward's
// state recompute, so every backward output must be bit-identical to the recomputing backward's,
// and the kept forward's o and final state bit-identical to the plain forward's.
static void check_kept_(const KdaCaseBf16 *f) {
    const KdaCase *c = &f->c;
    int64_t nqk = c->nqk, nv = c->nv, ng = c->ng, nb = c->nb, ns = c->ns;
    size_t nk = kda_fast_keep_floats(&c->d);
    float *keep = malloc(nk * 4);
    memset(keep, 0xff, nk * 4); // NaN: every kept value must be written by the forward
    kda_bf16 *o0 = malloc((size_t)nv * 2), *o1 = malloc((size_t)nv * 2);
    float *fs0 = malloc((size_t)ns * 4), *fs1 = malloc((size_t)ns * 4);
    kda_fast_fwd_host(o0, fs0, f->qb, f->kb, f->vb, c->gcum, c->beta, c->S0, &c->d);
    kda_fast_fwd_keep_host(o1, fs1, f->qb, f->kb, f->vb, c->gcum, c->beta, c->S0, &c->d, keep);
    CHECK(!memcmp(o0, o1, (size_t)nv * 2) && !memcmp(fs0, fs1, (size_t)ns * 4));
    float *g[2][5];
    kda_bf16 *dv[2];
    for (int k = 0; k < 2; k++) {
        g[k][0] = malloc((size_t)nqk * 4), g[k][1] = malloc((size_t)nqk * 4);
        g[k][2] = malloc((size_t)ng * 4), g[k][3] = malloc((size_t)nb * 4);
        g[k][4] = malloc((size_t)ns * 4), dv[k] = malloc((size_t)nv * 2);
        kda_fast_bwd_kept_host(g[k][0], g[k][1], dv[k], g[k][2], g[k][3], g[k][4], f->dOb, c->dST,
                               f->qb, f->kb, f->vb, c->gcum, c->beta, c->S0, &c->d,
                               k ? keep : NULL);
    }
    CHECK_MSG(
        !memcmp(g[0][0], g[1][0], (size_t)nqk * 4) && !memcmp(g[0][1], g[1][1], (size_t)nqk * 4) &&
            !memcmp(g[0][2], g[1][2], (size_t)ng * 4) &&
            !memcmp(g[0][3], g[1][3], (size_t)nb * 4) &&
            !memcmp(g[0][4], g[1][4], (size_t)ns * 4) && !memcmp(dv[0], dv[1], (size_t)nv * 2),
        "kept-state backward differs from the recomputing one");
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < 5; i++)
            free(g[k][i]);
        free(dv[k]);
    }
    free(keep), free(o0), free(o1), free(fs0), free(fs1);
}

KDA_TEST(kda_fast_host_kept_state) {
    KdaRng r;
    rng_seed(&r, 303);
    for (size_t i = 0; i < sizeof SHAPES / sizeof SHAPES[0]; i++) {
        const Shape *s = &SHAPES[i];
        KdaCaseBf16 c;
        kda_case_bf16_make(&c, &r, s->B, s->T, s->H, s->HV, s->K, s->V, s->C, s->state, 0);
        check_kept_(&c);
        kda_case_bf16_free(&c);
    }
}

// The chunk the GPU picks: 32 for the models' heads on an H200-class 227 KB of shared memory,
// smaller for wide heads, 64 (the fallback kernels) when nothing fits.
KDA_TEST(kda_fast_chunk_choice) {
    size_t h200 = 232448;
    CHECK_EQ_INT((int)kda_fast_chunk(32, 64, h200), 32);
    CHECK_EQ_INT((int)kda_fast_chunk(64, 128, h200), 32);
    CHECK_EQ_INT((int)kda_fast_chunk(128, 128, h200), 16);
    CHECK_EQ_INT((int)kda_fast_chunk(32, 64, 16384), 64);
}

#endif
