// kda_case.h - random inputs of the KDA core shared by the GPU kernel tests (test_gpu_kda.c,
// test_gpu_kda_tc.c) and the host emulations of the kernels (test_kda_fast.c, test_kda_tc.c): one
// generator, so all test the same distributions, and one shape-table row (KdaCaseShape) for the
// tensor-core tests; and the tests' one relative-error rule (kda_case_rel_rms and the checks on
// it), so every float comparison of the suite measures the same way.
//
// q, k: N(0, 1), L2-normalized per head, then rounded to bf16; v and dO: N(0, 1) rounded to bf16
// (the CPU reference gets the same rounded values); log-decay g = -exp(N(-2.5, 1.5)) (median 0.08
// nats per token, a tail of strong decays up to ~10 nats that drives e^{gcum} to underflow inside
// a chunk); gcum = its chunk-local inclusive cumsum over d.chunk, summed in the CPU's order;
// β = σ(N(0, 1)); with_state: random initial state and final-state gradient (else NULL).
#ifndef KDA_TESTS_KDA_CASE_H
#define KDA_TESTS_KDA_CASE_H

#include <stdint.h>

#include "core/rng.h"     // defines: KdaRng
#include "cpu/kda_core.h" // defines: KdaDims

typedef struct {
    KdaDims d; // the kernels' dims: d.chunk is what gcum was summed over
    int64_t nqk, nv, ng, nb, ns;
    float *q, *k;    // [B, T, H, K]
    float *v, *dO;   // [B, T, HV, V]
    float *g, *gcum; // [B, T, HV, K]
    float *beta;     // [B, T, HV]
    float *S0, *dST; // [B, HV, K, V] or NULL
} KdaCase;

void kda_case_make(KdaCase *c, KdaRng *r, int64_t B, int64_t T, int64_t H, int64_t HV, int64_t K,
                   int64_t V, int64_t chunk, int with_state);
void kda_case_free(KdaCase *c);
// Replaces c's log-decay with a strong, unbounded gate: g uniform in [-gmax, 0) nats per token
// with every 7th token exactly -gmax (kda-model.md: cumsums of hundreds of nats per chunk), and
// sums gcum again over c->d.chunk.
void kda_case_strong_gate(KdaCase *c, KdaRng *r, float gmax);
// c->d with chunk 64: the CPU reference's chunk (the chunked form is exact for any chunk).
KdaDims kda_case_cpu_dims(const KdaCase *c);

// bf16 bits (kda_bf16) of x [n], rounded to nearest even; and the fp32 values of bf16 bits b [n].
// Fresh buffers (n = 0 still allocates one element).
uint16_t *kda_case_to_bf16(const float *x, int64_t n);
float *kda_case_from_bf16(const uint16_t *b, int64_t n);

// A KdaCase plus bf16 copies of q, k, v, dO (exact: the case's values are bf16-representable):
// the inputs of the kernels' host emulations (test_kda_fast.c, test_kda_tc.c).
typedef struct {
    KdaCase c;
    uint16_t *qb, *kb, *vb, *dOb;
} KdaCaseBf16;
// kda_case_make, then kda_case_strong_gate(gmax) when gmax > 0, then the copies.
void kda_case_bf16_make(KdaCaseBf16 *f, KdaRng *r, int64_t B, int64_t T, int64_t H, int64_t HV,
                        int64_t K, int64_t V, int64_t chunk, int with_state, float gmax);
void kda_case_bf16_free(KdaCaseBf16 *f);

// One row of a kernel test's shape table (test_kda_tc.c, test_gpu_kda_tc.c): kda_case_make's
// dims, chunk C and with_state, and gmax > 0 for kda_case_strong_gate(gmax).
typedef struct {
    int64_t B, T, H, HV, K, V, C;
    int state;
    float gmax;
} KdaCaseShape;
// A shape-table row's case: prints s on one line ("  <tag>B=.. T=.. H=.. HV=.. K=.. V=.. chunk=..
// state=.. gmax=.."; tag "" or e.g. "v4 "), then kda_case_bf16_make of it from r (the same draws
// as kda_case_make and the strong gate; the print draws nothing). Free with kda_case_bf16_free.
void kda_case_shape_make(KdaCaseBf16 *f, KdaRng *r, const KdaCaseShape *s, const char *tag);

