// indexed.c - Megatron indexed dataset reader (mmap + full validation) and builder.
#include "data/indexed.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/util.h" // defines: open_atomic, commit_atomic, abort_atomic

// ---- dtypes -----------------------------------------------------------------------------------

int indexed_itemsize(int dtype) {
    switch (dtype) {
    case IDX_DTYPE_UINT8:
    case IDX_DTYPE_INT8:
        return 1;
    case IDX_DTYPE_INT16:
    case IDX_DTYPE_UINT16:
        return 2;
    case IDX_DTYPE_INT32:
    case IDX_DTYPE_FLOAT32:
        return 4;
    case IDX_DTYPE_INT64:
    case IDX_DTYPE_FLOAT64:
        return 8;
    default:
        return 0;
    }
}

const char *indexed_dtype_name(int dtype) {
    static const char *names[] = {"unknown", "uint8",   "int8",    "int16", "int32",
                                  "int64",   "float64", "float32", "uint16"};
    return dtype >= 1 && dtype <= 8 ? names[dtype] : names[0];
}

int indexed_dtype_for_vocab(int64_t vocab_size) {
    return vocab_size < 65500 ? IDX_DTYPE_UINT16 : IDX_DTYPE_INT32;
}

static uint64_t load_u64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

// ---- index parsing ----------------------------------------------------------------------------

int32_t indexed_index_length(const IndexedIndex *idx, int64_t seq) {
    int32_t v;
    memcpy(&v, idx->base + IDX_HEADER_SIZE + 4 * (size_t)seq, 4);
    return v;
}

int64_t indexed_index_pointer(const IndexedIndex *idx, int64_t seq) {
    int64_t v;
    memcpy(&v, idx->base + IDX_HEADER_SIZE + 4 * (size_t)idx->n_seq + 8 * (size_t)seq, 8);
    return v;
}

int64_t indexed_index_doc_entry(const IndexedIndex *idx, int64_t i) {
    int64_t v;
    memcpy(&v, idx->base + IDX_HEADER_SIZE + 12 * (size_t)idx->n_seq + 8 * (size_t)i, 8);
    return v;
}

void indexed_index_doc_range(const IndexedIndex *idx, int64_t doc, int64_t *first, int64_t *end) {
    if (idx->doc_base == 0) {
        *first = indexed_index_doc_entry(idx, doc);
        *end = indexed_index_doc_entry(idx, doc + 1);
    } else {
        *first = doc == 0 ? 0 : indexed_index_doc_entry(idx, doc - 1);
        *end = indexed_index_doc_entry(idx, doc);
    }
}

#define FAIL(...) (memset(idx, 0, sizeof *idx), fail_named(err, name, __VA_ARGS__))

