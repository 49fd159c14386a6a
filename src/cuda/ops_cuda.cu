// ops_cuda.cu - row, elementwise and reduction kernels of the non-GEMM operators; see
// ops_cuda.h. Layout of this file: shared reduction helpers, then one section per operator in
// the order of the header.
//
// Row kernels use one warp per row (8 rows per 256-thread block). Column sums over rows (weight
// gradients) are deterministic: a first kernel (or the operator's own kernel, for the fused
// RMSNorm and conv backwards) sums fixed tiles of rows per column in double, colsum_finish adds
// the tiles in a fixed two-level order. Elementwise kernels use grid-stride loops.
// Bandwidth: the hot kernels move 8 or 16 bytes per access (vector paths, taken when sizes and
// pointer alignment allow, with a scalar twin of the same code otherwise); one 2-byte access per
// thread keeps too few bytes in flight to reach HBM bandwidth.
#include <cub/device/device_radix_sort.cuh>
#include <type_traits> // std::conditional

#include "cuda/cuda_internal.h" // defines: bf2f, f2bf, warp_sum, CEIL_DIV, KDA_CUDA_REQUIRE
#include "cuda/ops_cuda.h"      // defines: kda_cuda_* of this file

#define ROWS_PER_BLOCK 8  // warps per 256-thread block in row kernels
#define TILE_ROWS      64 // rows per tile of the deterministic column sums

