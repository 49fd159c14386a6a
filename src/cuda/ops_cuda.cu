// ops_cuda.cu - row, elementwise and reduction kernels of the non-GEMM operators; see
// ops_cuda.h. Layout of this file: shared reduction helpers, then one section per operator in
// the order of the header.
//
// Row kernels use one warp per row (8 rows per 256-thread block). Column sums over rows (weight
// gradients) are deterministic: a first kernel sums fixed tiles of TILE_ROWS rows per column in
// double, a second adds the tiles in order. Elementwise kernels use grid-stride loops.
#include <cub/device/device_radix_sort.cuh>

#include "cuda/cuda_internal.h" // defines: bf2f, f2bf, warp_sum, CEIL_DIV, KDA_CUDA_REQUIRE
#include "cuda/ops_cuda.h"      // defines: kda_cuda_* of this file

#define ROWS_PER_BLOCK 8  // warps per 256-thread block in row kernels
#define TILE_ROWS      64 // rows per tile of the deterministic column sums

namespace {

// ---- deterministic column sums -----------------------------------------------------------------

// out[c] += Σ_p part[p, c] (p in increasing order), c < ncols.
__global__ void colsum_finish_k(float *out, const double *part, int64_t P, int64_t ncols) {
    int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= ncols) return;
    double s = 0.0;
    for (int64_t p = 0; p < P; p++)
        s += part[p * ncols + c];
    out[c] += (float)s;
}

// part[p, c] = Σ_{r in tile p} f(r, c) for a functor f (the product whose column sum is wanted).
template <class F> __global__ void colsum_partial_k(double *part, int64_t N, int64_t ncols, F f) {
    int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= ncols) return;
    int64_t r0 = (int64_t)blockIdx.y * TILE_ROWS, r1 = min(r0 + TILE_ROWS, N);
    double s = 0.0;
    for (int64_t r = r0; r < r1; r++)
        s += (double)f(r, c);
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
    colsum_finish_k<<<(unsigned)CEIL_DIV(ncols, (int64_t)256), 256, 0, ctx->stream>>>(out, part, P,
                                                                                      ncols);
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

// ---- RMSNorm -----------------------------------------------------------------------------------

// x [N, D] fp32; when a != NULL, x += a first (x is then the residual, written back).
__global__ void rmsnorm_fwd_k(kda_bf16 *y, float *rstd, float *x, const kda_bf16 *a, const float *w,
                              int64_t N, int64_t D, float eps) {
    int64_t r = warp_row(N);
    if (r < 0) return;
    int lane = threadIdx.x & 31;
    float *xr = x + r * D;
    float ss = 0.0f;
    for (int64_t d = lane; d < D; d += 32) {
        float v = xr[d];
        if (a) {
            v += bf2f(a[r * D + d]);
            xr[d] = v;
        }
        ss += v * v;
    }
    ss = warp_sum(ss);
    float rs = (float)(1.0 / sqrt((double)ss / (double)D + (double)eps));
    if (lane == 0) rstd[r] = rs;
    for (int64_t d = lane; d < D; d += 32)
        y[r * D + d] = f2bf(xr[d] * rs * w[d]);
}

