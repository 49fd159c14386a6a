// checkpoint.c - atomic training checkpoints (contract in checkpoint.h).
#include "train/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/json.h"
#include "core/util.h"
#include "io/model_io.h"
#include "io/safetensors.h"
#include "train/checkpoint_test.h" // defines: kda_checkpoint_test_hook (tests only)

#define STATE_FORMAT 1

int (*kda_checkpoint_test_hook)(const char *stage) = NULL;

static int hook(const char *stage, KdaError *err) {
    if (kda_checkpoint_test_hook && kda_checkpoint_test_hook(stage))
        return kda_fail(err, "checkpoint: simulated failure at stage '%s'", stage);
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Checksums (docs/reliability.md): a 64-bit multiply-xorshift hash over 8-byte words, computed
// from the in-memory buffers at save and from the loaded buffers at load. Not cryptographic:
// it catches damage (a flipped bit, a truncated or edited file), not an attacker.

static uint64_t hash_bytes(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0x9e3779b97f4a7c15ull;
        h ^= h >> 29;
    }
    for (; n; p++, n--)
        h = (h ^ *p) * 0x100000001b3ull;
    return h;
}

static uint64_t hash_weights(const KdaParamTable *t, const float *params) {
    return hash_bytes(0x6b64615f77ull, params, (size_t)t->total_numel * sizeof(float));
}

static uint64_t hash_optimizer(const KdaParamTable *t, const KdaAdamW *opt) {
    size_t nb = (size_t)t->total_numel * sizeof(float);
    uint64_t h = hash_bytes(0x6b64615f6full, opt->m, nb);
    h = hash_bytes(h, opt->v, nb);
    return hash_bytes(h, &opt->step, sizeof opt->step);
}

// Every number of the trainer state (the descriptions are informative and rewritten on resume).
static uint64_t hash_state(const KdaTrainState *st) {
    int64_t f[7] = {st->iteration, st->consumed_train,  st->consumed_valid, st->skipped_iters,
                    st->nan_iters, st->consecutive_nan, st->rng.has_spare};
    uint64_t h = hash_bytes(0x6b64615f73ull, f, sizeof f);
    h = hash_bytes(h, st->rng.s, sizeof st->rng.s);
    h = hash_bytes(h, &st->rng.spare, sizeof st->rng.spare);
    h = hash_bytes(h, &st->train_fingerprint, sizeof st->train_fingerprint);
    return hash_bytes(h, &st->valid_fingerprint, sizeof st->valid_fingerprint);
}

// ---------------------------------------------------------------------------------------------
// Directory helpers

