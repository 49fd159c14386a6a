// xent_cuda.cu - fused LM head + cross-entropy: the legacy form over vocabulary chunks and the
// fused classifier over token chunks (its row kernel also runs on the host); see xent_cuda.h.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <type_traits> // std::is_same

#include <cooperative_groups.h> // cluster_group: the cluster row kernel

#include "cuda/cuda_internal.h" // defines: bf2f, f2bf, grid_for, CEIL_DIV, KDA_CUDA_REQUIRE
#include "cuda/fast_math.cuh"   // defines: exp_x, kda_fast_exp_ (KDA_FAST_EXP)
#include "cuda/gemm_cuda.h"     // defines: kda_cuda_gemm_fwd, kda_cuda_gemm_bwd_dx, _dw
#include "cuda/xent_cuda.h"

namespace {

namespace cg = cooperative_groups;

// Online (max, sum of exp(x - max)) merge; -inf max means "empty". NaN propagates into the sum.
__device__ __forceinline__ void lse_merge(float &m, float &s, float m2, float s2) {
    if (m2 == -INFINITY) return;
    if (m == -INFINITY) {
        m = m2, s = s2;
        return;
    }
    float M = fmaxf(m, m2);
    s = s * expf(m - M) + s2 * expf(m2 - M);
    m = M;
}

__global__ void stat_init_k(float *stat, int64_t N) {
    kda_grid_wait();
    for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r < N;
         r += (int64_t)gridDim.x * blockDim.x) {
        stat[r] = -INFINITY;
        stat[N + r] = 0.0f;
        stat[2 * N + r] = 0.0f;
    }
}

__device__ __forceinline__ float ld_f32(const float *p) {
    return *p;
}

// One warp per row of the chunk logits lg [N, w] (fp32: the forward keeps the GEMM's fp32
// accumulator instead of rounding logits to bf16, kda-model.md §8 allows more fp32): merges the
// chunk's (max, sum) into the running statistics and picks the target's logit when it falls in
// [v0, v0 + w).
__global__ void chunk_stat_k(const float *lg, float *stat, const int32_t *tg, int64_t N, int64_t w,
                             int64_t v0) {
    kda_grid_wait();
    int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    if (r >= N) return;
    int lane = threadIdx.x & 31;
    const float *row = lg + r * w;
    float m = -INFINITY, s = 0.0f;
    for (int64_t j = lane; j < w; j += 32) {
        float x = ld_f32(row + j);
        if (x > m) {
            s = (m == -INFINITY ? 0.0f : s * expf(m - x)) + 1.0f;
            m = x;
        } else {
            s += expf(x - m); // also x NaN: s becomes NaN
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o);
        float s2 = __shfl_xor_sync(0xffffffffu, s, o);
        lse_merge(m, s, m2, s2);
    }
    if (lane == 0) {
        float M = stat[r], S = stat[N + r];
        lse_merge(M, S, m, s);
        stat[r] = M;
        stat[N + r] = S;
        int64_t t = tg[r];
        if (t >= v0 && t < v0 + w) stat[2 * N + r] = row[t - v0];
    }
}

__global__ void finish_k(float *nll, float *lse, const float *stat, const int32_t *tg, int64_t N) {
    kda_grid_wait();
    for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r < N;
         r += (int64_t)gridDim.x * blockDim.x) {
        float l = stat[r] + logf(stat[N + r]);
        lse[r] = l;
        nll[r] = tg[r] >= 0 ? l - stat[2 * N + r] : 0.0f;
    }
}

// One block of 256 threads: Σ nll in double, strided per thread (8 loads in flight, added in
// increasing i), then a fixed-order tree.
__global__ void sum_k(double *out, const float *x, int64_t N) {
    kda_grid_wait();
    __shared__ double sh[256];
    double s = 0.0;
    int64_t i = threadIdx.x;
    for (; i + 7 * 256 < N; i += 8 * 256) {
        float v[8];
#pragma unroll
        for (int u = 0; u < 8; u++)
            v[u] = x[i + u * 256];
#pragma unroll
        for (int u = 0; u < 8; u++)
            s += (double)v[u];
    }
    for (; i < N; i += 256)
        s += (double)x[i];
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int w = 128; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) *out = sh[0];
}

// In place: lg [N, w] logits -> dlogits = (softmax - onehot) · scale, 0 on ignored rows.
__global__ void dlogits_k(kda_bf16 *lg, const int32_t *tg, const float *lse, int64_t N, int64_t w,
                          int64_t v0, float scale) {
    kda_grid_wait();
    int64_t n = N * w;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / w, j = i - r * w;
        int64_t t = tg[r];
        float d = 0.0f;
        if (t >= 0) {
            float p = expf(bf2f(lg[i]) - lse[r]);
            d = (p - (t == v0 + j ? 1.0f : 0.0f)) * scale;
        }
        lg[i] = f2bf(d);
    }
}

// ---- fused classifier: the row kernel --------------------------------------------------------
// One block of CLS_THREADS threads per token row. The body is written as __host__ __device__
// pieces split at the barriers, so kda_cuda_cls_rows_host runs the same arithmetic (logical
// threads one after another, the same reduction tree). The logits' storage E is bf16 (training)
// or fp32 (the loss-only head of the fp32 scoring path, kda_cuda_cls_loss_f32).

#define CLS_THREADS 512 // a power of two (the tree)

// e^x for the dlogits (bf16 out): ex2.approx on the device (relative error ~2^-21).
__host__ __device__ inline float cls_fast_exp(float x) {
#ifdef __CUDA_ARCH__
    return __expf(x);
#else
    return expf(x);
#endif
}

// Elements 8g .. 8g+7 of a row (those < V) into x; returns how many.
__host__ __device__ inline int cls_load8(const kda_bf16 *row, int64_t g, int64_t V, float *x) {
    int64_t j0 = 8 * g;
    if (j0 + 8 <= V) {
        uint4 q;
#ifdef __CUDA_ARCH__
        q = *reinterpret_cast<const uint4 *>(row + j0); // 16-byte aligned: ld % 64 == 0
#else
        memcpy(&q, row + j0, sizeof q);
#endif
        unsigned w[4] = {q.x, q.y, q.z, q.w};
        for (int i = 0; i < 4; i++) {
            x[2 * i] = bf2f((kda_bf16)(w[i] & 0xffffu));
            x[2 * i + 1] = bf2f((kda_bf16)(w[i] >> 16));
        }
        return 8;
    }
    int n = (int)(V - j0);
    for (int i = 0; i < n; i++)
        x[i] = bf2f(row[j0 + i]);
    return n;
}

// The same for fp32 logits: two 16-byte loads (ld % 64 == 0 keeps every group 32-byte aligned).
__host__ __device__ inline int cls_load8(const float *row, int64_t g, int64_t V, float *x) {
    int64_t j0 = 8 * g;
    if (j0 + 8 <= V) {
#ifdef __CUDA_ARCH__
        float4 a = *reinterpret_cast<const float4 *>(row + j0);
        float4 b = *reinterpret_cast<const float4 *>(row + j0 + 4);
        x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w, x[4] = b.x, x[5] = b.y, x[6] = b.z;
        x[7] = b.w;
#else
        for (int i = 0; i < 8; i++)
            x[i] = row[j0 + i];
#endif
        return 8;
    }
    int n = (int)(V - j0);
    for (int i = 0; i < 8; i++) // the unused tail set too (it is never read)
        x[i] = i < n ? row[j0 + i] : -INFINITY;
    return n;
}
__host__ __device__ inline float cls_ld(kda_bf16 h) {
    return bf2f(h);
}
__host__ __device__ inline float cls_ld(float f) {
    return f;
}

__host__ __device__ inline void cls_store8(kda_bf16 *row, int64_t g, int n, const kda_bf16 *y) {
    int64_t j0 = 8 * g;
    if (n == 8) {
        uint4 q;
        q.x = (unsigned)y[0] | ((unsigned)y[1] << 16),
        q.y = (unsigned)y[2] | ((unsigned)y[3] << 16);
        q.z = (unsigned)y[4] | ((unsigned)y[5] << 16),
        q.w = (unsigned)y[6] | ((unsigned)y[7] << 16);
#ifdef __CUDA_ARCH__
        *reinterpret_cast<uint4 *>(row + j0) = q;
#else
        memcpy(row + j0, &q, sizeof q);
#endif
        return;
    }
    for (int i = 0; i < n; i++)
        row[j0 + i] = y[i];
}

