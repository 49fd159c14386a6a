// cuda_common.cu - context, error recording, device query, scratch and host<->device helpers;
// see cuda_common.h.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_internal.h" // defines: KdaCudaCtx, CUDA_CHECK, CUBLAS_CHECK, bf16 helpers

#define LT_WORKSPACE_BYTES ((size_t)32 << 20)

extern "C" {

int kda_cuda_fail_at(KdaCudaCtx *ctx, const char *file, int line, const char *what,
                     const char *reason) {
    if (ctx && !ctx->failed) {
        const char *base = strrchr(file, '/');
        snprintf(ctx->err.msg, sizeof ctx->err.msg, "%s:%d: %s: %s", base ? base + 1 : file, line,
                 what, reason);
        ctx->failed = 1;
    }
    return -1;
}

void kda_cuda_clear_error(KdaCudaCtx *ctx) {
    ctx->failed = 0;
    ctx->err.msg[0] = 0;
}

int kda_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError(); // clear the sticky "no driver" error
        return 0;
    }
    return n;
}

// Dense bf16 tensor-core FLOP per clock per SM (fp32 accumulate), by architecture.
static double bf16_flop_per_clock_sm(int major, int minor) {
    if (major == 8 && minor == 0) return 2048; // A100
    if (major == 8) return 1024;               // GA10x / Ada (fp32 accumulate)
    if (major == 9) return 4096;               // H100 / H200
    if (major == 10) return 8192;              // B200 class
    return 0;
}

int kda_cuda_query(int device, KdaCudaDeviceInfo *info, KdaError *err) {
    memset(info, 0, sizeof *info);
    cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, device);
    if (e != cudaSuccess)
        return kda_fail(err, "cuda: device %d: %s", device, cudaGetErrorString(e));
    snprintf(info->name, sizeof info->name, "%s", p.name);
    info->cc_major = p.major;
    info->cc_minor = p.minor;
    info->sm_count = p.multiProcessorCount;
    info->l2_bytes = (size_t)p.l2CacheSize;
    info->smem_per_block_optin = p.sharedMemPerBlockOptin;
    if (cudaDeviceGetAttribute(&info->clock_khz, cudaDevAttrClockRate, device) != cudaSuccess)
        info->clock_khz = 0;
    int prev = 0;
    if (cudaGetDevice(&prev) == cudaSuccess && cudaSetDevice(device) == cudaSuccess) {
        if (cudaMemGetInfo(&info->mem_free, &info->mem_total) != cudaSuccess)
            info->mem_total = p.totalGlobalMem;
        cudaSetDevice(prev);
    }
    (void)cudaGetLastError();
    double per = bf16_flop_per_clock_sm(p.major, p.minor);
    double clock_hz = p.major == 9 ? 1.83e9 : info->clock_khz * 1e3;
    info->peak_bf16_flops = per * info->sm_count * clock_hz;
    return 0;
}

int kda_cuda_parse_gemm_tiles(const char *s, int tiles[KDA_CUDA_GEMM_TILES_MAX], int *n,
                              KdaError *err) {
    *n = 0;
    if (!s) s = KDA_CUDA_GEMM_TILES_DEFAULT;
    if (!*s) return 0;
    const char *p = s;
    for (;;) {
        char *end = NULL;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 100000 || *n == KDA_CUDA_GEMM_TILES_MAX ||
            (*end && *end != ',')) {
            *n = 0;
            return kda_fail(err,
                            "cuda: KDA_GEMM_TILES='%s': expected 1 to %d comma-separated cuBLASLt "
                            "tile ids (cublasLtMatmulTile_t, e.g. 201,197)",
                            s, KDA_CUDA_GEMM_TILES_MAX);
        }
        tiles[(*n)++] = (int)v;
        if (!*end) return 0;
        p = end + 1;
    }
}

