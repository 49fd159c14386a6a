// kda_fast.cu - the KDA core on the GPU in chunk-parallel form: five kernels (intra, state,
// output; reverse state, main backward), each body a __host__ __device__ function of block-strided
// loops and barriers so that it also runs serially on the host (kda_fast_*_host). See kda_fast.h.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_internal.h" // defines: bf2f, f2bf, CUDA_CHECK, KDA_CUDA_REQUIRE (and kda_calloc)
#include "cuda/kda_chunk_layout.cuh" // defines: ChunkArgs, chunk_args, carve, gva_sum_launch
#include "cuda/kda_fast.h"           // defines: kda_fast_fwd, kda_fast_bwd

namespace {

#define FAST_THREADS 256

// ---- the host/device portability layer ----------------------------------------------------------
// On the device a body is run by every thread of a block; on the host by one "thread" that does
// every iteration of every block-strided loop, so a barrier is a no-op there.

__host__ __device__ inline int tid_() {
#ifdef __CUDA_ARCH__
    return (int)threadIdx.x;
#else
    return 0;
#endif
}
__host__ __device__ inline int nth_() {
#ifdef __CUDA_ARCH__
    return (int)blockDim.x;
#else
    return 1;
#endif
}
__host__ __device__ inline void sync_() {
#ifdef __CUDA_ARCH__
    __syncthreads();
#endif
}
// e^x for x <= 0 (ex2.approx on the device: relative error ~2^-22, far below bf16's 2^-9)
__host__ __device__ inline float fexp(float x) {
#ifdef __CUDA_ARCH__
    return __expf(x);
#else
    return expf(x);
#endif
}

// Loads and stores of either storage type (E = kda_bf16: training; float: the fp32 scoring path).
__host__ __device__ inline float lde(kda_bf16 h) {
    return bf2f(h);
}
__host__ __device__ inline float lde(float f) {
    return f;
}
__host__ __device__ inline void ste(kda_bf16 *p, float f) {
    *p = f2bf(f);
}
__host__ __device__ inline void ste(float *p, float f) {
    *p = f;
}

// Block-strided loop: e = this thread's items of [0, n).
#define FOR(e, n) for (int e = tid, e##_end = (n); e < e##_end; e += nth)

// ---- arguments: kda_chunk_layout.cuh's (the scratch and kept-state layout shared with kda_tc.cu)
typedef ChunkArgs FastArgs;
// The input and output tensors, E = kda_bf16 (training, and the backward always) or float (the
// forward of the fp32 scoring path).
template <class E> struct FastIo : FastArgs {
    const E *q, *k, *v, *dO;
    E *o, *dv; // outputs
};
typedef FastIo<kda_bf16> FastBf;

// Shared-memory sizes in floats (row strides padded by one float so that a warp reading one
// column of many rows hits 32 different banks).
__host__ __device__ inline size_t intra_floats(int C, int K, int V, bool bwd) {
    return (size_t)(4 * C * (K + 1) + (bwd ? 2 : 1) * C * (V + 1) + 3 * C * (C + 1) + C);
}
__host__ __device__ inline size_t state_floats(int C, int K, int Vt) {
    return (size_t)(K * (Vt + 1) + 3 * C * (K + 1) + 2 * C * (Vt + 1) + K);
}
__host__ __device__ inline size_t output_floats(int C, int K, int V) {
    return (size_t)(C * (K + 1) + K * V + C * (C + 1) + C * V);
}
__host__ __device__ inline size_t bwd_floats(int C, int K, int V, int Vt) {
    return (size_t)(9 * C * (K + 1) + 4 * C * (V + 1) + 2 * K * (Vt + 1) + 5 * C * (C + 1) + 2 * C +
                    K);
}

// ---- intra: everything of one chunk that does not need the state -------------------------------
// L[i,j] = β_i Σ_c k_i k_j e^{G_i - G_j} (j < i), Aqk[i,j] = scale Σ_c q_i k_j e^{G_i - G_j}
// (j <= i), Akk = (I + L)^-1, w = Akk (β k e^G), u = Akk (β v), kg, qg, e^{G_last}; the forward
// keeps Aqk, the backward dΔ_intra = Aqkᵀ dO instead.
template <class E>
__host__ __device__ void intra_body(const FastIo<E> &a, int64_t blk, float *sm, bool bwd) {
    const int tid = tid_(), nth = nth_();
    const int C = a.C, K = a.K, V = a.V, LK = K + 1, LV = V + 1, LC = C + 1;
    const ChunkPos p = chunk_pos(a, blk);
    const int n = p.n;
    float *Qs = sm, *Ks = Qs + C * LK, *Gs = Ks + C * LK, *Kb = Gs + C * LK, *Vs = Kb + C * LK;
    float *dOs = Vs + C * LV, *Aq = dOs + (bwd ? C * LV : 0), *Ls = Aq + C * LC, *Ak = Ls + C * LC;
    float *bs = Ak + C * LC;

    FOR(e, C * K) {
        int i = e / K, c = e % K, t = p.t0 + i;
        bool in = i < n;
        Qs[i * LK + c] = in ? lde(a.q[qk_at(a, p.b, t, p.hq) + c]) : 0.0f;
        Ks[i * LK + c] = in ? lde(a.k[qk_at(a, p.b, t, p.hq) + c]) : 0.0f;
        Gs[i * LK + c] = in ? a.gcum[g_at(a, p.b, t, p.j) + c] : 0.0f;
    }
    FOR(e, C * V) {
        int i = e / V, c = e % V, t = p.t0 + i;
        bool in = i < n;
        Vs[i * LV + c] = in ? lde(a.v[v_at(a, p.b, t, p.j) + c]) : 0.0f;
        if (bwd) dOs[i * LV + c] = in ? lde(a.dO[v_at(a, p.b, t, p.j) + c]) : 0.0f;
    }
    FOR(i, C) bs[i] = i < n ? a.beta[beta_at(a, p.b, p.t0 + i, p.j)] : 0.0f;
    sync_();

    const float *Gl = Gs + (n - 1) * LK;
    FOR(e, C * C) { // pairs (i, j): a warp is one row i, lanes read column c of 32 rows j
        int i = e / C, jj = e % C;
        float l = 0.0f, aq = 0.0f;
        if (i < n && jj <= i) {
            for (int c = 0; c < K; c++) {
                float kd = Ks[jj * LK + c] * fexp(Gs[i * LK + c] - Gs[jj * LK + c]);
                l += Ks[i * LK + c] * kd;
                aq += Qs[i * LK + c] * kd;
            }
        }
        Aq[i * LC + jj] = a.scale * aq;
        Ls[i * LC + jj] = jj < i ? bs[i] * l : 0.0f;
        Ak[i * LC + jj] = i == jj ? 1.0f : 0.0f;
    }
    float *wg = a.w + p.cid * C * K, *kgg = a.kg + p.cid * C * K, *qgg = a.qg + p.cid * C * K;
    FOR(e, C * K) {
        int i = e / K, c = e % K;
        float eg = fexp(Gs[i * LK + c]);
        Kb[i * LK + c] = bs[i] * Ks[i * LK + c] * eg;
        qgg[e] = a.scale * Qs[i * LK + c] * eg;
        kgg[e] = Ks[i * LK + c] * fexp(Gl[c] - Gs[i * LK + c]);
    }
    FOR(c, K) a.gl[p.cid * K + c] = fexp(Gl[c]);
    FOR(e, C * V) Vs[(e / V) * LV + e % V] *= bs[e / V];
    sync_();

    // Akk = (I + L)^-1, right-looking: once row m is final, subtract L[r, m]·row m from rows r > m.
    for (int m = 0; m + 1 < n; m++) {
        int cols = m + 1;
        FOR(e, (n - 1 - m) * cols) {
            int r = m + 1 + e / cols, c = e % cols;
            Ak[r * LC + c] -= Ls[r * LC + m] * Ak[m * LC + c];
        }
        sync_();
    }

    FOR(e, C * K) { // w = Akk Kb (Akk lower triangular)
        int i = e / K, c = e % K;
        float s = 0.0f;
        for (int m = 0; m <= i; m++)
            s += Ak[i * LC + m] * Kb[m * LK + c];
        wg[e] = s;
    }
    float *ug = a.u + p.cid * C * V;
    FOR(e, C * V) { // u = Akk (β v)
        int i = e / V, c = e % V;
        float s = 0.0f;
        for (int m = 0; m <= i; m++)
            s += Ak[i * LC + m] * Vs[m * LV + c];
        ug[e] = s;
    }
    if (!bwd) {
        FOR(e, C * C) a.Aqk[p.cid * C * C + e] = Aq[(e / C) * LC + e % C];
    } else {
        float *dDig = a.dDi + p.cid * C * V;
        FOR(e, C * V) { // dΔ_intra[j] = Σ_{i >= j} Aqk[i, j] dO[i]
            int jj = e / V, c = e % V;
            float s = 0.0f;
            for (int i = jj; i < n; i++)
                s += Aq[i * LC + jj] * dOs[i * LV + c];
            dDig[e] = s;
        }
    }
}

// ---- state: the only sequential stage, one block per (b, value head, V tile) -------------------
// For each chunk: h[n] = S; Δ = u - w S; S = Diag(e^{G_last}) S + kgᵀ Δ. Columns of S are
// independent, so V tiles run in separate blocks.
__host__ __device__ void state_body(const FastArgs &a, int64_t blk, float *sm) {
    const int tid = tid_(), nth = nth_();
    const int C = a.C, K = a.K, V = a.V, Vt = a.Vt, LK = K + 1, LT = Vt + 1, nvt = V / Vt;
    const int64_t bj = blk / nvt;
    const int v0 = (int)(blk % nvt) * Vt;
    float *S = sm, *Ws = S + K * LT, *KGs = Ws + C * LK, *Us = KGs + C * LK, *Ds = Us + C * LT;
    float *gls = Ds + C * LT;

    FOR(e, K * Vt) {
        int x = e / Vt, c = e % Vt;
        S[x * LT + c] = a.init_state ? a.init_state[bj * K * V + x * V + v0 + c] : 0.0f;
    }
    for (int nc = 0; nc < a.NT; nc++) {
        const int64_t cid = bj * a.NT + nc;
        sync_(); // the previous chunk is done with the tiles and S is updated
        FOR(e, C * K) {
            Ws[(e / K) * LK + e % K] = a.w[cid * C * K + e];
            KGs[(e / K) * LK + e % K] = a.kg[cid * C * K + e];
        }
        FOR(e, C * Vt) {
            int i = e / Vt, c = e % Vt;
            Us[i * LT + c] = a.u[cid * C * V + (int64_t)i * V + v0 + c];
        }
        FOR(x, K) gls[x] = a.gl[cid * K + x];
        FOR(e, K * Vt) {
            int x = e / Vt, c = e % Vt;
            a.h[cid * K * V + (int64_t)x * V + v0 + c] = S[x * LT + c];
        }
        sync_();
        FOR(e, C * Vt) {
            int i = e / Vt, c = e % Vt;
            float s = Us[i * LT + c];
            for (int x = 0; x < K; x++)
                s -= Ws[i * LK + x] * S[x * LT + c];
            Ds[i * LT + c] = s;
            a.D[cid * C * V + (int64_t)i * V + v0 + c] = s;
        }
        sync_();
        FOR(e, K * Vt) {
            int x = e / Vt, c = e % Vt;
            float s = gls[x] * S[x * LT + c];
            for (int i = 0; i < C; i++)
                s += KGs[i * LK + x] * Ds[i * LT + c];
            S[x * LT + c] = s;
        }
    }
    if (a.final_state) {
        FOR(e, K * Vt) { // same items as the last update: each thread reads what it wrote
            int x = e / Vt, c = e % Vt;
            a.final_state[bj * K * V + x * V + v0 + c] = S[x * LT + c];
        }
    }
}

// ---- output: o = qg h[n] + Aqk Δ, chunk-parallel ------------------------------------------------
template <class E>
__host__ __device__ void output_body(const FastIo<E> &a, int64_t blk, float *sm) {
    const int tid = tid_(), nth = nth_();
    const int C = a.C, K = a.K, V = a.V, LK = K + 1, LC = C + 1;
    const ChunkPos p = chunk_pos(a, blk);
    float *QG = sm, *Hs = QG + C * LK, *Aq = Hs + K * V, *Ds = Aq + C * LC;

    FOR(e, C * K) QG[(e / K) * LK + e % K] = a.qg[p.cid * C * K + e];
    FOR(e, K * V) Hs[e] = a.h[p.cid * K * V + e];
    FOR(e, C * C) Aq[(e / C) * LC + e % C] = a.Aqk[p.cid * C * C + e];
    FOR(e, C * V) Ds[e] = a.D[p.cid * C * V + e];
    sync_();
    FOR(e, p.n * V) {
        int i = e / V, c = e % V;
        float s = 0.0f;
        for (int x = 0; x < K; x++)
            s += QG[i * LK + x] * Hs[x * V + c];
        for (int jj = 0; jj <= i; jj++)
            s += Aq[i * LC + jj] * Ds[jj * V + c];
        ste(&a.o[v_at(a, p.b, p.t0 + i, p.j) + c], s);
    }
}

// ---- reverse state pass, one block per (b, value head, V tile)
// --------------------------------------- dS starts at the final-state gradient. For chunks in
// reverse: dh[n] = dS (gradient w.r.t. the chunk-end state); dΔ = dΔ_intra + kg dS; dS =
// Diag(e^{G_last}) dS + qgᵀ dO - wᵀ dΔ.
__host__ __device__ void state_bwd_body(const FastBf &a, int64_t blk, float *sm) {
    const int tid = tid_(), nth = nth_();
    const int C = a.C, K = a.K, V = a.V, Vt = a.Vt, LK = K + 1, LT = Vt + 1, nvt = V / Vt;
    const int64_t bj = blk / nvt;
    const int v0 = (int)(blk % nvt) * Vt, b = (int)(bj / a.HV), j = (int)(bj % a.HV);
    float *dS = sm, *Ws = dS + K * LT, *KGs = Ws + C * LK, *QGs = KGs + C * LK;
    float *dDs = QGs + C * LK, *dOs = dDs + C * LT, *gls = dOs + C * LT;

    FOR(e, K * Vt) {
        int x = e / Vt, c = e % Vt;
        dS[x * LT + c] = a.dfinal ? a.dfinal[bj * K * V + x * V + v0 + c] : 0.0f;
    }
    for (int nc = a.NT - 1; nc >= 0; nc--) {
        const int64_t cid = bj * a.NT + nc;
        const int t0 = nc * C;
        sync_();
        FOR(e, C * K) {
            int i = e / K, c = e % K;
            Ws[i * LK + c] = a.w[cid * C * K + e];
            KGs[i * LK + c] = a.kg[cid * C * K + e];
            QGs[i * LK + c] = a.qg[cid * C * K + e];
        }
        FOR(e, C * Vt) {
            int i = e / Vt, c = e % Vt;
            dDs[i * LT + c] = a.dDi[cid * C * V + (int64_t)i * V + v0 + c];
            dOs[i * LT + c] = t0 + i < a.T ? bf2f(a.dO[v_at(a, b, t0 + i, j) + v0 + c]) : 0.0f;
        }
        FOR(x, K) gls[x] = a.gl[cid * K + x];
        FOR(e, K * Vt) {
            int x = e / Vt, c = e % Vt;
            a.dh[cid * K * V + (int64_t)x * V + v0 + c] = dS[x * LT + c];
        }
        sync_();
        FOR(e, C * Vt) { // each thread updates only its own element
            int i = e / Vt, c = e % Vt;
            float s = dDs[i * LT + c];
            for (int x = 0; x < K; x++)
                s += KGs[i * LK + x] * dS[x * LT + c];
            dDs[i * LT + c] = s;
            a.dD[cid * C * V + (int64_t)i * V + v0 + c] = s;
        }
        sync_();
        FOR(e, K * Vt) {
            int x = e / Vt, c = e % Vt;
            float s = gls[x] * dS[x * LT + c];
            for (int i = 0; i < C; i++)
                s += QGs[i * LK + x] * dOs[i * LT + c] - Ws[i * LK + x] * dDs[i * LT + c];
            dS[x * LT + c] = s;
        }
    }
    if (a.dinit) {
        FOR(e, K * Vt) {
            int x = e / Vt, c = e % Vt;
            a.dinit[bj * K * V + x * V + v0 + c] = dS[x * LT + c];
        }
    }
}

// ---- main backward of one chunk (cpu/kda_chunk.c chunk_backward, minus the state gradient) -----
// Given S0 = h[n], dS = dh[n], Δ and the full dΔ: dAqk, the inter-chunk parts of dq/dk/dΓ,
// dw = -dΔ S0ᵀ, the WY backward, dL = -Akkᵀ dAkk Akkᵀ, the pairwise intra terms, dβ, dv, and
// dg = the reverse chunk-local cumsum of dΓ.
__host__ __device__ void bwd_body(const FastBf &a, int64_t blk, float *sm) {
    const int tid = tid_(), nth = nth_();
    const int C = a.C, K = a.K, V = a.V, Vt = a.Vt;
    const int LK = K + 1, LV = V + 1, LC = C + 1, LT = Vt + 1;
    const ChunkPos p = chunk_pos(a, blk);
    const int n = p.n;
    const float scale = a.scale;
    float *Qs = sm, *Ks = Qs + C * LK, *Gs = Ks + C * LK, *Kb = Gs + C * LK, *dq = Kb + C * LK;
    float *dk = dq + C * LK, *dG = dk + C * LK, *dw = dG + C * LK, *tk = dw + C * LK;
    float *dOs = tk + C * LK, *Ds = dOs + C * LV, *dDs = Ds + C * LV, *Vs = dDs + C * LV;
    float *S0t = Vs + C * LV, *dSt = S0t + K * LT;
    float *KK = dSt + K * LT, *Ak = KK + C * LC, *dAqk = Ak + C * LC, *dAkk = dAqk + C * LC;
    float *M = dAkk + C * LC, *bs = M + C * LC, *dbs = bs + C, *dGl = dbs + C;

    // (0) gather the chunk; zero the accumulators
    FOR(e, C * K) {
        int i = e / K, c = e % K, t = p.t0 + i, x = i * LK + c;
        bool in = i < n;
        Qs[x] = in ? bf2f(a.q[qk_at(a, p.b, t, p.hq) + c]) : 0.0f;
        Ks[x] = in ? bf2f(a.k[qk_at(a, p.b, t, p.hq) + c]) : 0.0f;
        Gs[x] = in ? a.gcum[g_at(a, p.b, t, p.j) + c] : 0.0f;
        dq[x] = dk[x] = dG[x] = dw[x] = tk[x] = 0.0f;
    }
    FOR(e, C * V) {
        int i = e / V, c = e % V, t = p.t0 + i, x = i * LV + c;
        bool in = i < n;
        Vs[x] = in ? bf2f(a.v[v_at(a, p.b, t, p.j) + c]) : 0.0f;
        dOs[x] = in ? bf2f(a.dO[v_at(a, p.b, t, p.j) + c]) : 0.0f;
        Ds[x] = a.D[p.cid * C * V + e];
        dDs[x] = a.dD[p.cid * C * V + e];
    }
    FOR(i, C) bs[i] = i < n ? a.beta[beta_at(a, p.b, p.t0 + i, p.j)] : 0.0f;
    FOR(c, K) dGl[c] = 0.0f;
    sync_();

    // (1) KK (strict lower, L = β_i KK), dAqk = mask_{j<=i}(dO Δᵀ), Kb = β k e^G, Akk := I
    FOR(e, C * C) {
        int i = e / C, jj = e % C;
        float kk = 0.0f, da = 0.0f;
        if (i < n && jj < i)
            for (int c = 0; c < K; c++)
                kk += Ks[i * LK + c] * Ks[jj * LK + c] * fexp(Gs[i * LK + c] - Gs[jj * LK + c]);
        if (i < n && jj <= i)
            for (int v = 0; v < V; v++)
                da += dOs[i * LV + v] * Ds[jj * LV + v];
        KK[i * LC + jj] = kk;
        dAqk[i * LC + jj] = da;
        Ak[i * LC + jj] = i == jj ? 1.0f : 0.0f;
    }
    FOR(e, C * K) {
        int i = e / K, c = e % K;
        Kb[i * LK + c] = bs[i] * Ks[i * LK + c] * fexp(Gs[i * LK + c]);
    }
    sync_();

    // (2) Akk = (I + L)^-1 (as intra_body)
    for (int m = 0; m + 1 < n; m++) {
        int cols = m + 1;
        FOR(e, (n - 1 - m) * cols) {
            int r = m + 1 + e / cols, c = e % cols;
            Ak[r * LC + c] -= bs[r] * KK[r * LC + m] * Ak[m * LC + c];
        }
        sync_();
    }

    // (3) state terms, V tile by tile: so = dO S0ᵀ, sd = Δ dSᵀ, sw = dΔ S0ᵀ  [C, K]
    const float *Gl = Gs + (n - 1) * LK;
    for (int v0 = 0; v0 < V; v0 += Vt) {
        FOR(e, K * Vt) {
            int x = e / Vt, c = e % Vt;
            S0t[x * LT + c] = a.h[p.cid * K * V + (int64_t)x * V + v0 + c];
            dSt[x * LT + c] = a.dh[p.cid * K * V + (int64_t)x * V + v0 + c];
        }
        sync_();
        FOR(e, C * K) {
            int i = e / K, c = e % K, x = i * LK + c;
            float so = 0.0f, sd = 0.0f, sw = 0.0f;
            for (int vv = 0; vv < Vt; vv++) {
                float s0 = S0t[c * LT + vv];
                so += dOs[i * LV + v0 + vv] * s0;
                sd += Ds[i * LV + v0 + vv] * dSt[c * LT + vv];
                sw += dDs[i * LV + v0 + vv] * s0;
            }
            float eg = fexp(Gs[x]), el = fexp(Gl[c] - Gs[x]);
            float dqi = scale * eg * so, tkv = Ks[x] * el * sd;
            dq[x] += dqi; // o has (scale q e^G) S0
            dG[x] += Qs[x] * dqi - tkv;
            dk[x] += el * sd; // S_end has (k e^{G_last - G})ᵀ Δ
            tk[x] += tkv;     // summed into dΓ_last below
            dw[x] -= sw;      // Δ = u - w S0
        }
        FOR(c, K) { // S_end = Diag(e^{G_last}) S0 + ...: dΓ_last += e^{G_last} Σ_v dS S0
            float s = 0.0f;
            for (int vv = 0; vv < Vt; vv++)
                s += dSt[c * LT + vv] * S0t[c * LT + vv];
            dGl[c] += fexp(Gl[c]) * s;
        }
        sync_();
    }
    FOR(c, K) {
        float s = 0.0f;
        for (int i = 0; i < n; i++)
            s += tk[i * LK + c];
        dGl[c] += s;
    }
    sync_();

    // (4) WY backward: dAkk = dΔ Vbᵀ + dw Kbᵀ (strict lower); dVb = Akkᵀ dΔ (into dOs, free
    //     now) with dv = β dVb; dKb = Akkᵀ dw (into tk, free now)
    FOR(e, C * C) {
        int i = e / C, jj = e % C;
        float s = 0.0f;
        if (i < n && jj < i) {
            float sv = 0.0f;
            for (int v = 0; v < V; v++)
                sv += dDs[i * LV + v] * Vs[jj * LV + v];
            for (int c = 0; c < K; c++)
                s += dw[i * LK + c] * Kb[jj * LK + c];
            s += bs[jj] * sv;
        }
        dAkk[i * LC + jj] = s;
    }
    FOR(e, C * V) {
        int m = e / V, c = e % V;
        float s = 0.0f;
        for (int i = m; i < n; i++)
            s += Ak[i * LC + m] * dDs[i * LV + c];
        dOs[m * LV + c] = s;
        if (m < n) a.dv[v_at(a, p.b, p.t0 + m, p.j) + c] = f2bf(bs[m] * s);
    }
    FOR(e, C * K) {
        int m = e / K, c = e % K;
        float s = 0.0f;
        for (int i = m; i < n; i++)
            s += Ak[i * LC + m] * dw[i * LK + c];
        tk[m * LK + c] = s;
    }
    sync_();

    // (5) M = Akkᵀ dAkk; Kb = β k e^G: dk += β e^G dKb, dΓ += Kb dKb; dβ = v·dVb + (k e^G)·dKb
    FOR(e, C * C) {
        int i = e / C, jj = e % C;
        float s = 0.0f;
        for (int m = (i > jj + 1 ? i : jj + 1); m < n; m++)
            s += Ak[m * LC + i] * dAkk[m * LC + jj];
        M[i * LC + jj] = s;
    }
    FOR(e, C * K) {
        int i = e / K, c = e % K, x = i * LK + c;
        dk[x] += bs[i] * fexp(Gs[x]) * tk[x];
        dG[x] += Kb[x] * tk[x];
    }
    FOR(i, C) {
        float s = 0.0f;
        for (int v = 0; v < V; v++)
            s += Vs[i * LV + v] * dOs[i * LV + v];
        for (int c = 0; c < K; c++)
            s += Ks[i * LK + c] * fexp(Gs[i * LK + c]) * tk[i * LK + c];
        dbs[i] = s;
    }
    sync_();

    // (6) dL = -M Akkᵀ on the strict lower triangle (into dAkk, no longer read)
    FOR(e, C * C) {
        int i = e / C, jj = e % C;
        float s = 0.0f;
        if (i < n && jj < i)
            for (int m = 0; m <= jj; m++)
                s -= M[i * LC + m] * Ak[jj * LC + m];
        dAkk[i * LC + jj] = s;
    }
    sync_();

    // (7) pairwise intra terms of Aqk (j <= i) and L (j < i), gathered per (row r, channel c):
    //     as row i = r: dq_r += a k_j e, dk_r += l k_j e, dΓ_r += (a q_r + l k_r) k_j e;
    //     as column j = r: dk_r += x, dΓ_r -= x k_r, x = (a q_i + l k_i) e;
    //     with a = scale dAqk_ij, l = β_i dL_ij, e = e^{Γ_i - Γ_j}. Plus dβ_i += Σ_j dL_ij KK_ij.
    FOR(e, C * K) {
        int r = e / K, c = e % K, x = r * LK + c;
        if (r < n) {
            float gr = Gs[x], kr = Ks[x], qr = Qs[x];
            float dqv = 0.0f, dkv = 0.0f, dgv = 0.0f;
            for (int jj = 0; jj <= r; jj++) {
                float ex = fexp(gr - Gs[jj * LK + c]), kj = Ks[jj * LK + c] * ex;
                float av = scale * dAqk[r * LC + jj], lv = bs[r] * dAkk[r * LC + jj];
                dqv += av * kj;
                dkv += lv * kj;
                dgv += (av * qr + lv * kr) * kj;
            }
            for (int i = r; i < n; i++) {
                float ex = fexp(Gs[i * LK + c] - gr);
                float av = scale * dAqk[i * LC + r], lv = bs[i] * dAkk[i * LC + r];
                float xv = (av * Qs[i * LK + c] + lv * Ks[i * LK + c]) * ex;
                dkv += xv;
                dgv -= xv * kr;
            }
            dq[x] += dqv;
            dk[x] += dkv;
            dG[x] += dgv;
        }
    }
    FOR(i, n) {
        float s = 0.0f;
        for (int jj = 0; jj < i; jj++)
            s += dAkk[i * LC + jj] * KK[i * LC + jj];
        dbs[i] += s;
    }
    sync_();

    // (8) write out: dg = reverse chunk-local cumsum of dΓ (with the Γ_last terms), dq, dk, dβ
    FOR(c, K) {
        float acc = dGl[c];
        for (int i = n - 1; i >= 0; i--) {
            acc += dG[i * LK + c];
            a.dg[g_at(a, p.b, p.t0 + i, p.j) + c] = acc;
        }
    }
    const int gva = a.HV != a.H, heads = gva ? a.HV : a.H, hw = gva ? p.j : p.hq;
    FOR(e, n * K) {
        int i = e / K, c = e % K;
        int64_t o = (((int64_t)p.b * a.T + p.t0 + i) * heads + hw) * K + c;
        a.dq[o] = dq[i * LK + c];
        a.dk[o] = dk[i * LK + c];
    }
    FOR(i, n) a.dbeta[beta_at(a, p.b, p.t0 + i, p.j)] = dbs[i];
}

// ---- device entry points ------------------------------------------------------------------------

template <class E> __global__ void __launch_bounds__(FAST_THREADS) intra_k(FastIo<E> a, bool bwd) {
    extern __shared__ float sm[];
    intra_body(a, blockIdx.x, sm, bwd);
}
__global__ void __launch_bounds__(FAST_THREADS) state_k(FastArgs a) {
    extern __shared__ float sm[];
    state_body(a, blockIdx.x, sm);
}
template <class E> __global__ void __launch_bounds__(FAST_THREADS) output_k(FastIo<E> a) {
    extern __shared__ float sm[];
    output_body(a, blockIdx.x, sm);
}
__global__ void __launch_bounds__(FAST_THREADS) state_bwd_k(FastBf a) {
    extern __shared__ float sm[];
    state_bwd_body(a, blockIdx.x, sm);
}
__global__ void __launch_bounds__(FAST_THREADS) bwd_k(FastBf a) {
    extern __shared__ float sm[];
    bwd_body(a, blockIdx.x, sm);
}

// ---- argument setup shared by the device and host drivers ---------------------------------------

size_t max_smem_bytes(const FastArgs &a) {
    size_t m = intra_floats(a.C, a.K, a.V, true);
    size_t s[] = {state_floats(a.C, a.K, a.Vt), output_floats(a.C, a.K, a.V),
                  bwd_floats(a.C, a.K, a.V, a.Vt)};
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++)
        if (s[i] > m) m = s[i];
    return m * sizeof(float);
}

