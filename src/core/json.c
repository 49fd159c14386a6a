// json.c - strict recursive-descent JSON parser into an arena-backed DOM.
#include "core/json.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

// ---------------------------------------------------------------------------------------------
// Arena: bump allocation in large blocks, freed all at once.

struct JsonArenaBlock {
    JsonArenaBlock *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

static void *arena_alloc(JsonArenaBlock **head, size_t n) {
    n = (n + 15) & ~(size_t)15;
    JsonArenaBlock *b = *head;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > (1u << 20) ? n : (1u << 20);
        b = kda_malloc(sizeof *b + cap);
        b->used = 0;
        b->cap = cap;
        b->next = *head;
        *head = b;
    }
    void *p = b->data + b->used;
    b->used += n;
    return p;
}

// ---------------------------------------------------------------------------------------------
// Parser state. Children of arrays/objects under construction live on a shared growable
// stack; when a container closes, its children are copied into the arena.

typedef struct {
    const char *s, *end, *begin;
    JsonArenaBlock **arena;
    KdaError *err;
    JsonValue *stack;
    const char **kstack;
    size_t *klstack;
    size_t sp, cap;
    int depth;
} Parser;

static int perr(Parser *p, const char *what) {
    int line = 1, col = 1;
    for (const char *c = p->begin; c < p->s && c < p->end; c++) {
        if (*c == '\n')
            line++, col = 1;
        else
            col++;
    }
    return kda_fail(p->err, "line %d, column %d: %s", line, col, what);
}

static void skip_ws(Parser *p) {
    while (p->s < p->end && (*p->s == ' ' || *p->s == '\t' || *p->s == '\n' || *p->s == '\r'))
        p->s++;
}

static void push(Parser *p, const JsonValue *v, const char *key, size_t klen) {
    if (p->sp == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 256;
        p->stack = kda_realloc(p->stack, p->cap * sizeof *p->stack);
        p->kstack = kda_realloc(p->kstack, p->cap * sizeof *p->kstack);
        p->klstack = kda_realloc(p->klstack, p->cap * sizeof *p->klstack);
    }
    p->stack[p->sp] = *v;
    p->kstack[p->sp] = key;
    p->klstack[p->sp] = klen;
    p->sp++;
}

static int hex4(Parser *p, unsigned *out) {
    if (p->end - p->s < 4) return perr(p, "truncated \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p->s[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return perr(p, "bad hex digit in \\u escape");
    }
    p->s += 4;
    *out = v;
    return 0;
}

// Parses a string literal starting at the opening quote. Lone surrogates from \u escapes are
// encoded as WTF-8 (3 bytes); raw bytes that are not valid UTF-8 are kept as they are.
static int parse_string(Parser *p, const char **out, size_t *out_len) {
    p->s++; // opening quote
    const char *start = p->s;
    while (p->s < p->end && *p->s != '"') {
        unsigned char c = (unsigned char)*p->s;
        if (c < 0x20) return perr(p, "control character in string");
        p->s += c == '\\' ? 2 : 1;
    }
    if (p->s >= p->end) return perr(p, "unterminated string");
    size_t raw = (size_t)(p->s - start);
    p->s = start;
    char *buf = arena_alloc(p->arena, raw + 1);
    char *w = buf;
    while (*p->s != '"') {
        unsigned char c = (unsigned char)*p->s;
        if (c != '\\') {
            size_t k = utf8_valid_prefix((const unsigned char *)p->s, (size_t)(p->end - p->s));
            if (k == 0) k = 1; // invalid UTF-8 is kept byte for byte (byte-level BPE eats any)
            memcpy(w, p->s, k);
            w += k;
            p->s += k;
            continue;
        }
        p->s++;
        if (p->s >= p->end) return perr(p, "unterminated escape");
        char e = *p->s++;
        switch (e) {
        case '"':
            *w++ = '"';
            break;
        case '\\':
            *w++ = '\\';
            break;
        case '/':
            *w++ = '/';
            break;
        case 'b':
            *w++ = '\b';
            break;
        case 'f':
            *w++ = '\f';
            break;
        case 'n':
            *w++ = '\n';
            break;
        case 'r':
            *w++ = '\r';
            break;
        case 't':
            *w++ = '\t';
            break;
        case 'u': {
            unsigned cp;
            if (hex4(p, &cp)) return -1;
            if (cp >= 0xD800 && cp <= 0xDBFF && p->end - p->s >= 6 && p->s[0] == '\\' &&
                p->s[1] == 'u') {
                const char *save = p->s;
                unsigned lo;
                p->s += 2;
                if (hex4(p, &lo)) return -1;
                if (lo >= 0xDC00 && lo <= 0xDFFF)
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                else
                    p->s = save;
            }
            w += utf8_encode(cp, (unsigned char *)w);
            break;
        }
        default:
            p->s--;
            return perr(p, "bad escape in string");
        }
    }
    *w = 0;
    p->s++; // closing quote
    *out = buf;
    *out_len = (size_t)(w - buf);
    return 0;
}

