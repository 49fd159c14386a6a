// test_gpu_kda_tc.c - the tensor-core KDA core (src/cuda/kda_tc.h) on the GPU, against the CPU
// reference (kda_chunk_fwd / kda_chunk_bwd) and the SIMT fast path it replaces (kda_fast.h, the
// GPU oracle), `./build-gpu/kda_test gpu_kda_tc` (or `make test-gpu`).
//
// Inputs: kda_case.h's generator (q, k L2-normalized then bf16, v and dO bf16, g = -exp(N(-2.5,
// 1.5)), β = σ(N(0, 1)), random S0 / dS_T or none), and the strong gate of kda_case_strong_gate
// (g uniform down to -30 nats per token, every 7th token at -30: chunk cumsums of ~-500 nats).
// Outputs are poisoned with NaN before every launch; kda_case_expect fails on any NaN/Inf.
// Tolerances (rel RMS, kda-model.md §6.6): the products run on TF32 tensor cores (operands
// rounded to 10 mantissa bits, 2^-11 relative), so fp32 outputs land at ~2e-4..6e-4 against the
// fp32 reference (the host emulation of the same kernels, tests/test_kda_tc.c, measures this):
// 3e-3 for fp32 outputs (inside FLA's 5e-3 / 8e-3 / 2e-2), 1e-2 for the bf16 outputs o and dv
// (bf16 rounding alone ~2e-3). The same tolerances hold against kda_fast (whose own error is
// ~1e-6). A wrong fragment layout, term or race shows as >= 1e-1 or NaN.
// Both kernel versions (kda_tc_set_version 3 and 4 on the test context; 6, the default since
// 2026-12-04, is v5 bitwise and v5 v4) run every shape (v5, bitwise v4 by construction, runs in
// gpu_kda_tc_v5_matches_v4 and _matches_host; v6, bitwise v5, in gpu_kda_tc_v6_matches_v5 and
// _matches_host); v4 against v3 on the same inputs must agree to fp32 reassociation (TOL_V4_V3 =
// 2e-5: the same TF32 products, other summation orders in the pair sums and the dg scan; the host
// emulation sees at most 1.6e-6, dg under a -30-nat gate), which is what shows a v4 race or a v4
// phase reading a tile too early (>= 1e-3; the host emulation cannot see those).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

#ifdef KDA_HAVE_CUDA

#include "core/rng.h" // defines: KdaRng
#include "cuda/cuda_common.h"
#include "cuda/kda_fast.h" // defines: kda_fast_fwd, kda_fast_bwd, kda_fast_bwd_kept
#include "cuda/kda_tc.h"   // defines: kda_tc_fwd, kda_tc_bwd, kda_tc_fwd_keep, kda_tc_bwd_kept
#include "kda_case.h"      // defines: KdaCaseShape, kda_case_shape_make, kda_case_expect

#define TOL_TC_F32  3e-3
#define TOL_TC_BF16 1e-2
#define TOL_V4_V3   2e-5
// v4's kept backward takes the forward's Akk, whose off-diagonal block rounds L = β KK to TF32
// where v3's backward rounds KK: ~2^-11 on that block (the host emulation sees <= 4e-4 on dv)
#define TOL_V4_V3_KEPT 2e-3
// the device against the host emulation of the same bodies: TF32 rounding is the same; what
// differs is the tensor cores' internal accumulation, __expf against expf and FMA contraction
// (~1e-7 each, 1e-6 after the 64-chunk chains); bf16 outputs can flip an ulp (3.9e-3) where the
// fp32 value sits on a rounding boundary. Measured on the GPU run of 2026-12-03: up to 5.34e-5
// rel-RMS (dbeta; dq, dk, dg and the final state 2.1e-5..2.6e-5) at GVA 4x K16 V24 T97, with v3
// and v4 alike (that shape runs v3's bodies in both), every other shape <= 1.3e-5; bf16 outputs
// <= 2.0e-4. 1e-4 covers it; a race or a wrong fragment gives >= 1e-2.
#define TOL_HOST_F32  1e-4
#define TOL_HOST_BF16 1e-3

static KdaCudaCtx g_tctx;
static int g_tstate; // 0 untried, 1 ready, -1 failed

