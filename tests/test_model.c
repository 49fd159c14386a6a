// test_model.c - whole-model CPU forward/backward (src/model/model.c) on tiny configs built in
// code: finite-difference checks of every parameter tensor's gradient, chunked vs recurrent
// core, init loss, per-token NLL, row independence, gradient accumulation, input errors.
//
// Tolerances of the direct checks and the error each covers: chunked vs recurrent loss 1e-5
// relative (two fp32 summation orders of the core over T = 150; measured ~1e-7); init loss
// ln V +- 0.02 (the std^2 D / 2 variance term of kda-model.md §7 plus the spread of a
// 128-token sample); sum of NLLs / targets vs the returned mean loss 1e-6 relative (the same
// fp32 NLLs summed in another order, each rounded to float); one NLL vs the double log-softmax
// of the returned fp32 logits 1e-5 (half an ulp of the float NLL, ~1e-6, plus the chunk sums).
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "model/model.h"
#include "test.h"
#include "tiny_model.h"

// Model with FLA's init rules at a larger std (0.2) so that gradients are well above the fp32
// noise of a finite difference, and g_proj bias non-zero.
static void tiny_model_(KdaModel *m, TinyKind kind, double init_std, uint64_t seed) {
    KdaConfig c = tiny_config(kind);
    c.initializer_range = init_std;
    KdaError err;
    KDA_ASSERT(kda_model_init(m, &c, &err) == 0);
    kda_params_init(&m->table, &m->cfg, m->params, seed);
    KdaRng r;
    rng_seed(&r, seed + 1);
    for (int64_t i = 0; i < m->cfg.value_dim; i++)
        m->w.layers[0].g_proj1_bias[i] = rng_normal(&r, 0.0f, 0.5f);
}

// Conv weights near identity (tap W-1 ~ 1): keeps |q̃|, |k̃| of order 1 so the L2 norm (whose
// curvature grows like 1/|x|²) stays smooth enough for finite differences.
static void condition_convs_(KdaModel *m, uint64_t seed) {
    KdaRng r;
    rng_seed(&r, seed);
    int64_t W = m->cfg.conv_size;
    for (int64_t l = 0; l < m->cfg.num_hidden_layers; l++) {
        KdaLayerTensors *P = &m->w.layers[l];
        float *convs[3] = {P->q_conv, P->k_conv, P->v_conv};
        int64_t C[3] = {m->cfg.key_dim, m->cfg.key_dim, m->cfg.value_dim};
        for (int j = 0; j < 3; j++)
            for (int64_t i = 0; i < C[j] * W; i++)
                convs[j][i] = rng_normal(&r, 0.0f, 0.3f) + (i % W == W - 1 ? 1.0f : 0.0f);
    }
}

static int32_t *random_ids_(int64_t n, int64_t vocab, uint64_t seed) {
    int32_t *ids = malloc((size_t)n * sizeof(int32_t));
    tiny_random_ids(ids, n, vocab, seed);
    return ids;
}

// Loss in double: Σ per-token NLL (double) / number of valid targets.
static double loss_d_(KdaModel *m, const int32_t *ids, int64_t B, int64_t T, float *nll) {
    float loss;
    KdaError err;
    KDA_ASSERT(kda_model_forward(m, ids, NULL, B, T, nll, NULL, &loss, &err) == 0);
    double s = 0;
    for (int64_t i = 0; i < B * T; i++)
        s += nll[i];
    return s / (double)(B * (T - 1));
}

// Central difference of the loss along u (n floats) at step h, parameters restored after.
static double fd_dir_(KdaModel *m, float *p, const float *save, const float *u, int64_t n, double h,
                      const int32_t *ids, int64_t B, int64_t T, float *nll) {
    for (int64_t i = 0; i < n; i++)
        p[i] = save[i] + (float)(h * u[i]);
    double a = loss_d_(m, ids, B, T, nll);
    for (int64_t i = 0; i < n; i++)
        p[i] = save[i] - (float)(h * u[i]);
    double b = loss_d_(m, ids, B, T, nll);
    memcpy(p, save, (size_t)n * sizeof(float));
    return (a - b) / (2 * h);
}