namespace {

// ---- deterministic column sums -----------------------------------------------------------------

// out[c] += Σ_p part[p, c], c < ncols. Two levels in a fixed order (depends on P only): a
// block is 32 columns x FIN_SEG threads; thread (c, s) sums p = s, s + FIN_SEG, ... in
// increasing p, then thread (c, 0) adds the FIN_SEG segment sums in increasing s. A single
// thread per column (the first version) ran P dependent loads in series: 0.8 ms for the gate's
// 16k partials per head.
#define FIN_SEG 8
__global__ void colsum_finish_k(float *out, const double *part, int64_t P, int64_t ncols) {
    __shared__ double sh[FIN_SEG][32];
    int64_t c = (int64_t)blockIdx.x * 32 + threadIdx.x;
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

// Launch of colsum_finish_k for ncols columns.
void colsum_finish(cudaStream_t st, float *out, const double *part, int64_t P, int64_t ncols) {
    colsum_finish_k<<<(unsigned)CEIL_DIV(ncols, (int64_t)32), dim3(32, FIN_SEG), 0, st>>>(out, part,
                                                                                          P, ncols);
}

// part[p, c] = Σ_{r in tile p} f(r, c) for a functor f (the product whose column sum is wanted),
// rows in increasing order. Rows go 8 at a time, all 8 values loaded before the adds, so each
// thread has 8 independent loads in flight instead of one (the adds keep the row order).
template <class F> __global__ void colsum_partial_k(double *part, int64_t N, int64_t ncols, F f) {
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
    colsum_partial_k<<<grid, 256, 0, ctx->stream>>>(part, N, ncols, f);
    CUDA_CHECK_LAUNCH(ctx);
    colsum_finish(ctx->stream, out, part, P, ncols);
    CUDA_CHECK_LAUNCH(ctx);
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
// VEC = 8 (16 B), 4 (8 B) or 1 (scalar fallback). The caller guarantees the alignment
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
    } else {
        static_assert(VEC == 1, "VEC is 1, 4 or 8");
        v[0] = bf2f(*p);
    }
}
template <int VEC> __device__ __forceinline__ void st_bf(kda_bf16 *p, const float (&v)[VEC]) {
    if constexpr (VEC == 8) {
        *reinterpret_cast<uint4 *>(p) =
            make_uint4(pack2(v[0], v[1]), pack2(v[2], v[3]), pack2(v[4], v[5]), pack2(v[6], v[7]));
    } else if constexpr (VEC == 4) {
        *reinterpret_cast<uint2 *>(p) = make_uint2(pack2(v[0], v[1]), pack2(v[2], v[3]));
    } else {
        static_assert(VEC == 1, "VEC is 1, 4 or 8");
        *p = f2bf(v[0]);
    }
}

// fp32 counterparts (VEC = 4: one 16-byte access).
template <int VEC> __device__ __forceinline__ void ld_f(float (&v)[VEC], const float *p) {
    if constexpr (VEC == 4) {
        float4 u = *reinterpret_cast<const float4 *>(p);
        v[0] = u.x, v[1] = u.y, v[2] = u.z, v[3] = u.w;
    } else {
        static_assert(VEC == 1, "VEC is 1 or 4");
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

// ---- RMSNorm -----------------------------------------------------------------------------------

// x [N, D] fp32; when a != NULL, x += a first (x is then the residual, written back).
// VEC = 4: 16-byte fp32 and 8-byte bf16 accesses (D % 4 == 0, aligned rows; lane l takes
// elements 4l .. 4l+3, 4l+128 ...), else 1. Each lane sums its own elements' squares in order,
// then the warp sum. Y: the output's storage, bf16 (training) or fp32 (scoring).
template <int VEC, class Y>
__global__ void rmsnorm_fwd_k(Y *y, float *rstd, float *x, const kda_bf16 *a, const float *w,
                              int64_t N, int64_t D, float eps) {
    int64_t r = warp_row(N);
    if (r < 0) return;
    int lane = threadIdx.x & 31;
    float *xr = x + r * D;
    float ss = 0.0f;
    for (int64_t d = lane * VEC; d < D; d += 32 * VEC) {
        float v[VEC];
        ld_f<VEC>(v, xr + d);
        if (a) {
            float av[VEC];
            ld_bf<VEC>(av, a + r * D + d);
#pragma unroll
            for (int e = 0; e < VEC; e++)
                v[e] += av[e];
            st_f<VEC>(xr + d, v);
        }
#pragma unroll
        for (int e = 0; e < VEC; e++)
            ss += v[e] * v[e];
    }
    ss = warp_sum(ss);
    float rs = (float)(1.0 / sqrt((double)ss / (double)D + (double)eps));
    if (lane == 0) rstd[r] = rs;
    for (int64_t d = lane * VEC; d < D; d += 32 * VEC) {
        float v[VEC], wv[VEC], o[VEC];
        ld_f<VEC>(v, xr + d);
        ld_f<VEC>(wv, w + d);
#pragma unroll
        for (int e = 0; e < VEC; e++)
            o[e] = v[e] * rs * wv[e];
        st_v<VEC>(y + r * D + d, o);
    }
}

// The same without the residual add for D = 128·NV (NV <= 12), the row's x held in registers:
// all of a lane's loads issued first (the loop kernel's loads wait on each other's math, and its
// second pass reads x again); the same arithmetic in the same order as rmsnorm_fwd_k<4>.
template <int NV, class Y>
__global__ void rmsnorm_fwd_reg_k(Y *y, float *rstd, const float *x, const float *w, int64_t N,
                                  float eps) {
    constexpr int64_t D = 128 * NV;
    int64_t r = warp_row(N);
    if (r < 0) return;
    int lane = threadIdx.x & 31;
    const float *xr = x + r * D;
    float v[NV][4];
#pragma unroll
    for (int k = 0; k < NV; k++)
        ld_f<4>(v[k], xr + lane * 4 + k * 128);
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < NV; k++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            ss += v[k][e] * v[k][e];
    ss = warp_sum(ss);
    float rs = (float)(1.0 / sqrt((double)ss / (double)D + (double)eps));
    if (lane == 0) rstd[r] = rs;
#pragma unroll
    for (int k = 0; k < NV; k++) {
        float wv[4], o[4];
        ld_f<4>(wv, w + lane * 4 + k * 128);
#pragma unroll
        for (int e = 0; e < 4; e++)
            o[e] = v[k][e] * rs * wv[e];
        st_v<4>(y + r * D + lane * 4 + k * 128, o);
    }
}

// dxb (may be NULL): [N, D] bf16 copy of the dx written (the next GEMM's operand).
__global__ void rmsnorm_bwd_k(float *dx, kda_bf16 *dxb, const float *dy, const float *x,
                              const float *w, const float *rstd, int64_t N, int64_t D,
                              int accumulate) {
    int64_t r = warp_row(N);
    if (r < 0) return;
    int lane = threadIdx.x & 31;
    const float *xr = x + r * D, *dyr = dy + r * D;
    float rs = rstd[r];
    float dot = 0.0f; // Σ (dy ⊙ w) ⊙ x̂
    for (int64_t d = lane; d < D; d += 32)
        dot += dyr[d] * w[d] * (xr[d] * rs);
    float m = warp_sum(dot) / (float)D;
    for (int64_t d = lane; d < D; d += 32) {
        float v = rs * (dyr[d] * w[d] - xr[d] * rs * m);
        v = accumulate ? dx[r * D + d] + v : v;
        dx[r * D + d] = v;
        if (dxb) dxb[r * D + d] = f2bf(v);
    }
}

// Fused backward for D <= RMS_FUSED_MAX_D: dx as rmsnorm_bwd_k, and the dw column sums of the
// block's TILE_ROWS rows without a second pass over dy and x (which cost ~8 of the 24 B/elem).
// Warp k takes rows r0 + k, r0 + k + 8, ... and adds dy ⊙ x̂ into its own fp32 row acc[k][:]
// of shared memory (rows in increasing order, no atomics); the block then writes
// part[blockIdx.x, d] = Σ_k acc[k][d] in double, k increasing, and colsum_finish adds the
// tiles. VEC = 4: float4 loads (D % 4 == 0, 16-byte aligned rows), else 1.
#define RMS_FUSED_MAX_D 1536 // 8 warps x D x 4 B of shared memory <= 48 KB
template <int VEC>
__global__ void __launch_bounds__(32 * ROWS_PER_BLOCK)
    rmsnorm_bwd_fused_k(float *dx, kda_bf16 *dxb, double *part, const float *dy, const float *x,
                        const float *w, const float *rstd, int64_t N, int64_t D, int accumulate) {
    extern __shared__ float acc[]; // [ROWS_PER_BLOCK][D]
    int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    float *my = acc + (int64_t)warp * D;
    for (int64_t d = lane; d < D; d += 32)
        my[d] = 0.0f;
    __syncwarp(); // the VEC = 4 loop below reads columns another lane zeroed
    int64_t r0 = (int64_t)blockIdx.x * TILE_ROWS, r1 = min(r0 + TILE_ROWS, N);
    for (int64_t r = r0 + warp; r < r1; r += ROWS_PER_BLOCK) {
        const float *xr = x + r * D, *dyr = dy + r * D;
        float *dxr = dx + r * D;
        float rs = rstd[r], dot = 0.0f; // Σ (dy ⊙ w) ⊙ x̂
#pragma unroll 4
        for (int64_t d = lane * VEC; d < D; d += 32 * VEC) {
            float a[VEC], b[VEC], c[VEC];
            ld_f<VEC>(a, dyr + d);
            ld_f<VEC>(b, w + d);
            ld_f<VEC>(c, xr + d);
#pragma unroll
            for (int v = 0; v < VEC; v++)
                dot += a[v] * b[v] * (c[v] * rs);
        }
        float m = warp_sum(dot) / (float)D;
#pragma unroll 4
        for (int64_t d = lane * VEC; d < D; d += 32 * VEC) { // dy, x again: L1/L2 hits
            float a[VEC], b[VEC], c[VEC], o[VEC];
            ld_f<VEC>(a, dyr + d);
            ld_f<VEC>(b, w + d);
            ld_f<VEC>(c, xr + d);
            if (accumulate) ld_f<VEC>(o, dxr + d);
#pragma unroll
            for (int v = 0; v < VEC; v++) {
                float g = rs * (a[v] * b[v] - c[v] * rs * m);
                o[v] = accumulate ? o[v] + g : g;
                my[d + v] += a[v] * c[v] * rs; // as RmsDw
            }
            st_f<VEC>(dxr + d, o);
            if (dxb) st_bf<VEC>(dxb + r * D + d, o);
        }
    }
    __syncthreads();
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
        double s = 0.0;
        for (int k = 0; k < ROWS_PER_BLOCK; k++)
            s += (double)acc[(int64_t)k * D + d];
        part[(int64_t)blockIdx.x * D + d] = s;
    }
}

// The same for D = 128·NV (NV <= 12: 300M's D = 1024 is NV = 8), with each lane's dy and x
// elements of the row held in registers between the two passes: every dy, x load of the row is
// issued before the first use (256 B per lane in flight at D = 1024) and the second pass reads
// only w (L1) and, accumulating, dx. rmsnorm_bwd_fused_k's second pass re-read dy and x, 8 KB
// per warp per row: with 32 warps per SM that is 34 MB over the GPU, most of the L2, so part of
// it came from HBM (the row measured 2.8 TB/s, 1.47x its floor, 2026-12-03). Same arithmetic in
// the same order as rmsnorm_bwd_fused_k<4> (lane elements 4l + 128k .. +3, k increasing): the
// same bits.
template <int NV>
__global__ void __launch_bounds__(32 * ROWS_PER_BLOCK)
    rmsnorm_bwd_reg_k(float *dx, kda_bf16 *dxb, double *part, const float *dy, const float *x,
                      const float *w, const float *rstd, int64_t N, int accumulate) {
    constexpr int64_t D = 128 * NV;
    __shared__ float acc[ROWS_PER_BLOCK * D];
    int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    float *my = acc + (int64_t)warp * D;
    for (int64_t d = lane; d < D; d += 32)
        my[d] = 0.0f;
    __syncwarp(); // the loop below reads columns another lane zeroed
    int64_t r0 = (int64_t)blockIdx.x * TILE_ROWS, r1 = min(r0 + TILE_ROWS, N);
    for (int64_t r = r0 + warp; r < r1; r += ROWS_PER_BLOCK) {
        const float *xr = x + r * D, *dyr = dy + r * D;
        float *dxr = dx + r * D;
        float a[NV][4], c[NV][4];
#pragma unroll
        for (int k = 0; k < NV; k++) {
            ld_f<4>(a[k], dyr + lane * 4 + k * 128);
            ld_f<4>(c[k], xr + lane * 4 + k * 128);
        }
        float rs = rstd[r], dot = 0.0f; // Σ (dy ⊙ w) ⊙ x̂
#pragma unroll
        for (int k = 0; k < NV; k++) {
            float b[4];
            ld_f<4>(b, w + lane * 4 + k * 128);
#pragma unroll
            for (int v = 0; v < 4; v++)
                dot += a[k][v] * b[v] * (c[k][v] * rs);
        }
        float m = warp_sum(dot) / (float)D;
#pragma unroll
        for (int k = 0; k < NV; k++) {
            int64_t d = lane * 4 + k * 128;
            float b[4], o[4];
            ld_f<4>(b, w + d);
            if (accumulate) ld_f<4>(o, dxr + d);
#pragma unroll
            for (int v = 0; v < 4; v++) {
                float g = rs * (a[k][v] * b[v] - c[k][v] * rs * m);
                o[v] = accumulate ? o[v] + g : g;
                my[d + v] += a[k][v] * c[k][v] * rs; // as RmsDw
            }
            st_f<4>(dxr + d, o);
            if (dxb) st_bf<4>(dxb + r * D + d, o);
        }
    }
    __syncthreads();
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
        double s = 0.0;
        for (int k = 0; k < ROWS_PER_BLOCK; k++)
            s += (double)acc[(int64_t)k * D + d];
        part[(int64_t)blockIdx.x * D + d] = s;
    }
}

struct RmsDw { // dy ⊙ x̂
    const float *dy, *x, *rstd;
    int64_t D;
    __device__ float operator()(int64_t r, int64_t c) const {
        return dy[r * D + c] * x[r * D + c] * rstd[r];
    }
};

// ---- L2 norm -----------------------------------------------------------------------------------

template <class E> // E: bf16 or fp32 storage
__global__ void l2norm_fwd_k(E *y, float *rstd, const E *x, int64_t N, int64_t dim, float eps) {
    int64_t r = warp_row(N);
    if (r < 0) return;
    int lane = threadIdx.x & 31;
    float ss = 0.0f;
    for (int64_t i = lane; i < dim; i += 32) {
        float v = ldf(x, r * dim + i);
        ss += v * v;
    }
    ss = warp_sum(ss);
    float rs = (float)(1.0 / sqrt((double)ss + (double)eps)); // eps inside the square root
    if (lane == 0 && rstd) rstd[r] = rs;
    for (int64_t i = lane; i < dim; i += 32)
        stf(y, r * dim + i, ldf(x, r * dim + i) * rs);
}

__global__ void l2norm_bwd_k(kda_bf16 *dx, const float *dy, const kda_bf16 *x, const float *rstd,
                             int64_t N, int64_t dim) {
    int64_t r = warp_row(N);
    if (r < 0) return;
    int lane = threadIdx.x & 31;
    float rs = rstd[r], dot = 0.0f;
    for (int64_t i = lane; i < dim; i += 32)
        dot += dy[r * dim + i] * (bf2f(x[r * dim + i]) * rs);
    dot = warp_sum(dot);
    for (int64_t i = lane; i < dim; i += 32) {
        float yh = bf2f(x[r * dim + i]) * rs;
        dx[r * dim + i] = f2bf(rs * (dy[r * dim + i] - dot * yh));
    }
}

// ---- group sums and the L2 norm pieces shared with the host twins -----------------------------
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
inline float group_sum_host(float *a, int lg) { // a [lg], destroyed
    for (int o = lg / 2; o > 0; o >>= 1)
        for (int i = 0; i < o; i++)
            a[i] += a[i + o];
    return a[0];
}
// 1 / sqrt(|x|² + eps), eps inside the root, in double (as l2norm_fwd_k).
__host__ __device__ __forceinline__ float l2_rs(float ss, float eps) {
    return (float)(1.0 / sqrt((double)ss + (double)eps));
}
template <int VEC> __host__ __device__ __forceinline__ float sumsq_lane(const float (&x)[VEC]) {
    float s = 0.0f;
    for (int v = 0; v < VEC; v++)
        s += x[v] * x[v];
    return s;
}
// L2 backward, one lane's share: yh = SiLU(c)·rs (written), returns Σ_v g·yh over its VEC.
template <int VEC>
__host__ __device__ __forceinline__ float l2_bwd_dot_lane(float (&yh)[VEC], const float (&g)[VEC],
                                                          const float (&c)[VEC], float rs) {
    float dot = 0.0f;
    for (int v = 0; v < VEC; v++) {
        yh[v] = silu_f(c[v]) * rs;
        dot += g[v] * yh[v];
    }
    return dot;
}

// ---- causal depthwise conv + SiLU ------------------------------------------------------------
//
// Work split (forward and backward): a thread owns VEC consecutive channels of one row b and a
// tile of CONV_TT consecutive tokens; it walks the tile in increasing t and keeps the last W
// inputs in registers (a sliding window), so each input is loaded once per thread instead of W
// times, and the index math (div/mod) runs once per thread instead of once per element. A block is
// 32 channel groups (threadIdx.x: one warp reads 32·VEC contiguous channels) x CONV_BT tiles
// (threadIdx.y), so every warp walks one tile and the `t < T` tests are warp-uniform. Tile q of
// the flattened (b, tile) index is b = q / ntile, tokens [(q % ntile)·TT, +TT) ∩ [0, T).
// Halo: a tile also reads W-1 tokens before it (and, backward, W-1 after it); those reads
// hit L2 (the neighbour tile is in the same block), the HBM traffic stays ~1 read per input.
// Loads in flight (2026-12-03): the forward issues all of its tile's loads (the W-1 history
// tokens and its CONV_TT_FWD tokens, as raw VEC-element words) before the first use, and the
// backward keeps its loads CONV_PD tokens ahead of their use (a ring of raw words), so a thread
// has 150-200 bytes in flight instead of one 16-byte load used at once; the measured rows were
// ~1 TB/s (conv+SiLU fwd 1.69 ms, bwd 2.95 ms at mb 16, 4.3x their floor) with 512 threads per SM
// of the q/k grids each waiting on its load. The arithmetic and its order are unchanged.
// Template PF = false is the kernel before (one load per token, used at once; forward tiles of
// 16): KDA_CONV_PREFETCH=0, read at every launch, runs it (to measure against).
#define CONV_MAX_W    8
#define CONV_BT       8
#define CONV_TT_FWD   8 // tokens per forward tile (16 without the prefetch, KDA_CONV_PREFETCH=0)
#define CONV_TT_BWD   32
#define CONV_PD       8 // backward prefetch distance (tokens)
#define CONV_TT_F(PF) ((PF) ? CONV_TT_FWD : 16)

// VEC consecutive elements of storage E as one raw load (held until converted).
template <int VEC, class E> struct ConvRaw;
template <> struct ConvRaw<8, kda_bf16> {
    uint4 u;
    __device__ __forceinline__ void ld(const kda_bf16 *p) {
        u = *reinterpret_cast<const uint4 *>(p);
    }
    __device__ __forceinline__ void zero() {
        u = make_uint4(0u, 0u, 0u, 0u);
    }
    __device__ __forceinline__ void get(float (&v)[8]) const {
        unpack2(u.x, v[0], v[1]), unpack2(u.y, v[2], v[3]);
        unpack2(u.z, v[4], v[5]), unpack2(u.w, v[6], v[7]);
    }
};
template <> struct ConvRaw<4, kda_bf16> {
    uint2 u;
    __device__ __forceinline__ void ld(const kda_bf16 *p) {
        u = *reinterpret_cast<const uint2 *>(p);
    }
    __device__ __forceinline__ void zero() {
        u = make_uint2(0u, 0u);
    }
    __device__ __forceinline__ void get(float (&v)[4]) const {
        unpack2(u.x, v[0], v[1]), unpack2(u.y, v[2], v[3]);
    }
};
template <> struct ConvRaw<1, kda_bf16> {
    kda_bf16 u;
    __device__ __forceinline__ void ld(const kda_bf16 *p) {
        u = *p;
    }
    __device__ __forceinline__ void zero() {
        u = 0;
    }
    __device__ __forceinline__ void get(float (&v)[1]) const {
        v[0] = bf2f(u);
    }
};
template <> struct ConvRaw<4, float> {
    float4 u;
    __device__ __forceinline__ void ld(const float *p) {
        u = *reinterpret_cast<const float4 *>(p);
    }
    __device__ __forceinline__ void zero() {
        u = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    __device__ __forceinline__ void get(float (&v)[4]) const {
        v[0] = u.x, v[1] = u.y, v[2] = u.z, v[3] = u.w;
    }
};
template <> struct ConvRaw<1, float> {
    float u;
    __device__ __forceinline__ void ld(const float *p) {
        u = *p;
    }
    __device__ __forceinline__ void zero() {
        u = 0.0f;
    }
    __device__ __forceinline__ void get(float (&v)[1]) const {
        v[0] = u;
    }
};

// Thread's work item: channel ch0 (first of VEC), row b, tokens [t0, t1). Returns false when
// the thread has no channels (tail of the channel groups) or no tokens (tail of the tiles).
template <int VEC, int TT> struct ConvItem {
    int64_t ch0, b, t0, t1;
    __device__ bool init(int64_t B, int64_t T, int64_t C) {
        int64_t ncg = C / VEC, ntile = (T + TT - 1) / TT;
        int64_t cg = (int64_t)blockIdx.x * 32 + threadIdx.x;
        int64_t q = (int64_t)blockIdx.y * CONV_BT + threadIdx.y;
        ch0 = cg * VEC;
        b = q / ntile;
        t0 = (q - b * ntile) * TT;
        t1 = min(t0 + TT, T);
        return cg < ncg && b < B;
    }
};

// y_t = SiLU(Σ_i w[ch, i] p_{t-(W-1)+i}), zero history before t = 0. E: bf16 or fp32 storage.
// With L2 (the fused q/k path): y = SiLU(conv) / sqrt(|SiLU(conv)|² + eps) per head of K = lg·VEC
// channels (lg consecutive lanes hold a head; C = H·K), rstd [B·T·H] = that reciprocal root.
template <int W, int VEC, bool L2, bool PF, class E>
__global__ void __launch_bounds__(32 * CONV_BT)
    conv_fwd_k(E *y, float *rstd, const E *p, const float *w, int64_t B, int64_t T, int64_t C,
               int lg, float eps) {
    constexpr int TT = CONV_TT_F(PF);
    ConvItem<VEC, TT> it;
    if (!it.init(B, T, C)) return;
    float wr[W][VEC], win[W][VEC]; // win[i] = p_{t-(W-1)+i}; win[W-1] is the current token
#pragma unroll
    for (int v = 0; v < VEC; v++)
#pragma unroll
        for (int i = 0; i < W; i++)
            wr[i][v] = w[(it.ch0 + v) * W + i];
    const E *pb = p + it.b * T * C + it.ch0;
    E *yb = y + it.b * T * C + it.ch0;
    // L2: this lane's head (K = lg·VEC channels) and whether it writes the head's rstd
    const int64_t K = L2 ? (int64_t)lg * VEC : 1, H = C / K, head = it.ch0 / K;
    const bool lead = it.ch0 % K == 0;
    (void)H, (void)head, (void)lead; // unused without L2
    // every load of the tile first: raw[j] = p_{t0-(W-1)+j} (zero before t = 0; not loaded
    // past the tile's end), the history p_{t0-(W-1)} .. p_{t0-1} and the tile's tokens
    ConvRaw<VEC, E> raw[PF ? TT + W - 1 : 1];
    if constexpr (PF) {
#pragma unroll
        for (int j = 0; j < TT + W - 1; j++) {
            int64_t tau = it.t0 - (W - 1) + j;
            if (tau >= 0 && tau < it.t1)
                raw[j].ld(pb + tau * C);
            else
                raw[j].zero();
        }
#pragma unroll
        for (int i = 0; i < W - 1; i++)
            raw[i].get(win[i]);
    } else {
#pragma unroll
        for (int i = 0; i < W - 1; i++) { // history p_{t0-(W-1)} .. p_{t0-1}
            int64_t tau = it.t0 - (W - 1) + i;
            if (tau >= 0) {
                ld_v<VEC>(win[i], pb + tau * C);
            } else {
#pragma unroll
                for (int v = 0; v < VEC; v++)
                    win[i][v] = 0.0f;
            }
        }
    }
#pragma unroll
    for (int s = 0; s < TT; s++) {
        int64_t t = it.t0 + s;
        if (t >= it.t1) break; // warp-uniform (one tile per warp)
        if constexpr (PF)
            raw[s + W - 1].get(win[W - 1]);
        else
            ld_v<VEC>(win[W - 1], pb + t * C);
        float out[VEC];
#pragma unroll
        for (int v = 0; v < VEC; v++) {
            float acc = 0.0f;
#pragma unroll
            for (int i = 0; i < W; i++)
                acc += wr[i][v] * win[i][v]; // tap order 0..W-1, as the CPU twin
            out[v] = silu_f(acc);
        }
        if constexpr (L2) { // the head's sum of squares over its lg lanes (fp32, tree order)
            float rs = l2_rs(group_sum(sumsq_lane<VEC>(out), lg), eps);
#pragma unroll
            for (int v = 0; v < VEC; v++)
                out[v] *= rs;
            if (lead) rstd[(it.b * T + t) * H + head] = rs;
        }
        st_v<VEC>(yb + t * C, out);
#pragma unroll
        for (int i = 0; i < W - 1; i++) // slide (register renames once unrolled)
#pragma unroll
            for (int v = 0; v < VEC; v++)
                win[i][v] = win[i + 1][v];
    }
}

// Backward, fused dp + dw partials. With c_t the pre-activation and dc_t = dy_t SiLU'(c_t):
//   dp_τ = Σ_i w_i dc_{τ+(W-1)-i}      dw_i = Σ_t dc_t p_{t-(W-1)+i}
// The thread walks t = t0 .. t1+W-2: it recomputes c_t from the p window, gets dc_t (0 past
// T), keeps the last W dc values, and emits dp_{t-(W-1)} once that window is full. dc_t for
// t < t1 also goes into the thread's fp32 dw sums (tokens of its own tile only, in increasing
// t). The block then adds its CONV_BT tiles in double, in increasing threadIdx.y, and writes
// part[blockIdx.y, ch, i]; colsum_finish adds the blocks in order. All fixed by the shapes.
// With L2 (the fused q/k path) the incoming gradient is dq [B, T, C] fp32 w.r.t. the L2 norm's
// output: the kernel recomputes ŷ = SiLU(c)·rstd and turns it into the gradient w.r.t. SiLU(c),
// rstd (dq·... - (dq·ŷ) ŷ) with the head's dot over its lg lanes, before the SiLU and conv
// backward; dy is unused then.
template <int W, int VEC, bool L2, bool PF>
__global__ void __launch_bounds__(32 * CONV_BT)
    conv_bwd_k(kda_bf16 *dp, double *part, const kda_bf16 *dy, const kda_bf16 *p, const float *w,
               const float *dq, const float *rstd, int64_t B, int64_t T, int64_t C, int lg,
               int64_t ldo) {
    __shared__ float sh[CONV_BT][32 * VEC];
    ConvItem<VEC, CONV_TT_BWD> it;
    bool active = it.init(B, T, C);
    float wr[W][VEC], pw[W][VEC], dcw[W][VEC], acc[W][VEC];
    // pw[i] = p_{t-(W-1)+i}; dcw[i] = dc_{t-(W-1)+i} (dcw[W-1] = dc_t)
#pragma unroll
    for (int i = 0; i < W; i++)
#pragma unroll
        for (int v = 0; v < VEC; v++)
            wr[i][v] = pw[i][v] = dcw[i][v] = acc[i][v] = 0.0f;
    if (active) {
#pragma unroll
        for (int v = 0; v < VEC; v++)
#pragma unroll
            for (int i = 0; i < W; i++)
                wr[i][v] = w[(it.ch0 + v) * W + i];
        const kda_bf16 *pb = p + it.b * T * C + it.ch0;
        const kda_bf16 *dyb = L2 ? NULL : dy + it.b * T * C + it.ch0;
        kda_bf16 *dpb = dp + it.b * T * ldo + it.ch0; // rows of dp: stride ldo (>= C)
        const int64_t K = L2 ? (int64_t)lg * VEC : 1, H = C / K, head = it.ch0 / K;
        (void)H, (void)head; // unused without L2
#pragma unroll
        for (int i = 0; i < W - 1; i++) {
            int64_t tau = it.t0 - (W - 1) + i;
            if (tau >= 0) ld_bf<VEC>(pw[i], pb + tau * C);
        }
        // the ring: slot s % CONV_PD holds token t0 + s's p, incoming gradient (and rstd) from
        // CONV_PD steps before its use (loaded only for t < T)
        constexpr int NS = CONV_TT_BWD + W - 1;
        using GRaw =
            typename std::conditional<L2, ConvRaw<VEC, float>, ConvRaw<VEC, kda_bf16>>::type;
        ConvRaw<VEC, kda_bf16> rp[CONV_PD];
        GRaw rg[CONV_PD];
        float rr[CONV_PD];
        auto fetch = [&](int slot, int j) {
            int64_t tn = it.t0 + j;
            if (j >= NS || tn >= T) return;
            rp[slot].ld(pb + tn * C);
            if constexpr (L2) {
                rg[slot].ld(dq + (it.b * T + tn) * C + it.ch0);
                rr[slot] = rstd[(it.b * T + tn) * H + head];
            } else {
                rg[slot].ld(dyb + tn * C);
            }
        };
        if constexpr (PF) {
#pragma unroll
            for (int j = 0; j < CONV_PD; j++)
                fetch(j, j);
        }
#pragma unroll
        for (int s = 0; s < NS; s++) {
            int64_t t = it.t0 + s;
            if (t - (W - 1) >= it.t1) break; // every dp of the tile emitted (warp-uniform)
            float dc[VEC];
            if (t < T) { // warp-uniform (one tile per warp): the group sums below are safe
                float g[VEC], c[VEC];
                float rs = 0.0f; // the head's rstd (L2 only)
                if constexpr (PF) {
                    rp[s % CONV_PD].get(pw[W - 1]);
                    rg[s % CONV_PD].get(g);
                    if constexpr (L2) rs = rr[s % CONV_PD];
                    fetch(s % CONV_PD, s + CONV_PD); // the slot is free again
                } else { // the kernel before: this token's loads, used at once
                    ld_bf<VEC>(pw[W - 1], pb + t * C);
                    if constexpr (L2) {
                        ld_f<VEC>(g, dq + (it.b * T + t) * C + it.ch0);
                        rs = rstd[(it.b * T + t) * H + head];
                    } else {
                        ld_bf<VEC>(g, dyb + t * C);
                    }
                }
#pragma unroll
                for (int v = 0; v < VEC; v++) {
                    c[v] = 0.0f;
#pragma unroll
                    for (int i = 0; i < W; i++)
                        c[v] += wr[i][v] * pw[i][v];
                }
                if constexpr (L2) {
                    float yh[VEC];
                    float dot = group_sum(l2_bwd_dot_lane<VEC>(yh, g, c, rs), lg);
#pragma unroll
                    for (int v = 0; v < VEC; v++)
                        g[v] = rs * (g[v] - dot * yh[v]);
                }
#pragma unroll
                for (int v = 0; v < VEC; v++)
                    dc[v] = g[v] * dsilu_f(c[v]);
            } else {
#pragma unroll
                for (int v = 0; v < VEC; v++)
                    dc[v] = 0.0f;
            }
#pragma unroll
            for (int v = 0; v < VEC; v++)
                dcw[W - 1][v] = dc[v];
            if (t < it.t1) { // dw: tokens of this tile only
#pragma unroll
                for (int i = 0; i < W; i++)
#pragma unroll
                    for (int v = 0; v < VEC; v++)
                        acc[i][v] += dc[v] * pw[i][v];
            }
            int64_t tau = t - (W - 1);
            if (tau >= it.t0) { // dp_τ = Σ_i w_i dc_{τ+(W-1)-i} = Σ_i w_i dcw[W-1-i]
                float o[VEC];
#pragma unroll
                for (int v = 0; v < VEC; v++) {
                    float a = 0.0f;
#pragma unroll
                    for (int i = 0; i < W; i++)
                        a += wr[i][v] * dcw[W - 1 - i][v];
                    o[v] = a;
                }
                st_bf<VEC>(dpb + tau * ldo, o);
            }
#pragma unroll
            for (int i = 0; i < W - 1; i++)
#pragma unroll
                for (int v = 0; v < VEC; v++) {
                    pw[i][v] = pw[i + 1][v];
                    dcw[i][v] = dcw[i + 1][v];
                }
        }
    }
    // Block reduction of the dw sums over the CONV_BT tiles, one tap at a time (4 KB of shared).
    // Inactive threads contribute zeros and still reach every barrier.
    // The block's 32·VEC channels are spread over its threads for the final sums.
#pragma unroll
    for (int i = 0; i < W; i++) {
#pragma unroll
        for (int v = 0; v < VEC; v++)
            sh[threadIdx.y][threadIdx.x * VEC + v] = acc[i][v];
        __syncthreads();
        for (int k = threadIdx.y * 32 + threadIdx.x; k < 32 * VEC; k += 32 * CONV_BT) {
            int64_t ch = (int64_t)blockIdx.x * 32 * VEC + k;
            if (ch < C) {
                double s = 0.0;
                for (int y = 0; y < CONV_BT; y++)
                    s += (double)sh[y][k];
                part[((int64_t)blockIdx.y * C + ch) * W + i] = s;
            }
        }
        __syncthreads();
    }
}

// Launches one instantiation of a conv kernel for the run-time W (1..CONV_MAX_W).
#define CONV_DISPATCH_W(W_, MACRO)                                                                 \
    switch (W_) {                                                                                  \
    case 1:                                                                                        \
        MACRO(1);                                                                                  \
        break;                                                                                     \
    case 2:                                                                                        \
        MACRO(2);                                                                                  \
        break;                                                                                     \
    case 3:                                                                                        \
        MACRO(3);                                                                                  \
        break;                                                                                     \
    case 4:                                                                                        \
        MACRO(4);                                                                                  \
        break;                                                                                     \
    case 5:                                                                                        \
        MACRO(5);                                                                                  \
        break;                                                                                     \
    case 6:                                                                                        \
        MACRO(6);                                                                                  \
        break;                                                                                     \
    case 7:                                                                                        \
        MACRO(7);                                                                                  \
        break;                                                                                     \
    default:                                                                                       \
        MACRO(8);                                                                                  \
        break;                                                                                     \
    }

// ---- gate + chunk-local cumsum ---------------------------------------------------------------

__device__ __forceinline__ float softplus_f(float a) {
    return a > 20.0f ? a : log1pf(expf(a));
}

// One thread per (b, chunk, j, d): walks the chunk's tokens forward. E: f's storage.
template <class E>
__global__ void gate_fwd_k(float *gcum, float *gout, const E *f, const float *A_log,
                           const float *dt_bias, int64_t B, int64_t T, int64_t HV, int64_t K,
                           int64_t chunk) {
    int64_t HK = HV * K, NC = CEIL_DIV(T, chunk);
    int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= B * NC * HK) return;
    int64_t jd = e % HK, bc = e / HK, ck = bc % NC, b = bc / NC;
    float A = expf(A_log[jd / K]), bias = dt_bias[jd], acc = 0.0f;
    int64_t t1 = min((ck + 1) * chunk, T);
    for (int64_t t = ck * chunk; t < t1; t++) {
        int64_t i = (b * T + t) * HK + jd;
        float g = -A * softplus_f(ldf(f, i) + bias);
        acc += g;
        gcum[i] = acc;
        if (gout) gout[i] = g;
    }
}

// Reverse cumsum within the chunk, then the gate backward; tile partials for dt_bias and A_log:
// part_dt / part_A [B*NC, HV*K]. One thread per (b, chunk, j, d) (consecutive threads read
// consecutive j·K + d: coalesced). The walk over the chunk is serial (dg is a running sum), but
// its loads are not: tokens go GATE_UNROLL at a time, all loads of a group issued before the
// dependent math, so a thread has 2·GATE_UNROLL loads in flight instead of 2.
#define GATE_UNROLL 8
__global__ void gate_bwd_k(kda_bf16 *df, double *part_dt, double *part_A, const float *dgcum,
                           const kda_bf16 *f, const float *A_log, const float *dt_bias, int64_t B,
                           int64_t T, int64_t HV, int64_t K, int64_t chunk, int from_cumsum) {
    int64_t HK = HV * K, NC = CEIL_DIV(T, chunk);
    int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= B * NC * HK) return;
    int64_t jd = e % HK, bc = e / HK, ck = bc % NC, b = bc / NC;
    float A = expf(A_log[jd / K]), bias = dt_bias[jd], dg = 0.0f;
    double sdt = 0.0, sA = 0.0;
    int64_t t0 = ck * chunk, t1 = min((ck + 1) * chunk, T);
    const float *dgb = dgcum + b * T * HK + jd; // token t at [t * HK]
    const kda_bf16 *fb = f + b * T * HK + jd;
    kda_bf16 *dfb = df + b * T * HK + jd;
    for (int64_t tg = t1 - 1; tg >= t0; tg -= GATE_UNROLL) { // tokens tg, tg-1, ... > tg-UNROLL
        float dgv[GATE_UNROLL], fv[GATE_UNROLL];
#pragma unroll
        for (int u = 0; u < GATE_UNROLL; u++) {
            int64_t t = tg - u;
            dgv[u] = t >= t0 ? dgb[t * HK] : 0.0f;
            fv[u] = t >= t0 ? bf2f(fb[t * HK]) : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < GATE_UNROLL; u++) {
            int64_t t = tg - u;
            if (t < t0) break;
            dg = from_cumsum ? dg + dgv[u] : dgv[u]; // dg_t = Σ_{s >= t in chunk} dgcum_s
            float a = fv[u] + bias;
            float sp_grad = a > 20.0f ? 1.0f : sigmoid_f(a);
            float dfi = -dg * A * sp_grad; // dg/da = -A σ(a)
            dfb[t * HK] = f2bf(dfi);
            sdt += dfi;
            sA += (double)dg * (-A * softplus_f(a)); // dg/dA_log = g
        }
    }
    part_dt[bc * HK + jd] = sdt;
    part_A[bc * HK + jd] = sA;
}