static KdaCudaCtx *gpu_(void) {
    if (g_tstate == 0) {
        KdaError err = {{0}};
        g_tstate = kda_cuda_device_count() > 0 && kda_cuda_init(&g_tctx, 0, &err) == 0 ? 1 : -1;
        if (g_tstate < 0 && err.msg[0]) fprintf(stderr, "cuda init: %s\n", err.msg);
    }
    CHECK_MSG(g_tstate == 1, "no usable CUDA device (GPU tests need one)");
    return g_tstate == 1 ? &g_tctx : NULL;
}

static void *up_f32_(const float *h, int64_t n) {
    if (!h) return NULL;
    void *d = kda_cuda_alloc(&g_tctx, (size_t)n * 4);
    KDA_ASSERT(d && kda_cuda_put_f32(&g_tctx, d, h, n) == 0);
    return d;
}
static void *up_bf16_(const float *h, int64_t n) {
    void *d = kda_cuda_alloc(&g_tctx, (size_t)n * 2);
    KDA_ASSERT(d && kda_cuda_put_bf16(&g_tctx, d, h, n) == 0);
    return d;
}
static void *poisoned_(size_t bytes) {
    void *d = kda_cuda_alloc(&g_tctx, bytes);
    KDA_ASSERT(d && kda_cuda_poison(&g_tctx, d, bytes) == 0);
    return d;
}
static float *down_f32_(const void *d, int64_t n) {
    float *h = malloc((size_t)n * 4);
    CHECK_MSG(kda_cuda_get_f32(&g_tctx, h, d, n) == 0, "%s", g_tctx.err.msg);
    return h;
}
static float *down_bf16_(const void *d, int64_t n) {
    float *h = malloc((size_t)n * 4);
    CHECK_MSG(kda_cuda_get_bf16(&g_tctx, h, d, n) == 0, "%s", g_tctx.err.msg);
    return h;
}

// A case's inputs on the device.
typedef struct {
    void *q, *k, *v, *gc, *be, *dO, *S0, *dST;
} DevIn;

static DevIn dev_in_(const KdaCase *c) {
    DevIn in = {up_bf16_(c->q, c->nqk),  up_bf16_(c->k, c->nqk),  up_bf16_(c->v, c->nv),
                up_f32_(c->gcum, c->ng), up_f32_(c->beta, c->nb), up_bf16_(c->dO, c->nv),
                up_f32_(c->S0, c->ns),   up_f32_(c->dST, c->ns)};
    return in;
}
static void dev_in_free_(DevIn *in) {
    void *b[] = {in->q, in->k, in->v, in->gc, in->be, in->dO, in->S0, in->dST};
    for (size_t i = 0; i < sizeof b / sizeof *b; i++)
        kda_cuda_release(b[i]);
}

// A shape-table row's case (kda_case_shape_make: the shape printed, the case made, its strong
// gate) and its inputs on the device. Free with dev_in_free_ and kda_case_bf16_free.
static DevIn tc_case_(KdaCaseBf16 *f, KdaRng *r, const KdaCaseShape *s) {
    kda_case_shape_make(f, r, s, "");
    return dev_in_(&f->c);
}

// Forward outputs on the host.
typedef struct {
    float *o, *fs;
} FwdOut;

// which: 0 kda_tc_fwd, 1 kda_tc_fwd_keep (keep != NULL), 2 kda_fast_fwd (the oracle).
static FwdOut gpu_fwd_(const KdaCase *c, const DevIn *in, int which, float *keep) {
    FwdOut r = {NULL, NULL};
    void *og = poisoned_((size_t)c->nv * 2), *fsg = poisoned_((size_t)c->ns * 4);
    int rc = which == 2 ? kda_fast_fwd(&g_tctx, og, fsg, in->q, in->k, in->v, in->gc, in->be,
                                       in->S0, &c->d)
             : which == 1
                 ? kda_tc_fwd_keep(&g_tctx, og, fsg, in->q, in->k, in->v, in->gc, in->be, in->S0,
                                   &c->d, keep)
                 : kda_tc_fwd(&g_tctx, og, fsg, in->q, in->k, in->v, in->gc, in->be, in->S0, &c->d);
    CHECK_MSG(rc == 0, "%s", g_tctx.err.msg);
    if (rc == 0) r.o = down_bf16_(og, c->nv), r.fs = down_f32_(fsg, c->ns);
    kda_cuda_clear_error(&g_tctx);
    kda_cuda_release(og), kda_cuda_release(fsg);
    return r;
}

