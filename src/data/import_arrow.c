// import_arrow.c - HF datasets Arrow shards -> Megatron .bin/.idx (import_arrow.h).
#include "data/import_arrow.h" // defines: KdaArrowImport, kda_import_arrow

#include <dirent.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"    // defines: path_join, path_is_dir
#include "data/indexed.h" // defines: IndexedBuilder, indexed_dtype_for_vocab
#include "data/arrow.h"   // defines: ArrowTable, arrow_load_file

static int ends_with_(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

int kda_arrow_input(const char *path) {
    if (ends_with_(path, ".arrow")) return 1;
    if (!path_is_dir(path)) return 0;
    DIR *d = opendir(path);
    struct dirent *e;
    int found = 0;
    while (d && (e = readdir(d)) && !found)
        found = ends_with_(e->d_name, ".arrow");
    if (d) closedir(d);
    return found;
}

static int cmp_str_(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

// The .arrow files of inputs in order (directories: sorted names). Owned array of owned paths.
static char **expand_(const char *const *inputs, int n, int *n_out, KdaError *err) {
    char **out = NULL;
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (!path_is_dir(inputs[i])) {
            out = kda_realloc(out, (size_t)(k + 1) * sizeof *out);
            out[k++] = kda_strdup(inputs[i]);
            continue;
        }
        DIR *d = opendir(inputs[i]);
        struct dirent *e;
        int first = k;
        while (d && (e = readdir(d))) {
            if (!ends_with_(e->d_name, ".arrow")) continue;
            char p[PATH_MAX];
            out = kda_realloc(out, (size_t)(k + 1) * sizeof *out);
            out[k++] = kda_strdup(path_join(p, sizeof p, inputs[i], e->d_name));
        }
        if (d) closedir(d);
        qsort(out + first, (size_t)(k - first), sizeof *out, cmp_str_);
    }
    *n_out = k;
    if (k == 0) kda_fail(err, "no .arrow files in the inputs");
    return out;
}

static int is_null_(const ArrowArray *a, int64_t row) {
    return a->validity && !((a->validity[row >> 3] >> (row & 7)) & 1);
}

static int64_t offset_(const ArrowArray *a, int large, int64_t i) {
    if (large) {
        int64_t v;
        memcpy(&v, a->offsets + 8 * i, 8);
        return v;
    }
    int32_t v;
    memcpy(&v, a->offsets + 4 * i, 4);
    return v;
}

static int64_t int_at_(const ArrowArray *a, const ArrowField *f, int64_t i) {
    const uint8_t *p = a->values + (size_t)i * (size_t)(f->bit_width / 8);
    switch (f->bit_width) {
    case 8:
        return f->is_signed ? (int64_t)(int8_t)p[0] : (int64_t)p[0];
    case 16: {
        uint16_t v;
        memcpy(&v, p, 2);
        return f->is_signed ? (int64_t)(int16_t)v : (int64_t)v;
    }
    case 32: {
        uint32_t v;
        memcpy(&v, p, 4);
        return f->is_signed ? (int64_t)(int32_t)v : (int64_t)v;
    }
    default: {
        int64_t v;
        memcpy(&v, p, 8);
        return v;
    }
    }
}

typedef struct {
    const KdaArrowImport *opt;
    IndexedBuilder *b; // NULL in the counting pass
    int64_t max_id, docs, tokens;
    TokIds ids;
    int32_t *buf;
    size_t cap;
} Pass;

// One row of a list-of-ints column: checks ids, appends the document (when b is set).
static int list_row_(Pass *p, const ArrowArray *col, const ArrowField *f, int64_t row,
                     const char *where, KdaError *err) {
    const ArrowArray *ch = &col->children[0];
    const ArrowField *cf = &f->children[0];
    int64_t s = offset_(col, f->large, row), e = offset_(col, f->large, row + 1);
    if ((size_t)(e - s) > p->cap) {
        p->cap = (size_t)(e - s) * 2;
        p->buf = kda_realloc(p->buf, p->cap * sizeof *p->buf);
    }
    for (int64_t i = s; i < e; i++) {
        if (is_null_(ch, i)) return kda_fail(err, "%s: a null id", where);
        int64_t id = int_at_(ch, cf, i);
        if (id < 0 || id > INT32_MAX || (p->opt->vocab_size > 0 && id >= p->opt->vocab_size))
            return kda_fail(err, "%s: id %lld outside [0, %lld)", where, (long long)id,
                            (long long)(p->opt->vocab_size > 0 ? p->opt->vocab_size : INT32_MAX));
        if (id > p->max_id) p->max_id = id;
        p->buf[i - s] = (int32_t)id;
    }
    if (e == s) return 0; // an empty document, as tokenize skips them
    p->docs++, p->tokens += e - s;
    if (!p->b) return 0;
    if (indexed_builder_add(p->b, p->buf, e - s, err)) return -1;
    indexed_builder_end_document(p->b);
    return 0;
}

static int text_row_(Pass *p, const ArrowArray *col, const ArrowField *f, int64_t row,
                     const char *where, KdaError *err) {
    int64_t s = offset_(col, f->large, row), e = offset_(col, f->large, row + 1);
    p->ids.n = 0;
    if (e == s) return 0;
    if (tok_encode(p->opt->tok, (const char *)col->values + s, (size_t)(e - s), p->opt->tok_flags,
                   &p->ids, err))
        return kda_fail(err, "%s: %s", where, err->msg);
    for (size_t i = 0; i < p->ids.n; i++)
        if (p->ids.ids[i] > p->max_id) p->max_id = p->ids.ids[i];
    p->docs++, p->tokens += (int64_t)p->ids.n;
    if (!p->b) return 0;
    if (indexed_builder_add(p->b, p->ids.ids, (int64_t)p->ids.n, err)) return -1;
    indexed_builder_end_document(p->b);
    return 0;
}

static int pass_file_(Pass *p, const char *path, KdaError *err) {
    ArrowTable t;
    if (arrow_load_file(&t, path, err)) return -1;
    int c = arrow_column_index(&t, p->opt->column), rc = 0;
    const ArrowField *f = c >= 0 ? &t.schema.children[c] : NULL;
    int is_list = f && f->type == ARROW_LIST && f->children[0].type == ARROW_INT;
    int is_text = f && (f->type == ARROW_UTF8 || f->type == ARROW_BINARY);
    if (!f)
        rc = kda_fail(err, "%s: no column '%s'", path, p->opt->column);
    else if (!is_list && !is_text)
        rc = kda_fail(err, "%s: column '%s' is neither a list of integers nor a string", path,
                      p->opt->column);
    else if (is_text && !p->opt->tok)
        rc =
            kda_fail(err, "%s: column '%s' holds text: it needs --tokenizer", path, p->opt->column);
    int64_t base = 0;
    for (int bi = 0; rc == 0 && bi < t.n_batches; bi++) {
        const ArrowArray *col = &t.batches[bi].cols[c];
        for (int64_t r = 0; rc == 0 && r < t.batches[bi].n_rows; r++) {
            if (is_null_(col, r)) continue;
            char where[PATH_MAX + 64];
            snprintf(where, sizeof where, "%s: row %lld, column '%s'", path, (long long)(base + r),
                     p->opt->column);
            rc =
                is_list ? list_row_(p, col, f, r, where, err) : text_row_(p, col, f, r, where, err);
        }
        base += t.batches[bi].n_rows;
    }
    arrow_free(&t);
    return rc;
}

int kda_import_arrow(const char *const *inputs, int n, const KdaArrowImport *opt,
                     const char *prefix, int64_t *n_docs, int64_t *n_tokens, KdaError *err) {
    int nf;
    char **files = expand_(inputs, n, &nf, err);
    if (!files) return -1;
    Pass p = {.opt = opt, .max_id = -1};
    int rc = 0;
    // The dtype needs the vocabulary: given, or a first pass finds the largest id.
    for (int i = 0; rc == 0 && opt->vocab_size <= 0 && i < nf; i++)
        rc = pass_file_(&p, files[i], err);
    IndexedBuilder b;
    int64_t vocab = opt->vocab_size > 0 ? opt->vocab_size : p.max_id + 1;
    if (rc == 0) rc = indexed_builder_open(&b, prefix, indexed_dtype_for_vocab(vocab), err);
    if (rc == 0) {
        p.b = &b, p.docs = p.tokens = 0;
        for (int i = 0; rc == 0 && i < nf; i++)
            rc = pass_file_(&p, files[i], err);
        if (rc)
            indexed_builder_abort(&b);
        else
            rc = indexed_builder_finish(&b, err);
    }
    *n_docs = p.docs, *n_tokens = p.tokens;
    for (int i = 0; i < nf; i++)
        free(files[i]);
    free(files), free(p.buf), tok_ids_free(&p.ids);
    return rc;
}