// KDA_GEMM_RULES (unset or "1", the default since 2026-12-04): KDA-300M's shapes (D 1024, the
// fused in-projection's 1160 outputs, H·V 512, I 4096) whose best tile at the H200's sustained
// draw is one the tile list does not pick (bench_gemm, all 8 candidates, mb 16;
// docs/log/gpu-2026-12-03.md §33, and §30 for the MLP's), in sustained ms per call, the list's
// pick -> the rule's:
static const KdaCudaGemmRule GEMM_RULES_MEASURED[] = {
    {1, 0, 1024, 512, 0, 20},  // o_proj fwd + residual, fp32 out: 176x128 0.127 -> 128x128 0.093
    {0, 0, 1024, 1160, 0, 29}, // in-proj dX, fp32 out: 256x128 0.151 -> 128x160 0.138
    {0, 0, 4096, 1024, 1, 29}, // MLP down dX, bf16 out: 192x192 0.465 -> 128x160 0.415
};
static_assert(sizeof GEMM_RULES_MEASURED / sizeof *GEMM_RULES_MEASURED <= KDA_CUDA_GEMM_RULES_MAX,
              "KdaCudaCtx.gemm_pick.rules holds the measured rules");
// The step graph's fingerprint hashes KdaCudaGemmPick's bytes: no padding may hold garbage.
static_assert(sizeof(KdaCudaGemmPick) == sizeof(KdaCudaGemmRule) * KDA_CUDA_GEMM_RULES_MAX +
                                             sizeof(int) * (KDA_CUDA_GEMM_TILES_MAX + 2),
              "KdaCudaGemmPick has no padding");

int kda_cuda_parse_gemm_rules(const char *s, KdaCudaGemmRule rules[KDA_CUDA_GEMM_RULES_MAX], int *n,
                              KdaError *err) {
    *n = 0;
    if (s && (!strcmp(s, "0") || !*s)) return 0; // "0" or empty: none
    if (s && strcmp(s, "1"))
        return kda_fail(err,
                        "cuda: KDA_GEMM_RULES='%s': expected 1 (the measured per-shape tiles, the "
                        "default) or 0 (none)",
                        s);
    for (size_t i = 0; i < sizeof GEMM_RULES_MEASURED / sizeof *GEMM_RULES_MEASURED; i++)
        rules[(*n)++] = GEMM_RULES_MEASURED[i];
    return 0;
}

int kda_cuda_gemm_rule_tile(const KdaCudaCtx *ctx, int trans_a, int trans_b, int64_t m, int64_t k,
                            int d_type) {
    for (int i = 0; i < ctx->gemm_pick.n_rules; i++) {
        const KdaCudaGemmRule *r = &ctx->gemm_pick.rules[i];
        if (r->trans_a == (trans_a != 0) && r->trans_b == (trans_b != 0) && r->m == m &&
            r->k == k && r->d_type == d_type)
            return r->tile;
    }
    return 0;
}

