// xent_cuda.cu - fused LM head + cross-entropy over vocabulary chunks; see xent_cuda.h.
#include <math.h>

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

} // extern "C"
