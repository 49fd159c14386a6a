// ops_common.cuh - device helpers shared by the op families of src/cuda (norm_cuda, conv_cuda,
// kda_gate_cuda, swiglu_cuda, embed_cuda, optim_cuda, gemm_cuda's bias and column blocks): the
// deterministic column sums, row-per-warp indexing, vector bf16/fp32 access and group sums.
// CUDA C++, internal: included by .cu files only. Everything is in an anonymous namespace (each
// including file has its own copy, as when these lived in one file).
//
// Row kernels use one warp per row (8 rows per 256-thread block). Column sums over rows (weight
// gradients) are deterministic: a first kernel (or the operator's own kernel, for the fused
// RMSNorm and conv backwards) sums fixed tiles of rows per column in double, colsum_finish adds
// the tiles in a fixed two-level order. Elementwise kernels use grid-stride loops.
// Bandwidth: the hot kernels move 8 or 16 bytes per access (vector paths, taken when sizes and
// pointer alignment allow, with a scalar twin of the same code otherwise); one 2-byte access per
// thread keeps too few bytes in flight to reach HBM bandwidth.
#ifndef KDA_CUDA_OPS_COMMON_CUH
#define KDA_CUDA_OPS_COMMON_CUH

#include "cuda/cuda_internal.h" // defines: bf2f, f2bf, warp_sum, CEIL_DIV, KDA_CUDA_REQUIRE

#define ROWS_PER_BLOCK 8  // warps per 256-thread block in row kernels
#define TILE_ROWS      64 // rows per tile of the deterministic column sums

namespace {

// ---- deterministic column sums -----------------------------------------------------------------

// out[c] += Σ_p part[p, c], c < ncols. Two levels in a fixed order (depends on P only): a
// block is 32 columns x FIN_SEG threads; thread (c, s) sums p = s, s + FIN_SEG, ... in
// increasing p, then thread (c, 0) adds the FIN_SEG segment sums in increasing s. A single
// thread per column (the first version) ran P dependent loads in series: 0.8 ms for the gate's
// 16k partials per head.
// The body is a device function of the block's column block bx (colsum_finish_k: blockIdx.x; the
// conv's combined q|k|v finish: decoded from its parts).
#define FIN_SEG 8
__device__ __forceinline__ void colsum_finish_body(float *out, const double *part, int64_t P,
                                                   int64_t ncols, int64_t bx) {
    __shared__ double sh[FIN_SEG][32];
    int64_t c = bx * 32 + threadIdx.x;
    double s = 0.0;
    if (c < ncols) {
        int64_t p = threadIdx.y;
        for (; p + 7 * FIN_SEG < P; p += 8 * FIN_SEG) { // 8 independent loads in flight
            double a[8];
#pragma unroll
            for (int u = 0; u < 8; u++)
                a[u] = part[(p + u * FIN_SEG) * ncols + c];
#pragma unroll
            for (int u = 0; u < 8; u++) // the same increasing-p order as one at a time
                s += a[u];
        }
        for (; p < P; p += FIN_SEG)
            s += part[p * ncols + c];
    }
    sh[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && c < ncols) {
        double t = 0.0;
        for (int k = 0; k < FIN_SEG; k++)
            t += sh[k][threadIdx.x];
        out[c] += (float)t;
    }
}
__global__ void colsum_finish_k(float *out, const double *part, int64_t P, int64_t ncols) {
    kda_grid_wait();
    colsum_finish_body(out, part, P, ncols, (int64_t)blockIdx.x);
}

// Launch of colsum_finish_k for ncols columns (a plain launch on st; the launch's error is
// left for the caller's CUDA_CHECK_LAUNCH).
void colsum_finish(cudaStream_t st, float *out, const double *part, int64_t P, int64_t ncols) {
    colsum_finish_k<<<(unsigned)CEIL_DIV(ncols, (int64_t)32), dim3(32, FIN_SEG), 0, st>>>(out, part,
                                                                                          P, ncols);
}
// The same on ctx->stream through kda_launch (programmatic when ctx->pdl); the launch's error.
inline cudaError_t colsum_finish(const KdaCudaCtx *ctx, float *out, const double *part, int64_t P,
                                 int64_t ncols) {
    return kda_launch(ctx, colsum_finish_k, dim3((unsigned)CEIL_DIV(ncols, (int64_t)32)),
                      dim3(32, FIN_SEG), 0, out, part, P, ncols);
}

// part[p, c] = Σ_{r in tile p} f(r, c) for a functor f (the product whose column sum is wanted),
// rows in increasing order. Rows go 8 at a time, all 8 values loaded before the adds, so each
// thread has 8 independent loads in flight instead of one (the adds keep the row order).
template <class F> __global__ void colsum_partial_k(double *part, int64_t N, int64_t ncols, F f) {
    kda_grid_wait();
    int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= ncols) return;
    int64_t r0 = (int64_t)blockIdx.y * TILE_ROWS, r1 = min(r0 + TILE_ROWS, N);
    double s = 0.0;
    for (int64_t r = r0; r < r1; r += 8) {
        float v[8];
#pragma unroll
        for (int u = 0; u < 8; u++)
            v[u] = r + u < r1 ? f(r + u, c) : 0.0f;
#pragma unroll
        for (int u = 0; u < 8; u++)
            if (r + u < r1) s += (double)v[u];
    }
    part[(int64_t)blockIdx.y * ncols + c] = s;
}