// dA_log[j] += Σ_{p, d} part_A[p, j*K + d]: one 256-thread block per head j. Thread s sums the
// flattened entries e = p·K + d = s, s + 256, ... in increasing e; the block then adds the 256
// thread sums with a fixed shared-memory tree. The order depends on P and K only. (The first
// version summed all P·K entries of a head in one thread: 16k dependent loads, 0.8 ms.)
#define DA_THREADS 256
__global__ void __launch_bounds__(DA_THREADS)
    gate_dA_finish_k(float *dA_log, const double *part_A, int64_t P, int64_t HV, int64_t K) {
    __shared__ double sh[DA_THREADS];
    int64_t j = blockIdx.x, HK = HV * K, n = P * K;
    // entries e = threadIdx.x + i·DA_THREADS, (p, d) = (e / K, e % K), in increasing e; 8 loads
    // in flight (the stepping of (p, d) with a branch per entry kept them one at a time: with
    // P = 1024 chunks that was 128 L2 round trips per thread)
    const double *col = part_A + j * K;
    double s = 0.0;
    int64_t e = threadIdx.x;
    for (; e + 7 * DA_THREADS < n; e += 8 * DA_THREADS) {
        double a[8];
#pragma unroll
        for (int u = 0; u < 8; u++) {
            int64_t q = e + u * DA_THREADS, p = q / K;
            a[u] = col[p * HK + (q - p * K)];
        }
#pragma unroll
        for (int u = 0; u < 8; u++)
            s += a[u];
    }
    for (; e < n; e += DA_THREADS) {
        int64_t p = e / K;
        s += col[p * HK + (e - p * K)];
    }
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int h = DA_THREADS / 2; h > 0; h >>= 1) { // fixed tree: sh[i] += sh[i + h]
        if ((int)threadIdx.x < h) sh[threadIdx.x] += sh[threadIdx.x + h];
        __syncthreads();
    }
    if (threadIdx.x == 0) dA_log[j] += (float)sh[0];
}

// ---- beta
// ----------------------------------------------------------------------------------------

template <class E> __global__ void beta_fwd_k(float *beta, const E *b, int64_t n, float s) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        beta[i] = s * sigmoid_f(ldf(b, i));
}

__global__ void beta_bwd_k(kda_bf16 *db, const float *dbeta, const kda_bf16 *b, int64_t n,
                           float s) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float sg = sigmoid_f(bf2f(b[i]));
        db[i] = f2bf(dbeta[i] * s * sg * (1.0f - sg));
    }
}

// The same with db rows [N, HV] at stride ldo (db may be columns of a wider matrix).
__global__ void beta_bwd_ld_k(kda_bf16 *db, int64_t ldo, const float *dbeta, const kda_bf16 *b,
                              int64_t N, int64_t HV, float s) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < N * HV;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / HV;
        float sg = sigmoid_f(bf2f(b[i]));
        db[r * ldo + (i - r * HV)] = f2bf(dbeta[i] * s * sg * (1.0f - sg));
    }
}

// ---- gated RMSNorm -----------------------------------------------------------------------------