__global__ void rmsnorm_bwd_k(float *dx, const float *dy, const float *x, const float *w,
                              const float *rstd, int64_t N, int64_t D, int accumulate) {
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
        dx[r * D + d] = accumulate ? dx[r * D + d] + v : v;
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

__global__ void l2norm_fwd_k(kda_bf16 *y, float *rstd, const kda_bf16 *x, int64_t N, int64_t dim,
                             float eps) {
    int64_t r = warp_row(N);
    if (r < 0) return;
    int lane = threadIdx.x & 31;
    float ss = 0.0f;
    for (int64_t i = lane; i < dim; i += 32) {
        float v = bf2f(x[r * dim + i]);
        ss += v * v;
    }
    ss = warp_sum(ss);
    float rs = (float)(1.0 / sqrt((double)ss + (double)eps)); // eps inside the square root
    if (lane == 0 && rstd) rstd[r] = rs;
    for (int64_t i = lane; i < dim; i += 32)
        y[r * dim + i] = f2bf(bf2f(x[r * dim + i]) * rs);
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

// ---- causal depthwise conv + SiLU ------------------------------------------------------------

#define CONV_MAX_W 8

// Pre-activation at (b, t, ch): Σ_i w[ch, i] p[t - (W-1) + i], zero history before t = 0.
__device__ __forceinline__ float conv_pre(const kda_bf16 *p, const float *w, int64_t b, int64_t t,
                                          int64_t ch, int64_t T, int64_t C, int64_t W) {
    float acc = 0.0f;
    for (int64_t i = 0; i < W; i++) {
        int64_t tau = t - (W - 1) + i;
        if (tau >= 0) acc += w[ch * W + i] * bf2f(p[(b * T + tau) * C + ch]);
    }
    return acc;
}

__global__ void conv_fwd_k(kda_bf16 *y, const kda_bf16 *p, const float *w, int64_t B, int64_t T,
                           int64_t C, int64_t W) {
    int64_t n = B * T * C;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
         e += (int64_t)gridDim.x * blockDim.x) {
        int64_t ch = e % C, bt = e / C, t = bt % T, b = bt / T;
        y[e] = f2bf(silu_f(conv_pre(p, w, b, t, ch, T, C, W)));
    }
}

// dp_τ = Σ_i w_i dc_{τ + (W-1) - i}, dc_t = dy_t SiLU'(c_t) (c recomputed).
__global__ void conv_bwd_dp_k(kda_bf16 *dp, const kda_bf16 *dy, const kda_bf16 *p, const float *w,
                              int64_t B, int64_t T, int64_t C, int64_t W) {
    int64_t n = B * T * C;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
         e += (int64_t)gridDim.x * blockDim.x) {
        int64_t ch = e % C, bt = e / C, tau = bt % T, b = bt / T;
        float acc = 0.0f;
        for (int64_t i = 0; i < W; i++) {
            int64_t t = tau + (W - 1) - i;
            if (t < T) {
                float c = conv_pre(p, w, b, t, ch, T, C, W);
                acc += w[ch * W + i] * bf2f(dy[(b * T + t) * C + ch]) * dsilu_f(c);
            }
        }
        dp[e] = f2bf(acc);
    }
}

// part[tile, ch, i] = Σ_{rows (b, t) of the tile} dc_t p_{t - (W-1) + i}.
__global__ void conv_bwd_dw_partial_k(double *part, const kda_bf16 *dy, const kda_bf16 *p,
                                      const float *w, int64_t B, int64_t T, int64_t C, int64_t W) {
    int64_t ch = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= C) return;
    int64_t r0 = (int64_t)blockIdx.y * TILE_ROWS, r1 = min(r0 + TILE_ROWS, B * T);
    double acc[CONV_MAX_W];
#pragma unroll
    for (int i = 0; i < CONV_MAX_W; i++)
        acc[i] = 0.0;
    for (int64_t r = r0; r < r1; r++) {
        int64_t b = r / T, t = r % T;
        float dc = bf2f(dy[r * C + ch]) * dsilu_f(conv_pre(p, w, b, t, ch, T, C, W));
#pragma unroll
        for (int i = 0; i < CONV_MAX_W; i++) {
            int64_t tau = t - (W - 1) + i;
            if (i < W && tau >= 0) acc[i] += (double)(dc * bf2f(p[(b * T + tau) * C + ch]));
        }
    }
#pragma unroll
    for (int i = 0; i < CONV_MAX_W; i++)
        if (i < W) part[((int64_t)blockIdx.y * C + ch) * W + i] = acc[i];
}

// ---- gate + chunk-local cumsum ---------------------------------------------------------------

__device__ __forceinline__ float softplus_f(float a) {
    return a > 20.0f ? a : log1pf(expf(a));
}

