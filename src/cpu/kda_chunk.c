// kda_chunk.c - the KDA delta rule in chunked WY/UT form (fp32 CPU reference): the algorithm
// the GPU runs, kda-model.md §6.1 (identities), §6.2 (forward structure), §6.3 (backward).
// It computes the same function as kda_recurrent.c; tests check both directions agree.
//
// Per (batch row, value head) the sequence is cut into chunks of C = d->chunk tokens (the last
// one may be shorter). Within a chunk of n rows with start state S0 (K x V):
//     G     = inclusive chunk-local cumsum of g                       [n, K]  (Gamma, <= 0)
//     Aqk   = scale q_i . (k_j * e^{G_i - G_j}),  j <= i               [n, n]
//     L     = beta_i k_i . (k_j * e^{G_i - G_j}),  j < i               [n, n]
//     Akk   = (I + L)^-1  (unit lower triangular, forward substitution)
//     u     = Akk (beta v),  w = Akk (beta k e^G)                      [n, V], [n, K]
//     D     = u - w S0      (the deltas of all rows)                   [n, V]
//     o     = (scale q e^G) S0 + Aqk D                                  [n, V]
//     S_end = Diag(e^{G_last}) S0 + (k e^{G_last - G})^T D
// Every exponent is a difference G_i - G_j (j <= i), G_i - 0 or G_last - G_i, all <= 0, so no
// exponential can overflow however strong the decay. The backward recomputes the chunk-start
// states, then walks the chunks in reverse carrying dS (the state gradient) and differentiates
// each line above, including the inverse: dL = -Akk^T dAkk Akk^T on the strict lower triangle.
//
// OpenMP runs one (row, value head) per iteration; GVA dq/dk are summed afterwards in fixed
// order (kda_sum_gva), so results do not depend on the thread count.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"            // defines: kda_malloc, KDA_ASSERT
#include "cpu/kda_core.h"          // defines: KdaDims, kda_chunk_*
#include "cpu/kda_core_internal.h" // defines: kda_*_at, kda_qk_head, kda_sum_gva

// ---- small vector kernels ----------------------------------------------------------------------
// `omp simd` lets the compiler vectorize these at -O2 (and fixes their summation order for a
// given build, so results stay deterministic).

static inline void axpy(float *restrict y, float a, const float *restrict x, int64_t n) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++)
        y[i] += a * x[i]; // y += a x
}

static inline float dot(const float *restrict x, const float *restrict y, int64_t n) {
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; i++)
        s += x[i] * y[i];
    return s;
}

// ---- per-thread chunk workspace ----------------------------------------------------------------

typedef struct {
    int64_t C, K, V; // max rows per chunk, key dim, value dim
    int64_t n;       // rows in the current chunk (1..C)
    float scale;
    // inputs of the current chunk, gathered contiguously
    float *q, *k; // [C, K]
    float *v;     // [C, V]
    float *beta;  // [C]
    float *G;     // [C, K] Gamma: chunk-local inclusive cumsum of g
    // forward intermediates (§6.1)
    float *eG;  // [C, K] e^{G_i}            (<= 1)
    float *eL;  // [C, K] e^{G_last - G_i}   (<= 1)
    float *Aqk; // [C, C] scale-included, lower triangle with diagonal
    float *E;   // [C, C, K] e^{G_i - G_j} for j <= i (<= 1), kept for the backward
    float *KK;  // [C, C] k_i . (k_j e^{G_i - G_j}), strict lower (L without beta)
    float *L;   // [C, C] beta_i KK, strict lower
    float *Akk; // [C, C] (I + L)^-1
    float *Vb;  // [C, V] beta v
    float *Kb;  // [C, K] beta k e^G
    float *u;   // [C, V]
    float *w;   // [C, K]
    float *D;   // [C, V] Delta
    // backward scratch
    float *dO, *dD, *dVb;           // [C, V]
    float *dq, *dk, *dG, *dw, *dKb; // [C, K]
    float *dAqk, *dAkk, *M, *dL;    // [C, C]
    float *dbeta;                   // [C]
    float *dS_new;                  // [K, V]
    float *mem;
} ChunkWork;

