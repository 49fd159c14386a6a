// backend_cuda.c - KdaBackend over the GPU model (contract in backend_cuda.h). Compiles without
// CUDA too: then kda_backend_cuda_create fails with a message and kda_cuda_available is 0.
#include "cuda/backend_cuda.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef KDA_HAVE_CUDA

#include "cuda/cuda_common.h" // defines: kda_cuda_device_count
#include "cuda/model_cuda.h"  // defines: KdaCudaModel, kda_cuda_model_*

typedef struct {
    KdaModel host;    // config, table and the host parameter buffer (checkpoint staging)
    KdaCudaModel *dm; // device model
    KdaAdamW opt;     // host mirror: config, step, m and v staging
    KdaError pending; // an error from update(), reported by the next forward_backward
    int has_pending;
    int fused_cls; // training steps use kda_cuda_model_forward_backward (KDA_CLASSIFIER)
} CudaBe;

static void be_zero(void *c) {
    CudaBe *x = c;
    KdaError e = {{0}};
    if (kda_cuda_model_zero_grads(x->dm, &e) && !x->has_pending) x->pending = e, x->has_pending = 1;
}

static int be_fwd_bwd(void *c, const int32_t *ids, int64_t B, int64_t T, int backward, float *loss,
                      KdaError *err) {
    CudaBe *x = c;
    if (x->has_pending) {
        x->has_pending = 0;
        *err = x->pending;
        return -1;
    }
    if (backward && x->fused_cls) {
        if (kda_cuda_model_forward_backward(x->dm, ids, NULL, B, T, NULL, NULL, err)) return -1;
    } else {
        if (kda_cuda_model_forward(x->dm, ids, NULL, B, T, NULL, NULL, err)) return -1;
        if (backward && kda_cuda_model_backward(x->dm, err)) return -1;
    }
    return kda_cuda_model_loss(x->dm, loss, err); // read after the backward is queued
}

static double be_finish(void *c, double scale, double max_norm) {
    CudaBe *x = c;
    KdaError e = {{0}};
    double n = kda_cuda_model_finish_grads(x->dm, scale, max_norm, &e);
    if (!isfinite(n) && e.msg[0] && !x->has_pending) {
        x->pending = e;
        x->has_pending = 1;
    }
    return n;
}

static void be_update(void *c, double lr) {
    CudaBe *x = c;
    KdaError e = {{0}};
    x->opt.step++;
    if (kda_cuda_model_adamw(x->dm, &x->opt.cfg, x->opt.step, lr, &e) && !x->has_pending) {
        x->pending = e;
        x->has_pending = 1;
    }
}

static float *be_params(void *c) {
    CudaBe *x = c;
    KdaError e = {{0}};
    if ((kda_cuda_model_get_params(x->dm, x->host.params, &e) ||
         kda_cuda_model_get_moments(x->dm, x->opt.m, x->opt.v, &e)) &&
        !x->has_pending) {
        x->pending = e;
        x->has_pending = 1;
    }
    return x->host.params;
}

static KdaAdamW *be_optim(void *c) {
    return &((CudaBe *)c)->opt;
}

static void be_changed(void *c) {
    CudaBe *x = c;
    KdaError e = {{0}};
    if ((kda_cuda_model_put_params(x->dm, x->host.params, &e) ||
         kda_cuda_model_put_moments(x->dm, x->opt.m, x->opt.v, &e)) &&
        !x->has_pending) {
        x->pending = e;
        x->has_pending = 1;
    }
}

static int be_profile(void *c, KdaProf *p, KdaError *err) {
    return kda_cuda_model_profile(((CudaBe *)c)->dm, p, err);
}

static int be_memory(void *c, double *used_mib, double *total_mib) {
    (void)c;
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return -1;
    *used_mib = (double)(total_b - free_b) / (1 << 20);
    *total_mib = (double)total_b / (1 << 20);
    return 0;
}

static void be_destroy(void *c) {
    CudaBe *x = c;
    kda_cuda_model_free(x->dm);
    kda_model_free(&x->host);
    kda_adamw_free(&x->opt);
    free(x);
}

int kda_cuda_available(void) {
    return kda_cuda_device_count() > 0;
}

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

int kda_backend_cuda_create(KdaBackend *be, KdaModel *model, const KdaAdamWConfig *ocfg, int device,
                            KdaError *err) {
    memset(be, 0, sizeof *be);
    int fused = 1;
    if (classifier_mode_(&fused, err)) return -1;
    CudaBe *x = kda_calloc(1, sizeof *x);
    x->fused_cls = fused;
    if (kda_adamw_init(&x->opt, model->table.total_numel, ocfg, err)) {
        free(x);
        return -1;
    }
    if (kda_cuda_model_create(&x->dm, &model->cfg, &model->table, model->params, device, err) ||
        (!fused && kda_cuda_model_set_cls_budget(x->dm, 0, err))) { // legacy: its memory as before
        kda_cuda_model_free(x->dm);
        kda_adamw_free(&x->opt);
        free(x);
        return -1;
    }
    x->host = *model;
    memset(model, 0, sizeof *model);
    *be = (KdaBackend){.name = "cuda",
                       .ctx = x,
                       .n_params = x->host.table.total_numel,
                       .zero_grads = be_zero,
                       .forward_backward = be_fwd_bwd,
                       .finish_grads = be_finish,
                       .update = be_update,
                       .host_params = be_params,
                       .host_optim = be_optim,
                       .state_changed = be_changed,
                       .destroy = be_destroy,
                       .profile = be_profile,
                       .device_memory = be_memory};
    KdaCudaDeviceInfo info;
    KdaError qe;
    if (kda_cuda_query(device, &info, &qe) == 0) be->peak_flops = info.peak_bf16_flops;
    return 0;
}

int kda_backend_cuda_set_recompute(KdaBackend *be, int on, KdaError *err) {
    CudaBe *x = be->ctx;
    return kda_cuda_model_set_recompute(x->dm, on, err);
}

#else // !KDA_HAVE_CUDA

int kda_backend_cuda_set_recompute(KdaBackend *be, int on, KdaError *err) {
    (void)be, (void)on;
    return kda_fail(err, "recompute: this build has no CUDA support");
}

int kda_cuda_available(void) {
    return 0;
}

int kda_backend_cuda_create(KdaBackend *be, KdaModel *model, const KdaAdamWConfig *ocfg, int device,
                            KdaError *err) {
    (void)model, (void)ocfg, (void)device;
    memset(be, 0, sizeof *be);
    return kda_fail(err, "device cuda: this build has no CUDA support (rebuild on a machine with "
                         "nvcc: make KDA_CUDA=1), use device cpu");
}

#endif