// Launches `kern` on `blocks` blocks with `floats` of shared memory. With `ev` (kda_fast_profile)
// an event is recorded after the launch into *ev, which then advances.
template <typename... Args>
int launch(KdaCudaCtx *ctx, cudaEvent_t **ev, void (*kern)(Args...), int64_t blocks, size_t floats,
           Args... args) {
    size_t bytes = floats * sizeof(float);
    if (set_smem(ctx, (const void *)kern, bytes)) return -1;
    kern<<<(unsigned)blocks, FAST_THREADS, bytes, ctx->stream>>>(args...);
    CUDA_CHECK_LAUNCH(ctx);
    if (ev) CUDA_CHECK(ctx, cudaEventRecord(*(*ev)++, ctx->stream));
    return 0;
}

int prepare(KdaCudaCtx *ctx, FastArgs &a, const KdaDims *d) {
    a = chunk_args(d);
    KDA_CUDA_REQUIRE(ctx, kda_fast_supported(d, ctx->info.smem_per_block_optin));
    float *ws = (float *)kda_cuda_scratch(ctx, scratch_floats(a) * sizeof(float));
    if (!ws) return -1;
    carve(a, ws);
    return 0;
}

} // namespace

extern "C" int64_t kda_fast_chunk(int64_t K, int64_t V, size_t smem_optin) {
    // 32 first: half the intra-chunk work of 64 at K = 32 (performance.md §4.2), and the main
    // backward's shared memory (~100 KB at K = 32, V = 64) leaves room for two blocks per SM.
    for (int64_t C = 32; C >= 8; C /= 2) {
        KdaDims d = {1, C, 1, 1, K, V, 1.0f, C};
        if (kda_fast_supported(&d, smem_optin)) return C;
    }
    return 64;
}