// Finite-difference check of one tensor's gradient: the directional derivative along the
// gradient itself and along a random unit direction, and the 3 entries of largest |grad|.
// Richardson extrapolation (4·D(h/2) - D(h))/3 with h = 1e-2 cancels the O(h²) truncation
// term, which at this deliberately nonlinear init (std 0.2) reaches several % for plain
// central differences; what remains is O(h⁴) plus fp32 forward noise (~1e-6 relative on the
// loss -> ~1e-4 absolute on the derivative). Tolerance: 5e-4 + 2% of the value; a wrong term
// in a backward formula shows up as a >10% error (checked by mutating the code).
static void fd_tensor_(KdaModel *m, const KdaParamInfo *row, const float *grads, const int32_t *ids,
                       int64_t B, int64_t T, float *nll, const char *cfgname) {
    float *p = m->params + row->offset;
    const float *g = grads + row->offset;
    int64_t n = row->numel;
    double gn = 0, h = 1e-2;
    for (int64_t i = 0; i < n; i++)
        gn += (double)g[i] * g[i];
    gn = sqrt(gn);
    float *save = malloc((size_t)n * sizeof(float)), *u = calloc((size_t)n, sizeof(float));
    char *used = calloc((size_t)n, 1);
    memcpy(save, p, (size_t)n * sizeof(float));
    KdaRng r;
    rng_seed(&r, (uint64_t)row->offset);
    for (int dir = 0; dir < 2; dir++) {
        double un = 0, an = 0;
        for (int64_t i = 0; i < n; i++) {
            u[i] = dir == 0 ? (gn > 0 ? (float)(g[i] / gn) : 0.0f) : rng_normal(&r, 0, 1);
            un += (double)u[i] * u[i];
        }
        if (un == 0) continue;
        un = sqrt(un);
        for (int64_t i = 0; i < n; i++)
            u[i] = (float)(u[i] / un), an += (double)u[i] * g[i];
        double d1 = fd_dir_(m, p, save, u, n, h, ids, B, T, nll);
        double d2 = fd_dir_(m, p, save, u, n, h / 2, ids, B, T, nll);
        double fd = (4 * d2 - d1) / 3;
        CHECK_MSG(fabs(fd - an) <= 5e-4 + 0.02 * fabs(an),
                  "%s %s: directional derivative (%s) fd %.6g vs backward %.6g", cfgname, row->name,
                  dir == 0 ? "along grad" : "random", fd, an);
    }
    memset(u, 0, (size_t)n * sizeof(float));
    for (int k = 0; k < 3 && k < n; k++) { // largest |g| entries
        int64_t best = -1;
        for (int64_t i = 0; i < n; i++)
            if (!used[i] && (best < 0 || fabsf(g[i]) > fabsf(g[best]))) best = i;
        used[best] = 1;
        u[best] = 1.0f;
        double d1 = fd_dir_(m, p, save, u, n, h, ids, B, T, nll);
        double d2 = fd_dir_(m, p, save, u, n, h / 2, ids, B, T, nll);
        u[best] = 0.0f;
        double fd = (4 * d2 - d1) / 3;
        CHECK_MSG(fabs(fd - g[best]) <= 5e-4 + 0.02 * fabs(g[best]),
                  "%s %s[%lld]: fd %.6g vs backward %.6g", cfgname, row->name, (long long)best, fd,
                  (double)g[best]);
    }
    free(save), free(u), free(used);
}

// Layer 0 and the top-level tensors (layer 1 runs the same code) of a tiny model at init std
// `std`; every tensor kind of the config is covered.
// Runs on one thread: ~1000 forwards of a tiny model, where OpenMP barriers on a busy machine
// cost more than the work (threading is covered by the other tests).
static void model_fd_case_(TinyKind kind, const char *name, KdaCoreMode core, double std) {
    int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    KdaModel m;
    tiny_model_(&m, kind, std, 100 + kind);
    if (m.cfg.use_short_conv) condition_convs_(&m, 50 + kind);
    m.core = core;
    int64_t B = 2, T = 21;
    int32_t *ids = random_ids_(B * T, m.cfg.vocab_size, 7 + kind);
    float *nll = malloc((size_t)(B * T) * sizeof(float));
    float *grads = calloc((size_t)m.table.total_numel, sizeof(float));
    KdaError err;
    loss_d_(&m, ids, B, T, nll);
    CHECK(kda_model_backward(&m, grads, &err) == 0);
    for (int i = 0; i < m.table.n; i++)
        if (m.table.rows[i].layer <= 0)
            fd_tensor_(&m, &m.table.rows[i], grads, ids, B, T, nll, name);
    free(ids), free(nll), free(grads);
    kda_model_free(&m);
    omp_set_num_threads(threads);
}

