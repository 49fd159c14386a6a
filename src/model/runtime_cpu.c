// runtime_cpu.c - the model seam on the CPU (contract in runtime.h): every operation is the
// matching kda_model_* call of model/model.h on one KdaModel, so results are kda_model_*'s bit for
// bit (tests/test_runtime.c); training adds host gradient buffers and the AdamW of model/optim.h.
//
// Gradients: the step's gradient `grads` [n] fp32; the first micro-batch's backward accumulates
// into it directly (it is zero: 0 + g = g exactly), every later one into a zeroed `scratch` [n]
// that is then added (grads += scratch, element by element). So a step's gradient is the plain
// sum of per-micro-batch gradients in order, whatever the number of ranks (two ranks of one
// micro-batch each give the same bits as one rank of two: fp32 a + b == b + a). With a layer hook
// (data parallelism) each layer's rows are added as soon as the backward finishes them, then the
// hook runs; the rest is added after the backward.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/prof.h"          // defines: kda_prof_begin, kda_prof_end, kda_prof_mark_*
#include "model/model.h"        // defines: KdaModel, kda_model_*
#include "model/optim.h"        // defines: KdaAdamW, kda_adamw_*, kda_grad_norm, kda_grad_clip
#include "model/params.h"       // defines: kda_params_first_nonfinite
#include "model/runtime_impl.h" // defines: KdaRuntimeOps, struct KdaRuntime, struct KdaRtState

typedef struct {
    KdaModel m;
    // training (after train_init)
    float *grads;   // [n] fp32, the step's accumulated gradient
    float *scratch; // [n] fp32, one micro-batch's gradient (2nd and later micro-batches)
    int fresh;      // grads are zero: the next backward may accumulate into them directly
    KdaAdamW opt;   // moments [n], or with ZeRO-1 [hi - lo] of elements [lo, hi)
    KdaProf *prof;  // while profiling (also in m.prof)
    int zero1;
    int64_t lo, hi; // this rank's ZeRO-1 shard, clipped to n
    KdaAdamW view;  // ZeRO-1: full-size host view for checkpoints (m, v NULL when idle)
    // the layer hook (data parallelism)
    void (*hook)(void *user, int64_t layer);
    void *hook_user;
    int64_t *layer_lo, *layer_hi; // [L] dense range of each layer's rows (lo -1: not contiguous)
    uint8_t *added;               // [L] added into grads during this backward
    float *into;                  // the running backward's buffer (grads, or scratch to add)
} CpuRt;

static CpuRt *X_(KdaRuntime *rt) {
    return rt->impl;
}

static void close_(KdaRuntime *rt) {
    CpuRt *x = X_(rt);
    kda_model_free(&x->m);
    kda_adamw_free(&x->opt);
    free(x->view.m);
    free(x->view.v);
    free(x->grads);
    free(x->scratch);
    free(x->layer_lo);
    free(x->layer_hi);
    free(x->added);
    free(x);
}

// ---- inference ---------------------------------------------------------------------------------

static int forward_(KdaRuntime *rt, const int32_t *ids, const int32_t *labels, int64_t B, int64_t T,
                    float *nll, float *loss, KdaError *err) {
    return kda_model_forward(&X_(rt)->m, ids, labels, B, T, nll, NULL, loss, err);
}

static int logits_(KdaRuntime *rt, int64_t b, int64_t t, float *logits, KdaError *err) {
    return kda_model_logits(&X_(rt)->m, b, t, logits, err);
}

static int state_new_(KdaRuntime *rt, KdaRtState *st, KdaError *err) {
    (void)err;
    kda_decode_state_init(&st->cpu, rt->cfg);
    st->pos = 0;
    return 0;
}

static void state_free_(KdaRuntime *rt, KdaRtState *st) {
    (void)rt;
    kda_decode_state_free(&st->cpu);
}

static int state_copy_(KdaRuntime *rt, KdaRtState *dst, const KdaRtState *src, KdaError *err) {
    (void)err;
    const KdaConfig *c = rt->cfg;
    int64_t L = c->num_hidden_layers, W1 = c->use_short_conv ? c->conv_size - 1 : 0;
    const KdaDecodeState *s = &src->cpu;
    KdaDecodeState *d = &dst->cpu;
    memcpy(d->S, s->S, (size_t)(L * c->num_v_heads * c->head_dim * c->head_v_dim) * 4);
    if (s->conv_q && W1 > 0) {
        memcpy(d->conv_q, s->conv_q, (size_t)(L * c->key_dim * W1) * 4);
        memcpy(d->conv_k, s->conv_k, (size_t)(L * c->key_dim * W1) * 4);
        memcpy(d->conv_v, s->conv_v, (size_t)(L * c->value_dim * W1) * 4);
    }
    d->pos = s->pos;
    dst->pos = src->pos;
    return 0;
}