static void fwd_out_free_(FwdOut *f) {
    free(f->o), free(f->fs);
}

static void expect_fwd_(const char *vs, const FwdOut *ref, const FwdOut *out, const KdaCase *c) {
    char what[64];
    if (!ref->o || !out->o) return;
    snprintf(what, sizeof what, "tc fwd o bf16 vs %s", vs);
    kda_case_expect(what, ref->o, out->o, c->nv, TOL_TC_BF16);
    snprintf(what, sizeof what, "tc fwd final state vs %s", vs);
    kda_case_expect(what, ref->fs, out->fs, c->ns, TOL_TC_F32);
}

static void run_fwd_(const KdaCase *c) {
    FwdOut cpu;
    kda_case_ref_fwd(c, &cpu.o, &cpu.fs);
    DevIn in = dev_in_(c);
    FwdOut tc = gpu_fwd_(c, &in, 0, NULL), fast = gpu_fwd_(c, &in, 2, NULL);
    expect_fwd_("cpu", &cpu, &tc, c);
    expect_fwd_("kda_fast", &fast, &tc, c);
    dev_in_free_(&in);
    fwd_out_free_(&cpu), fwd_out_free_(&tc), fwd_out_free_(&fast);
}

// Backward outputs on the host: dq, dk, dv, dg, dβ, d initial state.
typedef struct {
    float *g[6];
} BwdOut;

static const char *const BWD_NAMES[6] = {"dq", "dk", "dv bf16", "dg", "dbeta", "d initial state"};

static int64_t bwd_n_(const KdaCase *c, int i) {
    const int64_t n[6] = {c->nqk, c->nqk, c->nv, c->ng, c->nb, c->ns};
    return n[i];
}

// which: 0 kda_tc_bwd, 1 kda_tc_bwd_kept, 2 kda_fast_bwd, 3 kda_fast_bwd_kept (kept from
// kda_tc_fwd_keep: the layouts are shared).
static BwdOut gpu_bwd_(const KdaCase *c, const DevIn *in, int which, const float *kept) {
    BwdOut r;
    memset(&r, 0, sizeof r);
    void *d[6];
    for (int i = 0; i < 6; i++)
        d[i] = poisoned_((size_t)bwd_n_(c, i) * (i == 2 ? 2 : 4));
    int rc;
    if (which == 0)
        rc = kda_tc_bwd(&g_tctx, d[0], d[1], d[2], d[3], d[4], d[5], in->dO, in->dST, in->q, in->k,
                        in->v, in->gc, in->be, in->S0, &c->d);
    else if (which == 1)
        rc = kda_tc_bwd_kept(&g_tctx, d[0], d[1], d[2], d[3], d[4], d[5], in->dO, in->dST, in->q,
                             in->k, in->v, in->gc, in->be, in->S0, &c->d, kept);
    else if (which == 2)
        rc = kda_fast_bwd(&g_tctx, d[0], d[1], d[2], d[3], d[4], d[5], in->dO, in->dST, in->q,
                          in->k, in->v, in->gc, in->be, in->S0, &c->d);
    else
        rc = kda_fast_bwd_kept(&g_tctx, d[0], d[1], d[2], d[3], d[4], d[5], in->dO, in->dST, in->q,
                               in->k, in->v, in->gc, in->be, in->S0, &c->d, kept);
    CHECK_MSG(rc == 0, "%s", g_tctx.err.msg);
    for (int i = 0; i < 6 && rc == 0; i++)
        r.g[i] = i == 2 ? down_bf16_(d[i], bwd_n_(c, i)) : down_f32_(d[i], bwd_n_(c, i));
    kda_cuda_clear_error(&g_tctx);
    for (int i = 0; i < 6; i++)
        kda_cuda_release(d[i]);
    return r;
}

static void bwd_out_free_(BwdOut *b) {
    for (int i = 0; i < 6; i++)
        free(b->g[i]);
}

static void expect_bwd_(const char *vs, const BwdOut *ref, const BwdOut *out, const KdaCase *c) {
    for (int i = 0; i < 6; i++) {
        if (!ref->g[i] || !out->g[i]) return;
        char what[64];
        snprintf(what, sizeof what, "tc bwd %s vs %s", BWD_NAMES[i], vs);
        kda_case_expect(what, ref->g[i], out->g[i], bwd_n_(c, i),
                        i == 2 ? TOL_TC_BF16 : TOL_TC_F32);
    }
}

