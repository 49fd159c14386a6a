// parquet.c - minimal Parquet reader for one flat BYTE_ARRAY column (see parquet.h).
//
// File: "PAR1" | column chunks (pages) | FileMetaData (Thrift compact) | int32 len | "PAR1".
// Field ids below are those of parquet-format's parquet.thrift.
#include "data/parquet.h"

#include <errno.h>
#include <fcntl.h>
#include <snappy-c.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#define MAX_PAGE_BYTES ((size_t)1 << 30) // refuse pages claiming more than 1 GiB

enum { PQ_BYTE_ARRAY = 6 };
enum { REP_REQUIRED = 0, REP_OPTIONAL = 1, REP_REPEATED = 2 };
enum { CODEC_NONE = 0, CODEC_SNAPPY = 1, CODEC_GZIP = 2, CODEC_ZSTD = 6 };
enum { ENC_PLAIN = 0, ENC_PLAIN_DICT = 2, ENC_RLE = 3, ENC_RLE_DICT = 8 };
enum { PAGE_DATA = 0, PAGE_INDEX = 1, PAGE_DICT = 2, PAGE_DATA_V2 = 3 };

// ---- Thrift compact protocol --------------------------------------------------------------------

enum {
    TT_STOP = 0,
    TT_TRUE = 1,
    TT_FALSE = 2,
    TT_BYTE = 3,
    TT_I16 = 4,
    TT_I32 = 5,
    TT_I64 = 6,
    TT_DOUBLE = 7,
    TT_BINARY = 8,
    TT_LIST = 9,
    TT_SET = 10,
    TT_MAP = 11,
    TT_STRUCT = 12
};

typedef struct {
    const unsigned char *p, *end;
    int depth;
    int bad; // sticky: set on any overrun or malformed value
} Tc;

static uint64_t tc_varint(Tc *t) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (t->p >= t->end) return t->bad = 1, 0;
        unsigned char b = *t->p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) return v;
    }
    return t->bad = 1, 0;
}