static int fsync_path(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

static int parse_iter_name(const char *name, int64_t *it) {
    if (strncmp(name, "iter_", 5)) return 0;
    char *end;
    long long v = strtoll(name + 5, &end, 10);
    if (end == name + 5 || *end || v < 0) return 0;
    *it = v;
    return 1;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

// Iteration `latest` names in save, or -1 (missing or unreadable `latest`).
static int64_t latest_iter(const char *save) {
    char p[PATH_MAX];
    KdaError e;
    size_t n;
    char *s = path_exists(path_join(p, sizeof p, save, "latest")) ? read_file(p, &n, &e) : NULL;
    int64_t it = -1;
    if (s) {
        while (n && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' '))
            s[--n] = 0;
        if (!parse_iter_name(s, &it)) it = -1;
    }
    free(s);
    return it;
}

// Sorted iterations of the iter_* directories of save (*n of them; caller frees).
static int64_t *list_iters(const char *save, int64_t *n) {
    DIR *d = opendir(save);
    int64_t *its = NULL, cap = 0, it;
    *n = 0;
    if (!d) return NULL;
    struct dirent *e;
    while ((e = readdir(d)))
        if (parse_iter_name(e->d_name, &it)) {
            if (*n == cap) its = kda_realloc(its, (size_t)(cap = cap ? 2 * cap : 16) * 8);
            its[(*n)++] = it;
        }
    closedir(d);
    if (*n) qsort(its, (size_t)*n, sizeof *its, cmp_i64);
    return its;
}

// Iteration of checkpoint dir ck when it is an iter_* directory directly inside save (same
// device and inode as save), else -1.
static int64_t iter_in_dir(const char *ck, const char *save) {
    if (!ck) return -1;
    char parent[PATH_MAX];
    snprintf(parent, sizeof parent, "%s", ck);
    size_t n = strlen(parent);
    while (n > 1 && parent[n - 1] == '/')
        parent[--n] = 0;
    char *slash = strrchr(parent, '/');
    const char *base = slash ? slash + 1 : parent;
    int64_t it;
    if (!parse_iter_name(base, &it)) return -1;
    if (slash == parent)
        slash[1] = 0;
    else if (slash)
        *slash = 0;
    else
        snprintf(parent, sizeof parent, ".");
    struct stat a, b;
    if (stat(parent, &a) || stat(save, &b) || a.st_dev != b.st_dev || a.st_ino != b.st_ino)
        return -1;
    return it;
}

// The rotation rule (docs/reliability.md): after saving iteration `written`, of the iter_*
// directories with an iteration <= written the keep_last newest stay; older ones are removed,
// except the one `latest` names and the one the run resumed from (resumed, -1: none in this
// dir). Directories past `written` belong to a timeline the run rolled back from: they are
// neither counted nor removed (re-saving such an iteration replaces it).
static void rotate(const char *save, int64_t keep_last, int64_t written, int64_t resumed) {
    if (keep_last <= 0) return;
    int64_t n, kept = 0, latest = latest_iter(save);
    int64_t *its = list_iters(save, &n);
    char name[32], p[PATH_MAX];
    for (int64_t i = n - 1; i >= 0; i--) {
        if (its[i] > written) continue;
        if (kept++ < keep_last || its[i] == written || its[i] == latest || its[i] == resumed)
            continue;
        snprintf(name, sizeof name, "iter_%07lld", (long long)its[i]);
        rmdir_flat(path_join(p, sizeof p, save, name));
    }
    free(its);
}

// Is the writer of temp dir name (".tmp-iter_NNNNNNN.PID", or an old ".tmp-iter_NNNNNNN" /
// ".tmp-old-..." without a pid) gone? Pids are local: kill(pid, 0) fails with ESRCH.
static int writer_gone(const char *name) {
    const char *dot = strrchr(name, '.');
    if (!dot || dot == name) return 1;
    char *end;
    long pid = strtol(dot + 1, &end, 10);
    if (*end || end == dot + 1 || pid <= 0) return 1; // no pid: written before pids were used
    if (pid == (long)getpid()) return 1;              // ours: a failed earlier save
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

// Removes the .tmp-* directories of saves whose writer is gone (a killed save).
static void remove_stale_temps(const char *save) {
    DIR *d = opendir(save);
    if (!d) return;
    struct dirent *e;
    char p[PATH_MAX];
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, ".tmp-", 5) && writer_gone(e->d_name))
            rmdir_flat(path_join(p, sizeof p, save, e->d_name));
    closedir(d);
}

// ---------------------------------------------------------------------------------------------
// The save-dir lock

int kda_save_lock(KdaSaveLock *l, const char *save, KdaError *err) {
    char p[PATH_MAX], host[256] = "?";
    l->fd = -1;
    if (mkdir_p(save, err)) return -1;
    path_join(p, sizeof p, save, ".lock");
    int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return kda_fail(err, "%s: cannot open the lock file: %s", p, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        char who[300] = "";
        ssize_t n = pread(fd, who, sizeof who - 1, 0);
        who[n > 0 ? n : 0] = 0;
        who[strcspn(who, "\n")] = 0;
        long pid = 0;
        char h[256] = "?";
        close(fd);
        if (e != EWOULDBLOCK) return kda_fail(err, "%s: flock failed: %s", p, strerror(e));
        if (sscanf(who, "%ld %255s", &pid, h) != 2) snprintf(h, sizeof h, "?");
        return kda_fail(err,
                        "%s is in use by another writer (pid %ld on %s holds %s); wait for it to "
                        "finish, stop it, or use another save dir",
                        save, pid, h, p);
    }
    gethostname(host, sizeof host - 1);
    char line[320];
    int n = snprintf(line, sizeof line, "%ld %s\n", (long)getpid(), host);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, line, (size_t)n, 0) != n) {
        int e = errno;
        close(fd);
        return kda_fail(err, "%s: cannot write the lock file: %s", p, strerror(e));
    }
    l->fd = fd;
    return 0;
}

void kda_save_unlock(KdaSaveLock *l) {
    if (l->fd >= 0) close(l->fd); // closing the descriptor releases the flock
    l->fd = -1;
}

// ---------------------------------------------------------------------------------------------
// Save

