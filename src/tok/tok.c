// tok.c - loading byte-level BPE tokenizers (HF tokenizer.json, tiktoken .model) and the
// vocabulary queries. Encoding and decoding live in tok_encode.c.
#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "core/util.h"
#include "tok/tok_internal.h"

static const char LLAMA3_REGEX[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char GPT2_REGEX[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

// ----------------------------------------------------------------------------------------------
// Byte-level alphabet (data-formats.md §7.5): byte b <-> code point g_b2u[b].

static uint16_t g_b2u[256];
static int16_t g_u2b[324]; // code point (< 324) -> byte, -1 if not in the alphabet

static void byte_alphabet_build(void) {
    int next = 256;
    for (int b = 0; b < 256; b++) {
        int keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
        g_b2u[b] = (uint16_t)(keep ? b : next++);
    }
    for (int u = 0; u < 324; u++)
        g_u2b[u] = -1;
    for (int b = 0; b < 256; b++)
        g_u2b[g_b2u[b]] = (int16_t)b;
}

static void byte_alphabet_init(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, byte_alphabet_build);
}

// Spelling (UTF-8 in the byte-level alphabet) -> raw bytes, written to out (room for n bytes:
// every char gives at most as many bytes as it has). Characters outside the alphabet keep their
// UTF-8 bytes (HF's decoder does the same). Returns the byte count, or -1 for invalid UTF-8.
static long spelling_to_bytes(const char *s, size_t n, char *out) {
    size_t i = 0, o = 0;
    while (i < n) {
        size_t k = utf8_valid_prefix((const unsigned char *)s + i, n - i);
        if (!k) return -1;
        uint32_t cp;
        utf8_decode((const unsigned char *)s + i, &cp);
        if (cp < 324 && g_u2b[cp] >= 0) {
            out[o++] = (char)g_u2b[cp];
        } else {
            memcpy(out + o, s + i, k);
            o += k;
        }
        i += k;
    }
    return (long)o;
}

// ----------------------------------------------------------------------------------------------
// Hash maps.

uint64_t tok_hash_bytes(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (n * 0xff51afd7ed558ccdull);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
        h ^= h >> 31;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, n);
    h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 29;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 32;
    return h;
}

static uint64_t pow2_at_least(uint64_t n) {
    uint64_t p = 16;
    while (p < n)
        p <<= 1;
    return p;
}

// Inserts id under its raw bytes; an existing entry with the same bytes is replaced (HF's vocab
// is a map: the last duplicate wins).
static void vocab_insert(KdaTokenizer *t, int32_t id) {
    const char *s = t->blob + t->bytes_off[id];
    size_t n = t->bytes_len[id];
    for (uint64_t i = tok_hash_bytes(s, n) & t->vocab.mask;; i = (i + 1) & t->vocab.mask) {
        TokSlot *sl = &t->vocab.slots[i];
        uint32_t v = sl->id1;
        if (!v || (t->bytes_len[v - 1] == n && !memcmp(t->blob + t->bytes_off[v - 1], s, n))) {
            memset(sl, 0, sizeof *sl);
            sl->id1 = (uint32_t)id + 1;
            sl->len = n < 255 ? (uint8_t)n : 255;
            memcpy(sl->head, s, n < TOK_INLINE ? n : TOK_INLINE);
            return;
        }
    }
}

static void pairs_init(KdaTokenizer *t, size_t max_entries) {
    uint64_t cap = pow2_at_least(2 * max_entries + 16);
    t->merges.slots = kda_malloc(cap * sizeof *t->merges.slots);
    for (uint64_t i = 0; i < cap; i++)
        t->merges.slots[i] = (TokPair){UINT64_MAX, 0, 0};
    t->merges.mask = cap - 1;
}

// Sets (a, b) -> (rank, id). When replace is 0 an existing entry is kept (tiktoken: the first
// split found gives the same rank anyway).
static void pairs_insert(KdaTokenizer *t, int32_t a, int32_t b, int32_t rank, int32_t id,
                         int replace) {
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    for (uint64_t i = tok_pair_hash(key) & t->merges.mask;; i = (i + 1) & t->merges.mask) {
        TokPair *p = &t->merges.slots[i];
        if (p->key == UINT64_MAX || p->key == key) {
            if (p->key == key && !replace) return;
            *p = (TokPair){key, rank, id};
            return;
        }
    }
}

// ----------------------------------------------------------------------------------------------
// Token table.

static uint64_t blob_add(KdaTokenizer *t, const char *s, size_t n) {
    if (t->blob_n + n + 1 > t->blob_cap) {
        t->blob_cap = (t->blob_n + n + 1) * 2;
        t->blob = kda_realloc(t->blob, t->blob_cap);
    }
    uint64_t off = t->blob_n;
    memcpy(t->blob + off, s, n);
    t->blob[off + n] = 0;
    t->blob_n += n + 1;
    return off;
}

