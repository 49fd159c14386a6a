// allreduce_bench.c - all-reduce bandwidth through kda.c's own communicator (src/dist/dist.h):
// the fp32 in-place sum the trainer runs on its gradients, swept over message sizes.
//
// Contract: run as one process per rank under any launcher kda_dist_env_read knows (torchrun
// --no-python, mpirun, srun, or the plain RANK/WORLD_SIZE/... variables of bench/dist/
// dist_env.sh's dist_launch_env); every rank runs the same sweep. Engine nccl (device buffers,
// GPU = LOCAL_RANK, CUDA events on the communicator's stream) or gloo (host buffers, host clock:
// the CPU smoke test). Per size: a correctness check is run once first (rank r contributes
// r + 1, every element must read world (world + 1) / 2), then per size `warmup` untimed
// all-reduces, an iteration count agreed by all ranks (enough for ~target_ms, within
// [min_iters, max_iters]), and the timed loop. The reported ms is the slowest rank's mean per
// all-reduce. Rank 0 prints one JSON line per size on stdout:
//   {"impl": "kda", "engine": "nccl", "op": "all_reduce", "dtype": "fp32", "world": N,
//    "bytes": B, "iters": k, "ms": t, "algbw_GBps": B / t, "busbw_GBps": algbw * 2 (N - 1) / N}
// (GB = 1e9 bytes; busbw as nccl-tests define it). Exit status 0, or 1 after one stderr line
// naming the failing call (a dead peer fails the next collective within the timeout).
//
// Build (bench/dist/dist_env.sh, dist_build_harness): cc $(CFLAGS of the build) this file
// $BUILD/libkda.a $(LDLIBS of the build) - the kda build's own flags, NCCL and CUDA included.
//
// Usage: allreduce_bench [--engine nccl|gloo] [--min-bytes B] [--max-bytes B] [--factor F]
//                        [--warmup N] [--min-iters N] [--max-iters N] [--target-ms T]
//                        [--timeout S]
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dist/dist.h" // defines: KdaDist, kda_dist_env_read, kda_dist_open, collectives

#ifdef KDA_HAVE_CUDA
#include <cuda_runtime.h>
#endif

typedef struct {
    int nccl; // 1: NCCL on device buffers; 0: Gloo on host buffers
    int64_t min_bytes, max_bytes, factor;
    int warmup, min_iters, max_iters;
    double target_ms, timeout_s;
} Opts;

static int g_rank = -1;

static void die_(const char *what, const char *msg) {
    fprintf(stderr, "allreduce_bench: rank %d: %s: %s\n", g_rank, what, msg);
    exit(1);
}

// DIST_CK(kda_dist_xxx(..., DIST_ERR)): the call gets the macro's own KdaError; a failure exits
// with its message.
#define DIST_CK(call)                                                                              \
    do {                                                                                           \
        KdaError e_;                                                                               \
        memset(&e_, 0, sizeof e_);                                                                 \
        if ((call) != 0) die_(#call, e_.msg);                                                      \
    } while (0)
#define DIST_ERR (&e_)

#ifdef KDA_HAVE_CUDA
#define CUDA_CK(call)                                                                              \
    do {                                                                                           \
        cudaError_t c_ = (call);                                                                   \
        if (c_ != cudaSuccess) die_(#call, cudaGetErrorString(c_));                                \
    } while (0)
#endif

static double now_ms_(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int64_t parse_bytes_(const char *s) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || v <= 0) die_("size", s);
    if (*end == 'K' || *end == 'k')
        v *= 1024, end++;
    else if (*end == 'M' || *end == 'm')
        v *= 1024 * 1024, end++;
    else if (*end == 'G' || *end == 'g')
        v *= 1024.0 * 1024 * 1024, end++;
    if (*end) die_("size (want N, NK, NM or NG)", s);
    return (int64_t)v;
}

static void parse_(int argc, char **argv, Opts *o) {
    *o = (Opts){.nccl = 0,
                .min_bytes = 1 << 20,
                .max_bytes = (int64_t)2 << 30,
                .factor = 2,
                .warmup = 5,
                .min_iters = 5,
                .max_iters = 200,
                .target_ms = 100,
                .timeout_s = 300};
#ifdef KDA_HAVE_NCCL
    o->nccl = 1;
#endif
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: allreduce_bench [--engine nccl|gloo] [--min-bytes B] [--max-bytes B] "
                   "[--factor F] [--warmup N] [--min-iters N] [--max-iters N] [--target-ms T] "
                   "[--timeout S]\n");
            exit(0);
        }
        if (!v) die_(a, "needs a value");
        i++;
        if (!strcmp(a, "--engine")) {
            if (strcmp(v, "nccl") && strcmp(v, "gloo")) die_("--engine", v);
            o->nccl = !strcmp(v, "nccl");
        } else if (!strcmp(a, "--min-bytes"))
            o->min_bytes = parse_bytes_(v);
        else if (!strcmp(a, "--max-bytes"))
            o->max_bytes = parse_bytes_(v);
        else if (!strcmp(a, "--factor"))
            o->factor = atoi(v);
        else if (!strcmp(a, "--warmup"))
            o->warmup = atoi(v);
        else if (!strcmp(a, "--min-iters"))
            o->min_iters = atoi(v);
        else if (!strcmp(a, "--max-iters"))
            o->max_iters = atoi(v);
        else if (!strcmp(a, "--target-ms"))
            o->target_ms = atof(v);
        else if (!strcmp(a, "--timeout"))
            o->timeout_s = atof(v);
        else
            die_("unknown option", a);
    }
    if (o->factor < 2 || o->min_bytes < 4 || o->max_bytes < o->min_bytes || o->warmup < 0 ||
        o->min_iters < 1 || o->max_iters < o->min_iters || o->timeout_s <= 0)
        die_("options", "need factor >= 2, 4 <= min-bytes <= max-bytes, warmup >= 0, "
                        "1 <= min-iters <= max-iters, timeout > 0");
}

