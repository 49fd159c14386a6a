// cuda_internal.h - helpers shared by the src/cuda/*.cu files only (CUDA C++; not a public API,
// never included from C): cuBLASLt check macro, bf16 load/store, warp reductions, launch sizes.
#ifndef KDA_CUDA_INTERNAL_H
#define KDA_CUDA_INTERNAL_H

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <math.h>
#include <string.h>

#include <utility> // std::forward (kda_launch)

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

// ---- programmatic dependent launch (ctx->pdl, KDA_PDL=1; docs/cuda.md) -------------------------
// A kernel launched with cudaLaunchAttributeProgrammaticStreamSerialization may be scheduled
// before the previous kernel of the stream has finished (Hopper, compute capability 9.0+; CUDA
// Programming Guide, "Programmatic Dependent Launch and Synchronization"). With no explicit
// trigger (cudaTriggerProgrammaticLaunchCompletion, which no kernel here calls) the predecessor
// releases its dependents as its last block exits, before the grid has completed and flushed
// (cuda_device_runtime_api.h): the dependent's launch latency and block launch overlap the
// predecessor's tail. Stream capture keeps the programmatic edge in the graph.
//
// Why kda_grid_wait() as a kernel's first statement is always safe: griddepcontrol.wait blocks
// the thread until every prerequisite grid has completed and all of its memory operations are
// performed and visible to the waiting grid. Nothing before it touches memory, so every load and
// store of the kernel comes after the predecessor's last write, as without the attribute. It is
// transitive: the predecessor's own blocks all passed their wait (or it was launched without the
// attribute, and then waited for its own predecessor in full), so when it completes everything
// before it has too. Without a programmatic dependency (a plain launch, or a kernel behind a
// memcpy / memset / event node, which are not kernels: the launch then waits as usual) the wait
// returns at once, so a kernel may be launched both ways.
// What would break it: a read of a predecessor's output, or a write of anything a predecessor
// reads, before the wait (a prologue that loads operands; an early `return` ahead of the wait),
// or a kernel launched with the attribute that has no wait at all: nothing would then order its
// accesses after its predecessor's, nor (the transitivity above) its successors' after the
// predecessor's. So: launch through kda_launch only kernels whose first statement is
// kda_grid_wait(), executed by every thread.
// A no-op on the host (the host twins of kernel bodies) and below sm_90.
__host__ __device__ __forceinline__ void kda_grid_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cudaGridDependencySynchronize(); // griddepcontrol.wait
#endif
}

// The programmatic-serialization attribute into *at when ctx->pdl; returns how many attributes
// it wrote (0 or 1): for launches that build their own cudaLaunchConfig_t (cluster kernels).
static inline unsigned kda_pdl_attr(const KdaCudaCtx *ctx, cudaLaunchAttribute *at) {
    if (!ctx->pdl) return 0;
    at->id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at->val.programmaticStreamSerializationAllowed = 1;
    return 1;
}

// Launches kernel<<<grid, block, smem, ctx->stream>>>(args...) and returns the launch's error:
// with ctx->pdl through cudaLaunchKernelEx with the programmatic-serialization attribute, else
// the plain launch (exactly the launch of before). The kernel's first statement must be
// kda_grid_wait() (above). Arguments convert to the kernel's parameter types as in a call (pass
// typed null pointers: a bare NULL is an integer once forwarded).
// Use: CUDA_CHECK(ctx, kda_launch(ctx, kern, grid, block, smem, args...)).
template <typename... P, typename... A>
static inline cudaError_t kda_launch(const KdaCudaCtx *ctx, void (*kernel)(P...), dim3 grid,
                                     dim3 block, size_t smem, A &&...args) {
    if (!ctx->pdl) {
        kernel<<<grid, block, smem, ctx->stream>>>(std::forward<A>(args)...);
        return cudaGetLastError();
    }
    cudaLaunchAttribute at[1];
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = ctx->stream;
    cfg.attrs = at;
    cfg.numAttrs = kda_pdl_attr(ctx, at);
    return cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...);
}

// Grid size for a grid-stride elementwise loop over n items with 256-thread blocks.
static inline unsigned grid_for(int64_t n) {
    int64_t b = CEIL_DIV(n, (int64_t)256);
    if (b < 1) b = 1;
    if (b > 65535LL * 16) b = 65535LL * 16;
    return (unsigned)b;
}

#endif
