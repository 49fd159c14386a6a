// test_checkpoint.c - checkpoint save/load round trip, keep_last, `latest`, atomicity under a
// simulated write failure and under SIGKILL of a fork()ed child mid-save, config diff, export.
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/commands.h"
#include "core/rng.h"
#include "core/util.h"
#include "io/model_io.h"
#include "test.h"
#include "train/checkpoint.h"
#include "train/checkpoint_test.h"

typedef struct {
    KdaConfig cfg;
    KdaParamTable t;
    float *p;
    KdaAdamW opt;
    KdaTrainState st;
} Ck;

// The tiny model with random weights and moments; values depend on salt.
static int ck_make(Ck *c, uint64_t salt) {
    KdaError err;
    memset(c, 0, sizeof *c);
    if (kda_config_load(&c->cfg, "configs/tiny.json", &err) ||
        kda_config_derive(&c->cfg, "tiny", &err) || kda_params_build(&c->t, &c->cfg, &err))
        return -1;
    c->p = kda_malloc((size_t)c->t.total_numel * sizeof(float));
    kda_params_init(&c->t, &c->cfg, c->p, 42 + salt);
    KdaAdamWConfig oc = {0.9, 0.95, 1e-8, 0.01};
    if (kda_adamw_init(&c->opt, c->t.total_numel, &oc, &err)) return -1;
    KdaRng r;
    rng_seed(&r, salt);
    for (int64_t i = 0; i < c->t.total_numel; i++) {
        c->opt.m[i] = rng_normal(&r, 0, 1e-3f);
        c->opt.v[i] = (float)rng_uniform(&r) * 1e-6f;
    }
    c->opt.step = (int64_t)salt + 5;
    c->st.iteration = (int64_t)salt;
    c->st.consumed_train = 16 * (int64_t)salt;
    c->st.consumed_valid = 3;
    c->st.nan_iters = c->st.skipped_iters = 1;
    rng_seed(&c->st.rng, 99 + salt);
    rng_normal(&c->st.rng, 0, 1); // leaves a spare normal in the state
    snprintf(c->st.train_desc, sizeof c->st.train_desc, "train \"data\" %llu",
             (unsigned long long)salt);
    c->st.train_fingerprint = 0xfedcba9876543210ull;
    return 0;
}

static void ck_free(Ck *c) {
    free(c->p);
    kda_adamw_free(&c->opt);
    kda_params_free(&c->t);
}

static int ck_save_from(const char *save, Ck *c, int64_t keep, const char *resumed, KdaError *err) {
    return kda_checkpoint_save(save, &c->st, &c->cfg, &c->t, c->p, &c->opt, NULL, keep, resumed,
                               NULL, err);
}

static int ck_save(const char *save, Ck *c, int64_t keep, KdaError *err) {
    return ck_save_from(save, c, keep, NULL, err);
}

// Does SAVE/iter_NNNNNNN exist?
static int has_iter(const char *save, int64_t it) {
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/iter_%07lld", save, (long long)it);
    return path_is_dir(p);
}

// Saves iteration it (contents from salt it) into save with keep_last keep.
// resumed: the iteration of save the run resumed from (-1: none).
static int ck_save_iter(const char *save, int64_t it, int64_t keep, int64_t resumed,
                        KdaError *err) {
    Ck c;
    char from[PATH_MAX];
    snprintf(from, sizeof from, "%s/iter_%07lld/", save, (long long)resumed);
    if (ck_make(&c, (uint64_t)it)) return -1;
    int rc = ck_save_from(save, &c, keep, resumed >= 0 ? from : NULL, err);
    ck_free(&c);
    return rc;
}

