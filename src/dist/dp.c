// dp.c - data parallelism over a model runtime (contract in dp.h): the host path (Gloo, the CPU
// runtime's host gradient) and the device path (NCCL, the GPU runtime's device gradient).
#include "dist/dp.h"

#include <stdlib.h>
#include <string.h>

#include "core/log.h"        // defines: kda_info
#include "dist/dist_async.h" // defines: KdaDistAsync, kda_dist_async_* (the host overlap)
#include "model/zero1.h"     // defines: KdaShard, kda_zero1_plan

#ifdef KDA_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

struct KdaDp {
    KdaRuntime *rt;
    KdaDist *d;
    KdaGradView gv; // the runtime's gradient (its pointers change with a ZeRO-1 shard: re-read)
    int zero1;
    KdaShard sh;
    int64_t L;
    int64_t *layer_lo, *layer_hi; // [L] each layer's range in the view (lo -1: not contiguous)
    uint8_t *layer_done;          // [L] queued for reduction in this step
    int armed;                    // the running backward is the step's last: reduce while it runs
    KdaError hook_err;            // a failure inside the layer hook, reported after the backward
    int has_hook_err;
    // host: the overlap's communication thread (NULL: off, or world 1)
    KdaDistAsync *async;
    int overlapped; // this step's layers were queued by the hook
#ifdef KDA_HAVE_CUDA
    // device: the collectives' stream, ordered after the runtime's by an event
    cudaStream_t comm;
    cudaEvent_t ev;
#endif
};

static void layer_ranges_(KdaDp *p) {
    p->L = kda_runtime_config(p->rt)->num_hidden_layers;
    size_t n = (size_t)(p->L > 0 ? p->L : 1);
    p->layer_lo = kda_calloc(n, sizeof(int64_t));
    p->layer_hi = kda_calloc(n, sizeof(int64_t));
    p->layer_done = kda_calloc(n, 1);
    for (int64_t l = 0; l < p->L; l++)
        if (kda_runtime_layer_range(p->rt, l, &p->layer_lo[l], &p->layer_hi[l]))
            p->layer_lo[l] = -1;
}

// The next range from `at` that no queued layer covers: [at, *gap_end); *resume is where the one
// after it starts (past the queued layer that ends the gap; n at the end).
static void next_gap_(const KdaDp *p, int64_t at, int64_t n, int64_t *gap_end, int64_t *resume) {
    int64_t next = n, next_hi = n;
    for (int64_t l = 0; l < p->L; l++)
        if (p->layer_done[l] && p->layer_lo[l] >= at && p->layer_lo[l] < next)
            next = p->layer_lo[l], next_hi = p->layer_hi[l];
    *gap_end = next;
    *resume = next_hi;
}

// ---- host path (Gloo) --------------------------------------------------------------------------

// The runtime's layer hook in the step's last backward: layer l's rows are final in the
// gradient; queue their all-reduce on the communication thread.
static void host_layer_done_(void *c, int64_t l) {
    KdaDp *p = c;
    int64_t lo = p->layer_lo[l], hi = p->layer_hi[l];
    if (lo < 0 || p->has_hook_err) return;
    if (kda_dist_async_sum(p->async, p->gv.g + lo, hi - lo, &p->hook_err))
        p->has_hook_err = 1;
    else
        p->layer_done[l] = 1;
}

static int host_open_(KdaDp *p, KdaError *err) {
    const char *v = getenv("KDA_DIST_OVERLAP"); // "0": reduce after the backward (to compare)
    if (kda_dist_world(p->d) < 2 || (v && !strcmp(v, "0"))) return 0;
    if (kda_dist_async_start(&p->async, p->d, err)) return -1;
    if (kda_dist_rank(p->d) == 0)
        kda_info("data parallel: each layer's gradient is all-reduced on a communication thread "
                 "during the last micro-batch's backward (KDA_DIST_OVERLAP=0: after it)");
    return 0;
}

