// test_gpu_cls.c - the fused classifier's row kernels on the device (src/cuda/xent_cuda.h
// kda_cuda_cls_row_kernel: the cluster kernel, default, the block kernel, KDA_CLS_ROW=1, and the
// pipelined cluster kernel, KDA_CLS_ROW=2; the trimmed cluster kernel, KDA_CLS_ROW=3, which must
// give the cluster kernel's bits) against their host twins (kda_cuda_cls_rows2_host,
// kda_cuda_cls_rows_trim_host, kda_cuda_cls_rows_host; the CPU suite holds the twins to the CPU
// cross-entropy and to float64 in test_cls_host.c) and against each other, at vocabularies from 5
// to 128,256 and every cluster size (make test-gpu; needs a device).
//
// Tolerances: lse and nll 1e-6 · max(1, |lse|) (device expf vs the host's libm: <= 3 ulps per
// term, so the partition sums differ by ~2e-7 relative; plus one fp32 ulp of each stored lse);
// dlogits 2^-7 |ref| + 1e-30 (ex2.approx on the device vs libm expf, and each lse's last ulp, move
// a value across a bf16 rounding boundary at most: one bf16 ulp, <= 2^-7 relative; the device
// flushes denormal results to zero, the host keeps them: < 1e-30), plus 4 fp32 ulps of 1.0 times
// the scale (2^-22 · scale) absolute: at a row's target p ≈ 1, so p − 1 carries the last ulp of
// the device's and the host's p in full (the GPU run of 2026-12-03: -6.33e-8 vs -6.15e-8 at
// scale 1/31, one ulp of 1.0 = 5.96e-8 · 1/31 apart, at V = 5 and 8). A wrong
// slice, a lost group, a wrong max or target gives errors of order 1; an unwritten row stays
// the NaN poison.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

#ifdef KDA_HAVE_CUDA

#include "core/error.h"       // defines: kda_malloc
#include "core/rng.h"         // defines: KdaRng, rng_normal, rng_below
#include "core/util.h"        // defines: f32_to_bf16, bf16_to_f32
#include "cpu/xent.h"         // defines: XENT_IGNORE
#include "cuda/cuda_common.h" // defines: KdaCudaCtx, kda_cuda_*
#include "cuda/xent_cuda.h"   // defines: kda_cuda_cls_row_kernel, kda_cuda_cls_rows2_host
#include "gpu_ctx.h"          // defines: gpu_test_ctx, GpuEnv, gpu_env_set

// Trained-like rows (test_cls_host.c's): N(0, 2) background, the target +14, three distractors
// +8; row 1 flat, row 2 at +40, every 7th row ignored; padding columns NaN.
static void make_rows_(kda_bf16 *lg, int32_t *tg, int64_t rows, int64_t V, int64_t ld,
                       uint64_t seed) {
    KdaRng r;
    rng_seed(&r, seed);
    for (int64_t i = 0; i < rows; i++) {
        int32_t t = (int32_t)rng_below(&r, (uint64_t)V);
        tg[i] = i % 7 == 3 ? XENT_IGNORE : t;
        for (int64_t j = 0; j < ld; j++) {
            float x = rng_normal(&r, 0.0f, i == 1 ? 0.5f : 2.0f) + (i == 2 ? 40.0f : 0.0f);
            lg[i * ld + j] = f32_to_bf16(j < V ? x : NAN);
        }
        if (i == 1) continue;
        lg[i * ld + t] = f32_to_bf16(bf16_to_f32(lg[i * ld + t]) + 14.0f);
        for (int k = 0; k < 3; k++) {
            int64_t j = (int64_t)rng_below(&r, (uint64_t)V);
            lg[i * ld + j] = f32_to_bf16(bf16_to_f32(lg[i * ld + j]) + 8.0f);
        }
    }
}

// The pipelined kernel's shape (kda_cuda_cls_row_pipe; 0s: its defaults).
typedef struct {
    int nth, nbuf, clusters;
} PipeShape;