static void table_alloc(KdaTokenizer *t, int32_t nvocab) {
    t->nvocab = nvocab;
    t->bytes_off = kda_calloc((size_t)nvocab, sizeof *t->bytes_off);
    t->spell_off = kda_calloc((size_t)nvocab, sizeof *t->spell_off);
    t->bytes_len = kda_calloc((size_t)nvocab, sizeof *t->bytes_len);
    t->spell_len = kda_calloc((size_t)nvocab, sizeof *t->spell_len);
    t->flags = kda_calloc((size_t)nvocab, 1);
    t->vocab.slots = kda_calloc(pow2_at_least(2 * (uint64_t)nvocab), sizeof *t->vocab.slots);
    t->vocab.mask = pow2_at_least(2 * (uint64_t)nvocab) - 1;
}

// Stores token id with raw bytes and spelling (either may be NULL: derived from the other).
static void token_set(KdaTokenizer *t, int32_t id, const char *bytes, size_t nb, const char *spell,
                      size_t ns, uint8_t flags) {
    char *tmp = NULL;
    if (!spell) { // bytes -> spelling (each byte at most 2 UTF-8 bytes)
        tmp = kda_malloc(2 * nb + 1);
        ns = 0;
        for (size_t i = 0; i < nb; i++)
            ns += utf8_encode(g_b2u[(unsigned char)bytes[i]], (unsigned char *)tmp + ns);
        spell = tmp;
    }
    t->bytes_off[id] = blob_add(t, bytes, nb);
    t->bytes_len[id] = (uint32_t)nb;
    t->spell_off[id] = blob_add(t, spell, ns);
    t->spell_len[id] = (uint32_t)ns;
    t->flags[id] = flags | TOK_F_PRESENT;
    free(tmp);
}

static void finish_byte_ids(KdaTokenizer *t) {
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        t->byte_id[b] = tok_vocab_find(t, &c, 1, tok_hash_bytes(&c, 1));
    }
}

// ----------------------------------------------------------------------------------------------
// HF tokenizer.json.

static int check_pretokenizer(KdaTokenizer *t, const JsonValue *pre, KdaError *err) {
    const char *type = pre ? json_get_str(pre, "type") : NULL;
    if (type && !strcmp(type, "ByteLevel")) {
        int use_regex = 1, aps = 0;
        json_get_bool(pre, "use_regex", &use_regex);
        json_get_bool(pre, "add_prefix_space", &aps);
        if (!use_regex || aps)
            return kda_fail(err, "pre_tokenizer: ByteLevel needs use_regex true and "
                                 "add_prefix_space false");
        t->pretok = TOK_PRE_GPT2;
        return 0;
    }
    const JsonValue *seq =
        type && !strcmp(type, "Sequence") ? json_get(pre, "pretokenizers") : NULL;
    if (!seq || seq->type != JSON_ARRAY || seq->len != 2)
        return kda_fail(err, "pre_tokenizer: expected ByteLevel or Sequence[Split, ByteLevel]");
    const JsonValue *split = &seq->items[0], *bl = &seq->items[1];
    const char *t0 = json_get_str(split, "type"), *t1 = json_get_str(bl, "type");
    const JsonValue *pat = json_get(split, "pattern");
    const char *re = pat ? json_get_str(pat, "Regex") : NULL;
    const char *beh = json_get_str(split, "behavior");
    int invert = 0, use_regex = 1, aps = 0;
    json_get_bool(split, "invert", &invert);
    json_get_bool(bl, "use_regex", &use_regex);
    json_get_bool(bl, "add_prefix_space", &aps);
    if (!t0 || strcmp(t0, "Split") || !t1 || strcmp(t1, "ByteLevel") || !re || !beh ||
        strcmp(beh, "Isolated") || invert || use_regex || aps)
        return kda_fail(err, "pre_tokenizer: expected Sequence[Split(Regex, Isolated), "
                             "ByteLevel(use_regex false, add_prefix_space false)]");
    if (!strcmp(re, LLAMA3_REGEX))
        t->pretok = TOK_PRE_LLAMA3;
    else if (!strcmp(re, GPT2_REGEX))
        t->pretok = TOK_PRE_GPT2;
    else
        return kda_fail(err, "pre_tokenizer.pretokenizers[0].pattern.Regex: unsupported "
                             "pattern (expected the Llama-3 or GPT-2 regex)");
    return 0;
}

static int check_model(KdaTokenizer *t, const JsonValue *m, KdaError *err) {
    const char *type = json_get_str(m, "type");
    if (type && strcmp(type, "BPE")) return kda_fail(err, "model.type: expected \"BPE\"");
    const JsonValue *v = json_get(m, "dropout");
    if (v && v->type != JSON_NULL) return kda_fail(err, "model.dropout: expected null");
    int b = 0;
    if (!json_get_bool(m, "byte_fallback", &b) && b)
        return kda_fail(err, "model.byte_fallback: expected false");
    const char *keys[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const char *s = json_get_str(m, keys[i]);
        if (s && *s) return kda_fail(err, "model.%s: expected null", keys[i]);
    }
    t->ignore_merges = 0;
    json_get_bool(m, "ignore_merges", &t->ignore_merges);
    return 0;
}

