// safetensors.c - safetensors reader (mmap + full validation), model directory loader and
// atomic writer. Rules: data-formats.md §4.2 (validity), §4.3 (metadata), §4.4 (shards).
#include "io/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/util.h" // defines: bf16/f16 conversions, open_atomic/commit_atomic, path_join

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c assumes a little-endian host (safetensors data is little-endian)"
#endif

// ------------------------------------------------------------------------------------------
// Dtypes

static const struct {
    const char *name;
    size_t size;
} k_dtypes[ST_N_DTYPES] = {
    [ST_BOOL] = {"BOOL", 1}, [ST_U8] = {"U8", 1},   [ST_I8] = {"I8", 1},     [ST_I16] = {"I16", 2},
    [ST_U16] = {"U16", 2},   [ST_F16] = {"F16", 2}, [ST_BF16] = {"BF16", 2}, [ST_I32] = {"I32", 4},
    [ST_U32] = {"U32", 4},   [ST_F32] = {"F32", 4}, [ST_F64] = {"F64", 8},   [ST_I64] = {"I64", 8},
    [ST_U64] = {"U64", 8},
};

const char *st_dtype_name(StDtype dt) {
    return (unsigned)dt < ST_N_DTYPES ? k_dtypes[dt].name : "?";
}

size_t st_dtype_size(StDtype dt) {
    return (unsigned)dt < ST_N_DTYPES ? k_dtypes[dt].size : 0;
}

int st_dtype_parse(const char *s, StDtype *out) {
    for (int i = 0; i < ST_N_DTYPES; i++)
        if (strcmp(s, k_dtypes[i].name) == 0) return *out = (StDtype)i, 0;
    return -1;
}

// ------------------------------------------------------------------------------------------
// Reader

#define ST_SHOW 100 // bytes of a (possibly hostile) name shown in an error message

// Copies s into buf for an error line: control bytes become '?', long names are cut at a
// UTF-8 boundary and end in "...". buf must hold ST_SHOW + 4 bytes.
static const char *show(char *buf, const char *s) {
    size_t n = 0;
    for (; s[n] && n < ST_SHOW; n++) {
        unsigned char c = (unsigned char)s[n];
        buf[n] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
    }
    if (s[n]) {
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
            n--; // don't split a char
        memcpy(buf + n, "...", 4);
    } else {
        buf[n] = 0;
    }
    return buf;
}

typedef struct {
    const char *file;            // for messages
    const unsigned char *buffer; // start of the byte buffer (after the header)
    size_t buffer_bytes;
    KdaError *err;
} ParseCtx;

// Reads a JSON number that must be an integer in [0, INT64_MAX].
static int get_nonneg(const JsonValue *v, int64_t *out) {
    if (v->type != JSON_NUMBER || !v->is_int || v->i < 0) return -1;
    *out = v->i;
    return 0;
}

static int parse_shape(ParseCtx *c, const char *nm, const JsonValue *sh, StTensor *t) {
    if (!sh || sh->type != JSON_ARRAY)
        return kda_fail(c->err, "%s: tensor '%s': \"shape\" must be an array of integers", c->file,
                        nm);
    if (sh->len > ST_MAX_DIMS)
        return kda_fail(c->err, "%s: tensor '%s': shape has %zu dims, at most %d supported",
                        c->file, nm, sh->len, ST_MAX_DIMS);
    t->ndim = (int)sh->len;
    t->numel = 1;
    int overflow = 0;
    for (int d = 0; d < t->ndim; d++) {
        if (get_nonneg(&sh->items[d], &t->shape[d]))
            return kda_fail(c->err, "%s: tensor '%s': shape[%d] must be a non-negative integer",
                            c->file, nm, d);
        // like the reference, a product that overflows is an error even if a later dim is 0
        if (t->shape[d] != 0 && t->numel > INT64_MAX / t->shape[d])
            overflow = 1;
        else
            t->numel *= t->shape[d];
    }
    if (overflow)
        return kda_fail(c->err, "%s: tensor '%s': shape product overflows 64 bits", c->file, nm);
    return 0;
}

