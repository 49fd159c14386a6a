// kda_recurrent.c - the KDA delta rule with per-channel decay, token by token (fp32 CPU
// reference): forward per kda-model.md §5.3 step 10, backward per §6.4.
//
// Per (batch row, value head) the state S in R^{K x V} evolves as
//     S~_t = Diag(alpha_t) S_{t-1}          alpha_t = exp(g_t)       (decay)
//     r_t  = S~_t^T k_t                                               (predict)
//     d_t  = beta_t (v_t - r_t)                                       (delta)
//     S_t  = S~_t + k_t d_t^T                                         (update)
//     o_t  = S_t^T (scale q_t)                                        (read AFTER the update)
// The backward stores every S_t (memory (T+1) K V floats per thread: fine at reference sizes).
// OpenMP runs one (row, value head) per iteration; dq/dk of grouped value heads (GVA) go through
// a per-value-head buffer summed in fixed order, so results do not depend on the thread count.
#include <stdlib.h>
#include <string.h>

#include "core/error.h"            // defines: kda_malloc, kda_calloc, KDA_ASSERT
#include "cpu/kda_core.h"          // defines: KdaDims, kda_recurrent_*
#include "cpu/kda_core_internal.h" // defines: kda_*_at, kda_qk_head, kda_sum_gva
#include <math.h>

// ---- GVA reduction (§5.8) ----------------------------------------------------------------------

void kda_sum_gva(float *dst, const float *src, const KdaDims *d) {
    int64_t group = d->HV / d->H;
#pragma omp parallel for schedule(static) if (kda_par_worth(d))
    for (int64_t bt = 0; bt < d->B * d->T; bt++) {
        for (int64_t h = 0; h < d->H; h++) {
            float *o = dst + ((size_t)bt * d->H + h) * d->K;
            for (int64_t c = 0; c < d->K; c++)
                o[c] = 0.0f;
            for (int64_t jj = 0; jj < group; jj++) {
                const float *s = src + ((size_t)bt * d->HV + h * group + jj) * d->K;
                for (int64_t c = 0; c < d->K; c++)
                    o[c] += s[c];
            }
        }
    }
}

// ---- forward (§5.3 step 10) --------------------------------------------------------------------

// Predict with the decayed state S~ [K, V]: r = S~^T k; delta: d = beta (v - r). The forward's
// step and the backward's recompute of it (the same loops, so the same bits).
static void predict_delta_(float *r, float *delta, const float *S, const float *k, const float *v,
                           float beta, int64_t K, int64_t V) {
    for (int64_t e = 0; e < V; e++)
        r[e] = 0.0f;
    for (int64_t c = 0; c < K; c++)
        for (int64_t e = 0; e < V; e++)
            r[e] += S[c * V + e] * k[c];
    for (int64_t e = 0; e < V; e++)
        delta[e] = beta * (v[e] - r[e]);
}

// One token of one value head (declared in kda_core_internal.h, shared with the decode step of
// kda_step.c): S <- S_t from S_{t-1}; writes r_t (the prediction) and d_t (the delta).
void kda_recurrent_head_step(float *S, float *r, float *delta, const float *q, const float *k,
                             const float *v, const float *g, float beta, float scale, float *o,
                             int64_t K, int64_t V) {
    // decay: S~ = Diag(exp(g)) S
    for (int64_t c = 0; c < K; c++) {
        float a = expf(g[c]);
        for (int64_t e = 0; e < V; e++)
            S[c * V + e] *= a;
    }
    predict_delta_(r, delta, S, k, v, beta, K, V);
    // update: S = S~ + k d^T
    for (int64_t c = 0; c < K; c++)
        for (int64_t e = 0; e < V; e++)
            S[c * V + e] += k[c] * delta[e];
    // output reads the updated state: o = S^T (scale q)
    if (o) {
        for (int64_t e = 0; e < V; e++)
            o[e] = 0.0f;
        for (int64_t c = 0; c < K; c++) {
            float qc = scale * q[c];
            for (int64_t e = 0; e < V; e++)
                o[e] += S[c * V + e] * qc;
        }
    }
}

