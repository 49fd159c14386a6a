// tok_internal.h - KdaTokenizer layout and helpers shared by tok.c (loading, queries) and
// tok_encode.c (pre-tokenizer, BPE, encode/decode). Not part of the public API.
#ifndef KDA_TOK_INTERNAL_H
#define KDA_TOK_INTERNAL_H

#include <stdint.h>
#include <string.h>

#include "tok/tok.h"

#define TOK_MAX_VOCAB (1 << 24) // ids must lie below this (guards allocations on bad input)

typedef enum { TOK_PRE_LLAMA3 = 1, TOK_PRE_GPT2 = 2 } TokPretok;

enum { TOK_F_PRESENT = 1, TOK_F_ADDED = 2, TOK_F_SPECIAL = 4 };

// Open-addressing map: raw token bytes -> id, power-of-2 size. A slot keeps the id + 1 (0 =
// empty), the length and the first TOK_INLINE bytes, so most lookups touch one cache line.
#define TOK_INLINE 11
typedef struct {
    uint32_t id1;
    uint8_t len; // min(length, 255)
    char head[TOK_INLINE];
} TokSlot;
typedef struct {
    TokSlot *slots;
    uint64_t mask;
} TokBytesMap;

// Open-addressing map: (left id, right id) -> (rank, merged id). key UINT64_MAX = empty.
typedef struct {
    uint64_t key;
    int32_t rank, id;
} TokPair;
typedef struct {
    TokPair *slots;
    uint64_t mask;
} TokPairMap;

typedef struct {
    int32_t id;
    int special;
    uint32_t len;
    const char *content; // points into the blob
} TokAdded;

#define TOK_POST_MAX 8 // special ids a post-processor may add on one side

struct KdaTokenizer {
    uint64_t serial; // unique per load: invalidates per-thread caches of a freed tokenizer
    int32_t nvocab;  // 1 + largest id
    TokPretok pretok;
    int ignore_merges; // emit a piece whole when it is itself a vocab token
    int32_t bos, eos;  // -1 if none
    // Per id (nvocab entries): raw bytes and tokenizer.json spelling, both NUL-terminated in blob.
    uint64_t *bytes_off, *spell_off; // [nvocab] offsets into blob
    uint32_t *bytes_len, *spell_len; // [nvocab]
    uint8_t *flags;                  // [nvocab] TOK_F_*
    char *blob;
    size_t blob_n, blob_cap;
    int32_t byte_id[256]; // id of the single-byte token for each byte, -1 if none
    TokBytesMap vocab;    // BPE vocab (not added-only tokens): raw bytes -> id
    TokPairMap merges;
    TokAdded *added; // sorted by content length, longest first
    int32_t nadded;
    uint8_t added_first[256]; // bit 1: a non-special added token starts with this byte; 2: special
    // tokenizer.json post_processor for one sequence (HF add_special_tokens=True): these ids go
    // before and after the encoded text (TemplateProcessing "single", Bert/Roberta cls/sep)
    int32_t post_prefix[TOK_POST_MAX], post_suffix[TOK_POST_MAX];
    int n_post_prefix, n_post_suffix;
    char post_desc[96]; // e.g. "TemplateProcessing [128000] $A", "ByteLevel (adds none)", "none"
};

uint64_t tok_hash_bytes(const void *p, size_t n);

static inline uint64_t tok_pair_hash(uint64_t key) {
    key ^= key >> 29;
    key *= 0xbf58476d1ce4e5b9ull;
    key ^= key >> 32;
    return key;
}

// Raw-bytes lookup in the BPE vocab with a precomputed tok_hash_bytes(s, n); -1 if absent.
static inline int32_t tok_vocab_find(const KdaTokenizer *t, const char *s, size_t n, uint64_t h) {
    if (!t->vocab.slots) return -1;
    uint8_t len8 = n < 255 ? (uint8_t)n : 255;
    size_t nh = n < TOK_INLINE ? n : TOK_INLINE;
    for (uint64_t i = h & t->vocab.mask;; i = (i + 1) & t->vocab.mask) {
        const TokSlot *sl = &t->vocab.slots[i];
        if (!sl->id1) return -1;
        if (sl->len != len8 || memcmp(sl->head, s, nh)) continue;
        int32_t id = (int32_t)(sl->id1 - 1);
        if (n <= TOK_INLINE) return id;
        if (t->bytes_len[id] == n && !memcmp(t->blob + t->bytes_off[id], s, n)) return id;
    }
}

// Merge of adjacent tokens (a, b): returns the rank and sets *merged, or INT32_MAX if none.
static inline int32_t tok_pair_find(const KdaTokenizer *t, int32_t a, int32_t b, int32_t *merged) {
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    for (uint64_t i = tok_pair_hash(key) & t->merges.mask;; i = (i + 1) & t->merges.mask) {
        const TokPair *p = &t->merges.slots[i];
        if (p->key == key) {
            *merged = p->id;
            return p->rank;
        }
        if (p->key == UINT64_MAX) return INT32_MAX;
    }
}

// Test hook: pieces of at most this many symbols use the quadratic merge loop, longer ones the
// heap. Tests set it to 0 or a huge value to cross-check both. Default 48.
extern int tok_bpe_heap_threshold;

// Pre-tokenizer: end offset of the piece that starts at s[i] (i < n) for the given pattern.
size_t tok_pretok_next(TokPretok p, const uint8_t *s, size_t i, size_t n);

#endif
