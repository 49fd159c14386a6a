// kda_chunk_layout.cuh - the scratch and kept-state layout that kda_fast.cu (SIMT) and kda_tc.cu
// (tensor cores) share: their argument block, the chunk position, the tensor offsets, the carving
// of one scratch buffer into the chunk-major tensors, the GVA sum and the shared-memory limit
// setter. This layout is the contract that makes the kept h and Δ of one core readable by the
// other's backward (kda_fast_keep_floats: h [B·HV·NT, K, V] then Δ [B·HV·NT, C, V], fp32).
// Included by those two .cu files only; everything is in an anonymous namespace (one copy each).
#ifndef KDA_CUDA_KDA_CHUNK_LAYOUT_CUH
#define KDA_CUDA_KDA_CHUNK_LAYOUT_CUH

#include <stdint.h>
#include <string.h>

#include "cpu/kda_core.h"       // defines: KdaDims
#include "cuda/cuda_internal.h" // defines: CUDA_CHECK, kda_cuda_smem_limit

namespace {

// Scratch tensors are chunk-major: chunk id cid = (b·HV + j)·NT + n, each chunk's block contiguous
// ([C, K], [C, V], [C, C], [K, V] or [K] per chunk); rows past the sequence end are zeros.
// ChunkArgs: everything but the q, k, v, o (dO, dv) tensors, whose storage type is the core's.
struct ChunkArgs {
    int B, T, H, HV, K, V, C, NT, Vt; // Vt: V columns per state-pass block (V % Vt == 0)
    float scale;
    const float *gcum, *beta, *init_state, *dfinal;
    float *w, *kg, *qg; // [cid][C][K]  Akk·(βk e^G), k e^{G_last - G}, scale q e^G
    float *u, *D;       // [cid][C][V]  Akk·(βv), Δ = u - w h
    float *dDi, *dD;    // [cid][C][V]  Aqkᵀ dO, dΔ = dDi + kg dh
    float *Aqk;         // [cid][C][C]  scale-included, lower triangle with diagonal
    float *gl;          // [cid][K]     e^{G_last}
    float *h, *dh;      // [cid][K][V]  chunk-start state, gradient w.r.t. the chunk-end state
    float *final_state, *dinit;
    float *dq, *dk; // [B, T, H, K]; GVA (HV > H): [B, T, HV, K] scratch, summed by gva_sum
    float *dg, *dbeta;
};

struct ChunkPos {
    int64_t cid, bj; // chunk id, b·HV + j
    int b, j, hq;    // batch row, value head, q/k head
    int t0, n;       // first token, rows (1..C)
};

__host__ __device__ inline ChunkPos chunk_pos(const ChunkArgs &a, int64_t blk) {
    ChunkPos p;
    p.cid = blk;
    p.bj = blk / a.NT;
    p.b = (int)(p.bj / a.HV);
    p.j = (int)(p.bj % a.HV);
    p.hq = p.j / (a.HV / a.H);
    p.t0 = (int)(blk % a.NT) * a.C;
    p.n = a.T - p.t0 < a.C ? a.T - p.t0 : a.C;
    return p;
}
// Offsets of token t of batch row b: q/k head h [B, T, H, K]; value head j of v/o [B, T, HV, V],
// of gcum/dg [B, T, HV, K] and of β [B, T, HV].
__host__ __device__ inline int64_t qk_at(const ChunkArgs &a, int b, int t, int h) {
    return (((int64_t)b * a.T + t) * a.H + h) * a.K;
}
__host__ __device__ inline int64_t v_at(const ChunkArgs &a, int b, int t, int j) {
    return (((int64_t)b * a.T + t) * a.HV + j) * a.V;
}
__host__ __device__ inline int64_t g_at(const ChunkArgs &a, int b, int t, int j) {
    return (((int64_t)b * a.T + t) * a.HV + j) * a.K;
}
__host__ __device__ inline int64_t beta_at(const ChunkArgs &a, int b, int t, int j) {
    return ((int64_t)b * a.T + t) * a.HV + j;
}

// GVA: dq/dk per value head [N, HV, K] -> summed per q/k head [N, H, K] (fixed order).
__host__ __device__ inline void gva_sum_item(float *out, const float *in, int64_t e, int H, int HV,
                                             int K) {
    int64_t tok = e / ((int64_t)H * K);
    int h = (int)(e / K % H), c = (int)(e % K), G = HV / H;
    float s = 0.0f;
    for (int r = 0; r < G; r++)
        s += in[(tok * HV + (int64_t)h * G + r) * K + c];
    out[e] = s;
}
__global__ void gva_sum_k(float *out, const float *in, int64_t n, int H, int HV, int K) {
    kda_grid_wait();
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
         e += (int64_t)gridDim.x * blockDim.x)
        gva_sum_item(out, in, e, H, HV, K);
}
// dq, dk [B, T, H, K] = the sums of the per-value-head a.dq, a.dk (GVA only), on ctx->stream.
inline int gva_sum_launch(KdaCudaCtx *ctx, float *dq, float *dk, const ChunkArgs &a) {
    int64_t n = (int64_t)a.B * a.T * a.H * a.K;
    CUDA_CHECK(ctx, kda_launch(ctx, gva_sum_k, dim3(grid_for(n)), dim3(256), 0, dq,
                               (const float *)a.dq, n, a.H, a.HV, a.K));
    CUDA_CHECK(ctx, kda_launch(ctx, gva_sum_k, dim3(grid_for(n)), dim3(256), 0, dk,
                               (const float *)a.dk, n, a.H, a.HV, a.K));
    return 0;
}
// The same on the host (the emulation drivers).
inline void gva_sum_host(float *dq, float *dk, const ChunkArgs &a) {
    int64_t n = (int64_t)a.B * a.T * a.H * a.K;
    for (int64_t e = 0; e < n; e++) {
        gva_sum_item(dq, a.dq, e, a.H, a.HV, a.K);
        gva_sum_item(dk, a.dk, e, a.H, a.HV, a.K);
    }
}

