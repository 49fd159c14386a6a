// gemm_cuda.cu - cuBLASLt matmul wrapper (bf16 or fp32 operands, fp32 compute) and the Linear
// layer's three products; at the end, the Linear bias and the fused input projection's column
// blocks (kernels, then launchers); see gemm_cuda.h.
//
// Row-major X [N, in] is the column-major matrix Xᵀ [in, N] with ld = in. Hence
//   y = x·Wᵀ   ->  yᵀ [out, N] = op_T(W_cm [in, out]) · X_cm [in, N]
//   dx = dy·W  ->  dxᵀ [in, N] = W_cm [in, out] · dY_cm [out, N]
//   dW = dyᵀx  ->  dWᵀ [in, out] = X_cm [in, N] · op_T(dY_cm [out, N])
#include "cuda/gemm_cuda.h" // defines: kda_cuda_gemm_*, kda_cuda_matmul
#include <new>              // std::nothrow
#include <stdio.h>          // snprintf

#include "cuda/cuda_internal.h" // defines: CUBLAS_CHECK, KDA_CUDA_REQUIRE
#include "cuda/ops_common.cuh"  // defines: colsum_add, BiasDb, aligned_ (bias and column blocks)

namespace {

#define GEMM_CANDS 8 // heuristic candidates kept per plan (KDA_GEMM_TUNE, kda_cuda_gemm_probe)

struct LtDescs {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulPreference_t pref = nullptr;
    cublasLtMatmulAlgo_t algo;             // the one in use: cand[0] unless tuned
    cublasLtMatmulAlgo_t cand[GEMM_CANDS]; // the heuristic's candidates, best first
    int n_cand = 0, tuned = 0;
    void release() {
        if (pref) cublasLtMatmulPreferenceDestroy(pref);
        if (d) cublasLtMatrixLayoutDestroy(d);
        if (b) cublasLtMatrixLayoutDestroy(b);
        if (a) cublasLtMatrixLayoutDestroy(a);
        if (op) cublasLtMatmulDescDestroy(op);
        pref = nullptr, d = b = a = nullptr, op = nullptr;
    }
};

// What a plan depends on: the heuristic sees the descriptors only (not alpha, beta or the
// pointers; cuBLASLt assumes 256-byte aligned pointers by default, cached or not).
struct PlanKey {
    int64_t m, n, k, lda, ldb, ldd;
    int ta, tb, dt, ab; // ab: the operands' KdaDtype
    bool operator==(const PlanKey &o) const {
        return m == o.m && n == o.n && k == o.k && lda == o.lda && ldb == o.ldb && ldd == o.ldd &&
               ta == o.ta && tb == o.tb && dt == o.dt && ab == o.ab;
    }
};

// The context's plan cache: one entry per GEMM shape of the model (~60 for the KDA LM, several
// B·T shapes included), linear search. Full: calls build an uncached plan.
#define PLAN_CAP 512
struct PlanCache {
    PlanKey key[PLAN_CAP];
    LtDescs plan[PLAN_CAP];
    int n = 0;
};

// One configuration attribute of a cuBLASLt algorithm (cublasLtMatmulAlgoConfig; the values are
// cuBLASLt's enums, cublasLt.h), -1 when this cuBLASLt cannot read it.
int algo_attr(const cublasLtMatmulAlgo_t &a, cublasLtMatmulAlgoConfigAttributes_t at) {
    uint32_t x = 0;
    size_t got = 0;
    return cublasLtMatmulAlgoConfigGetAttribute(&a, at, &x, sizeof x, &got) == CUBLAS_STATUS_SUCCESS
               ? (int)x
               : -1;
}

// The index of s's first candidate with this tile (cublasLtMatmulTile_t), -1 when none has it.
int first_with_tile(const LtDescs &s, int tile) {
    for (int i = 0; i < s.n_cand; i++)
        if (algo_attr(s.cand[i], CUBLASLT_ALGO_CONFIG_TILE_ID) == tile) return i;
    return -1;
}

// The first candidate with the tile of q's rule (ctx->gemm_pick.rules, bf16 operands only), where
// there is one; else KDA_GEMM_TILES (ctx->gemm_pick.tiles): the index of the first candidate whose
// tile comes first in the list; 0 (the heuristic's first) when the list is empty or names none
// of s's candidates.
int pick_by_tile(const KdaCudaCtx *ctx, const PlanKey &q, const LtDescs &s) {
    int rule = q.ab == KDA_DT_BF16 ? kda_cuda_gemm_rule_tile(ctx, q.ta, q.tb, q.m, q.k, q.dt) : 0;
    int i = rule ? first_with_tile(s, rule) : -1;
    for (int t = 0; i < 0 && t < ctx->gemm_pick.n_tiles; t++)
        i = first_with_tile(s, ctx->gemm_pick.tiles[t]);
    return i < 0 ? 0 : i;
}

// Builds descriptors, layouts and the algorithm for key into s: the heuristic's first candidate,
// or KDA_GEMM_RULES' / KDA_GEMM_TILES's pick among them.
int build_plan(KdaCudaCtx *ctx, const PlanKey &q, LtDescs &s) {
    cublasOperation_t ta = q.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t tb = q.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cudaDataType_t dt = q.dt == KDA_DT_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    cudaDataType_t ab = q.ab == KDA_DT_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    // CUBLAS_COMPUTE_32F: fp32 accumulation; with fp32 operands also fp32 products (no TF32,
    // which only CUBLAS_COMPUTE_32F_FAST_TF32 would allow).
    CUBLAS_CHECK(ctx, cublasLtMatmulDescCreate(&s.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CUBLAS_CHECK(ctx,
                 cublasLtMatmulDescSetAttribute(s.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CUBLAS_CHECK(ctx,
                 cublasLtMatmulDescSetAttribute(s.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    // Stored shapes (column-major): A is m x k, or k x m when transposed; likewise B.
    CUBLAS_CHECK(ctx,
                 cublasLtMatrixLayoutCreate(&s.a, ab, q.ta ? q.k : q.m, q.ta ? q.m : q.k, q.lda));
    CUBLAS_CHECK(ctx,
                 cublasLtMatrixLayoutCreate(&s.b, ab, q.tb ? q.n : q.k, q.tb ? q.k : q.n, q.ldb));
    CUBLAS_CHECK(ctx, cublasLtMatrixLayoutCreate(&s.d, dt, q.m, q.n, q.ldd));
    CUBLAS_CHECK(ctx, cublasLtMatmulPreferenceCreate(&s.pref));
    size_t ws = ctx->lt_ws_size;
    CUBLAS_CHECK(ctx, cublasLtMatmulPreferenceSetAttribute(
                          s.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    cublasLtMatmulHeuristicResult_t h[GEMM_CANDS];
    int found = 0;
    cublasLtHandle_t lt = (cublasLtHandle_t)ctx->lt_handle;
    CUBLAS_CHECK(ctx, cublasLtMatmulAlgoGetHeuristic(lt, s.op, s.a, s.b, s.d, s.d, s.pref,
                                                     GEMM_CANDS, h, &found));
    if (found < 1)
        return kda_cuda_fail_at(ctx, __FILE__, __LINE__, "cublasLtMatmulAlgoGetHeuristic",
                                "no algorithm for this shape");
    s.n_cand = 0;
    for (int i = 0; i < found && i < GEMM_CANDS; i++)
        if (h[i].state == CUBLAS_STATUS_SUCCESS) s.cand[s.n_cand++] = h[i].algo;
    if (s.n_cand < 1)
        return kda_cuda_fail_at(ctx, __FILE__, __LINE__, "cublasLtMatmulAlgoGetHeuristic",
                                "no usable algorithm for this shape");
    s.algo = s.cand[pick_by_tile(ctx, q, s)];
    return 0;
}

// Median-free timing of plan s's candidates on these operands: one warm-up, then `reps` runs in
// one event interval each; ms[i] = the fastest run of candidate i (INFINITY when it fails).
// Synchronizes the stream. D must be safe to compute several times (beta 0, or C != D).
int time_cands(KdaCudaCtx *ctx, const LtDescs &s, const float *alpha, const void *A, const void *B,
               const float *beta, const void *C, void *D, int reps, float *ms) {
    cublasLtHandle_t lt = (cublasLtHandle_t)ctx->lt_handle;
    cudaEvent_t e0, e1;
    CUDA_CHECK(ctx, cudaEventCreate(&e0));
    if (cudaEventCreate(&e1) != cudaSuccess) {
        cudaEventDestroy(e0);
        return kda_cuda_fail_at(ctx, __FILE__, __LINE__, "cudaEventCreate", "failed");
    }
    int rc = 0;
    for (int i = 0; i < s.n_cand && !rc; i++) {
        ms[i] = INFINITY;
        for (int r = 0; r <= reps && !rc; r++) {
            if (cudaEventRecord(e0, ctx->stream) != cudaSuccess) rc = -1;
            cublasStatus_t st =
                cublasLtMatmul(lt, s.op, alpha, A, s.a, B, s.b, beta, C, s.d, D, s.d, &s.cand[i],
                               ctx->lt_ws, ctx->lt_ws_size, ctx->stream);
            if (st != CUBLAS_STATUS_SUCCESS) break; // this candidate does not run: skip it
            float t = 0.0f;
            if (cudaEventRecord(e1, ctx->stream) != cudaSuccess ||
                cudaEventSynchronize(e1) != cudaSuccess ||
                cudaEventElapsedTime(&t, e0, e1) != cudaSuccess)
                rc = -1;
            else if (r > 0 && t < ms[i]) // run 0 warms up
                ms[i] = t;
        }
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    if (rc) return kda_cuda_fail_at(ctx, __FILE__, __LINE__, "gemm candidate timing", "failed");
    CUDA_CHECK(ctx, cudaGetLastError());
    return 0;
}

// D = alpha · op(A) · op(B) + beta · C (C and D share D's layout; C may be D); A and B of
// ab_type.
int matmul_cd(KdaCudaCtx *ctx, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
              float alpha, KdaDtype ab_type, const void *A, int64_t lda, const void *B, int64_t ldb,
              float beta, const void *C, void *D, KdaDtype d_type, int64_t ldd) {
    KDA_CUDA_REQUIRE(ctx, m > 0 && n > 0 && k > 0);
    KDA_CUDA_REQUIRE(ctx, lda >= (trans_a ? k : m) && ldb >= (trans_b ? n : k) && ldd >= m);
    PlanKey q = {m, n, k, lda, ldb, ldd, trans_a != 0, trans_b != 0, (int)d_type, (int)ab_type};
    cublasLtHandle_t lt = (cublasLtHandle_t)ctx->lt_handle;
    PlanCache *pc = (PlanCache *)ctx->lt_plans;
    if (!ctx->plan_off && !pc) {
        pc = new (std::nothrow) PlanCache();
        ctx->lt_plans = pc; // NULL on failure: uncached
    }
    const LtDescs *use = nullptr;
    LtDescs local;
    if (pc && !ctx->plan_off) {
        for (int i = 0; i < pc->n && !use; i++)
            if (pc->key[i] == q) use = &pc->plan[i];
        if (!use && pc->n < PLAN_CAP) {
            LtDescs &s = pc->plan[pc->n];
            if (build_plan(ctx, q, s)) {
                s.release();
                return -1;
            }
            pc->key[pc->n++] = q;
            use = &s;
        }
    }
    if (!use) {
        if (build_plan(ctx, q, local)) {
            local.release();
            return -1;
        }
        use = &local;
    }
    if (ctx->gemm_tune && use != &local && !use->tuned && use->n_cand > 1 &&
        (beta == 0.0f || C != D)) { // KDA_GEMM_TUNE=1: keep the fastest candidate
        LtDescs *t = const_cast<LtDescs *>(use);
        float ms[GEMM_CANDS];
        if (time_cands(ctx, *t, &alpha, A, B, &beta, C, D, 3, ms)) return -1;
        int best = 0;
        for (int i = 1; i < t->n_cand; i++)
            if (ms[i] < ms[best]) best = i;
        t->algo = t->cand[best];
        t->tuned = 1;
    }
    // KDA_GEMM_CAND (ctx->gemm_cand): another of the heuristic's candidates, where there is one
    const cublasLtMatmulAlgo_t *algo = ctx->gemm_cand > 0 && ctx->gemm_cand < use->n_cand
                                           ? &use->cand[ctx->gemm_cand]
                                           : &use->algo;
    cublasStatus_t st = cublasLtMatmul(lt, use->op, &alpha, A, use->a, B, use->b, &beta, C, use->d,
                                       D, use->d, algo, ctx->lt_ws, ctx->lt_ws_size, ctx->stream);
    local.release();
    if (st != CUBLAS_STATUS_SUCCESS)
        return kda_cuda_fail_at(ctx, __FILE__, __LINE__, "cublasLtMatmul",
                                cublasGetStatusString(st));
    return 0;
}

} // namespace

extern "C" int kda_cuda_gemm_probe(KdaCudaCtx *ctx, int trans_a, int trans_b, int64_t m, int64_t n,
                                   int64_t k, const kda_bf16 *A, int64_t lda, const kda_bf16 *B,
                                   int64_t ldb, float beta, const void *C, void *D, KdaDtype d_type,
                                   int64_t ldd, int reps, float *ms, int *n_cand) {
    KDA_CUDA_REQUIRE(ctx, m > 0 && n > 0 && k > 0 && reps >= 1 && ms && n_cand);
    KDA_CUDA_REQUIRE(ctx, lda >= (trans_a ? k : m) && ldb >= (trans_b ? n : k) && ldd >= m);
    KDA_CUDA_REQUIRE(ctx, beta == 0.0f || C != D);
    PlanKey q = {m, n, k, lda, ldb, ldd, trans_a != 0, trans_b != 0, (int)d_type, KDA_DT_BF16};
    LtDescs s;
    float alpha = 1.0f;
    int rc = build_plan(ctx, q, s) ||
             time_cands(ctx, s, &alpha, A, B, &beta, beta == 0.0f ? D : C, D, reps, ms);
    *n_cand = rc ? 0 : s.n_cand;
    s.release();
    return rc ? -1 : 0;
}

// "algo A tile T stages S cluster C splitk K" of a cuBLASLt algorithm (algo_attr's values).
static void algo_desc(const cublasLtMatmulAlgo_t &a, char *buf, size_t len) {
    snprintf(buf, len, "algo %d tile %d stages %d cluster %d splitk %d",
             algo_attr(a, CUBLASLT_ALGO_CONFIG_ID), algo_attr(a, CUBLASLT_ALGO_CONFIG_TILE_ID),
             algo_attr(a, CUBLASLT_ALGO_CONFIG_STAGES_ID),
             algo_attr(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID),
             algo_attr(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM));
}

extern "C" int kda_cuda_gemm_cand_desc(KdaCudaCtx *ctx, int trans_a, int trans_b, int64_t m,
                                       int64_t n, int64_t k, int64_t lda, int64_t ldb,
                                       KdaDtype d_type, int64_t ldd, int i, char *buf, size_t len,
                                       int *n_cand, int *picked) {
    KDA_CUDA_REQUIRE(ctx, m > 0 && n > 0 && k > 0 && i >= 0 && buf && len > 0 && n_cand);
    KDA_CUDA_REQUIRE(ctx, lda >= (trans_a ? k : m) && ldb >= (trans_b ? n : k) && ldd >= m);
    PlanKey q = {m, n, k, lda, ldb, ldd, trans_a != 0, trans_b != 0, (int)d_type, KDA_DT_BF16};
    LtDescs s;
    int rc = build_plan(ctx, q, s);
    *n_cand = rc ? 0 : s.n_cand;
    if (picked) *picked = rc ? 0 : pick_by_tile(ctx, q, s);
    buf[0] = '\0';
    if (!rc && i < s.n_cand) algo_desc(s.cand[i], buf, len);
    s.release();
    return rc ? -1 : 0;
}

extern "C" void kda_cuda_gemm_plans_free(KdaCudaCtx *ctx) {
    PlanCache *pc = (PlanCache *)ctx->lt_plans;
    if (!pc) return;
    for (int i = 0; i < pc->n; i++)
        pc->plan[i].release();
    delete pc;
    ctx->lt_plans = nullptr;
}

extern "C" int kda_cuda_matmul(KdaCudaCtx *ctx, int trans_a, int trans_b, int64_t m, int64_t n,
                               int64_t k, float alpha, const kda_bf16 *A, int64_t lda,
                               const kda_bf16 *B, int64_t ldb, float beta, void *D, KdaDtype d_type,
                               int64_t ldd) {
    return matmul_cd(ctx, trans_a, trans_b, m, n, k, alpha, KDA_DT_BF16, A, lda, B, ldb, beta, D, D,
                     d_type, ldd);
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
    if (ctx->plan_off) { // KDA_GEMM_PLAN=0: the copy + in-place beta = 1 GEMM of before
        if (out != res)
            CUDA_CHECK(ctx, cudaMemcpyAsync(out, res, (size_t)(N * out_f) * sizeof(float),
                                            cudaMemcpyDeviceToDevice, ctx->stream));
        return kda_cuda_gemm_fwd(ctx, out, KDA_DT_F32, x, W, N, in, out_f, 1);
    }
    // C = res, D = out: cuBLASLt's epilogue adds the residual while writing (no copy pass)
    return matmul_cd(ctx, 1, 0, out_f, N, in, 1.0f, KDA_DT_BF16, W, in, x, in, 1.0f, res, out,
                     KDA_DT_F32, out_f);
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

// ---- fp32 operands (the scoring path of model_cuda_f32.c) ------------------------------

extern "C" int kda_cuda_gemm_fwd_f32(KdaCudaCtx *ctx, float *y, const float *x, const float *W,
                                     int64_t N, int64_t in, int64_t out) {
    return matmul_cd(ctx, 1, 0, out, N, in, 1.0f, KDA_DT_F32, W, in, x, in, 0.0f, y, y, KDA_DT_F32,
                     out);
}

extern "C" int kda_cuda_gemm_residual_f32(KdaCudaCtx *ctx, float *out, const float *res,
                                          const float *x, const float *W, int64_t N, int64_t in,
                                          int64_t out_f) {
    return matmul_cd(ctx, 1, 0, out_f, N, in, 1.0f, KDA_DT_F32, W, in, x, in, 1.0f, res, out,
                     KDA_DT_F32, out_f);
}

extern "C" int kda_cuda_matmul_f32(KdaCudaCtx *ctx, int trans_a, int trans_b, int64_t m, int64_t n,
                                   int64_t k, const float *A, int64_t lda, const float *B,
                                   int64_t ldb, float *D, int64_t ldd) {
    return matmul_cd(ctx, trans_a, trans_b, m, n, k, 1.0f, KDA_DT_F32, A, lda, B, ldb, 0.0f, D, D,
                     KDA_DT_F32, ldd);
}

namespace {

// ---- Linear bias -----------------------------------------------------------------------------

template <class E> __global__ void bias_add_k(E *y, const float *bias, int64_t N, int64_t out) {
    kda_grid_wait();
    int64_t n = N * out;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
         e += (int64_t)gridDim.x * blockDim.x)
        stf(y, e, ldf(y, e) + bias[e % out]);
}

} // namespace

extern "C" {

int kda_cuda_bias_add(KdaCudaCtx *ctx, kda_bf16 *y, const float *bias, int64_t N, int64_t out) {
    KDA_CUDA_REQUIRE(ctx, N >= 0 && out > 0);
    if (N == 0) return 0;
    CUDA_CHECK(ctx, kda_launch(ctx, bias_add_k<kda_bf16>, dim3(grid_for(N * out)), dim3(256), 0, y,
                               bias, N, out));
    return 0;
}

int kda_cuda_bias_bwd(KdaCudaCtx *ctx, float *dbias, const kda_bf16 *dy, int64_t N, int64_t out) {
    KDA_CUDA_REQUIRE(ctx, N >= 0 && out > 0);
    if (N == 0) return 0;
    return colsum_add(ctx, dbias, N, out, BiasDb{dy, out});
}

int kda_cuda_bias_add_f32(KdaCudaCtx *ctx, float *y, const float *bias, int64_t N, int64_t out) {
    KDA_CUDA_REQUIRE(ctx, N >= 0 && out > 0);
    if (N == 0) return 0;
    CUDA_CHECK(ctx, kda_launch(ctx, bias_add_k<float>, dim3(grid_for(N * out)), dim3(256), 0, y,
                               bias, N, out));
    return 0;
}

} // extern "C"

namespace {

// ---- column blocks (the fused input projection's parts) --------------------------------------
// Item i of the split: source row r = i / ng, element group j = i % ng of width `vec` (8: one
// 16-byte access; 1: one element); the group belongs to the part whose columns contain it (the
// vector path requires every part boundary at a multiple of 8, so a group never straddles two).
template <int VEC> // 8 or 1
__host__ __device__ inline void split_item(const kda_bf16 *src, int64_t lds, int64_t ng,
                                           const KdaCudaColParts &pp, int64_t i) {
    int64_t r = i / ng, c = (i - r * ng) * VEC;
    for (int k = 0; k < pp.n; k++) {
        int64_t o = c - pp.col[k];
        if (o < 0 || o >= pp.cols[k]) continue;
        const kda_bf16 *s = src + r * lds + c;
        kda_bf16 *d = pp.dst[k] + r * pp.ld[k] + o;
#ifdef __CUDA_ARCH__
        if constexpr (VEC == 8)
            *reinterpret_cast<uint4 *>(d) = *reinterpret_cast<const uint4 *>(s);
        else
            d[0] = s[0];
#else
        memcpy(d, s, VEC * sizeof(kda_bf16));
#endif
        return;
    }
}

// One thread per item (grid-stride); ng = groups per source row (the parts' columns only).
template <int VEC>
__global__ void split_k(const kda_bf16 *src, int64_t lds, int64_t ng, int64_t n,
                        KdaCudaColParts pp) {
    kda_grid_wait();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        split_item<VEC>(src, lds, ng, pp, i);
}

} // namespace

extern "C" {

// Checks the parts; *vec = 8 when the 16-byte path applies; *ng = groups per row up to the last
// part column.
static int split_args_(KdaCudaCtx *ctx, const kda_bf16 *src, int64_t lds, int64_t rows,
                       const KdaCudaColParts *pp, int *vec, int64_t *ng) {
    KDA_CUDA_REQUIRE(ctx, pp && pp->n >= 1 && pp->n <= KDA_CUDA_SPLIT_MAX && rows >= 0 && src);
    bool v8 = lds % 8 == 0 && aligned_(16, src);
    int64_t end = 0;
    for (int k = 0; k < pp->n; k++) {
        KDA_CUDA_REQUIRE(ctx, pp->dst[k] && pp->col[k] >= 0 && pp->cols[k] >= 1 &&
                                  pp->ld[k] >= pp->cols[k] && pp->col[k] + pp->cols[k] <= lds);
        v8 = v8 && pp->col[k] % 8 == 0 && pp->cols[k] % 8 == 0 && pp->ld[k] % 8 == 0 &&
             aligned_(16, pp->dst[k]);
        end = pp->col[k] + pp->cols[k] > end ? pp->col[k] + pp->cols[k] : end;
    }
    *vec = v8 ? 8 : 1;
    *ng = CEIL_DIV(end, (int64_t)*vec);
    return 0;
}

int kda_cuda_cols_split(KdaCudaCtx *ctx, const kda_bf16 *src, int64_t lds, int64_t rows,
                        const KdaCudaColParts *parts) {
    int vec = 1;
    int64_t ng = 0;
    if (split_args_(ctx, src, lds, rows, parts, &vec, &ng)) return -1;
    int64_t n = rows * ng;
    if (n == 0) return 0;
    CUDA_CHECK(ctx, kda_launch(ctx, vec == 8 ? split_k<8> : split_k<1>, dim3(grid_for(n)),
                               dim3(256), 0, src, lds, ng, n, *parts));
    return 0;
}

int kda_cuda_cols_copy(KdaCudaCtx *ctx, kda_bf16 *dst, int64_t ldd, const kda_bf16 *src,
                       int64_t lds, int64_t rows, int64_t cols) {
    KdaCudaColParts pp;
    memset(&pp, 0, sizeof pp);
    pp.n = 1, pp.dst[0] = dst, pp.col[0] = 0, pp.cols[0] = cols, pp.ld[0] = ldd;
    return kda_cuda_cols_split(ctx, src, lds, rows, &pp);
}

void kda_cuda_cols_split_host(const kda_bf16 *src, int64_t lds, int64_t rows,
                              const KdaCudaColParts *parts) {
    bool v8 = lds % 8 == 0;
    int64_t end = 0;
    for (int k = 0; k < parts->n; k++) {
        v8 = v8 && parts->col[k] % 8 == 0 && parts->cols[k] % 8 == 0 && parts->ld[k] % 8 == 0;
        end = parts->col[k] + parts->cols[k] > end ? parts->col[k] + parts->cols[k] : end;
    }
    int64_t ng = CEIL_DIV(end, (int64_t)(v8 ? 8 : 1));
    for (int64_t i = 0; i < rows * ng; i++)
        if (v8)
            split_item<8>(src, lds, ng, *parts, i);
        else
            split_item<1>(src, lds, ng, *parts, i);
}

} // extern "C"