// One thread per (b, chunk, j, d): walks the chunk's tokens forward.
__global__ void gate_fwd_k(float *gcum, float *gout, const kda_bf16 *f, const float *A_log,
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
        float g = -A * softplus_f(bf2f(f[i]) + bias);
        acc += g;
        gcum[i] = acc;
        if (gout) gout[i] = g;
    }
}

// Reverse cumsum within the chunk, then the gate backward; tile partials for dt_bias and A_log:
// part_dt / part_A [B*NC, HV*K].
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
    for (int64_t t = t1 - 1; t >= t0; t--) {
        int64_t i = (b * T + t) * HK + jd;
        dg = from_cumsum ? dg + dgcum[i] : dgcum[i]; // dg_t = Σ_{s >= t in chunk} dgcum_s
        float a = bf2f(f[i]) + bias;
        float sp_grad = a > 20.0f ? 1.0f : sigmoid_f(a);
        float dfi = -dg * A * sp_grad; // dg/da = -A σ(a)
        df[i] = f2bf(dfi);
        sdt += dfi;
        sA += (double)dg * (-A * softplus_f(a)); // dg/dA_log = g
    }
    part_dt[bc * HK + jd] = sdt;
    part_A[bc * HK + jd] = sA;
}

// dA_log[j] += Σ_d Σ_p part_A[p, j*K + d] (d outer, p inner: a fixed order).
__global__ void gate_dA_finish_k(float *dA_log, const double *part_A, int64_t P, int64_t HV,
                                 int64_t K) {
    int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= HV) return;
    double s = 0.0;
    for (int64_t d = 0; d < K; d++)
        for (int64_t p = 0; p < P; p++)
            s += part_A[p * HV * K + j * K + d];
    dA_log[j] += (float)s;
}

// ---- beta
// ----------------------------------------------------------------------------------------

__global__ void beta_fwd_k(float *beta, const kda_bf16 *b, int64_t n, float s) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        beta[i] = s * sigmoid_f(bf2f(b[i]));
}

__global__ void beta_bwd_k(kda_bf16 *db, const float *dbeta, const kda_bf16 *b, int64_t n,
                           float s) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float sg = sigmoid_f(bf2f(b[i]));
        db[i] = f2bf(dbeta[i] * s * sg * (1.0f - sg));
    }
}

// ---- gated RMSNorm -----------------------------------------------------------------------------

__global__ void gnorm_fwd_k(kda_bf16 *y, float *rstd, const kda_bf16 *x, const kda_bf16 *z,
                            const float *w, int64_t N, int64_t V, float eps) {
    int64_t r = warp_row(N);
    if (r < 0) return;
    int lane = threadIdx.x & 31;
    float ss = 0.0f;
    for (int64_t v = lane; v < V; v += 32) {
        float xv = bf2f(x[r * V + v]);
        ss += xv * xv;
    }
    ss = warp_sum(ss);
    float rs = (float)(1.0 / sqrt((double)ss / (double)V + (double)eps));
    if (lane == 0) rstd[r] = rs;
    for (int64_t v = lane; v < V; v += 32)
        y[r * V + v] = f2bf(bf2f(x[r * V + v]) * rs * w[v] * sigmoid_f(bf2f(z[r * V + v])));
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

// ---- Linear bias -----------------------------------------------------------------------------

__global__ void bias_add_k(kda_bf16 *y, const float *bias, int64_t N, int64_t out) {
    int64_t n = N * out;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
         e += (int64_t)gridDim.x * blockDim.x)
        y[e] = f2bf(bf2f(y[e]) + bias[e % out]);
}

struct BiasDb { // dy
    const kda_bf16 *dy;
    int64_t out;
    __device__ float operator()(int64_t r, int64_t c) const {
        return bf2f(dy[r * out + c]);
    }
};

// ---- SwiGLU ----------------------------------------------------------------------------------

__global__ void swiglu_fwd_k(kda_bf16 *m, const kda_bf16 *a, const kda_bf16 *b, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        m[i] = f2bf(silu_f(bf2f(a[i])) * bf2f(b[i]));
}

