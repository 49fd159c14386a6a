// conv_cuda.cu - the causal depthwise conv + SiLU on the GPU, plain and fused with the per-head
// L2 norm of q and k (see conv_cuda.h), and a layer's q, k and v convs in one launch: kernels,
// launchers (fp32 forward included), then the host twins of the fused and the q|k|v kernels.
#include "cuda/conv_cuda.h"

#include <stdlib.h> // getenv, free

#include <type_traits> // std::conditional

#include "cuda/cuda_internal.h" // defines: bf2f, f2bf, silu_f, dsilu_f, CEIL_DIV, KDA_CUDA_REQUIRE
#include "cuda/ops_common.cuh"  // defines: colsum_finish, unpack2, ld_v, st_v, aligned_, group_sum

namespace {

// ---- the L2 norm pieces shared with the host twins (group sums: ops_common.cuh) -------------
// 1 / sqrt(|x|² + eps), eps inside the root, in double (as l2norm_fwd_k).
__host__ __device__ __forceinline__ float l2_rs(float ss, float eps) {
    return (float)(1.0 / sqrt((double)ss + (double)eps));
}
// L2 backward, one lane's share: yh = SiLU(c)·rs (written), returns Σ_v g·yh over its VEC.
template <int VEC>
__host__ __device__ __forceinline__ float l2_bwd_dot_lane(float (&yh)[VEC], const float (&g)[VEC],
                                                          const float (&c)[VEC], float rs) {
    float dot = 0.0f;
    for (int v = 0; v < VEC; v++) {
        yh[v] = silu_f(c[v]) * rs;
        dot += g[v] * yh[v];
    }
    return dot;
}

// ---- causal depthwise conv + SiLU ------------------------------------------------------------
//
// Work split (forward and backward): a thread owns VEC consecutive channels of one row b and a
// tile of CONV_TT consecutive tokens; it walks the tile in increasing t and keeps the last W
// inputs in registers (a sliding window), so each input is loaded once per thread instead of W
// times, and the index math (div/mod) runs once per thread instead of once per element. A block is
// 32 channel groups (threadIdx.x: one warp reads 32·VEC contiguous channels) x CONV_BT tiles
// (threadIdx.y), so every warp walks one tile and the `t < T` tests are warp-uniform. Tile q of
// the flattened (b, tile) index is b = q / ntile, tokens [(q % ntile)·TT, +TT) ∩ [0, T).
// Halo: a tile also reads W-1 tokens before it (and, backward, W-1 after it); those reads
// hit L2 (the neighbour tile is in the same block), the HBM traffic stays ~1 read per input.
// Loads in flight (2026-12-03): the forward issues all of its tile's loads (the W-1 history
// tokens and its CONV_TT_FWD tokens, as raw VEC-element words) before the first use, and the
// backward keeps its loads CONV_PD tokens ahead of their use (a ring of raw words), so a thread
// has 150-200 bytes in flight instead of one 16-byte load used at once; the measured rows were
// ~1 TB/s (conv+SiLU fwd 1.69 ms, bwd 2.95 ms at mb 16, 4.3x their floor) with 512 threads per SM
// of the q/k grids each waiting on its load. The arithmetic and its order are unchanged.
// Template PF = false is the kernel before (one load per token, used at once; forward tiles of
// 16) and the default again: on the GPU run of 2026-12-03 the prefetching kernels measured
// slower in the model (mb 16: fwd 1.69 → 1.99 ms, bwd 2.95 → 4.61 ms; the q/k backward's 172
// registers leave one block per SM). KDA_CONV_PREFETCH=1, read at every launch, runs them.
#define CONV_MAX_W    8
#define CONV_BT       8
#define CONV_TT_FWD   8 // tokens per forward tile with the prefetch (KDA_CONV_PREFETCH=1; else 16)
#define CONV_TT_BWD   32
#define CONV_PD       8 // backward prefetch distance (tokens)
#define CONV_TT_F(PF) ((PF) ? CONV_TT_FWD : 16)

// ---- v2 shapes (conv_v2_ below picks them; the same kernels' templates, other parameters) ----
// Why v1 sits at ~4.5x its floor at the model's shapes (B16 T2048, C 256 q/k and 512 v, W 4;
// H200: 132 SMs, ~1 µs loaded HBM latency, so ~32 KB in flight per SM for 4 TB/s):
//  * the v1 forward loads one word and uses it at once (its store to y may alias p, so the next
//    load cannot move above it): 256 (q, k) or 512 (v) blocks, 2-4 per SM, keep 8-16 KB in
//    flight per SM, and every token of a 16-token tile waits a full round trip;
//  * the v1 backward walks 35 steps per thread, each waiting on its p and dy loads, over only
//    256 (q, k) or 512 (v) blocks (tiles of 32 tokens): a chain of dependent round trips;
//  * the prefetching v1 (KDA_CONV_PREFETCH=1) issued the loads ahead but held them in more
//    registers (backward 172: one 256-thread block per SM; forward 8 channels x 11 words): 8
//    warps per SM to hide the SiLU / L2 arithmetic and the loads, and the same few blocks in
//    waves, so it measured slower.
// v2 keeps the loads-first walk but sizes it for occupancy: the forward 4 channels (8-byte words)
// x 8 tokens per thread, all 11 loads issued before the first use; the backward 2 channels
// (4-byte p, 8-byte dy words) x 8 tokens, all 14 p and 11 dy loads at the tile start (PD = TT +
// W - 1; the fused q/k backward's fp32 dq and rstd too, with 2 blocks per SM: at 3 its 80
// registers spilled); __launch_bounds__ asks for CONV2_MINB_* blocks per SM (register cap), and the
// grids have 4x (forward: 2x) the v1 blocks. The backward's blocks walk several block rows (at most
// CONV2_ROWS partial rows of dw, as v1's 128 at the model shape). The arithmetic per element is
// v1's (tap order, fp32); the L2 head sums group 4 (forward) or 2 (backward) channels per lane
// before the lane tree, so rstd / dp may differ from v1 in the last bits (the tests hold both to
// the CPU reference).
#define CONV2_TT_FWD   8
#define CONV2_TT_BWD   8
#define CONV2_MINB_FWD 3
#define CONV2_MINB_BWD 3
#define CONV2_ROWS     256
#define CONV2_MINB_L2  2

// VEC consecutive elements of storage E as one raw load (held until converted).
template <int VEC, class E> struct ConvRaw;
template <> struct ConvRaw<8, kda_bf16> {
    uint4 u;
    __device__ __forceinline__ void ld(const kda_bf16 *p) {
        u = *reinterpret_cast<const uint4 *>(p);
    }
    __device__ __forceinline__ void zero() {
        u = make_uint4(0u, 0u, 0u, 0u);
    }
    __device__ __forceinline__ void get(float (&v)[8]) const {
        unpack2(u.x, v[0], v[1]), unpack2(u.y, v[2], v[3]);
        unpack2(u.z, v[4], v[5]), unpack2(u.w, v[6], v[7]);
    }
};
template <> struct ConvRaw<4, kda_bf16> {
    uint2 u;
    __device__ __forceinline__ void ld(const kda_bf16 *p) {
        u = *reinterpret_cast<const uint2 *>(p);
    }
    __device__ __forceinline__ void zero() {
        u = make_uint2(0u, 0u);
    }
    __device__ __forceinline__ void get(float (&v)[4]) const {
        unpack2(u.x, v[0], v[1]), unpack2(u.y, v[2], v[3]);
    }
};
template <> struct ConvRaw<2, kda_bf16> {
    unsigned u;
    __device__ __forceinline__ void ld(const kda_bf16 *p) {
        u = *reinterpret_cast<const unsigned *>(p);
    }
    __device__ __forceinline__ void zero() {
        u = 0u;
    }
    __device__ __forceinline__ void get(float (&v)[2]) const {
        unpack2(u, v[0], v[1]);
    }
};
template <> struct ConvRaw<2, float> {
    float2 u;
    __device__ __forceinline__ void ld(const float *p) {
        u = *reinterpret_cast<const float2 *>(p);
    }
    __device__ __forceinline__ void zero() {
        u = make_float2(0.0f, 0.0f);
    }
    __device__ __forceinline__ void get(float (&v)[2]) const {
        v[0] = u.x, v[1] = u.y;
    }
};
template <> struct ConvRaw<1, kda_bf16> {
    kda_bf16 u;
    __device__ __forceinline__ void ld(const kda_bf16 *p) {
        u = *p;
    }
    __device__ __forceinline__ void zero() {
        u = 0;
    }
    __device__ __forceinline__ void get(float (&v)[1]) const {
        v[0] = bf2f(u);
    }
};
template <> struct ConvRaw<4, float> {
    float4 u;
    __device__ __forceinline__ void ld(const float *p) {
        u = *reinterpret_cast<const float4 *>(p);
    }
    __device__ __forceinline__ void zero() {
        u = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    __device__ __forceinline__ void get(float (&v)[4]) const {
        v[0] = u.x, v[1] = u.y, v[2] = u.z, v[3] = u.w;
    }
};
template <> struct ConvRaw<1, float> {
    float u;
    __device__ __forceinline__ void ld(const float *p) {
        u = *p;
    }
    __device__ __forceinline__ void zero() {
        u = 0.0f;
    }
    __device__ __forceinline__ void get(float (&v)[1]) const {
        v[0] = u;
    }
};

// Thread's work item: channel ch0 (first of VEC), row b, tokens [t0, t1) of the block row `row`
// (blockIdx.y unless the kernel walks several) and block column bx (blockIdx.x, or the combined
// q|k|v kernels' decoded column). Returns false when the thread has no channels
// (tail of the channel groups) or no tokens (tail of the tiles).
// 32-bit index math (the kernels are issue-bound; 64-bit products, compares and the divide below
// cost 2-3x the instructions): the launchers refuse calls with B·T or T·max(C, ldo) above
// CONV_I32_MAX (conv_i32_ok), so the tile and row numbers (< B·T + 8), the tokens (< T + TT + W)
// and every per-token offset (t·C, t·ldo, t·H with t < T) fit in an int. Only a row's base
// offset b·T·C is 64-bit, formed once per thread. The addresses are the same: the same bits.
#define CONV_I32_MAX ((int64_t)INT32_MAX - 1024)
template <int VEC, int TT> struct ConvItem {
    int ch0, b, t0, t1;
    __device__ bool init(int B, int T, int C, int bx, int row) {
        int ncg = C / VEC, ntile = (T + TT - 1) / TT;
        int cg = bx * 32 + (int)threadIdx.x;
        int q = row * CONV_BT + (int)threadIdx.y;
        ch0 = cg * VEC;
        b = q / ntile;
        t0 = (q - b * ntile) * TT;
        t1 = min(t0 + TT, T);
        return cg < ncg && b < B;
    }
};

// y_t = SiLU(Σ_i w[ch, i] p_{t-(W-1)+i}), zero history before t = 0. E: bf16 or fp32 storage.
// With L2 (the fused q/k path): y = SiLU(conv) / sqrt(|SiLU(conv)|² + eps) per head of K = LG·VEC
// channels (LG consecutive lanes hold a head; C = H·K), rstd [B·T·H] = that reciprocal root. LG
// is a template parameter (the launchers dispatch on K) so the head's group sum unrolls
// (group_sum<LG>, ops_common.cuh: the same butterfly as the run-time group_sum).
// TT_ (0: CONV_TT_F(PF)) and MINB (blocks per SM for __launch_bounds__, which caps the
// registers) set the v2 shape (below); the v1 launches keep the defaults.
// The body is a device function of the block's column bx and row by (conv_fwd_k: blockIdx.x, .y;
// the combined q|k|v kernel: decoded from its job table).
template <int W, int VEC, bool L2, bool PF, class E, int TT_ = 0, int LG = 1>
__device__ __forceinline__ void conv_fwd_body(E *y, float *rstd, const E *p, const float *w, int B,
                                              int T, int C, float eps, int bx, int by) {
    constexpr int TT = TT_ > 0 ? TT_ : CONV_TT_F(PF);
    ConvItem<VEC, TT> it;
    if (!it.init(B, T, C, bx, by)) return;
    float wr[W][VEC], win[W][VEC]; // win[i] = p_{t-(W-1)+i}; win[W-1] is the current token
#pragma unroll
    for (int v = 0; v < VEC; v++)
#pragma unroll
        for (int i = 0; i < W; i++)
            wr[i][v] = w[(it.ch0 + v) * W + i];
    const int64_t row0 = (int64_t)it.b * T; // the row's first token (64-bit: B·T·C may not fit)
    const E *pb = p + row0 * C + it.ch0;
    E *yb = y + row0 * C + it.ch0;
    // L2: this lane's head (K = LG·VEC channels), whether it writes the head's rstd, its rstd
    constexpr int K = L2 ? LG * VEC : 1;
    const int H = C / K, head = it.ch0 / K;
    const bool lead = it.ch0 % K == 0;
    float *rb = L2 ? rstd + row0 * H + head : NULL;
    (void)H, (void)lead, (void)rb; // unused without L2
    // every load of the tile first: raw[j] = p_{t0-(W-1)+j} (zero before t = 0; not loaded
    // past the tile's end), the history p_{t0-(W-1)} .. p_{t0-1} and the tile's tokens
    ConvRaw<VEC, E> raw[PF ? TT + W - 1 : 1];
    if constexpr (PF) {
#pragma unroll
        for (int j = 0; j < TT + W - 1; j++) {
            int tau = it.t0 - (W - 1) + j;
            if (tau >= 0 && tau < it.t1)
                raw[j].ld(pb + tau * C);
            else
                raw[j].zero();
        }
#pragma unroll
        for (int i = 0; i < W - 1; i++)
            raw[i].get(win[i]);
    } else {
#pragma unroll
        for (int i = 0; i < W - 1; i++) { // history p_{t0-(W-1)} .. p_{t0-1}
            int tau = it.t0 - (W - 1) + i;
            if (tau >= 0) {
                ld_v<VEC>(win[i], pb + tau * C);
            } else {
#pragma unroll
                for (int v = 0; v < VEC; v++)
                    win[i][v] = 0.0f;
            }
        }
    }
#pragma unroll
    for (int s = 0; s < TT; s++) {
        int t = it.t0 + s;
        if (t >= it.t1) break; // warp-uniform (one tile per warp)
        if constexpr (PF)
            raw[s + W - 1].get(win[W - 1]);
        else
            ld_v<VEC>(win[W - 1], pb + t * C);
        float out[VEC];
#pragma unroll
        for (int v = 0; v < VEC; v++) {
            float acc = 0.0f;
#pragma unroll
            for (int i = 0; i < W; i++)
                acc += wr[i][v] * win[i][v]; // tap order 0..W-1, as the CPU twin
            out[v] = silu_f(acc);
        }
        if constexpr (L2) { // the head's sum of squares over its LG lanes (fp32, tree order)
            float rs = l2_rs(group_sum<LG>(sumsq_lane<VEC>(out)), eps);
#pragma unroll
            for (int v = 0; v < VEC; v++)
                out[v] *= rs;
            if (lead) rb[t * H] = rs;
        }
        st_v<VEC>(yb + t * C, out);
#pragma unroll
        for (int i = 0; i < W - 1; i++) // slide (register renames once unrolled)
#pragma unroll
            for (int v = 0; v < VEC; v++)
                win[i][v] = win[i + 1][v];
    }
}

template <int W, int VEC, bool L2, bool PF, class E, int TT_ = 0, int MINB = 1, int LG = 1>
__global__ void __launch_bounds__(32 * CONV_BT, MINB)
    conv_fwd_k(E *y, float *rstd, const E *p, const float *w, int B, int T, int C, float eps) {
    conv_fwd_body<W, VEC, L2, PF, E, TT_, LG>(y, rstd, p, w, B, T, C, eps, (int)blockIdx.x,
                                              (int)blockIdx.y);
}

// Backward, fused dp + dw partials. With c_t the pre-activation and dc_t = dy_t SiLU'(c_t):
//   dp_τ = Σ_i w_i dc_{τ+(W-1)-i}      dw_i = Σ_t dc_t p_{t-(W-1)+i}
// The thread walks t = t0 .. t1+W-2: it recomputes c_t from the p window, gets dc_t (0 past
// T), keeps the last W dc values, and emits dp_{t-(W-1)} once that window is full. dc_t for
// t < t1 also goes into the thread's fp32 dw sums (tokens of its own tile only, in increasing
// t). The block then adds its CONV_BT tiles in double, in increasing threadIdx.y, and writes
// part[blockIdx.y, ch, i]; colsum_finish adds the blocks in order. All fixed by the shapes.
// With L2 (the fused q/k path) the incoming gradient is dq [B, T, C] fp32 w.r.t. the L2 norm's
// output: the kernel recomputes ŷ = SiLU(c)·rstd and turns it into the gradient w.r.t. SiLU(c),
// rstd (dq·... - (dq·ŷ) ŷ) with the head's dot over its LG lanes (a template parameter, as the
// forward's), before the SiLU and conv backward; dy is unused then.
// TT (tokens per tile), PD (ring depth; PD >= TT + W - 1 issues every load of the tile at its
// start) and MINB (blocks per SM for __launch_bounds__) set the v2 shape (below). The block walks
// block rows blockIdx.y, + gridDim.y, ... (v1: gridDim.y = the rows, one each); a thread's dw sums
// run over its tiles in that order, so the partials depend on the shapes only.
// The body is a device function of the block's column bx, first row by and row step gy (the
// combined q|k|v kernel: its job table's). GRID (conv_bwd_k): blockIdx.x, blockIdx.y, gridDim.y
// instead, read where they are used, as the kernel did before the body was split out (its PTX is
// then the same instruction for instruction; passing them in moved the reads and cost a register).
template <int W, int VEC, bool L2, bool PF, int TT = CONV_TT_BWD, int PD = CONV_PD, int LG = 1,
          bool GRID = false>
__device__ __forceinline__ void conv_bwd_body(kda_bf16 *dp, double *part, const kda_bf16 *dy,
                                              const kda_bf16 *p, const float *w, const float *dq,
                                              const float *rstd, int B, int T, int C, int ldo,
                                              int bx, int by, int gy) {
    auto BX = [&]() { return GRID ? (int)blockIdx.x : bx; };
    auto BY = [&]() { return GRID ? blockIdx.y : (unsigned)by; };
    auto GY = [&]() { return GRID ? (int)gridDim.y : gy; };
    __shared__ float sh[CONV_BT][32 * VEC];
    float wr[W][VEC], acc[W][VEC];
#pragma unroll
    for (int i = 0; i < W; i++)
#pragma unroll
        for (int v = 0; v < VEC; v++)
            wr[i][v] = acc[i][v] = 0.0f;
    const int nrows = CEIL_DIV(B * CEIL_DIV(T, TT), CONV_BT);
    if (BX() * 32 + (int)threadIdx.x < C / VEC) {
#pragma unroll
        for (int v = 0; v < VEC; v++)
#pragma unroll
            for (int i = 0; i < W; i++)
                wr[i][v] = w[(BX() * 32 + (int)threadIdx.x) * VEC * W + v * W + i];
    }
    for (int row = (int)BY(); row < nrows; row += GY()) {
        ConvItem<VEC, TT> it;
        if (!it.init(B, T, C, BX(), row)) continue; // warp-uniform in t; no barrier inside the walk
        float pw[W][VEC], dcw[W][VEC];
        // pw[i] = p_{t-(W-1)+i}; dcw[i] = dc_{t-(W-1)+i} (dcw[W-1] = dc_t)
#pragma unroll
        for (int i = 0; i < W; i++)
#pragma unroll
            for (int v = 0; v < VEC; v++)
                pw[i][v] = dcw[i][v] = 0.0f;
        const int64_t row0 = (int64_t)it.b * T; // the row's first token (64-bit, once)
        const kda_bf16 *pb = p + row0 * C + it.ch0;
        const kda_bf16 *dyb = L2 ? NULL : dy + row0 * C + it.ch0;
        kda_bf16 *dpb = dp + row0 * ldo + it.ch0; // rows of dp: stride ldo (>= C)
        constexpr int K = L2 ? LG * VEC : 1;
        const int H = C / K, head = it.ch0 / K;
        const float *dqb = L2 ? dq + row0 * C + it.ch0 : NULL; // L2: dq and rstd of the lane
        const float *rb = L2 ? rstd + row0 * H + head : NULL;
        (void)dqb, (void)rb; // unused without L2
#pragma unroll
        for (int i = 0; i < W - 1; i++) {
            int tau = it.t0 - (W - 1) + i;
            if (tau >= 0) ld_bf<VEC>(pw[i], pb + tau * C);
        }
        // the ring: slot s % CONV_PD holds token t0 + s's p, incoming gradient (and rstd) from
        // CONV_PD steps before its use (loaded only for t < T)
        constexpr int NS = TT + W - 1;
        using GRaw =
            typename std::conditional<L2, ConvRaw<VEC, float>, ConvRaw<VEC, kda_bf16>>::type;
        ConvRaw<VEC, kda_bf16> rp[PD];
        GRaw rg[PD];
        float rr[PD];
        auto fetch = [&](int slot, int j) {
            int tn = it.t0 + j;
            if (j >= NS || tn >= T) return;
            rp[slot].ld(pb + tn * C);
            if constexpr (L2) {
                rg[slot].ld(dqb + tn * C);
                rr[slot] = rb[tn * H];
            } else {
                rg[slot].ld(dyb + tn * C);
            }
        };
        if constexpr (PF) {
#pragma unroll
            for (int j = 0; j < PD; j++)
                fetch(j, j);
        }
#pragma unroll
        for (int s = 0; s < NS; s++) {
            int t = it.t0 + s;
            if (t - (W - 1) >= it.t1) break; // every dp of the tile emitted (warp-uniform)
            float dc[VEC];
            if (t < T) { // warp-uniform (one tile per warp): the group sums below are safe
                float g[VEC], c[VEC];
                float rs = 0.0f; // the head's rstd (L2 only)
                if constexpr (PF) {
                    rp[s % PD].get(pw[W - 1]);
                    rg[s % PD].get(g);
                    if constexpr (L2) rs = rr[s % PD];
                    fetch(s % PD, s + PD); // the slot is free again
                } else {                   // the kernel before: this token's loads, used at once
                    ld_bf<VEC>(pw[W - 1], pb + t * C);
                    if constexpr (L2) {
                        ld_f<VEC>(g, dqb + t * C);
                        rs = rb[t * H];
                    } else {
                        ld_bf<VEC>(g, dyb + t * C);
                    }
                }
#pragma unroll
                for (int v = 0; v < VEC; v++) {
                    c[v] = 0.0f;
#pragma unroll
                    for (int i = 0; i < W; i++)
                        c[v] += wr[i][v] * pw[i][v];
                }
                if constexpr (L2) {
                    float yh[VEC];
                    float dot = group_sum<LG>(l2_bwd_dot_lane<VEC>(yh, g, c, rs));
#pragma unroll
                    for (int v = 0; v < VEC; v++)
                        g[v] = rs * (g[v] - dot * yh[v]);
                }
#pragma unroll
                for (int v = 0; v < VEC; v++)
                    dc[v] = g[v] * dsilu_f(c[v]);
            } else {
#pragma unroll
                for (int v = 0; v < VEC; v++)
                    dc[v] = 0.0f;
            }
#pragma unroll
            for (int v = 0; v < VEC; v++)
                dcw[W - 1][v] = dc[v];
            if (t < it.t1) { // dw: tokens of this tile only
#pragma unroll
                for (int i = 0; i < W; i++)
#pragma unroll
                    for (int v = 0; v < VEC; v++)
                        acc[i][v] += dc[v] * pw[i][v];
            }
            int tau = t - (W - 1);
            if (tau >= it.t0) { // dp_τ = Σ_i w_i dc_{τ+(W-1)-i} = Σ_i w_i dcw[W-1-i]
                float o[VEC];
#pragma unroll
                for (int v = 0; v < VEC; v++) {
                    float a = 0.0f;
#pragma unroll
                    for (int i = 0; i < W; i++)
                        a += wr[i][v] * dcw[W - 1 - i][v];
                    o[v] = a;
                }
                st_bf<VEC>(dpb + tau * ldo, o);
            }
#pragma unroll
            for (int i = 0; i < W - 1; i++)
#pragma unroll
                for (int v = 0; v < VEC; v++) {
                    pw[i][v] = pw[i + 1][v];
                    dcw[i][v] = dcw[i + 1][v];
                }
        }
    }
    // Block reduction of the dw sums over the CONV_BT tiles, one tap at a time (4 KB of shared).
    // Inactive threads contribute zeros and still reach every barrier.
    // The block's 32·VEC channels are spread over its threads for the final sums.
#pragma unroll
    for (int i = 0; i < W; i++) {
#pragma unroll
        for (int v = 0; v < VEC; v++)
            sh[threadIdx.y][threadIdx.x * VEC + v] = acc[i][v];
        __syncthreads();
        for (int k = threadIdx.y * 32 + threadIdx.x; k < 32 * VEC; k += 32 * CONV_BT) {
            int ch = BX() * 32 * VEC + k;
            if (ch < C) {
                double s = 0.0;
                for (int y = 0; y < CONV_BT; y++)
                    s += (double)sh[y][k];
                part[((int64_t)BY() * C + ch) * W + i] = s;
            }
        }
        __syncthreads();
    }
}

template <int W, int VEC, bool L2, bool PF, int TT = CONV_TT_BWD, int PD = CONV_PD, int MINB = 1,
          int LG = 1>
__global__ void __launch_bounds__(32 * CONV_BT, MINB)
    conv_bwd_k(kda_bf16 *dp, double *part, const kda_bf16 *dy, const kda_bf16 *p, const float *w,
               const float *dq, const float *rstd, int B, int T, int C, int ldo) {
    conv_bwd_body<W, VEC, L2, PF, TT, PD, LG, true>(dp, part, dy, p, w, dq, rstd, B, T, C, ldo, 0,
                                                    0, 0);
}

// Launches one instantiation of a conv kernel for the run-time W (1..CONV_MAX_W).
#define CONV_DISPATCH_W(W_, MACRO)                                                                 \
    switch (W_) {                                                                                  \
    case 1:                                                                                        \
        MACRO(1);                                                                                  \
        break;                                                                                     \
    case 2:                                                                                        \
        MACRO(2);                                                                                  \
        break;                                                                                     \
    case 3:                                                                                        \
        MACRO(3);                                                                                  \
        break;                                                                                     \
    case 4:                                                                                        \
        MACRO(4);                                                                                  \
        break;                                                                                     \
    case 5:                                                                                        \
        MACRO(5);                                                                                  \
        break;                                                                                     \
    case 6:                                                                                        \
        MACRO(6);                                                                                  \
        break;                                                                                     \
    case 7:                                                                                        \
        MACRO(7);                                                                                  \
        break;                                                                                     \
    default:                                                                                       \
        MACRO(8);                                                                                  \
        break;                                                                                     \
    }

// The fused q/k kernels for the run-time head size K (8, 16, .., 128: kda_cuda_conv_l2_fusable):
// MACRO(W_, K) with K a constant, so each instantiation has a constant lane-group size (K / VEC).
#define CONV_DISPATCH_K(K_, W_, MACRO)                                                             \
    switch (K_) {                                                                                  \
    case 8:                                                                                        \
        MACRO(W_, 8);                                                                              \
        break;                                                                                     \
    case 16:                                                                                       \
        MACRO(W_, 16);                                                                             \
        break;                                                                                     \
    case 32:                                                                                       \
        MACRO(W_, 32);                                                                             \
        break;                                                                                     \
    case 64:                                                                                       \
        MACRO(W_, 64);                                                                             \
        break;                                                                                     \
    default:                                                                                       \
        MACRO(W_, 128);                                                                            \
        break;                                                                                     \
    }

// ---- q, k and v of one layer in one launch (kda_cuda_conv_qkv_*; the model's KDA_CONV_QKV=1) ----
// One grid does the three convs of a layer: q and k (the fused conv + SiLU + L2 path) and v (the
// plain conv + SiLU), so the three small grids (256-2048 blocks each over 132 SMs) become one:
// one ramp-up, one tail wave and one launch gap instead of three. Job j owns the grid's blocks
// [start, start + gx·gy); its block start + bx + gx·by is block (bx, by) of the job's own launch
// (the separate launcher's grid, x fastest), and runs that launch's body with that (bx, by): the
// same instantiation of the same arithmetic, so the same bits. The job is block-uniform, so the
// bodies' barriers and group sums are safe. Parts 0, 1 are q, k (L2), part 2 is v.
struct ConvQkvJob {
    kda_bf16 *out;        // y (forward) or dp (backward)
    float *rstd;          // forward, q and k: rstd written
    const float *rstd_in; // backward, q and k: the forward's rstd
    const kda_bf16 *p;
    const float *w;
    const float *dq;    // backward, q and k: gradient w.r.t. y, fp32
    const kda_bf16 *dy; // backward, v: gradient w.r.t. y, bf16
    double *part;       // backward: dw partials [gy, C, W]
    int C, ldo, gx, gy, start;
};
struct ConvQkvArgs {
    ConvQkvJob j[3];
    int B, T;
    float eps;
};

// The job of combined block blk (host twins and kernels: one decode).
__host__ __device__ __forceinline__ int conv_qkv_job(const ConvQkvArgs &a, int blk) {
    return blk >= a.j[2].start ? 2 : blk >= a.j[1].start ? 1 : 0;
}

// Forward: q and k as the v2 fused launch (conv_fwd_k<W, 4, true, true, bf16, CONV2_TT_FWD,
// CONV2_MINB_FWD, K / 4>), v as the v2 plain launch (<W, 4, false, true, bf16, CONV2_TT_FWD,
// CONV2_MINB_FWD>); both ask for CONV2_MINB_FWD blocks per SM, so the register cap is theirs.
template <int W, int LG>
__global__ void __launch_bounds__(32 * CONV_BT, CONV2_MINB_FWD)
    conv_qkv_fwd_k(const ConvQkvArgs a) {
    const int blk = (int)blockIdx.x, jn = conv_qkv_job(a, blk);
    const ConvQkvJob &j = a.j[jn];
    const int loc = blk - j.start, bx = loc % j.gx, by = loc / j.gx;
    if (jn < 2)
        conv_fwd_body<W, 4, true, true, kda_bf16, CONV2_TT_FWD, LG>(j.out, j.rstd, j.p, j.w, a.B,
                                                                    a.T, j.C, a.eps, bx, by);
    else
        conv_fwd_body<W, 4, false, true, kda_bf16, CONV2_TT_FWD, 1>(j.out, NULL, j.p, j.w, a.B, a.T,
                                                                    j.C, 0.0f, bx, by);
}

// Backward: q and k as the v1 fused launch (conv_bwd_k<W, 4, true, false, CONV_TT_BWD, CONV_PD,
// 1, K / 4>: one block row each, gy = the rows), v as the v2 plain launch (<W, 2, false, true,
// CONV2_TT_BWD, CONV2_TT_BWD + W - 1, CONV2_MINB_BWD>: rows y, y + gy, ..., gy <= CONV2_ROWS):
// the defaults of conv_v2_. The register count is the larger part's (the q/k v1 body, ~114 at
// W = 4); CONV_QKV_MINB_BWD = 2 blocks per SM caps it at 128, so q/k keep theirs (their own
// launch: 2 per SM) and v runs at 2 blocks per SM instead of its own launch's 3.
#define CONV_QKV_MINB_BWD 2
template <int W, int LG>
__global__ void __launch_bounds__(32 * CONV_BT, CONV_QKV_MINB_BWD)
    conv_qkv_bwd_k(const ConvQkvArgs a) {
    const int blk = (int)blockIdx.x, jn = conv_qkv_job(a, blk);
    const ConvQkvJob &j = a.j[jn];
    const int loc = blk - j.start, bx = loc % j.gx, by = loc / j.gx;
    if (jn < 2)
        conv_bwd_body<W, 4, true, false, CONV_TT_BWD, CONV_PD, LG>(
            j.out, j.part, NULL, j.p, j.w, j.dq, j.rstd_in, a.B, a.T, j.C, j.ldo, bx, by, j.gy);
    else
        conv_bwd_body<W, 2, false, true, CONV2_TT_BWD, CONV2_TT_BWD + W - 1, 1>(
            j.out, j.part, j.dy, j.p, j.w, NULL, NULL, a.B, a.T, j.C, j.ldo, bx, by, j.gy);
}

// The three weight gradients' column sums in one launch: job j's blocks [start[j], start[j+1])
// are colsum_finish's blocks for dw_j (out[j] += Σ_p part[j][p, :], P[j] partial rows of ncols[j]
// = C·W columns): the same body, the same order.
struct ConvQkvFin {
    float *out[3];
    const double *part[3];
    int64_t P[3], ncols[3];
    int start[3];
};
__global__ void conv_qkv_finish_k(const ConvQkvFin f) {
    // selects, not f.x[jn]: a run-time index into the parameter arrays copies them to the stack
    const int blk = (int)blockIdx.x, jn = blk >= f.start[2] ? 2 : blk >= f.start[1] ? 1 : 0;
#define FIN_PICK(x) (jn == 0 ? f.x[0] : jn == 1 ? f.x[1] : f.x[2])
    colsum_finish_body(FIN_PICK(out), FIN_PICK(part), FIN_PICK(P), FIN_PICK(ncols),
                       (int64_t)(blk - FIN_PICK(start)));
#undef FIN_PICK
}

// The combined kernels are instantiated for W <= CONV_QKV_MAX_W (the model's W = 4 and below;
// larger W run the three separate launches, the same bits) and every fused K.
#define CONV_QKV_MAX_W 4
#define CONV_DISPATCH_W4(W_, MACRO)                                                                \
    switch (W_) {                                                                                  \
    case 1:                                                                                        \
        MACRO(1);                                                                                  \
        break;                                                                                     \
    case 2:                                                                                        \
        MACRO(2);                                                                                  \
        break;                                                                                     \
    case 3:                                                                                        \
        MACRO(3);                                                                                  \
        break;                                                                                     \
    default:                                                                                       \
        MACRO(4);                                                                                  \
        break;                                                                                     \
    }

} // namespace

extern "C" {

// Grid of the conv kernels: 32 channel groups x CONV_BT tiles per block.
// Rows of blocks (grid.y) beyond the hardware's 65535 come back as 0: the launchers refuse them.
static dim3 conv_grid(int64_t B, int64_t T, int64_t C, int vec, int tt) {
    int64_t rows = CEIL_DIV(B * CEIL_DIV(T, (int64_t)tt), (int64_t)CONV_BT);
    return dim3((unsigned)CEIL_DIV(C / vec, (int64_t)32), rows <= 65535 ? (unsigned)rows : 0u);
}

// Whether the kernels' 32-bit index math (ConvItem) holds for these sizes: B·T tokens and T·ld
// elements a row (ld = max(C, ldo)) at most CONV_I32_MAX. The launchers refuse larger calls (a
// 2^31-element sequence; the v1 forward's grid already stops at 4.2M tokens).
static bool conv_i32_ok(int64_t B, int64_t T, int64_t ld) {
    return B * T <= CONV_I32_MAX && T * ld <= CONV_I32_MAX;
}

// KDA_CONV_PREFETCH=1 (read at every launch): the conv kernels with their prefetch (opt-in since
// they measured slower, above; the same arithmetic).
static bool conv_pf_(void) {
    const char *e = getenv("KDA_CONV_PREFETCH");
    return e && !strcmp(e, "1");
}

// The four conv kernels, for the choice of version below.
enum { CONV_K_FWD, CONV_K_BWD, CONV_K_L2_FWD, CONV_K_L2_BWD };

// Whether kernel `which` runs v2 (above; where the shapes and alignment allow it, else v1).
// KDA_CONV_V (read at every launch, so a test or bench can A/B in one process): "1" every kernel
// v1, "2" every kernel v2; unset (or anything else) the faster of the two per kernel as bench_gpu
// measured them on an H200 (2026-12-03, session 5, B16 T2048 W4, docs/perf-log.md): v2 for both
// forwards (v 0.059 -> 0.039 ms, q/k + L2 0.038 -> 0.037) and the plain backward (v 0.097 ->
// 0.076), v1 for the fused q/k + L2 backward (0.070 against v2's 0.081). Session 6 measured that
// one at 0.064 (v1) against 0.060 (v2) after the compile-time lane groups, and the model's conv
// bwd row 2.61 -> 2.51 ms with KDA_CONV_V=2 (one run each, docs/log/gpu-2026-12-03.md §15); it
// stays v1 until the combined q|k|v backward (KDA_CONV_QKV=1, which runs the v1 fused body) has
// been measured against it. KDA_CONV_PREFETCH only selects among the v1 kernels.
static bool conv_v2_(int which) {
    const char *e = getenv("KDA_CONV_V");
    if (e && !strcmp(e, "1")) return false;
    if (e && !strcmp(e, "2")) return true;
    return which != CONV_K_L2_BWD;
}

// Grid of the v2 backward: block rows capped at CONV2_ROWS (each block walks rows y, y + cap, ...),
// a constant, so the dw partials' order depends on the shapes only, not on the GPU.
static dim3 conv2_bwd_grid(int64_t B, int64_t T, int64_t C) {
    int64_t rows = CEIL_DIV(B * CEIL_DIV(T, (int64_t)CONV2_TT_BWD), (int64_t)CONV_BT);
    return dim3((unsigned)CEIL_DIV(C / 2, (int64_t)32),
                (unsigned)(rows < CONV2_ROWS ? rows : CONV2_ROWS));
}

int kda_cuda_conv_silu_fwd(KdaCudaCtx *ctx, kda_bf16 *y, const kda_bf16 *p, const float *w,
                           int64_t B, int64_t T, int64_t C, int64_t W) {
    KDA_CUDA_REQUIRE(ctx, B >= 0 && T >= 0 && C > 0 && W >= 1 && W <= CONV_MAX_W);
    if (B * T == 0) return 0;
    KDA_CUDA_REQUIRE(ctx, conv_i32_ok(B, T, C));
    // 16-byte path when every row of channels splits into whole, aligned 8-element groups.
    if (conv_v2_(CONV_K_FWD) && C % 4 == 0 && aligned_(8, y, p)) {
        dim3 g2 = conv_grid(B, T, C, 4, CONV2_TT_FWD), b2(32, CONV_BT);
        KDA_CUDA_REQUIRE(ctx, g2.y > 0); // B·T up to 4.2M tokens
#define CONV_FWD2(W_)                                                                              \
    conv_fwd_k<W_, 4, false, true, kda_bf16, CONV2_TT_FWD, CONV2_MINB_FWD>                         \
        <<<g2, b2, 0, ctx->stream>>>(y, NULL, p, w, B, T, C, 0.0f)
        CONV_DISPATCH_W(W, CONV_FWD2);
#undef CONV_FWD2
        CUDA_CHECK_LAUNCH(ctx);
        return 0;
    }
    bool v8 = C % 8 == 0 && aligned_(16, y, p), pf = conv_pf_();
    dim3 grid = conv_grid(B, T, C, v8 ? 8 : 1, CONV_TT_F(pf)), block(32, CONV_BT);
    KDA_CUDA_REQUIRE(ctx, grid.y > 0); // B·T up to 4.2M tokens (forward) / 16.7M (backward)
#define CONV_FWD_PF(W_, PF_)                                                                       \
    if (v8)                                                                                        \
        conv_fwd_k<W_, 8, false, PF_>                                                              \
            <<<grid, block, 0, ctx->stream>>>(y, NULL, p, w, B, T, C, 0.0f);                       \
    else                                                                                           \
        conv_fwd_k<W_, 1, false, PF_><<<grid, block, 0, ctx->stream>>>(y, NULL, p, w, B, T, C, 0.0f)
#define CONV_FWD(W_)                                                                               \
    if (pf) {                                                                                      \
        CONV_FWD_PF(W_, true);                                                                     \
    } else {                                                                                       \
        CONV_FWD_PF(W_, false);                                                                    \
    }
    CONV_DISPATCH_W(W, CONV_FWD);
#undef CONV_FWD
#undef CONV_FWD_PF
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

int kda_cuda_conv_silu_bwd(KdaCudaCtx *ctx, kda_bf16 *dp, float *dw, const kda_bf16 *dy,
                           const kda_bf16 *p, const float *w, int64_t B, int64_t T, int64_t C,
                           int64_t W) {
    return kda_cuda_conv_silu_bwd_ld(ctx, dp, C, dw, dy, p, w, B, T, C, W);
}

int kda_cuda_conv_silu_bwd_ld(KdaCudaCtx *ctx, kda_bf16 *dp, int64_t ldo, float *dw,
                              const kda_bf16 *dy, const kda_bf16 *p, const float *w, int64_t B,
                              int64_t T, int64_t C, int64_t W) {
    KDA_CUDA_REQUIRE(ctx, B >= 0 && T >= 0 && C > 0 && W >= 1 && W <= CONV_MAX_W && ldo >= C);
    if (B * T == 0) return 0;
    KDA_CUDA_REQUIRE(ctx, conv_i32_ok(B, T, ldo));
    if (conv_v2_(CONV_K_BWD) && C % 2 == 0 && ldo % 2 == 0 && aligned_(4, dp, dy, p)) {
        dim3 g2 = conv2_bwd_grid(B, T, C), b2(32, CONV_BT);
        int64_t P = g2.y; // dw partials: one per block, [P, C, W] double
        double *part = (double *)kda_cuda_scratch(ctx, (size_t)(P * C * W) * sizeof(double));
        if (!part) return -1;
#define CONV_BWD2(W_)                                                                              \
    conv_bwd_k<W_, 2, false, true, CONV2_TT_BWD, CONV2_TT_BWD + W_ - 1, CONV2_MINB_BWD>            \
        <<<g2, b2, 0, ctx->stream>>>(dp, part, dy, p, w, NULL, NULL, B, T, C, ldo)
        CONV_DISPATCH_W(W, CONV_BWD2);
#undef CONV_BWD2
        CUDA_CHECK_LAUNCH(ctx);
        colsum_finish(ctx->stream, dw, part, P, C * W);
        CUDA_CHECK_LAUNCH(ctx);
        return 0;
    }
    // 8-byte groups of 4 channels: the backward holds 4 W-long windows per channel (weights,
    // p, dc, dw sums), so 8 channels per thread would cost ~2x the registers for W = 4.
    bool v4 = C % 4 == 0 && ldo % 4 == 0 && aligned_(8, dp, dy, p);
    dim3 grid = conv_grid(B, T, C, v4 ? 4 : 1, CONV_TT_BWD), block(32, CONV_BT);
    KDA_CUDA_REQUIRE(ctx, grid.y > 0); // B·T up to 4.2M tokens (forward) / 16.7M (backward)
    int64_t P = grid.y;                // dw partials: one per block row, [P, C, W] double
    double *part = (double *)kda_cuda_scratch(ctx, (size_t)(P * C * W) * sizeof(double));
    if (!part) return -1;
    bool pf = conv_pf_();
#define CONV_BWD_PF(W_, PF_)                                                                       \
    if (v4)                                                                                        \
        conv_bwd_k<W_, 4, false, PF_>                                                              \
            <<<grid, block, 0, ctx->stream>>>(dp, part, dy, p, w, NULL, NULL, B, T, C, ldo);       \
    else                                                                                           \
        conv_bwd_k<W_, 1, false, PF_>                                                              \
            <<<grid, block, 0, ctx->stream>>>(dp, part, dy, p, w, NULL, NULL, B, T, C, ldo)
#define CONV_BWD(W_)                                                                               \
    if (pf) {                                                                                      \
        CONV_BWD_PF(W_, true);                                                                     \
    } else {                                                                                       \
        CONV_BWD_PF(W_, false);                                                                    \
    }
    CONV_DISPATCH_W(W, CONV_BWD);
#undef CONV_BWD
#undef CONV_BWD_PF
    CUDA_CHECK_LAUNCH(ctx);
    colsum_finish(ctx->stream, dw, part, P, C * W);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

int kda_cuda_conv_l2_fusable(int64_t K) {
    return K == 8 || K == 16 || K == 32 || K == 64 || K == 128; // K/8 and K/4 lanes: 1..32
}

int kda_cuda_conv_silu_l2_fwd(KdaCudaCtx *ctx, kda_bf16 *y, float *rstd, const kda_bf16 *p,
                              const float *w, int64_t B, int64_t T, int64_t C, int64_t W, int64_t K,
                              float eps) {
    KDA_CUDA_REQUIRE(ctx, B >= 0 && T >= 0 && C > 0 && W >= 1 && W <= CONV_MAX_W);
    KDA_CUDA_REQUIRE(ctx, kda_cuda_conv_l2_fusable(K) && C % K == 0);
    KDA_CUDA_REQUIRE(ctx, aligned_(16, y, p)); // the 16-byte path: a head is K / 8 lanes
    if (B * T == 0) return 0;
    KDA_CUDA_REQUIRE(ctx, conv_i32_ok(B, T, C));
    if (conv_v2_(CONV_K_L2_FWD)) { // K / 4 lanes a head (K <= 128: at most a warp)
        dim3 g2 = conv_grid(B, T, C, 4, CONV2_TT_FWD), b2(32, CONV_BT);
        KDA_CUDA_REQUIRE(ctx, g2.y > 0);
#define CONV_L2_FWD2(W_, K_)                                                                       \
    conv_fwd_k<W_, 4, true, true, kda_bf16, CONV2_TT_FWD, CONV2_MINB_FWD, K_ / 4>                  \
        <<<g2, b2, 0, ctx->stream>>>(y, rstd, p, w, B, T, C, eps)
#define CONV_L2_FWD2_K(W_) CONV_DISPATCH_K(K, W_, CONV_L2_FWD2)
        CONV_DISPATCH_W(W, CONV_L2_FWD2_K);
#undef CONV_L2_FWD2_K
#undef CONV_L2_FWD2
        CUDA_CHECK_LAUNCH(ctx);
        return 0;
    }
    bool pf = conv_pf_();
    dim3 grid = conv_grid(B, T, C, 8, CONV_TT_F(pf)), block(32, CONV_BT);
    KDA_CUDA_REQUIRE(ctx, grid.y > 0);
#define CONV_L2_FWD(W_, K_)                                                                        \
    if (pf)                                                                                        \
        conv_fwd_k<W_, 8, true, true, kda_bf16, 0, 1, K_ / 8>                                      \
            <<<grid, block, 0, ctx->stream>>>(y, rstd, p, w, B, T, C, eps);                        \
    else                                                                                           \
        conv_fwd_k<W_, 8, true, false, kda_bf16, 0, 1, K_ / 8>                                     \
            <<<grid, block, 0, ctx->stream>>>(y, rstd, p, w, B, T, C, eps)
#define CONV_L2_FWD_K(W_) CONV_DISPATCH_K(K, W_, CONV_L2_FWD)
    CONV_DISPATCH_W(W, CONV_L2_FWD_K);
#undef CONV_L2_FWD_K
#undef CONV_L2_FWD
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

int kda_cuda_conv_silu_l2_bwd(KdaCudaCtx *ctx, kda_bf16 *dp, float *dw, const float *dy,
                              const kda_bf16 *p, const float *w, const float *rstd, int64_t B,
                              int64_t T, int64_t C, int64_t W, int64_t K) {
    return kda_cuda_conv_silu_l2_bwd_ld(ctx, dp, C, dw, dy, p, w, rstd, B, T, C, W, K);
}

int kda_cuda_conv_silu_l2_bwd_ld(KdaCudaCtx *ctx, kda_bf16 *dp, int64_t ldo, float *dw,
                                 const float *dy, const kda_bf16 *p, const float *w,
                                 const float *rstd, int64_t B, int64_t T, int64_t C, int64_t W,
                                 int64_t K) {
    KDA_CUDA_REQUIRE(ctx, B >= 0 && T >= 0 && C > 0 && W >= 1 && W <= CONV_MAX_W);
    KDA_CUDA_REQUIRE(ctx, kda_cuda_conv_l2_fusable(K) && C % K == 0 && ldo >= C && ldo % 4 == 0);
    KDA_CUDA_REQUIRE(ctx, aligned_(16, dy) && aligned_(8, dp, p)); // a head is K / 4 lanes
    if (B * T == 0) return 0;
    KDA_CUDA_REQUIRE(ctx, conv_i32_ok(B, T, ldo));
    if (conv_v2_(CONV_K_L2_BWD) && K <= 64) { // K / 2 lanes a head: at most a warp
        dim3 g2 = conv2_bwd_grid(B, T, C), b2(32, CONV_BT);
        int64_t P = g2.y; // dw partials: one per block, [P, C, W] double
        double *part = (double *)kda_cuda_scratch(ctx, (size_t)(P * C * W) * sizeof(double));
        if (!part) return -1;
            // K_ = 128 never gets here; its case names K = 64's instantiation (no extra kernel)
#define CONV_L2_BWD2(W_, K_)                                                                       \
    conv_bwd_k<W_, 2, true, true, CONV2_TT_BWD, CONV2_TT_BWD + W_ - 1, CONV2_MINB_L2,              \
               (K_ <= 64 ? K_ : 64) / 2>                                                           \
        <<<g2, b2, 0, ctx->stream>>>(dp, part, NULL, p, w, dy, rstd, B, T, C, ldo)
#define CONV_L2_BWD2_K(W_) CONV_DISPATCH_K(K, W_, CONV_L2_BWD2)
        CONV_DISPATCH_W(W, CONV_L2_BWD2_K);
#undef CONV_L2_BWD2_K
#undef CONV_L2_BWD2
        CUDA_CHECK_LAUNCH(ctx);
        colsum_finish(ctx->stream, dw, part, P, C * W);
        CUDA_CHECK_LAUNCH(ctx);
        return 0;
    }
    dim3 grid = conv_grid(B, T, C, 4, CONV_TT_BWD), block(32, CONV_BT);
    KDA_CUDA_REQUIRE(ctx, grid.y > 0);
    int64_t P = grid.y; // dw partials: one per block row, [P, C, W] double
    double *part = (double *)kda_cuda_scratch(ctx, (size_t)(P * C * W) * sizeof(double));
    if (!part) return -1;
    bool pf = conv_pf_();
#define CONV_L2_BWD(W_, K_)                                                                        \
    if (pf)                                                                                        \
        conv_bwd_k<W_, 4, true, true, CONV_TT_BWD, CONV_PD, 1, K_ / 4>                             \
            <<<grid, block, 0, ctx->stream>>>(dp, part, NULL, p, w, dy, rstd, B, T, C, ldo);       \
    else                                                                                           \
        conv_bwd_k<W_, 4, true, false, CONV_TT_BWD, CONV_PD, 1, K_ / 4>                            \
            <<<grid, block, 0, ctx->stream>>>(dp, part, NULL, p, w, dy, rstd, B, T, C, ldo)
#define CONV_L2_BWD_K(W_) CONV_DISPATCH_K(K, W_, CONV_L2_BWD)
    CONV_DISPATCH_W(W, CONV_L2_BWD_K);
#undef CONV_L2_BWD_K
#undef CONV_L2_BWD
    CUDA_CHECK_LAUNCH(ctx);
    colsum_finish(ctx->stream, dw, part, P, C * W);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

int kda_cuda_conv_silu_fwd_f32(KdaCudaCtx *ctx, float *y, const float *p, const float *w, int64_t B,
                               int64_t T, int64_t C, int64_t W) {
    KDA_CUDA_REQUIRE(ctx, B >= 0 && T >= 0 && C > 0 && W >= 1 && W <= CONV_MAX_W);
    if (B * T == 0) return 0;
    KDA_CUDA_REQUIRE(ctx, conv_i32_ok(B, T, C));
    bool v4 = C % 4 == 0 && aligned_(16, y, p); // float4 groups of 4 channels
    dim3 grid = conv_grid(B, T, C, v4 ? 4 : 1, CONV_TT_FWD), block(32, CONV_BT);
    KDA_CUDA_REQUIRE(ctx, grid.y > 0);
#define CONV_FWD(W_)                                                                               \
    if (v4)                                                                                        \
        conv_fwd_k<W_, 4, false, true>                                                             \
            <<<grid, block, 0, ctx->stream>>>(y, NULL, p, w, B, T, C, 0.0f);                       \
    else                                                                                           \
        conv_fwd_k<W_, 1, false, true>                                                             \
            <<<grid, block, 0, ctx->stream>>>(y, NULL, p, w, B, T, C, 0.0f)
    CONV_DISPATCH_W(W, CONV_FWD);
#undef CONV_FWD
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

// ---- q|k|v in one launch: plans, launchers ----------------------------------------------------
// The job table of the combined launch (conv_qkv_fwd_k / conv_qkv_bwd_k). dev: the launchers'
// plan (false where one launch does not apply: the versions the environment picks, alignment,
// W > CONV_QKV_MAX_W, grid limits); else the host twins' (geometry only, any W <= CONV_MAX_W).
// Each job's grid is its separate launcher's: forward conv_grid(.., 4, CONV2_TT_FWD) for all
// three; backward conv_grid(.., 4, CONV_TT_BWD) for q, k and conv2_bwd_grid for v.
static bool conv_qkv_fwd_plan(ConvQkvArgs *a, const KdaConvQkvFwd *pt, int64_t B, int64_t T,
                              int64_t HK, int64_t HVV, int64_t W, int64_t K, float eps, bool dev) {
    if (!pt || B <= 0 || T <= 0 || HK <= 0 || HVV <= 0 || W < 1 || W > CONV_MAX_W) return false;
    if (!kda_cuda_conv_l2_fusable(K) || HK % K != 0 || HVV % 4 != 0) return false;
    if (!conv_i32_ok(B, T, HK) || !conv_i32_ok(B, T, HVV)) return false;
    if (dev) {
        if (W > CONV_QKV_MAX_W || !conv_v2_(CONV_K_L2_FWD) || !conv_v2_(CONV_K_FWD)) return false;
        if (!aligned_(16, pt[0].y, pt[0].p, pt[1].y, pt[1].p) || !aligned_(8, pt[2].y, pt[2].p))
            return false;
    }
    int start = 0;
    for (int i = 0; i < 3; i++) {
        int64_t C = i < 2 ? HK : HVV;
        dim3 g = conv_grid(B, T, C, 4, CONV2_TT_FWD);
        if (g.y == 0 || (int64_t)start + (int64_t)g.x * g.y > INT32_MAX) return false;
        ConvQkvJob j = {};
        j.out = pt[i].y, j.rstd = i < 2 ? pt[i].rstd : NULL, j.p = pt[i].p, j.w = pt[i].w;
        j.C = (int)C, j.ldo = (int)C, j.gx = (int)g.x, j.gy = (int)g.y, j.start = start;
        a->j[i] = j;
        start += j.gx * j.gy;
    }
    a->B = (int)B, a->T = (int)T, a->eps = eps;
    return true;
}

static bool conv_qkv_bwd_plan(ConvQkvArgs *a, const KdaConvQkvBwd *pt, int64_t B, int64_t T,
                              int64_t HK, int64_t HVV, int64_t W, int64_t K, bool dev) {
    if (!pt || B <= 0 || T <= 0 || HK <= 0 || HVV <= 0 || W < 1 || W > CONV_MAX_W) return false;
    if (!kda_cuda_conv_l2_fusable(K) || HK % K != 0 || HVV % 2 != 0) return false;
    for (int i = 0; i < 3; i++) {
        int64_t C = i < 2 ? HK : HVV, ldo = pt[i].ldo;
        if (ldo < C || ldo % (i < 2 ? 4 : 2) != 0 || !conv_i32_ok(B, T, ldo)) return false;
    }
    if (dev) {
        // q, k: the v1 fused backward (conv_v2_ picks v2 only for K <= 64), without prefetch;
        // v: the v2 plain backward
        if (W > CONV_QKV_MAX_W || (conv_v2_(CONV_K_L2_BWD) && K <= 64) || conv_pf_() ||
            !conv_v2_(CONV_K_BWD))
            return false;
        for (int i = 0; i < 2; i++)
            if (!aligned_(16, pt[i].dq) || !aligned_(8, pt[i].dp, pt[i].p)) return false;
        if (!aligned_(4, pt[2].dp, pt[2].dy, pt[2].p)) return false;
    }
    int start = 0;
    for (int i = 0; i < 3; i++) {
        int64_t C = i < 2 ? HK : HVV;
        dim3 g = i < 2 ? conv_grid(B, T, C, 4, CONV_TT_BWD) : conv2_bwd_grid(B, T, C);
        if (g.y == 0 || (int64_t)start + (int64_t)g.x * g.y > INT32_MAX) return false;
        ConvQkvJob j = {};
        j.out = pt[i].dp, j.p = pt[i].p, j.w = pt[i].w;
        j.rstd_in = i < 2 ? pt[i].rstd : NULL, j.dq = i < 2 ? pt[i].dq : NULL;
        j.dy = i < 2 ? NULL : pt[i].dy;
        j.C = (int)C, j.ldo = (int)pt[i].ldo, j.gx = (int)g.x, j.gy = (int)g.y, j.start = start;
        a->j[i] = j;
        start += j.gx * j.gy;
    }
    a->B = (int)B, a->T = (int)T, a->eps = 0.0f;
    return true;
}

// Blocks of the combined grid (the last job's end).
static int conv_qkv_blocks(const ConvQkvArgs &a) {
    return a.j[2].start + a.j[2].gx * a.j[2].gy;
}

int kda_cuda_conv_qkv_fwd_one(const KdaConvQkvFwd part[3], int64_t B, int64_t T, int64_t HK,
                              int64_t HVV, int64_t W, int64_t K) {
    ConvQkvArgs a;
    return conv_qkv_fwd_plan(&a, part, B, T, HK, HVV, W, K, 0.0f, true);
}

int kda_cuda_conv_qkv_bwd_one(const KdaConvQkvBwd part[3], int64_t B, int64_t T, int64_t HK,
                              int64_t HVV, int64_t W, int64_t K) {
    ConvQkvArgs a;
    return conv_qkv_bwd_plan(&a, part, B, T, HK, HVV, W, K, true);
}

int kda_cuda_conv_qkv_fwd(KdaCudaCtx *ctx, const KdaConvQkvFwd part[3], int64_t B, int64_t T,
                          int64_t HK, int64_t HVV, int64_t W, int64_t K, float eps) {
    KDA_CUDA_REQUIRE(ctx, part != NULL);
    ConvQkvArgs a;
    if (!conv_qkv_fwd_plan(&a, part, B, T, HK, HVV, W, K, eps, true)) { // the separate launches
        for (int i = 0; i < 2; i++)
            if (kda_cuda_conv_silu_l2_fwd(ctx, part[i].y, part[i].rstd, part[i].p, part[i].w, B, T,
                                          HK, W, K, eps))
                return -1;
        return kda_cuda_conv_silu_fwd(ctx, part[2].y, part[2].p, part[2].w, B, T, HVV, W);
    }
    unsigned nb = (unsigned)conv_qkv_blocks(a);
#define CONV_QKV_FWD(W_, K_)                                                                       \
    conv_qkv_fwd_k<W_, K_ / 4><<<nb, dim3(32, CONV_BT), 0, ctx->stream>>>(a)
#define CONV_QKV_FWD_K(W_) CONV_DISPATCH_K(K, W_, CONV_QKV_FWD)
    CONV_DISPATCH_W4(W, CONV_QKV_FWD_K);
#undef CONV_QKV_FWD_K
#undef CONV_QKV_FWD
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

int kda_cuda_conv_qkv_bwd(KdaCudaCtx *ctx, const KdaConvQkvBwd part[3], int64_t B, int64_t T,
                          int64_t HK, int64_t HVV, int64_t W, int64_t K) {
    KDA_CUDA_REQUIRE(ctx, part != NULL);
    ConvQkvArgs a;
    if (!conv_qkv_bwd_plan(&a, part, B, T, HK, HVV, W, K, true)) { // the separate launches
        for (int i = 0; i < 2; i++) {
            const KdaConvQkvBwd *q = &part[i];
            if (kda_cuda_conv_silu_l2_bwd_ld(ctx, q->dp, q->ldo, q->dw, q->dq, q->p, q->w, q->rstd,
                                             B, T, HK, W, K))
                return -1;
        }
        const KdaConvQkvBwd *v = &part[2];
        return kda_cuda_conv_silu_bwd_ld(ctx, v->dp, v->ldo, v->dw, v->dy, v->p, v->w, B, T, HVV,
                                         W);
    }
    // dw partials: job i's [gy_i, C_i, W] double, back to back in the scratch buffer
    int64_t np = 0;
    for (int i = 0; i < 3; i++)
        np += (int64_t)a.j[i].gy * a.j[i].C * W;
    double *ws = (double *)kda_cuda_scratch(ctx, (size_t)np * sizeof(double));
    if (!ws) return -1;
    ConvQkvFin f;
    int64_t off = 0;
    int fstart = 0;
    for (int i = 0; i < 3; i++) {
        a.j[i].part = ws + off;
        f.out[i] = part[i].dw, f.part[i] = ws + off, f.P[i] = a.j[i].gy;
        f.ncols[i] = (int64_t)a.j[i].C * W, f.start[i] = fstart;
        fstart += (int)CEIL_DIV(f.ncols[i], (int64_t)32);
        off += (int64_t)a.j[i].gy * a.j[i].C * W;
    }
    unsigned nb = (unsigned)conv_qkv_blocks(a);
#define CONV_QKV_BWD(W_, K_)                                                                       \
    conv_qkv_bwd_k<W_, K_ / 4><<<nb, dim3(32, CONV_BT), 0, ctx->stream>>>(a)
#define CONV_QKV_BWD_K(W_) CONV_DISPATCH_K(K, W_, CONV_QKV_BWD)
    CONV_DISPATCH_W4(W, CONV_QKV_BWD_K);
#undef CONV_QKV_BWD_K
#undef CONV_QKV_BWD
    CUDA_CHECK_LAUNCH(ctx);
    conv_qkv_finish_k<<<(unsigned)fstart, dim3(32, FIN_SEG), 0, ctx->stream>>>(f);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

// ---- host twins of the fused kernels (tests: test_fuse_host.c) ---------------------------------
// Same per-lane arithmetic (the __host__ __device__ pieces above) and the same group-sum tree;
// the loops run every lane of every row one after another. The weight-gradient sums are added in
// double per column (the device adds fixed tiles in fp32, then double: a different order).

void kda_cuda_conv_silu_l2_fwd_host(kda_bf16 *y, float *rstd, const kda_bf16 *p, const float *w,
                                    int64_t B, int64_t T, int64_t C, int64_t W, int64_t K,
                                    float eps) {
    int lg = (int)(K / 8);
    int64_t H = C / K;
    float out[32][8] = {{0}}, part[32] = {0}; // zeroed: gcc 13 maybe-uninitialized
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < H; h++) {
                for (int s = 0; s < lg; s++) {
                    for (int v = 0; v < 8; v++) {
                        int64_t ch = h * K + 8 * s + v;
                        float acc = 0.0f;
                        for (int64_t i = 0; i < W; i++) {
                            int64_t tau = t - (W - 1) + i;
                            acc +=
                                w[ch * W + i] * (tau >= 0 ? bf2f(p[(b * T + tau) * C + ch]) : 0.0f);
                        }
                        out[s][v] = silu_f(acc);
                    }
                    part[s] = sumsq_lane<8>(out[s]);
                }
                float rs = l2_rs(group_sum_host(part, lg), eps);
                for (int s = 0; s < lg; s++)
                    for (int v = 0; v < 8; v++)
                        y[(b * T + t) * C + h * K + 8 * s + v] = f2bf(out[s][v] * rs);
                rstd[(b * T + t) * H + h] = rs;
            }
}

void kda_cuda_conv_silu_l2_bwd_host(kda_bf16 *dp, float *dw, const float *dy, const kda_bf16 *p,
                                    const float *w, const float *rstd, int64_t B, int64_t T,
                                    int64_t C, int64_t W, int64_t K) {
    int lg = (int)(K / 4);
    int64_t H = C / K, n = B * T * C;
    float *dc = (float *)kda_malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    double *dws = (double *)kda_calloc((size_t)(C * W), sizeof(double));
    auto pv = [&](int64_t b, int64_t tau, int64_t ch) {
        return tau >= 0 && tau < T ? bf2f(p[(b * T + tau) * C + ch]) : 0.0f;
    };
    float c[32][4] = {{0}}, g[32][4] = {{0}}, yh[32][4] = {{0}}, part[32] = {0}; // as above
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < H; h++) {
                int64_t row = (b * T + t) * C;
                float rs = rstd[(b * T + t) * H + h];
                for (int s = 0; s < lg; s++) {
                    for (int v = 0; v < 4; v++) {
                        int64_t ch = h * K + 4 * s + v;
                        c[s][v] = 0.0f;
                        for (int64_t i = 0; i < W; i++)
                            c[s][v] += w[ch * W + i] * pv(b, t - (W - 1) + i, ch);
                        g[s][v] = dy[row + ch];
                    }
                    part[s] = l2_bwd_dot_lane<4>(yh[s], g[s], c[s], rs);
                }
                float dot = group_sum_host(part, lg);
                for (int s = 0; s < lg; s++)
                    for (int v = 0; v < 4; v++)
                        dc[row + h * K + 4 * s + v] =
                            rs * (g[s][v] - dot * yh[s][v]) * dsilu_f(c[s][v]);
            }
    for (int64_t b = 0; b < B; b++)
        for (int64_t tau = 0; tau < T; tau++)
            for (int64_t ch = 0; ch < C; ch++) {
                float a = 0.0f; // dp_τ = Σ_i w_i dc_{τ+(W-1)-i}, i increasing (as the device)
                for (int64_t i = 0; i < W; i++) {
                    int64_t t = tau + (W - 1) - i;
                    a += w[ch * W + i] * (t < T ? dc[(b * T + t) * C + ch] : 0.0f);
                }
                dp[(b * T + tau) * C + ch] = f2bf(a);
                for (int64_t i = 0; i < W; i++) // dw_i += dc_τ p_{τ-(W-1)+i}
                    dws[ch * W + i] +=
                        (double)(dc[(b * T + tau) * C + ch] * pv(b, tau - (W - 1) + i, ch));
            }
    for (int64_t e = 0; e < C * W; e++)
        dw[e] += (float)dws[e];
    free(dc);
    free(dws);
}

// ---- the q|k|v launchers' host twins (tests: test_fuse_host.c) ----------------------------------
// Each emulates one block (bx, by) of a conv launch: its CONV_BT warps' tiles, their lanes in
// order, a head's lg lanes together (the L2 group sum: group_sum_host, the butterfly's tree).

// Forward block: tiles of tt tokens, vec channels a lane (vec = 4: the v2 kernels), L2 heads of
// lg lanes (l2 false: one lane at a time).
static void conv_fwd_block_host(const ConvQkvJob &j, int B, int T, int W, float eps, bool l2,
                                int vec, int tt, int lg, int bx, int by) {
    const int C = j.C, ncg = C / vec, ntile = (T + tt - 1) / tt, K = l2 ? lg * vec : 1, H = C / K;
    float out[32][4] = {{0}}, part[32] = {0}; // zeroed: gcc 13 maybe-uninitialized
    for (int ty = 0; ty < CONV_BT; ty++) {
        int q = by * CONV_BT + ty, b = q / ntile;
        if (b >= B) continue;
        int t0 = (q - b * ntile) * tt, t1 = t0 + tt < T ? t0 + tt : T;
        const int64_t row0 = (int64_t)b * T;
        for (int t = t0; t < t1; t++)
            for (int g0 = 0; g0 < 32 && bx * 32 + g0 < ncg; g0 += lg) { // a head's lanes
                for (int s = 0; s < lg; s++) {
                    int ch0 = (bx * 32 + g0 + s) * vec;
                    for (int v = 0; v < vec; v++) {
                        float acc = 0.0f;
                        for (int i = 0; i < W; i++) {
                            int tau = t - (W - 1) + i;
                            acc += j.w[(ch0 + v) * W + i] *
                                   (tau >= 0 ? bf2f(j.p[(row0 + tau) * C + ch0 + v]) : 0.0f);
                        }
                        out[s][v] = silu_f(acc);
                    }
                    if (l2) part[s] = sumsq_lane<4>(out[s]);
                }
                float rs = l2 ? l2_rs(group_sum_host(part, lg), eps) : 1.0f;
                for (int s = 0; s < lg; s++) {
                    int ch0 = (bx * 32 + g0 + s) * vec;
                    for (int v = 0; v < vec; v++)
                        j.out[(row0 + t) * C + ch0 + v] = f2bf(l2 ? out[s][v] * rs : out[s][v]);
                }
                if (l2) j.rstd[(row0 + t) * H + (bx * 32 + g0) * vec / K] = rs;
            }
    }
}

// Backward block: block rows by, by + gy, ... (gy = j.gy), tiles of tt tokens, vec channels a
// lane, L2 heads of lg lanes; dp rows at stride j.ldo; the block's dw partial row by of j.part.
static void conv_bwd_block_host(const ConvQkvJob &j, int B, int T, int W, bool l2, int vec, int tt,
                                int lg, int bx, int by) {
    const int C = j.C, ncg = C / vec, ntile = (T + tt - 1) / tt, K = l2 ? lg * vec : 1, H = C / K;
    const int nrows = (B * ntile + CONV_BT - 1) / CONV_BT, NS = tt + W - 1;
    // per thread (ty, lane) fp32 dw sums, as the kernel's acc registers
    float(*acc)[32][CONV_MAX_W][4] = (float(*)[32][CONV_MAX_W][4])kda_calloc(CONV_BT, sizeof *acc);
    float pw[32][CONV_MAX_W][4], dcw[32][CONV_MAX_W][4];
    float c[32][4] = {{0}}, g[32][4] = {{0}}, yh[32][4] = {{0}}, dc[32][4] = {{0}}, part[32] = {0};
    for (int row = by; row < nrows; row += j.gy)
        for (int ty = 0; ty < CONV_BT; ty++) {
            int q = row * CONV_BT + ty, b = q / ntile;
            if (b >= B) continue;
            int t0 = (q - b * ntile) * tt, t1 = t0 + tt < T ? t0 + tt : T;
            const int64_t row0 = (int64_t)b * T;
            for (int g0 = 0; g0 < 32 && bx * 32 + g0 < ncg; g0 += lg) { // a head's lanes
                auto ch0 = [&](int s) { return (bx * 32 + g0 + s) * vec; };
                for (int s = 0; s < lg; s++)
                    for (int i = 0; i < W; i++)
                        for (int v = 0; v < vec; v++) {
                            int tau = t0 - (W - 1) + i;
                            pw[s][i][v] = i < W - 1 && tau >= 0
                                              ? bf2f(j.p[(row0 + tau) * C + ch0(s) + v])
                                              : 0.0f;
                            dcw[s][i][v] = 0.0f;
                        }
                for (int st = 0; st < NS; st++) {
                    int t = t0 + st;
                    if (t - (W - 1) >= t1) break;
                    if (t < T) {
                        float rs = l2 ? j.rstd_in[(row0 + t) * H + ch0(0) / K] : 0.0f;
                        for (int s = 0; s < lg; s++) {
                            for (int v = 0; v < vec; v++) {
                                int64_t e = (row0 + t) * C + ch0(s) + v;
                                pw[s][W - 1][v] = bf2f(j.p[e]);
                                g[s][v] = l2 ? j.dq[e] : bf2f(j.dy[e]);
                                c[s][v] = 0.0f;
                                for (int i = 0; i < W; i++)
                                    c[s][v] += j.w[(ch0(s) + v) * W + i] * pw[s][i][v];
                            }
                            if (l2) part[s] = l2_bwd_dot_lane<4>(yh[s], g[s], c[s], rs);
                        }
                        float dot = l2 ? group_sum_host(part, lg) : 0.0f;
                        for (int s = 0; s < lg; s++)
                            for (int v = 0; v < vec; v++) {
                                if (l2) g[s][v] = rs * (g[s][v] - dot * yh[s][v]);
                                dc[s][v] = g[s][v] * dsilu_f(c[s][v]);
                            }
                    } else {
                        for (int s = 0; s < lg; s++)
                            for (int v = 0; v < vec; v++)
                                dc[s][v] = 0.0f;
                    }
                    int tau = t - (W - 1);
                    for (int s = 0; s < lg; s++) {
                        for (int v = 0; v < vec; v++)
                            dcw[s][W - 1][v] = dc[s][v];
                        if (t < t1)
                            for (int i = 0; i < W; i++)
                                for (int v = 0; v < vec; v++)
                                    acc[ty][g0 + s][i][v] += dc[s][v] * pw[s][i][v];
                        if (tau >= t0)
                            for (int v = 0; v < vec; v++) {
                                float a = 0.0f;
                                for (int i = 0; i < W; i++)
                                    a += j.w[(ch0(s) + v) * W + i] * dcw[s][W - 1 - i][v];
                                j.out[(row0 + tau) * j.ldo + ch0(s) + v] = f2bf(a);
                            }
                        for (int i = 0; i < W - 1; i++)
                            for (int v = 0; v < vec; v++) {
                                pw[s][i][v] = pw[s][i + 1][v];
                                dcw[s][i][v] = dcw[s][i + 1][v];
                            }
                    }
                }
            }
        }
    // the block's sums over its CONV_BT tiles in double, in increasing ty
    for (int i = 0; i < W; i++)
        for (int k = 0; k < 32 * vec; k++) {
            int ch = bx * 32 * vec + k;
            if (ch >= C) continue;
            double s = 0.0;
            for (int y = 0; y < CONV_BT; y++)
                s += (double)acc[y][k / vec][i][k % vec];
            j.part[((int64_t)by * C + ch) * W + i] = s;
        }
    free(acc);
}

// colsum_finish's order on the host: per column FIN_SEG strided sums in increasing p, then those
// in increasing segment, in double; out += the float of it.
static void colsum_finish_host(float *out, const double *part, int64_t P, int64_t ncols) {
    for (int64_t c = 0; c < ncols; c++) {
        double t = 0.0;
        for (int k = 0; k < FIN_SEG; k++) {
            double s = 0.0;
            for (int64_t p = k; p < P; p += FIN_SEG)
                s += part[p * ncols + c];
            t += s;
        }
        out[c] += (float)t;
    }
}

void kda_cuda_conv_qkv_fwd_host(const KdaConvQkvFwd part[3], int64_t B, int64_t T, int64_t HK,
                                int64_t HVV, int64_t W, int64_t K, float eps, int one) {
    ConvQkvArgs a;
    if (!conv_qkv_fwd_plan(&a, part, B, T, HK, HVV, W, K, eps, false)) return; // B·T = 0
    auto run = [&](int jn, int loc) { // q, k: v2 fused (K / 4 lanes a head); v: v2 plain
        const ConvQkvJob &j = a.j[jn];
        conv_fwd_block_host(j, a.B, a.T, (int)W, eps, jn < 2, 4, CONV2_TT_FWD,
                            jn < 2 ? (int)K / 4 : 1, loc % j.gx, loc / j.gx);
    };
    if (one) {
        for (int blk = 0; blk < conv_qkv_blocks(a); blk++) {
            int jn = conv_qkv_job(a, blk);
            run(jn, blk - a.j[jn].start);
        }
    } else {
        for (int jn = 0; jn < 3; jn++)
            for (int loc = 0; loc < a.j[jn].gx * a.j[jn].gy; loc++)
                run(jn, loc);
    }
}

void kda_cuda_conv_qkv_bwd_host(const KdaConvQkvBwd part[3], int64_t B, int64_t T, int64_t HK,
                                int64_t HVV, int64_t W, int64_t K, int one) {
    ConvQkvArgs a;
    if (!conv_qkv_bwd_plan(&a, part, B, T, HK, HVV, W, K, false)) return; // B·T = 0
    for (int i = 0; i < 3; i++)
        a.j[i].part =
            (double *)kda_calloc((size_t)a.j[i].gy * (size_t)a.j[i].C * (size_t)W, sizeof(double));
    auto run = [&](int jn, int loc) { // q, k: v1 fused (K / 4 lanes a head, tiles of 32); v: v2
        const ConvQkvJob &j = a.j[jn];
        if (jn < 2)
            conv_bwd_block_host(j, a.B, a.T, (int)W, true, 4, CONV_TT_BWD, (int)K / 4, loc % j.gx,
                                loc / j.gx);
        else
            conv_bwd_block_host(j, a.B, a.T, (int)W, false, 2, CONV2_TT_BWD, 1, loc % j.gx,
                                loc / j.gx);
    };
    if (one) {
        for (int blk = 0; blk < conv_qkv_blocks(a); blk++) {
            int jn = conv_qkv_job(a, blk);
            run(jn, blk - a.j[jn].start);
        }
    } else {
        for (int jn = 0; jn < 3; jn++)
            for (int loc = 0; loc < a.j[jn].gx * a.j[jn].gy; loc++)
                run(jn, loc);
    }
    for (int i = 0; i < 3; i++) {
        colsum_finish_host(part[i].dw, a.j[i].part, a.j[i].gy, (int64_t)a.j[i].C * W);
        free(a.j[i].part);
    }
}

} // extern "C"
