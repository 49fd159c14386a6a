// arrow.c - Arrow IPC stream/file reader: flatbuffer metadata (Message, Schema, Field,
// RecordBatch), buffer validation, rows rendered as JSON (see arrow.h).
#include "data/arrow.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h" // defines: read_file, utf8_valid_prefix, f16_to_f32

// ---- little-endian loads ----------------------------------------------------------------------

static uint16_t ld16(const uint8_t *p) {
    return (uint16_t)(p[0] | p[1] << 8);
}
static uint32_t ld32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t ld64(const uint8_t *p) {
    return (uint64_t)ld32(p) | (uint64_t)ld32(p + 4) << 32;
}

// ---- flatbuffers (bounds-checked) -------------------------------------------------------------

typedef struct {
    const uint8_t *b; // metadata bytes of one message
    size_t n;
} Fb;

typedef struct {
    size_t pos;      // table start
    size_t vt;       // vtable start
    size_t vt_size;  // bytes of the vtable
    size_t tab_size; // bytes of the table's inline data
} FbTable;

static int fb_table(const Fb *fb, size_t pos, FbTable *t) {
    if (pos > fb->n || fb->n - pos < 4) return -1;
    int64_t vt = (int64_t)pos - (int64_t)(int32_t)ld32(fb->b + pos);
    if (vt < 0 || (uint64_t)vt > fb->n || fb->n - (size_t)vt < 4) return -1;
    t->pos = pos, t->vt = (size_t)vt;
    t->vt_size = ld16(fb->b + vt), t->tab_size = ld16(fb->b + vt + 2);
    if (t->vt_size < 4 || t->vt_size % 2 || t->vt_size > fb->n - t->vt) return -1;
    if (t->tab_size < 4 || t->tab_size > fb->n - pos) return -1;
    return 0;
}

// Offset of field i inside the table, 0 when absent; -1 when it does not fit (width bytes).
static int64_t fb_field(const FbTable *t, const Fb *fb, int i, size_t width) {
    size_t slot = 4 + 2 * (size_t)i;
    if (slot + 2 > t->vt_size) return 0;
    size_t off = ld16(fb->b + t->vt + slot);
    if (!off) return 0;
    if (off + width > t->tab_size) return -1;
    return (int64_t)off;
}

static int fb_scalar(const FbTable *t, const Fb *fb, int i, size_t width, int64_t def,
                     int64_t *out) {
    int64_t off = fb_field(t, fb, i, width);
    if (off < 0) return -1;
    if (!off) return *out = def, 0;
    const uint8_t *p = fb->b + t->pos + off;
    switch (width) {
    case 1:
        *out = (int8_t)p[0];
        break;
    case 2:
        *out = (int16_t)ld16(p);
        break;
    case 4:
        *out = (int32_t)ld32(p);
        break;
    default:
        *out = (int64_t)ld64(p);
        break;
    }
    return 0;
}

// Follows the uoffset of field i. *pos = target; returns 0, 1 when absent, -1 when bad.
static int fb_ref(const FbTable *t, const Fb *fb, int i, size_t *pos) {
    int64_t off = fb_field(t, fb, i, 4);
    if (off < 0) return -1;
    if (!off) return 1;
    size_t loc = t->pos + (size_t)off;
    uint64_t target = (uint64_t)loc + ld32(fb->b + loc);
    if (target > fb->n) return -1;
    *pos = (size_t)target;
    return 0;
}

// Vector at field i: *count elements of elem bytes starting at *data. Absent -> count 0.
static int fb_vector(const FbTable *t, const Fb *fb, int i, size_t elem, size_t *data,
                     size_t *count) {
    size_t pos;
    int r = fb_ref(t, fb, i, &pos);
    if (r < 0) return -1;
    if (r == 1) return *data = 0, *count = 0, 0;
    if (fb->n - pos < 4) return -1;
    uint64_t cnt = ld32(fb->b + pos);
    if (cnt > (fb->n - pos - 4) / elem) return -1;
    *data = pos + 4, *count = (size_t)cnt;
    return 0;
}

// Element j of a vector of tables.
static int fb_vec_table(const Fb *fb, size_t data, size_t j, FbTable *t) {
    size_t e = data + 4 * j;
    uint64_t target = (uint64_t)e + ld32(fb->b + e);
    if (target > fb->n) return -1;
    return fb_table(fb, (size_t)target, t);
}

