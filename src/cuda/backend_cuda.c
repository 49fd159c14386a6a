// backend_cuda.c - KdaBackend over the GPU model (contract in backend_cuda.h). Compiles without
// CUDA too: then kda_backend_cuda_create fails with a message and kda_cuda_available is 0.
#include "cuda/backend_cuda.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef KDA_HAVE_CUDA

#include <cuda_runtime_api.h>

#include "cuda/cuda_common.h" // defines: kda_cuda_device_count
#include "cuda/model_cuda.h"  // defines: KdaCudaModel, kda_cuda_model_*
#include "dist/dist.h"        // defines: KdaDist, kda_dist_dev_*
#include "model/zero1.h"       // defines: KdaShard, kda_zero1_plan (ZeRO-1)

#define ZERO1_ALIGN 128 // elements: every shard starts 512-byte aligned (Megatron pads to 128)

typedef struct {
    KdaModel host;    // config, table and the host parameter buffer (checkpoint staging)
    KdaCudaModel *dm; // device model
    KdaAdamW opt;     // host mirror: config, step, m and v staging
    KdaError pending; // an error from update(), reported by the next forward_backward
    int has_pending;
    int fused_cls; // training steps use kda_cuda_model_forward_backward (KDA_CLASSIFIER)
    // Data parallelism: the gradient all-reduce runs on comm, one NCCL call per layer as soon as
    // that layer's backward is done (the last micro-batch only), last layer first; what no layer
    // owns (embedding / tied head, final norm) follows the whole backward.
    KdaDist *dist;
    cudaStream_t comm;
    cudaEvent_t ev;
    int armed;                    // the current backward is the step's last: reduce while it runs
    int64_t *layer_lo, *layer_hi; // [L] device ranges of each layer (lo -1: not contiguous)
    int *layer_done;              // [L] queued for reduction in this step
    KdaError dist_err;            // an error inside the layer hook, reported by reduce_grads
    int has_dist_err;
    // ZeRO-1 (use_distributed_optimizer): this rank's shard of the device layout. The gradient is
    // reduce-scattered after the backward, AdamW updates the shard, the parameters are
    // all-gathered; moments live on the device for the shard only (docs/distributed.md §2).
    int zero1;
    KdaShard sh;
} CudaBe;

static void be_zero(void *c) {
    CudaBe *x = c;
    KdaError e = {{0}};
    if (kda_cuda_model_zero_grads(x->dm, &e) && !x->has_pending) x->pending = e, x->has_pending = 1;
}

static int be_fwd_bwd(void *c, const int32_t *ids, int64_t B, int64_t T, int backward, float *loss,
                      KdaError *err) {
    CudaBe *x = c;
    if (x->has_pending) {
        x->has_pending = 0;
        *err = x->pending;
        return -1;
    }
    if (backward && x->fused_cls) {
        if (kda_cuda_model_forward_backward(x->dm, ids, NULL, B, T, NULL, NULL, err)) return -1;
    } else {
        if (kda_cuda_model_forward(x->dm, ids, NULL, B, T, NULL, NULL, err)) return -1;
        if (backward && kda_cuda_model_backward(x->dm, err)) return -1;
    }
    return kda_cuda_model_loss(x->dm, loss, err); // read after the backward is queued
}

static double be_finish(void *c, double scale, double max_norm) {
    CudaBe *x = c;
    KdaError e = {{0}};
    double n = kda_cuda_model_finish_grads(x->dm, scale, max_norm, &e);
    if (!isfinite(n) && e.msg[0] && !x->has_pending) {
        x->pending = e;
        x->has_pending = 1;
    }
    return n;
}

static void be_update(void *c, double lr) {
    CudaBe *x = c;
    KdaError e = {{0}};
    x->opt.step++;
    if (kda_cuda_model_adamw(x->dm, &x->opt.cfg, x->opt.step, lr, &e) && !x->has_pending) {
        x->pending = e;
        x->has_pending = 1;
    }
}

// ZeRO-1: the parameters only; the full moments come from gather_optim.
static float *be_params(void *c) {
    CudaBe *x = c;
    KdaError e = {{0}};
    if ((kda_cuda_model_get_params(x->dm, x->host.params, &e) ||
         (!x->zero1 && kda_cuda_model_get_moments(x->dm, x->opt.m, x->opt.v, &e))) &&
        !x->has_pending) {
        x->pending = e;
        x->has_pending = 1;
    }
    return x->host.params;
}

