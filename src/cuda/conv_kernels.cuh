// conv_kernels.cuh - the causal depthwise conv + SiLU kernels (plain, fused with the per-head L2
// norm of q and k, and a layer's q, k and v in one grid) and the launch helpers the conv launcher
// files share (conv_cuda.cu, conv_l2_cuda.cu, conv_l2_bwd_cuda.cu, conv_qkv_cuda.cu): one set of
// templates, instantiated by the launchers of each file, so nvcc compiles the ~400 instantiations
// in four processes instead of one (a cold GPU build spent most of its 354 s on one file).
// Everything here is internal (an anonymous namespace): include it from those .cu files only.
#ifndef KDA_CUDA_CONV_KERNELS_CUH
#define KDA_CUDA_CONV_KERNELS_CUH

#include "cuda/conv_cuda.h"

#include <stdlib.h> // getenv, free

#include <type_traits> // std::conditional

#include "cuda/cuda_internal.h" // defines: bf2f, f2bf, silu_f, dsilu_f, CEIL_DIV, KDA_CUDA_REQUIRE
#include "cuda/fast_math.cuh"   // defines: silu_x, dsilu_x, kda_fast_exp_ (KDA_FAST_EXP)
#include "cuda/ops_common.cuh"  // defines: colsum_finish, unpack2, ld_v, st_v, aligned_, group_sum

