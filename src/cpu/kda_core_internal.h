// kda_core_internal.h - helpers shared by kda_recurrent.c and kda_chunk.c (not a public API):
// tensor indexing in the layouts of kda_core.h and the GVA reduction of dq/dk.
#ifndef KDA_CPU_KDA_CORE_INTERNAL_H
#define KDA_CPU_KDA_CORE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "cpu/kda_core.h" // defines: KdaDims

// Fork threads only for enough work: a parallel region costs microseconds on idle cores and
// far more when the machine is oversubscribed (workers spin at the barrier). Elements touched.
#define KDA_PAR_MIN ((int64_t)1 << 16)
static inline int kda_par_worth(const KdaDims *d) {
    return d->B * d->T * d->HV * d->K * d->V >= KDA_PAR_MIN;
}

// Offsets of token t of row b in each layout (row-major, last index fastest).
static inline size_t kda_qk_at(const KdaDims *d, int64_t b, int64_t t, int64_t h) {
    return ((size_t)(b * d->T + t) * d->H + h) * d->K; // q, k [B, T, H, K]
}
static inline size_t kda_v_at(const KdaDims *d, int64_t b, int64_t t, int64_t j) {
    return ((size_t)(b * d->T + t) * d->HV + j) * d->V; // v, o [B, T, HV, V]
}
static inline size_t kda_g_at(const KdaDims *d, int64_t b, int64_t t, int64_t j) {
    return ((size_t)(b * d->T + t) * d->HV + j) * d->K; // g [B, T, HV, K]
}
static inline size_t kda_beta_at(const KdaDims *d, int64_t b, int64_t t, int64_t j) {
    return (size_t)(b * d->T + t) * d->HV + j; // beta [B, T, HV]
}
static inline size_t kda_state_at(const KdaDims *d, int64_t b, int64_t j) {
    return ((size_t)b * d->HV + j) * d->K * d->V; // state [B, HV, K, V]
}
// q/k head read by value head j (kda-model.md §5.8 GVA: contiguous groups of HV/H value heads).
static inline int64_t kda_qk_head(const KdaDims *d, int64_t j) {
    return j / (d->HV / d->H);
}

// One token of the recurrence for one value head (§5.3 step 10), kda_recurrent.c:
//   S [K, V] updated in place; r, delta [V] get the prediction S~^T k and beta (v - r);
//   o [V] (may be NULL) = S^T (scale q) of the updated state. q, k, g [K]; v [V].
void kda_recurrent_head_step(float *S, float *r, float *delta, const float *q, const float *k,
                             const float *v, const float *g, float beta, float scale, float *o,
                             int64_t K, int64_t V);

// dst [B, T, H, K] = sum over the HV/H value heads of each group of src [B, T, HV, K], summed
// in increasing value-head order (deterministic). Defined in kda_recurrent.c.
void kda_sum_gva(float *dst, const float *src, const KdaDims *d);

#endif
