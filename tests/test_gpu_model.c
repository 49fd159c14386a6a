// test_gpu_model.c - the GPU model (src/model/model_cuda.h, xent_cuda.h, model/runtime.h) against
// the CPU fp32 reference (model/model.h, cpu/xent.h, model/optim.h). `make test-gpu` runs these.
//
// Metric: rel-RMS = kda_case_fla_ratio(cpu, gpu) = RMS(gpu - cpu) / RMS(cpu), 0 when every
// |gpu - cpu| <= 1e-6 (FLA's rule, kda-model.md §6.6, without its + 1e-8 guard on RMS(cpu)).
// Tolerances and why:
//   * loss: 1e-2 relative. The GPU runs kda-model.md §8's bf16 flow: every GEMM operand (norm
//     outputs, projections, q/k/v, the head's input and weights) is rounded to bf16 (unit
//     roundoff u = 2^-8 = 3.9e-3) and the logits chunk is stored in bf16 (a logit of magnitude
//     ~10 moves by up to ~0.04, but the errors are unbiased and average over the vocabulary and
//     the tokens). The mean loss lands ~1e-3 from fp32; 1e-2 leaves margin, and a missing
//     term (e.g. a wrong residual or a dropped sublayer) changes the loss by far more.
//   * every parameter gradient: 2e-2 rel-RMS. Gradients pass through the same bf16 roundings
//     twice (forward operands, then bf16 activation gradients into the dX/dW GEMMs) and through
//     the KDA core, whose bf16-input gradients FLA itself accepts at 8e-3 (dq, dk, dv) to 2e-2
//     (dg, dβ) against fp32 (§6.6); weight gradients are fp32-accumulated here (more accurate
//     than FLA's bf16 rounding). A wrong formula gives O(1) errors.
//   * fused cross-entropy on identical bf16-representable inputs: per row |Δnll| and |Δlse| <=
//     u·(|logit[target]| + max|logit|) + 1e-5, the bound from the bf16 storage of each logit
//     (the fp32-accumulated GEMM adds ~1e-6); dn and dW 1e-2 rel-RMS (dlogits stored in bf16).
//   * AdamW on the same gradients: 2e-6 relative per element (the update is the CPU's
//     arithmetic in the same order with IEEE ops; only the grad norm's summation order differs,
//     which can move the fp32 clip factor by one ulp).
//   * 20 training steps: each step's loss within 3% of the CPU run's (bf16 noise, amplified by
//     Adam's normalisation of small gradients, stays well below the loss's own step-to-step
//     change of ~5-10% at this learning rate); and both runs must learn (last < 0.8 x first).
// Every measured error is printed.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

#ifdef KDA_HAVE_CUDA

#include "core/rng.h"         // defines: KdaRng, rng_normal, rng_below
#include "core/util.h"        // defines: bf16_to_f32, f32_to_bf16
#include "cpu/xent.h"         // defines: xent_fwd, xent_bwd, xent_targets, xent_work_floats
#include "cuda/cuda_common.h" // defines: KdaCudaCtx, kda_cuda_*
#include "model/model_cuda.h" // defines: KdaCudaModel, kda_cuda_model_*
#include "cuda/xent_cuda.h"   // defines: kda_cuda_xent_fwd, kda_cuda_xent_bwd
#include "tiny_model.h"       // defines: tiny_load_model, tiny_model_init
#include "gpu_ctx.h"          // defines: gpu_test_have, GpuEnv, gpu_env_set
#include "gpu_step.h"         // defines: GpuStep, gpu_train_step, gpu_bits_differ
#include "kda_case.h"         // defines: kda_case_expect, kda_case_fla_ratio
#include "io/safetensors.h"   // defines: SafeTensors, st_open, st_find
#include "model/model.h"      // defines: KdaModel, kda_model_forward, kda_model_backward
#include "model/optim.h"      // defines: KdaAdamW, kda_adamw_step, kda_grad_clip
#include "model/runtime.h"    // defines: KdaRuntime, kda_runtime_* (training through the seam)

#define TOL_LOSS 1e-2
#define TOL_GRAD 2e-2
// A_log's gradient is one number per head, Σ_{t,d} dg·g over every token and channel: its terms
// cancel, so its relative error is the largest (2.1e-2 measured on the untied tiny model on an
// H200 with the chunk-32 fast core; FLA's own test only warns on dA_log). With the fused
// elementwise kernels (other bf16 rounding points upstream of the gate) it measured 4.76e-2 on
// the same model (2026-12-02, SIMT core; 3e-2 held with KDA_CORE=tc): 5e-2 for it. A wrong
// gate formula moves it by O(1).
#define TOL_GRAD_ALOG 5e-2
// Two bf16 GPU paths against each other (fused vs unfused kernels, gate|up vs two GEMMs): each
// carries up to TOL_GRAD of independent bf16 noise against fp32, so their difference is bounded
// by sqrt(2) TOL_GRAD (measured 2.0e-2 .. 2.6e-2 for fused vs unfused on an H200, 2026-12-02).
#define TOL_GRAD_PAIR (1.5 * TOL_GRAD)
#define BF16_U        (1.0 / 256.0) // unit roundoff of bf16 (8-bit significand)
#define TOL_XENT_GRAD 1e-2
#define TOL_ADAM      2e-6
#define TOL_TRAIN     3e-2

