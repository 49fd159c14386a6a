// readers.c - document stream over JSONL / text / Parquet files, plain, gzip or zstd.
//
// Layers: a ByteSource (fread + optional inflate/zstd stream decoder) feeds a line splitter;
// the DocReader walks the file list and turns lines (or whole files, or Parquet rows) into
// documents.
#include "data/readers.h"

#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>
#include <zstd.h>

#include "core/json.h"    // defines: json_parse, json_get, json_free
#include "core/util.h"    // defines: path_is_dir, path_exists
#include "data/parquet.h" // defines: parquet_open, parquet_next

// ---- file kinds ---------------------------------------------------------------------------------

typedef enum { KIND_NONE, KIND_JSONL, KIND_TXT, KIND_PARQUET } FileKind;
typedef enum { COMP_NONE, COMP_GZ, COMP_ZSTD } Compression;

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static FileKind file_kind(const char *path, Compression *comp) {
    char base[4096];
    snprintf(base, sizeof base, "%s", path);
    *comp = COMP_NONE;
    if (ends_with(base, ".parquet")) return KIND_PARQUET;
    if (ends_with(base, ".gz"))
        *comp = COMP_GZ, base[strlen(base) - 3] = 0;
    else if (ends_with(base, ".zst"))
        *comp = COMP_ZSTD, base[strlen(base) - 4] = 0;
    if (ends_with(base, ".jsonl") || ends_with(base, ".json") || ends_with(base, ".ndjson"))
        return KIND_JSONL;
    if (ends_with(base, ".txt")) return KIND_TXT;
    return KIND_NONE;
}

int docreader_supported(const char *path) {
    Compression c;
    return file_kind(path, &c) != KIND_NONE;
}

// ---- input expansion ----------------------------------------------------------------------------

typedef struct {
    char **items;
    int n, cap;
} StrList;

static void strlist_push(StrList *l, const char *s) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 16;
        l->items = kda_realloc(l->items, sizeof(char *) * (size_t)l->cap);
    }
    l->items[l->n++] = kda_strdup(s);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int walk_dir(const char *dir, StrList *out, int depth, KdaError *err) {
    if (depth > 64) return kda_fail(err, "%s: directories nested too deep", dir);
    DIR *d = opendir(dir);
    if (!d) return kda_fail(err, "%s: cannot open directory: %s", dir, strerror(errno));
    StrList names = {0};
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.') strlist_push(&names, e->d_name);
    closedir(d);
    qsort(names.items, (size_t)names.n, sizeof(char *), cmp_str);
    int rc = 0;
    char path[4096];
    for (int i = 0; i < names.n; i++) {
        if (rc == 0) {
            path_join(path, sizeof path, dir, names.items[i]);
            if (path_is_dir(path))
                rc = walk_dir(path, out, depth + 1, err);
            else if (docreader_supported(path))
                strlist_push(out, path);
        }
        free(names.items[i]);
    }
    free(names.items);
    return rc;
}

static int add_input(const char *in, StrList *out, KdaError *err) {
    if (path_is_dir(in)) {
        int before = out->n;
        if (walk_dir(in, out, 0, err) != 0) return -1;
        // Sort this directory's files by full path so the order never depends on readdir.
        qsort(out->items + before, (size_t)(out->n - before), sizeof(char *), cmp_str);
        return 0;
    }
    if (path_exists(in)) {
        if (!docreader_supported(in))
            return kda_fail(err,
                            "%s: unsupported input type (expected .jsonl, .json, .ndjson, "
                            ".txt (each optionally .gz or .zst) or .parquet)",
                            in);
        strlist_push(out, in);
        return 0;
    }
    if (!strpbrk(in, "*?[")) return kda_fail(err, "%s: no such file or directory", in);
    glob_t g;
    int grc = glob(in, 0, NULL, &g);
    if (grc == GLOB_NOMATCH) return kda_fail(err, "%s: no files match this pattern", in);
    if (grc != 0) return kda_fail(err, "%s: glob failed", in);
    int rc = 0;
    for (size_t i = 0; i < g.gl_pathc && rc == 0; i++)
        rc = add_input(g.gl_pathv[i], out, err);
    globfree(&g);
    return rc;
}

