// tok_encode.c - encoding (added-token split, pre-tokenizer regex, byte-pair merges) and
// decoding for the byte-level BPE tokenizer.
//
// The two pre-tokenizer regexes (Llama-3, GPT-2; patterns in tok.c) are hand-compiled below:
// each alternative is tried in order at the current position with the backtracking result
// the regex engine would give (leftmost-first alternation, greedy quantifiers). Character
// classes come from unicode_tables.c (generated from the engine HF tokenizers uses).
// Per-thread scratch (merge arrays, piece cache) makes encoding allocation-free in steady state
// and safe to run on one tokenizer from many threads.
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tok/tok_internal.h"
#include "tok/unicode_tables.h"

int tok_bpe_heap_threshold = 48;

// ----------------------------------------------------------------------------------------------
// Characters: strict UTF-8 decoding; an invalid byte is a 1-byte character of no class.

typedef struct {
    uint32_t cp, len;
    unsigned cls; // TOK_UC_* bits
} Ch;

static inline int is_cont(uint8_t b) {
    return (b & 0xC0) == 0x80;
}

static inline __attribute__((always_inline)) Ch ch_at(const uint8_t *s, size_t i, size_t n) {
    uint8_t b = s[i];
    if (b < 0x80) return (Ch){b, 1, tok_uc_blocks[tok_uc_index[0]][b]};
    size_t left = n - i;
    uint32_t cp = 0, len = 0;
    if (b >= 0xC2 && b <= 0xDF) {
        if (left >= 2 && is_cont(s[i + 1]))
            cp = (uint32_t)(b & 0x1F) << 6 | (s[i + 1] & 0x3F), len = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
        if (left >= 3 && is_cont(s[i + 1]) && is_cont(s[i + 2])) {
            cp = (uint32_t)(b & 0x0F) << 12 | (uint32_t)(s[i + 1] & 0x3F) << 6 | (s[i + 2] & 0x3F);
            if (cp >= 0x800 && (cp < 0xD800 || cp > 0xDFFF)) len = 3;
        }
    } else if (b >= 0xF0 && b <= 0xF4) {
        if (left >= 4 && is_cont(s[i + 1]) && is_cont(s[i + 2]) && is_cont(s[i + 3])) {
            cp = (uint32_t)(b & 0x07) << 18 | (uint32_t)(s[i + 1] & 0x3F) << 12 |
                 (uint32_t)(s[i + 2] & 0x3F) << 6 | (s[i + 3] & 0x3F);
            if (cp >= 0x10000 && cp <= 0x10FFFF) len = 4;
        }
    }
    if (!len) return (Ch){0xFFFFFFFFu, 1, 0};
    return (Ch){cp, len, tok_uc_class(cp)};
}

#define IS_P(c)    ((c).cls == 0) // [^\s\p{L}\p{N}]
#define IS_CRLF(c) ((c).cp == '\r' || (c).cp == '\n')

// End of the run of characters whose class intersects mask, starting at i.
static inline size_t run_cls(const uint8_t *s, size_t i, size_t n, unsigned mask) {
    while (i < n) {
        if (s[i] < 0x80) {
            if (!(tok_uc_blocks[tok_uc_index[0]][s[i]] & mask)) break;
            i++;
            continue;
        }
        Ch c = ch_at(s, i, n);
        if (!(c.cls & mask)) break;
        i += c.len;
    }
    return i;
}

// End of the run of characters of no class ([^\s\p{L}\p{N}]+), starting at i.
static inline size_t run_p(const uint8_t *s, size_t i, size_t n) {
    while (i < n) {
        if (s[i] < 0x80) {
            if (tok_uc_blocks[tok_uc_index[0]][s[i]]) break;
            i++;
            continue;
        }
        Ch c = ch_at(s, i, n);
        if (c.cls) break;
        i += c.len;
    }
    return i;
}

static inline int lower_is(uint8_t b, char c) {
    return b == c || b == c - 32;
}