static int64_t tc_int(Tc *t) {
    uint64_t v = tc_varint(t);
    return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

static void tc_binary(Tc *t, const unsigned char **s, size_t *n) {
    uint64_t len = tc_varint(t);
    if (t->bad || len > (uint64_t)(t->end - t->p)) {
        t->bad = 1, *s = t->p, *n = 0;
        return;
    }
    *s = t->p, *n = (size_t)len;
    t->p += len;
}

// List/set header: returns the element count and sets *elem.
static int64_t tc_list(Tc *t, int *elem) {
    if (t->p >= t->end) return t->bad = 1, 0;
    unsigned char b = *t->p++;
    *elem = b & 0x0f;
    uint64_t n = b >> 4;
    if (n == 15) n = tc_varint(t);
    if (n > (uint64_t)(t->end - t->p)) return t->bad = 1, 0; // every element takes >= 1 byte
    return (int64_t)n;
}

static void tc_skip(Tc *t, int type);

static void tc_skip_struct(Tc *t) {
    if (++t->depth > 64) {
        t->bad = 1;
        return;
    }
    int16_t last = 0;
    while (!t->bad) {
        if (t->p >= t->end) {
            t->bad = 1;
            break;
        }
        unsigned char b = *t->p++;
        int type = b & 0x0f;
        if (type == TT_STOP) break;
        if ((b >> 4) == 0)
            last = (int16_t)tc_int(t);
        else
            last = (int16_t)(last + (b >> 4));
        if (type != TT_TRUE && type != TT_FALSE) tc_skip(t, type);
    }
    t->depth--;
}

static void tc_skip(Tc *t, int type) {
    if (t->bad) return;
    switch (type) {
    case TT_TRUE:
    case TT_FALSE:
    case TT_BYTE:
        if (t->p >= t->end)
            t->bad = 1;
        else
            t->p++;
        break;
    case TT_I16:
    case TT_I32:
    case TT_I64:
        tc_varint(t);
        break;
    case TT_DOUBLE:
        if (t->end - t->p < 8)
            t->bad = 1;
        else
            t->p += 8;
        break;
    case TT_BINARY: {
        const unsigned char *s;
        size_t n;
        tc_binary(t, &s, &n);
        break;
    }
    case TT_LIST:
    case TT_SET: {
        int elem;
        int64_t n = tc_list(t, &elem);
        if (++t->depth > 64) t->bad = 1;
        for (int64_t i = 0; i < n && !t->bad; i++)
            tc_skip(t, elem == TT_FALSE ? TT_TRUE : elem);
        t->depth--;
        break;
    }
    case TT_MAP: {
        uint64_t n = tc_varint(t);
        if (n == 0) break;
        if (t->p >= t->end || n > (uint64_t)(t->end - t->p)) {
            t->bad = 1;
            break;
        }
        unsigned char kv = *t->p++;
        if (++t->depth > 64) t->bad = 1;
        for (uint64_t i = 0; i < n && !t->bad; i++)
            tc_skip(t, kv >> 4), tc_skip(t, kv & 0x0f);
        t->depth--;
        break;
    }
    case TT_STRUCT:
        tc_skip_struct(t);
        break;
    default:
        t->bad = 1;
    }
}

// Next field header of the current struct: returns its id, 0 at STOP (or on error).
static int tc_field(Tc *t, int16_t *last, int *type) {
    if (t->bad || t->p >= t->end) return t->bad = 1, 0;
    unsigned char b = *t->p++;
    *type = b & 0x0f;
    if (*type == TT_STOP) return 0;
    if ((b >> 4) == 0)
        *last = (int16_t)tc_int(t);
    else
        *last = (int16_t)(*last + (b >> 4));
    if (*last <= 0) *last = 32767; // ids are positive in parquet.thrift; skip anything else
    return *last;
}

// Reads an integer field of any int type (skips other types, marking bad).
static int64_t tc_read_int(Tc *t, int type) {
    if (type == TT_I16 || type == TT_I32 || type == TT_I64) return tc_int(t);
    if (type == TT_BYTE) {
        if (t->p >= t->end) return t->bad = 1, 0;
        return (int8_t)*t->p++;
    }
    tc_skip(t, type);
    t->bad = 1;
    return 0;
}

// ---- metadata structs -------------------------------------------------------------------------

typedef struct {
    int type, repetition, num_children;
    const unsigned char *name;
    size_t name_len;
} SchemaEl;

typedef struct {
    int64_t num_rows;
    int codec;
    int64_t num_values, data_off, dict_off, size; // size: total_compressed_size
    int have_meta, external;
} ChunkInfo;

struct ParquetReader {
    char name[1024];
    const unsigned char *data; // whole file (mapped or borrowed)
    size_t size;
    void *map;           // owned mapping or NULL
    size_t footer_start; // first byte of FileMetaData
    int64_t num_rows;
    int leaf;          // index of the selected leaf column
    int max_def;       // 0 required, 1 optional
    ChunkInfo *groups; // owned [n_groups]
    int n_groups;
    // iteration state
    int g;                        // current row group (-1 before the first)
    size_t pos, chunk_end;        // next page header offset and end of the chunk
    int64_t chunk_values;         // values read from the chunk so far
    unsigned char *dict_buf;      // owned decompressed dictionary page
    const unsigned char **dict_s; // owned [dict_n]
    uint32_t *dict_len;           // owned [dict_n]
    int64_t dict_n;
    unsigned char *page_buf; // owned decompressed data page
    size_t page_cap;
    const unsigned char **val_s; // owned [page_n], NULL for nulls
    uint32_t *val_len;           // owned [page_n]
    uint32_t *scratch;           // owned [page_n] levels / indices
    int64_t page_n, page_i, page_cap_n;
    int64_t rows_read;
};

static int pq_fail(ParquetReader *r, KdaError *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int pq_fail(ParquetReader *r, KdaError *err, const char *fmt, ...) {
    char msg[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (r->g >= 0)
        return kda_fail(err, "%s: row group %d, column %d: %s", r->name, r->g, r->leaf, msg);
    return kda_fail(err, "%s: %s", r->name, msg);
}

static int read_schema_el(Tc *t, SchemaEl *e) {
    memset(e, 0, sizeof *e);
    e->type = -1, e->repetition = REP_REQUIRED;
    if (++t->depth > 64) return t->bad = 1, -1;
    int16_t last = 0;
    int type, id;
    while ((id = tc_field(t, &last, &type)) != 0) {
        if (id == 1)
            e->type = (int)tc_read_int(t, type);
        else if (id == 3)
            e->repetition = (int)tc_read_int(t, type);
        else if (id == 4 && type == TT_BINARY)
            tc_binary(t, &e->name, &e->name_len);
        else if (id == 5)
            e->num_children = (int)tc_read_int(t, type);
        else if (type != TT_TRUE && type != TT_FALSE)
            tc_skip(t, type);
    }
    t->depth--;
    return t->bad ? -1 : 0;
}

static void read_col_meta(Tc *t, ChunkInfo *c) {
    int16_t last = 0;
    int type, id;
    c->have_meta = 1;
    while ((id = tc_field(t, &last, &type)) != 0) {
        if (id == 4)
            c->codec = (int)tc_read_int(t, type);
        else if (id == 5)
            c->num_values = tc_read_int(t, type);
        else if (id == 7)
            c->size = tc_read_int(t, type);
        else if (id == 9)
            c->data_off = tc_read_int(t, type);
        else if (id == 11)
            c->dict_off = tc_read_int(t, type);
        else if (type != TT_TRUE && type != TT_FALSE)
            tc_skip(t, type);
    }
}

static void read_column_chunk(Tc *t, ChunkInfo *c) {
    int16_t last = 0;
    int type, id;
    while ((id = tc_field(t, &last, &type)) != 0) {
        if (id == 1 && type == TT_BINARY)
            c->external = 1, tc_skip(t, type);
        else if (id == 3 && type == TT_STRUCT)
            read_col_meta(t, c);
        else if (type != TT_TRUE && type != TT_FALSE)
            tc_skip(t, type);
    }
}

static void read_row_group(Tc *t, ChunkInfo *c, int leaf, int *n_columns) {
    int16_t last = 0;
    int type, id;
    *n_columns = 0;
    while ((id = tc_field(t, &last, &type)) != 0) {
        if (id == 1 && type == TT_LIST) {
            int elem;
            int64_t n = tc_list(t, &elem);
            if (elem != TT_STRUCT) t->bad = 1;
            for (int64_t i = 0; i < n && !t->bad; i++) {
                if (i == leaf)
                    read_column_chunk(t, c);
                else
                    tc_skip_struct(t);
            }
            *n_columns = (int)n;
        } else if (id == 3)
            c->num_rows = tc_read_int(t, type);
        else if (type != TT_TRUE && type != TT_FALSE)
            tc_skip(t, type);
    }
}

// Finds the top-level leaf named column; sets r->leaf and r->max_def.
static int select_column(ParquetReader *r, const SchemaEl *el, int n, const char *column,
                         KdaError *err) {
    if (n < 1) return pq_fail(r, err, "empty schema");
    int i = 1, leaf = 0, top = el[0].num_children;
    size_t clen = strlen(column);
    for (int k = 0; k < top; k++) {
        if (i >= n) return pq_fail(r, err, "schema is truncated (root has %d children)", top);
        const SchemaEl *e = &el[i];
        int match = e->name_len == clen && memcmp(e->name, column, clen) == 0;
        if (e->num_children > 0) {
            if (match)
                return pq_fail(r, err, "column \"%s\" is nested; only flat columns are supported",
                               column);
            // Skip the whole subtree, counting its leaves.
            int pending = 1;
            while (pending > 0) {
                if (i >= n) return pq_fail(r, err, "schema is truncated");
                if (el[i].num_children < 0 || el[i].num_children > n)
                    return pq_fail(r, err, "schema element %d has %d children", i,
                                   el[i].num_children);
                pending += el[i].num_children - 1;
                if (el[i].num_children == 0) leaf++;
                i++;
            }
            continue;
        }
        if (match) {
            if (e->type != PQ_BYTE_ARRAY)
                return pq_fail(r, err,
                               "column \"%s\" has physical type %d, expected BYTE_ARRAY (6)",
                               column, e->type);
            if (e->repetition == REP_REPEATED)
                return pq_fail(r, err, "column \"%s\" is repeated; only flat columns are supported",
                               column);
            r->leaf = leaf;
            r->max_def = e->repetition == REP_OPTIONAL;
            return 0;
        }
        leaf++, i++;
    }
    return pq_fail(r, err, "no top-level column \"%s\"", column);
}

static int read_footer(ParquetReader *r, const char *column, KdaError *err) {
    if (r->size < 12 || memcmp(r->data, "PAR1", 4) != 0)
        return pq_fail(r, err, "not a Parquet file (no PAR1 magic at the start)");
    if (memcmp(r->data + r->size - 4, "PAR1", 4) != 0)
        return pq_fail(r, err, "no PAR1 magic at the end (truncated, or encrypted footer)");
    uint32_t mlen;
    memcpy(&mlen, r->data + r->size - 8, 4);
    if (mlen > r->size - 12) return pq_fail(r, err, "footer length %u exceeds the file", mlen);
    r->footer_start = r->size - 8 - mlen;
    Tc t = {r->data + r->footer_start, r->data + r->size - 8, 0, 0};
    SchemaEl *el = NULL;
    int n_el = 0, have_schema = 0, rc = 0;
    int16_t last = 0;
    int type, id;
    while (rc == 0 && (id = tc_field(&t, &last, &type)) != 0) {
        if (id == 2 && type == TT_LIST && !have_schema) {
            int elem;
            int64_t n = tc_list(&t, &elem);
            if (elem != TT_STRUCT) t.bad = 1;
            el = kda_calloc((size_t)n + 1, sizeof *el);
            for (int64_t k = 0; k < n && !t.bad; k++)
                read_schema_el(&t, &el[k]);
            n_el = (int)n, have_schema = 1;
            if (!t.bad) rc = select_column(r, el, n_el, column, err);
        } else if (id == 3) {
            r->num_rows = tc_read_int(&t, type);
        } else if (id == 4 && type == TT_LIST) {
            if (!have_schema) rc = pq_fail(r, err, "row groups precede the schema in the footer");
            if (r->groups) rc = pq_fail(r, err, "footer has two row group lists");
            int elem;
            int64_t n = tc_list(&t, &elem);
            if (elem != TT_STRUCT) t.bad = 1;
            if (rc == 0 && !t.bad) {
                r->groups = kda_calloc((size_t)n + 1, sizeof *r->groups);
                r->n_groups = (int)n;
            }
            for (int64_t k = 0; k < n && !t.bad && rc == 0; k++) {
                int ncol;
                read_row_group(&t, &r->groups[k], r->leaf, &ncol);
                if (!t.bad && ncol <= r->leaf)
                    rc = pq_fail(r, err, "row group %lld has %d columns, expected > %d",
                                 (long long)k, ncol, r->leaf);
            }
        } else if (type != TT_TRUE && type != TT_FALSE) {
            tc_skip(&t, type);
        }
    }
    free(el);
    if (rc != 0) return -1;
    if (t.bad) return pq_fail(r, err, "malformed footer (Thrift FileMetaData)");
    if (!have_schema) return pq_fail(r, err, "footer has no schema");
    int64_t total = 0;
    for (int k = 0; k < r->n_groups; k++) {
        ChunkInfo *c = &r->groups[k];
        if (!c->have_meta || c->external)
            return pq_fail(r, err, "row group %d: column chunk has no inline metadata", k);
        if (c->codec != CODEC_NONE && c->codec != CODEC_SNAPPY && c->codec != CODEC_GZIP &&
            c->codec != CODEC_ZSTD)
            return pq_fail(r, err,
                           "row group %d: codec %d not supported (only none, snappy, gzip, zstd)",
                           k, c->codec);
        int64_t start = c->dict_off > 0 && c->dict_off < c->data_off ? c->dict_off : c->data_off;
        if (start < 4 || c->size < 0 || c->num_values < 0 || start > (int64_t)r->footer_start ||
            c->size > (int64_t)r->footer_start - start)
            return pq_fail(r, err, "row group %d: column chunk [%lld, +%lld) lies outside the data",
                           k, (long long)start, (long long)c->size);
        total += c->num_values;
    }
    // A flat (non-repeated) column has one value, or null, per row: the chunks' value counts
    // must add up to the footer's row count, or the file is inconsistent.
    if (total != r->num_rows)
        return pq_fail(r, err,
                       "the row groups hold %lld values of the column, the footer says %lld rows",
                       (long long)total, (long long)r->num_rows);
    return 0;
}

// ---- open / close -----------------------------------------------------------------------------

static int open_common(ParquetReader *r, const char *column, KdaError *err) {
    r->g = -1;
    if (read_footer(r, column, err) != 0) return -1;
    return 0;
}

int parquet_open_buffer(ParquetReader **out, const void *data, size_t n, const char *name,
                        const char *column, KdaError *err) {
    ParquetReader *r = kda_calloc(1, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", name ? name : "(buffer)");
    r->data = data, r->size = n;
    r->g = -1;
    if (open_common(r, column, err) != 0) {
        parquet_close(r);
        *out = NULL;
        return -1;
    }
    *out = r;
    return 0;
}

int parquet_open(ParquetReader **out, const char *path, const char *column, KdaError *err) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return kda_fail(err, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < 12) {
        close(fd);
        return kda_fail(err, "%s: not a Parquet file (too short)", path);
    }
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) return kda_fail(err, "%s: cannot mmap: %s", path, strerror(errno));
    madvise(m, (size_t)st.st_size, MADV_SEQUENTIAL);
    ParquetReader *r;
    if (parquet_open_buffer(&r, m, (size_t)st.st_size, path, column, err) != 0) {
        munmap(m, (size_t)st.st_size);
        return -1;
    }
    r->map = m;
    *out = r;
    return 0;
}

void parquet_close(ParquetReader *r) {
    if (!r) return;
    if (r->map) munmap(r->map, r->size);
    free(r->groups);
    free(r->dict_buf), free(r->dict_s), free(r->dict_len);
    free(r->page_buf), free(r->val_s), free(r->val_len), free(r->scratch);
    free(r);
}

int64_t parquet_num_rows(const ParquetReader *r) {
    return r->num_rows;
}
int64_t parquet_rows_read(const ParquetReader *r) {
    return r->rows_read;
}
int64_t parquet_bytes_read(const ParquetReader *r) {
    return r->g < 0 ? 0 : r->g >= r->n_groups ? (int64_t)r->size : (int64_t)r->pos;
}

// ---- pages
// ----------------------------------------------------------------------------------------

typedef struct {
    int type;
    int64_t uncompressed, compressed;
    int64_t num_values, encoding;
    int64_t def_len, rep_len; // v2
    int is_compressed;        // v2 (default true)
} PageHeader;

static void read_page_sub(Tc *t, PageHeader *h, int which) {
    int16_t last = 0;
    int type, id;
    if (++t->depth > 64) {
        t->bad = 1;
        return;
    }
    while ((id = tc_field(t, &last, &type)) != 0) {
        if (id == 1 && type != TT_STRUCT)
            h->num_values = tc_read_int(t, type);
        else if (which == 8 && id == 4)
            h->encoding = tc_read_int(t, type);
        else if (which != 8 && id == 2)
            h->encoding = tc_read_int(t, type);
        else if (which == 8 && id == 5)
            h->def_len = tc_read_int(t, type);
        else if (which == 8 && id == 6)
            h->rep_len = tc_read_int(t, type);
        else if (which == 8 && id == 7 && (type == TT_TRUE || type == TT_FALSE))
            h->is_compressed = type == TT_TRUE;
        else if (type != TT_TRUE && type != TT_FALSE)
            tc_skip(t, type);
    }
    t->depth--;
}

static int read_page_header(Tc *t, PageHeader *h) {
    memset(h, 0, sizeof *h);
    h->type = -1, h->is_compressed = 1;
    int16_t last = 0;
    int type, id;
    while ((id = tc_field(t, &last, &type)) != 0) {
        if (id == 1)
            h->type = (int)tc_read_int(t, type);
        else if (id == 2)
            h->uncompressed = tc_read_int(t, type);
        else if (id == 3)
            h->compressed = tc_read_int(t, type);
        else if ((id == 5 || id == 7 || id == 8) && type == TT_STRUCT)
            read_page_sub(t, h, id);
        else if (type != TT_TRUE && type != TT_FALSE)
            tc_skip(t, type);
    }
    return t->bad ? -1 : 0;
}

// Decompresses src[0..n) into exactly want bytes at dst.
static int decompress(ParquetReader *r, int codec, const unsigned char *src, size_t n,
                      unsigned char *dst, size_t want, KdaError *err) {
    if (codec == CODEC_NONE) {
        if (n != want)
            return pq_fail(r, err, "uncompressed page holds %zu bytes, header says %zu", n, want);
        if (n) memcpy(dst, src, n);
        return 0;
    }
    if (codec == CODEC_SNAPPY) {
        size_t got;
        if (snappy_uncompressed_length((const char *)src, n, &got) != SNAPPY_OK || got != want)
            return pq_fail(r, err, "corrupt snappy page (bad length header)");
        got = want;
        if (snappy_uncompress((const char *)src, n, (char *)dst, &got) != SNAPPY_OK || got != want)
            return pq_fail(r, err, "corrupt snappy page");
        return 0;
    }
    if (codec == CODEC_ZSTD) {
        size_t got = ZSTD_decompress(dst, want, src, n);
        if (ZSTD_isError(got) || got != want)
            return pq_fail(r, err, "corrupt zstd page (%s)",
                           ZSTD_isError(got) ? ZSTD_getErrorName(got) : "size mismatch");
        return 0;
    }
    // GZIP
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, 32 + MAX_WBITS) != Z_OK) return pq_fail(r, err, "zlib init failed");
    z.next_in = (unsigned char *)src, z.avail_in = (uInt)n;
    z.next_out = dst, z.avail_out = (uInt)want;
    int zrc = inflate(&z, Z_FINISH);
    size_t got = want - z.avail_out;
    inflateEnd(&z);
    if (zrc != Z_STREAM_END || got != want) return pq_fail(r, err, "corrupt gzip page");
    return 0;
}

