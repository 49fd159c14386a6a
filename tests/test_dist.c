// test_dist.c - the communicator: launch-environment parsing (torchrun, Slurm, mpirun), the
// Gloo collectives across fork()ed CPU ranks, rendezvous and peer-death errors naming the rank,
// and the one clear error when the build has no engine of the wanted kind.
// Ranks are child processes talking over 127.0.0.1 on a port the kernel handed out; every wait
// is bounded (a rank still running after its limit is SIGKILLed and the test fails).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/util.h"
#include "dist/dist.h"
#include "dist_test_util.h"
#include "test.h"

// ---------------------------------------------------------------------------------------------
// Launch environments

static const char *const *g_env; // "NAME=VALUE" list of the fake environment, NULL-terminated

static const char *fake_getenv(const char *name) {
    size_t n = strlen(name);
    for (const char *const *e = g_env; *e; e++)
        if (!strncmp(*e, name, n) && (*e)[n] == '=') return *e + n + 1;
    return NULL;
}

static int read_env(KdaDistEnv *e, const char *const *vars, KdaError *err) {
    g_env = vars;
    return kda_dist_env_read(e, fake_getenv, err);
}

KDA_TEST(dist_env_torchrun) {
    const char *v[] = {"RANK=3",
                       "WORLD_SIZE=8",
                       "LOCAL_RANK=1",
                       "LOCAL_WORLD_SIZE=4",
                       "MASTER_ADDR=n1",
                       "MASTER_PORT=1234",
                       NULL};
    KdaDistEnv e;
    KdaError err;
    CHECK(read_env(&e, v, &err) == 0);
    CHECK(e.rank == 3 && e.world == 8 && e.local_rank == 1 && e.local_world == 4);
    CHECK(!strcmp(e.master_addr, "n1") && e.master_port == 1234);
    CHECK(!strcmp(e.launcher, "torchrun"));
    const char *bad[] = {"RANK=8", "WORLD_SIZE=8", "MASTER_ADDR=n1", NULL};
    CHECK(read_env(&e, bad, &err) == -1 && strstr(err.msg, "RANK=8"));
    const char *nomaster[] = {"RANK=0", "WORLD_SIZE=2", NULL};
    CHECK(read_env(&e, nomaster, &err) == -1 && strstr(err.msg, "MASTER_ADDR"));
    const char *noworld[] = {"RANK=0", NULL};
    CHECK(read_env(&e, noworld, &err) == -1 && strstr(err.msg, "WORLD_SIZE"));
    const char *none[] = {NULL};
    CHECK(read_env(&e, none, &err) == 0 && e.world == 1 && !strcmp(e.launcher, "none"));
    CHECK(read_env(&e, v, &err) == 0 && e.rdzv_port == 1234); // no agent store: MASTER_PORT
}

// Under torchrun's elastic agent (TORCHELASTIC_USE_AGENT_STORE=True) the agent's own TCP store
// holds MASTER_PORT: kda's rank 0 serves its rendezvous on the next port (before 2026-12-03 it
// bound MASTER_PORT and failed with "Address already in use"); KDA_RDZV_PORT overrides both.
KDA_TEST(dist_env_torchrun_agent_store) {
    const char *v[] = {"RANK=0",
                       "WORLD_SIZE=2",
                       "MASTER_ADDR=n1",
                       "MASTER_PORT=29500",
                       "TORCHELASTIC_USE_AGENT_STORE=True",
                       NULL};
    KdaDistEnv e;
    KdaError err;
    CHECK(read_env(&e, v, &err) == 0);
    CHECK(e.master_port == 29500 && e.rdzv_port == 29501 && strstr(e.rdzv_port_from, "agent"));
    const char *off[] = {"RANK=0",
                         "WORLD_SIZE=2",
                         "MASTER_ADDR=n1",
                         "MASTER_PORT=29500",
                         "TORCHELASTIC_USE_AGENT_STORE=False",
                         NULL};
    CHECK(read_env(&e, off, &err) == 0 && e.rdzv_port == 29500);
    const char *own[] = {"RANK=0",
                         "WORLD_SIZE=2",
                         "MASTER_ADDR=n1",
                         "MASTER_PORT=29500",
                         "TORCHELASTIC_USE_AGENT_STORE=True",
                         "KDA_RDZV_PORT=40000",
                         NULL};
    CHECK(read_env(&e, own, &err) == 0 && e.rdzv_port == 40000);
    const char *bad[] = {"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=n1", "KDA_RDZV_PORT=70000", NULL};
    CHECK(read_env(&e, bad, &err) == -1 && strstr(err.msg, "KDA_RDZV_PORT"));
    const char *top[] = {"RANK=0",
                         "WORLD_SIZE=2",
                         "MASTER_ADDR=n1",
                         "MASTER_PORT=65535",
                         "TORCHELASTIC_USE_AGENT_STORE=True",
                         NULL};
    CHECK(read_env(&e, top, &err) == -1 && strstr(err.msg, "KDA_RDZV_PORT"));
}