// Phase 1: this thread's exact running max *m (of its elements; -inf if none) and the double sum
// *s of the fp32 terms e^(x - m), over groups g = tid, tid + nth, ... (One double add per
// element. The variant with fp32 sums of each 8-term group added in double, f29c617, measured
// slower on the H200: LM head+CE fwd 26.1 -> 31.9 ms at mb 16, docs/perf-log.md step 2b.)
template <class E>
__host__ __device__ inline void cls_partial(const E *row, int64_t V, int tid, int nth, float *m_out,
                                            double *s_out) {
    float m = -INFINITY;
    double s = 0.0;
    int64_t ng = (V + 7) / 8;
    for (int64_t g = tid; g < ng; g += nth) {
        float x[8] = {0}; // cls_load8 fills n >= 1 of them; zeroed for the host compiler's
                          // maybe-uninitialized analysis (g++ on the GPU machine, -Werror)
        int n = cls_load8(row, g, V, x);
        for (int i = 0; i < n; i++) {
            if (x[i] > m) { // a new max: rescale in double (rare: ~log(#elements) times)
                s = (m == -INFINITY ? 0.0 : s * exp((double)(m - x[i]))) + 1.0;
                m = x[i];
            } else {
                s += (double)expf(x[i] - m); // x NaN: s becomes NaN
            }
        }
    }
    *m_out = m;
    *s_out = s;
}

// One level of the fixed reduction trees (threads tid < w combine tid and tid + w).
__host__ __device__ inline void cls_max_step(float *sh, int tid, int w) {
    sh[tid] = fmaxf(sh[tid], sh[tid + w]);
}
__host__ __device__ inline void cls_sum_step(double *sh, int tid, int w) {
    sh[tid] += sh[tid + w];
}
// This thread's partial rescaled to the row max M (0 for a thread without elements).
__host__ __device__ inline double cls_rescale(float m, double s, float M) {
    return m == -INFINITY ? 0.0 : s * exp((double)(m - M));
}

// Row results from M and S: lse and nll (0 on ignored rows; t >= 0 is the target column).
template <class E>
__host__ __device__ inline void cls_finish(const E *row, float M, double S, int32_t t, float *nll,
                                           float *lse) {
    double l = (double)M + log(S);
    *lse = (float)l;
    *nll = t >= 0 ? (float)(l - (double)cls_ld(row[t])) : 0.0f;
}

// Phase 3: dlogits = (e^(x - lse) - [j == t]) · scale over this thread's groups, in place; zeros
// on an ignored row (t < 0).
__host__ __device__ inline void cls_grad(kda_bf16 *row, int64_t V, int tid, int nth, float lse,
                                         int32_t t, float scale) {
    int64_t ng = (V + 7) / 8;
    for (int64_t g = tid; g < ng; g += nth) {
        float x[8];
        kda_bf16 y[8];
        int n = cls_load8(row, g, V, x);
        for (int i = 0; i < n; i++) {
            int64_t j = 8 * g + i;
            float d = t >= 0 ? (cls_fast_exp(x[i] - lse) - (j == t ? 1.0f : 0.0f)) * scale : 0.0f;
            y[i] = f2bf(d);
        }
        cls_store8(row, g, n, y);
    }
}

// Block r: row r of lg [rows, ld]. Writes nll[r], lse[r]; grad != 0 (bf16 logits only): dlogits
// in place.
template <class E>
__global__ void __launch_bounds__(CLS_THREADS)
    cls_row_k(E *lg, float *nll, float *lse, const int32_t *tg, int64_t V, int64_t ld, float scale,
              int grad) {
    kda_grid_wait();
    __shared__ float shm[CLS_THREADS];
    __shared__ double shs[CLS_THREADS];
    int tid = (int)threadIdx.x;
    int64_t r = blockIdx.x;
    E *row = lg + r * ld;
    float m;
    double s;
    cls_partial(row, V, tid, CLS_THREADS, &m, &s);
    shm[tid] = m;
    __syncthreads();
    for (int w = CLS_THREADS / 2; w > 0; w >>= 1) {
        if (tid < w) cls_max_step(shm, tid, w);
        __syncthreads();
    }
    float M = shm[0];
    shs[tid] = cls_rescale(m, s, M);
    __syncthreads();
    for (int w = CLS_THREADS / 2; w > 0; w >>= 1) {
        if (tid < w) cls_sum_step(shs, tid, w);
        __syncthreads();
    }
    double S = shs[0];
    int32_t t = tg[r];
    float l;
    if (tid == 0) {
        float nl;
        cls_finish(row, M, S, t, &nl, &l);
        nll[r] = nl;
        lse[r] = l;
    }
    if constexpr (std::is_same<E, kda_bf16>::value) { // fp32 logits: the loss-only head
        if (!grad) return;
        l = (float)((double)M + log(S)); // every thread: the same value as cls_finish's
        __syncthreads();                 // the target's logit is read before anyone overwrites it
        cls_grad(row, V, tid, CLS_THREADS, l, t, scale);
    }
}

// The host emulation of cls_row_k (kda_cuda_cls_rows_host and its fp32 twin).
template <class E>
void cls_rows_host(E *logits, float *nll, float *lse, const int32_t *targets, int64_t rows,
                   int64_t n_vocab, int64_t ld, float scale, int grad, int nthreads) {
    int nth = nthreads;
    float *pm = (float *)kda_malloc((size_t)nth * sizeof(float));
    double *ps = (double *)kda_malloc((size_t)nth * sizeof(double));
    float *shm = (float *)kda_malloc((size_t)nth * sizeof(float));
    double *shs = (double *)kda_malloc((size_t)nth * sizeof(double));
    for (int64_t r = 0; r < rows; r++) {
        E *row = logits + r * ld;
        for (int tid = 0; tid < nth; tid++) {
            cls_partial(row, n_vocab, tid, nth, &pm[tid], &ps[tid]);
            shm[tid] = pm[tid];
        }
        for (int w = nth / 2; w > 0; w >>= 1)
            for (int tid = 0; tid < w; tid++)
                cls_max_step(shm, tid, w);
        float M = shm[0];
        for (int tid = 0; tid < nth; tid++)
            shs[tid] = cls_rescale(pm[tid], ps[tid], M);
        for (int w = nth / 2; w > 0; w >>= 1)
            for (int tid = 0; tid < w; tid++)
                cls_sum_step(shs, tid, w);
        double S = shs[0];
        float l;
        cls_finish(row, M, S, targets[r], &nll[r], &l);
        lse[r] = l;
        if constexpr (std::is_same<E, kda_bf16>::value)
            if (grad)
                for (int tid = 0; tid < nth; tid++)
                    cls_grad(row, n_vocab, tid, nth, (float)((double)M + log(S)), targets[r],
                             scale);
    }
    free(pm), free(ps), free(shm), free(shs);
}

// ---- fused classifier: the cluster row kernel (default; KDA_CLS_ROW=1 runs cls_row_k) ----------
// A row of V bf16 logits is split into CL slices of 16-byte groups (8 logits); a cluster of CL
// blocks (CLS2_THREADS threads each) takes one row, block `rank` its slice [rank·gpc, (rank+1)·gpc)
// of the ng = ceil(V/8) groups. Each block copies its slice into shared memory once (cp.async,
// all copies in flight at once), so HBM sees one read and one write of every logit (cls_row_k:
// two reads and a write, with one 16-byte load in flight per thread). Thread tid of a block
// owns the slice's groups tid, tid + nth, ... in every pass (the one that copied them, so
// each pass reads what the thread itself copied):
//   1. block max m_c: per thread a bf16x2 max over its groups, then lanes, warps (fixed order);
//   2. block sum s_c = Σ e^(x - m_c): each group's 8 terms (fp32 expf, each <= 1) added in a
//      fixed fp32 tree, each group sum added to the thread's double; lanes (xor tree) and warps
//      (in order) in double;
//   3. cluster: every block reads the CL pairs (m_r, s_r) through distributed shared memory in
//      rank order: M = max m_r, S = Σ s_r·e^(m_r - M) (double), so every block has the same M, S;
//   4. lse = M + log S, nll written by the block holding the target; dlogits in place from the
//      shared copy, as cls_grad (the same formula per element).
// Numerics: every term has one expf error (<= 2 ulps) and the tree 3 fp32 roundings relative to
// its group's sum (all terms positive); everything after is double: S is within ~5 fp32
// roundings (~3e-7 relative) of the exact Σ e^(x_j - M) for any vocabulary size and any
// distribution (cls_row_k: ~2 roundings, the terms added in double one by one).
#define CLS2_THREADS    256
#define CLS2_WARPS      (CLS2_THREADS / 32)
#define CLS2_MAX_GROUPS 4096 // 16-byte groups of a block's slice (64 KB of shared memory)
#define CLS2_STAGES     4    // cp.async groups per thread: the max starts on the first quarter

// Groups per block of a cluster of cl blocks.
__host__ __device__ inline int64_t cls2_gpc(int64_t V, int cl) {
    return ((V + 7) / 8 + cl - 1) / cl;
}