namespace {

// ---- the L2 norm pieces shared with the host twins (group sums: ops_common.cuh) -------------
// 1 / sqrt(|x|² + eps), eps inside the root, in double (as l2norm_fwd_k).
__host__ __device__ __forceinline__ float l2_rs(float ss, float eps) {
    return (float)(1.0 / sqrt((double)ss + (double)eps));
}
// L2 backward, one lane's share: yh = SiLU(c)·rs (written), returns Σ_v g·yh over its VEC.
// FX: the fast SiLU (fast_math.cuh).
template <int VEC, bool FX = false>
__host__ __device__ __forceinline__ float l2_bwd_dot_lane(float (&yh)[VEC], const float (&g)[VEC],
                                                          const float (&c)[VEC], float rs) {
    float dot = 0.0f;
    for (int v = 0; v < VEC; v++) {
        yh[v] = silu_x<FX>(c[v]) * rs;
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
template <int W, int VEC, bool L2, bool PF, class E, int TT_ = 0, int LG = 1, bool FX = false>
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
            out[v] = silu_x<FX>(acc);
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

template <int W, int VEC, bool L2, bool PF, class E, int TT_ = 0, int MINB = 1, int LG = 1,
          bool FX = false>
__global__ void __launch_bounds__(32 * CONV_BT, MINB)
    conv_fwd_k(E *y, float *rstd, const E *p, const float *w, int B, int T, int C, float eps) {
    conv_fwd_body<W, VEC, L2, PF, E, TT_, LG, FX>(y, rstd, p, w, B, T, C, eps, (int)blockIdx.x,
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
          bool GRID = false, bool FX = false>
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
                    float dot = group_sum<LG>(l2_bwd_dot_lane<VEC, FX>(yh, g, c, rs));
#pragma unroll
                    for (int v = 0; v < VEC; v++)
                        g[v] = rs * (g[v] - dot * yh[v]);
                }
#pragma unroll
                for (int v = 0; v < VEC; v++)
                    dc[v] = g[v] * dsilu_x<FX>(c[v]);
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
          int LG = 1, bool FX = false>
__global__ void __launch_bounds__(32 * CONV_BT, MINB)
    conv_bwd_k(kda_bf16 *dp, double *part, const kda_bf16 *dy, const kda_bf16 *p, const float *w,
               const float *dq, const float *rstd, int B, int T, int C, int ldo) {
    conv_bwd_body<W, VEC, L2, PF, TT, PD, LG, true, FX>(dp, part, dy, p, w, dq, rstd, B, T, C, ldo,
                                                        0, 0, 0);
}

// Launches one instantiation of a conv kernel for the run-time W (1..CONV_MAX_W): MACRO(w) with w
// a constant. CONV_DISPATCH_W_MAX caps w at MAX_ (a constant): a W above MAX_ names MAX_'s
// instantiation (its launchers never get there; no extra kernel), so the combined q|k|v launches
// (CONV_DISPATCH_W4, below) share this one case list.
#define CONV_W_CAP(N, MAX_) ((N) <= (MAX_) ? (N) : (MAX_))
#define CONV_DISPATCH_W_MAX(W_, MAX_, MACRO)                                                       \
    switch (W_) {                                                                                  \
    case 1:                                                                                        \
        MACRO(CONV_W_CAP(1, MAX_));                                                                \
        break;                                                                                     \
    case 2:                                                                                        \
        MACRO(CONV_W_CAP(2, MAX_));                                                                \
        break;                                                                                     \
    case 3:                                                                                        \
        MACRO(CONV_W_CAP(3, MAX_));                                                                \
        break;                                                                                     \
    case 4:                                                                                        \
        MACRO(CONV_W_CAP(4, MAX_));                                                                \
        break;                                                                                     \
    case 5:                                                                                        \
        MACRO(CONV_W_CAP(5, MAX_));                                                                \
        break;                                                                                     \
    case 6:                                                                                        \
        MACRO(CONV_W_CAP(6, MAX_));                                                                \
        break;                                                                                     \
    case 7:                                                                                        \
        MACRO(CONV_W_CAP(7, MAX_));                                                                \
        break;                                                                                     \
    default:                                                                                       \
        MACRO(CONV_W_CAP(8, MAX_));                                                                \
        break;                                                                                     \
    }
#define CONV_DISPATCH_W(W_, MACRO) CONV_DISPATCH_W_MAX(W_, CONV_MAX_W, MACRO)

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

// ---- q, k and v of one layer in one launch (kda_cuda_conv_qkv_*; the model's KDA_CONV_QKV) -----
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
template <int W, int LG, bool FX = false>
__global__ void __launch_bounds__(32 * CONV_BT, CONV2_MINB_FWD)
    conv_qkv_fwd_k(const ConvQkvArgs a) {
    const int blk = (int)blockIdx.x, jn = conv_qkv_job(a, blk);
    const ConvQkvJob &j = a.j[jn];
    const int loc = blk - j.start, bx = loc % j.gx, by = loc / j.gx;
    if (jn < 2)
        conv_fwd_body<W, 4, true, true, kda_bf16, CONV2_TT_FWD, LG, FX>(
            j.out, j.rstd, j.p, j.w, a.B, a.T, j.C, a.eps, bx, by);
    else
        conv_fwd_body<W, 4, false, true, kda_bf16, CONV2_TT_FWD, 1, FX>(j.out, NULL, j.p, j.w, a.B,
                                                                        a.T, j.C, 0.0f, bx, by);
}

// Backward: q and k as the v1 fused launch (conv_bwd_k<W, 4, true, false, CONV_TT_BWD, CONV_PD,
// 1, K / 4>: one block row each, gy = the rows), v as the v2 plain launch (<W, 2, false, true,
// CONV2_TT_BWD, CONV2_TT_BWD + W - 1, CONV2_MINB_BWD>: rows y, y + gy, ..., gy <= CONV2_ROWS):
// the defaults of conv_v2_. The register count is the larger part's (the q/k v1 body, ~114 at
// W = 4); CONV_QKV_MINB_BWD = 2 blocks per SM caps it at 128, so q/k keep theirs (their own
// launch: 2 per SM) and v runs at 2 blocks per SM instead of its own launch's 3.
#define CONV_QKV_MINB_BWD 2
template <int W, int LG, bool FX = false>
__global__ void __launch_bounds__(32 * CONV_BT, CONV_QKV_MINB_BWD)
    conv_qkv_bwd_k(const ConvQkvArgs a) {
    const int blk = (int)blockIdx.x, jn = conv_qkv_job(a, blk);
    const ConvQkvJob &j = a.j[jn];
    const int loc = blk - j.start, bx = loc % j.gx, by = loc / j.gx;
    if (jn < 2)
        conv_bwd_body<W, 4, true, false, CONV_TT_BWD, CONV_PD, LG, false, FX>(
            j.out, j.part, NULL, j.p, j.w, j.dq, j.rstd_in, a.B, a.T, j.C, j.ldo, bx, by, j.gy);
    else
        conv_bwd_body<W, 2, false, true, CONV2_TT_BWD, CONV2_TT_BWD + W - 1, 1, false, FX>(
            j.out, j.part, j.dy, j.p, j.w, NULL, NULL, a.B, a.T, j.C, j.ldo, bx, by, j.gy);
}

// The combined kernels are instantiated for W <= CONV_QKV_MAX_W (the model's W = 4 and below;
// larger W run the three separate launches, the same bits) and every fused K.
#define CONV_QKV_MAX_W              4
#define CONV_DISPATCH_W4(W_, MACRO) CONV_DISPATCH_W_MAX(W_, CONV_QKV_MAX_W, MACRO)

// ---- launch helpers (the launcher files')
// --------------------------------------------------------

// Grid of the conv kernels: 32 channel groups x CONV_BT tiles per block.
// Rows of blocks (grid.y) beyond the hardware's 65535 come back as 0: the launchers refuse them.
inline dim3 conv_grid(int64_t B, int64_t T, int64_t C, int vec, int tt) {
    int64_t rows = CEIL_DIV(B * CEIL_DIV(T, (int64_t)tt), (int64_t)CONV_BT);
    return dim3((unsigned)CEIL_DIV(C / vec, (int64_t)32), rows <= 65535 ? (unsigned)rows : 0u);
}

// Whether the kernels' 32-bit index math (ConvItem) holds for these sizes: B·T tokens and T·ld
// elements a row (ld = max(C, ldo)) at most CONV_I32_MAX. The launchers refuse larger calls (a
// 2^31-element sequence; the v1 forward's grid already stops at 4.2M tokens).
inline bool conv_i32_ok(int64_t B, int64_t T, int64_t ld) {
    return B * T <= CONV_I32_MAX && T * ld <= CONV_I32_MAX;
}

// KDA_CONV_PREFETCH=1 (read at every launch): the conv kernels with their prefetch (opt-in since
// they measured slower, above; the same arithmetic).
inline bool conv_pf_(void) {
    const char *e = getenv("KDA_CONV_PREFETCH");
    return e && !strcmp(e, "1");
}

// Unless KDA_FAST_EXP=0 (fast_math.cuh; read at every launch): the fast SiLU / SiLU' (template FX)
// in the kernels the model runs by default: the v2 forwards and plain backward, the v1 fused q/k
// backward without prefetch, the q|k|v kernels, and the v2 fused backward of KDA_CONV_V=2; for
// W <= CONV_FX_MAX_W only (the model's W = 4: the fast instantiations exist for those W, so the
// build grows by ~100 kernels instead of doubling). The other kernels (the v1 forwards and plain
// backward, the prefetching and fp32 ones, W > 4) keep the precise SiLU under the switch.
// The fast plain forward asks for 4 blocks per SM (64 registers; ptxas gives the precise one 64
// under its cap of 3, the fast one 67 there, which would cost it a block per SM; 64 spill-free).
#define CONV2_MINB_FWD_FX            4
#define CONV_FX_MAX_W                4
#define CONV_DISPATCH_WFX(W_, MACRO) CONV_DISPATCH_W_MAX(W_, CONV_FX_MAX_W, MACRO)
inline bool conv_fx_(int64_t W) {
    return W <= CONV_FX_MAX_W && kda_fast_exp_();
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
// stays v1 until the combined q|k|v backward (KDA_CONV_QKV=2, which runs the v1 fused body) has
// been measured against it. KDA_CONV_PREFETCH only selects among the v1 kernels.
inline bool conv_v2_(int which) {
    const char *e = getenv("KDA_CONV_V");
    if (e && !strcmp(e, "1")) return false;
    if (e && !strcmp(e, "2")) return true;
    return which != CONV_K_L2_BWD;
}

// The backward launchers' dw: launch(part) runs the conv kernel, which writes P partial rows of dw
// (part [P, C, W] double in ctx's scratch: one row per block row, or per block of the v2 grid);
// colsum_finish then adds them into dw [C, W] in their order (fixed by the shapes), after the conv
// kernel on ctx->stream. 0, or -1 (no scratch, or a launch error: ctx's error set).
template <class L>
int conv_dw_finish(KdaCudaCtx *ctx, float *dw, int64_t P, int64_t C, int64_t W, L launch) {
    double *part = (double *)kda_cuda_scratch(ctx, (size_t)(P * C * W) * sizeof(double));
    if (!part) return -1;
    launch(part);
    CUDA_CHECK_LAUNCH(ctx);
    colsum_finish(ctx->stream, dw, part, P, C * W);
    CUDA_CHECK_LAUNCH(ctx);
    return 0;
}

// Grid of the v2 backward: block rows capped at CONV2_ROWS (each block walks rows y, y + cap, ...),
// a constant, so the dw partials' order depends on the shapes only, not on the GPU.
inline dim3 conv2_bwd_grid(int64_t B, int64_t T, int64_t C) {
    int64_t rows = CEIL_DIV(B * CEIL_DIV(T, (int64_t)CONV2_TT_BWD), (int64_t)CONV_BT);
    return dim3((unsigned)CEIL_DIV(C / 2, (int64_t)32),
                (unsigned)(rows < CONV2_ROWS ? rows : CONV2_ROWS));
}

} // namespace

#endif