// Runs `kernel` (cl blocks per row) on the device over a copy of lg; pipe non-NULL: the
// pipelined kernel with that shape instead. out: the device's dlogits, nll, lse. Returns 0 or -1.
static int run_dev_(KdaCudaCtx *ctx, const kda_bf16 *lg, const int32_t *tg, int64_t rows, int64_t V,
                    int64_t ld, float scale, int kernel, int cl, const PipeShape *pipe,
                    kda_bf16 *out, float *nll, float *lse) {
    size_t lb = (size_t)(rows * ld) * sizeof(kda_bf16);
    kda_bf16 *dl = kda_cuda_alloc(ctx, lb);
    int32_t *dt = kda_cuda_alloc(ctx, (size_t)rows * 4);
    float *dn = kda_cuda_alloc(ctx, (size_t)rows * 4), *ds = kda_cuda_alloc(ctx, (size_t)rows * 4);
    int rc =
        !dl || !dt || !dn || !ds || kda_cuda_put_bytes(ctx, dl, lg, lb) ||
        kda_cuda_put_bytes(ctx, dt, tg, (size_t)rows * 4) ||
        kda_cuda_poison(ctx, dn, (size_t)rows * 4) || kda_cuda_poison(ctx, ds, (size_t)rows * 4) ||
        (pipe ? kda_cuda_cls_row_pipe(ctx, dl, dn, ds, dt, rows, V, ld, scale, 1, cl, pipe->nth,
                                      pipe->nbuf, pipe->clusters)
              : kda_cuda_cls_row_kernel(ctx, dl, dn, ds, dt, rows, V, ld, scale, 1, kernel, cl)) ||
        kda_cuda_sync(ctx) || cudaMemcpy(out, dl, lb, cudaMemcpyDeviceToHost) != cudaSuccess ||
        cudaMemcpy(nll, dn, (size_t)rows * 4, cudaMemcpyDeviceToHost) != cudaSuccess ||
        cudaMemcpy(lse, ds, (size_t)rows * 4, cudaMemcpyDeviceToHost) != cudaSuccess;
    kda_cuda_release(dl), kda_cuda_release(dt), kda_cuda_release(dn), kda_cuda_release(ds);
    return rc ? -1 : 0;
}

// Row results a against b (tolerances above); returns the number of dlogits that differ at all.
static int64_t compare_(const char *what, const kda_bf16 *ga, const float *nlla, const float *lsea,
                        const kda_bf16 *gb, const float *nllb, const float *lseb, int64_t rows,
                        int64_t V, int64_t ld, float scale) {
    int64_t diff = 0;
    for (int64_t i = 0; i < rows; i++) {
        double tol = 1e-6 * fmax(1.0, fabs(lseb[i]));
        CHECK_MSG(fabs(lsea[i] - lseb[i]) <= tol && fabs(nlla[i] - nllb[i]) <= tol,
                  "%s row %lld: lse %.9g vs %.9g, nll %.9g vs %.9g", what, (long long)i, lsea[i],
                  lseb[i], nlla[i], nllb[i]);
        int bad = 0;
        for (int64_t j = 0; j < ld; j++) {
            float a = bf16_to_f32(ga[i * ld + j]), b = bf16_to_f32(gb[i * ld + j]);
            if (j >= V) { // padding: never written
                if (!isnan(a) && !bad++)
                    CHECK_MSG(0, "%s row %lld: padding %lld written", what, (long long)i,
                              (long long)j);
                continue;
            }
            diff += a != b;
            if (!(fabs(a - b) <= fabs(b) / 128.0 + ldexp(scale, -22) + 1e-30) && !bad++)
                CHECK_MSG(0, "%s row %lld col %lld: dlogit %.9g vs %.9g", what, (long long)i,
                          (long long)j, a, b);
        }
    }
    return diff;
}

