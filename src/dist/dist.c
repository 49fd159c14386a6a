// dist.c - launch environment, rendezvous join, the Gloo and NCCL engines behind one
// communicator, and the fault messages (contract in dist.h).
#include "dist/dist.h"

#include <ctype.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/util.h"      // defines: now_seconds
#include "dist/gloo_shim.h" // defines: kda_gloo_* (KDA_HAVE_GLOO builds)
#include "dist/store.h"     // defines: KdaStore, kda_store_*

#ifdef KDA_HAVE_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>
#endif

struct KdaDist {
    KdaDistEnv env;
    KdaDistKind kind;
    double timeout_s;
    KdaStore *store;
    KdaGloo *gloo;
    int failed;
#ifdef KDA_HAVE_NCCL
    ncclComm_t nccl;
    void *d_scratch; // [scratch_bytes] staging of host-buffer collectives
    size_t scratch_bytes;
    cudaStream_t stream; // host-buffer collectives' stream
    cudaStream_t own;    // the communicator's own stream (stream unless set_stream changed it)
#endif
};

// ---------------------------------------------------------------------------------------------
// Launch environment

static const char *env_(KdaGetenv get, const char *name) {
    const char *v = get ? get(name) : getenv(name);
    return v && *v ? v : NULL;
}

static int int_var_(KdaGetenv get, const char *name, int lo, int *out, KdaError *err) {
    const char *v = env_(get, name);
    if (!v) return kda_fail(err, "launch: %s is not set", name);
    char *end;
    long x = strtol(v, &end, 10);
    if (*end || x < lo || x > 1 << 20)
        return kda_fail(err, "launch: %s=\"%.40s\": expected an integer >= %d", name, v, lo);
    *out = (int)x;
    return 0;
}

int kda_slurm_first_host(const char *nodelist, char *out, size_t cap, KdaError *err) {
    size_t k = 0;
    const char *p = nodelist;
    while (*p && *p != ',' && *p != '[' && k + 1 < cap)
        out[k++] = *p++;
    if (*p == '[') { // prefix[07-09,12]: the first number of the range, zero padding kept
        p++;
        while (isdigit((unsigned char)*p) && k + 1 < cap)
            out[k++] = *p++;
        if (*p != '-' && *p != ',' && *p != ']')
            return kda_fail(err, "launch: SLURM node list \"%.60s\": cannot read its first host",
                            nodelist);
    }
    out[k] = 0;
    if (!k) return kda_fail(err, "launch: SLURM node list \"%.60s\" is empty", nodelist);
    return 0;
}

static int master_(KdaDistEnv *e, KdaGetenv get, const char *fallback_host, KdaError *err) {
    const char *a = env_(get, "MASTER_ADDR");
    if (!a) a = fallback_host;
    if (!a)
        return kda_fail(err, "launch: MASTER_ADDR is not set (the host of rank 0, reachable "
                             "from every rank)");
    snprintf(e->master_addr, sizeof e->master_addr, "%s", a);
    e->master_port = 29500;
    if (env_(get, "MASTER_PORT") && int_var_(get, "MASTER_PORT", 1, &e->master_port, err))
        return -1;
    if (e->master_port > 65535)
        return kda_fail(err, "launch: MASTER_PORT=%d: expected a TCP port (1-65535)",
                        e->master_port);
    e->rdzv_port = e->master_port;
    e->rdzv_port_from = "MASTER_PORT";
    if (env_(get, "KDA_RDZV_PORT")) { // the user's choice wins
        if (int_var_(get, "KDA_RDZV_PORT", 1, &e->rdzv_port, err)) return -1;
        if (e->rdzv_port > 65535)
            return kda_fail(err, "launch: KDA_RDZV_PORT=%d: expected a TCP port (1-65535)",
                            e->rdzv_port);
        e->rdzv_port_from = "KDA_RDZV_PORT";
        return 0;
    }
    // torchrun's elastic agent already serves its own TCP store on MASTER_PORT and tells its
    // workers so (torch's workers then join that store as clients); kda's rendezvous speaks
    // its own protocol, so rank 0 serves it on the next port instead of failing to bind.
    const char *agent = env_(get, "TORCHELASTIC_USE_AGENT_STORE");
    if (agent && !strcmp(agent, "True")) {
        if (e->master_port == 65535)
            return kda_fail(err, "launch: MASTER_PORT=65535 is torchrun's store; kda's rendezvous "
                                 "needs the next port: set KDA_RDZV_PORT");
        e->rdzv_port = e->master_port + 1;
        e->rdzv_port_from = "MASTER_PORT+1 (torchrun's agent serves MASTER_PORT)";
    }
    return 0;
}