__host__ __device__ inline uint4 cls2_ld16(const void *p) {
#ifdef __CUDA_ARCH__
    return *reinterpret_cast<const uint4 *>(p);
#else
    uint4 q;
    memcpy(&q, p, sizeof q);
    return q;
#endif
}

// Elements >= n of a group set to `fill` (bf16 bits); n in 1..7 (the row's last group).
__host__ __device__ inline uint4 cls2_mask(uint4 q, int n, unsigned fill) {
    unsigned w[4] = {q.x, q.y, q.z, q.w};
    for (int i = 0; i < 8; i++) // constant indices: w stays in registers
        if (i >= n)
            w[i / 2] =
                i % 2 ? (w[i / 2] & 0xffffu) | (fill << 16) : (w[i / 2] & 0xffff0000u) | fill;
    return make_uint4(w[0], w[1], w[2], w[3]);
}

// Max of two bf16x2 words per half (max.bf16x2; a NaN half loses to a number, as fmaxf).
__host__ __device__ inline unsigned cls2_hmax2(unsigned a, unsigned b) {
#ifdef __CUDA_ARCH__
    __nv_bfloat162 r =
        __hmax2(*reinterpret_cast<__nv_bfloat162 *>(&a), *reinterpret_cast<__nv_bfloat162 *>(&b));
    return *reinterpret_cast<unsigned *>(&r);
#else
    float lo = fmaxf(bf2f((kda_bf16)(a & 0xffffu)), bf2f((kda_bf16)(b & 0xffffu)));
    float hi = fmaxf(bf2f((kda_bf16)(a >> 16)), bf2f((kda_bf16)(b >> 16)));
    return (unsigned)f2bf(lo) | ((unsigned)f2bf(hi) << 16); // exact: both are bf16 values
#endif
}

__host__ __device__ inline void cls2_unpack(uint4 q, float *x) {
    unsigned w[4] = {q.x, q.y, q.z, q.w};
    for (int i = 0; i < 4; i++) {
        x[2 * i] = bf2f((kda_bf16)(w[i] & 0xffffu));
        x[2 * i + 1] = bf2f((kda_bf16)(w[i] >> 16));
    }
}

// Valid elements of group g (global index in the row): 8, or V - 8g for the last one.
__host__ __device__ inline int cls2_valid(int64_t g, int64_t V) {
    return V - 8 * g >= 8 ? 8 : (int)(V - 8 * g);
}

// The trimmed variant (KDA_CLS_ROW_TRIM, TRIM = true below) computes the same bits with fewer
// instructions: 32-bit group indices (a slice holds at most CLS2_MAX_GROUPS groups, a row at most
// 8 slices), and the passes test no group for the row's end except the row's last, partial group
// (V % 8 != 0), peeled after the whole ones: it is the highest group of its slice, so its thread
// meets it last either way and every thread's order of groups is unchanged.
template <bool TRIM> struct Cls2Idx { typedef int64_t T; };
template <> struct Cls2Idx<true> { typedef int T; };

// One group's bf16x2 max folded into m2.
__host__ __device__ inline unsigned cls2_max8(uint4 q, unsigned m2) {
    return cls2_hmax2(m2, cls2_hmax2(cls2_hmax2(q.x, q.y), cls2_hmax2(q.z, q.w)));
}

// Phase 1 for the thread's groups k in [k0, k1) (slice-relative index tid + k·nth): the running
// bf16x2 max m2 (start 0xff80ff80 = -inf, -inf). sl: the slice's first group, gs0: its index.
// TRIM: the thread's groups k < kw are whole (no test); the others (at most its last) are tested.
template <bool TRIM = false>
__host__ __device__ inline unsigned
cls2_max_part(const kda_bf16 *sl, typename Cls2Idx<TRIM>::T gs0, typename Cls2Idx<TRIM>::T V,
              int tid, int nth, typename Cls2Idx<TRIM>::T k0, typename Cls2Idx<TRIM>::T k1,
              unsigned m2, typename Cls2Idx<TRIM>::T kw = 0) {
    typedef typename Cls2Idx<TRIM>::T I;
    I ke = TRIM ? (k1 < kw ? k1 : kw) : k0; // the whole groups' end (TRIM)
    for (I k = k0; k < ke; k++)
        m2 = cls2_max8(cls2_ld16(sl + 8 * (tid + k * nth)), m2);
    for (I k = ke > k0 ? ke : k0; k < k1; k++) {
        I j = tid + k * nth;
        uint4 q = cls2_ld16(sl + 8 * j);
        int n = cls2_valid(gs0 + j, V);
        if (n < 8) q = cls2_mask(q, n, 0xff80u);
        m2 = cls2_max8(q, m2);
    }
    return m2;
}
__host__ __device__ inline float cls2_max2_f(unsigned m2) {
    return fmaxf(bf2f((kda_bf16)(m2 & 0xffffu)), bf2f((kda_bf16)(m2 >> 16)));
}

// Phase 2: the thread's Σ e^(x - m) over its groups of the slice's ngs (m: the block max). A
// block max of -inf (every logit of the slice -inf or NaN; the max skips NaN) sums e^x
// instead: 0 for -inf, NaN for NaN, so a NaN logit always reaches the row's lse.
// TRIM: the slice's groups j < nw are whole (no test), the rest (at most the last) tested.
// FX (the trimmed kernel only; the default, KDA_FAST_EXP=0: off): each term by exp_fast_f
// (fast_math.cuh: one FMUL and one ex2.approx instead of expf's 8 instructions), the same terms in
// the same tree and order; e^(x - m) <= 1, and the terms that carry the sum (x - m > -20) are
// within 1.2e-6 relative of e^(x - m) (docs/perf-log.md, "Fast exponentials in SiLU and the CE sum
// pass").
template <bool FX = false>
__host__ __device__ inline float cls2_sum8(uint4 q, float m) { // one group's fp32 tree
    float x[8], e[8];
    cls2_unpack(q, x);
    for (int i = 0; i < 8; i++)
        e[i] = exp_x<FX>(x[i] - m);
    return ((e[0] + e[1]) + (e[2] + e[3])) + ((e[4] + e[5]) + (e[6] + e[7]));
}
template <bool TRIM = false, bool FX = false>
__host__ __device__ inline double
cls2_sum(const kda_bf16 *sl, typename Cls2Idx<TRIM>::T gs0, typename Cls2Idx<TRIM>::T ngs,
         typename Cls2Idx<TRIM>::T V, int tid, int nth, float m, typename Cls2Idx<TRIM>::T nw = 0) {
    typedef typename Cls2Idx<TRIM>::T I;
    double s = 0.0;
    if (m == -INFINITY) m = 0.0f;
    I j = tid;
    if (TRIM) {
#ifdef __CUDA_ARCH__
#pragma unroll 4
#endif
        for (; j < nw; j += nth)
            s += (double)cls2_sum8<FX>(cls2_ld16(sl + 8 * j), m);
    }
#ifdef __CUDA_ARCH__
#pragma unroll(TRIM ? 1 : 4)
#endif
    for (; j < ngs; j += nth) {
        uint4 q = cls2_ld16(sl + 8 * j);
        int n = cls2_valid(gs0 + j, V);
        if (n < 8) q = cls2_mask(q, n, 0xff80u); // past the row: -inf, e^(-inf - m) = 0
        s += (double)cls2_sum8<FX>(q, m);
    }
    return s;
}

// Phase 3: the cluster's M and S from the blocks' (m_r, s_r) in rank order; a block whose max is
// -inf (an empty slice, or every logit -inf or NaN) adds its s_r unscaled (0, or NaN). P: the
// pairs' source (Cls2Pairs).
template <class P>
__host__ __device__ inline void cls2_combine(const P &p, int cl, float *M, double *S) {
    float mx = -INFINITY;
    for (int r = 0; r < cl; r++)
        mx = fmaxf(mx, p.m(r));
    mx += 0.0f; // -0 -> +0: the max's sign of zero is not specified between -0 and +0
    double sum = 0.0;
    for (int r = 0; r < cl; r++) {
        float m = p.m(r);
        sum += m == -INFINITY || m == mx ? p.s(r) : p.s(r) * exp((double)m - (double)mx);
    }
    *M = mx;
    *S = sum;
}
// The pairs: on the device block r's shared (xm, xs) through distributed shared memory (m, s
// point at this block's own), on the host arrays indexed by rank.
struct Cls2Pairs {
    float *m_;
    double *s_;
    __host__ __device__ float m(int r) const {
#ifdef __CUDA_ARCH__
        return *cg::this_cluster().map_shared_rank(m_, r);
#else
        return m_[r];
#endif
    }
    __host__ __device__ double s(int r) const {
#ifdef __CUDA_ARCH__
        return *cg::this_cluster().map_shared_rank(s_, r);
#else
        return s_[r];
#endif
    }
};

