// kda_gate_cuda.cu - the per-token pre-processing of the KDA core on the GPU (see
// kda_gate_cuda.h): the gate with its chunk-local cumsum, the beta sigmoid and the L2 norm of q/k,
// each operator's kernels, then its launchers (fp32 forward included).
#include "cuda/kda_gate_cuda.h"

#include "cuda/cuda_internal.h" // defines: bf2f, f2bf, warp_sum, grid_for, KDA_CUDA_REQUIRE
#include "cuda/ops_common.cuh"  // defines: colsum_finish, warp_row, row_blocks

namespace {

// ---- gate + chunk-local cumsum ---------------------------------------------------------------

__device__ __forceinline__ float softplus_f(float a) {
    return a > 20.0f ? a : log1pf(expf(a));
}

// One thread per (b, chunk, j, d): walks the chunk's tokens forward. E: f's storage.
template <class E>
__global__ void gate_fwd_k(float *gcum, float *gout, const E *f, const float *A_log,
                           const float *dt_bias, int64_t B, int64_t T, int64_t HV, int64_t K,
                           int64_t chunk) {
    kda_grid_wait();
    int64_t HK = HV * K, NC = CEIL_DIV(T, chunk);
    int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= B * NC * HK) return;
    int64_t jd = e % HK, bc = e / HK, ck = bc % NC, b = bc / NC;
    float A = expf(A_log[jd / K]), bias = dt_bias[jd], acc = 0.0f;
    int64_t t1 = min((ck + 1) * chunk, T);
    for (int64_t t = ck * chunk; t < t1; t++) {
        int64_t i = (b * T + t) * HK + jd;
        float g = -A * softplus_f(ldf(f, i) + bias);
        acc += g;
        gcum[i] = acc;
        if (gout) gout[i] = g;
    }
}

// Reverse cumsum within the chunk, then the gate backward; tile partials for dt_bias and A_log:
// part_dt / part_A [B*NC, HV*K]. One thread per (b, chunk, j, d) (consecutive threads read
// consecutive j·K + d: coalesced). The walk over the chunk is serial (dg is a running sum), but
// its loads are not: tokens go GATE_UNROLL at a time, all loads of a group issued before the
// dependent math, so a thread has 2·GATE_UNROLL loads in flight instead of 2.
#define GATE_UNROLL 8
__global__ void gate_bwd_k(kda_bf16 *df, double *part_dt, double *part_A, const float *dgcum,
                           const kda_bf16 *f, const float *A_log, const float *dt_bias, int64_t B,
                           int64_t T, int64_t HV, int64_t K, int64_t chunk, int from_cumsum) {
    kda_grid_wait();
    int64_t HK = HV * K, NC = CEIL_DIV(T, chunk);
    int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= B * NC * HK) return;
    int64_t jd = e % HK, bc = e / HK, ck = bc % NC, b = bc / NC;
    float A = expf(A_log[jd / K]), bias = dt_bias[jd], dg = 0.0f;
    double sdt = 0.0, sA = 0.0;
    int64_t t0 = ck * chunk, t1 = min((ck + 1) * chunk, T);
    const float *dgb = dgcum + b * T * HK + jd; // token t at [t * HK]
    const kda_bf16 *fb = f + b * T * HK + jd;
    kda_bf16 *dfb = df + b * T * HK + jd;
    for (int64_t tg = t1 - 1; tg >= t0; tg -= GATE_UNROLL) { // tokens tg, tg-1, ... > tg-UNROLL
        float dgv[GATE_UNROLL], fv[GATE_UNROLL];
#pragma unroll
        for (int u = 0; u < GATE_UNROLL; u++) {
            int64_t t = tg - u;
            dgv[u] = t >= t0 ? dgb[t * HK] : 0.0f;
            fv[u] = t >= t0 ? bf2f(fb[t * HK]) : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < GATE_UNROLL; u++) {
            int64_t t = tg - u;
            if (t < t0) break;
            dg = from_cumsum ? dg + dgv[u] : dgv[u]; // dg_t = Σ_{s >= t in chunk} dgcum_s
            float a = fv[u] + bias;
            float sp_grad = a > 20.0f ? 1.0f : sigmoid_f(a);
            float dfi = -dg * A * sp_grad; // dg/da = -A σ(a)
            dfb[t * HK] = f2bf(dfi);
            sdt += dfi;
            sA += (double)dg * (-A * softplus_f(a)); // dg/dA_log = g
        }
    }
    part_dt[bc * HK + jd] = sdt;
    part_A[bc * HK + jd] = sA;
}

// dA_log[j] += Σ_{p, d} part_A[p, j*K + d]: one 256-thread block per head j. Thread s sums the
// flattened entries e = p·K + d = s, s + 256, ... in increasing e; the block then adds the 256
// thread sums with a fixed shared-memory tree. The order depends on P and K only. (The first
// version summed all P·K entries of a head in one thread: 16k dependent loads, 0.8 ms.)
#define DA_THREADS 256
__global__ void __launch_bounds__(DA_THREADS)
    gate_dA_finish_k(float *dA_log, const double *part_A, int64_t P, int64_t HV, int64_t K) {
    kda_grid_wait();
    __shared__ double sh[DA_THREADS];
    int64_t j = blockIdx.x, HK = HV * K, n = P * K;
    // entries e = threadIdx.x + i·DA_THREADS, (p, d) = (e / K, e % K), in increasing e; 8 loads
    // in flight (the stepping of (p, d) with a branch per entry kept them one at a time: with
    // P = 1024 chunks that was 128 L2 round trips per thread)
    const double *col = part_A + j * K;
    double s = 0.0;
    int64_t e = threadIdx.x;
    for (; e + 7 * DA_THREADS < n; e += 8 * DA_THREADS) {
        double a[8];
#pragma unroll
        for (int u = 0; u < 8; u++) {
            int64_t q = e + u * DA_THREADS, p = q / K;
            a[u] = col[p * HK + (q - p * K)];
        }
#pragma unroll
        for (int u = 0; u < 8; u++)
            s += a[u];
    }
    for (; e < n; e += DA_THREADS) {
        int64_t p = e / K;
        s += col[p * HK + (e - p * K)];
    }
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int h = DA_THREADS / 2; h > 0; h >>= 1) { // fixed tree: sh[i] += sh[i + h]
        if ((int)threadIdx.x < h) sh[threadIdx.x] += sh[threadIdx.x + h];
        __syncthreads();
    }
    if (threadIdx.x == 0) dA_log[j] += (float)sh[0];
}

} // namespace

