// test_runtime.c - the model seam on the CPU (model/runtime.h) equals the CPU model's own calls
// (model/model.h, model/optim.h) bit for bit: forward NLL and loss, logits at chosen positions,
// prefill + decode (and a copied state), the training step's gradient (per-micro-batch sums),
// the norm/clip, the AdamW update and the ZeRO-1 range update. Every comparison is memcmp: the
// runtime makes the same calls in the same order, so no rounding may differ. Each tiny config
// kind (tests/tiny_model.h) runs, so GVA, no-conv and the bounded gate are covered.
#include <stdlib.h>
#include <string.h>

#include "model/model.h"   // defines: KdaModel, kda_model_*
#include "model/optim.h"   // defines: KdaAdamW, kda_adamw_*, kda_grad_clip
#include "model/params.h"  // defines: kda_params_init
#include "model/runtime.h" // defines: KdaRuntime, kda_runtime_*
#include "test.h"
#include "tiny_model.h" // defines: tiny_config, tiny_random_ids

#define B_ 2
#define T_ 11 // not a multiple of the chunk (64): a partial chunk

// A model of kind with random parameters (seed 3), and the same parameters opened as a CPU
// runtime (its own copy of the table and buffer).
static void open_pair_(TinyKind kind, KdaModel *m, KdaRuntime **rt, int train) {
    KdaConfig cfg = tiny_config(kind);
    KdaError err;
    CHECK(kda_model_init(m, &cfg, &err) == 0);
    kda_params_init(&m->table, &m->cfg, m->params, 3);
    KdaParamTable t;
    CHECK(kda_params_build(&t, &cfg, &err) == 0);
    float *p = kda_malloc((size_t)t.total_numel * sizeof(float));
    memcpy(p, m->params, (size_t)t.total_numel * sizeof(float));
    KdaRuntimeOpts o = {.device = "cpu", .core = KDA_CORE_CHUNK, .train = train};
    CHECK(kda_runtime_open(rt, &cfg, &t, p, &o, &err) == 0);
    CHECK(kda_runtime_device(*rt) == KDA_DEVICE_CPU);
}

static int same_(const void *a, const void *b, size_t n) {
    return memcmp(a, b, n) == 0;
}

static void inference_kind_(TinyKind kind) {
    KdaModel m;
    KdaRuntime *rt;
    open_pair_(kind, &m, &rt, 0);
    int64_t V = m.cfg.vocab_size, N = B_ * T_;
    int32_t ids[B_ * T_], labels[B_ * T_];
    tiny_random_ids(ids, N, V, 11);
    memcpy(labels, ids, sizeof ids);
    labels[3] = -100;
    float nll_a[B_ * T_], nll_b[B_ * T_], la, lb;
    KdaError err;
    CHECK(kda_model_forward(&m, ids, labels, B_, T_, nll_a, NULL, &la, &err) == 0);
    CHECK(kda_runtime_forward(rt, ids, labels, B_, T_, nll_b, &lb, &err) == 0);
    CHECK(same_(nll_a, nll_b, sizeof nll_a) && same_(&la, &lb, sizeof la));

    float *ga = malloc((size_t)V * sizeof(float)), *gb = malloc((size_t)V * sizeof(float));
    int64_t pos[3][2] = {{0, 0}, {1, T_ - 1}, {0, 5}};
    for (int i = 0; i < 3; i++) {
        CHECK(kda_model_logits(&m, pos[i][0], pos[i][1], ga, &err) == 0);
        CHECK(kda_runtime_logits(rt, pos[i][0], pos[i][1], gb, &err) == 0);
        CHECK(same_(ga, gb, (size_t)V * sizeof(float)));
    }
    CHECK(kda_runtime_logits(rt, 2, 0, gb, &err) == -1); // outside [B, T]

    // prefill + decode, and decoding from a copy of the prefilled state
    KdaDecodeState ds;
    kda_decode_state_init(&ds, &m.cfg);
    KdaRtState *st, *st2;
    CHECK(kda_runtime_state_new(rt, &st, &err) == 0 && kda_runtime_state_new(rt, &st2, &err) == 0);
    CHECK(kda_model_prefill(&m, ids, T_, &ds, ga, &err) == 0);
    CHECK(kda_runtime_prefill(rt, st, ids, T_, gb, &err) == 0);
    CHECK(same_(ga, gb, (size_t)V * sizeof(float)));
    CHECK(kda_runtime_state_copy(rt, st2, st, &err) == 0);
    CHECK_EQ_INT(kda_runtime_state_pos(st2), T_);
    float *gc = malloc((size_t)V * sizeof(float));
    for (int k = 0; k < 4; k++) {
        CHECK(kda_model_decode_step(&m, &ds, ids[T_ + k], ga, &err) == 0);
        CHECK(kda_runtime_decode(rt, st, ids[T_ + k], gb, &err) == 0);
        CHECK(kda_runtime_decode(rt, st2, ids[T_ + k], gc, &err) == 0);
        CHECK(same_(ga, gb, (size_t)V * sizeof(float)) && same_(ga, gc, (size_t)V * sizeof(float)));
    }
    CHECK_EQ_INT(kda_runtime_state_pos(st), T_ + 4);
    CHECK(kda_runtime_decode(rt, st, (int32_t)V, gb, &err) == -1); // outside the vocabulary
    kda_runtime_state_free(rt, st);
    kda_runtime_state_free(rt, st2);
    kda_decode_state_free(&ds);
    free(ga), free(gb), free(gc);
    kda_runtime_close(rt);
    kda_model_free(&m);
}