static int parse_offsets(ParseCtx *c, const char *nm, const JsonValue *o, StTensor *t) {
    int64_t b, e;
    if (!o || o->type != JSON_ARRAY || o->len != 2 || get_nonneg(&o->items[0], &b) ||
        get_nonneg(&o->items[1], &e))
        return kda_fail(c->err,
                        "%s: tensor '%s': \"data_offsets\" must be [begin, end], two "
                        "non-negative integers",
                        c->file, nm);
    if (e < b)
        return kda_fail(c->err, "%s: tensor '%s': data_offsets [%lld, %lld] end before begin",
                        c->file, nm, (long long)b, (long long)e);
    if ((uint64_t)e > c->buffer_bytes)
        return kda_fail(c->err,
                        "%s: tensor '%s': data_offsets [%lld, %lld] out of range: the byte "
                        "buffer has %zu bytes (truncated file?)",
                        c->file, nm, (long long)b, (long long)e, c->buffer_bytes);
    size_t isz = k_dtypes[t->dtype].size;
    if ((uint64_t)t->numel > SIZE_MAX / isz)
        return kda_fail(c->err, "%s: tensor '%s': %s shape with %lld elements: byte size overflows",
                        c->file, nm, k_dtypes[t->dtype].name, (long long)t->numel);
    if ((uint64_t)t->numel * isz != (uint64_t)(e - b))
        return kda_fail(c->err,
                        "%s: tensor '%s': %s shape with %lld elements needs %llu bytes but "
                        "data_offsets [%lld, %lld] span %lld",
                        c->file, nm, k_dtypes[t->dtype].name, (long long)t->numel,
                        (unsigned long long)t->numel * isz, (long long)b, (long long)e,
                        (long long)(e - b));
    t->offset = (size_t)b;
    t->nbytes = (size_t)(e - b);
    t->data = c->buffer + b;
    return 0;
}

static int parse_tensor(ParseCtx *c, const char *name, size_t name_len, const JsonValue *v,
                        StTensor *t) {
    char nm[ST_SHOW + 4];
    show(nm, name);
    if (strlen(name) != name_len)
        return kda_fail(c->err, "%s: tensor '%s': name contains a NUL character", c->file, nm);
    if (v->type != JSON_OBJECT)
        return kda_fail(c->err, "%s: tensor '%s': expected an object, got %s", c->file, nm,
                        json_type_name(v->type));
    t->name = name;
    const char *ds = json_get_str(v, "dtype");
    if (!ds)
        return kda_fail(c->err, "%s: tensor '%s': \"dtype\" missing or not a string", c->file, nm);
    if (st_dtype_parse(ds, &t->dtype)) {
        char dv[ST_SHOW + 4];
        const char *why =
            strncmp(ds, "F8", 2) == 0 || strncmp(ds, "F4", 2) == 0 || strncmp(ds, "F6", 2) == 0
                ? "sub-16-bit floats are not supported"
                : "unknown dtype";
        return kda_fail(c->err,
                        "%s: tensor '%s': dtype \"%s\": %s (expected BOOL, U8, I8, I16, U16, "
                        "F16, BF16, I32, U32, F32, F64, I64 or U64)",
                        c->file, nm, show(dv, ds), why);
    }
    if (parse_shape(c, nm, json_get(v, "shape"), t)) return -1;
    return parse_offsets(c, nm, json_get(v, "data_offsets"), t);
}

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