static int parse_number(Parser *p, JsonValue *v) {
    const char *st = p->s;
    if (p->s < p->end && *p->s == '-') p->s++;
    if (p->s >= p->end) return perr(p, "truncated number");
    if (*p->s == '0')
        p->s++;
    else if (*p->s >= '1' && *p->s <= '9')
        while (p->s < p->end && *p->s >= '0' && *p->s <= '9')
            p->s++;
    else
        return perr(p, "bad number");
    int integral = 1;
    if (p->s < p->end && *p->s == '.') {
        integral = 0;
        p->s++;
        if (p->s >= p->end || *p->s < '0' || *p->s > '9') return perr(p, "bad fraction");
        while (p->s < p->end && *p->s >= '0' && *p->s <= '9')
            p->s++;
    }
    if (p->s < p->end && (*p->s == 'e' || *p->s == 'E')) {
        integral = 0;
        p->s++;
        if (p->s < p->end && (*p->s == '+' || *p->s == '-')) p->s++;
        if (p->s >= p->end || *p->s < '0' || *p->s > '9') return perr(p, "bad exponent");
        while (p->s < p->end && *p->s >= '0' && *p->s <= '9')
            p->s++;
    }
    char tmp[64];
    size_t n = (size_t)(p->s - st);
    char *big = n < sizeof tmp ? tmp : kda_malloc(n + 1);
    memcpy(big, st, n);
    big[n] = 0;
    v->type = JSON_NUMBER;
    v->num = strtod(big, NULL);
    v->is_int = 0;
    if (integral) {
        errno = 0;
        long long x = strtoll(big, NULL, 10);
        if (errno == 0) v->is_int = 1, v->i = x;
    }
    if (big != tmp) free(big);
    return 0;
}

static int match_lit(Parser *p, const char *lit) {
    size_t n = strlen(lit);
    if ((size_t)(p->end - p->s) < n || memcmp(p->s, lit, n) != 0)
        return perr(p, "unexpected token");
    p->s += n;
    return 0;
}

static int parse_value(Parser *p, JsonValue *v);

static void close_container(Parser *p, JsonValue *v, size_t base, int is_object) {
    size_t n = p->sp - base;
    v->len = n;
    v->items = arena_alloc(p->arena, (n ? n : 1) * sizeof *v->items);
    if (is_object) {
        v->keys = arena_alloc(p->arena, (n ? n : 1) * sizeof *v->keys);
        v->key_lens = arena_alloc(p->arena, (n ? n : 1) * sizeof *v->key_lens);
    }
    if (n == 0) return; // the child stack may not exist yet (memcpy from NULL is UB)
    memcpy(v->items, p->stack + base, n * sizeof *v->items);
    if (is_object) {
        memcpy(v->keys, p->kstack + base, n * sizeof *v->keys);
        memcpy(v->key_lens, p->klstack + base, n * sizeof *v->key_lens);
    }
    p->sp = base;
}

static int parse_array(Parser *p, JsonValue *v) {
    size_t base = p->sp;
    p->s++;
    v->type = JSON_ARRAY;
    skip_ws(p);
    if (p->s < p->end && *p->s == ']') {
        p->s++;
        close_container(p, v, base, 0);
        return 0;
    }
    for (;;) {
        JsonValue item = {0};
        if (parse_value(p, &item)) return -1;
        push(p, &item, NULL, 0);
        skip_ws(p);
        if (p->s >= p->end) return perr(p, "unterminated array");
        if (*p->s == ',') {
            p->s++;
            continue;
        }
        if (*p->s == ']') {
            p->s++;
            break;
        }
        return perr(p, "expected ',' or ']' in array");
    }
    close_container(p, v, base, 0);
    return 0;
}