// Launches partial + finish: out [ncols] += Σ_r f(r, c) over N rows.
template <class F> int colsum_add(KdaCudaCtx *ctx, float *out, int64_t N, int64_t ncols, F f) {
    int64_t P = CEIL_DIV(N, (int64_t)TILE_ROWS);
    KDA_CUDA_REQUIRE(ctx, P <= 65535);
    double *part = (double *)kda_cuda_scratch(ctx, (size_t)(P * ncols) * sizeof(double));
    if (!part) return -1;
    dim3 grid((unsigned)CEIL_DIV(ncols, (int64_t)256), (unsigned)P);
    CUDA_CHECK(ctx, kda_launch(ctx, colsum_partial_k<F>, grid, dim3(256), 0, part, N, ncols, f));
    CUDA_CHECK(ctx, colsum_finish(ctx, out, part, P, ncols));
    return 0;
}

__device__ __forceinline__ int64_t warp_row(int64_t N) {
    int64_t r = (int64_t)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
    return r < N ? r : -1;
}

unsigned row_blocks(int64_t N) {
    return (unsigned)CEIL_DIV(N, (int64_t)ROWS_PER_BLOCK);
}

// ---- vector bf16 access: VEC consecutive elements as one 2·VEC-byte load/store ---------------
// VEC = 8 (16 B), 4 (8 B), 2 (4 B) or 1 (scalar fallback). The caller guarantees the alignment
// (vec_ok below). Element 0 is the low half of the first 32-bit word (little endian).
__device__ __forceinline__ void unpack2(unsigned u, float &lo, float &hi) {
    lo = __uint_as_float(u << 16);
    hi = __uint_as_float(u & 0xffff0000u);
}
__device__ __forceinline__ unsigned pack2(float lo, float hi) {
    return (unsigned)f2bf(lo) | ((unsigned)f2bf(hi) << 16);
}
template <int VEC> __device__ __forceinline__ void ld_bf(float (&v)[VEC], const kda_bf16 *p) {
    if constexpr (VEC == 8) {
        uint4 u = *reinterpret_cast<const uint4 *>(p);
        unpack2(u.x, v[0], v[1]);
        unpack2(u.y, v[2], v[3]);
        unpack2(u.z, v[4], v[5]);
        unpack2(u.w, v[6], v[7]);
    } else if constexpr (VEC == 4) {
        uint2 u = *reinterpret_cast<const uint2 *>(p);
        unpack2(u.x, v[0], v[1]);
        unpack2(u.y, v[2], v[3]);
    } else if constexpr (VEC == 2) {
        unpack2(*reinterpret_cast<const unsigned *>(p), v[0], v[1]);
    } else {
        static_assert(VEC == 1, "VEC is 1, 2, 4 or 8");
        v[0] = bf2f(*p);
    }
}
template <int VEC> __device__ __forceinline__ void st_bf(kda_bf16 *p, const float (&v)[VEC]) {
    if constexpr (VEC == 8) {
        *reinterpret_cast<uint4 *>(p) =
            make_uint4(pack2(v[0], v[1]), pack2(v[2], v[3]), pack2(v[4], v[5]), pack2(v[6], v[7]));
    } else if constexpr (VEC == 4) {
        *reinterpret_cast<uint2 *>(p) = make_uint2(pack2(v[0], v[1]), pack2(v[2], v[3]));
    } else if constexpr (VEC == 2) {
        *reinterpret_cast<unsigned *>(p) = pack2(v[0], v[1]);
    } else {
        static_assert(VEC == 1, "VEC is 1, 2, 4 or 8");
        *p = f2bf(v[0]);
    }
}

