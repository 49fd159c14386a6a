// test_gpu_dist_zero1.c - ZeRO-1 on GPU ranks (dist/dp.c over the GPU runtime, model_cuda.h
// kda_cuda_model_shard; docs/distributed.md §2). GPU suite only (KDA_TEST_GPU: `make test-gpu`,
// bench/dist/device_zero1.sh); configs/tiny.json. Every comparison is bitwise, and why:
//   * the shards of one model (world 3, 5 or 7 simulated on one GPU, no NCCL: the test moves
//     the shards with cudaMemcpy where NCCL would) against the whole model: AdamW is element-wise
//     (the same kernel, only its offset and length change), the shards' grad norm comes from the
//     same Σ g² handed to each (what the all-reduce gives every rank), so parameters, moments and
//     the bf16 copy (a forward's loss) are the same bits; the world is picked so that lcm(world,
//     128) pads the layout: the padding path runs too.
//   * one-shard ZeRO-1 against the unsharded model: sqrt on the host of the device's Σ g² is the
//     device's sqrt (IEEE double both), the update is element-wise: same bits.
//   * `kda_train` under a world-1 NCCL communicator (the 8-GPU code path), ZeRO-1 on vs off: one
//     rank's reduce-scatter and all-gather are copies, so losses, grad norms and the checkpoint
//     files (model.safetensors, optimizer.safetensors) are the same bytes, and a ZeRO-1 resume
//     from a checkpoint continues exactly as a plain resume from it does.
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

#ifdef KDA_HAVE_CUDA

#include <cuda_runtime_api.h>

#include "core/rng.h"         // defines: KdaRng, rng_seed, rng_normal, rng_below
#include "core/util.h"        // defines: kda_malloc
#include "cuda/cuda_common.h" // defines: kda_cuda_device_count
#include "model/model_cuda.h" // defines: KdaCudaModel, kda_cuda_model_*
#include "model/zero1.h"      // defines: KdaShard, kda_zero1_plan
#include "model/model.h"      // defines: KdaModel, kda_model_init
#include "model/params.h"     // defines: kda_params_init

#ifdef KDA_HAVE_NCCL
#include "dist/dist.h"        // defines: KdaDist, kda_dist_open
#include "dist_test_util.h"   // defines: dist_test_free_port
#include "fixtures.h"         // defines: test_write_docs, TEST_DOCS
#include "train/run_config.h" // defines: KdaRunConfig
#include "train/trainer.h"    // defines: kda_train
#endif

#define MAX_SHARDS 7

// The reducer of a shard: records the shard's Σ g² and hands back `total` (what the all-reduce
// would give every rank); total NaN: the partial itself (a one-rank all-reduce).
typedef struct {
    double partial, total;
} Reduce;

static int reduce_fixed_(void *user, double *sumsq, KdaError *err) {
    (void)err;
    Reduce *r = user;
    r->partial = *sumsq;
    if (!isnan(r->total)) *sumsq = r->total;
    return 0;
}

static void tiny_(KdaModel *m) {
    KdaConfig c;
    KdaError err;
    KDA_ASSERT(kda_config_load(&c, "configs/tiny.json", &err) == 0 &&
               kda_config_derive(&c, "configs/tiny.json", &err) == 0);
    KDA_ASSERT(kda_model_init(m, &c, &err) == 0);
    kda_params_init(&m->table, &m->cfg, m->params, 5);
}

static float *randn_(int64_t n, uint64_t seed, float sd, int positive) {
    KdaRng r;
    rng_seed(&r, seed);
    float *x = kda_malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        x[i] = rng_normal(&r, 0.0f, sd);
        if (positive) x[i] = x[i] * x[i];
    }
    return x;
}

static int64_t dev_n_(KdaCudaModel *m) {
    float *g;
    int64_t n;
    void *s;
    kda_cuda_model_grad_view(m, &g, &n, &s);
    return n;
}

