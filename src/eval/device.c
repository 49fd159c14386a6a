// device.c - --device resolution and the GPU model behind the eval hooks (contract in device.h).
#include "eval/device.h"

#include <stdio.h>
#include <string.h>

#include "cuda/backend_cuda.h" // defines: kda_cuda_available (0 without CUDA)
#include "cuda/model_cuda.h"   // defines: KdaCudaModel (KDA_HAVE_CUDA builds)

int eval_device_pick(const char *flag, int *cuda, KdaError *err) {
    *cuda = 0;
    if (!strcmp(flag, "cpu")) return 0;
    if (!strcmp(flag, "auto")) {
        *cuda = kda_cuda_available();
        return 0;
    }
    if (strcmp(flag, "cuda"))
        return kda_fail(err, "--device must be auto, cpu or cuda, got '%s'", flag);
#ifndef KDA_HAVE_CUDA
    return kda_fail(err, "--device cuda: this build has no CUDA support (rebuild with nvcc: "
                         "make KDA_CUDA=1), use --device cpu");
#else
    if (!kda_cuda_available())
        return kda_fail(err, "--device cuda: no CUDA device is visible, use --device cpu");
    *cuda = 1;
    return 0;
#endif
}

int eval_device_open(EvalDevice *d, const char *flag, const KdaModel *m, KdaError *err) {
    memset(d, 0, sizeof *d);
    d->vocab = m->cfg.vocab_size;
    snprintf(d->name, sizeof d->name, "cpu");
    int cuda;
    if (eval_device_pick(flag, &cuda, err)) return -1;
    if (!cuda) return 0;
#ifdef KDA_HAVE_CUDA
    KdaCudaModel *g;
    KdaError e;
    if (kda_cuda_model_create(&g, &m->cfg, &m->table, m->params, 0, &e)) {
        if (!strcmp(flag, "cuda")) return kda_fail(err, "--device cuda: %s", e.msg);
        snprintf(d->note, sizeof d->note, "the GPU model is not available (%.900s)", e.msg);
        return 0;
    }
    d->cuda = 1, d->gpu = g;
    snprintf(d->name, sizeof d->name, "cuda:0 (%s)", kda_cuda_model_device_name(g));
#endif
    return 0;
}

void eval_device_close(EvalDevice *d) {
#ifdef KDA_HAVE_CUDA
    kda_cuda_model_free(d->gpu);
#endif
    memset(d, 0, sizeof *d);
}

int eval_device_forward(void *ctx, const int32_t *ids, const int32_t *labels, int64_t B, int64_t T,
                        float *nll, KdaError *err) {
    EvalDevice *d = ctx;
#ifdef KDA_HAVE_CUDA
    if (d->gpu) return kda_cuda_model_forward(d->gpu, ids, labels, B, T, nll, NULL, err);
#else
    (void)d, (void)ids, (void)labels, (void)B, (void)T, (void)nll;
#endif
    return kda_fail(err, "eval_device_forward: no GPU model");
}

int eval_device_logits_last(void *ctx, const int32_t *ids, int64_t n, float *logits,
                            KdaError *err) {
    EvalDevice *d = ctx;
#ifdef KDA_HAVE_CUDA
    if (d->gpu) {
        // labels NULL = ids: the forward's xent runs as in training; its NLLs are not read.
        if (kda_cuda_model_forward(d->gpu, ids, NULL, 1, n, NULL, NULL, err)) return -1;
        return kda_cuda_model_logits(d->gpu, 0, n - 1, logits, err);
    }
#else
    (void)d, (void)ids, (void)n, (void)logits;
#endif
    return kda_fail(err, "eval_device_logits_last: no GPU model");
}
