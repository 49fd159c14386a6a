// test_device_layout.c - the GPU model's device parameter layout (model/model_cuda.h
// kda_cuda_device_offsets; host code, no device needed): rows 128-element aligned, disjoint,
// inside the layout; with the fused input projection each block's q, k, v, f_proj.0, g_proj.0,
// b_proj back to back in that order (the [HK + HK + HVV + V + V + HV, D] matrix the fused GEMM
// reads), with gate|up each block's gate_proj and up_proj (the [2I, D] matrix); without them, or
// when a part's size would leave padding between them, table order.
#include <stdlib.h>
#include <string.h>

#include "test.h"

#ifdef KDA_HAVE_CUDA

#include "model/model_cuda.h" // defines: kda_cuda_device_offsets, KDA_INPROJ_PARTS, KDA_LAYOUT_*
#include "model/config.h"     // defines: kda_config_load, kda_config_derive
#include "model/params.h"     // defines: kda_params_build, KdaParamTable

static int by_offset_(const void *a, const void *b) {
    const KdaParamInfo *x = a, *y = b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

// Rows named model.layers.<l>.<part>.weight for parts[0 .. n) start at `at` back to back.
static void check_run_(const KdaParamTable *t, const KdaParamTable *d, int layer,
                       const char *const *parts, int n, int64_t at) {
    CHECK(at % 128 == 0);
    for (int p = 0; p < n; p++) {
        char name[96];
        snprintf(name, sizeof name, "model.layers.%d.%s.weight", layer, parts[p]);
        int j = 0;
        while (j < t->n && strcmp(t->rows[j].name, name))
            j++;
        KDA_ASSERT(j < t->n);
        CHECK_MSG(d->rows[j].offset == at, "%s at %lld, expected %lld", name,
                  (long long)d->rows[j].offset, (long long)at);
        at += t->rows[j].numel;
    }
}

// Layout of config c with the fusion flags asked (KDA_LAYOUT_*); checks *fused and the invariants.
static void check_layout_(const KdaConfig *c, int flags, int want_fused) {
    KdaParamTable t, d;
    KdaError err;
    KDA_ASSERT(kda_params_build(&t, c, &err) == 0);
    d = t;
    d.rows = malloc((size_t)t.n * sizeof *d.rows);
    memcpy(d.rows, t.rows, (size_t)t.n * sizeof *d.rows);
    int fused = -1;
    int64_t total = kda_cuda_device_offsets(&d, &t, flags, &fused);
    CHECK_EQ_INT(fused, want_fused);
    KdaParamInfo *s = malloc((size_t)t.n * sizeof *s);
    memcpy(s, d.rows, (size_t)t.n * sizeof *s);
    qsort(s, (size_t)t.n, sizeof *s, by_offset_);
    for (int i = 0; i < t.n; i++) {
        CHECK(s[i].offset % 128 == 0); // the parts before b_proj are whole multiples of 128
        int64_t end = s[i].offset + s[i].numel;
        CHECK(end <= (i + 1 < t.n ? s[i + 1].offset : total));
    }
    for (int i = 0; !fused && i < t.n; i++) // table order, every row aligned
        CHECK(d.rows[i].offset % 128 == 0 && (i == 0 || d.rows[i].offset > d.rows[i - 1].offset));
    static const char *const inproj[KDA_INPROJ_PARTS] = {"attn.q_proj",   "attn.k_proj",
                                                         "attn.v_proj",   "attn.f_proj.0",
                                                         "attn.g_proj.0", "attn.b_proj"};
    static const char *const gateup[2] = {"mlp.gate_proj", "mlp.up_proj"};
    for (int i = 0; i < t.n; i++) {
        if (t.rows[i].layer < 0) continue;
        if ((fused & KDA_LAYOUT_INPROJ) && strstr(t.rows[i].name, "attn.q_proj.weight"))
            check_run_(&t, &d, t.rows[i].layer, inproj, KDA_INPROJ_PARTS, d.rows[i].offset);
        if ((fused & KDA_LAYOUT_GATEUP) && strstr(t.rows[i].name, "mlp.gate_proj.weight"))
            check_run_(&t, &d, t.rows[i].layer, gateup, 2, d.rows[i].offset);
    }
    free(s), free(d.rows);
    kda_params_free(&t);
}

KDA_TEST(device_layout_inproj) {
    KdaConfig c;
    KdaError err;
    KDA_ASSERT(kda_config_load(&c, "configs/kda_300M.json", &err) == 0 &&
               kda_config_derive(&c, "kda_300M", &err) == 0);
    check_layout_(&c, 1, 1);
    check_layout_(&c, 0, 0);
    check_layout_(&c, KDA_LAYOUT_GATEUP, KDA_LAYOUT_GATEUP);
    check_layout_(&c, KDA_LAYOUT_INPROJ | KDA_LAYOUT_GATEUP, KDA_LAYOUT_INPROJ | KDA_LAYOUT_GATEUP);
    KDA_ASSERT(kda_config_load(&c, "configs/tiny.json", &err) == 0 &&
               kda_config_derive(&c, "tiny", &err) == 0);
    check_layout_(&c, 1, 1);
    check_layout_(&c, 3, 3);
    // D = 50: q_proj's 32 x 50 = 1600 elements are not a multiple of 128: no fusion
    c.hidden_size = 50;
    c.intermediate_size_raw = 96;
    KDA_ASSERT(kda_config_derive(&c, "odd", &err) == 0);
    check_layout_(&c, 1, 0);
    // gate_proj 96 x 50 = 4800 elements: not a multiple of 128 either
    check_layout_(&c, KDA_LAYOUT_GATEUP, 0);
}

#endif // KDA_HAVE_CUDA