static int load_vocab_json(KdaTokenizer *t, const JsonValue *vocab, const JsonValue *added,
                           KdaError *err) {
    int64_t maxid = -1;
    for (size_t i = 0; i < vocab->len; i++) {
        const JsonValue *v = &vocab->items[i];
        if (v->type != JSON_NUMBER || !v->is_int || v->i < 0 || v->i >= TOK_MAX_VOCAB)
            return kda_fail(err, "model.vocab[\"%s\"]: expected an id in [0, %d)", vocab->keys[i],
                            TOK_MAX_VOCAB);
        if (v->i > maxid) maxid = v->i;
    }
    for (size_t i = 0; added && i < added->len; i++) {
        int64_t id;
        if (json_get_int(&added->items[i], "id", &id) || id < 0 || id >= TOK_MAX_VOCAB)
            return kda_fail(err, "added_tokens[%zu].id: expected an id in [0, %d)", i,
                            TOK_MAX_VOCAB);
        if (id > maxid) maxid = id;
    }
    if (maxid < 0) return kda_fail(err, "model.vocab: empty");
    table_alloc(t, (int32_t)(maxid + 1));
    char *buf = NULL;
    size_t cap = 0;
    for (size_t i = 0; i < vocab->len; i++) {
        size_t ns = vocab->key_lens[i];
        if (ns + 1 > cap) buf = kda_realloc(buf, cap = ns + 1);
        long nb = spelling_to_bytes(vocab->keys[i], ns, buf);
        if (nb < 0) {
            free(buf);
            return kda_fail(err, "model.vocab: token %zu is not valid UTF-8", i);
        }
        int32_t id = (int32_t)vocab->items[i].i;
        token_set(t, id, buf, (size_t)nb, vocab->keys[i], ns, 0);
    }
    free(buf);
    // Insert after all are set so that a duplicated id resolves to its last spelling.
    for (int32_t id = 0; id < t->nvocab; id++)
        if (t->flags[id] & TOK_F_PRESENT) vocab_insert(t, id);
    return 0;
}

// Resolves merge i ("A B" or ["A", "B"]) to vocab ids.
static int merge_parts(const JsonValue *mv, size_t i, const char **a, size_t *na, const char **b,
                       size_t *nb, KdaError *err) {
    if (mv->type == JSON_STRING) {
        const char *sp = memchr(mv->str, ' ', mv->len);
        if (!sp || memchr(sp + 1, ' ', mv->len - (size_t)(sp + 1 - mv->str)))
            return kda_fail(err, "model.merges[%zu]: expected \"A B\"", i);
        *a = mv->str, *na = (size_t)(sp - mv->str);
        *b = sp + 1, *nb = mv->len - *na - 1;
        return 0;
    }
    if (mv->type == JSON_ARRAY && mv->len == 2 && mv->items[0].type == JSON_STRING &&
        mv->items[1].type == JSON_STRING) {
        *a = mv->items[0].str, *na = mv->items[0].len;
        *b = mv->items[1].str, *nb = mv->items[1].len;
        return 0;
    }
    return kda_fail(err, "model.merges[%zu]: expected \"A B\" or [\"A\", \"B\"]", i);
}

static int32_t spelled_id(const KdaTokenizer *t, const char *s, size_t n, char *buf) {
    long nb = spelling_to_bytes(s, n, buf);
    if (nb < 0) return -1;
    return tok_vocab_find(t, buf, (size_t)nb, tok_hash_bytes(buf, (size_t)nb));
}

static int load_merges_json(KdaTokenizer *t, const JsonValue *merges, KdaError *err) {
    if (merges && merges->type != JSON_ARRAY) return kda_fail(err, "model.merges: expected a list");
    size_t nm = merges ? merges->len : 0;
    if (nm >= INT32_MAX) return kda_fail(err, "model.merges: too many");
    pairs_init(t, nm);
    char *buf = NULL, *cat = NULL;
    size_t cap = 0;
    int rc = 0;
    for (size_t i = 0; i < nm && !rc; i++) {
        const char *a = NULL, *b = NULL;
        size_t na = 0, nb = 0;
        if ((rc = merge_parts(&merges->items[i], i, &a, &na, &b, &nb, err))) break;
        if (na + nb + 1 > cap) {
            cap = 2 * (na + nb + 1);
            buf = kda_realloc(buf, cap);
            cat = kda_realloc(cat, cap);
        }
        memcpy(cat, a, na);
        memcpy(cat + na, b, nb);
        int32_t ia = spelled_id(t, a, na, buf), ib = spelled_id(t, b, nb, buf);
        int32_t ic = spelled_id(t, cat, na + nb, buf);
        if (ia < 0 || ib < 0 || ic < 0)
            rc = kda_fail(err, "model.merges[%zu]: token not in the vocabulary", i);
        else
            pairs_insert(t, ia, ib, (int32_t)i, ic, 1);
    }
    free(buf);
    free(cat);
    return rc;
}

