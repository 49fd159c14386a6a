// bench_gemm.c - the training step's large GEMMs at the 300M shapes (micro-batch 16: N = 32768
// tokens, D = 1024, I = 4096; the LM head per 8192-row chunk, vocabulary 128,256; the attention's
// fused input projection, 1024 -> 1160, and o_proj, 512 -> 1024; bench_proj.c times those at the
// burst clock only, beside their copies) with each of cuBLASLt's heuristic candidates: the
// burst-clock time (median of 10) beside the energy per call at the sustained power draw
// (bench_energy.h), the quantity the step pays at the H200's 700 W cap (docs/perf-log.md,
// "session 8: outcome"). The MLP and the head are ≈ 77 of the step's ≈ 135 ms:
// a candidate a few per cent cheaper in joules moves the step more than any custom kernel left.
//
// Each row runs the model's own call (gemm_cuda.h: the same dtypes, transposes, strides and beta)
// with ctx.gemm_cand = i for every candidate i the heuristic returns for that shape (#0: the
// heuristic's first, timed with the context's tile list emptied); the candidate the model runs
// (KDA_GEMM_RULES' or KDA_GEMM_TILES's pick, src/cuda/cuda_common.h) is marked *. Random inputs;
// weight-gradient rows accumulate into their dW as the model's do. Needs NVML for the energy column
// (else times only).
//
// Build and run: bash bench/kda_kernel/run_cls.sh gemm (on the GPU machine; ~3 min with energy);
// `bench_gemm PART` runs only the rows whose name contains PART (e.g. "LM head").
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_NAME "bench_gemm"
#include "bench_common.h"     // defines: g, die_, time_ms_, rand_bf16_, BenchFn
#include "cuda/cuda_common.h" // defines: KdaCudaCtx, kda_cuda_*
#include "cuda/gemm_cuda.h"   // defines: kda_cuda_gemm_*, kda_cuda_matmul, kda_cuda_gemm_cand_desc
#include "cuda/xent_cuda.h"   // defines: kda_cuda_cls_ld

#include "bench_energy.h" // defines: BenchNvml, bench_energy_* (uses g and die_)

// IN: the fused input projection's width (q, k 256 each, v 512, f0 and g0 64 each, b 8);
// HVV: the attention output's width (8 heads x 64), o_proj's input.
enum { N = 32768, D = 1024, I = 4096, ROWS = 8192, V = 128256, IN = 1160, HVV = 512 };

static struct {
    kda_bf16 *x, *Wgu, *gu, *mm, *Wd, *dh, *dI, *Wh, *n, *lg, *Win, *inb, *Wo, *on, *don;
    float *res, *out, *dx, *dWgu, *dWd, *dn, *dWh, *dWin, *dWo;
    int64_t ld; // the head's logits row stride (kda_cuda_cls_ld)
} z;

// The fifteen products, as model_cuda.c and xent_cuda.cu issue them: the MLP's, the head's, and
// the attention's projections (the profile's "in-proj GEMMs" and "o_proj" rows: ≈ 11 ms of the
// mb-16 step at 1.3-2.3x their floors, docs/perf-log.md "session 9").
static int f_gu_fwd(void) { // gate|up: [N, 2I] bf16 = x [N, D] · Wguᵀ
    return kda_cuda_gemm_fwd(&g, z.gu, KDA_DT_BF16, z.x, z.Wgu, N, D, 2 * I, 0);
}
static int f_down_fwd(void) { // residual: out [N, D] fp32 = res + mm [N, I] · Wdᵀ
    return kda_cuda_gemm_residual(&g, z.out, z.res, z.mm, z.Wd, N, I, D);
}
static int f_down_dx(void) { // dI [N, I] bf16 (row stride 2I: the gate half) = dh [N, D] · Wd
    return kda_cuda_matmul(&g, 0, 0, I, N, D, 1.0f, z.Wd, I, z.dh, D, 0.0f, z.dI, KDA_DT_BF16,
                           2 * I);
}
static int f_down_dw(void) { // dWd [D, I] += dhᵀ · mm
    return kda_cuda_gemm_bwd_dw(&g, z.dWd, z.dh, z.mm, N, I, D);
}
static int f_gu_dx(void) { // dx [N, D] fp32 = dI [N, 2I] · Wgu
    return kda_cuda_gemm_bwd_dx(&g, z.dx, KDA_DT_F32, z.dI, z.Wgu, N, D, 2 * I, 0);
}
static int f_gu_dw(void) { // dWgu [2I, D] += dIᵀ · x
    return kda_cuda_gemm_bwd_dw(&g, z.dWgu, z.dI, z.x, N, D, 2 * I);
}
static int f_in_fwd(void) { // the fused input projection: inb [N, IN] bf16 = x [N, D] · Winᵀ
    return kda_cuda_gemm_fwd(&g, z.inb, KDA_DT_BF16, z.x, z.Win, N, D, IN, 0);
}
static int f_in_dx(void) { // dx [N, D] fp32 = dinb [N, IN] · Win
    return kda_cuda_gemm_bwd_dx(&g, z.dx, KDA_DT_F32, z.inb, z.Win, N, D, IN, 0);
}
static int f_in_dw(void) { // dWin [IN, D] += dinbᵀ · x
    return kda_cuda_gemm_bwd_dw(&g, z.dWin, z.inb, z.x, N, D, IN);
}
static int f_o_fwd(void) { // residual: out [N, D] fp32 = res + on [N, HVV] · Woᵀ
    return kda_cuda_gemm_residual(&g, z.out, z.res, z.on, z.Wo, N, HVV, D);
}
static int f_o_dx(void) { // don [N, HVV] bf16 = dh [N, D] · Wo
    return kda_cuda_gemm_bwd_dx(&g, z.don, KDA_DT_BF16, z.dh, z.Wo, N, HVV, D, 0);
}
static int f_o_dw(void) { // dWo [D, HVV] += dhᵀ · on
    return kda_cuda_gemm_bwd_dw(&g, z.dWo, z.dh, z.on, N, HVV, D);
}
static int f_head_fwd(void) { // logitsᵀ [V, ROWS] (ld) bf16 = Whᵀ · nᵀ
    return kda_cuda_matmul(&g, 1, 0, V, ROWS, D, 1.0f, z.Wh, D, z.n, D, 0.0f, z.lg, KDA_DT_BF16,
                           z.ld);
}
static int f_head_dx(void) { // dnᵀ [D, ROWS] fp32 = Wh_cm · dlogitsᵀ
    return kda_cuda_matmul(&g, 0, 0, D, ROWS, V, 1.0f, z.Wh, D, z.lg, z.ld, 0.0f, z.dn, KDA_DT_F32,
                           D);
}
static int f_head_dw(void) { // dWhᵀ [D, V] += n_cm · dlogits
    return kda_cuda_matmul(&g, 0, 1, D, V, ROWS, 1.0f, z.n, D, z.lg, z.ld, 1.0f, z.dWh, KDA_DT_F32,
                           D);
}

