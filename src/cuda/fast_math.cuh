// fast_math.cuh - the fast exponential, sigmoid, SiLU and SiLU' (the default; KDA_FAST_EXP=0: off)
// of the conv + SiLU kernels (conv_kernels.cuh) and the CE row kernel's sum pass (xent_cuda.cu),
// host and device (CUDA C++; include from src/cuda/*.cu only).
//
// Why: the precise forms (cuda_internal.h's sigmoid_f: expf and an IEEE divide) cost ~23
// instructions per sigmoid, most of the conv forward's issue slots, and the step is power-bound
// (docs/perf-log.md, "Fast exponentials in SiLU and the CE sum pass"). The fast forms:
//   2^x       one ex2.approx.ftz.f32 (MUFU.EX2)
//   e^x       2^(x·log2 e): one FMUL and the ex2
//   σ(x)      1 / (1 + 2^(-x·log2 e)): FMUL, ex2, FADD, one rcp.approx.ftz.f32 (MUFU.RCP)
//   SiLU(x)   x·σ(x);  SiLU'(x) = σ(x)(1 + x(1 - σ(x))) (the precise forms' formulas)
// Special values, as the precise forms: σ(+inf) = 1, σ(-inf) = 0 (2^+inf = inf, rcp(inf) = 0),
// NaN stays NaN; large |x| gives 0 or 1, never inf or NaN (x = -100: 2^144 overflows to inf,
// rcp gives 0; x = +100: 2^-144 flushes to 0, σ = 1). ftz: results below 2^-126 flush to 0, so
// σ(x) = 0 for x < -87.33 where the precise form returns a subnormal (absolute error < 1.2e-38).
// Error against float64 (tests/test_fast_exp.c asserts it, host and device; docs/perf-log.md):
// SiLU 2e-6 relative for |x| <= 20 (8e-6 on [-87, 100]), SiLU' 2e-6 absolute, e^x 2e-6 relative
// on [-20, 0] (8e-6 on [-87, 0]) for the host form; the device form is held to 3e-6, 4e-6 and
// 3e-6 there (rcp.approx's and ex2.approx's last ulps). It grows with |x| since x·log2 e is
// rounded once (the CUDA C Programming Guide's __expf bound, 2 + floor(|1.173 x|) ulp, is that
// rounding plus ex2.approx's ~2 ulp); rcp.approx adds <= 1 ulp.
//
// The host form (the CPU suite's twins) is the same formula with exp2f and an IEEE divide,
// results flushed below 2^-126 as ftz does: the device differs from it by ex2.approx's and
// rcp.approx's few ulps only (the exponent's product rounding is the same). Tests that hold the
// GPU's fast path to a host twin use a tolerance (docs/perf-log.md), not bit equality.
#ifndef KDA_CUDA_FAST_MATH_CUH
#define KDA_CUDA_FAST_MATH_CUH

#include <math.h>
#include <stdlib.h> // getenv

#include "cuda/cuda_internal.h" // defines: silu_f, dsilu_f (the precise forms)

#define KDA_LOG2E_F 1.44269504088896341f // log2(e), rounded to fp32

// |r| < 2^-126 -> ±0, as the device's .ftz results (host form only).
__host__ __device__ __forceinline__ float fast_ftz_(float r) {
    return fabsf(r) < 1.17549435e-38f ? copysignf(0.0f, r) : r;
}

// 2^x: ex2.approx.ftz.f32 on the device, exp2f flushed on the host.
__host__ __device__ __forceinline__ float ex2_fast_f(float x) {
#ifdef __CUDA_ARCH__
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
#else
    return fast_ftz_(exp2f(x));
#endif
}

// 1 / x: rcp.approx.ftz.f32 on the device (rcp(inf) = 0), an IEEE divide flushed on the host.
__host__ __device__ __forceinline__ float rcp_fast_f(float x) {
#ifdef __CUDA_ARCH__
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
#else
    return fast_ftz_(1.0f / x);
#endif
}

__host__ __device__ __forceinline__ float exp_fast_f(float x) {
    return ex2_fast_f(x * KDA_LOG2E_F);
}
__host__ __device__ __forceinline__ float sigmoid_fast_f(float x) {
    return rcp_fast_f(1.0f + ex2_fast_f(x * -KDA_LOG2E_F));
}
__host__ __device__ __forceinline__ float silu_fast_f(float x) {
    return x * sigmoid_fast_f(x);
}
__host__ __device__ __forceinline__ float dsilu_fast_f(float x) {
    float s = sigmoid_fast_f(x);
    return s * (1.0f + x * (1.0f - s));
}

// The kernels' choice, a template parameter FX (false: the precise forms, so the default
// instantiations compile to the code of before; true: the fast forms).
template <bool FX> __host__ __device__ __forceinline__ float silu_x(float x) {
    return FX ? silu_fast_f(x) : silu_f(x);
}
template <bool FX> __host__ __device__ __forceinline__ float dsilu_x(float x) {
    return FX ? dsilu_fast_f(x) : dsilu_f(x);
}
template <bool FX> __host__ __device__ __forceinline__ float exp_x(float x) {
    return FX ? exp_fast_f(x) : expf(x);
}

// The conv and CE row launchers take their fast instantiations unless KDA_FAST_EXP=0 (read at
// every launch, so a test or bench can A/B in one process). The default since 2026-12-03,
// session 10: the GPU suite passed under it (docs/log/gpu-2026-12-03.md §33), the step ran
// 0.8-1.5 ms faster at mb 16 (§27), and the parity run's bars moved within their noise (§34).
static inline bool kda_fast_exp_(void) {
    const char *e = getenv("KDA_FAST_EXP");
    return !(e && e[0] == '0' && e[1] == 0);
}

#endif
