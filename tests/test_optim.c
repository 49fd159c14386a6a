// test_optim.c - AdamW (torch fused form), decay groups, bias correction, the recipe's lr-0
// first update, zero gradients, global norm and clipping (training-recipe.md §1.1-1.4).
//
// Tolerances: the optimizer runs in fp32; the references below run in double. After a few
// steps parameters near 1 differ by a few fp32 ulps (~1e-7), so 2e-6 absolute is tight enough
// to catch any wrong term (the smallest term checked, lr * wd * p = 1e-5, is 5x larger).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/config.h"
#include "test.h"
#include "model/optim.h"

// Two rows: "w" (decayed, 3 elements) at offset 0, "norm" (no decay, 2 elements) at offset 3.
static KdaParamTable two_rows(void) {
    KdaParamTable t = {0};
    t.rows = calloc(2, sizeof(KdaParamInfo));
    t.n = 2;
    t.total_numel = 5;
    strcpy(t.rows[0].name, "w");
    t.rows[0].numel = 3;
    t.rows[0].offset = 0;
    t.rows[0].weight_decay = 1;
    strcpy(t.rows[1].name, "norm");
    t.rows[1].numel = 2;
    t.rows[1].offset = 3;
    t.rows[1].weight_decay = 0;
    return t;
}

static const KdaAdamWConfig k_recipe = {
    .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.01};

KDA_TEST(adamw_first_update_at_lr_zero) {
    KdaParamTable t = two_rows();
    KdaAdamW o;
    KdaError e;
    CHECK(kda_adamw_init(&o, 5, &k_recipe, &e) == 0);
    float p[5] = {1, -2, 0.5f, 1, 1}, p0[5];
    float g[5] = {0.5f, -1, 2, 0.25f, -0.125f};
    memcpy(p0, p, sizeof p);
    kda_adamw_step(&o, &t, p, g, 0.0);
    CHECK_EQ_INT(o.step, 1);
    for (int i = 0; i < 5; i++) {
        CHECK(p[i] == p0[i]);                 // lr 0: no change at all
        CHECK_NEAR(o.m[i], 0.1 * g[i], 1e-8); // moments still advance
        CHECK_NEAR(o.v[i], 0.05 * (double)g[i] * g[i], 1e-8);
    }
    kda_adamw_free(&o);
    free(t.rows);
}

KDA_TEST(adamw_hand_computed_first_step) {
    // Step 1: m^ = g, v^ = g^2, so p = p * (1 - lr*wd) - lr * g / (|g| + eps).
    // p0 = 1, g = 0.5, lr = 1e-3, wd = 0.01 (decay row):
    //   1 * (1 - 1e-5) - 1e-3 * 0.5 / (0.5 + 1e-8) = 0.99999 - 0.00099999998 = 0.99899000002
    // same in the no-decay row: 1 - 0.00099999998 = 0.99900000002
    KdaParamTable t = two_rows();
    KdaAdamW o;
    KdaError e;
    CHECK(kda_adamw_init(&o, 5, &k_recipe, &e) == 0);
    float p[5] = {1, 1, 1, 1, 1};
    float g[5] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
    kda_adamw_step(&o, &t, p, g, 1e-3);
    for (int i = 0; i < 3; i++)
        CHECK_NEAR(p[i], 0.99899000002, 2e-7);
    for (int i = 3; i < 5; i++)
        CHECK_NEAR(p[i], 0.99900000002, 2e-7);
    kda_adamw_free(&o);
    free(t.rows);
}

// Double-precision AdamW reference, straight from training-recipe.md §1.1.
static void adamw_ref(double *p, double *m, double *v, const double *g, int n, const int *decay,
                      int u, double lr) {
    for (int i = 0; i < n; i++) {
        if (decay[i]) p[i] *= 1 - lr * 0.01;
        m[i] = 0.9 * m[i] + 0.1 * g[i];
        v[i] = 0.95 * v[i] + 0.05 * g[i] * g[i];
        p[i] -= lr * (m[i] / (1 - pow(0.9, u))) / (sqrt(v[i]) / sqrt(1 - pow(0.95, u)) + 1e-8);
    }
}

KDA_TEST(adamw_matches_reference_over_steps) {
    KdaParamTable t = two_rows();
    KdaAdamW o;
    KdaError e;
    CHECK(kda_adamw_init(&o, 5, &k_recipe, &e) == 0);
    float p[5] = {1, -2, 0.5f, 1, 0.75f};
    double pr[5], mr[5] = {0}, vr[5] = {0};
    const int decay[5] = {1, 1, 1, 0, 0};
    for (int i = 0; i < 5; i++)
        pr[i] = p[i];
    const double lrs[6] = {0, 1e-2, 2e-2, 2e-2, 5e-3, 1e-3}; // warmup-like, lr 0 first
    for (int u = 1; u <= 6; u++) {
        float g[5];
        double gd[5];
        for (int i = 0; i < 5; i++) {
            g[i] = (float)(sin(0.7 * u + i) * (i + 1) * 0.3); // changing signs and scales
            gd[i] = g[i];
        }
        kda_adamw_step(&o, &t, p, g, lrs[u - 1]);
        adamw_ref(pr, mr, vr, gd, 5, decay, u, lrs[u - 1]);
    }
    for (int i = 0; i < 5; i++) {
        CHECK_NEAR(p[i], pr[i], 2e-6);
        CHECK_NEAR(o.m[i], mr[i], 1e-6);
        CHECK_NEAR(o.v[i], vr[i], 1e-6);
    }
    CHECK(fabs(pr[0] - 1.0) > 1e-3); // the run moved the parameters (the test has teeth)
    kda_adamw_free(&o);
    free(t.rows);
}