KDA_TEST(model_grad_fd_tied) {
    model_fd_case_(TINY_TIED, "tied", KDA_CORE_CHUNK, 0.1);
}
KDA_TEST(model_grad_fd_gva_negeig_untied) {
    model_fd_case_(TINY_GVA_NEG, "gva", KDA_CORE_CHUNK, 0.1);
}
KDA_TEST(model_grad_fd_no_conv) {
    model_fd_case_(TINY_NO_CONV, "noconv", KDA_CORE_RECURRENT, 0.1);
}
KDA_TEST(model_grad_fd_bounded_gate) {
    model_fd_case_(TINY_BOUNDED, "bounded", KDA_CORE_CHUNK, 0.1);
}

// Chunked and recurrent cores are the same math: losses agree to fp32 rounding (1e-5
// relative) and every gradient to 1e-4 of the largest gradient entry (the chunked form sums
// in another order and inverts a triangular matrix, ~1e-6 relative per op here).
KDA_TEST(model_chunk_vs_recurrent) {
    TinyKind kinds[] = {TINY_TIED, TINY_GVA_NEG, TINY_BOUNDED};
    for (int ki = 0; ki < 3; ki++) {
        KdaModel m;
        tiny_model_(&m, kinds[ki], 0.2, 200 + ki);
        int64_t B = 2, T = 150; // several chunks of 64 and a partial one
        int32_t *ids = random_ids_(B * T, m.cfg.vocab_size, 11);
        int64_t P = m.table.total_numel;
        float *g1 = calloc((size_t)P, sizeof(float)), *g2 = calloc((size_t)P, sizeof(float));
        float l1, l2;
        KdaError err;
        m.core = KDA_CORE_CHUNK;
        CHECK(kda_model_forward(&m, ids, NULL, B, T, NULL, NULL, &l1, &err) == 0);
        CHECK(kda_model_backward(&m, g1, &err) == 0);
        m.core = KDA_CORE_RECURRENT;
        CHECK(kda_model_forward(&m, ids, NULL, B, T, NULL, NULL, &l2, &err) == 0);
        CHECK(kda_model_backward(&m, g2, &err) == 0);
        CHECK_NEAR(l1, l2, 1e-5 * fabs(l2));
        double gmax = 0, dmax = 0;
        for (int64_t i = 0; i < P; i++) {
            gmax = fmax(gmax, fabs(g2[i]));
            dmax = fmax(dmax, fabs((double)g1[i] - g2[i]));
        }
        CHECK_MSG(dmax <= 1e-4 * gmax, "config %d: max grad diff %.3g (max |g| %.3g)", ki, dmax,
                  gmax);
        free(ids), free(g1), free(g2);
        kda_model_free(&m);
    }
}

// At FLA's init (std 0.02) logits are ~0, so the loss is ln(vocab) + O(std²·D) (kda-model.md §7).
KDA_TEST(model_init_loss) {
    KdaModel m;
    tiny_model_(&m, TINY_TIED, 0.02, 5);
    memset(m.w.layers[0].g_proj1_bias, 0, (size_t)m.cfg.value_dim * sizeof(float));
    int64_t B = 2, T = 64;
    int32_t *ids = random_ids_(B * T, m.cfg.vocab_size, 3);
    float loss;
    KdaError err;
    CHECK(kda_model_forward(&m, ids, NULL, B, T, NULL, NULL, &loss, &err) == 0);
    CHECK_NEAR(loss, log((double)m.cfg.vocab_size), 0.02);
    free(ids);
    kda_model_free(&m);
}

