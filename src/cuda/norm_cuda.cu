// norm_cuda.cu - RMSNorm (+ fused residual add), gated RMSNorm and the gated RMSNorm with the
// g_proj.1 bias folded in, on the GPU (see norm_cuda.h): each operator's kernels, then its
// launchers (fp32 forward included), then the host twins of the fused kernels.
#include "cuda/norm_cuda.h"

#include <stdlib.h> // getenv, free

#include "cuda/cuda_internal.h" // defines: bf2f, f2bf, warp_sum, CEIL_DIV, KDA_CUDA_REQUIRE
#include "cuda/ops_common.cuh"  // defines: colsum_*, warp_row, row_blocks, ld_f, st_v, group_sum

namespace {

// ---- RMSNorm -----------------------------------------------------------------------------------

// x [N, D] fp32; when a != NULL, x += a first (x is then the residual, written back).
// VEC = 4: 16-byte fp32 and 8-byte bf16 accesses (D % 4 == 0, aligned rows; lane l takes
// elements 4l .. 4l+3, 4l+128 ...), else 1. Each lane sums its own elements' squares in order,
// then the warp sum. Y: the output's storage, bf16 (training) or fp32 (scoring).
template <int VEC, class Y>
__global__ void rmsnorm_fwd_k(Y *y, float *rstd, float *x, const kda_bf16 *a, const float *w,
                              int64_t N, int64_t D, float eps) {
    kda_grid_wait();
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

// The same without the residual add for D = 128·NV (NV <= RMS_REG_MAX_NV), the row's x held in
// registers: all of a lane's loads issued first (the loop kernel's loads wait on each other's
// math, and its second pass reads x again); the same arithmetic in the same order as
// rmsnorm_fwd_k<4>: the same bits. At NV = 16 (KDA-1B's D = 2048) a lane holds 64 floats and a
// warp has its row's 8 KB of x in flight at once; 8 warps of one row each per block, as below 16.
#define RMS_REG_MAX_NV 16 // D <= 2048 (KDA-1B's hidden size)
template <int NV, class Y>
__global__ void rmsnorm_fwd_reg_k(Y *y, float *rstd, const float *x, const float *w, int64_t N,
                                  float eps) {
    kda_grid_wait();
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
    kda_grid_wait();
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
// 8 warps x D x 4 B of shared memory: up to 48 KB (D <= 1536) by default, 64 KB at D = 2048
// after the launcher raises the kernel's limit (kda_cuda_smem_limit), 3 blocks per SM on an H200.
#define RMS_FUSED_MAX_D  2048
#define RMS_SMEM_DEFAULT (48 * 1024) // dynamic shared memory a block gets without opting in
template <int VEC>
__global__ void __launch_bounds__(32 * ROWS_PER_BLOCK)
    rmsnorm_bwd_fused_k(float *dx, kda_bf16 *dxb, double *part, const float *dy, const float *x,
                        const float *w, const float *rstd, int64_t N, int64_t D, int accumulate) {
    kda_grid_wait();
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

// The same for D = 128·NV (NV <= RMS_REG_MAX_NV: 300M's D = 1024 is NV = 8, 1B's 2048 is 16),
// with each lane's dy and x elements of the row held in registers between the two passes: every
// dy, x load of the row is issued before the first use (256 B per lane in flight at D = 1024)
// and the second pass reads only w (L1) and, accumulating, dx. rmsnorm_bwd_fused_k's second pass
// re-read dy and x, 8 KB per warp per row: with 32 warps per SM that is 34 MB over the GPU, most
// of the L2, so part of it came from HBM (the row measured 2.8 TB/s, 1.47x its floor,
// 2026-12-03). Same arithmetic in the same order as rmsnorm_bwd_fused_k<4> (lane elements
// 4l + 128k .. +3, k increasing; row r0 + j of the tile adds into acc row j % 8, rows in
// increasing order; the tile sum over the 8 acc rows in double): the same bits.
// Blocks (rmsnorm_bwd_reg_warps, _minb; ptxas of CUDA 13.0 for sm_90a):
// * NV <= 12: 8 warps, warp k takes rows r0 + k, r0 + k + 8, ... into its acc row k; acc static
//   (32·NV KB); launch bounds 256 only (the code and bits of before: 40-128 registers, NV = 8
//   spilling 12 B as it did).
// * NV = 13 .. 16: acc is 52-64 KB, over the 48 KB of static shared memory, so it is dynamic (the
//   launcher raises the limit once per context, kda_cuda_smem_limit). A lane's row is 4·NV
//   floats of dy and as many of x (128 at NV = 16): 8-warp blocks would fit 1 per SM (2 need
//   <= 128 registers: spills), and each block's end (__syncthreads, its 64-row column sums, the
//   next block's start) would idle the whole SM. So 4 warps per block: warp k takes rows
//   r0 + k, r0 + k + 4, ... and owns acc rows k and k + 4. NV 13-15: launch bounds 128 x 3,
//   168 registers, no spills, 3 blocks (12 warps) per SM by registers and shared memory (3 x
//   52-60 KB of the 227). NV = 16 spills 328 B at 168, so 128 x 2: 219 registers, no spills, 2
//   blocks (8 warps) per SM; KDA-1B at mb 8 has 256 tiles, which fit the 264 slots in one wave
//   anyway.
// Why that should reach the HBM floor: HBM needs about latency x bandwidth = 1 us x 4.2 TB/s /
// 132 SMs = 33 KB in flight per SM. A warp puts its row's 16 KB of dy and x (D = 2048) in flight
// at once, then its 8 KB of dx when accumulating, so 2-3 of the 8 resident warps in a load phase
// cover it. At the floor a row (36 KB with accumulate and dxb) takes a warp ~9 us (8 warps share
// the SM's ~33 GB/s), against ~2 round trips (~2-3 us) of its own latency and ~950 issued
// instructions (~1/8 of the SM's issue rate over the 8 warps; the acc updates, 4-way
// bank-conflicted scalar LDS/STS, take ~1/4 of the shared-memory bandwidth).
__host__ __device__ constexpr int rmsnorm_bwd_reg_warps(int NV) { // warps per block
    return NV <= 12 ? ROWS_PER_BLOCK : 4;
}
// the launch bounds' blocks per SM (0: none given, the 1-argument form)
__host__ __device__ constexpr int rmsnorm_bwd_reg_minb(int NV) {
    return NV <= 12 ? 0 : NV <= 15 ? 3 : 2;
}
template <int NV>
__global__ void __launch_bounds__(32 * rmsnorm_bwd_reg_warps(NV), rmsnorm_bwd_reg_minb(NV))
    rmsnorm_bwd_reg_k(float *dx, kda_bf16 *dxb, double *part, const float *dy, const float *x,
                      const float *w, const float *rstd, int64_t N, int accumulate) {
    kda_grid_wait();
    constexpr int64_t D = 128 * NV;
    constexpr int WARPS = rmsnorm_bwd_reg_warps(NV);
    constexpr bool DYN = WARPS < ROWS_PER_BLOCK; // acc [ROWS_PER_BLOCK][D] in dynamic shared
    static_assert(ROWS_PER_BLOCK % WARPS == 0, "a warp owns whole acc rows");
    __shared__ float acc_s[DYN ? 1 : ROWS_PER_BLOCK * D];
    extern __shared__ float acc_d[];
    float *acc = DYN ? acc_d : acc_s;
    int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    float *my = acc + (int64_t)warp * D;
    if constexpr (DYN) {
        for (int k = warp; k < ROWS_PER_BLOCK; k += WARPS)
            for (int64_t d = lane; d < D; d += 32)
                acc[(int64_t)k * D + d] = 0.0f;
    } else {
        for (int64_t d = lane; d < D; d += 32)
            my[d] = 0.0f;
    }
    __syncwarp(); // the loop below reads columns another lane zeroed
    int64_t r0 = (int64_t)blockIdx.x * TILE_ROWS, r1 = min(r0 + TILE_ROWS, N);
    for (int64_t r = r0 + warp; r < r1; r += WARPS) {
        if constexpr (DYN) my = acc + ((r - r0) % ROWS_PER_BLOCK) * D;
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

} // namespace

extern "C" {

// KDA_RMS_FWD=loop / KDA_RMS_BWD=loop (read at every call): the RMSNorm forward's / backward's
// loop kernel (rmsnorm_fwd_k<4>, rmsnorm_bwd_fused_k<4>) instead of the one that holds the row
// in registers, D = 128·NV <= 2048 (the same bits; kept to measure against). Before the register
// kernels reached D = 2048 (2026-12-03), D in (1536, 2048] ran the two-pass backward
// (rmsnorm_bwd_k + colsum_add, other bits), which D > 2048 still runs.
static bool rms_loop_(const char *var) {
    const char *e = getenv(var);
    return e && !strcmp(e, "loop");
}

int kda_cuda_rmsnorm_fwd(KdaCudaCtx *ctx, kda_bf16 *y, float *rstd, const float *x, const float *w,
                         int64_t N, int64_t D, float eps) {
    KDA_CUDA_REQUIRE(ctx, N >= 0 && D > 0);
    if (N == 0) return 0;
    bool v4 = D % 4 == 0 && aligned_(16, x, w) && aligned_(8, y);
    if (v4 && D % 128 == 0 && D <= RMS_REG_MAX_NV * 128 && !rms_loop_("KDA_RMS_FWD")) {
#define RMS_FREG(NV_)                                                                              \
    case NV_:                                                                                      \
        CUDA_CHECK(ctx, kda_launch(ctx, rmsnorm_fwd_reg_k<NV_, kda_bf16>, dim3(row_blocks(N)),     \
                                   dim3(256), 0, y, rstd, x, w, N, eps));                          \
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
            RMS_FREG(12);
            RMS_FREG(13);
            RMS_FREG(14);
            RMS_FREG(15);
        default:
            RMS_FREG(16);
        }
#undef RMS_FREG
    } else {
        CUDA_CHECK(ctx,
                   kda_launch(ctx, v4 ? rmsnorm_fwd_k<4, kda_bf16> : rmsnorm_fwd_k<1, kda_bf16>,
                              dim3(row_blocks(N)), dim3(256), 0, y, rstd, (float *)x,
                              (const kda_bf16 *)NULL, w, N, D, eps));
    }
    return 0;
}

int kda_cuda_rmsnorm_residual_fwd(KdaCudaCtx *ctx, kda_bf16 *y, float *rstd, float *residual,
                                  const kda_bf16 *a, const float *w, int64_t N, int64_t D,
                                  float eps) {
    KDA_CUDA_REQUIRE(ctx, N >= 0 && D > 0 && a);
    if (N == 0) return 0;
    bool v4 = D % 4 == 0 && aligned_(16, residual, w) && aligned_(8, y, a);
    CUDA_CHECK(ctx,
               kda_launch(ctx, v4 ? rmsnorm_fwd_k<4, kda_bf16> : rmsnorm_fwd_k<1, kda_bf16>,
                          dim3(row_blocks(N)), dim3(256), 0, y, rstd, residual, a, w, N, D, eps));
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
    // the fused and register kernels' acc [8, D] fp32; a device that cannot give a block that
    // much shared memory takes the two-pass path
    size_t shmem = (size_t)(ROWS_PER_BLOCK * D) * sizeof(float);
    if (D > RMS_FUSED_MAX_D ||
        (shmem > RMS_SMEM_DEFAULT && shmem > ctx->info.smem_per_block_optin)) {
        // wide rows: dx pass, then a separate column-sum pass for dw
        CUDA_CHECK(ctx, kda_launch(ctx, rmsnorm_bwd_k, dim3(row_blocks(N)), dim3(256), 0, dx, dxb,
                                   dy, x, w, rstd, N, D, accumulate));
        return colsum_add(ctx, dw, N, D, RmsDw{dy, x, rstd, D});
    }
    int64_t P = CEIL_DIV(N, (int64_t)TILE_ROWS);
    double *part = (double *)kda_cuda_scratch(ctx, (size_t)(P * D) * sizeof(double));
    if (!part) return -1;
    bool v4 = D % 4 == 0 && aligned_(16, dx, dy, x, w) && aligned_(8, dxb);
    if (v4 && D % 128 == 0 && D <= RMS_REG_MAX_NV * 128 && !rms_loop_("KDA_RMS_BWD")) {
        // rows in registers; above NV = 12, 4-warp blocks with acc in dynamic shared memory
#define RMS_REG(NV_)                                                                               \
    case NV_: {                                                                                    \
        constexpr int W_ = rmsnorm_bwd_reg_warps(NV_);                                             \
        size_t sm_ = W_ < ROWS_PER_BLOCK ? shmem : 0;                                              \
        if (sm_ && kda_cuda_smem_limit(ctx, (const void *)rmsnorm_bwd_reg_k<NV_>, sm_)) return -1; \
        CUDA_CHECK(ctx, kda_launch(ctx, rmsnorm_bwd_reg_k<NV_>, dim3((unsigned)P), dim3(32 * W_),  \
                                   sm_, dx, dxb, part, dy, x, w, rstd, N, accumulate));            \
    } break
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
            RMS_REG(12);
            RMS_REG(13);
            RMS_REG(14);
            RMS_REG(15);
        default:
            RMS_REG(16);
        }
#undef RMS_REG
    } else {
        const void *fn =
            v4 ? (const void *)rmsnorm_bwd_fused_k<4> : (const void *)rmsnorm_bwd_fused_k<1>;
        if (shmem > RMS_SMEM_DEFAULT && kda_cuda_smem_limit(ctx, fn, shmem)) return -1;
        CUDA_CHECK(ctx, kda_launch(ctx, v4 ? rmsnorm_bwd_fused_k<4> : rmsnorm_bwd_fused_k<1>,
                                   dim3((unsigned)P), dim3(32 * ROWS_PER_BLOCK), shmem, dx, dxb,
                                   part, dy, x, w, rstd, N, D, accumulate));
    }
    CUDA_CHECK(ctx, colsum_finish(ctx, dw, part, P, D));
    return 0;
}

int kda_cuda_rmsnorm_fwd_f32(KdaCudaCtx *ctx, float *y, float *rstd, const float *x, const float *w,
                             int64_t N, int64_t D, float eps) {
    KDA_CUDA_REQUIRE(ctx, N >= 0 && D > 0);
    if (N == 0) return 0;
    CUDA_CHECK(ctx, kda_launch(ctx, rmsnorm_fwd_k<1, float>, dim3(row_blocks(N)), dim3(256), 0, y,
                               rstd, (float *)x, (const kda_bf16 *)NULL, w, N, D, eps));
    return 0;
}

} // extern "C"

namespace {

// ---- gated RMSNorm -----------------------------------------------------------------------------

template <class E> // E: bf16 or fp32 storage of x, z, y
__global__ void gnorm_fwd_k(E *y, float *rstd, const E *x, const E *z, const float *w, int64_t N,
                            int64_t V, float eps) {
    kda_grid_wait();
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
    kda_grid_wait();
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

} // namespace

extern "C" {

int kda_cuda_gnorm_fwd(KdaCudaCtx *ctx, kda_bf16 *y, float *rstd, const kda_bf16 *x,
                       const kda_bf16 *z, const float *w, int64_t N, int64_t V, float eps) {
    KDA_CUDA_REQUIRE(ctx, N >= 0 && V > 0);
    if (N == 0) return 0;
    CUDA_CHECK(ctx, kda_launch(ctx, gnorm_fwd_k<kda_bf16>, dim3(row_blocks(N)), dim3(256), 0, y,
                               rstd, x, z, w, N, V, eps));
    return 0;
}

int kda_cuda_gnorm_bwd(KdaCudaCtx *ctx, kda_bf16 *dx, kda_bf16 *dz, float *dw, const kda_bf16 *dy,
                       const kda_bf16 *x, const kda_bf16 *z, const float *w, const float *rstd,
                       int64_t N, int64_t V) {
    KDA_CUDA_REQUIRE(ctx, N >= 0 && V > 0);
    if (N == 0) return 0;
    CUDA_CHECK(ctx, kda_launch(ctx, gnorm_bwd_k, dim3(row_blocks(N)), dim3(256), 0, dx, dz, dy, x,
                               z, w, rstd, N, V));
    return colsum_add(ctx, dw, N, V, GnormDw{dy, x, z, rstd, V});
}

int kda_cuda_gnorm_fwd_f32(KdaCudaCtx *ctx, float *y, float *rstd, const float *x, const float *z,
                           const float *w, int64_t N, int64_t V, float eps) {
    KDA_CUDA_REQUIRE(ctx, N >= 0 && V > 0);
    if (N == 0) return 0;
    CUDA_CHECK(ctx, kda_launch(ctx, gnorm_fwd_k<float>, dim3(row_blocks(N)), dim3(256), 0, y, rstd,
                               x, z, w, N, V, eps));
    return 0;
}

} // extern "C"

namespace {

// ---- gated RMSNorm with the g_proj.1 bias folded in (the fused path) --------------------------
// Rows r = token·HV + head of V = 8·lr elements; lr consecutive lanes hold a row (8 elements
// each, one 16-byte access per tensor), a warp 32 / lr rows at once. The gate logits z are the
// raw GEMM output: σ(z + bias[head·V + v]) in fp32 (the unfused path rounds z + bias to bf16
// first). The per-lane arithmetic below is shared with the host twins (kda_cuda_gnorm_bias_*_host).
#define GN_TILE 256 // rows per block of the fused backward: its dw partials are [rows / 256, V]

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

// y [NR, V] bf16, rstd [NR] from x, z [NR, V] bf16; one group of lr lanes per row. (Four row
// groups per warp with all loads first, and two per backward iteration, measured slower in the
// model on 2026-12-03: fwd 0.56 → 1.01 ms, bwd 1.26 → 1.73 ms at mb 16; reverted.)
__global__ void gnorm_bias_fwd_k(kda_bf16 *y, float *rstd, const kda_bf16 *x, const kda_bf16 *z,
                                 const float *bias, const float *w, int64_t NR, int64_t HV,
                                 int64_t V, float eps) {
    kda_grid_wait();
    int lr = (int)(V / 8), lane = threadIdx.x & 31, rw = 32 / lr;
    int64_t r = ((int64_t)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32) * rw + lane / lr;
    int64_t c0 = 8 * (lane % lr);
    bool act = r < NR; // lanes of a row group agree; every lane reaches the group sum
    float xv[8] = {0}, zv[8] = {0}, yv[8];
    if (act) {
        ld_bf<8>(xv, x + r * V + c0);
        ld_bf<8>(zv, z + r * V + c0);
    }
    float rs = gn_rs(group_sum(gn_ss_lane(xv), lr), V, eps);
    if (!act) return;
    gn_fwd_lane(yv, xv, zv, w + c0, bias + (int64_t)((int)r % (int)HV) * V + c0, rs);
    st_bf<8>(y + r * V + c0, yv);
    if (c0 == 0) rstd[r] = rs;
}

// dx, dz [NR, V] bf16 overwritten; part [ceil(NR / GN_TILE), V] double = the block's dw sums.
// Block = 8 warps over the GN_TILE rows [blockIdx.x · GN_TILE, +GN_TILE): warp k takes row
// groups k, k + 8, ... (rows in increasing order per lane); then the block adds, for each column,
// the (warp, row-in-group) partials in a fixed order in double.
__global__ void __launch_bounds__(32 * ROWS_PER_BLOCK)
    gnorm_bias_bwd_k(kda_bf16 *dx, kda_bf16 *dz, double *part, const kda_bf16 *dy,
                     const kda_bf16 *x, const kda_bf16 *z, const float *bias, const float *w,
                     const float *rstd, int64_t NR, int64_t HV, int64_t V) {
    kda_grid_wait();
    __shared__ float sh[ROWS_PER_BLOCK][32][8]; // [warp][lane][element]
    int lr = (int)(V / 8), lane = threadIdx.x & 31, warp = threadIdx.x / 32, rw = 32 / lr;
    int64_t c0 = 8 * (lane % lr), base = (int64_t)blockIdx.x * GN_TILE;
    int64_t end = min(base + (int64_t)GN_TILE, NR);
    float accw[8] = {0};
    for (int64_t g0 = base + (int64_t)warp * rw; g0 < end; g0 += (int64_t)ROWS_PER_BLOCK * rw) {
        int64_t r = g0 + lane / lr;
        bool act = r < end; // warp-uniform loop; inactive rows add zeros
        float gv[8] = {0}, xv[8] = {0}, zv[8] = {0}, sg[8], dzv[8], dxv[8];
        float rs = 0.0f;
        const float *bb = bias + (act ? (int64_t)((int)r % (int)HV) * V : 0) + c0;
        if (act) {
            ld_bf<8>(gv, dy + r * V + c0);
            ld_bf<8>(xv, x + r * V + c0);
            ld_bf<8>(zv, z + r * V + c0);
            rs = rstd[r];
        }
        float m = group_sum(gn_bwd_lane(dzv, sg, gv, xv, zv, w + c0, bb, rs), lr) / (float)V;
        gn_bwd_lane2(dxv, accw, gv, xv, sg, w + c0, rs, m);
        if (act) {
            st_bf<8>(dz + r * V + c0, dzv);
            st_bf<8>(dx + r * V + c0, dxv);
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

} // namespace

extern "C" {

int kda_cuda_gnorm_fusable(int64_t V) {
    return V == 8 || V == 16 || V == 32 || V == 64 || V == 128 || V == 256; // V/8 lanes: 1..32
}

int kda_cuda_gnorm_bias_fwd(KdaCudaCtx *ctx, kda_bf16 *y, float *rstd, const kda_bf16 *x,
                            const kda_bf16 *z, const float *bias, const float *w, int64_t N,
                            int64_t HV, int64_t V, float eps) {
    KDA_CUDA_REQUIRE(ctx, N >= 0 && HV > 0 && kda_cuda_gnorm_fusable(V));
    KDA_CUDA_REQUIRE(ctx, N * HV < INT32_MAX && aligned_(16, y, x, z, w, bias));
    int64_t NR = N * HV, rows_per_block = ROWS_PER_BLOCK * (32 / (V / 8));
    if (NR == 0) return 0;
    CUDA_CHECK(ctx,
               kda_launch(ctx, gnorm_bias_fwd_k, dim3((unsigned)CEIL_DIV(NR, rows_per_block)),
                          dim3(32 * ROWS_PER_BLOCK), 0, y, rstd, x, z, bias, w, NR, HV, V, eps));
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
    CUDA_CHECK(ctx, kda_launch(ctx, gnorm_bias_bwd_k, dim3((unsigned)P), dim3(32 * ROWS_PER_BLOCK),
                               0, dx, dz, part, dy, x, z, bias, w, rstd, NR, HV, V));
    CUDA_CHECK(ctx, colsum_finish(ctx, dw, part, P, V));
    // dbias [HV·V] += Σ_tokens dz: the column sum over [N, HV·V] (after the partials above are
    // consumed: the scratch is reused, in stream order)
    return colsum_add(ctx, dbias, N, HV * V, BiasDb{dz, HV * V});
}

// ---- host twins of the fused kernels (tests: test_fuse_host.c) ---------------------------------
// Same per-lane arithmetic (the __host__ __device__ pieces above) and the same group-sum tree;
// the loops run every lane of every row one after another. The weight-gradient sums are added in
// double per column (the device adds fixed tiles in fp32, then double: a different order).

static void ld8_host_(float (&v)[8], const kda_bf16 *p) {
    for (int i = 0; i < 8; i++)
        v[i] = bf2f(p[i]);
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
