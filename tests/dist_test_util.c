// dist_test_util.c - free ports and bounded child waits for the multi-rank tests (see .h).
#include "dist_test_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/util.h"

int dist_test_free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t l = sizeof a;
    int port = 0;
    if (fd >= 0 && !bind(fd, (struct sockaddr *)&a, sizeof a) &&
        !getsockname(fd, (struct sockaddr *)&a, &l))
        port = ntohs(a.sin_port);
    if (fd >= 0) close(fd);
    return port;
}

int dist_test_wait_status(pid_t *pids, int n, double limit_s, int *late, int *status) {
    double t_end = now_seconds() + limit_s;
    int left = 0, failed = 0;
    for (int i = 0; i < n; i++) {
        left += pids[i] > 0;
        if (status) status[i] = -1;
    }
    *late = 0;
    while (left) {
        for (int i = 0; i < n; i++) {
            if (pids[i] <= 0) continue;
            int ws;
            pid_t p = waitpid(pids[i], &ws, WNOHANG);
            if (p != pids[i]) continue;
            int code = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
            if (status) status[i] = code;
            failed += code != 0;
            pids[i] = 0;
            left--;
        }
        if (left && now_seconds() > t_end) {
            for (int i = 0; i < n; i++)
                if (pids[i] > 0) kill(pids[i], SIGKILL);
            *late = 1;
            t_end = now_seconds() + 1e9;
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return failed;
}

int dist_test_wait(pid_t *pids, int n, double limit_s, int *late) {
    return dist_test_wait_status(pids, n, limit_s, late, NULL);
}