// Duplicate keys are an error (docs/reliability.md): parsers disagree on which one wins (Python
// keeps the last), so a file with one could mean different things to kda and to FLA.
#define DUP_LINEAR_MAX 32 // up to this many members: compare each new key with the earlier ones

static int key_eq(const char *a, size_t na, const char *b, size_t nb) {
    return na == nb && !memcmp(a, b, na);
}

static int dup_error(Parser *p, const char *key, size_t klen) {
    char shown[96], what[160];
    str_shown(key, klen, 64, shown, sizeof shown);
    snprintf(what, sizeof what, "duplicate key \"%s\" in an object", shown);
    return perr(p, what);
}

// Is key a repeat of one of the members base.. already on the stack (small objects only)?
static int dup_linear(const Parser *p, size_t base, const char *key, size_t klen) {
    for (size_t i = base; i < p->sp; i++)
        if (key_eq(p->kstack[i], p->klstack[i], key, klen)) return 1;
    return 0;
}

typedef struct {
    const char *k;
    size_t n;
} KeyRef;

static int cmp_keyref(const void *x, const void *y) {
    const KeyRef *a = x, *b = y;
    if (a->n != b->n) return a->n < b->n ? -1 : 1;
    return memcmp(a->k, b->k, a->n);
}

// Large objects (a tokenizer vocabulary): sort the keys once, compare neighbours. O(n log n).
static int dup_sorted(Parser *p, size_t base) {
    size_t n = p->sp - base;
    KeyRef *r = kda_malloc(n * sizeof *r);
    for (size_t i = 0; i < n; i++)
        r[i] = (KeyRef){p->kstack[base + i], p->klstack[base + i]};
    qsort(r, n, sizeof *r, cmp_keyref);
    int rc = 0;
    for (size_t i = 1; i < n && !rc; i++)
        if (!cmp_keyref(&r[i - 1], &r[i])) rc = dup_error(p, r[i].k, r[i].n);
    free(r);
    return rc;
}

static int parse_object(Parser *p, JsonValue *v) {
    size_t base = p->sp;
    p->s++;
    v->type = JSON_OBJECT;
    skip_ws(p);
    if (p->s < p->end && *p->s == '}') {
        p->s++;
        close_container(p, v, base, 1);
        return 0;
    }
    for (;;) {
        skip_ws(p);
        if (p->s >= p->end || *p->s != '"') return perr(p, "expected string key in object");
        const char *key;
        size_t klen;
        if (parse_string(p, &key, &klen)) return -1;
        if (p->sp - base < DUP_LINEAR_MAX && dup_linear(p, base, key, klen))
            return dup_error(p, key, klen);
        skip_ws(p);
        if (p->s >= p->end || *p->s != ':') return perr(p, "expected ':' after object key");
        p->s++;
        JsonValue item = {0};
        if (parse_value(p, &item)) return -1;
        push(p, &item, key, klen);
        skip_ws(p);
        if (p->s >= p->end) return perr(p, "unterminated object");
        if (*p->s == ',') {
            p->s++;
            continue;
        }
        if (*p->s == '}') {
            p->s++;
            break;
        }
        return perr(p, "expected ',' or '}' in object");
    }
    if (p->sp - base > DUP_LINEAR_MAX && dup_sorted(p, base)) return -1;
    close_container(p, v, base, 1);
    return 0;
}