namespace {

// ---- gate v2 (ctx->gate_version == 2, KDA_GATE_V=2) ------------------------------------------
// v1 gives each thread one column and walks the chunk's tokens in series: 2-byte loads one token
// at a time (a load round trip per token), int64 index math and softplus (expf + log1pf, about
// 65 instructions) per element, and in the backward a separate sigmoid, double-precision
// products, then three more launches (column sums, dA_log, beta). v2:
//   * a block is 128 columns x the whole chunks of one row that fit in 64 tokens (the model's
//     chunk 32: two); lane l of warp w holds columns 4l..4l+3 of the tile (8-byte bf16 and
//     16-byte fp32 accesses, a warp covers 256 or 512 contiguous bytes) and the w-th segment of
//     ceil(tokens / 8) <= 8 tokens; a thread issues all its loads before any math (one round
//     trip), scans its segment, and the segments' sums go through shared memory (the chunk
//     cumsum as a segmented scan: another fp32 addition order than v1's serial one);
//   * one exponential e = exp(-|a|) gives both softplus(a) = max(a, 0) + log1p(e) and
//     σ(a) = (a >= 0 ? 1 : e) / (1 + e); log1p(e) as a short odd series (g2_log1p): ≈ 41 PTX
//     lines per element forward and ≈ 54 backward (static, movs excluded) where v1's backward
//     has ≈ 166 (perf-log.md, "Gate + beta v2");
//   * the backward sums ddt_bias and dA_log per block (fp32 over the segment, then double over
//     the 8 segments in order) into per-block partials, and one finish launch adds them in a fixed
//     order: two launches instead of three; beta's forward or backward rides in the first column
//     tile's blocks (the fused launchers kda_cuda_gate_beta_*): one launch less each way.
// The same functions run on the host (kda_cuda_gate2_*_host: every thread of a block one after
// another, phase by phase), so the CPU suite checks the kernels' indexing and order.
#define G2_VEC     4               // columns per thread (K % 4 == 0: one head per thread)
#define G2_WARPS   8               // token segments per block
#define G2_SEG     8               // tokens per segment at most: chunk <= 64
#define G2_COLS    (32 * G2_VEC)   // columns per block tile
#define G2_THREADS (32 * G2_WARPS) // threads per block
#define G2_FIN     256             // threads per block of the finish kernel

// Unrolled on the device (the per-thread arrays stay in registers); the host compiler does not
// know the pragma.
#ifdef __CUDA_ARCH__
#define G2_UNROLL _Pragma("unroll")
#else
#define G2_UNROLL
#endif

__host__ __device__ __forceinline__ int64_t g2_min(int64_t a, int64_t b) {
    return a < b ? a : b;
}

// x / y for y in [1, 3]: the device's fast division (2 ulp; y is far from its 2^126 limit).
__host__ __device__ __forceinline__ float g2_div(float x, float y) {
#ifdef __CUDA_ARCH__
    return __fdividef(x, y);
#else
    return x / y;
#endif
}

// log1p(e) for e in [0, 1]: 2 atanh(s) with s = e / (2 + e) in [0, 1/3], the odd series to s^13
// (the first term left out, s^15 / 15, is below 1.4e-8 of the sum: a quarter ulp). ~10 FMA-unit
// instructions and one reciprocal instead of log1pf's ~40.
__host__ __device__ __forceinline__ float g2_log1p(float e) {
    float s = g2_div(e, 2.0f + e), z = s * s;
    float q = fmaf(z, 1.0f / 13.0f, 1.0f / 11.0f);
    q = fmaf(q, z, 1.0f / 9.0f);
    q = fmaf(q, z, 1.0f / 7.0f);
    q = fmaf(q, z, 1.0f / 5.0f);
    q = fmaf(q, z, 1.0f / 3.0f);
    return 2.0f * fmaf(s * z, q, s);
}

// softplus(a) from e = exp(-|a|). Above FLA's threshold (a > 20) this is v1's a exactly: e <
// 2.1e-9 vanishes next to a (half an ulp of 20 is 9.5e-7).
__host__ __device__ __forceinline__ float g2_softplus(float a, float e) {
    return fmaxf(a, 0.0f) + g2_log1p(e);
}
// σ(a) from the same e; 1 + e rounds to 1 above the threshold, so σ = 1 there as in v1.
__host__ __device__ __forceinline__ float g2_sigmoid(float a, float e) {
    return g2_div(a >= 0.0f ? 1.0f : e, 1.0f + e);
}

// 4 consecutive elements: one 8-byte (bf16) or 16-byte (fp32) access on the device (the
// launchers check the alignment), four scalar accesses on the host.
__host__ __device__ __forceinline__ void g2_ld4(float (&v)[4], const kda_bf16 *p) {
#ifdef __CUDA_ARCH__
    ld_bf<4>(v, p);
#else
    for (int k = 0; k < 4; k++)
        v[k] = bf2f(p[k]);
#endif
}
__host__ __device__ __forceinline__ void g2_ld4(float (&v)[4], const float *p) {
#ifdef __CUDA_ARCH__
    float4 u = *reinterpret_cast<const float4 *>(p);
    v[0] = u.x, v[1] = u.y, v[2] = u.z, v[3] = u.w;
#else
    for (int k = 0; k < 4; k++)
        v[k] = p[k];
#endif
}
__host__ __device__ __forceinline__ void g2_st4(float *p, const float (&v)[4]) {
#ifdef __CUDA_ARCH__
    *reinterpret_cast<float4 *>(p) = make_float4(v[0], v[1], v[2], v[3]);
#else
    for (int k = 0; k < 4; k++)
        p[k] = v[k];
#endif
}
__host__ __device__ __forceinline__ void g2_st4(kda_bf16 *p, const float (&v)[4]) {
#ifdef __CUDA_ARCH__
    st_bf<4>(p, v);
#else
    for (int k = 0; k < 4; k++)
        p[k] = f2bf(v[k]);
#endif
}

// Tokens per block: the most whole chunks that fit in 64 (chunk 32: two, 64: one, 48: one, 5:
// twelve), so a block's scans never need another block's tokens and each thread gets up to 8.
__host__ __device__ __forceinline__ int64_t g2_span(int64_t chunk) {
    int64_t m = G2_WARPS * G2_SEG / chunk;
    return (m > 1 ? m : 1) * chunk;
}
// Blocks per row b; the grid's x and the rows of the backward's partials are B times this.
__host__ __device__ __forceinline__ int64_t g2_blocks_per_row(int64_t T, int64_t chunk) {
    return CEIL_DIV(T, g2_span(chunk));
}

// Where thread tid of block (blk = b·NQ + q, column tile) works: columns c..c+3, tokens
// s0..s0+n-1 of segment w (n = 0 past the row's or block's end, e.g. warps 1..7 at T = 1, or
// for columns past HK); e0 = the element (b, s0, c); t0, t1: the block's tokens in row b;
// r0 = (s0 - t0) mod chunk (t0 starts a chunk), the position of s0 in its chunk.
struct G2Pos {
    int64_t e0, c, s0, t0, t1, rb; // rb = b·T, the row's first token
    int n, w, lane, r0;
};
__host__ __device__ __forceinline__ G2Pos g2_pos(int64_t blk, int64_t tile, int tid, int64_t T,
                                                 int64_t HK, int64_t chunk) {
    int64_t L = g2_span(chunk), NQ = CEIL_DIV(T, L), b = blk / NQ;
    G2Pos p;
    p.w = tid >> 5, p.lane = tid & 31;
    int S = (int)CEIL_DIV(L, (int64_t)G2_WARPS);
    p.t0 = (blk - b * NQ) * L, p.t1 = g2_min(p.t0 + L, T);
    p.s0 = p.t0 + p.w * S;
    int64_t s1 = g2_min(p.s0 + S, p.t1);
    p.c = tile * G2_COLS + p.lane * G2_VEC;
    p.n = p.c < HK && s1 > p.s0 ? (int)(s1 - p.s0) : 0;
    p.r0 = (p.w * S) % (int)chunk;
    p.rb = b * T;
    p.e0 = (p.rb + p.s0) * HK + p.c;
    return p;
}

// Forward, phase 1: v = f of the segment, loaded at once, then the local inclusive cumsum of
// g = -exp(A_log) softplus(f + dt_bias), restarting at chunk starts (g written to gout when not
// NULL). Per segment to shared memory: tot [G2_WARPS, G2_COLS] = the sum since its last chunk
// start (0 for an empty segment), start[w] = whether it holds a chunk start. Returns the mask of
// tokens before the segment's first chunk start: they continue the earlier segments' sums.
__host__ __device__ __forceinline__ unsigned g2_fwd_scan(float (&v)[G2_SEG][G2_VEC], float *tot,
                                                         int *start, float *gout, const G2Pos &p,
                                                         const kda_bf16 *f, const float *A_log,
                                                         const float *dt_bias, int64_t HK,
                                                         int64_t K, int64_t chunk) {
    float acc[G2_VEC] = {0.0f, 0.0f, 0.0f, 0.0f};
    unsigned carry = 0;
    bool seen = false;
    if (p.n > 0) {
        float A = expf(A_log[p.c / K]), bias[G2_VEC];
        for (int k = 0; k < G2_VEC; k++)
            bias[k] = dt_bias[p.c + k];
        G2_UNROLL
        for (int u = 0; u < G2_SEG; u++)
            if (u < p.n) g2_ld4(v[u], f + p.e0 + u * HK);
        int r = p.r0;
        G2_UNROLL
        for (int u = 0; u < G2_SEG; u++) {
            if (u >= p.n) break;
            if (r == 0) { // a chunk starts: the sums restart
                seen = true;
                for (int k = 0; k < G2_VEC; k++)
                    acc[k] = 0.0f;
            }
            if (!seen) carry |= 1u << u;
            r = r + 1 == chunk ? 0 : r + 1;
            float g[G2_VEC];
            G2_UNROLL
            for (int k = 0; k < G2_VEC; k++) {
                float a = v[u][k] + bias[k];
                g[k] = -A * g2_softplus(a, expf(-fabsf(a)));
                acc[k] += g[k];
                v[u][k] = acc[k];
            }
            if (gout) g2_st4(gout + p.e0 + u * HK, g);
        }
    }
    for (int k = 0; k < G2_VEC; k++)
        tot[p.w * G2_COLS + p.lane * G2_VEC + k] = acc[k];
    if (p.lane == 0) start[p.w] = seen;
    return carry;
}

// Forward, phase 2 (after phase 1 of the whole block): gcum = the local cumsum, plus for the
// tokens in `carry` the sums of the earlier segments back to the one holding the latest chunk
// start (added in segment order; segment 0 starts the block, hence a chunk).
__host__ __device__ __forceinline__ void g2_fwd_store(const float (&v)[G2_SEG][G2_VEC],
                                                      unsigned carry, const float *tot,
                                                      const int *start, float *gcum, const G2Pos &p,
                                                      int64_t HK) {
    if (p.n == 0) return;
    float pre[G2_VEC] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (carry) {
        int w0 = p.w - 1;
        while (w0 > 0 && !start[w0])
            w0--;
        for (int w = w0; w < p.w; w++)
            for (int k = 0; k < G2_VEC; k++)
                pre[k] += tot[w * G2_COLS + p.lane * G2_VEC + k];
    }
    G2_UNROLL
    for (int u = 0; u < G2_SEG; u++) {
        if (u >= p.n) break;
        float o[G2_VEC];
        for (int k = 0; k < G2_VEC; k++)
            o[k] = carry >> u & 1u ? pre[k] + v[u][k] : v[u][k];
        g2_st4(gcum + p.e0 + u * HK, o);
    }
}

// beta = s σ(b) over the block's tokens [t0, t1) of row b (v1's expression: the same bits),
// thread tid's share; b, beta [B*T, HV].
__host__ __device__ __forceinline__ void g2_beta_fwd(float *beta, const kda_bf16 *b, const G2Pos &p,
                                                     int tid, int64_t HV, float s) {
    int64_t i0 = (p.rb + p.t0) * HV, n = (p.t1 - p.t0) * HV;
    for (int64_t i = tid; i < n; i += G2_THREADS)
        beta[i0 + i] = s * sigmoid_f(bf2f(b[i0 + i]));
}

// db [B*T, ldo] = dbeta s σ(b)(1 - σ(b)) over the block's tokens (v1's expression).
__host__ __device__ __forceinline__ void g2_beta_bwd(kda_bf16 *db, int64_t ldo, const float *dbeta,
                                                     const kda_bf16 *b, const G2Pos &p, int tid,
                                                     int64_t HV, float s) {
    int64_t i0 = (p.rb + p.t0) * HV, n = (p.t1 - p.t0) * HV;
    for (int64_t i = tid; i < n; i += G2_THREADS) {
        int64_t r = (i0 + i) / HV;
        float sg = sigmoid_f(bf2f(b[i0 + i]));
        db[r * ldo + (i0 + i - r * HV)] = f2bf(dbeta[i0 + i] * s * sg * (1.0f - sg));
    }
}

// Backward, phase 1: dg and f of the segment, loaded at once. from_cumsum: dg holds dgcum, made
// the local reverse inclusive cumsum restarting at chunk ends (a chunk's last token, or the
// row's); to shared memory tot [G2_WARPS, G2_COLS] = the sum up to its first chunk end and
// end[w] = whether it holds one. Returns the mask of tokens after the segment's last chunk end:
// they continue the later segments' sums (0 without from_cumsum).
__host__ __device__ __forceinline__ unsigned
g2_bwd_load(float (&dg)[G2_SEG][G2_VEC], float (&fv)[G2_SEG][G2_VEC], float *tot, int *end,
            const G2Pos &p, const float *dgrad, const kda_bf16 *f, int64_t T, int64_t HK,
            int64_t chunk, int from_cumsum) {
    if (p.n > 0) {
        G2_UNROLL
        for (int u = 0; u < G2_SEG; u++)
            if (u < p.n) {
                g2_ld4(dg[u], dgrad + p.e0 + u * HK);
                g2_ld4(fv[u], f + p.e0 + u * HK);
            }
    }
    if (!from_cumsum) return 0;
    float acc[G2_VEC] = {0.0f, 0.0f, 0.0f, 0.0f};
    unsigned ends = 0, carry = 0;
    int r = p.r0;
    for (int u = 0; u < p.n; u++) { // which tokens end a chunk
        if (r == chunk - 1 || p.s0 + u == T - 1) ends |= 1u << u;
        r = r + 1 == chunk ? 0 : r + 1;
    }
    bool seen = false;
    G2_UNROLL
    for (int u = G2_SEG - 1; u >= 0; u--) {
        if (u >= p.n) continue;
        if (ends >> u & 1u) { // a chunk ends here: the reverse sums restart
            seen = true;
            for (int k = 0; k < G2_VEC; k++)
                acc[k] = 0.0f;
        }
        if (!seen) carry |= 1u << u;
        for (int k = 0; k < G2_VEC; k++) {
            acc[k] += dg[u][k];
            dg[u][k] = acc[k];
        }
    }
    for (int k = 0; k < G2_VEC; k++)
        tot[p.w * G2_COLS + p.lane * G2_VEC + k] = acc[k];
    if (p.lane == 0) end[p.w] = seen;
    return carry;
}

// Backward, phase 2: dg (+ for the tokens in `carry` the sums of the later segments up to the
// one holding the next chunk end, nearest first; the block's last segment with tokens ends a
// chunk or the row) -> df (bf16), and the thread's sums over its segment: ddt_bias's per column
// to sdt [G2_WARPS, G2_COLS], dA_log's Σ dg·softplus (times -A later) to sa [G2_WARPS, 32].
// Zeros for an empty segment.
__host__ __device__ __forceinline__ void
g2_bwd_math(const float (&dg)[G2_SEG][G2_VEC], const float (&fv)[G2_SEG][G2_VEC], unsigned carry,
            const float *tot, const int *end, float *sdt, float *sa, kda_bf16 *df, const G2Pos &p,
            const float *A_log, const float *dt_bias, int64_t HK, int64_t K) {
    float st[G2_VEC] = {0.0f, 0.0f, 0.0f, 0.0f}, s_a = 0.0f;
    if (p.n > 0) {
        float suf[G2_VEC] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (carry)
            for (int w = p.w + 1; w < G2_WARPS; w++) {
                for (int k = 0; k < G2_VEC; k++)
                    suf[k] += tot[w * G2_COLS + p.lane * G2_VEC + k];
                if (end[w]) break;
            }
        float A = expf(A_log[p.c / K]), bias[G2_VEC];
        for (int k = 0; k < G2_VEC; k++)
            bias[k] = dt_bias[p.c + k];
        G2_UNROLL
        for (int u = 0; u < G2_SEG; u++) {
            if (u >= p.n) break;
            float o[G2_VEC];
            G2_UNROLL
            for (int k = 0; k < G2_VEC; k++) {
                float d = carry >> u & 1u ? dg[u][k] + suf[k] : dg[u][k];
                float a = fv[u][k] + bias[k], e = expf(-fabsf(a));
                o[k] = -d * A * g2_sigmoid(a, e);      // dg/da = -A σ(a)
                st[k] += o[k];                         // dt_bias enters as f + dt_bias
                s_a = fmaf(d, g2_softplus(a, e), s_a); // dg/dA_log = g = -A softplus(a)
            }
            g2_st4(df + p.e0 + u * HK, o);
        }
    }
    for (int k = 0; k < G2_VEC; k++)
        sdt[p.w * G2_COLS + p.lane * G2_VEC + k] = st[k];
    sa[p.w * 32 + p.lane] = s_a;
}

// Backward, phase 3: the block's partials in double, segments added in order: part_dt
// [P, HK] (threads 0..127, one column each), part_A [P, HK / 4] (threads 128..159, one 4-column
// group each, times -exp(A_log) of its head).
__host__ __device__ __forceinline__ void g2_bwd_part(double *part_dt, double *part_A,
                                                     const float *sdt, const float *sa, int64_t bc,
                                                     int64_t tile, int tid, const float *A_log,
                                                     int64_t HK, int64_t K) {
    if (tid < G2_COLS) {
        int64_t c = tile * G2_COLS + tid;
        if (c >= HK) return;
        double s = 0.0;
        for (int w = 0; w < G2_WARPS; w++)
            s += (double)sdt[w * G2_COLS + tid];
        part_dt[bc * HK + c] = s;
    } else if (tid < G2_COLS + 32) {
        int lane = tid - G2_COLS;
        int64_t G = HK / G2_VEC, q = tile * 32 + lane;
        if (q >= G) return;
        double s = 0.0;
        for (int w = 0; w < G2_WARPS; w++)
            s += (double)sa[w * 32 + lane];
        part_A[bc * G + q] = -(double)expf(A_log[q * G2_VEC / K]) * s;
    }
}

// Finish: segment y (of 8) of column c's partials, p = y, y + 8, ... in increasing p with 8
// loads in flight (colsum_finish_k's order).
__host__ __device__ __forceinline__ double g2_fin_col(const double *part, int64_t P, int64_t ncols,
                                                      int64_t c, int y) {
    double s = 0.0;
    int64_t p = y;
    for (; p + 7 * 8 < P; p += 64) {
        double a[8];
        G2_UNROLL
        for (int u = 0; u < 8; u++)
            a[u] = part[(p + u * 8) * ncols + c];
        G2_UNROLL
        for (int u = 0; u < 8; u++)
            s += a[u];
    }
    for (; p < P; p += 8)
        s += part[p * ncols + c];
    return s;
}

// Finish: thread s's share of head j's dA_log partials, the entries e = (p, group q of the head)
// flattened, e = s, s + G2_FIN, ... in increasing e, 8 loads in flight. part_A [P, G], Gh groups
// per head.
__host__ __device__ __forceinline__ double g2_fin_head(const double *part_A, int64_t P, int64_t G,
                                                       int64_t Gh, int64_t j, int s) {
    const double *col = part_A + j * Gh;
    int64_t n = P * Gh, e = s;
    double acc = 0.0;
    for (; e + 7 * G2_FIN < n; e += 8 * G2_FIN) {
        double a[8];
        G2_UNROLL
        for (int u = 0; u < 8; u++) {
            int64_t q = e + u * G2_FIN, p = q / Gh;
            a[u] = col[p * G + (q - p * Gh)];
        }
        G2_UNROLL
        for (int u = 0; u < 8; u++)
            acc += a[u];
    }
    for (; e < n; e += G2_FIN) {
        int64_t p = e / Gh;
        acc += col[p * G + (e - p * Gh)];
    }
    return acc;
}

// One block per (row b, whole chunks of up to 64 tokens: g2_span) x 128-column tile; grid
// (B·NQ, ceil(HK / 128)). beta (when not NULL): the first column tile's blocks also do beta's
// forward over their tokens. Three blocks per SM (80 registers; ptxas spills one word): 95
// without the bound left two.
__global__ void __launch_bounds__(G2_THREADS, 3)
    gate2_fwd_k(float *gcum, float *gout, float *beta, const kda_bf16 *f, const kda_bf16 *b,
                const float *A_log, const float *dt_bias, int64_t T, int64_t HV, int64_t K,
                int64_t chunk, float s) {
    kda_grid_wait();
    __shared__ float tot[G2_WARPS * G2_COLS];
    __shared__ int start[G2_WARPS];
    float v[G2_SEG][G2_VEC];
    int64_t HK = HV * K;
    G2Pos p = g2_pos(blockIdx.x, blockIdx.y, threadIdx.x, T, HK, chunk);
    unsigned carry = g2_fwd_scan(v, tot, start, gout, p, f, A_log, dt_bias, HK, K, chunk);
    __syncthreads();
    g2_fwd_store(v, carry, tot, start, gcum, p, HK);
    if (beta && blockIdx.y == 0) g2_beta_fwd(beta, b, p, threadIdx.x, HV, s);
}

// The backward's main kernel, the forward's grid; db (when not NULL): beta's backward.
// FROM_CUMSUM a template argument: the model's form (0) compiles without the scan and the
// per-element carry selects.
template <int FROM_CUMSUM>
__global__ void __launch_bounds__(G2_THREADS)
    gate2_bwd_k(kda_bf16 *df, double *part_dt, double *part_A, kda_bf16 *db, int64_t ldb,
                const float *dgrad, const float *dbeta, const kda_bf16 *f, const kda_bf16 *b,
                const float *A_log, const float *dt_bias, int64_t T, int64_t HV, int64_t K,
                int64_t chunk, float s) {
    kda_grid_wait();
    const int from_cumsum = FROM_CUMSUM;
    __shared__ float tot[G2_WARPS * G2_COLS], sdt[G2_WARPS * G2_COLS], sa[G2_WARPS * 32];
    __shared__ int end[G2_WARPS];
    float dg[G2_SEG][G2_VEC], fv[G2_SEG][G2_VEC];
    int64_t HK = HV * K;
    G2Pos p = g2_pos(blockIdx.x, blockIdx.y, threadIdx.x, T, HK, chunk);
    unsigned carry = g2_bwd_load(dg, fv, tot, end, p, dgrad, f, T, HK, chunk, from_cumsum);
    if (from_cumsum) __syncthreads();
    g2_bwd_math(dg, fv, from_cumsum ? carry : 0u, tot, end, sdt, sa, df, p, A_log, dt_bias, HK, K);
    __syncthreads();
    g2_bwd_part(part_dt, part_A, sdt, sa, blockIdx.x, blockIdx.y, threadIdx.x, A_log, HK, K);
    if (db && blockIdx.y == 0) g2_beta_bwd(db, ldb, dbeta, b, p, threadIdx.x, HV, s);
}

// ddt_bias [HK] += Σ_p part_dt (blocks 0..ceil(HK/32)-1: 32 columns x 8 segments, then the 8
// segment sums in order) and dA_log [HV] += Σ part_A over each head's groups (the next HV blocks:
// 256 thread shares, then a fixed shared-memory tree). The order depends on the shapes only.
__global__ void __launch_bounds__(G2_FIN)
    gate2_finish_k(float *dA_log, float *ddt_bias, const double *part_dt, const double *part_A,
                   int64_t P, int64_t HK, int64_t K) {
    kda_grid_wait();
    __shared__ double sh[G2_FIN];
    int64_t ncb = CEIL_DIV(HK, (int64_t)32);
    int tid = threadIdx.x;
    if ((int64_t)blockIdx.x < ncb) {
        int x = tid & 31, y = tid >> 5;
        int64_t c = (int64_t)blockIdx.x * 32 + x;
        sh[tid] = c < HK ? g2_fin_col(part_dt, P, HK, c, y) : 0.0;
        __syncthreads();
        if (y == 0 && c < HK) {
            double t = 0.0;
            for (int k = 0; k < G2_FIN / 32; k++)
                t += sh[k * 32 + x];
            ddt_bias[c] += (float)t;
        }
    } else {
        int64_t j = blockIdx.x - ncb;
        sh[tid] = g2_fin_head(part_A, P, HK / G2_VEC, K / G2_VEC, j, tid);
        __syncthreads();
        for (int h = G2_FIN / 2; h > 0; h >>= 1) { // fixed tree: sh[i] += sh[i + h]
            if (tid < h) sh[tid] += sh[tid + h];
            __syncthreads();
        }
        if (tid == 0) dA_log[j] += (float)sh[0];
    }
}

// The v2 path when ctx asks for it and the shapes allow: whole 4-column groups inside a head,
// chunks of at most 64 tokens (8 segments of 8), 8-byte aligned bf16 and 16-byte aligned fp32
// tensors (HK % 4 == 0 keeps every row's groups aligned).
// Grids past the hardware's limits (B·NQ >= 2^31 blocks, HK > 8.4M columns) take v1 too.
bool g2_ok(const KdaCudaCtx *ctx, int64_t B, int64_t T, int64_t HV, int64_t K, int64_t chunk,
           const void *bf1, const void *bf2, const void *f1, const void *f2) {
    return ctx->gate_version == 2 && K % G2_VEC == 0 && chunk <= G2_WARPS * G2_SEG &&
           B * g2_blocks_per_row(T, chunk) <= INT32_MAX &&
           CEIL_DIV(HV * K, (int64_t)G2_COLS) <= 65535 && aligned_(8, bf1, bf2) &&
           aligned_(16, f1, f2);
}

dim3 g2_grid(int64_t B, int64_t T, int64_t HK, int64_t chunk) {
    return dim3((unsigned)(B * g2_blocks_per_row(T, chunk)),
                (unsigned)CEIL_DIV(HK, (int64_t)G2_COLS));
}

// The backward's two launches (partials in ctx's scratch, then the finish).
int g2_bwd(KdaCudaCtx *ctx, kda_bf16 *df, float *dA_log, float *ddt_bias, kda_bf16 *db, int64_t ldb,
           const float *dgrad, const float *dbeta, const kda_bf16 *f, const kda_bf16 *b,
           const float *A_log, const float *dt_bias, int64_t B, int64_t T, int64_t HV, int64_t K,
           int64_t chunk, int from_cumsum, float s) {
    int64_t HK = HV * K, P = B * g2_blocks_per_row(T, chunk), G = HK / G2_VEC;
    double *part = (double *)kda_cuda_scratch(ctx, (size_t)(P * (HK + G)) * sizeof(double));
    if (!part) return -1;
    CUDA_CHECK(ctx,
               kda_launch(ctx, from_cumsum ? gate2_bwd_k<1> : gate2_bwd_k<0>,
                          g2_grid(B, T, HK, chunk), dim3(G2_THREADS), 0, df, part, part + P * HK,
                          db, ldb, dgrad, dbeta, f, b, A_log, dt_bias, T, HV, K, chunk, s));
    CUDA_CHECK(ctx,
               kda_launch(ctx, gate2_finish_k, dim3((unsigned)(CEIL_DIV(HK, (int64_t)32) + HV)),
                          dim3(G2_FIN), 0, dA_log, ddt_bias, part, part + P * HK, P, HK, K));
    return 0;
}

} // namespace

