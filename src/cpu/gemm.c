// gemm.c - Linear forward/backward through OpenBLAS (see gemm.h for the contract).
#include "cpu/gemm.h"

#include <cblas.h>

#include "core/error.h"

// cblas takes int (blasint) sizes; our tensors stay far below 2^31 per dimension.
static int dim_(int64_t n) {
    KDA_ASSERT(n >= 0 && n < ((int64_t)1 << 31));
    return (int)n;
}

void gemm_fwd(float *y, const float *x, const float *W, const float *bias, int64_t N, int64_t in,
              int64_t out, int accumulate) {
    if (N == 0 || out == 0) return;
    float beta = accumulate ? 1.0f : 0.0f;
    if (bias) {
        for (int64_t n = 0; n < N; n++)
            for (int64_t o = 0; o < out; o++) // overwrite, never 0*y: y may hold NaN garbage
                y[n * out + o] = (accumulate ? y[n * out + o] : 0.0f) + bias[o];
        beta = 1.0f;
    }
    if (in == 0) {
        if (beta == 0.0f)
            for (int64_t i = 0; i < N * out; i++)
                y[i] = 0.0f;
        return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, dim_(N), dim_(out), dim_(in), 1.0f, x,
                dim_(in), W, dim_(in), beta, y, dim_(out));
}

void gemm_bwd_dx(float *dx, const float *dy, const float *W, int64_t N, int64_t in, int64_t out,
                 int accumulate) {
    if (N == 0 || in == 0) return;
    if (out == 0) {
        if (!accumulate)
            for (int64_t i = 0; i < N * in; i++)
                dx[i] = 0.0f;
        return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, dim_(N), dim_(in), dim_(out), 1.0f, dy,
                dim_(out), W, dim_(in), accumulate ? 1.0f : 0.0f, dx, dim_(in));
}

void gemm_bwd_dw(float *dW, float *dbias, const float *dy, const float *x, int64_t N, int64_t in,
                 int64_t out) {
    if (N == 0 || out == 0) return;
    if (in > 0)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, dim_(out), dim_(in), dim_(N), 1.0f, dy,
                    dim_(out), x, dim_(in), 1.0f, dW, dim_(in));
    if (dbias)
        for (int64_t n = 0; n < N; n++)
            for (int64_t o = 0; o < out; o++)
                dbias[o] += dy[n * out + o];
}
