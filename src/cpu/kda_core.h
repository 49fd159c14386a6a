// kda_core.h - the KDA core on the CPU (fp32 reference): gate, beta, L2 norm and the
// delta-rule recurrence with per-channel decay, in two forms that must agree:
//   kda_recurrent_*  per-token recurrence, kda-model.md §5.3 step 10 and §6.4 (the reference)
//   kda_chunk_*      chunked WY/UT form, §6.1-6.3 (the algorithm the GPU runs)
//
// Contract of the core ops (what FLA's naive_recurrent_kda takes, §6.6):
//   q, k   [B, T, H, K]   already L2-normalized (kda_l2norm_fwd)
//   v      [B, T, HV, V]
//   g      [B, T, HV, K]  log-decay (<= 0), NOT the raw gate (kda_gate_fwd makes it)
//   beta   [B, T, HV]     post-sigmoid (kda_beta_fwd makes it)
//   state  [B, HV, K, V]  math orientation S (FLA's cache stores the transpose [.., V, K])
//   o      [B, T, HV, V]
// GVA: value head j reads q/k head j / (HV/H). scale is usually K^-1/2.
// Backward ops overwrite their outputs (no accumulation). All fp32, row-major.
#ifndef KDA_CPU_KDA_CORE_H
#define KDA_CPU_KDA_CORE_H

#include <stdint.h>

typedef struct {
    int64_t B, T;  // batch rows, tokens per row
    int64_t H, HV; // q/k heads, value heads (HV % H == 0)
    int64_t K, V;  // key and value head dims
    float scale;   // q scale, K^-1/2 by default
    int64_t chunk; // chunk size of the chunked form (64); ignored by the recurrent form
} KdaDims;

// ---- core recurrence -----------------------------------------------------------------------
// init_state may be NULL (zeros); final_state may be NULL (not returned).
void kda_recurrent_fwd(float *o, float *final_state, const float *q, const float *k, const float *v,
                       const float *g, const float *beta, const float *init_state,
                       const KdaDims *d);
// dfinal_state / init_state may be NULL (zeros); dinit_state may be NULL (not returned).
void kda_recurrent_bwd(float *dq, float *dk, float *dv, float *dg, float *dbeta, float *dinit_state,
                       const float *d_o, const float *dfinal_state, const float *q, const float *k,
                       const float *v, const float *g, const float *beta, const float *init_state,
                       const KdaDims *d);
void kda_chunk_fwd(float *o, float *final_state, const float *q, const float *k, const float *v,
                   const float *g, const float *beta, const float *init_state, const KdaDims *d);
void kda_chunk_bwd(float *dq, float *dk, float *dv, float *dg, float *dbeta, float *dinit_state,
                   const float *d_o, const float *dfinal_state, const float *q, const float *k,
                   const float *v, const float *g, const float *beta, const float *init_state,
                   const KdaDims *d);

// ---- pre-processing: gate, beta, L2 norm (kda-model.md §5.3 steps 6-8, §6.3 steps 8-10) ---
typedef struct {
    int bounded; // lower_bound form: g = lb * sigmoid(exp(A_log) * (f + dt_bias))
    float lower_bound;
} KdaGateOpts;

// f [N, HV, K] raw gate (N = B*T tokens), A_log [HV], dt_bias [HV*K] -> g [N, HV, K].
// A_log or dt_bias may be NULL (absent: exp(A_log) = 1, dt_bias = 0; FLA's optional A_log of
// the bounded form); the matching gradient pointer may then be NULL too.
void kda_gate_fwd(float *g, const float *f, const float *A_log, const float *dt_bias, int64_t N,
                  int64_t HV, int64_t K, const KdaGateOpts *opt);
// df [N, HV, K] overwritten; dA_log [HV] and ddt_bias [HV*K] ACCUMULATE (+=).
void kda_gate_bwd(float *df, float *dA_log, float *ddt_bias, const float *dg, const float *f,
                  const float *A_log, const float *dt_bias, int64_t N, int64_t HV, int64_t K,
                  const KdaGateOpts *opt);
// b [N, HV] logits -> beta = s * sigmoid(b), s = 2 if allow_neg_eigval else 1.
void kda_beta_fwd(float *beta, const float *b, int64_t n, int allow_neg_eigval);
void kda_beta_bwd(float *db, const float *dbeta, const float *b, int64_t n, int allow_neg_eigval);
// x [N, dim] -> y = x / sqrt(|x|^2 + eps) per row; rstd [N] saved for backward (may be NULL).
void kda_l2norm_fwd(float *y, float *rstd, const float *x, int64_t N, int64_t dim, float eps);
void kda_l2norm_bwd(float *dx, const float *dy, const float *y, const float *rstd, int64_t N,
                    int64_t dim);

#endif