extern "C" {

int kda_cuda_gate_cumsum_fwd(KdaCudaCtx *ctx, float *gcum, float *g, const kda_bf16 *f,
                             const float *A_log, const float *dt_bias, int64_t B, int64_t T,
                             int64_t HV, int64_t K, int64_t chunk) {
    KDA_CUDA_REQUIRE(ctx, B >= 0 && T >= 0 && HV > 0 && K > 0 && chunk > 0);
    if (B * T == 0) return 0;
    if (g2_ok(ctx, B, T, HV, K, chunk, f, NULL, gcum, g)) {
        CUDA_CHECK(ctx, kda_launch(ctx, gate2_fwd_k, g2_grid(B, T, HV * K, chunk), dim3(G2_THREADS),
                                   0, gcum, g, (float *)NULL, f, (const kda_bf16 *)NULL, A_log,
                                   dt_bias, T, HV, K, chunk, 1.0f));
        return 0;
    }
    int64_t cols = B * CEIL_DIV(T, chunk) * HV * K;
    CUDA_CHECK(ctx,
               kda_launch(ctx, gate_fwd_k<kda_bf16>, dim3((unsigned)CEIL_DIV(cols, (int64_t)256)),
                          dim3(256), 0, gcum, g, f, A_log, dt_bias, B, T, HV, K, chunk));
    return 0;
}

int kda_cuda_gate_cumsum_bwd(KdaCudaCtx *ctx, kda_bf16 *df, float *dA_log, float *ddt_bias,
                             const float *dgcum, const kda_bf16 *f, const float *A_log,
                             const float *dt_bias, int64_t B, int64_t T, int64_t HV, int64_t K,
                             int64_t chunk, int from_cumsum) {
    KDA_CUDA_REQUIRE(ctx, B >= 0 && T >= 0 && HV > 0 && K > 0 && chunk > 0);
    if (B * T == 0) return 0;
    if (g2_ok(ctx, B, T, HV, K, chunk, f, df, dgcum, NULL))
        return g2_bwd(ctx, df, dA_log, ddt_bias, NULL, 0, dgcum, NULL, f, NULL, A_log, dt_bias, B,
                      T, HV, K, chunk, from_cumsum, 1.0f);
    int64_t P = B * CEIL_DIV(T, chunk), HK = HV * K;
    double *part = (double *)kda_cuda_scratch(ctx, (size_t)(2 * P * HK) * sizeof(double));
    if (!part) return -1;
    CUDA_CHECK(ctx, kda_launch(ctx, gate_bwd_k, dim3((unsigned)CEIL_DIV(P * HK, (int64_t)256)),
                               dim3(256), 0, df, part, part + P * HK, dgcum, f, A_log, dt_bias, B,
                               T, HV, K, chunk, from_cumsum));
    CUDA_CHECK(ctx, colsum_finish(ctx, ddt_bias, part, P, HK));
    CUDA_CHECK(ctx, kda_launch(ctx, gate_dA_finish_k, dim3((unsigned)HV), dim3(DA_THREADS), 0,
                               dA_log, part + P * HK, P, HV, K));
    return 0;
}

int kda_cuda_gate_cumsum_fwd_f32(KdaCudaCtx *ctx, float *gcum, const float *f, const float *A_log,
                                 const float *dt_bias, int64_t B, int64_t T, int64_t HV, int64_t K,
                                 int64_t chunk) {
    KDA_CUDA_REQUIRE(ctx, B >= 0 && T >= 0 && HV > 0 && K > 0 && chunk > 0);
    if (B * T == 0) return 0;
    int64_t cols = B * CEIL_DIV(T, chunk) * HV * K;
    CUDA_CHECK(ctx, kda_launch(ctx, gate_fwd_k<float>, dim3((unsigned)CEIL_DIV(cols, (int64_t)256)),
                               dim3(256), 0, gcum, (float *)NULL, f, A_log, dt_bias, B, T, HV, K,
                               chunk));
    return 0;
}

} // extern "C"

