// run_config.c - YAML run configuration (libyaml), CLI overrides, validation, write-back;
// see run_config.h.
#include "train/run_config.h" // defines: KdaRunConfig, kda_run_config_*

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "core/util.h"      // defines: read_file, open_atomic, commit_atomic, abort_atomic
#include "train/schedule.h" // defines: KdaLrSchedule, kda_lr_schedule_check, kda_lr_style_parse

// ---------------------------------------------------------------------------------------------
// The key table: one row per key drives parsing, overrides, suggestions and writing.

typedef enum { RC_INT, RC_FLOAT, RC_STR, RC_LIST } RcType;

typedef struct {
    const char *name;
    RcType type;
    size_t offset;
    const char *choices; // RC_STR enums: "a|b|c", else NULL
} RcKey;

#define RC(name, type, choices)                                                                    \
    { #name, type, offsetof(KdaRunConfig, name), choices }
static const RcKey g_keys[] = {
    RC(train_iters, RC_INT, NULL),
    RC(micro_batch_size, RC_INT, NULL),
    RC(global_batch_size, RC_INT, NULL),
    RC(seq_length, RC_INT, NULL),
    RC(lr, RC_FLOAT, NULL),
    RC(min_lr, RC_FLOAT, NULL),
    RC(lr_warmup_iters, RC_INT, NULL),
    RC(lr_decay_iters, RC_INT, NULL),
    RC(lr_decay_style, RC_STR, "cosine|linear|constant"),
    RC(adam_beta1, RC_FLOAT, NULL),
    RC(adam_beta2, RC_FLOAT, NULL),
    RC(adam_eps, RC_FLOAT, NULL),
    RC(weight_decay, RC_FLOAT, NULL),
    RC(clip_grad, RC_FLOAT, NULL),
    RC(seed, RC_INT, NULL),
    RC(save, RC_STR, NULL),
    RC(save_interval, RC_INT, NULL),
    RC(load, RC_STR, NULL),
    RC(eval_interval, RC_INT, NULL),
    RC(eval_iters, RC_INT, NULL),
    RC(log_interval, RC_INT, NULL),
    RC(train_data_path, RC_LIST, NULL),
    RC(valid_data_path, RC_LIST, NULL),
    RC(split, RC_STR, NULL),
    RC(model, RC_STR, NULL),
    RC(tokenizer, RC_STR, NULL),
    RC(objective, RC_STR, "megatron|fla"),
    RC(data_order, RC_STR, "megatron|fla"),
    RC(keep_last, RC_INT, NULL),
    RC(max_nan_steps, RC_INT, NULL),
    RC(device, RC_STR, "cpu|cuda"),
    RC(threads, RC_INT, NULL),
    RC(recompute_granularity, RC_STR, "none|full"),
};
#undef RC
#define N_KEYS ((int)(sizeof g_keys / sizeof *g_keys))

// Key names compare with '-' == '_'.
static int key_eq(const char *a, const char *b) {
    for (;; a++, b++) {
        char x = *a == '-' ? '_' : *a, y = *b == '-' ? '_' : *b;
        if (x != y) return 0;
        if (!x) return 1;
    }
}

static const RcKey *key_find(const char *name) {
    for (int k = 0; k < N_KEYS; k++)
        if (key_eq(g_keys[k].name, name)) return &g_keys[k];
    return NULL;
}

static int edit_distance(const char *a, const char *b) {
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

// Names other stacks use for our keys (HF Trainer, FLA's flame, torchtitan): an exact alias
// beats edit distance ("learning_rate" is 11 edits from "lr").
static const struct {
    const char *alias, *key;
} g_aliases[] = {
    {"learning_rate", "lr"},
    {"min_learning_rate", "min_lr"},
    {"warmup_steps", "lr_warmup_iters"},
    {"max_steps", "train_iters"},
    {"steps", "train_iters"},
    {"batch_size", "micro_batch_size"},
    {"per_device_train_batch_size", "micro_batch_size"},
    {"seq_len", "seq_length"},
    {"max_seq_length", "seq_length"},
    {"context_len", "seq_length"},
    {"beta1", "adam_beta1"},
    {"beta2", "adam_beta2"},
    {"eps", "adam_eps"},
    {"max_grad_norm", "clip_grad"},
    {"grad_clip", "clip_grad"},
    {"lr_scheduler_type", "lr_decay_style"},
    {"save_steps", "save_interval"},
    {"logging_steps", "log_interval"},
    {"output_dir", "save"},
};

const char *kda_run_config_suggest(const char *key) {
    for (size_t i = 0; i < sizeof g_aliases / sizeof *g_aliases; i++)
        if (edit_distance(key, g_aliases[i].alias) == 0) return g_aliases[i].key;
    int best = 0, best_d = INT_MAX;
    for (int k = 0; k < N_KEYS; k++) {
        int d = edit_distance(key, g_keys[k].name);
        if (d < best_d) {
            best_d = d;
            best = k;
        }
    }
    return g_keys[best].name;
}

// ---------------------------------------------------------------------------------------------
// Defaults and ownership

static void list_clear(KdaStrList *l) {
    for (int k = 0; k < l->n; k++)
        free(l->items[k]);
    free(l->items);
    l->items = NULL;
    l->n = 0;
}

static void str_set(char **dst, const char *s) {
    free(*dst);
    *dst = s ? kda_strdup(s) : NULL;
}

void kda_run_config_free(KdaRunConfig *cfg) {
    for (int k = 0; k < N_KEYS; k++) {
        void *p = (char *)cfg + g_keys[k].offset;
        if (g_keys[k].type == RC_STR) str_set((char **)p, NULL);
        if (g_keys[k].type == RC_LIST) list_clear((KdaStrList *)p);
    }
}

void kda_run_config_defaults(KdaRunConfig *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->micro_batch_size = 1;
    cfg->global_batch_size = 1;
    cfg->seq_length = 2048;
    cfg->lr = 2e-4;
    cfg->min_lr = 2e-5;
    cfg->adam_beta1 = 0.9;
    cfg->adam_beta2 = 0.95;
    cfg->adam_eps = 1e-8;
    cfg->weight_decay = 0.01;
    cfg->clip_grad = 1.0;
    cfg->seed = 42;
    cfg->log_interval = 100;
    str_set(&cfg->lr_decay_style, "cosine");
    str_set(&cfg->split, "969,30,1");
    str_set(&cfg->objective, "megatron");
    str_set(&cfg->data_order, "megatron");
    str_set(&cfg->device, "cpu");
    str_set(&cfg->recompute_granularity, "none");
}

// ---------------------------------------------------------------------------------------------
// Setting one key from text

// A value or key as shown in a one-line message (YAML multi-line scalars cannot break it).
static const char *shown_(const char *v, char *buf, size_t cap) {
    return str_shown(v, strlen(v), 64, buf, cap);
}

static int choice_ok(const char *choices, const char *v) {
    size_t n = strlen(v);
    for (const char *c = choices; *c;) {
        size_t len = strcspn(c, "|");
        if (len == n && !strncmp(c, v, n)) return 1;
        c += len + (c[len] == '|');
    }
    return 0;
}

static int set_scalar(KdaRunConfig *cfg, const RcKey *k, const char *v, const char *where,
                      KdaError *err) {
    void *p = (char *)cfg + k->offset;
    char *end, sv[300]; // the value as shown in a message
    switch (k->type) {
    case RC_INT: {
        errno = 0;
        long long x = strtoll(v, &end, 10);
        if (end == v || *end || errno)
            return kda_fail(err, "%skey '%s': expected an integer, got '%s'", where, k->name,
                            shown_(v, sv, sizeof sv));
        *(int64_t *)p = x;
        return 0;
    }
    case RC_FLOAT: {
        double x = strtod(v, &end);
        if (end == v || *end || !isfinite(x))
            return kda_fail(err, "%skey '%s': expected a number, got '%s'", where, k->name,
                            shown_(v, sv, sizeof sv));
        *(double *)p = x;
        return 0;
    }
    case RC_STR:
        if (k->choices && !choice_ok(k->choices, v))
            return kda_fail(err, "%skey '%s': expected one of %s, got '%s'", where, k->name,
                            k->choices, shown_(v, sv, sizeof sv));
        str_set((char **)p, v);
        return 0;
    case RC_LIST:
        break;
    }
    return kda_fail(err, "%skey '%s': internal type error", where, k->name);
}

static int set_values(KdaRunConfig *cfg, const RcKey *k, const char *const *vals, int n,
                      const char *where, KdaError *err) {
    if (k->type == RC_LIST) {
        KdaStrList *l = (KdaStrList *)((char *)cfg + k->offset);
        list_clear(l);
        l->items = kda_calloc((size_t)(n > 0 ? n : 1), sizeof(char *));
        for (int i = 0; i < n; i++)
            l->items[i] = kda_strdup(vals[i]);
        l->n = n;
        return 0;
    }
    if (n != 1) return kda_fail(err, "%skey '%s': expected one value, got %d", where, k->name, n);
    return set_scalar(cfg, k, vals[0], where, err);
}

static int unknown_key(const char *where, const char *key, KdaError *err) {
    char sk[300];
    return kda_fail(err, "%sunknown key '%s' (did you mean '%s'?)", where,
                    shown_(key, sk, sizeof sk), kda_run_config_suggest(key));
}

int kda_run_config_set(KdaRunConfig *cfg, const char *key, const char *const *vals, int n_vals,
                       KdaError *err) {
    const RcKey *k = key_find(key);
    if (!k) return unknown_key("", key, err);
    return set_values(cfg, k, vals, n_vals, "", err);
}

// ---------------------------------------------------------------------------------------------
// YAML (libyaml document API): a flat mapping of scalars and sequences of scalars.

static int yaml_is_null(const yaml_node_t *n) {
    if (n->type != YAML_SCALAR_NODE) return 0;
    if (n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return 0;
    const char *v = (const char *)n->data.scalar.value;
    return !*v || !strcmp(v, "~") || !strcmp(v, "null") || !strcmp(v, "Null") || !strcmp(v, "NULL");
}

static int yaml_apply_pair(KdaRunConfig *cfg, yaml_document_t *doc, yaml_node_pair_t *pair,
                           const char *name, unsigned *seen, KdaError *err) {
    yaml_node_t *kn = yaml_document_get_node(doc, pair->key);
    yaml_node_t *vn = yaml_document_get_node(doc, pair->value);
    char where[600];
    snprintf(where, sizeof where, "%s:%zu: ", name, kn->start_mark.line + 1);
    if (kn->type != YAML_SCALAR_NODE) return kda_fail(err, "%sexpected a plain key", where);
    const char *key = (const char *)kn->data.scalar.value;
    const RcKey *k = key_find(key);
    if (!k) return unknown_key(where, key, err);
    int idx = (int)(k - g_keys);
    if (seen[idx / 32] & (1u << (idx % 32)))
        return kda_fail(err, "%skey '%s' appears twice", where, k->name);
    seen[idx / 32] |= 1u << (idx % 32);

    if (yaml_is_null(vn)) {
        void *dst = (char *)cfg + k->offset;
        if (k->type == RC_STR) return str_set((char **)dst, NULL), 0;
        if (k->type == RC_LIST) return list_clear((KdaStrList *)dst), 0;
        return kda_fail(err, "%skey '%s': expected a number, got null", where, k->name);
    }
    if (vn->type == YAML_SCALAR_NODE) {
        const char *v = (const char *)vn->data.scalar.value;
        return set_values(cfg, k, &v, 1, where, err);
    }
    if (vn->type == YAML_SEQUENCE_NODE && k->type == RC_LIST) {
        int n = (int)(vn->data.sequence.items.top - vn->data.sequence.items.start);
        const char **vals = kda_calloc((size_t)(n > 0 ? n : 1), sizeof(char *));
        for (int i = 0; i < n; i++) {
            yaml_node_t *it = yaml_document_get_node(doc, vn->data.sequence.items.start[i]);
            if (it->type != YAML_SCALAR_NODE) {
                free(vals);
                return kda_fail(err, "%skey '%s': list items must be plain values", where, k->name);
            }
            vals[i] = (const char *)it->data.scalar.value;
        }
        int rc = set_values(cfg, k, vals, n, where, err);
        free(vals);
        return rc;
    }
    return kda_fail(err, "%skey '%s': expected %s", where, k->name,
                    k->type == RC_LIST ? "a list or a single value"
                                       : "a single value, not a list or mapping");
}

int kda_run_config_parse(KdaRunConfig *cfg, const char *text, size_t n, const char *name,
                         KdaError *err) {
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser)) return kda_fail(err, "%s: cannot init YAML parser", name);
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, n);
    if (!yaml_parser_load(&parser, &doc)) {
        kda_fail(err, "%s:%zu: YAML error: %s", name, parser.problem_mark.line + 1,
                 parser.problem ? parser.problem : "unknown");
        yaml_parser_delete(&parser);
        return -1;
    }
    int rc = 0;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (root && root->type != YAML_MAPPING_NODE) {
        rc = kda_fail(err, "%s: expected a mapping of keys to values at the top level", name);
    } else if (root) {
        unsigned seen[(N_KEYS + 31) / 32] = {0};
        for (yaml_node_pair_t *p = root->data.mapping.pairs.start;
             rc == 0 && p < root->data.mapping.pairs.top; p++)
            rc = yaml_apply_pair(cfg, &doc, p, name, seen, err);
    }
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    return rc;
}

