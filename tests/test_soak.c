// test_soak.c - crash-recovery soak: `kda train` (the binary, $KDA_BIN) on the tiny model is
// killed at pseudo-random points (SIGKILL, and one SIGHUP), resumed each time, and must end
// bit-identical to an uninterrupted run; then the same across a rollback (--load an older
// checkpoint into the same save dir, keep_last 8). Also: a finished run run again says so.
// Time-bounded: a kill delay is drawn from [40, 300] ms with a fixed seed, at most 8 kills per
// phase; the whole test takes a few seconds on 2 cores. Child processes (not fork()ed test code:
// libgomp does not survive fork in a process that already ran OpenMP).
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/rng.h"
#include "core/util.h"
#include "fixtures.h" // defines: TestDocs, TEST_DOCS, test_write_docs
#include "test.h"

extern char **environ;

static const char *soak_bin(void) {
    const char *b = getenv("KDA_BIN");
    return b ? b : "build/kda";
}

// The patterned dataset of test_trainer.c (120 documents; token k of document d is
// 10 + (d + 3k) % 40).
static int soak_data(const char *prefix) {
    KdaError err;
    return test_write_docs(prefix, TEST_DOCS(120), &err);
}

// Starts `kda train --config yaml EXTRA...` (stdout/stderr to log); returns the pid.
static pid_t soak_start(const char *yaml, const char *log, const char *extra) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "exec %s train --config %s --quiet --no-progress %s >>%s 2>&1",
             soak_bin(), yaml, extra ? extra : "", log);
    char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    pid_t pid;
    if (posix_spawn(&pid, "/bin/sh", NULL, NULL, argv, environ)) return -1;
    return pid;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

// Iteration `latest` names in save (0: none).
static int64_t soak_latest(const char *save) {
    char p[PATH_MAX];
    size_t n;
    KdaError err;
    char *s = read_file(path_join(p, sizeof p, save, "latest"), &n, &err);
    long long it = 0;
    if (s && sscanf(s, "iter_%lld", &it) != 1) it = 0;
    free(s);
    return it;
}

// Runs until a launch exits 0 without being interrupted (train_iters reached), interrupting up
// to max_kills launches; the first interruption is a SIGHUP (a clean stop: exit 0 with a
// checkpoint), the others SIGKILL. first_extra goes to the first launch only (a rollback's
// --load), which is interrupted only after it saved (latest != not_before) so that the next
// launch resumes on the new timeline. Returns the number of interruptions, -1 on failure.
static int soak_phase(const char *yaml, const char *save, const char *log, const char *first_extra,
                      int64_t not_before, KdaRng *rng, int max_kills) {
    int kills = 0;
    for (int launch = 0; launch < 40; launch++) {
        pid_t pid = soak_start(yaml, log, launch == 0 ? first_extra : NULL);
        if (pid < 0) return -1;
        int status = 0, killed = 0, exited = 0;
        for (int w = 0; launch == 0 && first_extra && w < 2000 && !exited; w++) {
            if (soak_latest(save) != not_before) break;
            sleep_ms(5);
            exited = waitpid(pid, &status, WNOHANG) == pid;
        }
        // the SIGHUP goes to a trainer that is surely past start-up (it saved once), so that it
        // tests the clean stop and not a signal racing the exec and the handler set-up
        for (int w = 0; kills == 0 && w < 2000 && !exited && soak_latest(save) == 0; w++) {
            sleep_ms(5);
            exited = waitpid(pid, &status, WNOHANG) == pid;
        }
        if (!exited && kills < max_kills) {
            sleep_ms(40 + (int)rng_below(rng, 261));
            exited = waitpid(pid, &status, WNOHANG) == pid;
            if (!exited) {
                kill(pid, kills == 0 ? SIGHUP : SIGKILL);
                killed = 1;
                kills++;
            }
        }
        if (!exited) waitpid(pid, &status, 0);
        int ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (killed && kills == 1 && !ok) {
            fprintf(stderr, "  SIGHUP did not stop the run cleanly (status %d)\n", status);
            return -1;
        }
        if (!killed && !ok) return -1;
        if (!killed) return kills;
    }
    return -1;
}