template <class E> // E: bf16 or fp32 storage of x, z, y
__global__ void gnorm_fwd_k(E *y, float *rstd, const E *x, const E *z, const float *w, int64_t N,
                            int64_t V, float eps) {
    int64_t r = warp_row(N);
    if (r < 0) return;
    int lane = threadIdx.x & 31;
    float ss = 0.0f;
    for (int64_t v = lane; v < V; v += 32) {
        float xv = ldf(x, r * V + v);
        ss += xv * xv;
    }
    ss = warp_sum(ss);
    float rs = (float)(1.0 / sqrt((double)ss / (double)V + (double)eps));
    if (lane == 0) rstd[r] = rs;
    for (int64_t v = lane; v < V; v += 32)
        stf(y, r * V + v, ldf(x, r * V + v) * rs * w[v] * sigmoid_f(ldf(z, r * V + v)));
}

__global__ void gnorm_bwd_k(kda_bf16 *dx, kda_bf16 *dz, const kda_bf16 *dy, const kda_bf16 *x,
                            const kda_bf16 *z, const float *w, const float *rstd, int64_t N,
                            int64_t V) {
    int64_t r = warp_row(N);
    if (r < 0) return;
    int lane = threadIdx.x & 31;
    float rs = rstd[r], dot = 0.0f;
    for (int64_t v = lane; v < V; v += 32) {
        int64_t i = r * V + v;
        float s = sigmoid_f(bf2f(z[i])), xh = bf2f(x[i]) * rs, g = bf2f(dy[i]);
        dz[i] = f2bf(g * xh * w[v] * s * (1.0f - s));
        dot += g * s * w[v] * xh;
    }
    float m = warp_sum(dot) / (float)V;
    for (int64_t v = lane; v < V; v += 32) {
        int64_t i = r * V + v;
        float s = sigmoid_f(bf2f(z[i]));
        dx[i] = f2bf(rs * (bf2f(dy[i]) * s * w[v] - bf2f(x[i]) * rs * m));
    }
}

struct GnormDw { // dy ⊙ σ(z) ⊙ x̂
    const kda_bf16 *dy, *x, *z;
    const float *rstd;
    int64_t V;
    __device__ float operator()(int64_t r, int64_t c) const {
        int64_t i = r * V + c;
        return bf2f(dy[i]) * sigmoid_f(bf2f(z[i])) * bf2f(x[i]) * rstd[r];
    }
};

// ---- gated RMSNorm with the g_proj.1 bias folded in (the fused path) --------------------------
// Rows r = token·HV + head of V = 8·lr elements; lr consecutive lanes hold a row (8 elements
// each, one 16-byte access per tensor), a warp 32 / lr rows at once. The gate logits z are the
// raw GEMM output: σ(z + bias[head·V + v]) in fp32 (the unfused path rounds z + bias to bf16
// first). The per-lane arithmetic below is shared with the host twins (kda_cuda_gnorm_bias_*_host).
#define GN_TILE   256 // rows per block of the fused backward: its dw partials are [rows / 256, V]
#define GN_BWD_UF 2   // row groups per iteration of a backward warp

// Forward, one lane's 8 elements: returns Σ x².
__host__ __device__ __forceinline__ float gn_ss_lane(const float (&x)[8]) {
    return sumsq_lane<8>(x);
}
__host__ __device__ __forceinline__ float gn_rs(float ss, int64_t V, float eps) {
    return (float)(1.0 / sqrt((double)ss / (double)V + (double)eps)); // as gnorm_fwd_k
}
__host__ __device__ __forceinline__ void gn_fwd_lane(float (&y)[8], const float (&x)[8],
                                                     const float (&z)[8], const float *w,
                                                     const float *bias, float rs) {
    for (int v = 0; v < 8; v++)
        y[v] = x[v] * rs * w[v] * sigmoid_f(z[v] + bias[v]);
}
// Backward, one lane's 8 elements, first half: dz (written), σ (kept), Σ dy·σ·w·x̂ returned.
__host__ __device__ __forceinline__ float gn_bwd_lane(float (&dz)[8], float (&sg)[8],
                                                      const float (&g)[8], const float (&x)[8],
                                                      const float (&z)[8], const float *w,
                                                      const float *bias, float rs) {
    float dot = 0.0f;
    for (int v = 0; v < 8; v++) {
        float s = sigmoid_f(z[v] + bias[v]), xh = x[v] * rs;
        sg[v] = s;
        dz[v] = g[v] * xh * w[v] * s * (1.0f - s);
        dot += g[v] * s * w[v] * xh;
    }
    return dot;
}
// Second half: dx, and the lane's dw partial += dy·σ·x̂ (as GnormDw).
__host__ __device__ __forceinline__ void gn_bwd_lane2(float (&dx)[8], float (&accw)[8],
                                                      const float (&g)[8], const float (&x)[8],
                                                      const float (&sg)[8], const float *w,
                                                      float rs, float m) {
    for (int v = 0; v < 8; v++) {
        float xh = x[v] * rs;
        dx[v] = rs * (g[v] * sg[v] * w[v] - xh * m);
        accw[v] += g[v] * sg[v] * xh;
    }
}

// y [NR, V] bf16, rstd [NR] from x, z [NR, V] bf16; one group of lr lanes per row. A warp takes
// GN_FWD_UF consecutive row groups and loads all of them before the math (2·GN_FWD_UF 16-byte
// loads in flight per lane: with one group per warp, 8192 blocks of one load round trip each ran
// at 2.2 TB/s, 1.9x the floor, 2026-12-03); each row's arithmetic as before.
#define GN_FWD_UF 4
__global__ void gnorm_bias_fwd_k(kda_bf16 *y, float *rstd, const kda_bf16 *x, const kda_bf16 *z,
                                 const float *bias, const float *w, int64_t NR, int64_t HV,
                                 int64_t V, float eps) {
    int lr = (int)(V / 8), lane = threadIdx.x & 31, rw = 32 / lr;
    int64_t g0 = ((int64_t)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32) * GN_FWD_UF;
    int64_t c0 = 8 * (lane % lr);
    float xv[GN_FWD_UF][8], zv[GN_FWD_UF][8];
#pragma unroll
    for (int k = 0; k < GN_FWD_UF; k++) {
        int64_t r = (g0 + k) * rw + lane / lr;
#pragma unroll
        for (int v = 0; v < 8; v++)
            xv[k][v] = zv[k][v] = 0.0f;
        if (r < NR) {
            ld_bf<8>(xv[k], x + r * V + c0);
            ld_bf<8>(zv[k], z + r * V + c0);
        }
    }
#pragma unroll
    for (int k = 0; k < GN_FWD_UF; k++) {
        int64_t r = (g0 + k) * rw + lane / lr;
        bool act = r < NR; // lanes of a row group agree; every lane reaches the group sum
        float yv[8];
        float rs = gn_rs(group_sum(gn_ss_lane(xv[k]), lr), V, eps);
        if (!act) continue;
        gn_fwd_lane(yv, xv[k], zv[k], w + c0, bias + (int64_t)((int)r % (int)HV) * V + c0, rs);
        st_bf<8>(y + r * V + c0, yv);
        if (c0 == 0) rstd[r] = rs;
    }
}

// dx, dz [NR, V] bf16 overwritten; part [ceil(NR / GN_TILE), V] double = the block's dw sums.
// Block = 8 warps over the GN_TILE rows [blockIdx.x · GN_TILE, +GN_TILE): warp k takes row
// groups k, k + 8, ... (rows in increasing order per lane); then the block adds, for each column,
// the (warp, row-in-group) partials in a fixed order in double.
__global__ void __launch_bounds__(32 * ROWS_PER_BLOCK)
    gnorm_bias_bwd_k(kda_bf16 *dx, kda_bf16 *dz, double *part, const kda_bf16 *dy,
                     const kda_bf16 *x, const kda_bf16 *z, const float *bias, const float *w,
                     const float *rstd, int64_t NR, int64_t HV, int64_t V) {
    __shared__ float sh[ROWS_PER_BLOCK][32][8]; // [warp][lane][element]
    int lr = (int)(V / 8), lane = threadIdx.x & 31, warp = threadIdx.x / 32, rw = 32 / lr;
    int64_t c0 = 8 * (lane % lr), base = (int64_t)blockIdx.x * GN_TILE;
    int64_t end = min(base + (int64_t)GN_TILE, NR);
    float accw[8] = {0};
    // GN_BWD_UF row groups per iteration, all their loads first (3·GN_BWD_UF 16-byte loads in
    // flight per lane instead of 3; the row at 1.9 TB/s, 2.2x the floor, 2026-12-03), then each
    // group's math in increasing row order: accw adds the rows in the order of the loop before.
    const int64_t stride = (int64_t)ROWS_PER_BLOCK * rw;
    for (int64_t gb = base + (int64_t)warp * rw; gb < end; gb += GN_BWD_UF * stride) {
        float gv[GN_BWD_UF][8], xv[GN_BWD_UF][8], zv[GN_BWD_UF][8], rsv[GN_BWD_UF];
#pragma unroll
        for (int k = 0; k < GN_BWD_UF; k++) {
            int64_t r = gb + k * stride + lane / lr;
#pragma unroll
            for (int v = 0; v < 8; v++)
                gv[k][v] = xv[k][v] = zv[k][v] = 0.0f;
            rsv[k] = 0.0f;
            if (r < end) {
                ld_bf<8>(gv[k], dy + r * V + c0);
                ld_bf<8>(xv[k], x + r * V + c0);
                ld_bf<8>(zv[k], z + r * V + c0);
                rsv[k] = rstd[r];
            }
        }
#pragma unroll
        for (int k = 0; k < GN_BWD_UF; k++) {
            if (gb + k * stride >= end) break; // warp-uniform: no later group has rows
            int64_t r = gb + k * stride + lane / lr;
            bool act = r < end; // inactive rows add zeros
            float sg[8], dzv[8], dxv[8], rs = rsv[k];
            const float *bb = bias + (act ? (int64_t)((int)r % (int)HV) * V : 0) + c0;
            float m =
                group_sum(gn_bwd_lane(dzv, sg, gv[k], xv[k], zv[k], w + c0, bb, rs), lr) / (float)V;
            gn_bwd_lane2(dxv, accw, gv[k], xv[k], sg, w + c0, rs, m);
            if (act) {
                st_bf<8>(dz + r * V + c0, dzv);
                st_bf<8>(dx + r * V + c0, dxv);
            }
        }
    }
#pragma unroll
    for (int v = 0; v < 8; v++)
        sh[warp][lane][v] = accw[v];
    __syncthreads();
    for (int64_t c = threadIdx.x; c < V; c += blockDim.x) { // column c: lanes with c0 = c & ~7
        int s0 = (int)(c / 8), e = (int)(c % 8);
        double t = 0.0;
        for (int k = 0; k < ROWS_PER_BLOCK; k++)
            for (int q = 0; q < rw; q++)
                t += (double)sh[k][q * lr + s0][e];
        part[(int64_t)blockIdx.x * V + c] = t;
    }
}

// ---- Linear bias -----------------------------------------------------------------------------

template <class E> __global__ void bias_add_k(E *y, const float *bias, int64_t N, int64_t out) {
    int64_t n = N * out;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
         e += (int64_t)gridDim.x * blockDim.x)
        stf(y, e, ldf(y, e) + bias[e % out]);
}

struct BiasDb { // dy
    const kda_bf16 *dy;
    int64_t out;
    __device__ float operator()(int64_t r, int64_t c) const {
        return bf2f(dy[r * out + c]);
    }
};

// ---- SwiGLU ----------------------------------------------------------------------------------

// Elements [i0, n), one per thread (grid-stride): the scalar path and the vector path's tail
// (bf16), the whole fp32 scoring path (E = float).
template <class E>
__global__ void swiglu_fwd_k(E *m, const E *a, const E *b, int64_t i0, int64_t n) {
    for (int64_t i = i0 + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        stf(m, i, silu_f(ldf(a, i)) * ldf(b, i));
}

__global__ void swiglu_bwd_k(kda_bf16 *da, kda_bf16 *db, const kda_bf16 *dm, const kda_bf16 *a,
                             const kda_bf16 *b, int64_t i0, int64_t n) {
    for (int64_t i = i0 + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float g = bf2f(dm[i]), av = bf2f(a[i]);
        da[i] = f2bf(g * bf2f(b[i]) * dsilu_f(av));
        db[i] = f2bf(g * silu_f(av));
    }
}

// Vector path: groups of 8 elements [8k, 8k+8), k < nv, as 16-byte loads/stores (one 2-byte
// load per thread kept too few bytes in flight to reach HBM bandwidth). Same per-element math
// as the scalar kernels. m may alias a or b (each group is read before it is written).
__global__ void swiglu_fwd_v8_k(kda_bf16 *m, const kda_bf16 *a, const kda_bf16 *b, int64_t nv) {
    for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < nv;
         k += (int64_t)gridDim.x * blockDim.x) {
        float av[8], bv[8], mv[8];
        ld_bf<8>(av, a + 8 * k);
        ld_bf<8>(bv, b + 8 * k);
#pragma unroll
        for (int v = 0; v < 8; v++)
            mv[v] = silu_f(av[v]) * bv[v];
        st_bf<8>(m + 8 * k, mv);
    }
}

__global__ void swiglu_bwd_v8_k(kda_bf16 *da, kda_bf16 *db, const kda_bf16 *dm, const kda_bf16 *a,
                                const kda_bf16 *b, int64_t nv) {
    for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < nv;
         k += (int64_t)gridDim.x * blockDim.x) {
        float g[8], av[8], bv[8], dav[8], dbv[8];
        ld_bf<8>(g, dm + 8 * k);
        ld_bf<8>(av, a + 8 * k);
        ld_bf<8>(bv, b + 8 * k);
#pragma unroll
        for (int v = 0; v < 8; v++) {
            dav[v] = g[v] * bv[v] * dsilu_f(av[v]);
            dbv[v] = g[v] * silu_f(av[v]);
        }
        st_bf<8>(da + 8 * k, dav);
        st_bf<8>(db + 8 * k, dbv);
    }
}

// gate|up from one GEMM: gu [N, 2I] rows gate | up. Thread = 8 consecutive columns of one row
// (16-byte accesses when I % 8 == 0 and the pointers allow; else VEC = 1), rows grid-strided in y.
template <int VEC>
__global__ void swiglu_gu_fwd_k(kda_bf16 *m, const kda_bf16 *gu, int64_t N, int64_t I) {
    int64_t c = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * VEC;
    if (c >= I) return;
    for (int64_t r = blockIdx.y; r < N; r += gridDim.y) {
        float av[VEC], bv[VEC], mv[VEC];
        ld_bf<VEC>(av, gu + r * 2 * I + c);
        ld_bf<VEC>(bv, gu + r * 2 * I + I + c);
#pragma unroll
        for (int v = 0; v < VEC; v++)
            mv[v] = silu_f(av[v]) * bv[v];
        st_bf<VEC>(m + r * I + c, mv);
    }
}