// Bytes after the apostrophe matched by (?i:'s|'t|'re|'ve|'m|'ll|'d) at s[j]; 0 if none.
// Case folding as in Oniguruma: U+017F (long s) matches 's' too.
static size_t contraction_ci(const uint8_t *s, size_t j, size_t n) {
    if (j >= n) return 0;
    uint8_t a = s[j], b = j + 1 < n ? s[j + 1] : 0;
    if (lower_is(a, 's') || lower_is(a, 't') || lower_is(a, 'm') || lower_is(a, 'd')) return 1;
    if (a == 0xC5 && b == 0xBF) return 2; // U+017F
    if ((lower_is(a, 'r') || lower_is(a, 'v')) && lower_is(b, 'e')) return 2;
    if (lower_is(a, 'l') && lower_is(b, 'l')) return 2;
    return 0;
}

// Same, case-sensitive ('s|'t|'re|'ve|'m|'ll|'d).
static size_t contraction_cs(const uint8_t *s, size_t j, size_t n) {
    if (j >= n) return 0;
    uint8_t a = s[j], b = j + 1 < n ? s[j + 1] : 0;
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 1;
    if ((a == 'r' || a == 'v') && b == 'e') return 2;
    if (a == 'l' && b == 'l') return 2;
    return 0;
}

// Whitespace tail shared by both patterns: \s+(?!\S)|\s+ at i (s[i] is whitespace). With
// crlf_rule also \s*[\r\n]+ first (Llama-3).
static size_t match_space(const uint8_t *s, size_t i, size_t n, int crlf_rule) {
    size_t j = i, last_start = i, crlf_end = 0, count = 0;
    while (j < n) {
        Ch c = ch_at(s, j, n);
        if (!(c.cls & TOK_UC_S)) break;
        last_start = j;
        j += c.len;
        count++;
        if (IS_CRLF(c)) crlf_end = j;
    }
    if (crlf_rule && crlf_end) return crlf_end; // \s*[\r\n]+ ends after the last CR/LF
    if (j == n || count < 2) return j;          // \s+(?!\S) at end of text, or \s+
    return last_start;                          // \s+(?!\S): give back the last one
}

// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
// \s*[\r\n]+|\s+(?!\S)|\s+
static size_t next_llama3(const uint8_t *s, size_t i, size_t n) {
    Ch c = ch_at(s, i, n);
    size_t k;
    if (c.cp == '\'' && (k = contraction_ci(s, i + 1, n))) return i + 1 + k;
    if (c.cls & TOK_UC_L) return run_cls(s, i + c.len, n, TOK_UC_L);
    size_t j = i + c.len;
    Ch d = j < n ? ch_at(s, j, n) : (Ch){0, 0, TOK_UC_S}; // end: behaves as "no letter, no P"
    if (!(c.cls & TOK_UC_N) && !IS_CRLF(c) && j < n && (d.cls & TOK_UC_L))
        return run_cls(s, j + d.len, n, TOK_UC_L);
    if (c.cls & TOK_UC_N) {
        size_t e = j;
        for (int r = 1; r < 3 && e < n; r++) {
            Ch x = ch_at(s, e, n);
            if (!(x.cls & TOK_UC_N)) break;
            e += x.len;
        }
        return e;
    }
    size_t p = IS_P(c) ? i : (c.cp == ' ' && j < n && IS_P(d)) ? j : (size_t)-1;
    if (p != (size_t)-1) {
        size_t e = run_p(s, p, n);
        while (e < n && (s[e] == '\r' || s[e] == '\n'))
            e++;
        return e;
    }
    return match_space(s, i, n, 1);
}

// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
static size_t next_gpt2(const uint8_t *s, size_t i, size_t n) {
    Ch c = ch_at(s, i, n);
    size_t k;
    if (c.cp == '\'' && (k = contraction_cs(s, i + 1, n))) return i + 1 + k;
    size_t j = i;
    if (c.cp == ' ' && i + 1 < n) {
        Ch d = ch_at(s, i + 1, n);
        if (d.cls & (TOK_UC_L | TOK_UC_N) || IS_P(d)) j = i + 1, c = d;
    }
    if (c.cls & TOK_UC_L) return run_cls(s, j + c.len, n, TOK_UC_L);
    if (c.cls & TOK_UC_N) return run_cls(s, j + c.len, n, TOK_UC_N);
    if (IS_P(c)) return run_p(s, j + c.len, n);
    return match_space(s, i, n, 0);
}

size_t tok_pretok_next(TokPretok p, const uint8_t *s, size_t i, size_t n) {
    return p == TOK_PRE_LLAMA3 ? next_llama3(s, i, n) : next_gpt2(s, i, n);
}

