// launch.h - `kda train --nproc-per-node N`: start N local ranks of this same program, like
// torchrun's standalone mode, and stand between them and the terminal.
//
// Each child gets the torchrun variables (RANK = LOCAL_RANK = i, WORLD_SIZE = LOCAL_WORLD_SIZE =
// N, MASTER_ADDR = 127.0.0.1, MASTER_PORT = $MASTER_PORT or a free port) and argv with the
// --nproc-per-node option removed. SIGINT/SIGTERM/SIGHUP to the launcher are forwarded to every
// child (which then finish the step, checkpoint, exit 0). When a child fails (non-zero status or
// killed by a signal) the others are expected to fail on their own within the collective
// timeout; the launcher SIGKILLs whoever is left after grace_s.
#ifndef KDA_DIST_LAUNCH_H
#define KDA_DIST_LAUNCH_H

#include "core/error.h"

// Removes "--nproc-per-node N" / "--nproc-per-node=N" (or "--nproc_per_node") from argv
// (argc updated, argv compacted) and returns N; 0 when absent; -1 with a message on a bad value.
int kda_launch_take_nproc(int *argc, char **argv, KdaError *err);

// Runs N copies of `exe` with argv (argv[0] included) and waits for all. Returns the launcher's
// exit status: 0 when every rank exited 0, else the first failing rank's status (128 + signal
// when killed), after one stderr line per failed rank naming it. -1 with a message when the
// ranks cannot be started (a rank already in the environment: nested launch).
int kda_launch_local(int nproc, const char *exe, char **argv, double grace_s, KdaError *err);

#endif
