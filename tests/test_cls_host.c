// test_cls_host.c - the fused classifier's row kernels (src/cuda/xent_cuda.cu: the block kernel
// cls_row_k and the cluster kernel cls2_row_k) run on the HOST (kda_cuda_cls_rows_host,
// kda_cuda_cls_rows2_host: the same bodies, logical threads and blocks one after another, the
// same reduction trees) against the CPU cross-entropy (cpu/xent.h xent_fwd / xent_bwd) on
// trained-like peaked logits. Runs in the CPU suite of every CUDA build (CI has nvcc, no GPU);
// the kernels on a device are test_gpu_cls.c's and test_gpu_model.c's gpu_model_cls_fused*.
//
// The CPU xent gets the same logits exactly: n = the bf16 logits as fp32 and Wh = the identity
// [V, V], so its GEMM reproduces them bit for bit (x·1 + 0s) and its dn = dlogits · I is the
// fp32 dlogits.
// Tolerances: nll and lse 2e-6 · max(1, |lse|) absolute (the row kernels' partition sums are
// exact to ~2 (block) or ~5 (cluster) fp32 roundings, the CPU's is summed in double; their
// difference is a few fp32 ulps of lse); dlogits stored in bf16: |d - ref| <= 2^-8 |ref| + 1e-6 ·
// scale (bf16 rounding of each element plus the fp32 exponential). A wrong max, a dropped tail
// group or a wrong target gives errors of order 1.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

#ifdef KDA_HAVE_CUDA

#include "core/rng.h"       // defines: KdaRng, rng_normal, rng_below
#include "core/util.h"      // defines: bf16_to_f32, f32_to_bf16
#include "cpu/xent.h"       // defines: xent_fwd, xent_bwd, xent_work_floats, XENT_IGNORE
#include "cuda/xent_cuda.h" // defines: kda_cuda_cls_rows_host, kda_cuda_cls_rows_trim_host

// Trained-like logits of row r: N(0, 2) background, the target +14, three distractors +8; row 1
// is flat (N(0, 0.5)), row 2 sits at large magnitudes (+40), row 3 is ignored.
static void make_logits_(kda_bf16 *lg, int32_t *tg, int64_t rows, int64_t V, int64_t ld,
                         uint64_t seed) {
    KdaRng r;
    rng_seed(&r, seed);
    for (int64_t i = 0; i < rows; i++) {
        int32_t t = (int32_t)rng_below(&r, (uint64_t)V);
        tg[i] = i == 3 ? XENT_IGNORE : t;
        for (int64_t j = 0; j < ld; j++) {
            float x = rng_normal(&r, 0.0f, i == 1 ? 0.5f : 2.0f) + (i == 2 ? 40.0f : 0.0f);
            lg[i * ld + j] = f32_to_bf16(j < V ? x : NAN); // padding columns must never be read
        }
        if (i == 1) continue;
        lg[i * ld + t] = f32_to_bf16(bf16_to_f32(lg[i * ld + t]) + 14.0f);
        for (int k = 0; k < 3; k++) {
            int64_t j = (int64_t)rng_below(&r, (uint64_t)V);
            lg[i * ld + j] = f32_to_bf16(bf16_to_f32(lg[i * ld + j]) + 8.0f);
        }
    }
}

// The CPU cross-entropy of rows x V bf16 logits lg [rows, ld] (n = the logits in fp32, Wh = I):
// nll, lse [rows] and dlogits dn [rows, V] (malloc'd) at scale = 1 / the valid rows (row 3 is
// ignored). rows <= 6.
typedef struct {
    float nll[6], lse[6], *dn, scale;
} XentRef;

static void cpu_xent_(XentRef *ref, const kda_bf16 *lg, const int32_t *tg, int64_t rows, int64_t V,
                      int64_t ld) {
    float *n = malloc((size_t)(rows * V) * 4), *W = calloc((size_t)(V * V), 4);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < V; j++)
            n[i * V + j] = bf16_to_f32(lg[i * ld + j]);
    for (int64_t j = 0; j < V; j++)
        W[j * V + j] = 1.0f;
    int64_t wf = xent_work_floats(rows, V), nvalid = rows - 1;
    ref->scale = 1.0f / (float)nvalid;
    float *work = malloc((size_t)wf * 4), *dW = calloc((size_t)(V * V), 4);
    ref->dn = malloc((size_t)(rows * V) * 4);
    xent_fwd(ref->nll, ref->lse, NULL, n, W, tg, rows, V, V, work, wf);
    xent_bwd(ref->dn, dW, n, W, tg, ref->lse, rows, V, V, ref->scale, work, wf);
    free(n), free(W), free(work), free(dW);
}

