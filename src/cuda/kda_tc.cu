// kda_tc.cu - the KDA core on tensor cores (see kda_tc.h): kda_fast.cu's five chunk-parallel
// kernels (intra, state, output; reverse state, main backward) with their products as warp tiles
// of mma.sync m16n8k8 TF32, and the pair terms of the off-diagonal 16-token sub-blocks factored
// through the sub-block boundary. Every body is a __host__ __device__ function of block-strided
// loops, warp-tile products and barriers, so it also runs serially on the host (kda_tc_*_host).
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_internal.h" // defines: CUDA_CHECK, bf2f, f32_bits; kda_calloc (core/error.h)
#include "cuda/kda_chunk_layout.cuh" // defines: ChunkArgs, chunk_args, carve, keep_carve_hd
#include "cuda/kda_fast.h"           // defines: kda_fast_keep_floats (the kept layout's first part)
#include "cuda/kda_tc.h"             // defines: kda_tc_fwd, kda_tc_bwd

namespace {

#define TC_THREADS     256
#define TC_BWD_THREADS 512 // the main backward: 2 blocks (32 warps) per SM at K 32 / V 64
#define SUB            16  // rows of a sub-block (the mma's M)

// ---- the host/device portability layer ----------------------------------------------------------
// On the device a body is run by every thread of a block; on the host by one "thread" that does
// every iteration of every block-strided loop and every warp's tiles, so barriers are no-ops there.

__host__ __device__ inline int tid_() {
#ifdef __CUDA_ARCH__
    return (int)threadIdx.x;
#else
    return 0;
#endif
}
__host__ __device__ inline int nth_() {
#ifdef __CUDA_ARCH__
    return (int)blockDim.x;
#else
    return 1;
#endif
}
__host__ __device__ inline int lane_() {
#ifdef __CUDA_ARCH__
    return (int)(threadIdx.x & 31);
#else
    return 0;
#endif
}
__host__ __device__ inline int lane_step_() { // stride of a warp-strided loop
#ifdef __CUDA_ARCH__
    return 32;
#else
    return 1;
#endif
}
__host__ __device__ inline int warp_() {
#ifdef __CUDA_ARCH__
    return (int)(threadIdx.x >> 5);
#else
    return 0;
#endif
}
__host__ __device__ inline int nwarp_() {
#ifdef __CUDA_ARCH__
    return (int)(blockDim.x >> 5);
#else
    return 1;
#endif
}
// The block size N as a compile-time constant on the device (bodies launched with exactly N
// threads: loop trip counts without a division by blockDim); 1 on the host.
template <int N> __host__ __device__ constexpr int nth_c_() {
#ifdef __CUDA_ARCH__
    return N;
#else
    return 1;
#endif
}
__host__ __device__ inline void sync_() {
#ifdef __CUDA_ARCH__
    __syncthreads();
#endif
}
__host__ __device__ inline void syncwarp_() {
#ifdef __CUDA_ARCH__
    __syncwarp();
#endif
}
// Sum over the lanes of a warp, every lane gets it (all 32 lanes call it together). On the host
// the one "lane" already summed every item of its warp-strided loop.
__host__ __device__ inline float warp_sum_(float s) {
#ifdef __CUDA_ARCH__
    for (int o = 16; o > 0; o >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, o);
#endif
    return s;
}
// 16 bytes global -> shared without a register round trip (cp.async.cg: lands in shared memory
// while the block computes; visible after cp_wait_ + a barrier). async = 0: a plain copy (for
// pointers that are not 16-byte aligned, and KDA_TC_ASYNC=0). The host copies at once.
__host__ __device__ inline void cp16_(void *dst, const void *src, bool async) {
#ifdef __CUDA_ARCH__
    if (async) {
        unsigned d = (unsigned)__cvta_generic_to_shared(dst);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
        return;
    }
    if (((uintptr_t)src & 3) == 0) { // fp32 tiles (KDA_TC_ASYNC=0)
        for (int i = 0; i < 4; i++)
            ((unsigned *)dst)[i] = ((const unsigned *)src)[i];
        return;
    }
    for (int i = 0; i < 8; i++) // bf16 at a 2-byte boundary
        ((unsigned short *)dst)[i] = ((const unsigned short *)src)[i];
#else
    (void)async;
    memcpy(dst, src, 16);
#endif
}
// cp16_ with the copy form fixed at compile time: A (v5's bodies, when every flag of the call
// allows cp.async) issues the cp.async with no run-time flag and no fallback branch; else
// cp16_(dst, src, async). The same 16 bytes land either way.
template <bool A> struct Bool_ { static constexpr bool value = A; };
template <bool A> __host__ __device__ inline void cp16c_(void *dst, const void *src, bool async) {
#ifdef __CUDA_ARCH__
    if (A) {
        unsigned d = (unsigned)__cvta_generic_to_shared(dst);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
        return;
    }
#endif
    cp16_(dst, src, async);
}
__host__ __device__ inline void cp_commit_() {
#ifdef __CUDA_ARCH__
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
__host__ __device__ inline void cp_wait_() { // this thread's copies have landed
#ifdef __CUDA_ARCH__
    asm volatile("cp.async.wait_group 0;" ::: "memory");
#endif
}

__host__ __device__ inline void cp_wait1_() { // all but this thread's last committed group landed
#ifdef __CUDA_ARCH__
    asm volatile("cp.async.wait_group 1;" ::: "memory");
#endif
}
// Named barrier `id` (1..15) among the `threads` threads (a multiple of 32) of the warps that
// call it with that id (the block's others run on). A no-op on the host, like sync_.
__host__ __device__ inline void bar_sub_(int id, int threads) {
#ifdef __CUDA_ARCH__
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
#else
    (void)id, (void)threads;
#endif
}
// Reverse inclusive scan of a column of n <= 32 floats in place (col[i·stride] = init + Σ_{i' >= i}
// col[i'·stride]): one warp, lane i holds row i (all 32 lanes call it together); on the host a
// serial loop.
__host__ __device__ inline void warp_rscan_(float *col, int stride, int n, float init) {
#ifdef __CUDA_ARCH__
    const int L = lane_();
    float x = L < n ? col[L * stride] : 0.0f;
    for (int o = 1; o < 32; o <<= 1) {
        float y = __shfl_down_sync(0xffffffffu, x, o);
        if (L + o < 32) x += y;
    }
    if (L < n) col[L * stride] = x + init;
#else
    float acc = 0.0f;
    for (int i = n - 1; i >= 0; i--) {
        acc += col[i * stride];
        col[i * stride] = acc + init;
    }
#endif
}

// e^x for x <= 0 (ex2.approx on the device: relative error ~2^-22, far below TF32's 2^-11)
__host__ __device__ inline float fexp(float x) {
#ifdef __CUDA_ARCH__
    return __expf(x);
#else
    return expf(x);
#endif
}
__host__ __device__ inline kda_bf16 stbf(float f) { // round to nearest even, NaN stays NaN
    unsigned u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (kda_bf16)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (kda_bf16)(u >> 16);
}
__host__ __device__ inline int imin(int a, int b) {
    return a < b ? a : b;
}

// Block-strided loop: e = this thread's items of [0, n). Warp-strided: this lane's items.
#define FOR(e, n) for (int e = tid, e##_end = (n); e < e##_end; e += nth)
// Block-strided over the threads of warps [w0, w0 + nw) only (all items on the host; the other
// warps skip the loop).
#define GFOR(e, n, w0, nw)                                                                         \
    for (int e = gfor_begin_(w0, nw, n), e##_end = (n), e##_st = gfor_step_(nw); e < e##_end;      \
         e += e##_st)
#define WFOR(e, n)                                                                                 \
    for (int e = lane_(), e##_end = (n), e##_st = lane_step_(); e < e##_end; e += e##_st)
// FOR(e, N) for a compile-time N: at CT (v5) with a pass counter whose bound ceil(N / nth) is a
// constant (nth is compile-time on the device), so the compiler unrolls it fully (once or twice at
// the v5 dims) instead of a 4x-unrolled body and a remainder loop; the same items in the same
// order.
#define FOR_N(e, N, CT)                                                                            \
    for (int e = tid, e##_k = 0, e##_end = (N);                                                    \
         (CT) ? e##_k < ((N) + nth - 1) / nth && e < e##_end : e < e##_end; e += nth, e##_k++)
// FOR / WFOR over the rows [0, n) of a tile of N rows (N compile-time, n <= N run-time): with CT
// (v5) the loop runs to N and skips the items past n, so its trip count is a constant (a lane's
// one pass at N = 32, where WFOR(e, n) is unrolled 4x with a remainder loop for a loop that runs
// once); without CT it is FOR(e, n) / WFOR(e, n). Either way the same items in the same order, so
// a sum over them adds the same terms in the same order.
#define FOR_CT(e, N, n, CT)                                                                        \
    FOR_N(e, (CT) ? (N) : (n), CT)                                                                 \
    if ((CT) && e >= (n)) {                                                                        \
    } else
#define WFOR_CT(e, N, n, CT)                                                                       \
    for (int e = lane_(), e##_end = (CT) ? (N) : (n), e##_st = lane_step_(); e < e##_end;          \
         e += e##_st)                                                                              \
        if ((CT) && e >= (n)) {                                                                    \
        } else

// ---- warp tiles on the tensor cores -------------------------------------------------------------
// A matrix view: element (r, c) at p[r·rs + c·cs] (cs = 1: row-major; rs = 1: a transpose).
struct Mat {
    const float *p;
    int rs, cs;
};
__host__ __device__ inline Mat mat(const float *p, int rs, int cs) {
    Mat m;
    m.p = p, m.rs = rs, m.cs = cs;
    return m;
}
__host__ __device__ inline float mat_at(const Mat &m, int r, int c) {
    return m.p[r * m.rs + c * m.cs];
}
__host__ __device__ inline Mat mat_off(const Mat &m, int r, int c) {
    return mat(m.p + r * m.rs + c * m.cs, m.rs, m.cs);
}

// TF32 as cvt.rna.tf32.f32 makes it: the fp32 bit pattern with the low 13 mantissa bits cleared
// after rounding to nearest, ties away from zero (adding half an ulp to the magnitude bits).
__host__ __device__ inline unsigned tf32_bits(float x) {
#ifdef __CUDA_ARCH__
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
#else
    unsigned u = f32_bits(x);
    if ((u & 0x7f800000u) == 0x7f800000u) return u; // Inf / NaN unchanged
    return (u + 0x1000u) & 0xffffe000u;
#endif
}

// Fragment coordinates of mma.sync.m16n8k8 with .tf32 operands (PTX ISA, "Matrix Fragments for
// mma.m16n8k8"), lane = 4 g + t: A (16 x 8, row) register i holds (g + 8 (i & 1), t + 4 (i >> 1));
// B (8 x 8, col) register i holds (k = t + 4 i, n = g); C / D (16 x 8) register i holds
// (g + 8 (i >> 1), 2 t + (i & 1)).
__host__ __device__ inline void frag_a(int lane, int i, int &r, int &k) {
    r = (lane >> 2) + 8 * (i & 1), k = (lane & 3) + 4 * (i >> 1);
}
__host__ __device__ inline void frag_b(int lane, int i, int &k, int &n) {
    k = (lane & 3) + 4 * i, n = lane >> 2;
}
__host__ __device__ inline void frag_c(int lane, int i, int &r, int &c) {
    r = (lane >> 2) + 8 * (i >> 1), c = 2 * (lane & 3) + (i & 1);
}

// The 16 x 8 fp32 accumulator tile of one warp: 4 registers per lane on the device; on the host
// all 32 lanes' registers (the emulation runs the whole warp).
struct Acc {
#ifdef __CUDA_ARCH__
    float c[4];
#else
    float c[32][4];
#endif
};
#ifdef __CUDA_ARCH__
#define ACC(a, L, i) ((a).c[i])
#define LANES(L)     for (int L = lane_(), L##_1 = L + 1; L < L##_1; L++)
#else
#define ACC(a, L, i) ((a).c[L][i])
#define LANES(L)     for (int L = 0; L < 32; L++)
#endif

__host__ __device__ inline void acc_zero(Acc &a) {
    LANES(L) {
        for (int i = 0; i < 4; i++)
            ACC(a, L, i) = 0.0f;
    }
}

// An operand view of a bf16 tile (kda_fast's layouts keep q, k, v, dO in bf16): element (r, c) at
// p[r·rs + c·cs]. A bf16 value is exact in TF32, so its fragment bits are the bf16 bits shifted.
struct MatH {
    const kda_bf16 *p;
    int rs, cs;
};
__host__ __device__ inline MatH math(const kda_bf16 *p, int rs, int cs) {
    MatH m;
    m.p = p, m.rs = rs, m.cs = cs;
    return m;
}
__host__ __device__ inline MatH mat_off(const MatH &m, int r, int c) {
    return math(m.p + r * m.rs + c * m.cs, m.rs, m.cs);
}
// The TF32 bits of operand element (r, c): fp32 rounded (cvt.rna), bf16 widened.
__host__ __device__ inline unsigned opnd(const Mat &m, int r, int c) {
    return tf32_bits(mat_at(m, r, c));
}
__host__ __device__ inline unsigned opnd(const MatH &m, int r, int c) {
    return (unsigned)m.p[r * m.rs + c * m.cs] << 16;
}

// v5: an fp32 tile whose every value is already TF32 (tf32_round: its producer rounded it, and it
// is read by nothing but mma), so a fragment is the stored word, with no cvt (about 2 instructions
// per operand element on the device: |x| < Inf test and a predicated add). cvt.rna is idempotent
// on such a word, so the products are bitwise v4's.
struct MatT {
    const float *p;
    int rs, cs;
};
__host__ __device__ inline MatT mat_off(const MatT &m, int r, int c) {
    MatT o;
    o.p = m.p + r * m.rs + c * m.cs, o.rs = m.rs, o.cs = m.cs;
    return o;
}
__host__ __device__ inline unsigned opnd(const MatT &m, int r, int c) {
    return f32_bits(m.p[r * m.rs + c * m.cs]);
}
// The operand view of an fp32 tile: MatT when R (its values are TF32-rounded: v5), else Mat (v4:
// rounded at every fragment load). R false gives v4's types, so its code is v4's.
template <bool R> struct MatOf_ { typedef Mat T; };
template <> struct MatOf_<true> { typedef MatT T; };
template <bool R>
__host__ __device__ inline typename MatOf_<R>::T matr(const float *p, int rs, int cs) {
    typename MatOf_<R>::T m;
    m.p = p, m.rs = rs, m.cs = cs;
    return m;
}
// x as TF32 in an fp32 word (low 13 mantissa bits zero): what a v5 producer stores for a tensor
// that only mma reads. On the device cvt.rna leaves the low bits set (its SASS adds half an ulp;
// the mma ignores them), so they are cleared here: the stored word is then a TF32 value, on which
// the consumer's raw fragment and a v4 consumer's cvt.rna agree (a second cvt of the unmasked
// word could carry into bit 13). The host's tf32_bits clears them already (and keeps NaN as it is,
// as v4's host operands do).
__host__ __device__ inline float tf32_round(float x) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(tf32_bits(x) & 0xffffe000u);
#else
    unsigned u = tf32_bits(x);
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}
// The value a producer stores: rounded when R (v5), unchanged otherwise (v4).
template <bool R> __host__ __device__ inline float rnd_(float x) {
    return R ? tf32_round(x) : x;
}

// a += A[0:16, 0:Kd] · B[0:Kd, 0:8], operands rounded to TF32 (Kd % 8 == 0). On the device every
// lane of the warp calls it together (mma.sync is warp-collective).
template <class MA, class MB>
__host__ __device__ inline void mma_tile(Acc &a, const MA &A, const MB &B, int Kd) {
#ifdef __CUDA_ARCH__
    const int L = lane_();
    for (int k0 = 0; k0 < Kd; k0 += 8) {
        unsigned fa[4], fb[2];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int r, k;
            frag_a(L, i, r, k);
            fa[i] = opnd(A, r, k0 + k);
        }
#pragma unroll
        for (int i = 0; i < 2; i++) {
            int k, n;
            frag_b(L, i, k, n);
            fb[i] = opnd(B, k0 + k, n);
        }
        asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, "
                     "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                     : "+f"(a.c[0]), "+f"(a.c[1]), "+f"(a.c[2]), "+f"(a.c[3])
                     : "r"(fa[0]), "r"(fa[1]), "r"(fa[2]), "r"(fa[3]), "r"(fb[0]), "r"(fb[1]));
    }
#else
    // Emulation: every lane's fragments are built with the device's coordinates, the 16 x 8 and
    // 8 x 8 operand tiles are reassembled from them (starting from NaN, so a coordinate no lane
    // covers poisons the result), multiplied in fp32 and scattered back by the C coordinates.
    for (int k0 = 0; k0 < Kd; k0 += 8) {
        float As[16][8], Bs[8][8];
        for (int r = 0; r < 16; r++)
            for (int k = 0; k < 8; k++)
                As[r][k] = NAN, Bs[k % 8][r % 8] = NAN;
        for (int L = 0; L < 32; L++) {
            for (int i = 0; i < 4; i++) {
                int r, k;
                frag_a(L, i, r, k);
                unsigned u = opnd(A, r, k0 + k);
                memcpy(&As[r][k], &u, sizeof u);
            }
            for (int i = 0; i < 2; i++) {
                int k, n;
                frag_b(L, i, k, n);
                unsigned u = opnd(B, k0 + k, n);
                memcpy(&Bs[k][n], &u, sizeof u);
            }
        }
        for (int L = 0; L < 32; L++)
            for (int i = 0; i < 4; i++) {
                int r, c;
                frag_c(L, i, r, c);
                float s = 0.0f;
                for (int k = 0; k < 8; k++)
                    s += As[r][k] * Bs[k][c];
                a.c[L][i] += s;
            }
    }
#endif
}

// Warp groups: warps [w0, w0 + nw) of the block. On the host the one "warp" is every group.
__host__ __device__ inline bool in_group_(int w0, int nw) {
#ifdef __CUDA_ARCH__
    return warp_() >= w0 && warp_() < w0 + nw;
#else
    (void)w0, (void)nw;
    return true;
#endif
}
__host__ __device__ inline int group_warp_(int w0) { // this warp's index inside its group
#ifdef __CUDA_ARCH__
    return warp_() - w0;
#else
    (void)w0;
    return 0;
#endif
}
__host__ __device__ inline int group_nwarp_(int nw) {
#ifdef __CUDA_ARCH__
    return nw;
#else
    (void)nw;
    return 1;
#endif
}

__host__ __device__ inline int gfor_begin_(int w0, int nw, int n) {
#ifdef __CUDA_ARCH__
    return in_group_(w0, nw) ? (int)threadIdx.x - 32 * w0 : n;
#else
    (void)w0, (void)nw, (void)n;
    return 0;
#endif
}
__host__ __device__ inline int gfor_step_(int nw) {
#ifdef __CUDA_ARCH__
    return 32 * nw;
#else
    (void)nw;
    return 1;
#endif
}

// The [M, N] product tiles of A1 [M, K1] · B1 [K1, N] and, when K2 > 0, A2 [M, K2] · B2 [K2, N],
// dealt to the warps w0 .. w0 + nw - 1 of the block (the other warps skip it: several products
// can run side by side on disjoint groups); epi(r, c, v1, v2) receives every element (r, c) once,
// from the lane that holds it (v2 = 0 without a second product). M % 16 == 0, N % 8 == 0,
// K % 8 == 0. The caller puts a barrier between the writes of the operands and this call.
template <class MA1, class MB1, class MA2, class MB2, class Epi>
__host__ __device__ inline void block_mm_w(int w0, int nw, int M, int N, MA1 A1, MB1 B1, int K1,
                                           MA2 A2, MB2 B2, int K2, Epi epi) {
    if (!in_group_(w0, nw)) return;
    const int nt = N / 8, tiles = (M / 16) * nt;
    for (int tl = group_warp_(w0); tl < tiles; tl += group_nwarp_(nw)) {
        const int m0 = tl / nt * 16, n0 = tl % nt * 8;
        Acc a1, a2;
        acc_zero(a1);
        acc_zero(a2);
        syncwarp_(); // converged for the warp-collective mma
        mma_tile(a1, mat_off(A1, m0, 0), mat_off(B1, 0, n0), K1);
        if (K2 > 0) mma_tile(a2, mat_off(A2, m0, 0), mat_off(B2, 0, n0), K2);
        LANES(L) {
            for (int i = 0; i < 4; i++) {
                int r, c;
                frag_c(L, i, r, c);
                epi(m0 + r, n0 + c, ACC(a1, L, i), ACC(a2, L, i));
            }
        }
    }
}
// The same dealt to all warps of the block.
template <class MA1, class MB1, class MA2, class MB2, class Epi>
__host__ __device__ inline void block_mm(int M, int N, MA1 A1, MB1 B1, int K1, MA2 A2, MB2 B2,
                                         int K2, Epi epi) {
    block_mm_w(0, nwarp_(), M, N, A1, B1, K1, A2, B2, K2, epi);
}
__host__ __device__ inline Mat no_mat() {
    return mat(NULL, 0, 0);
}

// ---- arguments: kda_chunk_layout.cuh's ChunkArgs (kda_fast.cu's scratch and kept layout) plus
// the bf16 tensors and the copy switches
struct TcArgs : ChunkArgs {
    bool async;   // the state passes prefetch with cp.async (KDA_TC_ASYNC=0: plain copies)
    bool dO_al16; // dO 16-byte aligned: the reverse pass copies it with cp.async
    // v4 (ctx->tc_version): 16-byte aligned q and k, v, gcum, and the scratch / kept tensors; an
    // unaligned one is copied with plain loads
    bool qk_al16, v_al16, g_al16, s_al16;
    int ver;         // the kernel version of this call (ctx->tc_version): 3, 4, 5 or 6
    bool state_o;    // v4 forward: the state pass writes o as well (no output kernel)
    float *Akk, *KK; // kept (v4 at bwd4_dims): [cid][C][C] Akk, KK; NULL without a kept buffer
    const kda_bf16 *q, *k, *v, *dO;
    kda_bf16 *o, *dv; // outputs
};

// Row strides of the shared tiles. An mma operand read along rows (A row-major, or B as the
// transpose of a row-major [n][k] tile) has lanes at (g, t) -> g·s + t: s = 4 mod 32 is
// conflict-free (the "+ 4" strides); read along columns (B row-major [k][n], or A as a
// transpose) -> t·s + g: s = 8 mod 32 (the "+ 8" strides).
__host__ __device__ inline int pad4(int x) {
    return x + 4;
}
__host__ __device__ inline int pad8(int x) {
    return x + 8;
}

// The off-diagonal sub-block of a 32-token chunk: rows R.. of sub-block 1 against the columns of
// sub-block 0, factored through row R = 16 (both exponents <= 0). Taken when rows R.. exist.
__host__ __device__ inline bool has_off(int C, int n) {
    return C > SUB && n > SUB;
}

// ---- shared-memory sizes in floats
// ---------------------------------------------------------------
__host__ __device__ inline size_t intra_floats(int C, int K, int V, bool bwd) {
    int LK = pad4(K), LV = pad8(V), LC = pad4(C);
    size_t off = C > SUB ? (size_t)3 * SUB * LK + SUB * LC : 0;
    return (size_t)4 * C * LK + (bwd ? 2 : 1) * (size_t)C * LV + 3 * (size_t)C * LC + off + C;
}
// (state passes: the double buffers' sizes, state_buf_floats / rstate_buf_floats, are below)
__host__ __device__ inline int state_buf_floats(int C, int K, int Vt);
__host__ __device__ inline int rstate_buf_floats(int C, int K, int Vt);
__host__ __device__ inline size_t state_floats(int C, int K, int Vt) {
    size_t f = (size_t)K * pad8(Vt) + 2 * (size_t)state_buf_floats(C, K, Vt);
    size_t r =
        (size_t)K * pad8(Vt) + (size_t)C * pad8(Vt) + 2 * (size_t)rstate_buf_floats(C, K, Vt);
    return f > r ? f : r;
}
__host__ __device__ inline size_t output_floats(int C, int K, int V) {
    return (size_t)C * pad4(K) + (size_t)K * pad8(V) + (size_t)C * pad4(C) + (size_t)C * pad8(V);
}
// the main backward's region X (bwd_body): max(S0t | dSt, dAkk | M, Tm)
__host__ __device__ inline int bwd_x_floats(int C, int K, int Vt) {
    int st = 2 * K * pad4(Vt), mm = 2 * C * pad4(C);
    return st > mm ? st : mm;
}
__host__ __device__ inline size_t bwd_floats(int C, int K, int V, int Vt) {
    int LK = pad4(K), LV = pad4(V), LC = pad4(C);
    return (size_t)11 * C * LK + (size_t)4 * C * LV + (size_t)bwd_x_floats(C, K, Vt) +
           (size_t)3 * C * LC + 2 * C + K;
}

// ---- intra: everything of one chunk that does not need the state -------------------------------
// L[i,j] = β_i Σ_c k_i k_j e^{G_i - G_j} (j < i), Aqk[i,j] = scale Σ_c q_i k_j e^{G_i - G_j}
// (j <= i), Akk = (I + L)^-1, w = Akk (β k e^G), u = Akk (β v), kg, qg, e^{G_last}; the forward
// keeps Aqk, the backward dΔ_intra = Aqkᵀ dO instead.
__host__ __device__ void intra_body(const TcArgs &a, int64_t blk, float *sm, bool bwd) {
    const int tid = tid_(), nth = nth_();
    const int C = a.C, K = a.K, V = a.V, LK = pad4(K), LV = pad8(V), LC = pad4(C), R = SUB;
    const ChunkPos p = chunk_pos(a, blk);
    const int n = p.n;
    const bool off = has_off(C, n);
    const float scale = a.scale;
    float *Qs = sm, *Ks = Qs + C * LK, *Gs = Ks + C * LK, *Kb = Gs + C * LK, *Vs = Kb + C * LK;
    float *dOs = Vs + C * LV, *Aq = dOs + (bwd ? C * LV : 0), *Ls = Aq + C * LC, *Ak = Ls + C * LC;
    float *Qf = Ak + C * LC, *Kf = Qf + (C > SUB ? SUB * LK : 0),
          *Kr = Kf + (C > SUB ? SUB * LK : 0);
    float *Tm = Kr + (C > SUB ? SUB * LK : 0), *bs = Tm + (C > SUB ? SUB * LC : 0);

    FOR(e, C * K) {
        int i = e / K, c = e % K, t = p.t0 + i;
        bool in = i < n;
        Qs[i * LK + c] = in ? bf2f(a.q[qk_at(a, p.b, t, p.hq) + c]) : 0.0f;
        Ks[i * LK + c] = in ? bf2f(a.k[qk_at(a, p.b, t, p.hq) + c]) : 0.0f;
        Gs[i * LK + c] = in ? a.gcum[g_at(a, p.b, t, p.j) + c] : 0.0f;
    }
    FOR(e, C * V) {
        int i = e / V, c = e % V, t = p.t0 + i;
        bool in = i < n;
        Vs[i * LV + c] = in ? bf2f(a.v[v_at(a, p.b, t, p.j) + c]) : 0.0f;
        if (bwd) dOs[i * LV + c] = in ? bf2f(a.dO[v_at(a, p.b, t, p.j) + c]) : 0.0f;
    }
    FOR(i, C) bs[i] = i < n ? a.beta[beta_at(a, p.b, p.t0 + i, p.j)] : 0.0f;
    sync_();

    // (1) the factors of the off-diagonal sub-block: Qf = q_i e^{G_i - G_R}, Kf = β_i k_i
    //     e^{G_i - G_R} (rows R.., 0 past the end), Kr = k_j e^{G_R - G_j} (rows 0..R-1)
    if (off) {
        FOR(e, SUB * K) {
            int i = e / K, c = e % K, r = R + i;
            float gR = Gs[R * LK + c], f = r < n ? fexp(Gs[r * LK + c] - gR) : 0.0f;
            Qf[i * LK + c] = Qs[r * LK + c] * f;
            Kf[i * LK + c] = bs[r] * Ks[r * LK + c] * f;
            Kr[i * LK + c] = Ks[i * LK + c] * fexp(gR - Gs[i * LK + c]);
        }
    }
    //     Akk := I; zeros where neither the pairs nor the mma below write (the upper triangle;
    //     the off-diagonal sub-block when it has no rows)
    FOR(e, C * C) {
        int i = e / C, jj = e % C;
        Ak[i * LC + jj] = i == jj ? 1.0f : 0.0f;
        if (jj > i || (i / SUB != jj / SUB && !off)) Aq[i * LC + jj] = Ls[i * LC + jj] = 0.0f;
    }
    //     the pairs (i, j <= i) of the diagonal sub-blocks in fp32 (a warp is two rows i, lanes
    //     read column c of 16 rows j)
    FOR(e, C * SUB) {
        int i = e / SUB, jj = i / SUB * SUB + e % SUB;
        if (jj > i) continue;
        float l = 0.0f, aq = 0.0f;
        if (i < n) {
            for (int c = 0; c < K; c++) {
                float kd = Ks[jj * LK + c] * fexp(Gs[i * LK + c] - Gs[jj * LK + c]);
                l += Ks[i * LK + c] * kd;
                aq += Qs[i * LK + c] * kd;
            }
        }
        Aq[i * LC + jj] = scale * aq;
        Ls[i * LC + jj] = jj < i ? bs[i] * l : 0.0f;
    }
    float *wg = a.w + p.cid * C * K, *kgg = a.kg + p.cid * C * K, *qgg = a.qg + p.cid * C * K;
    const float *Gl = Gs + (n - 1) * LK;
    FOR(e, C * K) {
        int i = e / K, c = e % K;
        float eg = fexp(Gs[i * LK + c]);
        Kb[i * LK + c] = bs[i] * Ks[i * LK + c] * eg;
        qgg[e] = scale * Qs[i * LK + c] * eg;
        kgg[e] = Ks[i * LK + c] * fexp(Gl[c] - Gs[i * LK + c]);
    }
    FOR(c, K) a.gl[p.cid * K + c] = fexp(Gl[c]);
    FOR(e, C * V) Vs[(e / V) * LV + e % V] *= bs[e / V];
    sync_();

    // (2) the off-diagonal sub-block of Aqk and L on the tensor cores
    if (off) {
        block_mm(SUB, SUB, mat(Qf, LK, 1), mat(Kr, 1, LK), K, mat(Kf, LK, 1), mat(Kr, 1, LK), K,
                 [&](int r, int c, float vq, float vk) {
                     Aq[(R + r) * LC + c] = scale * vq;
                     Ls[(R + r) * LC + c] = vk;
                 });
    }
    sync_();

    // (3) Akk = (I + L)^-1: each diagonal sub-block by forward substitution in its own warp (once
    //     row m is final, subtract L[r, m]·row m from rows r > m), then the off-diagonal block
    //     Inv_10 = -Inv_11 · L_10 · Inv_00 on the tensor cores.
    for (int I = warp_(); I * SUB < n; I += nwarp_()) {
        const int r0 = I * SUB, nb = imin(SUB, n - r0);
        for (int m = 0; m + 1 < nb; m++) {
            const int cols = m + 1;
            WFOR(e, (nb - 1 - m) * cols) {
                int r = r0 + m + 1 + e / cols, c = r0 + e % cols;
                Ak[r * LC + c] -= Ls[r * LC + r0 + m] * Ak[(r0 + m) * LC + c];
            }
            syncwarp_();
        }
    }
    sync_();
    if (off) {
        block_mm(SUB, SUB, mat(Ls + R * LC, LC, 1), mat(Ak, LC, 1), SUB, no_mat(), no_mat(), 0,
                 [&](int r, int c, float v, float) { Tm[r * LC + c] = v; });
        sync_();
        block_mm(SUB, SUB, mat(Ak + R * LC + R, LC, 1), mat(Tm, LC, 1), SUB, no_mat(), no_mat(), 0,
                 [&](int r, int c, float v, float) { Ak[(R + r) * LC + c] = -v; });
        sync_();
    }

    // (4) w = Akk Kb, u = Akk (β v); the forward's Aqk or the backward's dΔ_intra = Aqkᵀ dO
    block_mm(C, K, mat(Ak, LC, 1), mat(Kb, LK, 1), C, no_mat(), no_mat(), 0,
             [&](int r, int c, float v, float) { wg[r * K + c] = v; });
    float *ug = a.u + p.cid * C * V;
    block_mm(C, V, mat(Ak, LC, 1), mat(Vs, LV, 1), C, no_mat(), no_mat(), 0,
             [&](int r, int c, float v, float) { ug[r * V + c] = v; });
    if (!bwd) {
        FOR(e, C * C) a.Aqk[p.cid * C * C + e] = Aq[(e / C) * LC + e % C];
    } else {
        float *dDig = a.dDi + p.cid * C * V;
        block_mm(C, V, mat(Aq, 1, LC), mat(dOs, LV, 1), C, no_mat(), no_mat(), 0,
                 [&](int r, int c, float v, float) { dDig[r * V + c] = v; });
    }
}

// ---- state: the only sequential stage, one block per (b, value head, V tile) -------------------
// For each chunk: h[n] = S; Δ = u - w S; S = Diag(e^{G_last}) S + kgᵀ Δ. Columns of S are
// independent, so V tiles run in separate blocks. The next chunk's w, kg, u tile and e^{G_last}
// are copied into the other half of a double buffer (cp.async) while this chunk computes: the
// chain of chunks waits on the copy latency once instead of once per chunk.
__host__ __device__ inline int state_buf_floats(int C, int K, int Vt) {
    return C * pad4(K) + C * pad8(K) + C * pad8(Vt) + K; // Ws, KGs, Us, gls
}
// (template dims 0: a's; TC_THREADS threads on the device). A (v5, a.async set): cp.async with
// no run-time form, 32-bit offsets from the chunk's bases, FOR_N's fully unrolled passes.
template <int C_, int K_, int VT_, bool A = false>
__host__ __device__ void state_prefetch_(const TcArgs &a, int64_t cid, int v0, float *buf) {
    const int tid = tid_(), nth = nth_c_<TC_THREADS>();
    const int C = C_ ? C_ : a.C, K = K_ ? K_ : a.K, V = a.V, Vt = VT_ ? VT_ : a.Vt, LW = pad4(K),
              LG = pad8(K), LT = pad8(Vt);
    float *Ws = buf, *KGs = Ws + C * LW, *Us = KGs + C * LG, *gls = Us + C * LT;
    const int K4 = K / 4, T4 = Vt / 4;
    if (A) {
        const float *w = a.w + cid * C * K, *kg = a.kg + cid * C * K, *u = a.u + cid * C * V + v0;
        FOR_N(e, C * K4, A) {
            int i = e / K4, c = e % K4 * 4;
            cp16c_<A>(&Ws[i * LW + c], &w[i * K + c], true);
            cp16c_<A>(&KGs[i * LG + c], &kg[i * K + c], true);
        }
        FOR_N(e, C * T4, A) {
            int i = e / T4, c = e % T4 * 4;
            cp16c_<A>(&Us[i * LT + c], &u[i * V + c], true);
        }
        const float *gl = a.gl + cid * K;
        FOR_N(e, K4, A) cp16c_<A>(&gls[4 * e], &gl[4 * e], true);
        if (a.state_o) {
            const int LQ = pad4(K), LA = pad4(C), C4 = C / 4;
            float *QG = gls + K, *Aq = QG + C * LQ;
            const float *qg = a.qg + cid * C * K, *aqk = a.Aqk + cid * C * C;
            FOR_N(e, C * K4, A) {
                int i = e / K4, c = e % K4 * 4;
                cp16c_<A>(&QG[i * LQ + c], &qg[i * K + c], true);
            }
            FOR_N(e, C * C4, A) {
                int i = e / C4, c = e % C4 * 4;
                cp16c_<A>(&Aq[i * LA + c], &aqk[i * C + c], true);
            }
        }
    } else {
        FOR(e, C * K4) {
            int i = e / K4, c = e % K4 * 4;
            cp16_(&Ws[i * LW + c], &a.w[cid * C * K + i * K + c], a.async);
            cp16_(&KGs[i * LG + c], &a.kg[cid * C * K + i * K + c], a.async);
        }
        FOR(e, C * T4) {
            int i = e / T4, c = e % T4 * 4;
            cp16_(&Us[i * LT + c], &a.u[cid * C * V + (int64_t)i * V + v0 + c], a.async);
        }
        FOR(e, K4) cp16_(&gls[4 * e], &a.gl[cid * K + 4 * e], a.async);
        if (a.state_o) { // v4: qg and Aqk of the chunk for o (after gls: state_obuf_floats)
            const int LQ = pad4(K), LA = pad4(C), C4 = C / 4;
            float *QG = gls + K, *Aq = QG + C * LQ;
            FOR(e, C * K4) {
                int i = e / K4, c = e % K4 * 4;
                cp16_(&QG[i * LQ + c], &a.qg[cid * C * K + i * K + c], a.async);
            }
            FOR(e, C * C4) {
                int i = e / C4, c = e % C4 * 4;
                cp16_(&Aq[i * LA + c], &a.Aqk[cid * C * C + i * C + c], a.async);
            }
        }
    }
    cp_commit_();
}
template <int C_, int K_, int VT_, int NS, bool RT = false>
__host__ __device__ void state4_body(const TcArgs &a, int64_t blk, float *sm);
// v3's pass is v4's at run-time dims with a double buffer (below).
__host__ __device__ void state_body(const TcArgs &a, int64_t blk, float *sm) {
    state4_body<0, 0, 0, 2>(a, blk, sm);
}

// ---- output: o = qg h[n] + Aqk Δ, chunk-parallel ------------------------------------------------
__host__ __device__ void output_body(const TcArgs &a, int64_t blk, float *sm) {
    const int tid = tid_(), nth = nth_();
    const int C = a.C, K = a.K, V = a.V, LK = pad4(K), LV = pad8(V), LC = pad4(C);
    const ChunkPos p = chunk_pos(a, blk);
    float *QG = sm, *Hs = QG + C * LK, *Aq = Hs + K * LV, *Ds = Aq + C * LC;

    FOR(e, C * K) QG[(e / K) * LK + e % K] = a.qg[p.cid * C * K + e];
    FOR(e, K * V) Hs[(e / V) * LV + e % V] = a.h[p.cid * K * V + e];
    FOR(e, C * C) Aq[(e / C) * LC + e % C] = a.Aqk[p.cid * C * C + e];
    FOR(e, C * V) Ds[(e / V) * LV + e % V] = a.D[p.cid * C * V + e];
    sync_();
    block_mm(C, V, mat(QG, LK, 1), mat(Hs, LV, 1), K, mat(Aq, LC, 1), mat(Ds, LV, 1), C,
             [&](int r, int c, float v1, float v2) {
                 if (r < p.n) a.o[v_at(a, p.b, p.t0 + r, p.j) + c] = stbf(v1 + v2);
             });
}

// ---- dΔ_intra = Aqkᵀ dO from the forward's kept Aqk (the kept backward's intra), chunk-parallel
// --
__host__ __device__ inline size_t ddi_floats(int C, int V) {
    return (size_t)C * pad4(C) + (size_t)C * pad8(V);
}
__host__ __device__ void ddi_body(const TcArgs &a, int64_t blk, float *sm) {
    const int tid = tid_(), nth = nth_();
    const int C = a.C, V = a.V, LC = pad4(C), LV = pad8(V);
    const ChunkPos p = chunk_pos(a, blk);
    float *Aq = sm, *dOs = Aq + C * LC;
    FOR(e, C * C) Aq[(e / C) * LC + e % C] = a.Aqk[p.cid * C * C + e];
    FOR(e, C * V) {
        int i = e / V, c = e % V;
        dOs[i * LV + c] = i < p.n ? bf2f(a.dO[v_at(a, p.b, p.t0 + i, p.j) + c]) : 0.0f;
    }
    sync_();
    float *dDig = a.dDi + p.cid * C * V;
    block_mm(C, V, mat(Aq, 1, LC), mat(dOs, LV, 1), C, no_mat(), no_mat(), 0,
             [&](int r, int c, float v, float) { dDig[r * V + c] = v; });
}

// ---- reverse state pass, one block per (b, value head, V tile) ----------------------------------
// dS starts at the final-state gradient. For chunks in reverse: dh[n] = dS (gradient w.r.t. the
// chunk-end state); dΔ = dΔ_intra + kg dS; dS = Diag(e^{G_last}) dS + qgᵀ dO - wᵀ dΔ. Double
// buffered as state_body (dO lands as raw bf16 and is widened once it is there).
__host__ __device__ inline int rstate_buf_floats(int C, int K, int Vt) {
    // Ws, KGs, QGs, dDs, dO (bf16: half a float each), gls
    return 2 * C * pad8(K) + C * pad4(K) + C * pad8(Vt) + C * Vt / 2 + K;
}
__host__ __device__ void rstate_prefetch_(const TcArgs &a, int64_t cid, int nc, int v0,
                                          float *buf) {
    const int tid = tid_(), nth = nth_();
    const int C = a.C, K = a.K, V = a.V, Vt = a.Vt, LW = pad8(K), LG = pad4(K), LT = pad8(Vt);
    const int64_t bj = cid / a.NT;
    const int b = (int)(bj / a.HV), j = (int)(bj % a.HV), t0 = nc * C;
    float *Ws = buf, *KGs = Ws + C * LW, *QGs = KGs + C * LG, *dDs = QGs + C * LW;
    kda_bf16 *dOb = (kda_bf16 *)(dDs + C * LT);
    float *gls = (float *)(dOb + C * Vt);
    const int K4 = K / 4, T4 = Vt / 4, T8 = Vt / 8;
    FOR(e, C * K4) {
        int i = e / K4, c = e % K4 * 4;
        cp16_(&Ws[i * LW + c], &a.w[cid * C * K + i * K + c], a.async);
        cp16_(&KGs[i * LG + c], &a.kg[cid * C * K + i * K + c], a.async);
        cp16_(&QGs[i * LW + c], &a.qg[cid * C * K + i * K + c], a.async);
    }
    FOR(e, C * T4) {
        int i = e / T4, c = e % T4 * 4;
        cp16_(&dDs[i * LT + c], &a.dDi[cid * C * V + (int64_t)i * V + v0 + c], a.async);
    }
    FOR(e, C * T8) { // rows past the end are zeroed when widened
        int i = e / T8, c = e % T8 * 8;
        if (t0 + i < a.T)
            cp16_(&dOb[i * Vt + c], &a.dO[v_at(a, b, t0 + i, j) + v0 + c], a.async && a.dO_al16);
    }
    FOR(e, K4) cp16_(&gls[4 * e], &a.gl[cid * K + 4 * e], a.async);
    cp_commit_();
}
__host__ __device__ void state_bwd_body(const TcArgs &a, int64_t blk, float *sm) {
    const int tid = tid_(), nth = nth_();
    const int C = a.C, K = a.K, V = a.V, Vt = a.Vt, nvt = V / Vt;
    const int LT = pad8(Vt), LW = pad8(K), LG = pad4(K), BUF = rstate_buf_floats(C, K, Vt);
    const int64_t bj = blk / nvt;
    const int v0 = (int)(blk % nvt) * Vt;
    float *dS = sm, *dOs = dS + K * LT, *bufs = dOs + C * LT;

    FOR(e, K * Vt) {
        int x = e / Vt, c = e % Vt;
        dS[x * LT + c] = a.dfinal ? a.dfinal[bj * K * V + x * V + v0 + c] : 0.0f;
    }
    rstate_prefetch_(a, bj * a.NT + a.NT - 1, a.NT - 1, v0, bufs);
    for (int nc = a.NT - 1, par = 0; nc >= 0; nc--, par ^= 1) {
        const int64_t cid = bj * a.NT + nc;
        const int t0 = nc * C;
        float *Ws = bufs + par * BUF, *KGs = Ws + C * LW, *QGs = KGs + C * LG;
        float *dDs = QGs + C * LW;
        const kda_bf16 *dOb = (const kda_bf16 *)(dDs + C * LT);
        const float *gls = (const float *)(dOb + C * Vt);
        cp_wait_();
        sync_(); // chunk nc's tiles have landed; the previous chunk is done with dS and dOs
        if (nc > 0) rstate_prefetch_(a, cid - 1, nc - 1, v0, bufs + (par ^ 1) * BUF);
        FOR(e, C * Vt) {
            int i = e / Vt, c = e % Vt;
            dOs[i * LT + c] = t0 + i < a.T ? bf2f(dOb[i * Vt + c]) : 0.0f;
        }
        FOR(e, K * Vt) {
            int x = e / Vt, c = e % Vt;
            a.dh[cid * K * V + (int64_t)x * V + v0 + c] = dS[x * LT + c];
        }
        float *dDg = a.dD + cid * C * V + v0;
        block_mm(C, Vt, mat(KGs, LG, 1), mat(dS, LT, 1), K, no_mat(), no_mat(), 0,
                 [&](int r, int c, float v, float) { // dDs holds dΔ_intra: += kg dS in place
                     float s = dDs[r * LT + c] + v;
                     dDs[r * LT + c] = s;
                     dDg[(int64_t)r * V + c] = s;
                 });
        sync_();
        block_mm(K, Vt, mat(QGs, 1, LW), mat(dOs, LT, 1), C, mat(Ws, 1, LW), mat(dDs, LT, 1), C,
                 [&](int r, int c, float vq, float vw) {
                     dS[r * LT + c] = gls[r] * dS[r * LT + c] + vq - vw;
                 });
    }
    sync_();
    if (a.dinit) {
        FOR(e, K * Vt) {
            int x = e / Vt, c = e % Vt;
            a.dinit[bj * K * V + x * V + v0 + c] = dS[x * LT + c];
        }
    }
}

// ---- main backward of one chunk (cpu/kda_chunk.c chunk_backward, minus the state gradient) -----
// Given S0 = h[n], dS = dh[n], Δ and the full dΔ: dAqk, the inter-chunk parts of dq/dk/dΓ,
// dw = -dΔ S0ᵀ, the WY backward, dL = -Akkᵀ dAkk Akkᵀ, the pairwise intra terms, dβ, dv, and
// dg = the reverse chunk-local cumsum of dΓ.
__host__ __device__ void bwd_body(const TcArgs &a, int64_t blk, float *sm) {
    const int tid = tid_(), nth = nth_();
    const int C = a.C, K = a.K, V = a.V, Vt = a.Vt, R = SUB;
    const int LK = pad4(K), LV = pad4(V), LC = pad4(C), LT = pad4(Vt);
    const ChunkPos p = chunk_pos(a, blk);
    const int n = p.n;
    const bool off = has_off(C, n);
    const float scale = a.scale;
    const int CK = C * LK;
    // Shared tiles that live in different steps share memory (108 KB at K 32 / V 64 / C 32: two
    // blocks per SM): X holds Tm in (2), the state tiles S0t | dSt in (3), then dAkk | M from (4);
    // dw is T3 (negated in place) from (3) to (4); the off-diagonal factors live in the halves of
    // T1..T3 that their step does not use: Kf = T1[:16], Kr = T2[:16] in (1), then from (6)
    // Qf = T1[:16], Kfb = T2[:16], Kr = T3[16:] while (7) writes T1[16:], T2[16:], T3[:16].
    float *Qs = sm, *Ks = Qs + CK, *Gs = Ks + CK, *Kb = Gs + CK, *dq = Kb + CK, *dk = dq + CK;
    float *dG = dk + CK, *tk = dG + CK, *T1 = tk + CK, *T2 = T1 + CK, *T3 = T2 + CK, *dw = T3;
    float *dOs = T3 + CK, *Ds = dOs + C * LV, *dDs = Ds + C * LV, *Vs = dDs + C * LV;
    float *X = Vs + C * LV, *Tm = X, *S0t = X, *dSt = X + K * LT, *dAkk = X, *Mm = X + C * LC;
    float *KK = X + bwd_x_floats(C, K, Vt), *Ak = KK + C * LC, *dAqk = Ak + C * LC;
    float *bs = dAqk + C * LC, *dbs = bs + C, *dGl = dbs + C;
    float *Kf1 = T1, *Kr1 = T2, *Qf = T1, *Kfb = T2, *Kr = T3 + R * LK;

    // (0) gather the chunk; zero the accumulators
    FOR(e, C * K) {
        int i = e / K, c = e % K, t = p.t0 + i, x = i * LK + c;
        bool in = i < n;
        Qs[x] = in ? bf2f(a.q[qk_at(a, p.b, t, p.hq) + c]) : 0.0f;
        Ks[x] = in ? bf2f(a.k[qk_at(a, p.b, t, p.hq) + c]) : 0.0f;
        Gs[x] = in ? a.gcum[g_at(a, p.b, t, p.j) + c] : 0.0f;
        dq[x] = dk[x] = dG[x] = dw[x] = tk[x] = 0.0f;
    }
    FOR(e, C * V) {
        int i = e / V, c = e % V, t = p.t0 + i, x = i * LV + c;
        bool in = i < n;
        Vs[x] = in ? bf2f(a.v[v_at(a, p.b, t, p.j) + c]) : 0.0f;
        dOs[x] = in ? bf2f(a.dO[v_at(a, p.b, t, p.j) + c]) : 0.0f;
        Ds[x] = a.D[p.cid * C * V + e];
        dDs[x] = a.dD[p.cid * C * V + e];
    }
    FOR(i, C) bs[i] = i < n ? a.beta[beta_at(a, p.b, p.t0 + i, p.j)] : 0.0f;
    FOR(c, K) dGl[c] = 0.0f;
    sync_();

    // (1) KK (strict lower; L = β_i KK): the diagonal sub-blocks pairwise, the off-diagonal one
    //     factored through row R (Kf = k_i e^{G_i - G_R}, Kr = k_j e^{G_R - G_j}); dAqk =
    //     mask_{j<=i}(dO Δᵀ) on the tensor cores; Kb = β k e^G; Akk := I
    if (off) {
        FOR(e, SUB * K) {
            int i = e / K, c = e % K, r = R + i;
            float gR = Gs[R * LK + c], f = r < n ? fexp(Gs[r * LK + c] - gR) : 0.0f;
            Kf1[i * LK + c] = Ks[r * LK + c] * f;
            Kr1[i * LK + c] = Ks[i * LK + c] * fexp(gR - Gs[i * LK + c]);
        }
    }
    FOR(e, C * C) {
        int i = e / C, jj = e % C;
        Ak[i * LC + jj] = i == jj ? 1.0f : 0.0f;
        if (jj >= i || (i / SUB != jj / SUB && !off)) KK[i * LC + jj] = 0.0f;
    }
    FOR(e, C * SUB) { // the strictly lower pairs of the diagonal sub-blocks (as intra_body)
        int i = e / SUB, jj = i / SUB * SUB + e % SUB;
        if (jj >= i) continue;
        float kk = 0.0f;
        if (i < n)
            for (int c = 0; c < K; c++)
                kk += Ks[i * LK + c] * Ks[jj * LK + c] * fexp(Gs[i * LK + c] - Gs[jj * LK + c]);
        KK[i * LC + jj] = kk;
    }
    FOR(e, C * K) {
        int i = e / K, c = e % K;
        Kb[i * LK + c] = bs[i] * Ks[i * LK + c] * fexp(Gs[i * LK + c]);
    }
    block_mm(C, C, mat(dOs, LV, 1), mat(Ds, 1, LV), V, no_mat(), no_mat(), 0,
             [&](int r, int c, float v, float) { dAqk[r * LC + c] = r < n && c <= r ? v : 0.0f; });
    sync_();
    if (off) {
        block_mm(SUB, SUB, mat(Kf1, LK, 1), mat(Kr1, 1, LK), K, no_mat(), no_mat(), 0,
                 [&](int r, int c, float v, float) { KK[(R + r) * LC + c] = v; });
    }
    sync_();

    // (2) Akk = (I + L)^-1 (as intra_body, with L = β_i KK)
    for (int I = warp_(); I * SUB < n; I += nwarp_()) {
        const int r0 = I * SUB, nb = imin(SUB, n - r0);
        for (int m = 0; m + 1 < nb; m++) {
            const int cols = m + 1;
            WFOR(e, (nb - 1 - m) * cols) {
                int r = r0 + m + 1 + e / cols, c = r0 + e % cols;
                Ak[r * LC + c] -= bs[r] * KK[r * LC + r0 + m] * Ak[(r0 + m) * LC + c];
            }
            syncwarp_();
        }
    }
    sync_();
    if (off) {
        block_mm(SUB, SUB, mat(KK + R * LC, LC, 1), mat(Ak, LC, 1), SUB, no_mat(), no_mat(), 0,
                 [&](int r, int c, float v, float) { Tm[r * LC + c] = bs[R + r] * v; });
        sync_();
        block_mm(SUB, SUB, mat(Ak + R * LC + R, LC, 1), mat(Tm, LC, 1), SUB, no_mat(), no_mat(), 0,
                 [&](int r, int c, float v, float) { Ak[(R + r) * LC + c] = -v; });
        sync_();
    }

    // (3) state terms, V tile by tile, summed on the tensor cores: T1 = dO S0ᵀ, T2 = Δ dSᵀ,
    //     T3 = dΔ S0ᵀ [C, K]; dΓ_last += e^{G_last} Σ_v dS S0
    const float *Gl = Gs + (n - 1) * LK;
    for (int v0 = 0; v0 < V; v0 += Vt) {
        FOR(e, K * Vt) {
            int x = e / Vt, c = e % Vt;
            S0t[x * LT + c] = a.h[p.cid * K * V + (int64_t)x * V + v0 + c];
            dSt[x * LT + c] = a.dh[p.cid * K * V + (int64_t)x * V + v0 + c];
        }
        sync_();
        const bool first = v0 == 0;
        block_mm(C, K, mat(dOs + v0, LV, 1), mat(S0t, 1, LT), Vt, mat(dDs + v0, LV, 1),
                 mat(S0t, 1, LT), Vt, [&](int r, int c, float vo, float vd) {
                     T1[r * LK + c] = (first ? 0.0f : T1[r * LK + c]) + vo;
                     T3[r * LK + c] = (first ? 0.0f : T3[r * LK + c]) + vd;
                 });
        block_mm(C, K, mat(Ds + v0, LV, 1), mat(dSt, 1, LT), Vt, no_mat(), no_mat(), 0,
                 [&](int r, int c, float v, float) {
                     T2[r * LK + c] = (first ? 0.0f : T2[r * LK + c]) + v;
                 });
        for (int c = warp_(); c < K; c += nwarp_()) { // a warp per channel
            float s = 0.0f;
            WFOR(vv, Vt) s += dSt[c * LT + vv] * S0t[c * LT + vv];
            s = warp_sum_(s);
            if (lane_() == 0) dGl[c] += fexp(Gl[c]) * s;
        }
        sync_();
    }
    FOR(e, C * K) {
        int i = e / K, c = e % K, x = i * LK + c;
        float eg = fexp(Gs[x]), el = fexp(Gl[c] - Gs[x]);
        float dqi = scale * eg * T1[x], tkv = Ks[x] * el * T2[x];
        dq[x] += dqi; // o has (scale q e^G) S0
        dG[x] += Qs[x] * dqi - tkv;
        dk[x] += el * T2[x]; // S_end has (k e^{G_last - G})ᵀ Δ
        tk[x] = tkv;         // summed into dΓ_last below
        T3[x] = -T3[x];      // dw (Δ = u - w S0)
    }
    sync_();
    for (int c = warp_(); c < K; c += nwarp_()) {
        float s = 0.0f;
        WFOR(i, n) s += tk[i * LK + c];
        s = warp_sum_(s);
        if (lane_() == 0) dGl[c] += s;
    }
    sync_();

    // (4) WY backward: dAkk = dΔ (βv)ᵀ + dw Kbᵀ (strict lower); dVb = Akkᵀ dΔ (into dOs, free
    //     now) with dv = β dVb; dKb = Akkᵀ dw (into tk, free now)
    block_mm(C, C, mat(dDs, LV, 1), mat(Vs, 1, LV), V, mat(dw, LK, 1), mat(Kb, 1, LK), K,
             [&](int r, int c, float vv, float vk) {
                 dAkk[r * LC + c] = r < n && c < r ? bs[c] * vv + vk : 0.0f;
             });
    block_mm(C, V, mat(Ak, 1, LC), mat(dDs, LV, 1), C, no_mat(), no_mat(), 0,
             [&](int r, int c, float v, float) {
                 dOs[r * LV + c] = v;
                 if (r < n) a.dv[v_at(a, p.b, p.t0 + r, p.j) + c] = stbf(bs[r] * v);
             });
    block_mm(C, K, mat(Ak, 1, LC), mat(dw, LK, 1), C, no_mat(), no_mat(), 0,
             [&](int r, int c, float v, float) { tk[r * LK + c] = v; });
    sync_();

    // (5) M = Akkᵀ dAkk; Kb = β k e^G: dk += β e^G dKb, dΓ += Kb dKb; dβ = v·dVb + (k e^G)·dKb
    block_mm(C, C, mat(Ak, 1, LC), mat(dAkk, LC, 1), C, no_mat(), no_mat(), 0,
             [&](int r, int c, float v, float) { Mm[r * LC + c] = v; });
    FOR(e, C * K) {
        int i = e / K, c = e % K, x = i * LK + c;
        dk[x] += bs[i] * fexp(Gs[x]) * tk[x];
        dG[x] += Kb[x] * tk[x];
    }
    for (int i = warp_(); i < C; i += nwarp_()) { // a warp per row
        float s = 0.0f;
        WFOR(v, V) s += Vs[i * LV + v] * dOs[i * LV + v];
        WFOR(c, K) s += Ks[i * LK + c] * fexp(Gs[i * LK + c]) * tk[i * LK + c];
        s = warp_sum_(s);
        if (lane_() == 0) dbs[i] = s;
    }
    sync_();

    // (6) dL = -M Akkᵀ on the strict lower triangle (into dAkk, no longer read); the factors of
    //     the off-diagonal sub-block for (7): Qf = q_i e^{G_i - G_R}, Kfb = β_i k_i e^{G_i - G_R}
    //     (rows R.., 0 past the end), Kr = k_j e^{G_R - G_j} (rows ..R-1)
    block_mm(C, C, mat(Mm, LC, 1), mat(Ak, 1, LC), C, no_mat(), no_mat(), 0,
             [&](int r, int c, float v, float) { dAkk[r * LC + c] = r < n && c < r ? -v : 0.0f; });
    if (off) {
        FOR(e, SUB * K) {
            int i = e / K, c = e % K, r = R + i;
            float gR = Gs[R * LK + c], f = r < n ? fexp(Gs[r * LK + c] - gR) : 0.0f;
            Qf[i * LK + c] = Qs[r * LK + c] * f;
            Kfb[i * LK + c] = bs[r] * Ks[r * LK + c] * f;
            Kr[i * LK + c] = Ks[i * LK + c] * fexp(gR - Gs[i * LK + c]);
        }
    }
    sync_();

    // (7) pair terms of Aqk (j <= i) and L (j < i), per (row r, channel c):
    //     rowQ_r = Σ_j a_rj k_j e_rj, rowK_r = Σ_j l_rj k_j e_rj, colX_r = Σ_i (a_ir q_i + l_ir
    //     k_i) e_ir with a = scale dAqk, l = β_i dL_ij, e_ij = e^{Γ_i - Γ_j}; then dq_r += rowQ,
    //     dk_r += rowK + colX, dΓ_r += q_r rowQ + k_r rowK - k_r colX. The off-diagonal sub-block
    //     (rows R.. x columns ..R-1) on the tensor cores through the factors of (6): T1 = rowQ and
    //     T2 = rowK of rows R.., T3 = colX of rows ..R-1.
    if (off) {
        block_mm(SUB, K, mat(dAqk + R * LC, LC, 1), mat(Kr, LK, 1), SUB, mat(dAkk + R * LC, LC, 1),
                 mat(Kr, LK, 1), SUB, [&](int r, int c, float vq, float vl) {
                     bool in = R + r < n;
                     float f = in ? fexp(Gs[(R + r) * LK + c] - Gs[R * LK + c]) : 0.0f;
                     T1[(R + r) * LK + c] = in ? scale * vq * f : 0.0f;
                     T2[(R + r) * LK + c] = in ? bs[R + r] * vl * f : 0.0f;
                 });
        block_mm(SUB, K, mat(dAqk + R * LC, 1, LC), mat(Qf, LK, 1), SUB, mat(dAkk + R * LC, 1, LC),
                 mat(Kfb, LK, 1), SUB, [&](int r, int c, float vq, float vk) {
                     T3[r * LK + c] = (scale * vq + vk) * fexp(Gs[R * LK + c] - Gs[r * LK + c]);
                 });
    }
    sync_();
    FOR(e, C * K) {
        int r = e / K, c = e % K, x = r * LK + c;
        if (r < n) {
            const int s0 = r / SUB * SUB, s1 = imin(n, s0 + SUB); // r's sub-block
            float gr = Gs[x], kr = Ks[x], qr = Qs[x];
            float rq = 0.0f, rk = 0.0f, cx = 0.0f;
            for (int jj = s0; jj <= r; jj++) {
                float kj = Ks[jj * LK + c] * fexp(gr - Gs[jj * LK + c]);
                rq += scale * dAqk[r * LC + jj] * kj;
                rk += bs[r] * dAkk[r * LC + jj] * kj;
            }
            for (int i = r; i < s1; i++) {
                float ex = fexp(Gs[i * LK + c] - gr);
                float av = scale * dAqk[i * LC + r], lv = bs[i] * dAkk[i * LC + r];
                cx += (av * Qs[i * LK + c] + lv * Ks[i * LK + c]) * ex;
            }
            if (off && r >= R) rq += T1[x], rk += T2[x];
            if (off && r < R) cx += T3[x];
            dq[x] += rq;
            dk[x] += rk + cx;
            dG[x] += qr * rq + kr * rk - kr * cx;
        }
    }
    for (int i = warp_(); i < n; i += nwarp_()) {
        float s = 0.0f;
        WFOR(jj, i) s += dAkk[i * LC + jj] * KK[i * LC + jj];
        s = warp_sum_(s);
        if (lane_() == 0) dbs[i] += s;
    }
    sync_();

    // (8) write out: dg = reverse chunk-local cumsum of dΓ (with the Γ_last terms), dq, dk, dβ
    FOR(c, K) {
        float acc = dGl[c];
        for (int i = n - 1; i >= 0; i--) {
            acc += dG[i * LK + c];
            a.dg[g_at(a, p.b, p.t0 + i, p.j) + c] = acc;
        }
    }
    const int gva = a.HV != a.H, heads = gva ? a.HV : a.H, hw = gva ? p.j : p.hq;
    FOR(e, n * K) {
        int i = e / K, c = e % K;
        int64_t o = (((int64_t)p.b * a.T + p.t0 + i) * heads + hw) * K + c;
        a.dq[o] = dq[i * LK + c];
        a.dk[o] = dk[i * LK + c];
    }
    FOR(i, n) a.dbeta[beta_at(a, p.b, p.t0 + i, p.j)] = dbs[i];
}

// ==== v4 (ctx->tc_version == 4; KDA_TC_V=3 selects the v3 bodies above) =======================
// (v5: these bodies with RT = true at the models' dims, see tc_intra5_k; v6, the default, v5's)
// At K 32 / V 64 / chunk 32 (the models' dims; others run v3's intra and main backward):
//   * intra4_body: compile-time dims; q, k, G through cp.async, βv loaded alongside; the dense
//     enumeration of the diagonal pairs; the off-diagonal block beside the forward substitution;
//     with a kept buffer it also keeps Akk and KK;
//   * state4_body / rstate4_body: a TC4_STAGES-deep cp.async pipeline and compile-time dims (other
//     dims: run-time dims, double buffer; v3's forward pass is state4_body<0, 0, 0, 2>); the
//     reverse pass computes dΔ_intra = Aqkᵀ dO itself (one more product in the step's first mma,
//     no extra barrier), so the kept backward has no ddi kernel and the plain backward runs the
//     forward's intra (which writes Aqk); dO is an mma operand in bf16 straight from the copy
//     buffer (exact in TF32);
//   * bwd4_body<C, K, V, KA>: compile-time dims, every input tile copied by cp.async at the start
//     (q, k, v, dO kept in bf16), h and dh in a second copy group, the whole V width of the state
//     terms in one pass, disjoint warp groups running independent products side by side, the
//     diagonal pair sums with shared loads and vector coefficient loads, dg's reverse cumsum as a
//     warp scan; KA (kept forms): Akk and KK from the forward, no inverse (7 block barriers; the
//     plain form inverts as v3 does, 9 barriers; v3: 17);
//   * no output kernel (all dims): the forward state pass computes o = qg h + Aqk Δ per V tile
//     from the chunk-start state beside the state update (output_body's product, same operands).

// A loop unrolled n times on the device (the host compiler gets nothing).
#ifdef __CUDA_ARCH__
#define UNROLL_(n)  _Pragma(KDA_STR_(unroll n))
#define KDA_STR_(x) #x
#else
#define UNROLL_(n)
#endif

// x[0..8) = 8 bf16 at src widened (one 16-byte load when src is 16-byte aligned).
__host__ __device__ inline void ld8bf_(float x[8], const kda_bf16 *src, bool al16) {
#ifdef __CUDA_ARCH__
    if (al16) {
        uint4 u = *(const uint4 *)src;
        unsigned w[4] = {u.x, u.y, u.z, u.w};
        for (int i = 0; i < 4; i++)
            x[2 * i] = __uint_as_float(w[i] << 16),
                  x[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
        return;
    }
#else
    (void)al16;
#endif
    for (int i = 0; i < 8; i++)
        x[i] = bf2f(src[i]);
}

// x[0..4) = p[0..4) (one 16-byte shared load on the device: p is 16-byte aligned).
__host__ __device__ inline void ld4_(float x[4], const float *p) {
#ifdef __CUDA_ARCH__
    float4 v = *(const float4 *)p;
    x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
#else
    for (int i = 0; i < 4; i++)
        x[i] = p[i];
#endif
}

// 16 bytes of zeros (rows past the sequence end in the copy buffers).
__host__ __device__ inline void zero16_(void *dst) {
    float *f = (float *)dst;
    f[0] = f[1] = f[2] = f[3] = 0.0f;
}

// ---- the state passes of v4: an NS-stage cp.async pipeline (chunk n + NS - 1 is copied while
// chunk n computes: the latency of a copy is spread over NS - 1 steps of the chain instead of one)
// and, at the models' dims, compile-time C, K, Vt (the products' k-loops unrolled). Template
// dims 0: the run-time dims of a.

// cp.async.wait_group N: all but this thread's N most recent groups have landed.
template <int N> __host__ __device__ inline void cp_wait_n_() {
#ifdef __CUDA_ARCH__
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}

// Stages of the pipelines at the models' dims (the state passes' blocks: 2 per SM) and elsewhere.
#define TC4_STAGES 4

// ---- forward state pass: h[n] = S; Δ = u - w S; S = Diag(e^{G_last}) S + kgᵀ Δ, one block per
// (b, value head, V tile); v3's state_body is <0, 0, 0, 2>
// with o (state_o): a second S tile (o reads the chunk-start S while the update writes the next)
// and qg, Aqk in every stage
__host__ __device__ inline int state_obuf_floats(int C, int K) {
    return C * pad4(K) + C * pad4(C);
}
__host__ __device__ inline size_t state4_floats(int C, int K, int Vt, int ns, bool with_o) {
    int buf = state_buf_floats(C, K, Vt) + (with_o ? state_obuf_floats(C, K) : 0);
    return (size_t)(with_o ? 2 : 1) * K * pad8(Vt) + (size_t)ns * buf;
}
// RT (v5): w, kg, qg, Aqk come TF32-rounded from intra4_body<.., true> and the shared Δ tile is
// rounded where it is computed (this pass reads it by mma only), so their fragments skip the
// cvt. The Δ written out stays unrounded: the kept layout's h and Δ are kda_fast's as well
// (kda_fast_bwd_kept reads a tc forward's, elementwise).
// A state pass's chunk-start tile S [K, Vt] (row stride LT, shared) into g [chunks, K, V] (h or
// dh), chunk cid, columns v0 .. v0 + Vt, by the block's threads tid of nth. RT (v5): from the
// chunk's base with 32-bit offsets and FOR_N's unrolled passes; else v4's 64-bit indexing. The
// same elements either way.
template <bool RT>
__host__ __device__ inline void store_state_tile_(float *g, const float *S, int64_t cid, int v0,
                                                  int K, int V, int Vt, int LT, int tid, int nth) {
    if (RT) {
        float *gc = g + cid * K * V + v0;
        FOR_N(e, K * Vt, RT) {
            int x = e / Vt, c = e % Vt;
            gc[x * V + c] = S[x * LT + c];
        }
    } else {
        FOR(e, K * Vt) {
            int x = e / Vt, c = e % Vt;
            g[cid * K * V + (int64_t)x * V + v0 + c] = S[x * LT + c];
        }
    }
}

template <int C_, int K_, int VT_, int NS, bool RT> // RT's default: the declaration above
__host__ __device__ void state4_body(const TcArgs &a, int64_t blk, float *sm) {
    const int tid = tid_(), nth = nth_c_<TC_THREADS>();
    const int C = C_ ? C_ : a.C, K = K_ ? K_ : a.K, Vt = VT_ ? VT_ : a.Vt, V = a.V, nvt = V / Vt;
    const bool fo = a.state_o;
    const int LT = pad8(Vt), LW = pad4(K), LG = pad8(K), LQ = pad4(K), LA = pad4(C);
    const int BUF = state_buf_floats(C, K, Vt) + (fo ? state_obuf_floats(C, K) : 0);
    const int64_t bj = blk / nvt;
    const int v0 = (int)(blk % nvt) * Vt, NT = a.NT, b = (int)(bj / a.HV), j = (int)(bj % a.HV);
    float *S = sm, *S2 = fo ? S + K * LT : S, *bufs = S + (fo ? 2 : 1) * K * LT;

    FOR(e, K * Vt) {
        int x = e / Vt, c = e % Vt;
        S[x * LT + c] = a.init_state ? a.init_state[bj * K * V + x * V + v0 + c] : 0.0f;
    }
    for (int s = 0; s < NS - 1; s++) { // the pipeline's first NS - 1 chunks, a group each
        if (s < NT && RT && a.async)
            state_prefetch_<C_, K_, VT_, RT>(a, bj * NT + s, v0, bufs + s * BUF);
        else if (s < NT)
            state_prefetch_<C_, K_, VT_>(a, bj * NT + s, v0, bufs + s * BUF);
        else
            cp_commit_();
    }
    for (int nc = 0; nc < NT; nc++) {
        const int64_t cid = bj * NT + nc;
        float *Ws = bufs + (nc % NS) * BUF, *KGs = Ws + C * LW, *Ds = KGs + C * LG;
        float *gls = Ds + C * LT;
        cp_wait_n_<NS - 2>();
        sync_(); // chunk nc's tiles have landed; chunk nc - 1 is done with S and its buffer
        const int nx = nc + NS - 1;
        if (nx < NT && RT && a.async) // v5: the copies' compile-time form
            state_prefetch_<C_, K_, VT_, RT>(a, cid + NS - 1, v0, bufs + (nx % NS) * BUF);
        else if (nx < NT)
            state_prefetch_<C_, K_, VT_>(a, cid + NS - 1, v0, bufs + (nx % NS) * BUF);
        else
            cp_commit_();
        store_state_tile_<RT>(a.h, S, cid, v0, K, V, Vt, LT, tid, nth);
        float *Dg = a.D + cid * C * V + v0;
        block_mm(C, Vt, matr<RT>(Ws, LW, 1), mat(S, LT, 1), K, no_mat(), no_mat(), 0,
                 [&](int r, int c, float v, float) { // Ds holds u: Δ = u - w S in place
                     float d = Ds[r * LT + c] - v;
                     Ds[r * LT + c] = rnd_<RT>(d); // this pass reads it by mma only
                     Dg[(int64_t)r * V + c] = d;
                 });
        sync_();
        if (!fo) {
            block_mm(
                K, Vt, matr<RT>(KGs, 1, LG), matr<RT>(Ds, LT, 1), C, no_mat(), no_mat(), 0,
                [&](int r, int c, float v, float) { S[r * LT + c] = gls[r] * S[r * LT + c] + v; });
            continue;
        }
        // with o: the next S into S2, and o = qg S + Aqk Δ (output_body's product, on this V tile)
        // from the chunk-start S, side by side (2 tiles per warp); then S and S2 swap
        const float *QG = gls + K, *Aq = QG + C * LQ;
        const int t0 = nc * C, nr = imin(C, a.T - t0);
        block_mm(
            K, Vt, matr<RT>(KGs, 1, LG), matr<RT>(Ds, LT, 1), C, no_mat(), no_mat(), 0,
            [&](int r, int c, float v, float) { S2[r * LT + c] = gls[r] * S[r * LT + c] + v; });
        block_mm(C, Vt, matr<RT>(QG, LQ, 1), mat(S, LT, 1), K, matr<RT>(Aq, LA, 1),
                 matr<RT>(Ds, LT, 1), C, [&](int r, int c, float v1, float v2) {
                     if (r < nr) a.o[v_at(a, b, t0 + r, j) + v0 + c] = stbf(v1 + v2);
                 });
        float *t = S;
        S = S2, S2 = t;
    }
    sync_();
    if (a.final_state) {
        FOR(e, K * Vt) {
            int x = e / Vt, c = e % Vt;
            a.final_state[bj * K * V + x * V + v0 + c] = S[x * LT + c];
        }
    }
}

// ---- reverse state pass with dΔ_intra, one block per (b, value head, V tile)
// For chunks in reverse: dh[n] = dS; dΔ = Aqkᵀ dO + kg dS; dS = Diag(e^{G_last}) dS + qgᵀ dO - wᵀ
// dΔ. The next chunk's w, qg (read as transposes: rows padded to 8 mod 32), kg, Aqk, the dO tile
// (bf16) and e^{G_last} land in the other half of a double buffer while this chunk computes.
__host__ __device__ inline int rstate4_buf_floats(int C, int K, int Vt) {
    // Ws, QGs, KGs, Aq, dO (bf16 rows of Vt + 8: half a float each), gls
    return 2 * C * pad8(K) + C * pad4(K) + C * pad8(C) + C * (Vt + 8) / 2 + K;
}
__host__ __device__ inline size_t rstate4_floats(int C, int K, int Vt, int ns) {
    return (size_t)K * pad8(Vt) + (size_t)C * pad8(Vt) +
           (size_t)ns * (size_t)rstate4_buf_floats(C, K, Vt);
}
// A (v5, every flag allows cp.async): cp.async with no run-time form, 32-bit offsets from the
// chunk's bases (dO's row i is i·HV·V past the chunk's first token), FOR_N's unrolled passes.
template <int C_, int K_, int VT_, bool A = false>
__host__ __device__ void rstate4_prefetch_(const TcArgs &a, int64_t cid, int nc, int v0, int b,
                                           int j, float *buf) {
    const int tid = tid_(), nth = nth_c_<TC_THREADS>();
    const int C = C_ ? C_ : a.C, K = K_ ? K_ : a.K, Vt = VT_ ? VT_ : a.Vt;
    const int LW = pad8(K), LG = pad4(K), LA = pad8(C);
    const int LO = Vt + 8, K4 = K / 4, C4 = C / 4, T8 = Vt / 8;
    const bool as = a.async && a.s_al16, ao = a.async && a.dO_al16;
    const int t0 = nc * C;
    float *Ws = buf, *QGs = Ws + C * LW, *KGs = QGs + C * LW, *Aq = KGs + C * LG;
    kda_bf16 *dOb = (kda_bf16 *)(Aq + C * LA);
    float *gls = (float *)(dOb + C * LO);
    if (A) {
        const float *w = a.w + cid * C * K, *qg = a.qg + cid * C * K, *kg = a.kg + cid * C * K;
        FOR_N(e, C * K4, A) {
            int i = e / K4, c = e % K4 * 4;
            cp16c_<A>(&Ws[i * LW + c], &w[i * K + c], true);
            cp16c_<A>(&QGs[i * LW + c], &qg[i * K + c], true);
            cp16c_<A>(&KGs[i * LG + c], &kg[i * K + c], true);
        }
        const float *aqk = a.Aqk + cid * C * C;
        FOR_N(e, C * C4, A) {
            int i = e / C4, c = e % C4 * 4;
            cp16c_<A>(&Aq[i * LA + c], &aqk[i * C + c], true);
        }
        const kda_bf16 *dO = a.dO + v_at(a, b, t0, j) + v0;
        const int ors = a.HV * a.V;
        FOR_N(e, C * T8, A) {
            int i = e / T8, c = e % T8 * 8;
            if (t0 + i < a.T)
                cp16c_<A>(&dOb[i * LO + c], &dO[i * ors + c], true);
            else
                zero16_(&dOb[i * LO + c]);
        }
        const float *gl = a.gl + cid * K;
        FOR_N(e, K4, A) cp16c_<A>(&gls[4 * e], &gl[4 * e], true);
    } else {
        FOR(e, C * K4) {
            int i = e / K4, c = e % K4 * 4;
            cp16_(&Ws[i * LW + c], &a.w[cid * C * K + i * K + c], as);
            cp16_(&QGs[i * LW + c], &a.qg[cid * C * K + i * K + c], as);
            cp16_(&KGs[i * LG + c], &a.kg[cid * C * K + i * K + c], as);
        }
        FOR(e, C * C4) {
            int i = e / C4, c = e % C4 * 4;
            cp16_(&Aq[i * LA + c], &a.Aqk[cid * C * C + i * C + c], as);
        }
        FOR(e, C * T8) {
            int i = e / T8, c = e % T8 * 8;
            if (t0 + i < a.T)
                cp16_(&dOb[i * LO + c], &a.dO[v_at(a, b, t0 + i, j) + v0 + c], ao);
            else
                zero16_(&dOb[i * LO + c]);
        }
        FOR(e, K4) cp16_(&gls[4 * e], &a.gl[cid * K + 4 * e], as);
    }
    cp_commit_();
}
// RT (v5): w, qg, kg, Aqk come TF32-rounded from intra4_body<.., true> and dΔ is stored rounded
// (every consumer of dΔ is an mma: this pass's and the main backward's), so their fragments skip
// the cvt.
template <int C_, int K_, int VT_, int NS, bool RT = false>
__host__ __device__ void rstate4_body(const TcArgs &a, int64_t blk, float *sm) {
    const int tid = tid_(), nth = nth_c_<TC_THREADS>();
    const int C = C_ ? C_ : a.C, K = K_ ? K_ : a.K, Vt = VT_ ? VT_ : a.Vt, V = a.V, nvt = V / Vt;
    const int LT = pad8(Vt), LW = pad8(K), LG = pad4(K), LA = pad8(C), LO = Vt + 8;
    const int BUF = rstate4_buf_floats(C, K, Vt), NT = a.NT;
    const int64_t bj = blk / nvt;
    const int v0 = (int)(blk % nvt) * Vt, b = (int)(bj / a.HV), j = (int)(bj % a.HV);
    float *dS = sm, *dDs = dS + K * LT, *bufs = dDs + C * LT;

    FOR(e, K * Vt) {
        int x = e / Vt, c = e % Vt;
        dS[x * LT + c] = a.dfinal ? a.dfinal[bj * K * V + x * V + v0 + c] : 0.0f;
    }
    // chunks in reverse: step s handles chunk NT - 1 - s in buffer s % NS
    const bool pa = RT && a.async && a.s_al16 && a.dO_al16; // v5: the copies' compile-time form
    for (int s = 0; s < NS - 1; s++) {
        if (s < NT && pa)
            rstate4_prefetch_<C_, K_, VT_, RT>(a, bj * NT + NT - 1 - s, NT - 1 - s, v0, b, j,
                                               bufs + s * BUF);
        else if (s < NT)
            rstate4_prefetch_<C_, K_, VT_>(a, bj * NT + NT - 1 - s, NT - 1 - s, v0, b, j,
                                           bufs + s * BUF);
        else
            cp_commit_();
    }
    for (int st = 0; st < NT; st++) {
        const int nc = NT - 1 - st;
        const int64_t cid = bj * NT + nc;
        const float *Ws = bufs + (st % NS) * BUF, *QGs = Ws + C * LW, *KGs = QGs + C * LW;
        const float *Aq = KGs + C * LG;
        const kda_bf16 *dOb = (const kda_bf16 *)(Aq + C * LA);
        const float *gls = (const float *)(dOb + C * LO);
        cp_wait_n_<NS - 2>();
        sync_(); // chunk nc's tiles have landed; the previous step is done with dS, dDs, its half
        const int sx = st + NS - 1;
        if (sx < NT && pa)
            rstate4_prefetch_<C_, K_, VT_, RT>(a, bj * NT + NT - 1 - sx, NT - 1 - sx, v0, b, j,
                                               bufs + (sx % NS) * BUF);
        else if (sx < NT)
            rstate4_prefetch_<C_, K_, VT_>(a, bj * NT + NT - 1 - sx, NT - 1 - sx, v0, b, j,
                                           bufs + (sx % NS) * BUF);
        else
            cp_commit_();
        store_state_tile_<RT>(a.dh, dS, cid, v0, K, V, Vt, LT, tid, nth);
        float *dDg = a.dD + cid * C * V + v0;
        block_mm(C, Vt, matr<RT>(Aq, 1, LA), math(dOb, LO, 1), C, matr<RT>(KGs, LG, 1),
                 mat(dS, LT, 1), K, [&](int r, int c, float vi, float vs) {
                     float d = rnd_<RT>(vi + vs);
                     dDs[r * LT + c] = d;
                     dDg[(int64_t)r * V + c] = d;
                 });
        sync_();
        block_mm(K, Vt, matr<RT>(QGs, 1, LW), math(dOb, LO, 1), C, matr<RT>(Ws, 1, LW),
                 matr<RT>(dDs, LT, 1), C, [&](int r, int c, float vq, float vw) {
                     dS[r * LT + c] = gls[r] * dS[r * LT + c] + vq - vw;
                 });
    }
    sync_();
    if (a.dinit) {
        FOR(e, K * Vt) {
            int x = e / Vt, c = e % Vt;
            a.dinit[bj * K * V + x * V + v0 + c] = dS[x * LT + c];
        }
    }
}

// ---- main backward of one chunk, compile-time dims (the math of bwd_body above)
#define TC4_THREADS 512 // 16 warps; 2 blocks per SM at K 32 / V 64 / chunk 32 (105 KB each)

// The shared-memory plan of bwd4_body (floats): fp32 [C][K + 4] tiles G, Kb, dq, dk, dG, T1, T2,
// T3, tk; bf16 [C][K + 8] q, k and [C][V + 8] v, dO; fp32 [C][V + 4] Δ, dΔ; X = h | dh ([K][V +
// 4] each) until the state terms are done, then dVb [C][V + 4] | dAkk | M ([C][C + 4] each); fp32
// [C][C + 4] KK, Akk, dAqk, Tm (the inverse's temporary); β, dβ [C]; dΓ_last [K].
template <int C, int K, int V> struct Bwd4 {
    static constexpr int LK = K + 4, LV = V + 4, LC = C + 4, LQ = K + 8, LW = V + 8;
    static constexpr int CK = C * LK, CV = C * LV, CC = C * LC;
    static constexpr int HQ = C * LQ / 2, HV_ = C * LW / 2; // bf16 tiles in floats
    static constexpr int XS = 2 * K * LV, XD = CV + 2 * CC, X = XS > XD ? XS : XD;
    static constexpr int floats = 9 * CK + 2 * HQ + 2 * HV_ + 2 * CV + X + 4 * CC + 2 * C + K;
    static_assert(C == 2 * SUB && K % 16 == 0 && V % 16 == 0, "bwd4: chunk 32, K, V % 16");
    static_assert(CK % 4 == 0 && HQ % 4 == 0 && HV_ % 4 == 0 && CV % 4 == 0 && X % 4 == 0 &&
                      CC % 4 == 0,
                  "bwd4: every region starts 16-byte aligned (cp.async)");
};

// KA: Akk and KK come from the kept buffer (a.Akk, a.KK: the forward intra's), so (1)-(3) reduce
// to Kb and the products that need no Akk; else they are computed here (v3's algorithm).
// RT (v5): the mma-only fp32 operands are TF32 values and their fragments skip the cvt: dΔ
// (rstate4_body<.., true> stores it rounded), Akk (KA: intra4_body<.., true> stores it rounded;
// the plain form's Akk is the forward substitution's, read elementwise, so it keeps the cvt), and
// the ones rounded here where they are written: dw, the first dAkk (read by (5) only), M, and
// (7)'s factors Qf, Kfb, Kr. Not: Δ (the kept layout's is kda_fast's too: stored unrounded), h,
// dh (dΓ_last's Σ dS S0), Kb (dΓ), dAqk and the second dAkk (the pair sums).
// NF (v6, with RT): the chunk is full, n = C at compile time (bwd6_body's choice), so the loops
// over its rows have constant trip counts and the row guards fold away; the same items in the
// same order, so the same bits as NF = false.
template <int C, int K, int V, bool KA, bool RT = false, bool NF = false>
__host__ __device__ void bwd4_body(const TcArgs &a, int64_t blk, float *sm) {
    typedef Bwd4<C, K, V> P;
    constexpr int LK = P::LK, LV = P::LV, LC = P::LC, LQ = P::LQ, LW = P::LW, R = SUB;
    constexpr int CK = P::CK, CV = P::CV, CC = P::CC;
#ifdef __CUDA_ARCH__
    const int tid = (int)threadIdx.x, warp = tid >> 5;
    constexpr int nth = TC4_THREADS, nwarp = TC4_THREADS / 32;
    // v5: launched with exactly nth threads; telling the compiler drops FOR_N's guards e < N
    // where N is a multiple of nth, and bounds the other thread-indexed loops
    if (RT) __builtin_assume(tid < nth);
#else
    const int tid = 0, warp = 0, nth = 1, nwarp = 1;
#endif
    const ChunkPos p = chunk_pos(a, blk);
    const int n = NF ? C : p.n; // NF: the caller checked p.n == C
    const bool off = n > SUB;
    const float scale = a.scale;
    const bool as = a.async && a.s_al16, aq = a.async && a.qk_al16, av = a.async && a.v_al16;
    const bool ad = a.async && a.dO_al16, ag = a.async && a.g_al16;

    float *Gs = sm, *Kb = Gs + CK, *dq = Kb + CK, *dk = dq + CK, *dG = dk + CK, *T1 = dG + CK;
    float *T2 = T1 + CK, *T3 = T2 + CK, *tk = T3 + CK;
    kda_bf16 *Qh = (kda_bf16 *)(tk + CK), *Kh = Qh + C * LQ, *Vh = Kh + C * LQ, *dOh = Vh + C * LW;
    float *Ds = (float *)(dOh + C * LW), *dDs = Ds + CV, *X = dDs + CV;
    float *S0 = X, *dS = X + K * LV, *dVb = X, *dAkk = X + CV, *Mm = dAkk + CC;
    float *KK = X + P::X, *Ak = KK + CC, *dAqk = Ak + CC, *Tm = dAqk + CC;
    float *bs = Tm + CC, *dbs = bs + C, *dGl = dbs + C;
    float *dw = T3, *dKb = T2;                    // from (3) / (4)
    float *Kf1 = dq, *Kr1 = dq + R * LK;          // (1)-(2), before dq is written
    float *Qf = T1, *Kfb = T2, *Kr = T3 + R * LK; // (6)-(7), T1..T3 free halves
    float *At = tk, *Lt = Kb; // (6)-(7): scale dAqkᵀ, (β dL)ᵀ [C][C + 4] (tk, Kb free after (5))
    static_assert(C * LC <= CK, "bwd4: At, Lt fit the tk, Kb tiles");

    // (0) copies: group 1 q, k, v, dO (bf16), G, Δ, dΔ; group 2 h, dh (lands during (1)-(2)).
    //     Rows past the end: zeros (Δ, dΔ are zero there in the scratch already).
    //     AS (v5, when every tensor allows cp.async): the copies without a run-time form and with
    //     32-bit offsets from the chunk's first token (row i of q, k is i·H·K past it, of v, dO
    //     i·HV·V, of G i·HV·K; kda_tc_supported keeps B·T·HV·max(K, V) below 2^31); else v4's.
    const bool all_async = RT && aq && av && ad && ag && as;
    auto copies = [&](auto AS_) {
        constexpr bool AS = decltype(AS_)::value;
        constexpr int K8 = K / 8, V8 = V / 8, K4 = K / 4, V4 = V / 4;
        const int64_t q0 = AS ? qk_at(a, p.b, p.t0, p.hq) : 0,
                      v0 = AS ? v_at(a, p.b, p.t0, p.j) : 0;
        const int64_t g0 = AS ? g_at(a, p.b, p.t0, p.j) : 0;
        const kda_bf16 *qc = a.q + q0, *kc = a.k + q0, *vc = a.v + v0, *oc = a.dO + v0;
        const float *gc = a.gcum + g0;
        const int qrs = a.H * K, vrs = a.HV * V, grs = a.HV * K;
        FOR_N(e, C * K8, RT) {
            int i = e / K8, c = e % K8 * 8;
            if (i < n) {
                if (AS) {
                    const int o = i * qrs + c;
                    cp16c_<AS>(&Qh[i * LQ + c], &qc[o], aq);
                    cp16c_<AS>(&Kh[i * LQ + c], &kc[o], aq);
                } else {
                    const int64_t o = qk_at(a, p.b, p.t0 + i, p.hq) + c;
                    cp16_(&Qh[i * LQ + c], &a.q[o], aq);
                    cp16_(&Kh[i * LQ + c], &a.k[o], aq);
                }
            } else {
                zero16_(&Qh[i * LQ + c]), zero16_(&Kh[i * LQ + c]);
            }
        }
        FOR_N(e, C * V8, RT) {
            int i = e / V8, c = e % V8 * 8;
            if (i < n) {
                if (AS) {
                    const int o = i * vrs + c;
                    cp16c_<AS>(&Vh[i * LW + c], &vc[o], av);
                    cp16c_<AS>(&dOh[i * LW + c], &oc[o], ad);
                } else {
                    const int64_t o = v_at(a, p.b, p.t0 + i, p.j) + c;
                    cp16_(&Vh[i * LW + c], &a.v[o], av);
                    cp16_(&dOh[i * LW + c], &a.dO[o], ad);
                }
            } else {
                zero16_(&Vh[i * LW + c]), zero16_(&dOh[i * LW + c]);
            }
        }
        FOR_N(e, C * K4, RT) {
            int i = e / K4, c = e % K4 * 4;
            if (i < n) {
                if (AS)
                    cp16c_<AS>(&Gs[i * LK + c], &gc[i * grs + c], ag);
                else
                    cp16_(&Gs[i * LK + c], &a.gcum[g_at(a, p.b, p.t0 + i, p.j) + c], ag);
            } else {
                zero16_(&Gs[i * LK + c]);
            }
        }
        const float *D = a.D + p.cid * C * V, *dD = a.dD + p.cid * C * V;
        FOR_N(e, C * V4, RT) {
            int i = e / V4, c = e % V4 * 4;
            cp16c_<AS>(&Ds[i * LV + c], &D[i * V + c], as);
            cp16c_<AS>(&dDs[i * LV + c], &dD[i * V + c], as);
        }
        if (KA) {
            constexpr int C4 = C / 4;
            const float *akg = a.Akk + p.cid * C * C, *kkg = a.KK + p.cid * C * C;
            FOR_N(e, C * C4, RT) {
                int i = e / C4, c = e % C4 * 4;
                cp16c_<AS>(&Ak[i * LC + c], &akg[i * C + c], as);
                cp16c_<AS>(&KK[i * LC + c], &kkg[i * C + c], as);
            }
        }
        cp_commit_();
        const float *h = a.h + p.cid * K * V, *dh = a.dh + p.cid * K * V;
        FOR_N(e, K * V4, RT) {
            int x = e / V4, c = e % V4 * 4;
            cp16c_<AS>(&S0[x * LV + c], &h[x * V + c], as);
            cp16c_<AS>(&dS[x * LV + c], &dh[x * V + c], as);
        }
        cp_commit_();
    };
    if (all_async)
        copies(Bool_<true>());
    else
        copies(Bool_<false>());
    FOR_N(i, C, RT) bs[i] = i < n ? a.beta[beta_at(a, p.b, p.t0 + i, p.j)] : 0.0f;
    FOR_N(c, K, RT) dGl[c] = 0.0f;
    const float *Gl = Gs + (n - 1) * LK;
    if (KA) {
        // (1-3, kept Akk and KK) after both groups: Kb = β k e^G; warps 0-7 T1 = dO S0ᵀ and T3 =
        //     dΔ S0ᵀ, warps 8-15 dAqk = mask(dO Δᵀ) and T2 = Δ dSᵀ (16 k-steps per warp); then
        //     dΓ_last's state part and the state terms' elementwise part
        cp_wait_();
        sync_();
        FOR_N(e, C * K, RT) {
            int i = e / K, c = e % K;
            Kb[i * LK + c] = bs[i] * bf2f(Kh[i * LQ + c]) * fexp(Gs[i * LK + c]);
        }
        block_mm_w(0, 8, C, K, math(dOh, LW, 1), mat(S0, 1, LV), V, matr<RT>(dDs, LV, 1),
                   mat(S0, 1, LV), V, [&](int r, int c, float vo, float vd) {
                       T1[r * LK + c] = vo;
                       T3[r * LK + c] = vd;
                   });
        block_mm_w(
            8, 8, C, C, math(dOh, LW, 1), mat(Ds, 1, LV), V, no_mat(), no_mat(), 0,
            [&](int r, int c, float v, float) { dAqk[r * LC + c] = r < n && c <= r ? v : 0.0f; });
        block_mm_w(8, 8, C, K, mat(Ds, LV, 1), mat(dS, 1, LV), V, no_mat(), no_mat(), 0,
                   [&](int r, int c, float v, float) { T2[r * LK + c] = v; });
        sync_();
        for (int c = warp; c < K; c += nwarp) {
            float s = 0.0f;
            WFOR(vv, V) s += dS[c * LV + vv] * S0[c * LV + vv];
            s = warp_sum_(s);
            if (lane_() == 0) dGl[c] = fexp(Gl[c]) * s;
        }
        FOR_N(e, C * K, RT) {
            int i = e / K, c = e % K, x = i * LK + c;
            float eg = fexp(Gs[x]), el = fexp(Gl[c] - Gs[x]), kx = bf2f(Kh[i * LQ + c]);
            float dqi = scale * eg * T1[x], tkv = kx * el * T2[x];
            dq[x] = dqi;
            dG[x] = bf2f(Qh[i * LQ + c]) * dqi - tkv;
            dk[x] = el * T2[x];
            tk[x] = tkv;
            T3[x] = rnd_<RT>(-T3[x]); // dw: read by mma only
        }
        sync_();
    } else {
        cp_wait1_();
        sync_();

        // (1) the off-diagonal factors of KK (Kf1 = k_i e^{G_i - G_R} for rows R.., 0 past the end;
        //     Kr1 = k_j e^{G_R - G_j} for rows ..R-1); Akk := I; KK's diagonal sub-blocks pairwise
        //     (strict lower); Kb = β k e^G; dAqk = mask_{j<=i}(dO Δᵀ) on the tensor cores
        if (off) {
            FOR_N(e, SUB * K, RT) {
                int i = e / K, c = e % K, r = R + i;
                float gR = Gs[R * LK + c], f = r < n ? fexp(Gs[r * LK + c] - gR) : 0.0f;
                Kf1[i * LK + c] = bf2f(Kh[r * LQ + c]) * f;
                Kr1[i * LK + c] = bf2f(Kh[i * LQ + c]) * fexp(gR - Gs[i * LK + c]);
            }
        }
        FOR_N(e, C * C, RT) {
            int i = e / C, jj = e % C;
            Ak[i * LC + jj] = i == jj ? 1.0f : 0.0f;
            if (jj >= i || (i / SUB != jj / SUB && !off)) KK[i * LC + jj] = 0.0f;
        }
        FOR_N(e, C * SUB, RT) {
            int i = e / SUB, jj = i / SUB * SUB + e % SUB;
            if (jj >= i) continue;
            float kk = 0.0f;
            if (i < n) {
                UNROLL_(8)
                for (int c = 0; c < K; c++)
                    kk += bf2f(Kh[i * LQ + c]) * bf2f(Kh[jj * LQ + c]) *
                          fexp(Gs[i * LK + c] - Gs[jj * LK + c]);
            }
            KK[i * LC + jj] = kk;
        }
        FOR_N(e, C * K, RT) {
            int i = e / K, c = e % K;
            Kb[i * LK + c] = bs[i] * bf2f(Kh[i * LQ + c]) * fexp(Gs[i * LK + c]);
        }
        block_mm(
            C, C, math(dOh, LW, 1), mat(Ds, 1, LV), V, no_mat(), no_mat(), 0,
            [&](int r, int c, float v, float) { dAqk[r * LC + c] = r < n && c <= r ? v : 0.0f; });
        cp_wait_(); // h, dh
        sync_();

        // (2) side by side: warps 0-1 the forward substitution of Akk's diagonal sub-blocks (one
        //     each); warps 2-3 KK's off-diagonal sub-block; warps 4-11 T1 = dO S0ᵀ and T3 = dΔ S0ᵀ,
        //     warps 12-15 T2 = Δ dSᵀ (the state terms, the whole V width)
        if (in_group_(0, 2)) {
            for (int I = group_warp_(0); I * SUB < n; I += group_nwarp_(2)) {
                const int r0 = I * SUB, nb = imin(SUB, n - r0);
                for (int m = 0; m + 1 < nb; m++) {
                    const int cols = m + 1;
                    WFOR(e, (nb - 1 - m) * cols) {
                        int r = r0 + m + 1 + e / cols, c = r0 + e % cols;
                        Ak[r * LC + c] -= bs[r] * KK[r * LC + r0 + m] * Ak[(r0 + m) * LC + c];
                    }
                    syncwarp_();
                }
            }
        }
        if (off)
            block_mm_w(2, 2, SUB, SUB, mat(Kf1, LK, 1), mat(Kr1, 1, LK), K, no_mat(), no_mat(), 0,
                       [&](int r, int c, float v, float) { KK[(R + r) * LC + c] = v; });
        block_mm_w(4, 8, C, K, math(dOh, LW, 1), mat(S0, 1, LV), V, matr<RT>(dDs, LV, 1),
                   mat(S0, 1, LV), V, [&](int r, int c, float vo, float vd) {
                       T1[r * LK + c] = vo;
                       T3[r * LK + c] = vd;
                   });
        block_mm_w(12, 4, C, K, mat(Ds, LV, 1), mat(dS, 1, LV), V, no_mat(), no_mat(), 0,
                   [&](int r, int c, float v, float) { T2[r * LK + c] = v; });
        sync_();

        // (3) warps 0-1: Akk's off-diagonal block Inv_10 = -Inv_11 (β L_10) Inv_00 (a barrier of
        //     their own between the two products); warps 2-15: dΓ_last = e^{G_last} Σ_v dS S0 (a
        //     warp per channel) and the state terms' elementwise part
        if (off && in_group_(0, 2)) {
            block_mm_w(0, 2, SUB, SUB, mat(KK + R * LC, LC, 1), mat(Ak, LC, 1), SUB, no_mat(),
                       no_mat(), 0,
                       [&](int r, int c, float v, float) { Tm[r * LC + c] = bs[R + r] * v; });
            bar_sub_(1, 64); // warps 0-1
            block_mm_w(0, 2, SUB, SUB, mat(Ak + R * LC + R, LC, 1), mat(Tm, LC, 1), SUB, no_mat(),
                       no_mat(), 0,
                       [&](int r, int c, float v, float) { Ak[(R + r) * LC + c] = -v; });
        }
        if (in_group_(2, nwarp > 1 ? nwarp - 2 : 1)) {
            for (int c = group_warp_(2); c < K; c += group_nwarp_(nwarp - 2)) {
                float s = 0.0f;
                WFOR(vv, V) s += dS[c * LV + vv] * S0[c * LV + vv];
                s = warp_sum_(s);
                if (lane_() == 0) dGl[c] = fexp(Gl[c]) * s;
            }
        }
        GFOR(e, C * K, 2, nwarp - 2) {
            int i = e / K, c = e % K, x = i * LK + c;
            float eg = fexp(Gs[x]), el = fexp(Gl[c] - Gs[x]), kx = bf2f(Kh[i * LQ + c]);
            float dqi = scale * eg * T1[x], tkv = kx * el * T2[x];
            dq[x] = dqi; // o has (scale q e^G) S0
            dG[x] = bf2f(Qh[i * LQ + c]) * dqi - tkv;
            dk[x] = el * T2[x];       // S_end has (k e^{G_last - G})ᵀ Δ
            tk[x] = tkv;              // summed into dΓ_last in (4)
            T3[x] = rnd_<RT>(-T3[x]); // dw (Δ = u - w S0): read by mma only
        }
        sync_();
    } // KA

    // (4) dΓ_last += Σ_i tk (a warp per channel); the WY backward, 12 k-steps per warp: warps 0-7
    //     dAkk = dΔ (βv)ᵀ + dw Kbᵀ (strict lower); warps 8-15 dVb = Akkᵀ dΔ (dv = β dVb) and
    //     dKb = Akkᵀ dw
    for (int c = warp; c < K; c += nwarp) {
        float s = 0.0f;
        WFOR_CT(i, C, n, RT) s += tk[i * LK + c];
        s = warp_sum_(s);
        if (lane_() == 0) dGl[c] += s;
    }
    block_mm_w(0, 8, C, C, matr<RT>(dDs, LV, 1), math(Vh, 1, LW), V, matr<RT>(dw, LK, 1),
               mat(Kb, 1, LK), K, [&](int r, int c, float vv, float vk) {
                   dAkk[r * LC + c] = rnd_<RT>(r < n && c < r ? bs[c] * vv + vk : 0.0f);
               });
    block_mm_w(8, 8, C, V, matr < RT && KA > (Ak, 1, LC), matr<RT>(dDs, LV, 1), C, no_mat(),
               no_mat(), 0, [&](int r, int c, float v, float) {
                   dVb[r * LV + c] = v;
                   if (r < n) a.dv[v_at(a, p.b, p.t0 + r, p.j) + c] = stbf(bs[r] * v);
               });
    block_mm_w(8, 8, C, K, matr < RT && KA > (Ak, 1, LC), matr<RT>(dw, LK, 1), C, no_mat(),
               no_mat(), 0, [&](int r, int c, float v, float) { dKb[r * LK + c] = v; });
    sync_();

    // (5) M = Akkᵀ dAkk (warps 0-7); Kb = β k e^G: dk += β e^G dKb, dΓ += Kb dKb; dβ = v·dVb +
    //     (k e^G)·dKb (a warp per row)
    block_mm_w(0, 8, C, C, matr < RT && KA > (Ak, 1, LC), matr<RT>(dAkk, LC, 1), C, no_mat(),
               no_mat(), 0, [&](int r, int c, float v, float) { Mm[r * LC + c] = rnd_<RT>(v); });
    FOR_N(e, C * K, RT) {
        int i = e / K, c = e % K, x = i * LK + c;
        dk[x] += bs[i] * fexp(Gs[x]) * dKb[x];
        dG[x] += Kb[x] * dKb[x];
    }
    for (int i = warp; i < C; i += nwarp) {
        float s = 0.0f;
        WFOR(v, V) s += bf2f(Vh[i * LW + v]) * dVb[i * LV + v];
        WFOR(c, K) s += bf2f(Kh[i * LQ + c]) * fexp(Gs[i * LK + c]) * dKb[i * LK + c];
        s = warp_sum_(s);
        if (lane_() == 0) dbs[i] = s;
    }
    sync_();

    // (6) dL = -M Akkᵀ on the strict lower triangle (into dAkk); the factors of the off-diagonal
    //     sub-block for (7): Qf = q_i e^{G_i - G_R}, Kfb = β_i k_i e^{G_i - G_R} (rows R.., 0 past
    //     the end), Kr = k_j e^{G_R - G_j} (rows ..R-1)
    block_mm(C, C, matr<RT>(Mm, LC, 1), matr < RT && KA > (Ak, 1, LC), C, no_mat(), no_mat(), 0,
             [&](int r, int c, float v, float) {
                 float l = r < n && c < r ? -v : 0.0f;
                 dAkk[r * LC + c] = l;
                 Lt[c * LC + r] = bs[r] * l;
             });
    FOR_N(e, C * C, RT) {
        int i = e / C, jj = e % C;
        At[jj * LC + i] = scale * dAqk[i * LC + jj];
    }
    if (off) {
        FOR_N(e, SUB * K, RT) {
            int i = e / K, c = e % K, r = R + i;
            float gR = Gs[R * LK + c], f = r < n ? fexp(Gs[r * LK + c] - gR) : 0.0f;
            Qf[i * LK + c] = rnd_<RT>(bf2f(Qh[r * LQ + c]) * f); // (7)'s mma operands only
            Kfb[i * LK + c] = rnd_<RT>(bs[r] * bf2f(Kh[r * LQ + c]) * f);
            Kr[i * LK + c] = rnd_<RT>(bf2f(Kh[i * LQ + c]) * fexp(gR - Gs[i * LK + c]));
        }
    }
    sync_();

    // (7) pair terms of Aqk (j <= i) and L (j < i) per (row r, channel c) (bwd_body's (7)): the
    //     off-diagonal sub-block on the tensor cores (warps 0-3: T1 = rowQ, T2 = rowK of rows R..;
    //     warps 4-7: T3 = colX of rows ..R-1), the diagonal sub-blocks pairwise, added into dq,
    //     dk, dΓ at once (the off-diagonal part is added in (8)). The pairwise sums run over the
    //     whole sub-block with one exponential per pair, e^{-|G_r - G_j|}: the row sums need
    //     e^{G_r - G_j} for j <= r, the column sum e^{G_j - G_r} for j >= r, both <= 0 in the
    //     exponent (G is non-increasing), and the other side's entries of dAqk and dL are zero
    //     (masked), so the one finite factor serves both.
    if (off) {
        block_mm_w(0, 4, SUB, K, mat(dAqk + R * LC, LC, 1), matr<RT>(Kr, LK, 1), SUB,
                   mat(dAkk + R * LC, LC, 1), matr<RT>(Kr, LK, 1), SUB,
                   [&](int r, int c, float vq, float vl) {
                       bool in = R + r < n;
                       float f = in ? fexp(Gs[(R + r) * LK + c] - Gs[R * LK + c]) : 0.0f;
                       T1[(R + r) * LK + c] = in ? scale * vq * f : 0.0f;
                       T2[(R + r) * LK + c] = in ? bs[R + r] * vl * f : 0.0f;
                   });
        block_mm_w(4, 4, SUB, K, mat(dAqk + R * LC, 1, LC), matr<RT>(Qf, LK, 1), SUB,
                   mat(dAkk + R * LC, 1, LC), matr<RT>(Kfb, LK, 1), SUB,
                   [&](int r, int c, float vq, float vk) {
                       T3[r * LK + c] = (scale * vq + vk) * fexp(Gs[R * LK + c] - Gs[r * LK + c]);
                   });
    }
    // (a thread: channel c of rows r1 and r1 + 8 of one sub-block, which share the loads of G, k,
    // q at every column j; the row coefficients come 4 at a time from dAqk, dL and their
    // transposes At = scale dAqkᵀ, Lt = (β dL)ᵀ)
    FOR_N(e, SUB * K, RT) {
        const int c = e % K, rb = e / K, s0 = rb / (SUB / 2) * SUB, r1 = s0 + rb % (SUB / 2);
        if (r1 >= n) continue;
        const int rr[2] = {r1, r1 + SUB / 2};
        float gr[2], acc[2][3] = {{0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f}};
        for (int h = 0; h < 2; h++)
            gr[h] = Gs[rr[h] * LK + c];
        UNROLL_(4)
        for (int u0 = 0; u0 < SUB; u0 += 4) {
            float gj[4], kj[4], qj[4];
            for (int t = 0; t < 4; t++) {
                const int jj = s0 + u0 + t;
                gj[t] = Gs[jj * LK + c], kj[t] = bf2f(Kh[jj * LQ + c]),
                qj[t] = bf2f(Qh[jj * LQ + c]);
            }
            for (int h = 0; h < 2; h++) {
                float cq[4], cl[4], ca[4], cb[4];
                ld4_(cq, &dAqk[rr[h] * LC + s0 + u0]), ld4_(cl, &dAkk[rr[h] * LC + s0 + u0]);
                ld4_(ca, &At[rr[h] * LC + s0 + u0]), ld4_(cb, &Lt[rr[h] * LC + s0 + u0]);
                for (int t = 0; t < 4; t++) {
                    float ex = fexp(-fabsf(gr[h] - gj[t]));
                    acc[h][0] += cq[t] * kj[t] * ex;
                    acc[h][1] += cl[t] * kj[t] * ex;
                    acc[h][2] += (ca[t] * qj[t] + cb[t] * kj[t]) * ex;
                }
            }
        }
        for (int h = 0; h < 2; h++) {
            const int r = rr[h], x = r * LK + c;
            if (r >= n) break;
            float kr = bf2f(Kh[r * LQ + c]), qr = bf2f(Qh[r * LQ + c]);
            float rq = acc[h][0] * scale, rk = acc[h][1] * bs[r], cx = acc[h][2];
            dq[x] += rq;
            dk[x] += rk + cx;
            dG[x] += qr * rq + kr * rk - kr * cx;
        }
    }
    for (int i = warp; i < (RT ? C : n); i += nwarp) { // RT: a warp-uniform guard, the bound C
        if (RT && i >= n) break;
        float s = 0.0f;
        WFOR_CT(jj, C, i, RT) s += dAkk[i * LC + jj] * KK[i * LC + jj];
        s = warp_sum_(s);
        if (lane_() == 0) dbs[i] += s;
    }
    sync_();

    // (8) the off-diagonal pair terms into dΓ; dg = the reverse chunk-local cumsum of dΓ from
    //     dΓ_last (a warp scan per channel, in place); then dq, dk (with their off-diagonal
    //     terms), dg and dβ written out row by row
    for (int c = warp; c < K; c += nwarp) {
        if (off) {
            WFOR_CT(i, C, n, RT) {
                int x = i * LK + c;
                float qx = bf2f(Qh[i * LQ + c]), kx = bf2f(Kh[i * LQ + c]);
                dG[x] += i >= R ? qx * T1[x] + kx * T2[x] : -kx * T3[x];
            }
            syncwarp_();
        }
        warp_rscan_(dG + c, LK, n, dGl[c]);
    }
    sync_();
    const int gva = a.HV != a.H, heads = gva ? a.HV : a.H, hw = gva ? p.j : p.hq;
    if (RT) { // per-chunk bases and 32-bit row offsets (row i is i·heads·K past the first token)
        const int64_t o0 = (((int64_t)p.b * a.T + p.t0) * heads + hw) * K;
        float *dq0 = a.dq + o0, *dk0 = a.dk + o0, *dg0 = a.dg + g_at(a, p.b, p.t0, p.j);
        const int qrs = heads * K, grs = a.HV * K;
        FOR_CT(e, C * K, n * K, RT) {
            int i = e / K, c = e % K, x = i * LK + c;
            float oq = off && i >= R ? T1[x] : 0.0f;
            float ok = off ? (i >= R ? T2[x] : T3[x]) : 0.0f;
            dq0[i * qrs + c] = dq[x] + oq;
            dk0[i * qrs + c] = dk[x] + ok;
            dg0[i * grs + c] = dG[x];
        }
        float *db0 = a.dbeta + beta_at(a, p.b, p.t0, p.j);
        FOR_CT(i, C, n, RT) db0[i * a.HV] = dbs[i];
    } else {
        FOR(e, n * K) {
            int i = e / K, c = e % K, x = i * LK + c;
            float oq = off && i >= R ? T1[x] : 0.0f;
            float ok = off ? (i >= R ? T2[x] : T3[x]) : 0.0f;
            int64_t o = (((int64_t)p.b * a.T + p.t0 + i) * heads + hw) * K + c;
            a.dq[o] = dq[x] + oq;
            a.dk[o] = dk[x] + ok;
            a.dg[g_at(a, p.b, p.t0 + i, p.j) + c] = dG[x];
        }
        FOR(i, n) a.dbeta[beta_at(a, p.b, p.t0 + i, p.j)] = dbs[i];
    }
    (void)nth;
}

// ---- forward intra of one chunk, compile-time dims (the math of intra_body's forward form)
// Shared memory (floats): bf16 [C][K + 8] q, k; fp32 [C][V + 8] βv (v3's operand of u, so that
// both versions round the same values to TF32), [C][K + 4] G, Kb, [C][C + 4] Aqk, L, Akk; the
// off-diagonal factors Qf, Kf, Kr, Kf0 [16][K + 4] and the inverse's temporary Tm [16][C + 4];
// KK [C][C + 4] (kept for the main backward, with Akk, when a.Akk is set); β [C].
template <int C, int K, int V> struct Intra4 {
    static constexpr int LK = K + 4, LC = C + 4, LQ = K + 8, LV = V + 8;
    static constexpr int CK = C * LK, CC = C * LC, HQ = C * LQ / 2, CV = C * LV;
    static constexpr int floats = 2 * HQ + CV + 2 * CK + 4 * CC + 4 * SUB * LK + SUB * LC + C;
    static_assert(C == 2 * SUB && K % 16 == 0 && V % 16 == 0, "intra4: chunk 32, K, V % 16");
    static_assert(HQ % 4 == 0 && CV % 4 == 0 && CK % 4 == 0, "intra4: 16-byte aligned regions");
};

// The t-th pair (i, j), j <= i, of a 16 x 16 lower triangle in row order (t < TRI).
#define TRI (SUB * (SUB + 1) / 2)
__host__ __device__ inline void tri_pair_(int t, int &i, int &j) {
    i = (int)((sqrtf(8.0f * (float)t + 1.0f) - 1.0f) * 0.5f);
    if ((i + 1) * (i + 2) / 2 <= t) i++; // sqrtf rounding, either way
    if (i * (i + 1) / 2 > t) i--;
    j = t - i * (i + 1) / 2;
}

// RT (v5): w, kg, qg, Aqk and the kept Akk are stored TF32-rounded: the state passes and the kept
// main backward read them only as mma operands (u, KK and e^{G_last} are read elementwise: kept
// as they are).
// NF (v6, with RT): a full chunk, n = C at compile time, as bwd4_body's.
template <int C, int K, int V, bool RT = false, bool NF = false>
__host__ __device__ void intra4_body(const TcArgs &a, int64_t blk, float *sm) {
    typedef Intra4<C, K, V> P;
    constexpr int LK = P::LK, LC = P::LC, LQ = P::LQ, LV = P::LV, R = SUB;
#ifdef __CUDA_ARCH__
    const int tid = (int)threadIdx.x;
    constexpr int nth = TC_THREADS;
    if (RT) __builtin_assume(tid < nth); // as bwd4_body's
#else
    const int tid = 0, nth = 1;
#endif
    const ChunkPos p = chunk_pos(a, blk);
    const int n = NF ? C : p.n; // NF: the caller checked p.n == C
    const bool off = n > SUB;
    const float scale = a.scale;
    const bool aq = a.async && a.qk_al16, ag = a.async && a.g_al16;
    kda_bf16 *Qh = (kda_bf16 *)sm, *Kh = Qh + C * LQ;
    float *Vb = (float *)(Kh + C * LQ), *Gs = Vb + P::CV, *Kb = Gs + P::CK, *Aq = Kb + P::CK;
    float *Ls = Aq + P::CC, *Ak = Ls + P::CC, *Qf = Ak + P::CC, *Kf = Qf + SUB * LK;
    float *Kr = Kf + SUB * LK, *Kf0 = Kr + SUB * LK, *Tm = Kf0 + SUB * LK, *KKs = Tm + SUB * LC;
    float *bs = KKs + P::CC;
    const bool keepA = a.Akk != NULL; // write Akk and KK for bwd4_body<.., true>

    // (0) copies (one group): q, k (bf16), G; v as 16-byte loads times β into βv (in flight with
    //     the copies); rows past the end zeros. AS (v5, when q, k, v, G all allow it): the
    //     copies without a run-time form and 32-bit offsets from the chunk's first token, as
    //     bwd4_body's; else v4's.
    if (RT && aq && ag && a.v_al16) {
        constexpr int K8 = K / 8, V8 = V / 8, K4 = K / 4;
        const int64_t q0 = qk_at(a, p.b, p.t0, p.hq), v0 = v_at(a, p.b, p.t0, p.j);
        const kda_bf16 *qc = a.q + q0, *kc = a.k + q0, *vc = a.v + v0;
        const float *gc = a.gcum + g_at(a, p.b, p.t0, p.j),
                    *bc = a.beta + beta_at(a, p.b, p.t0, p.j);
        const int qrs = a.H * K, vrs = a.HV * V, grs = a.HV * K;
        FOR_N(e, C * K8, RT) {
            int i = e / K8, c = e % K8 * 8;
            if (i < n) {
                cp16c_<RT>(&Qh[i * LQ + c], &qc[i * qrs + c], aq);
                cp16c_<RT>(&Kh[i * LQ + c], &kc[i * qrs + c], aq);
            } else {
                zero16_(&Qh[i * LQ + c]), zero16_(&Kh[i * LQ + c]);
            }
        }
        FOR_N(e, C * V8, RT) {
            int i = e / V8, c = e % V8 * 8;
            float x[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            float b = 0.0f;
            if (i < n) {
                ld8bf_(x, &vc[i * vrs + c], true);
                b = bc[i * a.HV];
            }
            for (int u = 0; u < 8; u++)
                Vb[i * LV + c + u] = x[u] * b;
        }
        FOR_N(e, C * K4, RT) {
            int i = e / K4, c = e % K4 * 4;
            if (i < n)
                cp16c_<RT>(&Gs[i * LK + c], &gc[i * grs + c], ag);
            else
                zero16_(&Gs[i * LK + c]);
        }
        cp_commit_();
    } else {
        constexpr int K8 = K / 8, V8 = V / 8, K4 = K / 4;
        FOR(e, C * K8) {
            int i = e / K8, c = e % K8 * 8;
            if (i < n) {
                const int64_t o = qk_at(a, p.b, p.t0 + i, p.hq) + c;
                cp16_(&Qh[i * LQ + c], &a.q[o], aq);
                cp16_(&Kh[i * LQ + c], &a.k[o], aq);
            } else {
                zero16_(&Qh[i * LQ + c]), zero16_(&Kh[i * LQ + c]);
            }
        }
        FOR(e, C * V8) {
            int i = e / V8, c = e % V8 * 8;
            float x[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            float b = 0.0f;
            if (i < n) {
                ld8bf_(x, &a.v[v_at(a, p.b, p.t0 + i, p.j) + c], a.v_al16);
                b = a.beta[beta_at(a, p.b, p.t0 + i, p.j)];
            }
            for (int u = 0; u < 8; u++)
                Vb[i * LV + c + u] = x[u] * b;
        }
        FOR(e, C * K4) {
            int i = e / K4, c = e % K4 * 4;
            if (i < n)
                cp16_(&Gs[i * LK + c], &a.gcum[g_at(a, p.b, p.t0 + i, p.j) + c], ag);
            else
                zero16_(&Gs[i * LK + c]);
        }
        cp_commit_();
    }
    FOR_N(i, C, RT) bs[i] = i < n ? a.beta[beta_at(a, p.b, p.t0 + i, p.j)] : 0.0f;
    cp_wait_();
    sync_();

    // (1) the off-diagonal factors (Qf = q_i e^{G_i - G_R}, Kf = β_i k_i e^{G_i - G_R} for rows
    //     R.., 0 past the end; Kr = k_j e^{G_R - G_j} for rows ..R-1; Kf0 = Kf / β, the main
    //     backward's operand of KK); Akk := I and the zeros; the diagonal sub-blocks' pairs of
    //     Aqk (j <= i) and L = β KK (j < i) in fp32; Kb = β k e^G; qg, kg and e^{G_last} written
    //     out
    if (off) {
        FOR_N(e, SUB * K, RT) {
            int i = e / K, c = e % K, r = R + i;
            float gR = Gs[R * LK + c], f = r < n ? fexp(Gs[r * LK + c] - gR) : 0.0f;
            float kf = bf2f(Kh[r * LQ + c]) * f;
            Qf[i * LK + c] = bf2f(Qh[r * LQ + c]) * f;
            Kf[i * LK + c] = bs[r] * kf;
            Kf0[i * LK + c] = kf;
            Kr[i * LK + c] = bf2f(Kh[i * LQ + c]) * fexp(gR - Gs[i * LK + c]);
        }
    }
    FOR_N(e, C * C, RT) {
        int i = e / C, jj = e % C;
        Ak[i * LC + jj] = i == jj ? 1.0f : 0.0f;
        if (jj > i || (i / SUB != jj / SUB && !off)) Aq[i * LC + jj] = Ls[i * LC + jj] = 0.0f;
        if (jj >= i || (i / SUB != jj / SUB && !off)) KKs[i * LC + jj] = 0.0f;
    }
    // (the pairs j <= i of the two 16 x 16 sub-blocks, 136 each, enumerated densely so that no
    // lane of a warp idles on an upper-triangle pair)
    FOR_N(e, 2 * TRI, RT) {
        int i, jj;
        tri_pair_(e % TRI, i, jj);
        i += e / TRI * SUB, jj += e / TRI * SUB;
        float l = 0.0f, q = 0.0f;
        if (i < n) {
            UNROLL_(8)
            for (int c = 0; c < K; c++) {
                float kd = bf2f(Kh[jj * LQ + c]) * fexp(Gs[i * LK + c] - Gs[jj * LK + c]);
                l += bf2f(Kh[i * LQ + c]) * kd;
                q += bf2f(Qh[i * LQ + c]) * kd;
            }
        }
        Aq[i * LC + jj] = scale * q;
        Ls[i * LC + jj] = jj < i ? bs[i] * l : 0.0f;
        if (jj < i) KKs[i * LC + jj] = l;
    }
    float *qgg = a.qg + p.cid * C * K, *kgg = a.kg + p.cid * C * K;
    const float *Gl = Gs + (n - 1) * LK;
    FOR_N(e, C * K, RT) {
        int i = e / K, c = e % K;
        float g = Gs[i * LK + c], eg = fexp(g), kx = bf2f(Kh[i * LQ + c]);
        Kb[i * LK + c] = bs[i] * kx * eg;
        qgg[e] = rnd_<RT>(scale * bf2f(Qh[i * LQ + c]) * eg);
        kgg[e] = rnd_<RT>(kx * fexp(Gl[c] - g));
    }
    FOR_N(c, K, RT) a.gl[p.cid * K + c] = fexp(Gl[c]);
    sync_();

    // (2) side by side: warps 0-1 the off-diagonal sub-block of Aqk and L on the tensor cores;
    //     warps 2-3 the forward substitution of Akk's diagonal sub-blocks (one each); warps 4-5
    //     KK's off-diagonal sub-block (kept only: the main backward's own product, bitwise)
    if (off)
        block_mm_w(0, 2, SUB, SUB, mat(Qf, LK, 1), mat(Kr, 1, LK), K, mat(Kf, LK, 1),
                   mat(Kr, 1, LK), K, [&](int r, int c, float vq, float vk) {
                       Aq[(R + r) * LC + c] = scale * vq;
                       Ls[(R + r) * LC + c] = vk;
                   });
    if (off && keepA)
        block_mm_w(4, 2, SUB, SUB, mat(Kf0, LK, 1), mat(Kr, 1, LK), K, no_mat(), no_mat(), 0,
                   [&](int r, int c, float v, float) { KKs[(R + r) * LC + c] = v; });
    if (in_group_(2, 2)) {
        for (int I = group_warp_(2); I * SUB < n; I += group_nwarp_(2)) {
            const int r0 = I * SUB, nb = imin(SUB, n - r0);
            for (int m = 0; m + 1 < nb; m++) {
                const int cols = m + 1;
                WFOR(e, (nb - 1 - m) * cols) {
                    int r = r0 + m + 1 + e / cols, c = r0 + e % cols;
                    Ak[r * LC + c] -= Ls[r * LC + r0 + m] * Ak[(r0 + m) * LC + c];
                }
                syncwarp_();
            }
        }
    }
    sync_();

    // (3) warps 0-1: Inv_10 = -Inv_11 L_10 Inv_00 (a barrier of their own between the two
    //     products); warps 2-7: Aqk written out
    if (off && in_group_(0, 2)) {
        block_mm_w(0, 2, SUB, SUB, mat(Ls + R * LC, LC, 1), mat(Ak, LC, 1), SUB, no_mat(), no_mat(),
                   0, [&](int r, int c, float v, float) { Tm[r * LC + c] = v; });
        bar_sub_(1, 64); // warps 0-1
        block_mm_w(0, 2, SUB, SUB, mat(Ak + R * LC + R, LC, 1), mat(Tm, LC, 1), SUB, no_mat(),
                   no_mat(), 0, [&](int r, int c, float v, float) { Ak[(R + r) * LC + c] = -v; });
    }
    float *aqg = a.Aqk + p.cid * C * C;
    GFOR(e, C * C, 2, TC_THREADS / 32 - 2) aqg[e] = rnd_<RT>(Aq[(e / C) * LC + e % C]);
    sync_();

    // (4) w = Akk Kb, u = Akk βv (8 + 16 tiles, 3 per warp); kept: Akk and KK written out
    float *wg = a.w + p.cid * C * K, *ug = a.u + p.cid * C * V;
    block_mm(C, K, mat(Ak, LC, 1), mat(Kb, LK, 1), C, no_mat(), no_mat(), 0,
             [&](int r, int c, float v, float) { wg[r * K + c] = rnd_<RT>(v); });
    block_mm(C, V, mat(Ak, LC, 1), mat(Vb, LV, 1), C, no_mat(), no_mat(), 0,
             [&](int r, int c, float v, float) { ug[r * V + c] = v; });
    if (keepA) {
        float *akg = a.Akk + p.cid * C * C, *kkg = a.KK + p.cid * C * C;
        FOR_N(e, C * C, RT) {
            akg[e] = rnd_<RT>(Ak[(e / C) * LC + e % C]);
            kkg[e] = KKs[(e / C) * LC + e % C];
        }
    }
    (void)nth;
}

// The dims bwd4_body and intra4_body are instantiated for (the models': K 32, V 64, chunk 32).
__host__ __device__ inline bool bwd4_dims(const ChunkArgs &a) {
    return a.C == 32 && a.K == 32 && a.V == 64;
}
// v5's rounded-operand bodies run at bwd4_dims only (where every producer and consumer of the
// rounded tensors is a v4 body with the flag); elsewhere version 5 runs v4 as it is. Version 6 is
// v5 (its state passes, its rounded operands) with v6's intra and main backward (v6_).
__host__ __device__ inline bool v5_(const TcArgs &a) {
    return (a.ver == 5 || a.ver == 6) && bwd4_dims(a);
}
__host__ __device__ inline bool v6_(const TcArgs &a) {
    return a.ver == 6 && bwd4_dims(a);
}
// The context's version as a call's: 3, 5, 6, or 4 for anything else.
__host__ __device__ inline int ver_of_(int v) {
    return v == 3 || v == 5 || v == 6 ? v : 4;
}
// v6's bodies: v5's (RT), each chunk through the instantiation for its row count, n = C at
// compile time for a full chunk (every chunk but a sequence's partial last one), run-time n for
// the partial one. A block-uniform branch; the two instantiations compute the same bits.
template <int C, int K, int V, bool KA>
__host__ __device__ inline void bwd6_body(const TcArgs &a, int64_t blk, float *sm) {
    if (chunk_pos(a, blk).n == C)
        bwd4_body<C, K, V, KA, true, true>(a, blk, sm);
    else
        bwd4_body<C, K, V, KA, true>(a, blk, sm);
}
template <int C, int K, int V>
__host__ __device__ inline void intra6_body(const TcArgs &a, int64_t blk, float *sm) {
    if (chunk_pos(a, blk).n == C)
        intra4_body<C, K, V, true, true>(a, blk, sm);
    else
        intra4_body<C, K, V, true>(a, blk, sm);
}

// ---- device entry points ------------------------------------------------------------------------

__global__ void __launch_bounds__(TC_THREADS) tc_intra_k(TcArgs a, bool bwd) {
    kda_grid_wait();
    extern __shared__ float sm[];
    intra_body(a, blockIdx.x, sm, bwd);
}
__global__ void __launch_bounds__(TC_THREADS) tc_state_k(TcArgs a) {
    kda_grid_wait();
    extern __shared__ float sm[];
    state_body(a, blockIdx.x, sm);
}
__global__ void __launch_bounds__(TC_THREADS) tc_output_k(TcArgs a) {
    kda_grid_wait();
    extern __shared__ float sm[];
    output_body(a, blockIdx.x, sm);
}
__global__ void __launch_bounds__(TC_THREADS) tc_ddi_k(TcArgs a) {
    kda_grid_wait();
    extern __shared__ float sm[];
    ddi_body(a, blockIdx.x, sm);
}
__global__ void __launch_bounds__(TC_THREADS) tc_state_bwd_k(TcArgs a) {
    kda_grid_wait();
    extern __shared__ float sm[];
    state_bwd_body(a, blockIdx.x, sm);
}
__global__ void __launch_bounds__(TC_BWD_THREADS, 2) tc_bwd_k(TcArgs a) {
    kda_grid_wait();
    extern __shared__ float sm[];
    bwd_body(a, blockIdx.x, sm);
}
template <int C_, int K_, int VT_, int NS>
__global__ void __launch_bounds__(TC_THREADS) tc_state4_k(TcArgs a) {
    kda_grid_wait();
    extern __shared__ float sm[];
    state4_body<C_, K_, VT_, NS>(a, blockIdx.x, sm);
}
template <int C_, int K_, int VT_, int NS>
__global__ void __launch_bounds__(TC_THREADS) tc_rstate4_k(TcArgs a) {
    kda_grid_wait();
    extern __shared__ float sm[];
    rstate4_body<C_, K_, VT_, NS>(a, blockIdx.x, sm);
}
// The entry point `name` of the compile-time-dims bodies (v4-v6; named kernels, so that profiles
// and Nsight Compute's kernel filters tell the versions apart): launch bounds `bounds`, a wait
// for the previous launch (programmatic dependent launch), then the body on block blockIdx.x.
#define TC_ENTRY_(name, bounds, ...)                                                               \
    __global__ void __launch_bounds__ bounds name(TcArgs a) {                                      \
        kda_grid_wait();                                                                           \
        extern __shared__ float sm[];                                                              \
        __VA_ARGS__(a, blockIdx.x, sm);                                                            \
    }
TC_ENTRY_(tc_intra4_k, (TC_THREADS), intra4_body<32, 32, 64>)
TC_ENTRY_(tc_bwd4_k, (TC4_THREADS, 2), bwd4_body<32, 32, 64, false>)
TC_ENTRY_(tc_bwd4k_k, (TC4_THREADS, 2), bwd4_body<32, 32, 64, true>)
// v5 (ctx->tc_version 5, at bwd4_dims): v4's bodies with the mma-only operands rounded once by
// their producers (the RT flag); the names differ from v4's so that profiles tell them apart.
// RT also selects the bit-identical trims of fewer instructions: FOR_N / FOR_CT / WFOR_CT loops
// with compile-time trip counts, and copies without a run-time form (32-bit offsets from the
// chunk's bases) when every flag allows cp.async, v4's copies otherwise.
template <int C_, int K_, int VT_, int NS>
__global__ void __launch_bounds__(TC_THREADS) tc_state5_k(TcArgs a) {
    kda_grid_wait();
    extern __shared__ float sm[];
    state4_body<C_, K_, VT_, NS, true>(a, blockIdx.x, sm);
}
template <int C_, int K_, int VT_, int NS>
__global__ void __launch_bounds__(TC_THREADS) tc_rstate5_k(TcArgs a) {
    kda_grid_wait();
    extern __shared__ float sm[];
    rstate4_body<C_, K_, VT_, NS, true>(a, blockIdx.x, sm);
}
TC_ENTRY_(tc_intra5_k, (TC_THREADS), intra4_body<32, 32, 64, true>)
TC_ENTRY_(tc_bwd5_k, (TC4_THREADS, 2), bwd4_body<32, 32, 64, false, true>)
TC_ENTRY_(tc_bwd5k_k, (TC4_THREADS, 2), bwd4_body<32, 32, 64, true, true>)
// v6 (ctx->tc_version 6, at bwd4_dims): v5's intra and main backward with a full chunk's rows
// at compile time (bwd6_body, intra6_body); the state passes are v5's kernels.
TC_ENTRY_(tc_intra6_k, (TC_THREADS), intra6_body<32, 32, 64>)
TC_ENTRY_(tc_bwd6_k, (TC4_THREADS, 2), bwd6_body<32, 32, 64, false>)
TC_ENTRY_(tc_bwd6k_k, (TC4_THREADS, 2), bwd6_body<32, 32, 64, true>)

// ---- argument setup shared by the device and host drivers ---------------------------------------

TcArgs make_args(const KdaDims *d) {
    TcArgs a;
    memset(&a, 0, sizeof a);
    static_cast<ChunkArgs &>(a) = chunk_args(d);
    return a;
}

// keep (M0): h and Δ live in the caller's buffer (h first: kda_fast_keep_floats' layout), then
// w, kg, qg, Aqk and e^{G_last} (kda_tc_keep_floats), so the backward skips the intra kernel,
// then Akk and KK (v4 at bwd4_dims: its main backward skips the inverse).
void keep_carve(TcArgs &a, float *keep) {
    size_t ch = (size_t)a.B * a.HV * a.NT, CK = ch * a.C * a.K;
    keep = keep_carve_hd(a, keep);
    a.w = keep, keep += CK;
    a.kg = keep, keep += CK;
    a.qg = keep, keep += CK;
    a.Aqk = keep, keep += ch * a.C * a.C;
    a.gl = keep, keep += ch * a.K;
    a.Akk = keep, keep += ch * a.C * a.C;
    a.KK = keep;
}

// The pipeline depth of v4's state passes: TC4_STAGES at the models' dims (two blocks per SM
// still fit), else 2 (v3's double buffer).
int stages4(const ChunkArgs &a) {
    return bwd4_dims(a) ? TC4_STAGES : 2;
}

// Both versions' kernels must fit (the version is chosen per call).
size_t max_smem_bytes(const TcArgs &a) {
    size_t m = intra_floats(a.C, a.K, a.V, true);
    size_t b4 = bwd4_dims(a) ? (size_t)Bwd4<32, 32, 64>::floats : 0; // >= Intra4's
    size_t s[] = {state_floats(a.C, a.K, a.Vt),
                  output_floats(a.C, a.K, a.V),
                  bwd_floats(a.C, a.K, a.V, a.Vt),
                  state4_floats(a.C, a.K, a.Vt, stages4(a), true),
                  rstate4_floats(a.C, a.K, a.Vt, stages4(a)),
                  b4};
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++)
        if (s[i] > m) m = s[i];
    return m * sizeof(float);
}

// Launches `kern` on `blocks` blocks with `floats` of shared memory (kda_launch: programmatic
// when ctx->pdl; every entry point above waits first). With `ev` (kda_tc_profile) an event is
// recorded after the launch into *ev, which then advances.
template <typename... Args>
int launch(KdaCudaCtx *ctx, cudaEvent_t **ev, void (*kern)(Args...), int64_t blocks, size_t floats,
           int threads, Args... args) {
    size_t bytes = floats * sizeof(float);
    if (set_smem(ctx, (const void *)kern, bytes)) return -1;
    CUDA_CHECK(ctx, kda_launch(ctx, kern, dim3((unsigned)blocks), dim3(threads), bytes, args...));
    if (ev) CUDA_CHECK(ctx, cudaEventRecord(*(*ev)++, ctx->stream));
    return 0;
}

int prepare(KdaCudaCtx *ctx, TcArgs &a, const KdaDims *d) {
    a = make_args(d);
    const char *as = getenv("KDA_TC_ASYNC"); // "0": the state passes' copies without cp.async
    a.async = !(as && !strcmp(as, "0"));
    a.ver = ver_of_(ctx->tc_version);
    KDA_CUDA_REQUIRE(ctx, kda_tc_supported(d, ctx->info.smem_per_block_optin));
    float *ws = (float *)kda_cuda_scratch(ctx, scratch_floats(a) * sizeof(float));
    if (!ws) return -1;
    carve(a, ws);
    return 0;
}

// v4's state passes: compile-time dims and TC4_STAGES at the models' dims, else run-time dims and
// a double buffer.
int launch_state_fwd(KdaCudaCtx *ctx, cudaEvent_t **ev, const TcArgs &a) {
    int64_t tiles = (int64_t)a.B * a.HV * (a.V / a.Vt);
    if (a.ver == 3)
        return launch(ctx, ev, tc_state_k, tiles, state_floats(a.C, a.K, a.Vt), TC_THREADS, a);
    size_t f = state4_floats(a.C, a.K, a.Vt, stages4(a), a.state_o);
    if (v5_(a))
        return launch(ctx, ev, tc_state5_k<32, 32, 32, TC4_STAGES>, tiles, f, TC_THREADS, a);
    if (bwd4_dims(a))
        return launch(ctx, ev, tc_state4_k<32, 32, 32, TC4_STAGES>, tiles, f, TC_THREADS, a);
    return launch(ctx, ev, tc_state4_k<0, 0, 0, 2>, tiles, f, TC_THREADS, a);
}
int launch_rstate4(KdaCudaCtx *ctx, cudaEvent_t **ev, const TcArgs &a) {
    int64_t tiles = (int64_t)a.B * a.HV * (a.V / a.Vt);
    size_t f = rstate4_floats(a.C, a.K, a.Vt, stages4(a));
    if (v5_(a))
        return launch(ctx, ev, tc_rstate5_k<32, 32, 32, TC4_STAGES>, tiles, f, TC_THREADS, a);
    if (bwd4_dims(a))
        return launch(ctx, ev, tc_rstate4_k<32, 32, 32, TC4_STAGES>, tiles, f, TC_THREADS, a);
    return launch(ctx, ev, tc_rstate4_k<0, 0, 0, 2>, tiles, f, TC_THREADS, a);
}

// The forward's intra kernel: v4's at its dims, else v3's (forward form: writes Aqk).
int launch_intra_fwd(KdaCudaCtx *ctx, cudaEvent_t **ev, const TcArgs &a) {
    int64_t chunks = (int64_t)a.B * a.HV * a.NT;
    if (v5_(a))
        return launch(ctx, ev, v6_(a) ? tc_intra6_k : tc_intra5_k, chunks,
                      (size_t)Intra4<32, 32, 64>::floats, TC_THREADS, a);
    if (a.ver >= 4 && bwd4_dims(a))
        return launch(ctx, ev, tc_intra4_k, chunks, (size_t)Intra4<32, 32, 64>::floats, TC_THREADS,
                      a);
    return launch(ctx, ev, tc_intra_k, chunks, intra_floats(a.C, a.K, a.V, false), TC_THREADS, a,
                  false);
}

bool al16_(const void *p) {
    return (uintptr_t)p % 16 == 0;
}
// The v4 copy switches: which tensors are 16-byte aligned (all pointers set).
void set_align(TcArgs &a) {
    a.qk_al16 = al16_(a.q) && al16_(a.k);
    a.v_al16 = al16_(a.v);
    a.dO_al16 = al16_(a.dO);
    a.g_al16 = al16_(a.gcum);
    const void *s[] = {a.w, a.kg, a.qg, a.Aqk, a.gl, a.h, a.dh, a.D, a.dD, a.Akk, a.KK};
    a.s_al16 = true;
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++)
        a.s_al16 = a.s_al16 && al16_(s[i]);
}

int tc_fwd(KdaCudaCtx *ctx, cudaEvent_t **ev, kda_bf16 *o, float *final_state, const kda_bf16 *q,
           const kda_bf16 *k, const kda_bf16 *v, const float *gcum, const float *beta,
           const float *init_state, const KdaDims *d, float *keep) {
    TcArgs a;
    if (prepare(ctx, a, d)) return -1;
    if (keep) keep_carve(a, keep);
    a.q = q, a.k = k, a.v = v, a.gcum = gcum, a.beta = beta, a.init_state = init_state;
    a.o = o, a.final_state = final_state;
    a.state_o = a.ver >= 4; // v4: o from the state pass
    set_align(a);
    int64_t chunks = (int64_t)a.B * a.HV * a.NT;
    if (launch_intra_fwd(ctx, ev, a) || launch_state_fwd(ctx, ev, a)) return -1;
    if (a.state_o) { // kda_tc_profile: an empty output slot
        if (ev) CUDA_CHECK(ctx, cudaEventRecord(*(*ev)++, ctx->stream));
    } else if (launch(ctx, ev, tc_output_k, chunks, output_floats(a.C, a.K, a.V), TC_THREADS, a)) {
        return -1;
    }
    return 0;
}

// v3: [ddi (kept) | intra (bwd form) + state], reverse state, main backward. v4: [intra (forward
// form: writes Aqk) + state], the reverse state pass with dΔ_intra, the main backward (bwd4_body
// at its dims, else v3's).
int tc_bwd(KdaCudaCtx *ctx, cudaEvent_t **ev, float *dq, float *dk, kda_bf16 *dv, float *dg,
           float *dbeta, float *dinit_state, const kda_bf16 *d_o, const float *dfinal_state,
           const kda_bf16 *q, const kda_bf16 *k, const kda_bf16 *v, const float *gcum,
           const float *beta, const float *init_state, const KdaDims *d, const float *kept) {
    TcArgs a;
    if (prepare(ctx, a, d)) return -1;
    if (kept) keep_carve(a, (float *)kept); // read only: intra and the state pass are skipped
    a.q = q, a.k = k, a.v = v, a.dO = d_o, a.gcum = gcum, a.beta = beta;
    a.init_state = init_state, a.dfinal = dfinal_state;
    a.dv = dv, a.dg = dg, a.dbeta = dbeta, a.dinit = dinit_state;
    if (a.HV == a.H) a.dq = dq, a.dk = dk;
    set_align(a);
    const bool v4 = a.ver >= 4; // v5 too: v4's kernels with rounded operands
    int64_t chunks = (int64_t)a.B * a.HV * a.NT, tiles = (int64_t)a.B * a.HV * (a.V / a.Vt);
    if (ev && kept && v4) // kda_tc_profile_kept: v4 has no ddi kernel (an empty slot)
        CUDA_CHECK(ctx, cudaEventRecord(*(*ev)++, ctx->stream));
    if ((kept && !v4 && launch(ctx, ev, tc_ddi_k, chunks, ddi_floats(a.C, a.V), TC_THREADS, a)) ||
        (!kept && !v4 &&
         launch(ctx, ev, tc_intra_k, chunks, intra_floats(a.C, a.K, a.V, true), TC_THREADS, a,
                true)) ||
        (!kept && v4 && launch_intra_fwd(ctx, ev, a)) || (!kept && launch_state_fwd(ctx, ev, a)) ||
        (!v4 &&
         launch(ctx, ev, tc_state_bwd_k, tiles, state_floats(a.C, a.K, a.Vt), TC_THREADS, a)) ||
        (v4 && launch_rstate4(ctx, ev, a)))
        return -1;
    if (v4 && bwd4_dims(a)) {
        void (*bwd_k)(TcArgs) = v6_(a)   ? (kept ? tc_bwd6k_k : tc_bwd6_k)
                                : v5_(a) ? (kept ? tc_bwd5k_k : tc_bwd5_k)
                                         : (kept ? tc_bwd4k_k : tc_bwd4_k);
        if (launch(ctx, ev, bwd_k, chunks, (size_t)Bwd4<32, 32, 64>::floats, TC4_THREADS, a))
            return -1;
    } else if (launch(ctx, ev, tc_bwd_k, chunks, bwd_floats(a.C, a.K, a.V, a.Vt), TC_BWD_THREADS,
                      a)) {
        return -1;
    }
    if (a.HV != a.H && gva_sum_launch(ctx, dq, dk, a)) return -1;
    if (ev) CUDA_CHECK(ctx, cudaEventRecord(*(*ev)++, ctx->stream));
    return 0;
}

// ---- host emulation -----------------------------------------------------------------------------
struct HostRun {
    TcArgs a;
    float *ws, *sm;
    int64_t chunks, tiles;
};

void host_begin(HostRun *r, const KdaDims *d, int version) {
    r->a = make_args(d);
    r->a.ver = ver_of_(version);
    r->a.async = true; // the device's default: the host copies at once either way, and v5's main
                       // backward then takes its all-cp.async copy path (32-bit offsets)
    r->ws = (float *)kda_calloc(scratch_floats(r->a), sizeof(float));
    r->sm = (float *)kda_calloc(max_smem_bytes(r->a) / sizeof(float), sizeof(float));
    carve(r->a, r->ws);
    r->chunks = (int64_t)r->a.B * r->a.HV * r->a.NT;
    r->tiles = (int64_t)r->a.B * r->a.HV * (r->a.V / r->a.Vt);
}
// launch_state_fwd's choice, on the host.
void state_fwd_host(const TcArgs &a, int64_t b, float *sm) {
    if (v5_(a))
        state4_body<32, 32, 32, TC4_STAGES, true>(a, b, sm);
    else if (a.ver >= 4 && bwd4_dims(a))
        state4_body<32, 32, 32, TC4_STAGES>(a, b, sm);
    else if (a.ver >= 4)
        state4_body<0, 0, 0, 2>(a, b, sm);
    else
        state_body(a, b, sm);
}
// launch_intra_fwd's choice, on the host.
void intra_fwd_host(const TcArgs &a, int64_t b, float *sm) {
    if (v6_(a))
        intra6_body<32, 32, 64>(a, b, sm);
    else if (v5_(a))
        intra4_body<32, 32, 64, true>(a, b, sm);
    else if (a.ver >= 4 && bwd4_dims(a))
        intra4_body<32, 32, 64>(a, b, sm);
    else
        intra_body(a, b, sm, false);
}
void host_end(HostRun *r) {
    free(r->ws);
    free(r->sm);
}

} // namespace

// ---- public entry points ------------------------------------------------------------------------

extern "C" int kda_tc_selected(void) {
    const char *s = getenv("KDA_CORE"); // the default since the GPU run of 2026-12-03 (53/53)
    return !(s && !strcmp(s, "simt"));
}

extern "C" int kda_tc_set_version(KdaCudaCtx *ctx, int v) {
    int prev = ctx->tc_version;
    ctx->tc_version = ver_of_(v);
    return prev;
}

extern "C" int kda_tc_bwd_main_version(int version, const KdaDims *d) {
    TcArgs a = make_args(d);
    version = ver_of_(version);
    return version >= 4 && bwd4_dims(a) ? version : 3;
}

extern "C" int kda_tc_supported(const KdaDims *d, size_t smem_optin) {
    if ((d->chunk != 16 && d->chunk != 32) || d->K < 16 || d->K % 16 || d->V < 8 || d->V % 8 ||
        d->H < 1 || d->HV % d->H)
        return 0;
    if (d->B * d->T * d->HV * (d->K > d->V ? d->K : d->V) >= ((int64_t)1 << 31)) return 0;
    TcArgs a = make_args(d);
    if (a.Vt % 8) return 0;
    return max_smem_bytes(a) <= smem_optin;
}

extern "C" int kda_tc_fwd(KdaCudaCtx *ctx, kda_bf16 *o, float *final_state, const kda_bf16 *q,
                          const kda_bf16 *k, const kda_bf16 *v, const float *gcum,
                          const float *beta, const float *init_state, const KdaDims *d) {
    return tc_fwd(ctx, NULL, o, final_state, q, k, v, gcum, beta, init_state, d, NULL);
}

extern "C" size_t kda_tc_keep_floats(const KdaDims *d) {
    TcArgs a = make_args(d);
    size_t ch = (size_t)a.B * a.HV * a.NT;
    return kda_fast_keep_floats(d) + ch * (3 * (size_t)a.C * a.K + 3 * (size_t)a.C * a.C + a.K);
}

extern "C" int kda_tc_fwd_keep(KdaCudaCtx *ctx, kda_bf16 *o, float *final_state, const kda_bf16 *q,
                               const kda_bf16 *k, const kda_bf16 *v, const float *gcum,
                               const float *beta, const float *init_state, const KdaDims *d,
                               float *keep) {
    KDA_CUDA_REQUIRE(ctx, keep != NULL);
    return tc_fwd(ctx, NULL, o, final_state, q, k, v, gcum, beta, init_state, d, keep);
}

extern "C" int kda_tc_bwd(KdaCudaCtx *ctx, float *dq, float *dk, kda_bf16 *dv, float *dg,
                          float *dbeta, float *dinit_state, const kda_bf16 *d_o,
                          const float *dfinal_state, const kda_bf16 *q, const kda_bf16 *k,
                          const kda_bf16 *v, const float *gcum, const float *beta,
                          const float *init_state, const KdaDims *d) {
    return tc_bwd(ctx, NULL, dq, dk, dv, dg, dbeta, dinit_state, d_o, dfinal_state, q, k, v, gcum,
                  beta, init_state, d, NULL);
}

extern "C" int kda_tc_bwd_kept(KdaCudaCtx *ctx, float *dq, float *dk, kda_bf16 *dv, float *dg,
                               float *dbeta, float *dinit_state, const kda_bf16 *d_o,
                               const float *dfinal_state, const kda_bf16 *q, const kda_bf16 *k,
                               const kda_bf16 *v, const float *gcum, const float *beta,
                               const float *init_state, const KdaDims *d, const float *kept) {
    KDA_CUDA_REQUIRE(ctx, kept != NULL);
    return tc_bwd(ctx, NULL, dq, dk, dv, dg, dbeta, dinit_state, d_o, dfinal_state, q, k, v, gcum,
                  beta, init_state, d, kept);
}

// kda_tc_profile / kda_tc_profile_kept: kept = 1 runs the M0 forms (the model's path).
static int tc_profile_(KdaCudaCtx *ctx, const KdaDims *d, int reps, float ms[8], int kept) {
    ProfileBufs p;
    if (profile_bufs_alloc(ctx, d, kept ? kda_tc_keep_floats(d) : 0, &p)) return -1;
    int rc = profile_run(ctx, reps, kept ? 8 : 9, ms, [&](cudaEvent_t **e) {
        return tc_fwd(ctx, e, p.o, NULL, p.q, p.k, p.v, p.gcum, p.beta, NULL, d, p.keep) ||
               tc_bwd(ctx, e, p.dq, p.dk, p.dv, p.dg, p.dbeta, NULL, p.dO, NULL, p.q, p.k, p.v,
                      p.gcum, p.beta, NULL, d, p.keep);
    });
    profile_bufs_free(&p);
    return rc;
}

extern "C" int kda_tc_profile(KdaCudaCtx *ctx, const KdaDims *d, int reps, float ms[8]) {
    return tc_profile_(ctx, d, reps, ms, 0);
}

extern "C" int kda_tc_profile_kept(KdaCudaCtx *ctx, const KdaDims *d, int reps, float ms[8]) {
    return tc_profile_(ctx, d, reps, ms, 1);
}

extern "C" void kda_tc_fwd_host(kda_bf16 *o, float *final_state, const kda_bf16 *q,
                                const kda_bf16 *k, const kda_bf16 *v, const float *gcum,
                                const float *beta, const float *init_state, const KdaDims *d,
                                float *keep, int version) {
    HostRun r;
    host_begin(&r, d, version);
    TcArgs &a = r.a;
    if (keep) keep_carve(a, keep);
    a.q = q, a.k = k, a.v = v, a.gcum = gcum, a.beta = beta, a.init_state = init_state;
    a.o = o, a.final_state = final_state;
    set_align(a);
    a.state_o = a.ver >= 4; // v4: o from the state pass
    for (int64_t b = 0; b < r.chunks; b++)
        intra_fwd_host(a, b, r.sm);
    for (int64_t b = 0; b < r.tiles; b++)
        state_fwd_host(a, b, r.sm);
    for (int64_t b = 0; b < r.chunks && !a.state_o; b++)
        output_body(a, b, r.sm);
    host_end(&r);
}

// The device drivers' kernel sequences (tc_fwd / tc_bwd), body by body.
extern "C" void kda_tc_bwd_host(float *dq, float *dk, kda_bf16 *dv, float *dg, float *dbeta,
                                float *dinit_state, const kda_bf16 *d_o, const float *dfinal_state,
                                const kda_bf16 *q, const kda_bf16 *k, const kda_bf16 *v,
                                const float *gcum, const float *beta, const float *init_state,
                                const KdaDims *d, const float *kept, int version) {
    HostRun r;
    host_begin(&r, d, version);
    TcArgs &a = r.a;
    if (kept) keep_carve(a, (float *)kept);
    a.q = q, a.k = k, a.v = v, a.dO = d_o, a.gcum = gcum, a.beta = beta;
    a.init_state = init_state, a.dfinal = dfinal_state;
    a.dv = dv, a.dg = dg, a.dbeta = dbeta, a.dinit = dinit_state;
    if (a.HV == a.H) a.dq = dq, a.dk = dk;
    set_align(a);
    const bool v4 = a.ver >= 4; // v5 too
    for (int64_t b = 0; b < r.chunks; b++) {
        if (!kept && v4)
            intra_fwd_host(a, b, r.sm);
        else if (!kept)
            intra_body(a, b, r.sm, true);
        else if (!v4)
            ddi_body(a, b, r.sm);
    }
    for (int64_t b = 0; b < r.tiles && !kept; b++)
        state_fwd_host(a, b, r.sm);
    for (int64_t b = 0; b < r.tiles; b++) {
        if (v5_(a))
            rstate4_body<32, 32, 32, TC4_STAGES, true>(a, b, r.sm);
        else if (v4 && bwd4_dims(a))
            rstate4_body<32, 32, 32, TC4_STAGES>(a, b, r.sm);
        else if (v4)
            rstate4_body<0, 0, 0, 2>(a, b, r.sm);
        else
            state_bwd_body(a, b, r.sm);
    }
    for (int64_t b = 0; b < r.chunks; b++) {
        if (v6_(a))
            kept ? bwd6_body<32, 32, 64, true>(a, b, r.sm)
                 : bwd6_body<32, 32, 64, false>(a, b, r.sm);
        else if (v5_(a))
            kept ? bwd4_body<32, 32, 64, true, true>(a, b, r.sm)
                 : bwd4_body<32, 32, 64, false, true>(a, b, r.sm);
        else if (v4 && bwd4_dims(a))
            kept ? bwd4_body<32, 32, 64, true>(a, b, r.sm)
                 : bwd4_body<32, 32, 64, false>(a, b, r.sm);
        else
            bwd_body(a, b, r.sm);
    }
    if (a.HV != a.H) gva_sum_host(dq, dk, a);
    host_end(&r);
}

namespace {
// Epilogue of kda_tc_matmul_host (a host function's lambda cannot enter block_mm, which is
// __host__ __device__): D[r][c] = v, row-major with N columns.
struct StoreRowMajor {
    float *D;
    int N;
    __host__ __device__ void operator()(int r, int c, float v, float) const {
        D[r * N + c] = v;
    }
};
} // namespace

extern "C" void kda_tc_matmul_host(float *D, const float *A, const float *B, int M, int N, int Kd) {
    StoreRowMajor st = {D, N};
    block_mm(M, N, mat(A, Kd, 1), mat(B, N, 1), Kd, no_mat(), no_mat(), 0, st);
}

extern "C" float kda_tc_round_tf32(float x) {
    unsigned u = tf32_bits(x);
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