int kda_run_config_load(KdaRunConfig *cfg, const char *path, KdaError *err) {
    size_t n;
    char *text = read_file(path, &n, err);
    if (!text) return -1;
    int rc = kda_run_config_parse(cfg, text, n, path, err);
    free(text);
    return rc;
}

// ---------------------------------------------------------------------------------------------
// Command line

static int is_flag(const char *a) {
    return a[0] == '-' && a[1] == '-' && a[2];
}

int kda_run_config_apply_args(KdaRunConfig *cfg, int argc, char **argv, KdaError *err) {
    for (int i = 0; i < argc;) {
        if (!is_flag(argv[i]))
            return kda_fail(err, "unexpected argument '%s' (flags are --key value)", argv[i]);
        char key[128];
        const char *eq = strchr(argv[i] + 2, '=');
        size_t klen = eq ? (size_t)(eq - argv[i] - 2) : strlen(argv[i] + 2);
        snprintf(key, sizeof key, "%.*s", (int)klen, argv[i] + 2);
        const RcKey *k = key_find(key);
        char where[160];
        snprintf(where, sizeof where, "--%s: ", key);
        if (!k)
            return kda_fail(err, "unknown flag '--%s' (did you mean '--%s'?)", key,
                            kda_run_config_suggest(key));
        if (eq) {
            const char *v = eq + 1;
            if (set_values(cfg, k, &v, 1, where, err)) return -1;
            i++;
            continue;
        }
        int j = i + 1;
        while (j < argc && !is_flag(argv[j]) && (k->type == RC_LIST || j == i + 1))
            j++;
        if (k->type != RC_LIST && j == i + 1) return kda_fail(err, "%smissing value", where);
        if (set_values(cfg, k, (const char *const *)argv + i + 1, j - i - 1, where, err)) return -1;
        i = j;
    }
    return 0;
}