// One step on model m from gradient G and moments M, V (dense host): put, finish (scale 0.5,
// clip max_norm), AdamW step 3. Returns the norm.
static double step_(KdaCudaModel *m, const float *G, const float *M, const float *V,
                    double max_norm) {
    KdaError err = {{0}};
    KdaAdamWConfig oc = {0.9, 0.95, 1e-8, 0.1};
    CHECK_MSG(kda_cuda_model_put_grads(m, G, &err) == 0, "%s", err.msg);
    CHECK_MSG(kda_cuda_model_put_moments(m, M, V, &err) == 0, "%s", err.msg);
    double norm = kda_cuda_model_finish_grads(m, 0.5, max_norm, &err);
    CHECK_MSG(isfinite(norm), "%s", err.msg);
    CHECK_MSG(kda_cuda_model_adamw(m, &oc, 3, 1e-2, &err) == 0, "%s", err.msg);
    return norm;
}

// World 3 (or the next world that pads the layout) on one GPU against the whole model, with
// clipping on (the reducer hands every shard the one-shard run's Σ g², so all clip alike) and a
// forward through the gathered bf16 copy.
KDA_TEST_GPU(gpu_dist_zero1_shards_equal_whole_model) {
    if (kda_cuda_device_count() < 1) {
        CHECK_MSG(0, "no usable CUDA device (GPU tests need one)");
        return;
    }
    KdaModel h;
    tiny_(&h);
    KdaError err = {{0}};
    int64_t n = h.table.total_numel;
    KdaCudaModel *whole, *one, *sh[MAX_SHARDS];
    KDA_ASSERT(kda_cuda_model_create(&whole, &h.cfg, &h.table, h.params, 0, &err) == 0);
    KDA_ASSERT(kda_cuda_model_create(&one, &h.cfg, &h.table, h.params, 0, &err) == 0);
    int64_t dn = dev_n_(whole);
    KdaShard s1, s[MAX_SHARDS];
    KDA_ASSERT(kda_zero1_plan(&s1, dn, 1, 0, 128, &err) == 0);
    CHECK_MSG(kda_cuda_model_shard(one, &s1, &err) == 0, "%s", err.msg);
    // the smallest world >= 3 whose lcm(world, 128) pads this layout (3, 5 or 7 unless the
    // layout is a multiple of 105 x 128), so the padding path runs
    int world = 3;
    while (world < MAX_SHARDS &&
           (kda_zero1_plan(&s[0], dn, world, 0, 128, &err) || s[0].padded == dn))
        world++;
    printf("    device layout %lld elements, world %d, chunk %lld, padded %lld\n", (long long)dn,
           world, (long long)s[0].chunk, (long long)s[0].padded);
    Reduce r1 = {0, NAN}, rs[MAX_SHARDS];
    for (int r = 0; r < world; r++) {
        KDA_ASSERT(kda_cuda_model_create(&sh[r], &h.cfg, &h.table, h.params, 0, &err) == 0);
        KDA_ASSERT(kda_zero1_plan(&s[r], dn, world, r, 128, &err) == 0);
        CHECK_MSG(kda_cuda_model_shard(sh[r], &s[r], &err) == 0, "%s", err.msg);
    }
    CHECK_MSG(s[0].padded > dn, "world %d must pad the layout (%lld of %lld)", world,
              (long long)s[0].padded, (long long)dn);
    float *G = randn_(n, 1, 0.05f, 0), *M = randn_(n, 2, 0.01f, 0), *V = randn_(n, 3, 0.01f, 1);
    float *out = kda_malloc((size_t)n * sizeof(float)),
          *ref = kda_malloc((size_t)n * sizeof(float));
    // max_norm below the norm (~0.5 x 0.05 x sqrt(n)): the clip coefficient is < 1
    const double max_norm = 0.5;
    kda_cuda_model_set_norm_reduce(one, reduce_fixed_, &r1);
    double n_whole = step_(whole, G, M, V, max_norm);
    double n_one = step_(one, G, M, V, max_norm);
    CHECK_MSG(n_one == n_whole, "one-shard norm %.17g vs whole %.17g", n_one, n_whole);
    CHECK_MSG(n_whole > max_norm, "the test must clip: norm %g", n_whole);
    double sum = 0;
    for (int r = 0; r < world; r++) {
        rs[r].total = r1.partial; // the one-shard run's Σ g², as an all-reduce would give
        kda_cuda_model_set_norm_reduce(sh[r], reduce_fixed_, &rs[r]);
        double nr = step_(sh[r], G, M, V, max_norm);
        CHECK(nr == n_whole);
        sum += rs[r].partial;
    }
    // the shards' partial sums add up to the whole Σ g² up to double rounding (~n u = 1e-11)
    CHECK_NEAR(sum / r1.partial, 1.0, 1e-10);
    // "all-gather" into shard 0's buffers: parameters into p, each moment through g
    float *p[MAX_SHARDS], *g[MAX_SHARDS], *m1[MAX_SHARDS], *m2[MAX_SHARDS];
    for (int r = 0; r < world; r++)
        kda_cuda_model_shard_view(sh[r], &p[r], &g[r], &m1[r], &m2[r]);
    size_t cb = (size_t)s[0].chunk * sizeof(float);
    for (int r = 1; r < world; r++)
        CHECK(cudaMemcpy(p[0] + s[r].lo, p[r] + s[r].lo, cb, cudaMemcpyDeviceToDevice) ==
              cudaSuccess);
    CHECK_MSG(kda_cuda_model_params_gathered(sh[0], &err) == 0, "%s", err.msg);
    CHECK(kda_cuda_model_get_params(whole, ref, &err) == 0);
    CHECK(kda_cuda_model_get_params(sh[0], out, &err) == 0);
    CHECK_MSG(memcmp(out, ref, (size_t)n * sizeof(float)) == 0, "gathered parameters differ");
    CHECK(kda_cuda_model_get_params(one, out, &err) == 0);
    CHECK(memcmp(out, ref, (size_t)n * sizeof(float)) == 0);
    float *want[2] = {kda_malloc((size_t)n * sizeof(float)), kda_malloc((size_t)n * sizeof(float))};
    CHECK(kda_cuda_model_get_moments(whole, want[0], want[1], &err) == 0);
    for (int k = 0; k < 2; k++) {
        for (int r = 0; r < world; r++)
            CHECK(cudaMemcpy(g[0] + s[r].lo, k ? m2[r] : m1[r], cb, cudaMemcpyDeviceToDevice) ==
                  cudaSuccess);
        CHECK_MSG(kda_cuda_model_unpack(sh[0], out, g[0], &err) == 0, "%s", err.msg);
        CHECK_MSG(memcmp(out, want[k], (size_t)n * sizeof(float)) == 0, "moment %d differs", k + 1);
    }
    CHECK(kda_cuda_model_get_moments(sh[1], out, NULL, &err) == -1 && strstr(err.msg, "sharded"));
    // the refreshed bf16 copy: the same forward loss
    int64_t B = 2, T = 64;
    int32_t *ids = kda_malloc((size_t)(B * T) * sizeof(int32_t));
    for (int64_t i = 0; i < B * T; i++)
        ids[i] = (int32_t)((i * 7 + 3) % h.cfg.vocab_size);
    float la = NAN, lb = NAN;
    CHECK(kda_cuda_model_forward(whole, ids, NULL, B, T, NULL, &la, &err) == 0);
    CHECK(kda_cuda_model_forward(sh[0], ids, NULL, B, T, NULL, &lb, &err) == 0);
    CHECK_MSG(la == lb && isfinite(la), "forward loss %.9g (whole) vs %.9g (gathered shards)", la,
              lb);
    free(ids), free(want[0]), free(want[1]), free(G), free(M), free(V), free(out), free(ref);
    for (int r = 0; r < world; r++)
        kda_cuda_model_free(sh[r]);
    kda_cuda_model_free(one);
    kda_cuda_model_free(whole);
    kda_model_free(&h);
}