// kept: also the M0 forms (kda_tc_fwd_keep -> kda_tc_bwd_kept, and kda_tc_fwd_keep ->
// kda_fast_bwd_kept: the shared kept layout).
static void run_bwd_(const KdaCase *c, int kept) {
    KdaCaseGrads ref;
    kda_case_ref_bwd(c, &ref);
    BwdOut cpu = {{ref.dq, ref.dk, ref.dv, ref.dg, ref.db, ref.dS0}}; // freed by bwd_out_free_
    DevIn in = dev_in_(c);
    BwdOut tc = gpu_bwd_(c, &in, 0, NULL), fast = gpu_bwd_(c, &in, 2, NULL);
    expect_bwd_("cpu", &cpu, &tc, c);
    expect_bwd_("kda_fast", &fast, &tc, c);
    if (kept) {
        size_t nk = kda_tc_keep_floats(&c->d);
        float *keep = kda_cuda_alloc(&g_tctx, nk * 4);
        KDA_ASSERT(keep && kda_cuda_poison(&g_tctx, keep, nk * 4) == 0);
        FwdOut f = gpu_fwd_(c, &in, 1, keep);
        BwdOut tk = gpu_bwd_(c, &in, 1, keep), fk = gpu_bwd_(c, &in, 3, keep);
        expect_bwd_("cpu (tc kept)", &cpu, &tk, c);
        expect_bwd_("cpu (kda_fast_bwd_kept on tc's keep)", &cpu, &fk, c);
        fwd_out_free_(&f), bwd_out_free_(&tk), bwd_out_free_(&fk);
        kda_cuda_release(keep);
    }
    dev_in_free_(&in);
    bwd_out_free_(&cpu), bwd_out_free_(&tc), bwd_out_free_(&fast);
}

// T = 1, T not a multiple of the chunk (17: a second sub-block of one row; 63, 65, 97, 200),
// exact multiples, T = 2048 and 4096, B·H up to 16 x 8 (the 300M model's micro-batch-16 layer),
// GVA (HV = 2H, 4H), chunk 32 and 16, K/V 16/24, 32/64 (the models'), 128/128; strong gates.
static const KdaCaseShape TC_SHAPES[] = {
    {2, 1, 2, 2, 32, 64, 32, 0, 0},       {2, 17, 2, 2, 32, 64, 32, 1, 0},
    {2, 63, 2, 2, 32, 64, 32, 1, 0},      {1, 64, 1, 1, 32, 64, 32, 0, 0},
    {2, 65, 2, 2, 32, 64, 32, 1, 0},      {1, 2048, 1, 1, 32, 64, 32, 1, 0},
    {1, 4096, 2, 2, 32, 64, 32, 0, 0},    {16, 2048, 8, 8, 32, 64, 32, 0, 0},
    {2, 200, 2, 4, 32, 64, 32, 1, 0},     {1, 97, 1, 4, 16, 24, 32, 1, 0},
    {1, 130, 2, 2, 32, 64, 16, 1, 0},     {1, 130, 1, 1, 128, 128, 16, 1, 0},
    {2, 97, 1, 2, 128, 128, 16, 0, 0},    {2, 2048, 2, 2, 32, 64, 32, 1, 30.0f},
    {1, 300, 2, 4, 32, 64, 32, 1, 30.0f},
};

static void tc_sweep_one_(int mode, uint64_t seed, int small_only) {
    KdaRng r;
    rng_seed(&r, seed);
    for (size_t i = 0; i < sizeof TC_SHAPES / sizeof TC_SHAPES[0]; i++) {
        const KdaCaseShape *s = &TC_SHAPES[i];
        if (small_only && s->B * s->T * s->HV > 1024) continue;
        KdaCaseBf16 cb;
        kda_case_shape_make(&cb, &r, s, "");
        CHECK_MSG(kda_tc_supported(&cb.c.d, g_tctx.info.smem_per_block_optin),
                  "the tensor-core kernels do not take this shape");
        if (mode == 0)
            run_fwd_(&cb.c);
        else
            run_bwd_(&cb.c, s->B * s->T * s->HV <= 8192);
        kda_case_bf16_free(&cb);
    }
}

