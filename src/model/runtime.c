// runtime.c - the model seam's one device choice and its dispatch to the implementations
// (contract in runtime.h; the operations table in runtime_impl.h).
#include "model/runtime.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/runtime_impl.h" // defines: KdaRuntimeOps, struct KdaRuntime, struct KdaRtState

static const char *device_word_(const KdaRuntime *rt) {
    return rt->device == KDA_DEVICE_CUDA ? "GPU" : "CPU";
}

// "-1 with '<what>: not supported by the <device> runtime'" for a missing operation.
static int unsupported_(const KdaRuntime *rt, const char *what, KdaError *err) {
    return kda_fail(err, "%s: not supported by the %s runtime (%s, %s)", what, device_word_(rt),
                    rt->name, rt->precision);
}

#define CALL(op, what, ...)                                                                        \
    do {                                                                                           \
        if (!rt->ops->op) return unsupported_(rt, what, err);                                      \
        return rt->ops->op(rt, __VA_ARGS__);                                                       \
    } while (0)

int kda_runtime_pick(const char *flag, KdaDeviceKind *kind, KdaError *err) {
    *kind = KDA_DEVICE_CPU;
    if (!flag || !strcmp(flag, "auto")) {
        *kind = kda_runtime_cuda_devices() > 0 ? KDA_DEVICE_CUDA : KDA_DEVICE_CPU;
        return 0;
    }
    if (!strcmp(flag, "cpu")) return 0;
    if (strcmp(flag, "cuda"))
        return kda_fail(err, "--device must be auto, cpu or cuda, got '%s'", flag);
#ifndef KDA_HAVE_CUDA
    return kda_fail(err, "--device cuda: this build has no CUDA support (rebuild with nvcc: "
                         "make KDA_CUDA=1), use --device cpu");
#else
    if (kda_runtime_cuda_devices() < 1)
        return kda_fail(err, "--device cuda: no CUDA device is visible, use --device cpu");
    *kind = KDA_DEVICE_CUDA;
    return 0;
#endif
}

int kda_runtime_open(KdaRuntime **out, const KdaConfig *cfg, KdaParamTable *table, float *params,
                     const KdaRuntimeOpts *o, KdaError *err) {
    *out = NULL;
    if (o->precision && strcmp(o->precision, "bf16") && strcmp(o->precision, "fp32"))
        return kda_fail(err, "--precision must be bf16 or fp32, got '%s'", o->precision);
    KdaDeviceKind kind;
    if (kda_runtime_pick(o->device, &kind, err)) return -1;
    KdaRuntime *rt = kda_calloc(1, sizeof *rt);
    int explicit_cuda = o->device && !strcmp(o->device, "cuda");
    if (kind == KDA_DEVICE_CUDA) {
        KdaError e;
        if (kda_runtime_open_cuda(rt, cfg, table, params, o, &e) == 0) {
            *out = rt;
            return 0;
        }
        if (explicit_cuda) {
            free(rt);
            return kda_fail(err, "--device cuda: %s", e.msg);
        }
        memset(rt, 0, sizeof *rt); // auto: the CPU, and say why
        snprintf(rt->note, sizeof rt->note, "the GPU model is not available (%.900s)", e.msg);
    }
    if (o->precision && !strcmp(o->precision, "bf16")) {
        free(rt);
        return kda_fail(err, "--precision bf16 needs the GPU (--device cuda); the CPU model "
                             "computes in fp32 (--precision fp32, the CPU's default)");
    }
    if (kda_runtime_open_cpu(rt, cfg, table, params, o, err)) {
        free(rt);
        return -1;
    }
    *out = rt;
    return 0;
}

void kda_runtime_close(KdaRuntime *rt) {
    if (!rt) return;
    rt->ops->close(rt);
    free(rt);
}

const KdaConfig *kda_runtime_config(const KdaRuntime *rt) {
    return rt->cfg;
}
const KdaParamTable *kda_runtime_table(const KdaRuntime *rt) {
    return rt->table;
}
KdaDeviceKind kda_runtime_device(const KdaRuntime *rt) {
    return rt->device;
}
const char *kda_runtime_name(const KdaRuntime *rt) {
    return rt->name;
}
const char *kda_runtime_precision(const KdaRuntime *rt) {
    return rt->precision;
}
const char *kda_runtime_note(const KdaRuntime *rt) {
    return rt->note;
}
int kda_runtime_can_decode(const KdaRuntime *rt) {
    return rt->ops->prefill != NULL;
}