// The first n (1..8) of a group's 8 values y into row elements 8g .. 8g+n-1 (16 bytes when n = 8).
__host__ __device__ inline void cls2_store8(kda_bf16 *row, int64_t g, int n, const kda_bf16 *y) {
    if (n == 8) {
        cls_store8(row, g, 8, y);
        return;
    }
    for (int i = 0; i < 8; i++) // constant indices: y stays in registers
        if (i < n) row[8 * g + i] = y[i];
}

// One group's 8 dlogits d in fp32 (cls_grad's formula): 0 on an ignored row (t < 0), else
// (e^(x - l) - [i == ti]) · scale, ti the target's element in the group (-1: not here).
__host__ __device__ inline void cls2_grad8(uint4 q, int ti, float l, int32_t t, float scale,
                                           float *d) {
    float x[8];
    cls2_unpack(q, x);
    if (t < 0) {
        for (int i = 0; i < 8; i++)
            d[i] = 0.0f;
    } else if (ti < 0) { // cls_grad's (e - 0) · scale: the same bits
        for (int i = 0; i < 8; i++)
            d[i] = cls_fast_exp(x[i] - l) * scale;
    } else {
        for (int i = 0; i < 8; i++)
            d[i] = (cls_fast_exp(x[i] - l) - (i == ti ? 1.0f : 0.0f)) * scale;
    }
}

// bf16 pair (lo, hi) of two floats, each rounded to nearest even: one cvt.rn.bf16x2.f32 (the
// same F2FP rounding per half as f2bf's cvt.rn.bf16.f32, without the shift and merge).
__host__ __device__ inline unsigned cls2_pack(float lo, float hi) {
#ifdef __CUDA_ARCH__
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<unsigned *>(&h);
#else
    return (unsigned)f2bf(lo) | ((unsigned)f2bf(hi) << 16);
#endif
}
__host__ __device__ inline void cls2_st16(void *p, uint4 q) {
#ifdef __CUDA_ARCH__
    *reinterpret_cast<uint4 *>(p) = q;
#else
    memcpy(p, &q, sizeof q);
#endif
}

// Phase 4: dlogits over the thread's groups (cls_grad's formula per element), read from the
// slice sl, written to out (the same groups of the row in global memory; on the host the same
// memory as sl: each group is read before its thread overwrites it). TRIM: groups j < nw whole
// (no test; bf16 pairs packed by cls2_pack), the rest (at most the last) tested as before.
template <bool TRIM = false>
__host__ __device__ inline void
cls2_grad(const kda_bf16 *sl, kda_bf16 *out, typename Cls2Idx<TRIM>::T gs0,
          typename Cls2Idx<TRIM>::T ngs, typename Cls2Idx<TRIM>::T V, int tid, int nth, float l,
          int32_t t, float scale, typename Cls2Idx<TRIM>::T nw = 0) {
    typedef typename Cls2Idx<TRIM>::T I;
    I gt = t >= 0 ? t / 8 - gs0 : -1; // the target's group in the slice (if here)
    I j = tid;
    if (TRIM) {
#ifdef __CUDA_ARCH__
#pragma unroll 2
#endif
        for (; j < nw; j += nth) {
            float d[8];
            cls2_grad8(cls2_ld16(sl + 8 * j), j == gt ? (int)(t - 8 * (gs0 + j)) : -1, l, t, scale,
                       d);
            cls2_st16(out + 8 * (gs0 + j),
                      make_uint4(cls2_pack(d[0], d[1]), cls2_pack(d[2], d[3]),
                                 cls2_pack(d[4], d[5]), cls2_pack(d[6], d[7])));
        }
    }
#ifdef __CUDA_ARCH__
#pragma unroll(TRIM ? 1 : 2)
#endif
    for (; j < ngs; j += nth) { // (cls2_grad8 here would merge the f2bf of its branches)
        float x[8];
        kda_bf16 y[8];
        cls2_unpack(cls2_ld16(sl + 8 * j), x);
        int n = cls2_valid(gs0 + j, V);
        if (t < 0) {
            for (int i = 0; i < 8; i++)
                y[i] = f2bf(0.0f);
        } else if (j != gt) { // cls_grad's (e - 0) · scale: the same bits
            for (int i = 0; i < 8; i++)
                y[i] = f2bf(cls_fast_exp(x[i] - l) * scale);
        } else {
            for (int i = 0; i < 8; i++)
                y[i] =
                    f2bf((cls_fast_exp(x[i] - l) - (8 * (gs0 + j) + i == t ? 1.0f : 0.0f)) * scale);
        }
        cls2_store8(out, gs0 + j, n, y);
    }
}

// The lane-level xor trees (offsets 16 .. 1) of a warp: every lane ends with the same bits (the
// operands of each step are swapped between partners, and + and fmaxf are commutative). The
// host twins run them on a warp's 32 values (lanes past the block's threads hold the identity).
__device__ inline float cls2_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ inline double cls2_warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
inline float cls2_warp_max_host(float *a) {
    float b[32];
    for (int o = 16; o > 0; o >>= 1) {
        for (int i = 0; i < 32; i++)
            b[i] = fmaxf(a[i], a[i ^ o]);
        memcpy(a, b, sizeof b);
    }
    return a[0];
}
inline double cls2_warp_sum_host(double *a) {
    double b[32];
    for (int o = 16; o > 0; o >>= 1) {
        for (int i = 0; i < 32; i++)
            b[i] = a[i] + a[i ^ o];
        memcpy(a, b, sizeof b);
    }
    return a[0];
}

// 16 bytes of row (global) into sl (shared) without a register round trip (cp.async.cg); lands
// after a commit and the matching cls2_wait.
__device__ inline void cls2_cp16(kda_bf16 *sl, const kda_bf16 *row) {
    unsigned d = (unsigned)__cvta_generic_to_shared(sl);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(row) : "memory");
}
__device__ inline void cls2_commit() {
    asm volatile("cp.async.commit_group;" ::: "memory");
}

__device__ inline void cls2_wait(int pending) { // this thread's copies but the last `pending`
    switch (pending) {
    case 3:
        asm volatile("cp.async.wait_group 3;" ::: "memory");
        break;
    case 2:
        asm volatile("cp.async.wait_group 2;" ::: "memory");
        break;
    case 1:
        asm volatile("cp.async.wait_group 1;" ::: "memory");
        break;
    default:
        asm volatile("cp.async.wait_group 0;" ::: "memory");
        break;
    }
}