int docreader_expand(const char *const *inputs, int n_inputs, char ***paths, int *n_paths,
                     KdaError *err) {
    StrList out = {0};
    *paths = NULL, *n_paths = 0;
    for (int i = 0; i < n_inputs; i++)
        if (add_input(inputs[i], &out, err) != 0) {
            docreader_free_paths(out.items, out.n);
            return -1;
        }
    if (out.n == 0) {
        free(out.items);
        return kda_fail(err, "no input files (directories hold no .jsonl/.txt/.parquet files)");
    }
    *paths = out.items, *n_paths = out.n;
    return 0;
}

void docreader_free_paths(char **paths, int n_paths) {
    for (int i = 0; i < n_paths; i++)
        free(paths[i]);
    free(paths);
}

// ---- ByteSource: raw file + stream decoder
// --------------------------------------------------------

#define RAW_CHUNK (1 << 18)

typedef struct {
    FILE *f;
    Compression comp;
    const char *path;   // borrowed
    unsigned char *raw; // owned [RAW_CHUNK] compressed input
    size_t raw_pos, raw_end;
    int raw_eof;
    z_stream z;
    int z_init, z_done;
    ZSTD_DStream *zs;
    int zs_in_frame;    // inside a zstd frame (more input or output pending)
    int64_t bytes_read; // raw bytes consumed from the file
} ByteSource;

static int src_open(ByteSource *s, const char *path, Compression comp, KdaError *err) {
    memset(s, 0, sizeof *s);
    s->path = path;
    s->comp = comp;
    s->f = fopen(path, "rb");
    if (!s->f) return kda_fail(err, "%s: cannot open: %s", path, strerror(errno));
    s->raw = kda_malloc(RAW_CHUNK);
    if (comp == COMP_GZ) {
        if (inflateInit2(&s->z, 16 + MAX_WBITS) != Z_OK)
            return kda_fail(err, "%s: zlib init failed", path);
        s->z_init = 1;
    } else if (comp == COMP_ZSTD) {
        s->zs = ZSTD_createDStream();
        if (!s->zs) return kda_fail(err, "%s: zstd init failed", path);
        ZSTD_initDStream(s->zs);
    }
    return 0;
}

static void src_close(ByteSource *s) {
    if (s->f) fclose(s->f);
    if (s->z_init) inflateEnd(&s->z);
    if (s->zs) ZSTD_freeDStream(s->zs);
    free(s->raw);
    memset(s, 0, sizeof *s);
}

static int src_fill_raw(ByteSource *s, KdaError *err) {
    if (s->raw_pos < s->raw_end || s->raw_eof) return 0;
    size_t n = fread(s->raw, 1, RAW_CHUNK, s->f);
    if (n < RAW_CHUNK) {
        if (ferror(s->f)) return kda_fail(err, "%s: read error: %s", s->path, strerror(errno));
        s->raw_eof = 1;
    }
    s->raw_pos = 0, s->raw_end = n;
    s->bytes_read += (int64_t)n;
    return 0;
}

