// device.h - the --device and --precision flags of `kda score`, `kda eval` and `kda generate`
// (--device auto | cpu | cuda; --precision bf16 | fp32, score and eval), and the GPU model
// (cuda/model_cuda.h, or cuda/model_cuda_f32.h for fp32) behind the eval forward hook
// (EvalForwardFn) and the last-position logits that generation needs.
//
// auto = cuda when the build has CUDA (KDA_HAVE_CUDA) and at least one device is visible, else
// cpu. An explicit cuda fails (one line) without a CUDA build or a visible device. The GPU model
// is device 0, chunked core, in one of two precisions:
//   bf16 (the GPU default): the training model's forward, bf16 mixed precision (bf16 weights and
//        activations into every GEMM, fp32 accumulation, fp32 residual stream and head); what
//        lm-eval's FLA run uses (dtype bfloat16);
//   fp32: the fp32 forward of model_cuda_f32.h (fp32 weights, activations and GEMMs, no TF32),
//        the CPU's numbers to ~1e-6 per sequence.
// The CPU model always computes in fp32: --precision fp32 is accepted there (a no-op) and
// --precision bf16 is refused with one line (there is no bf16 CPU path to give it).
// Library code: errors return -1 with the message in err; nothing is printed.
#ifndef KDA_EVAL_DEVICE_H
#define KDA_EVAL_DEVICE_H

#include <stdint.h>

#include "core/error.h"  // defines: KdaError
#include "model/model.h" // defines: KdaModel

typedef struct {
    int cuda;              // 1: a GPU model (gpu or gpu32) runs the forwards
    void *gpu;             // KdaCudaModel * (bf16, CUDA builds), else NULL
    void *gpu32;           // KdaCudaF32Model * (fp32, CUDA builds), else NULL
    const char *precision; // "bf16" or "fp32" (static string): what the forwards compute in
    int64_t vocab;         // the model's vocab_size (logits length)
    char name[160];        // "cpu" or "cuda:0 (<device name>)", for logs
    char note[1024];       // auto fell back to the CPU: why (empty otherwise)
} EvalDevice;

// --precision: flag "bf16" | "fp32" | NULL (not given) -> *fp32 = 0 | 1 | -1. -1 with
// "--precision must be bf16 or fp32, got 'X'" on another value.
int eval_precision_parse(const char *flag, int *fp32, KdaError *err);

// flag "auto" | "cpu" | "cuda" -> *cuda (0 / 1). -1 on another value, or on "cuda" without CUDA
// support or a visible device.
int eval_device_pick(const char *flag, int *cuda, KdaError *err);
// Picks the device and, for cuda, uploads m's parameters into a GPU model of the precision
// `precision` ("bf16" | "fp32" | NULL = bf16 on the GPU, fp32 on the CPU; m stays usable on the
// CPU). auto falls back to the CPU when the GPU model cannot be created (e.g. a config the GPU
// path does not support), with the reason in d->note; an explicit cuda fails then. -1 when an
// explicit "bf16" ends up on the CPU device.
int eval_device_open(EvalDevice *d, const char *flag, const char *precision, const KdaModel *m,
                     KdaError *err);
void eval_device_close(EvalDevice *d); // accepts a zeroed struct

// EvalForwardFn (eval.h) over the GPU model; ctx is the EvalDevice. -1 on the CPU device.
int eval_device_forward(void *ctx, const int32_t *ids, const int32_t *labels, int64_t B, int64_t T,
                        float *nll, KdaError *err);
// logits [vocab] fp32 of the last position of ids [n] (n >= 1): one whole forward of ids on the
// GPU (cost O(n) per call). ctx is the EvalDevice. -1 on the CPU device.
int eval_device_logits_last(void *ctx, const int32_t *ids, int64_t n, float *logits, KdaError *err);

#endif