static int cmp_added_len(const void *x, const void *y) {
    const TokAdded *a = x, *b = y;
    if (a->len != b->len) return a->len > b->len ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

static void finish_added(KdaTokenizer *t) {
    int32_t n = 0;
    for (int32_t id = 0; id < t->nvocab; id++)
        n += (t->flags[id] & TOK_F_ADDED) != 0;
    t->added = kda_calloc((size_t)n + 1, sizeof *t->added);
    memset(t->added_first, 0, sizeof t->added_first);
    t->nadded = 0;
    for (int32_t id = 0; id < t->nvocab; id++) {
        if (!(t->flags[id] & TOK_F_ADDED) || !t->bytes_len[id]) continue;
        TokAdded *a = &t->added[t->nadded++];
        a->id = id;
        a->special = (t->flags[id] & TOK_F_SPECIAL) != 0;
        a->len = t->bytes_len[id];
        a->content = t->blob + t->bytes_off[id];
        t->added_first[(unsigned char)a->content[0]] |= a->special ? 2 : 1;
    }
    qsort(t->added, (size_t)t->nadded, sizeof *t->added, cmp_added_len);
}

static int load_added_json(KdaTokenizer *t, const JsonValue *added, KdaError *err) {
    for (size_t i = 0; added && i < added->len; i++) {
        const JsonValue *a = &added->items[i];
        const char *content = json_get_str(a, "content");
        if (!content) return kda_fail(err, "added_tokens[%zu].content: expected a string", i);
        int special = 0, flag = 0;
        json_get_bool(a, "special", &special);
        const char *unsupported[] = {"single_word", "lstrip", "rstrip"};
        for (int k = 0; k < 3; k++)
            if (!json_get_bool(a, unsupported[k], &flag) && flag)
                return kda_fail(err, "added_tokens[%zu].%s: true is not supported", i,
                                unsupported[k]);
        int64_t id;
        json_get_int(a, "id", &id); // validated in load_vocab_json
        size_t len = json_get(a, "content")->len;
        token_set(t, (int32_t)id, content, len, content, len,
                  (uint8_t)(TOK_F_ADDED | (special ? TOK_F_SPECIAL : 0)));
    }
    return 0;
}

// Reads bos_token/eos_token from tokenizer_config.json in dir, if present. Each is a string or
// {"content": ...}; null means none. *has_* tells whether the key was present at all.
static void read_config_specials(KdaTokenizer *t, const char *dir, int *has_bos, int *has_eos) {
    *has_bos = *has_eos = 0;
    if (!dir) return;
    char path[4096];
    if (!path_join(path, sizeof path, dir, "tokenizer_config.json") || !path_exists(path)) return;
    JsonDoc doc;
    KdaError e;
    if (json_parse_file(&doc, path, &e)) return;
    const char *keys[2] = {"bos_token", "eos_token"};
    int32_t *dst[2] = {&t->bos, &t->eos};
    int *has[2] = {has_bos, has_eos};
    for (int k = 0; k < 2; k++) {
        const JsonValue *v = json_get(&doc.root, keys[k]);
        if (!v) continue;
        *has[k] = 1;
        *dst[k] = -1;
        if (v->type == JSON_OBJECT) v = json_get(v, "content");
        if (v && v->type == JSON_STRING) *dst[k] = tok_token_to_id(t, v->str, v->len);
    }
    json_free(&doc);
}

// Defaults when no config names them: Llama-3 and GPT-2 conventions.
static void default_specials(KdaTokenizer *t, int has_bos, int has_eos) {
    if (!has_bos) {
        t->bos = tok_token_to_id(t, "<|begin_of_text|>", 17);
        if (t->bos < 0) t->bos = tok_token_to_id(t, "<|endoftext|>", 13);
    }
    if (!has_eos) {
        t->eos = tok_token_to_id(t, "<|end_of_text|>", 15);
        if (t->eos < 0) t->eos = tok_token_to_id(t, "<|endoftext|>", 13);
    }
}

// ----------------------------------------------------------------------------------------------
// post_processor (HF tokenizers' processors, single-sequence form).

static int post_push_(KdaTokenizer *t, int suffix, int64_t id, const char *what, KdaError *err) {
    int *n = suffix ? &t->n_post_suffix : &t->n_post_prefix;
    int32_t *dst = suffix ? t->post_suffix : t->post_prefix;
    if (id < 0 || id >= t->nvocab)
        return kda_fail(err, "post_processor: %s: id %lld is not in the vocabulary", what,
                        (long long)id);
    if (*n >= TOK_POST_MAX)
        return kda_fail(err, "post_processor: more than %d special ids on one side", TOK_POST_MAX);
    dst[(*n)++] = (int32_t)id;
    return 0;
}

// TemplateProcessing: "single" is a list of {"SpecialToken": {"id": NAME}} and one
// {"Sequence": {"id": "A"}}; special_tokens[NAME].ids are the ids NAME stands for.
static int post_template_(KdaTokenizer *t, const JsonValue *pp, KdaError *err) {
    const JsonValue *single = json_get(pp, "single"), *sp = json_get(pp, "special_tokens");
    if (!single || single->type != JSON_ARRAY)
        return kda_fail(err, "post_processor (TemplateProcessing).single: expected a list");
    int seen_seq = 0;
    for (size_t i = 0; i < single->len; i++) {
        const JsonValue *it = &single->items[i], *seq = json_get(it, "Sequence");
        const JsonValue *st = json_get(it, "SpecialToken");
        if (seq) {
            if (seen_seq++)
                return kda_fail(err, "post_processor (TemplateProcessing).single: two sequences");
            continue;
        }
        const char *name = st ? json_get_str(st, "id") : NULL;
        const JsonValue *def = name ? json_get(sp, name) : NULL;
        const JsonValue *ids = def ? json_get(def, "ids") : NULL;
        if (!ids || ids->type != JSON_ARRAY)
            return kda_fail(err,
                            "post_processor (TemplateProcessing).single[%zu]: expected a "
                            "Sequence or a SpecialToken defined in special_tokens with ids",
                            i);
        for (size_t k = 0; k < ids->len; k++) {
            if (!ids->items[k].is_int)
                return kda_fail(err, "post_processor: special_tokens.%s.ids: expected integers",
                                name);
            if (post_push_(t, seen_seq, ids->items[k].i, name, err)) return -1;
        }
    }
    if (!seen_seq)
        return kda_fail(err, "post_processor (TemplateProcessing).single: no $A sequence");
    return 0;
}

// BertProcessing / RobertaProcessing: "cls": [token, id] before, "sep": [token, id] after.
static int post_cls_sep_(KdaTokenizer *t, const JsonValue *pp, KdaError *err) {
    const char *keys[2] = {"cls", "sep"};
    for (int k = 0; k < 2; k++) {
        const JsonValue *v = json_get(pp, keys[k]);
        if (!v || v->type != JSON_ARRAY || v->len != 2 || !v->items[1].is_int)
            return kda_fail(err, "post_processor.%s: expected [token, id]", keys[k]);
        if (post_push_(t, k, v->items[1].i, keys[k], err)) return -1;
    }
    return 0;
}

static int post_parse_(KdaTokenizer *t, const JsonValue *pp, int depth, KdaError *err) {
    if (!pp || pp->type == JSON_NULL) return 0;
    const char *type = json_get_str(pp, "type");
    if (!type) return kda_fail(err, "post_processor.type: expected a string");
    size_t n = strlen(t->post_desc);
    snprintf(t->post_desc + n, sizeof t->post_desc - n, "%s%s", n ? ", " : "", type);
    if (!strcmp(type, "ByteLevel")) return 0; // offsets only, adds no ids
    if (!strcmp(type, "TemplateProcessing")) return post_template_(t, pp, err);
    if (!strcmp(type, "BertProcessing") || !strcmp(type, "RobertaProcessing"))
        return post_cls_sep_(t, pp, err);
    if (!strcmp(type, "Sequence") && depth < 4) {
        const JsonValue *ps = json_get(pp, "processors");
        if (!ps || ps->type != JSON_ARRAY)
            return kda_fail(err, "post_processor (Sequence).processors: expected a list");
        for (size_t i = 0; i < ps->len; i++)
            if (post_parse_(t, &ps->items[i], depth + 1, err)) return -1;
        return 0;
    }
    return kda_fail(err,
                    "post_processor.type: '%s' is not supported (ByteLevel, TemplateProcessing, "
                    "BertProcessing, RobertaProcessing, Sequence)",
                    type);
}

// Fills t->post_* and a description like "TemplateProcessing [128000] $A".
static int load_post_processor(KdaTokenizer *t, const JsonValue *pp, KdaError *err) {
    t->post_desc[0] = 0;
    if (post_parse_(t, pp, 0, err)) return -1;
    if (!t->post_desc[0]) {
        snprintf(t->post_desc, sizeof t->post_desc, "none");
        return 0;
    }
    size_t n = strlen(t->post_desc);
    for (int side = 0; side < 2; side++) {
        const int32_t *ids = side ? t->post_suffix : t->post_prefix;
        int cnt = side ? t->n_post_suffix : t->n_post_prefix;
        if (side) n += (size_t)snprintf(t->post_desc + n, sizeof t->post_desc - n, " $A");
        if (!cnt) continue;
        n += (size_t)snprintf(t->post_desc + n, sizeof t->post_desc - n, " [");
        for (int i = 0; i < cnt && n < sizeof t->post_desc; i++)
            n += (size_t)snprintf(t->post_desc + n, sizeof t->post_desc - n, "%s%d", i ? " " : "",
                                  (int)ids[i]);
        if (n < sizeof t->post_desc)
            n += (size_t)snprintf(t->post_desc + n, sizeof t->post_desc - n, "]");
    }
    if (!t->n_post_prefix && !t->n_post_suffix && n < sizeof t->post_desc)
        snprintf(t->post_desc + n, sizeof t->post_desc - n, " (adds no ids)");
    return 0;
}

const char *tok_post_processor(const KdaTokenizer *t, const int32_t **prefix, int *n_prefix,
                               const int32_t **suffix, int *n_suffix) {
    if (prefix) *prefix = t->post_prefix;
    if (n_prefix) *n_prefix = t->n_post_prefix;
    if (suffix) *suffix = t->post_suffix;
    if (n_suffix) *n_suffix = t->n_post_suffix;
    return t->post_desc[0] ? t->post_desc : "none";
}

int tok_post_adds_bos(const KdaTokenizer *t) {
    return t->bos >= 0 && t->n_post_prefix > 0 && t->post_prefix[0] == t->bos;
}

static int load_hf_json(KdaTokenizer *t, const char *data, size_t n, KdaError *err) {
    JsonDoc doc;
    if (json_parse(&doc, data, n, err)) return -1;
    const JsonValue *root = &doc.root, *m = json_get(root, "model");
    const JsonValue *vocab = m ? json_get(m, "vocab") : NULL;
    const JsonValue *added = json_get(root, "added_tokens");
    const JsonValue *norm = json_get(root, "normalizer");
    int rc = 0;
    if (!m || m->type != JSON_OBJECT)
        rc = kda_fail(err, "model: expected an object");
    else if (!vocab || vocab->type != JSON_OBJECT)
        rc = kda_fail(err, "model.vocab: expected an object");
    else if (added && added->type != JSON_ARRAY && added->type != JSON_NULL)
        rc = kda_fail(err, "added_tokens: expected a list");
    else if (norm && norm->type != JSON_NULL)
        rc = kda_fail(err, "normalizer: expected null (normalizers are not supported)");
    if (added && added->type != JSON_ARRAY) added = NULL;
    if (!rc) rc = check_model(t, m, err);
    if (!rc) rc = check_pretokenizer(t, json_get(root, "pre_tokenizer"), err);
    if (!rc) rc = load_vocab_json(t, vocab, added, err);
    if (!rc) rc = load_merges_json(t, json_get(m, "merges"), err);
    if (!rc) rc = load_added_json(t, added, err);
    if (!rc) rc = load_post_processor(t, json_get(root, "post_processor"), err);
    json_free(&doc);
    return rc;
}

// ----------------------------------------------------------------------------------------------
// tiktoken: "base64(bytes) rank" per line; rank == id; merges by rank of the concatenation.

static int b64_value(unsigned char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

// Decodes s[0..n) (padded base64) into out; returns the byte count or -1.
static long b64_decode(const char *s, size_t n, char *out) {
    if (n % 4) return -1;
    long o = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4], pad = 0;
        for (int k = 0; k < 4; k++) {
            unsigned char c = (unsigned char)s[i + k];
            if (c == '=' && i + 4 == n && k >= 2) {
                v[k] = 0;
                pad++;
            } else if (pad || (v[k] = b64_value(c)) < 0) {
                return -1;
            }
        }
        uint32_t w = (uint32_t)(v[0] << 18 | v[1] << 12 | v[2] << 6 | v[3]);
        out[o++] = (char)(w >> 16);
        if (pad < 2) out[o++] = (char)(w >> 8);
        if (pad < 1) out[o++] = (char)w;
    }
    return o;
}