namespace {

// ---- beta ---------------------------------------------------------------------------------------

template <class E> __global__ void beta_fwd_k(float *beta, const E *b, int64_t n, float s) {
    kda_grid_wait();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        beta[i] = s * sigmoid_f(ldf(b, i));
}

__global__ void beta_bwd_k(kda_bf16 *db, const float *dbeta, const kda_bf16 *b, int64_t n,
                           float s) {
    kda_grid_wait();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float sg = sigmoid_f(bf2f(b[i]));
        db[i] = f2bf(dbeta[i] * s * sg * (1.0f - sg));
    }
}

// The same with db rows [N, HV] at stride ldo (db may be columns of a wider matrix).
__global__ void beta_bwd_ld_k(kda_bf16 *db, int64_t ldo, const float *dbeta, const kda_bf16 *b,
                              int64_t N, int64_t HV, float s) {
    kda_grid_wait();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < N * HV;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / HV;
        float sg = sigmoid_f(bf2f(b[i]));
        db[r * ldo + (i - r * HV)] = f2bf(dbeta[i] * s * sg * (1.0f - sg));
    }
}

} // namespace

extern "C" {

int kda_cuda_beta_fwd(KdaCudaCtx *ctx, float *beta, const kda_bf16 *b, int64_t n,
                      int allow_neg_eigval) {
    KDA_CUDA_REQUIRE(ctx, n >= 0);
    if (n == 0) return 0;
    CUDA_CHECK(ctx, kda_launch(ctx, beta_fwd_k<kda_bf16>, dim3(grid_for(n)), dim3(256), 0, beta, b,
                               n, allow_neg_eigval ? 2.0f : 1.0f));
    return 0;
}

int kda_cuda_beta_bwd(KdaCudaCtx *ctx, kda_bf16 *db, const float *dbeta, const kda_bf16 *b,
                      int64_t n, int allow_neg_eigval) {
    KDA_CUDA_REQUIRE(ctx, n >= 0);
    if (n == 0) return 0;
    CUDA_CHECK(ctx, kda_launch(ctx, beta_bwd_k, dim3(grid_for(n)), dim3(256), 0, db, dbeta, b, n,
                               allow_neg_eigval ? 2.0f : 1.0f));
    return 0;
}

int kda_cuda_beta_bwd_ld(KdaCudaCtx *ctx, kda_bf16 *db, int64_t ldo, const float *dbeta,
                         const kda_bf16 *b, int64_t N, int64_t HV, int allow_neg_eigval) {
    KDA_CUDA_REQUIRE(ctx, N >= 0 && HV > 0 && ldo >= HV);
    if (N == 0) return 0;
    CUDA_CHECK(ctx, kda_launch(ctx, beta_bwd_ld_k, dim3(grid_for(N * HV)), dim3(256), 0, db, ldo,
                               dbeta, b, N, HV, allow_neg_eigval ? 2.0f : 1.0f));
    return 0;
}

int kda_cuda_beta_fwd_f32(KdaCudaCtx *ctx, float *beta, const float *b, int64_t n,
                          int allow_neg_eigval) {
    KDA_CUDA_REQUIRE(ctx, n >= 0);
    if (n == 0) return 0;
    CUDA_CHECK(ctx, kda_launch(ctx, beta_fwd_k<float>, dim3(grid_for(n)), dim3(256), 0, beta, b, n,
                               allow_neg_eigval ? 2.0f : 1.0f));
    return 0;
}

} // extern "C"