// Block b of cluster r (b = rank): slice `rank` of row r of lg [rows, ld]. Writes nll[r], lse[r]
// (the block holding the target; block 0 on an ignored row); grad != 0: dlogits in place.
// TRIM (KDA_CLS_ROW_TRIM; false: KDA_CLS_ROW_CLUSTER): the same bits with fewer instructions:
// 32-bit indices and untested whole groups in the passes (above), the block's warp sums added by
// thread 0 only (the one that publishes them), and the cluster combine and log S computed by
// thread 0 only (the same function, cls2_combine, then the same double l = M + log S) and
// broadcast through shared memory, instead of by all CLS2_THREADS threads.
// FX (unless KDA_FAST_EXP=0; with TRIM only): the sum pass's terms by the fast exponential
// (cls2_sum8).
template <bool TRIM, bool FX = false>
__global__ void __launch_bounds__(CLS2_THREADS)
    cls2_row_k(kda_bf16 *lg, float *nll, float *lse, const int32_t *tg, int64_t V, int64_t ld,
               float scale, int grad) {
    kda_grid_wait();
    typedef typename Cls2Idx<TRIM>::T I;
    extern __shared__ uint4 cls2_smem[]; // the slice: gpc groups of 16 bytes
    __shared__ float wm[CLS2_WARPS], xm;
    __shared__ double wsum[CLS2_WARPS], xs, xl;
    cg::cluster_group cluster = cg::this_cluster();
    int cl = (int)cluster.num_blocks(), rank = (int)cluster.block_rank();
    int tid = (int)threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int64_t r = blockIdx.x / cl;
    kda_bf16 *row = lg + r * ld, *sl = reinterpret_cast<kda_bf16 *>(cls2_smem);
    I Vi = (I)V, ng = (I)((V + 7) / 8), gpc = (I)cls2_gpc(V, cl), gs0 = (I)rank * gpc;
    I ngs = ng - gs0 < gpc ? ng - gs0 : gpc;
    if (ngs < 0) ngs = 0;
    I nw = Vi / 8 - gs0; // TRIM: the slice's whole groups [0, nw), the thread's kw of them
    nw = nw < 0 ? 0 : nw < ngs ? nw : ngs;
    I kw = nw > tid ? (nw - 1 - tid) / CLS2_THREADS + 1 : 0;
    // every copy in flight at once, in CLS2_STAGES commit groups; the max runs on each group as
    // it lands (the thread reads only what it copied: no barrier)
    I K = ngs > tid ? (ngs - 1 - tid) / CLS2_THREADS + 1 : 0;
    I kq = (K + CLS2_STAGES - 1) / CLS2_STAGES;
    for (int s = 0; s < CLS2_STAGES; s++) {
        for (I k = s * kq; k < K && k < (s + 1) * kq; k++) {
            I j = tid + k * CLS2_THREADS;
            cls2_cp16(sl + 8 * j, row + 8 * (gs0 + j));
        }
        cls2_commit();
    }
    unsigned m2 = 0xff80ff80u;
    for (int s = 0; s < CLS2_STAGES; s++) {
        cls2_wait(CLS2_STAGES - 1 - s);
        I k0 = s * kq, k1 = (s + 1) * kq < K ? (s + 1) * kq : K;
        m2 = cls2_max_part<TRIM>(sl, gs0, Vi, tid, CLS2_THREADS, k0, k1 > k0 ? k1 : k0, m2, kw);
    }
    float m = cls2_warp_max(cls2_max2_f(m2));
    if (lane == 0) wm[warp] = m;
    __syncthreads();
    float mc = -INFINITY;
    for (int w = 0; w < CLS2_WARPS; w++)
        mc = fmaxf(mc, wm[w]);
    mc += 0.0f; // -0 -> +0, as the host
    double s = cls2_sum<TRIM, FX>(sl, gs0, ngs, Vi, tid, CLS2_THREADS, mc, nw);
    s = cls2_warp_sum(s);
    if (lane == 0) wsum[warp] = s;
    __syncthreads();
    if (!TRIM || tid == 0) {
        double sc = 0.0;
        for (int w = 0; w < CLS2_WARPS; w++)
            sc += wsum[w];
        if (tid == 0) xm = mc, xs = sc;
    }
    cluster.sync(); // every block's (xm, xs) written
    double l;
    if (TRIM) {
        if (tid == 0) {
            float M;
            double S;
            cls2_combine(Cls2Pairs{&xm, &xs}, cl, &M, &S);
            xl = (double)M + log(S); // not into xs: the other blocks may still be reading it
        }
        cluster.barrier_arrive(); // thread 0: after its reads of the other blocks' memory
        __syncthreads();          // xl written
        l = xl;
    } else {
        float M;
        double S;
        cls2_combine(Cls2Pairs{&xm, &xs}, cl, &M, &S);
        cluster.barrier_arrive(); // done with the other blocks' memory (they wait at the end)
        l = (double)M + log(S);
    }
    int32_t t = tg[r];
    bool own = t >= 0 ? (t / 8 >= gs0 && t / 8 < gs0 + ngs) : rank == 0;
    if (tid == 0 && own) {
        lse[r] = (float)l;
        nll[r] = t >= 0 ? (float)(l - (double)bf2f(sl[t - 8 * gs0])) : 0.0f;
    }
    if (grad) cls2_grad<TRIM>(sl, row, gs0, ngs, Vi, tid, CLS2_THREADS, (float)l, t, scale, nw);
    cluster.barrier_wait();
}

// The host emulation of cls2_row_k: blocks of a cluster and threads of a block one after another,
// the same per-thread passes, lane trees and orders; logits in place (each group is read by
// its thread before it writes it). TRIM: the trimmed kernel's twin (its whole-group split; its
// single-thread combine is this one, which runs once per row). FX: the fast sum pass's twin
// (fast_math.cuh's host form: the device's terms within ex2.approx's few ulps, not its bits).
template <bool TRIM, bool FX = false>
void cls2_rows_host(kda_bf16 *logits, float *nll, float *lse, const int32_t *targets, int64_t rows,
                    int64_t V, int64_t ld, float scale, int grad, int nth, int cl) {
    typedef typename Cls2Idx<TRIM>::T I;
    int nw = (nth + 31) / 32;
    float *wmx = (float *)kda_malloc((size_t)nw * sizeof(float));
    double *wsm = (double *)kda_malloc((size_t)nw * sizeof(double));
    float *pm = (float *)kda_malloc((size_t)cl * sizeof(float));
    double *ps = (double *)kda_malloc((size_t)cl * sizeof(double));
    int64_t ng = (V + 7) / 8, gpc = cls2_gpc(V, cl);
    for (int64_t r = 0; r < rows; r++) {
        kda_bf16 *row = logits + r * ld;
        for (int rank = 0; rank < cl; rank++) {
            I gs0 = (I)(rank * gpc), ngs = (I)(ng - gs0 < gpc ? ng - gs0 : gpc);
            if (ngs < 0) ngs = 0;
            I nwh = (I)(V / 8 - gs0); // the slice's whole groups (TRIM)
            nwh = nwh < 0 ? 0 : nwh < ngs ? nwh : ngs;
            const kda_bf16 *sl = row + 8 * gs0;
            for (int w = 0; w < nw; w++) {
                float a[32];
                for (int ln = 0; ln < 32; ln++) {
                    int tid = 32 * w + ln;
                    I K = tid < nth && ngs > tid ? (ngs - 1 - tid) / nth + 1 : 0;
                    I kw = tid < nth && nwh > tid ? (nwh - 1 - tid) / nth + 1 : 0;
                    a[ln] = cls2_max2_f(
                        cls2_max_part<TRIM>(sl, gs0, (I)V, tid, nth, 0, K, 0xff80ff80u, kw));
                }
                wmx[w] = cls2_warp_max_host(a);
            }
            float mc = -INFINITY;
            for (int w = 0; w < nw; w++)
                mc = fmaxf(mc, wmx[w]);
            mc += 0.0f;
            for (int w = 0; w < nw; w++) {
                double a[32];
                for (int ln = 0; ln < 32; ln++) {
                    int tid = 32 * w + ln;
                    a[ln] =
                        tid < nth ? cls2_sum<TRIM, FX>(sl, gs0, ngs, (I)V, tid, nth, mc, nwh) : 0.0;
                }
                wsm[w] = cls2_warp_sum_host(a);
            }
            double sc = 0.0;
            for (int w = 0; w < nw; w++)
                sc += wsm[w];
            pm[rank] = mc, ps[rank] = sc;
        }
        float M;
        double S;
        cls2_combine(Cls2Pairs{pm, ps}, cl, &M, &S);
        double l = (double)M + log(S);
        int32_t t = targets[r];
        lse[r] = (float)l;
        nll[r] = t >= 0 ? (float)(l - (double)bf2f(row[t])) : 0.0f;
        if (grad)
            for (int rank = 0; rank < cl; rank++) {
                I gs0 = (I)(rank * gpc), ngs = (I)(ng - gs0 < gpc ? ng - gs0 : gpc);
                I nwh = (I)(V / 8 - gs0);
                nwh = nwh < 0 ? 0 : nwh < ngs ? nwh : ngs;
                for (int tid = 0; tid < nth && ngs > 0; tid++)
                    cls2_grad<TRIM>(row + 8 * gs0, row, gs0, ngs, (I)V, tid, nth, (float)l, t,
                                    scale, nwh);
            }
    }
    free(wmx), free(wsm), free(pm), free(ps);
}

// ---- fused classifier: the pipelined cluster row kernel (KDA_CLS_ROW_PIPE) ---------------------
// cls2_row_k's arithmetic per row, but a persistent grid: cluster c of G (as many as fit at once)
// takes rows c, c + G, c + 2G, ..., and each block keeps nbuf slice buffers in shared memory,
// issuing the cp.async copies of row i + nbuf - 1 before it reduces and writes row i. In
// cls2_row_k a block's slice is loaded once and the block then computes (max, sum, cluster
// barrier, dlogits) with no loads of its own in flight, and only 3 such blocks fit an SM (64 KB
// each at 128,256): the SM's share of HBM idles while its blocks compute. Here the next rows'
// loads are in flight during every phase of the current one.
// Per row: the block barriers of cls2_row_k (block max, block sum) and ONE cluster barrier; the
// (m, s) pairs read through distributed shared memory sit in two slots by row parity, so a block
// may write row i + 1's pair while a slower peer still reads row i's (the writer of row i + 2's
// pair in the same slot has passed row i + 1's cluster barrier: every peer has finished reading
// row i's). A thread reuses a buffer only for its own groups (it copied and reads only those), so
// the buffer needs no barrier; the one element another thread reads (the target logit, by
// thread 0) is read before the cluster barrier, which every thread passes before it issues a copy
// into that buffer again. The results are the same function of (nth, cl) as cls2_row_k's: its
// host twin kda_cuda_cls_rows2_host(nth, cl) is this kernel's twin, bit for bit at nth = 256.
#define CLS3_MAX_BUF 3 // slice buffers per block (cls2_wait takes up to 3 pending groups)