// ---- schema -----------------------------------------------------------------------------------

enum { // flatbuffer Type union tags (Schema.fbs)
    T_NULL = 1,
    T_INT = 2,
    T_FLOAT = 3,
    T_BINARY = 4,
    T_UTF8 = 5,
    T_BOOL = 6,
    T_LIST = 12,
    T_STRUCT = 13,
    T_FIXED_LIST = 16,
    T_LARGE_BINARY = 19,
    T_LARGE_UTF8 = 20,
    T_LARGE_LIST = 21
};

static void field_free(ArrowField *f) {
    for (int i = 0; i < f->n_children; i++)
        field_free(&f->children[i]);
    free(f->children);
    free(f->name);
    memset(f, 0, sizeof *f);
}

static int parse_field(const Fb *fb, const FbTable *ft, ArrowField *f, int depth, const char *name,
                       KdaError *err);

static int parse_children(const Fb *fb, const FbTable *t, int vec_field, ArrowField *f, int depth,
                          const char *name, KdaError *err) {
    size_t data, cnt;
    if (fb_vector(t, fb, vec_field, 4, &data, &cnt))
        return kda_fail(err, "%s: schema: bad children vector of field '%s'", name, f->name);
    if (cnt > 100000) return kda_fail(err, "%s: schema: %zu children is too many", name, cnt);
    f->children = kda_calloc(cnt ? cnt : 1, sizeof *f->children);
    f->n_children = (int)cnt;
    for (size_t j = 0; j < cnt; j++) {
        FbTable ct;
        if (fb_vec_table(fb, data, j, &ct))
            return kda_fail(err, "%s: schema: bad child %zu of field '%s'", name, j, f->name);
        if (parse_field(fb, &ct, &f->children[j], depth + 1, name, err)) return -1;
    }
    return 0;
}

static int parse_type(const Fb *fb, const FbTable *ft, ArrowField *f, int64_t tag, const char *name,
                      KdaError *err) {
    FbTable tt;
    size_t tpos;
    int r = fb_ref(ft, fb, 3, &tpos);
    int have = r == 0 && fb_table(fb, tpos, &tt) == 0;
    if (r < 0 || (r == 0 && !have))
        return kda_fail(err, "%s: schema: bad type of '%s'", name, f->name);
    int64_t v = 0;
    switch (tag) {
    case T_NULL:
        f->type = ARROW_NULL;
        return 0;
    case T_BOOL:
        f->type = ARROW_BOOL;
        return 0;
    case T_UTF8:
        f->type = ARROW_UTF8;
        return 0;
    case T_LARGE_UTF8:
        f->type = ARROW_UTF8, f->large = 1;
        return 0;
    case T_BINARY:
        f->type = ARROW_BINARY;
        return 0;
    case T_LARGE_BINARY:
        f->type = ARROW_BINARY, f->large = 1;
        return 0;
    case T_LIST:
        f->type = ARROW_LIST;
        return 0;
    case T_LARGE_LIST:
        f->type = ARROW_LIST, f->large = 1;
        return 0;
    case T_STRUCT:
        f->type = ARROW_STRUCT;
        return 0;
    case T_INT:
        f->type = ARROW_INT;
        if (!have || fb_scalar(&tt, fb, 0, 4, 0, &v)) break;
        f->bit_width = (int)v;
        if (fb_scalar(&tt, fb, 1, 1, 0, &v)) break;
        f->is_signed = v != 0;
        if (f->bit_width != 8 && f->bit_width != 16 && f->bit_width != 32 && f->bit_width != 64)
            return kda_fail(err, "%s: schema: field '%s': int bit width %d", name, f->name,
                            f->bit_width);
        return 0;
    case T_FLOAT:
        f->type = ARROW_FLOAT;
        if (!have || fb_scalar(&tt, fb, 0, 2, 0, &v)) break;
        if (v < 0 || v > 2)
            return kda_fail(err, "%s: schema: field '%s': float precision %lld", name, f->name,
                            (long long)v);
        f->bit_width = 16 << v;
        return 0;
    case T_FIXED_LIST:
        f->type = ARROW_FIXED_LIST;
        if (!have || fb_scalar(&tt, fb, 0, 4, 0, &v)) break;
        if (v < 0)
            return kda_fail(err, "%s: schema: field '%s': list size %lld", name, f->name,
                            (long long)v);
        f->list_size = (int32_t)v;
        return 0;
    default:
        return kda_fail(err, "%s: field '%s': unsupported Arrow type (tag %lld)", name, f->name,
                        (long long)tag);
    }
    return kda_fail(err, "%s: schema: bad type table of '%s'", name, f->name);
}