static void work_init(ChunkWork *w, const KdaDims *d, int64_t C) {
    int64_t K = d->K, V = d->V;
    size_t n = (size_t)(C * (2 * K + V + 1 + K + 2 * K + 4 * C + C * K + V + K + V + K + V) +
                        C * (3 * V + 5 * K + 4 * C + 1) + K * V); // backward
    float *p = w->mem = kda_calloc(n, sizeof(float));
    w->C = C, w->K = K, w->V = V, w->n = 0, w->scale = d->scale;
#define TAKE(field, count) (w->field = p, p += (count))
    TAKE(q, C * K), TAKE(k, C * K), TAKE(v, C * V), TAKE(beta, C), TAKE(G, C * K);
    TAKE(eG, C * K), TAKE(eL, C * K), TAKE(Aqk, C * C), TAKE(E, C * C * K), TAKE(KK, C * C);
    TAKE(L, C * C);
    TAKE(Akk, C * C), TAKE(Vb, C * V), TAKE(Kb, C * K), TAKE(u, C * V), TAKE(w, C * K);
    TAKE(D, C * V);
    TAKE(dO, C * V), TAKE(dD, C * V), TAKE(dVb, C * V);
    TAKE(dq, C * K), TAKE(dk, C * K), TAKE(dG, C * K), TAKE(dw, C * K), TAKE(dKb, C * K);
    TAKE(dAqk, C * C), TAKE(dAkk, C * C), TAKE(M, C * C), TAKE(dL, C * C);
    TAKE(dbeta, C), TAKE(dS_new, K * V);
#undef TAKE
    KDA_ASSERT((size_t)(p - w->mem) == n);
}

static void work_free(ChunkWork *w) {
    free(w->mem);
    w->mem = NULL;
}

// Copies chunk rows [t0, t0 + n) of row b, value head j into the workspace.
static void work_gather(ChunkWork *w, const KdaDims *d, int64_t b, int64_t j, int64_t t0, int64_t n,
                        const float *q, const float *k, const float *v, const float *g,
                        const float *beta) {
    int64_t K = w->K, V = w->V, h = kda_qk_head(d, j);
    w->n = n;
    for (int64_t i = 0; i < n; i++) {
        memcpy(w->q + i * K, q + kda_qk_at(d, b, t0 + i, h), (size_t)K * sizeof(float));
        memcpy(w->k + i * K, k + kda_qk_at(d, b, t0 + i, h), (size_t)K * sizeof(float));
        memcpy(w->v + i * V, v + kda_v_at(d, b, t0 + i, j), (size_t)V * sizeof(float));
        w->beta[i] = beta[kda_beta_at(d, b, t0 + i, j)];
        // Gamma_i = Gamma_{i-1} + g_i: fp32 chunk-local inclusive cumsum (§6.1, §6.2 step 2)
        const float *gi = g + kda_g_at(d, b, t0 + i, j);
        for (int64_t c = 0; c < K; c++)
            w->G[i * K + c] = (i ? w->G[(i - 1) * K + c] : 0.0f) + gi[c];
    }
}

// ---- forward: the identities of §6.1 -----------------------------------------------------------