// dm may be dgu's gate half (dm = dgu, ld_dm = 2I): each thread reads its dm group before it
// writes the same group of d(gate), and no other thread touches it.
template <int VEC>
__global__ void swiglu_gu_bwd_k(kda_bf16 *dgu, const kda_bf16 *dm, int64_t ld_dm,
                                const kda_bf16 *gu, int64_t N, int64_t I) {
    int64_t c = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * VEC;
    if (c >= I) return;
    for (int64_t r = blockIdx.y; r < N; r += gridDim.y) {
        float g[VEC], av[VEC], bv[VEC], dav[VEC], dbv[VEC];
        ld_bf<VEC>(g, dm + r * ld_dm + c);
        ld_bf<VEC>(av, gu + r * 2 * I + c);
        ld_bf<VEC>(bv, gu + r * 2 * I + I + c);
#pragma unroll
        for (int v = 0; v < VEC; v++) {
            dav[v] = g[v] * bv[v] * dsilu_f(av[v]);
            dbv[v] = g[v] * silu_f(av[v]);
        }
        st_bf<VEC>(dgu + r * 2 * I + c, dav);
        st_bf<VEC>(dgu + r * 2 * I + I + c, dbv);
    }
}

// ---- embedding ---------------------------------------------------------------------------------

__global__ void embed_fwd_k(float *h, const float *E, const int32_t *ids, int64_t N, int64_t D) {
    int64_t n = N * D;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
         e += (int64_t)gridDim.x * blockDim.x)
        h[e] = E[(int64_t)ids[e / D] * D + e % D];
}

__global__ void iota_k(uint32_t *v, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        v[i] = (uint32_t)i;
}

// One block per sorted position; the block at the start of each run of equal ids adds the run's
// rows (increasing token order, as the stable sort left them) into that id's row of dE.
__global__ void embed_bwd_k(float *dE, const float *dh, const uint32_t *keys, const uint32_t *tok,
                            int64_t N, int64_t D, int64_t pad_id) {
    int64_t i = blockIdx.x;
    uint32_t id = keys[i];
    if (i > 0 && keys[i - 1] == id) return;
    if ((int64_t)id == pad_id) return;
    int64_t end = i;
    while (end < N && keys[end] == id)
        end++;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
        float acc = dE[(int64_t)id * D + d];
        for (int64_t j = i; j < end; j++)
            acc += dh[(int64_t)tok[j] * D + d];
        dE[(int64_t)id * D + d] = acc;
    }
}

// ---- AdamW, norm, clipping -------------------------------------------------------------------

// Same operation order as model/optim.c, with explicit roundings (no FMA contraction), so the
// update matches the CPU's bit for bit except for sqrtf/division, which are IEEE on both.
__device__ __forceinline__ void adam_elem(float &p, float &m, float &v, float g,
                                          const KdaCudaAdamScalars &s, float gs, bool scale) {
    float pi = __fsub_rn(p, __fmul_rn(s.decay, p));
    float gi = scale ? __fmul_rn(g, gs) : g;
    float mi = __fadd_rn(__fmul_rn(s.b1, m), __fmul_rn(s.one_m_b1, gi));
    float vi = __fadd_rn(__fmul_rn(s.b2, v), __fmul_rn(__fmul_rn(s.one_m_b2, gi), gi));
    float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), s.bc2_sqrt), s.eps);
    p = __fsub_rn(pi, __fdiv_rn(__fmul_rn(s.step_size, mi), denom));
    m = mi;
    v = vi;
}

// Elements [i0, n), one per thread (grid-stride): the scalar path and the vector path's tail.
__global__ void adamw_k(float *p, kda_bf16 *pb, const float *g, float *m, float *v, int64_t i0,
                        int64_t n, KdaCudaAdamScalars s, const float *gscale) {
    float gs = gscale ? *gscale : 1.0f;
    for (int64_t i = i0 + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float pi = p[i], mi = m[i], vi = v[i];
        adam_elem(pi, mi, vi, g[i], s, gs, gscale != NULL);
        p[i] = pi;
        m[i] = mi;
        v[i] = vi;
        if (pb) pb[i] = f2bf(pi);
    }
}

// Vector path: groups [4k, 4k+4), k < nv, as 16-byte fp32 (8-byte bf16) accesses; the same
// per-element operations as adamw_k (the same bits).
__global__ void adamw_v4_k(float *p, kda_bf16 *pb, const float *g, float *m, float *v, int64_t nv,
                           KdaCudaAdamScalars s, const float *gscale) {
    float gs = gscale ? *gscale : 1.0f;
    for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < nv;
         k += (int64_t)gridDim.x * blockDim.x) {
        float pv[4], gv[4], mv[4], vv[4];
        ld_f<4>(pv, p + 4 * k);
        ld_f<4>(gv, g + 4 * k);
        ld_f<4>(mv, m + 4 * k);
        ld_f<4>(vv, v + 4 * k);
#pragma unroll
        for (int e = 0; e < 4; e++)
            adam_elem(pv[e], mv[e], vv[e], gv[e], s, gs, gscale != NULL);
        st_f<4>(p + 4 * k, pv);
        st_f<4>(m + 4 * k, mv);
        st_f<4>(v + 4 * k, vv);
        if (pb) st_bf<4>(pb + 4 * k, pv);
    }
}

__global__ void f32_to_bf16_k(kda_bf16 *dst, const float *src, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = f2bf(src[i]);
}

#define NORM_BLOCKS 1024 // fixed: the summation order depends on n only

__device__ double block_sum_256(double v) {
    __shared__ double sh[8];
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x / 32] = v;
    __syncthreads();
    double s = 0.0;
    if (threadIdx.x == 0)
        for (int w = 0; w < 8; w++)
            s += sh[w];
    return s; // valid in thread 0
}

__global__ void sumsq_partial_k(double *part, const float *g, int64_t n) {
    double s = 0.0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        s += (double)g[i] * (double)g[i];
    s = block_sum_256(s);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

// take_sqrt 0: the sum of squares itself (ZeRO-1's per-shard partial, summed over the ranks).
__global__ void sumsq_finish_k(double *norm, const double *part, int take_sqrt) {
    double s = 0.0;
    for (int i = threadIdx.x; i < NORM_BLOCKS; i += blockDim.x)
        s += part[i];
    s = block_sum_256(s);
    if (threadIdx.x == 0) *norm = take_sqrt ? sqrt(s) : s;
}

__global__ void clip_coef_k(float *coef, const double *norm, double max_norm) {
    double nv = *norm, c = 1.0;
    if (isfinite(nv)) {
        double q = max_norm / (nv + 1e-6);
        if (q < 1.0) c = q;
    }
    *coef = (float)c;
}

__global__ void scale_k(float *g, int64_t n, const float *coef) {
    float c = *coef;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        g[i] *= c;
}

// ---- column blocks (the fused input projection's parts) --------------------------------------
// Item i of the split: source row r = i / ng, element group j = i % ng of width `vec` (8: one
// 16-byte access; 1: one element); the group belongs to the part whose columns contain it (the
// vector path requires every part boundary at a multiple of 8, so a group never straddles two).
template <int VEC> // 8 or 1
__host__ __device__ inline void split_item(const kda_bf16 *src, int64_t lds, int64_t ng,
                                           const KdaCudaColParts &pp, int64_t i) {
    int64_t r = i / ng, c = (i - r * ng) * VEC;
    for (int k = 0; k < pp.n; k++) {
        int64_t o = c - pp.col[k];
        if (o < 0 || o >= pp.cols[k]) continue;
        const kda_bf16 *s = src + r * lds + c;
        kda_bf16 *d = pp.dst[k] + r * pp.ld[k] + o;
#ifdef __CUDA_ARCH__
        if constexpr (VEC == 8)
            *reinterpret_cast<uint4 *>(d) = *reinterpret_cast<const uint4 *>(s);
        else
            d[0] = s[0];
#else
        memcpy(d, s, VEC * sizeof(kda_bf16));
#endif
        return;
    }
}

// One thread per item (grid-stride); ng = groups per source row (the parts' columns only).
template <int VEC>
__global__ void split_k(const kda_bf16 *src, int64_t lds, int64_t ng, int64_t n,
                        KdaCudaColParts pp) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        split_item<VEC>(src, lds, ng, pp, i);
}

} // namespace

// ==== launchers
// ====================================================================================