// The vocabularies and cluster sizes both row-kernel tests walk: odd, tiny, one past a power of
// two, and the Llama-3 vocabulary; cl 0 takes kda_cuda_cls_cluster's choice.
typedef struct {
    int64_t V;
    int cl;
} ClsCase;
static const ClsCase CLS_CASES[] = {{1003, 1}, {1003, 2},  {1003, 4},  {1003, 8},   {5, 8},
                                    {8, 2},    {32768, 1}, {32769, 0}, {128256, 0}, {128256, 8}};
#define N_CLS_CASES (sizeof CLS_CASES / sizeof *CLS_CASES)

// The cluster, block and trimmed row kernels at every case against their host twins (tolerances
// above), the trimmed one also against the cluster one bit for bit: its precise form, so
// KDA_FAST_EXP=0 for the test (the fast form: gpu_cls_trim_fast_exp; a suite run under
// KDA_FAST_EXP=1 failed here: docs/log/gpu-2026-12-03.md §30). And the argument checks.
KDA_TEST_GPU(gpu_cls_rows_match_host) {
    KdaCudaCtx ctx;
    int ok = gpu_test_ctx(&ctx);
    if (!ok) return;
    GpuEnv fx;
    gpu_env_set(&fx, "KDA_FAST_EXP", "0");
    const ClsCase *cases = CLS_CASES;
    const int64_t rows = 37;
    for (size_t c = 0; c < N_CLS_CASES && ok; c++) {
        int64_t V = cases[c].V, ld = kda_cuda_cls_ld(V);
        int cl = cases[c].cl ? cases[c].cl : kda_cuda_cls_cluster(V);
        size_t n = (size_t)(rows * ld);
        kda_bf16 *lg = kda_malloc(n * 2), *gd = kda_malloc(n * 2), *gb = kda_malloc(n * 2),
                 *gh = kda_malloc(n * 2), *gt = kda_malloc(n * 2);
        int32_t *tg = kda_malloc((size_t)rows * 4);
        float nd[37], sd[37], nb[37], sb[37], nh[37], sh[37], nt[37], st[37];
        make_rows_(lg, tg, rows, V, ld, 100 + c);
        float scale = 1.0f / 31.0f;
        int rc =
            run_dev_(&ctx, lg, tg, rows, V, ld, scale, KDA_CLS_ROW_CLUSTER, cases[c].cl, NULL, gd,
                     nd, sd) ||
            run_dev_(&ctx, lg, tg, rows, V, ld, scale, KDA_CLS_ROW_BLOCK, 0, NULL, gb, nb, sb) ||
            run_dev_(&ctx, lg, tg, rows, V, ld, scale, KDA_CLS_ROW_TRIM, cases[c].cl, NULL, gt, nt,
                     st);
        CHECK_MSG(rc == 0, "V %lld cl %d: %s", (long long)V, cl, ctx.err.msg);
        if (rc) {
            ok = 0;
        } else {
            memcpy(gh, lg, n * 2);
            kda_cuda_cls_rows2_host(gh, nh, sh, tg, rows, V, ld, scale, 1, 256, cl);
            char what[64];
            snprintf(what, sizeof what, "V %lld cl %d device vs host", (long long)V, cl);
            int64_t d1 = compare_(what, gd, nd, sd, gh, nh, sh, rows, V, ld, scale);
            snprintf(what, sizeof what, "V %lld cl %d cluster vs block", (long long)V, cl);
            int64_t d2 = compare_(what, gd, nd, sd, gb, nb, sb, rows, V, ld, scale);
            printf("    V %6lld, %d blocks/row: dlogits differing from the host twin %lld, from "
                   "the block kernel %lld (of %lld)\n",
                   (long long)V, cl, (long long)d1, (long long)d2, (long long)(rows * V));
            // the trimmed kernel: the cluster kernel's bits, and its own twin's within tolerance
            CHECK_MSG(!memcmp(gt, gd, n * 2) && !memcmp(nt, nd, sizeof(float) * rows) &&
                          !memcmp(st, sd, sizeof(float) * rows),
                      "V %lld cl %d: the trimmed kernel's bits differ from the cluster kernel's",
                      (long long)V, cl);
            memcpy(gh, lg, n * 2);
            kda_cuda_cls_rows_trim_host(gh, nh, sh, tg, rows, V, ld, scale, 1, 256, cl);
            snprintf(what, sizeof what, "V %lld cl %d trimmed device vs host", (long long)V, cl);
            compare_(what, gt, nt, st, gh, nh, sh, rows, V, ld, scale);
        }
        free(lg), free(gd), free(gb), free(gh), free(gt), free(tg);
    }
    // argument checks: a cluster size other than 1, 2, 4, 8; a slice over 4096 groups
    float *d = kda_cuda_alloc(&ctx, 1024 * 2);
    CHECK(d != NULL);
    if (d) {
        CHECK(kda_cuda_cls_row_kernel(&ctx, (kda_bf16 *)d, d, d, (int32_t *)d, 1, 100, 128, 1.0f, 0,
                                      KDA_CLS_ROW_CLUSTER, 3) == -1);
        kda_cuda_clear_error(&ctx);
        CHECK(kda_cuda_cls_row_kernel(&ctx, (kda_bf16 *)d, d, d, (int32_t *)d, 1, 128256, 128256,
                                      1.0f, 0, KDA_CLS_ROW_CLUSTER, 1) == -1);
        kda_cuda_clear_error(&ctx);
    }
    kda_cuda_release(d);
    kda_cuda_free(&ctx);
    gpu_env_restore(&fx);
}