// __metadata__: object of string -> string, keys unique and NUL-free. Sorted for st_meta.
static int parse_meta(ParseCtx *c, const JsonValue *v, SafeTensors *st) {
    if (v->type != JSON_OBJECT)
        return kda_fail(c->err, "%s: __metadata__ must be an object of strings, got %s", c->file,
                        json_type_name(v->type));
    st->n_meta = (int64_t)v->len;
    size_t cap = v->len ? v->len : 1;
    st->meta_keys = kda_calloc(cap, sizeof *st->meta_keys);
    st->meta_vals = kda_calloc(cap, sizeof *st->meta_vals);
    // sort (key, index) pairs by sorting keys, then look values up: store index after the key
    const char **pairs = kda_malloc(2 * cap * sizeof *pairs);
    char nm[ST_SHOW + 4];
    for (size_t i = 0; i < v->len; i++) {
        if (strlen(v->keys[i]) != v->key_lens[i] || v->items[i].type != JSON_STRING) {
            free(pairs);
            return kda_fail(c->err, "%s: __metadata__ key '%s': %s", c->file, show(nm, v->keys[i]),
                            v->items[i].type != JSON_STRING ? "value must be a string"
                                                            : "key contains a NUL character");
        }
        pairs[2 * i] = v->keys[i];
        pairs[2 * i + 1] = v->items[i].str;
    }
    qsort(pairs, v->len, 2 * sizeof *pairs, cmp_str_ptr);
    for (size_t i = 0; i < v->len; i++) {
        if (i > 0 && strcmp(pairs[2 * i], pairs[2 * i - 2]) == 0) {
            kda_fail(c->err, "%s: __metadata__ key '%s' appears twice", c->file,
                     show(nm, pairs[2 * i]));
            free(pairs);
            return -1;
        }
        st->meta_keys[i] = pairs[2 * i];
        st->meta_vals[i] = pairs[2 * i + 1];
    }
    free(pairs);
    return 0;
}

static int cmp_tensor_name(const void *a, const void *b) {
    return strcmp(((const StTensor *)a)->name, ((const StTensor *)b)->name);
}

static int cmp_tensor_offsets(const void *a, const void *b) {
    const StTensor *x = *(const StTensor *const *)a, *y = *(const StTensor *const *)b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    if (x->nbytes != y->nbytes) return x->nbytes < y->nbytes ? -1 : 1;
    return strcmp(x->name, y->name);
}

// Sorted by (begin, end), the tensors must tile [0, buffer_bytes) exactly (§4.2).
static int check_tiling(ParseCtx *c, const SafeTensors *st) {
    int64_t n = st->n_tensors;
    const StTensor **by_off = kda_malloc((size_t)(n ? n : 1) * sizeof *by_off);
    for (int64_t i = 0; i < n; i++)
        by_off[i] = &st->tensors[i];
    qsort(by_off, (size_t)n, sizeof *by_off, cmp_tensor_offsets);
    size_t pos = 0;
    const StTensor *prev = NULL;
    int rc = 0;
    char a[ST_SHOW + 4], b[ST_SHOW + 4];
    for (int64_t i = 0; i < n && rc == 0; i++) {
        const StTensor *t = by_off[i];
        if (t->offset < pos)
            rc = kda_fail(c->err,
                          "%s: tensor '%s' (bytes %zu..%zu) overlaps tensor '%s' (ends at %zu)",
                          c->file, show(a, t->name), t->offset, t->offset + t->nbytes,
                          show(b, prev->name), pos);
        else if (t->offset > pos && prev)
            rc = kda_fail(c->err,
                          "%s: gap of %zu bytes before tensor '%s' (begins at %zu; tensor '%s' "
                          "ends at %zu)",
                          c->file, t->offset - pos, show(a, t->name), t->offset,
                          show(b, prev->name), pos);
        else if (t->offset > pos)
            rc = kda_fail(c->err,
                          "%s: gap of %zu bytes before tensor '%s': the first tensor must begin "
                          "at offset 0",
                          c->file, t->offset, show(a, t->name));
        pos = t->offset + t->nbytes;
        prev = t;
    }
    if (rc == 0 && pos != c->buffer_bytes)
        rc = kda_fail(c->err,
                      "%s: tensors end at byte %zu%s%s%s but the byte buffer has %zu bytes "
                      "(unused trailing data)",
                      c->file, pos, prev ? " (tensor '" : "", prev ? show(a, prev->name) : "",
                      prev ? "')" : "", c->buffer_bytes);
    free(by_off);
    return rc;
}