// ---------------------------------------------------------------------------------------------
// kda_train on a world-1 NCCL communicator: ZeRO-1 on vs off.

#ifdef KDA_HAVE_NCCL

typedef struct {
    float loss[16];
    double norm[16];
    int n;
} Trace;

static void trace_(void *u, const KdaStepInfo *s) {
    Trace *t = u;
    if (s->iteration >= 1 && s->iteration <= 16) {
        t->loss[s->iteration - 1] = s->loss;
        t->norm[s->iteration - 1] = s->grad_norm;
    }
    t->n++;
}

// 120 documents of 20..59 tokens (tests/fixtures.h TEST_DOCS).
static const char *data_(void) {
    static char prefix[PATH_MAX];
    snprintf(prefix, sizeof prefix, "%s/data", test_tmpdir());
    KdaError err;
    return test_write_docs(prefix, TEST_DOCS(120), &err) ? NULL : prefix;
}

// 4 iterations of 2 micro-batches of 4 x 32 tokens on the GPU, clipping at 0.05 (it clips: the
// tiny model's norms are ~0.3-3), saving every 2 iterations into dir/name.
static int train_(KdaDist *d, const char *data, const char *name, int zero1, int64_t stop_after,
                  Trace *tr, KdaError *err) {
    char y[2 * PATH_MAX + 1024], save[PATH_MAX];
    snprintf(save, sizeof save, "%s/%s", test_tmpdir(), name);
    snprintf(y, sizeof y,
             "model: configs/tiny.json\ntrain_data_path: [%s]\nsplit: \"90,10,0\"\ndevice: cuda\n"
             "seq_length: 32\ntrain_iters: 4\nglobal_batch_size: 8\nmicro_batch_size: 4\n"
             "lr: 3.0e-3\nmin_lr: 3.0e-4\nlr_warmup_iters: 1\nlog_interval: 100\nclip_grad: 0.05\n"
             "save_interval: 2\nsave: %s\nseed: 7\nuse_distributed_optimizer: %s\n",
             data, save, zero1 ? "true" : "false");
    KdaRunConfig rc;
    kda_run_config_defaults(&rc);
    if (kda_run_config_parse(&rc, y, strlen(y), "zero1.yaml", err) ||
        kda_run_config_validate(&rc, err))
        return -1;
    KdaTrainOptions o = {.rc = &rc,
                         .quiet = 1,
                         .stop_after = stop_after,
                         .on_step = trace_,
                         .user = tr,
                         .dist = d,
                         .device = 0};
    KdaTrainResult res;
    int rc2 = kda_train(&o, &res, err);
    kda_run_config_free(&rc);
    return rc2;
}