extern "C" int kda_fast_supported(const KdaDims *d, size_t smem_optin) {
    if (d->chunk < 1 || d->chunk > 64 || d->K < 1 || d->V < 1 || d->H < 1 || d->HV % d->H) return 0;
    if (d->B * d->T * d->HV * (d->K > d->V ? d->K : d->V) >= ((int64_t)1 << 31)) return 0;
    FastArgs a = chunk_args(d);
    return max_smem_bytes(a) <= smem_optin;
}

namespace {
template <class E>
int fast_fwd(KdaCudaCtx *ctx, cudaEvent_t **ev, E *o, float *final_state, const E *q, const E *k,
             const E *v, const float *gcum, const float *beta, const float *init_state,
             const KdaDims *d, float *keep) {
    FastIo<E> a = {};
    if (prepare(ctx, a, d)) return -1;
    if (keep) keep_carve_hd(a, keep); // M0: h and Δ go to keep (h first)
    a.q = q, a.k = k, a.v = v, a.gcum = gcum, a.beta = beta, a.init_state = init_state;
    a.o = o, a.final_state = final_state;
    int64_t chunks = (int64_t)a.B * a.HV * a.NT, tiles = (int64_t)a.B * a.HV * (a.V / a.Vt);
    const FastArgs &base = a; // the state pass reads no q, k, v, o
    if (launch(ctx, ev, intra_k<E>, chunks, intra_floats(a.C, a.K, a.V, false), a, false) ||
        launch(ctx, ev, state_k, tiles, state_floats(a.C, a.K, a.Vt), base) ||
        launch(ctx, ev, output_k<E>, chunks, output_floats(a.C, a.K, a.V), a))
        return -1;
    return 0;
}

int fast_bwd(KdaCudaCtx *ctx, cudaEvent_t **ev, float *dq, float *dk, kda_bf16 *dv, float *dg,
             float *dbeta, float *dinit_state, const kda_bf16 *d_o, const float *dfinal_state,
             const kda_bf16 *q, const kda_bf16 *k, const kda_bf16 *v, const float *gcum,
             const float *beta, const float *init_state, const KdaDims *d, const float *kept) {
    FastBf a = {};
    if (prepare(ctx, a, d)) return -1;
    if (kept)
        keep_carve_hd(a, (float *)kept); // read only: the state pass that writes them is skipped
    a.q = q, a.k = k, a.v = v, a.dO = d_o, a.gcum = gcum, a.beta = beta;
    a.init_state = init_state, a.dfinal = dfinal_state;
    a.dv = dv, a.dg = dg, a.dbeta = dbeta, a.dinit = dinit_state;
    if (a.HV == a.H) a.dq = dq, a.dk = dk;
    int64_t chunks = (int64_t)a.B * a.HV * a.NT, tiles = (int64_t)a.B * a.HV * (a.V / a.Vt);
    const FastArgs &base = a;
    if (launch(ctx, ev, intra_k<kda_bf16>, chunks, intra_floats(a.C, a.K, a.V, true), a, true) ||
        (!kept && launch(ctx, ev, state_k, tiles, state_floats(a.C, a.K, a.Vt), base)) ||
        launch(ctx, ev, state_bwd_k, tiles, state_floats(a.C, a.K, a.Vt), a) ||
        launch(ctx, ev, bwd_k, chunks, bwd_floats(a.C, a.K, a.V, a.Vt), a))
        return -1;
    if (a.HV != a.H && gva_sum_launch(ctx, dq, dk, a)) return -1;
    if (ev) CUDA_CHECK(ctx, cudaEventRecord(*(*ev)++, ctx->stream));
    return 0;
}

} // namespace