extern "C" {

// KDA_RMS_FWD=loop / KDA_RMS_BWD=loop (read at every call): the RMSNorm forward's / backward's
// loop kernel instead of the one that holds the row in registers (the same bits; kept to
// measure against).
static bool rms_loop_(const char *var) {
    const char *e = getenv(var);
    return e && !strcmp(e, "loop");
}

int kda_cuda_rmsnorm_fwd(KdaCudaCtx *ctx, kda_bf16 *y, float *rstd, const float *x, const float *w,
                         int64_t N, int64_t D, float eps) {
    KDA_CUDA_REQUIRE(ctx, N >= 0 && D > 0);
    if (N == 0) return 0;
    bool v4 = D % 4 == 0 && aligned_(16, x, w) && aligned_(8, y);
    if (v4 && D % 128 == 0 && D <= 12 * 128 && !rms_loop_("KDA_RMS_FWD")) {
#define RMS_FREG(NV_)                                                                              \
    case NV_:                                                                                      \
        rmsnorm_fwd_reg_k<NV_><<<row_blocks(N), 256, 0, ctx->stream>>>(y, rstd, x, w, N, eps);     \
        break
        switch (D / 128) {
            RMS_FREG(1);
            RMS_FREG(2);
            RMS_FREG(3);
            RMS_FREG(4);
            RMS_FREG(5);
            RMS_FREG(6);
            RMS_FREG(7);
            RMS_FREG(8);
            RMS_FREG(9);
            RMS_FREG(10);
            RMS_FREG(11);
        default:
            RMS_FREG(12);
        }
#undef RMS_FREG
    } else if (v4)
        rmsnorm_fwd_k<4>
            <<<row_blocks(N), 256, 0, ctx->stream>>>(y, rstd, (float *)x, NULL, w, N, D, eps);
    else
        rmsnorm_fwd_k<1>
            <<<row_blocks(N), 256, 0, ctx->stream>>>(y, rstd, (float *)x, NULL, w, N, D, eps);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

int kda_cuda_rmsnorm_residual_fwd(KdaCudaCtx *ctx, kda_bf16 *y, float *rstd, float *residual,
                                  const kda_bf16 *a, const float *w, int64_t N, int64_t D,
                                  float eps) {
    KDA_CUDA_REQUIRE(ctx, N >= 0 && D > 0 && a);
    if (N == 0) return 0;
    if (D % 4 == 0 && aligned_(16, residual, w) && aligned_(8, y, a))
        rmsnorm_fwd_k<4>
            <<<row_blocks(N), 256, 0, ctx->stream>>>(y, rstd, residual, a, w, N, D, eps);
    else
        rmsnorm_fwd_k<1>
            <<<row_blocks(N), 256, 0, ctx->stream>>>(y, rstd, residual, a, w, N, D, eps);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

int kda_cuda_rmsnorm_bwd(KdaCudaCtx *ctx, float *dx, float *dw, const float *dy, const float *x,
                         const float *w, const float *rstd, int64_t N, int64_t D, int accumulate) {
    return kda_cuda_rmsnorm_bwd_bf16(ctx, dx, NULL, dw, dy, x, w, rstd, N, D, accumulate);
}

int kda_cuda_rmsnorm_bwd_bf16(KdaCudaCtx *ctx, float *dx, kda_bf16 *dxb, float *dw, const float *dy,
                              const float *x, const float *w, const float *rstd, int64_t N,
                              int64_t D, int accumulate) {
    KDA_CUDA_REQUIRE(ctx, N >= 0 && D > 0);
    if (N == 0) return 0;
    if (D > RMS_FUSED_MAX_D) { // wide rows: dx pass, then a separate column-sum pass for dw
        rmsnorm_bwd_k<<<row_blocks(N), 256, 0, ctx->stream>>>(dx, dxb, dy, x, w, rstd, N, D,
                                                              accumulate);
        CUDA_CHECK_LAUNCH(ctx);
        return colsum_add(ctx, dw, N, D, RmsDw{dy, x, rstd, D});
    }
    int64_t P = CEIL_DIV(N, (int64_t)TILE_ROWS);
    double *part = (double *)kda_cuda_scratch(ctx, (size_t)(P * D) * sizeof(double));
    if (!part) return -1;
    size_t shmem = (size_t)(ROWS_PER_BLOCK * D) * sizeof(float);
    bool v4 = D % 4 == 0 && aligned_(16, dx, dy, x, w) && aligned_(8, dxb);
    if (v4 && D % 128 == 0 && D <= 12 * 128 && !rms_loop_("KDA_RMS_BWD")) { // rows in registers
#define RMS_REG(NV_)                                                                               \
    case NV_:                                                                                      \
        rmsnorm_bwd_reg_k<NV_><<<(unsigned)P, 32 * ROWS_PER_BLOCK, 0, ctx->stream>>>(              \
            dx, dxb, part, dy, x, w, rstd, N, accumulate);                                         \
        break
        switch (D / 128) {
            RMS_REG(1);
            RMS_REG(2);
            RMS_REG(3);
            RMS_REG(4);
            RMS_REG(5);
            RMS_REG(6);
            RMS_REG(7);
            RMS_REG(8);
            RMS_REG(9);
            RMS_REG(10);
            RMS_REG(11);
        default:
            RMS_REG(12);
        }
#undef RMS_REG
    } else if (v4)
        rmsnorm_bwd_fused_k<4><<<(unsigned)P, 32 * ROWS_PER_BLOCK, shmem, ctx->stream>>>(
            dx, dxb, part, dy, x, w, rstd, N, D, accumulate);
    else
        rmsnorm_bwd_fused_k<1><<<(unsigned)P, 32 * ROWS_PER_BLOCK, shmem, ctx->stream>>>(
            dx, dxb, part, dy, x, w, rstd, N, D, accumulate);
    CUDA_CHECK_LAUNCH(ctx);
    colsum_finish(ctx->stream, dw, part, P, D);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

int kda_cuda_l2norm_fwd(KdaCudaCtx *ctx, kda_bf16 *y, float *rstd, const kda_bf16 *x, int64_t N,
                        int64_t dim, float eps) {
    KDA_CUDA_REQUIRE(ctx, N >= 0 && dim > 0);
    if (N == 0) return 0;
    l2norm_fwd_k<<<row_blocks(N), 256, 0, ctx->stream>>>(y, rstd, x, N, dim, eps);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

int kda_cuda_l2norm_bwd(KdaCudaCtx *ctx, kda_bf16 *dx, const float *dy, const kda_bf16 *x,
                        const float *rstd, int64_t N, int64_t dim) {
    KDA_CUDA_REQUIRE(ctx, N >= 0 && dim > 0);
    if (N == 0) return 0;
    l2norm_bwd_k<<<row_blocks(N), 256, 0, ctx->stream>>>(dx, dy, x, rstd, N, dim);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

// Grid of the conv kernels: 32 channel groups x CONV_BT tiles per block.
// Rows of blocks (grid.y) beyond the hardware's 65535 come back as 0: the launchers refuse them.
static dim3 conv_grid(int64_t B, int64_t T, int64_t C, int vec, int tt) {
    int64_t rows = CEIL_DIV(B * CEIL_DIV(T, (int64_t)tt), (int64_t)CONV_BT);
    return dim3((unsigned)CEIL_DIV(C / vec, (int64_t)32), rows <= 65535 ? (unsigned)rows : 0u);
}

// KDA_CONV_PREFETCH=0 (read at every launch): the conv kernels without their prefetch (the
// kernels before 2026-12-03; the same arithmetic).
static bool conv_pf_(void) {
    const char *e = getenv("KDA_CONV_PREFETCH");
    return !(e && !strcmp(e, "0"));
}

int kda_cuda_conv_silu_fwd(KdaCudaCtx *ctx, kda_bf16 *y, const kda_bf16 *p, const float *w,
                           int64_t B, int64_t T, int64_t C, int64_t W) {
    KDA_CUDA_REQUIRE(ctx, B >= 0 && T >= 0 && C > 0 && W >= 1 && W <= CONV_MAX_W);
    if (B * T == 0) return 0;
    // 16-byte path when every row of channels splits into whole, aligned 8-element groups.
    bool v8 = C % 8 == 0 && aligned_(16, y, p), pf = conv_pf_();
    dim3 grid = conv_grid(B, T, C, v8 ? 8 : 1, CONV_TT_F(pf)), block(32, CONV_BT);
    KDA_CUDA_REQUIRE(ctx, grid.y > 0); // B·T up to 4.2M tokens (forward) / 16.7M (backward)
#define CONV_FWD_PF(W_, PF_)                                                                       \
    if (v8)                                                                                        \
        conv_fwd_k<W_, 8, false, PF_>                                                              \
            <<<grid, block, 0, ctx->stream>>>(y, NULL, p, w, B, T, C, 0, 0.0f);                    \
    else                                                                                           \
        conv_fwd_k<W_, 1, false, PF_>                                                              \
            <<<grid, block, 0, ctx->stream>>>(y, NULL, p, w, B, T, C, 0, 0.0f)
#define CONV_FWD(W_)                                                                               \
    if (pf) {                                                                                      \
        CONV_FWD_PF(W_, true);                                                                     \
    } else {                                                                                       \
        CONV_FWD_PF(W_, false);                                                                    \
    }
    CONV_DISPATCH_W(W, CONV_FWD);
#undef CONV_FWD
#undef CONV_FWD_PF
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

int kda_cuda_conv_silu_bwd(KdaCudaCtx *ctx, kda_bf16 *dp, float *dw, const kda_bf16 *dy,
                           const kda_bf16 *p, const float *w, int64_t B, int64_t T, int64_t C,
                           int64_t W) {
    return kda_cuda_conv_silu_bwd_ld(ctx, dp, C, dw, dy, p, w, B, T, C, W);
}

int kda_cuda_conv_silu_bwd_ld(KdaCudaCtx *ctx, kda_bf16 *dp, int64_t ldo, float *dw,
                              const kda_bf16 *dy, const kda_bf16 *p, const float *w, int64_t B,
                              int64_t T, int64_t C, int64_t W) {
    KDA_CUDA_REQUIRE(ctx, B >= 0 && T >= 0 && C > 0 && W >= 1 && W <= CONV_MAX_W && ldo >= C);
    if (B * T == 0) return 0;
    // 8-byte groups of 4 channels: the backward holds 4 W-long windows per channel (weights,
    // p, dc, dw sums), so 8 channels per thread would cost ~2x the registers for W = 4.
    bool v4 = C % 4 == 0 && ldo % 4 == 0 && aligned_(8, dp, dy, p);
    dim3 grid = conv_grid(B, T, C, v4 ? 4 : 1, CONV_TT_BWD), block(32, CONV_BT);
    KDA_CUDA_REQUIRE(ctx, grid.y > 0); // B·T up to 4.2M tokens (forward) / 16.7M (backward)
    int64_t P = grid.y;                // dw partials: one per block row, [P, C, W] double
    double *part = (double *)kda_cuda_scratch(ctx, (size_t)(P * C * W) * sizeof(double));
    if (!part) return -1;
    bool pf = conv_pf_();
#define CONV_BWD_PF(W_, PF_)                                                                       \
    if (v4)                                                                                        \
        conv_bwd_k<W_, 4, false, PF_>                                                              \
            <<<grid, block, 0, ctx->stream>>>(dp, part, dy, p, w, NULL, NULL, B, T, C, 0, ldo);    \
    else                                                                                           \
        conv_bwd_k<W_, 1, false, PF_>                                                              \
            <<<grid, block, 0, ctx->stream>>>(dp, part, dy, p, w, NULL, NULL, B, T, C, 0, ldo)
#define CONV_BWD(W_)                                                                               \
    if (pf) {                                                                                      \
        CONV_BWD_PF(W_, true);                                                                     \
    } else {                                                                                       \
        CONV_BWD_PF(W_, false);                                                                    \
    }
    CONV_DISPATCH_W(W, CONV_BWD);
#undef CONV_BWD
#undef CONV_BWD_PF
    CUDA_CHECK_LAUNCH(ctx);
    colsum_finish(ctx->stream, dw, part, P, C * W);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

int kda_cuda_conv_l2_fusable(int64_t K) {
    return K == 8 || K == 16 || K == 32 || K == 64 || K == 128; // K/8 and K/4 lanes: 1..32
}

int kda_cuda_conv_silu_l2_fwd(KdaCudaCtx *ctx, kda_bf16 *y, float *rstd, const kda_bf16 *p,
                              const float *w, int64_t B, int64_t T, int64_t C, int64_t W, int64_t K,
                              float eps) {
    KDA_CUDA_REQUIRE(ctx, B >= 0 && T >= 0 && C > 0 && W >= 1 && W <= CONV_MAX_W);
    KDA_CUDA_REQUIRE(ctx, kda_cuda_conv_l2_fusable(K) && C % K == 0);
    KDA_CUDA_REQUIRE(ctx, aligned_(16, y, p)); // the 16-byte path: a head is K / 8 lanes
    if (B * T == 0) return 0;
    bool pf = conv_pf_();
    dim3 grid = conv_grid(B, T, C, 8, CONV_TT_F(pf)), block(32, CONV_BT);
    KDA_CUDA_REQUIRE(ctx, grid.y > 0);
    int lg = (int)(K / 8);
#define CONV_L2_FWD(W_)                                                                            \
    if (pf)                                                                                        \
        conv_fwd_k<W_, 8, true, true>                                                              \
            <<<grid, block, 0, ctx->stream>>>(y, rstd, p, w, B, T, C, lg, eps);                    \
    else                                                                                           \
        conv_fwd_k<W_, 8, true, false>                                                             \
            <<<grid, block, 0, ctx->stream>>>(y, rstd, p, w, B, T, C, lg, eps)
    CONV_DISPATCH_W(W, CONV_L2_FWD);
#undef CONV_L2_FWD
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

int kda_cuda_conv_silu_l2_bwd(KdaCudaCtx *ctx, kda_bf16 *dp, float *dw, const float *dy,
                              const kda_bf16 *p, const float *w, const float *rstd, int64_t B,
                              int64_t T, int64_t C, int64_t W, int64_t K) {
    return kda_cuda_conv_silu_l2_bwd_ld(ctx, dp, C, dw, dy, p, w, rstd, B, T, C, W, K);
}

int kda_cuda_conv_silu_l2_bwd_ld(KdaCudaCtx *ctx, kda_bf16 *dp, int64_t ldo, float *dw,
                                 const float *dy, const kda_bf16 *p, const float *w,
                                 const float *rstd, int64_t B, int64_t T, int64_t C, int64_t W,
                                 int64_t K) {
    KDA_CUDA_REQUIRE(ctx, B >= 0 && T >= 0 && C > 0 && W >= 1 && W <= CONV_MAX_W);
    KDA_CUDA_REQUIRE(ctx, kda_cuda_conv_l2_fusable(K) && C % K == 0 && ldo >= C && ldo % 4 == 0);
    KDA_CUDA_REQUIRE(ctx, aligned_(16, dy) && aligned_(8, dp, p)); // a head is K / 4 lanes
    if (B * T == 0) return 0;
    dim3 grid = conv_grid(B, T, C, 4, CONV_TT_BWD), block(32, CONV_BT);
    KDA_CUDA_REQUIRE(ctx, grid.y > 0);
    int64_t P = grid.y; // dw partials: one per block row, [P, C, W] double
    double *part = (double *)kda_cuda_scratch(ctx, (size_t)(P * C * W) * sizeof(double));
    if (!part) return -1;
    int lg = (int)(K / 4);
    bool pf = conv_pf_();
#define CONV_L2_BWD(W_)                                                                            \
    if (pf)                                                                                        \
        conv_bwd_k<W_, 4, true, true>                                                              \
            <<<grid, block, 0, ctx->stream>>>(dp, part, NULL, p, w, dy, rstd, B, T, C, lg, ldo);   \
    else                                                                                           \
        conv_bwd_k<W_, 4, true, false>                                                             \
            <<<grid, block, 0, ctx->stream>>>(dp, part, NULL, p, w, dy, rstd, B, T, C, lg, ldo)
    CONV_DISPATCH_W(W, CONV_L2_BWD);
#undef CONV_L2_BWD
    CUDA_CHECK_LAUNCH(ctx);
    colsum_finish(ctx->stream, dw, part, P, C * W);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

int kda_cuda_gate_cumsum_fwd(KdaCudaCtx *ctx, float *gcum, float *g, const kda_bf16 *f,
                             const float *A_log, const float *dt_bias, int64_t B, int64_t T,
                             int64_t HV, int64_t K, int64_t chunk) {
    KDA_CUDA_REQUIRE(ctx, B >= 0 && T >= 0 && HV > 0 && K > 0 && chunk > 0);
    if (B * T == 0) return 0;
    int64_t cols = B * CEIL_DIV(T, chunk) * HV * K;
    gate_fwd_k<<<(unsigned)CEIL_DIV(cols, (int64_t)256), 256, 0, ctx->stream>>>(
        gcum, g, f, A_log, dt_bias, B, T, HV, K, chunk);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

int kda_cuda_gate_cumsum_bwd(KdaCudaCtx *ctx, kda_bf16 *df, float *dA_log, float *ddt_bias,
                             const float *dgcum, const kda_bf16 *f, const float *A_log,
                             const float *dt_bias, int64_t B, int64_t T, int64_t HV, int64_t K,
                             int64_t chunk, int from_cumsum) {
    KDA_CUDA_REQUIRE(ctx, B >= 0 && T >= 0 && HV > 0 && K > 0 && chunk > 0);
    if (B * T == 0) return 0;
    int64_t P = B * CEIL_DIV(T, chunk), HK = HV * K;
    double *part = (double *)kda_cuda_scratch(ctx, (size_t)(2 * P * HK) * sizeof(double));
    if (!part) return -1;
    gate_bwd_k<<<(unsigned)CEIL_DIV(P * HK, (int64_t)256), 256, 0, ctx->stream>>>(
        df, part, part + P * HK, dgcum, f, A_log, dt_bias, B, T, HV, K, chunk, from_cumsum);
    CUDA_CHECK_LAUNCH(ctx);
    colsum_finish(ctx->stream, ddt_bias, part, P, HK);
    CUDA_CHECK_LAUNCH(ctx);
    gate_dA_finish_k<<<(unsigned)HV, DA_THREADS, 0, ctx->stream>>>(dA_log, part + P * HK, P, HV, K);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

int kda_cuda_beta_fwd(KdaCudaCtx *ctx, float *beta, const kda_bf16 *b, int64_t n,
                      int allow_neg_eigval) {
    KDA_CUDA_REQUIRE(ctx, n >= 0);
    if (n == 0) return 0;
    beta_fwd_k<<<grid_for(n), 256, 0, ctx->stream>>>(beta, b, n, allow_neg_eigval ? 2.0f : 1.0f);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

int kda_cuda_beta_bwd(KdaCudaCtx *ctx, kda_bf16 *db, const float *dbeta, const kda_bf16 *b,
                      int64_t n, int allow_neg_eigval) {
    KDA_CUDA_REQUIRE(ctx, n >= 0);
    if (n == 0) return 0;
    beta_bwd_k<<<grid_for(n), 256, 0, ctx->stream>>>(db, dbeta, b, n,
                                                     allow_neg_eigval ? 2.0f : 1.0f);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

int kda_cuda_beta_bwd_ld(KdaCudaCtx *ctx, kda_bf16 *db, int64_t ldo, const float *dbeta,
                         const kda_bf16 *b, int64_t N, int64_t HV, int allow_neg_eigval) {
    KDA_CUDA_REQUIRE(ctx, N >= 0 && HV > 0 && ldo >= HV);
    if (N == 0) return 0;
    beta_bwd_ld_k<<<grid_for(N * HV), 256, 0, ctx->stream>>>(db, ldo, dbeta, b, N, HV,
                                                             allow_neg_eigval ? 2.0f : 1.0f);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

int kda_cuda_gnorm_fwd(KdaCudaCtx *ctx, kda_bf16 *y, float *rstd, const kda_bf16 *x,
                       const kda_bf16 *z, const float *w, int64_t N, int64_t V, float eps) {
    KDA_CUDA_REQUIRE(ctx, N >= 0 && V > 0);
    if (N == 0) return 0;
    gnorm_fwd_k<<<row_blocks(N), 256, 0, ctx->stream>>>(y, rstd, x, z, w, N, V, eps);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

int kda_cuda_gnorm_bwd(KdaCudaCtx *ctx, kda_bf16 *dx, kda_bf16 *dz, float *dw, const kda_bf16 *dy,
                       const kda_bf16 *x, const kda_bf16 *z, const float *w, const float *rstd,
                       int64_t N, int64_t V) {
    KDA_CUDA_REQUIRE(ctx, N >= 0 && V > 0);
    if (N == 0) return 0;
    gnorm_bwd_k<<<row_blocks(N), 256, 0, ctx->stream>>>(dx, dz, dy, x, z, w, rstd, N, V);
    CUDA_CHECK_LAUNCH(ctx);
    return colsum_add(ctx, dw, N, V, GnormDw{dy, x, z, rstd, V});
}

int kda_cuda_gnorm_fusable(int64_t V) {
    return V == 8 || V == 16 || V == 32 || V == 64 || V == 128 || V == 256; // V/8 lanes: 1..32
}

int kda_cuda_gnorm_bias_fwd(KdaCudaCtx *ctx, kda_bf16 *y, float *rstd, const kda_bf16 *x,
                            const kda_bf16 *z, const float *bias, const float *w, int64_t N,
                            int64_t HV, int64_t V, float eps) {
    KDA_CUDA_REQUIRE(ctx, N >= 0 && HV > 0 && kda_cuda_gnorm_fusable(V));
    KDA_CUDA_REQUIRE(ctx, N * HV < INT32_MAX && aligned_(16, y, x, z, w, bias));
    int64_t NR = N * HV, rows_per_block = ROWS_PER_BLOCK * GN_FWD_UF * (32 / (V / 8));
    if (NR == 0) return 0;
    gnorm_bias_fwd_k<<<(unsigned)CEIL_DIV(NR, rows_per_block), 32 * ROWS_PER_BLOCK, 0,
                       ctx->stream>>>(y, rstd, x, z, bias, w, NR, HV, V, eps);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

int kda_cuda_gnorm_bias_bwd(KdaCudaCtx *ctx, kda_bf16 *dx, kda_bf16 *dz, float *dw, float *dbias,
                            const kda_bf16 *dy, const kda_bf16 *x, const kda_bf16 *z,
                            const float *bias, const float *w, const float *rstd, int64_t N,
                            int64_t HV, int64_t V) {
    KDA_CUDA_REQUIRE(ctx, N >= 0 && HV > 0 && kda_cuda_gnorm_fusable(V));
    KDA_CUDA_REQUIRE(ctx,
                     N * HV < INT32_MAX && aligned_(16, dx, dz, dy, x, z) && aligned_(16, w, bias));
    int64_t NR = N * HV, P = CEIL_DIV(NR, (int64_t)GN_TILE);
    if (NR == 0) return 0;
    double *part = (double *)kda_cuda_scratch(ctx, (size_t)(P * V) * sizeof(double));
    if (!part) return -1;
    gnorm_bias_bwd_k<<<(unsigned)P, 32 * ROWS_PER_BLOCK, 0, ctx->stream>>>(
        dx, dz, part, dy, x, z, bias, w, rstd, NR, HV, V);
    CUDA_CHECK_LAUNCH(ctx);
    colsum_finish(ctx->stream, dw, part, P, V);
    CUDA_CHECK_LAUNCH(ctx);
    // dbias [HV·V] += Σ_tokens dz: the column sum over [N, HV·V] (after the partials above are
    // consumed: the scratch is reused, in stream order)
    return colsum_add(ctx, dbias, N, HV * V, BiasDb{dz, HV * V});
}

int kda_cuda_bias_add(KdaCudaCtx *ctx, kda_bf16 *y, const float *bias, int64_t N, int64_t out) {
    KDA_CUDA_REQUIRE(ctx, N >= 0 && out > 0);
    if (N == 0) return 0;
    bias_add_k<<<grid_for(N * out), 256, 0, ctx->stream>>>(y, bias, N, out);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

int kda_cuda_bias_bwd(KdaCudaCtx *ctx, float *dbias, const kda_bf16 *dy, int64_t N, int64_t out) {
    KDA_CUDA_REQUIRE(ctx, N >= 0 && out > 0);
    if (N == 0) return 0;
    return colsum_add(ctx, dbias, N, out, BiasDb{dy, out});
}

// SwiGLU launchers: the first 8·nv elements on the 16-byte path when all pointers are 16-byte
// aligned (nv = 0 otherwise), the remaining < 8 (or all) on the scalar path.
int kda_cuda_swiglu_fwd(KdaCudaCtx *ctx, kda_bf16 *m, const kda_bf16 *a, const kda_bf16 *b,
                        int64_t n) {
    KDA_CUDA_REQUIRE(ctx, n >= 0);
    if (n == 0) return 0;
    int64_t nv = aligned_(16, m, a, b) ? n / 8 : 0;
    if (nv > 0) {
        swiglu_fwd_v8_k<<<grid_for(nv), 256, 0, ctx->stream>>>(m, a, b, nv);
        CUDA_CHECK_LAUNCH(ctx);
    }
    if (8 * nv < n) {
        swiglu_fwd_k<<<grid_for(n - 8 * nv), 256, 0, ctx->stream>>>(m, a, b, 8 * nv, n);
        CUDA_CHECK_LAUNCH(ctx);
    }
    return 0;
}

int kda_cuda_swiglu_bwd(KdaCudaCtx *ctx, kda_bf16 *da, kda_bf16 *db, const kda_bf16 *dm,
                        const kda_bf16 *a, const kda_bf16 *b, int64_t n) {
    KDA_CUDA_REQUIRE(ctx, n >= 0);
    if (n == 0) return 0;
    int64_t nv = aligned_(16, da, db, dm, a, b) ? n / 8 : 0;
    if (nv > 0) {
        swiglu_bwd_v8_k<<<grid_for(nv), 256, 0, ctx->stream>>>(da, db, dm, a, b, nv);
        CUDA_CHECK_LAUNCH(ctx);
    }
    if (8 * nv < n) {
        swiglu_bwd_k<<<grid_for(n - 8 * nv), 256, 0, ctx->stream>>>(da, db, dm, a, b, 8 * nv, n);
        CUDA_CHECK_LAUNCH(ctx);
    }
    return 0;
}

// Grid of the gate|up SwiGLU kernels: columns in x (256 threads x VEC), rows in y (grid-strided).
static dim3 gu_grid(int64_t N, int64_t I, int vec) {
    int64_t rows = N < 65535 ? N : 65535;
    return dim3((unsigned)CEIL_DIV(CEIL_DIV(I, (int64_t)vec), (int64_t)256), (unsigned)rows);
}

int kda_cuda_swiglu_gu_fwd(KdaCudaCtx *ctx, kda_bf16 *m, const kda_bf16 *gu, int64_t N, int64_t I) {
    KDA_CUDA_REQUIRE(ctx, N >= 0 && I > 0);
    if (N == 0) return 0;
    if (I % 8 == 0 && aligned_(16, m, gu))
        swiglu_gu_fwd_k<8><<<gu_grid(N, I, 8), 256, 0, ctx->stream>>>(m, gu, N, I);
    else
        swiglu_gu_fwd_k<1><<<gu_grid(N, I, 1), 256, 0, ctx->stream>>>(m, gu, N, I);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

int kda_cuda_swiglu_gu_bwd(KdaCudaCtx *ctx, kda_bf16 *dgu, const kda_bf16 *dm, int64_t ld_dm,
                           const kda_bf16 *gu, int64_t N, int64_t I) {
    KDA_CUDA_REQUIRE(ctx, N >= 0 && I > 0 && ld_dm >= I);
    if (N == 0) return 0;
    if (I % 8 == 0 && ld_dm % 8 == 0 && aligned_(16, dgu, dm, gu))
        swiglu_gu_bwd_k<8><<<gu_grid(N, I, 8), 256, 0, ctx->stream>>>(dgu, dm, ld_dm, gu, N, I);
    else
        swiglu_gu_bwd_k<1><<<gu_grid(N, I, 1), 256, 0, ctx->stream>>>(dgu, dm, ld_dm, gu, N, I);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

int kda_cuda_embed_fwd(KdaCudaCtx *ctx, float *h, const float *E, const int32_t *ids, int64_t N,
                       int64_t D) {
    KDA_CUDA_REQUIRE(ctx, N >= 0 && D > 0);
    if (N == 0) return 0;
    embed_fwd_k<<<grid_for(N * D), 256, 0, ctx->stream>>>(h, E, ids, N, D);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

int kda_cuda_embed_bwd(KdaCudaCtx *ctx, float *dE, const float *dh, const int32_t *ids, int64_t N,
                       int64_t D, int64_t n_vocab, int64_t pad_id) {
    KDA_CUDA_REQUIRE(ctx, N >= 0 && N <= INT32_MAX && D > 0 && n_vocab > 0);
    if (N == 0) return 0;
    int end_bit = 1;
    while (end_bit < 32 && ((int64_t)1 << end_bit) < n_vocab)
        end_bit++;
    size_t temp = 0;
    const uint32_t *keys_in = (const uint32_t *)ids; // ids are in [0, n_vocab)
    CUDA_CHECK(ctx, cub::DeviceRadixSort::SortPairs(NULL, temp, keys_in, (uint32_t *)NULL,
                                                    (const uint32_t *)NULL, (uint32_t *)NULL,
                                                    (int)N, 0, end_bit, ctx->stream));
    size_t arr = ((size_t)N * sizeof(uint32_t) + 255) & ~(size_t)255;
    char *ws = (char *)kda_cuda_scratch(ctx, 3 * arr + temp);
    if (!ws) return -1;
    uint32_t *keys_out = (uint32_t *)ws, *vals_in = (uint32_t *)(ws + arr);
    uint32_t *vals_out = (uint32_t *)(ws + 2 * arr);
    iota_k<<<grid_for(N), 256, 0, ctx->stream>>>(vals_in, N);
    CUDA_CHECK_LAUNCH(ctx);
    CUDA_CHECK(ctx, cub::DeviceRadixSort::SortPairs(ws + 3 * arr, temp, keys_in, keys_out, vals_in,
                                                    vals_out, (int)N, 0, end_bit, ctx->stream));
    embed_bwd_k<<<(unsigned)N, 128, 0, ctx->stream>>>(dE, dh, keys_out, vals_out, N, D, pad_id);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

KdaCudaAdamScalars kda_cuda_adam_scalars(double beta1, double beta2, double eps,
                                         double weight_decay, int64_t step, double lr) {
    double bc1 = 1.0 - pow(beta1, (double)step);
    double bc2 = 1.0 - pow(beta2, (double)step);
    KdaCudaAdamScalars s;
    s.decay = (float)(lr * weight_decay);
    s.b1 = (float)beta1;
    s.b2 = (float)beta2;
    s.one_m_b1 = (float)(1.0 - beta1);
    s.one_m_b2 = (float)(1.0 - beta2);
    s.step_size = (float)(lr / bc1);
    s.bc2_sqrt = (float)sqrt(bc2);
    s.eps = (float)eps;
    return s;
}

int kda_cuda_adamw(KdaCudaCtx *ctx, float *p, kda_bf16 *p_bf16, const float *g, float *m, float *v,
                   int64_t n, const KdaCudaAdamScalars *s, const float *gscale) {
    KDA_CUDA_REQUIRE(ctx, n >= 0 && s);
    if (n == 0) return 0;
    // the first 4·nv elements on the 16-byte path when the pointers allow, the rest one by one
    int64_t nv = aligned_(16, p, g, m, v) && aligned_(8, p_bf16) ? n / 4 : 0;
    if (nv > 0) {
        adamw_v4_k<<<grid_for(nv), 256, 0, ctx->stream>>>(p, p_bf16, g, m, v, nv, *s, gscale);
        CUDA_CHECK_LAUNCH(ctx);
    }
    if (4 * nv < n) {
        adamw_k<<<grid_for(n - 4 * nv), 256, 0, ctx->stream>>>(p, p_bf16, g, m, v, 4 * nv, n, *s,
                                                               gscale);
        CUDA_CHECK_LAUNCH(ctx);
    }
    return 0;
}

int kda_cuda_f32_to_bf16(KdaCudaCtx *ctx, kda_bf16 *dst, const float *src, int64_t n) {
    KDA_CUDA_REQUIRE(ctx, n >= 0);
    if (n == 0) return 0;
    f32_to_bf16_k<<<grid_for(n), 256, 0, ctx->stream>>>(dst, src, n);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

static int sumsq_(KdaCudaCtx *ctx, double *out, const float *g, int64_t n, int take_sqrt) {
    KDA_CUDA_REQUIRE(ctx, n >= 0);
    double *part = (double *)kda_cuda_scratch(ctx, NORM_BLOCKS * sizeof(double));
    if (!part) return -1;
    sumsq_partial_k<<<NORM_BLOCKS, 256, 0, ctx->stream>>>(part, g, n);
    CUDA_CHECK_LAUNCH(ctx);
    sumsq_finish_k<<<1, 256, 0, ctx->stream>>>(out, part, take_sqrt);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

int kda_cuda_grad_norm(KdaCudaCtx *ctx, double *norm, const float *g, int64_t n) {
    return sumsq_(ctx, norm, g, n, 1);
}

int kda_cuda_grad_sumsq(KdaCudaCtx *ctx, double *sumsq, const float *g, int64_t n) {
    return sumsq_(ctx, sumsq, g, n, 0);
}

int kda_cuda_clip_coef(KdaCudaCtx *ctx, float *coef, const double *norm, double max_norm) {
    clip_coef_k<<<1, 1, 0, ctx->stream>>>(coef, norm, max_norm);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

int kda_cuda_scale(KdaCudaCtx *ctx, float *g, int64_t n, const float *coef) {
    KDA_CUDA_REQUIRE(ctx, n >= 0);
    if (n == 0) return 0;
    scale_k<<<grid_for(n), 256, 0, ctx->stream>>>(g, n, coef);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

// Checks the parts; *vec = 8 when the 16-byte path applies; *ng = groups per row up to the last
// part column.
static int split_args_(KdaCudaCtx *ctx, const kda_bf16 *src, int64_t lds, int64_t rows,
                       const KdaCudaColParts *pp, int *vec, int64_t *ng) {
    KDA_CUDA_REQUIRE(ctx, pp && pp->n >= 1 && pp->n <= KDA_CUDA_SPLIT_MAX && rows >= 0 && src);
    bool v8 = lds % 8 == 0 && aligned_(16, src);
    int64_t end = 0;
    for (int k = 0; k < pp->n; k++) {
        KDA_CUDA_REQUIRE(ctx, pp->dst[k] && pp->col[k] >= 0 && pp->cols[k] >= 1 &&
                                  pp->ld[k] >= pp->cols[k] && pp->col[k] + pp->cols[k] <= lds);
        v8 = v8 && pp->col[k] % 8 == 0 && pp->cols[k] % 8 == 0 && pp->ld[k] % 8 == 0 &&
             aligned_(16, pp->dst[k]);
        end = pp->col[k] + pp->cols[k] > end ? pp->col[k] + pp->cols[k] : end;
    }
    *vec = v8 ? 8 : 1;
    *ng = CEIL_DIV(end, (int64_t)*vec);
    return 0;
}

int kda_cuda_cols_split(KdaCudaCtx *ctx, const kda_bf16 *src, int64_t lds, int64_t rows,
                        const KdaCudaColParts *parts) {
    int vec = 1;
    int64_t ng = 0;
    if (split_args_(ctx, src, lds, rows, parts, &vec, &ng)) return -1;
    int64_t n = rows * ng;
    if (n == 0) return 0;
    if (vec == 8)
        split_k<8><<<grid_for(n), 256, 0, ctx->stream>>>(src, lds, ng, n, *parts);
    else
        split_k<1><<<grid_for(n), 256, 0, ctx->stream>>>(src, lds, ng, n, *parts);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

int kda_cuda_cols_copy(KdaCudaCtx *ctx, kda_bf16 *dst, int64_t ldd, const kda_bf16 *src,
                       int64_t lds, int64_t rows, int64_t cols) {
    KdaCudaColParts pp;
    memset(&pp, 0, sizeof pp);
    pp.n = 1, pp.dst[0] = dst, pp.col[0] = 0, pp.cols[0] = cols, pp.ld[0] = ldd;
    return kda_cuda_cols_split(ctx, src, lds, rows, &pp);
}

void kda_cuda_cols_split_host(const kda_bf16 *src, int64_t lds, int64_t rows,
                              const KdaCudaColParts *parts) {
    bool v8 = lds % 8 == 0;
    int64_t end = 0;
    for (int k = 0; k < parts->n; k++) {
        v8 = v8 && parts->col[k] % 8 == 0 && parts->cols[k] % 8 == 0 && parts->ld[k] % 8 == 0;
        end = parts->col[k] + parts->cols[k] > end ? parts->col[k] + parts->cols[k] : end;
    }
    int64_t ng = CEIL_DIV(end, (int64_t)(v8 ? 8 : 1));
    for (int64_t i = 0; i < rows * ng; i++)
        if (v8)
            split_item<8>(src, lds, ng, *parts, i);
        else
            split_item<1>(src, lds, ng, *parts, i);
}

// ---- fp32 forward launchers (the scoring path, ops_cuda.h) ------------------------------------

int kda_cuda_rmsnorm_fwd_f32(KdaCudaCtx *ctx, float *y, float *rstd, const float *x, const float *w,
                             int64_t N, int64_t D, float eps) {
    KDA_CUDA_REQUIRE(ctx, N >= 0 && D > 0);
    if (N == 0) return 0;
    rmsnorm_fwd_k<1>
        <<<row_blocks(N), 256, 0, ctx->stream>>>(y, rstd, (float *)x, NULL, w, N, D, eps);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

int kda_cuda_l2norm_fwd_f32(KdaCudaCtx *ctx, float *y, float *rstd, const float *x, int64_t N,
                            int64_t dim, float eps) {
    KDA_CUDA_REQUIRE(ctx, N >= 0 && dim > 0);
    if (N == 0) return 0;
    l2norm_fwd_k<<<row_blocks(N), 256, 0, ctx->stream>>>(y, rstd, x, N, dim, eps);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

int kda_cuda_conv_silu_fwd_f32(KdaCudaCtx *ctx, float *y, const float *p, const float *w, int64_t B,
                               int64_t T, int64_t C, int64_t W) {
    KDA_CUDA_REQUIRE(ctx, B >= 0 && T >= 0 && C > 0 && W >= 1 && W <= CONV_MAX_W);
    if (B * T == 0) return 0;
    bool v4 = C % 4 == 0 && aligned_(16, y, p); // float4 groups of 4 channels
    dim3 grid = conv_grid(B, T, C, v4 ? 4 : 1, CONV_TT_FWD), block(32, CONV_BT);
    KDA_CUDA_REQUIRE(ctx, grid.y > 0);
#define CONV_FWD(W_)                                                                               \
    if (v4)                                                                                        \
        conv_fwd_k<W_, 4, false, true>                                                             \
            <<<grid, block, 0, ctx->stream>>>(y, NULL, p, w, B, T, C, 0, 0.0f);                    \
    else                                                                                           \
        conv_fwd_k<W_, 1, false, true>                                                             \
            <<<grid, block, 0, ctx->stream>>>(y, NULL, p, w, B, T, C, 0, 0.0f)
    CONV_DISPATCH_W(W, CONV_FWD);
#undef CONV_FWD
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

int kda_cuda_gate_cumsum_fwd_f32(KdaCudaCtx *ctx, float *gcum, const float *f, const float *A_log,
                                 const float *dt_bias, int64_t B, int64_t T, int64_t HV, int64_t K,
                                 int64_t chunk) {
    KDA_CUDA_REQUIRE(ctx, B >= 0 && T >= 0 && HV > 0 && K > 0 && chunk > 0);
    if (B * T == 0) return 0;
    int64_t cols = B * CEIL_DIV(T, chunk) * HV * K;
    gate_fwd_k<<<(unsigned)CEIL_DIV(cols, (int64_t)256), 256, 0, ctx->stream>>>(
        gcum, (float *)NULL, f, A_log, dt_bias, B, T, HV, K, chunk);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

int kda_cuda_beta_fwd_f32(KdaCudaCtx *ctx, float *beta, const float *b, int64_t n,
                          int allow_neg_eigval) {
    KDA_CUDA_REQUIRE(ctx, n >= 0);
    if (n == 0) return 0;
    beta_fwd_k<<<grid_for(n), 256, 0, ctx->stream>>>(beta, b, n, allow_neg_eigval ? 2.0f : 1.0f);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

int kda_cuda_gnorm_fwd_f32(KdaCudaCtx *ctx, float *y, float *rstd, const float *x, const float *z,
                           const float *w, int64_t N, int64_t V, float eps) {
    KDA_CUDA_REQUIRE(ctx, N >= 0 && V > 0);
    if (N == 0) return 0;
    gnorm_fwd_k<<<row_blocks(N), 256, 0, ctx->stream>>>(y, rstd, x, z, w, N, V, eps);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

int kda_cuda_bias_add_f32(KdaCudaCtx *ctx, float *y, const float *bias, int64_t N, int64_t out) {
    KDA_CUDA_REQUIRE(ctx, N >= 0 && out > 0);
    if (N == 0) return 0;
    bias_add_k<<<grid_for(N * out), 256, 0, ctx->stream>>>(y, bias, N, out);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

int kda_cuda_swiglu_fwd_f32(KdaCudaCtx *ctx, float *m, const float *a, const float *b, int64_t n) {
    KDA_CUDA_REQUIRE(ctx, n >= 0);
    if (n == 0) return 0;
    swiglu_fwd_k<<<grid_for(n), 256, 0, ctx->stream>>>(m, a, b, (int64_t)0, n);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

// ---- host twins of the fused kernels (tests: test_fuse_host.c) ---------------------------------
// Same per-lane arithmetic (the __host__ __device__ pieces above) and the same group-sum tree;
// the loops run every lane of every row one after another. The weight-gradient sums are added in
// double per column (the device adds fixed tiles in fp32, then double: a different order).

static void ld8_host_(float (&v)[8], const kda_bf16 *p) {
    for (int i = 0; i < 8; i++)
        v[i] = bf2f(p[i]);
}

void kda_cuda_conv_silu_l2_fwd_host(kda_bf16 *y, float *rstd, const kda_bf16 *p, const float *w,
                                    int64_t B, int64_t T, int64_t C, int64_t W, int64_t K,
                                    float eps) {
    int lg = (int)(K / 8);
    int64_t H = C / K;
    float out[32][8] = {{0}}, part[32] = {0}; // zeroed: gcc 13 maybe-uninitialized
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < H; h++) {
                for (int s = 0; s < lg; s++) {
                    for (int v = 0; v < 8; v++) {
                        int64_t ch = h * K + 8 * s + v;
                        float acc = 0.0f;
                        for (int64_t i = 0; i < W; i++) {
                            int64_t tau = t - (W - 1) + i;
                            acc +=
                                w[ch * W + i] * (tau >= 0 ? bf2f(p[(b * T + tau) * C + ch]) : 0.0f);
                        }
                        out[s][v] = silu_f(acc);
                    }
                    part[s] = sumsq_lane<8>(out[s]);
                }
                float rs = l2_rs(group_sum_host(part, lg), eps);
                for (int s = 0; s < lg; s++)
                    for (int v = 0; v < 8; v++)
                        y[(b * T + t) * C + h * K + 8 * s + v] = f2bf(out[s][v] * rs);
                rstd[(b * T + t) * H + h] = rs;
            }
}

void kda_cuda_conv_silu_l2_bwd_host(kda_bf16 *dp, float *dw, const float *dy, const kda_bf16 *p,
                                    const float *w, const float *rstd, int64_t B, int64_t T,
                                    int64_t C, int64_t W, int64_t K) {
    int lg = (int)(K / 4);
    int64_t H = C / K, n = B * T * C;
    float *dc = (float *)kda_malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    double *dws = (double *)kda_calloc((size_t)(C * W), sizeof(double));
    auto pv = [&](int64_t b, int64_t tau, int64_t ch) {
        return tau >= 0 && tau < T ? bf2f(p[(b * T + tau) * C + ch]) : 0.0f;
    };
    float c[32][4] = {{0}}, g[32][4] = {{0}}, yh[32][4] = {{0}}, part[32] = {0}; // as above
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < H; h++) {
                int64_t row = (b * T + t) * C;
                float rs = rstd[(b * T + t) * H + h];
                for (int s = 0; s < lg; s++) {
                    for (int v = 0; v < 4; v++) {
                        int64_t ch = h * K + 4 * s + v;
                        c[s][v] = 0.0f;
                        for (int64_t i = 0; i < W; i++)
                            c[s][v] += w[ch * W + i] * pv(b, t - (W - 1) + i, ch);
                        g[s][v] = dy[row + ch];
                    }
                    part[s] = l2_bwd_dot_lane<4>(yh[s], g[s], c[s], rs);
                }
                float dot = group_sum_host(part, lg);
                for (int s = 0; s < lg; s++)
                    for (int v = 0; v < 4; v++)
                        dc[row + h * K + 4 * s + v] =
                            rs * (g[s][v] - dot * yh[s][v]) * dsilu_f(c[s][v]);
            }
    for (int64_t b = 0; b < B; b++)
        for (int64_t tau = 0; tau < T; tau++)
            for (int64_t ch = 0; ch < C; ch++) {
                float a = 0.0f; // dp_τ = Σ_i w_i dc_{τ+(W-1)-i}, i increasing (as the device)
                for (int64_t i = 0; i < W; i++) {
                    int64_t t = tau + (W - 1) - i;
                    a += w[ch * W + i] * (t < T ? dc[(b * T + t) * C + ch] : 0.0f);
                }
                dp[(b * T + tau) * C + ch] = f2bf(a);
                for (int64_t i = 0; i < W; i++) // dw_i += dc_τ p_{τ-(W-1)+i}
                    dws[ch * W + i] +=
                        (double)(dc[(b * T + tau) * C + ch] * pv(b, tau - (W - 1) + i, ch));
            }
    for (int64_t e = 0; e < C * W; e++)
        dw[e] += (float)dws[e];
    free(dc);
    free(dws);
}

void kda_cuda_gnorm_bias_fwd_host(kda_bf16 *y, float *rstd, const kda_bf16 *x, const kda_bf16 *z,
                                  const float *bias, const float *w, int64_t N, int64_t HV,
                                  int64_t V, float eps) {
    int lr = (int)(V / 8);
    float xv[32][8] = {{0}}, zv[32][8] = {{0}}, yv[8] = {0}, part[32] = {0}; // gcc 13, as above
    for (int64_t r = 0; r < N * HV; r++) {
        for (int s = 0; s < lr; s++) {
            ld8_host_(xv[s], x + r * V + 8 * s);
            ld8_host_(zv[s], z + r * V + 8 * s);
            part[s] = gn_ss_lane(xv[s]);
        }
        float rs = gn_rs(group_sum_host(part, lr), V, eps);
        for (int s = 0; s < lr; s++) {
            gn_fwd_lane(yv, xv[s], zv[s], w + 8 * s, bias + (r % HV) * V + 8 * s, rs);
            for (int v = 0; v < 8; v++)
                y[r * V + 8 * s + v] = f2bf(yv[v]);
        }
        rstd[r] = rs;
    }
}

void kda_cuda_gnorm_bias_bwd_host(kda_bf16 *dx, kda_bf16 *dz, float *dw, float *dbias,
                                  const kda_bf16 *dy, const kda_bf16 *x, const kda_bf16 *z,
                                  const float *bias, const float *w, const float *rstd, int64_t N,
                                  int64_t HV, int64_t V) {
    int lr = (int)(V / 8);
    double *sw = (double *)kda_calloc((size_t)V, sizeof(double));
    double *sb = (double *)kda_calloc((size_t)(HV * V), sizeof(double));
    float gv[32][8] = {{0}}, xv[32][8] = {{0}}, zv[32][8] = {{0}}, sg[32][8] = {{0}};
    float dzv[32][8] = {{0}}, dxv[8] = {0}, part[32] = {0}; // zeroed: gcc 13 maybe-uninitialized
    for (int64_t r = 0; r < N * HV; r++) {
        const float *bb = bias + (r % HV) * V;
        for (int s = 0; s < lr; s++) {
            ld8_host_(gv[s], dy + r * V + 8 * s);
            ld8_host_(xv[s], x + r * V + 8 * s);
            ld8_host_(zv[s], z + r * V + 8 * s);
            part[s] =
                gn_bwd_lane(dzv[s], sg[s], gv[s], xv[s], zv[s], w + 8 * s, bb + 8 * s, rstd[r]);
        }
        float m = group_sum_host(part, lr) / (float)V;
        for (int s = 0; s < lr; s++) {
            float accw[8] = {0};
            gn_bwd_lane2(dxv, accw, gv[s], xv[s], sg[s], w + 8 * s, rstd[r], m);
            for (int v = 0; v < 8; v++) {
                int64_t c = 8 * s + v;
                dx[r * V + c] = f2bf(dxv[v]);
                dz[r * V + c] = f2bf(dzv[s][v]);
                sw[c] += (double)accw[v];
                sb[(r % HV) * V + c] += (double)bf2f(dz[r * V + c]); // the bf16 dz, as the device
            }
        }
    }
    for (int64_t c = 0; c < V; c++)
        dw[c] += (float)sw[c];
    for (int64_t c = 0; c < HV * V; c++)
        dbias[c] += (float)sb[c];
    free(sw);
    free(sb);
}

} // extern "C"