extern "C" {

// ---- gate + beta in one call (the model's v2 call sites) ----------------------------------------

int kda_cuda_gate_beta_fwd(KdaCudaCtx *ctx, float *gcum, float *g, float *beta, const kda_bf16 *f,
                           const kda_bf16 *b, const float *A_log, const float *dt_bias, int64_t B,
                           int64_t T, int64_t HV, int64_t K, int64_t chunk, int allow_neg_eigval) {
    KDA_CUDA_REQUIRE(ctx, B >= 0 && T >= 0 && HV > 0 && K > 0 && chunk > 0);
    if (B * T == 0) return 0;
    if (!g2_ok(ctx, B, T, HV, K, chunk, f, NULL, gcum, g)) // v1: two launches
        return kda_cuda_gate_cumsum_fwd(ctx, gcum, g, f, A_log, dt_bias, B, T, HV, K, chunk) ||
                       kda_cuda_beta_fwd(ctx, beta, b, B * T * HV, allow_neg_eigval)
                   ? -1
                   : 0;
    CUDA_CHECK(ctx, kda_launch(ctx, gate2_fwd_k, g2_grid(B, T, HV * K, chunk), dim3(G2_THREADS), 0,
                               gcum, g, beta, f, b, A_log, dt_bias, T, HV, K, chunk,
                               allow_neg_eigval ? 2.0f : 1.0f));
    return 0;
}

int kda_cuda_gate_beta_bwd(KdaCudaCtx *ctx, kda_bf16 *df, float *dA_log, float *ddt_bias,
                           kda_bf16 *db, int64_t ldb, const float *dgrad, const float *dbeta,
                           const kda_bf16 *f, const kda_bf16 *b, const float *A_log,
                           const float *dt_bias, int64_t B, int64_t T, int64_t HV, int64_t K,
                           int64_t chunk, int from_cumsum, int allow_neg_eigval) {
    KDA_CUDA_REQUIRE(ctx, B >= 0 && T >= 0 && HV > 0 && K > 0 && chunk > 0 && ldb >= HV);
    if (B * T == 0) return 0;
    if (!g2_ok(ctx, B, T, HV, K, chunk, f, df, dgrad, NULL)) // v1: four launches
        return kda_cuda_gate_cumsum_bwd(ctx, df, dA_log, ddt_bias, dgrad, f, A_log, dt_bias, B, T,
                                        HV, K, chunk, from_cumsum) ||
                       kda_cuda_beta_bwd_ld(ctx, db, ldb, dbeta, b, B * T, HV, allow_neg_eigval)
                   ? -1
                   : 0;
    return g2_bwd(ctx, df, dA_log, ddt_bias, db, ldb, dgrad, dbeta, f, b, A_log, dt_bias, B, T, HV,
                  K, chunk, from_cumsum, allow_neg_eigval ? 2.0f : 1.0f);
}

// ---- host twins of the v2 kernels (CPU suite of a CUDA build: test_gate_host.c) ---------------
// Every thread of a block runs one phase after another, as the kernels between their barriers;
// the shared arrays are the block's, the per-thread arrays what the kernels keep in registers.

int kda_cuda_gate2_fwd_host(float *gcum, float *g, float *beta, const kda_bf16 *f,
                            const kda_bf16 *b, const float *A_log, const float *dt_bias, int64_t B,
                            int64_t T, int64_t HV, int64_t K, int64_t chunk, int allow_neg_eigval) {
    if (K % G2_VEC || chunk > G2_WARPS * G2_SEG || chunk < 1) return -1;
    int64_t HK = HV * K, P = B * g2_blocks_per_row(T, chunk);
    int64_t tiles = CEIL_DIV(HK, (int64_t)G2_COLS);
    float(*v)[G2_SEG][G2_VEC] = (float(*)[G2_SEG][G2_VEC])malloc(G2_THREADS * sizeof *v);
    float tot[G2_WARPS * G2_COLS];
    int start[G2_WARPS];
    unsigned carry[G2_THREADS];
    if (!v) return -1;
    for (int64_t blk = 0; blk < P; blk++)
        for (int64_t tile = 0; tile < tiles; tile++) {
            for (int tid = 0; tid < G2_THREADS; tid++)
                carry[tid] =
                    g2_fwd_scan(v[tid], tot, start, g, g2_pos(blk, tile, tid, T, HK, chunk), f,
                                A_log, dt_bias, HK, K, chunk);
            for (int tid = 0; tid < G2_THREADS; tid++)
                g2_fwd_store(v[tid], carry[tid], tot, start, gcum,
                             g2_pos(blk, tile, tid, T, HK, chunk), HK);
            if (beta && tile == 0)
                for (int tid = 0; tid < G2_THREADS; tid++)
                    g2_beta_fwd(beta, b, g2_pos(blk, tile, tid, T, HK, chunk), tid, HV,
                                allow_neg_eigval ? 2.0f : 1.0f);
        }
    free(v);
    return 0;
}

int kda_cuda_gate2_bwd_host(kda_bf16 *df, float *dA_log, float *ddt_bias, kda_bf16 *db, int64_t ldb,
                            const float *dgrad, const float *dbeta, const kda_bf16 *f,
                            const kda_bf16 *b, const float *A_log, const float *dt_bias, int64_t B,
                            int64_t T, int64_t HV, int64_t K, int64_t chunk, int from_cumsum,
                            int allow_neg_eigval) {
    if (K % G2_VEC || chunk > G2_WARPS * G2_SEG || chunk < 1) return -1;
    int64_t HK = HV * K, P = B * g2_blocks_per_row(T, chunk);
    int64_t tiles = CEIL_DIV(HK, (int64_t)G2_COLS), G = HK / G2_VEC;
    float(*dg)[G2_SEG][G2_VEC] = (float(*)[G2_SEG][G2_VEC])malloc(G2_THREADS * sizeof *dg);
    float(*fv)[G2_SEG][G2_VEC] = (float(*)[G2_SEG][G2_VEC])malloc(G2_THREADS * sizeof *fv);
    double *part = (double *)malloc((size_t)(P * (HK + G)) * sizeof(double));
    float tot[G2_WARPS * G2_COLS], sdt[G2_WARPS * G2_COLS], sa[G2_WARPS * 32];
    int end[G2_WARPS];
    unsigned carry[G2_THREADS];
    if (!dg || !fv || !part) {
        free(dg), free(fv), free(part);
        return -1;
    }
    for (int64_t blk = 0; blk < P; blk++)
        for (int64_t tile = 0; tile < tiles; tile++) {
            for (int tid = 0; tid < G2_THREADS; tid++)
                carry[tid] =
                    g2_bwd_load(dg[tid], fv[tid], tot, end, g2_pos(blk, tile, tid, T, HK, chunk),
                                dgrad, f, T, HK, chunk, from_cumsum);
            for (int tid = 0; tid < G2_THREADS; tid++)
                g2_bwd_math(dg[tid], fv[tid], carry[tid], tot, end, sdt, sa, df,
                            g2_pos(blk, tile, tid, T, HK, chunk), A_log, dt_bias, HK, K);
            for (int tid = 0; tid < G2_THREADS; tid++)
                g2_bwd_part(part, part + P * HK, sdt, sa, blk, tile, tid, A_log, HK, K);
            if (db && tile == 0)
                for (int tid = 0; tid < G2_THREADS; tid++)
                    g2_beta_bwd(db, ldb, dbeta, b, g2_pos(blk, tile, tid, T, HK, chunk), tid, HV,
                                allow_neg_eigval ? 2.0f : 1.0f);
        }
    // the finish kernel's order: 8 segment sums per column, then in segment order; per head 256
    // thread shares, then the shared-memory tree
    for (int64_t c = 0; c < HK; c++) {
        double t = 0.0;
        for (int y = 0; y < G2_FIN / 32; y++)
            t += g2_fin_col(part, P, HK, c, y);
        ddt_bias[c] += (float)t;
    }
    for (int64_t j = 0; j < HV; j++) {
        double sh[G2_FIN];
        for (int tid = 0; tid < G2_FIN; tid++)
            sh[tid] = g2_fin_head(part + P * HK, P, G, K / G2_VEC, j, tid);
        for (int h = G2_FIN / 2; h > 0; h >>= 1)
            for (int tid = 0; tid < h; tid++)
                sh[tid] += sh[tid + h];
        dA_log[j] += (float)sh[0];
    }
    free(dg), free(fv), free(part);
    return 0;
}

} // extern "C"