extern "C" int kda_fast_fwd(KdaCudaCtx *ctx, kda_bf16 *o, float *final_state, const kda_bf16 *q,
                            const kda_bf16 *k, const kda_bf16 *v, const float *gcum,
                            const float *beta, const float *init_state, const KdaDims *d) {
    return fast_fwd(ctx, NULL, o, final_state, q, k, v, gcum, beta, init_state, d, NULL);
}

extern "C" int kda_fast_fwd_f32(KdaCudaCtx *ctx, float *o, float *final_state, const float *q,
                                const float *k, const float *v, const float *gcum,
                                const float *beta, const float *init_state, const KdaDims *d) {
    return fast_fwd(ctx, NULL, o, final_state, q, k, v, gcum, beta, init_state, d, (float *)NULL);
}

extern "C" size_t kda_fast_keep_floats(const KdaDims *d) {
    FastArgs a = chunk_args(d);
    size_t ch = (size_t)a.B * a.HV * a.NT;
    return ch * ((size_t)a.K * a.V + (size_t)a.C * a.V);
}

extern "C" int kda_fast_fwd_keep(KdaCudaCtx *ctx, kda_bf16 *o, float *final_state,
                                 const kda_bf16 *q, const kda_bf16 *k, const kda_bf16 *v,
                                 const float *gcum, const float *beta, const float *init_state,
                                 const KdaDims *d, float *keep) {
    KDA_CUDA_REQUIRE(ctx, keep != NULL);
    return fast_fwd(ctx, NULL, o, final_state, q, k, v, gcum, beta, init_state, d, keep);
}