KDA_TEST(adamw_zero_grads_only_decay) {
    KdaParamTable t = two_rows();
    KdaAdamW o;
    KdaError e;
    CHECK(kda_adamw_init(&o, 5, &k_recipe, &e) == 0);
    float p[5] = {1, -2, 0.5f, 3, -4};
    float g[5] = {0};
    kda_adamw_step(&o, &t, p, g, 0.1);
    // decay rows: p * (1 - 0.1 * 0.01); m = v = 0 so the Adam term is 0 / (0 + eps) = 0
    CHECK_NEAR(p[0], 0.999, 1e-7);
    CHECK_NEAR(p[1], -1.998, 2e-7);
    CHECK_NEAR(p[2], 0.4995, 1e-7);
    CHECK(p[3] == 3 && p[4] == -4);
    for (int i = 0; i < 5; i++)
        CHECK(o.m[i] == 0 && o.v[i] == 0);
    kda_adamw_free(&o);
    free(t.rows);
}

KDA_TEST(adamw_rejects_bad_config) {
    KdaAdamW o;
    KdaError e;
    KdaAdamWConfig c = k_recipe;
    c.beta2 = 1.0;
    CHECK(kda_adamw_init(&o, 5, &c, &e) == -1);
    c = k_recipe;
    c.eps = 0;
    CHECK(kda_adamw_init(&o, 5, &c, &e) == -1);
    CHECK(kda_adamw_init(&o, 0, &k_recipe, &e) == -1);
}

KDA_TEST(grad_clip_global_norm) {
    float g[4] = {3, 0, 0, 4}; // norm 5
    double coef;
    double norm = kda_grad_clip(g, 4, 1.0, &coef);
    CHECK_NEAR(norm, 5.0, 1e-12);
    CHECK_NEAR(coef, 1.0 / (5.0 + 1e-6), 1e-15);
    CHECK_NEAR(g[0], 0.6, 1e-6);
    CHECK_NEAR(g[3], 0.8, 1e-6);
    CHECK_NEAR(kda_grad_norm(g, 4), 1.0, 1e-6);
    // below the threshold: untouched, bit for bit
    float h[3] = {0.3f, -0.4f, 0.1f};
    float h0[3];
    memcpy(h0, h, sizeof h);
    kda_grad_clip(h, 3, 1.0, &coef);
    CHECK(coef == 1.0 && memcmp(h, h0, sizeof h) == 0);
    // a large buffer: exercises the OpenMP reduction
    int64_t n = 1 << 20;
    float *big = malloc((size_t)n * sizeof *big);
    for (int64_t i = 0; i < n; i++)
        big[i] = (i % 2) ? 0.5f : -0.5f; // norm = 0.5 * 1024 = 512
    CHECK_NEAR(kda_grad_clip(big, n, 1.0, &coef), 512.0, 1e-9);
    CHECK_NEAR(kda_grad_norm(big, n), 1.0, 1e-5);
    free(big);
    // non-finite: reported, gradients left alone
    float bad[2] = {NAN, 1};
    CHECK(!isfinite(kda_grad_clip(bad, 2, 1.0, &coef)) && coef == 1.0 && bad[1] == 1);
}

// The real parameter table of configs/tiny.json: with zero gradients only weight decay acts,
// so exactly the decay rows of §1.3 shrink (A_log and matrices) and the rest (norms, dt_bias,
// g_proj.1.bias) stay bit-identical.
KDA_TEST(adamw_decay_groups_follow_param_table) {
    KdaConfig c;
    KdaParamTable t;
    KdaError e;
    CHECK_MSG(kda_config_load(&c, "configs/tiny.json", &e) == 0, "%s", e.msg);
    CHECK_MSG(kda_params_build(&t, &c, &e) == 0, "%s", e.msg);
    float *p = malloc((size_t)t.total_numel * sizeof *p),
          *p0 = malloc((size_t)t.total_numel * sizeof *p);
    float *g = calloc((size_t)t.total_numel, sizeof *g);
    for (int64_t i = 0; i < t.total_numel; i++)
        p[i] = p0[i] = 1.0f;
    KdaAdamW o;
    CHECK(kda_adamw_init(&o, t.total_numel, &k_recipe, &e) == 0);
    kda_adamw_step(&o, &t, p, g, 0.5); // decay factor 1 - 0.5 * 0.01 = 0.995
    for (int r = 0; r < t.n; r++) {
        const KdaParamInfo *row = &t.rows[r];
        float want = row->weight_decay ? 0.995f : 1.0f;
        int bad = 0;
        for (int64_t i = 0; i < row->numel; i++)
            bad += fabsf(p[row->offset + i] - want) > 1e-7f;
        CHECK_MSG(bad == 0, "%s: %d elements not %g", row->name, bad, want);
    }
    const KdaParamInfo *a = kda_params_find(&t, "model.layers.0.attn.A_log");
    const KdaParamInfo *d = kda_params_find(&t, "model.layers.0.attn.dt_bias");
    CHECK(a && a->weight_decay == 1 && d && d->weight_decay == 0);
    kda_adamw_free(&o);
    free(p);
    free(p0);
    free(g);
    kda_params_free(&t);
}
