// test_kda_tc.c - the tensor-core KDA kernels (src/cuda/kda_tc.cu) run on the HOST (kda_tc_*_host:
// the same kernel bodies, one "thread" per block running every warp's tiles through an emulation
// of the mma.sync fragments) against the CPU reference kda_chunk_fwd / kda_chunk_bwd, plus the
// building blocks (TF32 rounding, the warp-tile matmul). Runs in the CPU suite of every CUDA build:
// it checks the algorithm (the sub-block factoring, the blocked inverse), the shared-memory
// carving, the index arithmetic and the fragment plumbing. It cannot see races, the device's
// fragment layouts or device-only code: tests/test_gpu_kda_tc.c does, on a GPU.
//
// Inputs: kda_case.h's generator (q, k L2-normalized then bf16-rounded, v and dO bf16-rounded,
// g = -exp(N(-2.5, 1.5)), β = σ(N(0, 1)), random S0 / dS_T or none); the strong-gate cases use
// kda_case_strong_gate (g down to -30 nats per token).
// Tolerances (rel RMS, kda-model.md §6.6's metric) are FLA's acceptance tolerances for its bf16
// kernels, tightened where TF32 allows: every product rounds its operands to TF32 (relative
// 2^-11 ≈ 4.9e-4 per operand), so fp32 outputs land at ~1e-4..1e-3; o and dv are stored in bf16
// (~2e-3 alone). fp32 outputs 3e-3 (FLA: o/state 5e-3, dq/dk/dS0 8e-3, dg/dβ 2e-2), bf16 outputs
// 1e-2. A wrong term or a wrong fragment coordinate shows as >= 1e-1 or NaN.
// Both kernel versions run (3 and 4: the v4 bodies are the default's); the
// shapes at K 32, V 64, chunk 32 reach v4's compile-time main backward (checked), the others its
// reverse pass and output with v3's main backward. v5 (v4 with operands rounded once) must equal
// v4 bitwise on every shape (kda_tc_host_v5_matches_v4), and v6 (v5 with a full chunk's rows at
// compile time) v5 (kda_tc_host_v6_matches_v5).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

#ifdef KDA_HAVE_CUDA

#include "core/rng.h"     // defines: KdaRng, rng_normal
#include "cpu/kda_core.h" // defines: KdaDims
#include "cuda/kda_tc.h"  // defines: kda_tc_fwd_host, kda_tc_bwd_host, kda_tc_matmul_host
#include "kda_case.h"     // defines: KdaCaseShape, kda_case_shape_make, kda_case_ref_*

#define TOL_TC_F32  3e-3
#define TOL_TC_BF16 1e-2

// ---- building blocks ----------------------------------------------------------------------------

static float bits_f_(unsigned u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

// cvt.rna.tf32.f32: 10 mantissa bits, nearest, ties away from zero; Inf/NaN unchanged.
KDA_TEST(kda_tc_round_tf32) {
    CHECK(kda_tc_round_tf32(1.0f) == 1.0f);
    CHECK(kda_tc_round_tf32(bits_f_(0x3f801000u)) == bits_f_(0x3f802000u)); // tie: away
    CHECK(kda_tc_round_tf32(bits_f_(0xbf801000u)) == bits_f_(0xbf802000u)); // negative tie
    CHECK(kda_tc_round_tf32(bits_f_(0x3f800fffu)) == 1.0f);                 // below the tie
    CHECK(kda_tc_round_tf32(bits_f_(0x3f803000u)) == bits_f_(0x3f804000u)); // tie, odd: away
    CHECK(isinf(kda_tc_round_tf32(INFINITY)) && isnan(kda_tc_round_tf32(NAN)));
    CHECK(kda_tc_round_tf32(-0.0f) == 0.0f && signbit(kda_tc_round_tf32(-0.0f)));
}

// The warp-tile product (fragments, tile walk, epilogue) against a double matmul of the
// TF32-rounded operands: equal to fp32 accumulation error (8-term k-steps, <= 1e-6 relative), and
// different from the unrounded product (the rounding does happen).
KDA_TEST(kda_tc_matmul_emulation) {
    const int M = 48, N = 24, Kd = 40;
    KdaRng r;
    rng_seed(&r, 41);
    float *A = malloc(sizeof(float) * M * Kd), *B = malloc(sizeof(float) * Kd * N);
    float *D = malloc(sizeof(float) * M * N);
    for (int i = 0; i < M * Kd; i++)
        A[i] = rng_normal(&r, 0.0f, 1.0f);
    for (int i = 0; i < Kd * N; i++)
        B[i] = rng_normal(&r, 0.0f, 1.0f);
    for (int i = 0; i < M * N; i++)
        D[i] = NAN;
    kda_tc_matmul_host(D, A, B, M, N, Kd);
    double e_tf = 0, e_fp = 0, s = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double tf = 0, fp = 0;
            for (int k = 0; k < Kd; k++) {
                tf += (double)kda_tc_round_tf32(A[i * Kd + k]) * kda_tc_round_tf32(B[k * N + j]);
                fp += (double)A[i * Kd + k] * B[k * N + j];
            }
            e_tf += (D[i * N + j] - tf) * (D[i * N + j] - tf);
            e_fp += (D[i * N + j] - fp) * (D[i * N + j] - fp);
            s += fp * fp;
        }
    double rel_tf = sqrt(e_tf / s), rel_fp = sqrt(e_fp / s);
    printf("    vs TF32-rounded double %.2e, vs fp32 operands %.2e\n", rel_tf, rel_fp);
    CHECK(rel_tf <= 1e-6);
    CHECK(rel_fp > 1e-5 && rel_fp < 2e-3);
    free(A), free(B), free(D);
}