// Loads SAVE (via latest) and compares with c bit for bit.
static int ck_matches(const char *save, Ck *c) {
    char dir[PATH_MAX];
    KdaError err;
    if (kda_checkpoint_resolve(save, dir, sizeof dir, &err) != 0) return 0;
    Ck l;
    if (ck_make(&l, 1000)) return 0; // different contents, same shapes
    int ok = kda_checkpoint_load(dir, &c->cfg, &c->t, l.p, &l.opt, &l.st, 1, &err) == 0;
    if (!ok) fprintf(stderr, "load: %s\n", err.msg);
    size_t n = (size_t)c->t.total_numel * sizeof(float);
    ok = ok && !memcmp(l.p, c->p, n) && !memcmp(l.opt.m, c->opt.m, n) &&
         !memcmp(l.opt.v, c->opt.v, n) && l.opt.step == c->opt.step &&
         l.st.iteration == c->st.iteration && l.st.consumed_train == c->st.consumed_train &&
         l.st.consumed_valid == c->st.consumed_valid && l.st.nan_iters == c->st.nan_iters &&
         !memcmp(l.st.rng.s, c->st.rng.s, sizeof l.st.rng.s) &&
         l.st.rng.has_spare == c->st.rng.has_spare && l.st.rng.spare == c->st.rng.spare &&
         !strcmp(l.st.train_desc, c->st.train_desc) &&
         l.st.train_fingerprint == c->st.train_fingerprint;
    ck_free(&l);
    return ok;
}

static int count_entries(const char *dir, const char *prefix) {
    char cmd[PATH_MAX + 64];
    int n = 0;
    FILE *f;
    snprintf(cmd, sizeof cmd, "ls -a '%s' | grep -c '^%s'", dir, prefix);
    if ((f = popen(cmd, "r"))) {
        if (fscanf(f, "%d", &n) != 1) n = -1;
        pclose(f);
    }
    return n;
}

KDA_TEST(checkpoint_round_trip_and_keep_last) {
    char save[1024];
    snprintf(save, sizeof save, "%s/save", test_tmpdir());
    KdaError err;
    Ck a[3];
    for (int i = 0; i < 3; i++) {
        CHECK(ck_make(&a[i], (uint64_t)i + 1) == 0);
        CHECK_MSG(ck_save(save, &a[i], 2, &err) == 0, "%s", err.msg);
        CHECK_MSG(ck_matches(save, &a[i]), "checkpoint %d does not read back bit-identically", i);
    }
    CHECK_EQ_INT(count_entries(save, "iter_"), 2); // keep_last 2: iter_0000001 deleted
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/iter_0000001", save);
    CHECK(!path_exists(p));
    size_t n;
    snprintf(p, sizeof p, "%s/latest", save);
    char *s = read_file(p, &n, &err);
    CHECK(s && !strcmp(s, "iter_0000003\n"));
    free(s);
    // an iter dir is itself a valid HF model dir
    KdaConfig c;
    KdaParamTable t;
    float *w;
    snprintf(p, sizeof p, "%s/iter_0000003", save);
    CHECK_MSG(kda_model_load_dir(p, &c, &t, &w, &err) == 0, "%s", err.msg);
    CHECK(!memcmp(w, a[2].p, (size_t)a[2].t.total_numel * sizeof(float)));
    free(w);
    kda_params_free(&t);
    for (int i = 0; i < 3; i++)
        ck_free(&a[i]);
}

// Rotation after a rollback (issue 15, finding 1): a save dir holding iter_146/148/150 (keep_last
// 3) resumed from an older checkpoint elsewhere. Every checkpoint the rolled-back run writes
// survives its own save and `latest` always names an existing one; the newer checkpoints of
// the abandoned timeline are neither counted nor removed. The old rule kept the 3 highest
// numbers and deleted each new checkpoint right after writing it.
KDA_TEST(checkpoint_rotation_after_rollback) {
    char save[1024], got[PATH_MAX];
    snprintf(save, sizeof save, "%s/save", test_tmpdir());
    KdaError err;
    for (int64_t it = 146; it <= 150; it += 2)
        CHECK_MSG(ck_save_iter(save, it, 3, -1, &err) == 0, "%s", err.msg);
    for (int64_t it = 102; it <= 112; it += 2) {
        CHECK_MSG(ck_save_iter(save, it, 3, -1, &err) == 0, "%s", err.msg);
        CHECK_MSG(has_iter(save, it), "iter %lld deleted by its own save", (long long)it);
        CHECK(kda_checkpoint_resolve(save, got, sizeof got, &err) == 0);
    }
    CHECK(has_iter(save, 108) && has_iter(save, 110) && has_iter(save, 112));
    CHECK(!has_iter(save, 106) && !has_iter(save, 102));
    CHECK(has_iter(save, 146) && has_iter(save, 148) && has_iter(save, 150));
    // resumed from iter_146 of this dir, keep_last 2: the new iter_147 and its source stay
    char s2[1024];
    snprintf(s2, sizeof s2, "%s/save2", test_tmpdir());
    for (int64_t it = 144; it <= 150; it += 2)
        CHECK(ck_save_iter(s2, it, 0, -1, &err) == 0);
    CHECK_MSG(ck_save_iter(s2, 147, 2, 146, &err) == 0, "%s", err.msg);
    CHECK(has_iter(s2, 147) && has_iter(s2, 146) && !has_iter(s2, 144));
    // keep_last 1 still keeps the checkpoint the run resumed from
    CHECK(ck_save_iter(s2, 149, 1, 146, &err) == 0);
    CHECK(has_iter(s2, 149) && has_iter(s2, 146) && !has_iter(s2, 147));
    CHECK(kda_checkpoint_resolve(s2, got, sizeof got, &err) == 0 && strstr(got, "iter_0000149"));
}