int kda_run_config_from_cli(KdaRunConfig *cfg, int argc, char **argv, KdaError *err) {
    kda_run_config_defaults(cfg);
    char **rest = kda_calloc((size_t)(argc > 0 ? argc : 1), sizeof(char *));
    int n_rest = 0, rc = 0;
    const char *config = NULL;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--config") && i + 1 < argc) {
            config = argv[++i];
        } else if (!strncmp(argv[i], "--config=", 9)) {
            config = argv[i] + 9;
        } else {
            rest[n_rest++] = argv[i];
        }
    }
    if (config) rc = kda_run_config_load(cfg, config, err);
    if (rc == 0) rc = kda_run_config_apply_args(cfg, n_rest, rest, err);
    free(rest);
    return rc;
}

// ---------------------------------------------------------------------------------------------
// Validation

int kda_run_config_validate(KdaRunConfig *c, KdaError *err) {
    if (c->train_iters <= 0)
        return kda_fail(err, "train_iters must be > 0 (got %lld)", (long long)c->train_iters);
    if (c->micro_batch_size <= 0 || c->global_batch_size <= 0 ||
        c->global_batch_size % c->micro_batch_size)
        return kda_fail(
            err, "global_batch_size (%lld) must be a positive multiple of micro_batch_size (%lld)",
            (long long)c->global_batch_size, (long long)c->micro_batch_size);
    if (c->seq_length < 2)
        return kda_fail(err, "seq_length must be >= 2 (got %lld)", (long long)c->seq_length);
    if (c->lr_decay_iters == 0) c->lr_decay_iters = c->train_iters;
    KdaLrSchedule s = {c->lr, c->min_lr, c->lr_warmup_iters, c->lr_decay_iters, KDA_LR_COSINE};
    if (kda_lr_style_parse(c->lr_decay_style ? c->lr_decay_style : "", &s.style, err)) return -1;
    if (kda_lr_schedule_check(&s, err)) return -1;
    if (!(c->clip_grad >= 0)) return kda_fail(err, "clip_grad must be >= 0 (0 = off)");
    if (c->seed < 0 || c->seed > 0xffffffffll) return kda_fail(err, "seed must be in [0, 2^32)");
    if (c->save_interval < 0 || c->eval_interval < 0 || c->eval_iters < 0 || c->log_interval < 0 ||
        c->keep_last < 0 || c->max_nan_steps < 0 || c->threads < 0)
        return kda_fail(err, "intervals, counts and threads must be >= 0");
    if (!c->model) return kda_fail(err, "model (path of config.json) is not set");
    if (c->train_data_path.n == 0) return kda_fail(err, "train_data_path is not set");
    if (c->data_order && !strcmp(c->data_order, "fla") &&
        !(c->objective && !strcmp(c->objective, "fla")))
        return kda_fail(err, "data_order: fla needs objective: fla (seq_length-token chunks, "
                             "seq_length - 1 targets)");
    const char **paths;
    double *w;
    int n;
    if (kda_run_config_blend(&c->train_data_path, &paths, &w, &n, err)) return -1;
    free(paths);
    free(w);
    return 0;
}