static int save_optimizer(const char *path, const KdaParamTable *t, const KdaAdamW *opt,
                          KdaError *err) {
    StWriter *w = st_writer_new();
    char name[160], step[32];
    for (int i = 0; i < t->n; i++) {
        const KdaParamInfo *r = &t->rows[i];
        snprintf(name, sizeof name, "%s.exp_avg", r->name);
        st_writer_add(w, name, ST_F32, r->ndim, r->shape, opt->m + r->offset);
        snprintf(name, sizeof name, "%s.exp_avg_sq", r->name);
        st_writer_add(w, name, ST_F32, r->ndim, r->shape, opt->v + r->offset);
    }
    snprintf(step, sizeof step, "%lld", (long long)opt->step);
    st_writer_meta(w, "step", step);
    st_writer_meta(w, "optimizer", "adamw");
    int rc = st_writer_save(w, path, err);
    st_writer_free(w);
    return rc;
}

static void put_u64(FILE *f, const char *key, uint64_t v, const char *sep) {
    fprintf(f, "  \"%s\": \"%016" PRIx64 "\"%s\n", key, v, sep);
}

typedef struct {
    uint64_t weights, optimizer, state;
    int present; // loaded state only: the file carries checksums (older ones do not)
} Checksums;

static int save_state(const char *path, const KdaTrainState *st, const Checksums *ck,
                      KdaError *err) {
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    if (!f) return kda_fail(err, "%s: out of memory", path);
    union {
        double d;
        uint64_t u;
    } spare = {.d = st->rng.spare};
    fprintf(f, "{\n  \"format\": %d,\n", STATE_FORMAT);
    fprintf(f, "  \"iteration\": %lld,\n", (long long)st->iteration);
    fprintf(f, "  \"consumed_train_samples\": %lld,\n", (long long)st->consumed_train);
    fprintf(f, "  \"consumed_valid_samples\": %lld,\n", (long long)st->consumed_valid);
    fprintf(f, "  \"skipped_iterations\": %lld,\n", (long long)st->skipped_iters);
    fprintf(f, "  \"nan_iterations\": %lld,\n", (long long)st->nan_iters);
    fprintf(f, "  \"consecutive_nan_iterations\": %lld,\n", (long long)st->consecutive_nan);
    fprintf(f,
            "  \"rng\": [\"%016" PRIx64 "\", \"%016" PRIx64 "\", \"%016" PRIx64 "\", \"%016" PRIx64
            "\"],\n",
            st->rng.s[0], st->rng.s[1], st->rng.s[2], st->rng.s[3]);
    fprintf(f, "  \"rng_has_spare\": %d,\n", st->rng.has_spare);
    put_u64(f, "rng_spare_bits", spare.u, ",");
    fprintf(f, "  \"train_data\": ");
    json_write_string(f, st->train_desc, strlen(st->train_desc));
    fprintf(f, ",\n");
    put_u64(f, "train_data_fingerprint", st->train_fingerprint, ",");
    fprintf(f, "  \"valid_data\": ");
    json_write_string(f, st->valid_desc, strlen(st->valid_desc));
    fprintf(f, ",\n");
    put_u64(f, "valid_data_fingerprint", st->valid_fingerprint, ",");
    put_u64(f, "checksum_weights", ck->weights, ",");
    put_u64(f, "checksum_optimizer", ck->optimizer, ",");
    put_u64(f, "checksum_state", ck->state, "");
    fprintf(f, "}\n");
    fclose(f);
    int rc = write_file_atomic(path, buf, n, err);
    free(buf);
    return rc;
}

// Non-finite weights or moments are never saved (docs/reliability.md): they would become
// `latest` and rotate out the finite checkpoints.
static int check_finite(int64_t it, const KdaParamTable *t, const float *params,
                        const KdaAdamW *opt, KdaError *err) {
    const float *bufs[3] = {params, opt->m, opt->v};
    const char *what[3] = {"weights", "exp_avg", "exp_avg_sq"};
    for (int k = 0; k < 3; k++) {
        const KdaParamInfo *r = kda_params_first_nonfinite(t, bufs[k]);
        if (r)
            return kda_fail(err,
                            "checkpoint: refusing to save iteration %lld: %s of %s hold a "
                            "non-finite value",
                            (long long)it, what[k], r->name);
    }
    return 0;
}