KDA_TEST(dist_env_slurm_and_mpirun) {
    const char *s[] = {"SLURM_PROCID=5",
                       "SLURM_NTASKS=8",
                       "SLURM_LOCALID=1",
                       "SLURM_NTASKS_PER_NODE=4(x2)",
                       "SLURM_JOB_NODELIST=gpu[07-08]",
                       NULL};
    KdaDistEnv e;
    KdaError err;
    CHECK(read_env(&e, s, &err) == 0);
    CHECK(e.rank == 5 && e.world == 8 && e.local_rank == 1 && e.local_world == 4);
    CHECK(!strcmp(e.master_addr, "gpu07") && e.master_port == 29500);
    CHECK(!strcmp(e.launcher, "slurm"));
    const char *o[] = {"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2",
                       "OMPI_COMM_WORLD_LOCAL_RANK=1", "OMPI_COMM_WORLD_LOCAL_SIZE=2", NULL};
    CHECK(read_env(&e, o, &err) == 0 && e.rank == 1 && e.world == 2);
    CHECK(!strcmp(e.master_addr, "127.0.0.1") && !strcmp(e.launcher, "mpirun"));
    const char *o2[] = {"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=4",
                        "OMPI_COMM_WORLD_LOCAL_RANK=1", "OMPI_COMM_WORLD_LOCAL_SIZE=2", NULL};
    CHECK(read_env(&e, o2, &err) == -1 && strstr(err.msg, "MASTER_ADDR"));
    char h[64];
    CHECK(kda_slurm_first_host("node[001-004,9],x", h, sizeof h, &err) == 0 &&
          !strcmp(h, "node001"));
    CHECK(kda_slurm_first_host("a1,b2", h, sizeof h, &err) == 0 && !strcmp(h, "a1"));
    CHECK(kda_slurm_first_host("solo", h, sizeof h, &err) == 0 && !strcmp(h, "solo"));
    CHECK(kda_slurm_first_host("", h, sizeof h, &err) == -1);
}

// ---------------------------------------------------------------------------------------------
// Forked ranks

typedef int (*RankFn)(KdaDist *d, int rank, int world, char *msg, size_t cap);

// Runs fn on `world` forked ranks (ranks in `absent` are not started); each child writes one line
// into msgs[rank] through a pipe and exits 0 on success. Returns the number of ranks that exited
// non-zero; *late is set when some rank had to be killed at limit_s.
static int run_ranks(int world, RankFn fn, unsigned absent, double timeout_s, double limit_s,
                     char msgs[][1024], int *late) {
    int port = dist_test_free_port();
    pid_t pids[8] = {0};
    int fds[8];
    for (int r = 0; r < world; r++) {
        msgs[r][0] = 0;
        if (absent >> r & 1) continue;
        int p[2];
        if (pipe(p)) return world;
        fflush(stdout); // a child must not inherit (and flush again) buffered output
        fflush(stderr);
        pids[r] = fork();
        if (pids[r] == 0) {
            close(p[0]);
            KdaDistEnv e = {.rank = r,
                            .world = world,
                            .local_world = world,
                            .local_rank = r,
                            .master_port = port,
                            .launcher = "test"};
            snprintf(e.master_addr, sizeof e.master_addr, "127.0.0.1");
            KdaDist *d = NULL;
            KdaError err = {{0}};
            char m[1024] = "";
            int rc = kda_dist_open(&d, &e, KDA_DIST_HOST, 0, timeout_s, &err);
            if (rc)
                snprintf(m, sizeof m, "%s", err.msg);
            else
                rc = fn(d, r, world, m, sizeof m);
            if (write(p[1], m, strlen(m)) < 0) rc = 1;
            close(p[1]);
            kda_dist_close(d);
            _exit(rc ? 1 : 0);
        }
        close(p[1]);
        fds[r] = p[0];
    }
    int failed = dist_test_wait(pids, world, limit_s, late);
    for (int r = 0; r < world; r++) {
        if (absent >> r & 1) continue;
        ssize_t n = read(fds[r], msgs[r], 1023);
        msgs[r][n > 0 ? n : 0] = 0;
        close(fds[r]);
    }
    return failed;
}

