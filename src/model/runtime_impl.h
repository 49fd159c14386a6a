// runtime_impl.h - what an implementation of the model seam (runtime.h) provides: the operations
// table and the common header of a runtime and of a decode state. Only runtime.c and the
// implementations (runtime_cpu.c, runtime_cuda.c) include it; consumers see runtime.h only.
//
// Every operation has runtime.h's contract of the kda_runtime_* function of the same name;
// runtime.c checks arguments shared by all implementations and turns a NULL operation into
// "<name>: not supported by the <device> runtime". The implementation's own data hangs off
// KdaRuntime.impl.
#ifndef KDA_MODEL_RUNTIME_IMPL_H
#define KDA_MODEL_RUNTIME_IMPL_H

#include "model/runtime.h"

typedef struct {
    void (*close)(KdaRuntime *rt);
    int (*forward)(KdaRuntime *rt, const int32_t *ids, const int32_t *labels, int64_t B, int64_t T,
                   float *nll, float *loss, KdaError *err);
    int (*logits)(KdaRuntime *rt, int64_t b, int64_t t, float *logits, KdaError *err);
    // decode (NULL when the runtime cannot decode)
    int (*state_new)(KdaRuntime *rt, KdaRtState *st, KdaError *err); // fills st->cpu or st->dev
    void (*state_free)(KdaRuntime *rt, KdaRtState *st);
    int (*state_copy)(KdaRuntime *rt, KdaRtState *dst, const KdaRtState *src, KdaError *err);
    int (*prefill)(KdaRuntime *rt, KdaRtState *st, const int32_t *ids, int64_t T, float *logits,
                   KdaError *err);
    int (*decode)(KdaRuntime *rt, KdaRtState *st, int32_t id, float *logits, KdaError *err);
    // training (NULL when the runtime cannot train)
    int (*train_init)(KdaRuntime *rt, const KdaAdamWConfig *cfg, KdaError *err);
    int (*zero_grads)(KdaRuntime *rt, KdaError *err);
    int (*train_step)(KdaRuntime *rt, const int32_t *ids, int64_t B, int64_t T, int backward,
                      float *loss, KdaError *err);
    int (*backward)(KdaRuntime *rt, KdaError *err);
    double (*finish_grads)(KdaRuntime *rt, double scale, double max_norm, KdaError *err);
    int (*update)(KdaRuntime *rt, double lr, KdaError *err);
    int (*params_finite)(KdaRuntime *rt); // NULL: no cheap check (-1)
    float *(*host_params)(KdaRuntime *rt, KdaError *err);
    KdaAdamW *(*host_optim)(KdaRuntime *rt);
    KdaAdamW *(*optim_full)(KdaRuntime *rt);
    void (*optim_release)(KdaRuntime *rt); // NULL: nothing to release
    int (*state_changed)(KdaRuntime *rt, KdaError *err);
    int (*set_recompute)(KdaRuntime *rt, int on, KdaError *err);
    int (*device_memory)(KdaRuntime *rt, double *used_mib, double *total_mib);
    int (*profile)(KdaRuntime *rt, KdaProf *p, KdaError *err);
    // data parallelism
    void (*grad_view)(KdaRuntime *rt, KdaGradView *v);
    int (*layer_range)(KdaRuntime *rt, int64_t layer, int64_t *lo, int64_t *hi);
    void (*set_layer_hook)(KdaRuntime *rt, void (*fn)(void *user, int64_t layer), void *user);
    int (*shard)(KdaRuntime *rt, const KdaShard *s, KdaError *err);
    void (*shard_view)(KdaRuntime *rt, float **p, float **g, float **m1, float **m2);
    void (*set_norm_reduce)(KdaRuntime *rt, int (*fn)(void *user, double *sumsq, KdaError *err),
                            void *user);
    int (*params_gathered)(KdaRuntime *rt, KdaError *err);
    int (*unpack)(KdaRuntime *rt, float *dense, const float *buf, KdaError *err);
} KdaRuntimeOps;

struct KdaRuntime {
    const KdaRuntimeOps *ops;
    void *impl;                 // the implementation's own state (owned by it)
    const KdaConfig *cfg;       // borrowed from impl
    const KdaParamTable *table; // borrowed from impl: the dense host layout
    KdaDeviceKind device;
    const char *precision; // static string
    char name[160];
    char note[1024];   // auto fell back to the CPU: why
    int trained;       // kda_runtime_train_init ran
    double peak_flops; // 0: unknown
};

// One sequence's cache: the CPU's KdaDecodeState, or a GPU implementation's device state.
struct KdaRtState {
    int64_t pos;        // tokens consumed (kept equal to cpu.pos on the CPU)
    KdaDecodeState cpu; // CPU runtime
    void *dev;          // GPU runtime (owned by it)
};

// The implementations' opens (runtime.c picks). Each fills rt->ops, impl, cfg, table, device,
// precision and name, and takes table/params as kda_runtime_open says; -1 takes nothing.
int kda_runtime_open_cpu(KdaRuntime *rt, const KdaConfig *cfg, KdaParamTable *table, float *params,
                         const KdaRuntimeOpts *opts, KdaError *err);
int kda_runtime_open_cuda(KdaRuntime *rt, const KdaConfig *cfg, KdaParamTable *table, float *params,
                          const KdaRuntimeOpts *opts, KdaError *err);
// The memory plans of the two implementations (kda_runtime_memory_plan's contract).
int kda_runtime_plan_cpu(const KdaConfig *cfg, int64_t B, int64_t T, int n_micro,
                         KdaMemoryPlan *plan, KdaError *err);
int kda_runtime_plan_cuda(const KdaConfig *cfg, int64_t B, int64_t T, int recompute,
                          KdaMemoryPlan *plan, KdaError *err);
// Number of visible CUDA devices (0 without a CUDA build); runtime_cuda.c.
int kda_runtime_cuda_devices(void);

#endif
