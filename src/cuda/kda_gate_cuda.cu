// kda_gate_cuda.cu - the per-token pre-processing of the KDA core on the GPU (see
// kda_gate_cuda.h): the gate with its chunk-local cumsum, the beta sigmoid and the L2 norm of q/k,
// each operator's kernels, then its launchers (fp32 forward included).
#include "cuda/kda_gate_cuda.h"

#include "cuda/cuda_internal.h" // defines: bf2f, f2bf, warp_sum, grid_for, KDA_CUDA_REQUIRE
#include "cuda/ops_common.cuh"  // defines: colsum_finish, warp_row, row_blocks

namespace {

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

} // namespace

extern "C" {

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

} // extern "C"

namespace {

// ---- beta ---------------------------------------------------------------------------------------

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

} // namespace

extern "C" {

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

int kda_cuda_beta_fwd_f32(KdaCudaCtx *ctx, float *beta, const float *b, int64_t n,
                          int allow_neg_eigval) {
    KDA_CUDA_REQUIRE(ctx, n >= 0);
    if (n == 0) return 0;
    beta_fwd_k<<<grid_for(n), 256, 0, ctx->stream>>>(beta, b, n, allow_neg_eigval ? 2.0f : 1.0f);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

} // extern "C"

namespace {

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

} // namespace

extern "C" {

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

int kda_cuda_l2norm_fwd_f32(KdaCudaCtx *ctx, float *y, float *rstd, const float *x, int64_t N,
                            int64_t dim, float eps) {
    KDA_CUDA_REQUIRE(ctx, N >= 0 && dim > 0);
    if (N == 0) return 0;
    l2norm_fwd_k<<<row_blocks(N), 256, 0, ctx->stream>>>(y, rstd, x, N, dim, eps);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

} // extern "C"