// Non-finite weights or moments are never saved (issue 15, finding 2): the save fails naming
// the tensor, writes nothing, and `latest` keeps naming the finite checkpoint.
KDA_TEST(checkpoint_refuses_nonfinite) {
    char save[1024];
    snprintf(save, sizeof save, "%s/save", test_tmpdir());
    KdaError err;
    Ck a, b;
    CHECK(ck_make(&a, 1) == 0 && ck_make(&b, 2) == 0);
    CHECK(ck_save(save, &a, 0, &err) == 0);
    const KdaParamInfo *r = &b.t.rows[b.t.n - 1];
    b.p[r->offset + 1] = NAN;
    CHECK(ck_save(save, &b, 0, &err) == -1);
    CHECK_MSG(strstr(err.msg, "non-finite") && strstr(err.msg, r->name), "%s", err.msg);
    b.p[r->offset + 1] = 0;
    b.opt.v[3] = INFINITY;
    CHECK(ck_save(save, &b, 0, &err) == -1);
    CHECK_MSG(strstr(err.msg, "exp_avg_sq"), "%s", err.msg);
    CHECK_EQ_INT(count_entries(save, "iter_"), 1);
    CHECK(ck_matches(save, &a));
    ck_free(&a);
    ck_free(&b);
}

static int fail_at_optimizer(const char *stage) {
    return !strcmp(stage, "optimizer");
}

// A write failure mid-save: error, temp dir removed, `latest` and the old checkpoint intact.
KDA_TEST(checkpoint_failed_save_keeps_previous) {
    char save[1024];
    snprintf(save, sizeof save, "%s/save", test_tmpdir());
    KdaError err;
    Ck a, b;
    CHECK(ck_make(&a, 1) == 0 && ck_make(&b, 2) == 0);
    CHECK(ck_save(save, &a, 0, &err) == 0);
    kda_checkpoint_test_hook = fail_at_optimizer;
    int rc = ck_save(save, &b, 0, &err);
    kda_checkpoint_test_hook = NULL;
    CHECK(rc == -1);
    CHECK_MSG(strstr(err.msg, "optimizer") != NULL, "%s", err.msg);
    CHECK_EQ_INT(count_entries(save, ".tmp"), 0);
    CHECK_EQ_INT(count_entries(save, "iter_"), 1);
    CHECK(ck_matches(save, &a));
    // a save into an unwritable place fails cleanly too (a file where the directory should be)
    char bad[PATH_MAX];
    snprintf(bad, sizeof bad, "%s/latest/x", save);
    CHECK(ck_save(bad, &b, 0, &err) == -1);
    ck_free(&a);
    ck_free(&b);
}

static int g_pipe_w = -1;
static const char *g_kill_stage;
static int block_at_stage(const char *stage) {
    if (!strcmp(stage, g_kill_stage)) {
        char c = 1;
        if (write(g_pipe_w, &c, 1) != 1) _exit(3);
        pause(); // the parent SIGKILLs us here
    }
    return 0;
}

// Saves ck into save in a fork()ed child whose save blocks at `stage` (block_at_stage), and
// SIGKILLs it there once it says so through the pipe. Returns the child's wait status.
static int save_killed_at(const char *save, Ck *ck, const char *stage) {
    int fds[2];
    CHECK(pipe(fds) == 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        KdaError err;
        close(fds[0]);
        g_pipe_w = fds[1];
        g_kill_stage = stage;
        kda_checkpoint_test_hook = block_at_stage;
        ck_save(save, ck, 0, &err);
        _exit(2); // not reached when the hook blocks
    }
    close(fds[1]);
    char c = 0;
    CHECK(read(fds[0], &c, 1) == 1 && c == 1);
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    close(fds[0]);
    return status;
}