static int same_file_(const char *a, const char *b, const char *what) {
    char pa[PATH_MAX], pb[PATH_MAX];
    snprintf(pa, sizeof pa, "%s/%s/%s", test_tmpdir(), a, what);
    snprintf(pb, sizeof pb, "%s/%s/%s", test_tmpdir(), b, what);
    int eq = test_files_equal(pa, pb);
    CHECK_MSG(eq, "%s and %s differ (or are missing)", pa, pb);
    return eq;
}

static KdaDist *world_one_(void) {
    KdaDistEnv e = {.rank = 0, .world = 1, .local_world = 1, .launcher = "test"};
    snprintf(e.master_addr, sizeof e.master_addr, "127.0.0.1");
    e.master_port = dist_test_free_port();
    KdaDist *d = NULL;
    KdaError err = {{0}};
    CHECK_MSG(kda_dist_open(&d, &e, KDA_DIST_NCCL, 0, 60, &err) == 0, "%s", err.msg);
    return d;
}

// Plain data parallel vs ZeRO-1 at world size 1: the same losses, grad norms and checkpoints.
KDA_TEST_GPU(gpu_dist_zero1_world_one_equals_plain_dp) {
    const char *data = data_();
    KdaDist *d = world_one_();
    if (!data || !d) {
        CHECK(0);
        kda_dist_close(d);
        return;
    }
    Trace a = {0}, b = {0};
    KdaError err = {{0}};
    CHECK_MSG(train_(d, data, "plain", 0, 0, &a, &err) == 0, "%s", err.msg);
    CHECK_MSG(train_(d, data, "zero1", 1, 0, &b, &err) == 0, "%s", err.msg);
    CHECK(a.n == 4 && b.n == 4);
    for (int i = 0; i < 4; i++) {
        CHECK_MSG(a.loss[i] == b.loss[i] && a.norm[i] == b.norm[i],
                  "iteration %d: loss %.9g / %.9g, grad norm %.17g / %.17g", i + 1, a.loss[i],
                  b.loss[i], a.norm[i], b.norm[i]);
        printf("    iteration %d: loss %.7f, grad norm %.6f (both)\n", i + 1, a.loss[i], a.norm[i]);
    }
    CHECK_MSG(a.norm[0] > 0.05, "the test must clip: norm %g", a.norm[0]);
    for (int k = 0; k < 2; k++) {
        const char *it = k ? "iter_0000004" : "iter_0000002";
        char x[64], y[64];
        snprintf(x, sizeof x, "%s/model.safetensors", it);
        snprintf(y, sizeof y, "%s/optimizer.safetensors", it);
        same_file_("plain", "zero1", x);
        same_file_("plain", "zero1", y);
    }
    kda_dist_close(d);
}