KDA_TEST(runtime_cpu_inference_equals_model) {
    inference_kind_(TINY_TIED);
    inference_kind_(TINY_GVA_NEG);
    inference_kind_(TINY_NO_CONV);
    inference_kind_(TINY_BOUNDED);
}

// Two micro-batches, the norm + clip, one AdamW update: the runtime's training calls against the
// backend arithmetic written out with kda_model_* (g = g0; s = g1; g += s; scale; clip; step).
static void train_kind_(TinyKind kind) {
    KdaModel m;
    KdaRuntime *rt;
    open_pair_(kind, &m, &rt, 1);
    int64_t n = m.table.total_numel, V = m.cfg.vocab_size;
    KdaAdamWConfig oc = {0.9, 0.95, 1e-8, 0.1};
    KdaError err;
    CHECK(kda_runtime_train_init(rt, &oc, &err) == 0);
    CHECK(kda_runtime_zero_grads(rt, &err) == 0);
    int32_t ids[2][B_ * T_];
    tiny_random_ids(ids[0], B_ * T_, V, 21);
    tiny_random_ids(ids[1], B_ * T_, V, 22);
    float *g = calloc((size_t)n, sizeof(float)), *s = calloc((size_t)n, sizeof(float));
    for (int k = 0; k < 2; k++) {
        float la, lb;
        CHECK(kda_model_forward(&m, ids[k], NULL, B_, T_, NULL, NULL, &la, &err) == 0);
        CHECK(kda_model_backward(&m, k == 0 ? g : s, &err) == 0);
        CHECK(kda_runtime_train_step(rt, ids[k], B_, T_, 1, &lb, &err) == 0);
        CHECK(same_(&la, &lb, sizeof la));
    }
    for (int64_t i = 0; i < n; i++)
        g[i] += s[i];
    for (int64_t i = 0; i < n; i++)
        g[i] *= 0.5f;
    double na = kda_grad_clip(g, n, 0.05, NULL);
    double nb = kda_runtime_finish_grads(rt, 0.5, 0.05, &err);
    CHECK(same_(&na, &nb, sizeof na));
    KdaGradView gv;
    kda_runtime_grad_view(rt, &gv);
    CHECK(gv.n == n && !gv.on_device && same_(g, gv.g, (size_t)n * sizeof(float)));
    KdaAdamW opt;
    CHECK(kda_adamw_init(&opt, n, &oc, &err) == 0);
    kda_adamw_step(&opt, &m.table, m.params, g, 1e-2);
    CHECK(kda_runtime_update(rt, 1e-2, &err) == 0);
    float *p = kda_runtime_host_params(rt, &err);
    KdaAdamW *ro = kda_runtime_host_optim(rt);
    CHECK(p && same_(p, m.params, (size_t)n * sizeof(float)));
    CHECK(ro->step == 1 && kda_runtime_step(rt) == 1);
    CHECK(same_(ro->m, opt.m, (size_t)n * sizeof(float)) &&
          same_(ro->v, opt.v, (size_t)n * sizeof(float)));
    CHECK(kda_runtime_params_finite(rt) == 1);
    kda_adamw_free(&opt);
    free(g), free(s);
    kda_runtime_close(rt);
    kda_model_free(&m);
}

KDA_TEST(runtime_cpu_training_equals_model) {
    train_kind_(TINY_TIED);
    train_kind_(TINY_GVA_NEG);
}