static int prefill_(KdaRuntime *rt, KdaRtState *st, const int32_t *ids, int64_t T, float *logits,
                    KdaError *err) {
    int rc = kda_model_prefill(&X_(rt)->m, ids, T, &st->cpu, logits, err);
    st->pos = st->cpu.pos;
    return rc;
}

static int decode_(KdaRuntime *rt, KdaRtState *st, int32_t id, float *logits, KdaError *err) {
    int rc = kda_model_decode_step(&X_(rt)->m, &st->cpu, id, logits, err);
    st->pos = st->cpu.pos;
    return rc;
}

// ---- training ----------------------------------------------------------------------------------

static int train_init_(KdaRuntime *rt, const KdaAdamWConfig *cfg, KdaError *err) {
    CpuRt *x = X_(rt);
    if (kda_adamw_init(&x->opt, x->m.table.total_numel, cfg, err)) return -1;
    x->grads = kda_calloc((size_t)x->m.table.total_numel, sizeof(float));
    x->fresh = 1;
    return 0;
}

static int zero_grads_(KdaRuntime *rt, KdaError *err) {
    (void)err;
    CpuRt *x = X_(rt);
    int64_t n = x->m.table.total_numel;
    kda_prof_begin(x->prof, KDA_OP_ZERO_GRADS);
    memset(x->grads, 0, (size_t)n * sizeof(float));
    kda_prof_end(x->prof, KDA_OP_ZERO_GRADS, 0, 4.0 * (double)n);
    x->fresh = 1;
    return 0;
}

static void add_range_(float *restrict g, const float *restrict s, int64_t lo, int64_t hi) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = lo; i < hi; i++)
        g[i] += s[i];
}

// The model's layer hook: block l's rows are final in x->into; add them to the step's gradient
// (a later micro-batch), then the user's hook.
static void layer_done_(void *c, int64_t l) {
    CpuRt *x = c;
    int64_t lo = x->layer_lo[l], hi = x->layer_hi[l];
    if (lo >= 0 && x->into != x->grads) add_range_(x->grads, x->into, lo, hi);
    if (lo >= 0) x->added[l] = 1;
    x->hook(x->hook_user, l);
}

// The next range from `at` that no added layer covers: [at, *gap_end); *resume is where the one
// after it starts (past the added layer that ends the gap; n at the end).
static void next_gap_(const CpuRt *x, int64_t at, int64_t *gap_end, int64_t *resume) {
    int64_t n = x->m.table.total_numel, next = n, next_hi = n;
    for (int64_t l = 0; x->hook && l < x->m.cfg.num_hidden_layers; l++)
        if (x->added[l] && x->layer_lo[l] >= at && x->layer_lo[l] < next)
            next = x->layer_lo[l], next_hi = x->layer_hi[l];
    *gap_end = next;
    *resume = next_hi;
}

static int backward_into_(CpuRt *x, KdaError *err) {
    int64_t n = x->m.table.total_numel;
    x->into = x->grads;
    if (!x->fresh) {
        if (!x->scratch) x->scratch = kda_malloc((size_t)n * sizeof(float));
        memset(x->scratch, 0, (size_t)n * sizeof(float));
        x->into = x->scratch;
    }
    x->fresh = 0;
    if (x->hook) {
        memset(x->added, 0, (size_t)x->m.cfg.num_hidden_layers);
        x->m.layer_hook = layer_done_, x->m.layer_user = x;
    }
    int rc = kda_model_backward(&x->m, x->into, err);
    x->m.layer_hook = NULL;
    for (int64_t at = 0, end, next; rc == 0 && x->into != x->grads && at < n; at = next) {
        next_gap_(x, at, &end, &next);
        add_range_(x->grads, x->into, at, end);
    }
    return rc;
}

static int train_step_(KdaRuntime *rt, const int32_t *ids, int64_t B, int64_t T, int backward,
                       float *loss, KdaError *err) {
    CpuRt *x = X_(rt);
    if (kda_model_forward(&x->m, ids, NULL, B, T, NULL, NULL, loss, err)) return -1;
    return backward ? backward_into_(x, err) : 0;
}

static int backward_(KdaRuntime *rt, KdaError *err) {
    CpuRt *x = X_(rt);
    x->fresh = 0;
    return kda_model_backward(&x->m, x->grads, err);
}