static int fail_named(KdaError *err, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail_named(KdaError *err, const char *name, const char *fmt, ...) {
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return name ? kda_fail(err, "%s: %s", name, msg) : kda_fail(err, "%s", msg);
}

int indexed_index_parse(IndexedIndex *idx, const void *buf, size_t n, const char *name,
                        KdaError *err) {
    const unsigned char *p = buf;
    memset(idx, 0, sizeof *idx);
    if (n < IDX_HEADER_SIZE)
        return FAIL("index is %zu bytes, shorter than the %d-byte header", n, IDX_HEADER_SIZE);
    if (memcmp(p, IDX_MAGIC, 9) != 0)
        return FAIL("bad magic (expected MMIDIDX\\0\\0): not a Megatron .idx");
    uint64_t version = load_u64(p + 9);
    if (version != 1) return FAIL("version %llu, expected 1", (unsigned long long)version);
    int dtype = p[17];
    if (indexed_itemsize(dtype) == 0) return FAIL("unknown dtype code %d (expected 1..8)", dtype);
    if (dtype == IDX_DTYPE_FLOAT32 || dtype == IDX_DTYPE_FLOAT64)
        return FAIL("dtype %s is not a token dtype", indexed_dtype_name(dtype));
    uint64_t ns = load_u64(p + 18), nd = load_u64(p + 26);
    // Bound both counts by the file size before any multiplication can overflow.
    if (ns > n / 12 || nd > n / 8)
        return FAIL("sequence count %llu / document count %llu do not fit a %zu-byte index",
                    (unsigned long long)ns, (unsigned long long)nd, n);
    size_t want = IDX_HEADER_SIZE + 12 * (size_t)ns + 8 * (size_t)nd;
    int has_modes = 0;
    if (n == want + ns && ns > 0)
        has_modes = 1;
    else if (n != want)
        return FAIL("index is %zu bytes, expected %zu for %llu sequences and %llu document "
                    "entries",
                    n, want, (unsigned long long)ns, (unsigned long long)nd);
    if (nd == 0) return FAIL("document index is empty (needs at least the final entry N)");
    idx->base = p;
    idx->size = n;
    idx->dtype = dtype;
    idx->itemsize = indexed_itemsize(dtype);
    idx->n_seq = (int64_t)ns;
    idx->n_doc_idx = (int64_t)nd;
    idx->has_modes = has_modes;
    // Lengths and pointers: pointer[i] must be the running byte offset.
    int64_t off = 0, tokens = 0;
    for (int64_t i = 0; i < idx->n_seq; i++) {
        int32_t len = indexed_index_length(idx, i);
        int64_t ptr = indexed_index_pointer(idx, i);
        if (len < 0) return FAIL("sequence %lld has negative length %d", (long long)i, len);
        if (ptr != off)
            return FAIL("pointer of sequence %lld is %lld, expected %lld (prefix sum of "
                        "length*itemsize)",
                        (long long)i, (long long)ptr, (long long)off);
        off += (int64_t)len * idx->itemsize; // < 2^31 * 8 * 2^61/12: cannot overflow int64
        tokens += len;
    }
    idx->n_tokens = tokens;
    idx->bin_size = off;
    // Document index: non-decreasing, within [0, N], last entry == N.
    int64_t first = indexed_index_doc_entry(idx, 0), prev = 0;
    idx->doc_base = first == 0 ? 0 : 1;
    for (int64_t i = 0; i < idx->n_doc_idx; i++) {
        int64_t v = indexed_index_doc_entry(idx, i);
        if (v < prev || v > idx->n_seq)
            return FAIL("document index entry %lld is %lld, expected a value in [%lld, %lld]",
                        (long long)i, (long long)v, (long long)prev, (long long)idx->n_seq);
        prev = v;
    }
    if (prev != idx->n_seq)
        return FAIL("last document index entry is %lld, expected the sequence count %lld",
                    (long long)prev, (long long)idx->n_seq);
    idx->n_docs = idx->doc_base == 0 ? idx->n_doc_idx - 1 : idx->n_doc_idx;
    return 0;
}
#undef FAIL

// ---- dataset (mapped files) -------------------------------------------------------------------

static int map_file(const char *path, void **map, size_t *size, KdaError *err) {
    *map = NULL;
    *size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return kda_fail(err, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return kda_fail(err, "%s: cannot stat: %s", path, strerror(e));
    }
    *size = (size_t)st.st_size;
    if (*size > 0) {
        void *m = mmap(NULL, *size, PROT_READ, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            close(fd);
            return kda_fail(err, "%s: cannot mmap: %s", path, strerror(e));
        }
        *map = m;
    }
    close(fd);
    return 0;
}

int indexed_open(IndexedDataset *ds, const char *prefix, KdaError *err) {
    memset(ds, 0, sizeof *ds);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s.idx", prefix);
    if (map_file(path, &ds->idx_map, &ds->idx_map_size, err) != 0) return -1;
    if (indexed_index_parse(&ds->idx, ds->idx_map, ds->idx_map_size, path, err) != 0) {
        indexed_close(ds);
        return -1;
    }
    snprintf(path, sizeof path, "%s.bin", prefix);
    if (map_file(path, &ds->bin_map, &ds->bin_map_size, err) != 0) {
        indexed_close(ds);
        return -1;
    }
    if ((int64_t)ds->bin_map_size != ds->idx.bin_size) {
        kda_fail(err, "%s: %zu bytes, but the index describes %lld bytes (%lld tokens of %s)", path,
                 ds->bin_map_size, (long long)ds->idx.bin_size, (long long)ds->idx.n_tokens,
                 indexed_dtype_name(ds->idx.dtype));
        indexed_close(ds);
        return -1;
    }
    return 0;
}

void indexed_close(IndexedDataset *ds) {
    if (ds->idx_map) munmap(ds->idx_map, ds->idx_map_size);
    if (ds->bin_map) munmap(ds->bin_map, ds->bin_map_size);
    memset(ds, 0, sizeof *ds);
}

const void *indexed_seq_data(const IndexedDataset *ds, int64_t seq) {
    return (const unsigned char *)ds->bin_map + indexed_index_pointer(&ds->idx, seq);
}

static int64_t load_token(const unsigned char *p, int dtype) {
    switch (dtype) {
    case IDX_DTYPE_UINT8:
        return p[0];
    case IDX_DTYPE_INT8:
        return (int8_t)p[0];
    case IDX_DTYPE_INT16: {
        int16_t v;
        memcpy(&v, p, 2);
        return v;
    }
    case IDX_DTYPE_UINT16: {
        uint16_t v;
        memcpy(&v, p, 2);
        return v;
    }
    case IDX_DTYPE_INT32: {
        int32_t v;
        memcpy(&v, p, 4);
        return v;
    }
    default: {
        int64_t v;
        memcpy(&v, p, 8);
        return v;
    }
    }
}

int64_t indexed_read_tokens(const IndexedDataset *ds, int64_t seq, int64_t start, int64_t *out,
                            int64_t n) {
    int64_t len = indexed_index_length(&ds->idx, seq);
    if (start >= len || n <= 0) return 0;
    if (n > len - start) n = len - start;
    const unsigned char *p =
        (const unsigned char *)indexed_seq_data(ds, seq) + (size_t)start * (size_t)ds->idx.itemsize;
    for (int64_t i = 0; i < n; i++)
        out[i] = load_token(p + (size_t)i * ds->idx.itemsize, ds->idx.dtype);
    return n;
}

// ---- builder ----------------------------------------------------------------------------------

// Removes PATH.tmp.PID files (open_atomic's temporaries) whose writer process is gone (kill(pid,
// 0) says ESRCH): a killed tokenize left them. Live writers' files are kept. The pid test is
// local: a writer on another host sharing the directory is not seen (docs/reliability.md).
static void remove_dead_temps(const char *path) {
    char dir[PATH_MAX], pre[PATH_MAX], p[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    const char *base = slash ? slash + 1 : path;
    snprintf(pre, sizeof pre, "%s.tmp.", base);
    if (slash == dir)
        dir[1] = 0;
    else if (slash)
        *slash = 0;
    else
        snprintf(dir, sizeof dir, ".");
    DIR *d = opendir(dir);
    struct dirent *e;
    size_t np = strlen(pre);
    while (d && (e = readdir(d))) {
        if (strncmp(e->d_name, pre, np)) continue;
        char *end;
        long pid = strtol(e->d_name + np, &end, 10);
        if (*end || end == e->d_name + np || pid <= 0 || pid == (long)getpid()) continue;
        if (kill((pid_t)pid, 0) != 0 && errno == ESRCH)
            unlink(path_join(p, sizeof p, dir, e->d_name));
    }
    if (d) closedir(d);
}

int indexed_builder_open(IndexedBuilder *b, const char *prefix, int dtype, KdaError *err) {
    memset(b, 0, sizeof *b);
    if (indexed_itemsize(dtype) == 0 || dtype == IDX_DTYPE_FLOAT32 || dtype == IDX_DTYPE_FLOAT64)
        return kda_fail(err, "indexed builder: dtype %d is not an integer token dtype", dtype);
    if (snprintf(b->bin_path, PATH_MAX, "%s.bin", prefix) >= PATH_MAX - 32 ||
        snprintf(b->idx_path, PATH_MAX, "%s.idx", prefix) >= PATH_MAX - 32)
        return kda_fail(err, "%s: output prefix too long", prefix);
    if (path_is_dir(b->bin_path) || path_is_dir(b->idx_path))
        return kda_fail(err, "%s: is a directory (the output prefix must name files)",
                        path_is_dir(b->bin_path) ? b->bin_path : b->idx_path);
    remove_dead_temps(b->bin_path);
    remove_dead_temps(b->idx_path);
    b->dtype = dtype;
    b->itemsize = indexed_itemsize(dtype);
    b->bin = open_atomic(b->bin_path, b->bin_tmp, err);
    if (!b->bin) return -1;
    b->cap_doc = 16;
    b->doc_idx = kda_malloc(sizeof(int64_t) * (size_t)b->cap_doc);
    b->doc_idx[b->n_doc_idx++] = 0;
    return 0;
}

static int token_fits(int dtype, int32_t t) {
    switch (dtype) {
    case IDX_DTYPE_UINT8:
        return t >= 0 && t <= 255;
    case IDX_DTYPE_INT8:
        return t >= -128 && t <= 127;
    case IDX_DTYPE_INT16:
        return t >= -32768 && t <= 32767;
    case IDX_DTYPE_UINT16:
        return t >= 0 && t <= 65535;
    default:
        return 1;
    }
}

int indexed_builder_add(IndexedBuilder *b, const int32_t *tokens, int64_t n, KdaError *err) {
    if (n < 0 || n > INT32_MAX)
        return kda_fail(err, "indexed builder: sequence of %lld tokens (max %d)", (long long)n,
                        INT32_MAX);
    size_t bytes = (size_t)n * (size_t)b->itemsize;
    if (bytes > b->scratch_cap) {
        b->scratch_cap = bytes + bytes / 2 + 64;
        b->scratch = kda_realloc(b->scratch, b->scratch_cap);
    }
    for (int64_t i = 0; i < n; i++) {
        int32_t t = tokens[i];
        if (!token_fits(b->dtype, t))
            return kda_fail(err, "indexed builder: token id %d does not fit dtype %s", t,
                            indexed_dtype_name(b->dtype));
        unsigned char *d = b->scratch + (size_t)i * (size_t)b->itemsize;
        if (b->itemsize == 1)
            d[0] = (unsigned char)t;
        else if (b->itemsize == 2) {
            uint16_t v = (uint16_t)t;
            memcpy(d, &v, 2);
        } else if (b->itemsize == 4)
            memcpy(d, &t, 4);
        else {
            int64_t v = t;
            memcpy(d, &v, 8);
        }
    }
    if (bytes && fwrite(b->scratch, 1, bytes, b->bin) != bytes)
        return kda_fail(err, "%s: write failed: %s", b->bin_tmp, strerror(errno));
    if (b->n_seq == b->cap_seq) {
        b->cap_seq = b->cap_seq ? 2 * b->cap_seq : 1024;
        b->lengths = kda_realloc(b->lengths, sizeof(int32_t) * (size_t)b->cap_seq);
    }
    b->lengths[b->n_seq++] = (int32_t)n;
    b->n_tokens += n;
    return 0;
}

void indexed_builder_end_document(IndexedBuilder *b) {
    if (b->n_doc_idx == b->cap_doc) {
        b->cap_doc *= 2;
        b->doc_idx = kda_realloc(b->doc_idx, sizeof(int64_t) * (size_t)b->cap_doc);
    }
    b->doc_idx[b->n_doc_idx++] = b->n_seq;
}

unsigned char *indexed_index_serialize(int dtype, const int32_t *lengths, int64_t n_seq,
                                       const int64_t *doc_idx, int64_t n_doc_idx, size_t *n) {
    int itemsize = indexed_itemsize(dtype);
    KDA_ASSERT(itemsize > 0 && n_seq >= 0 && n_doc_idx >= 0);
    *n = IDX_HEADER_SIZE + 12 * (size_t)n_seq + 8 * (size_t)n_doc_idx;
    unsigned char *buf = kda_malloc(*n), *p = buf;
    uint64_t version = 1, ns = (uint64_t)n_seq, nd = (uint64_t)n_doc_idx;
    memcpy(p, IDX_MAGIC, 9), p += 9;
    memcpy(p, &version, 8), p += 8;
    *p++ = (unsigned char)dtype;
    memcpy(p, &ns, 8), p += 8;
    memcpy(p, &nd, 8), p += 8;
    if (n_seq) memcpy(p, lengths, 4 * (size_t)n_seq), p += 4 * (size_t)n_seq;
    int64_t off = 0;
    for (int64_t i = 0; i < n_seq; i++) {
        memcpy(p, &off, 8), p += 8;
        off += (int64_t)lengths[i] * itemsize;
    }
    if (n_doc_idx) memcpy(p, doc_idx, 8 * (size_t)n_doc_idx), p += 8 * (size_t)n_doc_idx;
    KDA_ASSERT((size_t)(p - buf) == *n);
    return buf;
}

static void builder_free(IndexedBuilder *b) {
    free(b->lengths);
    free(b->doc_idx);
    free(b->scratch);
    b->lengths = NULL, b->doc_idx = NULL, b->scratch = NULL;
    b->bin = NULL;
}

int indexed_builder_finish(IndexedBuilder *b, KdaError *err) {
    KDA_ASSERT(b->bin);
    // A document left open (sequences after the last end_document) is closed here.
    if (b->doc_idx[b->n_doc_idx - 1] != b->n_seq) indexed_builder_end_document(b);
    size_t n;
    unsigned char *buf =
        indexed_index_serialize(b->dtype, b->lengths, b->n_seq, b->doc_idx, b->n_doc_idx, &n);
    FILE *fi = open_atomic(b->idx_path, b->idx_tmp, err);
    int rc = fi ? 0 : -1;
    if (rc == 0 && fwrite(buf, 1, n, fi) != n) {
        rc = kda_fail(err, "%s: write failed: %s", b->idx_tmp, strerror(errno));
        abort_atomic(fi, b->idx_tmp);
        fi = NULL;
    }
    free(buf);
    if (rc == 0 && fflush(fi) != 0) {
        rc = kda_fail(err, "%s: write failed: %s", b->idx_tmp, strerror(errno));
        abort_atomic(fi, b->idx_tmp);
        fi = NULL;
    }
    // The old index is moved aside (not unlinked) first, so that no crash point leaves an old
    // .idx next to a new .bin, and a failure before the new .bin is in place puts it back.
    char old[PATH_MAX + 8];
    snprintf(old, sizeof old, "%s.old", b->idx_path);
    int moved = 0;
    if (rc == 0) {
        moved = rename(b->idx_path, old) == 0;
        if (!moved && errno != ENOENT) {
            rc = kda_fail(err, "%s: cannot move the old index aside: %s", b->idx_path,
                          strerror(errno));
            abort_atomic(fi, b->idx_tmp);
            fi = NULL;
        }
    }
    if (rc == 0) {
        rc = commit_atomic(b->bin, b->bin_tmp, b->bin_path, err);
        b->bin = NULL;
        if (rc != 0) {
            abort_atomic(fi, b->idx_tmp);
            if (moved) rename(old, b->idx_path); // the old .bin is still in place
        } else {
            rc = commit_atomic(fi, b->idx_tmp, b->idx_path, err);
            if (rc == 0 && moved) unlink(old);
        }
    } else {
        abort_atomic(b->bin, b->bin_tmp);
        b->bin = NULL;
    }
    builder_free(b);
    return rc;
}

void indexed_builder_abort(IndexedBuilder *b) {
    if (b->bin) abort_atomic(b->bin, b->bin_tmp);
    builder_free(b);
}
