// gemm_cuda.cu - cuBLASLt matmul wrapper (bf16 operands, fp32 compute) and the Linear layer's
// three products; see gemm_cuda.h.
//
// Row-major X [N, in] is the column-major matrix Xᵀ [in, N] with ld = in. Hence
//   y = x·Wᵀ   ->  yᵀ [out, N] = op_T(W_cm [in, out]) · X_cm [in, N]
//   dx = dy·W  ->  dxᵀ [in, N] = W_cm [in, out] · dY_cm [out, N]
//   dW = dyᵀx  ->  dWᵀ [in, out] = X_cm [in, N] · op_T(dY_cm [out, N])
#include "cuda/gemm_cuda.h"     // defines: kda_cuda_gemm_*, kda_cuda_matmul
#include "cuda/cuda_internal.h" // defines: CUBLAS_CHECK, KDA_CUDA_REQUIRE

namespace {

struct LtDescs {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulPreference_t pref = nullptr;
    ~LtDescs() {
        if (pref) cublasLtMatmulPreferenceDestroy(pref);
        if (d) cublasLtMatrixLayoutDestroy(d);
        if (b) cublasLtMatrixLayoutDestroy(b);
        if (a) cublasLtMatrixLayoutDestroy(a);
        if (op) cublasLtMatmulDescDestroy(op);
    }
};

} // namespace

extern "C" int kda_cuda_matmul(KdaCudaCtx *ctx, int trans_a, int trans_b, int64_t m, int64_t n,
                               int64_t k, float alpha, const kda_bf16 *A, int64_t lda,
                               const kda_bf16 *B, int64_t ldb, float beta, void *D, KdaDtype d_type,
                               int64_t ldd) {
    KDA_CUDA_REQUIRE(ctx, m > 0 && n > 0 && k > 0);
    KDA_CUDA_REQUIRE(ctx, lda >= (trans_a ? k : m) && ldb >= (trans_b ? n : k) && ldd >= m);
    LtDescs s;
    cublasOperation_t ta = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t tb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cudaDataType_t dt = d_type == KDA_DT_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    CUBLAS_CHECK(ctx, cublasLtMatmulDescCreate(&s.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CUBLAS_CHECK(ctx,
                 cublasLtMatmulDescSetAttribute(s.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CUBLAS_CHECK(ctx,
                 cublasLtMatmulDescSetAttribute(s.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    // Stored shapes (column-major): A is m x k, or k x m when transposed; likewise B.
    CUBLAS_CHECK(
        ctx, cublasLtMatrixLayoutCreate(&s.a, CUDA_R_16BF, trans_a ? k : m, trans_a ? m : k, lda));
    CUBLAS_CHECK(
        ctx, cublasLtMatrixLayoutCreate(&s.b, CUDA_R_16BF, trans_b ? n : k, trans_b ? k : n, ldb));
    CUBLAS_CHECK(ctx, cublasLtMatrixLayoutCreate(&s.d, dt, m, n, ldd));
    CUBLAS_CHECK(ctx, cublasLtMatmulPreferenceCreate(&s.pref));
    size_t ws = ctx->lt_ws_size;
    CUBLAS_CHECK(ctx, cublasLtMatmulPreferenceSetAttribute(
                          s.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    cublasLtMatmulHeuristicResult_t h;
    int found = 0;
    cublasLtHandle_t lt = (cublasLtHandle_t)ctx->lt_handle;
    CUBLAS_CHECK(
        ctx, cublasLtMatmulAlgoGetHeuristic(lt, s.op, s.a, s.b, s.d, s.d, s.pref, 1, &h, &found));
    if (found < 1)
        return kda_cuda_fail_at(ctx, __FILE__, __LINE__, "cublasLtMatmulAlgoGetHeuristic",
                                "no algorithm for this shape");
    CUBLAS_CHECK(ctx, cublasLtMatmul(lt, s.op, &alpha, A, s.a, B, s.b, &beta, D, s.d, D, s.d,
                                     &h.algo, ctx->lt_ws, ctx->lt_ws_size, ctx->stream));
    return 0;
}

extern "C" int kda_cuda_gemm_fwd(KdaCudaCtx *ctx, void *y, KdaDtype y_type, const kda_bf16 *x,
                                 const kda_bf16 *W, int64_t N, int64_t in, int64_t out,
                                 int accumulate) {
    return kda_cuda_matmul(ctx, 1, 0, out, N, in, 1.0f, W, in, x, in, accumulate ? 1.0f : 0.0f, y,
                           y_type, out);
}

extern "C" int kda_cuda_gemm_residual(KdaCudaCtx *ctx, float *out, const float *res,
                                      const kda_bf16 *x, const kda_bf16 *W, int64_t N, int64_t in,
                                      int64_t out_f) {
    if (out != res)
        CUDA_CHECK(ctx, cudaMemcpyAsync(out, res, (size_t)(N * out_f) * sizeof(float),
                                        cudaMemcpyDeviceToDevice, ctx->stream));
    return kda_cuda_gemm_fwd(ctx, out, KDA_DT_F32, x, W, N, in, out_f, 1);
}

extern "C" int kda_cuda_gemm_bwd_dx(KdaCudaCtx *ctx, void *dx, KdaDtype dx_type, const kda_bf16 *dy,
                                    const kda_bf16 *W, int64_t N, int64_t in, int64_t out,
                                    int accumulate) {
    return kda_cuda_matmul(ctx, 0, 0, in, N, out, 1.0f, W, in, dy, out, accumulate ? 1.0f : 0.0f,
                           dx, dx_type, in);
}

extern "C" int kda_cuda_gemm_bwd_dw(KdaCudaCtx *ctx, float *dW, const kda_bf16 *dy,
                                    const kda_bf16 *x, int64_t N, int64_t in, int64_t out) {
    return kda_cuda_matmul(ctx, 0, 1, in, out, N, 1.0f, x, in, dy, out, 1.0f, dW, KDA_DT_F32, in);
}