typedef struct {
    const char *name;
    BenchFn fn;
    int ta, tb;
    int64_t m, n, k, lda, ldb, ldd;
    KdaDtype dt;
    double per_step; // calls per mb-16 step (12 layers; the head: 4 chunks)
} Row;

static int call_(void *row) {
    return ((const Row *)row)->fn();
}

static const KdaCudaGemmPick NO_PICK; // no rules, no tiles: cuBLASLt's candidate #0

// One row: every candidate's burst median and (with NVML) its sustained ms and mJ per call.
// model: the model's tile list and shape rules (g holds none, so that gemm_cand 0 is candidate
// #0).
static void run_row_(const Row *r, const BenchNvml *nv, const KdaCudaGemmPick *model) {
    double fl = 2.0 * (double)r->m * (double)r->n * (double)r->k;
    int nc = 0, picked = 0;
    char desc[96];
    g.gemm_pick = *model; // a plan built now: the model's pick
    int rc = kda_cuda_gemm_cand_desc(&g, r->ta, r->tb, r->m, r->n, r->k, r->lda, r->ldb, r->dt,
                                     r->ldd, 0, desc, sizeof desc, &nc, &picked);
    g.gemm_pick = NO_PICK;
    if (rc) die_("candidates");
    printf("%s (%.0f x per step, %.2f TFLOP a call): %d candidates\n", r->name, r->per_step,
           fl / 1e12, nc);
    for (int i = 0; i < nc; i++) {
        if (kda_cuda_gemm_cand_desc(&g, r->ta, r->tb, r->m, r->n, r->k, r->lda, r->ldb, r->dt,
                                    r->ldd, i, desc, sizeof desc, &nc, NULL))
            die_("candidate");
        g.gemm_cand = i;
        float ms = time_ms_(r->fn, NULL);
        printf(" %c#%d %-44s burst %8.3f ms %6.0f TFLOP/s", i == picked ? '*' : ' ', i, desc, ms,
               fl / ms / 1e9);
        if (nv) {
            BenchEnergy e = bench_energy_run(nv, call_, (void *)r);
            printf(" | sustained %8.3f ms %8.1f mJ %5.0f W %5.0f MHz | step %6.1f J",
                   bench_energy_ms_per_call(&e), bench_energy_mj_per_call(&e),
                   bench_energy_watts(&e), e.sm_mhz,
                   bench_energy_mj_per_call(&e) * r->per_step / 1e3);
        }
        printf("\n");
        fflush(stdout);
    }
    g.gemm_cand = 0;
}

static float *zeros_(size_t n) {
    float *p = kda_cuda_alloc(&g, n * sizeof(float));
    if (!p || kda_cuda_zero(&g, p, n * sizeof(float))) die_("alloc");
    return p;
}