// The real test: a fork()ed child is SIGKILLed in the middle of a save (after the weights
// were written; and after the rename, before `latest`). The previous checkpoint stays the
// `latest` and loads bit-identically; the next save removes the stale temp directory.
KDA_TEST(checkpoint_sigkill_mid_save) {
    const char *stages[2] = {"state", "before_latest"};
    for (int k = 0; k < 2; k++) {
        char save[1024];
        snprintf(save, sizeof save, "%s/save%d", test_tmpdir(), k);
        KdaError err;
        Ck a, b;
        CHECK(ck_make(&a, 1) == 0 && ck_make(&b, 2) == 0);
        CHECK(ck_save(save, &a, 0, &err) == 0);
        int status = save_killed_at(save, &b, stages[k]);
        CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
        CHECK_MSG(ck_matches(save, &a), "stage %s: previous checkpoint not intact", stages[k]);
        if (k == 0) CHECK_EQ_INT(count_entries(save, ".tmp-iter_"), 1); // the killed save's
        // the next save succeeds and cleans up
        CHECK(ck_save(save, &b, 0, &err) == 0);
        CHECK(ck_matches(save, &b));
        CHECK_EQ_INT(count_entries(save, ".tmp"), 0);
        ck_free(&a);
        ck_free(&b);
    }
}

// Re-saving the iteration `latest` names (a rerun of the same steps), SIGKILLed right after the
// old directory was displaced: `latest` still names a complete checkpoint, old or new (issue
// 15, finding 11: the old directory was renamed away first, leaving `latest` on a missing dir).
KDA_TEST(checkpoint_resave_same_iteration_killed) {
    char save[1024];
    snprintf(save, sizeof save, "%s/save", test_tmpdir());
    KdaError err;
    Ck a, b;
    CHECK(ck_make(&a, 1) == 0 && ck_make(&b, 2) == 0);
    b.st.iteration = a.st.iteration; // the same iteration, other contents
    CHECK(ck_save(save, &a, 0, &err) == 0);
    save_killed_at(save, &b, "replacing");
    CHECK_MSG(ck_matches(save, &b) || ck_matches(save, &a), "latest names no loadable checkpoint");
    CHECK(ck_save(save, &b, 0, &err) == 0 && ck_matches(save, &b)); // and a rerun completes
    CHECK_EQ_INT(count_entries(save, ".tmp"), 0);
    ck_free(&a);
    ck_free(&b);
}

KDA_TEST(checkpoint_resolve_and_config_diff) {
    char save[1024], p[PATH_MAX], out[PATH_MAX];
    KdaError err;
    snprintf(save, sizeof save, "%s/empty", test_tmpdir());
    CHECK(mkdir_p(save, &err) == 0);
    CHECK_EQ_INT(kda_checkpoint_resolve(save, out, sizeof out, &err), 1);
    snprintf(p, sizeof p, "%s/latest", save);
    CHECK(write_file_atomic(p, "garbage\n", 8, &err) == 0);
    CHECK_EQ_INT(kda_checkpoint_resolve(save, out, sizeof out, &err), -1);
    CHECK(strstr(err.msg, "iter_") != NULL);
    KdaConfig a, b;
    CHECK(kda_config_load(&a, "configs/tiny.json", &err) == 0);
    b = a;
    char d[256];
    CHECK_EQ_INT(kda_config_diff(&a, &b, d, sizeof d), 0);
    b.num_hidden_layers = 3;
    CHECK_EQ_INT(kda_config_diff(&a, &b, d, sizeof d), 1);
    CHECK_MSG(strstr(d, "num_hidden_layers: 2 vs 3") != NULL, "%s", d);
}