// Everything of §6.1 up to Delta, for the chunk in w and its start state S0 [K, V].
static void chunk_prepare(ChunkWork *w, const float *S0) {
    int64_t n = w->n, C = w->C, K = w->K, V = w->V;
    const float *Glast = w->G + (n - 1) * K;
    // Decay factors relative to the chunk start and to the chunk end, both <= 1.
    for (int64_t i = 0; i < n; i++)
        for (int64_t c = 0; c < K; c++) {
            w->eG[i * K + c] = expf(w->G[i * K + c]);
            w->eL[i * K + c] = expf(Glast[c] - w->G[i * K + c]);
        }
    // Aqk[i, j] = scale sum_c q_i k_j e^{G_i - G_j} (j <= i) and
    // KK[i, j] = sum_c k_i k_j e^{G_i - G_j} (j < i); L = beta_i KK.
    for (int64_t i = 0; i < n; i++) {
        const float *qi = w->q + i * K, *ki = w->k + i * K, *Gi = w->G + i * K;
        for (int64_t j = 0; j <= i; j++) {
            const float *kj = w->k + j * K, *Gj = w->G + j * K;
            float *e = w->E + (i * C + j) * K;
            for (int64_t c = 0; c < K; c++)
                e[c] = expf(Gi[c] - Gj[c]); // exponent <= 0
            float aqk = 0.0f, kk = 0.0f;
#pragma omp simd reduction(+ : aqk, kk)
            for (int64_t c = 0; c < K; c++) {
                aqk += qi[c] * kj[c] * e[c];
                kk += ki[c] * kj[c] * e[c];
            }
            w->Aqk[i * C + j] = w->scale * aqk;
            w->KK[i * C + j] = j < i ? kk : 0.0f;
            w->L[i * C + j] = j < i ? w->beta[i] * kk : 0.0f;
        }
    }
    // Akk = (I + L)^-1 by forward substitution: (I + L) Akk = I gives row by row
    // Akk[i, :] = e_i - sum_{m < i} L[i, m] Akk[m, :]  (rows m < i are already final).
    for (int64_t i = 0; i < n; i++) {
        float *Ai = w->Akk + i * C;
        memset(Ai, 0, (size_t)n * sizeof(float));
        Ai[i] = 1.0f;
        for (int64_t m = 0; m < i; m++) {
            float a = w->L[i * C + m];
            axpy(Ai, -a, w->Akk + m * C, m + 1); // Akk[m, :] is zero past column m
        }
    }
    // WY/UT transform: u = Akk (beta v), w = Akk (beta k e^G); Akk is lower triangular.
    for (int64_t i = 0; i < n; i++) {
        for (int64_t e = 0; e < V; e++)
            w->Vb[i * V + e] = w->beta[i] * w->v[i * V + e];
        for (int64_t c = 0; c < K; c++)
            w->Kb[i * K + c] = w->beta[i] * w->k[i * K + c] * w->eG[i * K + c];
    }
    for (int64_t i = 0; i < n; i++) {
        float *ui = w->u + i * V, *wi = w->w + i * K;
        memset(ui, 0, (size_t)V * sizeof(float));
        memset(wi, 0, (size_t)K * sizeof(float));
        for (int64_t m = 0; m <= i; m++) {
            float a = w->Akk[i * C + m];
            axpy(ui, a, w->Vb + m * V, V);
            axpy(wi, a, w->Kb + m * K, K);
        }
    }
    // Delta = u - w S0
    for (int64_t i = 0; i < n; i++) {
        float *Di = w->D + i * V;
        memcpy(Di, w->u + i * V, (size_t)V * sizeof(float));
        for (int64_t c = 0; c < K; c++)
            axpy(Di, -w->w[i * K + c], S0 + c * V, V);
    }
}

// o = (scale q e^G) S0 + Aqk Delta, written to o (token stride ostride).
static void chunk_output(const ChunkWork *w, const float *S0, float *o, int64_t ostride) {
    int64_t C = w->C, K = w->K, V = w->V;
    for (int64_t i = 0; i < w->n; i++) {
        float *oi = o + i * ostride;
        memset(oi, 0, (size_t)V * sizeof(float));
        for (int64_t c = 0; c < K; c++) { // inter-chunk part: the start state, decayed to row i
            axpy(oi, w->scale * w->q[i * K + c] * w->eG[i * K + c], S0 + c * V, V);
        }
        for (int64_t j = 0; j <= i; j++)
            axpy(oi, w->Aqk[i * C + j], w->D + j * V, V); // intra
    }
}