void kda_recurrent_fwd(float *o, float *final_state, const float *q, const float *k, const float *v,
                       const float *g, const float *beta, const float *init_state,
                       const KdaDims *d) {
    KDA_ASSERT(d->H > 0 && d->HV % d->H == 0);
    int64_t K = d->K, V = d->V;
#pragma omp parallel for schedule(static) if (kda_par_worth(d))
    for (int64_t bj = 0; bj < d->B * d->HV; bj++) {
        int64_t b = bj / d->HV, j = bj % d->HV, h = kda_qk_head(d, j);
        float *S = kda_malloc((size_t)(K * V + 2 * V) * sizeof(float));
        float *r = S + K * V, *delta = r + V;
        if (init_state)
            memcpy(S, init_state + kda_state_at(d, b, j), (size_t)(K * V) * sizeof(float));
        else
            memset(S, 0, (size_t)(K * V) * sizeof(float));
        for (int64_t t = 0; t < d->T; t++)
            kda_recurrent_head_step(S, r, delta, q + kda_qk_at(d, b, t, h),
                                    k + kda_qk_at(d, b, t, h), v + kda_v_at(d, b, t, j),
                                    g + kda_g_at(d, b, t, j), beta[kda_beta_at(d, b, t, j)],
                                    d->scale, o + kda_v_at(d, b, t, j), K, V);
        if (final_state)
            memcpy(final_state + kda_state_at(d, b, j), S, (size_t)(K * V) * sizeof(float));
        free(S);
    }
}

// ---- backward (§6.4) ---------------------------------------------------------------------------

