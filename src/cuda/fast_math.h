// fast_math.h - the fast exponential, SiLU and SiLU' of the default (KDA_FAST_EXP=0: off;
// fast_math.cuh) evaluated element by element on the GPU and on the host, so tests can hold both
// forms to float64 over a sweep of x (test_fast_exp.c: fast_exp_bounds on the host,
// gpu_fast_exp_bounds on the device).
#ifndef KDA_CUDA_FAST_MATH_H
#define KDA_CUDA_FAST_MATH_H

#include "cuda/cuda_common.h" // defines: KdaCudaCtx

#ifdef KDA_HAVE_CUDA
#ifdef __cplusplus
extern "C" {
#endif

// x [n] fp32 -> out [3, n] fp32 (overwritten): row 0 SiLU(x), row 1 SiLU'(x), row 2 e^x; fast
// != 0 the fast forms (fast_math.cuh), else the precise ones the kernels use by default
// (cuda_internal.h's silu_f, dsilu_f and expf). Device pointers; queued on ctx->stream. Returns
// 0, or -1 with the reason in ctx->err.
int kda_cuda_fast_act_eval(KdaCudaCtx *ctx, float *out, const float *x, int64_t n, int fast);
// The same on the host (host pointers): fast != 0 the host form of the fast functions.
void kda_cuda_fast_act_eval_host(float *out, const float *x, int64_t n, int fast);

#ifdef __cplusplus
}
#endif
#endif // KDA_HAVE_CUDA
#endif