// mode 0 forward, 1 backward (+ the kept forms); small_only: B·T·HV <= 1024 (compute-sanitizer);
// both versions, v3 then v4, on fresh inputs each.
static void tc_sweep_(int mode, uint64_t seed, int small_only) {
    for (int ver = 3; ver <= 4; ver++) {
        int prev = kda_tc_set_version(&g_tctx, ver);
        printf("  -- kda_tc v%d\n", ver);
        tc_sweep_one_(mode, seed + (uint64_t)ver, small_only);
        kda_tc_set_version(&g_tctx, prev);
    }
}

KDA_TEST_GPU(gpu_kda_tc_fwd) {
    if (!gpu_()) return;
    tc_sweep_(0, 511, 0);
}

KDA_TEST_GPU(gpu_kda_tc_bwd) {
    if (!gpu_()) return;
    tc_sweep_(1, 512, 0);
}

// The kernels copy q, k, v, dO (bf16) and gcum with cp.async when they are 16-byte aligned and
// with plain loads otherwise (the model's activations need not be aligned): both paths must give
// the same bits, in every version (v3 copies only dO with cp.async; v5 and v6 have a third form,
// their compile-time copies, when everything is aligned, and v4's copies otherwise).
KDA_TEST_GPU(gpu_kda_tc_misaligned) {
    if (!gpu_()) return;
    KdaRng r;
    rng_seed(&r, 515);
    KdaCase c;
    kda_case_make(&c, &r, 2, 65, 2, 2, 32, 64, 32, 1);
    DevIn in = dev_in_(&c);
    kda_bf16 *mq = kda_cuda_alloc(&g_tctx, (size_t)(c.nqk + 8) * 2);
    kda_bf16 *mk = kda_cuda_alloc(&g_tctx, (size_t)(c.nqk + 8) * 2);
    kda_bf16 *mv = kda_cuda_alloc(&g_tctx, (size_t)(c.nv + 8) * 2);
    kda_bf16 *mo = kda_cuda_alloc(&g_tctx, (size_t)(c.nv + 8) * 2);
    float *mg = kda_cuda_alloc(&g_tctx, (size_t)(c.ng + 4) * 4);
    KDA_ASSERT(mq && mk && mv && mo && mg);
    // 2 bytes (bf16) and 4 bytes (gcum) past a 256-byte boundary
    KDA_ASSERT(kda_cuda_put_bf16(&g_tctx, mq + 1, c.q, c.nqk) == 0 &&
               kda_cuda_put_bf16(&g_tctx, mk + 1, c.k, c.nqk) == 0 &&
               kda_cuda_put_bf16(&g_tctx, mv + 1, c.v, c.nv) == 0 &&
               kda_cuda_put_bf16(&g_tctx, mo + 1, c.dO, c.nv) == 0 &&
               kda_cuda_put_f32(&g_tctx, mg + 1, c.gcum, c.ng) == 0);
    DevIn mis = in;
    mis.q = mq + 1, mis.k = mk + 1, mis.v = mv + 1, mis.dO = mo + 1, mis.gc = mg + 1;
    for (int ver = 3; ver <= 6; ver++) {
        int prev = kda_tc_set_version(&g_tctx, ver);
        FwdOut fa = gpu_fwd_(&c, &in, 0, NULL), fu = gpu_fwd_(&c, &mis, 0, NULL);
        CHECK_MSG(fa.o && fu.o && !memcmp(fa.o, fu.o, (size_t)c.nv * sizeof(float)),
                  "v%d: o differs between aligned and misaligned inputs", ver);
        BwdOut al = gpu_bwd_(&c, &in, 0, NULL), un = gpu_bwd_(&c, &mis, 0, NULL);
        for (int i = 0; i < 6; i++)
            CHECK_MSG(al.g[i] && un.g[i] &&
                          !memcmp(al.g[i], un.g[i], (size_t)bwd_n_(&c, i) * sizeof(float)),
                      "v%d: %s differs between aligned and misaligned inputs", ver, BWD_NAMES[i]);
        fwd_out_free_(&fa), fwd_out_free_(&fu), bwd_out_free_(&al), bwd_out_free_(&un);
        kda_tc_set_version(&g_tctx, prev);
    }
    kda_cuda_release(mq), kda_cuda_release(mk), kda_cuda_release(mv), kda_cuda_release(mo);
    kda_cuda_release(mg);
    dev_in_free_(&in);
    kda_case_free(&c);
}