typedef struct {
    size_t b64_off, b64_len;
    int64_t rank;
} TikLine;

static int parse_tiktoken_lines(const char *data, size_t n, TikLine **out, size_t *count,
                                int64_t *maxrank, KdaError *err) {
    size_t cap = 1024, cnt = 0;
    TikLine *lines = kda_malloc(cap * sizeof *lines);
    *maxrank = -1;
    for (size_t i = 0, lineno = 1; i < n; lineno++) {
        size_t e = i;
        while (e < n && data[e] != '\n')
            e++;
        size_t end = e;
        if (end > i && data[end - 1] == '\r') end--;
        if (end > i) {
            const char *sp = memchr(data + i, ' ', end - i);
            char num[24];
            size_t nl = sp ? (size_t)(data + end - sp - 1) : 0;
            int64_t r = -1;
            if (sp && nl > 0 && nl < sizeof num) {
                memcpy(num, sp + 1, nl);
                num[nl] = 0;
                char *ep;
                long long v = strtoll(num, &ep, 10);
                if (*ep == 0 && isdigit((unsigned char)num[0])) r = v;
            }
            if (r < 0 || r >= TOK_MAX_VOCAB) {
                free(lines);
                return kda_fail(err,
                                "line %zu: expected \"<base64> <rank>\" with rank in "
                                "[0, %d)",
                                lineno, TOK_MAX_VOCAB);
            }
            if (cnt == cap) lines = kda_realloc(lines, (cap *= 2) * sizeof *lines);
            lines[cnt++] = (TikLine){(size_t)i, (size_t)(sp - data - (long)i), r};
            if (r > *maxrank) *maxrank = r;
        }
        i = e + 1;
    }
    if (!cnt) {
        free(lines);
        return kda_fail(err, "no tokens (expected \"<base64> <rank>\" lines)");
    }
    *out = lines;
    *count = cnt;
    return 0;
}