extern "C" int kda_fast_bwd_kept(KdaCudaCtx *ctx, float *dq, float *dk, kda_bf16 *dv, float *dg,
                                 float *dbeta, float *dinit_state, const kda_bf16 *d_o,
                                 const float *dfinal_state, const kda_bf16 *q, const kda_bf16 *k,
                                 const kda_bf16 *v, const float *gcum, const float *beta,
                                 const float *init_state, const KdaDims *d, const float *kept) {
    KDA_CUDA_REQUIRE(ctx, kept != NULL);
    return fast_bwd(ctx, NULL, dq, dk, dv, dg, dbeta, dinit_state, d_o, dfinal_state, q, k, v, gcum,
                    beta, init_state, d, kept);
}

extern "C" int kda_fast_bwd(KdaCudaCtx *ctx, float *dq, float *dk, kda_bf16 *dv, float *dg,
                            float *dbeta, float *dinit_state, const kda_bf16 *d_o,
                            const float *dfinal_state, const kda_bf16 *q, const kda_bf16 *k,
                            const kda_bf16 *v, const float *gcum, const float *beta,
                            const float *init_state, const KdaDims *d) {
    return fast_bwd(ctx, NULL, dq, dk, dv, dg, dbeta, dinit_state, d_o, dfinal_state, q, k, v, gcum,
                    beta, init_state, d, NULL);
}