// The cp.async copies of this thread's groups (k = 0 .. K-1: slice group tid + k·nth) of row
// `row` into the buffer sl; then one commit group (empty when row is NULL: the pipeline's tail).
template <int NTH>
__device__ inline void cls3_issue(kda_bf16 *sl, const kda_bf16 *row, int64_t gs0, int tid,
                                  int64_t K) {
    if (row)
        for (int64_t k = 0; k < K; k++) {
            int64_t j = tid + k * NTH;
            cls2_cp16(sl + 8 * j, row + 8 * (gs0 + j));
        }
    cls2_commit();
}

// Block `rank` of cluster c: slice `rank` of rows c, c + G, ... (G = gridDim.x / cl) of lg
// [rows, ld]; nbuf (1..3) buffers of cls2_gpc(V, cl) groups in dynamic shared memory. Writes
// nll, lse of those rows (the block holding the target; block 0 on an ignored row); grad != 0:
// dlogits in place.
template <int NTH>
__global__ void __launch_bounds__(NTH)
    cls3_row_k(kda_bf16 *lg, float *nll, float *lse, const int32_t *tg, int64_t rows, int64_t V,
               int64_t ld, float scale, int grad, int nbuf) {
    kda_grid_wait();
    constexpr int NW = NTH / 32;
    extern __shared__ uint4 cls3_smem[]; // nbuf slices of gpc groups of 16 bytes
    __shared__ float wm[NW], xm[2];
    __shared__ double wsum[NW], xs[2];
    cg::cluster_group cluster = cg::this_cluster();
    int cl = (int)cluster.num_blocks(), rank = (int)cluster.block_rank();
    int tid = (int)threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int64_t G = gridDim.x / cl, c = blockIdx.x / cl;
    int64_t n = rows > c ? (rows - 1 - c) / G + 1 : 0; // this cluster's rows
    int64_t ng = (V + 7) / 8, gpc = cls2_gpc(V, cl), gs0 = rank * gpc;
    int64_t ngs = ng - gs0 < gpc ? ng - gs0 : gpc;
    if (ngs < 0) ngs = 0;
    int64_t K = ngs > tid ? (ngs - 1 - tid) / NTH + 1 : 0; // this thread's groups of a row
    kda_bf16 *buf = reinterpret_cast<kda_bf16 *>(cls3_smem);
    for (int64_t i = 0; i < nbuf - 1; i++) // the prologue: rows 0 .. nbuf-2 in flight
        cls3_issue<NTH>(buf + 8 * gpc * (i % nbuf), i < n ? lg + (c + i * G) * ld : nullptr, gs0,
                        tid, K);
    for (int64_t i = 0; i < n; i++) {
        int64_t r = c + i * G, ia = i + nbuf - 1; // ia: the row whose copies start now
        int32_t t = tg[r];                        // its latency hidden behind the wait
        kda_bf16 *sl = buf + 8 * gpc * (i % nbuf), *row = lg + r * ld;
        // into the buffer of row i - 1, whose groups this thread has finished (its dlogits)
        cls3_issue<NTH>(buf + 8 * gpc * (ia % nbuf), ia < n ? lg + (c + ia * G) * ld : nullptr, gs0,
                        tid, K);
        cls2_wait(nbuf - 1); // every group but the newest nbuf - 1: row i's copies have landed
        float m =
            cls2_warp_max(cls2_max2_f(cls2_max_part(sl, gs0, V, tid, NTH, 0, K, 0xff80ff80u)));
        if (lane == 0) wm[warp] = m;
        __syncthreads();
        float mc = -INFINITY;
        for (int w = 0; w < NW; w++)
            mc = fmaxf(mc, wm[w]);
        mc += 0.0f; // -0 -> +0, as the host
        double s = cls2_warp_sum(cls2_sum(sl, gs0, ngs, V, tid, NTH, mc));
        if (lane == 0) wsum[warp] = s;
        __syncthreads();
        bool own = t >= 0 ? (t / 8 >= gs0 && t / 8 < gs0 + ngs) : rank == 0;
        float xt = 0.0f; // the target logit (thread 0 of the owning block)
        if (tid == 0) {
            double sc = 0.0;
            for (int w = 0; w < NW; w++)
                sc += wsum[w];
            xm[i & 1] = mc, xs[i & 1] = sc;
            if (own && t >= 0) xt = bf2f(sl[t - 8 * gs0]);
        }
        cluster.sync(); // every block's pair of row i written (release / acquire)
        float M;
        double S;
        cls2_combine(Cls2Pairs{&xm[i & 1], &xs[i & 1]}, cl, &M, &S);
        double l = (double)M + log(S);
        if (tid == 0 && own) {
            lse[r] = (float)l;
            nll[r] = t >= 0 ? (float)(l - (double)xt) : 0.0f;
        }
        if (grad) cls2_grad(sl, row, gs0, ngs, V, tid, NTH, (float)l, t, scale);
    }
    cluster.sync(); // no block exits while a peer may still read its pairs
}

// The launch of cls3_row_k<NTH> (arguments checked by the caller): clusters = 0 picks as many as
// fit on the device at once (cudaOccupancyMaxActiveClusters), at most one per row.
template <int NTH>
int cls3_launch(KdaCudaCtx *ctx, kda_bf16 *logits, float *nll, float *lse, const int32_t *targets,
                int64_t rows, int64_t n_vocab, int64_t ld, float scale, int grad, int cl, int nbuf,
                int clusters) {
    size_t smem = (size_t)nbuf * (size_t)cls2_gpc(n_vocab, cl) * 16;
    if (kda_cuda_smem_limit(ctx, (const void *)cls3_row_k<NTH>, smem)) return -1;
    cudaLaunchAttribute at[2]; // the cluster shape, then (ctx->pdl) programmatic serialization
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = (unsigned)cl;
    at[0].val.clusterDim.y = 1;
    at[0].val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.blockDim = dim3(NTH);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = ctx->stream;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    if (clusters == 0) { // the context keeps the last answer (KdaCudaCtx.occ)
        const void *fn = (const void *)cls3_row_k<NTH>;
        if (ctx->occ.fn == fn && ctx->occ.cl == cl && ctx->occ.smem == smem && ctx->occ.clusters) {
            clusters = ctx->occ.clusters;
        } else {
            cfg.gridDim = dim3((unsigned)cl); // the query reads the cluster shape, not the grid
            CUDA_CHECK(ctx, cudaOccupancyMaxActiveClusters(&clusters, fn, &cfg));
            KDA_CUDA_REQUIRE(ctx, clusters > 0); // 0: no SM fits a block
            ctx->occ.fn = fn, ctx->occ.cl = cl, ctx->occ.smem = smem;
            ctx->occ.clusters = clusters;
        }
    }
    if (clusters > rows) clusters = (int)rows;
    cfg.gridDim = dim3((unsigned)clusters * (unsigned)cl);
    cfg.numAttrs += kda_pdl_attr(ctx, &at[1]); // for the launch, not the occupancy query
    CUDA_CHECK(ctx, cudaLaunchKernelEx(&cfg, cls3_row_k<NTH>, logits, nll, lse, targets, rows,
                                       n_vocab, ld, scale, grad, nbuf));
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

} // namespace