// kda export (fp32) of a checkpoint: kda_model_load_dir reads the same weights bit for bit;
// tokenizer files and generation_config.json are written.
KDA_TEST(checkpoint_export_round_trip) {
    char save[1024], out[1024], p[PATH_MAX];
    snprintf(save, sizeof save, "%s/save", test_tmpdir());
    snprintf(out, sizeof out, "%s/hf", test_tmpdir());
    KdaError err;
    Ck a;
    CHECK(ck_make(&a, 4) == 0);
    CHECK(ck_save(save, &a, 0, &err) == 0);
    char *argv[] = {"--checkpoint", save,   "--output",    out,
                    "--dtype",      "fp32", "--tokenizer", "assets/tokenizers/gpt2/tokenizer.json"};
    CHECK_EQ_INT(cmd_export(8, argv), 0);
    KdaConfig c;
    KdaParamTable t;
    float *w = NULL;
    CHECK_MSG(kda_model_load_dir(out, &c, &t, &w, &err) == 0, "%s", err.msg);
    CHECK(w && t.total_numel == a.t.total_numel &&
          !memcmp(w, a.p, (size_t)a.t.total_numel * sizeof(float)));
    CHECK(kda_config_equal(&c, &a.cfg));
    const char *files[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                           "generation_config.json", "config.json"};
    for (int i = 0; i < 5; i++)
        CHECK_MSG(path_exists(path_join(p, sizeof p, out, files[i])), "missing %s", files[i]);
    free(w);
    kda_params_free(&t);
    ck_free(&a);
}

// Runs `$KDA_BIN export ARGS` (a child process: kda export exits on error), output in msg.
static int export_cli(const char *args, char *msg, size_t cap) {
    char a[8192];
    snprintf(a, sizeof a, "export %s", args);
    return test_run_kda(msg, cap, "OMP_NUM_THREADS=1", a);
}

// kda export into a training checkpoint (or a save dir) is refused and leaves its fp32
// weights untouched; into a non-empty dir it is refused unless --overwrite, which replaces
// the whole directory (no stale files). Issue 15, finding 5: the checkpoint's fp32 weights
// were replaced by bf16 ones.
KDA_TEST(checkpoint_export_refuses_unsafe_output) {
    char save[1024], ck[1100], out[1024], p[PATH_MAX], msg[4096];
    snprintf(save, sizeof save, "%s/save", test_tmpdir());
    snprintf(ck, sizeof ck, "%s/iter_0000004", save);
    snprintf(out, sizeof out, "%s/hf", test_tmpdir());
    KdaError err;
    Ck a;
    CHECK(ck_make(&a, 4) == 0);
    CHECK(ck_save(save, &a, 0, &err) == 0);
    char args[4096];
    snprintf(args, sizeof args, "--checkpoint %s --output %s --overwrite", save, ck);
    CHECK_EQ_INT(export_cli(args, msg, sizeof msg), 1);
    CHECK_MSG(strstr(msg, "checkpoint"), "%s", msg);
    snprintf(args, sizeof args, "--checkpoint %s --output %s --overwrite", save, save);
    CHECK_EQ_INT(export_cli(args, msg, sizeof msg), 1);
    CHECK(ck_matches(save, &a)); // fp32 weights intact
    CHECK(mkdir_p(out, &err) == 0);
    CHECK(write_file_atomic(path_join(p, sizeof p, out, "stale.bin"), "x", 1, &err) == 0);
    snprintf(args, sizeof args, "--checkpoint %s --output %s", save, out);
    CHECK_EQ_INT(export_cli(args, msg, sizeof msg), 1);
    CHECK_MSG(strstr(msg, "not empty") && strstr(msg, "--overwrite"), "%s", msg);
    snprintf(args, sizeof args, "--checkpoint %s --output %s --overwrite", save, out);
    CHECK_EQ_INT(export_cli(args, msg, sizeof msg), 0);
    CHECK(!path_exists(p)); // the stale file went with the old directory
    CHECK(path_exists(path_join(p, sizeof p, out, "model.safetensors")));
    CHECK_EQ_INT(count_entries(test_tmpdir(), "hf."), 0); // no temp dirs left
    ck_free(&a);
}