static int write_all(const char *tmp, const KdaTrainState *st, const KdaConfig *cfg,
                     const KdaParamTable *t, const float *params, const KdaAdamW *opt,
                     const KdaRunConfig *rc, KdaError *err) {
    char p[PATH_MAX];
    if (kda_model_save_dir(tmp, cfg, t, params, KDA_DTYPE_F32, err) || hook("model", err))
        return -1;
    if (save_optimizer(path_join(p, sizeof p, tmp, "optimizer.safetensors"), t, opt, err) ||
        hook("optimizer", err))
        return -1;
    Checksums ck = {hash_weights(t, params), hash_optimizer(t, opt), hash_state(st), 1};
    if (save_state(path_join(p, sizeof p, tmp, "trainer_state.json"), st, &ck, err) ||
        hook("state", err))
        return -1;
    if (rc && kda_run_config_write_atomic(rc, path_join(p, sizeof p, tmp, "run_config.yaml"), err))
        return -1;
    if (fsync_path(tmp)) return kda_fail(err, "%s: fsync failed: %s", tmp, strerror(errno));
    return hook("before_rename", err);
}

int kda_checkpoint_save(const char *save, const KdaTrainState *st, const KdaConfig *cfg,
                        const KdaParamTable *t, const float *params, const KdaAdamW *opt,
                        const KdaRunConfig *rc, int64_t keep_last, const char *resumed_from,
                        char *out_dir, KdaError *err) {
    char name[32], tmp[PATH_MAX], fin[PATH_MAX], old[PATH_MAX], p[PATH_MAX];
    if (check_finite(st->iteration, t, params, opt, err)) return -1;
    if (mkdir_p(save, err)) return -1;
    remove_stale_temps(save);
    snprintf(name, sizeof name, "iter_%07lld", (long long)st->iteration);
    snprintf(tmp, sizeof tmp, "%s/.tmp-%s.%ld", save, name, (long)getpid());
    path_join(fin, sizeof fin, save, name);
    if (mkdir(tmp, 0755) != 0) return kda_fail(err, "%s: cannot create: %s", tmp, strerror(errno));
    if (write_all(tmp, st, cfg, t, params, opt, rc, err)) {
        rmdir_flat(tmp);
        return -1;
    }
    // An existing iter_ dir of the same iteration (a re-run) is swapped with the new one in one
    // step (renameat2 RENAME_EXCHANGE: fin is never missing), then deleted from the temp name.
    // Where the file system cannot exchange, it is moved aside first (a short window in which
    // fin is missing; the resume then names the previous checkpoint).
    old[0] = 0;
    if (path_exists(fin)) {
        if (rename_exchange(tmp, fin) == 0) {
            snprintf(old, sizeof old, "%s", tmp); // now the old directory
        } else {
            snprintf(old, sizeof old, "%s/.tmp-old-%s.%ld", save, name, (long)getpid());
            rmdir_flat(old);
            if (rename(fin, old) != 0) {
                int e = errno;
                rmdir_flat(tmp);
                return kda_fail(err, "%s: cannot replace: %s", fin, strerror(e));
            }
        }
    }
    if (hook("replacing", err)) return -1;
    if (strcmp(old, tmp) && rename(tmp, fin) != 0) {
        int e = errno;
        rmdir_flat(tmp);
        return kda_fail(err, "%s: cannot rename from %s: %s", fin, tmp, strerror(e));
    }
    fsync_path(save);
    if (hook("before_latest", err)) return -1;
    char line[40];
    int n = snprintf(line, sizeof line, "%s\n", name);
    if (write_file_atomic(path_join(p, sizeof p, save, "latest"), line, (size_t)n, err)) return -1;
    if (old[0]) rmdir_flat(old);
    rotate(save, keep_last, st->iteration, iter_in_dir(resumed_from, save));
    if (out_dir) snprintf(out_dir, PATH_MAX, "%s", fin);
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Load

int kda_checkpoint_resolve(const char *path, char *out, size_t cap, KdaError *err) {
    char p[PATH_MAX];
    if (!path_is_dir(path)) return kda_fail(err, "%s: no such checkpoint directory", path);
    if (path_exists(path_join(p, sizeof p, path, "trainer_state.json"))) {
        snprintf(out, cap, "%s", path);
        return 0;
    }
    path_join(p, sizeof p, path, "latest");
    if (!path_exists(p)) return 1;
    size_t n;
    char *s = read_file(p, &n, err);
    if (!s) return -1;
    while (n && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' '))
        s[--n] = 0;
    int64_t it;
    if (!parse_iter_name(s, &it)) {
        kda_fail(err, "%s: expected \"iter_NNNNNNN\", found \"%.60s\"", p, s);
        free(s);
        return -1;
    }
    path_join(out, cap, path, s);
    free(s);
    if (!path_exists(path_join(p, sizeof p, out, "trainer_state.json"))) {
        char older[PATH_MAX];
        if (kda_checkpoint_older(out, older, sizeof older))
            return kda_fail(err,
                            "%s: `latest` names %s, which has no trainer_state.json; the previous "
                            "checkpoint is %s (resume from it with --load %s)",
                            path, out, older, older);
        return kda_fail(err, "%s: `latest` names %s, which has no trainer_state.json", path, out);
    }
    return 0;
}