// ---- the kernels against the CPU reference ------------------------------------------------------

static void check_fwd_(const KdaCaseBf16 *f, int version) {
    const KdaCase *c = &f->c;
    float *o, *fs, *hfs;
    kda_bf16 *ho;
    kda_case_ref_fwd(c, &o, &fs);
    kda_case_fwd_poisoned(c, &ho, &hfs);
    kda_tc_fwd_host(ho, hfs, f->qb, f->kb, f->vb, c->gcum, c->beta, c->S0, &c->d, NULL, version);
    float *hof = kda_case_from_bf16(ho, c->nv);
    kda_case_expect("tc fwd o (bf16)", o, hof, c->nv, TOL_TC_BF16);
    kda_case_expect("tc fwd final state", fs, hfs, c->ns, TOL_TC_F32);
    free(o), free(fs), free(hfs), free(ho), free(hof);
}

// keep: the backward reads the forward's kept h and Δ (kda_tc_fwd_host with keep, then
// kda_tc_bwd_host with kept) instead of recomputing them.
static void check_bwd_(const KdaCaseBf16 *f, int keep, int version) {
    const KdaCase *c = &f->c;
    KdaCaseGrads ref, h;
    kda_bf16 *hv;
    kda_case_ref_bwd(c, &ref);
    kda_case_grads_poisoned(c, &h, &hv);
    float *kept = NULL;
    if (keep) {
        size_t nk = kda_tc_keep_floats(&c->d);
        kept = malloc(nk * 4);
        memset(kept, 0xff, nk * 4); // NaN: the forward must write every kept value
        kda_bf16 *o = malloc((size_t)c->nv * 2);
        kda_tc_fwd_host(o, NULL, f->qb, f->kb, f->vb, c->gcum, c->beta, c->S0, &c->d, kept,
                        version);
        free(o);
    }
    kda_tc_bwd_host(h.dq, h.dk, hv, h.dg, h.db, h.dS0, f->dOb, c->dST, f->qb, f->kb, f->vb, c->gcum,
                    c->beta, c->S0, &c->d, kept, version);
    h.dv = kda_case_from_bf16(hv, c->nv);
    kda_case_expect_grads("tc bwd", &ref, &h, c, TOL_TC_F32, TOL_TC_BF16);
    kda_case_grads_free(&ref), kda_case_grads_free(&h), free(hv), free(kept);
}