// fp32 counterparts (VEC = 4: one 16-byte access; 2: 8 bytes).
template <int VEC> __device__ __forceinline__ void ld_f(float (&v)[VEC], const float *p) {
    if constexpr (VEC == 4) {
        float4 u = *reinterpret_cast<const float4 *>(p);
        v[0] = u.x, v[1] = u.y, v[2] = u.z, v[3] = u.w;
    } else if constexpr (VEC == 2) {
        float2 u = *reinterpret_cast<const float2 *>(p);
        v[0] = u.x, v[1] = u.y;
    } else {
        static_assert(VEC == 1, "VEC is 1, 2 or 4");
        v[0] = *p;
    }
}
template <int VEC> __device__ __forceinline__ void st_f(float *p, const float (&v)[VEC]) {
    if constexpr (VEC == 4) {
        *reinterpret_cast<float4 *>(p) = make_float4(v[0], v[1], v[2], v[3]);
    } else {
        static_assert(VEC == 1, "VEC is 1 or 4");
        *p = v[0];
    }
}

// Either storage type (the fp32 forward of the scoring path, model_cuda_f32.c): VEC elements.
template <int VEC> __device__ __forceinline__ void ld_v(float (&v)[VEC], const kda_bf16 *p) {
    ld_bf<VEC>(v, p);
}
template <int VEC> __device__ __forceinline__ void ld_v(float (&v)[VEC], const float *p) {
    ld_f<VEC>(v, p);
}
template <int VEC> __device__ __forceinline__ void st_v(kda_bf16 *p, const float (&v)[VEC]) {
    st_bf<VEC>(p, v);
}
template <int VEC> __device__ __forceinline__ void st_v(float *p, const float (&v)[VEC]) {
    st_f<VEC>(p, v);
}

// True when every pointer is aligned to `bytes` (a null pointer counts as aligned).
__host__ __forceinline__ bool aligned_(size_t bytes, const void *a, const void *b = NULL,
                                       const void *c = NULL, const void *d = NULL,
                                       const void *e = NULL) {
    return (((uintptr_t)a | (uintptr_t)b | (uintptr_t)c | (uintptr_t)d | (uintptr_t)e) &
            (bytes - 1)) == 0;
}

// ---- group sums (the fused kernels and their host twins) --------------------------------------
// A "group" is lg consecutive lanes of a warp (lg a power of two <= 32, aligned) that hold one
// row between them. group_sum is an xor butterfly: every lane gets the same value, equal bit for
// bit to the tree a[i] += a[i + o] (o = lg/2, ..., 1) over the lanes' values (fp32 addition is
// commutative), which is what the host twins (group_sum_host) compute.
__device__ __forceinline__ float group_sum(float v, int lg) {
    unsigned lane = threadIdx.x & 31u;
    unsigned mask = lg >= 32 ? 0xffffffffu : ((1u << lg) - 1u) << (lane & ~(unsigned)(lg - 1));
    for (int o = lg / 2; o > 0; o >>= 1)
        v += __shfl_xor_sync(mask, v, o);
    return v;
}
// The same sum for a compile-time group size LG (1, 2, 4, .., 32): the same xor butterfly, offsets
// LG/2, ..., 1 in that order, so the same pairing and bit for bit group_sum(v, LG). Why a second
// one: with a run-time lg the loop does not unroll and ptxas cannot prove the lane-dependent mask
// converged, so every shuffle is wrapped in a convergence check and a collective fallback (MATCH /
// REDUX / VOTEU, WARPSYNC.COLLECTIVE: ~10 instructions a shuffle in the fused conv kernels, which
// are issue-bound); with LG constant the shuffles unroll and the check runs once per call.
template <int LG> __device__ __forceinline__ float group_sum(float v) {
    static_assert(LG >= 1 && LG <= 32 && (LG & (LG - 1)) == 0, "LG is a power of two <= 32");
    unsigned mask = 0xffffffffu;
    if constexpr (LG < 32) mask = ((1u << LG) - 1u) << ((threadIdx.x & 31u) & ~(unsigned)(LG - 1));
#pragma unroll
    for (int o = LG / 2; o > 0; o >>= 1)
        v += __shfl_xor_sync(mask, v, o);
    return v;
}
inline float group_sum_host(float *a, int lg) { // a [lg], destroyed
    for (int o = lg / 2; o > 0; o >>= 1)
        for (int i = 0; i < o; i++)
            a[i] += a[i + o];
    return a[0];
}
template <int VEC> __host__ __device__ __forceinline__ float sumsq_lane(const float (&x)[VEC]) {
    float s = 0.0f;
    for (int v = 0; v < VEC; v++)
        s += x[v] * x[v];
    return s;
}

// ---- the column-sum functor of a bias gradient (gemm_cuda bias_bwd, norm_cuda gnorm_bias_bwd) -
struct BiasDb { // dy
    const kda_bf16 *dy;
    int64_t out;
    __device__ float operator()(int64_t r, int64_t c) const {
        return bf2f(dy[r * out + c]);
    }
};

} // namespace

#endif
