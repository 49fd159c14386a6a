// test_dist_train.c - data-parallel training end to end on CPU ranks (Gloo): `kda train`
// processes launched the torchrun, Slurm, mpirun and --nproc-per-node ways against one-process
// runs of the same global batch (losses, grad norms, final weights), ZeRO-1 on vs off, resume
// across world sizes, a killed rank, SIGTERM to one rank, and two network namespaces as two nodes.
// Model configs/tiny.json, seq_length 16, a synthetic dataset; one thread per rank.
//
// Equalities and why:
//   2 ranks x 1 micro-batch vs 1 rank x 2: bit-exact. Each micro-batch's gradient is computed
//     alone and added (trainer.c), Gloo's 2-rank all-reduce is one fp32 a + b, and a + b == b + a.
//   3 ranks vs 1 rank x 3: the ring all-reduce adds the three gradients in a rank-dependent order
//     per chunk ((g1 + g2) + g0 vs (g0 + g1) + g2), a difference of ~1 ulp of the gradient; after
//     6 AdamW steps losses agree to 1e-5 relative and weights to 1e-5 absolute (|w| ~ 0.02-1:
//     Adam's steps are ~lr = 3e-3, so 1e-5 is a few hundred times the fp32 rounding of a step
//     and far below one step).
//   ZeRO-1 vs plain data parallel: bit-exact (the shards update with the same element-wise
//     arithmetic from the same all-reduced gradient; the all-gather copies bits).
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/util.h"
#include "dist_test_util.h"
#include "fixtures.h" // defines: TestDocs, test_write_docs
#include "io/model_io.h"
#include "model/config.h"
#include "model/params.h"
#include "test.h"

static const char *kda_bin_(void) {
    const char *b = getenv("KDA_BIN");
    return b ? b : "./build/kda";
}

// 200 documents of 20..59 tokens, token k of document d = 10 + (d + 5k) % 37 (fixtures.h).
static int make_data_(char *prefix, size_t cap) {
    snprintf(prefix, cap, "%s/data", test_tmpdir());
    KdaError err;
    TestDocs docs = {.n_docs = 200, .len = 0, .stride = 5, .mod = 37, .base = 10};
    return test_write_docs(prefix, docs, &err);
}

// SAVE-independent run config at dir/name.yaml for a global batch gbs of micro-batches of 2.
static const char *make_cfg_(const char *name, const char *data, int gbs, int iters,
                             const char *extra) {
    static char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s.yaml", test_tmpdir(), name);
    FILE *f = fopen(path, "w");
    if (!f) return NULL;
    fprintf(f,
            "model: configs/tiny.json\ntrain_data_path: [%s]\nsplit: \"90,10,0\"\n"
            "seq_length: 16\ntrain_iters: %d\nlr_decay_iters: 6\nglobal_batch_size: %d\n"
            "micro_batch_size: 2\nlr: 3.0e-3\nmin_lr: 3.0e-4\nlr_warmup_iters: 1\n"
            "log_interval: 1\nseed: 11\nthreads: 1\nclip_grad: 0.5\n%s",
            data, iters, gbs, extra ? extra : "");
    return fclose(f) ? NULL : path;
}

// L_TORCHRUN_AGENT: torchrun's variables plus TORCHELASTIC_USE_AGENT_STORE=True, as torchrun's
// elastic agent sets them while its own TCP store listens on MASTER_PORT.
typedef enum { L_SINGLE, L_TORCHRUN, L_TORCHRUN_AGENT, L_SLURM, L_MPIRUN } Launcher;

static void clear_launch_env_(void) {
    const char *v[] = {"RANK",
                       "WORLD_SIZE",
                       "LOCAL_RANK",
                       "LOCAL_WORLD_SIZE",
                       "MASTER_ADDR",
                       "MASTER_PORT",
                       "SLURM_PROCID",
                       "SLURM_NTASKS",
                       "SLURM_LOCALID",
                       "SLURM_NTASKS_PER_NODE",
                       "SLURM_JOB_NODELIST",
                       "SLURM_NODELIST",
                       "OMPI_COMM_WORLD_RANK",
                       "OMPI_COMM_WORLD_SIZE",
                       "OMPI_COMM_WORLD_LOCAL_RANK",
                       "OMPI_COMM_WORLD_LOCAL_SIZE",
                       "TORCHELASTIC_USE_AGENT_STORE",
                       "KDA_RDZV_PORT"};
    for (size_t i = 0; i < sizeof v / sizeof *v; i++)
        unsetenv(v[i]);
}