// Validates the header JSON object and fills st (tensors, metadata). Does not own buf.
static int parse_header(ParseCtx *c, SafeTensors *st) {
    const JsonValue *root = &st->doc.root;
    st->tensors = kda_calloc(root->len ? root->len : 1, sizeof *st->tensors);
    int have_meta = 0;
    for (size_t i = 0; i < root->len; i++) {
        if (strcmp(root->keys[i], "__metadata__") == 0 && root->key_lens[i] == 12) {
            if (have_meta++) return kda_fail(c->err, "%s: __metadata__ appears twice", c->file);
            if (parse_meta(c, &root->items[i], st)) return -1;
            continue;
        }
        StTensor *t = &st->tensors[st->n_tensors];
        if (parse_tensor(c, root->keys[i], root->key_lens[i], &root->items[i], t)) return -1;
        st->n_tensors++;
    }
    qsort(st->tensors, (size_t)st->n_tensors, sizeof *st->tensors, cmp_tensor_name);
    char nm[ST_SHOW + 4];
    for (int64_t i = 1; i < st->n_tensors; i++)
        if (strcmp(st->tensors[i].name, st->tensors[i - 1].name) == 0)
            return kda_fail(c->err, "%s: tensor '%s' appears twice in the header", c->file,
                            show(nm, st->tensors[i].name));
    return check_tiling(c, st);
}

int st_parse(SafeTensors *st, const void *buf, size_t n, const char *name_for_errors,
             KdaError *err) {
    memset(st, 0, sizeof *st);
    const char *file = name_for_errors ? name_for_errors : "<buffer>";
    const unsigned char *p = buf;
    if (n < 8)
        return kda_fail(err, "%s: truncated: %zu bytes, a safetensors file needs at least 8", file,
                        n);
    uint64_t hn = 0;
    for (int i = 7; i >= 0; i--)
        hn = hn << 8 | p[i];
    if (hn > ST_MAX_HEADER)
        return kda_fail(err, "%s: header length %llu exceeds the limit of %llu bytes", file,
                        (unsigned long long)hn, ST_MAX_HEADER);
    if (hn > n - 8)
        return kda_fail(err,
                        "%s: truncated: header length %llu but only %zu bytes follow the "
                        "8-byte length",
                        file, (unsigned long long)hn, n - 8);
    if (hn == 0 || p[8] != '{')
        return kda_fail(err, "%s: header must be a JSON object starting with '{'", file);
    KdaError je;
    if (json_parse(&st->doc, (const char *)p + 8, (size_t)hn, &je))
        return kda_fail(err, "%s: header JSON: %s", file, je.msg);
    st->path = kda_strdup(file);
    ParseCtx c = {
        .file = st->path, .buffer = p + 8 + hn, .buffer_bytes = n - 8 - (size_t)hn, .err = err};
    if (parse_header(&c, st)) {
        st_close(st);
        return -1;
    }
    return 0;
}

