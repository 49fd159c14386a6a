// xent_cuda.cu - fused LM head + cross-entropy: the legacy form over vocabulary chunks and the
// fused classifier over token chunks (its row kernel also runs on the host); see xent_cuda.h.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <type_traits> // std::is_same

#include "cuda/cuda_internal.h" // defines: bf2f, f2bf, grid_for, CEIL_DIV, KDA_CUDA_REQUIRE
#include "cuda/gemm_cuda.h"     // defines: kda_cuda_gemm_fwd, kda_cuda_gemm_bwd_dx, _dw
#include "cuda/xent_cuda.h"

namespace {

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
    for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r < N;
         r += (int64_t)gridDim.x * blockDim.x) {
        float l = stat[r] + logf(stat[N + r]);
        lse[r] = l;
        nll[r] = tg[r] >= 0 ? l - stat[2 * N + r] : 0.0f;
    }
}

// One block of 256 threads: Σ nll in double, strided per thread, then a fixed-order tree.
__global__ void sum_k(double *out, const float *x, int64_t N) {
    __shared__ double sh[256];
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < N; i += 256)
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
    stat_init_k<<<grid_for(N), 256, 0, ctx->stream>>>(ws->stat, N);
    CUDA_CHECK_LAUNCH(ctx);
    // fp32 logits take twice the bytes of the bf16 workspace: half the columns per pass (a
    // multiple of 64, so every chunk of Wh stays as aligned as the workspace promises).
    float *lg = (float *)ws->logits;
    int64_t cw = ws->chunk / 2 / 64 * 64;
    if (cw < 1) cw = ws->chunk / 2 > 0 ? ws->chunk / 2 : 1;
    for (int64_t v0 = 0; v0 < n_vocab; v0 += cw) {
        int64_t w = n_vocab - v0 < cw ? n_vocab - v0 : cw;
        if (kda_cuda_gemm_fwd(ctx, lg, KDA_DT_F32, n, Wh + v0 * D, N, D, w, 0)) return -1;
        chunk_stat_k<<<(unsigned)CEIL_DIV(N * 32, (int64_t)256), 256, 0, ctx->stream>>>(
            lg, ws->stat, targets, N, w, v0);
        CUDA_CHECK_LAUNCH(ctx);
    }
    finish_k<<<grid_for(N), 256, 0, ctx->stream>>>(nll, lse, ws->stat, targets, N);
    CUDA_CHECK_LAUNCH(ctx);
    sum_k<<<1, 256, 0, ctx->stream>>>(loss_sum, nll, N);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

int kda_cuda_xent_bwd(KdaCudaCtx *ctx, float *dn, float *dWh, const kda_bf16 *n, const kda_bf16 *Wh,
                      const int32_t *targets, const float *lse, int64_t N, int64_t D,
                      int64_t n_vocab, float scale, const KdaCudaXentWs *ws) {
    KDA_CUDA_REQUIRE(ctx, N > 0 && D > 0 && n_vocab > 0 && ws && ws->chunk > 0);
    for (int64_t v0 = 0; v0 < n_vocab; v0 += ws->chunk) {
        int64_t w = n_vocab - v0 < ws->chunk ? n_vocab - v0 : ws->chunk;
        if (kda_cuda_gemm_fwd(ctx, ws->logits, KDA_DT_BF16, n, Wh + v0 * D, N, D, w, 0)) return -1;
        dlogits_k<<<grid_for(N * w), 256, 0, ctx->stream>>>(ws->logits, targets, lse, N, w, v0,
                                                            scale);
        CUDA_CHECK_LAUNCH(ctx);
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

int kda_cuda_cls_chunk_fwd(KdaCudaCtx *ctx, float *nll, float *lse, const kda_bf16 *n,
                           const kda_bf16 *Wh, const int32_t *targets, int64_t N, int64_t D,
                           int64_t n_vocab, float scale, int grad, int64_t r0,
                           const KdaCudaClsWs *ws) {
    KDA_CUDA_REQUIRE(ctx, N > 0 && D > 0 && n_vocab > 0 && ws && ws->rows > 0);
    KDA_CUDA_REQUIRE(ctx, ws->ld >= n_vocab && ws->ld % 64 == 0 && r0 >= 0 && r0 < N);
    int64_t nr = N - r0 < ws->rows ? N - r0 : ws->rows;
    // logitsᵀ [V, nr] (column-major, ld) = Whᵀ · xᵀ: row-major logits [nr, V] with stride ld
    if (kda_cuda_matmul(ctx, 1, 0, n_vocab, nr, D, 1.0f, Wh, D, n + r0 * D, D, 0.0f, ws->logits,
                        KDA_DT_BF16, ws->ld))
        return -1;
    cls_row_k<<<(unsigned)nr, CLS_THREADS, 0, ctx->stream>>>(
        ws->logits, nll + r0, lse + r0, targets + r0, n_vocab, ws->ld, scale, grad);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
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
    sum_k<<<1, 256, 0, ctx->stream>>>(loss_sum, nll, N);
    CUDA_CHECK_LAUNCH(ctx);
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
        cls_row_k<<<(unsigned)nr, CLS_THREADS, 0, ctx->stream>>>(
            logits, nll + r0, lse + r0, targets + r0, n_vocab, ld, 0.0f, 0);
        CUDA_CHECK_LAUNCH(ctx);
    }
    return kda_cuda_cls_loss_sum(ctx, loss_sum, nll, N);
}

} // extern "C"
