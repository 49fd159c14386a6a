// dist_test_util.h - helpers of the multi-rank tests: a free TCP port, bounded waits for child
// processes (a child past its limit is SIGKILLed, so no test leaves a rank running).
#ifndef KDA_DIST_TEST_UTIL_H
#define KDA_DIST_TEST_UTIL_H

#include <sys/types.h>

// A port the kernel just handed out on 127.0.0.1 (bound to port 0, then released).
int dist_test_free_port(void);
// Waits for pids[0..n) (entries <= 0 are skipped) up to limit_s seconds; kills what is left
// (then *late = 1). Returns the number of children that did not exit with status 0; status[i]
// (optional) receives each exit status (128 + signal when killed).
int dist_test_wait_status(pid_t *pids, int n, double limit_s, int *late, int *status);
int dist_test_wait(pid_t *pids, int n, double limit_s, int *late);

#endif