static int collectives_(KdaDist *d, int rank, int world, char *msg, size_t cap) {
    KdaError err;
    float f[1000];
    double g[3] = {rank + 0.5, -rank, 1e300 * (rank == 1)};
    for (int i = 0; i < 1000; i++)
        f[i] = (float)(rank + 1) * (float)i; // sum over ranks: i * world (world + 1) / 2
    if (kda_dist_allreduce(d, f, 1000, KDA_DIST_F32, KDA_DIST_SUM, &err) ||
        kda_dist_allreduce(d, g, 3, KDA_DIST_F64, KDA_DIST_MAX, &err))
        return snprintf(msg, cap, "%s", err.msg), -1;
    for (int i = 0; i < 1000; i++)
        if (f[i] != (float)i * (float)(world * (world + 1) / 2))
            return snprintf(msg, cap, "allreduce sum: f[%d] = %g", i, f[i]), -1;
    if (g[0] != world - 0.5 || g[1] != 0 || g[2] != 1e300)
        return snprintf(msg, cap, "allreduce max: %g %g %g", g[0], g[1], g[2]), -1;
    float in[5], out[5 * 8];
    for (int i = 0; i < 5; i++)
        in[i] = (float)(rank * 10 + i);
    if (kda_dist_allgather(d, in, out, 5, &err)) return snprintf(msg, cap, "%s", err.msg), -1;
    for (int i = 0; i < 5 * world; i++)
        if (out[i] != (float)((i / 5) * 10 + i % 5))
            return snprintf(msg, cap, "allgather: out[%d] = %g", i, out[i]), -1;
    char b[16];
    snprintf(b, sizeof b, "from %d", rank);
    if (kda_dist_broadcast(d, b, sizeof b, world - 1, &err) || kda_dist_barrier(d, &err))
        return snprintf(msg, cap, "%s", err.msg), -1;
    char want[16];
    snprintf(want, sizeof want, "from %d", world - 1);
    if (strcmp(b, want)) return snprintf(msg, cap, "broadcast: got \"%s\"", b), -1;
    return 0;
}

KDA_TEST(dist_gloo_collectives) {
    NEED_GLOO();
    char msgs[8][1024];
    for (int world = 2; world <= 3; world++) {
        int late = 0;
        int failed = run_ranks(world, collectives_, 0, 20, 60, msgs, &late);
        CHECK_MSG(failed == 0 && !late, "world %d: %d ranks failed: [%s] [%s] [%s]", world, failed,
                  msgs[0], msgs[1], msgs[2]);
    }
}

static int idle_(KdaDist *d, int rank, int world, char *msg, size_t cap) {
    (void)d, (void)rank, (void)world, (void)msg, (void)cap;
    return 0;
}

KDA_TEST(dist_rendezvous_names_missing_ranks) {
    NEED_GLOO();
    char msgs[8][1024];
    int late = 0;
    double t0 = now_seconds();
    int failed = run_ranks(4, idle_, 1u << 2 | 1u << 3, 2, 30, msgs, &late);
    CHECK(failed == 2 && !late);
    CHECK_MSG(strstr(msgs[0], "ranks 2, 3 of 4 did not join"), "rank 0: %s", msgs[0]);
    CHECK_MSG(strstr(msgs[1], "ranks 2, 3 of 4 did not join"), "rank 1: %s", msgs[1]);
    printf("    rendezvous timeout 2 s: both ranks failed after %.1f s\n", now_seconds() - t0);
}