int st_open(SafeTensors *st, const char *path, KdaError *err) {
    memset(st, 0, sizeof *st);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return kda_fail(err, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        int e = errno;
        close(fd);
        return kda_fail(err, "%s: not a regular file%s%s", path, e ? ": " : "",
                        e ? strerror(e) : "");
    }
    size_t size = (size_t)sb.st_size;
    if (size < 8) {
        close(fd);
        return kda_fail(err, "%s: truncated: %zu bytes, a safetensors file needs at least 8", path,
                        size);
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (map == MAP_FAILED) return kda_fail(err, "%s: mmap failed: %s", path, strerror(e));
    if (st_parse(st, map, size, path, err)) {
        munmap(map, size);
        return -1;
    }
    st->map = map;
    st->map_bytes = size;
    return 0;
}

void st_close(SafeTensors *st) {
    if (st->map) munmap(st->map, st->map_bytes);
    free(st->path);
    free(st->tensors);
    free(st->meta_keys);
    free(st->meta_vals);
    json_free(&st->doc);
    memset(st, 0, sizeof *st);
}

const StTensor *st_find(const SafeTensors *st, const char *name) {
    StTensor key = {.name = name};
    return bsearch(&key, st->tensors, (size_t)st->n_tensors, sizeof key, cmp_tensor_name);
}

const char *st_meta(const SafeTensors *st, const char *key) {
    const char **k = bsearch(&key, st->meta_keys, (size_t)st->n_meta, sizeof key, cmp_str_ptr);
    return k ? st->meta_vals[k - st->meta_keys] : NULL;
}

// ------------------------------------------------------------------------------------------
// Conversion

// Loads element i of type T from possibly unaligned src and converts it with EXPR(x).
#define ST_CONVERT(T, EXPR)                                                                        \
    do {                                                                                           \
        _Pragma("omp parallel for if (n > (1 << 20))") for (int64_t i = 0; i < n; i++) {           \
            T x;                                                                                   \
            memcpy(&x, src + (size_t)i * sizeof(T), sizeof(T));                                    \
            out[i] = (float)(EXPR);                                                                \
        }                                                                                          \
    } while (0)

int st_to_f32(const StTensor *t, float *out, KdaError *err) {
    const unsigned char *src = t->data;
    int64_t n = t->numel;
    switch (t->dtype) {
    case ST_BOOL:
        ST_CONVERT(uint8_t, x != 0);
        break;
    case ST_U8:
        ST_CONVERT(uint8_t, x);
        break;
    case ST_I8:
        ST_CONVERT(int8_t, x);
        break;
    case ST_I16:
        ST_CONVERT(int16_t, x);
        break;
    case ST_U16:
        ST_CONVERT(uint16_t, x);
        break;
    case ST_F16:
        ST_CONVERT(uint16_t, f16_to_f32(x));
        break;
    case ST_BF16:
        ST_CONVERT(uint16_t, bf16_to_f32(x));
        break;
    case ST_I32:
        ST_CONVERT(int32_t, x);
        break;
    case ST_U32:
        ST_CONVERT(uint32_t, x);
        break;
    case ST_F32:
        ST_CONVERT(float, x);
        break;
    case ST_F64:
        ST_CONVERT(double, x);
        break;
    case ST_I64:
        ST_CONVERT(int64_t, x);
        break;
    case ST_U64:
        ST_CONVERT(uint64_t, x);
        break;
    default:
        return kda_fail(err, "tensor '%s': cannot convert dtype %d to F32", t->name ? t->name : "?",
                        (int)t->dtype);
    }
    return 0;
}

int st_tensor_equal(const StTensor *a, const StTensor *b) {
    if (a->dtype != b->dtype || a->ndim != b->ndim || a->nbytes != b->nbytes) return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return 0;
    return a->nbytes == 0 || memcmp(a->data, b->data, a->nbytes) == 0;
}

// ------------------------------------------------------------------------------------------
// Model directory (§4.4)

static int cmp_entry_name(const void *a, const void *b) {
    return strcmp(((const StModelEntry *)a)->tensor->name, ((const StModelEntry *)b)->tensor->name);
}

// Builds m->entries from every tensor of every file; a name in two files is an error.
static int model_index_tensors(StModel *m, KdaError *err) {
    int64_t n = 0;
    for (int f = 0; f < m->n_files; f++)
        n += m->files[f].n_tensors;
    m->entries = kda_calloc((size_t)(n ? n : 1), sizeof *m->entries);
    for (int f = 0; f < m->n_files; f++)
        for (int64_t i = 0; i < m->files[f].n_tensors; i++)
            m->entries[m->n_entries++] = (StModelEntry){&m->files[f].tensors[i], f};
    qsort(m->entries, (size_t)n, sizeof *m->entries, cmp_entry_name);
    char nm[ST_SHOW + 4];
    for (int64_t i = 1; i < n; i++) {
        const StModelEntry *a = &m->entries[i - 1], *b = &m->entries[i];
        if (strcmp(a->tensor->name, b->tensor->name) == 0)
            return kda_fail(err, "%s: tensor '%s' is in both %s and %s", m->dir,
                            show(nm, a->tensor->name), m->files[a->file].path,
                            m->files[b->file].path);
    }
    return 0;
}

// A weight_map value must name a file inside dir: no separators, not "." or "..".
static int shard_name_ok(const char *s, size_t len) {
    return len > 0 && strlen(s) == len && !strchr(s, '/') && strcmp(s, ".") != 0 &&
           strcmp(s, "..") != 0;
}

static int model_open_sharded(StModel *m, const char *index_path, KdaError *err) {
    JsonDoc doc;
    if (json_parse_file(&doc, index_path, err)) return -1;
    int rc = 0;
    char nm[ST_SHOW + 4], path[PATH_MAX];
    const JsonValue *wm = json_get(&doc.root, "weight_map");
    if (!wm || wm->type != JSON_OBJECT || wm->len == 0) {
        rc = kda_fail(err, "%s: \"weight_map\" must be a non-empty object of name -> file",
                      index_path);
        goto done;
    }
    // distinct shard files, in first-seen order
    const char **names = kda_calloc(wm->len, sizeof *names);
    for (size_t i = 0; i < wm->len && rc == 0; i++) {
        const JsonValue *v = &wm->items[i];
        if (v->type != JSON_STRING || !shard_name_ok(v->str, v->len)) {
            rc = kda_fail(err, "%s: weight_map['%s'] must be a file name in the same directory",
                          index_path, show(nm, wm->keys[i]));
            break;
        }
        int f = 0;
        while (f < m->n_files && strcmp(names[f], v->str) != 0)
            f++;
        if (f == m->n_files) names[m->n_files++] = v->str;
    }
    m->files = kda_calloc((size_t)(m->n_files ? m->n_files : 1), sizeof *m->files);
    for (int f = 0; f < m->n_files && rc == 0; f++)
        rc = st_open(&m->files[f], path_join(path, sizeof path, m->dir, names[f]), err);
    free(names);
    if (rc == 0) rc = model_index_tensors(m, err);
    // every listed tensor is in the file the index names...
    for (size_t i = 0; i < wm->len && rc == 0; i++) {
        const char *file = NULL;
        const StTensor *t = st_model_find(m, wm->keys[i], &file);
        path_join(path, sizeof path, m->dir, wm->items[i].str);
        if (!t || strcmp(file, path) != 0)
            rc = kda_fail(err, "%s: weight_map lists tensor '%s' in %s but %s", index_path,
                          show(nm, wm->keys[i]), wm->items[i].str,
                          t ? "it is in another shard" : "no shard holds it");
    }
    // ...and every shard tensor is listed
    for (int64_t i = 0; i < m->n_entries && rc == 0; i++)
        if (!json_get(wm, m->entries[i].tensor->name))
            rc = kda_fail(err, "%s: shard %s holds tensor '%s' which weight_map does not list",
                          index_path, m->files[m->entries[i].file].path,
                          show(nm, m->entries[i].tensor->name));
done:
    json_free(&doc);
    return rc;
}

int st_model_open(StModel *m, const char *dir, KdaError *err) {
    memset(m, 0, sizeof *m);
    m->dir = kda_strdup(dir);
    char single[PATH_MAX], index[PATH_MAX];
    int rc;
    if (!path_is_dir(dir) && path_exists(dir)) { // a single file given directly
        m->files = kda_calloc(1, sizeof *m->files);
        m->n_files = 1;
        rc = st_open(&m->files[0], dir, err);
    } else if (path_exists(path_join(single, sizeof single, dir, "model.safetensors"))) {
        // transformers prefers the single file when both forms are present; so do we
        m->files = kda_calloc(1, sizeof *m->files);
        m->n_files = 1;
        rc = st_open(&m->files[0], single, err);
    } else if (path_exists(path_join(index, sizeof index, dir, "model.safetensors.index.json"))) {
        rc = model_open_sharded(m, index, err);
    } else {
        rc = kda_fail(err, "%s: no model.safetensors or model.safetensors.index.json", dir);
    }
    if (rc == 0 && !m->entries) rc = model_index_tensors(m, err);
    if (rc) st_model_close(m);
    return rc;
}

const StTensor *st_model_find(const StModel *m, const char *name, const char **file_out) {
    StTensor key_t = {.name = name};
    StModelEntry key = {&key_t, 0};
    const StModelEntry *e =
        bsearch(&key, m->entries, (size_t)m->n_entries, sizeof key, cmp_entry_name);
    if (file_out) *file_out = e ? m->files[e->file].path : NULL;
    return e ? e->tensor : NULL;
}

void st_model_close(StModel *m) {
    for (int f = 0; f < m->n_files; f++)
        st_close(&m->files[f]);
    free(m->files);
    free(m->entries);
    free(m->dir);
    memset(m, 0, sizeof *m);
}

// ------------------------------------------------------------------------------------------
// Writer

typedef struct {
    char *name;    // owned
    StDtype dtype; // stored dtype
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    int64_t numel;
    const void *data; // borrowed, already in dtype (NULL if f32 is set)
    const float *f32; // borrowed fp32 source converted at save time
    size_t nbytes, offset;
} WTensor;

struct StWriter {
    WTensor *t;
    int64_t n, cap;
    char **meta_keys, **meta_vals; // owned copies
    int64_t n_meta;
};

StWriter *st_writer_new(void) {
    StWriter *w = kda_calloc(1, sizeof *w);
    st_writer_meta(w, "format", "pt"); // §4.3: transformers requires it
    return w;
}

static WTensor *writer_push(StWriter *w, const char *name, StDtype dtype, int ndim,
                            const int64_t *shape) {
    KDA_ASSERT((unsigned)dtype < ST_N_DTYPES && ndim >= 0 && ndim <= ST_MAX_DIMS);
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 16;
        w->t = kda_realloc(w->t, (size_t)w->cap * sizeof *w->t);
    }
    WTensor *t = &w->t[w->n++];
    memset(t, 0, sizeof *t);
    t->name = kda_strdup(name);
    t->dtype = dtype;
    t->ndim = ndim;
    t->numel = 1;
    for (int d = 0; d < ndim; d++) {
        KDA_ASSERT(shape[d] >= 0 && (shape[d] == 0 || t->numel <= INT64_MAX / shape[d]));
        t->shape[d] = shape[d];
        t->numel *= shape[d];
    }
    KDA_ASSERT((uint64_t)t->numel <= SIZE_MAX / k_dtypes[dtype].size);
    t->nbytes = (size_t)t->numel * k_dtypes[dtype].size;
    return t;
}