int kda_checkpoint_older(const char *dir, char *out, size_t cap) {
    char save[PATH_MAX];
    snprintf(save, sizeof save, "%s", dir);
    size_t n = strlen(save);
    while (n > 1 && save[n - 1] == '/')
        save[--n] = 0;
    char *slash = strrchr(save, '/');
    int64_t it;
    if (!parse_iter_name(slash ? slash + 1 : save, &it)) return 0;
    if (slash)
        *slash = 0;
    else
        snprintf(save, sizeof save, ".");
    int64_t m, *its = list_iters(save, &m);
    int found = 0;
    for (int64_t i = m - 1; i >= 0 && !found; i--)
        if (its[i] < it) {
            snprintf(out, cap, "%s/iter_%07lld", save, (long long)its[i]);
            found = 1;
        }
    free(its);
    return found;
}

static int load_optimizer(const char *path, const KdaParamTable *t, KdaAdamW *opt, KdaError *err) {
    SafeTensors st;
    if (st_open(&st, path, err)) return -1;
    int rc = 0;
    char name[160];
    for (int i = 0; i < t->n && !rc; i++) {
        const KdaParamInfo *r = &t->rows[i];
        for (int k = 0; k < 2 && !rc; k++) {
            snprintf(name, sizeof name, "%s.%s", r->name, k ? "exp_avg_sq" : "exp_avg");
            const StTensor *x = st_find(&st, name);
            if (!x)
                rc = kda_fail(err, "%s: tensor %s is missing", path, name);
            else if (x->dtype != ST_F32 || x->numel != r->numel)
                rc = kda_fail(err, "%s: tensor %s: expected F32 with %lld elements", path, name,
                              (long long)r->numel);
            else
                memcpy((k ? opt->v : opt->m) + r->offset, x->data, x->nbytes);
        }
    }
    if (!rc && st.n_tensors != 2 * (int64_t)t->n)
        rc =
            kda_fail(err, "%s: %lld tensors, expected %d", path, (long long)st.n_tensors, 2 * t->n);
    const char *step = st_meta(&st, "step");
    char *end = NULL;
    long long s = step ? strtoll(step, &end, 10) : -1;
    if (!rc && (!step || *end || s < 0))
        rc = kda_fail(err, "%s: __metadata__ \"step\" missing or not a non-negative integer", path);
    if (!rc) opt->step = s;
    st_close(&st);
    return rc;
}

static int get_hex(const JsonValue *v, uint64_t *out) {
    if (!v || v->type != JSON_STRING) return -1;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v->str, &end, 16);
    if (errno || *end || end == v->str) return -1;
    *out = x;
    return 0;
}

// Ranges of the trainer-state counters (a hand-edited or damaged file fails here, naming the
// field, instead of tripping an assertion later).
static int check_state(const char *path, const KdaTrainState *st, KdaError *err) {
    struct {
        const char *key;
        int64_t v, max;
    } f[] = {{"iteration", st->iteration, INT64_MAX},
             {"consumed_train_samples", st->consumed_train, INT64_MAX},
             {"consumed_valid_samples", st->consumed_valid, INT64_MAX},
             {"skipped_iterations", st->skipped_iters, st->iteration},
             {"nan_iterations", st->nan_iters, st->iteration},
             {"consecutive_nan_iterations", st->consecutive_nan, st->iteration},
             {"rng_has_spare", st->rng.has_spare, 1}};
    for (size_t i = 0; i < sizeof f / sizeof *f; i++)
        if (f[i].v < 0 || f[i].v > f[i].max)
            return kda_fail(err, "%s: %s = %lld (expected 0..%lld)", path, f[i].key,
                            (long long)f[i].v, (long long)f[i].max);
    return 0;
}