// The trimmed kernel with KDA_FAST_EXP=1 (its sum pass by the fast exponential, fast_math.cuh)
// against its fast host twin (kda_cuda_cls_rows_trim_fx_host; the tolerances above: the twin's
// exp2f and the device's ex2.approx differ by ~2 ulps per term) and against the precise trimmed
// kernel: lse and nll within 2e-6 · max(1, |lse|) (each term that carries the sum within ~1.2e-6
// relative, docs/perf-log.md "Fast exponentials in SiLU and the CE sum pass"), dlogits within one
// bf16 ulp (compare_'s 2^-7 |ref|: the same formula, lse moved by that much). The switch must
// change some lse's bits (a dead switch fails).
KDA_TEST_GPU(gpu_cls_trim_fast_exp) {
    KdaCudaCtx ctx;
    int ok = gpu_test_ctx(&ctx);
    if (!ok) return;
    const int64_t rows = 37;
    int64_t lse_diff = 0;
    double worst = 0.0;
    for (size_t c = 0; c < N_CLS_CASES && ok; c++) {
        int64_t V = CLS_CASES[c].V, ld = kda_cuda_cls_ld(V);
        int cl = CLS_CASES[c].cl ? CLS_CASES[c].cl : kda_cuda_cls_cluster(V);
        size_t n = (size_t)(rows * ld);
        kda_bf16 *lg = kda_malloc(n * 2), *gf = kda_malloc(n * 2), *gp = kda_malloc(n * 2),
                 *gh = kda_malloc(n * 2);
        int32_t *tg = kda_malloc((size_t)rows * 4);
        float nf[37], sf[37], np_[37], sp[37], nh[37], sh[37];
        make_rows_(lg, tg, rows, V, ld, 500 + c);
        float scale = 1.0f / 31.0f;
        GpuEnv fx;
        gpu_env_set(&fx, "KDA_FAST_EXP", "1");
        int rc = run_dev_(&ctx, lg, tg, rows, V, ld, scale, KDA_CLS_ROW_TRIM, CLS_CASES[c].cl, NULL,
                          gf, nf, sf);
        setenv("KDA_FAST_EXP", "0", 1);
        rc = rc || run_dev_(&ctx, lg, tg, rows, V, ld, scale, KDA_CLS_ROW_TRIM, CLS_CASES[c].cl,
                            NULL, gp, np_, sp);
        gpu_env_restore(&fx);
        CHECK_MSG(rc == 0, "V %lld cl %d: %s", (long long)V, cl, ctx.err.msg);
        if (rc) {
            ok = 0;
        } else {
            memcpy(gh, lg, n * 2);
            kda_cuda_cls_rows_trim_fx_host(gh, nh, sh, tg, rows, V, ld, scale, 1, 256, cl);
            char what[64];
            snprintf(what, sizeof what, "V %lld cl %d fast device vs fast host", (long long)V, cl);
            compare_(what, gf, nf, sf, gh, nh, sh, rows, V, ld, scale);
            for (int64_t i = 0; i < rows; i++) {
                double d = fmax(fabs(sf[i] - sp[i]), fabs(nf[i] - np_[i])) / fmax(1.0, fabs(sp[i]));
                worst = fmax(worst, d);
                lse_diff += sf[i] != sp[i];
                CHECK_MSG(d <= 2e-6, "V %lld cl %d row %lld: fast lse %.9g nll %.9g vs %.9g %.9g",
                          (long long)V, cl, (long long)i, sf[i], nf[i], sp[i], np_[i]);
            }
            snprintf(what, sizeof what, "V %lld cl %d fast vs precise", (long long)V, cl);
            // compare_ for the dlogits only: the precise lse and nll on both sides (the fast
            // ones are held to 2e-6 above, compare_'s 1e-6 is for twins of one function)
            int64_t d = compare_(what, gf, sp, sp, gp, sp, sp, rows, V, ld, scale);
            printf("    V %6lld, %d blocks/row: fast vs precise dlogits differing %lld of %lld\n",
                   (long long)V, cl, (long long)d, (long long)(rows * V));
        }
        free(lg), free(gf), free(gp), free(gh), free(tg);
    }
    printf("    fast vs precise: lse/nll max |d| / max(1, |lse|) %.3g, %lld lse differing\n", worst,
           (long long)lse_diff);
    CHECK_MSG(lse_diff > 0, "KDA_FAST_EXP=1 changed no lse: the switch is dead");
    kda_cuda_free(&ctx);
}

