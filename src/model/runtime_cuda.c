// runtime_cuda.c - the model seam on one GPU (contract in runtime.h): the bf16 model of
// model/model_cuda.h (training, scoring, prefill + recurrent decode) or the fp32 forward of
// model/model_cuda_f32.h (precision fp32: scoring only). Compiles without CUDA too: then
// kda_runtime_open_cuda fails with a message and no device is visible.
//
// Training keeps a host mirror of the optimizer (config, step, m and v staging) and the host
// parameter buffer the runtime was opened with (checkpoint staging): host_params copies the
// device's parameters and moments into them; state_changed uploads them.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/runtime_impl.h" // defines: KdaRuntimeOps, struct KdaRuntime, struct KdaRtState

#ifdef KDA_HAVE_CUDA

#include <cuda_runtime_api.h>

#include "cuda/cuda_common.h"     // defines: kda_cuda_device_count, kda_cuda_query
#include "model/model_cuda.h"     // defines: KdaCudaModel, kda_cuda_model_*, KdaCudaDecode
#include "model/model_cuda_f32.h" // defines: KdaCudaF32Model, kda_cuda_f32_model_*

typedef struct {
    KdaConfig cfg;
    KdaParamTable table; // dense host layout (rows owned)
    float *params;       // [total_numel] fp32 host staging (training; NULL for inference)
    KdaCudaModel *dm;    // the bf16 model (NULL with precision fp32)
    KdaCudaF32Model *f32;
    KdaAdamW opt;  // training: host mirror of the optimizer (m, v staging; step)
    int fused_cls; // training steps run kda_cuda_model_forward_backward (KDA_CLASSIFIER)
    int zero1;
} GpuRt;

static GpuRt *X_(KdaRuntime *rt) {
    return rt->impl;
}

int kda_runtime_cuda_devices(void) {
    return kda_cuda_device_count();
}

static void close_(KdaRuntime *rt) {
    GpuRt *x = X_(rt);
    kda_cuda_model_free(x->dm);
    kda_cuda_f32_model_free(x->f32);
    kda_adamw_free(&x->opt);
    kda_params_free(&x->table);
    free(x->params);
    free(x);
}

// ---- inference ---------------------------------------------------------------------------------

static int forward_(KdaRuntime *rt, const int32_t *ids, const int32_t *labels, int64_t B, int64_t T,
                    float *nll, float *loss, KdaError *err) {
    GpuRt *x = X_(rt);
    if (x->f32) return kda_cuda_f32_model_forward(x->f32, ids, labels, B, T, nll, loss, err);
    return kda_cuda_model_forward(x->dm, ids, labels, B, T, nll, loss, err);
}

static int logits_(KdaRuntime *rt, int64_t b, int64_t t, float *logits, KdaError *err) {
    GpuRt *x = X_(rt);
    if (x->f32) return kda_cuda_f32_model_logits(x->f32, b, t, logits, err);
    return kda_cuda_model_logits(x->dm, b, t, logits, err);
}

static int state_new_(KdaRuntime *rt, KdaRtState *st, KdaError *err) {
    KdaCudaDecode *d;
    if (kda_cuda_decode_create(X_(rt)->dm, &d, err)) return -1;
    st->dev = d;
    st->pos = 0;
    return 0;
}

static void state_free_(KdaRuntime *rt, KdaRtState *st) {
    (void)rt;
    kda_cuda_decode_free(st->dev);
}

static int state_copy_(KdaRuntime *rt, KdaRtState *dst, const KdaRtState *src, KdaError *err) {
    if (kda_cuda_decode_copy(X_(rt)->dm, dst->dev, src->dev, err)) return -1;
    dst->pos = src->pos;
    return 0;
}

static int prefill_(KdaRuntime *rt, KdaRtState *st, const int32_t *ids, int64_t T, float *logits,
                    KdaError *err) {
    if (kda_cuda_model_prefill(X_(rt)->dm, st->dev, ids, T, logits, err)) return -1;
    st->pos = T;
    return 0;
}

static int decode_(KdaRuntime *rt, KdaRtState *st, int32_t id, float *logits, KdaError *err) {
    if (kda_cuda_model_decode(X_(rt)->dm, st->dev, id, logits, err)) return -1;
    st->pos++;
    return 0;
}

// ---- training ----------------------------------------------------------------------------------

// KDA_CLASSIFIER: "fused" (default) or "legacy" (vocabulary chunks, logits recomputed in the
// backward: the path before the fused classifier, kept to measure against and to fall back to).
static int classifier_mode_(int *fused, KdaError *err) {
    const char *v = getenv("KDA_CLASSIFIER");
    *fused = 1;
    if (!v || !*v || !strcmp(v, "fused")) return 0;
    if (!strcmp(v, "legacy")) {
        *fused = 0;
        return 0;
    }
    return kda_fail(err, "KDA_CLASSIFIER=%.32s: expected fused or legacy", v);
}

