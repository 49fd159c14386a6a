// tfevents.c - TensorBoard event files: TFRecord framing, masked CRC-32C, the Event/Summary
// protobuf encoding of scalars (tfevents.h), and a strict reader for tests and tools.
#include "train/tfevents.h" // defines: KdaTfEvents, kda_tfevents_*

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/util.h" // defines: mkdir_p, path_join, read_file

struct KdaTfEvents {
    FILE *f;
    char path[PATH_MAX];
    int failed;
};

// ---------------------------------------------------------------------------------------------
// CRC-32C and the TFRecord frame

uint32_t kda_crc32c(const void *data, size_t n) {
    static uint32_t table[256];
    static int ready; // benign race: every thread computes the same table
    if (!ready) {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++)
                c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
            table[i] = c;
        }
        ready = 1;
    }
    const unsigned char *p = data;
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++)
        c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
    return c ^ 0xffffffffu;
}

static uint32_t masked_crc_(const void *data, size_t n) {
    uint32_t c = kda_crc32c(data, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static void put_le_(unsigned char *p, uint64_t x, int bytes) {
    for (int i = 0; i < bytes; i++)
        p[i] = (unsigned char)(x >> (8 * i));
}

static uint64_t get_le_(const unsigned char *p, int bytes) {
    uint64_t x = 0;
    for (int i = 0; i < bytes; i++)
        x |= (uint64_t)p[i] << (8 * i);
    return x;
}

static int write_record_(KdaTfEvents *w, const unsigned char *data, size_t n, KdaError *err) {
    if (w->failed) return kda_fail(err, "%s: an earlier write failed", w->path);
    unsigned char head[12], tail[4];
    put_le_(head, n, 8);
    put_le_(head + 8, masked_crc_(head, 8), 4);
    put_le_(tail, masked_crc_(data, n), 4);
    if (fwrite(head, 1, 12, w->f) != 12 || fwrite(data, 1, n, w->f) != n ||
        fwrite(tail, 1, 4, w->f) != 4) {
        w->failed = 1;
        return kda_fail(err, "%s: write failed", w->path);
    }
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Protobuf encoding (the few wire types an Event needs)

typedef struct {
    unsigned char b[512];
    size_t n;
} Buf;

static void varint_(Buf *o, uint64_t x) {
    do {
        o->b[o->n++] = (unsigned char)((x & 0x7f) | (x > 0x7f ? 0x80 : 0));
        x >>= 7;
    } while (x);
}

static void bytes_field_(Buf *o, int field, const void *p, size_t n) {
    varint_(o, (uint64_t)field << 3 | 2);
    varint_(o, n);
    memcpy(o->b + o->n, p, n);
    o->n += n;
}

static void event_head_(Buf *o, double wall_time, int64_t step) {
    uint64_t bits;
    memcpy(&bits, &wall_time, 8);
    o->b[o->n++] = 1 << 3 | 1; // wall_time: field 1, 64-bit
    put_le_(o->b + o->n, bits, 8);
    o->n += 8;
    if (step) {
        o->b[o->n++] = 2 << 3 | 0; // step: field 2, varint
        varint_(o, (uint64_t)step);
    }
}

int kda_tfevents_open(KdaTfEvents **out, const char *dir, char *path, size_t cap, KdaError *err) {
    *out = NULL;
    if (mkdir_p(dir, err)) return -1;
    char host[64] = "localhost", name[256];
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = 0;
    snprintf(name, sizeof name, "events.out.tfevents.%lld.%s.%d", (long long)time(NULL), host,
             (int)getpid());
    KdaTfEvents *w = kda_calloc(1, sizeof *w);
    path_join(w->path, sizeof w->path, dir, name);
    w->f = fopen(w->path, "wb");
    if (!w->f) {
        kda_fail(err, "%s: cannot create the TensorBoard event file", w->path);
        free(w);
        return -1;
    }
    Buf o = {.n = 0};
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    event_head_(&o, (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec, 0);
    bytes_field_(&o, 3, "brain.Event:2", 13);
    if (write_record_(w, o.b, o.n, err) || kda_tfevents_flush(w, err)) {
        kda_tfevents_close(w);
        return -1;
    }
    if (path) snprintf(path, cap, "%s", w->path);
    *out = w;
    return 0;
}

int kda_tfevents_scalar(KdaTfEvents *w, const char *tag, int64_t step, double wall_time,
                        float value, KdaError *err) {
    size_t tl = strlen(tag);
    if (tl > 200) return kda_fail(err, "TensorBoard tag too long (%zu bytes)", tl);
    Buf v = {.n = 0}, s = {.n = 0}, e = {.n = 0};
    bytes_field_(&v, 1, tag, tl);
    v.b[v.n++] = 2 << 3 | 5; // simple_value: field 2, 32-bit
    uint32_t bits;
    memcpy(&bits, &value, 4);
    put_le_(v.b + v.n, bits, 4);
    v.n += 4;
    bytes_field_(&s, 1, v.b, v.n); // Summary.value
    event_head_(&e, wall_time, step);
    bytes_field_(&e, 5, s.b, s.n); // Event.summary
    return write_record_(w, e.b, e.n, err);
}

int kda_tfevents_flush(KdaTfEvents *w, KdaError *err) {
    if (w->failed || fflush(w->f) || ferror(w->f)) {
        w->failed = 1;
        return kda_fail(err, "%s: write failed", w->path);
    }
    return 0;
}

void kda_tfevents_close(KdaTfEvents *w) {
    if (!w) return;
    if (w->f) fclose(w->f);
    free(w);
}

// ---------------------------------------------------------------------------------------------
// Reading (strict)

typedef struct {
    const unsigned char *p, *end;
} Cur;

static int rd_varint_(Cur *c, uint64_t *x) {
    *x = 0;
    for (int s = 0; s < 64 && c->p < c->end; s += 7) {
        unsigned char b = *c->p++;
        *x |= (uint64_t)(b & 0x7f) << s;
        if (!(b & 0x80)) return 0;
    }
    return -1;
}

// Skips or reads one field; sets *sub to a length-delimited payload.
static int rd_field_(Cur *c, int *field, int *wt, uint64_t *num, Cur *sub) {
    uint64_t key;
    if (rd_varint_(c, &key)) return -1;
    *field = (int)(key >> 3), *wt = (int)(key & 7);
    switch (*wt) {
    case 0:
        return rd_varint_(c, num);
    case 1:
    case 5: {
        int n = *wt == 1 ? 8 : 4;
        if (c->end - c->p < n) return -1;
        *num = get_le_(c->p, n);
        c->p += n;
        return 0;
    }
    case 2: {
        uint64_t n;
        if (rd_varint_(c, &n) || (uint64_t)(c->end - c->p) < n) return -1;
        sub->p = c->p, sub->end = c->p + n;
        c->p += n;
        return 0;
    }
    }
    return -1;
}

// Event -> at most one scalar (the first Summary.Value with a simple_value).
static int parse_event_(Cur c, KdaTfScalar *s, int *has) {
    *has = 0;
    memset(s, 0, sizeof *s);
    while (c.p < c.end) {
        int f, wt;
        uint64_t num = 0;
        Cur sub = {0};
        if (rd_field_(&c, &f, &wt, &num, &sub)) return -1;
        if (f == 1 && wt == 1) memcpy(&s->wall_time, &num, 8);
        if (f == 2 && wt == 0) s->step = (int64_t)num;
        if (f != 5 || wt != 2) continue;
        while (sub.p < sub.end) { // Summary
            int vf, vwt;
            uint64_t vn = 0;
            Cur val = {0};
            if (rd_field_(&sub, &vf, &vwt, &vn, &val)) return -1;
            if (vf != 1 || vwt != 2) continue;
            while (val.p < val.end) { // Value
                int xf, xwt;
                uint64_t xn = 0;
                Cur str = {0};
                if (rd_field_(&val, &xf, &xwt, &xn, &str)) return -1;
                if (xf == 1 && xwt == 2) {
                    size_t n = (size_t)(str.end - str.p);
                    if (n >= sizeof s->tag) n = sizeof s->tag - 1;
                    memcpy(s->tag, str.p, n), s->tag[n] = 0;
                } else if (xf == 2 && xwt == 5) {
                    uint32_t bits = (uint32_t)xn;
                    memcpy(&s->value, &bits, 4);
                    *has = 1;
                }
            }
        }
    }
    return 0;
}

static int read_events_(const char *path, KdaTfScalar **out, int64_t *n_out, KdaError *err);

int kda_tfevents_read(const char *path, KdaTfScalar **out, int64_t *n_out, KdaError *err) {
    *out = NULL, *n_out = 0;
    if (read_events_(path, out, n_out, err) == 0) return 0;
    free(*out); // an error leaves nothing for the caller to free
    *out = NULL, *n_out = 0;
    return -1;
}

static int read_events_(const char *path, KdaTfScalar **out, int64_t *n_out, KdaError *err) {
    size_t n;
    char *buf = read_file(path, &n, err);
    if (!buf) return -1;
    const unsigned char *p = (const unsigned char *)buf;
    int64_t cap = 0;
    for (size_t off = 0; off < n;) {
        if (n - off < 12)
            return free(buf), kda_fail(err, "%s: truncated record header at %zu", path, off);
        uint64_t len = get_le_(p + off, 8);
        if ((uint32_t)get_le_(p + off + 8, 4) != masked_crc_(p + off, 8))
            return free(buf), kda_fail(err, "%s: bad length CRC at %zu", path, off);
        if (len > n - off - 16)
            return free(buf), kda_fail(err, "%s: truncated record at %zu", path, off);
        const unsigned char *d = p + off + 12;
        if ((uint32_t)get_le_(d + len, 4) != masked_crc_(d, len))
            return free(buf), kda_fail(err, "%s: bad data CRC at %zu", path, off);
        KdaTfScalar s;
        int has;
        if (parse_event_((Cur){d, d + len}, &s, &has))
            return free(buf), kda_fail(err, "%s: bad Event protobuf at %zu", path, off);
        if (has) {
            if (*n_out == cap) {
                cap = cap ? 2 * cap : 64;
                *out = kda_realloc(*out, (size_t)cap * sizeof **out);
            }
            (*out)[(*n_out)++] = s;
        }
        off += 16 + len;
    }
    free(buf);
    return 0;
}