// The pipelined kernel (KDA_CLS_ROW_PIPE) against its host twin kda_cuda_cls_rows2_host(nth, cl)
// (tolerances above) at the cluster kernel's vocabularies and cluster sizes, in several shapes:
// its defaults through kda_cuda_cls_row_kernel (as many clusters as fit: one row each at these
// 37 rows, mostly), and explicit threads / buffers with 1-5 clusters, so that each cluster runs
// 8-37 rows through every buffer and both pair slots several times (a buffer reused too early, a
// pair slot overwritten before a peer read it, or a row skipped shows as a mismatch or the NaN
// poison). With 256 threads it must equal the cluster kernel bit for bit (the same function).
KDA_TEST_GPU(gpu_cls_pipe_match_host) {
    KdaCudaCtx ctx;
    int ok = gpu_test_ctx(&ctx);
    if (!ok) return;
    const ClsCase *cases = CLS_CASES;
    const PipeShape shapes[] = {{0, 0, 0}, {256, 2, 3}, {512, 3, 1}, {1024, 1, 2}, {512, 2, 5}};
    const int64_t rows = 37;
    for (size_t c = 0; c < N_CLS_CASES && ok; c++) {
        int64_t V = cases[c].V, ld = kda_cuda_cls_ld(V);
        int cl = cases[c].cl ? cases[c].cl : kda_cuda_cls_cluster(V);
        size_t n = (size_t)(rows * ld);
        kda_bf16 *lg = kda_malloc(n * 2), *gd = kda_malloc(n * 2), *gc = kda_malloc(n * 2),
                 *gh = kda_malloc(n * 2);
        int32_t *tg = kda_malloc((size_t)rows * 4);
        float nd[37], sd[37], nc[37], sc[37], nh[37], sh[37];
        make_rows_(lg, tg, rows, V, ld, 300 + c);
        float scale = 1.0f / 31.0f;
        int rc = run_dev_(&ctx, lg, tg, rows, V, ld, scale, KDA_CLS_ROW_CLUSTER, cases[c].cl, NULL,
                          gc, nc, sc);
        CHECK_MSG(rc == 0, "V %lld cl %d cluster: %s", (long long)V, cl, ctx.err.msg);
        for (size_t k = 0; k < sizeof shapes / sizeof *shapes && rc == 0; k++) {
            const PipeShape *p = &shapes[k];
            int nth = p->nth ? p->nth : 512;
            rc = k == 0 ? run_dev_(&ctx, lg, tg, rows, V, ld, scale, KDA_CLS_ROW_PIPE, cases[c].cl,
                                   NULL, gd, nd, sd)
                        : run_dev_(&ctx, lg, tg, rows, V, ld, scale, KDA_CLS_ROW_PIPE, cases[c].cl,
                                   p, gd, nd, sd);
            CHECK_MSG(rc == 0, "V %lld cl %d pipe %d x %d x %d: %s", (long long)V, cl, nth, p->nbuf,
                      p->clusters, ctx.err.msg);
            if (rc) break;
            memcpy(gh, lg, n * 2);
            kda_cuda_cls_rows2_host(gh, nh, sh, tg, rows, V, ld, scale, 1, nth, cl);
            char what[96];
            snprintf(what, sizeof what, "V %lld cl %d pipe %d x %d x %d device vs host",
                     (long long)V, cl, nth, p->nbuf, p->clusters);
            int64_t d1 = compare_(what, gd, nd, sd, gh, nh, sh, rows, V, ld, scale);
            int64_t d2 = 0;
            if (nth == 256) { // the cluster kernel's function: the same bits
                d2 = memcmp(gd, gc, n * 2) != 0;
                for (int64_t i = 0; i < rows; i++)
                    d2 += nd[i] != nc[i] || sd[i] != sc[i];
                CHECK_MSG(d2 == 0,
                          "V %lld cl %d pipe 256: %lld differences from the cluster kernel",
                          (long long)V, cl, (long long)d2);
            }
            printf("    V %6lld, %d blocks/row, pipe %4d threads %d buffers %d clusters: dlogits "
                   "differing from the host twin %lld\n",
                   (long long)V, cl, nth, p->nbuf, p->clusters, (long long)d1);
        }
        ok = rc == 0;
        free(lg), free(gd), free(gc), free(gh), free(tg);
    }
    // argument checks: threads other than 256 / 512 / 1024; 4 buffers; a slice over 4096 groups
    float *d = kda_cuda_alloc(&ctx, 1024 * 2);
    CHECK(d != NULL);
    if (d) {
        CHECK(kda_cuda_cls_row_pipe(&ctx, (kda_bf16 *)d, d, d, (int32_t *)d, 1, 100, 128, 1.0f, 0,
                                    1, 128, 0, 0) == -1);
        kda_cuda_clear_error(&ctx);
        CHECK(kda_cuda_cls_row_pipe(&ctx, (kda_bf16 *)d, d, d, (int32_t *)d, 1, 100, 128, 1.0f, 0,
                                    1, 512, 4, 0) == -1);
        kda_cuda_clear_error(&ctx);
        CHECK(kda_cuda_cls_row_pipe(&ctx, (kda_bf16 *)d, d, d, (int32_t *)d, 1, 128256, 128256,
                                    1.0f, 0, 1, 512, 0, 0) == -1); // a slice over 4096 groups
        kda_cuda_clear_error(&ctx);
    }
    kda_cuda_release(d);
    kda_cuda_free(&ctx);
}

#endif // KDA_HAVE_CUDA