// A ZeRO-1 shard updates only its range, with kda_adamw_step_range's bits; the full moments of
// kda_runtime_optim_full go back into the shard on state_changed.
KDA_TEST(runtime_cpu_zero1_shard_update) {
    KdaModel m;
    KdaRuntime *rt;
    open_pair_(TINY_TIED, &m, &rt, 1);
    int64_t n = m.table.total_numel;
    KdaAdamWConfig oc = {0.9, 0.95, 1e-8, 0.1};
    KdaError err;
    CHECK(kda_runtime_train_init(rt, &oc, &err) == 0);
    KdaShard sh;
    CHECK(kda_zero1_plan(&sh, n, 3, 1, 1, &err) == 0);
    CHECK(kda_runtime_shard(rt, &sh, &err) == 0);
    int32_t ids[B_ * T_];
    tiny_random_ids(ids, B_ * T_, m.cfg.vocab_size, 5);
    float *g = calloc((size_t)n, sizeof(float)), loss;
    CHECK(kda_model_forward(&m, ids, NULL, B_, T_, NULL, NULL, &loss, &err) == 0);
    CHECK(kda_model_backward(&m, g, &err) == 0);
    CHECK(kda_runtime_zero_grads(rt, &err) == 0);
    CHECK(kda_runtime_train_step(rt, ids, B_, T_, 1, &loss, &err) == 0);
    CHECK(kda_runtime_update(rt, 1e-2, &err) == 0);
    KdaAdamW opt;
    CHECK(kda_adamw_init(&opt, sh.hi - sh.lo, &oc, &err) == 0);
    kda_adamw_step_range(&opt, &m.table, m.params, g, 1e-2, sh.lo);
    float *p = kda_runtime_host_params(rt, &err);
    CHECK(p && same_(p, m.params, (size_t)n * sizeof(float)));
    CHECK(kda_runtime_host_optim(rt)->m == NULL); // no full moments until asked for
    KdaAdamW *full = kda_runtime_optim_full(rt);
    CHECK(full->m && full->step == 1);
    for (int64_t i = 0; i < n; i++)
        full->m[i] = (float)i;
    CHECK(kda_runtime_state_changed(rt, &err) == 0);
    float *m1, *m2, *pp, *gg;
    kda_runtime_shard_view(rt, &pp, &gg, &m1, &m2);
    CHECK(m1[0] == (float)sh.lo && m1[sh.hi - sh.lo - 1] == (float)(sh.hi - 1));
    kda_adamw_free(&opt);
    free(g);
    kda_runtime_close(rt);
    kda_model_free(&m);
}

// The one device choice: bad flags fail with one line; "cpu" is always there; bf16 needs a GPU.
KDA_TEST(runtime_pick_and_precision) {
    KdaDeviceKind k;
    KdaError err;
    CHECK(kda_runtime_pick("cpu", &k, &err) == 0 && k == KDA_DEVICE_CPU);
    CHECK(kda_runtime_pick("gpu", &k, &err) == -1 && strstr(err.msg, "auto, cpu or cuda"));
    CHECK(kda_runtime_pick("auto", &k, &err) == 0);
    if (k == KDA_DEVICE_CPU) { // no visible GPU (the CPU CI machine): an explicit cuda fails
        CHECK(kda_runtime_pick("cuda", &k, &err) == -1 && strstr(err.msg, "--device cuda: "));
        CHECK(!strchr(err.msg, '\n'));
    }
    KdaConfig cfg = tiny_config(TINY_TIED);
    KdaParamTable t;
    CHECK(kda_params_build(&t, &cfg, &err) == 0);
    float *p = kda_calloc((size_t)t.total_numel, sizeof(float));
    KdaRuntime *rt;
    KdaRuntimeOpts o = {.device = "cpu", .precision = "bf16"};
    CHECK(kda_runtime_open(&rt, &cfg, &t, p, &o, &err) == -1 && strstr(err.msg, "needs the GPU"));
    o.precision = "fp16";
    CHECK(kda_runtime_open(&rt, &cfg, &t, p, &o, &err) == -1 && strstr(err.msg, "bf16 or fp32"));
    o.precision = "fp32";
    CHECK(kda_runtime_open(&rt, &cfg, &t, p, &o, &err) == 0); // takes t and p
    CHECK(!strcmp(kda_runtime_name(rt), "cpu") && !strcmp(kda_runtime_precision(rt), "fp32"));
    CHECK(kda_runtime_can_decode(rt) == 1 && kda_runtime_device_memory(rt, NULL, NULL) == -1);
    CHECK(kda_runtime_zero_grads(rt, &err) == -1 && strstr(err.msg, "train_init"));
    kda_runtime_close(rt);
}