// One twin run against ref at the tolerances above: g holds its dlogits (in place of the logits),
// nll, lse its losses, nll0, lse0 those of its loss-only run (which must equal them); padding
// columns stay NaN. what names the configuration in a failure; *worst and *worst_d receive the
// largest |nll| difference and relative dlogit difference.
static void expect_rows_(const char *what, const XentRef *ref, const kda_bf16 *g, const float *nll,
                         const float *lse, const float *nll0, const float *lse0, int64_t rows,
                         int64_t V, int64_t ld, double *worst, double *worst_d) {
    *worst = 0, *worst_d = 0;
    for (int64_t i = 0; i < rows; i++) {
        double tol = 2e-6 * fmax(1.0, fabs(ref->lse[i]));
        CHECK_NEAR(lse[i], ref->lse[i], tol);
        CHECK_NEAR(nll[i], ref->nll[i], tol);
        CHECK(nll[i] == nll0[i] && lse[i] == lse0[i]);
        *worst = fmax(*worst, fabs(nll[i] - ref->nll[i]));
        for (int64_t j = 0; j < V; j++) {
            double d = bf16_to_f32(g[i * ld + j]), r = ref->dn[i * V + j];
            double e = fabs(d - r);
            if (!(e <= fabs(r) / 256.0 + 1e-6 * ref->scale)) {
                CHECK_MSG(0, "%s row %lld col %lld: dlogit %.9g vs %.9g", what, (long long)i,
                          (long long)j, d, r);
                break;
            }
            *worst_d = fmax(*worst_d, e / (fabs(r) + 1e-30));
        }
        for (int64_t j = V; j < ld; j++) // padding untouched
            CHECK(isnan(bf16_to_f32(g[i * ld + j])));
    }
}

KDA_TEST(cls_host_matches_cpu_xent) {
    const int64_t V = 1003, ld = kda_cuda_cls_ld(V), rows = 6; // 1003 = 125 groups of 8 + 3
    CHECK_EQ_INT(ld, 1024);
    kda_bf16 *lg = malloc((size_t)(rows * ld) * sizeof *lg);
    int32_t tg[6];
    make_logits_(lg, tg, rows, V, ld, 3);
    XentRef ref;
    cpu_xent_(&ref, lg, tg, rows, V, ld);
    float scale = ref.scale;
    const int threads[] = {1, 64, 512};
    for (size_t k = 0; k < sizeof threads / sizeof *threads; k++) {
        kda_bf16 *g = malloc((size_t)(rows * ld) * sizeof *g);
        memcpy(g, lg, (size_t)(rows * ld) * sizeof *g);
        float nll[6], lse[6], nll0[6], lse0[6];
        // loss only: logits untouched
        kda_cuda_cls_rows_host(g, nll0, lse0, tg, rows, V, ld, scale, 0, threads[k]);
        CHECK(!memcmp(g, lg, (size_t)(rows * ld) * sizeof *g));
        kda_cuda_cls_rows_host(g, nll, lse, tg, rows, V, ld, scale, 1, threads[k]);
        char what[32];
        snprintf(what, sizeof what, "threads %d", threads[k]);
        double worst, worst_d;
        expect_rows_(what, &ref, g, nll, lse, nll0, lse0, rows, V, ld, &worst, &worst_d);
        CHECK(nll[3] == 0.0f && ref.dn[3 * V] == 0.0f && g[3 * ld] == 0);
        printf("    %3d threads: max |nll diff| %.2e, max rel dlogit diff %.2e\n", threads[k],
               worst, worst_d);
        free(g);
    }
    free(lg), free(ref.dn);
}