void st_writer_add(StWriter *w, const char *name, StDtype dtype, int ndim, const int64_t *shape,
                   const void *data) {
    WTensor *t = writer_push(w, name, dtype, ndim, shape);
    KDA_ASSERT(data || t->nbytes == 0);
    t->data = data;
}

void st_writer_add_f32(StWriter *w, const char *name, StDtype out_dtype, int ndim,
                       const int64_t *shape, const float *data) {
    KDA_ASSERT(out_dtype == ST_F32 || out_dtype == ST_BF16 || out_dtype == ST_F16);
    WTensor *t = writer_push(w, name, out_dtype, ndim, shape);
    KDA_ASSERT(data || t->nbytes == 0);
    t->f32 = data;
}

void st_writer_meta(StWriter *w, const char *key, const char *value) {
    for (int64_t i = 0; i < w->n_meta; i++)
        if (strcmp(w->meta_keys[i], key) == 0) {
            free(w->meta_vals[i]);
            w->meta_vals[i] = kda_strdup(value);
            return;
        }
    w->meta_keys = kda_realloc(w->meta_keys, (size_t)(w->n_meta + 1) * sizeof *w->meta_keys);
    w->meta_vals = kda_realloc(w->meta_vals, (size_t)(w->n_meta + 1) * sizeof *w->meta_vals);
    w->meta_keys[w->n_meta] = kda_strdup(key);
    w->meta_vals[w->n_meta++] = kda_strdup(value);
}

