// config.c - KDA config.json: FLA defaults, strict typed reading, derived dims, FLA-format writing,
// equality and the first difference, all driven by one key table (g_keys).
//
// Reading is strict about the keys we know (type and range, one error line naming the file and
// the key) and lenient about keys we don't (HF base-config keys; a warning lists them). A file
// with several bad keys reports the first in the table's (config.json's written) order.
#include "model/config.h"

#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"     // defines: kda_warn
#include "core/util.h"    // defines: open_atomic, commit_atomic, path_is_dir, path_join
#include "model/params.h" // defines: kda_params_count

// ---------------------------------------------------------------------------------------------
// The key table: one row per FLA config.json key drives the defaults, reading, the known keys,
// writing (rows in the order FLA writes them, data-formats.md §5.2), equality, kda_config_diff
// and the size limits. Adding a key is one row (and its field in config.h).

typedef enum {
    CK_STR,     // char[] field: a short string
    CK_INT,     // int64_t field: an integer >= min
    CK_INT_RAW, // int64_t field, 0 when null in the file (num_v_heads, intermediate_size)
    CK_INT_OPT, // int64_t field + int presence flag: an integer >= min, or null
    CK_BOOL,    // int field: true / false
    CK_NUM,     // double field: a finite number
    CK_NUM_OPT, // double field + int presence flag: a number, or null (lower_bound)
    CK_NULL,    // no field: must be absent or null (an FLA option kda.c does not implement)
} CfgType;

typedef struct {
    const char *key; // config.json name
    CfgType type;
    size_t off;        // the value field (CK_NULL: unused)
    size_t size;       // CK_STR: the field's capacity in bytes
    size_t has_off;    // CK_*_OPT: the presence flag
    const char *field; // the value field's name (kda_config_diff's messages name it)
    int64_t min;       // CK_INT*: smallest accepted value (1: positive, 0: non-negative)
    int64_t max;       // CK_INT / CK_INT_RAW: largest accepted value (kda_config_derive), 0: none
    int64_t def_i;     // default: CK_INT*, CK_BOOL
    double def_d;      // default: CK_NUM
    const char *def_s; // default: CK_STR; CK_NULL / CK_NUM_OPT: what the key is, for errors
    int def_has;       // default presence: CK_*_OPT
    int in_diff;       // 0: compared by kda_config_equal only (use_cache does not change weights)
} CfgKey;

// Upper bounds of the sizes (docs/reliability.md): far above any real model, low enough that
// every product the parameter table and the model form fits int64 (hidden * key_dim <= 2^41,
// times layers <= 2^53) and an absurd file fails here, before any allocation.
#define MAX_HIDDEN       ((int64_t)1 << 17)
#define MAX_HEADS        ((int64_t)1 << 12)
#define MAX_HEAD_DIM     ((int64_t)1 << 12)
#define MAX_LAYERS       ((int64_t)1 << 12)
#define MAX_INTERMEDIATE ((int64_t)1 << 20)
#define MAX_VOCAB        ((int64_t)INT32_MAX) // token ids are int32
#define MAX_CONV         ((int64_t)1 << 10)
#define MAX_PARAMS       ((int64_t)1 << 38) // 275e9 parameters, 1 TiB of fp32 weights