// ----------------------------------------------------------------------------------------------
// Per-thread scratch.

#define CACHE_SLOTS   4096 // direct-mapped piece cache
#define CACHE_MAX_LEN 30
#define CACHE_MAX_IDS 6

typedef struct {
    uint64_t h;
    uint8_t len, nids;
    char bytes[CACHE_MAX_LEN];
    int32_t ids[CACHE_MAX_IDS];
} CacheEnt;

typedef struct {
    uint64_t serial;                            // tokenizer the cache belongs to
    CacheEnt *cache;                            // [CACHE_SLOTS]
    int32_t *sym, *rank, *merged, *next, *prev; // [cap] merge work arrays
    uint64_t *heap;                             // [3 * cap]
    size_t cap;
} Scratch;

static pthread_key_t g_key;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void scratch_destroy(void *p) {
    Scratch *sc = p;
    if (!sc) return;
    free(sc->cache);
    free(sc->sym);
    free(sc->heap);
    free(sc);
}

static void key_init(void) {
    pthread_key_create(&g_key, scratch_destroy);
}

static Scratch *scratch_get(const KdaTokenizer *t) {
    pthread_once(&g_once, key_init);
    Scratch *sc = pthread_getspecific(g_key);
    if (!sc) {
        sc = kda_calloc(1, sizeof *sc);
        sc->cache = kda_calloc(CACHE_SLOTS, sizeof *sc->cache);
        pthread_setspecific(g_key, sc);
    }
    if (sc->serial != t->serial) {
        memset(sc->cache, 0, CACHE_SLOTS * sizeof *sc->cache);
        sc->serial = t->serial;
    }
    return sc;
}

static void scratch_reserve(Scratch *sc, size_t m) {
    if (m <= sc->cap) return;
    size_t cap = m < 256 ? 256 : 2 * m;
    free(sc->sym);
    free(sc->heap);
    sc->sym = kda_malloc(5 * cap * sizeof *sc->sym);
    sc->rank = sc->sym + cap;
    sc->merged = sc->rank + cap;
    sc->next = sc->merged + cap;
    sc->prev = sc->next + cap;
    sc->heap = kda_malloc((3 * cap + 4) * sizeof *sc->heap);
    sc->cap = cap;
}

// ----------------------------------------------------------------------------------------------
// Byte-pair merging of one piece: repeatedly merge the adjacent pair of lowest rank, leftmost
// first (HF Word::merge_all and tiktoken give this order). Result ids go to sc->sym[0..return).

static size_t bpe_init(const KdaTokenizer *t, const uint8_t *p, size_t len, Scratch *sc) {
    size_t m = 0;
    for (size_t i = 0; i < len; i++) {
        int32_t id = t->byte_id[p[i]];
        if (id >= 0) sc->sym[m++] = id; // HF drops characters missing from the vocab (no unk)
    }
    return m;
}

// Quadratic loop for short pieces: rank[i] is the rank of (sym[i], sym[i+1]).
static size_t bpe_small(const KdaTokenizer *t, Scratch *sc, size_t m) {
    int32_t *sym = sc->sym, *rank = sc->rank, *merged = sc->merged;
    for (size_t i = 0; i + 1 < m; i++)
        rank[i] = tok_pair_find(t, sym[i], sym[i + 1], &merged[i]);
    while (m > 1) {
        size_t best = 0;
        for (size_t i = 1; i + 1 < m; i++)
            if (rank[i] < rank[best]) best = i;
        if (rank[best] == INT32_MAX) break;
        sym[best] = merged[best];
        memmove(sym + best + 1, sym + best + 2, (m - best - 2) * sizeof *sym);
        memmove(rank + best + 1, rank + best + 2, (m - best - 2) * sizeof *rank);
        memmove(merged + best + 1, merged + best + 2, (m - best - 2) * sizeof *merged);
        m--;
        if (best > 0)
            rank[best - 1] = tok_pair_find(t, sym[best - 1], sym[best], &merged[best - 1]);
        if (best + 1 < m) rank[best] = tok_pair_find(t, sym[best], sym[best + 1], &merged[best]);
    }
    return m;
}