static int parse_field(const Fb *fb, const FbTable *ft, ArrowField *f, int depth, const char *name,
                       KdaError *err) {
    if (depth > ARROW_MAX_DEPTH) return kda_fail(err, "%s: schema nested too deeply", name);
    size_t sdata, slen;
    if (fb_vector(ft, fb, 0, 1, &sdata, &slen))
        return kda_fail(err, "%s: schema: bad field name", name);
    f->name = kda_malloc(slen + 1);
    if (slen) memcpy(f->name, fb->b + sdata, slen);
    f->name[slen] = 0;
    int64_t tag;
    size_t dpos;
    if (fb_scalar(ft, fb, 2, 1, 0, &tag)) return kda_fail(err, "%s: schema: bad type tag", name);
    int r = fb_ref(ft, fb, 4, &dpos);
    if (r < 0) return kda_fail(err, "%s: schema: bad dictionary of '%s'", name, f->name);
    if (r == 0)
        return kda_fail(err, "%s: field '%s' is dictionary-encoded (not supported)", name, f->name);
    if (parse_type(fb, ft, f, tag & 0xff, name, err)) return -1;
    if (parse_children(fb, ft, 5, f, depth, name, err)) return -1;
    int want = f->type == ARROW_LIST || f->type == ARROW_FIXED_LIST ? 1 : -1;
    if (f->type == ARROW_STRUCT) want = f->n_children;
    if (want < 0) want = 0;
    if (f->n_children != want)
        return kda_fail(err, "%s: field '%s' has %d children, expected %d", name, f->name,
                        f->n_children, want);
    return 0;
}

static int parse_schema(const Fb *fb, const FbTable *st, ArrowField *root, const char *name,
                        KdaError *err) {
    int64_t endian;
    if (fb_scalar(st, fb, 0, 2, 0, &endian)) return kda_fail(err, "%s: bad schema", name);
    if (endian != 0) return kda_fail(err, "%s: big-endian Arrow data is not supported", name);
    root->name = kda_strdup("");
    root->type = ARROW_STRUCT;
    return parse_children(fb, st, 1, root, 0, name, err);
}

// ---- record batches ---------------------------------------------------------------------------

typedef struct {
    const Fb *fb;
    size_t nodes, n_nodes, bufs, n_bufs; // vector data offsets and counts in fb
    size_t node_i, buf_i;
    const uint8_t *body;
    uint64_t body_len;
    const char *name;
    int64_t batch;
} BatchCursor;

static void array_free(const ArrowField *f, ArrowArray *a) {
    if (!a->children) return;
    for (int i = 0; i < f->n_children; i++)
        array_free(&f->children[i], &a->children[i]);
    free(a->children);
    a->children = NULL;
}

static int next_buffer(BatchCursor *c, const ArrowField *f, const uint8_t **p, int64_t *len,
                       KdaError *err) {
    if (c->buf_i >= c->n_bufs)
        return kda_fail(err, "%s: record batch %lld: too few buffers at column '%s'", c->name,
                        (long long)c->batch, f->name);
    const uint8_t *e = c->fb->b + c->bufs + 16 * c->buf_i++;
    uint64_t off = ld64(e), l = ld64(e + 8);
    if (off > c->body_len || l > c->body_len - off)
        return kda_fail(err,
                        "%s: record batch %lld: buffer of column '%s' (offset %llu, %llu "
                        "bytes) outside the %llu-byte body",
                        c->name, (long long)c->batch, f->name, (unsigned long long)off,
                        (unsigned long long)l, (unsigned long long)c->body_len);
    *p = c->body + off, *len = (int64_t)l;
    return 0;
}

static int64_t off_at(const ArrowArray *a, int large, int64_t i) {
    return large ? (int64_t)ld64(a->offsets + 8 * i) : (int64_t)(int32_t)ld32(a->offsets + 4 * i);
}

