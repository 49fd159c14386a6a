// cuda_internal.h - helpers shared by the src/cuda/*.cu files only (CUDA C++; not a public API,
// never included from C): cuBLASLt check macro, bf16 load/store, warp reductions, launch sizes.
#ifndef KDA_CUDA_INTERNAL_H
#define KDA_CUDA_INTERNAL_H

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <math.h>
#include <string.h>

#include "cuda/cuda_common.h" // defines: KdaCudaCtx, CUDA_CHECK, kda_bf16

#define CEIL_DIV(a, b) (((a) + (b)-1) / (b))

// CUBLAS_CHECK(ctx, call): like CUDA_CHECK for cublasStatus_t.
#define CUBLAS_CHECK(ctx, call)                                                                    \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                           \
            return kda_cuda_fail_at((ctx), __FILE__, __LINE__, #call, cublasGetStatusString(s_));  \
    } while (0)

// Fails the launcher (return -1) when a size argument is out of range.
#define KDA_CUDA_REQUIRE(ctx, cond)                                                                \
    do {                                                                                           \
        if (!(cond)) return kda_cuda_fail_at((ctx), __FILE__, __LINE__, #cond, "bad argument");    \
    } while (0)

// The bit pattern of an fp32 value (memcpy on the host: no type punning).
__host__ __device__ __forceinline__ unsigned f32_bits(float f) {
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    unsigned u;
    memcpy(&u, &f, sizeof u);
    return u;
#endif
}

// bf16 <-> fp32, the one pair for every kernel and for the host twins of kernel bodies
// (kda_cuda_*_host): round to nearest even, NaN stays a NaN. On the host the bit patterns go
// through memcpy (no type punning).
__host__ __device__ __forceinline__ float bf2f(kda_bf16 h) {
    unsigned u = (unsigned)h << 16;
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}
__host__ __device__ __forceinline__ kda_bf16 f2bf(float f) {
#ifdef __CUDA_ARCH__
    return __bfloat16_as_ushort(__float2bfloat16_rn(f)); // one cvt.rn.bf16.f32
#else
    unsigned u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (kda_bf16)((u >> 16) | 0x40u); // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return (kda_bf16)(u >> 16);
#endif
}
// Loads of either storage type as fp32.
__device__ __forceinline__ float ldf(const float *p, int64_t i) {
    return p[i];
}
__device__ __forceinline__ float ldf(const kda_bf16 *p, int64_t i) {
    return bf2f(p[i]);
}
__device__ __forceinline__ void stf(float *p, int64_t i, float v) {
    p[i] = v;
}
__device__ __forceinline__ void stf(kda_bf16 *p, int64_t i, float v) {
    p[i] = f2bf(v);
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ double warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Activations (host and device: the host twins of kernel bodies call them too).
__host__ __device__ __forceinline__ float sigmoid_f(float x) {
    return 1.0f / (1.0f + expf(-x));
}
__host__ __device__ __forceinline__ float silu_f(float x) {
    return x * sigmoid_f(x);
}
// d/dx SiLU(x) = σ(x)(1 + x(1 - σ(x)))
__host__ __device__ __forceinline__ float dsilu_f(float x) {
    float s = sigmoid_f(x);
    return s * (1.0f + x * (1.0f - s));
}

// Grid size for a grid-stride elementwise loop over n items with 256-thread blocks.
static inline unsigned grid_for(int64_t n) {
    int64_t b = CEIL_DIV(n, (int64_t)256);
    if (b < 1) b = 1;
    if (b > 65535LL * 16) b = 65535LL * 16;
    return (unsigned)b;
}

#endif