static double finish_grads_(KdaRuntime *rt, double scale, double max_norm, KdaError *err) {
    (void)err;
    CpuRt *x = X_(rt);
    int64_t n = x->m.table.total_numel;
    kda_prof_begin(x->prof, KDA_OP_GRAD_NORM);
    if (scale != 1.0) {
        float s = (float)scale;
        for (int64_t i = 0; i < n; i++)
            x->grads[i] *= s;
    }
    double norm =
        max_norm > 0 ? kda_grad_clip(x->grads, n, max_norm, NULL) : kda_grad_norm(x->grads, n);
    kda_prof_end(x->prof, KDA_OP_GRAD_NORM, 0, 4.0 * (double)n);
    return norm;
}

static int update_(KdaRuntime *rt, double lr, KdaError *err) {
    (void)err;
    CpuRt *x = X_(rt);
    kda_prof_begin(x->prof, KDA_OP_ADAMW);
    if (x->zero1)
        kda_adamw_step_range(&x->opt, &x->m.table, x->m.params, x->grads, lr, x->lo);
    else
        kda_adamw_step(&x->opt, &x->m.table, x->m.params, x->grads, lr);
    kda_prof_end(x->prof, KDA_OP_ADAMW, 0, 16.0 * (double)x->m.table.total_numel);
    return 0;
}

static int params_finite_(KdaRuntime *rt) {
    CpuRt *x = X_(rt);
    return kda_params_first_nonfinite(&x->m.table, x->m.params) == NULL;
}

static float *host_params_(KdaRuntime *rt, KdaError *err) {
    (void)err;
    return X_(rt)->m.params;
}

static KdaAdamW *host_optim_(KdaRuntime *rt) {
    CpuRt *x = X_(rt);
    if (!x->zero1) return &x->opt;
    if (!x->view.m) x->view.step = x->opt.step; // an active view (resume) owns the step
    return &x->view;
}

static KdaAdamW *optim_full_(KdaRuntime *rt) {
    CpuRt *x = X_(rt);
    if (!x->zero1) return &x->opt;
    int64_t n = x->m.table.total_numel;
    if (!x->view.m) {
        x->view.m = kda_calloc((size_t)n, sizeof(float));
        x->view.v = kda_calloc((size_t)n, sizeof(float));
    }
    x->view.step = x->opt.step;
    return &x->view;
}

// ZeRO-1: the shard takes its part of the full view (a resume, or after a checkpoint), and the
// view's full-size moments are released.
static int state_changed_(KdaRuntime *rt, KdaError *err) {
    (void)err;
    CpuRt *x = X_(rt);
    if (!x->zero1 || !x->view.m) return 0;
    memcpy(x->opt.m, x->view.m + x->lo, (size_t)(x->hi - x->lo) * sizeof(float));
    memcpy(x->opt.v, x->view.v + x->lo, (size_t)(x->hi - x->lo) * sizeof(float));
    x->opt.step = x->view.step;
    free(x->view.m);
    free(x->view.v);
    x->view.m = x->view.v = NULL;
    return 0;
}

static void optim_release_(KdaRuntime *rt) {
    CpuRt *x = X_(rt);
    free(x->view.m);
    free(x->view.v);
    x->view.m = x->view.v = NULL;
}

// The CPU runs every op in order on the calling thread: start and end marks need no waiting.
static int profile_(KdaRuntime *rt, KdaProf *p, KdaError *err) {
    (void)err;
    CpuRt *x = X_(rt);
    if (p) {
        x->prof = x->m.prof = p;
        kda_prof_mark_start(p);
    } else {
        kda_prof_mark_end(x->prof);
        x->prof = x->m.prof = NULL;
    }
    return 0;
}

// ---- data parallelism --------------------------------------------------------------------------

static void grad_view_(KdaRuntime *rt, KdaGradView *v) {
    CpuRt *x = X_(rt);
    *v = (KdaGradView){x->grads, x->m.table.total_numel, NULL, 0, 1};
}

// Layer l's rows in the dense table layout, when nothing else lies between them.
static int layer_range_(KdaRuntime *rt, int64_t l, int64_t *lo, int64_t *hi) {
    const KdaParamTable *t = &X_(rt)->m.table;
    int64_t a = -1, b = -1;
    for (int i = 0; i < t->n; i++) {
        const KdaParamInfo *r = &t->rows[i];
        if (r->layer != l) continue;
        a = a < 0 || r->offset < a ? r->offset : a;
        b = r->offset + r->numel > b ? r->offset + r->numel : b;
    }
    for (int i = 0; a >= 0 && i < t->n; i++) {
        const KdaParamInfo *r = &t->rows[i];
        if (r->layer != l && r->offset < b && r->offset + r->numel > a) return -1;
    }
    *lo = a, *hi = b;
    return a < 0 ? -1 : 0;
}