// ---- argument setup shared by the device and host drivers ---------------------------------------

// V columns per state-pass block.
inline int tile_v(int64_t V) {
    return V > 32 && V % 32 == 0 ? 32 : (int)V;
}

inline ChunkArgs chunk_args(const KdaDims *d) {
    ChunkArgs a;
    memset(&a, 0, sizeof a);
    a.B = (int)d->B, a.T = (int)d->T, a.H = (int)d->H, a.HV = (int)d->HV;
    a.K = (int)d->K, a.V = (int)d->V, a.C = (int)d->chunk;
    a.NT = (int)((d->T + d->chunk - 1) / d->chunk);
    a.Vt = tile_v(d->V);
    a.scale = d->scale;
    return a;
}

// Scratch floats per chunk and head, and the carving of one buffer into the scratch tensors.
inline size_t scratch_per_chunk(const ChunkArgs &a) {
    return (size_t)(3 * a.C * a.K + 4 * a.C * a.V + a.C * a.C + a.K + 2 * a.K * a.V);
}
inline size_t scratch_floats(const ChunkArgs &a) {
    size_t chunks = (size_t)a.B * a.HV * a.NT;
    size_t gva = a.HV != a.H ? 2 * (size_t)a.B * a.T * a.HV * a.K : 0;
    return chunks * scratch_per_chunk(a) + gva;
}
inline void carve(ChunkArgs &a, float *p) {
    size_t ch = (size_t)a.B * a.HV * a.NT, CK = ch * a.C * a.K, CV = ch * a.C * a.V;
    a.w = p, p += CK;
    a.kg = p, p += CK;
    a.qg = p, p += CK;
    a.u = p, p += CV;
    a.D = p, p += CV;
    a.dDi = p, p += CV;
    a.dD = p, p += CV;
    a.Aqk = p, p += ch * a.C * a.C;
    a.gl = p, p += ch * a.K;
    a.h = p, p += ch * a.K * a.V;
    a.dh = p, p += ch * a.K * a.V;
    if (a.HV != a.H) { // per value head dq/dk, summed by gva_sum
        size_t n = (size_t)a.B * a.T * a.HV * a.K;
        a.dq = p, p += n;
        a.dk = p;
    }
}
// The kept buffer of the M0 forms starts with h, then Δ (kda_fast_keep_floats); returns the
// floats past them (where kda_tc keeps more).
inline float *keep_carve_hd(ChunkArgs &a, float *keep) {
    size_t ch = (size_t)a.B * a.HV * a.NT;
    a.h = keep, keep += ch * a.K * a.V;
    a.D = keep, keep += ch * a.C * a.V;
    return keep;
}

// Raises fn's dynamic shared-memory limit to `bytes` (once per function and size through
// kda_cuda_smem_limit; KDA_GEMM_PLAN=0: the per-launch attribute call of before).
inline int set_smem(KdaCudaCtx *ctx, const void *fn, size_t bytes) {
    if (ctx->plan_off)
        CUDA_CHECK(
            ctx, cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    else if (kda_cuda_smem_limit(ctx, fn, bytes))
        return -1;
    return 0;
}

} // namespace

#endif