extern "C" int kda_fast_profile(KdaCudaCtx *ctx, const KdaDims *d, int reps, float ms[8]) {
    ProfileBufs p;
    if (profile_bufs_alloc(ctx, d, 0, &p)) return -1;
    int rc = profile_run(ctx, reps, 9, ms, [&](cudaEvent_t **e) {
        return fast_fwd(ctx, e, p.o, NULL, p.q, p.k, p.v, p.gcum, p.beta, NULL, d, NULL) ||
               fast_bwd(ctx, e, p.dq, p.dk, p.dv, p.dg, p.dbeta, NULL, p.dO, NULL, p.q, p.k, p.v,
                        p.gcum, p.beta, NULL, d, NULL);
    });
    profile_bufs_free(&p);
    return rc;
}

// ---- host emulation -----------------------------------------------------------------------------

namespace {
template <class E> struct HostRun {
    FastIo<E> a;
    float *ws, *sm;
    int64_t chunks, tiles;
};

template <class E> void host_begin(HostRun<E> *r, const KdaDims *d) {
    r->a = FastIo<E>{};
    static_cast<FastArgs &>(r->a) = chunk_args(d);
    r->ws = (float *)kda_calloc(scratch_floats(r->a), sizeof(float));
    r->sm = (float *)kda_calloc(max_smem_bytes(r->a) / sizeof(float), sizeof(float));
    carve(r->a, r->ws);
    r->chunks = (int64_t)r->a.B * r->a.HV * r->a.NT;
    r->tiles = (int64_t)r->a.B * r->a.HV * (r->a.V / r->a.Vt);
}
template <class E> void host_end(HostRun<E> *r) {
    free(r->ws);
    free(r->sm);
}

// The forward's three stages on the host, block after block.
template <class E>
void fwd_host(E *o, float *final_state, const E *q, const E *k, const E *v, const float *gcum,
              const float *beta, const float *init_state, const KdaDims *d, float *keep) {
    HostRun<E> r;
    host_begin(&r, d);
    FastIo<E> &a = r.a;
    if (keep) keep_carve_hd(a, keep); // M0: h and Δ go to keep (h first)
    a.q = q, a.k = k, a.v = v, a.gcum = gcum, a.beta = beta, a.init_state = init_state;
    a.o = o, a.final_state = final_state;
    for (int64_t b = 0; b < r.chunks; b++)
        intra_body(a, b, r.sm, false);
    for (int64_t b = 0; b < r.tiles; b++)
        state_body(a, b, r.sm);
    for (int64_t b = 0; b < r.chunks; b++)
        output_body(a, b, r.sm);
    host_end(&r);
}
} // namespace

