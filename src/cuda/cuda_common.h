// cuda_common.h - the CUDA backend's context (device, stream, cuBLASLt handle, workspace),
// error checks, device query and small host<->device helpers. Plain C11: tests/*.c include it.
//
// Error contract: every kda_cuda_* function returns 0 on success and -1 on failure, with one
// line "file:line: call: reason" in ctx->err (the first failure is kept until
// kda_cuda_clear_error). Launchers check the launch (cudaGetLastError) but do not synchronize:
// errors raised while a kernel runs surface at the next kda_cuda_sync. All work goes to
// ctx->stream. No globals: two contexts on two devices are independent.
//
// Tensor storage: fp32 is float; bf16 is kda_bf16 (uint16_t bits of a bfloat16, the same
// rounding as core/util.h f32_to_bf16). Device pointers are plain pointers in the C API.
#ifndef KDA_CUDA_COMMON_H
#define KDA_CUDA_COMMON_H

#include <stddef.h>
#include <stdint.h>

#ifdef KDA_HAVE_CUDA
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" { // C linkage for error.h too when a .cu includes this
#endif

#include "core/error.h" // defines: KdaError, kda_fail, kda_malloc

typedef uint16_t kda_bf16; // bf16 bits on the device

#define KDA_CUDA_GEMM_TILES_MAX 8 // tile ids KDA_GEMM_TILES may list (KdaCudaGemmPick.tiles)
// KDA_GEMM_TILES unset: cuBLASLt's 176x128 (201), then 168x128 (197) tiles where a shape's
// heuristic offers them (KdaCudaGemmPick.tiles says why).
#define KDA_CUDA_GEMM_TILES_DEFAULT "201,197"

#define KDA_CUDA_GEMM_RULES_MAX 8 // shape rules KdaCudaGemmPick.rules holds
// One GEMM shape's cuBLASLt tile (KdaCudaGemmPick.rules): a product of bf16 operands with these
// transposes, m, k and output dtype, any n (the token count), runs its heuristic's first
// candidate with this tile (cublasLtMatmulTile_t), where it offers one, ahead of the tile list.
typedef struct {
    int trans_a, trans_b;
    int64_t m, k;
    int d_type; // the output's KdaDtype (gemm_cuda.h: 0 fp32, 1 bf16)
    int tile;
} KdaCudaGemmRule;

// The GEMM candidate policy of a context (KdaCudaCtx.gemm_pick). Rules first: their int64_t
// fields align the struct, and the order leaves no padding for the graph fingerprint to hash.
typedef struct {
    // rules: per-shape tiles, checked before tiles (KDA_GEMM_RULES at init: unset or
    // "1", the measured rules of cuda_common.cu, the default since 2026-12-04; "0" or empty:
    // none). Three of KDA-300M's projection shapes run 8-27 % faster at the H200's sustained
    // draw on a tile the list does not give them (bench_gemm, docs/log/gpu-2026-12-03.md §33;
    // o_proj forward: 128x128 0.093 ms, the list's 176x128 0.127), about 1.2 ms a step at mb 16
    // summed; interleaved in the step, −0.3 ms at mb 16 and −0.8 to −1.0 at mb 32 on the mean,
    // inside the defaults' spread alone, and with three other switches faster than every
    // defaults run at mb 32 and 64 (docs/log/gpu-2026-12-04.md §1-§3). Per shape, since a tile
    // that wins on one loses on another.
    KdaCudaGemmRule rules[KDA_CUDA_GEMM_RULES_MAX];
    // tiles: KDA_GEMM_TILES at init (cuBLASLt tile ids, cublasLt.h's cublasLtMatmulTile_t;
    // at most 8; unset: KDA_CUDA_GEMM_TILES_DEFAULT): a new plan runs the first of its heuristic
    // candidates whose tile comes first in this list (none listed among them: the heuristic's
    // first). Under the H200's power cap the heuristic's first pick (192x192 tiles on the MLP
    // and head shapes) ran 8-9 % slower at the sustained draw than 176x128 and 168x128 ones
    // (docs/log/gpu-2026-12-03.md §26), and the step at mb 16 0.4-0.9 ms faster with the list
    // than every run without it (§27: the default since 2026-12-03, session 9).
    // KDA_GEMM_TILES= (empty), n_tiles 0: the heuristic's first everywhere.
    int tiles[KDA_CUDA_GEMM_TILES_MAX];
    int n_rules, n_tiles;
} KdaCudaGemmPick;