static void set_layer_hook_(KdaRuntime *rt, void (*fn)(void *user, int64_t layer), void *user) {
    CpuRt *x = X_(rt);
    int64_t L = x->m.cfg.num_hidden_layers;
    if (fn && !x->layer_lo) {
        x->layer_lo = kda_calloc((size_t)(L > 0 ? L : 1), sizeof(int64_t));
        x->layer_hi = kda_calloc((size_t)(L > 0 ? L : 1), sizeof(int64_t));
        x->added = kda_calloc((size_t)(L > 0 ? L : 1), 1);
        for (int64_t l = 0; l < L; l++)
            if (layer_range_(rt, l, &x->layer_lo[l], &x->layer_hi[l])) x->layer_lo[l] = -1;
    }
    x->hook = fn, x->hook_user = user;
}

static int shard_(KdaRuntime *rt, const KdaShard *s, KdaError *err) {
    CpuRt *x = X_(rt);
    int64_t n = x->m.table.total_numel;
    x->zero1 = 1;
    x->lo = s->lo < n ? s->lo : n;
    x->hi = s->hi < n ? s->hi : n;
    KdaAdamWConfig cfg = x->opt.cfg;
    kda_adamw_free(&x->opt);
    if (kda_adamw_init(&x->opt, x->hi > x->lo ? x->hi - x->lo : 1, &cfg, err)) return -1;
    if (x->hi == x->lo) x->opt.n = 0; // more ranks than elements: an empty shard
    x->view = (KdaAdamW){.cfg = cfg, .n = n};
    return 0;
}

static void shard_view_(KdaRuntime *rt, float **p, float **g, float **m1, float **m2) {
    CpuRt *x = X_(rt);
    *p = x->m.params, *g = x->grads, *m1 = x->opt.m, *m2 = x->opt.v;
}

static int unpack_(KdaRuntime *rt, float *dense, const float *buf, KdaError *err) {
    (void)err;
    memcpy(dense, buf, (size_t)X_(rt)->m.table.total_numel * sizeof(float));
    return 0;
}

static const KdaRuntimeOps CPU_OPS = {
    .close = close_,
    .forward = forward_,
    .logits = logits_,
    .state_new = state_new_,
    .state_free = state_free_,
    .state_copy = state_copy_,
    .prefill = prefill_,
    .decode = decode_,
    .train_init = train_init_,
    .zero_grads = zero_grads_,
    .train_step = train_step_,
    .backward = backward_,
    .finish_grads = finish_grads_,
    .update = update_,
    .params_finite = params_finite_,
    .host_params = host_params_,
    .host_optim = host_optim_,
    .optim_full = optim_full_,
    .optim_release = optim_release_,
    .state_changed = state_changed_,
    .profile = profile_,
    .grad_view = grad_view_,
    .layer_range = layer_range_,
    .set_layer_hook = set_layer_hook_,
    .shard = shard_,
    .shard_view = shard_view_,
    .unpack = unpack_,
};

int kda_runtime_open_cpu(KdaRuntime *rt, const KdaConfig *cfg, KdaParamTable *table, float *params,
                         const KdaRuntimeOpts *opts, KdaError *err) {
    CpuRt *x = kda_calloc(1, sizeof *x);
    if (kda_model_init_from(&x->m, cfg, table, params, err)) {
        free(x);
        return -1;
    }
    x->m.core = opts->core;
    rt->ops = &CPU_OPS;
    rt->impl = x;
    rt->cfg = &x->m.cfg;
    rt->table = &x->m.table;
    rt->device = KDA_DEVICE_CPU;
    rt->precision = "fp32";
    snprintf(rt->name, sizeof rt->name, "cpu");
    return 0;
}

int kda_runtime_plan_cpu(const KdaConfig *cfg, int64_t B, int64_t T, int n_micro,
                         KdaMemoryPlan *plan, KdaError *err) {
    KdaParamTable t;
    if (kda_params_build(&t, cfg, err)) return -1;
    double P = 4.0 * (double)t.total_numel, N = (double)B * (double)T;
    kda_params_free(&t);
    plan->params = P;
    plan->grads = n_micro > 1 ? 2.0 * P : P; // the step's gradient and one micro-batch's scratch
    plan->moments = 2.0 * P;
    plan->acts = 4.0 * (double)kda_model_arena_floats(cfg, B * T);
    plan->other = 8.0 * N; // ids and shifted targets, int32
    return 0;
}