// v4 against v3 on the same inputs, plain forms and the kept forward: TOL_V4_V3 rel RMS
// (reassociation; see the file comment), the kept backward TOL_V4_V3_KEPT, at the model's layer
// shape (16 x 2048 x 8), T not a multiple of the chunk, T = 1, GVA 4x with a strong gate, and chunk
// 16 (v4's reverse pass and output, v3's main).
KDA_TEST_GPU(gpu_kda_tc_v4_matches_v3) {
    if (!gpu_()) return;
    static const KdaCaseShape S[] = {{16, 2048, 8, 8, 32, 64, 32, 1, 0},
                                     {2, 65, 2, 2, 32, 64, 32, 1, 0},
                                     {2, 1, 2, 2, 32, 64, 32, 0, 0},
                                     {1, 300, 2, 8, 32, 64, 32, 1, 30.0f},
                                     {1, 130, 2, 2, 32, 64, 16, 1, 0}};
    KdaRng r;
    rng_seed(&r, 516);
    for (size_t i = 0; i < sizeof S / sizeof S[0]; i++) {
        KdaCaseBf16 cb;
        DevIn in = tc_case_(&cb, &r, &S[i]);
        const KdaCase *c = &cb.c;
        size_t nk = kda_tc_keep_floats(&c->d);
        float *keep = kda_cuda_alloc(&g_tctx, nk * 4);
        KDA_ASSERT(keep);
        FwdOut f[2] = {{NULL, NULL}, {NULL, NULL}}, fk[2] = {{NULL, NULL}, {NULL, NULL}};
        BwdOut b[2], bk[2];
        memset(b, 0, sizeof b), memset(bk, 0, sizeof bk);
        for (int v = 0; v < 2; v++) {
            int prev = kda_tc_set_version(&g_tctx, v ? 4 : 3);
            CHECK(g_tctx.tc_version == (v ? 4 : 3));
            f[v] = gpu_fwd_(c, &in, 0, NULL);
            b[v] = gpu_bwd_(c, &in, 0, NULL);
            KDA_ASSERT(kda_cuda_poison(&g_tctx, keep, nk * 4) == 0);
            fk[v] = gpu_fwd_(c, &in, 1, keep);
            bk[v] = gpu_bwd_(c, &in, 1, keep);
            kda_tc_set_version(&g_tctx, prev);
        }
        if (f[0].o && f[1].o) {
            kda_case_expect("v4 vs v3 o", f[0].o, f[1].o, c->nv, TOL_V4_V3);
            kda_case_expect("v4 vs v3 final state", f[0].fs, f[1].fs, c->ns, TOL_V4_V3);
            kda_case_expect("v4 vs v3 o (keep)", fk[0].o, fk[1].o, c->nv, TOL_V4_V3);
        }
        for (int g = 0; g < 6; g++) {
            char what[64];
            if (!b[0].g[g] || !b[1].g[g] || !bk[0].g[g] || !bk[1].g[g]) break;
            snprintf(what, sizeof what, "v4 vs v3 %s", BWD_NAMES[g]);
            kda_case_expect(what, b[0].g[g], b[1].g[g], bwd_n_(c, g), TOL_V4_V3);
            snprintf(what, sizeof what, "v4 vs v3 %s (kept)", BWD_NAMES[g]);
            kda_case_expect(what, bk[0].g[g], bk[1].g[g], bwd_n_(c, g), TOL_V4_V3_KEPT);
        }
        for (int v = 0; v < 2; v++)
            fwd_out_free_(&f[v]), fwd_out_free_(&fk[v]), bwd_out_free_(&b[v]),
                bwd_out_free_(&bk[v]);
        kda_cuda_release(keep);
        dev_in_free_(&in);
        kda_case_bf16_free(&cb);
    }
}

