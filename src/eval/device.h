// device.h - the --device flag of `kda score`, `kda eval` and `kda generate`: auto | cpu | cuda,
// and the GPU model (cuda/model_cuda.h) behind the eval forward hook (EvalForwardFn) and the
// last-position logits that generation needs.
//
// auto = cuda when the build has CUDA (KDA_HAVE_CUDA) and at least one device is visible, else
// cpu. An explicit cuda fails (one line) without a CUDA build or a visible device. The GPU model
// is device 0, bf16 mixed precision (model_cuda.h), chunked core. Library code: errors return -1
// with the message in err; nothing is printed.
#ifndef KDA_EVAL_DEVICE_H
#define KDA_EVAL_DEVICE_H

#include <stdint.h>

#include "core/error.h"  // defines: KdaError
#include "model/model.h" // defines: KdaModel

typedef struct {
    int cuda;        // 1: the GPU model in gpu runs the forwards
    void *gpu;       // KdaCudaModel * (CUDA builds), NULL on the CPU
    int64_t vocab;   // the model's vocab_size (logits length)
    char name[160];  // "cpu" or "cuda:0 (<device name>)", for logs
    char note[1024]; // auto fell back to the CPU: why (empty otherwise)
} EvalDevice;

// flag "auto" | "cpu" | "cuda" -> *cuda (0 / 1). -1 on another value, or on "cuda" without CUDA
// support or a visible device.
int eval_device_pick(const char *flag, int *cuda, KdaError *err);
// Picks the device and, for cuda, uploads m's parameters into a GPU model (m stays usable on the
// CPU). auto falls back to the CPU when the GPU model cannot be created (e.g. a config the GPU
// path does not support), with the reason in d->note; an explicit cuda fails then.
int eval_device_open(EvalDevice *d, const char *flag, const KdaModel *m, KdaError *err);
void eval_device_close(EvalDevice *d); // accepts a zeroed struct

// EvalForwardFn (eval.h) over the GPU model; ctx is the EvalDevice. -1 on the CPU device.
int eval_device_forward(void *ctx, const int32_t *ids, const int32_t *labels, int64_t B, int64_t T,
                        float *nll, KdaError *err);
// logits [vocab] fp32 of the last position of ids [n] (n >= 1): one whole forward of ids on the
// GPU (cost O(n) per call). ctx is the EvalDevice. -1 on the CPU device.
int eval_device_logits_last(void *ctx, const int32_t *ids, int64_t n, float *logits, KdaError *err);

#endif