// Per-token NLL: sums to the loss, 0 at ignored positions; each row equals a B=1 forward of
// that row alone (conv history and state restart per row); logits match the NLL.
KDA_TEST(model_nll_rows_and_labels) {
    KdaModel m;
    tiny_model_(&m, TINY_GVA_NEG, 0.2, 9);
    int64_t B = 3, T = 70, V = m.cfg.vocab_size;
    int32_t *ids = random_ids_(B * T, V, 5);
    float *nll = malloc((size_t)(B * T) * sizeof(float)), *nll1 = malloc((size_t)T * sizeof(float));
    float *logits = malloc((size_t)(B * T * V) * sizeof(float));
    float loss, loss1;
    KdaError err;
    CHECK(kda_model_forward(&m, ids, NULL, B, T, nll, logits, &loss, &err) == 0);
    double s = 0;
    for (int64_t i = 0; i < B * T; i++)
        s += nll[i];
    CHECK_NEAR(s / (double)(B * (T - 1)), loss, 1e-6 * loss);
    for (int64_t b = 0; b < B; b++)
        CHECK(nll[b * T + T - 1] == 0.0f);
    // token (1, 10): NLL of ids[1, 11] from the logits
    const float *lg = logits + (1 * T + 10) * V;
    double mx = lg[0], se = 0;
    for (int64_t v = 1; v < V; v++)
        mx = fmax(mx, lg[v]);
    for (int64_t v = 0; v < V; v++)
        se += exp(lg[v] - mx);
    CHECK_NEAR(nll[T + 10], mx + log(se) - lg[ids[T + 11]], 1e-5);
    CHECK(kda_model_forward(&m, ids + 2 * T, NULL, 1, T, nll1, NULL, &loss1, &err) == 0);
    double dmax = 0;
    for (int64_t t = 0; t < T; t++)
        dmax = fmax(dmax, fabs(nll1[t] - nll[2 * T + t]));
    CHECK_MSG(dmax <= 1e-5, "row 2 alone differs from the batch by %.3g", dmax);
    // labels with -100: those positions are ignored
    int32_t *labels = malloc((size_t)(B * T) * sizeof(int32_t));
    memcpy(labels, ids, (size_t)(B * T) * sizeof(int32_t));
    labels[5] = -100, labels[T + 1] = -100;
    CHECK(kda_model_forward(&m, ids, labels, B, T, nll, NULL, &loss1, &err) == 0);
    CHECK(nll[4] == 0.0f && nll[T] == 0.0f);
    s = 0;
    for (int64_t i = 0; i < B * T; i++)
        s += nll[i];
    CHECK_NEAR(s / (double)(B * (T - 1) - 2), loss1, 1e-6 * loss1);
    free(ids), free(nll), free(nll1), free(logits), free(labels);
    kda_model_free(&m);
}

// backward accumulates; it needs a forward; bad ids are rejected with the position.
KDA_TEST(model_backward_contract) {
    KdaModel m;
    tiny_model_(&m, TINY_TIED, 0.2, 13);
    int64_t B = 1, T = 9, P = m.table.total_numel;
    int32_t *ids = random_ids_(B * T, m.cfg.vocab_size, 1);
    float *g1 = calloc((size_t)P, sizeof(float)), *g2 = calloc((size_t)P, sizeof(float));
    KdaError err;
    CHECK(kda_model_backward(&m, g1, &err) == -1);
    CHECK(kda_model_forward(&m, ids, NULL, B, T, NULL, NULL, NULL, &err) == 0);
    CHECK(kda_model_backward(&m, g1, &err) == 0);
    CHECK(kda_model_backward(&m, g1, &err) == -1); // one backward per forward
    for (int rep = 0; rep < 2; rep++) {
        CHECK(kda_model_forward(&m, ids, NULL, B, T, NULL, NULL, NULL, &err) == 0);
        CHECK(kda_model_backward(&m, g2, &err) == 0);
    }
    double dmax = 0;
    for (int64_t i = 0; i < P; i++)
        dmax = fmax(dmax, fabs(g2[i] - 2 * g1[i]));
    CHECK(dmax <= 1e-6);
    ids[3] = (int32_t)m.cfg.vocab_size;
    CHECK(kda_model_forward(&m, ids, NULL, B, T, NULL, NULL, NULL, &err) == -1);
    CHECK(strstr(err.msg, "ids[0][3]") != NULL);
    free(ids), free(g1), free(g2);
    kda_model_free(&m);
}
