// optim_cuda.cu - the optimizer step on the GPU (see optim_cuda.h): AdamW over fp32 master
// weights with the bf16 copy, fp32 -> bf16, the global gradient norm, clip coefficient and scale.
#include "cuda/optim_cuda.h"

#include "cuda/cuda_internal.h" // defines: f2bf, warp_sum, grid_for, KDA_CUDA_REQUIRE
#include "cuda/ops_common.cuh"  // defines: ld_f, st_f, st_bf, aligned_

namespace {

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
    kda_grid_wait();
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
    kda_grid_wait();
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

// The run table of adamw_runs_k in shared memory: ends [nr] int64, then decay [nr] bytes.
// run_of: the first run whose end is > i, from run r on (elements are visited in increasing
// order within a thread's group, so a group walks forward from its first element's run).
__device__ __forceinline__ int run_of(const int64_t *ends, int nr, int64_t i) {
    int lo = 0, hi = nr - 1; // ends[nr - 1] = n > i
    while (lo < hi) {
        int mid = (lo + hi) >> 1;
        if (ends[mid] > i)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

// Groups [4k, 4k+4) as 16-byte accesses where vec (the pointers allow it), else one element per
// k; each element with the scalars of its run (a group may straddle run ends).
template <bool VEC>
__global__ void adamw_runs_k(float *p, kda_bf16 *pb, const float *g, float *m, float *v, int64_t n,
                             const int64_t *ends_g, const unsigned char *decay_g, int nr,
                             KdaCudaAdamScalars sd, KdaCudaAdamScalars sn, const float *gscale) {
    kda_grid_wait();
    extern __shared__ int64_t ends[]; // [nr], then decay [nr] bytes
    unsigned char *decay = (unsigned char *)(ends + nr);
    for (int r = threadIdx.x; r < nr; r += blockDim.x)
        ends[r] = ends_g[r], decay[r] = decay_g[r];
    __syncthreads();
    float gs = gscale ? *gscale : 1.0f;
    constexpr int W = VEC ? 4 : 1;
    int64_t ng = VEC ? n / 4 : n;
    for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < ng;
         k += (int64_t)gridDim.x * blockDim.x) {
        float pv[W], gv[W], mv[W], vv[W];
        if (VEC) {
            ld_f<W>(pv, p + W * k), ld_f<W>(gv, g + W * k), ld_f<W>(mv, m + W * k);
            ld_f<W>(vv, v + W * k);
        } else {
            pv[0] = p[k], gv[0] = g[k], mv[0] = m[k], vv[0] = v[k];
        }
        int r = run_of(ends, nr, W * k);
#pragma unroll
        for (int e = 0; e < W; e++) {
            while (W * k + e >= ends[r])
                r++;
            adam_elem(pv[e], mv[e], vv[e], gv[e], decay[r] ? sd : sn, gs, gscale != NULL);
        }
        if (VEC) {
            st_f<W>(p + W * k, pv), st_f<W>(m + W * k, mv), st_f<W>(v + W * k, vv);
            if (pb) st_bf<W>(pb + W * k, pv);
        } else {
            p[k] = pv[0], m[k] = mv[0], v[k] = vv[0];
            if (pb) pb[k] = f2bf(pv[0]);
        }
    }
}

__global__ void f32_to_bf16_k(kda_bf16 *dst, const float *src, int64_t n) {
    kda_grid_wait();
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
    kda_grid_wait();
    double s = 0.0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        s += (double)g[i] * (double)g[i];
    s = block_sum_256(s);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

// take_sqrt 0: the sum of squares itself (ZeRO-1's per-shard partial, summed over the ranks).
__global__ void sumsq_finish_k(double *norm, const double *part, int take_sqrt) {
    kda_grid_wait();
    double s = 0.0;
    for (int i = threadIdx.x; i < NORM_BLOCKS; i += blockDim.x)
        s += part[i];
    s = block_sum_256(s);
    if (threadIdx.x == 0) *norm = take_sqrt ? sqrt(s) : s;
}

__global__ void clip_coef_k(float *coef, const double *norm, double max_norm) {
    kda_grid_wait();
    double nv = *norm, c = 1.0;
    if (isfinite(nv)) {
        double q = max_norm / (nv + 1e-6);
        if (q < 1.0) c = q;
    }
    *coef = (float)c;
}

__global__ void scale_k(float *g, int64_t n, const float *coef) {
    kda_grid_wait();
    float c = *coef;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        g[i] *= c;
}

} // namespace

extern "C" {

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
        CUDA_CHECK(ctx, kda_launch(ctx, adamw_v4_k, dim3(grid_for(nv)), dim3(256), 0, p, p_bf16, g,
                                   m, v, nv, *s, gscale));
    }
    if (4 * nv < n) {
        CUDA_CHECK(ctx, kda_launch(ctx, adamw_k, dim3(grid_for(n - 4 * nv)), dim3(256), 0, p,
                                   p_bf16, g, m, v, 4 * nv, n, *s, gscale));
    }
    return 0;
}

int kda_cuda_adamw_runs(KdaCudaCtx *ctx, float *p, kda_bf16 *p_bf16, const float *g, float *m,
                        float *v, int64_t n, const int64_t *ends, const unsigned char *decay,
                        int nruns, const KdaCudaAdamScalars *s_decay,
                        const KdaCudaAdamScalars *s_plain, const float *gscale) {
    KDA_CUDA_REQUIRE(ctx, n >= 0 && s_decay && s_plain && ends && decay && nruns >= 1 &&
                              nruns <= KDA_ADAMW_MAX_RUNS);
    if (n == 0) return 0;
    size_t smem = (size_t)nruns * (sizeof(int64_t) + 1);
    // the 16-byte path needs every group inside the buffers' alignment and n % 4 == 0 (a tail
    // would need a second launch; the model's layout is padded to a multiple of 4)
    bool vec = n % 4 == 0 && aligned_(16, p, g, m, v) && aligned_(8, p_bf16);
    CUDA_CHECK(ctx, kda_launch(ctx, vec ? adamw_runs_k<true> : adamw_runs_k<false>,
                               dim3(grid_for(vec ? n / 4 : n)), dim3(256), smem, p, p_bf16, g, m, v,
                               n, ends, decay, nruns, *s_decay, *s_plain, gscale));
    return 0;
}

int kda_cuda_f32_to_bf16(KdaCudaCtx *ctx, kda_bf16 *dst, const float *src, int64_t n) {
    KDA_CUDA_REQUIRE(ctx, n >= 0);
    if (n == 0) return 0;
    CUDA_CHECK(ctx, kda_launch(ctx, f32_to_bf16_k, dim3(grid_for(n)), dim3(256), 0, dst, src, n));
    return 0;
}

static int sumsq_(KdaCudaCtx *ctx, double *out, const float *g, int64_t n, int take_sqrt) {
    KDA_CUDA_REQUIRE(ctx, n >= 0);
    double *part = (double *)kda_cuda_scratch(ctx, NORM_BLOCKS * sizeof(double));
    if (!part) return -1;
    CUDA_CHECK(ctx, kda_launch(ctx, sumsq_partial_k, dim3(NORM_BLOCKS), dim3(256), 0, part, g, n));
    CUDA_CHECK(ctx, kda_launch(ctx, sumsq_finish_k, dim3(1), dim3(256), 0, out, part, take_sqrt));
    return 0;
}

int kda_cuda_grad_norm(KdaCudaCtx *ctx, double *norm, const float *g, int64_t n) {
    return sumsq_(ctx, norm, g, n, 1);
}

int kda_cuda_grad_sumsq(KdaCudaCtx *ctx, double *sumsq, const float *g, int64_t n) {
    return sumsq_(ctx, sumsq, g, n, 0);
}

int kda_cuda_clip_coef(KdaCudaCtx *ctx, float *coef, const double *norm, double max_norm) {
    CUDA_CHECK(ctx, kda_launch(ctx, clip_coef_k, dim3(1), dim3(1), 0, coef, norm, max_norm));
    return 0;
}

int kda_cuda_scale(KdaCudaCtx *ctx, float *g, int64_t n, const float *coef) {
    KDA_CUDA_REQUIRE(ctx, n >= 0);
    if (n == 0) return 0;
    CUDA_CHECK(ctx, kda_launch(ctx, scale_k, dim3(grid_for(n)), dim3(256), 0, g, n, coef));
    return 0;
}

} // extern "C"