int kda_run_config_blend(const KdaStrList *list, const char ***paths, double **weights, int *n_out,
                         KdaError *err) {
    *paths = NULL;
    *weights = NULL;
    *n_out = 0;
    if (list->n == 0) return 0;
    char *end;
    strtod(list->items[0], &end);
    int weighted = end != list->items[0] && *end == 0;
    if (!weighted) {
        const char **p = kda_malloc((size_t)list->n * sizeof *p);
        for (int k = 0; k < list->n; k++)
            p[k] = list->items[k];
        *paths = p;
        *n_out = list->n;
        return 0;
    }
    if (list->n % 2)
        return kda_fail(err, "data path blend: expected pairs \"weight path\", got %d items",
                        list->n);
    int n = list->n / 2;
    double *w = kda_malloc((size_t)n * sizeof *w);
    const char **p = kda_malloc((size_t)n * sizeof *p);
    for (int k = 0; k < n; k++) {
        w[k] = strtod(list->items[2 * k], &end);
        if (end == list->items[2 * k] || *end || !isfinite(w[k]) || w[k] < 0) {
            char sv[300];
            kda_fail(err, "data path blend: item %d ('%s') is not a weight >= 0", 2 * k,
                     shown_(list->items[2 * k], sv, sizeof sv));
            free(w);
            free(p);
            return -1;
        }
        p[k] = list->items[2 * k + 1];
    }
    double sum = 0;
    for (int k = 0; k < n; k++)
        sum += w[k];
    if (!(sum > 0)) {
        free(w);
        free(p);
        return kda_fail(err, "data path blend: weights sum to 0");
    }
    for (int k = 0; k < n; k++)
        w[k] /= sum;
    *paths = p;
    *weights = w;
    *n_out = n;
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Writing

static void write_str(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\x%02x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

// Shortest decimal that reads back to x, with a '.' so YAML 1.1 readers see a float.
static void write_double(FILE *f, double x) {
    char buf[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, x);
        if (strtod(buf, NULL) == x) break;
    }
    char *e = strchr(buf, 'e');
    if (!strchr(buf, '.')) {
        if (e) {
            char tail[40];
            snprintf(tail, sizeof tail, "%s", e);
            snprintf(e, sizeof buf - (size_t)(e - buf), ".0%s", tail);
        } else {
            strcat(buf, ".0");
        }
    }
    fputs(buf, f);
}

int kda_run_config_write(const KdaRunConfig *cfg, FILE *f) {
    fprintf(f, "# kda.c run configuration (effective values)\n");
    for (int k = 0; k < N_KEYS; k++) {
        const void *p = (const char *)cfg + g_keys[k].offset;
        fprintf(f, "%s:", g_keys[k].name);
        switch (g_keys[k].type) {
        case RC_INT:
            fprintf(f, " %lld\n", (long long)*(const int64_t *)p);
            break;
        case RC_FLOAT:
            fputc(' ', f);
            write_double(f, *(const double *)p);
            fputc('\n', f);
            break;
        case RC_STR: {
            const char *s = *(char *const *)p;
            if (s) {
                fputc(' ', f);
                write_str(f, s);
                fputc('\n', f);
            } else {
                fprintf(f, " null\n");
            }
            break;
        }
        case RC_LIST: {
            const KdaStrList *l = p;
            if (l->n == 0)
                fprintf(f, " []\n");
            else
                fputc('\n', f);
            for (int i = 0; i < l->n; i++) {
                fprintf(f, "  - ");
                write_str(f, l->items[i]);
                fputc('\n', f);
            }
            break;
        }
        }
    }
    return ferror(f) ? -1 : 0;
}

int kda_run_config_write_atomic(const KdaRunConfig *cfg, const char *path, KdaError *err) {
    char tmp[PATH_MAX];
    FILE *f = open_atomic(path, tmp, err);
    if (!f) return -1;
    if (kda_run_config_write(cfg, f)) {
        abort_atomic(f, tmp);
        return kda_fail(err, "%s: write failed", path);
    }
    return commit_atomic(f, tmp, path, err);
}