// Reads up to cap decoded bytes into out; *got = 0 means end of stream. Decoders are called
// even with no input left, so that output they still hold is flushed before the end.
static int src_read(ByteSource *s, unsigned char *out, size_t cap, size_t *got, KdaError *err) {
    *got = 0;
    while (*got == 0) {
        if (src_fill_raw(s, err) != 0) return -1;
        size_t avail = s->raw_end - s->raw_pos;
        if (s->comp == COMP_NONE) {
            if (avail == 0) return 0;
            size_t n = avail < cap ? avail : cap;
            memcpy(out, s->raw + s->raw_pos, n);
            s->raw_pos += n, *got = n;
        } else if (s->comp == COMP_GZ) {
            if (avail == 0 && (s->z_done || s->z.total_in == 0)) return 0;
            if (s->z_done) { // another gzip member follows (concatenated .gz files)
                inflateReset(&s->z);
                s->z_done = 0;
            }
            s->z.next_in = s->raw + s->raw_pos, s->z.avail_in = (uInt)avail;
            s->z.next_out = out, s->z.avail_out = (uInt)cap;
            int zrc = inflate(&s->z, Z_NO_FLUSH);
            if (zrc != Z_OK && zrc != Z_STREAM_END && zrc != Z_BUF_ERROR)
                return kda_fail(err, "%s: corrupt gzip data (%s)", s->path,
                                s->z.msg ? s->z.msg : "inflate error");
            s->raw_pos = (size_t)(s->z.next_in - s->raw);
            *got = cap - s->z.avail_out;
            if (zrc == Z_STREAM_END)
                s->z_done = 1;
            else if (*got == 0 && avail == 0)
                return kda_fail(err, "%s: truncated gzip stream", s->path);
        } else {
            if (avail == 0 && s->bytes_read == 0) return 0; // empty file
            ZSTD_inBuffer in = {s->raw + s->raw_pos, avail, 0};
            ZSTD_outBuffer o = {out, cap, 0};
            size_t zr = ZSTD_decompressStream(s->zs, &o, &in);
            if (ZSTD_isError(zr))
                return kda_fail(err, "%s: corrupt zstd data (%s)", s->path, ZSTD_getErrorName(zr));
            s->raw_pos += in.pos, *got = o.pos;
            if (*got == 0 && avail == 0) { // nothing left: fine only between frames
                if (s->zs_in_frame) return kda_fail(err, "%s: truncated zstd stream", s->path);
                return 0;
            }
            s->zs_in_frame = zr != 0; // 0: a frame just ended and its output is all flushed
        }
    }
    return 0;
}

// ---- DocReader
// ------------------------------------------------------------------------------------

struct DocReader {
    char **paths; // owned copies
    int n_paths, cur;
    DocReaderOptions opt;
    FileKind kind;
    ByteSource src;
    int src_open;
    ParquetReader *pq;
    unsigned char *buf; // owned line buffer: data in [pos, end)
    size_t pos, end, cap;
    int eof;
    int64_t line; // 1-based line of the last line returned
    JsonDoc doc;
    int doc_live;
    int64_t bytes_done; // bytes of finished files
    DocReaderStats st;
    char where[4200];
};

int docreader_open(DocReader **out, char *const *paths, int n_paths, const DocReaderOptions *opts,
                   KdaError *err) {
    DocReader *r = kda_calloc(1, sizeof *r);
    r->opt = *opts;
    if (!r->opt.json_key) r->opt.json_key = "text";
    r->paths = kda_malloc(sizeof(char *) * (size_t)(n_paths ? n_paths : 1));
    for (int i = 0; i < n_paths; i++) {
        r->paths[i] = kda_strdup(paths[i]);
        struct stat st;
        if (stat(paths[i], &st) != 0) {
            r->n_paths = i + 1;
            docreader_close(r);
            *out = NULL;
            return kda_fail(err, "%s: cannot stat: %s", paths[i], strerror(errno));
        }
        r->st.total_bytes += st.st_size;
    }
    r->n_paths = n_paths;
    r->st.n_files = n_paths;
    r->cur = -1;
    r->cap = 1 << 20;
    r->buf = kda_malloc(r->cap);
    *out = r;
    return 0;
}

static void close_current(DocReader *r) {
    if (r->src_open) {
        r->bytes_done += r->src.bytes_read;
        src_close(&r->src);
        r->src_open = 0;
    }
    if (r->pq) {
        r->bytes_done += parquet_bytes_read(r->pq);
        parquet_close(r->pq);
        r->pq = NULL;
    }
}