// Offsets [length+1] present, non-decreasing, starting >= 0 and ending <= limit.
static int check_offsets(BatchCursor *c, const ArrowField *f, ArrowArray *a, const uint8_t *p,
                         int64_t len, int64_t limit, KdaError *err) {
    int w = f->large ? 8 : 4;
    if (a->length == 0 && len == 0) return a->offsets = NULL, 0;
    if (len / w < a->length + 1)
        return kda_fail(err, "%s: record batch %lld: column '%s': offsets buffer too short",
                        c->name, (long long)c->batch, f->name);
    a->offsets = p;
    int64_t prev = off_at(a, f->large, 0);
    if (prev < 0) goto bad;
    for (int64_t i = 1; i <= a->length; i++) {
        int64_t o = off_at(a, f->large, i);
        if (o < prev) goto bad;
        prev = o;
    }
    if (prev > limit) goto bad;
    return 0;
bad:
    return kda_fail(err,
                    "%s: record batch %lld: column '%s': offsets not increasing or past "
                    "the end of the data",
                    c->name, (long long)c->batch, f->name);
}

static int read_array(BatchCursor *c, const ArrowField *f, ArrowArray *a, int depth,
                      KdaError *err) {
    if (c->node_i >= c->n_nodes)
        return kda_fail(err, "%s: record batch %lld: too few field nodes at column '%s'", c->name,
                        (long long)c->batch, f->name);
    const uint8_t *e = c->fb->b + c->nodes + 16 * c->node_i++;
    a->length = (int64_t)ld64(e), a->null_count = (int64_t)ld64(e + 8);
    if (a->length < 0 || a->null_count < 0 || a->null_count > a->length || a->length > (1LL << 40))
        return kda_fail(err,
                        "%s: record batch %lld: column '%s': bad length %lld / null count "
                        "%lld",
                        c->name, (long long)c->batch, f->name, (long long)a->length,
                        (long long)a->null_count);
    const uint8_t *p;
    int64_t len;
    if (f->type == ARROW_NULL) { // no buffers: bound the length so rows stay proportionate
        if (a->length > (int64_t)(1 << 16) + 64 * (int64_t)c->body_len)
            return kda_fail(err,
                            "%s: record batch %lld: null column '%s' of %lld values is "
                            "implausibly long",
                            c->name, (long long)c->batch, f->name, (long long)a->length);
        return 0;
    }
    if (next_buffer(c, f, &p, &len, err)) return -1;
    if (a->null_count > 0) {
        if (len < (a->length + 7) / 8)
            return kda_fail(err, "%s: record batch %lld: column '%s': validity bitmap too short",
                            c->name, (long long)c->batch, f->name);
        a->validity = p;
    }
    int64_t need = 0;
    switch (f->type) {
    case ARROW_BOOL:
    case ARROW_INT:
    case ARROW_FLOAT:
        if (next_buffer(c, f, &a->values, &a->values_len, err)) return -1;
        need = f->type == ARROW_BOOL ? (a->length + 7) / 8 : a->length * (f->bit_width / 8);
        if (a->values_len < need)
            return kda_fail(err, "%s: record batch %lld: column '%s': values buffer too short",
                            c->name, (long long)c->batch, f->name);
        return 0;
    case ARROW_UTF8:
    case ARROW_BINARY:
        if (next_buffer(c, f, &p, &len, err)) return -1;
        if (next_buffer(c, f, &a->values, &a->values_len, err)) return -1;
        return check_offsets(c, f, a, p, len, a->values_len, err);
    default:
        break;
    }
    if (f->type == ARROW_LIST && next_buffer(c, f, &p, &len, err)) return -1;
    if (depth > ARROW_MAX_DEPTH) return kda_fail(err, "%s: nested too deeply", c->name);
    a->children = kda_calloc((size_t)f->n_children + 1, sizeof *a->children);
    for (int i = 0; i < f->n_children; i++)
        if (read_array(c, &f->children[i], &a->children[i], depth + 1, err)) return -1;
    if (f->type == ARROW_LIST) return check_offsets(c, f, a, p, len, a->children[0].length, err);
    if (f->type == ARROW_FIXED_LIST && f->list_size > 0 && a->length > (INT64_MAX / f->list_size))
        return kda_fail(err, "%s: column '%s': fixed-size list too large", c->name, f->name);
    need = f->type == ARROW_FIXED_LIST ? a->length * f->list_size : a->length;
    for (int i = 0; i < f->n_children; i++)
        if (a->children[i].length < need)
            return kda_fail(err,
                            "%s: record batch %lld: column '%s': child '%s' has %lld "
                            "values, expected >= %lld",
                            c->name, (long long)c->batch, f->name, f->children[i].name,
                            (long long)a->children[i].length, (long long)need);
    return 0;
}