// T = 1, T not a multiple of the chunk (rows past the end inside the second sub-block: 63, 65,
// 77; a second sub-block of one row: 17), exact multiples, GVA (2x, 4x), chunk 16 (no
// off-diagonal sub-block) and 32, K/V 16/24 (V tile 24), 32/64 (the models'), 64/128, 128/128;
// gates down to -30 nats per token; GVA (2x, 4x) at K 32 / V 64 / chunk 32 (v4's main backward).
static const KdaCaseShape SHAPES[] = {
    {2, 1, 2, 2, 32, 64, 32, 0, 0},      {2, 63, 2, 2, 32, 64, 32, 1, 0},
    {1, 64, 2, 2, 32, 64, 32, 0, 0},     {2, 65, 2, 2, 32, 64, 32, 1, 0},
    {1, 17, 1, 1, 32, 64, 32, 1, 0},     {1, 130, 1, 2, 16, 24, 16, 1, 0},
    {1, 77, 2, 4, 16, 24, 32, 1, 0},     {1, 40, 1, 1, 64, 128, 32, 1, 0},
    {1, 20, 1, 1, 128, 128, 16, 1, 0},   {1, 70, 2, 2, 32, 64, 32, 1, 30.0f},
    {1, 45, 1, 1, 32, 64, 32, 1, 8.0f},  {2, 50, 1, 2, 32, 64, 32, 1, 0},
    {1, 97, 2, 4, 32, 64, 32, 0, 30.0f},
};

// mode 0 forward, 1 backward, 2 backward kept; version: the kernel version, 3 or 4.
static void sweep_(int mode, uint64_t seed, int version) {
    KdaRng r;
    rng_seed(&r, seed);
    for (size_t i = 0; i < sizeof SHAPES / sizeof SHAPES[0]; i++) {
        const KdaCaseShape *s = &SHAPES[i];
        char tag[8];
        snprintf(tag, sizeof tag, "v%d ", version);
        KdaCaseBf16 c;
        kda_case_shape_make(&c, &r, s, tag);
        CHECK(kda_tc_supported(&c.c.d, 232448));
        int v4main = version == 4 && s->K == 32 && s->V == 64 && s->C == 32;
        CHECK(kda_tc_bwd_main_version(version, &c.c.d) == (v4main ? 4 : 3));
        if (mode == 0)
            check_fwd_(&c, version);
        else
            check_bwd_(&c, mode == 2, version);
        kda_case_bf16_free(&c);
    }
}

KDA_TEST(kda_tc_host_fwd) {
    sweep_(0, 401, 3);
    sweep_(0, 401, 4);
}

KDA_TEST(kda_tc_host_bwd) {
    sweep_(1, 402, 3);
    sweep_(1, 402, 4);
}

KDA_TEST(kda_tc_host_bwd_kept) {
    sweep_(2, 403, 3);
    sweep_(2, 403, 4);
}

// v4 against v3 on the same inputs, K 32 / V 64 / chunk 32 (every v4 body runs), outputs o, dq,
// dk, dv, dg, dβ, d initial state. Plain forms: the same TF32 products with the same operands, so
// the outputs agree to fp32 reassociation (pair sums, dg scan, dβ sums in another order): rel RMS
// <= 1e-5, 100x under the tolerance against the reference; a v4 phase that reads a tile before it
// is complete, a wrong alias or a wrong fragment of a bf16 operand shows as >= 1e-3. Kept forms:
// the forward is the same (1e-5), v4's backward takes the forward's Akk, whose off-diagonal block
// rounds L = β KK to TF32 where v3's backward rounds KK (~2^-11 on that block: <= 4e-4 seen on
// dv): 2e-3, the same order as the TF32 error against the reference (a wrong kept tile: >= 1e-2).
static void v4_vs_v3_(const KdaCaseBf16 *f, int kept, double tol_bwd) {
    const KdaCase *c = &f->c;
    const int64_t n[7] = {c->nv, c->nqk, c->nqk, c->nv, c->ng, c->nb, c->ns};
    float *out[2][7] = {{NULL}};
    for (int v = 0; v < 2; v++) {
        int ver = v ? 4 : 3;
        CHECK(kda_tc_bwd_main_version(ver, &c->d) == ver);
        size_t nk = kda_tc_keep_floats(&c->d);
        float *keep = kept ? malloc(nk * 4) : NULL;
        if (keep) memset(keep, 0xff, nk * 4);
        kda_bf16 *o = malloc((size_t)c->nv * 2), *dv = malloc((size_t)c->nv * 2);
        for (int t = 1; t < 7; t++)
            out[v][t] = malloc((size_t)n[t] * 4), memset(out[v][t], 0xff, (size_t)n[t] * 4);
        kda_tc_fwd_host(o, NULL, f->qb, f->kb, f->vb, c->gcum, c->beta, c->S0, &c->d, keep, ver);
        kda_tc_bwd_host(out[v][1], out[v][2], dv, out[v][4], out[v][5], out[v][6], f->dOb, c->dST,
                        f->qb, f->kb, f->vb, c->gcum, c->beta, c->S0, &c->d, keep, ver);
        out[v][0] = kda_case_from_bf16(o, c->nv);
        free(out[v][3]);
        out[v][3] = kda_case_from_bf16(dv, c->nv);
        free(keep), free(o), free(dv);
    }
    static const char *names[7] = {"o", "dq", "dk", "dv", "dg", "dbeta", "d initial state"};
    for (int t = 0; t < 7; t++) {
        char what[64];
        snprintf(what, sizeof what, "v4 vs v3 %s%s", names[t], kept ? " (kept)" : "");
        kda_case_expect(what, out[0][t], out[1][t], n[t], t == 0 ? 1e-5 : tol_bwd);
        free(out[0][t]), free(out[1][t]);
    }
}