// Stop at 2 (checkpoint), resume to 4: a ZeRO-1 resume from a plain checkpoint continues as a
// plain resume does (the shard takes its part of the loaded moments), and a ZeRO-1 checkpoint
// resumed without ZeRO-1 likewise.
KDA_TEST_GPU(gpu_dist_zero1_resume_equals_plain_resume) {
    const char *data = data_();
    KdaDist *d = world_one_();
    if (!data || !d) {
        CHECK(0);
        kda_dist_close(d);
        return;
    }
    Trace a = {0}, b = {0}, c = {0};
    KdaError err = {{0}};
    CHECK_MSG(train_(d, data, "p", 0, 2, &a, &err) == 0, "%s", err.msg); // plain, stops at 2
    CHECK_MSG(train_(d, data, "p", 0, 0, &a, &err) == 0, "%s", err.msg); // plain resume
    CHECK_MSG(train_(d, data, "z", 0, 2, &b, &err) == 0, "%s", err.msg); // plain, stops at 2
    CHECK_MSG(train_(d, data, "z", 1, 0, &b, &err) == 0, "%s", err.msg); // ZeRO-1 resume
    CHECK_MSG(train_(d, data, "y", 1, 2, &c, &err) == 0, "%s", err.msg); // ZeRO-1, stops at 2
    CHECK_MSG(train_(d, data, "y", 0, 0, &c, &err) == 0, "%s", err.msg); // plain resume
    CHECK(a.n == 4 && b.n == 4 && c.n == 4);
    for (int i = 0; i < 4; i++)
        CHECK_MSG(a.loss[i] == b.loss[i] && a.norm[i] == b.norm[i] && a.loss[i] == c.loss[i] &&
                      a.norm[i] == c.norm[i],
                  "iteration %d: loss %.9g / %.9g / %.9g", i + 1, a.loss[i], b.loss[i], c.loss[i]);
    same_file_("p", "z", "iter_0000004/model.safetensors");
    same_file_("p", "z", "iter_0000004/optimizer.safetensors");
    same_file_("p", "y", "iter_0000002/optimizer.safetensors");
    same_file_("p", "y", "iter_0000004/optimizer.safetensors");
    kda_dist_close(d);
}

#endif // KDA_HAVE_NCCL
#endif // KDA_HAVE_CUDA