// RLE / bit-packed hybrid: decodes n values of width bw from p[0..len) into out.
static int rle_decode(const unsigned char *p, size_t len, int bw, uint32_t *out, int64_t n) {
    const unsigned char *end = p + len;
    int64_t got = 0;
    size_t vbytes = (size_t)(bw + 7) / 8;
    uint32_t mask = bw >= 32 ? 0xffffffffu : (1u << bw) - 1;
    while (got < n) {
        Tc t = {p, end, 0, 0};
        uint64_t h = tc_varint(&t);
        if (t.bad) return -1;
        p = t.p;
        if (h & 1) { // bit-packed: (h >> 1) groups of 8 values
            uint64_t groups = h >> 1;
            if (groups == 0 || groups > (uint64_t)(end - p)) return -1;
            size_t bytes = (size_t)groups * (size_t)bw;
            if (bytes > (size_t)(end - p)) {
                // The last group may be cut short when it pads past the values we need.
                int64_t need_vals = n - got;
                size_t need = (size_t)((need_vals * bw + 7) / 8);
                if (need > (size_t)(end - p)) return -1;
                bytes = (size_t)(end - p);
            }
            uint64_t acc = 0;
            int bits = 0;
            const unsigned char *q = p;
            for (uint64_t i = 0; i < groups * 8 && got < n; i++) {
                while (bits < bw) {
                    acc |= (uint64_t)(q < p + bytes ? *q : 0) << bits;
                    q++, bits += 8;
                }
                out[got++] = (uint32_t)acc & mask;
                acc = bw >= 64 ? 0 : acc >> bw;
                bits -= bw;
            }
            p += bytes;
        } else { // run of one value
            uint64_t run = h >> 1;
            if (run == 0 || vbytes > (size_t)(end - p)) return -1;
            uint32_t v = 0;
            for (size_t k = 0; k < vbytes; k++)
                v |= (uint32_t)p[k] << (8 * k);
            p += vbytes;
            if (v & ~mask) return -1;
            for (uint64_t i = 0; i < run && got < n; i++)
                out[got++] = v;
        }
    }
    return 0;
}