// The buffer and the timed loop of one engine.
typedef struct {
    KdaDist *d;
    int nccl;
    float *buf; // device (nccl) or host (gloo), max_bytes
#ifdef KDA_HAVE_CUDA
    cudaStream_t stream;
    cudaEvent_t ev0, ev1;
#endif
} Bench;

static void allreduce_(Bench *b, int64_t n) {
    if (b->nccl) {
#ifdef KDA_HAVE_CUDA
        DIST_CK(kda_dist_dev_allreduce(b->d, b->buf, n, b->stream, DIST_ERR));
#endif
    } else {
        DIST_CK(kda_dist_allreduce(b->d, b->buf, n, KDA_DIST_F32, KDA_DIST_SUM, DIST_ERR));
    }
}

// ms per all-reduce of n floats over iters calls (this rank's view; the caller takes the max).
static double timed_(Bench *b, int64_t n, int iters) {
    DIST_CK(kda_dist_barrier(b->d, DIST_ERR));
    if (b->nccl) {
#ifdef KDA_HAVE_CUDA
        CUDA_CK(cudaEventRecord(b->ev0, b->stream));
        for (int i = 0; i < iters; i++)
            allreduce_(b, n);
        CUDA_CK(cudaEventRecord(b->ev1, b->stream));
        DIST_CK(kda_dist_dev_wait(b->d, b->stream, DIST_ERR));
        float ms = 0;
        CUDA_CK(cudaEventElapsedTime(&ms, b->ev0, b->ev1));
        return (double)ms / iters;
#endif
    }
    double t0 = now_ms_();
    for (int i = 0; i < iters; i++)
        allreduce_(b, n);
    return (now_ms_() - t0) / iters;
}

// Rank r's r + 1 in every element of the first n; after the sum every element is N(N+1)/2.
static void check_(Bench *b, int64_t n, int rank, int world) {
    float *h = malloc((size_t)n * sizeof *h);
    if (!h) die_("malloc", "check buffer");
    for (int64_t i = 0; i < n; i++)
        h[i] = (float)(rank + 1);
    if (b->nccl) {
#ifdef KDA_HAVE_CUDA
        CUDA_CK(cudaMemcpy(b->buf, h, (size_t)n * sizeof *h, cudaMemcpyHostToDevice));
        // a pageable copy may return before its DMA lands, and our stream does not wait for the
        // legacy stream (cudaStreamNonBlocking)
        CUDA_CK(cudaDeviceSynchronize());
        allreduce_(b, n);
        DIST_CK(kda_dist_dev_wait(b->d, b->stream, DIST_ERR));
        CUDA_CK(cudaMemcpy(h, b->buf, (size_t)n * sizeof *h, cudaMemcpyDeviceToHost));
#endif
    } else {
        memcpy(b->buf, h, (size_t)n * sizeof *h);
        allreduce_(b, n);
        memcpy(h, b->buf, (size_t)n * sizeof *h);
    }
    float want = (float)world * (float)(world + 1) / 2.0f;
    for (int64_t i = 0; i < n; i++)
        if (h[i] != want) {
            char m[128];
            snprintf(m, sizeof m, "element %lld is %g, expected %g", (long long)i, (double)h[i],
                     (double)want);
            die_("all-reduce check", m);
        }
    free(h);
    // zeros for the timed loops: repeated in-place sums must not overflow
    if (b->nccl) {
#ifdef KDA_HAVE_CUDA
        CUDA_CK(cudaMemset(b->buf, 0, (size_t)n * sizeof(float)));
        CUDA_CK(cudaDeviceSynchronize());
#endif
    } else {
        memset(b->buf, 0, (size_t)n * sizeof(float));
    }
}