__global__ void swiglu_bwd_k(kda_bf16 *da, kda_bf16 *db, const kda_bf16 *dm, const kda_bf16 *a,
                             const kda_bf16 *b, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float g = bf2f(dm[i]), av = bf2f(a[i]);
        da[i] = f2bf(g * bf2f(b[i]) * dsilu_f(av));
        db[i] = f2bf(g * silu_f(av));
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

// Same operation order as train/optim.c, with explicit roundings (no FMA contraction), so the
// update matches the CPU's bit for bit except for sqrtf/division, which are IEEE on both.
__global__ void adamw_k(float *p, kda_bf16 *pb, const float *g, float *m, float *v, int64_t n,
                        KdaCudaAdamScalars s, const float *gscale) {
    float gs = gscale ? *gscale : 1.0f;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float pi = __fsub_rn(p[i], __fmul_rn(s.decay, p[i]));
        float gi = gscale ? __fmul_rn(g[i], gs) : g[i];
        float mi = __fadd_rn(__fmul_rn(s.b1, m[i]), __fmul_rn(s.one_m_b1, gi));
        float vi = __fadd_rn(__fmul_rn(s.b2, v[i]), __fmul_rn(__fmul_rn(s.one_m_b2, gi), gi));
        float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), s.bc2_sqrt), s.eps);
        float pn = __fsub_rn(pi, __fdiv_rn(__fmul_rn(s.step_size, mi), denom));
        p[i] = pn;
        m[i] = mi;
        v[i] = vi;
        if (pb) pb[i] = f2bf(pn);
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

__global__ void sumsq_finish_k(double *norm, const double *part) {
    double s = 0.0;
    for (int i = threadIdx.x; i < NORM_BLOCKS; i += blockDim.x)
        s += part[i];
    s = block_sum_256(s);
    if (threadIdx.x == 0) *norm = sqrt(s);
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

} // namespace

// ==== launchers
// ====================================================================================