void st_writer_free(StWriter *w) {
    if (!w) return;
    for (int64_t i = 0; i < w->n; i++)
        free(w->t[i].name);
    for (int64_t i = 0; i < w->n_meta; i++)
        free(w->meta_keys[i]), free(w->meta_vals[i]);
    free(w->t);
    free(w->meta_keys);
    free(w->meta_vals);
    free(w);
}

// Reference order (§4.2): decreasing dtype alignment (enum order), then name.
static int cmp_write_order(const void *a, const void *b) {
    const WTensor *x = *(const WTensor *const *)a, *y = *(const WTensor *const *)b;
    if (x->dtype != y->dtype) return x->dtype > y->dtype ? -1 : 1;
    return strcmp(x->name, y->name);
}

// Header JSON in the reference writer's form: compact, __metadata__ first, tensors in buffer
// order, fields dtype/shape/data_offsets; then spaces so 8 + N is a multiple of 8.
static char *writer_header(const StWriter *w, WTensor **order, size_t *n_out) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    KDA_ASSERT(f);
    fputs("{\"__metadata__\":{", f);
    for (int64_t i = 0; i < w->n_meta; i++) {
        if (i) fputc(',', f);
        json_write_string(f, w->meta_keys[i], strlen(w->meta_keys[i]));
        fputc(':', f);
        json_write_string(f, w->meta_vals[i], strlen(w->meta_vals[i]));
    }
    fputc('}', f);
    for (int64_t i = 0; i < w->n; i++) {
        const WTensor *t = order[i];
        fputc(',', f);
        json_write_string(f, t->name, strlen(t->name));
        fprintf(f, ":{\"dtype\":\"%s\",\"shape\":[", k_dtypes[t->dtype].name);
        for (int d = 0; d < t->ndim; d++)
            fprintf(f, "%s%lld", d ? "," : "", (long long)t->shape[d]);
        fprintf(f, "],\"data_offsets\":[%zu,%zu]}", t->offset, t->offset + t->nbytes);
    }
    fputc('}', f);
    for (long pos = ftell(f); (8 + pos) % 8 != 0; pos++)
        fputc(' ', f);
    KDA_ASSERT(fclose(f) == 0);
    *n_out = len;
    return buf;
}

