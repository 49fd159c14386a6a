// dist_test_util.h - helpers of the multi-rank tests: NEED_GLOO (a CPU-rank test skips itself in a
// build without Gloo), a free TCP port, bounded waits for child processes (a child past its limit
// is SIGKILLed, so no test leaves a rank running).
#ifndef KDA_DIST_TEST_UTIL_H
#define KDA_DIST_TEST_UTIL_H

#include <stdio.h> // NEED_GLOO's printf
#include <sys/types.h>

// CPU ranks need Gloo: a build without it (make KDA_GLOO=0) skips these tests, saying so.
#ifdef KDA_HAVE_GLOO
#define NEED_GLOO() ((void)0)
#else
#define NEED_GLOO()                                                                                \
    do {                                                                                           \
        printf("    skipped: this build has no Gloo (CPU ranks)\n");                               \
        return;                                                                                    \
    } while (0)
#endif

// A port the kernel just handed out on 127.0.0.1 (bound to port 0, then released).
int dist_test_free_port(void);
// Waits for pids[0..n) (entries <= 0 are skipped) up to limit_s seconds; kills what is left
// (then *late = 1). Returns the number of children that did not exit with status 0; status[i]
// (optional) receives each exit status (128 + signal when killed).
int dist_test_wait_status(pid_t *pids, int n, double limit_s, int *late, int *status);
int dist_test_wait(pid_t *pids, int n, double limit_s, int *late);

#endif