static void setenv_int_(const char *k, int v) {
    char b[16];
    snprintf(b, sizeof b, "%d", v);
    setenv(k, b, 1);
}

// Starts rank r of world (launched the `how` way) of `kda train --config cfg --save save ARGS`;
// its stdout+stderr go to log. wrap: a command prefix ("ip netns exec NS", "mpirun -np 2") or
// NULL.
static pid_t spawn_rank_(Launcher how, int r, int world, int local_world, const char *master,
                         int port, const char *cfg, const char *save, const char *args,
                         const char *log, const char *wrap) {
    fflush(stdout); // a child must not inherit (and flush again) buffered output
    fflush(stderr);
    pid_t pid = fork();
    if (pid != 0) return pid;
    clear_launch_env_();
    setenv("OMP_NUM_THREADS", "1", 1);
    int lr = r % local_world;
    if (how == L_TORCHRUN || how == L_TORCHRUN_AGENT) {
        if (how == L_TORCHRUN_AGENT) setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
        setenv_int_("RANK", r);
        setenv_int_("WORLD_SIZE", world);
        setenv_int_("LOCAL_RANK", lr);
        setenv_int_("LOCAL_WORLD_SIZE", local_world);
        setenv("MASTER_ADDR", master, 1);
        setenv_int_("MASTER_PORT", port);
    } else if (how == L_SLURM) {
        setenv_int_("SLURM_PROCID", r);
        setenv_int_("SLURM_NTASKS", world);
        setenv_int_("SLURM_LOCALID", lr);
        setenv_int_("SLURM_NTASKS_PER_NODE", local_world);
        setenv("SLURM_JOB_NODELIST", master, 1); // the first host is rank 0's
        setenv_int_("MASTER_PORT", port);
    } else if (how == L_MPIRUN) {
        setenv_int_("OMPI_COMM_WORLD_RANK", r);
        setenv_int_("OMPI_COMM_WORLD_SIZE", world);
        setenv_int_("OMPI_COMM_WORLD_LOCAL_RANK", lr);
        setenv_int_("OMPI_COMM_WORLD_LOCAL_SIZE", local_world);
        setenv_int_("MASTER_PORT", port);
    }
    if (!freopen(log, "w", stdout) || dup2(fileno(stdout), 2) < 0) _exit(120);
    char full[8192];
    snprintf(full, sizeof full, "exec %s%s%s train --config %s --save %s --no-progress %s",
             wrap ? wrap : "", wrap ? " " : "", kda_bin_(), cfg, save, args ? args : "");
    execl("/bin/sh", "sh", "-c", full, (char *)NULL);
    _exit(127);
}

static int g_quiet_failures; // a test that expects failing ranks: no log dump
static char *rank_log_(const char *save, int r);

// Runs a world to completion (limit_s): returns the number of failed ranks.
// A port P whose successor is free too, with a socket listening on P (all interfaces, as
// torchrun's agent store listens) in *fd; -1 if none was found.
static int agent_store_port_(int *fd) {
    for (int tries = 0; tries < 50; tries++) {
        int p = dist_test_free_port();
        if (p <= 0 || p >= 65535) continue;
        int s = socket(AF_INET, SOCK_STREAM, 0), t = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)p)};
        a.sin_addr.s_addr = htonl(INADDR_ANY);
        struct sockaddr_in b = a;
        b.sin_port = htons((uint16_t)(p + 1));
        int ok = s >= 0 && t >= 0 && !bind(s, (struct sockaddr *)&a, sizeof a) && !listen(s, 8) &&
                 !bind(t, (struct sockaddr *)&b, sizeof b);
        if (t >= 0) close(t);
        if (ok) return *fd = s, p;
        if (s >= 0) close(s);
    }
    return -1;
}