static int train_init_(KdaRuntime *rt, const KdaAdamWConfig *cfg, KdaError *err) {
    GpuRt *x = X_(rt);
    if (!x->params)
        return kda_fail(err, "training: the GPU runtime was opened for inference (opts.train 0)");
    if (classifier_mode_(&x->fused_cls, err) ||
        kda_adamw_init(&x->opt, x->table.total_numel, cfg, err))
        return -1;
    if (!x->fused_cls && kda_cuda_model_set_cls_budget(x->dm, 0, err)) return -1; // its memory
    return 0;
}

static int zero_grads_(KdaRuntime *rt, KdaError *err) {
    return kda_cuda_model_zero_grads(X_(rt)->dm, err);
}

static int train_step_(KdaRuntime *rt, const int32_t *ids, int64_t B, int64_t T, int backward,
                       float *loss, KdaError *err) {
    GpuRt *x = X_(rt);
    if (backward && x->fused_cls) {
        if (kda_cuda_model_forward_backward(x->dm, ids, NULL, B, T, NULL, NULL, err)) return -1;
    } else {
        if (kda_cuda_model_forward(x->dm, ids, NULL, B, T, NULL, NULL, err)) return -1;
        if (backward && kda_cuda_model_backward(x->dm, err)) return -1;
    }
    return kda_cuda_model_loss(x->dm, loss, err); // read after the backward is queued
}

static int backward_(KdaRuntime *rt, KdaError *err) {
    return kda_cuda_model_backward(X_(rt)->dm, err);
}

static double finish_grads_(KdaRuntime *rt, double scale, double max_norm, KdaError *err) {
    return kda_cuda_model_finish_grads(X_(rt)->dm, scale, max_norm, err);
}

static int update_(KdaRuntime *rt, double lr, KdaError *err) {
    GpuRt *x = X_(rt);
    x->opt.step++;
    return kda_cuda_model_adamw(x->dm, &x->opt.cfg, x->opt.step, lr, err);
}

// ZeRO-1: the parameters only; the full moments come from the data-parallel gather.
static float *host_params_(KdaRuntime *rt, KdaError *err) {
    GpuRt *x = X_(rt);
    if (kda_cuda_model_get_params(x->dm, x->params, err) ||
        (!x->zero1 && kda_cuda_model_get_moments(x->dm, x->opt.m, x->opt.v, err)))
        return NULL;
    return x->params;
}

static KdaAdamW *host_optim_(KdaRuntime *rt) {
    return &X_(rt)->opt;
}

// ZeRO-1: put_moments uploads this rank's shard of the full host moments.
static int state_changed_(KdaRuntime *rt, KdaError *err) {
    GpuRt *x = X_(rt);
    if (kda_cuda_model_put_params(x->dm, x->params, err) ||
        kda_cuda_model_put_moments(x->dm, x->opt.m, x->opt.v, err))
        return -1;
    return 0;
}

static int set_recompute_(KdaRuntime *rt, int on, KdaError *err) {
    return kda_cuda_model_set_recompute(X_(rt)->dm, on, err);
}

static int device_memory_(KdaRuntime *rt, double *used_mib, double *total_mib) {
    (void)rt;
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return -1;
    *used_mib = (double)(total_b - free_b) / (1 << 20);
    *total_mib = (double)total_b / (1 << 20);
    return 0;
}

static int profile_(KdaRuntime *rt, KdaProf *p, KdaError *err) {
    return kda_cuda_model_profile(X_(rt)->dm, p, err);
}

// ---- data parallelism --------------------------------------------------------------------------

static void grad_view_(KdaRuntime *rt, KdaGradView *v) {
    kda_cuda_model_grad_view(X_(rt)->dm, &v->g, &v->n, &v->stream);
    v->on_device = 1;
    v->align = 128; // Megatron's 256-byte aligned buckets; 512 bytes here, fp32 (model/zero1.h)
}

static int layer_range_(KdaRuntime *rt, int64_t layer, int64_t *lo, int64_t *hi) {
    return kda_cuda_model_layer_range(X_(rt)->dm, layer, lo, hi);
}

static void set_layer_hook_(KdaRuntime *rt, void (*fn)(void *user, int64_t layer), void *user) {
    kda_cuda_model_set_layer_hook(X_(rt)->dm, fn, user);
}

static int shard_(KdaRuntime *rt, const KdaShard *s, KdaError *err) {
    GpuRt *x = X_(rt);
    if (kda_cuda_model_shard(x->dm, s, err)) return -1;
    x->zero1 = 1;
    return 0;
}

static void shard_view_(KdaRuntime *rt, float **p, float **g, float **m1, float **m2) {
    kda_cuda_model_shard_view(X_(rt)->dm, p, g, m1, m2);
}

static void set_norm_reduce_(KdaRuntime *rt, int (*fn)(void *user, double *sumsq, KdaError *err),
                             void *user) {
    kda_cuda_model_set_norm_reduce(X_(rt)->dm, fn, user);
}

