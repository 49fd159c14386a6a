// bench_cls.c - the LM head of the fused classifier at the 300M shapes, one token chunk of the
// micro-batch-16 step (8192 tokens, D = 1024, vocabulary 128,256: a quarter of the step's head):
// the logits GEMM, each row kernel (the block kernel KDA_CLS_ROW=1, the cluster kernel at 4 and 8
// blocks per row and its trimmed instantiation KDA_CLS_ROW=3 beside it, the pipelined cluster
// kernel KDA_CLS_ROW=2 in several shapes: blocks per row x threads x slice buffers), the dX + dW
// GEMMs, and a device-to-device copy of the chunk's logits (the cluster kernels' floor: they read
// the logits once and write the dlogits once, as a copy does). Every timed row kernel starts from
// the same random logits (restored by an untimed copy); CUDA events around the launch only, 2
// warm-ups, median of 10. Prints ms, GB/s or TFLOP/s and the step's share (x 4 chunks), the largest
// |nll| difference between the kernels, and cuBLASLt's candidates for the logits GEMM timed
// (kda_cuda_gemm_probe). KDA_BENCH_ENERGY (bench_energy.h) adds each selected row kernel's
// energy per call at the sustained power draw, e.g. KDA_BENCH_ENERGY="row kernel".
//
// Build and run: bash bench/kda_kernel/run_cls.sh (on the GPU machine; < 60 s).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_NAME "bench_cls"
#include "bench_common.h"     // defines: g, die_, time_ms_, rand_bf16_ (and KdaRng, kda_cuda_*)
#include "core/rng.h"         // defines: KdaRng, rng_normal, rng_below
#include "cuda/cuda_common.h" // defines: KdaCudaCtx, kda_cuda_*
#include "cuda/gemm_cuda.h"   // defines: kda_cuda_gemm_probe
#include "cuda/xent_cuda.h"   // defines: kda_cuda_cls_*

#include "bench_energy.h" // defines: BenchNvml, bench_energy_* (uses g and die_)

enum { ROWS = 8192, D = 1024, V = 128256, CHUNKS = 4 };

typedef struct {
    kda_bf16 *lg, *lg0, *n, *W;
    float *nll, *lse, *dn, *dW;
    int32_t *tg;
    int64_t ld;
    KdaCudaClsWs ws;
    int kernel, cl, nth, nbuf; // the row kernel under test (nth, nbuf: KDA_CLS_ROW_PIPE's shape)
} Bench;

static Bench z;

// The four timed pieces of one chunk, and the untimed restore of the pristine logits that each
// row-kernel run overwrites in place.
static size_t lbytes_(void) {
    return (size_t)ROWS * (size_t)z.ld * 2;
}
static int f_logits(void) {
    return kda_cuda_cls_chunk_logits(&g, z.n, z.W, ROWS, D, V, 0, &z.ws);
}
static int f_rows(void) {
    if (z.kernel == KDA_CLS_ROW_PIPE)
        return kda_cuda_cls_row_pipe(&g, z.lg, z.nll, z.lse, z.tg, ROWS, V, z.ld, 1.0f / ROWS, 1,
                                     z.cl, z.nth, z.nbuf, 0);
    return kda_cuda_cls_row_kernel(&g, z.lg, z.nll, z.lse, z.tg, ROWS, V, z.ld, 1.0f / ROWS, 1,
                                   z.kernel, z.cl);
}
static int f_bwd(void) {
    return kda_cuda_cls_chunk_bwd(&g, z.dn, z.dW, z.n, z.W, ROWS, D, V, 0, &z.ws);
}
static int f_copy(void) {
    return cudaMemcpyAsync(z.lg, z.lg0, lbytes_(), cudaMemcpyDeviceToDevice, g.stream) !=
           cudaSuccess;
}

// The energy rows (KDA_BENCH_ENERGY: bench_energy.h): a row kernel overwrites its logits, so each
// sustained call restores them first; the copy's own line (once, first) is what to subtract.
static int e_copy_rows_(void *copy_only) {
    return f_copy() || (!copy_only && f_rows());
}
static void energy_line_(const BenchNvml *nv) {
    static int copy_done = 0;
    int one = 1;
    for (int k = copy_done; k < 2; k++) {
        BenchEnergy e = bench_energy_run(nv, e_copy_rows_, k ? NULL : &one);
        bench_energy_print(k ? "sustained, restore + rows" : "sustained, restore copy alone", &e);
    }
    copy_done = 1;
}