static int32_t *golden_ids_(const char *rel, int64_t *B, int64_t *T) {
    SafeTensors st;
    KdaError err;
    int rc = st_open(&st, test_data(rel), &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (rc) return NULL;
    const StTensor *t = st_find(&st, "ids");
    CHECK_MSG(t && t->dtype == ST_I64 && t->ndim == 2, "%s: 'ids' must be I64 [B, T]", rel);
    int32_t *ids = NULL;
    if (t && t->dtype == ST_I64 && t->ndim == 2) {
        *B = t->shape[0], *T = t->shape[1];
        ids = kda_malloc((size_t)t->numel * sizeof(int32_t));
        for (int64_t i = 0; i < t->numel; i++) {
            int64_t v;
            memcpy(&v, (const char *)t->data + 8 * i, 8);
            ids[i] = (int32_t)v;
        }
    }
    st_close(&st);
    return ids;
}

// Tiny untied HV == H config (the GPU backward's restriction), V = 2K, vocabulary not a multiple
// of 128, built in code; `heads` heads (2: the in-proj width 386; 4: 644, a multiple of 4).
static void tiny_heads_(KdaModel *m, double init_std, uint64_t seed, int64_t heads) {
    KdaConfig c;
    kda_config_defaults(&c);
    c.hidden_size = 64, c.num_hidden_layers = 2, c.num_heads = heads, c.head_dim = 32;
    c.expand_v = 2.0, c.intermediate_size_raw = 96, c.vocab_size = 300, c.conv_size = 4;
    c.tie_word_embeddings = 0;
    c.initializer_range = init_std;
    KdaError err;
    KDA_ASSERT(kda_config_derive(&c, "tiny_untied", &err) == 0);
    tiny_model_init(m, &c, seed);
}
static void tiny_untied_(KdaModel *m, double init_std, uint64_t seed) {
    tiny_heads_(m, init_std, seed, 2);
}

static int32_t *random_ids_(int64_t n, int64_t vocab, uint64_t seed) {
    KdaRng r;
    rng_seed(&r, seed);
    int32_t *ids = kda_malloc((size_t)n * sizeof(int32_t));
    for (int64_t i = 0; i < n; i++)
        ids[i] = (int32_t)rng_below(&r, (uint64_t)vocab);
    return ids;
}

// ---- whole-model loss and every gradient vs the CPU -----------------------------------------

// One GPU training step's numbers: zeroed gradients, forward (per-token NLL and mean loss),
// backward, gradients copied to grads [total_numel] in the table's dense layout.
// gpu_step_: forward + backward (the legacy head); gpu_step_fused_: the fused classifier
// (kda_cuda_model_forward_backward) with a logits budget of 128 rows (several token chunks and a
// partial last one at B·T = 200).
static int gpu_step_(KdaCudaModel *dm, const int32_t *ids, int64_t B, int64_t T, float *nll,
                     float *loss, float *grads, KdaError *err) {
    return kda_cuda_model_zero_grads(dm, err) ||
           kda_cuda_model_forward(dm, ids, NULL, B, T, nll, loss, err) ||
           kda_cuda_model_backward(dm, err) || kda_cuda_model_get_grads(dm, grads, err);
}
static int gpu_step_fused_(KdaCudaModel *dm, const int32_t *ids, int64_t B, int64_t T, float *nll,
                           float *loss, float *grads, KdaError *err) {
    const KdaConfig *c = kda_cuda_model_config(dm);
    size_t budget = (size_t)128 * (size_t)kda_cuda_cls_ld(c->vocab_size) * 2;
    return kda_cuda_model_set_cls_budget(dm, budget, err) || kda_cuda_model_zero_grads(dm, err) ||
           kda_cuda_model_forward_backward(dm, ids, NULL, B, T, nll, loss, err) ||
           kda_cuda_model_get_grads(dm, grads, err);
}

static void compare_step_(KdaModel *m, const int32_t *ids, int64_t B, int64_t T, const char *what,
                          int fused) {
    KdaError err = {{0}};
    int64_t n = m->table.total_numel, N = B * T;
    float *gc = kda_calloc((size_t)n, sizeof(float)), *gg = kda_calloc((size_t)n, sizeof(float));
    float *nc = kda_malloc((size_t)N * sizeof(float)), *ng = kda_malloc((size_t)N * sizeof(float));
    float lc = NAN, lg = NAN;
    m->core = KDA_CORE_CHUNK;
    CHECK(kda_model_forward(m, ids, NULL, B, T, nc, NULL, &lc, &err) == 0);
    CHECK(kda_model_backward(m, gc, &err) == 0);
    KdaCudaModel *dm = NULL;
    int rc = kda_cuda_model_create(&dm, &m->cfg, &m->table, m->params, 0, &err);
    if (!rc) rc = (fused ? gpu_step_fused_ : gpu_step_)(dm, ids, B, T, ng, &lg, gg, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (!rc) {
        double le = fabs((double)lg - lc) / fabs((double)lc);
        CHECK_MSG(le <= TOL_LOSS, "%s loss gpu %.6f vs cpu %.6f: rel %.3g > %g", what, lg, lc, le,
                  TOL_LOSS);
        double ne = kda_case_fla_ratio(nc, ng, N);
        CHECK_MSG(ne <= TOL_GRAD, "%s per-token nll rel-RMS %.3g > %g", what, ne, TOL_GRAD);
        printf("    gpu %s: loss %.6f vs cpu %.6f (rel %.2e), nll rel-RMS %.2e\n", what, lg, lc, le,
               ne);
        double worst = 0.0;
        const char *wname = "";
        for (int i = 0; i < m->table.n; i++) {
            const KdaParamInfo *p = &m->table.rows[i];
            double e = kda_case_fla_ratio(gc + p->offset, gg + p->offset, p->numel);
            double tol = strstr(p->name, "A_log") ? TOL_GRAD_ALOG : TOL_GRAD;
            CHECK_MSG(e <= tol, "%s grad %s: rel-RMS %.3g > %g", what, p->name, e, tol);
            printf("      grad %-40s rel-RMS %.2e\n", p->name, e);
            if (!(e <= worst)) worst = e, wname = p->name;
        }
        printf("    gpu %s: worst grad %.2e (%s)\n", what, worst, wname);
    }
    kda_cuda_model_free(dm);
    free(gc), free(gg), free(nc), free(ng);
}

KDA_TEST_GPU(gpu_model_a_loss_and_grads) {
    if (!gpu_test_have()) return;
    KdaModel m;
    memset(&m, 0, sizeof m);
    int64_t B = 0, T = 0;
    int32_t *ids = golden_ids_("golden/model_a_step.safetensors", &B, &T);
    if (ids && !tiny_load_model(&m, "golden/model_a")) {
        compare_step_(&m, ids, B, T, "model_a(tied)", 0);
        compare_step_(&m, ids, B, T, "model_a(tied, fused classifier)", 1);
    }
    free(ids);
    kda_model_free(&m);
}

KDA_TEST_GPU(gpu_model_untied_loss_and_grads) {
    if (!gpu_test_have()) return;
    KdaModel m;
    tiny_untied_(&m, 0.05, 11);
    int64_t B = 2, T = 100; // a partial last chunk of the core (100 = 64 + 36)
    int32_t *ids = random_ids_(B * T, m.cfg.vocab_size, 12);
    compare_step_(&m, ids, B, T, "tiny(untied)", 0);
    compare_step_(&m, ids, B, T, "tiny(untied, fused classifier)", 1);
    free(ids);
    kda_model_free(&m);
}

// How many of n floats differ in their bits.
static int64_t bits_differ_(const float *a, const float *b, int64_t n) {
    int64_t diff = 0;
    for (int64_t i = 0; i < n; i++)
        diff += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return diff;
}

// Per-block recompute (kda_cuda_model_set_recompute): the backward re-runs each block's forward
// with the same deterministic kernels on the same inputs, so the loss and every gradient must be
// bit-identical to the run that stored all activations. Three layers, so that a middle block is
// recomputed between two others (a wrong `next` or a stale shared buffer shows at once).
KDA_TEST_GPU(gpu_model_recompute_bit_identical) {
    if (!gpu_test_have()) return;
    KdaModel m;
    tiny_untied_(&m, 0.05, 61);
    KdaError err = {{0}};
    KdaConfig c3 = m.cfg;
    kda_model_free(&m);
    c3.num_hidden_layers = 3;
    KDA_ASSERT(kda_model_init(&m, &c3, &err) == 0);
    kda_params_init(&m.table, &m.cfg, m.params, 61);
    int64_t B = 2, T = 100, n = m.table.total_numel;
    int32_t *ids = random_ids_(B * T, m.cfg.vocab_size, 62);
    float *g0 = kda_malloc((size_t)n * 4), *g1 = kda_malloc((size_t)n * 4), loss[2] = {0, 0};
    KdaCudaModel *dm = NULL;
    int rc = kda_cuda_model_create(&dm, &m.cfg, &m.table, m.params, 0, &err);
    for (int pass = 0; pass < 2 && !rc; pass++)
        rc = kda_cuda_model_set_recompute(dm, pass, &err) ||
             gpu_step_(dm, ids, B, T, NULL, &loss[pass], pass ? g1 : g0, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (!rc) {
        CHECK_MSG(loss[0] == loss[1], "loss %.9g (stored) vs %.9g (recompute)", loss[0], loss[1]);
        int64_t diff = bits_differ_(g0, g1, n);
        CHECK_MSG(diff == 0, "%lld of %lld gradient elements differ with recompute",
                  (long long)diff, (long long)n);
        printf("    recompute: loss %.6f both ways, %lld gradient elements bit-identical\n",
               loss[0], (long long)n);
    }
    kda_cuda_model_free(dm);
    free(ids), free(g0), free(g1);
    kda_model_free(&m);
}

// M0 of the KDA core (kda_fast.h): the forward's kept h and Δ replace the backward's state
// recompute. With the tensor-core core v3 (and the SIMT core) the kept values are the
// recompute's bit for bit, so loss and gradients must be bit-identical with KDA_CORE_KEEP=0
// (recompute), with keeping on, and with keeping plus per-block recompute (one shared set of
// kept states). v4's kept backward also reads the forward's Akk and KK, which the recomputing
// backward gets from its own inverse (another order of the same fp32 operations): the GPU run of
// 2026-12-03 found 159,163 of 233,542 gradient elements differing in their low bits, and call 4
// of 2026-12-03 measured them at 4.5e-3 rel-RMS (max |d| 1.5e-3): two independent TF32
// evaluations of the same inverse, each ~5e-4 on the core's outputs (tests/test_kda_tc.c),
// grown by three layers' backward — the same order as TF32 vs fp32 (gpu_model_core_tc: 8e-3).
// So for v4 (and v5, bitwise v4) the gradients are held to 1e-2 rel-RMS (a wrong kept tensor shows
// at >= 1e-1), the loss (the same forward) and keeping vs keeping plus per-block recompute (the
// same kept tensors) stay bit-identical. Three layers, fused classifier. v6 (the default, bitwise
// v5: gpu_kda_tc_v6_matches_v5) must also give v5's kept-state gradients bit for bit (T = 100:
// three full chunks and a partial one per sequence).
static float *core_keep_case_(int version, const float *ref);
KDA_TEST_GPU(gpu_model_core_keep_bit_identical) {
    if (!gpu_test_have()) return;
    free(core_keep_case_(3, NULL));
    free(core_keep_case_(4, NULL));
    // v5 (bitwise v4: gpu_kda_tc_v5_matches_v4) and v6, the default since 2026-12-04
    float *g5 = core_keep_case_(5, NULL);
    free(core_keep_case_(6, g5));
    free(g5);
}

// Returns the kept pass's gradients (the caller frees them; NULL when a pass failed); with ref,
// they must equal ref bit for bit.
static float *core_keep_case_(int version, const float *ref) {
    KdaModel m;
    tiny_untied_(&m, 0.05, 71);
    KdaError err = {{0}};
    KdaConfig c3 = m.cfg;
    kda_model_free(&m);
    c3.num_hidden_layers = 3;
    KDA_ASSERT(kda_model_init(&m, &c3, &err) == 0);
    kda_params_init(&m.table, &m.cfg, m.params, 71);
    int64_t B = 2, T = 100, n = m.table.total_numel;
    int32_t *ids = random_ids_(B * T, m.cfg.vocab_size, 72);
    float *g[3], loss[3] = {0, 0, 0};
    for (int pass = 0; pass < 3; pass++)
        g[pass] = kda_malloc((size_t)n * 4);
    int rc = 0;
    for (int pass = 0; pass < 3 && !rc; pass++) {
        // both put back as they were, so a suite run under KDA_TC_V keeps it for later tests
        GpuEnv e_keep, e_ver;
        gpu_env_set(&e_keep, "KDA_CORE_KEEP", pass == 0 ? "0" : NULL);
        char ver[2] = {(char)('0' + version), 0};
        gpu_env_set(&e_ver, "KDA_TC_V", ver); // the model's context reads it at init
        KdaCudaModel *dm = NULL;
        rc = kda_cuda_model_create(&dm, &m.cfg, &m.table, m.params, 0, &err);
        gpu_env_restore(&e_keep), gpu_env_restore(&e_ver);
        if (!rc) rc = kda_cuda_model_set_recompute(dm, pass == 2, &err);
        if (!rc) rc = gpu_step_fused_(dm, ids, B, T, NULL, &loss[pass], g[pass], &err);
        kda_cuda_model_free(dm);
    }
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (!rc) {
        for (int pass = 1; pass < 3; pass++) {
            CHECK_MSG(loss[pass] == loss[0], "v%d pass %d: loss %.9g vs %.9g (recompute)", version,
                      pass, loss[pass], loss[0]);
            int64_t diff = bits_differ_(g[pass], g[version == 3 ? 0 : 1], n);
            CHECK_MSG(diff == 0, "v%d pass %d: %lld of %lld gradient elements differ", version,
                      pass, (long long)diff, (long long)n);
        }
        if (version >= 4)
            kda_case_expect("v4/v5 kept vs recomputed gradients", g[0], g[1], n, 1e-2);
        printf("    tc v%d kept KDA states: loss %.6f, gradients %s the recompute\n", version,
               loss[0], version == 3 ? "bit-identical to" : "within 1e-2 rel-RMS of");
        if (ref) {
            int64_t diff = bits_differ_(g[1], ref, n);
            CHECK_MSG(diff == 0,
                      "v%d kept: %lld of %lld gradient elements differ from the "
                      "reference version's",
                      version, (long long)diff, (long long)n);
        }
    }
    float *kept = rc ? NULL : g[1];
    for (int pass = 0; pass < 3; pass++)
        if (g[pass] != kept) free(g[pass]);
    free(ids);
    kda_model_free(&m);
    return kept;
}

// The tensor-core core (cuda/kda_tc.h; the model's default) against the SIMT one (pass 0,
// KDA_CORE=simt), with its kept state (pass 1) and with the backward recomputing it (pass 2,
// KDA_CORE_KEEP=0).
// The core's TF32 products move the loss by ~1e-5 and the gradients by ~1e-3 rel RMS (the core
// alone is ~5e-4 against fp32, tests/test_kda_tc.c): tolerances 1e-4 relative on the loss and
// 1e-2 on the gradients (a wrong core term shows at >= 1e-1). Kept (pass 1) and recomputed
// (pass 2) tc states: the same loss bits (the same forward); the gradients within 1e-2 rel-RMS
// (measured 2.3e-3 on 2026-12-03, call 4), since v4's kept backward reads the forward's Akk and
// KK where the recompute inverts again in TF32 (gpu_model_core_keep_bit_identical holds v3 to
// bit identity).
KDA_TEST_GPU(gpu_model_core_tc) {
    if (!gpu_test_have()) return;
    KdaModel m;
    tiny_untied_(&m, 0.05, 81); // K = 32, V = 64: the tensor-core kernels take it (chunk 32)
    KdaError err = {{0}};
    int64_t B = 2, T = 100, n = m.table.total_numel;
    int32_t *ids = random_ids_(B * T, m.cfg.vocab_size, 82);
    float *g[3], loss[3] = {0, 0, 0};
    int rc = 0;
    for (int pass = 0; pass < 3; pass++)
        g[pass] = kda_malloc((size_t)n * 4);
    for (int pass = 0; pass < 3 && !rc; pass++) {
        // pinned in every pass (unset: the defaults, tc since 2026-12-03, and kept), then put back
        GpuEnv core, keep;
        gpu_env_set(&core, "KDA_CORE", pass == 0 ? "simt" : NULL);
        gpu_env_set(&keep, "KDA_CORE_KEEP", pass == 2 ? "0" : NULL);
        KdaCudaModel *dm = NULL;
        rc = kda_cuda_model_create(&dm, &m.cfg, &m.table, m.params, 0, &err);
        gpu_env_restore(&core), gpu_env_restore(&keep);
        if (!rc) rc = gpu_step_fused_(dm, ids, B, T, NULL, &loss[pass], g[pass], &err);
        kda_cuda_model_free(dm);
    }
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (!rc) {
        double rel = fabs((double)loss[1] - loss[0]) / fabs((double)loss[0]);
        printf("    loss simt %.7f, tc %.7f (rel %.1e)\n", loss[0], loss[1], rel);
        CHECK_MSG(rel <= 1e-4, "tc loss %.9g vs simt %.9g", loss[1], loss[0]);
        kda_case_expect("tc vs simt gradients", g[0], g[1], n, 1e-2);
        CHECK_MSG(loss[2] == loss[1], "tc kept vs recomputed state: loss %.9g vs %.9g", loss[1],
                  loss[2]);
        kda_case_expect("tc kept vs recomputed gradients", g[2], g[1], n, 1e-2);
    }
    for (int pass = 0; pass < 3; pass++)
        free(g[pass]);
    free(ids);
    kda_model_free(&m);
}

// KDA_FAST_EXP=1 (the conv kernels' fast SiLU / SiLU' and the CE row kernel's fast sum pass,
// src/cuda/fast_math.cuh; read at every launch, so it is set around the step) against
// KDA_FAST_EXP=0, one fused forward + backward of the tiny model (W = 4, K = 32: the fast kernels).
// Bounds (docs/perf-log.md, "Fast exponentials in SiLU and the CE sum pass"): the fast SiLU is
// within 2e-6 of the precise one, so the conv outputs flip one bf16 ulp in ~0.1 % of elements,
// and each row's lse moves by <= 2e-6 · max(1, |lse|): the loss within 1e-5 relative (tolerance
// 1e-4, the tc core test's), the gradients within 1e-2 rel RMS (bf16 flips propagated; a wrong
// SiLU shows at >= 1e-1). The switch must change some gradient bits (a dead switch fails).
KDA_TEST_GPU(gpu_model_fast_exp) {
    if (!gpu_test_have()) return;
    KdaModel m;
    tiny_untied_(&m, 0.05, 83);
    KdaError err = {{0}};
    int64_t B = 2, T = 100, n = m.table.total_numel;
    int32_t *ids = random_ids_(B * T, m.cfg.vocab_size, 84);
    float *g[2], loss[2] = {0, 0};
    int rc = 0;
    for (int pass = 0; pass < 2; pass++)
        g[pass] = kda_malloc((size_t)n * 4);
    for (int pass = 0; pass < 2 && !rc; pass++) {
        KdaCudaModel *dm = NULL;
        rc = kda_cuda_model_create(&dm, &m.cfg, &m.table, m.params, 0, &err);
        GpuEnv fx;
        gpu_env_set(&fx, "KDA_FAST_EXP", pass == 1 ? "1" : "0");
        if (!rc) rc = gpu_step_fused_(dm, ids, B, T, NULL, &loss[pass], g[pass], &err);
        gpu_env_restore(&fx);
        kda_cuda_model_free(dm);
    }
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (!rc) {
        double rel = fabs((double)loss[1] - loss[0]) / fabs((double)loss[0]);
        int64_t diff = bits_differ_(g[1], g[0], n);
        printf("    loss precise %.7f, fast exp %.7f (rel %.1e); %lld of %lld gradients differ\n",
               loss[0], loss[1], rel, (long long)diff, (long long)n);
        CHECK_MSG(rel <= 1e-4, "fast-exp loss %.9g vs %.9g", loss[1], loss[0]);
        kda_case_expect("fast-exp vs precise gradients", g[0], g[1], n, 1e-2);
        CHECK_MSG(diff > 0, "KDA_FAST_EXP=1 changed no gradient: the switch is dead");
    }
    for (int pass = 0; pass < 2; pass++)
        free(g[pass]);
    free(ids);
    kda_model_free(&m);
}

// ---- fused cross-entropy: vocabulary chunks (legacy) and token chunks (fused classifier) -------

// fused = 0: kda_cuda_xent_fwd + _bwd over vocabulary chunks of 128 (128, 128, 44 columns);
// fused = 1: kda_cuda_cls_fused over token chunks of 16 rows (16, 16, 1) with row kernel `row`
// (xent_cuda.h KDA_CLS_ROW_*), its loss-only mode first (dn NULL: nll, lse and the loss sum the
// same bits as the training mode's).
static void xent_case_(int fused, int row) {
    KdaCudaCtx ctx;
    KdaError err = {{0}};
    CHECK_MSG(kda_cuda_init(&ctx, 0, &err) == 0, "%s", err.msg);
    if (err.msg[0]) return;
    const int64_t B = 3, T = 11, N = B * T, D = 48, NV = 300, CH = 128; // chunks 128, 128, 44
    KdaRng r;
    rng_seed(&r, 5);
    float *n = kda_malloc((size_t)(N * D) * 4), *W = kda_malloc((size_t)(NV * D) * 4);
    for (int64_t i = 0; i < N * D; i++)
        n[i] = bf16_to_f32(f32_to_bf16(rng_normal(&r, 0.0f, 1.0f)));
    for (int64_t i = 0; i < NV * D; i++)
        W[i] = bf16_to_f32(f32_to_bf16(rng_normal(&r, 0.0f, 0.3f)));
    int32_t *labels = random_ids_(N, NV, 6), tg[3 * 11];
    labels[4] = -100; // an ignored label besides the last positions
    int64_t nvalid = xent_targets(tg, labels, B, T);
    // CPU reference on the same (bf16-representable) inputs.
    int64_t wf = xent_work_floats(N, NV);
    float *work = kda_malloc((size_t)wf * 4), *nll_c = kda_malloc((size_t)N * 4);
    float *lse_c = kda_malloc((size_t)N * 4), *dn_c = kda_malloc((size_t)(N * D) * 4);
    float *dW_c = kda_calloc((size_t)(NV * D), 4);
    float *lg_c = kda_malloc((size_t)(N * NV) * 4);
    double sum_c = xent_fwd(nll_c, lse_c, lg_c, n, W, tg, N, D, NV, work, wf);
    xent_bwd(dn_c, dW_c, n, W, tg, lse_c, N, D, NV, 1.0f / (float)nvalid, work, wf);
    // GPU.
    kda_bf16 *dn16 = kda_cuda_alloc(&ctx, (size_t)(N * D) * 2);
    kda_bf16 *dW16 = kda_cuda_alloc(&ctx, (size_t)(NV * D) * 2);
    int32_t *dtg = kda_cuda_alloc(&ctx, (size_t)N * 4);
    float *dnll = kda_cuda_alloc(&ctx, (size_t)N * 4), *dlse = kda_cuda_alloc(&ctx, (size_t)N * 4);
    float *ddn = kda_cuda_alloc(&ctx, (size_t)(N * D) * 4);
    float *ddW = kda_cuda_alloc(&ctx, (size_t)(NV * D) * 4);
    double *dsum = kda_cuda_alloc(&ctx, 8);
    KdaCudaXentWs ws = {kda_cuda_alloc(&ctx, kda_cuda_xent_logits_bytes(N, CH)),
                        kda_cuda_alloc(&ctx, kda_cuda_xent_stat_bytes(N)), CH};
    const int64_t ROWS = 16;
    KdaCudaClsWs cws = {kda_cuda_alloc(&ctx, kda_cuda_cls_bytes(ROWS, NV)), ROWS,
                        kda_cuda_cls_ld(NV), row};
    float *nll_lo = kda_malloc((size_t)N * 4), *lse_lo = kda_malloc((size_t)N * 4);
    double sum_lo = NAN;
    KDA_ASSERT(dn16 && dW16 && dtg && dnll && dlse && ddn && ddW && dsum && ws.logits && ws.stat &&
               cws.logits);
    float scale = 1.0f / (float)nvalid;
    int rc = kda_cuda_put_bf16(&ctx, dn16, n, N * D) || kda_cuda_put_bf16(&ctx, dW16, W, NV * D) ||
             kda_cuda_put_bytes(&ctx, dtg, tg, (size_t)N * 4) ||
             kda_cuda_zero(&ctx, ddW, (size_t)(NV * D) * 4) ||
             kda_cuda_poison(&ctx, ddn, (size_t)(N * D) * 4) ||
             kda_cuda_poison(&ctx, dnll, (size_t)N * 4) ||
             kda_cuda_poison(&ctx, dlse, (size_t)N * 4);
    if (!rc && !fused)
        rc = kda_cuda_xent_fwd(&ctx, dnll, dlse, dsum, dn16, dW16, dtg, N, D, NV, &ws) ||
             kda_cuda_xent_bwd(&ctx, ddn, ddW, dn16, dW16, dtg, dlse, N, D, NV, scale, &ws);
    if (!rc && fused)
        rc = kda_cuda_cls_fused(&ctx, dnll, dlse, dsum, NULL, NULL, dn16, dW16, dtg, N, D, NV,
                                scale, &cws) ||
             kda_cuda_get_f32(&ctx, nll_lo, dnll, N) || kda_cuda_get_f32(&ctx, lse_lo, dlse, N) ||
             cudaMemcpy(&sum_lo, dsum, 8, cudaMemcpyDeviceToHost) != cudaSuccess ||
             kda_cuda_poison(&ctx, dnll, (size_t)N * 4) ||
             kda_cuda_cls_fused(&ctx, dnll, dlse, dsum, ddn, ddW, dn16, dW16, dtg, N, D, NV, scale,
                                &cws);
    if (!rc) rc = kda_cuda_sync(&ctx);
    CHECK_MSG(rc == 0, "%s", ctx.err.msg);
    if (!rc) {
        float *nll_g = kda_malloc((size_t)N * 4), *lse_g = kda_malloc((size_t)N * 4);
        float *dn_g = kda_malloc((size_t)(N * D) * 4), *dW_g = kda_malloc((size_t)(NV * D) * 4);
        double sum_g = 0.0;
        CHECK(kda_cuda_get_f32(&ctx, nll_g, dnll, N) == 0);
        CHECK(kda_cuda_get_f32(&ctx, lse_g, dlse, N) == 0);
        CHECK(kda_cuda_get_f32(&ctx, dn_g, ddn, N * D) == 0);
        CHECK(kda_cuda_get_f32(&ctx, dW_g, ddW, NV * D) == 0);
        CHECK(cudaMemcpy(&sum_g, dsum, 8, cudaMemcpyDeviceToHost) == cudaSuccess);
        double worst = 0.0, tol_sum = 0.0;
        for (int64_t i = 0; i < N; i++) {
            double mx = 0.0;
            for (int64_t j = 0; j < NV; j++)
                mx = fmax(mx, fabs(lg_c[i * NV + j]));
            double tl = BF16_U * (tg[i] >= 0 ? fabs(lg_c[i * NV + tg[i]]) : 0.0);
            double tol = BF16_U * mx + tl + 1e-5;
            CHECK_NEAR(lse_g[i], lse_c[i], BF16_U * mx + 1e-5);
            CHECK_NEAR(nll_g[i], nll_c[i], tol);
            if (tg[i] < 0) CHECK(nll_g[i] == 0.0f);
            if (tg[i] >= 0) tol_sum += tol;
            if (!(fabs(nll_g[i] - nll_c[i]) <= worst)) worst = fabs(nll_g[i] - nll_c[i]);
        }
        CHECK_NEAR(sum_g, sum_c, tol_sum);
        if (fused) { // loss-only mode: the same row kernel without the dlogits pass
            CHECK(!memcmp(nll_lo, nll_g, (size_t)N * 4) && !memcmp(lse_lo, lse_g, (size_t)N * 4));
            CHECK(sum_lo == sum_g);
        }
        double e_dn = kda_case_fla_ratio(dn_c, dn_g, N * D),
               e_dw = kda_case_fla_ratio(dW_c, dW_g, NV * D);
        CHECK_MSG(e_dn <= TOL_XENT_GRAD, "dn rel-RMS %.3g", e_dn);
        CHECK_MSG(e_dw <= TOL_XENT_GRAD, "dW rel-RMS %.3g", e_dw);
        printf("    %s, 3 chunks: max |nll diff| %.2e, loss sum %.6f vs %.6f, dn %.2e, dW %.2e\n",
               !fused                     ? "xent"
               : row == KDA_CLS_ROW_BLOCK ? "fused classifier (block rows)"
               : row == KDA_CLS_ROW_PIPE  ? "fused classifier (pipelined rows)"
               : row == KDA_CLS_ROW_TRIM  ? "fused classifier (trimmed cluster rows)"
                                          : "fused classifier",
               worst, sum_g, sum_c, e_dn, e_dw);
        free(nll_g), free(lse_g), free(dn_g), free(dW_g);
    }
    void *bufs[] = {dn16, dW16, dtg, dnll, dlse, ddn, ddW, dsum, ws.logits, ws.stat, cws.logits};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        kda_cuda_release(bufs[i]);
    kda_cuda_free(&ctx);
    free(n), free(W), free(labels), free(work), free(lg_c), free(nll_c), free(lse_c), free(dn_c),
        free(dW_c), free(nll_lo), free(lse_lo);
}

KDA_TEST_GPU(gpu_model_xent_chunks) {
    if (gpu_test_have()) xent_case_(0, 0);
}

KDA_TEST_GPU(gpu_model_cls_fused) { // the cluster row kernel (default)
    if (gpu_test_have()) xent_case_(1, KDA_CLS_ROW_CLUSTER);
}

KDA_TEST_GPU(gpu_model_cls_fused_block) { // the block row kernel (KDA_CLS_ROW=1)
    if (gpu_test_have()) xent_case_(1, KDA_CLS_ROW_BLOCK);
}

KDA_TEST_GPU(gpu_model_cls_fused_pipe) { // the pipelined row kernel (KDA_CLS_ROW=2)
    if (gpu_test_have()) xent_case_(1, KDA_CLS_ROW_PIPE);
}

KDA_TEST_GPU(gpu_model_cls_fused_trim) { // the trimmed cluster row kernel (KDA_CLS_ROW=3)
    if (gpu_test_have()) xent_case_(1, KDA_CLS_ROW_TRIM);
}

// ---- AdamW + scaling + clipping vs the CPU optimizer on the same gradients -------------------

static void check_close_(const float *a, const float *b, int64_t n, const char *what) {
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++)
        if (!(fabs((double)a[i] - b[i]) <= TOL_ADAM * fabs((double)b[i]) + 1e-12)) {
            if (first < 0) first = i;
            bad++;
        }
    CHECK_MSG(bad == 0, "%s: %lld elements differ (first [%lld]: %.9g vs %.9g)", what,
              (long long)bad, (long long)first, first >= 0 ? a[first] : 0.0,
              first >= 0 ? b[first] : 0.0);
}

KDA_TEST_GPU(gpu_model_adamw_matches_cpu) {
    if (!gpu_test_have()) return;
    KdaModel m;
    tiny_untied_(&m, 0.02, 21);
    int64_t n = m.table.total_numel;
    KdaError err = {{0}};
    KdaCudaModel *dm = NULL;
    int rc = kda_cuda_model_create(&dm, &m.cfg, &m.table, m.params, 0, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    KdaAdamWConfig oc = {0.9, 0.95, 1e-8, 0.1};
    KdaAdamW opt;
    KDA_ASSERT(kda_adamw_init(&opt, n, &oc, &err) == 0);
    float *g = kda_malloc((size_t)n * 4), *gc = kda_malloc((size_t)n * 4);
    float *p = kda_malloc((size_t)n * 4), *m1 = kda_malloc((size_t)n * 4);
    float *m2 = kda_malloc((size_t)n * 4);
    KdaRng r;
    rng_seed(&r, 22);
    // Step 1 clips (max_norm below the norm), step 2 does not; scale 0.5 as for 2 micro-batches.
    const double max_norm[2] = {0.5, 1e9}, lr[2] = {1e-3, 2e-3};
    for (int s = 0; s < 2 && !rc; s++) {
        for (int64_t i = 0; i < n; i++)
            g[i] = rng_normal(&r, 0.0f, 0.05f);
        memcpy(gc, g, (size_t)n * 4);
        for (int64_t i = 0; i < n; i++)
            gc[i] *= 0.5f;
        double norm_c = kda_grad_clip(gc, n, max_norm[s], NULL);
        kda_adamw_step(&opt, &m.table, m.params, gc, lr[s]);
        rc = kda_cuda_model_put_grads(dm, g, &err);
        double norm_g = rc ? NAN : kda_cuda_model_finish_grads(dm, 0.5, max_norm[s], &err);
        CHECK_MSG(fabs(norm_g - norm_c) <= 1e-9 * norm_c, "step %d norm %.12g vs %.12g (%s)", s + 1,
                  norm_g, norm_c, err.msg);
        if (!rc) rc = kda_cuda_model_adamw(dm, &oc, s + 1, lr[s], &err);
        if (!rc) rc = kda_cuda_model_get_params(dm, p, &err);
        if (!rc) rc = kda_cuda_model_get_moments(dm, m1, m2, &err);
        CHECK_MSG(rc == 0, "%s", err.msg);
        if (rc) break;
        check_close_(p, m.params, n, s ? "params after step 2" : "params after step 1");
        check_close_(m1, opt.m, n, "first moment");
        check_close_(m2, opt.v, n, "second moment");
        printf("    adamw step %d: norm %.9g (cpu %.9g)\n", s + 1, norm_g, norm_c);
    }
    kda_cuda_model_free(dm);
    kda_adamw_free(&opt);
    free(g), free(gc), free(p), free(m1), free(m2);
    kda_model_free(&m);
}

// ---- 20 training steps, GPU runtime vs CPU runtime -------------------------------------------

// Rows of period 16 (each row its own random 16-token motif): learnable by unigram statistics
// at once and by the short conv + KDA recurrence later.
static void motif_batch_(int32_t *ids, int64_t B, int64_t T, int64_t vocab, uint64_t seed) {
    KdaRng r;
    rng_seed(&r, seed);
    for (int64_t b = 0; b < B; b++) {
        int32_t motif[16];
        for (int i = 0; i < 16; i++)
            motif[i] = (int32_t)rng_below(&r, (uint64_t)vocab);
        for (int64_t t = 0; t < T; t++)
            ids[b * T + t] = motif[t % 16];
    }
}

// Trains the CPU runtime bc and the GPU runtime bg side by side for `steps` AdamW steps (lr 3e-3,
// 2 micro-batches of motif data, clip 1.0) and checks each step's loss agrees within tol_step,
// relative to max(cpu loss, 1): below 1 nat the bound is absolute (a memorized motif drives the
// loss towards 0, where relative differences mean nothing).
// Returns the worst per-step relative difference (-1 on a runtime error); first/last/tail get
// the first, last and mean-of-the-last-20 losses of {cpu, gpu}.
static double train_track_(KdaRuntime *bc, KdaRuntime *bg, int steps, int64_t B, int64_t T,
                           int64_t vocab, double tol_step, int32_t *ids, float first[2],
                           float last[2], double tail[2], KdaError *err) {
    const int64_t n_micro = 2;
    double worst = 0.0;
    tail[0] = tail[1] = 0.0;
    for (int step = 1; step <= steps; step++) {
        KdaRuntime *be[2] = {bc, bg};
        float loss[2] = {0, 0};
        for (int k = 0; k < 2; k++) {
            CHECK(kda_runtime_zero_grads(be[k], err) == 0);
            double sum = 0.0;
            for (int64_t mi = 0; mi < n_micro; mi++) {
                motif_batch_(ids, B, T, vocab, (uint64_t)(1000 + (step % 4) * 10 + mi));
                float l = NAN;
                if (kda_runtime_train_step(be[k], ids, B, T, 1, &l, err)) {
                    CHECK_MSG(0, "step %d: %s", step, err->msg);
                    return -1.0;
                }
                sum += l;
            }
            loss[k] = (float)(sum / (double)n_micro);
            double norm = kda_runtime_finish_grads(be[k], 1.0 / (double)n_micro, 1.0, err);
            CHECK_MSG(isfinite(norm), "%s step %d: grad norm %g", k ? "gpu" : "cpu", step, norm);
            CHECK(kda_runtime_update(be[k], 3e-3, err) == 0);
        }
        double e = fabs((double)loss[1] - loss[0]) / fmax(loss[0], 1.0);
        CHECK_MSG(e <= tol_step, "step %d: gpu loss %.5f vs cpu %.5f (rel %.3g > %g)", step,
                  loss[1], loss[0], e, tol_step);
        if (e > worst) worst = e;
        if (step == 1) first[0] = loss[0], first[1] = loss[1];
        last[0] = loss[0], last[1] = loss[1];
        if (step > steps - 20)
            for (int k = 0; k < 2; k++)
                tail[k] += loss[k] / 20.0;
        if (step <= 20 || step % 20 == 0)
            printf("    step %3d: cpu %.5f gpu %.5f (rel %.2e)\n", step, loss[0], loss[1], e);
    }
    return worst;
}

// A training runtime over a copy of m's parameters on device ("cpu" | "cuda"; AdamW 0.9 / 0.95 /
// 1e-8 / wd 0.01). NULL (a failed check) when it cannot be opened.
static KdaRuntime *train_runtime_(const KdaModel *m, const char *device, KdaError *err) {
    KdaParamTable t;
    KDA_ASSERT(kda_params_build(&t, &m->cfg, err) == 0);
    float *p = kda_malloc((size_t)t.total_numel * sizeof(float));
    memcpy(p, m->params, (size_t)t.total_numel * sizeof(float));
    KdaRuntimeOpts o = {.device = device, .train = 1};
    KdaAdamWConfig oc = {0.9, 0.95, 1e-8, 0.01};
    KdaRuntime *rt = NULL;
    if (kda_runtime_open(&rt, &m->cfg, &t, p, &o, err)) {
        kda_params_free(&t), free(p);
        CHECK_MSG(0, "%s: %s", device, err->msg);
        return NULL;
    }
    if (kda_runtime_train_init(rt, &oc, err)) {
        CHECK_MSG(0, "%s: %s", device, err->msg);
        kda_runtime_close(rt);
        return NULL;
    }
    return rt;
}

// The CPU runtime over mc and the GPU runtime over mg (both released). -1 when the GPU runtime
// cannot be made.
static int backends_(KdaRuntime **bc, KdaRuntime **bg, KdaModel *mc, KdaModel *mg, KdaError *err) {
    *bc = train_runtime_(mc, "cpu", err);
    *bg = train_runtime_(mg, "cuda", err);
    kda_model_free(mc), kda_model_free(mg);
    if (*bc && *bg) return 0;
    kda_runtime_close(*bc), kda_runtime_close(*bg);
    return -1;
}

KDA_TEST_GPU(gpu_model_train_20_steps) {
    if (!gpu_test_have()) return;
    KdaModel mc, mg;
    tiny_untied_(&mc, 0.02, 31);
    tiny_untied_(&mg, 0.02, 31);
    KdaError err = {{0}};
    KdaRuntime *bc, *bg;
    if (backends_(&bc, &bg, &mc, &mg, &err)) return;
    const int64_t B = 4, T = 64;
    int32_t *ids = kda_malloc((size_t)(B * T) * sizeof(int32_t));
    float first[2] = {0, 0}, last[2] = {0, 0};
    double tail[2];
    double worst = train_track_(bc, bg, 20, B, T, 300, TOL_TRAIN, ids, first, last, tail, &err);
    int rc = worst < 0;
    if (!rc) {
        CHECK_MSG(last[0] < 0.8f * first[0] && last[1] < 0.8f * first[1],
                  "no learning: cpu %.4f -> %.4f, gpu %.4f -> %.4f", first[0], last[0], first[1],
                  last[1]);
        CHECK_EQ_INT(kda_runtime_step(bg), 20);
        // Checkpoint views: host_params + host_optim, written back unchanged, give the same loss.
        float l1 = NAN, l2 = NAN;
        rc = kda_runtime_train_step(bg, ids, B, T, 0, &l1, &err);
        float *hp = kda_runtime_host_params(bg, &err);
        const KdaAdamW *ho = kda_runtime_host_optim(bg);
        double vsum = 0.0;
        for (int64_t i = 0; i < ho->n; i++)
            vsum += ho->v[i];
        CHECK_MSG(vsum > 0.0, "host_optim's second moment was not synced");
        CHECK(hp != NULL);
        CHECK(kda_runtime_state_changed(bg, &err) == 0);
        if (!rc) rc = kda_runtime_train_step(bg, ids, B, T, 0, &l2, &err);
        CHECK_MSG(rc == 0, "%s", err.msg);
        CHECK_MSG(l1 == l2, "loss changed across host_params/state_changed: %.9g vs %.9g", l1, l2);
        printf(
            "    20 steps: worst per-step loss rel diff %.2e; cpu %.4f -> %.4f, gpu %.4f -> %.4f\n",
            worst, first[0], last[0], first[1], last[1]);
    }
    free(ids);
    kda_runtime_close(bc), kda_runtime_close(bg);
}

// The issue's "short GPU training run (tiny config, 200 steps) must track the CPU run's loss
// curve": configs/tiny.json (tied embeddings, K = 16, V = 32), 200 steps; the CPU run goes
// 5.56 -> 2.82 (step 40) -> 0.10 (step 100) -> 0.0045 (step 200). bf16 rounding makes the two
// trajectories drift apart slowly (1.9e-3 after 20 steps on the untied model above), and on the
// steep part of the curve a lag of one step is ~0.08 nats, so each step's loss must be within
// 0.1·max(loss, 1) of the CPU's, the mean of the last 20 steps within 0.05 nats, and both learn
// (< 0.1 x the first loss).
KDA_TEST_GPU(gpu_model_train_200_steps_tiny_config) {
    if (!gpu_test_have()) return;
    KdaError err = {{0}};
    KdaConfig cfg;
    KdaModel mc, mg;
    int rc = kda_config_load(&cfg, "configs/tiny.json", &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (rc) return;
    KDA_ASSERT(kda_model_init(&mc, &cfg, &err) == 0 && kda_model_init(&mg, &cfg, &err) == 0);
    kda_params_init(&mc.table, &mc.cfg, mc.params, 51);
    kda_params_init(&mg.table, &mg.cfg, mg.params, 51);
    KdaRuntime *bc, *bg;
    if (backends_(&bc, &bg, &mc, &mg, &err)) return;
    const int64_t B = 4, T = 64;
    int32_t *ids = kda_malloc((size_t)(B * T) * sizeof(int32_t));
    float first[2] = {0, 0}, last[2] = {0, 0};
    double tail[2];
    double worst =
        train_track_(bc, bg, 200, B, T, cfg.vocab_size, 0.1, ids, first, last, tail, &err);
    if (worst >= 0) {
        double te = fabs(tail[1] - tail[0]);
        CHECK_MSG(te <= 0.05, "mean loss of the last 20 steps: gpu %.5f vs cpu %.5f (|d| %.3g)",
                  tail[1], tail[0], te);
        CHECK_MSG(last[0] < 0.1f * first[0] && last[1] < 0.1f * first[1],
                  "no learning: cpu %.4f -> %.4f, gpu %.4f -> %.4f", first[0], last[0], first[1],
                  last[1]);
        printf("    200 steps: worst per-step diff %.2e, last-20 mean |diff| %.2e; "
               "cpu %.4f -> %.4f, gpu %.4f -> %.4f\n",
               worst, te, first[0], last[0], first[1], last[1]);
    }
    free(ids);
    kda_runtime_close(bc), kda_runtime_close(bg);
}

// ---- errors ------------------------------------------------------------------------------------

// The per-op profile on the GPU (kda_cuda_model_profile): one training step of the tiny untied
// model (2 layers, fused classifier in 2 token chunks): every op appears with the model's number
// of calls, every row's time is finite and >= 0, and the rows fit inside the wall time (disjoint
// event intervals on one stream, all inside the host's start and end marks).
KDA_TEST_GPU(gpu_model_profile) {
    if (!gpu_test_have()) return;
    KdaModel m;
    tiny_untied_(&m, 0.05, 21);
    int64_t B = 2, T = 100, L = 2;
    int32_t *ids = random_ids_(B * T, m.cfg.vocab_size, 22);
    KdaError err = {{0}};
    KdaCudaModel *dm = NULL;
    KdaProf p;
    kda_prof_reset(&p, 0, 0);
    KdaAdamWConfig oc = {0.9, 0.95, 1e-8, 0.01};
    float loss = NAN;
    size_t budget = (size_t)128 * (size_t)kda_cuda_cls_ld(m.cfg.vocab_size) * 2; // 2 chunks
    int rc = kda_cuda_model_create(&dm, &m.cfg, &m.table, m.params, 0, &err) ||
             kda_cuda_model_set_cls_budget(dm, budget, &err) ||
             kda_cuda_model_profile(dm, &p, &err) || kda_cuda_model_zero_grads(dm, &err) ||
             kda_cuda_model_forward_backward(dm, ids, NULL, B, T, NULL, &loss, &err) ||
             !isfinite(kda_cuda_model_finish_grads(dm, 1.0, 1.0, &err)) ||
             kda_cuda_model_adamw(dm, &oc, 1, 1e-3, &err) || kda_cuda_model_profile(dm, NULL, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (!rc) {
        // fused input projection: fwd = its GEMM, its copy-out, f1, g1; bwd = g1 and f1's dX and
        // dW, the g0 and f0 copies into the fused dY (b, q, k, v written there by their kernels,
        // the default, or copied too with KDA_DY_INPLACE=0), its dW and dX
        int fz = kda_cuda_model_inproj(dm);
        // fused elementwise kernels (KDA_FUSE, default on): the q/k L2 norm runs inside the conv
        // kernels (no row), the bias inside the gated norm (one call each way instead of two),
        // the RMSNorm backward writes the bf16 dh (no cast); gate|up (KDA_GATEUP): one GEMM
        // each way instead of two (fwd: gate|up + down; bwd: down dW, dX, gate|up dX and dW)
        int fu = kda_cuda_model_fused(dm), l2f = fu & 1, gnf = (fu >> 1) & 1, dhf = (fu >> 2) & 1;
        int gu = kda_cuda_model_gateup(dm);
        // gate v2 (the default): the gate and beta in one launch each way instead of two
        int gb = kda_cuda_model_gate_beta_fused(dm) ? 1 : 2;
        // fused dY: with KDA_DY_INPLACE=0 b, q, k and v are copied into it (4 copies beside g0
        // and f0's); by default (since 2026-12-04) their kernels write it, the fused q/k conv
        // only where its 4-element groups stay 8-byte aligned (model_cuda.c block_bwd_): this
        // model's in-proj width (2·64 + 128 + 2·64 + 2 = 386) is not, so q and k still copy
        const KdaConfig *c = &m.cfg;
        int64_t width = 2 * c->key_dim + c->value_dim + 2 * c->head_v_dim + c->num_v_heads,
                kcol = c->key_dim;
        int dyi = kda_cuda_model_dy_inplace(dm), fzq = !l2f || (width % 4 == 0 && kcol % 4 == 0);
        // KDA_CONV_QKV (with the fused L2 kernels; 1 by default): q, k and v's convs in one
        // launch forward (1, 2) and backward (2, where the fused dY's columns or the scratch halves
        // take all three: model_cuda.c block_bwd_), else one launch each
        int qkv = kda_cuda_model_conv_qkv(dm), hk = (int)c->key_dim, hvv = (int)c->value_dim;
        // the backward reads the fused dY in place only with KDA_DY_INPLACE (model_cuda.c's fz is
        // inproj && dy_inplace; session 8's device run failed this count with dy_inplace off)
        int qkvf = qkv > 0, qkvb = qkv == 2 && (fz && dyi ? fzq : 2 * hk <= (hk > hvv ? hk : hvv));
        const struct {
            KdaOp op;
            int64_t calls;
        } want[] = {
            {KDA_OP_EMBED_FWD, 1},
            {KDA_OP_EMBED_BWD, 1},
            {KDA_OP_NORM_FWD, 2 * L + 1},
            {KDA_OP_NORM_BWD, 2 * L + 1},
            {KDA_OP_PROJ_FWD, (fz ? 4 : 8) * L},
            {KDA_OP_PROJ_BWD, (fz ? (dyi ? (fzq ? 8 : 10) : 12) : 16) * L},
            {KDA_OP_CONV_FWD, (qkvf ? 1 : 3) * L},
            {KDA_OP_CONV_BWD, (qkvb ? 1 : 3) * L},
            {KDA_OP_L2NORM_FWD, l2f ? 0 : 2 * L},
            {KDA_OP_L2NORM_BWD, l2f ? 0 : 2 * L},
            {KDA_OP_GATE_FWD, gb * L},
            {KDA_OP_GATE_BWD, gb * L},
            {KDA_OP_CORE_FWD, L},
            {KDA_OP_CORE_BWD, L},
            {KDA_OP_ONORM_FWD, (gnf ? 1 : 2) * L}, // bias + gated norm
            {KDA_OP_ONORM_BWD, (gnf ? 1 : 2) * L},
            {KDA_OP_OPROJ_FWD, L},
            {KDA_OP_OPROJ_BWD, 2 * L},
            {KDA_OP_MLP_FWD, (gu ? 2 : 3) * L},
            {KDA_OP_MLP_BWD, (gu ? 4 : 6) * L},
            {KDA_OP_SWIGLU_FWD, L},
            {KDA_OP_SWIGLU_BWD, L},
            {KDA_OP_HEAD_FWD, 2 + 1}, // 2 token chunks' logits GEMMs + the loss sum
            {KDA_OP_HEAD_ROW, 2},     // their row kernels
            {KDA_OP_HEAD_BWD, 2},
            {KDA_OP_CAST, dhf ? 0 : 2 * L},
            {KDA_OP_ZERO_GRADS, 1},
            {KDA_OP_GRAD_NORM, 2}, // norm, clip coefficient
            {KDA_OP_SYNC, 3},      // ids upload, loss read, norm read
        };
        for (size_t i = 0; i < sizeof want / sizeof *want; i++)
            CHECK_MSG(p.row[want[i].op].calls == want[i].calls, "%s: %lld calls, expected %lld",
                      kda_prof_op_name(want[i].op), (long long)p.row[want[i].op].calls,
                      (long long)want[i].calls);
        CHECK(p.row[KDA_OP_ADAMW].calls >= 1);
        for (int i = 0; i < KDA_OP_COUNT; i++)
            CHECK_MSG(isfinite(p.row[i].ms) && p.row[i].ms >= 0, "%s: %g ms",
                      kda_prof_op_name((KdaOp)i), p.row[i].ms);
        double wall = kda_prof_wall_ms(&p), sum = kda_prof_sum_ms(&p);
        CHECK_MSG(sum > 0 && sum <= wall, "sum %.3f ms, wall %.3f ms", sum, wall);
        CHECK(p.flop_rate > 0 && p.byte_rate > 0 && p.row[KDA_OP_MLP_FWD].floor_ms > 0);
        kda_prof_print(&p, "    gpu profile, tiny untied model, 200 tokens", stdout);
    }
    kda_cuda_model_free(dm);
    free(ids);
    kda_model_free(&m);
}

KDA_TEST_GPU(gpu_model_errors) {
    if (!gpu_test_have()) return;
    KdaModel m;
    tiny_untied_(&m, 0.02, 41);
    KdaError err = {{0}};
    KdaCudaModel *dm = NULL;
    int rc = kda_cuda_model_create(&dm, &m.cfg, &m.table, m.params, 0, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (!rc) {
        CHECK(kda_cuda_model_backward(dm, &err) == -1); // no forward yet
        CHECK(strstr(err.msg, "no forward") != NULL);
        int32_t ids[4] = {1, 2, 300, 3};
        CHECK(kda_cuda_model_forward(dm, ids, NULL, 1, 4, NULL, NULL, &err) == -1);
        CHECK_MSG(strstr(err.msg, "ids[0][2] = 300") != NULL, "%s", err.msg);
        ids[2] = 7; // the model still works after a rejected batch
        float loss = NAN;
        CHECK(kda_cuda_model_forward(dm, ids, NULL, 1, 4, NULL, &loss, &err) == 0);
        CHECK(isfinite(loss));
    }
    kda_cuda_model_free(dm);
    // A config the GPU does not implement fails at create with a message.
    KdaConfig c = m.cfg;
    c.has_lower_bound = 1, c.lower_bound = -5.0;
    dm = NULL;
    CHECK(kda_cuda_model_create(&dm, &c, &m.table, m.params, 0, &err) == -1 && dm == NULL);
    CHECK_MSG(strstr(err.msg, "lower_bound") != NULL, "%s", err.msg);
    kda_model_free(&m);
}

// The fused elementwise kernels (default) against the unfused ones (KDA_FUSE=0, their oracle) on
// the whole model: tiny untied config (K = 32, V = 64: every fusion runs) and three layers, one
// training step with the fused classifier. Loss within 1e-3 relative and every gradient within
// TOL_GRAD_PAIR rel-RMS (A_log: TOL_GRAD_ALOG) of the unfused step: the two differ only by bf16
// roundings the fused kernels skip (conv output, z + bias, the L2 backward's bf16 dq), each the
// size of GPU vs CPU's, independent.
KDA_TEST_GPU(gpu_fuse_model_matches_unfused) {
    if (!gpu_test_have()) return;
    KdaModel m;
    tiny_untied_(&m, 0.05, 81);
    KdaError err = {{0}};
    KdaConfig c3 = m.cfg;
    kda_model_free(&m);
    c3.num_hidden_layers = 3;
    KDA_ASSERT(kda_model_init(&m, &c3, &err) == 0);
    kda_params_init(&m.table, &m.cfg, m.params, 81);
    int64_t B = 2, T = 100, n = m.table.total_numel;
    int32_t *ids = random_ids_(B * T, m.cfg.vocab_size, 82);
    float *g[2] = {kda_malloc((size_t)n * 4), kda_malloc((size_t)n * 4)}, loss[2] = {0, 0};
    int fused[2] = {-1, -1}, rc = 0;
    for (int pass = 0; pass < 2 && !rc; pass++) {
        GpuEnv fuse; // pinned in both passes (unset: fused, the default), then put back
        gpu_env_set(&fuse, "KDA_FUSE", pass == 0 ? "0" : NULL);
        KdaCudaModel *dm = NULL;
        rc = kda_cuda_model_create(&dm, &m.cfg, &m.table, m.params, 0, &err);
        gpu_env_restore(&fuse);
        if (!rc) fused[pass] = kda_cuda_model_fused(dm);
        if (!rc) rc = gpu_step_fused_(dm, ids, B, T, NULL, &loss[pass], g[pass], &err);
        if (!rc && pass == 1) { // the setter: off again gives the KDA_FUSE=0 model's bits
            float l2 = 0.0f, *g2 = kda_malloc((size_t)n * 4);
            rc = kda_cuda_model_set_fuse(dm, 0, &err) ||
                 gpu_step_fused_(dm, ids, B, T, NULL, &l2, g2, &err);
            if (!rc) {
                CHECK_MSG(kda_cuda_model_fused(dm) == 0, "set_fuse(0) left fusions on");
                CHECK_MSG(l2 == loss[0] && !memcmp(g2, g[0], (size_t)n * 4),
                          "set_fuse(0) differs from KDA_FUSE=0 (loss %.9g vs %.9g)", l2, loss[0]);
            }
            free(g2);
        }
        kda_cuda_model_free(dm);
    }
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (!rc) {
        CHECK_MSG(fused[0] == 0 && fused[1] == 7, "fusions: %d with KDA_FUSE=0, %d default",
                  fused[0], fused[1]);
        double le = fabs((double)loss[1] - loss[0]) / fabs((double)loss[0]);
        CHECK_MSG(le <= 1e-3, "fused loss %.6f vs unfused %.6f: rel %.3g", loss[1], loss[0], le);
        double worst = 0.0;
        const char *wname = "";
        for (int i = 0; i < m.table.n; i++) {
            const KdaParamInfo *p = &m.table.rows[i];
            double e = kda_case_fla_ratio(g[0] + p->offset, g[1] + p->offset, p->numel);
            double tol = strstr(p->name, "A_log") ? TOL_GRAD_ALOG : TOL_GRAD_PAIR;
            CHECK_MSG(e <= tol, "grad %s: fused vs unfused rel-RMS %.3g > %g", p->name, e, tol);
            if (!(e <= worst)) worst = e, wname = p->name;
        }
        printf("    fused vs unfused: loss %.6f vs %.6f (rel %.2e), worst grad %.2e (%s)\n",
               loss[1], loss[0], le, worst, wname);
    }
    free(g[0]), free(g[1]), free(ids);
    kda_model_free(&m);
}

// The fused GEMMs of the default device layout (gate_proj|up_proj back to back: one GEMM each
// way; q|k|v|f0|g0|b back to back: one input GEMM) against the separate GEMMs of KDA_GATEUP=0
// KDA_INPROJ=0: one training step of the tiny untied model, loss within
// 1e-3 relative and every gradient (read back through the device <-> dense mapping) within
// TOL_GRAD rel-RMS (A_log: TOL_GRAD_ALOG); the same products, only the GEMMs' tiling (fp32
// accumulation order) differs. heads = 2 and 4: the fused q/k conv backward writes into the fused
// dY buffer only when its width (644 at 4 heads, 386 at 2) keeps its groups aligned, else into a
// scratch copied in (model_cuda.c block_bwd_): both paths.
static void fused_gemms_case_(int64_t heads) {
    KdaModel m;
    tiny_heads_(&m, 0.05, 91, heads);
    KdaError err = {{0}};
    int64_t B = 2, T = 100, n = m.table.total_numel;
    int32_t *ids = random_ids_(B * T, m.cfg.vocab_size, 92);
    float *g[2] = {kda_malloc((size_t)n * 4), kda_malloc((size_t)n * 4)}, loss[2] = {0, 0};
    int on[2] = {-1, -1}, rc = 0;
    for (int pass = 0; pass < 2 && !rc; pass++) {
        // pinned in both passes (unset: the fused GEMMs, the defaults since 2026-12-03), put back
        GpuEnv gu, ip;
        gpu_env_set(&gu, "KDA_GATEUP", pass == 0 ? "0" : NULL);
        gpu_env_set(&ip, "KDA_INPROJ", pass == 0 ? "0" : NULL);
        KdaCudaModel *dm = NULL;
        rc = kda_cuda_model_create(&dm, &m.cfg, &m.table, m.params, 0, &err);
        gpu_env_restore(&gu), gpu_env_restore(&ip);
        if (!rc) on[pass] = kda_cuda_model_gateup(dm) + 2 * kda_cuda_model_inproj(dm);
        if (!rc) rc = gpu_step_fused_(dm, ids, B, T, NULL, &loss[pass], g[pass], &err);
        kda_cuda_model_free(dm);
    }
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (!rc) {
        CHECK_MSG(on[0] == 0 && on[1] == 3,
                  "gate|up + 2 in-proj: %d with KDA_GATEUP=0 KDA_INPROJ=0, %d default", on[0],
                  on[1]);
        double le = fabs((double)loss[1] - loss[0]) / fabs((double)loss[0]);
        CHECK_MSG(le <= 1e-3, "gate|up loss %.6f vs %.6f: rel %.3g", loss[1], loss[0], le);
        double worst = 0.0;
        for (int i = 0; i < m.table.n; i++) {
            const KdaParamInfo *p = &m.table.rows[i];
            double e = kda_case_fla_ratio(g[0] + p->offset, g[1] + p->offset, p->numel);
            double tol = strstr(p->name, "A_log") ? TOL_GRAD_ALOG : TOL_GRAD; // as compare_step_
            CHECK_MSG(e <= tol, "grad %s: gate|up rel-RMS %.3g > %g", p->name, e, tol);
            if (!(e <= worst)) worst = e;
        }
        printf("    %lld heads, fused vs separate GEMMs: loss %.6f vs %.6f, worst grad %.2e\n",
               (long long)heads, loss[1], loss[0], worst);
    }
    free(g[0]), free(g[1]), free(ids);
    kda_model_free(&m);
}

KDA_TEST_GPU(gpu_model_fused_gemms_match) {
    if (!gpu_test_have()) return;
    fused_gemms_case_(2);
    fused_gemms_case_(4);
}

// kda info's GPU plan (kda_cuda_model_plan, counted without a device for the device's shared
// memory) is exactly the activation arena and kept states a real training step allocates, with
// and without recompute: the plan and the model run the same layout code; this catches a buffer
// added to one path only. Bytes, exact.
KDA_TEST_GPU(gpu_model_memory_plan_equals_arena) {
    if (!gpu_test_have()) return;
    KdaModel m;
    tiny_untied_(&m, 0.02, 7);
    KdaError err = {{0}};
    KdaCudaDeviceInfo info;
    CHECK(kda_cuda_query(0, &info, &err) == 0);
    const int64_t B = 3, T = 96;
    int32_t *ids = kda_malloc((size_t)(B * T) * sizeof(int32_t));
    motif_batch_(ids, B, T, m.cfg.vocab_size, 5);
    for (int rec = 0; rec < 2; rec++) {
        KdaCudaModel *g;
        KdaCudaPlan p;
        int rc =
            kda_cuda_model_create(&g, &m.cfg, &m.table, m.params, 0, &err) ||
            kda_cuda_model_set_recompute(g, rec, &err) ||
            kda_cuda_model_forward_backward(g, ids, NULL, B, T, NULL, NULL, &err) ||
            kda_cuda_model_plan(&m.cfg, &m.table, B, T, rec, info.smem_per_block_optin, &p, &err);
        CHECK_MSG(rc == 0, "%s", err.msg);
        if (!rc) {
            double got = (double)kda_cuda_model_arena_bytes(g), want = p.arena_bytes + p.keep_bytes;
            printf("    recompute %d: arena + kept states %.0f bytes, plan %.0f\n", rec, got, want);
            CHECK(got == want);
        }
        kda_cuda_model_free(g);
    }
    free(ids);
    kda_model_free(&m);
}

// ---- one CUDA graph per micro-batch (the default; KDA_GRAPH=0 off) --------------------------

// kda_cuda_model_create of m's weights with the environment switch var set to val while it runs
// (create reads the switches; val NULL: var unset, the default). var gets its value from before
// the call back afterwards, so a suite run with a switch exported keeps it for later tests.
static int create_with_(KdaCudaModel **dm, const KdaModel *m, const char *var, const char *val,
                        KdaError *err) {
    GpuEnv e;
    if (gpu_env_set(&e, var, val))
        return kda_fail(err, "create_with_: out of memory copying %s", var);
    int rc = kda_cuda_model_create(dm, &m->cfg, &m->table, m->params, 0, err);
    gpu_env_restore(&e);
    return rc;
}

// Graphs (pass 1; pass 2 with per-block recompute, which gpu_model_recompute_bit_identical
// holds to the stored activations' bits) against the eager model (pass 0): the same kernels in
// the same order, so every step's loss, gradients and updated parameters must be bit-identical.
// The schedule walks the graph states: T = 64 warmed, captured, replayed; T = 48 (a new key, the
// arena not regrown); ignored labels (a new n_valid: the loss rows' 1/n_valid is baked in);
// keys alternating within a step; T = 80 (the arena grows: every graph dropped and re-captured).
// The graph passes must have captured and replayed (a capture that falls back to eager keeps the
// bits but is a failure of this test: it is what the switch is for).
KDA_TEST_GPU(gpu_model_graph_bit_identical) {
    if (!gpu_test_have()) return;
    static const GpuStep SCHED[] = {{{64, 64}, {0, 0}}, {{64, 64}, {0, 0}}, {{64, 64}, {0, 0}},
                                    {{48, 48}, {0, 0}}, {{48, 48}, {1, 1}}, {{64, 48}, {0, 1}},
                                    {{48, 64}, {1, 0}}, {{80, 80}, {0, 0}}, {{80, 80}, {0, 0}}};
    const int n_steps = (int)(sizeof SCHED / sizeof SCHED[0]);
    KdaModel m;
    tiny_untied_(&m, 0.05, 81);
    KdaError err = {{0}};
    int64_t n = m.table.total_numel;
    float *g[3], *p[3], loss[3][sizeof SCHED / sizeof SCHED[0]];
    for (int pass = 0; pass < 3; pass++)
        g[pass] = kda_malloc((size_t)n * 4), p[pass] = kda_malloc((size_t)n * 4);
    KdaCudaModel *dm[3] = {NULL, NULL, NULL};
    int rc = 0;
    for (int pass = 0; pass < 3 && !rc; pass++) {
        rc = create_with_(&dm[pass], &m, "KDA_GRAPH", pass ? NULL : "0", &err); // graphs: default
        // 64 rows per logits chunk: 2-3 token chunks with a partial last one at these shapes
        size_t budget = (size_t)64 * (size_t)kda_cuda_cls_ld(m.cfg.vocab_size) * 2;
        if (!rc) rc = kda_cuda_model_set_cls_budget(dm[pass], budget, &err);
        if (!rc) rc = kda_cuda_model_set_recompute(dm[pass], pass == 2, &err);
    }
    CHECK_MSG(rc == 0, "%s", err.msg);
    for (int s = 0; s < n_steps && !rc; s++) {
        for (int pass = 0; pass < 3 && !rc; pass++)
            rc = gpu_train_step(dm[pass], &SCHED[s], s + 1, &loss[pass][s], g[pass], p[pass], &err);
        CHECK_MSG(rc == 0, "step %d: %s", s + 1, err.msg);
        for (int pass = 1; pass < 3 && !rc; pass++) {
            int64_t dg = gpu_bits_differ(g[pass], g[0], n), dp = gpu_bits_differ(p[pass], p[0], n);
            CHECK_MSG(memcmp(&loss[pass][s], &loss[0][s], sizeof(float)) == 0 && !dg && !dp,
                      "step %d pass %d: loss %.9g vs eager %.9g, %lld grads and %lld params of "
                      "%lld differ",
                      s + 1, pass, loss[pass][s], loss[0][s], (long long)dg, (long long)dp,
                      (long long)n);
        }
    }
    int64_t st[3][3] = {{0}};
    for (int pass = 0; pass < 3 && dm[pass]; pass++)
        kda_cuda_model_graph_stats(dm[pass], &st[pass][0], &st[pass][1], &st[pass][2]);
    for (int pass = 0; pass < 3 && !rc; pass++)
        printf(
            "    pass %d (%s): last loss %.6f, graphs captured %lld, replayed %lld, failed %lld\n",
            pass,
            pass == 0   ? "KDA_GRAPH=0"
            : pass == 1 ? "graphs (default)"
                        : "graphs + recompute",
            loss[pass][n_steps - 1], (long long)st[pass][0], (long long)st[pass][1],
            (long long)st[pass][2]);
    CHECK(st[0][0] == 0 && st[0][1] == 0 && st[0][2] == 0);
    for (int pass = 1; pass < 3 && !rc; pass++)
        CHECK_MSG(st[pass][0] >= 4 && st[pass][1] >= 4 && st[pass][2] == 0,
                  "pass %d: %lld captures, %lld replays, %lld failures (want >= 4, >= 4, 0; the "
                  "warning line above names a failure)",
                  pass, (long long)st[pass][0], (long long)st[pass][1], (long long)st[pass][2]);
    for (int pass = 0; pass < 3; pass++)
        kda_cuda_model_free(dm[pass]), free(g[pass]), free(p[pass]);
    kda_model_free(&m);
}

// AdamW in one launch over the run table (kda_cuda_adamw_runs, the default) against one
// launch per run of rows with the same decay flag: the same per-element operations, so the
// parameters after every step are bit-identical; the profile's AdamW row counts the launches
// (1 against one per run), so a silent fallback to the per-run path fails the test.
KDA_TEST_GPU(gpu_model_adamw_one_launch) {
    if (!gpu_test_have()) return;
    static const GpuStep SCHED[] = {{{64, 64}, {0, 0}}, {{48, 48}, {1, 0}}, {{64, 64}, {0, 0}}};
    KdaModel m;
    tiny_untied_(&m, 0.05, 95);
    KdaError err = {{0}};
    int64_t n = m.table.total_numel;
    float *g[2] = {NULL, NULL}, *p[2] = {NULL, NULL}, loss[2];
    int64_t calls[2] = {0, 0};
    KdaCudaModel *dm[2] = {NULL, NULL};
    int rc = 0;
    for (int pass = 0; pass < 2 && !rc; pass++) {
        g[pass] = kda_malloc((size_t)n * 4), p[pass] = kda_malloc((size_t)n * 4);
        rc = create_with_(&dm[pass], &m, "KDA_ADAMW_ONE", pass ? NULL : "0", &err); // 1: default
    }
    CHECK_MSG(rc == 0, "%s", err.msg); // (before: a failed create skipped every check)
    for (int s = 0; s < 3 && !rc; s++) {
        for (int pass = 0; pass < 2 && !rc; pass++) {
            KdaProf prof;
            kda_prof_reset(&prof, 0, 0);
            rc = kda_cuda_model_profile(dm[pass], &prof, &err) ||
                 gpu_train_step(dm[pass], &SCHED[s], s + 1, &loss[pass], g[pass], p[pass], &err) ||
                 kda_cuda_model_profile(dm[pass], NULL, &err);
            calls[pass] = prof.row[KDA_OP_ADAMW].calls;
        }
        CHECK_MSG(rc == 0, "step %d: %s", s + 1, err.msg);
        if (rc) break;
        int64_t dp = gpu_bits_differ(p[1], p[0], n);
        CHECK_MSG(!dp && calls[1] == 1 && calls[0] > 1,
                  "step %d: %lld of %lld params differ; AdamW launches %lld (one) vs %lld (runs)",
                  s + 1, (long long)dp, (long long)n, (long long)calls[1], (long long)calls[0]);
    }
    printf("    AdamW: 1 launch vs %lld, parameters bit-identical after 3 steps\n",
           (long long)calls[0]);
    for (int pass = 0; pass < 2; pass++)
        kda_cuda_model_free(dm[pass]), free(g[pass]), free(p[pass]);
    kda_model_free(&m);
}

// The MLP recompute (the default; the SwiGLU product kept in one shared buffer, recomputed by the
// backward's SwiGLU kernel) against KDA_MLP_RECOMPUTE=0 (one per layer): the recomputed product has
// the forward's bits, so every step's loss, gradients and parameters are bit-identical; the arena
// is smaller by (L - 1)·N·I bf16 elements (the plan counts the same), and the switch is on (a
// silent fallback to the default would pass the bits but fail this).
KDA_TEST_GPU(gpu_model_mlp_recompute_bit_identical) {
    if (!gpu_test_have()) return;
    static const GpuStep SCHED[] = {{{64, 64}, {0, 0}}, {{48, 64}, {1, 0}}, {{64, 64}, {0, 1}}};
    KdaModel m;
    tiny_untied_(&m, 0.05, 97);
    KdaError err = {{0}};
    int64_t n = m.table.total_numel;
    float *g[2] = {NULL, NULL}, *p[2] = {NULL, NULL};
    KdaCudaModel *dm[2] = {NULL, NULL};
    int rc = 0;
    for (int pass = 0; pass < 2 && !rc; pass++) {
        g[pass] = kda_malloc((size_t)n * 4), p[pass] = kda_malloc((size_t)n * 4);
        rc = create_with_(&dm[pass], &m, "KDA_MLP_RECOMPUTE", pass ? NULL : "0", &err);
    }
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (!rc)
        CHECK_MSG(!kda_cuda_model_mlp_recompute(dm[0]) && kda_cuda_model_mlp_recompute(dm[1]),
                  "KDA_MLP_RECOMPUTE: %d without, %d with (want 0, 1)",
                  kda_cuda_model_mlp_recompute(dm[0]), kda_cuda_model_mlp_recompute(dm[1]));
    if (!rc) rc = gpu_train_pair(dm, SCHED, 3, g, p, n, "KDA_MLP_RECOMPUTE");
    if (!rc) { // both arenas sized for the last step's 2 x 64 tokens
        const KdaConfig *c = kda_cuda_model_config(dm[0]);
        size_t a0 = kda_cuda_model_arena_bytes(dm[0]), a1 = kda_cuda_model_arena_bytes(dm[1]);
        size_t per = ((size_t)(2 * 64 * c->intermediate_size) * 2 + 255) & ~(size_t)255;
        size_t want = (size_t)(c->num_hidden_layers - 1) * per;
        CHECK_MSG(a0 - a1 == want, "arena %zu vs %zu bytes: saved %zu, want %zu", a0, a1, a0 - a1,
                  want);
        printf("    MLP recompute: bit-identical over 3 steps; arena %zu -> %zu bytes\n", a0, a1);
    }
    for (int pass = 0; pass < 2; pass++)
        kda_cuda_model_free(dm[pass]), free(g[pass]), free(p[pass]);
    kda_model_free(&m);
}

// KDA_CONV_QKV=1 (a layer's q, k and v convs in one launch forward; the default since
// 2026-12-04) and =2 (each way) against =0 (three launches): the same kernels' bodies on the same
// blocks, so every step's loss, gradients and parameters are bit-identical; with the separate dY
// buffers (KDA_DY_INPLACE=0: the backward's q and k dp then in m->dt1's halves) and with the
// fused dY's columns (KDA_DY_INPLACE=1, the default: 4 heads, so its width 644 keeps q and k's
// columns 8-byte aligned and the backward is one launch too). Both switches are pinned in both
// passes, so a suite run under either variable tests the same cases; the switches must read as
// set (a silent fallback would pass the bits but fail this), and unset they must give the
// defaults (1 and 1).
static void conv_qkv_case_(const char *qkv, int dyi);
KDA_TEST_GPU(gpu_model_conv_qkv_bit_identical) {
    if (!gpu_test_have()) return;
    conv_qkv_case_("1", 0);
    conv_qkv_case_("2", 0);
    conv_qkv_case_("2", 1);
    conv_qkv_case_("1", 1);
    KdaModel m;
    tiny_heads_(&m, 0.05, 101, 4);
    KdaError err = {{0}};
    KdaCudaModel *dm = NULL;
    GpuEnv e;
    gpu_env_set(&e, "KDA_DY_INPLACE", NULL);
    int rc = create_with_(&dm, &m, "KDA_CONV_QKV", NULL, &err);
    gpu_env_restore(&e);
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (!rc)
        CHECK_MSG(kda_cuda_model_conv_qkv(dm) == 1 && kda_cuda_model_dy_inplace(dm) == 1,
                  "unset: KDA_CONV_QKV %d, dY in place %d (want the defaults 1, 1)",
                  kda_cuda_model_conv_qkv(dm), kda_cuda_model_dy_inplace(dm));
    kda_cuda_model_free(dm);
    kda_model_free(&m);
}

// One case of gpu_model_conv_qkv_bit_identical: KDA_CONV_QKV=qkv against =0, both with
// KDA_DY_INPLACE=dyi, over three steps.
static void conv_qkv_case_(const char *qkv, int dyi) {
    static const GpuStep SCHED[] = {{{64, 64}, {0, 0}}, {{48, 64}, {1, 0}}, {{64, 64}, {0, 1}}};
    int want = qkv[0] - '0';
    KdaModel m;
    tiny_heads_(&m, 0.05, 101, 4); // in-proj width 644: q and k's dY columns 8-byte aligned
    KdaError err = {{0}};
    int64_t n = m.table.total_numel;
    float *g[2] = {NULL, NULL}, *p[2] = {NULL, NULL};
    KdaCudaModel *dm[2] = {NULL, NULL};
    int rc = 0;
    GpuEnv e;
    gpu_env_set(&e, "KDA_DY_INPLACE", dyi ? "1" : "0");
    for (int pass = 0; pass < 2 && !rc; pass++) {
        g[pass] = kda_malloc((size_t)n * 4), p[pass] = kda_malloc((size_t)n * 4);
        rc = create_with_(&dm[pass], &m, "KDA_CONV_QKV", pass ? qkv : "0", &err);
    }
    gpu_env_restore(&e);
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (!rc)
        CHECK_MSG(!kda_cuda_model_conv_qkv(dm[0]) && kda_cuda_model_conv_qkv(dm[1]) == want &&
                      kda_cuda_model_dy_inplace(dm[0]) == dyi &&
                      kda_cuda_model_dy_inplace(dm[1]) == dyi,
                  "KDA_CONV_QKV: %d with 0, %d with %s (want 0, %d); dY in place %d, %d (want %d)",
                  kda_cuda_model_conv_qkv(dm[0]), kda_cuda_model_conv_qkv(dm[1]), qkv, want,
                  kda_cuda_model_dy_inplace(dm[0]), kda_cuda_model_dy_inplace(dm[1]), dyi);
    char what[64];
    snprintf(what, sizeof what, "KDA_CONV_QKV=%d, dY in place %d", want, dyi);
    if (!rc) rc = gpu_train_pair(dm, SCHED, 3, g, p, n, what);
    if (!rc)
        printf("    conv q|k|v one launch (KDA_CONV_QKV=%d, dY in place %d): bit-identical\n", want,
               dyi);
    for (int pass = 0; pass < 2; pass++)
        kda_cuda_model_free(dm[pass]), free(g[pass]), free(p[pass]);
    kda_model_free(&m);
}

// Off with KDA_GRAPH=0, and eager while a profile runs: the profiled iteration's ops are the eager
// launches (their events could not be captured), and graphs resume after it.
KDA_TEST_GPU(gpu_model_graph_off_and_profile) {
    if (!gpu_test_have()) return;
    KdaModel m;
    tiny_untied_(&m, 0.05, 91);
    KdaError err = {{0}};
    int64_t n = m.table.total_numel;
    float *g = kda_malloc((size_t)n * 4), *p = kda_malloc((size_t)n * 4), loss = NAN;
    const GpuStep st = {{64, 64}, {0, 0}};
    int64_t c = -1, r = -1, f = -1;
    KdaCudaModel *dm = NULL;
    int rc = create_with_(&dm, &m, "KDA_GRAPH", "0", &err);
    for (int s = 1; s <= 3 && !rc; s++)
        rc = gpu_train_step(dm, &st, s, &loss, g, p, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (dm) kda_cuda_model_graph_stats(dm, &c, &r, &f);
    CHECK(c == 0 && r == 0 && f == 0);
    kda_cuda_model_free(dm), dm = NULL;
    rc = create_with_(&dm, &m, "KDA_GRAPH", NULL, &err); // the default: graphs on
    KdaProf prof;
    kda_prof_reset(&prof, 0, 0);
    // step 1: warm-up (twice: the scratch grows in the first), step 2 captures; step 3 profiled
    rc = rc || gpu_train_step(dm, &st, 1, &loss, g, p, &err) ||
         gpu_train_step(dm, &st, 2, &loss, g, p, &err);
    int64_t c2 = 0;
    if (!rc) kda_cuda_model_graph_stats(dm, &c2, &r, &f);
    rc = rc || kda_cuda_model_profile(dm, &prof, &err) ||
         gpu_train_step(dm, &st, 3, &loss, g, p, &err) || kda_cuda_model_profile(dm, NULL, &err);
    int64_t c3 = 0, r3 = 0;
    if (!rc) kda_cuda_model_graph_stats(dm, &c3, &r3, &f);
    rc = rc || gpu_train_step(dm, &st, 4, &loss, g, p, &err);
    int64_t r4 = 0;
    if (!rc) kda_cuda_model_graph_stats(dm, &c, &r4, &f);
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (!rc) {
        printf("    graphs after steps 2 / 3 (profiled) / 4: captured %lld / %lld / %lld, "
               "replayed %lld / %lld, failed %lld\n",
               (long long)c2, (long long)c3, (long long)c, (long long)r3, (long long)r4,
               (long long)f);
        CHECK(c2 >= 1 && c3 == c2 && r3 == r && r4 == r3 + 2 && c == c3 && f == 0);
        CHECK(prof.row[KDA_OP_CORE_FWD].calls == 4); // 2 layers x 2 micro-batches, eager
    }
    kda_cuda_model_free(dm);
    free(g), free(p);
    kda_model_free(&m);
}

#endif // KDA_HAVE_CUDA