KDA_TEST(kda_tc_host_v4_matches_v3) {
    static const KdaCaseShape S[] = {{2, 65, 2, 2, 32, 64, 32, 1, 0},
                                     {1, 17, 1, 1, 32, 64, 32, 1, 0},
                                     {1, 97, 1, 2, 32, 64, 32, 1, 30.0f},
                                     {2, 1, 2, 2, 32, 64, 32, 0, 0}};
    KdaRng r;
    rng_seed(&r, 404);
    for (size_t i = 0; i < sizeof S / sizeof S[0]; i++) {
        KdaCaseBf16 f;
        kda_case_shape_make(&f, &r, &S[i], "");
        v4_vs_v3_(&f, 0, 1e-5);
        v4_vs_v3_(&f, 1, 2e-3);
        kda_case_bf16_free(&f);
    }
}

// Kernel version vb against va on one case, plain or kept form, every output compared bit for
// bit (o, the final state, dq, dk, dv, dg, dβ, the initial state's gradient); every output buffer
// and the kept buffer start as NaN (0xff bytes), so an element a version fails to write differs.
static void versions_bitwise_(const KdaCaseBf16 *f, int kept, int va, int vb) {
    const KdaCase *c = &f->c;
    const int64_t n[8] = {c->nv, c->ns, c->nqk, c->nqk, c->nv, c->ng, c->nb, c->ns};
    static const size_t esz[8] = {2, 4, 4, 4, 2, 4, 4, 4};
    void *out[2][8];
    for (int v = 0; v < 2; v++) {
        const int ver = v ? vb : va;
        size_t nk = kda_tc_keep_floats(&c->d);
        float *keep = kept ? malloc(nk * 4) : NULL;
        if (keep) memset(keep, 0xff, nk * 4);
        for (int t = 0; t < 8; t++) {
            out[v][t] = malloc((size_t)(n[t] > 0 ? n[t] : 1) * esz[t]);
            memset(out[v][t], 0xff, (size_t)n[t] * esz[t]);
        }
        kda_tc_fwd_host(out[v][0], out[v][1], f->qb, f->kb, f->vb, c->gcum, c->beta, c->S0, &c->d,
                        keep, ver);
        kda_tc_bwd_host(out[v][2], out[v][3], out[v][4], out[v][5], out[v][6], out[v][7], f->dOb,
                        c->dST, f->qb, f->kb, f->vb, c->gcum, c->beta, c->S0, &c->d, keep, ver);
        free(keep);
    }
    static const char *names[8] = {"o",  "final state", "dq",    "dk",
                                   "dv", "dg",          "dbeta", "d initial state"};
    for (int t = 0; t < 8; t++) {
        CHECK_MSG(!memcmp(out[0][t], out[1][t], (size_t)n[t] * esz[t]),
                  "v%d vs v%d %s%s: not bitwise equal", vb, va, names[t], kept ? " (kept)" : "");
        free(out[0][t]), free(out[1][t]);
    }
}