// ---- inference ---------------------------------------------------------------------------------

int kda_runtime_forward(KdaRuntime *rt, const int32_t *ids, const int32_t *labels, int64_t B,
                        int64_t T, float *nll, float *loss, KdaError *err) {
    return rt->ops->forward(rt, ids, labels, B, T, nll, loss, err);
}

int kda_runtime_logits(KdaRuntime *rt, int64_t b, int64_t t, float *logits, KdaError *err) {
    CALL(logits, "logits", b, t, logits, err);
}

int kda_runtime_state_new(KdaRuntime *rt, KdaRtState **out, KdaError *err) {
    *out = NULL;
    if (!rt->ops->state_new) return unsupported_(rt, "recurrent decode", err);
    KdaRtState *st = kda_calloc(1, sizeof *st);
    if (rt->ops->state_new(rt, st, err)) {
        free(st);
        return -1;
    }
    *out = st;
    return 0;
}

void kda_runtime_state_free(KdaRuntime *rt, KdaRtState *st) {
    if (!st) return;
    rt->ops->state_free(rt, st);
    free(st);
}

int kda_runtime_state_copy(KdaRuntime *rt, KdaRtState *dst, const KdaRtState *src, KdaError *err) {
    CALL(state_copy, "state copy", dst, src, err);
}

int64_t kda_runtime_state_pos(const KdaRtState *st) {
    return st->pos;
}

int kda_runtime_prefill(KdaRuntime *rt, KdaRtState *st, const int32_t *ids, int64_t T,
                        float *logits_last, KdaError *err) {
    CALL(prefill, "prefill", st, ids, T, logits_last, err);
}

int kda_runtime_decode(KdaRuntime *rt, KdaRtState *st, int32_t id, float *logits, KdaError *err) {
    const KdaConfig *c = rt->cfg;
    if (id < 0 || id >= c->vocab_size)
        return kda_fail(err,
                        "decode: token id %d at position %lld is outside the vocabulary "
                        "[0, %lld)",
                        (int)id, (long long)st->pos, (long long)c->vocab_size);
    CALL(decode, "decode", st, id, logits, err);
}

// ---- memory plan
// ---------------------------------------------------------------------------------

int kda_runtime_memory_plan(KdaDeviceKind device, const KdaConfig *cfg, int64_t B, int64_t T,
                            int n_micro, int recompute, KdaMemoryPlan *plan, KdaError *err) {
    memset(plan, 0, sizeof *plan);
    if (B <= 0 || T <= 0 || n_micro <= 0)
        return kda_fail(err, "memory plan: B, T and n_micro must be positive");
    int rc = device == KDA_DEVICE_CUDA ? kda_runtime_plan_cuda(cfg, B, T, recompute, plan, err)
                                       : kda_runtime_plan_cpu(cfg, B, T, n_micro, plan, err);
    plan->total =
        plan->params + plan->grads + plan->moments + plan->copy + plan->acts + plan->other;
    return rc;
}

// ---- training ----------------------------------------------------------------------------------

int kda_runtime_train_init(KdaRuntime *rt, const KdaAdamWConfig *cfg, KdaError *err) {
    if (rt->trained) return kda_fail(err, "kda_runtime_train_init: called twice");
    if (!rt->ops->train_init) return unsupported_(rt, "training", err);
    if (rt->ops->train_init(rt, cfg, err)) return -1;
    rt->trained = 1;
    return 0;
}

// The training operations need train_init first.
#define TRAINED(what)                                                                              \
    do {                                                                                           \
        if (!rt->trained) return kda_fail(err, "%s: kda_runtime_train_init has not run", what);    \
    } while (0)

int kda_runtime_zero_grads(KdaRuntime *rt, KdaError *err) {
    TRAINED("zero_grads");
    return rt->ops->zero_grads(rt, err);
}

int kda_runtime_train_step(KdaRuntime *rt, const int32_t *ids, int64_t B, int64_t T, int backward,
                           float *loss, KdaError *err) {
    TRAINED("train_step");
    return rt->ops->train_step(rt, ids, B, T, backward, loss, err);
}

