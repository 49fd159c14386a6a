// kda_cuda.cu - KDA core on the GPU, correctness-first: chunked forward (one block per
// (b, value head), chunks in sequence, everything in shared memory in fp32) and a per-token
// backward with chunk checkpoints (one thread per value column). See kda_cuda.h.
#include "cuda/cuda_internal.h" // defines: bf2f, f2bf, warp_sum, CEIL_DIV, KDA_CUDA_REQUIRE
#include "cuda/kda_cuda.h"      // defines: kda_cuda_chunk_fwd, kda_cuda_recurrent_bwd
#include "cuda/kda_fast.h"      // defines: kda_fast_supported, kda_fast_fwd, kda_fast_bwd

namespace {

#define FWD_THREADS 256
#define FWD_MAX_C   64

// Shared floats of the forward kernel: Q, K, G, W [C, K]; V [C, V]; S [K, V]; L, Aqk [C, C]; β [C].
size_t fwd_smem_floats(int64_t C, int64_t K, int64_t V) {
    return (size_t)(4 * C * K + C * V + K * V + 2 * C * C + C);
}

// One chunk of rows [t0, t0 + n) of (b, j) per iteration of the chunk loop (kda-model.md §6.1):
//   L[i,j]   = β_i Σ_d k_i k_j e^{G_i - G_j}          (j < i)
//   Aqk[i,j] = scale Σ_d q_i k_j e^{G_i - G_j}        (j <= i)
//   u = (I + L)^-1 (β ⊙ V),  w = (I + L)^-1 (β ⊙ K ⊙ e^G)   (forward substitution)
//   Δ = u - w S;  o = scale (Q ⊙ e^G) S + Aqk Δ;  S = e^{G_last} ⊙ S + (K ⊙ e^{G_last - G})ᵀ Δ
__global__ void __launch_bounds__(FWD_THREADS)
    chunk_fwd_k(kda_bf16 *o, float *final_state, const kda_bf16 *q, const kda_bf16 *k,
                const kda_bf16 *v, const float *gcum, const float *beta, const float *init_state,
                KdaDims d) {
    extern __shared__ float sm[];
    const int64_t C = d.chunk, K = d.K, V = d.V, T = d.T, H = d.H, HV = d.HV;
    float *Qs = sm, *Ks = Qs + C * K, *Gs = Ks + C * K, *Ws = Gs + C * K, *Vs = Ws + C * K;
    float *Ss = Vs + C * V, *Ls = Ss + K * V, *Aq = Ls + C * C, *bs = Aq + C * C;
    const int tid = threadIdx.x, nt = blockDim.x;
    const int64_t bj = blockIdx.x, b = bj / HV, j = bj % HV, h = j / (HV / H);
    const float scale = d.scale;

    for (int64_t e = tid; e < K * V; e += nt)
        Ss[e] = init_state ? init_state[bj * K * V + e] : 0.0f;
    for (int64_t t0 = 0; t0 < T; t0 += C) {
        const int64_t n = min(C, T - t0);
        __syncthreads(); // the previous chunk is done with shared memory
        for (int64_t e = tid; e < C * K; e += nt) {
            int64_t i = e / K, c = e % K, t = t0 + i;
            bool in = i < n;
            Qs[e] = in ? bf2f(q[((b * T + t) * H + h) * K + c]) : 0.0f;
            Ks[e] = in ? bf2f(k[((b * T + t) * H + h) * K + c]) : 0.0f;
            Gs[e] = in ? gcum[((b * T + t) * HV + j) * K + c] : 0.0f;
        }
        for (int64_t e = tid; e < C * V; e += nt) {
            int64_t i = e / V, c = e % V;
            Vs[e] = i < n ? bf2f(v[((b * T + t0 + i) * HV + j) * V + c]) : 0.0f;
        }
        for (int64_t i = tid; i < C; i += nt)
            bs[i] = i < n ? beta[(b * T + t0 + i) * HV + j] : 0.f;
        __syncthreads();
        // L, Aqk: exponents G_i - G_j <= 0 only (rows past n are never paired)
        for (int64_t e = tid; e < C * C; e += nt) {
            int64_t i = e / C, jj = e % C;
            float l = 0.0f, a = 0.0f;
            if (i < n && jj <= i) {
                for (int64_t c = 0; c < K; c++) {
                    float kd = Ks[jj * K + c] * expf(Gs[i * K + c] - Gs[jj * K + c]);
                    l += Ks[i * K + c] * kd;
                    a += Qs[i * K + c] * kd;
                }
            }
            Ls[e] = jj < i ? bs[i] * l : 0.0f;
            Aq[e] = scale * a;
        }
        // right-hand sides: β ⊙ V and β ⊙ K ⊙ e^G (rows past n are zero: β = 0)
        for (int64_t e = tid; e < C * V; e += nt)
            Vs[e] *= bs[e / V];
        for (int64_t e = tid; e < C * K; e += nt)
            Ws[e] = bs[e / K] * Ks[e] * expf(Gs[e]);
        __syncthreads();
        // (I + L) X = RHS by forward substitution, one thread per column of [u | w]; meanwhile
        // Q becomes scale · Q ⊙ e^G (Q is not read again in its raw form)
        for (int64_t col = tid; col < V + K; col += nt) {
            float *X = col < V ? Vs + col : Ws + (col - V);
            int64_t ld = col < V ? V : K;
            for (int64_t i = 1; i < n; i++) {
                // four independent partial sums: the chain of dependent FMAs is the cost here
                float s0 = X[i * ld], s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
                int64_t jj = 0;
                for (; jj + 4 <= i; jj += 4) {
                    s0 -= Ls[i * C + jj] * X[jj * ld];
                    s1 -= Ls[i * C + jj + 1] * X[(jj + 1) * ld];
                    s2 -= Ls[i * C + jj + 2] * X[(jj + 2) * ld];
                    s3 -= Ls[i * C + jj + 3] * X[(jj + 3) * ld];
                }
                for (; jj < i; jj++)
                    s0 -= Ls[i * C + jj] * X[jj * ld];
                X[i * ld] = (s0 + s1) + (s2 + s3);
            }
        }
        for (int64_t e = tid; e < n * K; e += nt)
            Qs[e] = scale * Qs[e] * expf(Gs[e]);
        __syncthreads();
        // Δ = u - w S (in place over u); K ⊙ e^{G_last - G} for the state update
        for (int64_t e = tid; e < n * V; e += nt) {
            int64_t i = e / V, c = e % V;
            float s = Vs[e];
            for (int64_t x = 0; x < K; x++)
                s -= Ws[i * K + x] * Ss[x * V + c];
            Vs[e] = s;
        }
        for (int64_t e = tid; e < n * K; e += nt)
            Ks[e] *= expf(Gs[(n - 1) * K + e % K] - Gs[e]);
        __syncthreads();
        // o = (scale Q ⊙ e^G) S + Aqk Δ
        for (int64_t e = tid; e < n * V; e += nt) {
            int64_t i = e / V, c = e % V;
            float s = 0.0f;
            for (int64_t x = 0; x < K; x++)
                s += Qs[i * K + x] * Ss[x * V + c];
            for (int64_t jj = 0; jj <= i; jj++)
                s += Aq[i * C + jj] * Vs[jj * V + c];
            o[((b * T + t0 + i) * HV + j) * V + c] = f2bf(s);
        }
        __syncthreads();
        // S = e^{G_last} ⊙ S + (K ⊙ e^{G_last - G})ᵀ Δ
        for (int64_t e = tid; e < K * V; e += nt) {
            int64_t x = e / V, c = e % V;
            float s = expf(Gs[(n - 1) * K + x]) * Ss[e];
            for (int64_t i = 0; i < n; i++)
                s += Ks[i * K + x] * Vs[i * V + c];
            Ss[e] = s;
        }
    }
    __syncthreads();
    if (final_state)
        for (int64_t e = tid; e < K * V; e += nt)
            final_state[bj * K * V + e] = Ss[e];
}

// ---- backward: per-token recurrence, thread v owns column v of S and dS -----------------------

// Token inputs shared by the block's threads: k_t, q_t, α_t = e^{g_t}.
template <int K>
__device__ __forceinline__ void load_token(float *kt, float *qt, float *at, const kda_bf16 *q,
                                           const kda_bf16 *k, const float *g, int64_t qk_off,
                                           int64_t g_off) {
    for (int c = threadIdx.x; c < K; c += blockDim.x) {
        kt[c] = bf2f(k[qk_off + c]);
        qt[c] = bf2f(q[qk_off + c]);
        at[c] = expf(g[g_off + c]);
    }
}

// S ← S̃ + k δᵀ with S̃ = α ⊙ S, δ = β (v - S̃ᵀ k), for this thread's column.
template <int K>
__device__ __forceinline__ void step_column(float (&S)[K], const float *kt, const float *at,
                                            float beta, float vv) {
    float r = 0.0f;
#pragma unroll
    for (int c = 0; c < K; c++)
        r += at[c] * S[c] * kt[c];
    float delta = beta * (vv - r);
#pragma unroll
    for (int c = 0; c < K; c++)
        S[c] = at[c] * S[c] + kt[c] * delta;
}

template <int K>
__global__ void __launch_bounds__(256)
    recurrent_bwd_k(float *dq, float *dk, kda_bf16 *dv, float *dg, float *dbeta, float *dS0,
                    const kda_bf16 *d_o, const float *dST, const kda_bf16 *q, const kda_bf16 *k,
                    const kda_bf16 *v, const float *g, const float *beta, const float *S0,
                    KdaDims d, float *ckpt, float *tok) {
    __shared__ float kt[K], qt[K], at[K];
    __shared__ float red[8][3 * K + 1];
    const int64_t T = d.T, HV = d.HV, V = d.V, C = d.chunk, NC = CEIL_DIV(T, C);
    const int64_t bj = blockIdx.x, b = bj / HV, j = bj % HV; // HV == H
    const int vv = threadIdx.x, lane = vv & 31, warp = vv >> 5, nwarps = blockDim.x >> 5;
    const bool act = vv < V;
    const float scale = d.scale;
    float *ck = ckpt + bj * NC * K * V, *tk = tok + bj * C * K * V;
    float S[K], G[K];
#pragma unroll
    for (int c = 0; c < K; c++)
        S[c] = act && S0 ? S0[(bj * K + c) * V + vv] : 0.0f;

    // Phase A: forward replay, storing the start state of every chunk.
    for (int64_t n = 0; n < NC; n++) {
        if (act)
#pragma unroll
            for (int c = 0; c < K; c++)
                ck[(n * K + c) * V + vv] = S[c];
        for (int64_t t = n * C; t < min((n + 1) * C, T); t++) {
            __syncthreads();
            load_token<K>(kt, qt, at, q, k, g, ((b * T + t) * HV + j) * K,
                          ((b * T + t) * HV + j) * K);
            __syncthreads();
            float bt = beta[(b * T + t) * HV + j];
            float vt = act ? bf2f(v[((b * T + t) * HV + j) * V + vv]) : 0.0f;
            step_column<K>(S, kt, at, bt, vt);
        }
    }

    // Phase B: reverse over chunks; G = gradient w.r.t. the current state S_t.
#pragma unroll
    for (int c = 0; c < K; c++)
        G[c] = act && dST ? dST[(bj * K + c) * V + vv] : 0.0f;
    for (int64_t n = NC - 1; n >= 0; n--) {
        const int64_t t0 = n * C, nrows = min(C, T - t0);
#pragma unroll
        for (int c = 0; c < K; c++)
            S[c] = act ? ck[(n * K + c) * V + vv] : 0.0f;
        for (int64_t i = 0; i < nrows; i++) { // replay, keeping S_{t-1} of every token
            int64_t t = t0 + i;
            if (act)
#pragma unroll
                for (int c = 0; c < K; c++)
                    tk[(i * K + c) * V + vv] = S[c];
            __syncthreads();
            load_token<K>(kt, qt, at, q, k, g, ((b * T + t) * HV + j) * K,
                          ((b * T + t) * HV + j) * K);
            __syncthreads();
            float bt = beta[(b * T + t) * HV + j];
            float vt = act ? bf2f(v[((b * T + t) * HV + j) * V + vv]) : 0.0f;
            step_column<K>(S, kt, at, bt, vt);
        }
        for (int64_t i = nrows - 1; i >= 0; i--) { // kda-model.md §6.4, token t
            int64_t t = t0 + i, row = (b * T + t) * HV + j;
            __syncthreads();
            load_token<K>(kt, qt, at, q, k, g, row * K, row * K);
            __syncthreads();
            float Sp[K]; // S_{t-1}
#pragma unroll
            for (int c = 0; c < K; c++)
                Sp[c] = act ? tk[(i * K + c) * V + vv] : 0.0f;
            float bt = beta[row], vt = act ? bf2f(v[row * V + vv]) : 0.0f;
            float dot = act ? bf2f(d_o[row * V + vv]) : 0.0f;
            float r = 0.0f;
#pragma unroll
            for (int c = 0; c < K; c++)
                r += at[c] * Sp[c] * kt[c];
            float delta = bt * (vt - r), ddelta = 0.0f;
#pragma unroll
            for (int c = 0; c < K; c++) {
                G[c] += scale * qt[c] * dot; // o_t = S_tᵀ (scale q_t)
                ddelta += G[c] * kt[c];      // S_t = S̃_t + k_t δ_tᵀ
            }
            float dr = -bt * ddelta;
            float pb = warp_sum(ddelta * (vt - r));
            if (act) dv[row * V + vv] = f2bf(bt * ddelta);
#pragma unroll
            for (int c = 0; c < K; c++) {
                float Stil = at[c] * Sp[c], St = Stil + kt[c] * delta;
                float dStil = G[c] + kt[c] * dr; // r_t = S̃_tᵀ k_t
                float pq = warp_sum(St * dot);
                float pk = warp_sum(G[c] * delta + Stil * dr);
                float pg = warp_sum(dStil * Stil); // α_t = e^{g_t}
                G[c] = at[c] * dStil;
                if (lane == 0) {
                    red[warp][c] = pq;
                    red[warp][K + c] = pk;
                    red[warp][2 * K + c] = pg;
                }
            }
            if (lane == 0) red[warp][3 * K] = pb;
            __syncthreads();
            for (int x = vv; x < 3 * K + 1; x += blockDim.x) {
                float s = 0.0f;
                for (int w = 0; w < nwarps; w++)
                    s += red[w][x];
                if (x < K)
                    dq[row * K + x] = scale * s;
                else if (x < 2 * K)
                    dk[row * K + x - K] = s;
                else if (x < 3 * K)
                    dg[row * K + x - 2 * K] = s;
                else
                    dbeta[row] = s;
            }
        }
    }
    if (dS0 && act)
#pragma unroll
        for (int c = 0; c < K; c++)
            dS0[(bj * K + c) * V + vv] = G[c];
}

template <int K>
int launch_bwd(KdaCudaCtx *ctx, float *dq, float *dk, kda_bf16 *dv, float *dg, float *dbeta,
               float *dS0, const kda_bf16 *d_o, const float *dST, const kda_bf16 *q,
               const kda_bf16 *k, const kda_bf16 *v, const float *g, const float *beta,
               const float *S0, const KdaDims *d) {
    int64_t BH = d->B * d->HV, NC = CEIL_DIV(d->T, d->chunk);
    size_t floats = (size_t)(BH * (NC + d->chunk) * K * d->V);
    float *ws = (float *)kda_cuda_scratch(ctx, floats * sizeof(float));
    if (!ws) return -1;
    unsigned threads = (unsigned)CEIL_DIV(d->V, (int64_t)32) * 32;
    recurrent_bwd_k<K><<<(unsigned)BH, threads, 0, ctx->stream>>>(
        dq, dk, dv, dg, dbeta, dS0, d_o, dST, q, k, v, g, beta, S0, *d, ws,
        ws + (size_t)(BH * NC * K * d->V));
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

// ---- chunked backward: a port of cpu/kda_chunk.c's kda_chunk_bwd, one block per (b, j) ------
// The chunk workspace lives in global scratch (per block), phases are separated by
// __syncthreads (which also orders the block's global-memory accesses).

// CB_SYNC: the phase barrier of the chunked backward (KDA_CB_FENCE adds a block-scope fence,
// a debugging variant).
#ifdef KDA_CB_FENCE
#define CB_SYNC()                                                                                  \
    do {                                                                                           \
        __threadfence_block();                                                                     \
        __syncthreads();                                                                           \
    } while (0)
#else
#define CB_SYNC() __syncthreads()
#endif

struct ChunkWs {
    float *h;        // [(NT + 1), K, V] chunk starts
    float *dS, *dSn; // [K, V]
    float *q, *k, *G, *eG, *eL, *Kb, *w, *dq, *dk, *dG, *dw, *dKb, *tk; // [C, K]
    float *v, *Vb, *u, *D, *dO, *dD, *dVb;                              // [C, V]
    float *Aqk, *KK, *L, *Akk, *dAqk, *dAkk, *M, *dL;                   // [C, C]
    float *beta, *dbeta;                                                // [C]
    float *acc;                                                         // [K]
};

__host__ __device__ size_t chunk_ws_floats(int64_t NT, int64_t C, int64_t K, int64_t V) {
    return (size_t)((NT + 3) * K * V + 13 * C * K + 7 * C * V + 8 * C * C + 2 * C + K);
}

__device__ ChunkWs chunk_ws_carve(float *p, int64_t NT, int64_t C, int64_t K, int64_t V) {
    ChunkWs w;
#define TAKE(f, n) (w.f = p, p += (n))
    TAKE(h, (NT + 1) * K * V), TAKE(dS, K * V), TAKE(dSn, K * V);
    TAKE(q, C * K), TAKE(k, C * K), TAKE(G, C * K), TAKE(eG, C * K), TAKE(eL, C * K);
    TAKE(Kb, C * K), TAKE(w, C * K), TAKE(dq, C * K), TAKE(dk, C * K), TAKE(dG, C * K);
    TAKE(dw, C * K), TAKE(dKb, C * K), TAKE(tk, C * K);
    TAKE(v, C * V), TAKE(Vb, C * V), TAKE(u, C * V), TAKE(D, C * V), TAKE(dO, C * V);
    TAKE(dD, C * V), TAKE(dVb, C * V);
    TAKE(Aqk, C * C), TAKE(KK, C * C), TAKE(L, C * C), TAKE(Akk, C * C), TAKE(dAqk, C * C);
    TAKE(dAkk, C * C), TAKE(M, C * C), TAKE(dL, C * C);
    TAKE(beta, C), TAKE(dbeta, C), TAKE(acc, K);
#undef TAKE
    return w;
}

#define BLOCK_LOOP(e, n) for (int64_t e = threadIdx.x; e < (n); e += blockDim.x)

// Rows [t0, t0 + n) of (b, j) into the workspace (G = the chunk-local cumsum as given).
__device__ void cb_gather(ChunkWs &w, const KdaDims &d, int64_t b, int64_t j, int64_t t0, int64_t n,
                          const kda_bf16 *q, const kda_bf16 *k, const kda_bf16 *v,
                          const float *gcum, const float *beta, const kda_bf16 *d_o) {
    const int64_t K = d.K, V = d.V, T = d.T, HV = d.HV;
    BLOCK_LOOP(e, n * K) {
        int64_t i = e / K, c = e % K, row = (b * T + t0 + i) * HV + j; // HV == H
        w.q[e] = bf2f(q[row * K + c]);
        w.k[e] = bf2f(k[row * K + c]);
        w.G[e] = gcum[row * K + c];
    }
    BLOCK_LOOP(e, n * V) {
        int64_t i = e / V, c = e % V, row = (b * T + t0 + i) * HV + j;
        w.v[e] = bf2f(v[row * V + c]);
        if (d_o) w.dO[e] = bf2f(d_o[row * V + c]);
    }
    BLOCK_LOOP(i, n) w.beta[i] = beta[(b * T + t0 + i) * HV + j];
}

// chunk_prepare of the CPU: eG, eL, Aqk, KK, L, Akk, Vb, Kb, u, w, D (start state S0).
__device__ void cb_prepare(ChunkWs &w, const float *S0, int64_t n, int64_t C, int64_t K, int64_t V,
                           float scale) {
    const float *Glast = w.G + (n - 1) * K;
    BLOCK_LOOP(e, n * K) {
        w.eG[e] = expf(w.G[e]);
        w.eL[e] = expf(Glast[e % K] - w.G[e]);
    }
    BLOCK_LOOP(e, n * n) {
        int64_t i = e / n, jj = e % n;
        float aqk = 0.0f, kk = 0.0f;
        if (jj <= i)
            for (int64_t c = 0; c < K; c++) {
                float x = w.k[jj * K + c] * expf(w.G[i * K + c] - w.G[jj * K + c]);
                aqk += w.q[i * K + c] * x;
                kk += w.k[i * K + c] * x;
            }
        w.Aqk[i * C + jj] = jj <= i ? scale * aqk : 0.0f;
        w.KK[i * C + jj] = jj < i ? kk : 0.0f;
        w.L[i * C + jj] = jj < i ? w.beta[i] * kk : 0.0f;
    }
    CB_SYNC();
    // Akk = (I + L)^-1 column by column: Akk[i, c] = δ_ic - Σ_{c <= m < i} L[i, m] Akk[m, c]
    BLOCK_LOOP(c, n) {
        for (int64_t i = 0; i < n; i++) {
            float s0 = i == c ? 1.0f : 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
            int64_t m = c;
            for (; m + 4 <= i; m += 4) { // four partial sums, as in the forward kernel
                s0 -= w.L[i * C + m] * w.Akk[m * C + c];
                s1 -= w.L[i * C + m + 1] * w.Akk[(m + 1) * C + c];
                s2 -= w.L[i * C + m + 2] * w.Akk[(m + 2) * C + c];
                s3 -= w.L[i * C + m + 3] * w.Akk[(m + 3) * C + c];
            }
            for (; m < i; m++)
                s0 -= w.L[i * C + m] * w.Akk[m * C + c];
            w.Akk[i * C + c] = (s0 + s1) + (s2 + s3);
        }
    }
    BLOCK_LOOP(e, n * V) w.Vb[e] = w.beta[e / V] * w.v[e];
    BLOCK_LOOP(e, n * K) w.Kb[e] = w.beta[e / K] * w.k[e] * w.eG[e];
    CB_SYNC();
    BLOCK_LOOP(e, n * V) {
        int64_t i = e / V, c = e % V;
        float s = 0.0f;
        for (int64_t m = 0; m <= i; m++)
            s += w.Akk[i * C + m] * w.Vb[m * V + c];
        w.u[e] = s;
    }
    BLOCK_LOOP(e, n * K) {
        int64_t i = e / K, c = e % K;
        float s = 0.0f;
        for (int64_t m = 0; m <= i; m++)
            s += w.Akk[i * C + m] * w.Kb[m * K + c];
        w.w[e] = s;
    }
    CB_SYNC();
    BLOCK_LOOP(e, n * V) {
        int64_t i = e / V, c = e % V;
        float s = w.u[e];
        for (int64_t x = 0; x < K; x++)
            s -= w.w[i * K + x] * S0[x * V + c];
        w.D[e] = s;
    }
    CB_SYNC();
}

// S_end = Diag(e^{G_last}) S0 + (k e^{G_last - G})ᵀ D, into S1 (another buffer).
__device__ void cb_state_update(const ChunkWs &w, const float *S0, float *S1, int64_t n, int64_t K,
                                int64_t V) {
    BLOCK_LOOP(e, K * V) {
        int64_t x = e / V, c = e % V;
        float s = expf(w.G[(n - 1) * K + x]) * S0[e];
        for (int64_t i = 0; i < n; i++)
            s += w.k[i * K + x] * w.eL[i * K + x] * w.D[i * V + c];
        S1[e] = s;
    }
}

// chunk_backward of the CPU. On entry w.dS = gradient w.r.t. the chunk's end state; on exit
// the gradient w.r.t. its start state S0. Fills dq, dk, dG (dΓ), dVb, dbeta.
__device__ void cb_backward(ChunkWs &w, const float *S0, int64_t n, int64_t C, int64_t K, int64_t V,
                            float scale) {
    // (1) dAqk = mask_{j<=i}(dO Dᵀ); (2) dD = Aqkᵀ dO + (k e^{G_last - G}) dS
    BLOCK_LOOP(e, n * n) {
        int64_t i = e / n, jj = e % n;
        float s = 0.0f;
        if (jj <= i)
            for (int64_t c = 0; c < V; c++)
                s += w.dO[i * V + c] * w.D[jj * V + c];
        w.dAqk[i * C + jj] = s;
    }
    BLOCK_LOOP(e, n * V) {
        int64_t i = e / V, c = e % V;
        float s = 0.0f;
        for (int64_t m = i; m < n; m++)
            s += w.Aqk[m * C + i] * w.dO[m * V + c];
        for (int64_t x = 0; x < K; x++)
            s += w.k[i * K + x] * w.eL[i * K + x] * w.dS[x * V + c];
        w.dD[e] = s;
    }
    CB_SYNC();
    // (3) inter-chunk dq, dk, dΓ, dw = -dD S0ᵀ; (4) new state gradient into dSn
    BLOCK_LOOP(e, n * K) {
        int64_t i = e / K, c = e % K;
        float so = 0.0f, sd = 0.0f, sw = 0.0f;
        for (int64_t x = 0; x < V; x++) {
            so += w.dO[i * V + x] * S0[c * V + x];
            sd += w.D[i * V + x] * w.dS[c * V + x];
            sw += w.dD[i * V + x] * S0[c * V + x];
        }
        float dqi = scale * w.eG[e] * so, t = w.k[e] * w.eL[e] * sd;
        w.dq[e] = dqi;
        w.dk[e] = w.eL[e] * sd;
        w.dG[e] = w.q[e] * dqi - t;
        w.tk[e] = t; // + to dΓ_last, summed below
        w.dw[e] = -sw;
    }
    BLOCK_LOOP(e, K * V) {
        int64_t x = e / V, c = e % V;
        float s = expf(w.G[(n - 1) * K + x]) * w.dS[e];
        for (int64_t i = 0; i < n; i++)
            s += scale * w.q[i * K + x] * w.eG[i * K + x] * w.dO[i * V + c] -
                 w.w[i * K + x] * w.dD[i * V + c];
        w.dSn[e] = s;
    }
    BLOCK_LOOP(x, K) { // e^{G_last} Σ_v dS S0 (S_end's decay term)
        float a = 0.0f;
        for (int64_t c = 0; c < V; c++)
            a += w.dS[x * V + c] * S0[x * V + c];
        w.acc[x] = expf(w.G[(n - 1) * K + x]) * a;
    }
    CB_SYNC();
    BLOCK_LOOP(x, K) {
        float s = w.acc[x];
        for (int64_t i = 0; i < n; i++)
            s += w.tk[i * K + x];
        w.dG[(n - 1) * K + x] += s;
    }
    BLOCK_LOOP(e, K * V) w.dS[e] = w.dSn[e];
    // (5) WY backward: dAkk (strict lower), dVb = Akkᵀ dD, dKb = Akkᵀ dw
    BLOCK_LOOP(e, n * n) {
        int64_t i = e / n, jj = e % n;
        float s = 0.0f;
        if (jj < i) {
            for (int64_t c = 0; c < V; c++)
                s += w.dD[i * V + c] * w.Vb[jj * V + c];
            for (int64_t c = 0; c < K; c++)
                s += w.dw[i * K + c] * w.Kb[jj * K + c];
        }
        w.dAkk[i * C + jj] = s;
    }
    BLOCK_LOOP(e, n * V) {
        int64_t m = e / V, c = e % V;
        float s = 0.0f;
        for (int64_t i = m; i < n; i++)
            s += w.Akk[i * C + m] * w.dD[i * V + c];
        w.dVb[e] = s;
    }
    BLOCK_LOOP(e, n * K) {
        int64_t m = e / K, c = e % K;
        float s = 0.0f;
        for (int64_t i = m; i < n; i++)
            s += w.Akk[i * C + m] * w.dw[i * K + c];
        w.dKb[e] = s;
    }
    CB_SYNC();
    // Vb = β v, Kb = β k e^G: dβ, dk, dΓ; (6) M = Akkᵀ dAkk
    BLOCK_LOOP(i, n) {
        float db = 0.0f;
        for (int64_t c = 0; c < V; c++)
            db += w.v[i * V + c] * w.dVb[i * V + c];
        for (int64_t c = 0; c < K; c++)
            db += w.k[i * K + c] * w.eG[i * K + c] * w.dKb[i * K + c];
        w.dbeta[i] = db;
    }
    BLOCK_LOOP(e, n * K) {
        w.dk[e] += w.beta[e / K] * w.eG[e] * w.dKb[e];
        w.dG[e] += w.Kb[e] * w.dKb[e];
    }
    BLOCK_LOOP(e, n * n) { // M[i, x] = Σ_{m >= i, m > x} Akk[m, i] dAkk[m, x]
        int64_t i = e / n, x = e % n;
        float s = 0.0f;
        for (int64_t m = i > x ? i : x + 1; m < n; m++)
            s += w.Akk[m * C + i] * w.dAkk[m * C + x];
        w.M[i * C + x] = s;
    }
    CB_SYNC();
    // dL = -M Akkᵀ on the strict lower triangle
    BLOCK_LOOP(e, n * n) {
        int64_t i = e / n, jj = e % n;
        float s = 0.0f;
        if (jj < i)
            for (int64_t x = 0; x <= jj; x++)
                s += w.M[i * C + x] * w.Akk[jj * C + x];
        w.dL[i * C + jj] = -s;
    }
    CB_SYNC();
    // (7) intra-chunk pairs, gathered by output row p:
    //     x_ij = (a_ij q_i + l_ij k_i) e_ij, a = scale dAqk, l = β_i dL (j < i), e = e^{G_i - G_j}
    //     dq_p += Σ_{j<=p} a_pj k_j e_pj;  dk_p += Σ_{i>=p} x_ip + Σ_{j<p} l_pj k_j e_pj
    //     dΓ_p += Σ_{j<=p} x_pj k_j - k_p Σ_{i>=p} x_ip;  dβ_p += Σ_{j<p} dL_pj KK_pj
    BLOCK_LOOP(e, n * K) {
        int64_t p = e / K, c = e % K;
        float qp = w.q[e], kp = w.k[e], Gp = w.G[e], lp = w.beta[p];
        float dq = 0.0f, dk = 0.0f, dG = 0.0f, xcol = 0.0f;
        for (int64_t jj = 0; jj <= p; jj++) {
            float ex = expf(Gp - w.G[jj * K + c]), kj = w.k[jj * K + c];
            float a = scale * w.dAqk[p * C + jj], l = jj < p ? w.dL[p * C + jj] * lp : 0.0f;
            float x = (a * qp + l * kp) * ex;
            dq += a * kj * ex;
            dk += l * kj * ex;
            dG += x * kj;
        }
        for (int64_t i = p; i < n; i++) {
            float ex = expf(w.G[i * K + c] - Gp);
            float a = scale * w.dAqk[i * C + p], l = p < i ? w.dL[i * C + p] * w.beta[i] : 0.0f;
            xcol += (a * w.q[i * K + c] + l * w.k[i * K + c]) * ex;
        }
        w.dq[e] += dq;
        w.dk[e] += dk + xcol;
        w.dG[e] += dG - kp * xcol;
    }
    BLOCK_LOOP(p, n) {
        float s = 0.0f;
        for (int64_t jj = 0; jj < p; jj++)
            s += w.dL[p * C + jj] * w.KK[p * C + jj];
        w.dbeta[p] += s;
    }
    CB_SYNC();
}

__global__ void __launch_bounds__(256)
    chunk_bwd_k(float *dq, float *dk, kda_bf16 *dv, float *dg, float *dbeta, float *dS0,
                const kda_bf16 *d_o, const float *dST, const kda_bf16 *q, const kda_bf16 *k,
                const kda_bf16 *v, const float *gcum, const float *beta, const float *S0in,
                KdaDims d, float *scratch) {
    const int64_t C = d.chunk, K = d.K, V = d.V, T = d.T, HV = d.HV, KV = K * V;
    const int64_t NT = CEIL_DIV(T, C), bj = blockIdx.x, b = bj / HV, j = bj % HV;
    ChunkWs w = chunk_ws_carve(scratch + (size_t)bj * chunk_ws_floats(NT, C, K, V), NT, C, K, V);
    BLOCK_LOOP(e, KV) {
        w.h[e] = S0in ? S0in[bj * KV + e] : 0.0f;
        w.dS[e] = dST ? dST[bj * KV + e] : 0.0f;
    }
    for (int64_t c = 0; c < NT; c++) { // recompute the chunk-start states (§6.3 step 1)
        int64_t t0 = c * C, n = min(C, T - t0);
        CB_SYNC();
        cb_gather(w, d, b, j, t0, n, q, k, v, gcum, beta, NULL);
        CB_SYNC();
        cb_prepare(w, w.h + c * KV, n, C, K, V, d.scale);
        cb_state_update(w, w.h + c * KV, w.h + (c + 1) * KV, n, K, V);
    }
    for (int64_t c = NT - 1; c >= 0; c--) { // reverse state pass (§6.3 step 3)
        int64_t t0 = c * C, n = min(C, T - t0);
        CB_SYNC();
        cb_gather(w, d, b, j, t0, n, q, k, v, gcum, beta, d_o);
        CB_SYNC();
        cb_prepare(w, w.h + c * KV, n, C, K, V, d.scale);
        cb_backward(w, w.h + c * KV, n, C, K, V, d.scale);
        BLOCK_LOOP(x, K) { // dg = reverse chunk-local cumsum of dΓ
            float s = 0.0f;
            for (int64_t i = n - 1; i >= 0; i--) {
                s += w.dG[i * K + x];
                dg[((b * T + t0 + i) * HV + j) * K + x] = s;
            }
        }
        BLOCK_LOOP(e, n * K) {
            int64_t row = (b * T + t0 + e / K) * HV + j;
            dq[row * K + e % K] = w.dq[e];
            dk[row * K + e % K] = w.dk[e];
        }
        BLOCK_LOOP(e, n * V) {
            int64_t i = e / V, row = (b * T + t0 + i) * HV + j;
            dv[row * V + e % V] = f2bf(w.beta[i] * w.dVb[e]);
        }
        BLOCK_LOOP(i, n) dbeta[(b * T + t0 + i) * HV + j] = w.dbeta[i];
    }
    CB_SYNC();
    if (dS0) BLOCK_LOOP(e, KV) dS0[bj * KV + e] = w.dS[e];
}

} // namespace

extern "C" int kda_cuda_chunk_fwd(KdaCudaCtx *ctx, kda_bf16 *o, float *final_state,
                                  const kda_bf16 *q, const kda_bf16 *k, const kda_bf16 *v,
                                  const float *gcum, const float *beta, const float *init_state,
                                  const KdaDims *d) {
    KDA_CUDA_REQUIRE(ctx, d->B >= 0 && d->T >= 0 && d->H > 0 && d->HV % d->H == 0);
    if (d->B == 0) return 0;
    if (d->T > 0 && kda_fast_supported(d, ctx->info.smem_per_block_optin))
        return kda_fast_fwd(ctx, o, final_state, q, k, v, gcum, beta, init_state, d);
    KDA_CUDA_REQUIRE(ctx, d->chunk >= 1 && d->chunk <= FWD_MAX_C && d->K >= 1 && d->K <= 64 &&
                              d->V >= 1 && d->V <= 128);
    size_t smem = fwd_smem_floats(d->chunk, d->K, d->V) * sizeof(float);
    KDA_CUDA_REQUIRE(ctx, smem <= ctx->info.smem_per_block_optin);
    CUDA_CHECK(ctx, cudaFuncSetAttribute(chunk_fwd_k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)smem));
    chunk_fwd_k<<<(unsigned)(d->B * d->HV), FWD_THREADS, smem, ctx->stream>>>(
        o, final_state, q, k, v, gcum, beta, init_state, *d);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

extern "C" int kda_cuda_recurrent_bwd(KdaCudaCtx *ctx, float *dq, float *dk, kda_bf16 *dv,
                                      float *dg, float *dbeta, float *dinit_state,
                                      const kda_bf16 *d_o, const float *dfinal_state,
                                      const kda_bf16 *q, const kda_bf16 *k, const kda_bf16 *v,
                                      const float *g, const float *beta, const float *init_state,
                                      const KdaDims *d) {
    KDA_CUDA_REQUIRE(ctx, d->B >= 0 && d->T >= 0 && d->HV == d->H && d->chunk >= 1);
    KDA_CUDA_REQUIRE(ctx, d->V >= 1 && d->V <= 256); // one thread per column, <= 256 threads
    if (d->B == 0 || d->T == 0) return 0;
    switch (d->K) {
    case 16:
        return launch_bwd<16>(ctx, dq, dk, dv, dg, dbeta, dinit_state, d_o, dfinal_state, q, k, v,
                              g, beta, init_state, d);
    case 32:
        return launch_bwd<32>(ctx, dq, dk, dv, dg, dbeta, dinit_state, d_o, dfinal_state, q, k, v,
                              g, beta, init_state, d);
    case 64:
        return launch_bwd<64>(ctx, dq, dk, dv, dg, dbeta, dinit_state, d_o, dfinal_state, q, k, v,
                              g, beta, init_state, d);
    default:
        return kda_cuda_fail_at(ctx, __FILE__, __LINE__, "kda_cuda_recurrent_bwd",
                                "K must be 16, 32 or 64");
    }
}

extern "C" int kda_cuda_chunk_bwd(KdaCudaCtx *ctx, float *dq, float *dk, kda_bf16 *dv, float *dg,
                                  float *dbeta, float *dinit_state, const kda_bf16 *d_o,
                                  const float *dfinal_state, const kda_bf16 *q, const kda_bf16 *k,
                                  const kda_bf16 *v, const float *gcum, const float *beta,
                                  const float *init_state, const KdaDims *d) {
    if (d->B > 0 && d->T > 0 && kda_fast_supported(d, ctx->info.smem_per_block_optin))
        return kda_fast_bwd(ctx, dq, dk, dv, dg, dbeta, dinit_state, d_o, dfinal_state, q, k, v,
                            gcum, beta, init_state, d);
    KDA_CUDA_REQUIRE(ctx, d->B >= 0 && d->T >= 0 && d->HV == d->H && d->K >= 1 && d->V >= 1);
    KDA_CUDA_REQUIRE(ctx, d->chunk >= 1 && d->chunk <= 64);
    if (d->B == 0 || d->T == 0) return 0;
    int64_t BH = d->B * d->HV, NT = CEIL_DIV(d->T, d->chunk);
    size_t per = chunk_ws_floats(NT, d->chunk, d->K, d->V);
    float *ws = (float *)kda_cuda_scratch(ctx, (size_t)BH * per * sizeof(float));
    if (!ws) return -1;
    chunk_bwd_k<<<(unsigned)BH, 256, 0, ctx->stream>>>(dq, dk, dv, dg, dbeta, dinit_state, d_o,
                                                       dfinal_state, q, k, v, gcum, beta,
                                                       init_state, *d, ws);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}