int kda_cuda_init(KdaCudaCtx *ctx, int device, KdaError *err) {
    memset(ctx, 0, sizeof *ctx);
    // a malformed switch fails before anything is created
    if (kda_cuda_parse_gemm_tiles(getenv("KDA_GEMM_TILES"), ctx->gemm_pick.tiles,
                                  &ctx->gemm_pick.n_tiles, err) ||
        kda_cuda_parse_gemm_rules(getenv("KDA_GEMM_RULES"), ctx->gemm_pick.rules,
                                  &ctx->gemm_pick.n_rules, err))
        return -1;
    ctx->device = device;
    if (kda_cuda_query(device, &ctx->info, err)) return -1;
    cudaError_t e = cudaSetDevice(device);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaMalloc(&ctx->lt_ws, LT_WORKSPACE_BYTES);
    if (e != cudaSuccess) {
        kda_cuda_free(ctx);
        return kda_fail(err, "cuda: init device %d: %s", device, cudaGetErrorString(e));
    }
    ctx->lt_ws_size = LT_WORKSPACE_BYTES;
    cublasLtHandle_t h = NULL;
    cublasStatus_t s = cublasLtCreate(&h);
    if (s != CUBLAS_STATUS_SUCCESS) {
        kda_cuda_free(ctx);
        return kda_fail(err, "cuda: cublasLtCreate: %s", cublasGetStatusString(s));
    }
    ctx->lt_handle = h;
    const char *plan = getenv("KDA_GEMM_PLAN");
    ctx->plan_off = plan && !strcmp(plan, "0");
    const char *tune = getenv("KDA_GEMM_TUNE");
    ctx->gemm_tune = tune && !strcmp(tune, "1");
    const char *cand = getenv("KDA_GEMM_CAND"); // "1".."7"; anything else: 0
    ctx->gemm_cand = cand && cand[0] >= '1' && cand[0] <= '7' && !cand[1] ? cand[0] - '0' : 0;
    const char *tcv = getenv("KDA_TC_V");
    // 6 (the default since 2026-12-04, with three other switches measured faster at mb 32 and 64:
    // docs/log/gpu-2026-12-04.md §3): v5 with a full chunk's rows at compile time, bitwise v5's
    // results (kda_tc.h); "5": v5 (the default from 2026-12-03 session 6, bitwise v4: KDA core
    // rows 17.2 → 15.8 ms at mb 16), v4 with the mma-only operands rounded to TF32 once; "4":
    // v4; "3": v3 whole
    ctx->tc_version = tcv && !strcmp(tcv, "3")   ? 3
                      : tcv && !strcmp(tcv, "4") ? 4
                      : tcv && !strcmp(tcv, "5") ? 5
                                                 : 6;
    const char *gv = getenv("KDA_GATE_V");
    ctx->gate_version = gv && !strcmp(gv, "1") ? 1 : 2; // v2: measured faster (perf-log)
    const char *pdl = getenv("KDA_PDL"); // programmatic dependent launch: Hopper and later
    ctx->pdl = pdl && !strcmp(pdl, "1") && ctx->info.cc_major >= 9;
    return 0;
}

void kda_cuda_gemm_plans_free(KdaCudaCtx *ctx); // gemm_cuda.cu

void kda_cuda_free(KdaCudaCtx *ctx) {
    kda_cuda_gemm_plans_free(ctx);
    if (ctx->lt_handle) cublasLtDestroy((cublasLtHandle_t)ctx->lt_handle);
    if (ctx->stream) cudaStreamSynchronize(ctx->stream);
    cudaFree(ctx->lt_ws);
    cudaFree(ctx->ws);
    if (ctx->stream) cudaStreamDestroy(ctx->stream);
    memset(ctx, 0, sizeof *ctx);
}

int kda_cuda_sync(KdaCudaCtx *ctx) {
    CUDA_CHECK(ctx, cudaStreamSynchronize(ctx->stream));
    CUDA_CHECK(ctx, cudaGetLastError());
    return 0;
}

int kda_cuda_smem_limit(KdaCudaCtx *ctx, const void *fn, size_t bytes) {
    int n = ctx->n_smem_set;
    for (int i = 0; i < n; i++)
        if (ctx->smem_set[i].fn == fn) {
            if (ctx->smem_set[i].bytes >= bytes) return 0;
            CUDA_CHECK(ctx, cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 (int)bytes));
            ctx->smem_set[i].bytes = bytes;
            return 0;
        }
    CUDA_CHECK(ctx,
               cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    if (n < (int)(sizeof ctx->smem_set / sizeof ctx->smem_set[0])) { // full: set every launch
        ctx->smem_set[n].fn = fn;
        ctx->smem_set[n].bytes = bytes;
        ctx->n_smem_set = n + 1;
    }
    return 0;
}