int kda_runtime_backward(KdaRuntime *rt, KdaError *err) {
    TRAINED("backward");
    return rt->ops->backward(rt, err);
}

double kda_runtime_finish_grads(KdaRuntime *rt, double scale, double max_norm, KdaError *err) {
    if (!rt->trained) {
        kda_fail(err, "finish_grads: kda_runtime_train_init has not run");
        return NAN;
    }
    return rt->ops->finish_grads(rt, scale, max_norm, err);
}

int kda_runtime_update(KdaRuntime *rt, double lr, KdaError *err) {
    TRAINED("update");
    return rt->ops->update(rt, lr, err);
}

int64_t kda_runtime_step(const KdaRuntime *rt) {
    return rt->trained ? rt->ops->host_optim((KdaRuntime *)rt)->step : 0;
}

int kda_runtime_params_finite(KdaRuntime *rt) {
    return rt->ops->params_finite ? rt->ops->params_finite(rt) : -1;
}

float *kda_runtime_host_params(KdaRuntime *rt, KdaError *err) {
    if (!rt->trained) {
        kda_fail(err, "host_params: kda_runtime_train_init has not run");
        return NULL;
    }
    return rt->ops->host_params(rt, err);
}

KdaAdamW *kda_runtime_host_optim(KdaRuntime *rt) {
    return rt->trained ? rt->ops->host_optim(rt) : NULL;
}

KdaAdamW *kda_runtime_optim_full(KdaRuntime *rt) {
    return rt->trained ? rt->ops->optim_full(rt) : NULL;
}

void kda_runtime_optim_release(KdaRuntime *rt) {
    if (rt->trained && rt->ops->optim_release) rt->ops->optim_release(rt);
}

int kda_runtime_state_changed(KdaRuntime *rt, KdaError *err) {
    TRAINED("state_changed");
    return rt->ops->state_changed(rt, err);
}

int kda_runtime_set_recompute(KdaRuntime *rt, int on, KdaError *err) {
    CALL(set_recompute, "recompute", on, err);
}

int kda_runtime_device_memory(KdaRuntime *rt, double *used_mib, double *total_mib) {
    return rt->ops->device_memory ? rt->ops->device_memory(rt, used_mib, total_mib) : -1;
}

double kda_runtime_peak_flops(const KdaRuntime *rt) {
    return rt->peak_flops;
}

int kda_runtime_profile(KdaRuntime *rt, KdaProf *p, KdaError *err) {
    CALL(profile, "profile", p, err);
}

// ---- data-parallel hooks -----------------------------------------------------------------------

void kda_runtime_grad_view(KdaRuntime *rt, KdaGradView *v) {
    memset(v, 0, sizeof *v);
    rt->ops->grad_view(rt, v);
}

int kda_runtime_layer_range(KdaRuntime *rt, int64_t layer, int64_t *lo, int64_t *hi) {
    return rt->ops->layer_range(rt, layer, lo, hi);
}

void kda_runtime_set_layer_hook(KdaRuntime *rt, void (*fn)(void *user, int64_t layer), void *user) {
    rt->ops->set_layer_hook(rt, fn, user);
}

int kda_runtime_shard(KdaRuntime *rt, const KdaShard *s, KdaError *err) {
    TRAINED("shard");
    return rt->ops->shard(rt, s, err);
}

void kda_runtime_shard_view(KdaRuntime *rt, float **p, float **g, float **m1, float **m2) {
    rt->ops->shard_view(rt, p, g, m1, m2);
}

void kda_runtime_set_norm_reduce(KdaRuntime *rt,
                                 int (*fn)(void *user, double *sumsq, KdaError *err), void *user) {
    if (rt->ops->set_norm_reduce) rt->ops->set_norm_reduce(rt, fn, user);
}

int kda_runtime_params_gathered(KdaRuntime *rt, KdaError *err) {
    return rt->ops->params_gathered ? rt->ops->params_gathered(rt, err) : 0;
}

int kda_runtime_unpack(KdaRuntime *rt, float *dense, const float *buf, KdaError *err) {
    CALL(unpack, "unpack", dense, buf, err);
}