void docreader_close(DocReader *r) {
    if (!r) return;
    close_current(r);
    if (r->doc_live) json_free(&r->doc);
    for (int i = 0; i < r->n_paths; i++)
        free(r->paths[i]);
    free(r->paths);
    free(r->buf);
    free(r);
}

// Opens file number r->cur + 1. Returns 1 when a file was opened, 0 when no files remain.
static int open_next_file(DocReader *r, KdaError *err) {
    close_current(r);
    if (r->cur >= 0) r->st.files_done++;
    if (++r->cur >= r->n_paths) return 0;
    const char *path = r->paths[r->cur];
    Compression comp;
    r->kind = file_kind(path, &comp);
    r->pos = r->end = 0, r->eof = 0, r->line = 0;
    if (r->kind == KIND_NONE) return kda_fail(err, "%s: unsupported input type", path);
    if (r->kind == KIND_PARQUET) return parquet_open(&r->pq, path, r->opt.json_key, err) ? -1 : 1;
    if (src_open(&r->src, path, comp, err) != 0) {
        src_close(&r->src);
        return -1;
    }
    r->src_open = 1;
    return 1;
}

// Doubles the buffer, unless the record in it would exceed the limit (then an error naming the
// file, the line being read and the limit: no unbounded allocation on a hostile input).
static int grow(DocReader *r, KdaError *err) {
    size_t max = r->opt.max_record ? r->opt.max_record : DOCREADER_MAX_RECORD;
    if (r->cap >= max)
        return kda_fail(err,
                        "%s:%lld: record longer than the limit of %zu bytes (kda tokenize "
                        "--max-record-mb raises it)",
                        r->paths[r->cur], (long long)r->line + 1, max);
    r->cap = 2 * r->cap < max ? 2 * r->cap : max;
    r->buf = kda_realloc(r->buf, r->cap);
    return 0;
}

// Reads more decoded bytes after r->end, compacting or growing the buffer as needed.
static int fill(DocReader *r, KdaError *err) {
    if (r->pos > 0 && r->pos == r->end) r->pos = r->end = 0;
    if (r->end == r->cap) {
        if (r->pos > 0) {
            memmove(r->buf, r->buf + r->pos, r->end - r->pos);
            r->end -= r->pos, r->pos = 0;
        } else if (grow(r, err)) {
            return -1;
        }
    }
    size_t got;
    if (src_read(&r->src, r->buf + r->end, r->cap - r->end, &got, err) != 0) return -1;
    if (got == 0) r->eof = 1;
    r->end += got;
    return 0;
}

// Next line (without '\n'), NUL-terminated in place. 1 = line, 0 = end of file, -1 = error.
static int next_line(DocReader *r, char **line, size_t *len, KdaError *err) {
    size_t scanned = r->pos;
    for (;;) {
        unsigned char *nl = memchr(r->buf + scanned, '\n', r->end - scanned);
        if (nl || (r->eof && r->end > r->pos)) {
            size_t stop = nl ? (size_t)(nl - r->buf) : r->end;
            if (!nl && stop == r->cap && grow(r, err)) return -1; // room for the NUL
            *line = (char *)r->buf + r->pos;
            *len = stop - r->pos;
            r->buf[stop] = 0;
            r->pos = nl ? stop + 1 : stop;
            r->line++;
            return 1;
        }
        if (r->eof) return 0;
        size_t off = r->end - r->pos;
        if (fill(r, err) != 0) return -1;
        scanned = r->pos + off;
    }
}

static int bad_record(DocReader *r, KdaError *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int bad_record(DocReader *r, KdaError *err, const char *fmt, ...) {
    char msg[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!r->opt.skip_bad)
        return kda_fail(err, "%s:%lld: %s", r->paths[r->cur], (long long)r->line, msg);
    if (r->st.bad_records++ == 0) {
        KdaError first;
        kda_fail(&first, "%s:%lld: %s", r->paths[r->cur], (long long)r->line, msg);
        memcpy(r->st.first_bad, first.msg, sizeof r->st.first_bad);
    }
    return 0;
}

static int is_blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r') return 0;
    return 1;
}