// Sums the gradient over the ranks: what the overlap did not reduce yet (everything when it is
// off). Gloo's all-reduce gives every rank the same bits, so the norm, the clip and the skip
// decisions that follow agree everywhere.
static int host_reduce_(KdaDp *p, KdaError *err) {
    int64_t n = p->gv.n;
    int rc = 0;
    if (!p->overlapped) memset(p->layer_done, 0, (size_t)(p->L > 0 ? p->L : 1));
    for (int64_t at = 0, end, next; rc == 0 && at < n; at = next) {
        next_gap_(p, at, n, &end, &next);
        if (end > at)
            rc = kda_dist_allreduce(p->d, p->gv.g + at, end - at, KDA_DIST_F32, KDA_DIST_SUM, err);
    }
    p->overlapped = 0;
    return rc;
}

// all-gather of one [n] fp32 buffer whose rank r holds elements [r * chunk, (r + 1) * chunk)
// (the last shards shorter or empty): src_shard [hi - lo] -> dst [n] (may alias).
static int host_gather_(KdaDp *p, const float *src_shard, float *dst, KdaError *err) {
    int64_t n = p->gv.n, lo = p->sh.lo < n ? p->sh.lo : n, hi = p->sh.hi < n ? p->sh.hi : n;
    int w = kda_dist_world(p->d);
    float *in = kda_calloc((size_t)p->sh.chunk, sizeof(float));
    float *all = kda_malloc((size_t)(p->sh.chunk * w) * sizeof(float));
    memcpy(in, src_shard, (size_t)(hi - lo) * sizeof(float));
    int rc = kda_dist_allgather(p->d, in, all, p->sh.chunk, err);
    if (!rc) memcpy(dst, all, (size_t)n * sizeof(float));
    free(in);
    free(all);
    return rc;
}

static int host_sync_params_(KdaDp *p, KdaError *err) {
    float *prm, *g, *m1, *m2;
    kda_runtime_shard_view(p->rt, &prm, &g, &m1, &m2);
    int64_t lo = p->sh.lo < p->gv.n ? p->sh.lo : p->gv.n;
    return host_gather_(p, prm + lo, prm, err);
}

static int host_gather_optim_(KdaDp *p, KdaError *err) {
    float *prm, *g, *m1, *m2;
    kda_runtime_shard_view(p->rt, &prm, &g, &m1, &m2);
    KdaAdamW *full = kda_runtime_optim_full(p->rt);
    if (host_gather_(p, m1, full->m, err)) return -1;
    return host_gather_(p, m2, full->v, err);
}

// ---- device path (NCCL) ------------------------------------------------------------------------
#ifdef KDA_HAVE_CUDA

// The runtime stream's queued work, then comm: the collective queued next sees it.
static int comm_after_runtime_(KdaDp *p, const char *what, KdaError *err) {
    cudaError_t e = cudaEventRecord(p->ev, (cudaStream_t)p->gv.stream);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(p->comm, p->ev, 0);
    if (e != cudaSuccess)
        return kda_fail(err, "%s: ordering the streams: %s", what, cudaGetErrorString(e));
    return 0;
}

// Queues the all-reduce of device elements [lo, hi) on comm after the runtime's current point.
static int dev_reduce_range_(KdaDp *p, int64_t lo, int64_t hi, KdaError *err) {
    if (hi <= lo) return 0;
    if (comm_after_runtime_(p, "gradient all-reduce", err)) return -1;
    return kda_dist_dev_allreduce(p->d, p->gv.g + lo, hi - lo, p->comm, err);
}

// After block l's backward is queued: its layer's gradient is final when the stream gets there
// (in the step's last micro-batch), so reduce it now, overlapping the blocks still to come.
static void dev_layer_done_(void *c, int64_t l) {
    KdaDp *p = c;
    if (!p->armed || p->has_hook_err || p->layer_lo[l] < 0) return;
    if (dev_reduce_range_(p, p->layer_lo[l], p->layer_hi[l], &p->hook_err))
        p->has_hook_err = 1;
    else
        p->layer_done[l] = 1;
}

