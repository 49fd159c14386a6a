// launch.c - the local launcher of `--nproc-per-node` (contract in launch.h).
#include "dist/launch.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/util.h" // defines: now_seconds

int kda_launch_take_nproc(int *argc, char **argv, KdaError *err) {
    int n = 0, k = 0;
    for (int i = 0; i < *argc; i++) {
        const char *a = argv[i], *v = NULL;
        if (!strcmp(a, "--nproc-per-node") || !strcmp(a, "--nproc_per_node")) {
            if (i + 1 >= *argc) return kda_fail(err, "--nproc-per-node needs a number");
            v = argv[++i];
        } else if (!strncmp(a, "--nproc-per-node=", 17) || !strncmp(a, "--nproc_per_node=", 17)) {
            v = a + 17;
        } else {
            argv[k++] = argv[i];
            continue;
        }
        char *end;
        long x = strtol(v, &end, 10);
        if (*end || x < 1 || x > 1024)
            return kda_fail(err, "--nproc-per-node \"%.20s\": expected a rank count in 1..1024", v);
        n = (int)x;
    }
    *argc = k;
    argv[k] = NULL;
    return n;
}

static volatile sig_atomic_t g_sig = 0;

static void on_sig_(int sig) {
    g_sig = sig;
}

// A port the kernel just handed out (bound to port 0, then released).
static int free_port_(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t l = sizeof a;
    int port = 29500;
    if (fd >= 0 && !bind(fd, (struct sockaddr *)&a, sizeof a) &&
        !getsockname(fd, (struct sockaddr *)&a, &l))
        port = ntohs(a.sin_port);
    if (fd >= 0) close(fd);
    return port;
}

static pid_t spawn_(int rank, int nproc, int port, const char *exe, char **argv) {
    pid_t pid = fork();
    if (pid != 0) return pid;
    // Own process group: a terminal ^C reaches the launcher only, which forwards it once (a
    // second SIGINT would make the ranks exit at once). The launcher's death sends SIGTERM.
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    char v[32];
    snprintf(v, sizeof v, "%d", rank);
    setenv("RANK", v, 1);
    setenv("LOCAL_RANK", v, 1);
    snprintf(v, sizeof v, "%d", nproc);
    setenv("WORLD_SIZE", v, 1);
    setenv("LOCAL_WORLD_SIZE", v, 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    snprintf(v, sizeof v, "%d", port);
    setenv("MASTER_PORT", v, 1);
    execv(exe, argv);
    fprintf(stderr, "kda: error: launcher: cannot run %s: %s\n", exe, strerror(errno));
    _exit(127);
}

int kda_launch_local(int nproc, const char *exe, char **argv, double grace_s, KdaError *err) {
    if (getenv("RANK") || getenv("WORLD_SIZE"))
        return kda_fail(err, "--nproc-per-node inside a launched rank (RANK/WORLD_SIZE are set): "
                             "use one launcher");
    const char *mp = getenv("MASTER_PORT");
    int port = mp && atoi(mp) > 0 ? atoi(mp) : free_port_();
    struct sigaction sa = {.sa_handler = on_sig_}, old[3];
    sigemptyset(&sa.sa_mask);
    const int sigs[3] = {SIGINT, SIGTERM, SIGHUP};
    for (int i = 0; i < 3; i++)
        sigaction(sigs[i], &sa, &old[i]);
    pid_t *pids = kda_calloc((size_t)nproc, sizeof *pids);
    int *alive = kda_calloc((size_t)nproc, sizeof *alive);
    int n_alive = 0, status = 0;
    for (int r = 0; r < nproc; r++) {
        pids[r] = spawn_(r, nproc, port, exe, argv);
        if (pids[r] > 0) alive[r] = 1, n_alive++;
    }
    double fail_t = -1;
    while (n_alive) {
        if (g_sig) { // forward, once per delivery
            int s = g_sig;
            g_sig = 0;
            for (int r = 0; r < nproc; r++)
                if (alive[r]) kill(pids[r], s);
        }
        int ws;
        pid_t p = waitpid(-1, &ws, WNOHANG);
        if (p <= 0) {
            if (fail_t >= 0 && now_seconds() - fail_t > grace_s) {
                for (int r = 0; r < nproc; r++)
                    if (alive[r]) {
                        fprintf(stderr,
                                "kda: launcher: rank %d still running %.0f s after a "
                                "failure: killing it\n",
                                r, grace_s);
                        kill(pids[r], SIGKILL);
                    }
                fail_t = now_seconds() + 1e9; // once
            }
            struct timespec ts = {0, 20 * 1000 * 1000};
            nanosleep(&ts, NULL);
            continue;
        }
        for (int r = 0; r < nproc; r++) {
            if (pids[r] != p || !alive[r]) continue;
            alive[r] = 0;
            n_alive--;
            int code = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
            if (code) {
                if (WIFSIGNALED(ws))
                    fprintf(stderr, "kda: launcher: rank %d (pid %d) was killed by signal %d\n", r,
                            (int)p, WTERMSIG(ws));
                else
                    fprintf(stderr, "kda: launcher: rank %d (pid %d) exited with status %d\n", r,
                            (int)p, code);
                if (!status) status = code;
                if (fail_t < 0) fail_t = now_seconds();
            }
        }
    }
    for (int i = 0; i < 3; i++)
        sigaction(sigs[i], &old[i], NULL);
    free(pids);
    free(alive);
    return status;
}