// Rank world-1 kills itself after the rendezvous; the others' next collectives must fail
// naming it (the rendezvous saw its connection close without a goodbye).
static int die_last_(KdaDist *d, int rank, int world, char *msg, size_t cap) {
    KdaError err;
    float x[256] = {0};
    if (kda_dist_allreduce(d, x, 256, KDA_DIST_F32, KDA_DIST_SUM, &err))
        return snprintf(msg, cap, "first all-reduce: %s", err.msg), -1;
    if (rank == world - 1) raise(SIGKILL);
    for (int i = 0; i < 3; i++)
        if (kda_dist_allreduce(d, x, 256, KDA_DIST_F32, KDA_DIST_SUM, &err))
            return snprintf(msg, cap, "%s", err.msg), -1;
    return snprintf(msg, cap, "all-reduce succeeded without rank %d", world - 1), 0;
}

KDA_TEST(dist_killed_rank_is_named) {
    NEED_GLOO();
    char msgs[8][1024];
    int late = 0;
    double t0 = now_seconds();
    int failed = run_ranks(3, die_last_, 0, 30, 60, msgs, &late);
    double dt = now_seconds() - t0;
    CHECK(failed == 3 && !late);
    for (int r = 0; r < 2; r++)
        CHECK_MSG(strstr(msgs[r], "rank 2 is gone"), "rank %d: %s", r, msgs[r]);
    printf("    killed rank 2: ranks 0, 1 failed naming it after %.1f s (limit 60 s)\n", dt);
}

// Rank world-1 stops taking part (sleeps) at iteration 2; the others time out and name it from
// the progress marks.
static int hang_last_(KdaDist *d, int rank, int world, char *msg, size_t cap) {
    KdaError err;
    float x[64] = {0};
    if (kda_dist_mark_progress(d, 1, &err) ||
        kda_dist_allreduce(d, x, 64, KDA_DIST_F32, KDA_DIST_SUM, &err))
        return snprintf(msg, cap, "iteration 1: %s", err.msg), -1;
    if (rank == world - 1) {
        sleep(6); // hung; afterwards it just leaves (the others have failed by then)
        return 0;
    }
    if (kda_dist_mark_progress(d, 2, &err) ||
        kda_dist_allreduce(d, x, 64, KDA_DIST_F32, KDA_DIST_SUM, &err))
        return snprintf(msg, cap, "%s", err.msg), -1;
    return snprintf(msg, cap, "all-reduce succeeded without rank %d", world - 1), 0;
}

KDA_TEST(dist_hung_rank_times_out_named) {
    NEED_GLOO();
    char msgs[8][1024];
    int late = 0;
    double t0 = now_seconds();
    int failed = run_ranks(3, hang_last_, 0, 2, 60, msgs, &late);
    double dt = now_seconds() - t0;
    CHECK(failed == 2 && !late);
    for (int r = 0; r < 2; r++)
        CHECK_MSG(strstr(msgs[r], "rank 2 is hung or slow (at iteration 1, others at 2)"),
                  "rank %d: %s", r, msgs[r]);
    printf("    hung rank 2, timeout 2 s: ranks 0, 1 failed naming it; all done after %.1f s\n",
           dt);
}

// A rendezvous port already taken: rank 0 fails at once with one line that names the port and
// where it came from (here KDA_RDZV_PORT), so the user knows which variable to change.
KDA_TEST(dist_taken_port_names_its_origin) {
    NEED_GLOO();
    int port = dist_test_free_port(), fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    KDA_ASSERT(fd >= 0 && !bind(fd, (struct sockaddr *)&a, sizeof a) && !listen(fd, 4));
    char rv[32];
    snprintf(rv, sizeof rv, "KDA_RDZV_PORT=%d", port);
    const char *v[] = {"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", rv, NULL};
    KdaDistEnv e;
    KdaError err = {{0}};
    CHECK(read_env(&e, v, &err) == 0);
    KdaDist *d = NULL;
    CHECK(kda_dist_open(&d, &e, KDA_DIST_HOST, 0, 2, &err) == -1 && d == NULL);
    char want[64];
    snprintf(want, sizeof want, "[port %d: KDA_RDZV_PORT;", port);
    CHECK_MSG(strstr(err.msg, "cannot listen") && strstr(err.msg, want), "%s", err.msg);
    printf("    %s\n", err.msg);
    close(fd);
}