// S <- S_end = Diag(e^{G_last}) S + (k e^{G_last - G})^T Delta, in place.
static void chunk_state_update(const ChunkWork *w, float *S) {
    int64_t K = w->K, V = w->V;
    const float *Glast = w->G + (w->n - 1) * K;
    for (int64_t c = 0; c < K; c++) {
        float a = expf(Glast[c]);
#pragma omp simd
        for (int64_t e = 0; e < V; e++)
            S[c * V + e] *= a;
    }
    for (int64_t i = 0; i < w->n; i++)
        for (int64_t c = 0; c < K; c++)
            axpy(S + c * V, w->k[i * K + c] * w->eL[i * K + c], w->D + i * V, V);
}

static int64_t chunk_size(const KdaDims *d) {
    return d->chunk > 0 ? d->chunk : 64;
}

void kda_chunk_fwd(float *o, float *final_state, const float *q, const float *k, const float *v,
                   const float *g, const float *beta, const float *init_state, const KdaDims *d) {
    KDA_ASSERT(d->H > 0 && d->HV % d->H == 0);
    int64_t C = chunk_size(d), KV = d->K * d->V;
#pragma omp parallel for schedule(static) if (kda_par_worth(d))
    for (int64_t bj = 0; bj < d->B * d->HV; bj++) {
        int64_t b = bj / d->HV, j = bj % d->HV;
        ChunkWork w;
        work_init(&w, d, C);
        float *S = kda_malloc((size_t)KV * sizeof(float));
        if (init_state)
            memcpy(S, init_state + kda_state_at(d, b, j), (size_t)KV * sizeof(float));
        else
            memset(S, 0, (size_t)KV * sizeof(float));
        // State pass over chunks (§6.2 step 5): S is the chunk-start state, then the chunk end.
        for (int64_t t0 = 0; t0 < d->T; t0 += C) {
            int64_t n = d->T - t0 < C ? d->T - t0 : C;
            work_gather(&w, d, b, j, t0, n, q, k, v, g, beta);
            chunk_prepare(&w, S);
            chunk_output(&w, S, o + kda_v_at(d, b, t0, j), d->HV * d->V);
            chunk_state_update(&w, S);
        }
        if (final_state) memcpy(final_state + kda_state_at(d, b, j), S, (size_t)KV * sizeof(float));
        free(S);
        work_free(&w);
    }
}

// ---- backward: §6.3 ----------------------------------------------------------------------------