// The device against the host emulation of the same kernel bodies (kda_tc_fwd_host /
// kda_tc_bwd_host), versions 3, 4, 5 and 6, plain and kept forms: the race and fragment-layout
// check of every body (the v4 kept backward included), at TOL_HOST_F32 / TOL_HOST_BF16 (see above).
// Shapes: T not a multiple of the chunk with states, GVA 4x under a -30-nat gate, 64 chunks in
// series, and two dims that run v3's intra and main backward inside v4 (K16 V24, K = V = 128 chunk
// 16).
KDA_TEST_GPU(gpu_kda_tc_matches_host) {
    if (!gpu_()) return;
    static const KdaCaseShape S[] = {{2, 65, 2, 2, 32, 64, 32, 1, 0},
                                     {1, 300, 2, 8, 32, 64, 32, 1, 30.0f},
                                     {1, 2048, 1, 1, 32, 64, 32, 1, 0},
                                     {1, 97, 1, 4, 16, 24, 32, 1, 0},
                                     {1, 130, 1, 1, 128, 128, 16, 1, 0}};
    KdaRng r;
    rng_seed(&r, 517);
    for (size_t i = 0; i < sizeof S / sizeof S[0]; i++) {
        KdaCaseBf16 cb;
        DevIn in = tc_case_(&cb, &r, &S[i]);
        const KdaCase *c = &cb.c;
        const kda_bf16 *qb = cb.qb, *kb = cb.kb, *vb = cb.vb, *dOb = cb.dOb;
        size_t nk = kda_tc_keep_floats(&c->d);
        float *keep = kda_cuda_alloc(&g_tctx, nk * 4), *hkeep = malloc(nk * 4);
        KDA_ASSERT(keep && hkeep);
        for (int ver = 3; ver <= 6; ver++) {
            for (int kept = 0; kept <= 1; kept++) {
                printf("  v%d %s\n", ver, kept ? "kept" : "plain");
                int prev = kda_tc_set_version(&g_tctx, ver);
                // host
                kda_bf16 *ho = malloc((size_t)c->nv * 2), *hdv = malloc((size_t)c->nv * 2);
                float *hfs = malloc((size_t)c->ns * 4);
                BwdOut h;
                for (int g = 0; g < 6; g++)
                    h.g[g] = malloc((size_t)bwd_n_(c, g) * 4);
                memset(hkeep, 0xff, nk * 4);
                kda_tc_fwd_host(ho, hfs, qb, kb, vb, c->gcum, c->beta, c->S0, &c->d,
                                kept ? hkeep : NULL, ver);
                kda_tc_bwd_host(h.g[0], h.g[1], hdv, h.g[3], h.g[4], h.g[5], dOb, c->dST, qb, kb,
                                vb, c->gcum, c->beta, c->S0, &c->d, kept ? hkeep : NULL, ver);
                free(h.g[2]);
                h.g[2] = kda_case_from_bf16(hdv, c->nv);
                float *hof = kda_case_from_bf16(ho, c->nv);
                // device
                KDA_ASSERT(kda_cuda_poison(&g_tctx, keep, nk * 4) == 0);
                FwdOut f = gpu_fwd_(c, &in, kept, kept ? keep : NULL);
                BwdOut b = gpu_bwd_(c, &in, kept, kept ? keep : NULL);
                if (f.o) {
                    kda_case_expect("device vs host o bf16", hof, f.o, c->nv, TOL_HOST_BF16);
                    kda_case_expect("device vs host final state", hfs, f.fs, c->ns, TOL_HOST_F32);
                }
                for (int g = 0; g < 6 && b.g[g]; g++) {
                    char what[64];
                    snprintf(what, sizeof what, "device vs host %s", BWD_NAMES[g]);
                    kda_case_expect(what, h.g[g], b.g[g], bwd_n_(c, g),
                                    g == 2 ? TOL_HOST_BF16 : TOL_HOST_F32);
                }
                fwd_out_free_(&f), bwd_out_free_(&b), bwd_out_free_(&h);
                free(ho), free(hdv), free(hfs), free(hof);
                kda_tc_set_version(&g_tctx, prev);
            }
        }
        kda_cuda_release(keep);
        free(hkeep);
        dev_in_free_(&in);
        kda_case_bf16_free(&cb);
    }
}