static int run_world_(Launcher how, int world, const char *cfg, const char *save, const char *args,
                      double limit_s) {
    int agent_fd = -1;
    int port = how == L_TORCHRUN_AGENT ? agent_store_port_(&agent_fd) : dist_test_free_port();
    if (port <= 0) return world;
    pid_t pids[8] = {0};
    for (int r = 0; r < world; r++) {
        char log[PATH_MAX + 32];
        snprintf(log, sizeof log, "%s.rank%d.log", save, r);
        pids[r] = spawn_rank_(how, r, world, world, "127.0.0.1", port, cfg, save, args, log, NULL);
    }
    int late;
    int failed = dist_test_wait(pids, world, limit_s, &late);
    if (agent_fd >= 0) close(agent_fd);
    if (failed && !g_quiet_failures) {
        for (int r = 0; r < world; r++) {
            char log[PATH_MAX + 32];
            snprintf(log, sizeof log, "%s.rank%d.log", save, r);
            size_t n;
            KdaError e;
            char *s = read_file(log, &n, &e);
            fprintf(stderr, "    --- %s rank %d ---\n%s\n", save, r, s ? s : "(no log)");
            free(s);
        }
    }
    return failed + late;
}

typedef struct {
    double loss[64], norm[64], valid[64];
    int n, n_valid;
} Curve;

// Losses and grad norms of SAVE/metrics.jsonl (one line per iteration: log_interval 1).
static int read_curve_(const char *save, Curve *c) {
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/metrics.jsonl", save);
    size_t n;
    KdaError e;
    char *s = read_file(p, &n, &e);
    if (!s) return -1;
    c->n = c->n_valid = 0;
    for (char *l = s; l && *l && c->n < 64 && c->n_valid < 64;) {
        char *a = strstr(l, "\"loss\": "), *b = strstr(l, "\"grad_norm\": ");
        char *v = strstr(l, "\"valid_loss\": ");
        char *nl = strchr(l, '\n');
        if (v && (!nl || v < nl)) c->valid[c->n_valid++] = strtod(v + 14, NULL);
        if (a && b && (!nl || a < nl)) {
            c->loss[c->n] = strtod(a + 8, NULL);
            c->norm[c->n] = strtod(b + 13, NULL);
            c->n++;
        }
        l = nl ? nl + 1 : NULL;
    }
    free(s);
    return 0;
}

// The final weights of SAVE (through `latest`): [n] fp32, caller frees.
static float *read_weights_(const char *save, int64_t *n) {
    char p[PATH_MAX], dir[PATH_MAX];
    snprintf(p, sizeof p, "%s/latest", save);
    size_t k;
    KdaError e;
    char *l = read_file(p, &k, &e);
    if (!l) return NULL;
    l[strcspn(l, "\n")] = 0;
    snprintf(dir, sizeof dir, "%s/%s", save, l);
    free(l);
    KdaConfig cfg;
    KdaParamTable t;
    if (kda_config_load(&cfg, "configs/tiny.json", &e) ||
        kda_config_derive(&cfg, "configs/tiny.json", &e) || kda_params_build(&t, &cfg, &e))
        return NULL;
    float *w = calloc((size_t)t.total_numel, sizeof(float));
    *n = t.total_numel;
    if (kda_model_read_weights(dir, &cfg, &t, w, &e)) {
        fprintf(stderr, "    %s\n", e.msg);
        free(w);
        w = NULL;
    }
    kda_params_free(&t);
    return w;
}

// Compares two runs: losses and norms (relative tol) and final weights (absolute tol); tol 0 =
// bit-exact. Prints the largest differences.
static void check_same_(const char *a, const char *b, double tol_rel, double tol_abs) {
    Curve ca, cb;
    CHECK(read_curve_(a, &ca) == 0 && read_curve_(b, &cb) == 0);
    CHECK_MSG(ca.n == cb.n && ca.n > 0, "%s: %d iterations, %s: %d", a, ca.n, b, cb.n);
    CHECK(ca.n_valid == cb.n_valid);
    double dl = 0, dn = 0, dw = 0;
    for (int i = 0; i < ca.n_valid && i < cb.n_valid; i++) {
        double x = fabs(ca.valid[i] - cb.valid[i]) / fabs(ca.valid[i]);
        dl = x > dl ? x : dl; // validation losses count as losses
    }
    for (int i = 0; i < ca.n && i < cb.n; i++) {
        double x = fabs(ca.loss[i] - cb.loss[i]) / fabs(ca.loss[i]);
        double y = fabs(ca.norm[i] - cb.norm[i]) / fabs(ca.norm[i]);
        dl = x > dl ? x : dl;
        dn = y > dn ? y : dn;
    }
    int64_t na = 0, nb = 0;
    float *wa = read_weights_(a, &na), *wb = read_weights_(b, &nb);
    CHECK(wa && wb && na == nb);
    int differ = 0;
    for (int64_t i = 0; wa && wb && i < na && na == nb; i++) {
        double d = fabs((double)wa[i] - (double)wb[i]);
        dw = d > dw ? d : dw;
        differ += wa[i] != wb[i];
    }
    printf("    %s vs %s: max rel diff loss %.3g, grad norm %.3g; weights max abs %.3g (%d of %lld "
           "differ); %d validations\n",
           strrchr(a, '/') + 1, strrchr(b, '/') + 1, dl, dn, dw, differ, (long long)na, ca.n_valid);
    if (tol_rel == 0 && tol_abs == 0) {
        CHECK_MSG(dl == 0 && dn == 0 && differ == 0, "not bit-exact");
    } else {
        CHECK(dl <= tol_rel && dn <= tol_rel && dw <= tol_abs);
    }
    free(wa);
    free(wb);
}

