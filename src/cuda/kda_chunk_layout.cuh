// kda_chunk_layout.cuh - the scratch and kept-state layout that kda_fast.cu (SIMT) and kda_tc.cu
// (tensor cores) share: their argument block, the chunk position, the tensor offsets, the carving
// of one scratch buffer into the chunk-major tensors, the GVA sum, the shared-memory limit setter
// and the benchmarks' per-kernel profile harness. This layout is the contract that makes the kept
// h and Δ of one core readable by the other's backward (kda_fast_keep_floats: h [B·HV·NT, K, V]
// then Δ [B·HV·NT, C, V], fp32).
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

// ---- the per-kernel profile harness of kda_fast_profile and kda_tc_profile(_kept)
// ----------------

// The inputs, outputs and gradients of one forward + backward at dims d, in one device buffer
// (kda_cuda_alloc; freed by profile_bufs_free), plus `keep_floats` fp32 for the kept forms.
struct ProfileBufs {
    char *buf;
    kda_bf16 *q, *k, *v, *dO, *o, *dv; // q, k [B, T, H, K]; v, dO, o [B, T, HV, V]; dv aliases o
    float *gcum, *dg;                  // [B, T, HV, K]
    float *beta, *dbeta;               // [B, T, HV]
    float *dq, *dk;                    // [B, T, H, K]
    float *keep;                       // keep_floats, NULL when 0
};

// Deterministic pseudo-random inputs: q, k ~ ±1/sqrt(K) (unit-norm-sized), v, dO ~ ±1, β = 0.5,
// gcum = -0.05·(position in chunk + 1) (a realistic decay).
__global__ void profile_fill_k(kda_bf16 *q, kda_bf16 *k, kda_bf16 *v, kda_bf16 *dO, float *gcum,
                               float *beta, KdaDims d) {
    int64_t nqk = d.B * d.T * d.H * d.K, nv = d.B * d.T * d.HV * d.V, ng = d.B * d.T * d.HV * d.K;
    int64_t nmax = nv > nqk ? nv : nqk;
    nmax = ng > nmax ? ng : nmax;
    float sk = rsqrtf((float)d.K);
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < nmax;
         e += (int64_t)gridDim.x * blockDim.x) {
        unsigned hsh = (unsigned)(e * 2654435761u) ^ 0x9e3779b9u;
        float r = (float)(hsh % 2001u) / 1000.0f - 1.0f; // [-1, 1]
        if (e < nqk) q[e] = f2bf(r * sk), k[e] = f2bf(-r * sk * 0.9f);
        if (e < nv) v[e] = f2bf(r), dO[e] = f2bf(0.5f * r);
        if (e < ng) gcum[e] = -0.05f * (float)((e / (d.HV * d.K)) % d.T % d.chunk + 1);
        if (e < d.B * d.T * d.HV) beta[e] = 0.5f;
    }
}

// Allocates and fills *pb on ctx's stream. 0, or -1 with ctx's error set.
inline int profile_bufs_alloc(KdaCudaCtx *ctx, const KdaDims *d, size_t keep_floats,
                              ProfileBufs *pb) {
    int64_t nqk = d->B * d->T * d->H * d->K, nv = d->B * d->T * d->HV * d->V;
    int64_t ng = d->B * d->T * d->HV * d->K, nb = d->B * d->T * d->HV;
    size_t bytes = (size_t)(2 * nqk + 3 * nv) * 2 + (size_t)(2 * ng + 2 * nb + 2 * nqk) * 4;
    memset(pb, 0, sizeof *pb);
    pb->buf = (char *)kda_cuda_alloc(ctx, bytes + keep_floats * sizeof(float));
    if (!pb->buf) return -1;
    pb->q = (kda_bf16 *)pb->buf, pb->k = pb->q + nqk, pb->v = pb->k + nqk;
    pb->dO = pb->v + nv, pb->o = pb->dO + nv;
    pb->dv = pb->o; // o is not read by the backward
    pb->gcum = (float *)(pb->o + nv), pb->beta = pb->gcum + ng, pb->dg = pb->beta + nb;
    pb->dbeta = pb->dg + ng, pb->dq = pb->dbeta + nb, pb->dk = pb->dq + nqk;
    if (keep_floats) pb->keep = (float *)(pb->buf + bytes); // bytes: a multiple of 16 (even dims)
    profile_fill_k<<<grid_for(nv > ng ? nv : ng), 256, 0, ctx->stream>>>(
        pb->q, pb->k, pb->v, pb->dO, pb->gcum, pb->beta, *d);
    cudaError_t launched = cudaGetLastError();
    if (launched != cudaSuccess) kda_cuda_release(pb->buf), pb->buf = NULL;
    CUDA_CHECK(ctx, launched);
    return 0;
}
inline void profile_bufs_free(ProfileBufs *pb) {
    kda_cuda_release(pb->buf);
    pb->buf = NULL;
}

// Runs step(&e) `reps` times between events: step records one event after each kernel (nev - 1 of
// them after the first); ms[i] (8 slots, overwritten) = the fastest time of kernel i over the
// repetitions, 0 for the slots past nev - 1. 0, or -1 when an event, the step or a sync fails.
template <class Step> int profile_run(KdaCudaCtx *ctx, int reps, int nev, float ms[8], Step step) {
    cudaEvent_t ev[9];
    int rc = 0, made = 0;
    for (; made < 9 && rc == 0; made++)
        if (cudaEventCreate(&ev[made]) != cudaSuccess) rc = -1;
    for (int i = 0; i < 8; i++)
        ms[i] = i < nev - 1 ? 1e30f : 0.0f;
    for (int r = 0; r < reps && rc == 0; r++) {
        cudaEvent_t *e = ev;
        if (cudaEventRecord(*e++, ctx->stream) != cudaSuccess || step(&e) || kda_cuda_sync(ctx)) {
            rc = -1;
            break;
        }
        for (int i = 0; i + 1 < nev; i++) { // per-kernel minimum over the repetitions
            float t = 0.0f;
            cudaEventElapsedTime(&t, ev[i], ev[i + 1]);
            ms[i] = t < ms[i] ? t : ms[i];
        }
    }
    for (int i = 0; i < made; i++)
        cudaEventDestroy(ev[i]);
    return rc;
}

} // namespace

#endif