// Kernel version vb against va on the device, plain and kept forms, on shapes S: bitwise equal
// outputs (o, the final state, dq, dk, dv, dg, dβ, d initial state); the kept buffer is poisoned
// before each version's forward.
static void tc_versions_bitwise_(int va, int vb, const KdaCaseShape *S, size_t ns, uint64_t seed) {
    KdaRng r;
    rng_seed(&r, seed);
    for (size_t i = 0; i < ns; i++) {
        KdaCaseBf16 cb;
        DevIn in = tc_case_(&cb, &r, &S[i]);
        const KdaCase *c = &cb.c;
        size_t nk = kda_tc_keep_floats(&c->d);
        float *keep = kda_cuda_alloc(&g_tctx, nk * 4);
        KDA_ASSERT(keep);
        for (int kept = 0; kept <= 1; kept++) {
            FwdOut f[2];
            BwdOut b[2];
            for (int v = 0; v < 2; v++) {
                int prev = kda_tc_set_version(&g_tctx, v ? vb : va);
                KDA_ASSERT(kda_cuda_poison(&g_tctx, keep, nk * 4) == 0);
                f[v] = gpu_fwd_(c, &in, kept, kept ? keep : NULL);
                b[v] = gpu_bwd_(c, &in, kept, kept ? keep : NULL);
                kda_tc_set_version(&g_tctx, prev);
            }
            const char *form = kept ? " (kept)" : "";
            if (f[0].o && f[1].o) {
                CHECK_MSG(!memcmp(f[0].o, f[1].o, (size_t)c->nv * 4), "v%d vs v%d o%s", vb, va,
                          form);
                CHECK_MSG(!memcmp(f[0].fs, f[1].fs, (size_t)c->ns * 4), "v%d vs v%d final state%s",
                          vb, va, form);
            }
            for (int g = 0; g < 6 && b[0].g[g] && b[1].g[g]; g++)
                CHECK_MSG(!memcmp(b[0].g[g], b[1].g[g], (size_t)bwd_n_(c, g) * 4),
                          "v%d vs v%d %s%s: not bitwise equal", vb, va, BWD_NAMES[g], form);
            for (int v = 0; v < 2; v++)
                fwd_out_free_(&f[v]), bwd_out_free_(&b[v]);
        }
        kda_cuda_release(keep);
        dev_in_free_(&in);
        kda_case_bf16_free(&cb);
    }
}

// v5 against v4. v5 stores the mma-only operands rounded to TF32 (low 13 mantissa bits cleared)
// and loads them raw, where v4 applies cvt.rna at every load; the two agree bitwise when the mma
// reads only the top 19 bits of a TF32 operand register, which is what the compiler's cvt.rna
// (half an ulp added, the low bits left set) already relies on. A difference here means that
// assumption or a v5 rounding point is wrong (the host test kda_tc_host_v5_matches_v4 checks the
// rounding points). Shapes: the model's layer (16 x 2048 x 8), T not a multiple of the chunk with
// states, T = 1, GVA 4x under a -30-nat gate.
static const KdaCaseShape V5_V4[] = {{16, 2048, 8, 8, 32, 64, 32, 1, 0},
                                     {2, 65, 2, 2, 32, 64, 32, 1, 0},
                                     {2, 1, 2, 2, 32, 64, 32, 0, 0},
                                     {1, 300, 2, 8, 32, 64, 32, 1, 30.0f}};
KDA_TEST_GPU(gpu_kda_tc_v5_matches_v4) {
    if (gpu_()) tc_versions_bitwise_(4, 5, V5_V4, sizeof V5_V4 / sizeof V5_V4[0], 518);
}

// v6 against v5: v6's intra and main backward run a full chunk through bodies with n = C at
// compile time and the partial last chunk through v5's; the same arithmetic in the same order,
// so the bits must be v5's (the host test kda_tc_host_v6_matches_v5 checks the bodies; this one
// the device compilation: unrolled loops, folded guards, and the two instantiations in one
// kernel). Shapes: the model's layer (full chunks only), a partial last chunk of 5 rows (B 2), of
// 6 rows (GVA 4x, -30-nat gate), of 31 rows, T = 1 (B 3).
static const KdaCaseShape V6_V5[] = {{16, 2048, 8, 8, 32, 64, 32, 1, 0},
                                     {2, 37, 2, 2, 32, 64, 32, 1, 0},
                                     {2, 70, 1, 4, 32, 64, 32, 1, 30.0f},
                                     {2, 95, 2, 2, 32, 64, 32, 0, 0},
                                     {3, 1, 2, 2, 32, 64, 32, 1, 0}};
KDA_TEST_GPU(gpu_kda_tc_v6_matches_v5) {
    if (gpu_()) tc_versions_bitwise_(5, 6, V6_V5, sizeof V6_V5 / sizeof V6_V5[0], 519);
}

// The small shapes only, forward and backward: what compute-sanitizer (memcheck, racecheck) runs.
KDA_TEST_GPU(gpu_kda_tc_small) {
    if (!gpu_()) return;
    tc_sweep_(0, 513, 1);
    tc_sweep_(1, 514, 1);
}

#endif