// vb against va, plain and kept forms, on every shape of the sweep and then of `more`. Versions 5
// and 6 run their own kernels at K 32 / V 64 / chunk 32 only (elsewhere v4's: the check is then
// trivially equal, and kda_tc_bwd_main_version says 3).
static void versions_sweep_(int va, int vb, uint64_t seed, const KdaCaseShape *more, size_t nmore) {
    KdaRng r;
    rng_seed(&r, seed);
    const size_t ns = sizeof SHAPES / sizeof SHAPES[0];
    for (size_t i = 0; i < ns + nmore; i++) {
        const KdaCaseShape *s = i < ns ? &SHAPES[i] : &more[i - ns];
        KdaCaseBf16 f;
        kda_case_shape_make(&f, &r, s, "");
        const int own = s->K == 32 && s->V == 64 && s->C == 32;
        CHECK(kda_tc_bwd_main_version(vb, &f.c.d) == (own ? vb : 3));
        versions_bitwise_(&f, 0, va, vb);
        versions_bitwise_(&f, 1, va, vb);
        kda_case_bf16_free(&f);
    }
}

// v5 against v4: v5 stores the tensors that only mma reads already rounded to TF32 and loads
// their fragments without the cvt, which is idempotent, so every output must be bitwise v4's. A
// rounded tensor that some body also reads elementwise would differ here by ~2^-11 relative.
// More v5 shapes: a last chunk of 1 and 31 rows after whole ones, with states, GVA (HV > H: dq, dk
// through the per-value-head scratch) and not (the main backward's row-guarded loops and its
// chunk-based output offsets).
static const KdaCaseShape V5_SHAPES[] = {
    {1, 33, 2, 2, 32, 64, 32, 1, 0},
    {2, 95, 1, 2, 32, 64, 32, 1, 0},
};

KDA_TEST(kda_tc_host_v5_matches_v4) {
    versions_sweep_(4, 5, 405, V5_SHAPES, sizeof V5_SHAPES / sizeof V5_SHAPES[0]);
}

// v6 against v5: v6 runs a full chunk (n = C rows) through the intra and main-backward bodies
// instantiated with n = C at compile time and a partial last chunk through v5's, the same
// arithmetic in the same order, so every output must be bitwise v5's. Shapes beyond the sweep's
// (K 32, V 64, chunk 32, v6's dims): full chunks only (T = 64, 2048: the model's T, GVA 2x), a
// partial last chunk of 5 rows (no off-diagonal sub-block; B = 2), 6 rows (GVA 4x, a -30-nat
// gate), exactly 16 rows, 31 rows, and T = 1 (B = 3), with and without states.
static const KdaCaseShape V6_SHAPES[] = {
    {1, 64, 2, 2, 32, 64, 32, 0, 0},    {1, 2048, 1, 2, 32, 64, 32, 1, 0},
    {2, 37, 2, 2, 32, 64, 32, 1, 0},    {2, 70, 1, 4, 32, 64, 32, 1, 30.0f},
    {1, 48, 1, 1, 32, 64, 32, 1, 8.0f}, {2, 95, 2, 2, 32, 64, 32, 0, 0},
    {3, 1, 2, 2, 32, 64, 32, 1, 0},
};

KDA_TEST(kda_tc_host_v6_matches_v5) {
    versions_sweep_(5, 6, 406, V6_SHAPES, sizeof V6_SHAPES / sizeof V6_SHAPES[0]);
}

// Which dims the tensor-core path takes (H200: 227 KB of shared memory per block).
KDA_TEST(kda_tc_supported_dims) {
    size_t h200 = 232448;
    KdaDims d = {16, 2048, 8, 8, 32, 64, 0.17677670f, 32};
    CHECK(kda_tc_supported(&d, h200));
    d.chunk = 16;
    CHECK(kda_tc_supported(&d, h200));
    d.chunk = 64; // the sub-block scheme handles one off-diagonal block only
    CHECK(!kda_tc_supported(&d, h200));
    d.chunk = 32, d.K = 20; // K must be a multiple of 16 (the M of the state update)
    CHECK(!kda_tc_supported(&d, h200));
    d.K = 32, d.V = 21;
    CHECK(!kda_tc_supported(&d, h200));
    d.V = 64, d.HV = 12; // GVA needs HV % H == 0
    CHECK(!kda_tc_supported(&d, h200));
    d.HV = 8;
    CHECK(!kda_tc_supported(&d, 16384)); // too little shared memory
}

#endif