static int parse_value(Parser *p, JsonValue *v) {
    skip_ws(p);
    if (p->s >= p->end) return perr(p, "unexpected end of input");
    if (++p->depth > JSON_MAX_DEPTH) return perr(p, "nesting too deep");
    int rc;
    switch (*p->s) {
    case '{':
        rc = parse_object(p, v);
        break;
    case '[':
        rc = parse_array(p, v);
        break;
    case '"':
        v->type = JSON_STRING;
        rc = parse_string(p, &v->str, &v->len);
        break;
    case 't':
        v->type = JSON_TRUE;
        rc = match_lit(p, "true");
        break;
    case 'f':
        v->type = JSON_FALSE;
        rc = match_lit(p, "false");
        break;
    case 'n':
        v->type = JSON_NULL;
        rc = match_lit(p, "null");
        break;
    default:
        rc = parse_number(p, v);
        break;
    }
    p->depth--;
    return rc;
}

int json_parse(JsonDoc *doc, const char *text, size_t len, KdaError *err) {
    memset(doc, 0, sizeof *doc);
    Parser p = {.s = text, .end = text + len, .begin = text, .arena = &doc->arena, .err = err};
    int rc = parse_value(&p, &doc->root);
    if (rc == 0) {
        skip_ws(&p);
        if (p.s != p.end) rc = perr(&p, "trailing characters after JSON value");
    }
    free(p.stack);
    free(p.kstack);
    free(p.klstack);
    if (rc) json_free(doc);
    return rc;
}

int json_parse_file(JsonDoc *doc, const char *path, KdaError *err) {
    size_t n;
    char *text = read_file(path, &n, err);
    if (!text) return -1;
    KdaError e;
    int rc = json_parse(doc, text, n, &e);
    free(text);
    if (rc) return kda_fail(err, "%s: %s", path, e.msg);
    return 0;
}

void json_free(JsonDoc *doc) {
    JsonArenaBlock *b = doc->arena;
    while (b) {
        JsonArenaBlock *n = b->next;
        free(b);
        b = n;
    }
    memset(doc, 0, sizeof *doc);
}

// ---------------------------------------------------------------------------------------------
// Accessors

const JsonValue *json_get(const JsonValue *obj, const char *key) {
    if (!obj || obj->type != JSON_OBJECT) return NULL;
    for (size_t i = 0; i < obj->len; i++)
        if (strcmp(obj->keys[i], key) == 0) return &obj->items[i];
    return NULL;
}

int json_get_int(const JsonValue *obj, const char *key, int64_t *out) {
    const JsonValue *v = json_get(obj, key);
    if (!v || v->type != JSON_NUMBER) return -1;
    if (v->is_int)
        *out = v->i;
    else if (v->num == floor(v->num) && fabs(v->num) < 9e15)
        *out = (int64_t)v->num;
    else
        return -1;
    return 0;
}

int json_get_num(const JsonValue *obj, const char *key, double *out) {
    const JsonValue *v = json_get(obj, key);
    if (!v || v->type != JSON_NUMBER) return -1;
    *out = v->num;
    return 0;
}

int json_get_bool(const JsonValue *obj, const char *key, int *out) {
    const JsonValue *v = json_get(obj, key);
    if (!v || (v->type != JSON_TRUE && v->type != JSON_FALSE)) return -1;
    *out = v->type == JSON_TRUE;
    return 0;
}

const char *json_get_str(const JsonValue *obj, const char *key) {
    const JsonValue *v = json_get(obj, key);
    return v && v->type == JSON_STRING ? v->str : NULL;
}

const char *json_type_name(JsonType t) {
    static const char *names[] = {"null", "false", "true", "number", "string", "array", "object"};
    return (unsigned)t < sizeof names / sizeof *names ? names[t] : "?";
}

const char *json_fmt_num(char *buf, size_t cap, double v, int digits) {
    if (isfinite(v))
        snprintf(buf, cap, "%.*g", digits, v);
    else
        snprintf(buf, cap, "null");
    return buf;
}

void json_write_string(FILE *f, const char *s, size_t n) {
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"':
            fputs("\\\"", f);
            break;
        case '\\':
            fputs("\\\\", f);
            break;
        case '\n':
            fputs("\\n", f);
            break;
        case '\r':
            fputs("\\r", f);
            break;
        case '\t':
            fputs("\\t", f);
            break;
        case '\b':
            fputs("\\b", f);
            break;
        case '\f':
            fputs("\\f", f);
            break;
        default:
            if (c < 0x20)
                fprintf(f, "\\u%04x", c);
            else
                fputc(c, f);
        }
    }
    fputc('"', f);
}