#define OFF(f) offsetof(KdaConfig, f)
#define K_STR(k, def)                                                                              \
    { #k, CK_STR, OFF(k), sizeof(((KdaConfig *)0)->k), 0, #k, 0, 0, 0, 0, def, 0, 1 }
#define K_INT(k, max, def)                                                                         \
    { #k, CK_INT, OFF(k), 0, 0, #k, 1, max, def, 0, NULL, 0, 1 }
#define K_RAW(k, f, max)                                                                           \
    { #k, CK_INT_RAW, OFF(f), 0, 0, #f, 1, max, 0, 0, NULL, 0, 1 }
#define K_OPT(k, has, has_def, def)                                                                \
    { #k, CK_INT_OPT, OFF(k), 0, OFF(has), #k, 0, 0, def, 0, NULL, has_def, 1 }
#define K_BOOL(k, def, in_diff)                                                                    \
    { #k, CK_BOOL, OFF(k), 0, 0, #k, 0, 0, def, 0, NULL, 0, in_diff }
#define K_NUM(k, def)                                                                              \
    { #k, CK_NUM, OFF(k), 0, 0, #k, 0, 0, 0, def, NULL, 0, 1 }
#define K_NUM_OPT(k, has, what)                                                                    \
    { #k, CK_NUM_OPT, OFF(k), 0, OFF(has), #k, 0, 0, 0, 0, what, 0, 1 }
#define K_NULL(k, what)                                                                            \
    { #k, CK_NULL, 0, 0, 0, #k, 0, 0, 0, 0, what, 0, 0 }

// Rows: K_STR(key, default), K_INT(key, max, default) (a positive integer), K_RAW(key, field,
// max) (positive or null, null by default), K_OPT(key, presence field, default presence,
// default), K_BOOL(key, default, in kda_config_diff), K_NUM(key, default), K_NUM_OPT(key,
// presence field, expected text), K_NULL(key, what is unsupported). Defaults are FLA's
// KDAConfig constructor's (kda-model.md §1.1).
static const CfgKey g_keys[] = {
    K_STR(attn_mode, "chunk"),
    K_INT(hidden_size, MAX_HIDDEN, 2048),
    K_INT(num_hidden_layers, MAX_LAYERS, 24),
    K_INT(num_heads, MAX_HEADS, 16),
    K_RAW(num_v_heads, num_v_heads_raw, MAX_HEADS),
    K_INT(head_dim, MAX_HEAD_DIM, 128),
    K_NUM(expand_v, 1.0),
    K_BOOL(use_short_conv, 1, 1),
    K_INT(conv_size, MAX_CONV, 4),
    K_BOOL(allow_neg_eigval, 0, 1),
    K_BOOL(safe_gate, 0, 1),
    K_NUM_OPT(lower_bound, has_lower_bound, "a negative number or null"),
    K_INT(hidden_ratio, MAX_HEADS, 4),
    K_RAW(intermediate_size, intermediate_size_raw, MAX_INTERMEDIATE),
    K_STR(hidden_act, "swish"),
    K_INT(max_position_embeddings, 0, 2048),
    K_NUM(norm_eps, 1e-6),
    K_NULL(attn, "hybrid softmax-attention layers"),
    K_NULL(attnres_block_size, "attention residuals (attnres)"),
    K_BOOL(use_cache, 1, 0),
    K_NUM(initializer_range, 0.02),
    K_BOOL(fuse_norm, 1, 1),
    K_BOOL(fuse_swiglu, 1, 1),
    K_BOOL(fuse_cross_entropy, 1, 1),
    K_BOOL(use_l2warp, 0, 1),
    K_INT(vocab_size, MAX_VOCAB, 32000),
    K_BOOL(tie_word_embeddings, 0, 1),
    K_OPT(bos_token_id, has_bos_token_id, 1, 1),
    K_OPT(eos_token_id, has_eos_token_id, 1, 2),
    K_OPT(pad_token_id, has_pad_token_id, 0, 0),
};
#undef K_STR
#undef K_INT
#undef K_RAW
#undef K_OPT
#undef K_BOOL
#undef K_NUM
#undef K_NUM_OPT
#undef K_NULL
#undef OFF
#define N_KEYS (sizeof g_keys / sizeof *g_keys)

// Keys outside the table that reading accepts: the identity, the dtype and HF bookkeeping.
static const char *const g_other_keys[] = {
    "model_type", "architectures", "torch_dtype", "dtype", "transformers_version", "_name_or_path",
};

// Typed views of a row's fields in a config (the const is the caller's: readers pass a config
// they own, writers and comparers only read through these).
static int64_t *i64_at(const KdaConfig *c, size_t off) {
    return (int64_t *)((char *)c + off);
}
static int *int_at(const KdaConfig *c, size_t off) {
    return (int *)((char *)c + off);
}
static double *num_at(const KdaConfig *c, size_t off) {
    return (double *)((char *)c + off);
}
static char *str_at(const KdaConfig *c, size_t off) {
    return (char *)c + off;
}

void kda_config_defaults(KdaConfig *c) {
    memset(c, 0, sizeof *c);
    for (size_t k = 0; k < N_KEYS; k++) {
        const CfgKey *d = &g_keys[k];
        switch (d->type) {
        case CK_STR:
            snprintf(str_at(c, d->off), d->size, "%s", d->def_s);
            break;
        case CK_INT:
        case CK_INT_RAW:
            *i64_at(c, d->off) = d->def_i;
            break;
        case CK_INT_OPT:
            *i64_at(c, d->off) = d->def_i;
            *int_at(c, d->has_off) = d->def_has;
            break;
        case CK_BOOL:
            *int_at(c, d->off) = (int)d->def_i;
            break;
        case CK_NUM:
            *num_at(c, d->off) = d->def_d;
            break;
        case CK_NUM_OPT: // absent (null) by default: memset
        case CK_NULL:
            break;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Typed key readers: each leaves the field unchanged when the key is absent.

// Short description of a JSON value for error messages: `"abc"`, `8.5`, `null`, `an array`.
static const char *describe(const JsonValue *v, char *buf, size_t cap) {
    switch (v->type) {
    case JSON_NULL:
        return "null";
    case JSON_TRUE:
        return "true";
    case JSON_FALSE:
        return "false";
    case JSON_NUMBER:
        if (v->is_int)
            snprintf(buf, cap, "%lld", (long long)v->i);
        else
            snprintf(buf, cap, "%.17g", v->num);
        return buf;
    case JSON_STRING: {
        char sv[200];
        snprintf(buf, cap, "\"%s\"", str_shown(v->str, v->len, 40, sv, sizeof sv));
        return buf;
    }
    case JSON_ARRAY:
        return "an array";
    case JSON_OBJECT:
        return "an object";
    }
    return "?";
}

static int bad_key(const char *src, const char *key, const char *expected, const JsonValue *v,
                   KdaError *err) {
    char buf[210];
    return kda_fail(err, "%s: key '%s': expected %s, got %s", src, key, expected,
                    describe(v, buf, sizeof buf));
}

// Integer-valued number (an exact int64 or a float with no fraction), else -1.
static int as_int(const JsonValue *v, int64_t *out) {
    if (v->type != JSON_NUMBER) return -1;
    if (v->is_int)
        *out = v->i;
    else if (v->num == floor(v->num) && fabs(v->num) < 9e15)
        *out = (int64_t)v->num;
    else
        return -1;
    return 0;
}

// min_value: smallest accepted value (1 for "positive", 0 for "non-negative").
static int read_int(const JsonValue *root, const char *key, int64_t min_value, int64_t *out,
                    const char *src, KdaError *err) {
    const JsonValue *v = json_get(root, key);
    if (!v) return 0;
    int64_t x;
    if (as_int(v, &x) < 0 || x < min_value)
        return bad_key(src, key, min_value > 0 ? "a positive integer" : "a non-negative integer", v,
                       err);
    *out = x;
    return 0;
}

// Integer or null; *has = 0 for null.
static int read_int_or_null(const JsonValue *root, const char *key, int64_t min_value, int64_t *out,
                            int *has, const char *src, KdaError *err) {
    const JsonValue *v = json_get(root, key);
    if (!v) return 0;
    if (v->type == JSON_NULL) {
        *has = 0;
        return 0;
    }
    int64_t x;
    if (as_int(v, &x) < 0 || x < min_value)
        return bad_key(src, key,
                       min_value > 0 ? "a positive integer or null"
                                     : "a non-negative integer or null",
                       v, err);
    *out = x;
    *has = 1;
    return 0;
}

static int read_num(const JsonValue *root, const char *key, double *out, const char *src,
                    KdaError *err) {
    const JsonValue *v = json_get(root, key);
    if (!v) return 0;
    if (v->type != JSON_NUMBER || !isfinite(v->num)) return bad_key(src, key, "a number", v, err);
    *out = v->num;
    return 0;
}

static int read_bool(const JsonValue *root, const char *key, int *out, const char *src,
                     KdaError *err) {
    const JsonValue *v = json_get(root, key);
    if (!v) return 0;
    if (v->type != JSON_TRUE && v->type != JSON_FALSE)
        return bad_key(src, key, "true or false", v, err);
    *out = v->type == JSON_TRUE;
    return 0;
}

static int read_str(const JsonValue *root, const char *key, char *out, size_t cap, const char *src,
                    KdaError *err) {
    const JsonValue *v = json_get(root, key);
    if (!v) return 0;
    if (v->type != JSON_STRING || v->len >= cap || strlen(v->str) != v->len)
        return bad_key(src, key, "a short string", v, err);
    memcpy(out, v->str, v->len + 1);
    return 0;
}

// Keys that must be absent or null: options of FLA's KDA config that we do not implement.
static int read_must_be_null(const JsonValue *root, const char *key, const char *what,
                             const char *src, KdaError *err) {
    const JsonValue *v = json_get(root, key);
    if (!v || v->type == JSON_NULL) return 0;
    char buf[210];
    return kda_fail(err, "%s: key '%s': %s are not supported (expected null, got %s)", src, key,
                    what, describe(v, buf, sizeof buf));
}

// A number or null into a presence flag and a value (lower_bound).
static int read_num_or_null(const JsonValue *root, const CfgKey *d, KdaConfig *c, const char *src,
                            KdaError *err) {
    const JsonValue *v = json_get(root, d->key);
    if (!v) return 0;
    if (v->type == JSON_NULL)
        *int_at(c, d->has_off) = 0;
    else if (v->type == JSON_NUMBER && isfinite(v->num))
        *int_at(c, d->has_off) = 1, *num_at(c, d->off) = v->num;
    else
        return bad_key(src, d->key, d->def_s, v, err);
    return 0;
}

// One table row from the file into c (c unchanged when the key is absent).
static int read_key(const CfgKey *d, KdaConfig *c, const JsonValue *r, const char *src,
                    KdaError *err) {
    int has;
    switch (d->type) {
    case CK_STR:
        return read_str(r, d->key, str_at(c, d->off), d->size, src, err);
    case CK_INT:
        return read_int(r, d->key, d->min, i64_at(c, d->off), src, err);
    case CK_INT_RAW:
        has = 1;
        if (read_int_or_null(r, d->key, d->min, i64_at(c, d->off), &has, src, err)) return -1;
        if (!has) *i64_at(c, d->off) = 0;
        return 0;
    case CK_INT_OPT:
        return read_int_or_null(r, d->key, d->min, i64_at(c, d->off), int_at(c, d->has_off), src,
                                err);
    case CK_BOOL:
        return read_bool(r, d->key, int_at(c, d->off), src, err);
    case CK_NUM:
        return read_num(r, d->key, num_at(c, d->off), src, err);
    case CK_NUM_OPT:
        return read_num_or_null(r, d, c, src, err);
    case CK_NULL:
        return read_must_be_null(r, d->key, d->def_s, src, err);
    }
    return 0;
}

static int known_key(const char *key) {
    for (size_t k = 0; k < N_KEYS; k++)
        if (!strcmp(key, g_keys[k].key)) return 1;
    for (size_t k = 0; k < sizeof g_other_keys / sizeof *g_other_keys; k++)
        if (!strcmp(key, g_other_keys[k])) return 1;
    return 0;
}

static void warn_unknown_keys(const JsonValue *root, const char *src) {
    char list[512] = "";
    size_t used = 0;
    int n = 0;
    for (size_t i = 0; i < root->len; i++) {
        if (known_key(root->keys[i])) continue;
        if (used < sizeof list - 64)
            used += (size_t)snprintf(list + used, sizeof list - used, "%s'%s'", n ? ", " : "",
                                     root->keys[i]);
        n++;
    }
    if (n) kda_warn("%s: ignoring %d unknown key%s: %s", src, n, n > 1 ? "s" : "", list);
}

// torch_dtype (newer transformers write "dtype"): kept as read, not part of the model's identity.
static int read_dtype(KdaConfig *c, const JsonValue *r, const char *src, KdaError *err) {
    const char *dkey = json_get(r, "torch_dtype") ? "torch_dtype" : "dtype";
    const JsonValue *dt = json_get(r, dkey);
    if (!dt || dt->type == JSON_NULL) return 0;
    return read_str(r, dkey, c->torch_dtype, sizeof c->torch_dtype, src, err);
}

int kda_config_from_json(KdaConfig *c, const JsonValue *root, const char *src, KdaError *err) {
    if (root->type != JSON_OBJECT)
        return kda_fail(err, "%s: expected a JSON object, got %s", src, json_type_name(root->type));
    const JsonValue *mt = json_get(root, "model_type");
    if (!mt) return kda_fail(err, "%s: key 'model_type': missing (expected \"kda\")", src);
    if (mt->type != JSON_STRING || strcmp(mt->str, "kda") != 0)
        return bad_key(src, "model_type", "\"kda\"", mt, err);
    kda_config_defaults(c);
    for (size_t k = 0; k < N_KEYS; k++)
        if (read_key(&g_keys[k], c, root, src, err)) return -1;
    if (read_dtype(c, root, src, err)) return -1;
    warn_unknown_keys(root, src);
    return kda_config_derive(c, src, err);
}

int kda_config_load(KdaConfig *c, const char *path, KdaError *err) {
    char file[4096];
    if (path_is_dir(path))
        path_join(file, sizeof file, path, "config.json");
    else
        snprintf(file, sizeof file, "%s", path);
    JsonDoc doc;
    if (json_parse_file(&doc, file, err) < 0) return -1;
    KdaConfig tmp;
    int rc = kda_config_from_json(&tmp, &doc.root, file, err);
    json_free(&doc);
    if (rc == 0) *c = tmp; // leave *c unchanged on error
    return rc;
}

// ---------------------------------------------------------------------------------------------
// Derived sizes and validation (kda-model.md §1.1, §5.6, §5.8, §9.1)

static int64_t round_up(int64_t x, int64_t m) {
    return (x + m - 1) / m * m;
}

static int check_max_(const char *src, const char *key, int64_t v, int64_t max, KdaError *err) {
    if (v <= max) return 0;
    return kda_fail(err, "%s: key '%s': %lld exceeds the limit %lld", src, key, (long long)v,
                    (long long)max);
}

static int check_sizes_(const KdaConfig *c, const char *src, KdaError *err) {
    for (size_t k = 0; k < N_KEYS; k++)
        if (g_keys[k].max &&
            check_max_(src, g_keys[k].key, *i64_at(c, g_keys[k].off), g_keys[k].max, err))
            return -1;
    if (!(c->expand_v <= (double)MAX_HEAD_DIM))
        return kda_fail(err, "%s: key 'expand_v': %g exceeds the limit %lld", src, c->expand_v,
                        (long long)MAX_HEAD_DIM);
    return 0;
}

int kda_config_derive(KdaConfig *c, const char *src, KdaError *err) {
    char sv[200]; // a string value as shown in a message
    if (strcmp(c->attn_mode, "chunk") != 0 && strcmp(c->attn_mode, "fused_recurrent") != 0)
        return kda_fail(
            err, "%s: key 'attn_mode': expected \"chunk\" or \"fused_recurrent\", got \"%s\"", src,
            str_shown(c->attn_mode, strlen(c->attn_mode), 40, sv, sizeof sv));
    if (strcmp(c->hidden_act, "swish") != 0 && strcmp(c->hidden_act, "silu") != 0)
        return kda_fail(err, "%s: key 'hidden_act': expected \"swish\" or \"silu\", got \"%s\"",
                        src, str_shown(c->hidden_act, strlen(c->hidden_act), 40, sv, sizeof sv));
    if (c->hidden_size <= 0 || c->num_heads <= 0 || c->head_dim <= 0 || c->num_hidden_layers <= 0 ||
        c->vocab_size <= 0 || c->conv_size <= 0)
        return kda_fail(err,
                        "%s: hidden_size, num_heads, head_dim, num_hidden_layers, "
                        "vocab_size and conv_size must be positive",
                        src);
    if (!(c->norm_eps > 0))
        return kda_fail(err, "%s: key 'norm_eps': expected > 0, got %g", src, c->norm_eps);
    if (!(c->initializer_range >= 0))
        return kda_fail(err, "%s: key 'initializer_range': expected >= 0, got %g", src,
                        c->initializer_range);
    if (!(c->expand_v > 0))
        return kda_fail(err, "%s: key 'expand_v': expected > 0, got %g", src, c->expand_v);
    if (check_sizes_(c, src, err)) return -1;

    c->num_v_heads = c->num_v_heads_raw > 0 ? c->num_v_heads_raw : c->num_heads;
    if (c->num_v_heads % c->num_heads != 0)
        return kda_fail(err, "%s: key 'num_v_heads': %lld is not a multiple of num_heads %lld", src,
                        (long long)c->num_v_heads, (long long)c->num_heads);
    // V = int(K * expand_v): Python truncation toward zero (both positive here)
    c->head_v_dim = (int64_t)((double)c->head_dim * c->expand_v);
    if (c->head_v_dim <= 0)
        return kda_fail(err, "%s: key 'expand_v': head_dim*expand_v = %g gives an empty value head",
                        src, (double)c->head_dim * c->expand_v);
    // I = int(D * hidden_ratio * 2 / 3) rounded up to a multiple of 256 (FLA GatedMLP)
    c->intermediate_size =
        c->intermediate_size_raw > 0
            ? c->intermediate_size_raw
            : round_up((int64_t)((double)c->hidden_size * (double)c->hidden_ratio * 2.0 / 3.0),
                       256);

    if (c->has_lower_bound && !(c->lower_bound < 0))
        return kda_fail(err, "%s: key 'lower_bound': expected a negative number, got %g", src,
                        c->lower_bound);
    if (c->safe_gate && !c->has_lower_bound)
        return kda_fail(err, "%s: key 'safe_gate': true requires lower_bound (e.g. -5), got null",
                        src);
    if (c->safe_gate && !(c->lower_bound >= -5.0 && c->lower_bound < 0))
        return kda_fail(err,
                        "%s: key 'lower_bound': safe_gate requires -5 <= lower_bound < 0, got %g",
                        src, c->lower_bound);
    if (c->has_pad_token_id && c->pad_token_id >= c->vocab_size)
        return kda_fail(err, "%s: key 'pad_token_id': %lld is not below vocab_size %lld", src,
                        (long long)c->pad_token_id, (long long)c->vocab_size);

    c->key_dim = c->num_heads * c->head_dim;
    c->value_dim = c->num_v_heads * c->head_v_dim;
    c->gate_dim = c->num_v_heads * c->head_dim;
    int64_t np = kda_params_count(c);
    if (np > MAX_PARAMS)
        return kda_fail(err,
                        "%s: the model has %lld parameters (vocab_size %lld x hidden_size %lld "
                        "...), above the limit %lld",
                        src, (long long)np, (long long)c->vocab_size, (long long)c->hidden_size,
                        (long long)MAX_PARAMS);
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Writing (data-formats.md §5.2 key order)

// Shortest "%.*g" that reads back to the same double; always has a '.' or an exponent so that
// Python reads a float (expand_v 2 -> "2.0", as FLA writes it).
static void write_float(FILE *f, double x) {
    char buf[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, x);
        if (strtod(buf, NULL) == x) break;
    }
    if (!strpbrk(buf, ".eEn")) strcat(buf, ".0");
    fputs(buf, f);
}

// One table row as `  "key": value` (no separator).
static void write_key(FILE *f, const CfgKey *d, const KdaConfig *c) {
    fprintf(f, "  \"%s\": ", d->key);
    switch (d->type) {
    case CK_STR:
        json_write_string(f, str_at(c, d->off), strlen(str_at(c, d->off)));
        return;
    case CK_INT:
        fprintf(f, "%lld", (long long)*i64_at(c, d->off));
        return;
    case CK_INT_RAW:
        if (*i64_at(c, d->off) > 0)
            fprintf(f, "%lld", (long long)*i64_at(c, d->off));
        else
            fputs("null", f);
        return;
    case CK_INT_OPT:
        if (*int_at(c, d->has_off))
            fprintf(f, "%lld", (long long)*i64_at(c, d->off));
        else
            fputs("null", f);
        return;
    case CK_BOOL:
        fputs(*int_at(c, d->off) ? "true" : "false", f);
        return;
    case CK_NUM:
        write_float(f, *num_at(c, d->off));
        return;
    case CK_NUM_OPT:
        if (*int_at(c, d->has_off))
            write_float(f, *num_at(c, d->off));
        else
            fputs("null", f);
        return;
    case CK_NULL:
        fputs("null", f);
        return;
    }
}

static void write_body(FILE *f, const KdaConfig *c, const char *dtype) {
    fputs("{\n  \"architectures\": [\"KDAForCausalLM\"],\n  \"model_type\": \"kda\",\n", f);
    for (size_t k = 0; k < N_KEYS; k++) {
        if (k) fputs(",\n", f);
        write_key(f, &g_keys[k], c);
    }
    if (dtype && *dtype)
        fputs(",\n  \"torch_dtype\": ", f), json_write_string(f, dtype, strlen(dtype));
    fputs("\n}\n", f);
}

int kda_config_save(const KdaConfig *c, const char *path, const char *torch_dtype, KdaError *err) {
    char tmp[4096];
    FILE *f = open_atomic(path, tmp, err);
    if (!f) return -1;
    write_body(f, c, torch_dtype ? torch_dtype : c->torch_dtype);
    if (ferror(f)) {
        abort_atomic(f, tmp);
        return kda_fail(err, "%s: write failed", path);
    }
    return commit_atomic(f, tmp, path, err);
}

// ---------------------------------------------------------------------------------------------
// Equality and the first difference

// 1 when row d holds different values in a and b (an absent optional equals any other absent).
static int key_differs(const CfgKey *d, const KdaConfig *a, const KdaConfig *b) {
    switch (d->type) {
    case CK_STR:
        return strcmp(str_at(a, d->off), str_at(b, d->off)) != 0;
    case CK_INT:
    case CK_INT_RAW:
        return *i64_at(a, d->off) != *i64_at(b, d->off);
    case CK_INT_OPT:
        return *int_at(a, d->has_off) != *int_at(b, d->has_off) ||
               (*int_at(a, d->has_off) && *i64_at(a, d->off) != *i64_at(b, d->off));
    case CK_BOOL:
        return *int_at(a, d->off) != *int_at(b, d->off);
    case CK_NUM:
        return *num_at(a, d->off) != *num_at(b, d->off);
    case CK_NUM_OPT:
        return *int_at(a, d->has_off) != *int_at(b, d->has_off) ||
               (*int_at(a, d->has_off) && *num_at(a, d->off) != *num_at(b, d->off));
    case CK_NULL:
        return 0;
    }
    return 0;
}

// "field: A vs B" of a row that differs.
static void key_diff_text(const CfgKey *d, const KdaConfig *a, const KdaConfig *b, char *out,
                          size_t cap) {
    switch (d->type) {
    case CK_STR:
        snprintf(out, cap, "%s: \"%s\" vs \"%s\"", d->field, str_at(a, d->off), str_at(b, d->off));
        return;
    case CK_INT:
    case CK_INT_RAW:
        snprintf(out, cap, "%s: %lld vs %lld", d->field, (long long)*i64_at(a, d->off),
                 (long long)*i64_at(b, d->off));
        return;
    case CK_BOOL:
        snprintf(out, cap, "%s: %lld vs %lld", d->field, (long long)*int_at(a, d->off),
                 (long long)*int_at(b, d->off));
        return;
    case CK_NUM:
        snprintf(out, cap, "%s: %.17g vs %.17g", d->field, *num_at(a, d->off), *num_at(b, d->off));
        return;
    case CK_INT_OPT:
    case CK_NUM_OPT: {
        int ha = *int_at(a, d->has_off), hb = *int_at(b, d->has_off);
        double va = d->type == CK_INT_OPT ? (double)*i64_at(a, d->off) : *num_at(a, d->off);
        double vb = d->type == CK_INT_OPT ? (double)*i64_at(b, d->off) : *num_at(b, d->off);
        if (ha && hb)
            snprintf(out, cap, "%s: %.17g vs %.17g", d->field, va, vb);
        else
            snprintf(out, cap, "%s: %s vs %s", d->field, ha ? "set" : "null", hb ? "set" : "null");
        return;
    }
    case CK_NULL:
        return;
    }
}

int kda_config_equal(const KdaConfig *a, const KdaConfig *b) {
    for (size_t k = 0; k < N_KEYS; k++)
        if (key_differs(&g_keys[k], a, b)) return 0;
    return 1;
}

int kda_config_diff(const KdaConfig *a, const KdaConfig *b, char *out, size_t cap) {
    for (size_t k = 0; k < N_KEYS; k++)
        if (g_keys[k].in_diff && key_differs(&g_keys[k], a, b))
            return key_diff_text(&g_keys[k], a, b, out, cap), 1;
    return 0;
}