static void heap_push(uint64_t *h, size_t *n, uint64_t v) {
    size_t i = (*n)++;
    while (i > 0 && h[(i - 1) / 2] > v) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = v;
}

static uint64_t heap_pop(uint64_t *h, size_t *n) {
    uint64_t top = h[0], v = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && h[c + 1] < h[c]) c++;
        if (h[c] >= v) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = v;
    return top;
}

// Heap of (rank << 32 | position) with lazy invalidation, for long pieces: O(m log m).
static size_t bpe_heap(const KdaTokenizer *t, Scratch *sc, size_t m) {
    int32_t *sym = sc->sym, *next = sc->next, *prev = sc->prev, *alive = sc->rank, tmp;
    uint64_t *heap = sc->heap;
    size_t nh = 0;
    for (size_t i = 0; i < m; i++) {
        next[i] = i + 1 < m ? (int32_t)i + 1 : -1;
        prev[i] = (int32_t)i - 1;
        alive[i] = 1;
        int32_t r = i + 1 < m ? tok_pair_find(t, sym[i], sym[i + 1], &tmp) : INT32_MAX;
        if (r != INT32_MAX) heap_push(heap, &nh, (uint64_t)(uint32_t)r << 32 | i);
    }
    while (nh) {
        uint64_t top = heap_pop(heap, &nh);
        int32_t r = (int32_t)(top >> 32), pos = (int32_t)(uint32_t)top, nx = next[pos], mid = -1;
        if (!alive[pos] || nx < 0 || tok_pair_find(t, sym[pos], sym[nx], &mid) != r) continue;
        sym[pos] = mid;
        alive[nx] = 0;
        next[pos] = next[nx];
        if (next[nx] >= 0) prev[next[nx]] = pos;
        int32_t pv = prev[pos], nn = next[pos], rr;
        if (pv >= 0 && (rr = tok_pair_find(t, sym[pv], sym[pos], &tmp)) != INT32_MAX)
            heap_push(heap, &nh, (uint64_t)(uint32_t)rr << 32 | (uint32_t)pv);
        if (nn >= 0 && (rr = tok_pair_find(t, sym[pos], sym[nn], &tmp)) != INT32_MAX)
            heap_push(heap, &nh, (uint64_t)(uint32_t)rr << 32 | (uint32_t)pos);
    }
    size_t k = 0;
    for (int32_t i = m ? 0 : -1; i >= 0; i = next[i])
        sym[k++] = sym[i];
    return k;
}

// ----------------------------------------------------------------------------------------------
// Encoding.

static inline void ids_reserve(TokIds *out, size_t extra) {
    if (out->n + extra <= out->cap) return;
    size_t cap = out->cap ? out->cap : 256;
    while (cap < out->n + extra)
        cap *= 2;
    out->ids = kda_realloc(out->ids, cap * sizeof *out->ids);
    out->cap = cap;
}

// Appends the ids of one pre-tokenized piece; out has room for len more ids.
static void encode_piece(const KdaTokenizer *t, Scratch *sc, const uint8_t *p, size_t len,
                         TokIds *out) {
    if (len == 1) {
        int32_t id = t->byte_id[p[0]];
        if (id >= 0) out->ids[out->n++] = id;
        return;
    }
    uint64_t h = tok_hash_bytes(p, len);
    if (t->ignore_merges) {
        int32_t id = tok_vocab_find(t, (const char *)p, len, h);
        if (id >= 0) {
            out->ids[out->n++] = id;
            return;
        }
    }
    CacheEnt *ce = NULL;
    if (len <= CACHE_MAX_LEN) {
        ce = &sc->cache[h & (CACHE_SLOTS - 1)];
        if (ce->h == h && ce->len == len && !memcmp(ce->bytes, p, len)) {
            memcpy(out->ids + out->n, ce->ids, ce->nids * sizeof *ce->ids);
            out->n += ce->nids;
            return;
        }
    }
    scratch_reserve(sc, len);
    size_t m = bpe_init(t, p, len, sc);
    m = (int64_t)m > tok_bpe_heap_threshold ? bpe_heap(t, sc, m) : bpe_small(t, sc, m);
    memcpy(out->ids + out->n, sc->sym, m * sizeof *sc->sym);
    out->n += m;
    if (ce && m <= CACHE_MAX_IDS) {
        ce->h = h;
        ce->len = (uint8_t)len;
        ce->nids = (uint8_t)m;
        memcpy(ce->bytes, p, len);
        memcpy(ce->ids, sc->sym, m * sizeof *sc->sym);
    }
}

