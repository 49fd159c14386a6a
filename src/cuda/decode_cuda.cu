// decode_cuda.cu - the one-token kernels of the GPU's recurrent decode and their host twins
// (contract in decode_cuda.h). Each kernel's per-thread body is a __host__ __device__ function;
// the twin runs those bodies for every thread one after another.
#include "cuda/decode_cuda.h"

#include "cuda/cuda_internal.h" // defines: bf2f, f2bf, silu_f, KDA_CUDA_REQUIRE, CEIL_DIV

#define CONV_MAX_W 8 // conv_size limit of the GPU model (kda_cuda_model_check_config)

// ---- conv step ---------------------------------------------------------------------------------

// Channel c of one token: SiLU(Σ taps) with the taps in conv_step_'s order (model.c: the tail
// oldest first, then the current input), then the tail shifts by one and takes p. tail [W-1].
__host__ __device__ __forceinline__ float conv_chan(float *tail, float p, const float *w,
                                                    int64_t W) {
    float acc = 0.0f;
    for (int64_t i = 0; i + 1 < W; i++)
        acc += w[i] * tail[i];
    acc += w[W - 1] * p;
    for (int64_t i = 0; i + 2 < W; i++)
        tail[i] = tail[i + 1];
    if (W > 1) tail[W - 2] = p;
    return silu_f(acc);
}

// (Σ y² + eps)^-1/2 over y [n], the sum in double in index order (kda_l2norm_fwd).
__host__ __device__ __forceinline__ float l2_rstd_serial(const float *y, int64_t n, float eps) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++)
        ss += (double)y[i] * y[i];
    return (float)(1.0 / sqrt(ss + eps));
}

// One block per group of `group` channels, one thread per channel; thread 0 sums the group's
// squares serially from shared memory (a decode step is latency-bound: the serial sum costs less
// than its launch and matches the CPU's order).
__global__ void conv_step_k(kda_bf16 *y, float *tail, const kda_bf16 *p, const float *w, int64_t W,
                            int64_t group, int l2, float eps) {
    extern __shared__ float ys[]; // [group + 1]: the SiLU outputs, then the rstd
    int64_t j = threadIdx.x, c = (int64_t)blockIdx.x * group + j;
    float *tc = tail ? tail + c * (W - 1) : NULL;
    float t0[CONV_MAX_W] = {0};
    float v = conv_chan(tc ? tc : t0, bf2f(p[c]), w + c * W, W);
    if (!l2) {
        y[c] = f2bf(v);
        return;
    }
    ys[j] = v;
    __syncthreads();
    if (j == 0) ys[group] = l2_rstd_serial(ys, group, eps);
    __syncthreads();
    y[c] = f2bf(v * ys[group]);
}

