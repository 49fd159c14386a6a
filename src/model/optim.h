// optim.h - AdamW over the flat fp32 parameter buffer, global gradient norm and clipping
// (training-recipe.md §1.1, §1.3, §1.4).
//
// The update is torch's AdamW(fused=True) form, element-wise in fp32, for update u (1-based)
// with learning rate lr (the caller passes kda_lr_for_update(sched, u)):
//   decay rows only:  p -= lr * wd * p
//   m = b1 * m + (1 - b1) * g;   v = b2 * v + (1 - b2) * g * g
//   p -= (lr / (1 - b1^u)) * m / (sqrt(v) / sqrt(1 - b2^u) + eps)
// The bias corrections are computed in double and rounded to fp32 once per step. Which rows
// decay comes from KdaParamInfo.weight_decay; rows are addressed by their offset, so params,
// grads, m and v share the parameter table's layout. OpenMP over elements.
#ifndef KDA_OPTIM_H
#define KDA_OPTIM_H

#include <stdint.h>

#include "core/error.h"
#include "model/params.h" // defines: KdaParamTable, KdaParamInfo

typedef struct {
    double beta1, beta2, eps, weight_decay;
} KdaAdamWConfig;

typedef struct {
    KdaAdamWConfig cfg;
    int64_t step; // updates applied so far (u of the last update)
    int64_t n;    // elements = table total_numel
    float *m;     // [n] fp32, first moment, owned
    float *v;     // [n] fp32, second moment, owned
} KdaAdamW;

// Zeroed moments, step 0. Fails on bad hyper-parameters (betas outside [0, 1), eps <= 0,
// weight_decay < 0) or n < 1.
int kda_adamw_init(KdaAdamW *o, int64_t n, const KdaAdamWConfig *cfg, KdaError *err);
void kda_adamw_free(KdaAdamW *o); // accepts a zeroed struct

// Applies update step+1 to params ([t->total_numel] fp32) from grads (same layout, already
// averaged and clipped). lr may be 0 (the first update of the recipe): moments and step still
// advance.
void kda_adamw_step(KdaAdamW *o, const KdaParamTable *t, float *params, const float *grads,
                    double lr);

// ZeRO-1: the same update for the elements [lo, lo + o->n) of the flat layout only; o holds the
// moments of that range (o->m[i] belongs to element lo + i), params and grads are full-size
// ([t->total_numel] fp32; only the range is read or written). Per element the arithmetic is
// kda_adamw_step's, so the shards of N ranks together give the same bits as one full update.
void kda_adamw_step_range(KdaAdamW *o, const KdaParamTable *t, float *params, const float *grads,
                          double lr, int64_t lo);

// Global L2 norm of g ([n] fp32), accumulated in double. Non-finite if any element is.
double kda_grad_norm(const float *g, int64_t n);
// torch clip_grad_norm_: coef = max_norm / (norm + 1e-6); when coef < 1, g *= coef.
// Returns the norm before clipping (what the log shows); *coef_out (optional) the factor
// applied (1 when not clipped). A non-finite norm leaves g unchanged (the caller skips).
double kda_grad_clip(float *g, int64_t n, double max_norm, double *coef_out);

#endif