// kda info's memory plan: the CPU's parts are model.c's arena and the fp32 state (a second
// gradient buffer with more than one micro-batch); the arena grows with the tokens.
KDA_TEST(runtime_memory_plan_cpu) {
    KdaConfig cfg = tiny_config(TINY_GVA_NEG);
    KdaParamTable t;
    KdaError err;
    CHECK(kda_params_build(&t, &cfg, &err) == 0);
    double P = 4.0 * (double)t.total_numel;
    kda_params_free(&t);
    KdaMemoryPlan a, b;
    CHECK(kda_runtime_memory_plan(KDA_DEVICE_CPU, &cfg, 2, 64, 1, 0, &a, &err) == 0);
    CHECK(kda_runtime_memory_plan(KDA_DEVICE_CPU, &cfg, 4, 64, 2, 0, &b, &err) == 0);
    CHECK(a.params == P && a.grads == P && a.moments == 2 * P && a.copy == 0);
    CHECK(b.grads == 2 * P); // the step's gradient and one micro-batch's scratch
    CHECK(a.acts == 4.0 * (double)kda_model_arena_floats(&cfg, 128) && a.other == 8.0 * 128);
    CHECK(b.acts > 1.9 * a.acts); // per-token buffers dominate (the head's chunk is shared)
    CHECK(a.total == a.params + a.grads + a.moments + a.copy + a.acts + a.other);
    CHECK(kda_runtime_memory_plan(KDA_DEVICE_CPU, &cfg, 0, 64, 1, 0, &a, &err) == -1);
}

#ifdef KDA_HAVE_CUDA
// The GPU's plan runs without a device (model_cuda.c's own layout code): recompute keeps less,
// the bf16 copy is half the fp32 parameters of the device layout, an unsupported config says why.
// The device check that the plan is the arena a real step allocates: test_gpu_model.c.
KDA_TEST(runtime_memory_plan_gpu_without_device) {
    KdaConfig cfg;
    KdaError err;
    CHECK(kda_config_load(&cfg, "configs/tiny.json", &err) == 0 &&
          kda_config_derive(&cfg, "tiny", &err) == 0);
    KdaMemoryPlan full, rec, big;
    CHECK_MSG(kda_runtime_memory_plan(KDA_DEVICE_CUDA, &cfg, 4, 256, 1, 0, &full, &err) == 0, "%s",
              err.msg);
    CHECK(kda_runtime_memory_plan(KDA_DEVICE_CUDA, &cfg, 4, 256, 1, 1, &rec, &err) == 0);
    CHECK(kda_runtime_memory_plan(KDA_DEVICE_CUDA, &cfg, 8, 256, 1, 0, &big, &err) == 0);
    CHECK(rec.acts < full.acts && big.acts > full.acts);
    CHECK(full.copy * 2.0 == full.params && full.moments == 2.0 * full.params);
    cfg.use_short_conv = 0;
    CHECK(kda_runtime_memory_plan(KDA_DEVICE_CUDA, &cfg, 4, 256, 1, 0, &full, &err) == -1);
    CHECK(strstr(err.msg, "use_short_conv") != NULL);
}

// The SwiGLU product recomputed (the default; KDA_MLP_RECOMPUTE=0 off, read by the plan as by the
// model's create): one shared SwiGLU product
// instead of one per layer, so the plan's activations drop by exactly (L - 1) arena slots of
// N·I bf16 (256-byte aligned), and not at all with per-block recompute (one block's set either
// way). The counting pass once kept the per-layer buffers (its pointers are all NULL).
KDA_TEST(runtime_memory_plan_gpu_mlp_recompute) {
    KdaConfig cfg;
    KdaError err;
    CHECK(kda_config_load(&cfg, "configs/tiny.json", &err) == 0 &&
          kda_config_derive(&cfg, "tiny", &err) == 0);
    KdaMemoryPlan p[2][2]; // [switch][recompute]
    int rc = 0;
    for (int sw = 0; sw < 2; sw++) {
        setenv("KDA_MLP_RECOMPUTE", sw ? "1" : "0", 1);
        for (int rec = 0; rec < 2; rec++)
            rc |= kda_runtime_memory_plan(KDA_DEVICE_CUDA, &cfg, 4, 256, 1, rec, &p[sw][rec], &err);
        unsetenv("KDA_MLP_RECOMPUTE");
    }
    CHECK_MSG(rc == 0, "%s", err.msg);
    double slot = (double)(((size_t)(4 * 256 * cfg.intermediate_size) * 2 + 255) & ~(size_t)255);
    double want = (double)(cfg.num_hidden_layers - 1) * slot;
    CHECK_MSG(p[0][0].acts - p[1][0].acts == want, "saved %.0f bytes, want %.0f",
              p[0][0].acts - p[1][0].acts, want);
    CHECK(p[1][1].acts == p[0][1].acts);
    KdaMemoryPlan dflt; // unset: the default is the recompute
    CHECK(kda_runtime_memory_plan(KDA_DEVICE_CUDA, &cfg, 4, 256, 1, 0, &dflt, &err) == 0);
    CHECK(dflt.acts == p[1][0].acts);
}
#endif