// The shard's Σ g² summed over the ranks (fp64 host all-reduce: one number; every rank gets
// the same bits, so the norm, the clip and the NaN skip agree).
static int dev_norm_reduce_(void *c, double *sumsq, KdaError *err) {
    KdaDp *p = c;
    return kda_dist_allreduce(p->d, sumsq, 1, KDA_DIST_F64, KDA_DIST_SUM, err);
}

static int dev_open_(KdaDp *p, KdaError *err) {
    cudaError_t e = cudaStreamCreateWithFlags(&p->comm, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&p->ev, cudaEventDisableTiming);
    if (e != cudaSuccess)
        return kda_fail(err, "data parallel: creating the comm stream: %s", cudaGetErrorString(e));
    kda_dist_set_stream(p->d, p->comm); // the loss all-reduce queues behind the gradients'
    if (p->zero1)
        kda_runtime_set_norm_reduce(p->rt, dev_norm_reduce_, p);
    else
        kda_runtime_set_layer_hook(p->rt, dev_layer_done_, p); // ZeRO-1: after the backward
    return 0;
}

// After the last micro-batch's backward: rank r's shard of g becomes the sum over the ranks of
// everyone's g over it (in place: NCCL's out == in + rank x chunk).
static int dev_reduce_scatter_(KdaDp *p, KdaError *err) {
    p->armed = 0;
    if (comm_after_runtime_(p, "gradient reduce-scatter", err) ||
        kda_dist_dev_reduce_scatter(p->d, p->gv.g, p->gv.g + p->sh.lo, p->sh.chunk, p->comm, err))
        return -1;
    return kda_dist_dev_wait(p->d, p->comm, err);
}

// Finishes the step's reduction: every device range no layer hook reduced (the embedding and
// tied head, the final norm, layers that were not contiguous), then waits for comm, polling
// NCCL's errors. ZeRO-1: one reduce-scatter of the whole padded gradient instead.
static int dev_reduce_(KdaDp *p, KdaError *err) {
    if (p->zero1) return dev_reduce_scatter_(p, err);
    if (!p->armed) memset(p->layer_done, 0, (size_t)(p->L > 0 ? p->L : 1));
    p->armed = 0;
    for (int64_t at = 0, end, next; at < p->gv.n; at = next) {
        next_gap_(p, at, p->gv.n, &end, &next);
        if (dev_reduce_range_(p, at, end, err)) return -1;
    }
    return kda_dist_dev_wait(p->d, p->comm, err);
}

// After the shard's AdamW: every rank's updated shard into every rank's p (in place), then the
// runtime's bf16 copy of the other shards. Waits for the all-gather.
static int dev_sync_params_(KdaDp *p, KdaError *err) {
    float *prm, *g, *m1, *m2;
    kda_runtime_shard_view(p->rt, &prm, &g, &m1, &m2);
    if (comm_after_runtime_(p, "parameter all-gather", err) ||
        kda_dist_dev_allgather(p->d, prm + p->sh.lo, prm, p->sh.chunk, p->comm, err) ||
        kda_dist_dev_wait(p->d, p->comm, err))
        return -1;
    return kda_runtime_params_gathered(p->rt, err);
}

// Checkpoints: the full moments into the host optimizer. Each one is all-gathered into the
// gradient buffer (free between steps: the next step zeroes it first; it has the padded layout),
// then unpacked to the dense host layout. No device memory beyond the training state.
static int dev_gather_optim_(KdaDp *p, KdaError *err) {
    float *prm, *g, *m1, *m2;
    kda_runtime_shard_view(p->rt, &prm, &g, &m1, &m2);
    KdaAdamW *full = kda_runtime_optim_full(p->rt);
    float *shard[2] = {m1, m2}, *host[2] = {full->m, full->v};
    for (int k = 0; k < 2; k++)
        if (comm_after_runtime_(p, "moments all-gather", err) ||
            kda_dist_dev_allgather(p->d, shard[k], g, p->sh.chunk, p->comm, err) ||
            kda_dist_dev_wait(p->d, p->comm, err) || kda_runtime_unpack(p->rt, host[k], g, err))
            return -1;
    return 0;
}