static KdaAdamW *be_optim(void *c) {
    return &((CudaBe *)c)->opt;
}

// ZeRO-1: put_moments uploads this rank's shard of the full host moments.
static void be_changed(void *c) {
    CudaBe *x = c;
    KdaError e = {{0}};
    if ((kda_cuda_model_put_params(x->dm, x->host.params, &e) ||
         kda_cuda_model_put_moments(x->dm, x->opt.m, x->opt.v, &e)) &&
        !x->has_pending) {
        x->pending = e;
        x->has_pending = 1;
    }
}

static int be_profile(void *c, KdaProf *p, KdaError *err) {
    return kda_cuda_model_profile(((CudaBe *)c)->dm, p, err);
}

static int be_memory(void *c, double *used_mib, double *total_mib) {
    (void)c;
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return -1;
    *used_mib = (double)(total_b - free_b) / (1 << 20);
    *total_mib = (double)total_b / (1 << 20);
    return 0;
}

// ---- data parallelism ----------------------------------------------------------------------

// Queues the all-reduce of device elements [lo, hi) on comm after the model stream's current
// point (the event).
static int reduce_range_(CudaBe *x, int64_t lo, int64_t hi, KdaError *err) {
    float *g;
    int64_t n;
    void *stream;
    kda_cuda_model_grad_view(x->dm, &g, &n, &stream);
    if (hi <= lo) return 0;
    cudaError_t e = cudaEventRecord(x->ev, (cudaStream_t)stream);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(x->comm, x->ev, 0);
    if (e != cudaSuccess)
        return kda_fail(err, "gradient all-reduce: ordering the streams: %s",
                        cudaGetErrorString(e));
    return kda_dist_dev_allreduce(x->dist, g + lo, hi - lo, x->comm, err);
}

// After block l's backward is queued: its layer's gradient is final when the stream gets there
// (in the step's last micro-batch), so reduce it now, overlapping the blocks still to come.
static void layer_done_(void *c, int64_t l) {
    CudaBe *x = c;
    if (!x->armed || x->has_dist_err || x->layer_lo[l] < 0) return;
    if (reduce_range_(x, x->layer_lo[l], x->layer_hi[l], &x->dist_err))
        x->has_dist_err = 1;
    else
        x->layer_done[l] = 1;
}

// ---- ZeRO-1 --------------------------------------------------------------------------------

// The model stream's queued work, then `stream` (comm): the collective that follows sees it.
static int comm_after_model_(CudaBe *x, const char *what, KdaError *err) {
    float *g;
    int64_t n;
    void *stream;
    kda_cuda_model_grad_view(x->dm, &g, &n, &stream);
    cudaError_t e = cudaEventRecord(x->ev, (cudaStream_t)stream);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(x->comm, x->ev, 0);
    if (e != cudaSuccess)
        return kda_fail(err, "%s: ordering the streams: %s", what, cudaGetErrorString(e));
    return 0;
}

// The shard's Σ g² summed over the ranks (fp64 host all-reduce: one number; every rank gets
// the same bits, so the norm, the clip and the NaN skip agree).
static int zero1_norm_reduce_(void *c, double *sumsq, KdaError *err) {
    CudaBe *x = c;
    return kda_dist_allreduce(x->dist, sumsq, 1, KDA_DIST_F64, KDA_DIST_SUM, err);
}

static int zero1_setup_(CudaBe *x, KdaDist *d, KdaError *err) {
    float *g;
    int64_t n;
    void *stream;
    kda_cuda_model_grad_view(x->dm, &g, &n, &stream);
    if (kda_zero1_plan(&x->sh, n, kda_dist_world(d), kda_dist_rank(d), ZERO1_ALIGN, err) ||
        kda_cuda_model_shard(x->dm, &x->sh, err))
        return -1;
    x->zero1 = 1;
    kda_cuda_model_set_norm_reduce(x->dm, zero1_norm_reduce_, x);
    return 0;
}

// After the last micro-batch's backward: rank r's shard of g becomes the sum over the ranks of
// everyone's g over it (in place: NCCL's out == in + rank x chunk).
static int zero1_reduce_scatter_(CudaBe *x, KdaError *err) {
    float *p, *g, *m1, *m2;
    kda_cuda_model_shard_view(x->dm, &p, &g, &m1, &m2);
    x->armed = 0;
    if (comm_after_model_(x, "gradient reduce-scatter", err) ||
        kda_dist_dev_reduce_scatter(x->dist, g, g + x->sh.lo, x->sh.chunk, x->comm, err))
        return -1;
    return kda_dist_dev_wait(x->dist, x->comm, err);
}