KDA_TEST(soak_kill_resume_bit_identical) {
    const char *d = test_tmpdir();
    char data[PATH_MAX], y1[PATH_MAX], y2[PATH_MAX], a[PATH_MAX], b[PATH_MAX], log[PATH_MAX];
    snprintf(data, sizeof data, "%s/data", d);
    snprintf(a, sizeof a, "%s/a", d);
    snprintf(b, sizeof b, "%s/b", d);
    snprintf(log, sizeof log, "%s/train.log", d);
    CHECK(soak_data(data) == 0);
    const char *common = "model: configs/tiny.json\nsplit: \"90,10,0\"\nseq_length: 16\n"
                         "train_iters: 24\nglobal_batch_size: 8\nmicro_batch_size: 4\n"
                         "lr: 3.0e-3\nmin_lr: 3.0e-4\nlr_warmup_iters: 2\nlog_interval: 5\n"
                         "seed: 7\nthreads: 1\n";
    char yaml[3 * PATH_MAX];
    KdaError err;
    snprintf(y1, sizeof y1, "%s/a.yaml", d);
    snprintf(yaml, sizeof yaml, "%strain_data_path: [%s]\nsave: %s\nsave_interval: 0\n", common,
             data, a);
    CHECK(write_file_atomic(y1, yaml, strlen(yaml), &err) == 0);
    snprintf(y2, sizeof y2, "%s/b.yaml", d);
    snprintf(yaml, sizeof yaml,
             "%strain_data_path: [%s]\nsave: %s\nsave_interval: 1\nkeep_last: 8\n", common, data,
             b);
    CHECK(write_file_atomic(y2, yaml, strlen(yaml), &err) == 0);
    pid_t pid = soak_start(y1, log, NULL);
    int status = -1;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
          WEXITSTATUS(status) == 0);
    KdaRng rng;
    rng_seed(&rng, 2026);
    int k1 = soak_phase(y2, b, log, NULL, 0, &rng, 6);
    CHECK_MSG(k1 >= 0, "soak run failed; log %s", log);
    const char *files[] = {"model.safetensors", "optimizer.safetensors"};
    char pa[PATH_MAX + 64], pb[PATH_MAX + 64];
    for (int i = 0; i < 2; i++) {
        snprintf(pa, sizeof pa, "%s/iter_0000024/%s", a, files[i]);
        snprintf(pb, sizeof pb, "%s/iter_0000024/%s", b, files[i]);
        CHECK_MSG(test_files_equal(pa, pb), "%s differs after %d interruptions", files[i], k1);
    }
    // a finished run run again says so (it printed "last loss 0.0000, 0 tokens/s")
    pid = soak_start(y2, log, NULL);
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
          WEXITSTATUS(status) == 0);
    size_t n;
    char *txt = read_file(log, &n, &err);
    CHECK_MSG(txt && strstr(txt, "nothing to train"), "no 'nothing to train' in %s", log);
    free(txt);
    // rollback: --load iter_0000017 of the same dir (keep_last 8 kept 17..24), killed and
    // resumed again; the old iter_0000024 is removed first, so the new timeline must rebuild it
    char extra[PATH_MAX + 32], old[PATH_MAX + 32];
    snprintf(extra, sizeof extra, "--load %s/iter_0000017", b);
    snprintf(old, sizeof old, "%s/iter_0000024", b);
    rmdir_flat(old);
    int k2 = soak_phase(y2, b, log, extra, 24, &rng, 4);
    CHECK_MSG(k2 >= 0, "rollback soak failed; log %s", log);
    for (int i = 0; i < 2; i++) {
        snprintf(pa, sizeof pa, "%s/iter_0000024/%s", a, files[i]);
        snprintf(pb, sizeof pb, "%s/iter_0000024/%s", b, files[i]);
        CHECK_MSG(test_files_equal(pa, pb), "%s differs after the rollback", files[i]);
    }
    fprintf(stderr, "  soak: %d + %d interruptions, final weights and moments byte-identical\n", k1,
            k2);
}
