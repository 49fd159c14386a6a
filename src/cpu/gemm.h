// gemm.h - the Linear layer on the CPU (fp32, OpenBLAS cblas_sgemm), torch layout W [out, in].
//
//   forward    y  = x · Wᵀ (+ bias)        x [N, in], W [out, in], y [N, out]
//   input grad dx = dy · W                 dy [N, out] -> dx [N, in]
//   weight grad dW += dyᵀ · x, dbias += Σ_rows dy
//
// Contract: gemm_fwd and gemm_bwd_dx overwrite (accumulate = 0) or add into (accumulate = 1)
// their output; weight and bias gradients always accumulate (+=), so several micro-batches (or
// the two uses of a tied matrix) sum into one buffer. Sizes are int64_t; all tensors row-major.
#ifndef KDA_CPU_GEMM_H
#define KDA_CPU_GEMM_H

#include <stdint.h>

// y [N, out] = x [N, in] · W[out, in]ᵀ + bias [out] (bias may be NULL); adds into y if accumulate.
void gemm_fwd(float *y, const float *x, const float *W, const float *bias, int64_t N, int64_t in,
              int64_t out, int accumulate);
// dx [N, in] (+)= dy [N, out] · W [out, in].
void gemm_bwd_dx(float *dx, const float *dy, const float *W, int64_t N, int64_t in, int64_t out,
                 int accumulate);
// dW [out, in] += dy [N, out]ᵀ · x [N, in]; dbias [out] += Σ_n dy[n] (dbias may be NULL).
void gemm_bwd_dw(float *dW, float *dbias, const float *dy, const float *x, int64_t N, int64_t in,
                 int64_t out);

#endif