static int parse_batch(ArrowTable *t, const Fb *fb, const FbTable *rt, const uint8_t *body,
                       uint64_t body_len, const char *name, KdaError *err) {
    BatchCursor c = {
        .fb = fb, .body = body, .body_len = body_len, .name = name, .batch = t->n_batches};
    int64_t rows;
    size_t dummy;
    if (fb_scalar(rt, fb, 0, 8, 0, &rows) || rows < 0)
        return kda_fail(err, "%s: record batch %d: bad length", name, t->n_batches);
    if (fb_vector(rt, fb, 1, 16, &c.nodes, &c.n_nodes) ||
        fb_vector(rt, fb, 2, 16, &c.bufs, &c.n_bufs))
        return kda_fail(err, "%s: record batch %d: bad nodes/buffers vector", name, t->n_batches);
    int r = fb_ref(rt, fb, 3, &dummy);
    if (r < 0)
        return kda_fail(err, "%s: record batch %d: bad compression field", name, t->n_batches);
    if (r == 0)
        return kda_fail(err, "%s: record batch %d: compressed buffers are not supported", name,
                        t->n_batches);
    t->batches = kda_realloc(t->batches, (size_t)(t->n_batches + 1) * sizeof *t->batches);
    ArrowBatch *b = &t->batches[t->n_batches++];
    b->n_rows = rows;
    b->cols = kda_calloc((size_t)t->schema.n_children + 1, sizeof *b->cols);
    for (int i = 0; i < t->schema.n_children; i++) {
        if (read_array(&c, &t->schema.children[i], &b->cols[i], 1, err)) return -1;
        if (b->cols[i].length < rows)
            return kda_fail(err, "%s: record batch %d: column '%s' has %lld rows, expected %lld",
                            name, t->n_batches - 1, t->schema.children[i].name,
                            (long long)b->cols[i].length, (long long)rows);
    }
    t->n_rows += rows;
    return 0;
}

// ---- messages ---------------------------------------------------------------------------------

enum { H_SCHEMA = 1, H_DICTIONARY = 2, H_RECORD_BATCH = 3 };

static int parse_message(ArrowTable *t, const Fb *fb, const uint8_t *body, size_t body_avail,
                         uint64_t *body_len, int *have_schema, int idx, const char *name,
                         KdaError *err) {
    FbTable mt, ht;
    int64_t htype, blen;
    size_t hpos;
    if (fb->n < 4 || fb_table(fb, ld32(fb->b), &mt) || fb_scalar(&mt, fb, 1, 1, 0, &htype) ||
        fb_scalar(&mt, fb, 3, 8, 0, &blen) || fb_ref(&mt, fb, 2, &hpos) || fb_table(fb, hpos, &ht))
        return kda_fail(err, "%s: message %d: malformed metadata", name, idx);
    if (blen < 0 || (uint64_t)blen > body_avail)
        return kda_fail(err, "%s: message %d: body of %lld bytes runs past the end of the file",
                        name, idx, (long long)blen);
    *body_len = (uint64_t)blen;
    htype &= 0xff;
    if (htype == H_SCHEMA) {
        if (*have_schema) return kda_fail(err, "%s: message %d: second schema", name, idx);
        *have_schema = 1;
        return parse_schema(fb, &ht, &t->schema, name, err);
    }
    if (htype == H_DICTIONARY)
        return kda_fail(err, "%s: dictionary batches are not supported", name);
    if (htype != H_RECORD_BATCH)
        return kda_fail(err, "%s: message %d: unsupported message type %lld", name, idx,
                        (long long)htype);
    if (!*have_schema) return kda_fail(err, "%s: record batch before the schema", name);
    return parse_batch(t, fb, &ht, body, (uint64_t)blen, name, err);
}

static int open_stream(ArrowTable *t, const void *buf, size_t n, const char *name, KdaError *err);

// Messages quote names from the file: keep them on one line.
int arrow_open(ArrowTable *t, const void *buf, size_t n, const char *name, KdaError *err) {
    if (open_stream(t, buf, n, name, err) == 0) return 0;
    for (char *p = err ? err->msg : NULL; p && *p; p++)
        if ((unsigned char)*p < 0x20) *p = '?';
    return -1;
}