static int load_tiktoken(KdaTokenizer *t, const char *data, size_t n, KdaError *err) {
    TikLine *lines = NULL;
    size_t cnt = 0;
    int64_t maxrank = -1;
    if (parse_tiktoken_lines(data, n, &lines, &cnt, &maxrank, err)) return -1;
    table_alloc(t, (int32_t)(maxrank + 1));
    t->ignore_merges = 1; // tiktoken emits a piece that is itself a token directly
    t->pretok = TOK_PRE_LLAMA3;
    char *buf = NULL;
    size_t cap = 0;
    for (size_t i = 0; i < cnt; i++) {
        if (lines[i].b64_len + 1 > cap) buf = kda_realloc(buf, cap = 2 * lines[i].b64_len + 1);
        long nb = b64_decode(data + lines[i].b64_off, lines[i].b64_len, buf);
        int32_t id = (int32_t)lines[i].rank;
        if (nb <= 0 || (t->flags[id] & TOK_F_PRESENT)) {
            free(buf);
            free(lines);
            return kda_fail(err, "line %zu: %s", i + 1,
                            nb <= 0 ? "bad base64 token" : "duplicate rank");
        }
        token_set(t, id, buf, (size_t)nb, NULL, 0, 0);
    }
    free(buf);
    free(lines);
    for (int32_t id = 0; id < t->nvocab; id++)
        if (t->flags[id] & TOK_F_PRESENT) vocab_insert(t, id);
    // Pair map: every split of a token into two tokens merges with the token's rank.
    size_t npairs = 0;
    for (int32_t id = 0; id < t->nvocab; id++)
        if (t->bytes_len[id] > 1) npairs += t->bytes_len[id] - 1;
    pairs_init(t, npairs);
    for (int32_t id = 0; id < t->nvocab; id++) {
        const char *s = t->blob + t->bytes_off[id];
        size_t len = t->bytes_len[id];
        for (size_t k = 1; k < len; k++) {
            int32_t a = tok_vocab_find(t, s, k, tok_hash_bytes(s, k));
            int32_t b =
                a < 0 ? -1 : tok_vocab_find(t, s + k, len - k, tok_hash_bytes(s + k, len - k));
            if (a >= 0 && b >= 0) pairs_insert(t, a, b, id, id, 0);
        }
    }
    return 0;
}