KDA_TEST(dist_no_engine_is_one_clear_error) {
    KdaDistEnv e = {
        .rank = 0, .world = 2, .local_world = 2, .master_port = 1, .launcher = "torchrun"};
    snprintf(e.master_addr, sizeof e.master_addr, "127.0.0.1");
    KdaDist *d = NULL;
    KdaError err = {{0}};
#ifndef KDA_HAVE_NCCL
    CHECK(kda_dist_open(&d, &e, KDA_DIST_NCCL, 0, 1, &err) == -1 && d == NULL);
    CHECK_MSG(strstr(err.msg, "world size 2") && strstr(err.msg, "NCCL") &&
                  strstr(err.msg, "refusing to train as a lone single process"),
              "%s", err.msg);
#endif
#ifndef KDA_HAVE_GLOO
    CHECK(kda_dist_open(&d, &e, KDA_DIST_HOST, 0, 1, &err) == -1 && d == NULL);
    CHECK_MSG(strstr(err.msg, "Gloo"), "%s", err.msg);
#endif
#if defined(KDA_HAVE_NCCL) && defined(KDA_HAVE_GLOO)
    printf("    skipped: this build has both engines (the CPU-only CI build checks the NCCL "
           "message)\n");
#endif
    (void)d;
    (void)err;
}

// ---------------------------------------------------------------------------------------------
// NCCL at world size 1 (GPU suite: `make test-gpu`): the same calls as 8 ranks make.

#ifdef KDA_HAVE_NCCL
#include <cuda_runtime_api.h>

KDA_TEST_GPU(gpu_dist_nccl_world_one) {
    KdaDistEnv e = {.rank = 0, .world = 1, .local_world = 1, .launcher = "test"};
    snprintf(e.master_addr, sizeof e.master_addr, "127.0.0.1");
    e.master_port = dist_test_free_port();
    KdaDist *d = NULL;
    KdaError err = {{0}};
    CHECK_MSG(kda_dist_open(&d, &e, KDA_DIST_NCCL, 0, 60, &err) == 0, "%s", err.msg);
    if (!d) return;
    CHECK(!strcmp(kda_dist_engine(d), "nccl") && getenv("NCCL_NVLS_ENABLE") &&
          !strcmp(getenv("NCCL_NVLS_ENABLE"), "0"));
    enum { N = 1 << 20 };
    float *h = malloc(N * sizeof(float)), *dv = NULL, *dout = NULL;
    for (int i = 0; i < N; i++)
        h[i] = (float)(i % 977) * 0.25f;
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s) == cudaSuccess);
    CHECK(cudaMalloc((void **)&dv, N * sizeof(float)) == cudaSuccess);
    CHECK(cudaMalloc((void **)&dout, N * sizeof(float)) == cudaSuccess);
    CHECK(cudaMemcpy(dv, h, N * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
    CHECK(kda_dist_dev_allreduce(d, dv, N, s, &err) == 0);
    CHECK(kda_dist_dev_reduce_scatter(d, dv, dout, N, s, &err) == 0);
    CHECK(kda_dist_dev_allgather(d, dout, dv, N, s, &err) == 0);
    CHECK_MSG(kda_dist_dev_wait(d, s, &err) == 0, "%s", err.msg);
    float *back = malloc(N * sizeof(float));
    CHECK(cudaMemcpy(back, dv, N * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(memcmp(back, h, N * sizeof(float)) == 0); // one rank: every collective is a copy
    double x[2] = {1.5, -2};
    CHECK(kda_dist_allreduce(d, x, 2, KDA_DIST_F64, KDA_DIST_SUM, &err) == 0);
    CHECK(x[0] == 1.5 && x[1] == -2);
    CHECK(kda_dist_barrier(d, &err) == 0);
    cudaFree(dv);
    cudaFree(dout);
    cudaStreamDestroy(s);
    free(h);
    free(back);
    kda_dist_close(d);
}
#endif