static int open_stream(ArrowTable *t, const void *buf, size_t n, const char *name, KdaError *err) {
    memset(t, 0, sizeof *t);
    if (!name) name = "arrow";
    const uint8_t *b = buf;
    size_t pos = 0;
    int have_schema = 0;
    if (n >= 8 && !memcmp(b, "ARROW1", 6)) pos = 8; // file format: magic + padding, then stream
    for (int idx = 0;; idx++) {
        if (n - pos < 4) break; // end of data without an end-of-stream marker
        uint64_t meta_len = ld32(b + pos);
        pos += 4;
        if (meta_len == 0xFFFFFFFFu) { // continuation marker, then the length
            if (n - pos < 4)
                return arrow_free(t), kda_fail(err, "%s: truncated message %d", name, idx);
            meta_len = ld32(b + pos);
            pos += 4;
        }
        if (meta_len == 0) break; // end-of-stream
        if (meta_len > n - pos) {
            arrow_free(t);
            return kda_fail(err, "%s: message %d: metadata of %llu bytes runs past the end", name,
                            idx, (unsigned long long)meta_len);
        }
        Fb fb = {b + pos, (size_t)meta_len};
        uint64_t body_len = 0;
        size_t body = pos + (size_t)meta_len;
        if (parse_message(t, &fb, b + body, n - body, &body_len, &have_schema, idx, name, err))
            return arrow_free(t), -1;
        pos = body + (size_t)body_len;
    }
    if (!have_schema) return arrow_free(t), kda_fail(err, "%s: no schema message", name);
    return 0;
}

int arrow_load_file(ArrowTable *t, const char *path, KdaError *err) {
    size_t n;
    char *data = read_file(path, &n, err);
    if (!data) return memset(t, 0, sizeof *t), -1;
    if (arrow_open(t, data, n, path, err)) return free(data), -1;
    t->owned = (uint8_t *)data;
    return 0;
}

void arrow_free(ArrowTable *t) {
    for (int i = 0; i < t->n_batches; i++) {
        for (int j = 0; j < t->schema.n_children; j++)
            array_free(&t->schema.children[j], &t->batches[i].cols[j]);
        free(t->batches[i].cols);
    }
    free(t->batches);
    field_free(&t->schema);
    free(t->owned);
    memset(t, 0, sizeof *t);
}

int arrow_column_index(const ArrowTable *t, const char *name) {
    for (int i = 0; i < t->schema.n_children; i++)
        if (!strcmp(t->schema.children[i].name, name)) return i;
    return -1;
}

// ---- rows as JSON -----------------------------------------------------------------------------

static void text_put(ArrowText *o, const char *s, size_t n) {
    if (o->n + n + 1 > o->cap) {
        o->cap = (o->n + n + 1) * 2;
        o->data = kda_realloc(o->data, o->cap);
    }
    memcpy(o->data + o->n, s, n);
    o->n += n;
    o->data[o->n] = 0;
}
static void text_puts(ArrowText *o, const char *s) {
    text_put(o, s, strlen(s));
}

// Length of the valid UTF-8 sequence at s[0..n) (1..4), or 0 if the bytes there are invalid.
static size_t utf8_char_len(const uint8_t *s, size_t n) {
    uint8_t c = s[0];
    size_t len = c < 0x80             ? 1
                 : (c & 0xE0) == 0xC0 ? 2
                 : (c & 0xF0) == 0xE0 ? 3
                 : (c & 0xF8) == 0xF0 ? 4
                                      : 0;
    if (!len || len > n) return 0;
    for (size_t k = 1; k < len; k++)
        if ((s[k] & 0xC0) != 0x80) return 0;
    return utf8_valid_prefix(s, len) == len ? len : 0; // overlong, surrogate, > U+10FFFF
}

static void text_json_string(ArrowText *o, const uint8_t *s, size_t n) {
    text_put(o, "\"", 1);
    size_t i = 0, start = 0;
    while (i < n) {
        uint8_t ch = s[i];
        if (ch >= 0x20 && ch < 0x80 && ch != '"' && ch != '\\') {
            i++;
            continue;
        }
        size_t len = ch >= 0x80 ? utf8_char_len(s + i, n - i) : 0;
        if (len) {
            i += len;
            continue;
        }
        text_put(o, (const char *)s + start, i - start);
        char esc[8];
        if (ch == '"' || ch == '\\')
            snprintf(esc, sizeof esc, "\\%c", ch);
        else if (ch == '\n')
            snprintf(esc, sizeof esc, "\\n");
        else if (ch < 0x20)
            snprintf(esc, sizeof esc, "\\u%04x", ch);
        else
            snprintf(esc, sizeof esc, "\xEF\xBF\xBD"); // invalid byte -> U+FFFD
        text_puts(o, esc);
        start = ++i;
    }
    text_put(o, (const char *)s + start, n - start);
    text_put(o, "\"", 1);
}