namespace {

// ---- L2 norm -----------------------------------------------------------------------------------

template <class E> // E: bf16 or fp32 storage
__global__ void l2norm_fwd_k(E *y, float *rstd, const E *x, int64_t N, int64_t dim, float eps) {
    kda_grid_wait();
    int64_t r = warp_row(N);
    if (r < 0) return;
    int lane = threadIdx.x & 31;
    float ss = 0.0f;
    for (int64_t i = lane; i < dim; i += 32) {
        float v = ldf(x, r * dim + i);
        ss += v * v;
    }
    ss = warp_sum(ss);
    float rs = (float)(1.0 / sqrt((double)ss + (double)eps)); // eps inside the square root
    if (lane == 0 && rstd) rstd[r] = rs;
    for (int64_t i = lane; i < dim; i += 32)
        stf(y, r * dim + i, ldf(x, r * dim + i) * rs);
}

__global__ void l2norm_bwd_k(kda_bf16 *dx, const float *dy, const kda_bf16 *x, const float *rstd,
                             int64_t N, int64_t dim) {
    kda_grid_wait();
    int64_t r = warp_row(N);
    if (r < 0) return;
    int lane = threadIdx.x & 31;
    float rs = rstd[r], dot = 0.0f;
    for (int64_t i = lane; i < dim; i += 32)
        dot += dy[r * dim + i] * (bf2f(x[r * dim + i]) * rs);
    dot = warp_sum(dot);
    for (int64_t i = lane; i < dim; i += 32) {
        float yh = bf2f(x[r * dim + i]) * rs;
        dx[r * dim + i] = f2bf(rs * (dy[r * dim + i] - dot * yh));
    }
}

} // namespace