// Ordinary text (no added tokens inside): pre-tokenize, then merge each piece.
static void encode_plain(const KdaTokenizer *t, Scratch *sc, const uint8_t *s, size_t n,
                         TokIds *out) {
    size_t i = 0;
    while (i < n) {
        size_t e = tok_pretok_next(t->pretok, s, i, n);
        ids_reserve(out, e - i);
        encode_piece(t, sc, s + i, e - i, out);
        i = e;
    }
}

// Longest added token (allowed by mask: 1 non-special, 2 special) starting at s[i], or NULL.
static const TokAdded *added_match(const KdaTokenizer *t, const uint8_t *s, size_t i, size_t n,
                                   unsigned mask) {
    for (int32_t k = 0; k < t->nadded; k++) { // sorted longest first
        const TokAdded *a = &t->added[k];
        if (!(mask & (a->special ? 2u : 1u)) || a->len > n - i) continue;
        if (!memcmp(s + i, a->content, a->len)) return a;
    }
    return NULL;
}

int tok_encode(const KdaTokenizer *t, const char *text, size_t n, int flags, TokIds *out,
               KdaError *err) {
    if ((flags & TOK_ADD_BOS) && t->bos < 0)
        return kda_fail(err, "tokenizer has no BOS token (bos_token undefined)");
    if ((flags & TOK_ADD_EOS) && t->eos < 0)
        return kda_fail(err, "tokenizer has no EOS token (eos_token undefined)");
    Scratch *sc = scratch_get(t);
    const uint8_t *s = (const uint8_t *)text;
    int post = (flags & TOK_POST) != 0;
    ids_reserve(out, 2 + TOK_POST_MAX);
    if (post)
        for (int k = 0; k < t->n_post_prefix; k++)
            out->ids[out->n++] = t->post_prefix[k];
    if ((flags & TOK_ADD_BOS) && !(post && tok_post_adds_bos(t))) out->ids[out->n++] = t->bos;
    unsigned mask = 1u | ((flags & TOK_SPECIALS) ? 2u : 0u);
    size_t seg = 0;
    for (size_t i = 0; i < n; i++) {
        if (!(t->added_first[s[i]] & mask)) continue;
        const TokAdded *a = added_match(t, s, i, n, mask);
        if (!a) continue;
        encode_plain(t, sc, s + seg, i - seg, out);
        ids_reserve(out, 1);
        out->ids[out->n++] = a->id;
        i += a->len - 1;
        seg = i + 1;
    }
    encode_plain(t, sc, s + seg, n - seg, out);
    ids_reserve(out, 1 + TOK_POST_MAX);
    if (post)
        for (int k = 0; k < t->n_post_suffix; k++)
            out->ids[out->n++] = t->post_suffix[k];
    int eos_done = post && t->n_post_suffix && t->post_suffix[t->n_post_suffix - 1] == t->eos;
    if ((flags & TOK_ADD_EOS) && !eos_done) out->ids[out->n++] = t->eos;
    return 0;
}

// ----------------------------------------------------------------------------------------------
// Decoding.

int tok_decode(const KdaTokenizer *t, const int32_t *ids, size_t n, TokBytes *out, KdaError *err) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= t->nvocab || !(t->flags[id] & TOK_F_PRESENT))
            return kda_fail(err,
                            "token id %d at position %zu is not in the vocabulary "
                            "(size %d)",
                            (int)id, i, (int)t->nvocab);
        total += t->bytes_len[id];
    }
    if (out->n + total + 1 > out->cap) {
        size_t cap = out->cap ? out->cap : 256;
        while (cap < out->n + total + 1)
            cap *= 2;
        out->data = kda_realloc(out->data, cap);
        out->cap = cap;
    }
    for (size_t i = 0; i < n; i++) {
        memcpy(out->data + out->n, t->blob + t->bytes_off[ids[i]], t->bytes_len[ids[i]]);
        out->n += t->bytes_len[ids[i]];
    }
    out->data[out->n] = 0;
    return 0;
}