static int load_state(const char *path, KdaTrainState *st, Checksums *ck, KdaError *err) {
    JsonDoc doc;
    if (json_parse_file(&doc, path, err)) return -1;
    const JsonValue *r = &doc.root;
    memset(st, 0, sizeof *st);
    int64_t fmt = 0, has_spare = 0;
    uint64_t spare = 0;
    const JsonValue *rng = json_get(r, "rng");
    const char *td = json_get_str(r, "train_data"), *vd = json_get_str(r, "valid_data");
    int bad = json_get_int(r, "format", &fmt) || fmt != STATE_FORMAT ||
              json_get_int(r, "iteration", &st->iteration) ||
              json_get_int(r, "consumed_train_samples", &st->consumed_train) ||
              json_get_int(r, "consumed_valid_samples", &st->consumed_valid) ||
              json_get_int(r, "skipped_iterations", &st->skipped_iters) ||
              json_get_int(r, "nan_iterations", &st->nan_iters) ||
              json_get_int(r, "consecutive_nan_iterations", &st->consecutive_nan) ||
              json_get_int(r, "rng_has_spare", &has_spare) ||
              get_hex(json_get(r, "rng_spare_bits"), &spare) || !rng || rng->type != JSON_ARRAY ||
              rng->len != 4 || !td || !vd ||
              get_hex(json_get(r, "train_data_fingerprint"), &st->train_fingerprint) ||
              get_hex(json_get(r, "valid_data_fingerprint"), &st->valid_fingerprint);
    for (int i = 0; !bad && i < 4; i++)
        bad = get_hex(&rng->items[i], &st->rng.s[i]);
    if (!bad) {
        union {
            uint64_t u;
            double d;
        } sp = {.u = spare};
        st->rng.has_spare = (int)has_spare;
        st->rng.spare = sp.d;
        snprintf(st->train_desc, sizeof st->train_desc, "%s", td);
        snprintf(st->valid_desc, sizeof st->valid_desc, "%s", vd);
        ck->present = json_get(r, "checksum_weights") != NULL;
        if (ck->present)
            bad = get_hex(json_get(r, "checksum_weights"), &ck->weights) ||
                  get_hex(json_get(r, "checksum_optimizer"), &ck->optimizer) ||
                  get_hex(json_get(r, "checksum_state"), &ck->state);
    }
    json_free(&doc);
    if (bad)
        return kda_fail(err,
                        "%s: not a format-%d trainer state (a field is missing or has the "
                        "wrong type)",
                        path, STATE_FORMAT);
    return check_state(path, st, err);
}

// Compares the loaded buffers and state with the checksums recorded at save.
static int verify(const char *dir, const Checksums *ck, const KdaParamTable *t, const float *params,
                  const KdaAdamW *opt, const KdaTrainState *st, KdaError *err) {
    const char *what = NULL;
    if (hash_weights(t, params) != ck->weights)
        what = "weights (model.safetensors)";
    else if (hash_optimizer(t, opt) != ck->optimizer)
        what = "optimizer moments (optimizer.safetensors)";
    else if (hash_state(st) != ck->state)
        what = "trainer state (trainer_state.json)";
    if (!what) return 0;
    return kda_fail(err,
                    "%s: the %s do not match the checksum recorded at save: the checkpoint is "
                    "damaged or was edited (--no-verify-checksums loads it anyway)",
                    dir, what);
}

int kda_checkpoint_load(const char *dir, const KdaConfig *cfg, const KdaParamTable *t,
                        float *params, KdaAdamW *opt, KdaTrainState *st, int verify_checksums,
                        KdaError *err) {
    char p[PATH_MAX], diff[512];
    KdaConfig ck;
    if (kda_config_load(&ck, path_join(p, sizeof p, dir, "config.json"), err)) return -1;
    if (kda_config_diff(&ck, cfg, diff, sizeof diff))
        return kda_fail(err, "%s: model config differs from the checkpoint (checkpoint vs run): %s",
                        dir, diff);
    if (kda_model_read_weights(dir, cfg, t, params, err)) return -1;
    if (load_optimizer(path_join(p, sizeof p, dir, "optimizer.safetensors"), t, opt, err))
        return -1;
    Checksums sums = {0};
    if (load_state(path_join(p, sizeof p, dir, "trainer_state.json"), st, &sums, err)) return -1;
    if (verify_checksums && sums.present) return verify(dir, &sums, t, params, opt, st, err);
    return 0;
}