// One JSONL document: 1 = got one, 0 = end of file, -1 = error.
static int next_jsonl(DocReader *r, const char **text, size_t *len, KdaError *err) {
    for (;;) {
        char *line;
        size_t n;
        int rc = next_line(r, &line, &n, err);
        if (rc <= 0) return rc;
        if (is_blank(line, n)) continue;
        KdaError jerr;
        if (r->doc_live) json_free(&r->doc), r->doc_live = 0;
        if (json_parse(&r->doc, line, n, &jerr) != 0) {
            if (bad_record(r, err, "malformed JSON: %s", jerr.msg) != 0) return -1;
            continue;
        }
        r->doc_live = 1;
        if (r->doc.root.type != JSON_OBJECT) {
            if (bad_record(r, err, "record is a JSON %s, expected an object with a \"%s\" key",
                           json_type_name(r->doc.root.type), r->opt.json_key) != 0)
                return -1;
            continue;
        }
        const JsonValue *v = json_get(&r->doc.root, r->opt.json_key);
        if (!v) {
            if (bad_record(r, err, "record has no \"%s\" key", r->opt.json_key) != 0) return -1;
            continue;
        }
        if (v->type != JSON_STRING) {
            if (bad_record(r, err, "\"%s\" is a JSON %s, expected a string", r->opt.json_key,
                           json_type_name(v->type)) != 0)
                return -1;
            continue;
        }
        *text = v->str, *len = v->len;
        return 1;
    }
}

static int next_txt(DocReader *r, const char **text, size_t *len, KdaError *err) {
    if (r->opt.txt_lines) {
        char *line;
        size_t n;
        int rc = next_line(r, &line, &n, err);
        if (rc <= 0) return rc;
        if (n > 0 && line[n - 1] == '\r') line[--n] = 0;
        *text = line, *len = n;
        return 1;
    }
    if (r->line > 0) return 0; // the one document of this file was returned
    while (!r->eof) {
        if (r->end == r->cap && grow(r, err)) return -1;
        if (fill(r, err) != 0) return -1;
    }
    r->line = 1;
    *text = (const char *)r->buf + r->pos, *len = r->end - r->pos;
    return 1;
}

static int next_parquet(DocReader *r, const char **text, size_t *len, KdaError *err) {
    int is_null = 0;
    int rc = parquet_next(r->pq, text, len, &is_null, err);
    if (rc == 1 && is_null) r->st.nulls++, *text = "", *len = 0;
    r->line = parquet_rows_read(r->pq);
    return rc;
}

int docreader_next(DocReader *r, const char **text, size_t *len, KdaError *err) {
    for (;;) {
        int rc = 0;
        if (r->cur >= 0 && r->cur < r->n_paths) {
            if (r->kind == KIND_JSONL)
                rc = next_jsonl(r, text, len, err);
            else if (r->kind == KIND_TXT)
                rc = next_txt(r, text, len, err);
            else
                rc = next_parquet(r, text, len, err);
        }
        if (rc < 0) return -1;
        if (rc == 1) {
            r->st.docs++;
            return 1;
        }
        rc = open_next_file(r, err);
        if (rc <= 0) return rc;
    }
}

const char *docreader_where(DocReader *r) {
    if (r->cur < 0 || r->cur >= r->n_paths) return "(no document)";
    if (r->kind == KIND_PARQUET)
        snprintf(r->where, sizeof r->where, "%s: row %lld", r->paths[r->cur], (long long)r->line);
    else
        snprintf(r->where, sizeof r->where, "%s:%lld", r->paths[r->cur], (long long)r->line);
    return r->where;
}

void docreader_stats(const DocReader *r, DocReaderStats *out) {
    *out = r->st;
    out->bytes_read = r->bytes_done + (r->src_open ? r->src.bytes_read : 0) +
                      (r->pq ? parquet_bytes_read(r->pq) : 0);
    if (r->cur >= r->n_paths) out->files_done = r->n_paths;
}