static void ensure_page_arrays(ParquetReader *r, int64_t n) {
    if (n <= r->page_cap_n) return;
    r->page_cap_n = n;
    r->val_s = kda_realloc(r->val_s, sizeof(*r->val_s) * (size_t)n);
    r->val_len = kda_realloc(r->val_len, sizeof(uint32_t) * (size_t)n);
    r->scratch = kda_realloc(r->scratch, sizeof(uint32_t) * (size_t)n);
}

// PLAIN BYTE_ARRAY: n values of (uint32 length, bytes).
static int plain_values(const unsigned char *p, size_t len, int64_t n, const unsigned char **s,
                        uint32_t *lens) {
    size_t off = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t l;
        if (len - off < 4) return -1;
        memcpy(&l, p + off, 4);
        off += 4;
        if (l > len - off) return -1;
        s[i] = p + off, lens[i] = l;
        off += l;
    }
    return 0;
}

static int load_dictionary(ParquetReader *r, const PageHeader *h, const unsigned char *body,
                           KdaError *err) {
    if (h->encoding != ENC_PLAIN && h->encoding != ENC_PLAIN_DICT)
        return pq_fail(r, err, "dictionary page encoding %lld not supported",
                       (long long)h->encoding);
    if (h->num_values < 0 || h->num_values > h->uncompressed / 4 + 1)
        return pq_fail(r, err, "dictionary page claims %lld values", (long long)h->num_values);
    free(r->dict_buf), free(r->dict_s), free(r->dict_len);
    r->dict_buf = kda_malloc((size_t)h->uncompressed + 1);
    r->dict_s = kda_malloc(sizeof(*r->dict_s) * (size_t)(h->num_values + 1));
    r->dict_len = kda_malloc(sizeof(uint32_t) * (size_t)(h->num_values + 1));
    r->dict_n = 0;
    if (decompress(r, r->groups[r->g].codec, body, (size_t)h->compressed, r->dict_buf,
                   (size_t)h->uncompressed, err) != 0)
        return -1;
    if (plain_values(r->dict_buf, (size_t)h->uncompressed, h->num_values, r->dict_s, r->dict_len))
        return pq_fail(r, err, "dictionary page values overrun the page");
    r->dict_n = h->num_values;
    return 0;
}