typedef struct {
    char name[256];
    int cc_major, cc_minor;      // compute capability
    int sm_count;                // multiprocessors
    int clock_khz;               // peak SM clock reported by the driver
    size_t mem_total, mem_free;  // bytes, at query time
    size_t l2_bytes;             // L2 cache size
    size_t smem_per_block_optin; // largest dynamic shared memory a block can opt into
    // Dense bf16 tensor-core peak in FLOP/s for MFU: SMs x (FLOP/clock/SM for the architecture)
    // x clock. Hopper (cc 9.x) uses the datasheet tensor clock 1830 MHz (H100/H200 SXM: 989.4
    // TFLOP/s); other architectures use clock_khz. 0 when the architecture is not known.
    double peak_bf16_flops;
} KdaCudaDeviceInfo;

typedef struct {
    int device;
    cudaStream_t stream;
    void *lt_handle;   // cublasLtHandle_t
    void *lt_ws;       // cuBLASLt workspace (device)
    size_t lt_ws_size; // bytes
    void *ws;          // scratch for launchers (device), grown on demand by kda_cuda_scratch
    size_t ws_size;    // bytes
    KdaCudaDeviceInfo info;
    KdaError err; // first failure since the last kda_cuda_clear_error
    int failed;
    // cuBLASLt plans (descriptors, layouts, heuristic choice) cached per GEMM shape
    // (gemm_cuda.cu); NULL until the first GEMM. plan_off: KDA_GEMM_PLAN=0 at init: no cache,
    // every call builds and queries afresh, and residual GEMMs copy the residual first (the path
    // before the cache, kept to measure against).
    void *lt_plans;
    int plan_off;
    // gemm_tune: KDA_GEMM_TUNE=1 at init: a cached plan times cuBLASLt's heuristic candidates
    // (up to 8) on its first call that can run twice (beta 0, or C != D) and keeps the fastest
    // (default 0: the heuristic's first; the choice may differ between processes, and with it
    // the rounding of the products).
    int gemm_tune;
    // gemm_cand: KDA_GEMM_CAND=i at init (1-7): every plan runs cuBLASLt's heuristic candidate i
    // where the shape has one (else its first); 0 (the default): the first, or gemm_tune's pick.
    // For measuring the candidates' energy at the power cap (bench/kda_kernel/bench_gemm.c,
    // docs/perf-log.md "session 8"); tests and benchmarks may set the field between calls.
    int gemm_cand;
    // gemm_pick: which cuBLASLt candidate a new plan runs (KDA_GEMM_RULES, KDA_GEMM_TILES at
    // init; KdaCudaGemmPick says how); one struct so that a benchmark or test can set it aside
    // and put it back whole, and the step graph's fingerprint hashes it whole.
    KdaCudaGemmPick gemm_pick;
    // tc_version: the tensor-core KDA core's kernels (cuda/kda_tc.h), 6 (the default since
    // 2026-12-04), 5 when KDA_TC_V=5 at init, 4 when KDA_TC_V=4, 3 when KDA_TC_V=3;
    // kda_tc_set_version changes it (tests, benchmarks).
    int tc_version;
    // gate_version: the gate + beta kernels (cuda/kda_gate_cuda.h), 2 (the default) or 1 when
    // KDA_GATE_V=1 at init; tests and benchmarks may set the field between calls.
    int gate_version;
    // pdl: KDA_PDL=1 at init on a device of compute capability 9.0+: the project's row and
    // element-wise kernels, the tensor-core KDA core's and the classifier's row kernels are
    // launched with programmatic dependent launch (kda_launch, cuda_internal.h: each may start
    // while its predecessor drains, and waits for it first thing). Default 0: plain launches.
    int pdl;
    // kernels whose dynamic shared-memory limit was raised on this device, and to what
    // (kda_cuda_smem_limit): cudaFuncSetAttribute once per kernel instead of per launch
    struct {
        const void *fn;
        size_t bytes;
    } smem_set[32];
    int n_smem_set;
    // the last cluster-occupancy answer of a persistent kernel (xent_cuda.cu's pipelined row
    // kernel: cudaOccupancyMaxActiveClusters costs host time on every chunk); clusters 0: none
    struct {
        const void *fn;
        int cl;
        size_t smem;
        int clusters;
    } occ;
} KdaCudaCtx;

// Records "file:line: what: reason" in ctx->err (keeps the first) and returns -1.
int kda_cuda_fail_at(KdaCudaCtx *ctx, const char *file, int line, const char *what,
                     const char *reason);
void kda_cuda_clear_error(KdaCudaCtx *ctx);

// CUDA_CHECK(ctx, call): on a cudaError_t other than cudaSuccess, records file:line, the call
// text and cudaGetErrorString, then `return -1` from the enclosing function.
#define CUDA_CHECK(ctx, call)                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            return kda_cuda_fail_at((ctx), __FILE__, __LINE__, #call, cudaGetErrorString(e_));     \
    } while (0)