static void value_json(const ArrowField *f, const ArrowArray *a, int64_t i, ArrowText *o) {
    char num[64];
    if (f->type == ARROW_NULL || (a->validity && !(a->validity[i >> 3] >> (i & 7) & 1))) {
        text_puts(o, "null");
        return;
    }
    switch (f->type) {
    case ARROW_BOOL:
        text_puts(o, (a->values[i >> 3] >> (i & 7) & 1) ? "true" : "false");
        return;
    case ARROW_INT: {
        const uint8_t *p = a->values + i * (f->bit_width / 8);
        uint64_t u = f->bit_width == 8    ? p[0]
                     : f->bit_width == 16 ? ld16(p)
                     : f->bit_width == 32 ? ld32(p)
                                          : ld64(p);
        if (f->is_signed) {
            int sh = 64 - f->bit_width;
            int64_t s = (int64_t)(u << sh) >> sh;
            snprintf(num, sizeof num, "%lld", (long long)s);
        } else {
            snprintf(num, sizeof num, "%llu", (unsigned long long)u);
        }
        text_puts(o, num);
        return;
    }
    case ARROW_FLOAT: {
        const uint8_t *p = a->values + i * (f->bit_width / 8);
        double d;
        if (f->bit_width == 16)
            d = f16_to_f32(ld16(p));
        else if (f->bit_width == 32) {
            uint32_t u = ld32(p);
            float x;
            memcpy(&x, &u, 4);
            d = x;
        } else {
            uint64_t u = ld64(p);
            memcpy(&d, &u, 8);
        }
        if (!isfinite(d))
            text_puts(o, "null");
        else
            snprintf(num, sizeof num, "%.17g", d), text_puts(o, num);
        return;
    }
    case ARROW_UTF8:
    case ARROW_BINARY: {
        int64_t s = off_at(a, f->large, i), e = off_at(a, f->large, i + 1);
        text_json_string(o, a->values + s, (size_t)(e - s));
        return;
    }
    case ARROW_LIST:
    case ARROW_FIXED_LIST: {
        int64_t s = f->type == ARROW_LIST ? off_at(a, f->large, i) : i * f->list_size;
        int64_t e = f->type == ARROW_LIST ? off_at(a, f->large, i + 1) : s + f->list_size;
        text_put(o, "[", 1);
        for (int64_t j = s; j < e; j++) {
            if (j > s) text_put(o, ", ", 2);
            value_json(&f->children[0], &a->children[0], j, o);
        }
        text_put(o, "]", 1);
        return;
    }
    case ARROW_STRUCT:
        text_put(o, "{", 1);
        for (int c = 0; c < f->n_children; c++) {
            if (c) text_put(o, ", ", 2);
            text_json_string(o, (const uint8_t *)f->children[c].name, strlen(f->children[c].name));
            text_put(o, ": ", 2);
            value_json(&f->children[c], &a->children[c], i, o);
        }
        text_put(o, "}", 1);
        return;
    default:
        text_puts(o, "null");
        return;
    }
}

void arrow_row_json(const ArrowTable *t, int64_t row, ArrowText *out) {
    out->n = 0;
    text_put(out, "{", 1);
    int bi = 0;
    while (bi < t->n_batches - 1 && row >= t->batches[bi].n_rows)
        row -= t->batches[bi++].n_rows;
    KDA_ASSERT(bi < t->n_batches && row >= 0 && row < t->batches[bi].n_rows);
    for (int c = 0; c < t->schema.n_children; c++) {
        if (c) text_put(out, ", ", 2);
        const ArrowField *f = &t->schema.children[c];
        text_json_string(out, (const uint8_t *)f->name, strlen(f->name));
        text_put(out, ": ", 2);
        value_json(f, &t->batches[bi].cols[c], row, out);
    }
    text_put(out, "}", 1);
}