static char g_data[PATH_MAX];

static const char *save_dir_(const char *name) {
    static char p[4][PATH_MAX];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", test_tmpdir(), name);
    return p[k];
}

KDA_TEST(dp_two_ranks_bit_exact_torchrun_mpirun_nproc) {
    NEED_GLOO();
    CHECK(make_data_(g_data, sizeof g_data) == 0);
    // with validation: every rank evaluates its slice, the sums are all-reduced
    const char *cfg = make_cfg_("gbs4v", g_data, 4, 6, "eval_interval: 3\neval_iters: 2\n");
    char one[PATH_MAX], tr[PATH_MAX], mpi[PATH_MAX], np[PATH_MAX];
    snprintf(one, sizeof one, "%s", save_dir_("one"));
    snprintf(tr, sizeof tr, "%s", save_dir_("torchrun2"));
    snprintf(mpi, sizeof mpi, "%s", save_dir_("mpirun2"));
    snprintf(np, sizeof np, "%s", save_dir_("nproc2"));
    CHECK(run_world_(L_SINGLE, 1, cfg, one, NULL, 120) == 0);
    CHECK(run_world_(L_TORCHRUN, 2, cfg, tr, NULL, 120) == 0);
    check_same_(one, tr, 0, 0);
    CHECK(run_world_(L_MPIRUN, 2, cfg, mpi, NULL, 120) == 0);
    check_same_(one, mpi, 0, 0);
    CHECK(run_world_(L_SINGLE, 1, cfg, np, "--nproc-per-node 2", 120) == 0);
    check_same_(one, np, 0, 0);
    // the real mpirun (Open MPI's openmpi-bin; CI installs it), when present
    if (system("command -v mpirun > /dev/null 2>&1") == 0) {
        char real[PATH_MAX], wrap[160], log[PATH_MAX + 32];
        snprintf(real, sizeof real, "%s", save_dir_("mpirun_real2"));
        snprintf(log, sizeof log, "%s.rank0.log", real);
        snprintf(wrap, sizeof wrap,
                 "mpirun -np 2 --oversubscribe --allow-run-as-root -x OMP_NUM_THREADS=1 "
                 "-x MASTER_PORT=%d",
                 dist_test_free_port());
        pid_t p = spawn_rank_(L_SINGLE, 0, 1, 1, "", 0, cfg, real, NULL, log, wrap);
        int late, st;
        dist_test_wait_status(&p, 1, 120, &late, &st);
        CHECK_MSG(st == 0 && !late, "mpirun exited %d", st);
        check_same_(one, real, 0, 0);
    } else {
        printf("    mpirun: skipped (no mpirun; install openmpi-bin)\n");
    }
    // rank 0 alone logs, with the rank count in the startup summary and tokens/s total
    size_t n;
    KdaError e;
    char log[PATH_MAX + 32];
    snprintf(log, sizeof log, "%s.rank0.log", tr);
    char *s = read_file(log, &n, &e);
    CHECK(s && strstr(s, "data parallel over 2 ranks (gloo)") && strstr(s, "tokens/s total"));
    free(s);
    snprintf(log, sizeof log, "%s.rank1.log", tr);
    s = read_file(log, &n, &e);
    CHECK(s && !strstr(s, "iteration"));
    free(s);
}