static int decode_data_page(ParquetReader *r, const PageHeader *h, const unsigned char *body,
                            KdaError *err) {
    int64_t n = h->num_values;
    if (n < 0 || n > h->uncompressed * 8 + 64 || n > 100000000)
        return pq_fail(r, err, "data page claims %lld values", (long long)n);
    int v2 = h->type == PAGE_DATA_V2;
    size_t lvl = 0; // v2: uncompressed level bytes at the start of the body
    if (v2) {
        if (h->def_len < 0 || h->rep_len < 0 || h->def_len + h->rep_len > h->compressed ||
            h->def_len + h->rep_len > h->uncompressed)
            return pq_fail(r, err, "page v2 level lengths exceed the page");
        lvl = (size_t)(h->def_len + h->rep_len);
    }
    if (r->page_cap < (size_t)h->uncompressed + 1) {
        r->page_cap = (size_t)h->uncompressed + 1;
        r->page_buf = kda_realloc(r->page_buf, r->page_cap);
    }
    unsigned char *page = r->page_buf;
    memcpy(page, body, lvl);
    int codec = v2 && !h->is_compressed ? CODEC_NONE : r->groups[r->g].codec;
    if (decompress(r, codec, body + lvl, (size_t)h->compressed - lvl, page + lvl,
                   (size_t)h->uncompressed - lvl, err) != 0)
        return -1;
    ensure_page_arrays(r, n + 1);
    const unsigned char *p = page, *end = page + h->uncompressed;
    int64_t non_null = n;
    if (r->max_def > 0) { // definition levels, bit width 1
        const unsigned char *levels;
        size_t llen;
        if (v2) {
            levels = page + h->rep_len, llen = (size_t)h->def_len;
            p = page + lvl;
        } else {
            uint32_t l;
            if (end - p < 4) return pq_fail(r, err, "page too short for definition levels");
            memcpy(&l, p, 4);
            if (l > (size_t)(end - p - 4))
                return pq_fail(r, err, "definition levels overrun the page");
            levels = p + 4, llen = l, p += 4 + l;
        }
        if (rle_decode(levels, llen, 1, r->scratch, n) != 0)
            return pq_fail(r, err, "corrupt definition levels");
        non_null = 0;
        for (int64_t i = 0; i < n; i++)
            non_null += r->scratch[i];
    } else if (v2) {
        p = page + lvl;
    }
    // Values go into the tail of val_s/val_len, then are spread out over the null slots.
    const unsigned char **vs = r->val_s + (n - non_null);
    uint32_t *vl = r->val_len + (n - non_null);
    if (h->encoding == ENC_PLAIN) {
        if (plain_values(p, (size_t)(end - p), non_null, vs, vl) != 0)
            return pq_fail(r, err, "PLAIN values overrun the page");
    } else if (h->encoding == ENC_PLAIN_DICT || h->encoding == ENC_RLE_DICT) {
        if (!r->dict_s) return pq_fail(r, err, "dictionary-encoded page without a dictionary page");
        if (non_null > 0) {
            if (p >= end) return pq_fail(r, err, "page too short for dictionary indices");
            int bw = *p++;
            if (bw > 32) return pq_fail(r, err, "dictionary index bit width %d", bw);
            // Indices decode into scratch after the levels; levels are no longer needed
            // except for the null pattern, so keep them: use val_len's tail as index buffer.
            uint32_t *idx = vl;
            if (rle_decode(p, (size_t)(end - p), bw, idx, non_null) != 0)
                return pq_fail(r, err, "corrupt dictionary indices");
            for (int64_t i = 0; i < non_null; i++) {
                if (idx[i] >= (uint64_t)r->dict_n)
                    return pq_fail(r, err, "dictionary index %u out of range (%lld entries)",
                                   idx[i], (long long)r->dict_n);
                vs[i] = r->dict_s[idx[i]];
                vl[i] = r->dict_len[idx[i]];
            }
        }
    } else {
        return pq_fail(r, err, "value encoding %lld not supported (only PLAIN and dictionary)",
                       (long long)h->encoding);
    }
    if (r->max_def > 0) { // spread: walk forward, taking the next value for each defined slot
        int64_t k = n - non_null;
        for (int64_t i = 0; i < n; i++) {
            if (r->scratch[i]) {
                r->val_s[i] = r->val_s[k], r->val_len[i] = r->val_len[k];
                k++;
            } else {
                r->val_s[i] = NULL, r->val_len[i] = 0;
            }
        }
    }
    r->page_n = n, r->page_i = 0;
    return 0;
}

