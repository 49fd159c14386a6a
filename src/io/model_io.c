// model_io.c - HF model directory load/save for KDAForCausalLM (contract in model_io.h).
#include "io/model_io.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/util.h"      // defines: path_join, path_exists, path_is_dir, mkdir_p, fsync_dir_of
#include "io/safetensors.h" // defines: StModel, st_model_open/find/close, st_to_f32, StWriter

#define LM_HEAD "lm_head.weight"
#define EMBED   "model.embeddings.weight"

// "[256, 1, 4]"
static const char *shape_str(char *buf, size_t cap, int ndim, const int64_t *shape) {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
    return buf;
}

static int same_shape(const StTensor *s, int ndim, const int64_t *shape) {
    if (s->ndim != ndim) return 0;
    for (int i = 0; i < ndim; i++)
        if (s->shape[i] != shape[i]) return 0;
    return 1;
}

// Where a tensor would be: its file, or the directory's single file / index for missing ones.
static const char *where(const StModel *m) {
    return m->n_files == 1 ? m->files[0].path : m->dir;
}

// Shape and dtype of one stored tensor against what the table expects.
static int check_tensor(const StTensor *s, const char *file, const char *name, int ndim,
                        const int64_t *shape, KdaError *err) {
    char got[128], want[128];
    if (!same_shape(s, ndim, shape))
        return kda_fail(err, "%s: tensor '%s': shape %s, expected %s", file, name,
                        shape_str(got, sizeof got, s->ndim, s->shape),
                        shape_str(want, sizeof want, ndim, shape));
    if (s->dtype != ST_F32 && s->dtype != ST_BF16 && s->dtype != ST_F16)
        return kda_fail(err, "%s: tensor '%s': dtype %s, expected F32, BF16 or F16", file, name,
                        st_dtype_name(s->dtype));
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Load

// Every table row present with its shape and a float dtype.
static int check_rows(const StModel *m, const KdaParamTable *t, KdaError *err) {
    for (int i = 0; i < t->n; i++) {
        const KdaParamInfo *r = &t->rows[i];
        const char *file;
        const StTensor *s = st_model_find(m, r->name, &file);
        char want[128];
        if (!s)
            return kda_fail(err, "%s: missing tensor '%s' (expected shape %s)", where(m), r->name,
                            shape_str(want, sizeof want, r->ndim, r->shape));
        if (check_tensor(s, file, r->name, r->ndim, r->shape, err)) return -1;
    }
    return 0;
}

// No stored tensor outside the table, except a tied model's lm_head copy.
static int check_extras(const StModel *m, const KdaConfig *c, const KdaParamTable *t,
                        KdaError *err) {
    for (int64_t i = 0; i < m->n_entries; i++) {
        const StTensor *s = m->entries[i].tensor;
        if (kda_params_find(t, s->name)) continue;
        const char *file = m->files[m->entries[i].file].path;
        if (c->tie_word_embeddings && !strcmp(s->name, LM_HEAD)) {
            int64_t shape[2] = {c->vocab_size, c->hidden_size};
            if (check_tensor(s, file, s->name, 2, shape, err)) return -1;
            continue;
        }
        return kda_fail(
            err, "%s: unexpected tensor '%s' (not a parameter of this config%s)", file, s->name,
            !strcmp(s->name, LM_HEAD) ? "; tie_word_embeddings is false elsewhere?" : "");
    }
    return 0;
}

// A tied model's stored lm_head copy must equal the fp32 embedding bitwise (data-formats.md §5.3).
// Compared in chunks so no second [n_vocab, D] buffer is needed.
static int check_tied_copy(const StModel *m, const KdaParamTable *t, const float *flat,
                           KdaError *err) {
    const char *file;
    const StTensor *head = st_model_find(m, LM_HEAD, &file);
    const KdaParamInfo *emb = kda_params_find(t, EMBED);
    if (!head || !emb) return 0;
    const int64_t chunk = 1 << 16;
    float *buf = kda_malloc((size_t)chunk * sizeof *buf);
    size_t isz = st_dtype_size(head->dtype);
    int rc = 0;
    for (int64_t b = 0; b < head->numel && rc == 0; b += chunk) {
        int64_t n = head->numel - b < chunk ? head->numel - b : chunk;
        StTensor part = *head;
        part.ndim = 1;
        part.shape[0] = part.numel = n;
        part.nbytes = (size_t)n * isz;
        part.data = (const char *)head->data + (size_t)b * isz;
        if (st_to_f32(&part, buf, err))
            rc = -1;
        else if (memcmp(buf, flat + emb->offset + b, (size_t)n * sizeof *buf) != 0) {
            int64_t j = 0;
            while (j < n && !memcmp(&buf[j], &flat[emb->offset + b + j], sizeof *buf))
                j++;
            rc = kda_fail(err,
                          "%s: tensor '%s' differs from '%s' although tie_word_embeddings is "
                          "true (first at element %lld: %.9g vs %.9g)",
                          file, LM_HEAD, EMBED, (long long)(b + j), buf[j],
                          flat[emb->offset + b + j]);
        }
    }
    free(buf);
    return rc;
}

int kda_model_read_weights(const char *dir, const KdaConfig *cfg, const KdaParamTable *t,
                           float *flat, KdaError *err) {
    StModel m;
    if (st_model_open(&m, dir, err)) return -1;
    int rc = check_rows(&m, t, err);
    if (!rc) rc = check_extras(&m, cfg, t, err);
    if (!rc) {
        int bad = 0;
        KdaError row_err;
#pragma omp parallel for schedule(dynamic, 1)
        for (int i = 0; i < t->n; i++) {
            KdaError e;
            const StTensor *s = st_model_find(&m, t->rows[i].name, NULL);
            if (st_to_f32(s, flat + t->rows[i].offset, &e)) {
#pragma omp critical
                bad = 1, row_err = e;
            }
        }
        if (bad) rc = kda_fail(err, "%s", row_err.msg);
    }
    if (!rc && cfg->tie_word_embeddings) rc = check_tied_copy(&m, t, flat, err);
    st_model_close(&m);
    return rc;
}

int kda_model_load_dir(const char *dir, KdaConfig *cfg, KdaParamTable *t, float **flat,
                       KdaError *err) {
    KdaConfig c;
    KdaParamTable tab;
    if (kda_config_load(&c, dir, err)) return -1;
    if (kda_params_build(&tab, &c, err)) return -1;
    float *w = kda_malloc((size_t)tab.total_numel * sizeof *w);
    if (kda_model_read_weights(dir, &c, &tab, w, err)) {
        free(w);
        kda_params_free(&tab);
        return -1;
    }
    *cfg = c;
    *t = tab;
    *flat = w;
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Save

static int write_files(const char *dir, const KdaConfig *cfg, const KdaParamTable *t,
                       const float *flat, KdaSaveDtype dtype, KdaError *err) {
    char path[PATH_MAX];
    StDtype out = dtype == KDA_DTYPE_BF16 ? ST_BF16 : ST_F32;
    StWriter *w = st_writer_new();
    for (int i = 0; i < t->n; i++) {
        const KdaParamInfo *r = &t->rows[i];
        st_writer_add_f32(w, r->name, out, r->ndim, r->shape, flat + r->offset);
    }
    int rc = st_writer_save(w, path_join(path, sizeof path, dir, "model.safetensors"), err);
    st_writer_free(w);
    if (!rc)
        rc = kda_config_save(cfg, path_join(path, sizeof path, dir, "config.json"),
                             dtype == KDA_DTYPE_BF16 ? "bfloat16" : "float32", err);
    return rc;
}

static void remove_tmp_dir(const char *tmp) {
    char path[PATH_MAX];
    unlink(path_join(path, sizeof path, tmp, "model.safetensors"));
    unlink(path_join(path, sizeof path, tmp, "config.json"));
    rmdir(tmp);
}

int kda_model_save_dir(const char *dir, const KdaConfig *cfg, const KdaParamTable *t,
                       const float *flat, KdaSaveDtype dtype, KdaError *err) {
    char clean[PATH_MAX], tmp[PATH_MAX];
    if (snprintf(clean, sizeof clean, "%s", dir) >= (int)sizeof clean)
        return kda_fail(err, "%s: path too long", dir);
    for (size_t n = strlen(clean); n > 1 && clean[n - 1] == '/'; n--)
        clean[n - 1] = 0;
    if (path_is_dir(clean)) return write_files(clean, cfg, t, flat, dtype, err);
    if (path_exists(clean)) return kda_fail(err, "%s: exists and is not a directory", clean);
    // new directory: build it under a temporary name, then rename it into place
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", clean, (long)getpid()) >= (int)sizeof tmp)
        return kda_fail(err, "%s: path too long", clean);
    if (mkdir_p(tmp, err)) return -1;
    if (write_files(tmp, cfg, t, flat, dtype, err)) {
        remove_tmp_dir(tmp);
        return -1;
    }
    if (rename(tmp, clean) != 0) {
        int e = errno;
        remove_tmp_dir(tmp);
        return kda_fail(err, "%s: cannot rename from %s: %s", clean, tmp, strerror(e));
    }
    fsync_dir_of(clean);
    return 0;
}
