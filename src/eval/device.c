// device.c - --device / --precision resolution and the GPU models behind the eval hooks
// (contract in device.h).
#include "eval/device.h"

#include <stdio.h>
#include <string.h>

#include "cuda/backend_cuda.h"   // defines: kda_cuda_available (0 without CUDA)
#include "cuda/model_cuda.h"     // defines: KdaCudaModel (KDA_HAVE_CUDA builds)
#include "cuda/model_cuda_f32.h" // defines: KdaCudaF32Model (KDA_HAVE_CUDA builds)

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

int eval_precision_parse(const char *flag, int *fp32, KdaError *err) {
    *fp32 = -1;
    if (!flag) return 0;
    if (!strcmp(flag, "bf16") || !strcmp(flag, "fp32")) {
        *fp32 = !strcmp(flag, "fp32");
        return 0;
    }
    return kda_fail(err, "--precision must be bf16 or fp32, got '%s'", flag);
}

#ifdef KDA_HAVE_CUDA
// The GPU model of precision fp32 (1) or bf16 (0) into d; -1 with the reason in *e.
static int open_gpu_(EvalDevice *d, int fp32, const KdaModel *m, KdaError *e) {
    const char *dev_name;
    if (fp32) {
        KdaCudaF32Model *g;
        if (kda_cuda_f32_model_create(&g, &m->cfg, &m->table, m->params, 0, e)) return -1;
        d->gpu32 = g;
        dev_name = kda_cuda_f32_model_device_name(g);
    } else {
        KdaCudaModel *g;
        if (kda_cuda_model_create(&g, &m->cfg, &m->table, m->params, 0, e)) return -1;
        d->gpu = g;
        dev_name = kda_cuda_model_device_name(g);
    }
    d->cuda = 1;
    d->precision = fp32 ? "fp32" : "bf16";
    snprintf(d->name, sizeof d->name, "cuda:0 (%s)", dev_name);
    return 0;
}
#endif

int eval_device_open(EvalDevice *d, const char *flag, const char *precision, const KdaModel *m,
                     KdaError *err) {
    memset(d, 0, sizeof *d);
    d->vocab = m->cfg.vocab_size;
    d->precision = "fp32";
    snprintf(d->name, sizeof d->name, "cpu");
    int cuda, fp32;
    if (eval_precision_parse(precision, &fp32, err) || eval_device_pick(flag, &cuda, err))
        return -1;
#ifdef KDA_HAVE_CUDA
    KdaError e;
    if (cuda && open_gpu_(d, fp32 == 1, m, &e)) {
        if (!strcmp(flag, "cuda")) return kda_fail(err, "--device cuda: %s", e.msg);
        snprintf(d->note, sizeof d->note, "the GPU model is not available (%.900s)", e.msg);
    }
#endif
    if (!d->cuda && fp32 == 0)
        return kda_fail(err, "--precision bf16 needs the GPU (--device cuda); the CPU model "
                             "computes in fp32 (--precision fp32, the CPU's default)");
    return 0;
}

void eval_device_close(EvalDevice *d) {
#ifdef KDA_HAVE_CUDA
    kda_cuda_model_free(d->gpu);
    kda_cuda_f32_model_free(d->gpu32);
#endif
    memset(d, 0, sizeof *d);
}

int eval_device_forward(void *ctx, const int32_t *ids, const int32_t *labels, int64_t B, int64_t T,
                        float *nll, KdaError *err) {
    EvalDevice *d = ctx;
#ifdef KDA_HAVE_CUDA
    if (d->gpu32) return kda_cuda_f32_model_forward(d->gpu32, ids, labels, B, T, nll, NULL, err);
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
    if (d->gpu32) {
        if (kda_cuda_f32_model_forward(d->gpu32, ids, NULL, 1, n, NULL, NULL, err)) return -1;
        return kda_cuda_f32_model_logits(d->gpu32, 0, n - 1, logits, err);
    }
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