static void start_chunk(ParquetReader *r) {
    const ChunkInfo *c = &r->groups[r->g];
    int64_t start = c->dict_off > 0 && c->dict_off < c->data_off ? c->dict_off : c->data_off;
    r->pos = (size_t)start;
    r->chunk_end = (size_t)(start + c->size);
    r->chunk_values = 0;
    free(r->dict_buf), free(r->dict_s), free(r->dict_len);
    r->dict_buf = NULL, r->dict_s = NULL, r->dict_len = NULL, r->dict_n = 0;
}

// Moves to the next data page, possibly in the next row group. 1 = page ready, 0 = end.
static int next_page(ParquetReader *r, KdaError *err) {
    for (;;) {
        if (r->g < 0 || r->chunk_values >= r->groups[r->g].num_values) {
            if (r->g + 1 >= r->n_groups) {
                r->g = r->n_groups;
                return 0;
            }
            r->g++;
            start_chunk(r);
            continue;
        }
        if (r->pos >= r->chunk_end)
            return pq_fail(r, err, "column chunk ends after %lld of %lld values",
                           (long long)r->chunk_values, (long long)r->groups[r->g].num_values);
        Tc t = {r->data + r->pos, r->data + r->chunk_end, 0, 0};
        PageHeader h;
        if (read_page_header(&t, &h) != 0)
            return pq_fail(r, err, "malformed page header at byte %zu", r->pos);
        size_t hdr = (size_t)(t.p - (r->data + r->pos));
        if (h.compressed < 0 || (uint64_t)h.compressed > r->chunk_end - r->pos - hdr)
            return pq_fail(r, err, "page at byte %zu: compressed size %lld overruns the chunk",
                           r->pos, (long long)h.compressed);
        if (h.uncompressed < 0 || (uint64_t)h.uncompressed > MAX_PAGE_BYTES)
            return pq_fail(r, err, "page at byte %zu: uncompressed size %lld", r->pos,
                           (long long)h.uncompressed);
        const unsigned char *body = r->data + r->pos + hdr;
        r->pos += hdr + (size_t)h.compressed;
        if (h.type == PAGE_DICT) {
            if (load_dictionary(r, &h, body, err) != 0) return -1;
        } else if (h.type == PAGE_DATA || h.type == PAGE_DATA_V2) {
            r->page_n = r->page_i = 0;
            if (decode_data_page(r, &h, body, err) != 0) return -1;
            if (r->page_n > r->groups[r->g].num_values - r->chunk_values)
                return pq_fail(r, err,
                               "page at byte %zu: %lld values overrun the column chunk's %lld",
                               (size_t)(body - r->data), (long long)r->page_n,
                               (long long)r->groups[r->g].num_values);
            r->chunk_values += r->page_n;
            if (r->page_n > 0) return 1;
        } // index pages and unknown page types are skipped
    }
}

int parquet_next(ParquetReader *r, const char **s, size_t *len, int *is_null, KdaError *err) {
    while (r->page_i >= r->page_n) {
        int rc = next_page(r, err);
        if (rc <= 0) {
            r->page_n = r->page_i = 0;
            return rc;
        }
    }
    int64_t i = r->page_i++;
    *is_null = r->val_s[i] == NULL;
    *s = *is_null ? "" : (const char *)r->val_s[i];
    *len = r->val_len[i];
    r->rows_read++;
    return 1;
}