extern "C" {

int64_t kda_cuda_xent_chunk(int64_t N, int64_t n_vocab, size_t budget_bytes) {
    int64_t cap = CEIL_DIV(n_vocab, (int64_t)128) * 128;
    int64_t c = N > 0 ? (int64_t)(budget_bytes / ((size_t)N * 2)) : cap;
    c = c / 128 * 128;
    if (c < 128) c = 128;
    if (c > cap) c = cap;
    return c;
}

size_t kda_cuda_xent_logits_bytes(int64_t N, int64_t chunk) {
    return (size_t)N * (size_t)chunk * sizeof(kda_bf16);
}

size_t kda_cuda_xent_stat_bytes(int64_t N) {
    return (size_t)3 * (size_t)N * sizeof(float);
}

int kda_cuda_xent_fwd(KdaCudaCtx *ctx, float *nll, float *lse, double *loss_sum, const kda_bf16 *n,
                      const kda_bf16 *Wh, const int32_t *targets, int64_t N, int64_t D,
                      int64_t n_vocab, const KdaCudaXentWs *ws) {
    KDA_CUDA_REQUIRE(ctx, N > 0 && D > 0 && n_vocab > 0 && ws && ws->chunk > 0);
    CUDA_CHECK(ctx, kda_launch(ctx, stat_init_k, dim3(grid_for(N)), dim3(256), 0, ws->stat, N));
    // fp32 logits take twice the bytes of the bf16 workspace: half the columns per pass (a
    // multiple of 64, so every chunk of Wh stays as aligned as the workspace promises).
    float *lg = (float *)ws->logits;
    int64_t cw = ws->chunk / 2 / 64 * 64;
    if (cw < 1) cw = ws->chunk / 2 > 0 ? ws->chunk / 2 : 1;
    for (int64_t v0 = 0; v0 < n_vocab; v0 += cw) {
        int64_t w = n_vocab - v0 < cw ? n_vocab - v0 : cw;
        if (kda_cuda_gemm_fwd(ctx, lg, KDA_DT_F32, n, Wh + v0 * D, N, D, w, 0)) return -1;
        CUDA_CHECK(ctx,
                   kda_launch(ctx, chunk_stat_k, dim3((unsigned)CEIL_DIV(N * 32, (int64_t)256)),
                              dim3(256), 0, (const float *)lg, ws->stat, targets, N, w, v0));
    }
    CUDA_CHECK(ctx, kda_launch(ctx, finish_k, dim3(grid_for(N)), dim3(256), 0, nll, lse,
                               (const float *)ws->stat, targets, N));
    CUDA_CHECK(ctx, kda_launch(ctx, sum_k, dim3(1), dim3(256), 0, loss_sum, (const float *)nll, N));
    return 0;
}

int kda_cuda_xent_bwd(KdaCudaCtx *ctx, float *dn, float *dWh, const kda_bf16 *n, const kda_bf16 *Wh,
                      const int32_t *targets, const float *lse, int64_t N, int64_t D,
                      int64_t n_vocab, float scale, const KdaCudaXentWs *ws) {
    KDA_CUDA_REQUIRE(ctx, N > 0 && D > 0 && n_vocab > 0 && ws && ws->chunk > 0);
    for (int64_t v0 = 0; v0 < n_vocab; v0 += ws->chunk) {
        int64_t w = n_vocab - v0 < ws->chunk ? n_vocab - v0 : ws->chunk;
        if (kda_cuda_gemm_fwd(ctx, ws->logits, KDA_DT_BF16, n, Wh + v0 * D, N, D, w, 0)) return -1;
        CUDA_CHECK(ctx, kda_launch(ctx, dlogits_k, dim3(grid_for(N * w)), dim3(256), 0, ws->logits,
                                   targets, lse, N, w, v0, scale));
        if (kda_cuda_gemm_bwd_dx(ctx, dn, KDA_DT_F32, ws->logits, Wh + v0 * D, N, D, w, v0 > 0))
            return -1;
        if (kda_cuda_gemm_bwd_dw(ctx, dWh + v0 * D, ws->logits, n, N, D, w)) return -1;
    }
    return 0;
}

// ---- fused classifier ---------------------------------------------------------------------------

int64_t kda_cuda_cls_ld(int64_t n_vocab) {
    return CEIL_DIV(n_vocab, (int64_t)64) * 64;
}

int64_t kda_cuda_cls_rows(int64_t N, int64_t n_vocab, size_t budget_bytes) {
    if (N <= 0) return 1;
    size_t row_bytes = (size_t)kda_cuda_cls_ld(n_vocab) * sizeof(kda_bf16);
    int64_t fit = (int64_t)(budget_bytes / row_bytes); // rows the budget holds
    if (fit >= N) return N;
    fit = fit / 128 * 128;
    if (fit < 128) fit = 128 < N ? 128 : N;
    int64_t chunks = CEIL_DIV(N, fit);
    int64_t rows = CEIL_DIV(CEIL_DIV(N, chunks), (int64_t)128) * 128; // even chunks, 128-aligned
    return rows < fit ? rows : fit;
}

size_t kda_cuda_cls_bytes(int64_t rows, int64_t n_vocab) {
    return (size_t)rows * (size_t)kda_cuda_cls_ld(n_vocab) * sizeof(kda_bf16);
}

int kda_cuda_cls_cluster(int64_t n_vocab) {
    for (int cl = 1; cl <= 8; cl *= 2)
        if (cls2_gpc(n_vocab, cl) <= CLS2_MAX_GROUPS) return cl;
    return 0;
}

int kda_cuda_cls_row_pipe(KdaCudaCtx *ctx, kda_bf16 *logits, float *nll, float *lse,
                          const int32_t *targets, int64_t rows, int64_t n_vocab, int64_t ld,
                          float scale, int grad, int cl, int nth, int nbuf, int clusters) {
    KDA_CUDA_REQUIRE(ctx, rows > 0 && n_vocab > 0 && ld >= n_vocab && ld % 64 == 0 && logits);
    if (cl == 0) cl = kda_cuda_cls_cluster(n_vocab);
    if (nth == 0) nth = 512;
    KDA_CUDA_REQUIRE(ctx, (cl == 1 || cl == 2 || cl == 4 || cl == 8) &&
                              cls2_gpc(n_vocab, cl) <= CLS2_MAX_GROUPS && rows <= 0x7fffffff &&
                              clusters >= 0 && clusters <= 0x7fffffff / cl &&
                              ((uintptr_t)logits & 15) == 0);
    KDA_CUDA_REQUIRE(ctx, nth == 256 || nth == 512 || nth == 1024);
    size_t slice = (size_t)cls2_gpc(n_vocab, cl) * 16, optin = ctx->info.smem_per_block_optin;
    if (nbuf == 0) // as many as fit one block's opt-in shared memory, at most CLS3_MAX_BUF
        for (nbuf = CLS3_MAX_BUF; nbuf > 1 && (size_t)nbuf * slice > optin;)
            nbuf--;
    KDA_CUDA_REQUIRE(ctx, nbuf >= 1 && nbuf <= CLS3_MAX_BUF && (size_t)nbuf * slice <= optin);
    switch (nth) {
    case 256:
        return cls3_launch<256>(ctx, logits, nll, lse, targets, rows, n_vocab, ld, scale, grad, cl,
                                nbuf, clusters);
    case 512:
        return cls3_launch<512>(ctx, logits, nll, lse, targets, rows, n_vocab, ld, scale, grad, cl,
                                nbuf, clusters);
    default:
        return cls3_launch<1024>(ctx, logits, nll, lse, targets, rows, n_vocab, ld, scale, grad, cl,
                                 nbuf, clusters);
    }
}

int kda_cuda_cls_row_kernel(KdaCudaCtx *ctx, kda_bf16 *logits, float *nll, float *lse,
                            const int32_t *targets, int64_t rows, int64_t n_vocab, int64_t ld,
                            float scale, int grad, int kernel, int cl) {
    KDA_CUDA_REQUIRE(ctx, rows > 0 && n_vocab > 0 && ld >= n_vocab && ld % 64 == 0 && logits);
    KDA_CUDA_REQUIRE(ctx, kernel == KDA_CLS_ROW_CLUSTER || kernel == KDA_CLS_ROW_BLOCK ||
                              kernel == KDA_CLS_ROW_PIPE || kernel == KDA_CLS_ROW_TRIM);
    if (kernel != KDA_CLS_ROW_BLOCK && cl == 0) cl = kda_cuda_cls_cluster(n_vocab);
    if (kernel == KDA_CLS_ROW_PIPE && cl != 0)
        return kda_cuda_cls_row_pipe(ctx, logits, nll, lse, targets, rows, n_vocab, ld, scale, grad,
                                     cl, 0, 0, 0);
    if (kernel == KDA_CLS_ROW_BLOCK || cl == 0) { // cl 0: a row too long for 8 slices
        KDA_CUDA_REQUIRE(ctx, rows <= 0x7fffffff);
        CUDA_CHECK(ctx,
                   kda_launch(ctx, cls_row_k<kda_bf16>, dim3((unsigned)rows), dim3(CLS_THREADS), 0,
                              logits, nll, lse, targets, n_vocab, ld, scale, grad));
        return 0;
    }
    KDA_CUDA_REQUIRE(ctx, (cl == 1 || cl == 2 || cl == 4 || cl == 8) &&
                              cls2_gpc(n_vocab, cl) <= CLS2_MAX_GROUPS && rows <= 0x7fffffff / cl &&
                              ((uintptr_t)logits & 15) == 0);
    size_t smem = (size_t)cls2_gpc(n_vocab, cl) * 16;
    // unless KDA_FAST_EXP=0: the trimmed kernel with the fast sum pass (the other kernels: precise)
    bool fx = kernel == KDA_CLS_ROW_TRIM && kda_fast_exp_();
    const void *fn = fx                           ? (const void *)cls2_row_k<true, true>
                     : kernel == KDA_CLS_ROW_TRIM ? (const void *)cls2_row_k<true>
                                                  : (const void *)cls2_row_k<false>;
    if (kda_cuda_smem_limit(ctx, fn, smem)) return -1;
    cudaLaunchAttribute at[2]; // the cluster shape, then (ctx->pdl) programmatic serialization
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = (unsigned)cl;
    at[0].val.clusterDim.y = 1;
    at[0].val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)(rows * cl));
    cfg.blockDim = dim3(CLS2_THREADS);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = ctx->stream;
    cfg.attrs = at;
    cfg.numAttrs = 1 + kda_pdl_attr(ctx, &at[1]);
    CUDA_CHECK(ctx, fx ? cudaLaunchKernelEx(&cfg, cls2_row_k<true, true>, logits, nll, lse, targets,
                                            n_vocab, ld, scale, grad)
                    : kernel == KDA_CLS_ROW_TRIM
                        ? cudaLaunchKernelEx(&cfg, cls2_row_k<true>, logits, nll, lse, targets,
                                             n_vocab, ld, scale, grad)
                        : cudaLaunchKernelEx(&cfg, cls2_row_k<false>, logits, nll, lse, targets,
                                             n_vocab, ld, scale, grad));
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