static void dev_close_(KdaDp *p) {
    kda_dist_set_stream(p->d, NULL);
    if (p->comm) cudaStreamDestroy(p->comm);
    if (p->ev) cudaEventDestroy(p->ev);
}

#else // !KDA_HAVE_CUDA: a device gradient cannot exist

static int dev_open_(KdaDp *p, KdaError *err) {
    (void)p;
    return kda_fail(err, "data parallel: a device gradient needs a CUDA build");
}
#define NO_DEV(...) (kda_fail(err, "data parallel: no CUDA in this build"))
static int dev_reduce_(KdaDp *p, KdaError *err) {
    (void)p;
    return NO_DEV();
}
static int dev_sync_params_(KdaDp *p, KdaError *err) {
    (void)p;
    return NO_DEV();
}
static int dev_gather_optim_(KdaDp *p, KdaError *err) {
    (void)p;
    return NO_DEV();
}
static void dev_close_(KdaDp *p) {
    (void)p;
}

#endif

// ---- the interface -----------------------------------------------------------------------------

int kda_dp_open(KdaDp **out, KdaRuntime *rt, KdaDist *d, int zero1, KdaError *err) {
    *out = NULL;
    KdaDp *p = kda_calloc(1, sizeof *p);
    p->rt = rt, p->d = d, p->zero1 = zero1;
    kda_runtime_grad_view(rt, &p->gv);
    if (zero1 &&
        (kda_zero1_plan(&p->sh, p->gv.n, kda_dist_world(d), kda_dist_rank(d), p->gv.align, err) ||
         kda_runtime_shard(rt, &p->sh, err))) {
        free(p);
        return -1;
    }
    kda_runtime_grad_view(rt, &p->gv); // a device shard re-allocates the gradient
    layer_ranges_(p);
    if (p->gv.on_device ? dev_open_(p, err) : host_open_(p, err)) {
        kda_dp_close(p);
        return -1;
    }
    *out = p;
    return 0;
}

void kda_dp_close(KdaDp *p) {
    if (!p) return;
    kda_runtime_set_layer_hook(p->rt, NULL, NULL);
    kda_runtime_set_norm_reduce(p->rt, NULL, NULL);
    kda_dist_async_stop(p->async);
    if (p->gv.on_device) dev_close_(p);
    free(p->layer_lo);
    free(p->layer_hi);
    free(p->layer_done);
    free(p);
}

void kda_dp_begin_reduce(KdaDp *p) {
    memset(p->layer_done, 0, (size_t)(p->L > 0 ? p->L : 1));
    if (p->gv.on_device) {
        p->armed = 1;
    } else if (p->async) {
        p->armed = 1, p->overlapped = 1;
        kda_runtime_set_layer_hook(p->rt, host_layer_done_, p);
    }
}

int kda_dp_backward_done(KdaDp *p, KdaError *err) {
    if (p->gv.on_device || !p->armed) return 0;
    p->armed = 0;
    kda_runtime_set_layer_hook(p->rt, NULL, NULL);
    if (kda_dist_async_wait(p->async, err)) return -1; // the buffers must be free first
    if (p->has_hook_err) {
        p->has_hook_err = 0;
        *err = p->hook_err;
        return -1;
    }
    return 0;
}

int kda_dp_reduce_grads(KdaDp *p, KdaError *err) {
    if (p->has_hook_err) {
        p->has_hook_err = 0;
        p->armed = 0;
        *err = p->hook_err;
        return -1;
    }
    return p->gv.on_device ? dev_reduce_(p, err) : host_reduce_(p, err);
}

int kda_dp_sync_params(KdaDp *p, KdaError *err) {
    if (!p->zero1) return 0;
    return p->gv.on_device ? dev_sync_params_(p, err) : host_sync_params_(p, err);
}

int kda_dp_gather_optim(KdaDp *p, KdaError *err) {
    if (!p->zero1) return 0;
    return p->gv.on_device ? dev_gather_optim_(p, err) : host_gather_optim_(p, err);
}