// The partition sum stays exact at the real vocabulary (128,256): lse against a double sum over
// the same bf16 logits within 1e-6 relative, for 512 threads (the device's) and one thread (one
// long sequential sum: the case whose fp32 error would grow with the vocabulary).
KDA_TEST(cls_host_exact_at_full_vocab) {
    const int64_t V = 128256, ld = kda_cuda_cls_ld(V), rows = 3;
    kda_bf16 *lg = malloc((size_t)(rows * ld) * sizeof *lg);
    int32_t tg[3];
    make_logits_(lg, tg, rows, V, ld, 9);
    for (int th = 1; th <= 512; th *= 512) {
        kda_bf16 *g = malloc((size_t)(rows * ld) * sizeof *g);
        memcpy(g, lg, (size_t)(rows * ld) * sizeof *g);
        float nll[3], lse[3];
        kda_cuda_cls_rows_host(g, nll, lse, tg, rows, V, ld, 1.0f, 0, th);
        for (int64_t i = 0; i < rows; i++) {
            double M = -INFINITY, S = 0.0;
            for (int64_t j = 0; j < V; j++)
                M = fmax(M, bf16_to_f32(lg[i * ld + j]));
            for (int64_t j = 0; j < V; j++)
                S += exp((double)bf16_to_f32(lg[i * ld + j]) - M);
            double l = M + log(S);
            CHECK_NEAR(lse[i], l, 1e-6 * fmax(1.0, fabs(l)));
            CHECK_NEAR(nll[i], l - bf16_to_f32(lg[i * ld + tg[i]]), 1e-6 * fmax(1.0, fabs(l)));
            if (th == 512)
                printf("    row %lld: lse %.7f vs exact %.7f\n", (long long)i, lse[i], l);
        }
        free(g);
    }
    free(lg);
}

// The row kernel on fp32 logits (the loss-only head of --precision fp32, kda_cuda_cls_loss_f32):
// trained-like peaked rows of full fp32 values (not bf16-representable) at the real vocabulary,
// padding columns NaN (never read). lse and nll against the double sum over the same fp32 logits:
// 1e-6 · max(1, |lse|), as above (one thread: one long sequential sum, the case whose fp32
// error would grow with the vocabulary; 512: the device's tree).
KDA_TEST(cls_host_f32_exact_at_full_vocab) {
    const int64_t V = 128256, ld = kda_cuda_cls_ld(V), rows = 4;
    float *lg = malloc((size_t)(rows * ld) * sizeof *lg);
    int32_t tg[4];
    KdaRng r;
    rng_seed(&r, 10);
    for (int64_t i = 0; i < rows; i++) {
        tg[i] = i == 3 ? XENT_IGNORE : (int32_t)rng_below(&r, (uint64_t)V);
        for (int64_t j = 0; j < ld; j++)
            lg[i * ld + j] = j < V ? rng_normal(&r, 0.0f, 2.0f) + (i == 2 ? 40.0f : 0.0f) : NAN;
        if (tg[i] >= 0) lg[i * ld + tg[i]] += 14.0f; // the peak a trained model puts on its target
    }
    for (int th = 1; th <= 512; th *= 512) {
        float nll[4], lse[4];
        kda_cuda_cls_rows_f32_host(lg, nll, lse, tg, rows, V, ld, th);
        for (int64_t i = 0; i < rows; i++) {
            double M = -INFINITY, S = 0.0;
            for (int64_t j = 0; j < V; j++)
                M = fmax(M, lg[i * ld + j]);
            for (int64_t j = 0; j < V; j++)
                S += exp((double)lg[i * ld + j] - M);
            double l = M + log(S), want = tg[i] >= 0 ? l - lg[i * ld + tg[i]] : 0.0;
            CHECK_NEAR(lse[i], l, 1e-6 * fmax(1.0, fabs(l)));
            CHECK_NEAR(nll[i], want, 1e-6 * fmax(1.0, fabs(l)));
            if (th == 512)
                printf("    f32 row %lld: lse %.7f vs exact %.7f, nll %.7f vs %.7f\n", (long long)i,
                       lse[i], l, nll[i], want);
        }
    }
    free(lg);
}

// Host twin of the row kernel `kernel` (0: cluster with nth threads and cl blocks, 1: block).
static void rows_host_(int kernel, kda_bf16 *g, float *nll, float *lse, const int32_t *tg,
                       int64_t rows, int64_t V, int64_t ld, float scale, int grad, int nth,
                       int cl) {
    if (kernel)
        kda_cuda_cls_rows_host(g, nll, lse, tg, rows, V, ld, scale, grad, nth);
    else
        kda_cuda_cls_rows2_host(g, nll, lse, tg, rows, V, ld, scale, grad, nth, cl);
}