extern "C" void kda_fast_fwd_host(kda_bf16 *o, float *final_state, const kda_bf16 *q,
                                  const kda_bf16 *k, const kda_bf16 *v, const float *gcum,
                                  const float *beta, const float *init_state, const KdaDims *d) {
    kda_fast_fwd_keep_host(o, final_state, q, k, v, gcum, beta, init_state, d, NULL);
}

extern "C" void kda_fast_fwd_keep_host(kda_bf16 *o, float *final_state, const kda_bf16 *q,
                                       const kda_bf16 *k, const kda_bf16 *v, const float *gcum,
                                       const float *beta, const float *init_state, const KdaDims *d,
                                       float *keep) {
    fwd_host(o, final_state, q, k, v, gcum, beta, init_state, d, keep);
}

extern "C" void kda_fast_fwd_f32_host(float *o, float *final_state, const float *q, const float *k,
                                      const float *v, const float *gcum, const float *beta,
                                      const float *init_state, const KdaDims *d) {
    fwd_host(o, final_state, q, k, v, gcum, beta, init_state, d, (float *)NULL);
}

extern "C" void kda_fast_bwd_host(float *dq, float *dk, kda_bf16 *dv, float *dg, float *dbeta,
                                  float *dinit_state, const kda_bf16 *d_o,
                                  const float *dfinal_state, const kda_bf16 *q, const kda_bf16 *k,
                                  const kda_bf16 *v, const float *gcum, const float *beta,
                                  const float *init_state, const KdaDims *d) {
    kda_fast_bwd_kept_host(dq, dk, dv, dg, dbeta, dinit_state, d_o, dfinal_state, q, k, v, gcum,
                           beta, init_state, d, NULL);
}