extern "C" {

int kda_cuda_rmsnorm_fwd(KdaCudaCtx *ctx, kda_bf16 *y, float *rstd, const float *x, const float *w,
                         int64_t N, int64_t D, float eps) {
    KDA_CUDA_REQUIRE(ctx, N >= 0 && D > 0);
    if (N == 0) return 0;
    rmsnorm_fwd_k<<<row_blocks(N), 256, 0, ctx->stream>>>(y, rstd, (float *)x, NULL, w, N, D, eps);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

int kda_cuda_rmsnorm_residual_fwd(KdaCudaCtx *ctx, kda_bf16 *y, float *rstd, float *residual,
                                  const kda_bf16 *a, const float *w, int64_t N, int64_t D,
                                  float eps) {
    KDA_CUDA_REQUIRE(ctx, N >= 0 && D > 0 && a);
    if (N == 0) return 0;
    rmsnorm_fwd_k<<<row_blocks(N), 256, 0, ctx->stream>>>(y, rstd, residual, a, w, N, D, eps);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

int kda_cuda_rmsnorm_bwd(KdaCudaCtx *ctx, float *dx, float *dw, const float *dy, const float *x,
                         const float *w, const float *rstd, int64_t N, int64_t D, int accumulate) {
    KDA_CUDA_REQUIRE(ctx, N >= 0 && D > 0);
    if (N == 0) return 0;
    rmsnorm_bwd_k<<<row_blocks(N), 256, 0, ctx->stream>>>(dx, dy, x, w, rstd, N, D, accumulate);
    CUDA_CHECK_LAUNCH(ctx);
    return colsum_add(ctx, dw, N, D, RmsDw{dy, x, rstd, D});
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

int kda_cuda_conv_silu_fwd(KdaCudaCtx *ctx, kda_bf16 *y, const kda_bf16 *p, const float *w,
                           int64_t B, int64_t T, int64_t C, int64_t W) {
    KDA_CUDA_REQUIRE(ctx, B >= 0 && T >= 0 && C > 0 && W >= 1 && W <= CONV_MAX_W);
    if (B * T == 0) return 0;
    conv_fwd_k<<<grid_for(B * T * C), 256, 0, ctx->stream>>>(y, p, w, B, T, C, W);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

int kda_cuda_conv_silu_bwd(KdaCudaCtx *ctx, kda_bf16 *dp, float *dw, const kda_bf16 *dy,
                           const kda_bf16 *p, const float *w, int64_t B, int64_t T, int64_t C,
                           int64_t W) {
    KDA_CUDA_REQUIRE(ctx, B >= 0 && T >= 0 && C > 0 && W >= 1 && W <= CONV_MAX_W);
    if (B * T == 0) return 0;
    conv_bwd_dp_k<<<grid_for(B * T * C), 256, 0, ctx->stream>>>(dp, dy, p, w, B, T, C, W);
    CUDA_CHECK_LAUNCH(ctx);
    int64_t P = CEIL_DIV(B * T, (int64_t)TILE_ROWS);
    KDA_CUDA_REQUIRE(ctx, P <= 65535);
    double *part = (double *)kda_cuda_scratch(ctx, (size_t)(P * C * W) * sizeof(double));
    if (!part) return -1;
    dim3 grid((unsigned)CEIL_DIV(C, (int64_t)128), (unsigned)P);
    conv_bwd_dw_partial_k<<<grid, 128, 0, ctx->stream>>>(part, dy, p, w, B, T, C, W);
    CUDA_CHECK_LAUNCH(ctx);
    colsum_finish_k<<<(unsigned)CEIL_DIV(C * W, (int64_t)256), 256, 0, ctx->stream>>>(dw, part, P,
                                                                                      C * W);
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
    colsum_finish_k<<<(unsigned)CEIL_DIV(HK, (int64_t)256), 256, 0, ctx->stream>>>(ddt_bias, part,
                                                                                   P, HK);
    CUDA_CHECK_LAUNCH(ctx);
    gate_dA_finish_k<<<(unsigned)CEIL_DIV(HV, (int64_t)64), 64, 0, ctx->stream>>>(
        dA_log, part + P * HK, P, HV, K);
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

int kda_cuda_swiglu_fwd(KdaCudaCtx *ctx, kda_bf16 *m, const kda_bf16 *a, const kda_bf16 *b,
                        int64_t n) {
    KDA_CUDA_REQUIRE(ctx, n >= 0);
    if (n == 0) return 0;
    swiglu_fwd_k<<<grid_for(n), 256, 0, ctx->stream>>>(m, a, b, n);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

int kda_cuda_swiglu_bwd(KdaCudaCtx *ctx, kda_bf16 *da, kda_bf16 *db, const kda_bf16 *dm,
                        const kda_bf16 *a, const kda_bf16 *b, int64_t n) {
    KDA_CUDA_REQUIRE(ctx, n >= 0);
    if (n == 0) return 0;
    swiglu_bwd_k<<<grid_for(n), 256, 0, ctx->stream>>>(da, db, dm, a, b, n);
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
    adamw_k<<<grid_for(n), 256, 0, ctx->stream>>>(p, p_bf16, g, m, v, n, *s, gscale);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

int kda_cuda_f32_to_bf16(KdaCudaCtx *ctx, kda_bf16 *dst, const float *src, int64_t n) {
    KDA_CUDA_REQUIRE(ctx, n >= 0);
    if (n == 0) return 0;
    f32_to_bf16_k<<<grid_for(n), 256, 0, ctx->stream>>>(dst, src, n);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

int kda_cuda_grad_norm(KdaCudaCtx *ctx, double *norm, const float *g, int64_t n) {
    KDA_CUDA_REQUIRE(ctx, n >= 0);
    double *part = (double *)kda_cuda_scratch(ctx, NORM_BLOCKS * sizeof(double));
    if (!part) return -1;
    sumsq_partial_k<<<NORM_BLOCKS, 256, 0, ctx->stream>>>(part, g, n);
    CUDA_CHECK_LAUNCH(ctx);
    sumsq_finish_k<<<1, 256, 0, ctx->stream>>>(norm, part);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
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

} // extern "C"