int kda_cuda_cls_chunk_logits(KdaCudaCtx *ctx, const kda_bf16 *n, const kda_bf16 *Wh, int64_t N,
                              int64_t D, int64_t n_vocab, int64_t r0, const KdaCudaClsWs *ws) {
    KDA_CUDA_REQUIRE(ctx, N > 0 && D > 0 && n_vocab > 0 && ws && ws->rows > 0);
    KDA_CUDA_REQUIRE(ctx, ws->ld >= n_vocab && ws->ld % 64 == 0 && r0 >= 0 && r0 < N);
    int64_t nr = N - r0 < ws->rows ? N - r0 : ws->rows;
    // logitsᵀ [V, nr] (column-major, ld) = Whᵀ · xᵀ: row-major logits [nr, V] with stride ld
    return kda_cuda_matmul(ctx, 1, 0, n_vocab, nr, D, 1.0f, Wh, D, n + r0 * D, D, 0.0f, ws->logits,
                           KDA_DT_BF16, ws->ld);
}

int kda_cuda_cls_chunk_rows(KdaCudaCtx *ctx, float *nll, float *lse, const int32_t *targets,
                            int64_t N, int64_t n_vocab, float scale, int grad, int64_t r0,
                            const KdaCudaClsWs *ws) {
    KDA_CUDA_REQUIRE(ctx, N > 0 && ws && ws->rows > 0 && r0 >= 0 && r0 < N);
    int64_t nr = N - r0 < ws->rows ? N - r0 : ws->rows;
    return kda_cuda_cls_row_kernel(ctx, ws->logits, nll + r0, lse + r0, targets + r0, nr, n_vocab,
                                   ws->ld, scale, grad, ws->row_kernel, 0);
}

int kda_cuda_cls_chunk_fwd(KdaCudaCtx *ctx, float *nll, float *lse, const kda_bf16 *n,
                           const kda_bf16 *Wh, const int32_t *targets, int64_t N, int64_t D,
                           int64_t n_vocab, float scale, int grad, int64_t r0,
                           const KdaCudaClsWs *ws) {
    return kda_cuda_cls_chunk_logits(ctx, n, Wh, N, D, n_vocab, r0, ws) ||
                   kda_cuda_cls_chunk_rows(ctx, nll, lse, targets, N, n_vocab, scale, grad, r0, ws)
               ? -1
               : 0;
}

int kda_cuda_cls_chunk_bwd(KdaCudaCtx *ctx, float *dn, float *dWh, const kda_bf16 *n,
                           const kda_bf16 *Wh, int64_t N, int64_t D, int64_t n_vocab, int64_t r0,
                           const KdaCudaClsWs *ws) {
    KDA_CUDA_REQUIRE(ctx, N > 0 && D > 0 && n_vocab > 0 && ws && ws->rows > 0 && r0 >= 0 && r0 < N);
    int64_t nr = N - r0 < ws->rows ? N - r0 : ws->rows;
    // dnᵀ [D, nr] = Wh_cm [D, V] · dlogitsᵀ [V, nr]
    if (kda_cuda_matmul(ctx, 0, 0, D, nr, n_vocab, 1.0f, Wh, D, ws->logits, ws->ld, 0.0f,
                        dn + r0 * D, KDA_DT_F32, D))
        return -1;
    // dWhᵀ [D, V] += x_cm [D, nr] · dlogits [nr, V]
    return kda_cuda_matmul(ctx, 0, 1, D, n_vocab, nr, 1.0f, n + r0 * D, D, ws->logits, ws->ld, 1.0f,
                           dWh, KDA_DT_F32, D);
}

int kda_cuda_cls_loss_sum(KdaCudaCtx *ctx, double *loss_sum, const float *nll, int64_t N) {
    KDA_CUDA_REQUIRE(ctx, N > 0);
    CUDA_CHECK(ctx, kda_launch(ctx, sum_k, dim3(1), dim3(256), 0, loss_sum, (const float *)nll, N));
    return 0;
}

int kda_cuda_cls_fused(KdaCudaCtx *ctx, float *nll, float *lse, double *loss_sum, float *dn,
                       float *dWh, const kda_bf16 *n, const kda_bf16 *Wh, const int32_t *targets,
                       int64_t N, int64_t D, int64_t n_vocab, float scale, const KdaCudaClsWs *ws) {
    KDA_CUDA_REQUIRE(ctx, ws && ws->rows > 0 && (!dn || dWh));
    for (int64_t r0 = 0; r0 < N; r0 += ws->rows)
        if (kda_cuda_cls_chunk_fwd(ctx, nll, lse, n, Wh, targets, N, D, n_vocab, scale, dn != NULL,
                                   r0, ws) ||
            (dn && kda_cuda_cls_chunk_bwd(ctx, dn, dWh, n, Wh, N, D, n_vocab, r0, ws)))
            return -1;
    return kda_cuda_cls_loss_sum(ctx, loss_sum, nll, N);
}

void kda_cuda_cls_rows_host(kda_bf16 *logits, float *nll, float *lse, const int32_t *targets,
                            int64_t rows, int64_t n_vocab, int64_t ld, float scale, int grad,
                            int nthreads) {
    cls_rows_host(logits, nll, lse, targets, rows, n_vocab, ld, scale, grad, nthreads);
}

void kda_cuda_cls_rows2_host(kda_bf16 *logits, float *nll, float *lse, const int32_t *targets,
                             int64_t rows, int64_t n_vocab, int64_t ld, float scale, int grad,
                             int nthreads, int cl) {
    cls2_rows_host<false>(logits, nll, lse, targets, rows, n_vocab, ld, scale, grad, nthreads, cl);
}

void kda_cuda_cls_rows_trim_host(kda_bf16 *logits, float *nll, float *lse, const int32_t *targets,
                                 int64_t rows, int64_t n_vocab, int64_t ld, float scale, int grad,
                                 int nthreads, int cl) {
    cls2_rows_host<true>(logits, nll, lse, targets, rows, n_vocab, ld, scale, grad, nthreads, cl);
}

void kda_cuda_cls_rows_trim_fx_host(kda_bf16 *logits, float *nll, float *lse,
                                    const int32_t *targets, int64_t rows, int64_t n_vocab,
                                    int64_t ld, float scale, int grad, int nthreads, int cl) {
    cls2_rows_host<true, true>(logits, nll, lse, targets, rows, n_vocab, ld, scale, grad, nthreads,
                               cl);
}

void kda_cuda_cls_rows_f32_host(const float *logits, float *nll, float *lse, const int32_t *targets,
                                int64_t rows, int64_t n_vocab, int64_t ld, int nthreads) {
    cls_rows_host((float *)logits, nll, lse, targets, rows, n_vocab, ld, 0.0f, 0, nthreads);
}

// ---- the fp32 loss-only head (scoring path) ----------------------------------------------------

size_t kda_cuda_cls_f32_bytes(int64_t rows, int64_t n_vocab) {
    return (size_t)rows * (size_t)kda_cuda_cls_ld(n_vocab) * sizeof(float);
}

int kda_cuda_cls_loss_f32(KdaCudaCtx *ctx, float *nll, float *lse, double *loss_sum, const float *n,
                          const float *Wh, const int32_t *targets, int64_t N, int64_t D,
                          int64_t n_vocab, float *logits, int64_t rows) {
    KDA_CUDA_REQUIRE(ctx, N > 0 && D > 0 && n_vocab > 0 && rows > 0 && logits);
    int64_t ld = kda_cuda_cls_ld(n_vocab);
    for (int64_t r0 = 0; r0 < N; r0 += rows) {
        int64_t nr = N - r0 < rows ? N - r0 : rows;
        // logitsᵀ [V, nr] (column-major, ld) = Whᵀ · xᵀ, fp32 operands and products
        if (kda_cuda_matmul_f32(ctx, 1, 0, n_vocab, nr, D, Wh, D, n + r0 * D, D, logits, ld))
            return -1;
        CUDA_CHECK(ctx, kda_launch(ctx, cls_row_k<float>, dim3((unsigned)nr), dim3(CLS_THREADS), 0,
                                   logits, nll + r0, lse + r0, targets + r0, n_vocab, ld, 0.0f, 0));
    }
    return kda_cuda_cls_loss_sum(ctx, loss_sum, nll, N);
}

} // extern "C"