// The cluster kernel's twin against the CPU cross-entropy, as cls_host_matches_cpu_xent, for
// several block sizes (1 thread: one long sequential sum; 100: a partial warp; 256: the
// device's) and blocks per row (8 at V = 1003: 16 groups per slice, the last one partial).
KDA_TEST(cls_host2_matches_cpu_xent) {
    const int64_t V = 1003, ld = kda_cuda_cls_ld(V), rows = 6;
    kda_bf16 *lg = malloc((size_t)(rows * ld) * sizeof *lg);
    int32_t tg[6];
    make_logits_(lg, tg, rows, V, ld, 4);
    XentRef ref;
    cpu_xent_(&ref, lg, tg, rows, V, ld);
    float scale = ref.scale;
    const struct { // 512 x 4, 1024 x 8: the pipelined kernel's shapes (KDA_CLS_ROW_PIPE)
        int nth, cl;
    } cfg[] = {{1, 1}, {100, 1}, {256, 1}, {32, 2}, {256, 4}, {64, 8}, {512, 4}, {1024, 8}};
    for (size_t k = 0; k < sizeof cfg / sizeof *cfg; k++) {
        kda_bf16 *g = malloc((size_t)(rows * ld) * sizeof *g);
        memcpy(g, lg, (size_t)(rows * ld) * sizeof *g);
        float nll[6], lse[6], nll0[6], lse0[6];
        kda_cuda_cls_rows2_host(g, nll0, lse0, tg, rows, V, ld, scale, 0, cfg[k].nth, cfg[k].cl);
        CHECK(!memcmp(g, lg, (size_t)(rows * ld) * sizeof *g)); // loss only: logits untouched
        kda_cuda_cls_rows2_host(g, nll, lse, tg, rows, V, ld, scale, 1, cfg[k].nth, cfg[k].cl);
        char what[32];
        snprintf(what, sizeof what, "%d x %d", cfg[k].nth, cfg[k].cl);
        double worst, worst_d;
        expect_rows_(what, &ref, g, nll, lse, nll0, lse0, rows, V, ld, &worst, &worst_d);
        CHECK(nll[3] == 0.0f && g[3 * ld] == 0 && g[3 * ld + V - 1] == 0);
        printf("    %3d threads x %d blocks: max |nll diff| %.2e, max rel dlogit diff %.2e\n",
               cfg[k].nth, cfg[k].cl, worst, worst_d);
        free(g);
    }
    free(lg), free(ref.dn);
}

// Both twins at the real vocabulary (128,256) against a double sum over the same bf16 logits:
// lse and nll within 1e-6 · max(1, |lse|) (the cluster kernel: ~5 fp32 roundings of the
// partition sum, 3e-7; the rows include a flat one and one at +40), for the device's shapes
// (256 x 4 blocks; 512 threads; the pipelined kernel's 512 or 1024 x 4) and the longest
// sequential sums (1 thread, 1 block).
KDA_TEST(cls_host2_exact_at_full_vocab) {
    const int64_t V = 128256, ld = kda_cuda_cls_ld(V), rows = 3;
    CHECK_EQ_INT(kda_cuda_cls_cluster(V), 4);
    kda_bf16 *lg = malloc((size_t)(rows * ld) * sizeof *lg);
    int32_t tg[3];
    make_logits_(lg, tg, rows, V, ld, 11);
    double ref[3];
    for (int64_t i = 0; i < rows; i++) {
        double M = -INFINITY, S = 0.0;
        for (int64_t j = 0; j < V; j++)
            M = fmax(M, bf16_to_f32(lg[i * ld + j]));
        for (int64_t j = 0; j < V; j++)
            S += exp((double)bf16_to_f32(lg[i * ld + j]) - M);
        ref[i] = M + log(S);
    }
    const struct {
        int kernel, nth, cl;
    } cfg[] = {{0, 256, 4}, {0, 1, 1}, {0, 256, 8}, {1, 512, 0}, {0, 512, 4}, {0, 1024, 4}};
    for (size_t k = 0; k < sizeof cfg / sizeof *cfg; k++) {
        kda_bf16 *g = malloc((size_t)(rows * ld) * sizeof *g);
        memcpy(g, lg, (size_t)(rows * ld) * sizeof *g);
        float nll[3], lse[3];
        rows_host_(cfg[k].kernel, g, nll, lse, tg, rows, V, ld, 1.0f, 0, cfg[k].nth, cfg[k].cl);
        for (int64_t i = 0; i < rows; i++) {
            double l = ref[i], tol = 1e-6 * fmax(1.0, fabs(l));
            CHECK_NEAR(lse[i], l, tol);
            CHECK_NEAR(nll[i], l - bf16_to_f32(lg[i * ld + tg[i]]), tol);
            if (k == 0) printf("    row %lld: lse %.7f vs exact %.7f\n", (long long)i, lse[i], l);
        }
        free(g);
    }
    free(lg);
}

