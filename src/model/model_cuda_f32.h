// model_cuda_f32.h - the KDA language model's forward on one GPU in fp32: the `--precision fp32`
// scoring path of `kda score` and `kda eval` (docs/eval.md, docs/correctness.md).
//
// What it computes is kda_model_forward's (model/model.h, the CPU fp32 reference) with the same
// dtypes: fp32 parameters (no bf16 copy), every activation fp32, every GEMM fp32 through
// cuBLASLt (fp32 operands, CUBLAS_COMPUTE_32F: fp32 products and accumulation, no TF32), norms,
// conv, gate, β, gated norm and SwiGLU fp32 (the *_f32 twins of cuda/norm_cuda.h, conv_cuda.h,
// kda_gate_cuda.h, swiglu_cuda.h), the chunk-parallel KDA core on fp32 q, k, v, o (kda_fast.h
// kda_fast_fwd_f32), and the LM head as fp32 logits per token chunk with the fused classifier's
// partition sum (xent_cuda.h kda_cuda_cls_loss_f32). Only the
// summation orders differ from the CPU: per-sequence mean NLL within ~1e-6 of it (the 1e-4 bar of
// tests/test_gpu_score.c).
//
// Forward only (no gradients, no optimizer state): one layer's activations are reused by every
// block, the residual stream is updated in place, and only the final-norm output of the last
// forward is kept (for kda_cuda_f32_model_logits). The training path (model_cuda.h) is not
// involved; both share the kernels, instantiated for fp32 storage here.
//
// Supported configs: those of model_cuda.h (kda_cuda_model_check_config) whose head dims fit the
// chunk-parallel KDA kernels (kda_fast_chunk < 64: every config in configs/); others fail at
// create with one message. Device layout of the parameters: kda_cuda_device_offsets (no fused
// input projection). Errors: -1 with the message in *err. The header is empty without
// KDA_HAVE_CUDA. One model per thread; calls wait for the GPU before they return results.
#ifndef KDA_MODEL_CUDA_F32_H
#define KDA_MODEL_CUDA_F32_H

#include <stdint.h>

#include "core/error.h"   // defines: KdaError
#include "model/config.h" // defines: KdaConfig
#include "model/params.h" // defines: KdaParamTable

#ifdef KDA_HAVE_CUDA

typedef struct KdaCudaF32Model KdaCudaF32Model;

// Device `device`'s context and an fp32 copy of params [t->total_numel] (host, dense table
// layout). cfg and t are copied.
int kda_cuda_f32_model_create(KdaCudaF32Model **out, const KdaConfig *cfg, const KdaParamTable *t,
                              const float *params, int device, KdaError *err);
void kda_cuda_f32_model_free(KdaCudaF32Model *m); // accepts NULL

// Forward of a batch (contract of kda_model_forward): ids [B, T] int32 in [0, n_vocab); labels
// [B, T] or NULL (= ids), shifted inside, -100 ignored. nll [B, T] fp32 host or NULL (per-position
// NLL, 0 where ignored); loss (host) or NULL (mean over the valid targets). Waits for the GPU.
// Memory grows to the largest B·T seen.
int kda_cuda_f32_model_forward(KdaCudaF32Model *m, const int32_t *ids, const int32_t *labels,
                               int64_t B, int64_t T, float *nll, float *loss, KdaError *err);
// Logits [n_vocab] fp32 host of position (b, t) of the last forward (its final-norm row times the
// head, fp32). -1 without a preceding forward or outside its [B, T].
int kda_cuda_f32_model_logits(KdaCudaF32Model *m, int64_t b, int64_t t, float *logits,
                              KdaError *err);
const char *kda_cuda_f32_model_device_name(const KdaCudaF32Model *m);

#endif // KDA_HAVE_CUDA
#endif