// After the shard's AdamW: every rank's updated shard into every rank's p (in place), then the
// bf16 copy of the other shards. Waits for the all-gather (a dead or hung peer fails here).
static int be_sync_params(void *c, KdaError *err) {
    CudaBe *x = c;
    float *p, *g, *m1, *m2;
    if (!x->zero1) return 0;
    kda_cuda_model_shard_view(x->dm, &p, &g, &m1, &m2);
    if (x->has_pending) { // the update failed: say why, not what the gather would say next
        x->has_pending = 0;
        *err = x->pending;
        return -1;
    }
    if (comm_after_model_(x, "parameter all-gather", err) ||
        kda_dist_dev_allgather(x->dist, p + x->sh.lo, p, x->sh.chunk, x->comm, err) ||
        kda_dist_dev_wait(x->dist, x->comm, err))
        return -1;
    return kda_cuda_model_params_gathered(x->dm, err);
}

// Checkpoints: the full moments into the host mirror. Each one is all-gathered into the gradient
// buffer (free between steps: the next step zeroes it first; it has the padded layout), then
// unpacked to the dense host layout. No device memory beyond the training state.
static int be_gather_optim(void *c, KdaError *err) {
    CudaBe *x = c;
    float *p, *g, *m1, *m2;
    if (!x->zero1) return 0;
    kda_cuda_model_shard_view(x->dm, &p, &g, &m1, &m2);
    float *shard[2] = {m1, m2}, *host[2] = {x->opt.m, x->opt.v};
    for (int k = 0; k < 2; k++)
        if (comm_after_model_(x, "moments all-gather", err) ||
            kda_dist_dev_allgather(x->dist, shard[k], g, x->sh.chunk, x->comm, err) ||
            kda_dist_dev_wait(x->dist, x->comm, err) ||
            kda_cuda_model_unpack(x->dm, host[k], g, err))
            return -1;
    return 0;
}

// ---- set up ------------------------------------------------------------------------------

static int be_set_dist(void *c, KdaDist *d, int zero1, KdaError *err) {
    CudaBe *x = c;
    if (zero1 && zero1_setup_(x, d, err)) return -1;
    int64_t L = x->host.cfg.num_hidden_layers;
    x->layer_lo = kda_calloc((size_t)L, sizeof(int64_t));
    x->layer_hi = kda_calloc((size_t)L, sizeof(int64_t));
    x->layer_done = kda_calloc((size_t)L, sizeof(int));
    for (int64_t l = 0; l < L; l++)
        if (kda_cuda_model_layer_range(x->dm, l, &x->layer_lo[l], &x->layer_hi[l]))
            x->layer_lo[l] = -1;
    cudaError_t e = cudaStreamCreateWithFlags(&x->comm, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&x->ev, cudaEventDisableTiming);
    if (e != cudaSuccess)
        return kda_fail(err, "data parallel: creating the comm stream: %s", cudaGetErrorString(e));
    x->dist = d;
    kda_dist_set_stream(d, x->comm); // the loss all-reduce queues behind the gradients'
    if (!zero1) kda_cuda_model_set_layer_hook(x->dm, layer_done_, x); // ZeRO-1: after the backward
    return 0;
}

// The trainer's last micro-batch is about to run: arm the per-layer reduction.
static void be_begin_reduce(void *c) {
    CudaBe *x = c;
    memset(x->layer_done, 0, (size_t)x->host.cfg.num_hidden_layers * sizeof(int));
    x->armed = 1;
}

// Finishes the step's reduction: every device range no layer hook reduced (the embedding and
// tied head, the final norm, layers that were not contiguous), then waits for comm, polling
// NCCL's errors (a dead or hung peer fails here within the timeout). ZeRO-1: one
// reduce-scatter of the whole padded gradient instead.
static int be_reduce_grads(void *c, KdaError *err) {
    CudaBe *x = c;
    if (x->zero1) return zero1_reduce_scatter_(x, err);
    float *g;
    int64_t n, L = x->host.cfg.num_hidden_layers;
    void *stream;
    kda_cuda_model_grad_view(x->dm, &g, &n, &stream);
    if (!x->armed) be_begin_reduce(c);
    x->armed = 0;
    if (x->has_dist_err) {
        x->has_dist_err = 0;
        *err = x->dist_err;
        return -1;
    }
    int64_t at = 0; // gaps between the reduced layer ranges, in offset order
    for (;;) {
        int64_t next = n, next_hi = n;
        for (int64_t l = 0; l < L; l++)
            if (x->layer_done[l] && x->layer_lo[l] >= at && x->layer_lo[l] < next)
                next = x->layer_lo[l], next_hi = x->layer_hi[l];
        if (reduce_range_(x, at, next, err)) return -1;
        if (next >= n) break;
        at = next_hi;
    }
    return kda_dist_dev_wait(x->dist, x->comm, err);
}