extern "C" {

int kda_cuda_l2norm_fwd(KdaCudaCtx *ctx, kda_bf16 *y, float *rstd, const kda_bf16 *x, int64_t N,
                        int64_t dim, float eps) {
    KDA_CUDA_REQUIRE(ctx, N >= 0 && dim > 0);
    if (N == 0) return 0;
    CUDA_CHECK(ctx, kda_launch(ctx, l2norm_fwd_k<kda_bf16>, dim3(row_blocks(N)), dim3(256), 0, y,
                               rstd, x, N, dim, eps));
    return 0;
}

int kda_cuda_l2norm_bwd(KdaCudaCtx *ctx, kda_bf16 *dx, const float *dy, const kda_bf16 *x,
                        const float *rstd, int64_t N, int64_t dim) {
    KDA_CUDA_REQUIRE(ctx, N >= 0 && dim > 0);
    if (N == 0) return 0;
    CUDA_CHECK(ctx, kda_launch(ctx, l2norm_bwd_k, dim3(row_blocks(N)), dim3(256), 0, dx, dy, x,
                               rstd, N, dim));
    return 0;
}

int kda_cuda_l2norm_fwd_f32(KdaCudaCtx *ctx, float *y, float *rstd, const float *x, int64_t N,
                            int64_t dim, float eps) {
    KDA_CUDA_REQUIRE(ctx, N >= 0 && dim > 0);
    if (N == 0) return 0;
    CUDA_CHECK(ctx, kda_launch(ctx, l2norm_fwd_k<float>, dim3(row_blocks(N)), dim3(256), 0, y, rstd,
                               x, N, dim, eps));
    return 0;
}

} // extern "C"