// Writes one tensor's bytes, converting fp32 sources in chunks.
static int writer_data(FILE *f, const WTensor *t) {
    if (!t->f32 || t->dtype == ST_F32)
        return t->nbytes &&
               fwrite(t->f32 ? (const void *)t->f32 : t->data, 1, t->nbytes, f) != t->nbytes;
    enum { CHUNK = 1 << 14 };
    uint16_t tmp[CHUNK];
    for (int64_t i = 0; i < t->numel; i += CHUNK) {
        int64_t k = t->numel - i < CHUNK ? t->numel - i : CHUNK;
        for (int64_t j = 0; j < k; j++)
            tmp[j] = t->dtype == ST_BF16 ? f32_to_bf16(t->f32[i + j]) : f32_to_f16(t->f32[i + j]);
        if (fwrite(tmp, 2, (size_t)k, f) != (size_t)k) return -1;
    }
    return 0;
}

static int cmp_wt_name(const void *a, const void *b) {
    return strcmp((*(const WTensor *const *)a)->name, (*(const WTensor *const *)b)->name);
}

// Rejects reserved and duplicate names; fills order[] in buffer order.
static int writer_check(const StWriter *w, WTensor **order, const char *path, KdaError *err) {
    char nm[ST_SHOW + 4];
    for (int64_t i = 0; i < w->n; i++) {
        if (strcmp(w->t[i].name, "__metadata__") == 0)
            return kda_fail(err, "%s: tensor name '__metadata__' is reserved", path);
        order[i] = &w->t[i];
    }
    qsort(order, (size_t)w->n, sizeof *order, cmp_wt_name);
    for (int64_t i = 1; i < w->n; i++)
        if (strcmp(order[i]->name, order[i - 1]->name) == 0)
            return kda_fail(err, "%s: tensor '%s' added twice", path, show(nm, order[i]->name));
    qsort(order, (size_t)w->n, sizeof *order, cmp_write_order);
    return 0;
}

int st_writer_save(StWriter *w, const char *path, KdaError *err) {
    WTensor **order = kda_malloc((size_t)(w->n ? w->n : 1) * sizeof *order);
    if (writer_check(w, order, path, err)) {
        free(order);
        return -1;
    }
    size_t off = 0;
    for (int64_t i = 0; i < w->n; i++)
        order[i]->offset = off, off += order[i]->nbytes;
    size_t hn;
    char *header = writer_header(w, order, &hn);
    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)((uint64_t)hn >> (8 * i));
    char tmp[PATH_MAX];
    FILE *f = open_atomic(path, tmp, err);
    int rc = f ? 0 : -1;
    if (rc == 0 && (fwrite(len8, 1, 8, f) != 8 || fwrite(header, 1, hn, f) != hn)) rc = -2;
    for (int64_t i = 0; i < w->n && rc == 0; i++)
        if (writer_data(f, order[i])) rc = -2;
    if (rc == -2) {
        int e = errno;
        abort_atomic(f, tmp);
        rc = kda_fail(err, "%s: write failed: %s", path, strerror(e));
    } else if (rc == 0) {
        rc = commit_atomic(f, tmp, path, err);
    }
    free(header);
    free(order);
    return rc;
}