static int check_ranks_(const KdaDistEnv *e, const char *rv, const char *wv, KdaError *err) {
    if (e->rank >= e->world)
        return kda_fail(err, "launch: %s=%d is not below %s=%d", rv, e->rank, wv, e->world);
    if (e->local_rank >= e->local_world)
        return kda_fail(err, "launch: the local rank %d is not below the local world size %d",
                        e->local_rank, e->local_world);
    return 0;
}

int kda_dist_env_read(KdaDistEnv *e, KdaGetenv get, KdaError *err) {
    memset(e, 0, sizeof *e);
    e->world = e->local_world = 1;
    e->launcher = "none";
    snprintf(e->master_addr, sizeof e->master_addr, "127.0.0.1");
    e->master_port = e->rdzv_port = 29500;
    e->rdzv_port_from = "MASTER_PORT";
    if (env_(get, "RANK") || env_(get, "WORLD_SIZE")) {
        e->launcher = "torchrun";
        if (int_var_(get, "RANK", 0, &e->rank, err) ||
            int_var_(get, "WORLD_SIZE", 1, &e->world, err))
            return -1;
        e->local_world = e->world;
        if (env_(get, "LOCAL_RANK") && int_var_(get, "LOCAL_RANK", 0, &e->local_rank, err))
            return -1;
        if (env_(get, "LOCAL_WORLD_SIZE") &&
            int_var_(get, "LOCAL_WORLD_SIZE", 1, &e->local_world, err))
            return -1;
        if (e->world > 1 && master_(e, get, NULL, err)) return -1;
        return check_ranks_(e, "RANK", "WORLD_SIZE", err);
    }
    if (env_(get, "OMPI_COMM_WORLD_RANK")) {
        e->launcher = "mpirun";
        if (int_var_(get, "OMPI_COMM_WORLD_RANK", 0, &e->rank, err) ||
            int_var_(get, "OMPI_COMM_WORLD_SIZE", 1, &e->world, err) ||
            int_var_(get, "OMPI_COMM_WORLD_LOCAL_RANK", 0, &e->local_rank, err) ||
            int_var_(get, "OMPI_COMM_WORLD_LOCAL_SIZE", 1, &e->local_world, err))
            return -1;
        if (e->world > 1 && !env_(get, "MASTER_ADDR") && e->local_world != e->world)
            return kda_fail(err, "launch: mpirun over several nodes needs MASTER_ADDR (the host "
                                 "of rank 0), e.g. mpirun -x MASTER_ADDR=node1 ...");
        if (e->world > 1 && master_(e, get, "127.0.0.1", err)) return -1;
        return check_ranks_(e, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", err);
    }
    if (env_(get, "SLURM_PROCID")) {
        e->launcher = "slurm";
        if (int_var_(get, "SLURM_PROCID", 0, &e->rank, err) ||
            int_var_(get, "SLURM_NTASKS", 1, &e->world, err))
            return -1;
        if (env_(get, "SLURM_LOCALID") && int_var_(get, "SLURM_LOCALID", 0, &e->local_rank, err))
            return -1;
        // SLURM_NTASKS_PER_NODE may read "4" or "4(x2)": the leading count is ours.
        const char *tpn = env_(get, "LOCAL_WORLD_SIZE");
        if (!tpn) tpn = env_(get, "SLURM_NTASKS_PER_NODE");
        e->local_world = tpn ? atoi(tpn) : e->world;
        if (e->local_world < 1) e->local_world = e->world;
        if (e->local_rank >= e->local_world) e->local_world = e->local_rank + 1;
        char host[256];
        const char *nl = env_(get, "SLURM_JOB_NODELIST");
        if (!nl) nl = env_(get, "SLURM_NODELIST");
        const char *fallback = NULL;
        if (nl && !env_(get, "MASTER_ADDR")) {
            if (kda_slurm_first_host(nl, host, sizeof host, err)) return -1;
            fallback = host;
        }
        if (e->world > 1 && master_(e, get, fallback, err)) return -1;
        return check_ranks_(e, "SLURM_PROCID", "SLURM_NTASKS", err);
    }
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Fault messages

// "rank 2 is hung or slow (at iteration 5, others at 6)" from the progress marks, or a generic
// phrase when the marks do not tell.
static void behind_(KdaDist *d, char *out, size_t cap) {
    snprintf(out, cap, "one is hung or slower than the timeout");
    int w = d->env.world;
    int64_t *it = kda_calloc((size_t)w, sizeof *it), lo = INT64_MAX, hi = INT64_MIN;
    KdaError e;
    for (int r = 0; r < w; r++) {
        char key[32];
        void *v;
        size_t n;
        snprintf(key, sizeof key, "progress/%d", r);
        if (kda_store_peek(d->store, key, &v, &n, 5.0, &e) != 1) {
            free(it);
            return;
        }
        it[r] = atoll((const char *)v);
        free(v);
        lo = it[r] < lo ? it[r] : lo;
        hi = it[r] > hi ? it[r] : hi;
    }
    if (lo < hi) {
        char list[256];
        size_t k = 0;
        int m = 0;
        for (int r = 0; r < w && k + 16 < sizeof list; r++)
            if (it[r] == lo)
                k += (size_t)snprintf(list + k, sizeof list - k, "%s%d", m++ ? ", " : "", r);
        snprintf(out, cap, "rank%s %s %s hung or slow (at iteration %lld, others at %lld)",
                 m > 1 ? "s" : "", list, m > 1 ? "are" : "is", (long long)lo, (long long)hi);
    }
    free(it);
}

// Appends to err which ranks are gone, from the rendezvous' view. The server may see a killed
// peer's connection close a moment after the engine did, so look for up to ~3 s.
// Ranks in state `letter` of the status string st, as "2" or "0, 2" in out; returns the count.
static int ranks_in_(const char *st, int world, char letter, char *out, size_t cap) {
    size_t k = 0;
    int n = 0;
    out[0] = 0;
    for (int r = 0; r < world && st[r] && k + 16 < cap; r++)
        if (st[r] == letter) k += (size_t)snprintf(out + k, cap - k, "%s%d", n++ ? ", " : "", r);
    return n;
}

// Rewrites err (a failed collective) to name the cause, from the rendezvous' view: ranks whose
// connection closed without a goodbye (killed, crashed) first; the server may see that a moment
// after the engine did, so look for ~3 s. Ranks that left with a goodbye failed on their own
// first (often because of the dead one). Else the progress marks name a hung rank.
__attribute__((unused)) static int explain_(KdaDist *d, KdaError *err) {
    char what[sizeof err->msg];
    snprintf(what, sizeof what, "%s", err->msg);
    d->failed = 1;
    if (!d->store) return -1;
    char st[4096], list[1024];
    KdaError e;
    for (int tries = 0; tries < 30; tries++) {
        if (kda_store_status(d->store, st, sizeof st, 5.0, &e))
            return kda_fail(err,
                            "rank %d: %s; rank 0 (the rendezvous at %s:%d) is gone: it exited, "
                            "crashed or was killed",
                            d->env.rank, what, d->env.master_addr, d->env.rdzv_port);
        int n = ranks_in_(st, d->env.world, KDA_STORE_DIED, list, sizeof list);
        if (n)
            return kda_fail(err, "rank %d: %s; rank%s %s %s gone (exited, crashed or was killed)",
                            d->env.rank, what, n > 1 ? "s" : "", list, n > 1 ? "are" : "is");
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    int n = ranks_in_(st, d->env.world, KDA_STORE_LEFT, list, sizeof list);
    if (n)
        return kda_fail(err, "rank %d: %s; rank%s %s left early (failed first: see %s log)",
                        d->env.rank, what, n > 1 ? "s" : "", list, n > 1 ? "their" : "its");
    char behind[512];
    behind_(d, behind, sizeof behind);
    return kda_fail(err,
                    "rank %d: %s; every rank is still connected: %s (timeout %.0f s, "
                    "distributed_timeout_minutes)",
                    d->env.rank, what, behind, d->timeout_s);
}

// Waits until every rank said hello, else fails naming the absent ones.
static int join_(KdaDist *d, KdaError *err) {
    double t_end = now_seconds() + d->timeout_s;
    char st[4096];
    for (;;) {
        if (kda_store_status(d->store, st, sizeof st, d->timeout_s, err)) return -1;
        int absent = 0;
        for (int r = 0; r < d->env.world; r++)
            absent += st[r] == KDA_STORE_ABSENT;
        if (!absent) return 0;
        if (now_seconds() >= t_end) {
            char list[1024];
            size_t k = 0;
            int n = 0;
            for (int r = 0; r < d->env.world && k + 16 < sizeof list; r++)
                if (st[r] == KDA_STORE_ABSENT)
                    k += (size_t)snprintf(list + k, sizeof list - k, "%s%d", n++ ? ", " : "", r);
            return kda_fail(err, "rendezvous at %s:%d: rank%s %s of %d did not join within %.0f s",
                            d->env.master_addr, d->env.rdzv_port, absent > 1 ? "s" : "", list,
                            d->env.world, d->timeout_s);
        }
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

// ---------------------------------------------------------------------------------------------
// NCCL

#ifdef KDA_HAVE_NCCL

#define NCCL_TRY(d, call, err)                                                                     \
    do {                                                                                           \
        ncclResult_t r_ = (call);                                                                  \
        if (r_ != ncclSuccess) {                                                                   \
            kda_fail(err, "%s:%d: %s: %s", __FILE__, __LINE__, #call, ncclGetErrorString(r_));     \
            return explain_(d, err);                                                               \
        }                                                                                          \
    } while (0)

#define CUDA_TRY(call, err)                                                                        \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            return kda_fail(err, "%s:%d: %s: %s", __FILE__, __LINE__, #call,                       \
                            cudaGetErrorString(e_));                                               \
    } while (0)

static int nccl_open_(KdaDist *d, int device, KdaError *err) {
    setenv("NCCL_NVLS_ENABLE", "0", 0); // NVLink multicast off (never cuMulticastCreate)
    CUDA_TRY(cudaSetDevice(device), err);
    ncclUniqueId id;
    if (d->env.rank == 0) {
        NCCL_TRY(d, ncclGetUniqueId(&id), err);
        if (kda_store_set(d->store, "nccl/id", &id, sizeof id, err)) return -1;
    } else {
        void *v;
        size_t n;
        if (kda_store_get(d->store, "nccl/id", &v, &n, d->timeout_s, err)) return -1;
        if (n != sizeof id) {
            free(v);
            return kda_fail(err, "rendezvous: the NCCL id has %zu bytes, expected %zu", n,
                            sizeof id);
        }
        memcpy(&id, v, sizeof id);
        free(v);
    }
    CUDA_TRY(cudaStreamCreateWithFlags(&d->own, cudaStreamNonBlocking), err);
    d->stream = d->own;
    // Non-blocking init: a missing peer surfaces through the async-error poll with the timeout.
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(&d->nccl, d->env.world, id, d->env.rank, &cfg);
    if (r != ncclSuccess && r != ncclInProgress) {
        kda_fail(err, "ncclCommInitRankConfig: %s", ncclGetErrorString(r));
        return explain_(d, err);
    }
    double t_end = now_seconds() + d->timeout_s;
    for (;;) {
        ncclResult_t a;
        NCCL_TRY(d, ncclCommGetAsyncError(d->nccl, &a), err);
        if (a == ncclSuccess) break;
        if (a != ncclInProgress || now_seconds() > t_end) {
            ncclCommAbort(d->nccl);
            d->nccl = NULL;
            kda_fail(err, "NCCL communicator init: %s",
                     a == ncclInProgress ? "timed out" : ncclGetErrorString(a));
            return explain_(d, err);
        }
        struct timespec ts = {0, 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

// A non-blocking communicator may answer ncclInProgress while it enqueues; NCCL wants the state
// back at ncclSuccess before the next call, so poll it (bounded by the timeout).
static int nccl_ok_(KdaDist *d, ncclResult_t r, const char *what, KdaError *err) {
    double t_end = now_seconds() + d->timeout_s;
    while (r == ncclInProgress) {
        if (now_seconds() > t_end) {
            kda_fail(err, "%s: still in progress after %.0f s", what, d->timeout_s);
            ncclCommAbort(d->nccl);
            d->nccl = NULL;
            return explain_(d, err);
        }
        if (ncclCommGetAsyncError(d->nccl, &r) != ncclSuccess) r = ncclInternalError;
    }
    if (r == ncclSuccess) return 0;
    kda_fail(err, "%s: %s", what, ncclGetErrorString(r));
    return explain_(d, err);
}

// 1 when the rendezvous says a peer is gone without a goodbye (killed, crashed) or cannot be
// reached (rank 0, its host, is gone): a collective with that peer can never finish. Ranks that
// left with a goodbye are not counted: one may leave a moment before this rank's stream reports
// the last collective complete.
static int peer_gone_(KdaDist *d) {
    char st[4096], list[1024];
    KdaError e;
    if (!d->store) return 0;
    if (kda_store_status(d->store, st, sizeof st, 2.0, &e)) return 1;
    return ranks_in_(st, d->env.world, KDA_STORE_DIED, list, sizeof list) > 0;
}

// NCCL has no view of a peer process that died inside a collective: its kernels spin until the
// timeout. So besides NCCL's async error and the timeout, the wait asks the rendezvous once a
// second whether a peer is gone, and then aborts at once with the peer named (explain_).
int kda_dist_dev_wait(KdaDist *d, void *stream, KdaError *err) {
    double t_end = now_seconds() + d->timeout_s, t_ask = now_seconds() + 1.0;
    for (;;) {
        cudaError_t q = cudaStreamQuery((cudaStream_t)stream);
        if (q == cudaSuccess) return 0;
        if (q != cudaErrorNotReady)
            return kda_fail(err, "rank %d: waiting for the collectives: %s", d->env.rank,
                            cudaGetErrorString(q));
        ncclResult_t a = ncclSuccess;
        ncclCommGetAsyncError(d->nccl, &a);
        double now = now_seconds();
        int gone = 0;
        if (now > t_ask) {
            gone = peer_gone_(d);
            t_ask = now_seconds() + 1.0;
        }
        if ((a != ncclSuccess && a != ncclInProgress) || gone || now > t_end) {
            ncclCommAbort(d->nccl);
            d->nccl = NULL;
            kda_fail(err, "NCCL collective %s",
                     a != ncclSuccess && a != ncclInProgress ? ncclGetErrorString(a)
                     : gone                                  ? "stopped: a peer is gone"
                                                             : "timed out");
            return explain_(d, err);
        }
        struct timespec ts = {0, 50 * 1000};
        nanosleep(&ts, NULL);
    }
}

int kda_dist_dev_allreduce(KdaDist *d, float *d_buf, int64_t n, void *stream, KdaError *err) {
    if (d->kind != KDA_DIST_NCCL) return kda_fail(err, "dist: device all-reduce needs NCCL");
    return nccl_ok_(
        d,
        ncclAllReduce(d_buf, d_buf, (size_t)n, ncclFloat32, ncclSum, d->nccl, (cudaStream_t)stream),
        "ncclAllReduce", err);
}

int kda_dist_dev_reduce_scatter(KdaDist *d, const float *d_in, float *d_out, int64_t n,
                                void *stream, KdaError *err) {
    if (d->kind != KDA_DIST_NCCL) return kda_fail(err, "dist: device reduce-scatter needs NCCL");
    return nccl_ok_(d,
                    ncclReduceScatter(d_in, d_out, (size_t)n, ncclFloat32, ncclSum, d->nccl,
                                      (cudaStream_t)stream),
                    "ncclReduceScatter", err);
}

int kda_dist_dev_allgather(KdaDist *d, const float *d_in, float *d_out, int64_t n, void *stream,
                           KdaError *err) {
    if (d->kind != KDA_DIST_NCCL) return kda_fail(err, "dist: device all-gather needs NCCL");
    return nccl_ok_(
        d, ncclAllGather(d_in, d_out, (size_t)n, ncclFloat32, d->nccl, (cudaStream_t)stream),
        "ncclAllGather", err);
}

// Host-buffer collectives over NCCL: through the device scratch, on d->stream.
#define SCRATCH_KEEP_BYTES ((size_t)64 << 20)
static int nccl_scratch_(KdaDist *d, size_t bytes, KdaError *err) {
    if (bytes <= d->scratch_bytes) return 0;
    if (d->d_scratch) cudaFree(d->d_scratch);
    d->d_scratch = NULL;
    d->scratch_bytes = 0;
    CUDA_TRY(cudaMalloc(&d->d_scratch, bytes), err);
    d->scratch_bytes = bytes;
    return 0;
}

static int nccl_host_(KdaDist *d, int what, void *out, const void *in, size_t n_in, size_t n_out,
                      ncclDataType_t t, ncclRedOp_t op, int root, KdaError *err) {
    if (nccl_scratch_(d, n_in + n_out, err)) return -1;
    char *sin = d->d_scratch, *sout = sin + n_in;
    CUDA_TRY(cudaMemcpyAsync(sin, in, n_in, cudaMemcpyHostToDevice, d->stream), err);
    size_t count = n_in / (t == ncclFloat64 ? 8 : t == ncclFloat32 ? 4 : 1);
    ncclResult_t r = what == 0   ? ncclAllReduce(sin, sout, count, t, op, d->nccl, d->stream)
                     : what == 1 ? ncclAllGather(sin, sout, count, t, d->nccl, d->stream)
                                 : ncclBroadcast(sin, sout, count, t, root, d->nccl, d->stream);
    if (nccl_ok_(d, r, "NCCL host-buffer collective", err)) return -1;
    CUDA_TRY(cudaMemcpyAsync(out, sout, n_out, cudaMemcpyDeviceToHost, d->stream), err);
    if (kda_dist_dev_wait(d, d->stream, err)) return -1;
    // A large staging (the start-up broadcast of parameters and moments: 2 x 4 B/parameter) is
    // not kept for the whole run; the per-step scalars stay in a small one.
    if (d->scratch_bytes > SCRATCH_KEEP_BYTES) {
        cudaFree(d->d_scratch);
        d->d_scratch = NULL;
        d->scratch_bytes = 0;
    }
    return 0;
}

static void nccl_close_(KdaDist *d) {
    if (d->nccl) {
        if (d->failed)
            ncclCommAbort(d->nccl);
        else
            ncclCommDestroy(d->nccl);
    }
    if (d->d_scratch) cudaFree(d->d_scratch);
    if (d->own) cudaStreamDestroy(d->own);
}

void kda_dist_set_stream(KdaDist *d, void *stream) {
    d->stream = stream ? (cudaStream_t)stream : d->own;
}

#else // !KDA_HAVE_NCCL

void kda_dist_set_stream(KdaDist *d, void *stream) {
    (void)d, (void)stream;
}

static const char *no_nccl_ = "this build has no NCCL (install NCCL or point NCCL_HOME at it and "
                              "rebuild with CUDA)";

int kda_dist_dev_wait(KdaDist *d, void *stream, KdaError *err) {
    (void)d, (void)stream;
    return kda_fail(err, "dist: %s", no_nccl_);
}
int kda_dist_dev_allreduce(KdaDist *d, float *d_buf, int64_t n, void *stream, KdaError *err) {
    (void)d, (void)d_buf, (void)n, (void)stream;
    return kda_fail(err, "dist: %s", no_nccl_);
}
int kda_dist_dev_reduce_scatter(KdaDist *d, const float *d_in, float *d_out, int64_t n,
                                void *stream, KdaError *err) {
    (void)d, (void)d_in, (void)d_out, (void)n, (void)stream;
    return kda_fail(err, "dist: %s", no_nccl_);
}
int kda_dist_dev_allgather(KdaDist *d, const float *d_in, float *d_out, int64_t n, void *stream,
                           KdaError *err) {
    (void)d, (void)d_in, (void)d_out, (void)n, (void)stream;
    return kda_fail(err, "dist: %s", no_nccl_);
}

#endif

// ---------------------------------------------------------------------------------------------
// Open / close

__attribute__((unused)) static int engine_missing_(const KdaDistEnv *env, KdaDistKind kind,
                                                   KdaError *err) {
    const char *how = kind == KDA_DIST_NCCL
                          ? "GPU ranks need NCCL, and this build has none (build with CUDA and "
                            "NCCL; NCCL_HOME=... make)"
                          : "CPU ranks need Gloo, and this build has none (install libgloo-dev, "
                            "tools/install-deps.sh, and rebuild)";
    return kda_fail(err,
                    "world size %d (rank %d, from the %s environment) cannot run: %s; refusing "
                    "to train as a lone single process",
                    env->world, env->rank, env->launcher, how);
}

// A rendezvous that could not be served or reached: the message says where its port came from
// (MASTER_PORT, MASTER_PORT + 1 under torchrun's agent, KDA_RDZV_PORT), so the user knows which
// variable to change.
static void port_origin_(const KdaDist *d, KdaError *err) {
    if (!d->env.rdzv_port_from) return; // a hand-made env
    char what[sizeof err->msg];
    snprintf(what, sizeof what, "%s", err->msg);
    kda_fail(err, "%s [port %d: %s; KDA_RDZV_PORT=N chooses another]", what, d->env.rdzv_port,
             d->env.rdzv_port_from);
}

int kda_dist_open(KdaDist **out, const KdaDistEnv *env, KdaDistKind kind, int device,
                  double timeout_s, KdaError *err) {
    *out = NULL;
#ifndef KDA_HAVE_GLOO
    if (kind == KDA_DIST_HOST && env->world > 1) return engine_missing_(env, kind, err);
#endif
#ifndef KDA_HAVE_NCCL
    if (kind == KDA_DIST_NCCL) return engine_missing_(env, kind, err);
    (void)device;
#endif
    // A write to a dead peer's socket (Gloo's writev) must fail with EPIPE, not kill this rank
    // with SIGPIPE before it can say which rank is gone.
    signal(SIGPIPE, SIG_IGN);
    KdaDist *d = kda_calloc(1, sizeof *d);
    d->env = *env;
    if (d->env.rdzv_port <= 0) d->env.rdzv_port = d->env.master_port; // a hand-made env
    d->kind = kind;
    d->timeout_s = timeout_s;
    // A lone Gloo rank needs no rendezvous: every collective is the identity.
    int rv = env->world > 1 || kind == KDA_DIST_NCCL;
    if (rv && kda_store_open(&d->store, env->master_addr, d->env.rdzv_port, env->rank, env->world,
                             timeout_s, err)) {
        port_origin_(d, err);
        goto fail;
    }
    if (rv && join_(d, err)) goto fail;
#ifdef KDA_HAVE_GLOO
    if (kind == KDA_DIST_HOST && env->world > 1) {
        char local[64];
        kda_store_local_addr(d->store, local, sizeof local);
        if (kda_gloo_open(&d->gloo, d->store, env->rank, env->world, local, timeout_s, err)) {
            explain_(d, err);
            goto fail;
        }
    }
#endif
#ifdef KDA_HAVE_NCCL
    if (kind == KDA_DIST_NCCL && nccl_open_(d, device, err)) goto fail;
#endif
    *out = d;
    return 0;
fail:
    d->failed = 1;
    kda_dist_close(d);
    return -1;
}

void kda_dist_close(KdaDist *d) {
    if (!d) return;
#ifdef KDA_HAVE_GLOO
    kda_gloo_close(d->gloo);
#endif
#ifdef KDA_HAVE_NCCL
    nccl_close_(d);
#endif
    // rank 0 serves the others' fault queries a little longer after a failure
    kda_store_close(d->store, d->failed ? 5.0 : 10.0);
    free(d);
}

int kda_dist_mark_progress(KdaDist *d, int64_t iteration, KdaError *err) {
    if (!d->store) return 0;
    char key[32], v[32];
    snprintf(key, sizeof key, "progress/%d", d->env.rank);
    snprintf(v, sizeof v, "%lld", (long long)iteration);
    return kda_store_set(d->store, key, v, strlen(v) + 1, err);
}

int kda_dist_rank(const KdaDist *d) {
    return d->env.rank;
}
int kda_dist_world(const KdaDist *d) {
    return d->env.world;
}
const char *kda_dist_engine(const KdaDist *d) {
    return d->kind == KDA_DIST_NCCL ? "nccl" : "gloo";
}

// ---------------------------------------------------------------------------------------------
// Host-buffer collectives

__attribute__((unused)) static size_t type_size_(KdaDistType t) {
    return t == KDA_DIST_F64 ? 8 : 4;
}

int kda_dist_allreduce(KdaDist *d, void *buf, int64_t n, KdaDistType t, KdaDistOp op,
                       KdaError *err) {
    if (d->failed) return kda_fail(err, "dist: the communicator failed earlier");
    if (n == 0 || (d->env.world == 1 && d->kind != KDA_DIST_NCCL)) return 0;
#ifdef KDA_HAVE_NCCL
    if (d->kind == KDA_DIST_NCCL)
        return nccl_host_(d, 0, buf, buf, (size_t)n * type_size_(t), (size_t)n * type_size_(t),
                          t == KDA_DIST_F64 ? ncclFloat64 : ncclFloat32,
                          op == KDA_DIST_MAX ? ncclMax : ncclSum, 0, err);
#endif
#ifdef KDA_HAVE_GLOO
    if (kda_gloo_allreduce(d->gloo, buf, (size_t)n, (int)t, (int)op, err)) return explain_(d, err);
    return 0;
#else
    (void)buf, (void)t, (void)op;
    return kda_fail(err, "dist: no collective engine");
#endif
}

int kda_dist_allgather(KdaDist *d, const float *in, float *out, int64_t n, KdaError *err) {
    if (d->failed) return kda_fail(err, "dist: the communicator failed earlier");
    if (d->env.world == 1 && d->kind != KDA_DIST_NCCL) {
        memmove(out, in, (size_t)n * sizeof(float));
        return 0;
    }
#ifdef KDA_HAVE_NCCL
    if (d->kind == KDA_DIST_NCCL)
        return nccl_host_(d, 1, out, in, (size_t)n * 4, (size_t)n * 4 * (size_t)d->env.world,
                          ncclFloat32, ncclSum, 0, err);
#endif
#ifdef KDA_HAVE_GLOO
    if (kda_gloo_allgather(d->gloo, in, out, (size_t)n * sizeof(float), err))
        return explain_(d, err);
    return 0;
#else
    return kda_fail(err, "dist: no collective engine");
#endif
}

int kda_dist_broadcast(KdaDist *d, void *buf, size_t bytes, int root, KdaError *err) {
    if (d->failed) return kda_fail(err, "dist: the communicator failed earlier");
    if (d->env.world == 1 && d->kind != KDA_DIST_NCCL) return 0;
#ifdef KDA_HAVE_NCCL
    if (d->kind == KDA_DIST_NCCL)
        return nccl_host_(d, 2, buf, buf, bytes, bytes, ncclUint8, ncclSum, root, err);
#endif
#ifdef KDA_HAVE_GLOO
    if (kda_gloo_broadcast(d->gloo, buf, bytes, root, err)) return explain_(d, err);
    return 0;
#else
    (void)buf, (void)bytes, (void)root;
    return kda_fail(err, "dist: no collective engine");
#endif
}

int kda_dist_barrier(KdaDist *d, KdaError *err) {
    if (d->failed) return kda_fail(err, "dist: the communicator failed earlier");
    if (d->env.world == 1 && d->kind != KDA_DIST_NCCL) return 0;
#ifdef KDA_HAVE_NCCL
    if (d->kind == KDA_DIST_NCCL) {
        float x = 0;
        return kda_dist_allreduce(d, &x, 1, KDA_DIST_F32, KDA_DIST_SUM, err);
    }
#endif
#ifdef KDA_HAVE_GLOO
    if (kda_gloo_barrier(d->gloo, err)) return explain_(d, err);
    return 0;
#else
    return kda_fail(err, "dist: no collective engine");
#endif
}