// Edge rows of the cluster kernel's twin against double sums: vocabularies smaller than the
// cluster (V = 5 over 8 blocks: 7 empty slices), exactly one group (V = 8) and one group + 1;
// -inf logits (masked columns: they add nothing; a whole slice of them too) and a NaN logit
// (the row's lse and nll are NaN, the others' are not). Tolerance 1e-6 · max(1, |lse|) as above.
KDA_TEST(cls_host2_edge_rows) {
    const int64_t Vs[] = {5, 8, 9, 64};
    for (size_t a = 0; a < sizeof Vs / sizeof *Vs; a++) {
        int64_t V = Vs[a], ld = kda_cuda_cls_ld(V), rows = 4;
        kda_bf16 *lg = malloc((size_t)(rows * ld) * sizeof *lg);
        int32_t tg[4];
        make_logits_(lg, tg, rows, V, ld, 20 + a);
        tg[3] = (int32_t)(V - 1);                  // no ignored row here
        for (int64_t j = 0; j < V && V == 64; j++) // row 0: the first slice of 8 all -inf
            if (j < 8 && j != tg[0]) lg[j] = f32_to_bf16(-INFINITY);
        lg[1 * ld + V / 2] = f32_to_bf16(-INFINITY); // row 1: one -inf logit
        if (tg[1] == V / 2) tg[1] = 0;
        lg[2 * ld + V - 1] = f32_to_bf16(NAN); // row 2: a NaN logit
        for (int cl = 1; cl <= 8; cl *= 2) {
            kda_bf16 *g = malloc((size_t)(rows * ld) * sizeof *g);
            memcpy(g, lg, (size_t)(rows * ld) * sizeof *g);
            float nll[4], lse[4];
            kda_cuda_cls_rows2_host(g, nll, lse, tg, rows, V, ld, 0.25f, 1, 256, cl);
            for (int64_t i = 0; i < rows; i++) {
                if (i == 2) {
                    CHECK_MSG(isnan(lse[i]) && isnan(nll[i]), "V %lld cl %d: NaN row lse %g",
                              (long long)V, cl, lse[i]);
                    continue;
                }
                double M = -INFINITY, S = 0.0;
                for (int64_t j = 0; j < V; j++)
                    M = fmax(M, bf16_to_f32(lg[i * ld + j]));
                for (int64_t j = 0; j < V; j++)
                    S += exp((double)bf16_to_f32(lg[i * ld + j]) - M);
                double l = M + log(S), tol = 1e-6 * fmax(1.0, fabs(l));
                CHECK_MSG(fabs(lse[i] - l) <= tol, "V %lld cl %d row %lld: lse %.9g vs %.9g",
                          (long long)V, cl, (long long)i, lse[i], l);
                CHECK_NEAR(nll[i], l - bf16_to_f32(lg[i * ld + tg[i]]), tol);
                // Σ dlogits = (Σ softmax - 1) · scale = 0 up to each element's bf16 rounding
                // (2^-8 of |d|, Σ |d| <= 2 · scale); an lse off by δ gives ~δ · scale
                double sum = 0;
                for (int64_t j = 0; j < V; j++) {
                    float d = bf16_to_f32(g[i * ld + j]);
                    CHECK(isfinite(d));
                    sum += d;
                }
                CHECK_NEAR(sum, 0.0, 2.0 * 0.25 / 256.0 + 1e-6);
            }
            free(g);
        }
        free(lg);
    }
}

// The trimmed cluster kernel's twin (KDA_CLS_ROW_TRIM) against the cluster kernel's on the same
// rows: the SAME bits (nll, lse and every dlogit, memcmp), with and without the dlogits pass.
// The rows: make_logits_'s (flat, +40, ignored), a target moved into each slice of the row (the
// last one at V - 1: in the row's partial group when V % 8 != 0), and the edge cases of
// cls_host2_edge_rows (-inf logits, a slice of them, a NaN logit). Returns the mismatches.
static int trim_same_bits_(const kda_bf16 *lg, const int32_t *tg, int64_t rows, int64_t V,
                           int64_t ld, int nth, int cl) {
    size_t n = (size_t)(rows * ld);
    kda_bf16 *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    float na[8], sa[8], nb[8], sb[8];
    int bad = 0;
    for (int grad = 0; grad <= 1; grad++) {
        memcpy(a, lg, n * sizeof *a), memcpy(b, lg, n * sizeof *b);
        kda_cuda_cls_rows2_host(a, na, sa, tg, rows, V, ld, 0.125f, grad, nth, cl);
        kda_cuda_cls_rows_trim_host(b, nb, sb, tg, rows, V, ld, 0.125f, grad, nth, cl);
        int same = !memcmp(a, b, n * sizeof *a) && !memcmp(na, nb, (size_t)rows * sizeof *na) &&
                   !memcmp(sa, sb, (size_t)rows * sizeof *sa);
        CHECK_MSG(same, "V %lld nth %d cl %d grad %d: trimmed twin's bits differ", (long long)V,
                  nth, cl, grad);
        bad += !same;
    }
    free(a), free(b);
    return bad;
}

