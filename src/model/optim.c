// optim.c - AdamW (torch fused form), global grad norm and clipping; see optim.h.
#include "model/optim.h" // defines: KdaAdamW, kda_adamw_*, kda_grad_*

#include <math.h>
#include <stdlib.h>
#include <string.h>

int kda_adamw_init(KdaAdamW *o, int64_t n, const KdaAdamWConfig *cfg, KdaError *err) {
    memset(o, 0, sizeof *o);
    if (n < 1) return kda_fail(err, "adamw: no parameters");
    if (!(cfg->beta1 >= 0 && cfg->beta1 < 1) || !(cfg->beta2 >= 0 && cfg->beta2 < 1))
        return kda_fail(err, "adamw: betas must be in [0, 1) (got %g, %g)", cfg->beta1, cfg->beta2);
    if (!(cfg->eps > 0)) return kda_fail(err, "adamw: adam_eps must be > 0 (got %g)", cfg->eps);
    if (!(cfg->weight_decay >= 0))
        return kda_fail(err, "adamw: weight_decay must be >= 0 (got %g)", cfg->weight_decay);
    o->cfg = *cfg;
    o->n = n;
    o->m = kda_calloc((size_t)n, sizeof(float));
    o->v = kda_calloc((size_t)n, sizeof(float));
    return 0;
}

void kda_adamw_free(KdaAdamW *o) {
    free(o->m);
    free(o->v);
    memset(o, 0, sizeof *o);
}

// Per-step scalars, rounded to fp32 once (torch's fused kernel works in fp32 opmath).
typedef struct {
    float lr, decay, b1, b2, one_m_b1, one_m_b2, step_size, bc2_sqrt, eps;
} AdamScalars;

static AdamScalars adam_scalars(const KdaAdamWConfig *c, int64_t step, double lr) {
    double bc1 = 1.0 - pow(c->beta1, (double)step);
    double bc2 = 1.0 - pow(c->beta2, (double)step);
    return (AdamScalars){
        .lr = (float)lr,
        .decay = (float)(lr * c->weight_decay),
        .b1 = (float)c->beta1,
        .b2 = (float)c->beta2,
        .one_m_b1 = (float)(1.0 - c->beta1),
        .one_m_b2 = (float)(1.0 - c->beta2),
        .step_size = (float)(lr / bc1),
        .bc2_sqrt = (float)sqrt(bc2),
        .eps = (float)c->eps,
    };
}

// One contiguous run of elements of one row: p, g, m, v [n] fp32.
static inline void adam_span_(const AdamScalars *s, float decay, float *p, const float *g,
                              float *mr, float *vr, int64_t n) {
#pragma omp for simd schedule(static) nowait
    for (int64_t i = 0; i < n; i++) {
        float pi = p[i] - decay * p[i];
        float gi = g[i];
        float mi = s->b1 * mr[i] + s->one_m_b1 * gi;
        float vi = s->b2 * vr[i] + s->one_m_b2 * gi * gi;
        float denom = sqrtf(vi) / s->bc2_sqrt + s->eps;
        p[i] = pi - s->step_size * mi / denom;
        mr[i] = mi;
        vr[i] = vi;
    }
}

void kda_adamw_step(KdaAdamW *o, const KdaParamTable *t, float *params, const float *grads,
                    double lr) {
    KDA_ASSERT(t->total_numel == o->n);
    kda_adamw_step_range(o, t, params, grads, lr, 0);
}

void kda_adamw_step_range(KdaAdamW *o, const KdaParamTable *t, float *params, const float *grads,
                          double lr, int64_t lo) {
    const int64_t hi = lo + o->n;
    KDA_ASSERT(lo >= 0 && hi <= t->total_numel);
    o->step++;
    const AdamScalars s = adam_scalars(&o->cfg, o->step, lr);
#pragma omp parallel
    for (int r = 0; r < t->n; r++) {
        const KdaParamInfo *row = &t->rows[r];
        int64_t a = row->offset > lo ? row->offset : lo;
        int64_t b = row->offset + row->numel < hi ? row->offset + row->numel : hi;
        if (a >= b) continue;
        adam_span_(&s, row->weight_decay ? s.decay : 0.0f, params + a, grads + a, o->m + (a - lo),
                   o->v + (a - lo), b - a);
    }
}

double kda_grad_norm(const float *g, int64_t n) {
    double sum = 0;
#pragma omp parallel for simd schedule(static) reduction(+ : sum)
    for (int64_t i = 0; i < n; i++)
        sum += (double)g[i] * (double)g[i];
    return sqrt(sum);
}

double kda_grad_clip(float *g, int64_t n, double max_norm, double *coef_out) {
    double norm = kda_grad_norm(g, n);
    double coef = 1.0;
    if (isfinite(norm)) {
        double c = max_norm / (norm + 1e-6);
        if (c < 1.0) {
            coef = c;
            const float cf = (float)c;
#pragma omp parallel for schedule(static)
            for (int64_t i = 0; i < n; i++)
                g[i] *= cf;
        }
    }
    if (coef_out) *coef_out = coef;
    return norm;
}