void *kda_cuda_scratch(KdaCudaCtx *ctx, size_t bytes) {
    if (bytes <= ctx->ws_size) return ctx->ws;
    if (cudaStreamSynchronize(ctx->stream) != cudaSuccess) {
        kda_cuda_fail_at(ctx, __FILE__, __LINE__, "cudaStreamSynchronize", "before scratch grow");
        return NULL;
    }
    cudaFree(ctx->ws);
    ctx->ws = NULL;
    ctx->ws_size = 0;
    size_t want = bytes < ((size_t)1 << 20) ? ((size_t)1 << 20) : bytes;
    cudaError_t e = cudaMalloc(&ctx->ws, want);
    if (e != cudaSuccess) {
        ctx->ws = NULL;
        kda_cuda_fail_at(ctx, __FILE__, __LINE__, "cudaMalloc(scratch)", cudaGetErrorString(e));
        return NULL;
    }
    ctx->ws_size = want;
    return ctx->ws;
}

void *kda_cuda_alloc(KdaCudaCtx *ctx, size_t bytes) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        kda_cuda_fail_at(ctx, __FILE__, __LINE__, "cudaMalloc", cudaGetErrorString(e));
        return NULL;
    }
    return p;
}

void kda_cuda_release(void *p) {
    if (p) cudaFree(p);
}

int kda_cuda_poison(KdaCudaCtx *ctx, void *p, size_t bytes) {
    CUDA_CHECK(ctx, cudaMemsetAsync(p, 0xFF, bytes, ctx->stream));
    return 0;
}

int kda_cuda_zero(KdaCudaCtx *ctx, void *p, size_t bytes) {
    CUDA_CHECK(ctx, cudaMemsetAsync(p, 0, bytes, ctx->stream));
    return 0;
}

int kda_cuda_put_bytes(KdaCudaCtx *ctx, void *dst, const void *src, size_t bytes) {
    CUDA_CHECK(ctx, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ctx->stream));
    return kda_cuda_sync(ctx);
}

int kda_cuda_get_bytes(KdaCudaCtx *ctx, void *dst, const void *src, size_t bytes) {
    CUDA_CHECK(ctx, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, ctx->stream));
    return kda_cuda_sync(ctx);
}

int kda_cuda_put_f32(KdaCudaCtx *ctx, float *dst, const float *src, int64_t n) {
    return kda_cuda_put_bytes(ctx, dst, src, (size_t)n * sizeof(float));
}

int kda_cuda_get_f32(KdaCudaCtx *ctx, float *dst, const float *src, int64_t n) {
    CUDA_CHECK(ctx, cudaMemcpyAsync(dst, src, (size_t)n * sizeof(float), cudaMemcpyDeviceToHost,
                                    ctx->stream));
    return kda_cuda_sync(ctx);
}

// Host-side conversions, the same rounding as core/util.h (round to nearest even, NaN quiet).
static kda_bf16 host_f2bf(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (kda_bf16)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (kda_bf16)(u >> 16);
}

static float host_bf2f(kda_bf16 h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

int kda_cuda_put_bf16(KdaCudaCtx *ctx, kda_bf16 *dst, const float *src, int64_t n) {
    kda_bf16 *tmp = (kda_bf16 *)kda_malloc((size_t)(n > 0 ? n : 1) * sizeof(kda_bf16));
    for (int64_t i = 0; i < n; i++)
        tmp[i] = host_f2bf(src[i]);
    int rc = kda_cuda_put_bytes(ctx, dst, tmp, (size_t)n * sizeof(kda_bf16));
    free(tmp);
    return rc;
}

int kda_cuda_get_bf16(KdaCudaCtx *ctx, float *dst, const kda_bf16 *src, int64_t n) {
    kda_bf16 *tmp = (kda_bf16 *)kda_malloc((size_t)(n > 0 ? n : 1) * sizeof(kda_bf16));
    cudaError_t e = cudaMemcpyAsync(tmp, src, (size_t)n * sizeof(kda_bf16), cudaMemcpyDeviceToHost,
                                    ctx->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(ctx->stream);
    if (e != cudaSuccess) {
        free(tmp);
        return kda_cuda_fail_at(ctx, __FILE__, __LINE__, "cudaMemcpyAsync(bf16 D2H)",
                                cudaGetErrorString(e));
    }
    for (int64_t i = 0; i < n; i++)
        dst[i] = host_bf2f(tmp[i]);
    free(tmp);
    return 0;
}

} // extern "C"