// The CPU reference forward of c (kda_chunk_fwd at kda_case_cpu_dims): o [nv] and the final
// state fs [ns], fresh buffers.
void kda_case_ref_fwd(const KdaCase *c, float **o, float **fs);
// Fresh buffers for a host emulation's forward, every byte 0xff (NaN: it must write every
// element): o in bf16 [nv] (the kernels store o in bf16) and the final state fs [ns].
void kda_case_fwd_poisoned(const KdaCase *c, uint16_t **ob, float **fs);

// The core's six gradients, in kda_chunk_bwd's order: dq, dk [nqk], dv [nv], dg [ng], dβ [nb],
// d initial state [ns].
typedef struct {
    float *dq, *dk, *dv, *dg, *db, *dS0;
} KdaCaseGrads;
// c's reference gradients: kda_chunk_bwd at kda_case_cpu_dims, fresh buffers.
void kda_case_ref_bwd(const KdaCase *c, KdaCaseGrads *ref);
// Fresh buffers for a host emulation's backward, every byte 0xff (NaN: it must write every
// element): got's fp32 gradients, and dv in bf16 through *dvb (the kernels store dv in bf16;
// got->dv stays NULL until the caller converts it with kda_case_from_bf16).
void kda_case_grads_poisoned(const KdaCase *c, KdaCaseGrads *got, uint16_t **dvb);
// got against ref by kda_case_expect, one line each labelled "<prefix> dq", "<prefix> dk",
// "<prefix> dv (bf16)", "<prefix> dg", "<prefix> dbeta", "<prefix> d initial state": dv (stored
// in bf16) at tol_bf16, the others at tol_f32.
void kda_case_expect_grads(const char *prefix, const KdaCaseGrads *ref, const KdaCaseGrads *got,
                           const KdaCase *c, double tol_f32, double tol_bf16);
void kda_case_grads_free(KdaCaseGrads *g);

// The gate's chunk cumsums in fp32, token order within each chunk of `chunk` tokens of each row
// (the reference of the GPU gate kernels): gc [B, T, HK] = forward cumsum of g, dg [B, T, HK] =
// reverse cumsum of dgc (the backward of the forward one). Overwrites gc and dg.
void kda_case_chunk_cumsums(float *gc, float *dg, const float *g, const float *dgc, int64_t B,
                            int64_t T, int64_t HK, int64_t chunk);

// The relative RMS error every float comparison of the tests uses (kda-model.md §6.6, without
// FLA's + 1e-8 guard on RMS(ref)): sqrt(Σ (out - ref)² / Σ ref²) over out, ref [n], accumulated
// in double. Infinite when any difference is not finite, so a NaN output fails every <= check
// (also through fmax, which drops a NaN); for an all-zero ref, 0 when out is zero too, else
// infinite.
double kda_case_rel_rms(const float *ref, const float *out, int64_t n);
// max |out - ref| over [n], infinite when any difference is not finite.
double kda_case_max_abs(const float *ref, const float *out, int64_t n);
// FLA's assert_close ratio: 0 when max |out - ref| <= 1e-6 (its pass-anyway clause: it matters
// where the reference is exactly zero, e.g. dg of a single token with a zero initial state, where
// any rounding residue makes the relative error infinite), else kda_case_rel_rms.
double kda_case_fla_ratio(const float *ref, const float *out, int64_t n);

// FLA's assert_close rule as a test check: out [n] passes when kda_case_fla_ratio <= tol (every
// value finite and rel-RMS <= tol, or every element within 1e-6 absolute). Prints one line.
void kda_case_expect(const char *what, const float *ref, const float *out, int64_t n, double tol);
// The strict form (the host-twin tests of the fused and gate kernels, the GPU op tests):
// kda_case_rel_rms <= tol, no absolute clause. Prints one line.
void kda_case_expect_rel(const char *what, const float *ref, const float *out, int64_t n,
                         double tol);

#endif