// torchrun's elastic agent holds MASTER_PORT with its own store (here: a listening socket):
// kda's rank 0 serves its rendezvous on MASTER_PORT + 1 (before 2026-12-03 rank 0 failed with
// "cannot listen on port N: Address already in use"); the run equals one process's. And
// `--profile N` prints its table on rank 0 only (before, every rank printed one).
KDA_TEST(dp_torchrun_agent_store_port_and_rank0_profile) {
    NEED_GLOO();
    CHECK(make_data_(g_data, sizeof g_data) == 0);
    const char *cfg = make_cfg_("gbs4agent", g_data, 4, 3, NULL);
    char one[PATH_MAX], ag[PATH_MAX];
    snprintf(one, sizeof one, "%s", save_dir_("one_agent"));
    snprintf(ag, sizeof ag, "%s", save_dir_("torchrun_agent2"));
    CHECK(run_world_(L_SINGLE, 1, cfg, one, NULL, 120) == 0);
    CHECK(run_world_(L_TORCHRUN_AGENT, 2, cfg, ag, "--profile 2", 120) == 0);
    check_same_(one, ag, 0, 0);
    char *s0 = rank_log_(ag, 0), *s1 = rank_log_(ag, 1);
    CHECK_MSG(s0 && strstr(s0, "profile of iteration 2"), "rank 0 printed no profile table");
    CHECK_MSG(s1 && !strstr(s1, "profile of iteration"), "rank 1 printed a profile table too");
    free(s0), free(s1);
}

// FLA's data order: the ranks read slices of the one global chunk order.
KDA_TEST(dp_two_ranks_fla_data_order_bit_exact) {
    NEED_GLOO();
    CHECK(make_data_(g_data, sizeof g_data) == 0);
    const char *cfg = make_cfg_("fla4", g_data, 4, 6, "objective: fla\ndata_order: fla\n");
    char one[PATH_MAX], two[PATH_MAX];
    snprintf(one, sizeof one, "%s", save_dir_("one_fla"));
    snprintf(two, sizeof two, "%s", save_dir_("two_fla"));
    CHECK(run_world_(L_SINGLE, 1, cfg, one, NULL, 120) == 0);
    CHECK(run_world_(L_TORCHRUN, 2, cfg, two, NULL, 120) == 0);
    check_same_(one, two, 0, 0);
}

// The Gloo overlap (each layer all-reduced on a communication thread during the last
// backward) against the all-reduce after the backward (KDA_DIST_OVERLAP=0): 2 ranks x 2
// micro-batches, so the overlap also adds the last micro-batch's layers into the step's
// gradient as they finish. Bit-exact: the same fp32 additions per element (2 ranks: one a + b
// whatever the ranges), only their timing changes.
KDA_TEST(dp_gloo_overlap_bit_exact) {
    NEED_GLOO();
    CHECK(make_data_(g_data, sizeof g_data) == 0);
    const char *cfg = make_cfg_("gbs8", g_data, 8, 6, NULL);
    char ov[PATH_MAX], after[PATH_MAX], log[PATH_MAX + 32];
    snprintf(ov, sizeof ov, "%s", save_dir_("overlap2"));
    snprintf(after, sizeof after, "%s", save_dir_("after2"));
    CHECK(run_world_(L_TORCHRUN, 2, cfg, ov, NULL, 120) == 0);
    setenv("KDA_DIST_OVERLAP", "0", 1);
    CHECK(run_world_(L_TORCHRUN, 2, cfg, after, NULL, 120) == 0);
    unsetenv("KDA_DIST_OVERLAP");
    check_same_(after, ov, 0, 0);
    const char *what = "all-reduced on a communication thread";
    size_t n;
    KdaError e;
    snprintf(log, sizeof log, "%s.rank0.log", ov);
    char *s = read_file(log, &n, &e);
    CHECK_MSG(s && strstr(s, what), "%s: the overlap did not run", log);
    free(s);
    snprintf(log, sizeof log, "%s.rank0.log", after);
    s = read_file(log, &n, &e);
    CHECK_MSG(s && !strstr(s, what), "%s: KDA_DIST_OVERLAP=0 still overlapped", log);
    free(s);
}