// After a kernel launch: the launch's own error (bad configuration, no device image).
#define CUDA_CHECK_LAUNCH(ctx) CUDA_CHECK((ctx), cudaGetLastError())

// Creates stream, cuBLASLt handle and a 32 MiB cuBLASLt workspace on `device`; fills ctx->info.
// On failure returns -1 with the reason in *err and leaves nothing allocated.
int kda_cuda_init(KdaCudaCtx *ctx, int device, KdaError *err);
// KDA_GEMM_TILES's value s (NULL, unset: KDA_CUDA_GEMM_TILES_DEFAULT; empty: none) into tiles
// [KDA_CUDA_GEMM_TILES_MAX], *n of them:
// 1 to KDA_CUDA_GEMM_TILES_MAX comma-separated cuBLASLt tile ids, each 1..100000. Malformed:
// *n = 0, -1 and one line in err naming the variable. Host only, no device needed (kda_cuda_init
// calls it first).
int kda_cuda_parse_gemm_tiles(const char *s, int tiles[KDA_CUDA_GEMM_TILES_MAX], int *n,
                              KdaError *err);
// KDA_GEMM_RULES's value s (NULL (unset) or "1": the measured rules into rules
// [KDA_CUDA_GEMM_RULES_MAX], *n of them; "0" or empty: none) like the above: anything else *n = 0,
// -1 and one line in err. Host only.
int kda_cuda_parse_gemm_rules(const char *s, KdaCudaGemmRule rules[KDA_CUDA_GEMM_RULES_MAX], int *n,
                              KdaError *err);
// The tile ctx's rules give a GEMM of bf16 operands (trans_a, trans_b, m, k, output KdaDtype
// d_type), 0 when none matches. Host only.
int kda_cuda_gemm_rule_tile(const KdaCudaCtx *ctx, int trans_a, int trans_b, int64_t m, int64_t k,
                            int d_type);
void kda_cuda_free(KdaCudaCtx *ctx); // accepts a zeroed struct
int kda_cuda_sync(KdaCudaCtx *ctx);  // waits for ctx->stream; reports asynchronous errors

// Number of visible devices (0 when there is no driver or device; never fails).
int kda_cuda_device_count(void);
int kda_cuda_query(int device, KdaCudaDeviceInfo *info, KdaError *err);

// Raises kernel fn's dynamic shared-memory limit to at least `bytes` on ctx's device
// (cudaFuncSetAttribute), skipping the call when an earlier one on this context already set as
// much. Returns 0 or -1 (ctx->err).
int kda_cuda_smem_limit(KdaCudaCtx *ctx, const void *fn, size_t bytes);

// Scratch of at least `bytes` on the device for one launcher call (ctx->ws; grows, which
// synchronizes the stream; never shrinks). Returns NULL with ctx->err set on failure.
void *kda_cuda_scratch(KdaCudaCtx *ctx, size_t bytes);

// ---- memory helpers (tests, loaders) -----------------------------------------------------------
void *kda_cuda_alloc(KdaCudaCtx *ctx, size_t bytes); // NULL + ctx->err on failure
void kda_cuda_release(void *p);                      // cudaFree, accepts NULL
// Fills `bytes` with 0xFF: NaN for both fp32 and bf16 (test poison before a launch).
int kda_cuda_poison(KdaCudaCtx *ctx, void *p, size_t bytes);
int kda_cuda_zero(KdaCudaCtx *ctx, void *p, size_t bytes);
// Host fp32 <-> device fp32 / bf16 (round to nearest even). These synchronize the stream.
int kda_cuda_put_f32(KdaCudaCtx *ctx, float *dst, const float *src, int64_t n);
int kda_cuda_get_f32(KdaCudaCtx *ctx, float *dst, const float *src, int64_t n);
int kda_cuda_put_bf16(KdaCudaCtx *ctx, kda_bf16 *dst, const float *src, int64_t n);
int kda_cuda_get_bf16(KdaCudaCtx *ctx, float *dst, const kda_bf16 *src, int64_t n);
int kda_cuda_put_bytes(KdaCudaCtx *ctx, void *dst, const void *src, size_t bytes);
// Device -> host raw bytes, queued on ctx->stream behind its kernels, then synchronized. Tests
// use it instead of a bare cudaMemcpy: that runs on the legacy default stream, which does not
// wait for ctx->stream (a non-blocking stream), so it can read an output before its kernel ran.
int kda_cuda_get_bytes(KdaCudaCtx *ctx, void *dst, const void *src, size_t bytes);

#ifdef __cplusplus
}
#endif
#endif // KDA_HAVE_CUDA
#endif