static int params_gathered_(KdaRuntime *rt, KdaError *err) {
    return kda_cuda_model_params_gathered(X_(rt)->dm, err);
}

static int unpack_(KdaRuntime *rt, float *dense, const float *buf, KdaError *err) {
    return kda_cuda_model_unpack(X_(rt)->dm, dense, buf, err);
}

static const KdaRuntimeOps BF16_OPS = {
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
    .host_params = host_params_,
    .host_optim = host_optim_,
    .optim_full = host_optim_,
    .state_changed = state_changed_,
    .set_recompute = set_recompute_,
    .device_memory = device_memory_,
    .profile = profile_,
    .grad_view = grad_view_,
    .layer_range = layer_range_,
    .set_layer_hook = set_layer_hook_,
    .shard = shard_,
    .shard_view = shard_view_,
    .set_norm_reduce = set_norm_reduce_,
    .params_gathered = params_gathered_,
    .unpack = unpack_,
};

// The fp32 scoring model: forward and logits only.
static const KdaRuntimeOps F32_OPS = {
    .close = close_,
    .forward = forward_,
    .logits = logits_,
    .device_memory = device_memory_,
};

int kda_runtime_open_cuda(KdaRuntime *rt, const KdaConfig *cfg, KdaParamTable *table, float *params,
                          const KdaRuntimeOpts *o, KdaError *err) {
    int fp32 = o->precision && !strcmp(o->precision, "fp32");
    if (fp32 && o->train)
        return kda_fail(err, "training on the GPU runs in bf16 mixed precision (not fp32)");
    GpuRt *x = kda_calloc(1, sizeof *x);
    const char *dev_name;
    if (fp32) {
        if (kda_cuda_f32_model_create(&x->f32, cfg, table, params, o->gpu, err)) goto fail;
        dev_name = kda_cuda_f32_model_device_name(x->f32);
    } else {
        if (kda_cuda_model_create(&x->dm, cfg, table, params, o->gpu, err)) goto fail;
        dev_name = kda_cuda_model_device_name(x->dm);
    }
    // Taken: the table, and the parameters as staging (training) or freed (uploaded).
    x->cfg = *cfg;
    x->table = *table;
    memset(table, 0, sizeof *table);
    if (o->train)
        x->params = params;
    else
        free(params);
    rt->ops = fp32 ? &F32_OPS : &BF16_OPS;
    rt->impl = x;
    rt->cfg = &x->cfg;
    rt->table = &x->table;
    rt->device = KDA_DEVICE_CUDA;
    rt->precision = fp32 ? "fp32" : "bf16";
    snprintf(rt->name, sizeof rt->name, "cuda:%d (%s)", o->gpu, dev_name);
    KdaCudaDeviceInfo info;
    KdaError qe;
    if (kda_cuda_query(o->gpu, &info, &qe) == 0) rt->peak_flops = info.peak_bf16_flops;
    return 0;
fail:
    kda_cuda_model_free(x->dm);
    kda_cuda_f32_model_free(x->f32);
    free(x);
    return -1;
}

#define H200_SMEM_OPTIN 232448 // bytes of opt-in shared memory per block (cudaDeviceProp)

int kda_runtime_plan_cuda(const KdaConfig *cfg, int64_t B, int64_t T, int recompute,
                          KdaMemoryPlan *plan, KdaError *err) {
    KdaParamTable t;
    KdaCudaPlan g;
    if (kda_params_build(&t, cfg, err)) return -1;
    int rc = kda_cuda_model_plan(cfg, &t, B, T, recompute, H200_SMEM_OPTIN, &g, err);
    kda_params_free(&t);
    if (rc) return -1;
    plan->params = plan->grads = plan->moments = g.state_bytes / 4.0;
    plan->moments *= 2.0;
    plan->copy = g.copy_bytes;
    plan->acts = g.arena_bytes + g.keep_bytes;
    plan->other = g.fixed_bytes;
    return 0;
}

#else // !KDA_HAVE_CUDA

int kda_runtime_plan_cuda(const KdaConfig *cfg, int64_t B, int64_t T, int recompute,
                          KdaMemoryPlan *plan, KdaError *err) {
    (void)cfg, (void)B, (void)T, (void)recompute, (void)plan;
    return kda_fail(err, "the GPU's memory plan needs a CUDA build (its layout code is CUDA's)");
}

int kda_runtime_cuda_devices(void) {
    return 0;
}

int kda_runtime_open_cuda(KdaRuntime *rt, const KdaConfig *cfg, KdaParamTable *table, float *params,
                          const KdaRuntimeOpts *o, KdaError *err) {
    (void)rt, (void)cfg, (void)table, (void)params, (void)o;
    return kda_fail(err, "this build has no CUDA support (rebuild on a machine with nvcc: make "
                         "KDA_CUDA=1), use device cpu");
}

#endif
