// dp.h - data parallelism over a model runtime (model/runtime.h): the gradient sum over the
// ranks, ZeRO-1's shard of the optimizer, and the collectives that keep parameters and moments
// whole (Megatron's semantics; docs/distributed.md). The trainer drives the runtime and calls
// these at fixed points of a step; the runtime knows nothing of the other ranks.
//
// The path follows where the runtime's gradient lives (kda_runtime_grad_view):
//   host (CPU runtime, Gloo): each layer's gradient is all-reduced on a communication thread
//     (dist_async.h) as soon as the last micro-batch's backward has finished it
//     (KDA_DIST_OVERLAP=0: after the backward); what no layer owns follows in reduce_grads.
//     ZeRO-1 (align 1): every rank has the whole gradient, updates its 1/N of the parameters and
//     all-gathers them.
//   device (GPU runtime, NCCL): the same per-layer all-reduce on a CUDA stream ordered after the
//     runtime's stream; ZeRO-1 (align 128) reduce-scatters the padded gradient instead, the grad
//     norm sums the shards' Σ g² over the ranks, and the parameters are all-gathered in place.
//
// Every function except kda_dp_begin_reduce and kda_dp_close is collective: every rank calls it
// at the same point of the same step. Errors: -1 with the message in *err (a dead or hung peer
// fails within the communicator's timeout). Threads: the trainer's thread only.
#ifndef KDA_DIST_DP_H
#define KDA_DIST_DP_H

#include "core/error.h"    // defines: KdaError
#include "dist/dist.h"     // defines: KdaDist
#include "model/runtime.h" // defines: KdaRuntime

typedef struct KdaDp KdaDp;

// Joins rt (after kda_runtime_train_init, before the first step) to d (both borrowed; they must
// outlive the KdaDp). zero1: plan this rank's shard (model/zero1.h over the gradient view, its
// alignment) and kda_runtime_shard it. The device path needs a CUDA build.
int kda_dp_open(KdaDp **dp, KdaRuntime *rt, KdaDist *d, int zero1, KdaError *err);
void kda_dp_close(KdaDp *dp); // accepts NULL; waits for nothing it queued (call after a step)

// The step's last micro-batch is next: reduce each layer as its backward finishes it.
void kda_dp_begin_reduce(KdaDp *dp);
// After every micro-batch's kda_runtime_train_step: the host path waits for the layers queued
// during it (the buffers and the communicator are free again) and reports their failures.
int kda_dp_backward_done(KdaDp *dp, KdaError *err);
// After the step's last micro-batch: the gradient summed over the ranks (every rank the same
// bits); ZeRO-1 on a device: reduce-scattered (this rank's shard only).
int kda_dp_reduce_grads(KdaDp *dp, KdaError *err);
// After kda_runtime_update with ZeRO-1: every rank's updated shard of the parameters to all.
int kda_dp_sync_params(KdaDp *dp, KdaError *err);
// ZeRO-1: the full moments into kda_runtime_optim_full (checkpoint save and resume); no-op
// without a shard.
int kda_dp_gather_optim(KdaDp *dp, KdaError *err);

#endif
