// kda_case.h - random inputs of the KDA core shared by the GPU kernel tests (test_gpu_kda.c) and
// the host emulation of the fast kernels (test_kda_fast.c): one generator, so both test the same
// distributions.
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

// The gate's chunk cumsums in fp32, token order within each chunk of `chunk` tokens of each row
// (the reference of the GPU gate kernels): gc [B, T, HK] = forward cumsum of g, dg [B, T, HK] =
// reverse cumsum of dgc (the backward of the forward one). Overwrites gc and dg.
void kda_case_chunk_cumsums(float *gc, float *dg, const float *g, const float *dgc, int64_t B,
                            int64_t T, int64_t HK, int64_t chunk);

// FLA's assert_close rule (kda-model.md §6.6) as a test check: out [n] passes when every value is
// finite and rel-RMS(out, ref) <= tol or every element is within 1e-6 absolute (the second clause
// matters where the reference is exactly zero, e.g. dg of a single token with a zero initial
// state, where any rounding residue makes the relative error infinite). Prints one line.
void kda_case_expect(const char *what, const float *ref, const float *out, int64_t n, double tol);
// The strict form (the host-twin tests of the fused and gate kernels): sqrt(Σ (out - ref)²) /
// (sqrt(Σ ref²) + 1e-30) <= tol, infinite when any difference is not finite; no absolute clause.
// Prints one line.
void kda_case_expect_rel(const char *what, const float *ref, const float *out, int64_t n,
                         double tol);

#endif