int main(void) {
    KdaError err = {{0}};
    if (kda_cuda_init(&g, 0, &err)) {
        fprintf(stderr, "bench_cls: %s\n", err.msg);
        return 1;
    }
    printf("%s, %d SMs; chunk %d tokens x %d vocabulary, D %d (x %d chunks per mb-16 step)\n",
           g.info.name, g.info.sm_count, ROWS, V, D, CHUNKS);
    KdaRng r;
    rng_seed(&r, 3);
    z.ld = kda_cuda_cls_ld(V);
    int64_t nl = (int64_t)ROWS * z.ld;
    z.n = rand_bf16_(&r, (int64_t)ROWS * D, 1.0f);
    z.W = rand_bf16_(&r, (int64_t)V * D, 0.05f);
    z.lg = kda_cuda_alloc(&g, (size_t)nl * 2);
    z.nll = kda_cuda_alloc(&g, ROWS * 4), z.lse = kda_cuda_alloc(&g, ROWS * 4);
    z.dn = kda_cuda_alloc(&g, (size_t)ROWS * D * 4), z.dW = kda_cuda_alloc(&g, (size_t)V * D * 4);
    z.tg = kda_cuda_alloc(&g, ROWS * 4);
    if (!z.lg || !z.nll || !z.lse || !z.dn || !z.dW || !z.tg) die_("alloc");
    z.ws = (KdaCudaClsWs){z.lg, ROWS, z.ld, KDA_CLS_ROW_CLUSTER};
    // logits as the model's: the GEMM of random n and W (std ~1.6), targets random; a trained
    // model's rows are more peaked (the kernels' work does not depend on it, the block kernel's
    // running-max updates do a little)
    int32_t *tg = malloc(ROWS * sizeof *tg);
    for (int i = 0; i < ROWS; i++)
        tg[i] = (int32_t)rng_below(&r, V);
    if (kda_cuda_put_bytes(&g, z.tg, tg, ROWS * 4) || kda_cuda_zero(&g, z.dW, (size_t)V * D * 4) ||
        kda_cuda_cls_chunk_logits(&g, z.n, z.W, ROWS, D, V, 0, &z.ws) || kda_cuda_sync(&g))
        die_("setup");
    z.lg0 = kda_cuda_alloc(&g, (size_t)nl * 2);
    if (!z.lg0 || cudaMemcpy(z.lg0, z.lg, (size_t)nl * 2, cudaMemcpyDeviceToDevice))
        die_("pristine copy");
    double gemm_fl = 2.0 * ROWS * D * (double)V, lbytes = 2.0 * (double)nl;
    printf("%-44s %9s %12s %12s\n", "op (one chunk)", "ms", "rate", "x4 chunks ms");
    float t = time_ms_(f_logits, NULL);
    printf("%-44s %9.3f %8.1f TFLOP/s %9.3f\n", "logits GEMM [8192,1024]x[1024,128256] bf16", t,
           gemm_fl / t / 1e9, CHUNKS * t);
    t = time_ms_(f_copy, NULL);
    printf("%-44s %9.3f %8.0f GB/s %12.3f\n", "copy of the logits (read + write)", t,
           2 * lbytes / t / 1e6, CHUNKS * t);
    // the pipelined kernel: 4 x 512 x 3 is KDA_CLS_ROW=2 (one block of 192 KB per SM); 8 blocks
    // per row halve the slice (32 KB): 2 or 3 blocks per SM
    const struct {
        const char *name;
        int kernel, cl, nth, nbuf, fx; // fx: with KDA_FAST_EXP=1 (the fast sum pass)
    } rk[] = {{"row kernel: block (KDA_CLS_ROW=1)", KDA_CLS_ROW_BLOCK, 0, 0, 0, 0},
              {"row kernel: cluster, 4 blocks/row (=0)", KDA_CLS_ROW_CLUSTER, 4, 0, 0, 0},
              {"row kernel: trimmed, 4 blocks/row (default)", KDA_CLS_ROW_TRIM, 4, 0, 0, 0},
              {"row kernel: cluster, 8 blocks/row", KDA_CLS_ROW_CLUSTER, 8, 0, 0, 0},
              {"row kernel: trimmed, 8 blocks/row", KDA_CLS_ROW_TRIM, 8, 0, 0, 0},
              {"row kernel: pipe 4 x 512 thr x 3 buf (=2)", KDA_CLS_ROW_PIPE, 4, 512, 3, 0},
              {"row kernel: pipe 4 x 512 thr x 2 buf", KDA_CLS_ROW_PIPE, 4, 512, 2, 0},
              {"row kernel: pipe 4 x 1024 thr x 3 buf", KDA_CLS_ROW_PIPE, 4, 1024, 3, 0},
              {"row kernel: pipe 4 x 256 thr x 3 buf", KDA_CLS_ROW_PIPE, 4, 256, 3, 0},
              {"row kernel: pipe 8 x 512 thr x 3 buf", KDA_CLS_ROW_PIPE, 8, 512, 3, 0},
              {"row kernel: pipe 8 x 256 thr x 2 buf", KDA_CLS_ROW_PIPE, 8, 256, 2, 0},
              {"row kernel: pipe 8 x 1024 thr x 2 buf", KDA_CLS_ROW_PIPE, 8, 1024, 2, 0},
              {"row kernel: trimmed fast-exp, 4 blocks/row", KDA_CLS_ROW_TRIM, 4, 0, 0, 1}};
    enum { NK = sizeof rk / sizeof *rk };
    BenchNvml nv;
    int energy = getenv("KDA_BENCH_ENERGY") && bench_energy_open(&nv, g.device);
    float *nll[NK];
    for (int k = 0; k < NK; k++) {
        z.kernel = rk[k].kernel, z.cl = rk[k].cl, z.nth = rk[k].nth, z.nbuf = rk[k].nbuf;
        // read at every launch: the fast sum pass (the model's default) for the fx rows only
        setenv("KDA_FAST_EXP", rk[k].fx ? "1" : "0", 1);
        t = time_ms_(f_rows, f_copy);
        // bytes: the floor's (logits read once, dlogits written once)
        printf("%-44s %9.3f %8.0f GB/s %12.3f\n", rk[k].name, t, 2 * lbytes / t / 1e6, CHUNKS * t);
        if (energy && bench_energy_wanted(rk[k].name)) energy_line_(&nv);
        nll[k] = malloc(ROWS * sizeof(float));
        if (kda_cuda_get_f32(&g, nll[k], z.nll, ROWS)) die_("nll");
    }
    t = time_ms_(f_bwd, NULL);
    printf("%-44s %9.3f %8.1f TFLOP/s %9.3f\n", "dX + dW GEMMs", t, 2 * gemm_fl / t / 1e9,
           CHUNKS * t);
    // cuBLASLt's candidates for the logits GEMM (xent_cuda.cu's form: logitsᵀ [V, rows] column-
    // major, ld = z.ld, = Whᵀ · xᵀ): is the heuristic's first pick the fastest?
    float ms[8];
    int nc = 0;
    if (kda_cuda_gemm_probe(&g, 1, 0, V, ROWS, D, z.W, D, z.n, D, 0.0f, NULL, z.lg, KDA_DT_BF16,
                            z.ld, 3, ms, &nc))
        die_("probe");
    int best = 0;
    printf("logits GEMM candidates (ms):");
    for (int i = 0; i < nc; i++) {
        printf(" %.3f", ms[i]);
        if (ms[i] < ms[best]) best = i;
    }
    printf("\n  heuristic #0 %.3f ms (%.0f TFLOP/s), fastest #%d %.3f ms (%.0f TFLOP/s)\n", ms[0],
           gemm_fl / ms[0] / 1e9, best, ms[best], gemm_fl / ms[best] / 1e9);
    double worst = 0, mean = 0;
    for (int i = 0; i < ROWS; i++) {
        for (int k = 1; k < NK; k++)
            worst = fmax(worst, fabs((double)nll[k][i] - nll[0][i]));
        mean += nll[0][i] / ROWS;
    }
    printf("max |nll(cluster, pipe) - nll(block)| %.3g over %d rows (mean nll %.4f)\n", worst, ROWS,
           mean);
    // rk[2], rk[4]: the trimmed kernel, which must give the cluster kernel's (rk[1], rk[3]) bits
    printf("trimmed vs cluster nll bit-identical: 4 blocks/row %s, 8 blocks/row %s\n",
           memcmp(nll[1], nll[2], ROWS * sizeof(float)) ? "NO" : "yes",
           memcmp(nll[3], nll[4], ROWS * sizeof(float)) ? "NO" : "yes");
    unsetenv("KDA_FAST_EXP");
    double fxd = 0; // the fast sum pass (last row) against the trimmed kernel (rk[2])
    for (int i = 0; i < ROWS; i++)
        fxd = fmax(fxd, fabs((double)nll[NK - 1][i] - nll[2][i]));
    printf("max |nll(trimmed fast-exp) - nll(trimmed)| %.3g over %d rows\n", fxd, ROWS);
    for (int k = 0; k < NK; k++)
        free(nll[k]);
    free(tg);
    kda_cuda_free(&g);
    return 0;
}
