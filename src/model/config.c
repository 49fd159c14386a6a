// config.c - KDA config.json: FLA defaults, strict typed reading, derived dims, FLA-format writing.
//
// Reading is strict about the keys we know (type and range, one error line naming the file and
// the key) and lenient about keys we don't (HF base-config keys; a warning lists them).
#include "model/config.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"     // defines: kda_warn
#include "core/util.h"    // defines: open_atomic, commit_atomic, path_is_dir, path_join
#include "model/params.h" // defines: kda_params_count

// ---------------------------------------------------------------------------------------------
// Defaults (FLA KDAConfig constructor, kda-model.md §1.1)

void kda_config_defaults(KdaConfig *c) {
    memset(c, 0, sizeof *c);
    snprintf(c->attn_mode, sizeof c->attn_mode, "chunk");
    c->hidden_size = 2048;
    c->expand_v = 1.0;
    c->use_short_conv = 1;
    c->allow_neg_eigval = 0;
    c->safe_gate = 0;
    c->has_lower_bound = 0;
    c->conv_size = 4;
    c->head_dim = 128;
    c->num_heads = 16;
    c->num_v_heads_raw = 0;
    c->max_position_embeddings = 2048;
    c->hidden_ratio = 4;
    c->intermediate_size_raw = 0;
    snprintf(c->hidden_act, sizeof c->hidden_act, "swish");
    c->num_hidden_layers = 24;
    c->norm_eps = 1e-6;
    c->use_cache = 1;
    c->has_pad_token_id = 0;
    c->has_bos_token_id = c->has_eos_token_id = 1;
    c->bos_token_id = 1;
    c->eos_token_id = 2;
    c->tie_word_embeddings = 0;
    c->initializer_range = 0.02;
    c->fuse_norm = c->fuse_swiglu = c->fuse_cross_entropy = 1;
    c->use_l2warp = 0;
    c->vocab_size = 32000;
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

// ---------------------------------------------------------------------------------------------
// Reading

// Every key kda_config_from_json understands, plus HF base-config keys we accept silently.
static const char *const g_known_keys[] = {
    "attn_mode",
    "hidden_size",
    "expand_v",
    "use_short_conv",
    "allow_neg_eigval",
    "safe_gate",
    "lower_bound",
    "conv_size",
    "head_dim",
    "num_heads",
    "num_v_heads",
    "max_position_embeddings",
    "hidden_ratio",
    "intermediate_size",
    "hidden_act",
    "num_hidden_layers",
    "norm_eps",
    "attn",
    "use_cache",
    "pad_token_id",
    "bos_token_id",
    "eos_token_id",
    "tie_word_embeddings",
    "initializer_range",
    "fuse_norm",
    "fuse_swiglu",
    "fuse_cross_entropy",
    "use_l2warp",
    "vocab_size",
    "attnres_block_size",
    "model_type",
    "architectures",
    "torch_dtype",
    "dtype",
    "transformers_version",
    "_name_or_path",
};

static void warn_unknown_keys(const JsonValue *root, const char *src) {
    char list[512] = "";
    size_t used = 0;
    int n = 0;
    for (size_t i = 0; i < root->len; i++) {
        int known = 0;
        for (size_t k = 0; k < sizeof g_known_keys / sizeof *g_known_keys && !known; k++)
            known = !strcmp(root->keys[i], g_known_keys[k]);
        if (known) continue;
        if (used < sizeof list - 64)
            used += (size_t)snprintf(list + used, sizeof list - used, "%s'%s'", n ? ", " : "",
                                     root->keys[i]);
        n++;
    }
    if (n) kda_warn("%s: ignoring %d unknown key%s: %s", src, n, n > 1 ? "s" : "", list);
}

static int read_ints(KdaConfig *c, const JsonValue *r, const char *src, KdaError *err) {
    int rc = 0;
    if (!rc) rc = read_int(r, "hidden_size", 1, &c->hidden_size, src, err);
    if (!rc) rc = read_int(r, "conv_size", 1, &c->conv_size, src, err);
    if (!rc) rc = read_int(r, "head_dim", 1, &c->head_dim, src, err);
    if (!rc) rc = read_int(r, "num_heads", 1, &c->num_heads, src, err);
    if (!rc) rc = read_int(r, "max_position_embeddings", 1, &c->max_position_embeddings, src, err);
    if (!rc) rc = read_int(r, "hidden_ratio", 1, &c->hidden_ratio, src, err);
    if (!rc) rc = read_int(r, "num_hidden_layers", 1, &c->num_hidden_layers, src, err);
    if (!rc) rc = read_int(r, "vocab_size", 1, &c->vocab_size, src, err);
    int has = c->num_v_heads_raw > 0;
    if (!rc) rc = read_int_or_null(r, "num_v_heads", 1, &c->num_v_heads_raw, &has, src, err);
    if (!rc && !has) c->num_v_heads_raw = 0;
    has = c->intermediate_size_raw > 0;
    if (!rc)
        rc = read_int_or_null(r, "intermediate_size", 1, &c->intermediate_size_raw, &has, src, err);
    if (!rc && !has) c->intermediate_size_raw = 0;
    if (!rc)
        rc = read_int_or_null(r, "pad_token_id", 0, &c->pad_token_id, &c->has_pad_token_id, src,
                              err);
    if (!rc)
        rc = read_int_or_null(r, "bos_token_id", 0, &c->bos_token_id, &c->has_bos_token_id, src,
                              err);
    if (!rc)
        rc = read_int_or_null(r, "eos_token_id", 0, &c->eos_token_id, &c->has_eos_token_id, src,
                              err);
    return rc;
}

static int read_bools(KdaConfig *c, const JsonValue *r, const char *src, KdaError *err) {
    int rc = 0;
    if (!rc) rc = read_bool(r, "use_short_conv", &c->use_short_conv, src, err);
    if (!rc) rc = read_bool(r, "allow_neg_eigval", &c->allow_neg_eigval, src, err);
    if (!rc) rc = read_bool(r, "safe_gate", &c->safe_gate, src, err);
    if (!rc) rc = read_bool(r, "use_cache", &c->use_cache, src, err);
    if (!rc) rc = read_bool(r, "tie_word_embeddings", &c->tie_word_embeddings, src, err);
    if (!rc) rc = read_bool(r, "fuse_norm", &c->fuse_norm, src, err);
    if (!rc) rc = read_bool(r, "fuse_swiglu", &c->fuse_swiglu, src, err);
    if (!rc) rc = read_bool(r, "fuse_cross_entropy", &c->fuse_cross_entropy, src, err);
    if (!rc) rc = read_bool(r, "use_l2warp", &c->use_l2warp, src, err);
    return rc;
}

static int read_others(KdaConfig *c, const JsonValue *r, const char *src, KdaError *err) {
    int rc = 0;
    if (!rc) rc = read_num(r, "expand_v", &c->expand_v, src, err);
    if (!rc) rc = read_num(r, "norm_eps", &c->norm_eps, src, err);
    if (!rc) rc = read_num(r, "initializer_range", &c->initializer_range, src, err);
    const JsonValue *lb = json_get(r, "lower_bound");
    if (!rc && lb) {
        if (lb->type == JSON_NULL)
            c->has_lower_bound = 0;
        else if (lb->type == JSON_NUMBER && isfinite(lb->num))
            c->has_lower_bound = 1, c->lower_bound = lb->num;
        else
            rc = bad_key(src, "lower_bound", "a negative number or null", lb, err);
    }
    if (!rc) rc = read_str(r, "attn_mode", c->attn_mode, sizeof c->attn_mode, src, err);
    if (!rc) rc = read_str(r, "hidden_act", c->hidden_act, sizeof c->hidden_act, src, err);
    // newer transformers write "dtype"; older ones "torch_dtype"
    const char *dkey = json_get(r, "torch_dtype") ? "torch_dtype" : "dtype";
    const JsonValue *dt = json_get(r, dkey);
    if (!rc && dt && dt->type != JSON_NULL)
        rc = read_str(r, dkey, c->torch_dtype, sizeof c->torch_dtype, src, err);
    if (!rc) rc = read_must_be_null(r, "attn", "hybrid softmax-attention layers", src, err);
    if (!rc)
        rc = read_must_be_null(r, "attnres_block_size", "attention residuals (attnres)", src, err);
    return rc;
}

int kda_config_from_json(KdaConfig *c, const JsonValue *root, const char *src, KdaError *err) {
    if (root->type != JSON_OBJECT)
        return kda_fail(err, "%s: expected a JSON object, got %s", src, json_type_name(root->type));
    const JsonValue *mt = json_get(root, "model_type");
    if (!mt) return kda_fail(err, "%s: key 'model_type': missing (expected \"kda\")", src);
    if (mt->type != JSON_STRING || strcmp(mt->str, "kda") != 0)
        return bad_key(src, "model_type", "\"kda\"", mt, err);
    kda_config_defaults(c);
    if (read_ints(c, root, src, err) || read_bools(c, root, src, err) ||
        read_others(c, root, src, err))
        return -1;
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

static int check_max_(const char *src, const char *key, int64_t v, int64_t max, KdaError *err) {
    if (v <= max) return 0;
    return kda_fail(err, "%s: key '%s': %lld exceeds the limit %lld", src, key, (long long)v,
                    (long long)max);
}

static int check_sizes_(const KdaConfig *c, const char *src, KdaError *err) {
    if (check_max_(src, "hidden_size", c->hidden_size, MAX_HIDDEN, err) ||
        check_max_(src, "num_heads", c->num_heads, MAX_HEADS, err) ||
        check_max_(src, "num_v_heads", c->num_v_heads_raw, MAX_HEADS, err) ||
        check_max_(src, "head_dim", c->head_dim, MAX_HEAD_DIM, err) ||
        check_max_(src, "num_hidden_layers", c->num_hidden_layers, MAX_LAYERS, err) ||
        check_max_(src, "intermediate_size", c->intermediate_size_raw, MAX_INTERMEDIATE, err) ||
        check_max_(src, "vocab_size", c->vocab_size, MAX_VOCAB, err) ||
        check_max_(src, "conv_size", c->conv_size, MAX_CONV, err) ||
        check_max_(src, "hidden_ratio", c->hidden_ratio, MAX_HEADS, err))
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

static void write_int_or_null(FILE *f, const char *key, int has, int64_t v) {
    if (has)
        fprintf(f, "  \"%s\": %lld,\n", key, (long long)v);
    else
        fprintf(f, "  \"%s\": null,\n", key);
}

static void write_bool(FILE *f, const char *key, int v) {
    fprintf(f, "  \"%s\": %s,\n", key, v ? "true" : "false");
}

static void write_str(FILE *f, const char *key, const char *v) {
    fprintf(f, "  \"%s\": ", key);
    json_write_string(f, v, strlen(v));
    fputs(",\n", f);
}

static void write_body(FILE *f, const KdaConfig *c, const char *dtype) {
    fputs("{\n  \"architectures\": [\"KDAForCausalLM\"],\n  \"model_type\": \"kda\",\n", f);
    write_str(f, "attn_mode", c->attn_mode);
    fprintf(f, "  \"hidden_size\": %lld,\n", (long long)c->hidden_size);
    fprintf(f, "  \"num_hidden_layers\": %lld,\n", (long long)c->num_hidden_layers);
    fprintf(f, "  \"num_heads\": %lld,\n", (long long)c->num_heads);
    write_int_or_null(f, "num_v_heads", c->num_v_heads_raw > 0, c->num_v_heads_raw);
    fprintf(f, "  \"head_dim\": %lld,\n", (long long)c->head_dim);
    fputs("  \"expand_v\": ", f), write_float(f, c->expand_v), fputs(",\n", f);
    write_bool(f, "use_short_conv", c->use_short_conv);
    fprintf(f, "  \"conv_size\": %lld,\n", (long long)c->conv_size);
    write_bool(f, "allow_neg_eigval", c->allow_neg_eigval);
    write_bool(f, "safe_gate", c->safe_gate);
    if (c->has_lower_bound)
        fputs("  \"lower_bound\": ", f), write_float(f, c->lower_bound), fputs(",\n", f);
    else
        fputs("  \"lower_bound\": null,\n", f);
    fprintf(f, "  \"hidden_ratio\": %lld,\n", (long long)c->hidden_ratio);
    write_int_or_null(f, "intermediate_size", c->intermediate_size_raw > 0,
                      c->intermediate_size_raw);
    write_str(f, "hidden_act", c->hidden_act);
    fprintf(f, "  \"max_position_embeddings\": %lld,\n", (long long)c->max_position_embeddings);
    fputs("  \"norm_eps\": ", f), write_float(f, c->norm_eps), fputs(",\n", f);
    fputs("  \"attn\": null,\n  \"attnres_block_size\": null,\n", f);
    write_bool(f, "use_cache", c->use_cache);
    fputs("  \"initializer_range\": ", f), write_float(f, c->initializer_range), fputs(",\n", f);
    write_bool(f, "fuse_norm", c->fuse_norm);
    write_bool(f, "fuse_swiglu", c->fuse_swiglu);
    write_bool(f, "fuse_cross_entropy", c->fuse_cross_entropy);
    write_bool(f, "use_l2warp", c->use_l2warp);
    fprintf(f, "  \"vocab_size\": %lld,\n", (long long)c->vocab_size);
    write_bool(f, "tie_word_embeddings", c->tie_word_embeddings);
    write_int_or_null(f, "bos_token_id", c->has_bos_token_id, c->bos_token_id);
    write_int_or_null(f, "eos_token_id", c->has_eos_token_id, c->eos_token_id);
    if (dtype && *dtype) {
        write_int_or_null(f, "pad_token_id", c->has_pad_token_id, c->pad_token_id);
        fputs("  \"torch_dtype\": ", f), json_write_string(f, dtype, strlen(dtype)),
            fputs("\n}\n", f);
    } else {
        if (c->has_pad_token_id)
            fprintf(f, "  \"pad_token_id\": %lld\n}\n", (long long)c->pad_token_id);
        else
            fputs("  \"pad_token_id\": null\n}\n", f);
    }
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

int kda_config_equal(const KdaConfig *a, const KdaConfig *b) {
    return !strcmp(a->attn_mode, b->attn_mode) && a->hidden_size == b->hidden_size &&
           a->expand_v == b->expand_v && a->use_short_conv == b->use_short_conv &&
           a->allow_neg_eigval == b->allow_neg_eigval && a->safe_gate == b->safe_gate &&
           a->has_lower_bound == b->has_lower_bound &&
           (!a->has_lower_bound || a->lower_bound == b->lower_bound) &&
           a->conv_size == b->conv_size && a->head_dim == b->head_dim &&
           a->num_heads == b->num_heads && a->num_v_heads_raw == b->num_v_heads_raw &&
           a->max_position_embeddings == b->max_position_embeddings &&
           a->hidden_ratio == b->hidden_ratio &&
           a->intermediate_size_raw == b->intermediate_size_raw &&
           !strcmp(a->hidden_act, b->hidden_act) && a->num_hidden_layers == b->num_hidden_layers &&
           a->norm_eps == b->norm_eps && a->use_cache == b->use_cache &&
           a->has_pad_token_id == b->has_pad_token_id &&
           (!a->has_pad_token_id || a->pad_token_id == b->pad_token_id) &&
           a->has_bos_token_id == b->has_bos_token_id &&
           (!a->has_bos_token_id || a->bos_token_id == b->bos_token_id) &&
           a->has_eos_token_id == b->has_eos_token_id &&
           (!a->has_eos_token_id || a->eos_token_id == b->eos_token_id) &&
           a->tie_word_embeddings == b->tie_word_embeddings &&
           a->initializer_range == b->initializer_range && a->fuse_norm == b->fuse_norm &&
           a->fuse_swiglu == b->fuse_swiglu && a->fuse_cross_entropy == b->fuse_cross_entropy &&
           a->use_l2warp == b->use_l2warp && a->vocab_size == b->vocab_size;
}