extern "C" void kda_fast_bwd_kept_host(float *dq, float *dk, kda_bf16 *dv, float *dg, float *dbeta,
                                       float *dinit_state, const kda_bf16 *d_o,
                                       const float *dfinal_state, const kda_bf16 *q,
                                       const kda_bf16 *k, const kda_bf16 *v, const float *gcum,
                                       const float *beta, const float *init_state, const KdaDims *d,
                                       const float *kept) {
    HostRun<kda_bf16> r;
    host_begin(&r, d);
    FastBf &a = r.a;
    if (kept) keep_carve_hd(a, (float *)kept);
    a.q = q, a.k = k, a.v = v, a.dO = d_o, a.gcum = gcum, a.beta = beta;
    a.init_state = init_state, a.dfinal = dfinal_state;
    a.dv = dv, a.dg = dg, a.dbeta = dbeta, a.dinit = dinit_state;
    if (a.HV == a.H) a.dq = dq, a.dk = dk;
    for (int64_t b = 0; b < r.chunks; b++)
        intra_body(a, b, r.sm, true);
    for (int64_t b = 0; b < r.tiles && !kept; b++)
        state_body(a, b, r.sm);
    for (int64_t b = 0; b < r.tiles; b++)
        state_bwd_body(a, b, r.sm);
    for (int64_t b = 0; b < r.chunks; b++)
        bwd_body(a, b, r.sm);
    if (a.HV != a.H) gva_sum_host(dq, dk, a);
    host_end(&r);
}