KDA_TEST(dp_three_ranks_slurm_zero1_and_resume) {
    NEED_GLOO();
    CHECK(make_data_(g_data, sizeof g_data) == 0);
    const char *c6 = make_cfg_("gbs6", g_data, 6, 6, NULL);
    char one[PATH_MAX], sl[PATH_MAX];
    snprintf(one, sizeof one, "%s", save_dir_("one6"));
    snprintf(sl, sizeof sl, "%s", save_dir_("slurm3"));
    CHECK(run_world_(L_SINGLE, 1, c6, one, NULL, 120) == 0);
    CHECK(run_world_(L_SLURM, 3, c6, sl, NULL, 120) == 0);
    check_same_(one, sl, 1e-5, 1e-5);
    // ZeRO-1 over 3 ranks: the same bits as plain data parallel over 3
    char z[PATH_MAX];
    snprintf(z, sizeof z, "%s", save_dir_("zero3"));
    CHECK(run_world_(L_TORCHRUN, 3, c6, z, "--use_distributed_optimizer true", 120) == 0);
    check_same_(sl, z, 0, 0);
    // resume 1 -> 3 (ZeRO-1): 3 iterations alone, 3 more on 3 ranks; the 1-rank trajectory
    char r13[PATH_MAX];
    snprintf(r13, sizeof r13, "%s", save_dir_("resume13"));
    CHECK(run_world_(L_SINGLE, 1, c6, r13, "--train_iters 3", 120) == 0);
    CHECK(run_world_(L_TORCHRUN, 3, c6, r13, "--use_distributed_optimizer true", 120) == 0);
    check_same_(one, r13, 1e-5, 1e-5);
}

KDA_TEST(dp_zero1_resume_two_to_one) {
    NEED_GLOO();
    CHECK(make_data_(g_data, sizeof g_data) == 0);
    const char *cfg = make_cfg_("gbs4", g_data, 4, 6, NULL);
    char one[PATH_MAX], z[PATH_MAX], r21[PATH_MAX];
    snprintf(one, sizeof one, "%s", save_dir_("one"));
    snprintf(z, sizeof z, "%s", save_dir_("zero2"));
    snprintf(r21, sizeof r21, "%s", save_dir_("resume21"));
    CHECK(run_world_(L_SINGLE, 1, cfg, one, NULL, 120) == 0);
    CHECK(run_world_(L_TORCHRUN, 2, cfg, z, "--use_distributed_optimizer true", 120) == 0);
    check_same_(one, z, 0, 0);
    // 3 iterations on 2 ZeRO-1 ranks (moments gathered into the one-process format), 3 on 1
    CHECK(run_world_(L_TORCHRUN, 2, cfg, r21, "--use_distributed_optimizer true --train_iters 3",
                     120) == 0);
    CHECK(run_world_(L_SINGLE, 1, cfg, r21, NULL, 120) == 0);
    check_same_(one, r21, 0, 0);
}

KDA_TEST(dp_batch_not_divisible_is_an_error) {
    NEED_GLOO();
    CHECK(make_data_(g_data, sizeof g_data) == 0);
    const char *cfg = make_cfg_("gbs4", g_data, 4, 6, NULL);
    const char *s = save_dir_("bad3");
    g_quiet_failures = 1;
    CHECK(run_world_(L_TORCHRUN, 3, cfg, s, NULL, 60) == 3);
    g_quiet_failures = 0;
    char log[PATH_MAX + 32];
    snprintf(log, sizeof log, "%s.rank0.log", s);
    size_t n;
    KdaError e;
    char *t = read_file(log, &n, &e);
    CHECK(t && strstr(t, "micro_batch_size x data-parallel ranks = 2 x 3"));
    free(t);
}

// ---------------------------------------------------------------------------------------------
// Faults and signals

// Lines of SAVE/metrics.jsonl (0 when missing): how far rank 0 has come.
static int metrics_lines_(const char *save) {
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/metrics.jsonl", save);
    size_t n;
    KdaError e;
    char *s = read_file(p, &n, &e);
    int k = 0;
    for (size_t i = 0; s && i < n; i++)
        k += s[i] == '\n';
    free(s);
    return k;
}