void kda_recurrent_bwd(float *dq, float *dk, float *dv, float *dg, float *dbeta, float *dinit_state,
                       const float *d_o, const float *dfinal_state, const float *q, const float *k,
                       const float *v, const float *g, const float *beta, const float *init_state,
                       const KdaDims *d) {
    KDA_ASSERT(d->H > 0 && d->HV % d->H == 0);
    int64_t K = d->K, V = d->V, T = d->T, KV = K * V;
    // With GVA, dq/dk are first written per value head ([B, T, HV, K]) and summed afterwards.
    int gva = d->HV != d->H;
    size_t nqv = (size_t)(d->B * T * d->HV * K);
    float *dq_v = gva ? kda_malloc(nqv * sizeof(float)) : dq;
    float *dk_v = gva ? kda_malloc(nqv * sizeof(float)) : dk;
    KdaDims dv_dims = *d; // dq_v/dk_v layout: q/k layout with HV heads
    dv_dims.H = d->HV;

#pragma omp parallel for schedule(static) if (kda_par_worth(d))
    for (int64_t bj = 0; bj < d->B * d->HV; bj++) {
        int64_t b = bj / d->HV, j = bj % d->HV, h = kda_qk_head(d, j);
        // Sall[t] = S_t for t = 0..T (S_0 = initial state); scratch: G, S~, r, delta, ddelta, dr.
        float *Sall = kda_malloc((size_t)((T + 1) * KV + 2 * KV + 4 * V) * sizeof(float));
        float *G = Sall + (T + 1) * KV, *St = G + KV, *r = St + KV, *delta = r + V;
        float *ddelta = delta + V, *dr = ddelta + V;
        if (init_state)
            memcpy(Sall, init_state + kda_state_at(d, b, j), (size_t)KV * sizeof(float));
        else
            memset(Sall, 0, (size_t)KV * sizeof(float));
        for (int64_t t = 0; t < T; t++) {
            memcpy(Sall + (t + 1) * KV, Sall + t * KV, (size_t)KV * sizeof(float));
            kda_recurrent_head_step(Sall + (t + 1) * KV, r, delta, q + kda_qk_at(d, b, t, h),
                                    k + kda_qk_at(d, b, t, h), v + kda_v_at(d, b, t, j),
                                    g + kda_g_at(d, b, t, j), beta[kda_beta_at(d, b, t, j)],
                                    d->scale, NULL, K, V);
        }
        // G = dLoss/dS_t, starting from the final-state gradient at t = T.
        if (dfinal_state)
            memcpy(G, dfinal_state + kda_state_at(d, b, j), (size_t)KV * sizeof(float));
        else
            memset(G, 0, (size_t)KV * sizeof(float));

        for (int64_t t = T - 1; t >= 0; t--) {
            const float *qt = q + kda_qk_at(d, b, t, h), *kt = k + kda_qk_at(d, b, t, h);
            const float *vt = v + kda_v_at(d, b, t, j), *gt = g + kda_g_at(d, b, t, j);
            const float *dot = d_o + kda_v_at(d, b, t, j);
            const float *S = Sall + (t + 1) * KV, *Sp = Sall + t * KV;
            float bt = beta[kda_beta_at(d, b, t, j)];
            float *dqt = dq_v + kda_qk_at(&dv_dims, b, t, j),
                  *dkt = dk_v + kda_qk_at(&dv_dims, b, t, j);
            float *dvt = dv + kda_v_at(d, b, t, j), *dgt = dg + kda_g_at(d, b, t, j);

            // Recompute S~_t = Diag(alpha_t) S_{t-1}, r_t = S~_t^T k_t and v_t - r_t.
            for (int64_t c = 0; c < K; c++) {
                float a = expf(gt[c]);
                for (int64_t e = 0; e < V; e++)
                    St[c * V + e] = a * Sp[c * V + e];
            }
            predict_delta_(r, delta, St, kt, vt, bt, K, V);

            // o_t = S_t^T (scale q_t):  G += (scale q_t) do_t^T;  dq_t = scale S_t do_t
            for (int64_t c = 0; c < K; c++) {
                float qc = d->scale * qt[c], acc = 0.0f;
                for (int64_t e = 0; e < V; e++) {
                    G[c * V + e] += qc * dot[e];
                    acc += S[c * V + e] * dot[e];
                }
                dqt[c] = d->scale * acc;
            }
            // S_t = S~_t + k_t d_t^T:  dd_t = G^T k_t;  dk_t = G d_t;  dS~_t = G
            for (int64_t e = 0; e < V; e++)
                ddelta[e] = 0.0f;
            for (int64_t c = 0; c < K; c++) {
                float acc = 0.0f;
                for (int64_t e = 0; e < V; e++) {
                    ddelta[e] += G[c * V + e] * kt[c];
                    acc += G[c * V + e] * delta[e];
                }
                dkt[c] = acc;
            }
            // d_t = beta_t (v_t - r_t):  dbeta_t = dd_t . (v_t - r_t);  dv_t = beta_t dd_t;
            // dr_t = -beta_t dd_t
            double db = 0.0;
            for (int64_t e = 0; e < V; e++) {
                db += (double)ddelta[e] * (vt[e] - r[e]);
                dvt[e] = bt * ddelta[e];
                dr[e] = -bt * ddelta[e];
            }
            dbeta[kda_beta_at(d, b, t, j)] = (float)db;
            // r_t = S~_t^T k_t:  dS~_t = G + k_t dr_t^T;  dk_t += S~_t dr_t
            for (int64_t c = 0; c < K; c++) {
                float acc = 0.0f;
                for (int64_t e = 0; e < V; e++) {
                    G[c * V + e] += kt[c] * dr[e];
                    acc += St[c * V + e] * dr[e];
                }
                dkt[c] += acc;
            }
            // S~_t = Diag(e^{g_t}) S_{t-1}:  dg_t[c] = sum_v dS~_t[c, v] S~_t[c, v];
            // G <- Diag(alpha_t) dS~_t is the gradient for S_{t-1}.
            for (int64_t c = 0; c < K; c++) {
                float a = expf(gt[c]), acc = 0.0f;
                for (int64_t e = 0; e < V; e++) {
                    acc += G[c * V + e] * St[c * V + e];
                    G[c * V + e] *= a;
                }
                dgt[c] = acc;
            }
        }
        if (dinit_state) memcpy(dinit_state + kda_state_at(d, b, j), G, (size_t)KV * sizeof(float));
        free(Sall);
    }
    if (gva) {
        kda_sum_gva(dq, dq_v, d);
        kda_sum_gva(dk, dk_v, d);
        free(dq_v);
        free(dk_v);
    }
}