// Backward of one chunk with start state S0. On entry dS is the gradient w.r.t. the chunk's end
// state; on exit the gradient w.r.t. S0. Fills w->dq, dk, dG (dLoss/dGamma), dVb (-> dv), dbeta.
static void chunk_backward(ChunkWork *w, const float *S0, float *dS) {
    int64_t n = w->n, C = w->C, K = w->K, V = w->V;
    float scale = w->scale;
    const float *Glast = w->G + (n - 1) * K;
    float *dGlast = w->dG + (n - 1) * K;
    memset(w->dq, 0, (size_t)(n * K) * sizeof(float));
    memset(w->dk, 0, (size_t)(n * K) * sizeof(float));
    memset(w->dG, 0, (size_t)(n * K) * sizeof(float));
    memset(w->dbeta, 0, (size_t)n * sizeof(float));

    // (1) dAqk = mask_{j<=i}(dO Delta^T): gradient of the (scaled) score.
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j <= i; j++)
            w->dAqk[i * C + j] = dot(w->dO + i * V, w->D + j * V, V);
    // (2) dDelta = Aqk^T dO + (k e^{G_last - G}) dS_end
    for (int64_t i = 0; i < n; i++) {
        float *dDi = w->dD + i * V;
        memset(dDi, 0, (size_t)V * sizeof(float));
        for (int64_t m = i; m < n; m++)
            axpy(dDi, w->Aqk[m * C + i], w->dO + m * V, V);
        for (int64_t c = 0; c < K; c++)
            axpy(dDi, w->k[i * K + c] * w->eL[i * K + c], dS + c * V, V);
    }
    // (3) inter-chunk parts of dq, dk, dGamma; dw = -dDelta S0^T.
    for (int64_t i = 0; i < n; i++)
        for (int64_t c = 0; c < K; c++) {
            float so = 0.0f, sd = 0.0f, sw = 0.0f;
#pragma omp simd reduction(+ : so, sd, sw)
            for (int64_t e = 0; e < V; e++) {
                so += w->dO[i * V + e] * S0[c * V + e]; // (dO S0^T)[i, c]
                sd += w->D[i * V + e] * dS[c * V + e];  // (Delta dS_end^T)[i, c]
                sw += w->dD[i * V + e] * S0[c * V + e]; // (dDelta S0^T)[i, c]
            }
            // o has (scale q_i e^{G_i}) S0: d q = scale e^G so; dGamma_i += q_i dq_i
            float dqi = scale * w->eG[i * K + c] * so;
            w->dq[i * K + c] += dqi;
            w->dG[i * K + c] += w->q[i * K + c] * dqi;
            // S_end has (k_i e^{G_last - G_i})^T Delta: dk = e^{..} sd; the exponent's gradient
            // goes +to G_last and -to G_i.
            float tk = w->k[i * K + c] * w->eL[i * K + c] * sd;
            w->dk[i * K + c] += w->eL[i * K + c] * sd;
            w->dG[i * K + c] -= tk;
            dGlast[c] += tk;
            w->dw[i * K + c] = -sw;
        }
    // (4) S_end = Diag(e^{G_last}) S0 + ...: dGamma_last += e^{G_last} sum_v dS_end S0.
    //     New state gradient: dS0 = (scale q e^G)^T dO + Diag(e^{G_last}) dS_end - w^T dDelta.
    for (int64_t c = 0; c < K; c++) {
        float a = expf(Glast[c]), acc = 0.0f;
        float *row = w->dS_new + c * V;
#pragma omp simd reduction(+ : acc)
        for (int64_t e = 0; e < V; e++) {
            acc += dS[c * V + e] * S0[c * V + e];
            row[e] = a * dS[c * V + e];
        }
        dGlast[c] += a * acc;
        for (int64_t i = 0; i < n; i++) {
            axpy(row, scale * w->q[i * K + c] * w->eG[i * K + c], w->dO + i * V, V);
            axpy(row, -w->w[i * K + c], w->dD + i * V, V);
        }
    }
    memcpy(dS, w->dS_new, (size_t)(K * V) * sizeof(float));

    // (5) WY backward. u = Akk Vb, w = Akk Kb with du = dDelta:
    //     dAkk = dDelta Vb^T + dw Kb^T (strict lower part only: the rest of Akk is constant),
    //     dVb = Akk^T dDelta, dKb = Akk^T dw.
    for (int64_t i = 0; i < n; i++) {
        for (int64_t j = 0; j < i; j++)
            w->dAkk[i * C + j] =
                dot(w->dD + i * V, w->Vb + j * V, V) + dot(w->dw + i * K, w->Kb + j * K, K);
        for (int64_t j = i; j < n; j++)
            w->dAkk[i * C + j] = 0.0f;
    }
    for (int64_t m = 0; m < n; m++) {
        float *dVm = w->dVb + m * V, *dKm = w->dKb + m * K;
        memset(dVm, 0, (size_t)V * sizeof(float));
        memset(dKm, 0, (size_t)K * sizeof(float));
        for (int64_t i = m; i < n; i++) {
            axpy(dVm, w->Akk[i * C + m], w->dD + i * V, V);
            axpy(dKm, w->Akk[i * C + m], w->dw + i * K, K);
        }
    }
    //     Vb = beta v: dv = beta dVb (done by the caller), dbeta += v . dVb.
    //     Kb = beta k e^G: dk += beta e^G dKb, dbeta += (k e^G) . dKb, dGamma += Kb dKb.
    for (int64_t i = 0; i < n; i++) {
        double db = 0.0;
        for (int64_t e = 0; e < V; e++)
            db += (double)w->v[i * V + e] * w->dVb[i * V + e];
        for (int64_t c = 0; c < K; c++) {
            float dkb = w->dKb[i * K + c], eg = w->eG[i * K + c];
            db += (double)w->k[i * K + c] * eg * dkb;
            w->dk[i * K + c] += w->beta[i] * eg * dkb;
            w->dG[i * K + c] += w->Kb[i * K + c] * dkb;
        }
        w->dbeta[i] += (float)db;
    }
    // (6) Gradient through the inverse Akk = (I + L)^-1: dL = -Akk^T dAkk Akk^T, kept on the
    //     strict lower triangle (L has nothing else). M = Akk^T dAkk, then dL = -M Akk^T.
    for (int64_t i = 0; i < n; i++) { // M[i, :] = sum_{m >= i} Akk[m, i] dAkk[m, :]
        float *Mi = w->M + i * C;
        memset(Mi, 0, (size_t)n * sizeof(float));
        for (int64_t m = i; m < n; m++)
            axpy(Mi, w->Akk[m * C + i], w->dAkk + m * C, m); // strict lower
    }
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < i; j++)
            w->dL[i * C + j] = -dot(w->M + i * C, w->Akk + j * C, j + 1);
    // (7) Intra-chunk backward of Aqk (j <= i) and L = beta_i KK (j < i), pair by pair:
    //     with e = e^{G_i - G_j}, a = dAqk_ij scale and l = dL_ij beta_i,
    //     dq_i += a k_j e;  dk_j += (a q_i + l k_i) e;  dk_i += l k_j e;
    //     dGamma_i += (a q_i + l k_i) k_j e;  dGamma_j -= the same;  dbeta_i += dL_ij KK_ij.
    for (int64_t i = 0; i < n; i++) {
        const float *qi = w->q + i * K, *ki = w->k + i * K;
        float *dqi = w->dq + i * K, *dki = w->dk + i * K, *dGi = w->dG + i * K;
        double db = 0.0;
        for (int64_t j = 0; j <= i; j++) {
            const float *kj = w->k + j * K, *e = w->E + (i * C + j) * K; // e^{G_i - G_j}
            float *dkj = w->dk + j * K, *dGj = w->dG + j * K;
            float a = scale * w->dAqk[i * C + j];
            float dl = j < i ? w->dL[i * C + j] : 0.0f, l = dl * w->beta[i];
#pragma omp simd
            for (int64_t c = 0; c < K; c++) {
                float x = (a * qi[c] + l * ki[c]) * e[c];
                dqi[c] += a * kj[c] * e[c];
                dkj[c] += x;
                dki[c] += l * kj[c] * e[c];
                dGi[c] += x * kj[c];
                dGj[c] -= x * kj[c];
            }
            db += (double)dl * w->KK[i * C + j];
        }
        w->dbeta[i] += (float)db;
    }
}