// Waits (at most limit_s) until rank 0 logged `lines` iterations.
static int wait_progress_(const char *save, int lines, double limit_s) {
    double t_end = now_seconds() + limit_s;
    while (metrics_lines_(save) < lines) {
        if (now_seconds() > t_end) return -1;
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

static char *rank_log_(const char *save, int r) {
    char log[PATH_MAX + 32];
    snprintf(log, sizeof log, "%s.rank%d.log", save, r);
    size_t n;
    KdaError e;
    return read_file(log, &n, &e);
}

// SIGKILL of rank `victim` of 3 mid-run: the other two exit non-zero naming it (rank 0 is also
// the rendezvous host: its death is named as that).
static void kill_one_(int victim) {
    const char *cfg = make_cfg_("long", g_data, 6, 100000, "save_interval: 0\n");
    char save[PATH_MAX];
    snprintf(save, sizeof save, "%s/killed%d", test_tmpdir(), victim);
    int port = dist_test_free_port();
    pid_t pids[3];
    for (int r = 0; r < 3; r++) {
        char log[PATH_MAX + 32];
        snprintf(log, sizeof log, "%s.rank%d.log", save, r);
        pids[r] = spawn_rank_(L_TORCHRUN, r, 3, 3, "127.0.0.1", port, cfg, save, NULL, log, NULL);
    }
    CHECK(wait_progress_(save, 3, 60) == 0);
    kill(pids[victim], SIGKILL);
    double t0 = now_seconds();
    int late, st[3];
    dist_test_wait_status(pids, 3, 60, &late, st);
    double dt = now_seconds() - t0;
    CHECK_MSG(!late, "ranks still running 60 s after rank %d was killed", victim);
    char want[64];
    if (victim)
        snprintf(want, sizeof want, "rank %d is gone", victim);
    else
        snprintf(want, sizeof want, "rank 0 (the rendezvous at 127.0.0.1:%d) is gone", port);
    for (int r = 0; r < 3; r++) {
        if (r == victim) {
            CHECK(st[r] == 128 + SIGKILL);
            continue;
        }
        CHECK(st[r] != 0);
        char *s = rank_log_(save, r);
        // rank 0's death shows in a collective ("the rendezvous at ... is gone") or in the
        // rendezvous call itself ("lost the connection to rank 0 ... exited or was killed")
        int named = s && (strstr(s, want) || (!victim && strstr(s, "connection to rank 0") &&
                                              strstr(s, "exited or was killed")));
        CHECK_MSG(named, "rank %d: %s", r, s ? s : "(no log)");
        free(s);
    }
    printf("    SIGKILL of rank %d of 3: the other two exited non-zero naming it after %.2f s\n",
           victim, dt);
}

KDA_TEST(dp_killed_rank_fails_the_others_naming_it) {
    NEED_GLOO();
    CHECK(make_data_(g_data, sizeof g_data) == 0);
    kill_one_(1);
    kill_one_(0);
}

// SIGTERM to one rank (or to the --nproc-per-node launcher): every rank finishes the same
// iteration, one checkpoint is written, all exit 0.
static void check_sigterm_(const char *save, int world, pid_t *pids, int target) {
    CHECK(wait_progress_(save, 3, 60) == 0);
    kill(pids[target], SIGTERM);
    int late, st[8];
    dist_test_wait_status(pids, world, 60, &late, st);
    CHECK(!late);
    for (int r = 0; r < world; r++)
        CHECK_MSG(st[r] == 0, "process %d exited %d", r, st[r]);
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/latest", save);
    size_t n;
    KdaError e;
    char *l = read_file(p, &n, &e);
    CHECK_MSG(l && !strncmp(l, "iter_", 5), "no latest checkpoint");
    int it = l ? atoi(l + 5) : 0;
    free(l);
    CHECK(it >= 3 && it < 100000);
    char *s = rank_log_(save, 0);
    char want[64];
    snprintf(want, sizeof want, "stopped at iteration %d on request", it);
    CHECK_MSG(s && strstr(s, want), "rank 0 log: %s", s ? s : "(none)");
    free(s);
}

KDA_TEST(dp_sigterm_to_one_rank_or_the_launcher_stops_all) {
    NEED_GLOO();
    CHECK(make_data_(g_data, sizeof g_data) == 0);
    const char *cfg = make_cfg_("long", g_data, 4, 100000, NULL);
    char save[PATH_MAX];
    snprintf(save, sizeof save, "%s", save_dir_("sigterm"));
    int port = dist_test_free_port();
    pid_t pids[2];
    for (int r = 0; r < 2; r++) {
        char log[PATH_MAX + 32];
        snprintf(log, sizeof log, "%s.rank%d.log", save, r);
        pids[r] = spawn_rank_(L_TORCHRUN, r, 2, 2, "127.0.0.1", port, cfg, save, NULL, log, NULL);
    }
    check_sigterm_(save, 2, pids, 1);
    // the launcher: its SIGTERM goes to both ranks
    snprintf(save, sizeof save, "%s", save_dir_("sigterm_launcher"));
    char log[PATH_MAX + 32];
    snprintf(log, sizeof log, "%s.rank0.log", save);
    pid_t lp = spawn_rank_(L_SINGLE, 0, 1, 1, "", 0, cfg, save, "--nproc-per-node 2", log, NULL);
    check_sigterm_(save, 1, &lp, 0);
}

// ---------------------------------------------------------------------------------------------
// Two nodes: two network namespaces joined by a veth pair, 2 ranks in each, Slurm-style env
// with the first host of the node list = node A's veth address (root only).

static int sh_(const char *cmd) {
    char full[1200];
    snprintf(full, sizeof full, "%s >/dev/null 2>&1", cmd);
    return system(full);
}

KDA_TEST(dp_two_nodes_in_network_namespaces) {
    NEED_GLOO();
    if (geteuid() != 0) {
        printf("    skipped: needs root for ip netns (CI runs as root)\n");
        return;
    }
    char na[32], nb[32], va[16], vb[16], cmd[1024];
    int id = (int)(getpid() % 100000);
    snprintf(na, sizeof na, "kdaA%d", id);
    snprintf(nb, sizeof nb, "kdaB%d", id);
    snprintf(va, sizeof va, "kva%d", id);
    snprintf(vb, sizeof vb, "kvb%d", id);
    snprintf(cmd, sizeof cmd, "ip netns add %s && ip netns add %s", na, nb);
    if (sh_(cmd)) {
        printf("    skipped: ip netns add failed (no permission for network namespaces)\n");
        snprintf(cmd, sizeof cmd, "ip netns del %s; ip netns del %s", na, nb);
        sh_(cmd);
        return;
    }
    snprintf(cmd, sizeof cmd,
             "ip link add %s type veth peer name %s && ip link set %s netns %s && "
             "ip link set %s netns %s && ip -n %s addr add 10.213.0.1/24 dev %s && "
             "ip -n %s addr add 10.213.0.2/24 dev %s && ip -n %s link set %s up && "
             "ip -n %s link set %s up && ip -n %s link set lo up && ip -n %s link set lo up",
             va, vb, va, na, vb, nb, na, va, nb, vb, na, va, nb, vb, na, nb);
    int ok = sh_(cmd) == 0;
    CHECK_MSG(ok, "setting up the veth pair failed");
    if (ok) {
        CHECK(make_data_(g_data, sizeof g_data) == 0);
        const char *cfg = make_cfg_("gbs8", g_data, 8, 4, NULL);
        char one[PATH_MAX], two[PATH_MAX];
        snprintf(one, sizeof one, "%s", save_dir_("one8"));
        snprintf(two, sizeof two, "%s", save_dir_("netns4"));
        CHECK(run_world_(L_SINGLE, 1, cfg, one, NULL, 120) == 0);
        pid_t pids[4];
        int port = 29641;
        for (int r = 0; r < 4; r++) {
            char log[PATH_MAX + 32];
            snprintf(log, sizeof log, "%s.rank%d.log", two, r);
            char wrap[64];
            snprintf(wrap, sizeof wrap, "ip netns exec %s", r < 2 ? na : nb);
            pids[r] = spawn_rank_(L_SLURM, r, 4, 2, "10.213.0.1,10.213.0.2", port, cfg, two, NULL,
                                  log, wrap);
        }
        int late;
        int failed = dist_test_wait(pids, 4, 120, &late);
        CHECK(failed == 0 && !late);
        for (int r = 0; failed && r < 4; r++) {
            char *s = rank_log_(two, r);
            fprintf(stderr, "    --- rank %d ---\n%s\n", r, s ? s : "(no log)");
            free(s);
        }
        // 4 ranks: ring-order sums, the 3-rank tolerance and reason (file head)
        check_same_(one, two, 1e-5, 1e-5);
    }
    snprintf(cmd, sizeof cmd, "ip netns del %s; ip netns del %s", na, nb);
    sh_(cmd);
}

// --dry-run under a launcher shows the world and the per-rank accumulation (no rendezvous).
KDA_TEST(dp_dry_run_shows_the_world) {
    static char out[1 << 16];
    CHECK(test_run_kda(out, sizeof out,
                       "RANK=3 WORLD_SIZE=8 LOCAL_RANK=3 LOCAL_WORLD_SIZE=8 MASTER_ADDR=127.0.0.1",
                       "train --config configs/train_kda_300M.yaml --dry-run") == 0);
    CHECK_MSG(strstr(out,
                     "world size 8 (cuda, launcher torchrun), global batch 1024 = micro 16 x 8 "
                     "accumulation steps x 8 ranks"),
              "%s", out);
}