int main(int argc, char **argv) {
    KdaError err = {{0}};
    const char *only = argc > 1 ? argv[1] : NULL; // run the rows whose name contains it
    if (kda_cuda_init(&g, 0, &err)) {
        fprintf(stderr, "bench_gemm: %s\n", err.msg);
        return 1;
    }
    printf("%s, %d SMs; the 300M step's GEMMs at N = %d, D = %d, I = %d; head chunk %d x %d\n",
           g.info.name, g.info.sm_count, N, D, I, ROWS, V);
    // the model's tile list and shape rules (KDA_GEMM_TILES, KDA_GEMM_RULES), kept aside: the
    // plans built below take #0
    const KdaCudaGemmPick model = g.gemm_pick;
    g.gemm_pick = NO_PICK;
    KdaRng r;
    rng_seed(&r, 11);
    z.ld = kda_cuda_cls_ld(V);
    z.x = rand_bf16_(&r, (int64_t)N * D, 1.0f), z.Wgu = rand_bf16_(&r, (int64_t)2 * I * D, 0.03f);
    z.gu = rand_bf16_(&r, (int64_t)N * 2 * I, 1.0f), z.mm = rand_bf16_(&r, (int64_t)N * I, 1.0f);
    z.Wd = rand_bf16_(&r, (int64_t)D * I, 0.02f), z.dh = rand_bf16_(&r, (int64_t)N * D, 1e-3f);
    z.dI = rand_bf16_(&r, (int64_t)N * 2 * I, 1e-3f), z.Wh = rand_bf16_(&r, (int64_t)V * D, 0.02f);
    z.n = rand_bf16_(&r, (int64_t)ROWS * D, 1.0f), z.lg = rand_bf16_(&r, (int64_t)ROWS * z.ld, 1);
    z.res = zeros_((size_t)N * D), z.out = zeros_((size_t)N * D), z.dx = zeros_((size_t)N * D);
    z.dWgu = zeros_((size_t)2 * I * D), z.dWd = zeros_((size_t)D * I);
    z.dn = zeros_((size_t)ROWS * D), z.dWh = zeros_((size_t)V * D);
    z.Win = rand_bf16_(&r, (int64_t)IN * D, 0.03f), z.inb = rand_bf16_(&r, (int64_t)N * IN, 1e-3f);
    z.Wo = rand_bf16_(&r, (int64_t)D * HVV, 0.04f), z.on = rand_bf16_(&r, (int64_t)N * HVV, 1.0f);
    z.don = rand_bf16_(&r, (int64_t)N * HVV, 1.0f);
    z.dWin = zeros_((size_t)IN * D), z.dWo = zeros_((size_t)D * HVV);
    // kda_cuda_matmul's column-major forms of the calls above (gemm_cuda.h, xent_cuda.cu)
    const Row rows[] = {
        {"MLP gate|up fwd 1024 -> 8192 bf16", f_gu_fwd, 1, 0, 2 * I, N, D, D, D, 2 * I, KDA_DT_BF16,
         12},
        {"MLP down fwd 4096 -> 1024 fp32 residual", f_down_fwd, 1, 0, D, N, I, I, I, D, KDA_DT_F32,
         12},
        {"MLP down dX 1024 -> 4096 bf16 (ld 8192)", f_down_dx, 0, 0, I, N, D, I, D, 2 * I,
         KDA_DT_BF16, 12},
        {"MLP down dW [1024, 4096] +=", f_down_dw, 0, 1, I, D, N, I, D, I, KDA_DT_F32, 12},
        {"MLP gate|up dX 8192 -> 1024 fp32", f_gu_dx, 0, 0, D, N, 2 * I, D, 2 * I, D, KDA_DT_F32,
         12},
        {"MLP gate|up dW [8192, 1024] +=", f_gu_dw, 0, 1, D, 2 * I, N, D, 2 * I, D, KDA_DT_F32, 12},
        {"LM head logits 8192 x 128256 bf16", f_head_fwd, 1, 0, V, ROWS, D, D, D, z.ld, KDA_DT_BF16,
         4},
        {"LM head dX fp32", f_head_dx, 0, 0, D, ROWS, V, D, z.ld, D, KDA_DT_F32, 4},
        {"LM head dW [128256, 1024] +=", f_head_dw, 0, 1, D, V, ROWS, D, z.ld, D, KDA_DT_F32, 4},
        {"in-proj fwd 1024 -> 1160 bf16", f_in_fwd, 1, 0, IN, N, D, D, D, IN, KDA_DT_BF16, 12},
        {"in-proj dX 1160 -> 1024 fp32", f_in_dx, 0, 0, D, N, IN, D, IN, D, KDA_DT_F32, 12},
        {"in-proj dW [1160, 1024] +=", f_in_dw, 0, 1, D, IN, N, D, IN, D, KDA_DT_F32, 12},
        {"o_proj fwd 512 -> 1024 fp32 residual", f_o_fwd, 1, 0, D, N, HVV, HVV, HVV, D, KDA_DT_F32,
         12},
        {"o_proj dX 1024 -> 512 bf16", f_o_dx, 0, 0, HVV, N, D, HVV, D, HVV, KDA_DT_BF16, 12},
        {"o_proj dW [1024, 512] +=", f_o_dw, 0, 1, HVV, D, N, HVV, D, HVV, KDA_DT_F32, 12},
    };
    BenchNvml nvml;
    int energy = bench_energy_open(&nvml, g.device);
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++)
        if (!only || strstr(rows[i].name, only)) run_row_(&rows[i], energy ? &nvml : NULL, &model);
    kda_cuda_free(&g);
    return 0;
}