static void be_destroy(void *c) {
    CudaBe *x = c;
    if (x->dist) kda_dist_set_stream(x->dist, NULL);
    if (x->comm) cudaStreamDestroy(x->comm);
    if (x->ev) cudaEventDestroy(x->ev);
    free(x->layer_lo);
    free(x->layer_hi);
    free(x->layer_done);
    kda_cuda_model_free(x->dm);
    kda_model_free(&x->host);
    kda_adamw_free(&x->opt);
    free(x);
}

int kda_cuda_available(void) {
    return kda_cuda_device_count() > 0;
}

// KDA_CLASSIFIER: "fused" (default) or "legacy" (vocabulary chunks, logits recomputed in the
// backward: the path before the fused classifier, kept to measure against and to fall back to).
static int classifier_mode_(int *fused, KdaError *err) {
    const char *v = getenv("KDA_CLASSIFIER");
    *fused = 1;
    if (!v || !*v || !strcmp(v, "fused")) return 0;
    if (!strcmp(v, "legacy")) {
        *fused = 0;
        return 0;
    }
    return kda_fail(err, "KDA_CLASSIFIER=%.32s: expected fused or legacy", v);
}

int kda_backend_cuda_create(KdaBackend *be, KdaModel *model, const KdaAdamWConfig *ocfg, int device,
                            KdaError *err) {
    memset(be, 0, sizeof *be);
    int fused = 1;
    if (classifier_mode_(&fused, err)) return -1;
    CudaBe *x = kda_calloc(1, sizeof *x);
    x->fused_cls = fused;
    if (kda_adamw_init(&x->opt, model->table.total_numel, ocfg, err)) {
        free(x);
        return -1;
    }
    if (kda_cuda_model_create(&x->dm, &model->cfg, &model->table, model->params, device, err) ||
        (!fused && kda_cuda_model_set_cls_budget(x->dm, 0, err))) { // legacy: its memory as before
        kda_cuda_model_free(x->dm);
        kda_adamw_free(&x->opt);
        free(x);
        return -1;
    }
    x->host = *model;
    memset(model, 0, sizeof *model);
    *be = (KdaBackend){.name = "cuda",
                       .ctx = x,
                       .n_params = x->host.table.total_numel,
                       .zero_grads = be_zero,
                       .forward_backward = be_fwd_bwd,
                       .finish_grads = be_finish,
                       .update = be_update,
                       .host_params = be_params,
                       .host_optim = be_optim,
                       .state_changed = be_changed,
                       .set_dist = be_set_dist,
                       .begin_reduce = be_begin_reduce,
                       .reduce_grads = be_reduce_grads,
                       .sync_params = be_sync_params,
                       .gather_optim = be_gather_optim,
                       .destroy = be_destroy,
                       .profile = be_profile,
                       .device_memory = be_memory};
    KdaCudaDeviceInfo info;
    KdaError qe;
    if (kda_cuda_query(device, &info, &qe) == 0) be->peak_flops = info.peak_bf16_flops;
    return 0;
}

int kda_backend_cuda_set_recompute(KdaBackend *be, int on, KdaError *err) {
    CudaBe *x = be->ctx;
    return kda_cuda_model_set_recompute(x->dm, on, err);
}

#else // !KDA_HAVE_CUDA

int kda_backend_cuda_set_recompute(KdaBackend *be, int on, KdaError *err) {
    (void)be, (void)on;
    return kda_fail(err, "recompute: this build has no CUDA support");
}

int kda_cuda_available(void) {
    return 0;
}

int kda_backend_cuda_create(KdaBackend *be, KdaModel *model, const KdaAdamWConfig *ocfg, int device,
                            KdaError *err) {
    (void)model, (void)ocfg, (void)device;
    memset(be, 0, sizeof *be);
    return kda_fail(err, "device cuda: this build has no CUDA support (rebuild on a machine with "
                         "nvcc: make KDA_CUDA=1), use device cpu");
}

#endif