int main(int argc, char **argv) {
    Opts o;
    parse_(argc, argv, &o);
    KdaDistEnv env;
    DIST_CK(kda_dist_env_read(&env, NULL, DIST_ERR));
    g_rank = env.rank;
#ifndef KDA_HAVE_CUDA
    if (o.nccl) die_("--engine nccl", "this build has no CUDA");
#endif
    Bench b = {.nccl = o.nccl};
    int64_t max_n = o.max_bytes / (int64_t)sizeof(float);
    if (o.nccl) {
#ifdef KDA_HAVE_CUDA
        int ndev = 0;
        CUDA_CK(cudaGetDeviceCount(&ndev));
        if (env.local_rank >= ndev) die_("device", "LOCAL_RANK >= the number of visible GPUs");
        CUDA_CK(cudaSetDevice(env.local_rank));
        DIST_CK(kda_dist_open(&b.d, &env, KDA_DIST_NCCL, env.local_rank, o.timeout_s, DIST_ERR));
        CUDA_CK(cudaStreamCreateWithFlags(&b.stream, cudaStreamNonBlocking));
        kda_dist_set_stream(b.d, b.stream); // the barrier's all-reduce is ordered with ours
        CUDA_CK(cudaEventCreate(&b.ev0));
        CUDA_CK(cudaEventCreate(&b.ev1));
        CUDA_CK(cudaMalloc((void **)&b.buf, (size_t)max_n * sizeof(float)));
        CUDA_CK(cudaMemset(b.buf, 0, (size_t)max_n * sizeof(float)));
#endif
    } else {
        DIST_CK(kda_dist_open(&b.d, &env, KDA_DIST_HOST, -1, o.timeout_s, DIST_ERR));
        b.buf = calloc((size_t)max_n, sizeof(float));
        if (!b.buf) die_("calloc", "buffer");
    }
    int world = kda_dist_world(b.d);
    if (env.rank == 0)
        fprintf(stderr, "allreduce_bench: %d ranks (%s, launched by %s), %lld .. %lld bytes\n",
                world, kda_dist_engine(b.d), env.launcher, (long long)o.min_bytes,
                (long long)o.max_bytes);
    check_(&b, o.min_bytes / (int64_t)sizeof(float), env.rank, world);
    for (int64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= o.factor) {
        int64_t n = bytes / (int64_t)sizeof(float);
        // warm-up, then the iteration count every rank agrees on (the slowest rank's estimate)
        double est = o.warmup > 0 ? timed_(&b, n, o.warmup) : timed_(&b, n, 1);
        DIST_CK(kda_dist_allreduce(b.d, &est, 1, KDA_DIST_F64, KDA_DIST_MAX, DIST_ERR));
        double want = est > 0 ? o.target_ms / est : o.max_iters;
        int iters = want < o.min_iters ? o.min_iters : want > o.max_iters ? o.max_iters : (int)want;
        double ms = timed_(&b, n, iters);
        DIST_CK(kda_dist_allreduce(b.d, &ms, 1, KDA_DIST_F64, KDA_DIST_MAX, DIST_ERR));
        double alg = (double)bytes / (ms / 1e3) / 1e9;
        double bus = alg * 2.0 * (world - 1) / world;
        if (env.rank == 0) {
            printf("{\"impl\": \"kda\", \"engine\": \"%s\", \"op\": \"all_reduce\", "
                   "\"dtype\": \"fp32\", \"world\": %d, \"bytes\": %lld, \"iters\": %d, "
                   "\"ms\": %.6f, \"algbw_GBps\": %.3f, \"busbw_GBps\": %.3f}\n",
                   kda_dist_engine(b.d), world, (long long)bytes, iters, ms, alg, bus);
            fflush(stdout);
        }
        if (bytes > INT64_MAX / o.factor) break;
    }
#ifdef KDA_HAVE_CUDA
    if (o.nccl) {
        CUDA_CK(cudaFree(b.buf));
        CUDA_CK(cudaEventDestroy(b.ev0));
        CUDA_CK(cudaEventDestroy(b.ev1));
        kda_dist_set_stream(b.d, NULL);
        kda_dist_close(b.d);
        CUDA_CK(cudaStreamDestroy(b.stream));
        return 0;
    }
#endif
    free(b.buf);
    kda_dist_close(b.d);
    return 0;
}
