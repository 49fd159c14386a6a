// swiglu_cuda.cu - SwiGLU on the GPU (see swiglu_cuda.h): m = SiLU(a) ⊙ b over flat tensors
// and over the gate|up output of one GEMM; kernels, then launchers (fp32 forward included).
#include "cuda/swiglu_cuda.h"

#include "cuda/cuda_internal.h" // defines: bf2f, f2bf, silu_f, dsilu_f, grid_for, KDA_CUDA_REQUIRE
#include "cuda/ops_common.cuh"  // defines: ld_bf, st_bf, aligned_

namespace {

// ---- SwiGLU ----------------------------------------------------------------------------------

// Elements [i0, n), one per thread (grid-stride): the scalar path and the vector path's tail
// (bf16), the whole fp32 scoring path (E = float).
template <class E>
__global__ void swiglu_fwd_k(E *m, const E *a, const E *b, int64_t i0, int64_t n) {
    kda_grid_wait();
    for (int64_t i = i0 + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        stf(m, i, silu_f(ldf(a, i)) * ldf(b, i));
}

__global__ void swiglu_bwd_k(kda_bf16 *da, kda_bf16 *db, const kda_bf16 *dm, const kda_bf16 *a,
                             const kda_bf16 *b, int64_t i0, int64_t n) {
    kda_grid_wait();
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
    kda_grid_wait();
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
    kda_grid_wait();
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
    kda_grid_wait();
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
// writes the same group of d(gate), and no other thread touches it. m != NULL: the forward's
// product recomputed into m [N, I] (swiglu_gu_fwd_k's expression on the same inputs: its bits).
template <int VEC>
__global__ void swiglu_gu_bwd_k(kda_bf16 *dgu, kda_bf16 *m, const kda_bf16 *dm, int64_t ld_dm,
                                const kda_bf16 *gu, int64_t N, int64_t I) {
    kda_grid_wait();
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
        if (m) {
            float mv[VEC];
#pragma unroll
            for (int v = 0; v < VEC; v++)
                mv[v] = silu_f(av[v]) * bv[v];
            st_bf<VEC>(m + r * I + c, mv);
        }
    }
}

} // namespace

extern "C" {

// SwiGLU launchers: the first 8·nv elements on the 16-byte path when all pointers are 16-byte
// aligned (nv = 0 otherwise), the remaining < 8 (or all) on the scalar path.
int kda_cuda_swiglu_fwd(KdaCudaCtx *ctx, kda_bf16 *m, const kda_bf16 *a, const kda_bf16 *b,
                        int64_t n) {
    KDA_CUDA_REQUIRE(ctx, n >= 0);
    if (n == 0) return 0;
    int64_t nv = aligned_(16, m, a, b) ? n / 8 : 0;
    if (nv > 0) {
        CUDA_CHECK(ctx,
                   kda_launch(ctx, swiglu_fwd_v8_k, dim3(grid_for(nv)), dim3(256), 0, m, a, b, nv));
    }
    if (8 * nv < n) {
        CUDA_CHECK(ctx, kda_launch(ctx, swiglu_fwd_k<kda_bf16>, dim3(grid_for(n - 8 * nv)),
                                   dim3(256), 0, m, a, b, 8 * nv, n));
    }
    return 0;
}

int kda_cuda_swiglu_bwd(KdaCudaCtx *ctx, kda_bf16 *da, kda_bf16 *db, const kda_bf16 *dm,
                        const kda_bf16 *a, const kda_bf16 *b, int64_t n) {
    KDA_CUDA_REQUIRE(ctx, n >= 0);
    if (n == 0) return 0;
    int64_t nv = aligned_(16, da, db, dm, a, b) ? n / 8 : 0;
    if (nv > 0) {
        CUDA_CHECK(ctx, kda_launch(ctx, swiglu_bwd_v8_k, dim3(grid_for(nv)), dim3(256), 0, da, db,
                                   dm, a, b, nv));
    }
    if (8 * nv < n) {
        CUDA_CHECK(ctx, kda_launch(ctx, swiglu_bwd_k, dim3(grid_for(n - 8 * nv)), dim3(256), 0, da,
                                   db, dm, a, b, 8 * nv, n));
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
        CUDA_CHECK(
            ctx, kda_launch(ctx, swiglu_gu_fwd_k<8>, gu_grid(N, I, 8), dim3(256), 0, m, gu, N, I));
    else
        CUDA_CHECK(
            ctx, kda_launch(ctx, swiglu_gu_fwd_k<1>, gu_grid(N, I, 1), dim3(256), 0, m, gu, N, I));
    return 0;
}

int kda_cuda_swiglu_gu_bwd(KdaCudaCtx *ctx, kda_bf16 *dgu, kda_bf16 *m, const kda_bf16 *dm,
                           int64_t ld_dm, const kda_bf16 *gu, int64_t N, int64_t I) {
    KDA_CUDA_REQUIRE(ctx, N >= 0 && I > 0 && ld_dm >= I);
    if (N == 0) return 0;
    if (I % 8 == 0 && ld_dm % 8 == 0 && aligned_(16, dgu, dm, gu, m))
        CUDA_CHECK(ctx, kda_launch(ctx, swiglu_gu_bwd_k<8>, gu_grid(N, I, 8), dim3(256), 0, dgu, m,
                                   dm, ld_dm, gu, N, I));
    else
        CUDA_CHECK(ctx, kda_launch(ctx, swiglu_gu_bwd_k<1>, gu_grid(N, I, 1), dim3(256), 0, dgu, m,
                                   dm, ld_dm, gu, N, I));
    return 0;
}

int kda_cuda_swiglu_fwd_f32(KdaCudaCtx *ctx, float *m, const float *a, const float *b, int64_t n) {
    KDA_CUDA_REQUIRE(ctx, n >= 0);
    if (n == 0) return 0;
    CUDA_CHECK(ctx, kda_launch(ctx, swiglu_fwd_k<float>, dim3(grid_for(n)), dim3(256), 0, m, a, b,
                               (int64_t)0, n));
    return 0;
}

} // extern "C"
