// dist_async.c - the communication thread of CPU ranks (contract in dist_async.h): a FIFO of
// (buffer, length) jobs under one mutex; the thread pops one job at a time and all-reduces it
// outside the lock.
#include "dist/dist_async.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h" // defines: kda_malloc, kda_realloc

typedef struct {
    float *buf;
    int64_t n;
} Job;

struct KdaDistAsync {
    KdaDist *dist;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv; // signalled when a job is queued, one finishes, or stop is asked
    Job *jobs;         // [cap] ring: jobs [head, head + count)
    int cap, head, count;
    int busy; // the thread is running a job (popped, not finished)
    int stop;
    int failed; // a job failed: err holds why; later jobs are dropped
    KdaError err;
};

static void *run_(void *arg) {
    KdaDistAsync *a = arg;
    pthread_mutex_lock(&a->mu);
    for (;;) {
        while (!a->stop && a->count == 0)
            pthread_cond_wait(&a->cv, &a->mu);
        if (a->count == 0) break; // stop, nothing left
        Job j = a->jobs[a->head];
        a->head = (a->head + 1) % a->cap;
        a->count--;
        int skip = a->failed;
        a->busy = 1;
        pthread_mutex_unlock(&a->mu);
        KdaError e = {{0}};
        int rc = skip ? 0 : kda_dist_allreduce(a->dist, j.buf, j.n, KDA_DIST_F32, KDA_DIST_SUM, &e);
        pthread_mutex_lock(&a->mu);
        a->busy = 0;
        if (rc && !a->failed) a->failed = 1, a->err = e;
        pthread_cond_broadcast(&a->cv);
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

int kda_dist_async_start(KdaDistAsync **out, KdaDist *d, KdaError *err) {
    KdaDistAsync *a = kda_calloc(1, sizeof *a);
    a->dist = d;
    a->cap = 16;
    a->jobs = kda_malloc((size_t)a->cap * sizeof *a->jobs);
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    int e = pthread_create(&a->thread, NULL, run_, a);
    if (e) {
        pthread_mutex_destroy(&a->mu);
        pthread_cond_destroy(&a->cv);
        free(a->jobs);
        free(a);
        *out = NULL;
        return kda_fail(err, "data parallel: cannot start the communication thread: %s",
                        strerror(e));
    }
    *out = a;
    return 0;
}

int kda_dist_async_sum(KdaDistAsync *a, float *buf, int64_t n, KdaError *err) {
    pthread_mutex_lock(&a->mu);
    if (a->failed) {
        *err = a->err;
        pthread_mutex_unlock(&a->mu);
        return -1;
    }
    if (a->count == a->cap) { // grow the ring, unrolled to start at 0
        Job *j = kda_malloc((size_t)(2 * a->cap) * sizeof *j);
        for (int i = 0; i < a->count; i++)
            j[i] = a->jobs[(a->head + i) % a->cap];
        free(a->jobs);
        a->jobs = j;
        a->head = 0;
        a->cap *= 2;
    }
    a->jobs[(a->head + a->count) % a->cap] = (Job){buf, n};
    a->count++;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    return 0;
}

int kda_dist_async_wait(KdaDistAsync *a, KdaError *err) {
    pthread_mutex_lock(&a->mu);
    while (a->count > 0 || a->busy)
        pthread_cond_wait(&a->cv, &a->mu);
    int failed = a->failed;
    if (failed) *err = a->err;
    pthread_mutex_unlock(&a->mu);
    return failed ? -1 : 0;
}

void kda_dist_async_stop(KdaDistAsync *a) {
    if (!a) return;
    pthread_mutex_lock(&a->mu);
    a->stop = 1;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    pthread_join(a->thread, NULL);
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->cv);
    free(a->jobs);
    free(a);
}