// Added tokens for a tiktoken file from a sibling tokenizer_config.json's added_tokens_decoder
// ({"<id>": {"content": ..., "special": ...}}). The table grows to cover their ids.
static int load_config_added(KdaTokenizer *t, const char *dir, KdaError *err) {
    char path[4096];
    if (!dir || !path_join(path, sizeof path, dir, "tokenizer_config.json") || !path_exists(path))
        return 0;
    JsonDoc doc;
    if (json_parse_file(&doc, path, err)) return -1;
    const JsonValue *dec = json_get(&doc.root, "added_tokens_decoder");
    int rc = 0;
    int32_t maxid = t->nvocab - 1;
    for (size_t i = 0; dec && dec->type == JSON_OBJECT && i < dec->len; i++) {
        long long id = strtoll(dec->keys[i], NULL, 10);
        if (id < 0 || id >= TOK_MAX_VOCAB || !json_get_str(&dec->items[i], "content")) {
            rc = kda_fail(err, "%s: added_tokens_decoder[\"%s\"]: bad entry", path, dec->keys[i]);
            break;
        }
        if (id > maxid) maxid = (int32_t)id;
    }
    if (!rc && maxid >= t->nvocab) { // grow the per-id arrays
        int32_t old = t->nvocab;
        size_t nv = (size_t)maxid + 1;
        t->bytes_off = kda_realloc(t->bytes_off, nv * sizeof *t->bytes_off);
        t->spell_off = kda_realloc(t->spell_off, nv * sizeof *t->spell_off);
        t->bytes_len = kda_realloc(t->bytes_len, nv * sizeof *t->bytes_len);
        t->spell_len = kda_realloc(t->spell_len, nv * sizeof *t->spell_len);
        t->flags = kda_realloc(t->flags, nv);
        size_t extra = nv - (size_t)old;
        memset(t->bytes_off + old, 0, extra * sizeof *t->bytes_off);
        memset(t->spell_off + old, 0, extra * sizeof *t->spell_off);
        memset(t->bytes_len + old, 0, extra * sizeof *t->bytes_len);
        memset(t->spell_len + old, 0, extra * sizeof *t->spell_len);
        memset(t->flags + old, 0, extra);
        t->nvocab = (int32_t)nv;
    }
    for (size_t i = 0; !rc && dec && dec->type == JSON_OBJECT && i < dec->len; i++) {
        const JsonValue *c = json_get(&dec->items[i], "content");
        int special = 0;
        json_get_bool(&dec->items[i], "special", &special);
        int32_t id = (int32_t)strtoll(dec->keys[i], NULL, 10);
        token_set(t, id, c->str, c->len, c->str, c->len,
                  (uint8_t)(TOK_F_ADDED | (special ? TOK_F_SPECIAL : 0)));
    }
    json_free(&doc);
    return rc;
}

