// util.c - file, path, time and UTF-8 helpers.
#include "core/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

char *read_file(const char *path, size_t *n, KdaError *err) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        kda_fail(err, "%s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, len = 0;
    char *buf = kda_malloc(cap);
    for (;;) {
        if (len + 1 >= cap) buf = kda_realloc(buf, cap *= 2);
        size_t got = fread(buf + len, 1, cap - len - 1, f);
        len += got;
        if (got == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        kda_fail(err, "%s: read error", path);
        return NULL;
    }
    buf[len] = 0;
    if (n) *n = len;
    return buf;
}

int fsync_dir_of(const char *path) {
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == dir)
        dir[1] = 0;
    else if (slash)
        *slash = 0;
    else
        snprintf(dir, sizeof dir, ".");
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

FILE *open_atomic(const char *path, char *tmp_path, KdaError *err) {
    snprintf(tmp_path, PATH_MAX, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp_path, "wb");
    if (!f) kda_fail(err, "%s: cannot create: %s", tmp_path, strerror(errno));
    return f;
}

int commit_atomic(FILE *f, const char *tmp_path, const char *path, KdaError *err) {
    int bad = fflush(f) != 0 || ferror(f) || fsync(fileno(f)) != 0;
    int saved = errno;
    if (fclose(f) != 0 && !bad) bad = 1, saved = errno;
    if (bad) {
        unlink(tmp_path);
        return kda_fail(err, "%s: write failed: %s", path, strerror(saved));
    }
    if (rename(tmp_path, path) != 0) {
        saved = errno;
        unlink(tmp_path);
        return kda_fail(err, "%s: rename failed: %s", path, strerror(saved));
    }
    fsync_dir_of(path);
    return 0;
}

void abort_atomic(FILE *f, const char *tmp_path) {
    if (f) fclose(f);
    unlink(tmp_path);
}

int write_file_atomic(const char *path, const void *data, size_t n, KdaError *err) {
    char tmp[PATH_MAX];
    FILE *f = open_atomic(path, tmp, err);
    if (!f) return -1;
    if (n && fwrite(data, 1, n, f) != n) {
        int saved = errno;
        abort_atomic(f, tmp);
        return kda_fail(err, "%s: write failed: %s", path, strerror(saved));
    }
    return commit_atomic(f, tmp, path, err);
}

int mkdir_p(const char *path, KdaError *err) {
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return kda_fail(err, "%s: path too long", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return kda_fail(err, "%s: cannot create directory: %s", buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
        return kda_fail(err, "%s: cannot create directory: %s", buf, strerror(errno));
    if (!path_is_dir(buf)) return kda_fail(err, "%s: exists and is not a directory", buf);
    return 0;
}

int path_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

void rmdir_flat(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char p[PATH_MAX];
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
                unlink(path_join(p, sizeof p, dir, e->d_name));
        closedir(d);
    }
    rmdir(dir);
}

int dir_count_entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

int rename_exchange(const char *a, const char *b) {
    return renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE);
}

int path_is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

char *path_join(char *out, size_t cap, const char *dir, const char *name) {
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/')
        n--;
    snprintf(out, cap, "%.*s/%s", (int)n, dir, name);
    return out;
}

double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

size_t utf8_valid_prefix(const unsigned char *s, size_t n) {
    if (n == 0) return 0;
    unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t len;
    uint32_t cp, min;
    if ((c & 0xE0) == 0xC0)
        len = 2, cp = c & 0x1F, min = 0x80;
    else if ((c & 0xF0) == 0xE0)
        len = 3, cp = c & 0x0F, min = 0x800;
    else if ((c & 0xF8) == 0xF0)
        len = 4, cp = c & 0x07, min = 0x10000;
    else
        return 0;
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}

// Length of the longest prefix of s[0..n) that could start a valid sequence (>= 1), and
// whether it is complete. Second-byte ranges per the Unicode well-formed table (Table 3-7).
static size_t utf8_maximal_subpart(const unsigned char *s, size_t n, int *complete) {
    unsigned c = s[0];
    size_t need;
    unsigned lo = 0x80, hi = 0xBF;
    *complete = 0;
    if (c >= 0xC2 && c <= 0xDF)
        need = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else
        return 1;
    size_t k = 1;
    if (k < n && s[k] >= lo && s[k] <= hi)
        k++;
    else
        return k;
    while (k < need && k < n && (s[k] & 0xC0) == 0x80)
        k++;
    *complete = k == need;
    return k;
}

size_t utf8_lossy(const unsigned char *s, size_t n, unsigned char *out) {
    size_t i = 0, o = 0;
    while (i < n) {
        if (s[i] < 0x80) {
            out[o++] = s[i++];
            continue;
        }
        int complete;
        size_t k = utf8_maximal_subpart(s + i, n - i, &complete);
        if (complete)
            memcpy(out + o, s + i, k), o += k;
        else
            out[o++] = 0xEF, out[o++] = 0xBF, out[o++] = 0xBD; // U+FFFD
        i += k;
    }
    return o;
}

size_t utf8_decode(const unsigned char *s, uint32_t *cp) {
    unsigned c = s[0];
    if (c < 0x80) return *cp = c, 1;
    if ((c & 0xE0) == 0xC0) return *cp = ((c & 0x1Fu) << 6) | (s[1] & 0x3Fu), 2;
    if ((c & 0xF0) == 0xE0)
        return *cp = ((c & 0x0Fu) << 12) | ((s[1] & 0x3Fu) << 6) | (s[2] & 0x3Fu), 3;
    *cp = ((c & 0x07u) << 18) | ((s[1] & 0x3Fu) << 12) | ((s[2] & 0x3Fu) << 6) | (s[3] & 0x3Fu);
    return 4;
}

size_t utf8_next_lenient(const char *s, size_t n, size_t i, uint32_t *cp) {
    size_t k = utf8_valid_prefix((const unsigned char *)s + i, n - i > 4 ? 4 : n - i);
    if (!k) return *cp = (unsigned char)s[i], 1; // not valid UTF-8: one byte, never a space
    return utf8_decode((const unsigned char *)s + i, cp);
}

int py_isspace(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

size_t utf8_encode(uint32_t cp, unsigned char *o) {
    if (cp < 0x80) return o[0] = (unsigned char)cp, 1;
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

float f16_to_f32(uint16_t h) {
    int sign = h >> 15, exp = (h >> 10) & 0x1F, man = h & 0x3FF;
    float v;
    if (exp == 0)
        v = ldexpf((float)man, -24);
    else if (exp == 31)
        v = man ? NAN : INFINITY;
    else
        v = ldexpf((float)(man | 0x400), exp - 25);
    return sign ? -v : v;
}

uint16_t f32_to_f16(float f) {
    union {
        float f;
        uint32_t u;
    } v = {.f = f};
    uint32_t sign = (v.u >> 16) & 0x8000u, a = v.u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); // overflow -> inf (RNE boundary)
    if (a < 0x38800000u) {                                   // subnormal or zero in half
        float x = fabsf(f) * 16777216.0f;                    // 2^24: units of the half ulp
        return (uint16_t)(sign | (uint32_t)lrintf(x));
    }
    uint32_t r = a - 0x38000000u; // rebias exponent 127 -> 15
    r += 0xfffu + ((r >> 13) & 1u);
    return (uint16_t)(sign | (r >> 13));
}

const char *str_shown(const char *s, size_t n, size_t max, char *buf, size_t cap) {
    size_t o = 0, i = 0;
    for (; i < n && i < max && o + 8 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n')
            o += (size_t)snprintf(buf + o, cap - o, "\\n");
        else if (c == '\t')
            o += (size_t)snprintf(buf + o, cap - o, "\\t");
        else if (c < 0x20 || c == 0x7f)
            o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
        else
            buf[o++] = (char)c;
    }
    buf[o] = 0;
    if (i < n && o + 4 <= cap) memcpy(buf + o, "...", 4);
    return buf;
}

int str_edit_distance(const char *a, const char *b) {
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la > 63) la = 63;
    if (lb > 63) lb = 63;
    int row[64];
    for (int j = 0; j <= lb; j++)
        row[j] = j;
    for (int i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = i;
        for (int j = 1; j <= lb; j++) {
            char x = a[i - 1] == '-' ? '_' : a[i - 1], y = b[j - 1] == '-' ? '_' : b[j - 1];
            int best = diag + (x != y);
            if (row[j] + 1 < best) best = row[j] + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            diag = row[j];
            row[j] = best;
        }
    }
    return row[lb];
}

const char *str_closest(const char *s, const char *const *names, int n) {
    int best = -1, best_d = 1 << 30, len = (int)strlen(s);
    for (int i = 0; i < n; i++) {
        int d = str_edit_distance(s, names[i]);
        if (d < best_d) best_d = d, best = i;
    }
    return best >= 0 && best_d <= (len < 6 ? 2 : len / 3) ? names[best] : NULL;
}