int kda_cuda_decode_conv(KdaCudaCtx *ctx, kda_bf16 *y, float *tail, const kda_bf16 *p,
                         const float *w, int64_t C, int64_t W, int64_t group, int l2, float eps) {
    KDA_CUDA_REQUIRE(ctx, group >= 1 && group <= 1024 && C % group == 0);
    KDA_CUDA_REQUIRE(ctx, W >= 1 && W <= CONV_MAX_W && (tail || W == 1));
    if (C == 0) return 0;
    size_t smem = l2 ? (size_t)(group + 1) * sizeof(float) : 0;
    conv_step_k<<<(unsigned)(C / group), (unsigned)group, smem, ctx->stream>>>(y, tail, p, w, W,
                                                                               group, l2, eps);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

void kda_cuda_decode_conv_host(kda_bf16 *y, float *tail, const kda_bf16 *p, const float *w,
                               int64_t C, int64_t W, int64_t group, int l2, float eps) {
    float *ys = (float *)kda_malloc((size_t)group * sizeof(float));
    for (int64_t c0 = 0; c0 < C; c0 += group) {
        for (int64_t j = 0; j < group; j++) {
            int64_t c = c0 + j;
            float t0[CONV_MAX_W] = {0};
            ys[j] = conv_chan(tail ? tail + c * (W - 1) : t0, bf2f(p[c]), w + c * W, W);
        }
        float r = l2 ? l2_rstd_serial(ys, group, eps) : 1.0f;
        for (int64_t j = 0; j < group; j++)
            y[c0 + j] = f2bf(l2 ? ys[j] * r : ys[j]);
    }
    free(ys);
}

// ---- delta rule step ---------------------------------------------------------------------------

// Column e of value head j's state Sj [K, V]: kda_recurrent_head_step's operations on that
// column, in its order (decay, prediction r, δ, update, output).
__host__ __device__ __forceinline__ float delta_col(float *Sj, int64_t e, int64_t K, int64_t V,
                                                    const kda_bf16 *q, const kda_bf16 *k, float ve,
                                                    const float *g, float beta, float scale) {
    float r = 0.0f;
    for (int64_t c = 0; c < K; c++) {
        float s = Sj[c * V + e] * expf(g[c]);
        Sj[c * V + e] = s;
        r += s * bf2f(k[c]);
    }
    float d = beta * (ve - r);
    float o = 0.0f;
    for (int64_t c = 0; c < K; c++) {
        float s = Sj[c * V + e] + bf2f(k[c]) * d;
        Sj[c * V + e] = s;
        o += s * (scale * bf2f(q[c]));
    }
    return o;
}

// One block per value head, one thread per value column (the columns are independent).
__global__ void delta_step_k(kda_bf16 *o, float *S, const kda_bf16 *q, const kda_bf16 *k,
                             const kda_bf16 *v, const float *g, const float *beta, int64_t group,
                             int64_t K, int64_t V, float scale) {
    int64_t j = blockIdx.x, e = threadIdx.x, h = j / group;
    float r = delta_col(S + j * K * V, e, K, V, q + h * K, k + h * K, bf2f(v[j * V + e]), g + j * K,
                        beta[j], scale);
    o[j * V + e] = f2bf(r);
}

int kda_cuda_decode_delta(KdaCudaCtx *ctx, kda_bf16 *o, float *S, const kda_bf16 *q,
                          const kda_bf16 *k, const kda_bf16 *v, const float *g, const float *beta,
                          int64_t H, int64_t HV, int64_t K, int64_t V, float scale) {
    KDA_CUDA_REQUIRE(ctx, H >= 1 && HV % H == 0 && K >= 1 && V >= 1 && V <= 1024);
    if (HV == 0) return 0;
    delta_step_k<<<(unsigned)HV, (unsigned)V, 0, ctx->stream>>>(o, S, q, k, v, g, beta, HV / H, K,
                                                                V, scale);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

void kda_cuda_decode_delta_host(kda_bf16 *o, float *S, const kda_bf16 *q, const kda_bf16 *k,
                                const kda_bf16 *v, const float *g, const float *beta, int64_t H,
                                int64_t HV, int64_t K, int64_t V, float scale) {
    int64_t group = HV / H;
    for (int64_t j = 0; j < HV; j++)
        for (int64_t e = 0; e < V; e++) {
            int64_t h = j / group;
            o[j * V + e] = f2bf(delta_col(S + j * K * V, e, K, V, q + h * K, k + h * K,
                                          bf2f(v[j * V + e]), g + j * K, beta[j], scale));
        }
}

// ---- the tail a prefill leaves -----------------------------------------------------------------

__host__ __device__ __forceinline__ float tail_at(const kda_bf16 *p, int64_t T, int64_t C,
                                                  int64_t W1, int64_t c, int64_t i) {
    int64_t tau = T - W1 + i;
    return tau >= 0 ? bf2f(p[tau * C + c]) : 0.0f;
}

__global__ void tail_k(float *tail, const kda_bf16 *p, int64_t T, int64_t C, int64_t W1) {
    int64_t x = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (x >= C * W1) return;
    tail[x] = tail_at(p, T, C, W1, x / W1, x % W1);
}

int kda_cuda_decode_tail(KdaCudaCtx *ctx, float *tail, const kda_bf16 *p, int64_t T, int64_t C,
                         int64_t W) {
    KDA_CUDA_REQUIRE(ctx, T >= 1 && C >= 0 && W >= 1);
    int64_t n = C * (W - 1);
    if (n == 0) return 0;
    tail_k<<<(unsigned)CEIL_DIV(n, (int64_t)256), 256, 0, ctx->stream>>>(tail, p, T, C, W - 1);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

void kda_cuda_decode_tail_host(float *tail, const kda_bf16 *p, int64_t T, int64_t C, int64_t W) {
    for (int64_t c = 0; c < C; c++)
        for (int64_t i = 0; i + 1 < W; i++)
            tail[c * (W - 1) + i] = tail_at(p, T, C, W - 1, c, i);
}