// ----------------------------------------------------------------------------------------------
// Public API.

static uint64_t g_serial;

int tok_load_buffer(KdaTokenizer **out, const char *data, size_t n, TokFormat fmt, const char *dir,
                    KdaError *err) {
    *out = NULL;
    byte_alphabet_init();
    if (fmt == TOK_FORMAT_AUTO) {
        size_t i = 0;
        while (i < n && isspace((unsigned char)data[i]))
            i++;
        fmt = i < n && data[i] == '{' ? TOK_FORMAT_HF_JSON : TOK_FORMAT_TIKTOKEN;
    }
    KdaTokenizer *t = kda_calloc(1, sizeof *t);
    t->serial = __atomic_add_fetch(&g_serial, 1, __ATOMIC_RELAXED);
    t->bos = t->eos = -1;
    int rc;
    if (fmt == TOK_FORMAT_HF_JSON) {
        rc = load_hf_json(t, data, n, err);
    } else {
        rc = load_tiktoken(t, data, n, err);
        if (!rc) rc = load_config_added(t, dir, err);
    }
    if (rc) {
        tok_free(t);
        return -1;
    }
    finish_byte_ids(t);
    finish_added(t);
    int has_bos, has_eos;
    read_config_specials(t, dir, &has_bos, &has_eos);
    default_specials(t, has_bos, has_eos);
    *out = t;
    return 0;
}

int tok_load(KdaTokenizer **out, const char *path, KdaError *err) {
    *out = NULL;
    size_t n;
    char *data = read_file(path, &n, err);
    if (!data) return -1;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = 0;
    else
        snprintf(dir, sizeof dir, ".");
    KdaError e2;
    int rc = tok_load_buffer(out, data, n, TOK_FORMAT_AUTO, dir, &e2);
    free(data);
    if (rc) return kda_fail(err, "%s: %s", path, e2.msg);
    return 0;
}

void tok_free(KdaTokenizer *t) {
    if (!t) return;
    free(t->bytes_off);
    free(t->spell_off);
    free(t->bytes_len);
    free(t->spell_len);
    free(t->flags);
    free(t->blob);
    free(t->vocab.slots);
    free(t->merges.slots);
    free(t->added);
    free(t);
}

int32_t tok_vocab_size(const KdaTokenizer *t) {
    return t->nvocab;
}
int32_t tok_bos_id(const KdaTokenizer *t) {
    return t->bos;
}
int32_t tok_eos_id(const KdaTokenizer *t) {
    return t->eos;
}

int tok_is_special(const KdaTokenizer *t, int32_t id) {
    return id >= 0 && id < t->nvocab && (t->flags[id] & TOK_F_SPECIAL);
}

int32_t tok_token_to_id(const KdaTokenizer *t, const char *s, size_t len) {
    for (int32_t i = 0; i < t->nadded; i++)
        if (t->added[i].len == len && !memcmp(t->added[i].content, s, len)) return t->added[i].id;
    char small[256];
    char *buf = len <= sizeof small ? small : kda_malloc(len);
    int32_t id = spelled_id(t, s, len, buf);
    if (buf != small) free(buf);
    return id;
}

const char *tok_id_to_token(const KdaTokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->nvocab || !(t->flags[id] & TOK_F_PRESENT)) return NULL;
    if (len) *len = t->spell_len[id];
    return t->blob + t->spell_off[id];
}

const char *tok_token_bytes(const KdaTokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->nvocab || !(t->flags[id] & TOK_F_PRESENT)) return NULL;
    if (len) *len = t->bytes_len[id];
    return t->blob + t->bytes_off[id];
}

void tok_ids_free(TokIds *ids) {
    free(ids->ids);
    *ids = (TokIds){0};
}

void tok_bytes_free(TokBytes *b) {
    free(b->data);
    *b = (TokBytes){0};
}