KDA_TEST(cls_host_trim_same_bits) {
    const int64_t Vs[] = {1003, 5, 8, 9, 64, 128256};
    int cases = 0, bad = 0;
    for (size_t v = 0; v < sizeof Vs / sizeof *Vs; v++) {
        int64_t V = Vs[v], ld = kda_cuda_cls_ld(V), rows = V == 128256 ? 4 : 8;
        kda_bf16 *lg = malloc((size_t)(rows * ld) * sizeof *lg);
        int32_t tg[8];
        make_logits_(lg, tg, rows < 6 ? rows : 6, V, ld, 40 + v); // rows 0..5 (3 ignored)
        for (int64_t i = 6; i < rows; i++) // rows 6, 7: copies of row 0 with other targets
            memcpy(lg + i * ld, lg, (size_t)ld * sizeof *lg), tg[i] = tg[0];
        if (rows > 4) tg[6] = (int32_t)(V - 1), tg[7] = (int32_t)(V / 2);
        if (V == 64) { // row 4: -inf outside its target's group, row 5: a NaN logit
            for (int64_t j = 0; j < V; j++)
                if (j / 8 != tg[4] / 8) lg[4 * ld + j] = f32_to_bf16(-INFINITY);
            lg[5 * ld + 7] = f32_to_bf16(NAN);
        }
        int cls[] = {1, 2, 4, 8}, nths[] = {1, 32, 100, 256};
        for (int c = 0; c < 4; c++)
            for (int k = 0; k < 4; k++) {
                if (V == 128256 && (cls[c] < 4 || nths[k] < 256)) continue; // the device's shapes
                for (int64_t i = 0; i < rows && V > 64; i++) // target into slice i % cl
                    if (tg[i] >= 0 && i < 6 && i != 1) {
                        int64_t gpc = ((V + 7) / 8 + cls[c] - 1) / cls[c], g0 = (i % cls[c]) * gpc;
                        tg[i] = (int32_t)(8 * g0 + 8 * (i % 3) + 1 < V ? 8 * g0 + 8 * (i % 3) + 1
                                                                       : V - 1);
                    }
                bad += trim_same_bits_(lg, tg, rows, V, ld, nths[k], cls[c]) != 0;
                cases++;
            }
        free(lg);
    }
    printf("    %d shapes x 2 modes: trimmed twin bit-identical in %d\n", cases, cases - bad);
}

// Blocks per row: the fewest slices of at most 4096 groups (64 KB of shared memory).
KDA_TEST(cls_cluster_choice) {
    CHECK_EQ_INT(kda_cuda_cls_cluster(1), 1);
    CHECK_EQ_INT(kda_cuda_cls_cluster(32768), 1); // 4096 groups
    CHECK_EQ_INT(kda_cuda_cls_cluster(32769), 2);
    CHECK_EQ_INT(kda_cuda_cls_cluster(128256), 4); // 16,032 groups: 4 x 4008
    CHECK_EQ_INT(kda_cuda_cls_cluster(262144), 8);
    CHECK_EQ_INT(kda_cuda_cls_cluster(262145), 0); // too long: the block kernel
}

// Chunk rows: all rows when they fit, else even 128-aligned chunks within the budget.
KDA_TEST(cls_rows_choice) {
    int64_t ld = kda_cuda_cls_ld(128256);
    CHECK_EQ_INT(ld, 128256);
    CHECK_EQ_INT(kda_cuda_cls_rows(100, 300, (size_t)1 << 30), 100);
    int64_t r = kda_cuda_cls_rows(32768, 128256, (size_t)2 << 30);
    CHECK_EQ_INT(r, 8192); // 4 chunks of 8192 tokens, 2.1 GB of bf16 logits each
    CHECK(kda_cuda_cls_bytes(r, 128256) <= ((size_t)2 << 30));
    CHECK_EQ_INT(kda_cuda_cls_rows(1000, 128256, 1), 128); // budget below one row: 128 rows
}

#endif // KDA_HAVE_CUDA