// One writer per save dir (issue 15, finding 8: two trainers on one dir deleted each other's
// .tmp-iter_* and crashed). A second lock fails naming the holder's pid and host; after the
// unlock it succeeds. A save removes the temp dirs of dead writers and keeps a live one's.
KDA_TEST(checkpoint_save_dir_lock) {
    char save[1024], host[256], want[300];
    snprintf(save, sizeof save, "%s/save", test_tmpdir());
    KdaError err;
    KdaSaveLock a, b;
    CHECK_MSG(kda_save_lock(&a, save, &err) == 0, "%s", err.msg);
    CHECK(kda_save_lock(&b, save, &err) == -1);
    gethostname(host, sizeof host);
    snprintf(want, sizeof want, "pid %ld on %s", (long)getpid(), host);
    CHECK_MSG(strstr(err.msg, want) && strstr(err.msg, save), "%s", err.msg);
    kda_save_unlock(&a);
    CHECK_MSG(kda_save_lock(&b, save, &err) == 0, "%s", err.msg);
    pid_t dead = fork();
    if (dead == 0) _exit(0);
    waitpid(dead, NULL, 0);
    char stale[PATH_MAX], live[PATH_MAX];
    snprintf(stale, sizeof stale, "%s/.tmp-iter_0000009.%ld", save, (long)dead);
    snprintf(live, sizeof live, "%s/.tmp-iter_0000009.%ld", save, (long)getppid());
    CHECK(mkdir_p(stale, &err) == 0 && mkdir_p(live, &err) == 0);
    Ck c;
    CHECK(ck_make(&c, 3) == 0);
    CHECK(ck_save(save, &c, 0, &err) == 0);
    CHECK(!path_exists(stale) && path_exists(live));
    rmdir(live);
    kda_save_unlock(&b);
    ck_free(&c);
}

// Replaces the first occurrence of from by to (same length) in file path.
static int edit_file(const char *path, const char *from, const char *to) {
    size_t n;
    KdaError err;
    char *s = read_file(path, &n, &err);
    char *at = s ? strstr(s, from) : NULL;
    if (at) memcpy(at, to, strlen(to));
    int rc = at ? write_file_atomic(path, s, n, &err) : -1;
    free(s);
    return rc;
}

// Loads save/iter_0000003 into fresh buffers (verify: check the checksums).
static int ck_load3(const char *save, int verify, KdaError *err) {
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/iter_0000003", save);
    Ck l;
    if (ck_make(&l, 1000)) return -2;
    int rc = kda_checkpoint_load(dir, &l.cfg, &l.t, l.p, &l.opt, &l.st, verify, err);
    ck_free(&l);
    return rc;
}

// Checkpoint contents are validated (issue 15, finding 12): a negative consumed-samples count is
// an error naming the field (it was an assertion abort later), and the recorded checksums catch
// an edited iteration and a flipped weight bit (accepted silently before); verify 0 skips them.
KDA_TEST(checkpoint_contents_validated) {
    char save[1024], p[PATH_MAX];
    snprintf(save, sizeof save, "%s/save", test_tmpdir());
    KdaError err;
    Ck a;
    CHECK(ck_make(&a, 3) == 0);
    CHECK(ck_save(save, &a, 0, &err) == 0);
    CHECK_MSG(ck_load3(save, 1, &err) == 0, "%s", err.msg);
    snprintf(p, sizeof p, "%s/iter_0000003/trainer_state.json", save);
    CHECK(edit_file(p, "\"consumed_train_samples\": 48,", "\"consumed_train_samples\": -5,") == 0);
    CHECK(ck_load3(save, 1, &err) == -1);
    CHECK_MSG(strstr(err.msg, "consumed_train_samples") && strstr(err.msg, "-5"), "%s", err.msg);
    CHECK(edit_file(p, "\"consumed_train_samples\": -5,", "\"consumed_train_samples\": 48,") == 0);
    CHECK(edit_file(p, "\"iteration\": 3,", "\"iteration\": 4,") == 0);
    CHECK(ck_load3(save, 1, &err) == -1);
    CHECK_MSG(strstr(err.msg, "checksum") && strstr(err.msg, "trainer_state.json"), "%s", err.msg);
    CHECK(edit_file(p, "\"iteration\": 4,", "\"iteration\": 3,") == 0);
    snprintf(p, sizeof p, "%s/iter_0000003/model.safetensors", save);
    size_t n;
    char *w = read_file(p, &n, &err);
    CHECK(w != NULL);
    if (!w) return;
    w[n - 7] ^= 0x10; // a bit of the last tensor's data
    CHECK(write_file_atomic(p, w, n, &err) == 0);
    free(w);
    CHECK(ck_load3(save, 1, &err) == -1);
    CHECK_MSG(strstr(err.msg, "checksum") && strstr(err.msg, "weights"), "%s", err.msg);
    CHECK_MSG(ck_load3(save, 0, &err) == 0, "%s", err.msg);
    ck_free(&a);
}