void kda_chunk_bwd(float *dq, float *dk, float *dv, float *dg, float *dbeta, float *dinit_state,
                   const float *d_o, const float *dfinal_state, const float *q, const float *k,
                   const float *v, const float *g, const float *beta, const float *init_state,
                   const KdaDims *d) {
    KDA_ASSERT(d->H > 0 && d->HV % d->H == 0);
    int64_t C = chunk_size(d), K = d->K, V = d->V, KV = K * V, NT = (d->T + C - 1) / C;
    int gva = d->HV != d->H;
    size_t nqv = (size_t)(d->B * d->T * d->HV * K);
    float *dq_v = gva ? kda_malloc(nqv * sizeof(float)) : dq; // [B, T, HV, K] before the GVA sum
    float *dk_v = gva ? kda_malloc(nqv * sizeof(float)) : dk;
    KdaDims vd = *d;
    vd.H = d->HV;

#pragma omp parallel for schedule(static) if (kda_par_worth(d))
    for (int64_t bj = 0; bj < d->B * d->HV; bj++) {
        int64_t b = bj / d->HV, j = bj % d->HV;
        ChunkWork w;
        work_init(&w, d, C);
        // h[c] = start state of chunk c (NT states), then dS (the running state gradient).
        float *h = kda_malloc((size_t)((NT + 1) * KV + KV) * sizeof(float));
        float *dS = h + (NT + 1) * KV;
        // (§6.3 step 1) Recompute the chunk-start states with the forward state pass.
        if (init_state)
            memcpy(h, init_state + kda_state_at(d, b, j), (size_t)KV * sizeof(float));
        else
            memset(h, 0, (size_t)KV * sizeof(float));
        for (int64_t c = 0; c < NT; c++) {
            int64_t t0 = c * C, n = d->T - t0 < C ? d->T - t0 : C;
            work_gather(&w, d, b, j, t0, n, q, k, v, g, beta);
            chunk_prepare(&w, h + c * KV);
            memcpy(h + (c + 1) * KV, h + c * KV, (size_t)KV * sizeof(float));
            chunk_state_update(&w, h + (c + 1) * KV);
        }
        // (§6.3 step 3) Reverse state pass: dS starts at the final-state gradient.
        if (dfinal_state)
            memcpy(dS, dfinal_state + kda_state_at(d, b, j), (size_t)KV * sizeof(float));
        else
            memset(dS, 0, (size_t)KV * sizeof(float));
        for (int64_t c = NT - 1; c >= 0; c--) {
            int64_t t0 = c * C, n = d->T - t0 < C ? d->T - t0 : C;
            work_gather(&w, d, b, j, t0, n, q, k, v, g, beta);
            chunk_prepare(&w, h + c * KV); // recompute this chunk's intermediates
            for (int64_t i = 0; i < n; i++)
                memcpy(w.dO + i * V, d_o + kda_v_at(d, b, t0 + i, j), (size_t)V * sizeof(float));
            chunk_backward(&w, h + c * KV, dS);
            // Scatter; dg = reverse chunk-local cumsum of dGamma (§6.3 step 7).
            float *dgacc = w.dS_new; // K floats of scratch (dS_new is free again here)
            memset(dgacc, 0, (size_t)K * sizeof(float));
            for (int64_t i = n - 1; i >= 0; i--) {
                int64_t t = t0 + i;
                float *dgt = dg + kda_g_at(d, b, t, j), *dvt = dv + kda_v_at(d, b, t, j);
                for (int64_t cc = 0; cc < K; cc++)
                    dgt[cc] = dgacc[cc] += w.dG[i * K + cc];
                for (int64_t e = 0; e < V; e++)
                    dvt[e] = w.beta[i] * w.dVb[i * V + e];
                memcpy(dq_v + kda_qk_at(&vd, b, t, j), w.dq + i * K, (size_t)K * sizeof(float));
                memcpy(dk_v + kda_qk_at(&vd, b, t, j), w.dk + i * K, (size_t)K * sizeof(float));
                dbeta[kda_beta_at(d, b, t, j)] = w.dbeta[i];
            }
        }
        if (dinit_state)
            memcpy(dinit_state + kda_state_at(d, b, j), dS, (size_t)KV * sizeof(float));
        free(h);
        work_free(&w);
    }
    if (gva) {
        kda_sum_gva(dq, dq_v, d);
        kda_sum_gva(dk, dk_v, d);
        free(dq_v);
        free(dk_v);
    }
}
