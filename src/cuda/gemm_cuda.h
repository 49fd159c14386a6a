// gemm_cuda.h - the Linear layer on the GPU through cuBLASLt: bf16 operands (fp32 ones for the
// scoring path at the end), fp32 accumulate, torch layout W [out, in]; the twin of cpu/gemm.h.
//
//   forward     y  (+)= x · Wᵀ          x [N, in] bf16, W [out, in] bf16, y [N, out] fp32|bf16
//   input grad  dx (+)= dy · W          dy [N, out] bf16 -> dx [N, in] fp32|bf16
//   weight grad dW  += dyᵀ · x          dW [out, in] fp32 (beta = 1: fp32 accumulation across
//                                       micro-batches and the two uses of a tied matrix)
//
// accumulate = 1 adds into the output (beta = 1), 0 overwrites it (beta = 0; the output is never
// read, so it may hold NaN). All tensors row-major. Biases are not fused here: the bias add and its
// gradient, and the column blocks of the fused input projection's output, are kernels of their own
// (the end of this header; gemm_cuda.cu).
#ifndef KDA_CUDA_GEMM_H
#define KDA_CUDA_GEMM_H

#include "cuda/cuda_common.h" // defines: KdaCudaCtx, kda_bf16

#ifdef KDA_HAVE_CUDA
#ifdef __cplusplus
extern "C" {
#endif

typedef enum { KDA_DT_F32 = 0, KDA_DT_BF16 = 1 } KdaDtype;

// y [N, out] (y_type) = x [N, in] · W [out, in]ᵀ.
int kda_cuda_gemm_fwd(KdaCudaCtx *ctx, void *y, KdaDtype y_type, const kda_bf16 *x,
                      const kda_bf16 *W, int64_t N, int64_t in, int64_t out, int accumulate);
// dx [N, in] (dx_type) = dy [N, out] · W [out, in].
int kda_cuda_gemm_bwd_dx(KdaCudaCtx *ctx, void *dx, KdaDtype dx_type, const kda_bf16 *dy,
                         const kda_bf16 *W, int64_t N, int64_t in, int64_t out, int accumulate);
// dW [out, in] fp32 += dy [N, out]ᵀ · x [N, in].
int kda_cuda_gemm_bwd_dw(KdaCudaCtx *ctx, float *dW, const kda_bf16 *dy, const kda_bf16 *x,
                         int64_t N, int64_t in, int64_t out);

// Residual Linear: out [N, out_f] fp32 = res [N, out_f] fp32 + x [N, in] · W [out_f, in]ᵀ
// (o_proj / down_proj adding into the fp32 residual stream). out and res may be the same.
int kda_cuda_gemm_residual(KdaCudaCtx *ctx, float *out, const float *res, const kda_bf16 *x,
                           const kda_bf16 *W, int64_t N, int64_t in, int64_t out_f);

// General column-major form (BLAS convention) the three above are built on:
// D [m, n] (ld ldd, d_type) = alpha · op(A) · op(B) + beta · D, op(A) [m, k], op(B) [k, n],
// A and B bf16; trans_* = 1 means the stored matrix is the transpose of op(·).
int kda_cuda_matmul(KdaCudaCtx *ctx, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                    float alpha, const kda_bf16 *A, int64_t lda, const kda_bf16 *B, int64_t ldb,
                    float beta, void *D, KdaDtype d_type, int64_t ldd);

// cuBLASLt's heuristic candidates (up to 8, best first by its own estimate) for kda_cuda_matmul's
// product D = op(A) · op(B) + beta · C (C NULL or D when beta = 0; else C != D, so that the
// product can run several times), each timed on these operands: ms[i] = the fastest of `reps`
// runs after a warm-up (INFINITY when a candidate fails to run); *n_cand = how many. D is
// overwritten. Synchronizes the stream. For benchmarks (bench/kda_kernel/bench_proj.c); the
// environment KDA_GEMM_TUNE=1 at kda_cuda_init makes every cached plan pick its fastest this way.
int kda_cuda_gemm_probe(KdaCudaCtx *ctx, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                        const kda_bf16 *A, int64_t lda, const kda_bf16 *B, int64_t ldb, float beta,
                        const void *C, void *D, KdaDtype d_type, int64_t ldd, int reps, float *ms,
                        int *n_cand);

// Candidate i of cuBLASLt's heuristic for that product (kda_cuda_gemm_probe's list; ctx->gemm_cand
// runs it in every GEMM) described in buf [len] ("algo A tile T stages S cluster C splitk K", the
// empty string when i >= *n_cand); *n_cand = how many candidates; *picked (picked may be NULL) =
// the index a new plan of ctx runs (KDA_GEMM_RULES' or KDA_GEMM_TILES's pick, else 0). No product
// runs. For benchmarks (bench/kda_kernel/bench_gemm.c) and tests. Returns -1 (ctx error) when no
// plan can be built.
int kda_cuda_gemm_cand_desc(KdaCudaCtx *ctx, int trans_a, int trans_b, int64_t m, int64_t n,
                            int64_t k, int64_t lda, int64_t ldb, KdaDtype d_type, int64_t ldd,
                            int i, char *buf, size_t len, int *n_cand, int *picked);
// ---- fp32 operands: the scoring path (--precision fp32, model/model_cuda_f32.h)
// ------------------ The same products with x, W, A, B fp32 and fp32 output: CUBLAS_COMPUTE_32F
// with fp32 operands is full fp32 (fp32 products, fp32 accumulation; TF32 would need
// CUBLAS_COMPUTE_32F_FAST_TF32). y [N, out] fp32 = x [N, in] fp32 · W [out, in]ᵀ fp32
// (overwritten).
int kda_cuda_gemm_fwd_f32(KdaCudaCtx *ctx, float *y, const float *x, const float *W, int64_t N,
                          int64_t in, int64_t out);
// out [N, out_f] fp32 = res [N, out_f] + x [N, in] fp32 · W [out_f, in]ᵀ fp32; out may be res.
int kda_cuda_gemm_residual_f32(KdaCudaCtx *ctx, float *out, const float *res, const float *x,
                               const float *W, int64_t N, int64_t in, int64_t out_f);
// Column-major D [m, n] fp32 = op(A) · op(B) (kda_cuda_matmul's form, alpha 1, beta 0).
int kda_cuda_matmul_f32(KdaCudaCtx *ctx, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                        const float *A, int64_t lda, const float *B, int64_t ldb, float *D,
                        int64_t ldd);

// ---- Linear bias (g_proj.1 is the one Linear with a bias, kda-model.md §5.3 step 11) ------------
// y [N, out] bf16 += bias [out] fp32 (fp32 add, one rounding); the GEMM wrapper has no epilogue.
int kda_cuda_bias_add(KdaCudaCtx *ctx, kda_bf16 *y, const float *bias, int64_t N, int64_t out);
// dbias [out] fp32 += Σ_rows dy [N, out] bf16 (deterministic column sum).
int kda_cuda_bias_bwd(KdaCudaCtx *ctx, float *dbias, const kda_bf16 *dy, int64_t N, int64_t out);

// fp32 twin (the scoring path, --precision fp32, model/model_cuda_f32.h): y [N, out] fp32.
int kda_cuda_bias_add_f32(KdaCudaCtx *ctx, float *y, const float *bias, int64_t N, int64_t out);

// ---- column blocks of a bf16 matrix (the fused input projection's parts) --------------------
// Up to KDA_CUDA_SPLIT_MAX parts of a row-major src [rows, lds] bf16: part i is the columns
// [col[i], col[i] + cols[i]) of every row, copied to dst[i] [rows, ld[i]] (row stride ld[i] >=
// cols[i]; the parts must not overlap src or each other). One launch for all parts; 16-byte
// accesses when every part's columns, strides and pointers are multiples of 8 elements (16
// bytes), else 2-byte ones (same result).
#define KDA_CUDA_SPLIT_MAX 8
typedef struct {
    kda_bf16 *dst[KDA_CUDA_SPLIT_MAX];
    int64_t col[KDA_CUDA_SPLIT_MAX], cols[KDA_CUDA_SPLIT_MAX], ld[KDA_CUDA_SPLIT_MAX];
    int n; // parts (1 .. KDA_CUDA_SPLIT_MAX)
} KdaCudaColParts;
int kda_cuda_cols_split(KdaCudaCtx *ctx, const kda_bf16 *src, int64_t lds, int64_t rows,
                        const KdaCudaColParts *parts);
// The reverse for one part: dst [rows, ldd] columns [0, cols) = src [rows, lds] columns [0, cols)
// (bf16; a 2-D copy: cudaMemcpy2DAsync's job, as a kernel with 16-byte accesses when aligned).
int kda_cuda_cols_copy(KdaCudaCtx *ctx, kda_bf16 *dst, int64_t ldd, const kda_bf16 *src,
                       int64_t lds, int64_t rows, int64_t cols);
// Host twin of kda_cuda_cols_split (the same per-group body; test_fuse_host.c).
void kda_cuda_cols_split_host(const kda_bf16 *src, int64_t lds, int64_t rows,
                              const KdaCudaColParts *parts);

#ifdef __cplusplus
}
#endif
#endif // KDA_HAVE_CUDA
#endif
