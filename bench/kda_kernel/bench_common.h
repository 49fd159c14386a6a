// bench_common.h - what the small GPU benchmarks bench_cls.c and bench_proj.c share: one CUDA
// context, a fatal error line, the median of 10 timed launches after 2 warm-ups, and random bf16
// tensors on the device. Header-only (static functions): each benchmark is one translation unit
// that defines BENCH_NAME (its name in the error lines) before including it.
//
// Threads: one (the benchmarks' main). Every failure exits the benchmark with one line.
#ifndef KDA_BENCH_COMMON_H
#define KDA_BENCH_COMMON_H

#include <stdio.h>
#include <stdlib.h>

#include "core/rng.h"         // defines: KdaRng, rng_normal
#include "cuda/cuda_common.h" // defines: KdaCudaCtx, kda_cuda_*

#ifndef BENCH_NAME
#error "define BENCH_NAME before including bench_common.h"
#endif

static KdaCudaCtx g; // the benchmark's context (kda_cuda_init in main)

static void die_(const char *what) {
    fprintf(stderr, BENCH_NAME ": %s: %s\n", what, g.err.msg);
    exit(1);
}

static int cmp_f_(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

typedef int (*BenchFn)(void); // queues one launch (or a few) on g.stream; nonzero on failure

// Median ms of fn over 10 runs after 2 warm-ups, CUDA events around fn only; prep (NULL: none)
// runs untimed before each run, e.g. to restore an input fn overwrites.
static float time_ms_(BenchFn fn, BenchFn prep) {
    cudaEvent_t e0, e1;
    if (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess) die_("event");
    float ms[10];
    for (int i = 0; i < 12; i++) {
        if (prep && prep()) die_("prepare");
        cudaEventRecord(e0, g.stream);
        if (fn()) die_("launch");
        cudaEventRecord(e1, g.stream);
        if (kda_cuda_sync(&g)) die_("sync");
        if (i >= 2) cudaEventElapsedTime(&ms[i - 2], e0, e1);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    qsort(ms, 10, sizeof *ms, cmp_f_);
    return (ms[4] + ms[5]) / 2;
}

// n bf16 values from N(0, std) on the device: a host tile of 1M draws repeated by device copies.
static kda_bf16 *rand_bf16_(KdaRng *r, int64_t n, float std) {
    int64_t tile = n < ((int64_t)1 << 20) ? n : ((int64_t)1 << 20);
    float *h = malloc((size_t)tile * sizeof(float));
    if (!h) die_("host tile");
    for (int64_t i = 0; i < tile; i++)
        h[i] = rng_normal(r, 0.0f, std);
    kda_bf16 *d = kda_cuda_alloc(&g, (size_t)n * 2);
    if (!d || kda_cuda_put_bf16(&g, d, h, tile)) die_("upload");
    for (int64_t at = tile; at < n; at += tile)
        if (cudaMemcpyAsync(d + at, d, (size_t)((n - at < tile ? n - at : tile) * 2),
                            cudaMemcpyDeviceToDevice, g.stream) != cudaSuccess)
            die_("tile copy");
    if (kda_cuda_sync(&g)) die_("fill");
    free(h);
    return d;
}

#endif
