// dist_async.h - host-buffer all-reduces on a communication thread, so CPU ranks (Gloo) reduce
// each layer's gradient while the backward of the earlier layers still runs (the GPU path does
// the same on a CUDA stream, backend_cuda.c).
//
// One thread per queue, started by kda_dist_async_start; kda_dist_async_sum queues an in-place
// fp32 sum over the ranks of buf [n] and returns at once; the thread runs the queued all-reduces
// in queue order (every rank queues the same ranges in the same order: the collectives match).
// kda_dist_async_wait blocks until the queue is empty and returns the first failure.
//
// Threads: the queue's owner thread calls every function. While anything is queued, the owner
// must not touch the queued buffers nor call any other collective on the same communicator
// (Gloo runs one collective at a time per context): wait first. After a failure the queue drops
// what it holds and wait keeps failing with the first error; the communicator can only be
// closed then (as after any failed collective, dist.h).
#ifndef KDA_DIST_ASYNC_H
#define KDA_DIST_ASYNC_H

#include <stdint.h>

#include "core/error.h" // defines: KdaError
#include "dist/dist.h"  // defines: KdaDist

typedef struct KdaDistAsync KdaDistAsync;

// A queue on d (borrowed; it must outlive the queue). -1 when the thread cannot start.
int kda_dist_async_start(KdaDistAsync **out, KdaDist *d, KdaError *err);
// Queues buf [n] fp32 (borrowed until the next wait) for an in-place sum over the ranks.
// -1 only when an earlier queued all-reduce already failed (its error).
int kda_dist_async_sum(KdaDistAsync *a, float *buf, int64_t n, KdaError *err);
// Waits until every queued all-reduce has run; -1 with the first failure's message.
int kda_dist_async_wait(KdaDistAsync *a, KdaError *err);
// Waits for the queue, stops and joins the thread, frees. Accepts NULL.
void kda_dist_async_stop(KdaDistAsync *a);

#endif
