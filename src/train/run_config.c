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

#include "core/util.h"        // defines: read_file, open_atomic, commit_atomic, abort_atomic
#include "train/checkpoint.h" // defines: kda_checkpoint_resolve
#include "train/run_plan.h"   // defines: KdaRunPlan, kda_run_plan (the cross-field checks)

// ---------------------------------------------------------------------------------------------
// The key table: one row per key drives parsing, overrides, suggestions and writing.

typedef enum { RC_INT, RC_FLOAT, RC_STR, RC_LIST, RC_BOOL } RcType;

typedef struct {
    const char *name;
    RcType type;
    size_t offset;
    const char *choices; // RC_STR enums: "a|b|c", else NULL
    const char *help;    // meaning, one line (kda train --help)
} RcKey;

#define RC(name, type, choices, help)                                                              \
    { #name, type, offsetof(KdaRunConfig, name), choices, help }
static const RcKey g_keys[] = {
    RC(train_iters, RC_INT, NULL, "optimizer updates to run"),
    RC(micro_batch_size, RC_INT, NULL, "sequences per forward/backward (set by memory)"),
    RC(global_batch_size, RC_INT, NULL,
       "sequences per update (accumulates global / micro micro-batches)"),
    RC(seq_length, RC_INT, NULL, "tokens per sequence"),
    RC(lr, RC_FLOAT, NULL, "peak learning rate"),
    RC(min_lr, RC_FLOAT, NULL, "learning rate at the end of the decay"),
    RC(lr_warmup_iters, RC_INT, NULL, "linear warmup from 0 over this many updates"),
    RC(lr_decay_iters, RC_INT, NULL, "decay horizon (0: train_iters)"),
    RC(lr_decay_style, RC_STR, "cosine|linear|constant", "decay shape after the warmup"),
    RC(adam_beta1, RC_FLOAT, NULL, "AdamW beta1"),
    RC(adam_beta2, RC_FLOAT, NULL, "AdamW beta2"),
    RC(adam_eps, RC_FLOAT, NULL, "AdamW eps (torch placement, outside the sqrt)"),
    RC(weight_decay, RC_FLOAT, NULL, "decoupled weight decay of matrices, convs and A_log"),
    RC(clip_grad, RC_FLOAT, NULL, "clip the global gradient L2 norm to this (0: off)"),
    RC(seed, RC_INT, NULL, "seed of the init and the data order"),
    RC(save, RC_STR, NULL, "checkpoint directory (resumed from when it has `latest`)"),
    RC(save_interval, RC_INT, NULL, "checkpoint every N iterations (0: only at the end)"),
    RC(load, RC_STR, NULL, "checkpoint to resume from; with finetune: starting weights"),
    RC(eval_interval, RC_INT, NULL, "validation every N iterations (0: none)"),
    RC(eval_iters, RC_INT, NULL, "validation batches per evaluation"),
    RC(log_interval, RC_INT, NULL, "log line every N iterations (and at iteration 1)"),
    RC(train_data_path, RC_LIST, NULL,
       "Megatron .bin/.idx prefixes, or a blend \"w1 p1 w2 p2\" (alias data_path)"),
    RC(valid_data_path, RC_LIST, NULL, "validation prefixes (empty: the split's valid part)"),
    RC(split, RC_STR, NULL, "train,valid,test weights of one dataset"),
    RC(model, RC_STR, NULL, "model config.json (or HF dir); unset: taken from finetune's load"),
    RC(tokenizer, RC_STR, NULL, "tokenizer.json (recorded with the checkpoints)"),
    RC(objective, RC_STR, "megatron|fla",
       "(kda) megatron: seq_length+1 windows; fla: seq_length chunks, seq_length-1 targets"),
    RC(data_order, RC_STR, "megatron|fla",
       "(kda) megatron: GPTDataset windows; fla: FLA's chunk order (needs objective fla)"),
    RC(keep_last, RC_INT, NULL, "(kda) keep the newest N checkpoints (0: all)"),
    RC(max_nan_steps, RC_INT, NULL,
       "(kda) abort after N consecutive non-finite iterations (0: never)"),
    RC(device, RC_STR, "cpu|cuda", "(kda) where to train"),
    RC(threads, RC_INT, NULL, "(kda) CPU threads (0: OpenMP default)"),
    RC(recompute_granularity, RC_STR, "none|full",
       "full: re-run each block's forward in the backward (GPU)"),
    RC(layernorm_epsilon, RC_FLOAT, NULL,
       "RMSNorm eps; must equal the model's norm_eps (0: take it; alias norm_epsilon)"),
    RC(hidden_dropout, RC_FLOAT, NULL, "must be 0: kda.c, like FLA, has no dropout"),
    RC(attention_dropout, RC_FLOAT, NULL, "must be 0"),
    RC(bf16, RC_BOOL, NULL, "bf16 compute with fp32 master weights (GPU; the CPU is fp32)"),
    RC(use_distributed_optimizer, RC_BOOL, NULL,
       "ZeRO-1: shard the AdamW moments over data-parallel ranks (CPU ranks)"),
    RC(distributed_timeout_minutes, RC_FLOAT, NULL,
       "rendezvous and collective timeout of a multi-rank run (a hung rank fails all)"),
    RC(finetune, RC_BOOL, NULL,
       "load only the weights of `load` (HF dir or kda checkpoint): fresh optimizer, iteration 0"),
    RC(no_load_optim, RC_BOOL, NULL, "with finetune (which implies it)"),
    RC(no_load_rng, RC_BOOL, NULL, "with finetune (which implies it)"),
    RC(exit_duration_in_mins, RC_FLOAT, NULL,
       "save a checkpoint and stop after this many minutes (0: never)"),
    RC(lr_warmup_fraction, RC_FLOAT, NULL,
       "warmup as a fraction of lr_decay_iters (instead of lr_warmup_iters; 0: unset)"),
    RC(log_style, RC_STR, "megatron|primus",
       "(kda) log line: Megatron's fields + ours, or Primus's short line (ms inst/avg, tokens/s)"),
    RC(tensorboard_dir, RC_STR, NULL,
       "write TensorBoard scalars here at every log line (Megatron's tags: lm loss, ...)"),
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

// Other names that mean exactly one of our keys (Megatron's data_path takes the blend of
// train_data_path; newer Megatron spells the eps norm_epsilon).
static const struct {
    const char *name, *key;
} g_synonyms[] = {
    {"data_path", "train_data_path"},
    {"norm_epsilon", "layernorm_epsilon"},
};

static const RcKey *key_find(const char *name) {
    for (size_t i = 0; i < sizeof g_synonyms / sizeof *g_synonyms; i++)
        if (key_eq(g_synonyms[i].name, name)) name = g_synonyms[i].key;
    for (int k = 0; k < N_KEYS; k++)
        if (key_eq(g_keys[k].name, name)) return &g_keys[k];
    return NULL;
}

// Keys that select Primus's or FLA's kernels and code paths: kda.c has one implementation
// (FLA's fused math, kda-model.md), so they are accepted and reported as no-ops. A "*" ends a
// prefix.
static const char *const g_noop_keys[] = {"spec", "use_fla_*", "wandb_*"};

// Megatron/Primus keys for things kda.c does not have (parallelism, data loader, profiling,
// kernel switches): accepted when their value is what kda.c does anyway (need != NULL: that
// value; numbers compare as numbers, booleans as YAML 1.1 booleans), or any value when need is
// NULL; listed in cfg->ignored. Another value is an error naming what kda.c does.
static const struct {
    const char *key, *need, *why;
} g_megatron_fixed[] = {
    {"tensor_model_parallel_size", "1", "no tensor parallelism"},
    {"pipeline_model_parallel_size", "1", "no pipeline parallelism"},
    {"expert_model_parallel_size", "1", "no experts"},
    {"context_parallel_size", "1", "no context parallelism"},
    {"hybrid_attention_ratio", "0", "pure KDA: no softmax-attention layers"},
    {"eod_mask_loss", "false", "every target counts (FLA's objective has no EOD mask)"},
    {"use_torch_fsdp2", "false", "no FSDP"},
    {"create_attention_mask_in_dataloader", "false", "no attention mask (linear attention)"},
    {"stderr_sink_level", NULL, NULL},
    {"num_workers", NULL, NULL},
    {"profile", NULL, NULL},
    {"use_pytorch_profiler", NULL, NULL},
    {"log_avg_skip_iterations", NULL, NULL},
    {"log_avg_reset_interval", NULL, NULL},
    {"check_for_nan_in_loss_and_grad", NULL, NULL},
    {"barrier_with_L1_time", NULL, NULL},
    {"max_position_embeddings", NULL, NULL},
    {"original_max_position_embeddings", NULL, NULL},
    {"no_persist_layer_norm", NULL, NULL},
    {"tokenizer_type", NULL, NULL},
    {"tokenizer_model", NULL, NULL},
    {"overlap_grad_reduce", NULL, NULL},
    {"overlap_param_gather", NULL, NULL},
    {"gradient_accumulation_fusion", NULL, NULL},
    {"ddp_average_in_collective", NULL, NULL},
    {"mock_data", NULL, NULL},
    {"test_data_path", NULL, NULL},
    {"auto_continue_train", NULL, NULL},
    {"disable_last_saving", NULL, NULL},
    {"ckpt_format", NULL, NULL},
    {"enable_primus_turbo", NULL, NULL},
    {"use_turbo_attention", NULL, NULL},
};

static int yaml_bool_(const char *v, int *b) {
    static const char *const yes[] = {"true", "True", "TRUE", "yes", "on"};
    static const char *const no[] = {"false", "False", "FALSE", "no", "off"};
    for (int i = 0; i < 5; i++) {
        if (!strcmp(v, yes[i])) return *b = 1, 1;
        if (!strcmp(v, no[i])) return *b = 0, 1;
    }
    return 0;
}

// v (NULL: a YAML null) is what `need` says.
static int value_is_(const char *v, const char *need) {
    if (!v) return !strcmp(need, "false") || !strcmp(need, "0");
    char *e1, *e2;
    double a = strtod(v, &e1), b = strtod(need, &e2);
    if (e1 != v && !*e1 && e2 != need && !*e2) return a == b;
    int x, y;
    if (yaml_bool_(v, &x) && yaml_bool_(need, &y)) return x == y;
    return !strcmp(v, need);
}

static void note_ignored_(KdaRunConfig *cfg, const char *key);
static const char *shown_(const char *v, char *buf, size_t cap);

// 1: not such a key; 0: accepted (noted); -1: a value kda.c cannot honour (err set).
static int megatron_fixed_(KdaRunConfig *cfg, const char *key, const char *v, const char *where,
                           KdaError *err) {
    for (size_t i = 0; i < sizeof g_megatron_fixed / sizeof *g_megatron_fixed; i++) {
        if (!key_eq(g_megatron_fixed[i].key, key)) continue;
        const char *need = g_megatron_fixed[i].need;
        char sv[300];
        if (need && !value_is_(v, need))
            return kda_fail(err, "%skey '%s': kda.c supports only %s (%s), got '%s'", where, key,
                            need, g_megatron_fixed[i].why, v ? shown_(v, sv, sizeof sv) : "null");
        note_ignored_(cfg, key);
        return 0;
    }
    return 1;
}

static int is_noop_key(const char *name) {
    for (size_t i = 0; i < sizeof g_noop_keys / sizeof *g_noop_keys; i++) {
        const char *p = g_noop_keys[i];
        size_t n = strlen(p);
        if (p[n - 1] == '*' ? !strncmp(p, name, n - 1) : key_eq(p, name)) return 1;
    }
    return 0;
}

// Names other stacks use for our keys (HF Trainer, FLA's flame, torchtitan, Megatron): an
// exact alias beats edit distance ("learning_rate" is 11 edits from "lr"; Megatron's
// "num_layers" is a model setting, which lives in config.json).
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
    // Megatron / Primus
    {"train_samples", "train_iters"},
    {"lr_warmup_samples", "lr_warmup_iters"},
    {"lr_decay_samples", "lr_decay_iters"},
    {"lr_warmup_init", "lr_warmup_iters"},
    {"exit_interval", "train_iters"},
    {"tokenizer_model", "tokenizer"},
    {"tokenizer_type", "tokenizer"},
    {"test_data_path", "valid_data_path"},
    {"num_layers", "model"},
    {"hidden_size", "model"},
    {"ffn_hidden_size", "model"},
    {"num_attention_heads", "model"},
    {"max_position_embeddings", "model"},
    {"init_method_std", "model"},
    {"fp16", "bf16"},
    {"params_dtype", "bf16"},
    {"recompute_activations", "recompute_granularity"},
    {"recompute_method", "recompute_granularity"},
    {"recompute_num_layers", "recompute_granularity"},
    {"auto_continue_train", "load"},
    {"use_checkpoint_args", "load"},
    {"ckpt_format", "save"},
    {"eval_samples", "eval_iters"},
    {"weight_decay_incr_style", "weight_decay"},
    {"adam_epsilon", "adam_eps"},
    {"norm_eps", "layernorm_epsilon"}, // FLA's config.json name
    {"clip_grad_norm", "clip_grad"},
};

const char *kda_run_config_suggest(const char *key) {
    for (size_t i = 0; i < sizeof g_aliases / sizeof *g_aliases; i++)
        if (key_eq(key, g_aliases[i].alias)) return g_aliases[i].key;
    const char *names[N_KEYS];
    for (int k = 0; k < N_KEYS; k++)
        names[k] = g_keys[k].name;
    return str_closest(key, names, N_KEYS);
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
    list_clear(&cfg->ignored);
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
    str_set(&cfg->log_style, "megatron");
    cfg->bf16 = 1; // what the GPU path computes in (Megatron's default is fp32)
    cfg->distributed_timeout_minutes = 10; // Megatron's default
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
    case RC_BOOL: {
        // YAML 1.1 booleans (what PyYAML, and so Megatron's and Primus's loaders, accept)
        static const char *const yes[] = {"true", "True", "TRUE", "yes", "Yes", "on", "On", "1"};
        static const char *const no[] = {"false", "False", "FALSE", "no", "No", "off", "Off", "0"};
        for (int i = 0; i < 8; i++) {
            if (!strcmp(v, yes[i]) || !strcmp(v, no[i])) {
                *(int64_t *)p = !strcmp(v, yes[i]);
                return 0;
            }
        }
        return kda_fail(err, "%skey '%s': expected true or false, got '%s'", where, k->name,
                        shown_(v, sv, sizeof sv));
    }
    case RC_LIST:
        break;
    }
    return kda_fail(err, "%skey '%s': internal type error", where, k->name);
}

// The whitespace-separated words of s as a new list (Megatron's blend string "w1 p1 w2 p2",
// or a folded `>` scalar holding one path).
static int split_words_(const char *s, char ***out) {
    int n = 0;
    char **w = kda_calloc(strlen(s) / 2 + 2, sizeof *w);
    for (const char *c = s; *c;) {
        c += strspn(c, " \t\r\n");
        size_t len = strcspn(c, " \t\r\n");
        if (!len) break;
        w[n] = kda_malloc(len + 1);
        memcpy(w[n], c, len);
        w[n++][len] = 0;
        c += len;
    }
    *out = w;
    return n;
}

// split: a single value of a list key is split into words (a scalar or one command-line word;
// not the items of a YAML sequence, which may hold spaces).
static int set_values(KdaRunConfig *cfg, const RcKey *k, const char *const *vals, int n, int split,
                      const char *where, KdaError *err) {
    if (k->type == RC_LIST && n == 1 && split) {
        char **w;
        int nw = split_words_(vals[0], &w);
        KdaStrList *l = (KdaStrList *)((char *)cfg + k->offset);
        list_clear(l);
        l->items = w;
        l->n = nw;
        return 0;
    }
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

// " (did you mean 'x'?)" or "" (flag_prefix "--" for command-line flags).
static const char *did_you_mean_(const char *key, const char *flag_prefix, char *buf, size_t cap) {
    const char *s = kda_run_config_suggest(key);
    if (s)
        snprintf(buf, cap, " (did you mean '%s%s'?)", flag_prefix, s);
    else
        snprintf(buf, cap, " (kda train --help lists every key)");
    return buf;
}

// Unknown keys are collected so one run reports them all: "NAME: unknown key 'a' (did you
// mean ...?)" for one, "NAME: 3 unknown keys: line 2 'a' (...); line 5 'b' (...); ..." for more.
typedef struct {
    char text[900];
    size_t len;
    int n;
    char first[600]; // the one-key message
} Unknowns;

// where: the one-key message's prefix ("t.yaml:2: "); label: the item's ("line 2" or "").
static void unknowns_add_(Unknowns *u, const char *where, const char *label, const char *what,
                          const char *key, const char *flag_prefix) {
    char sk[300], dm[160];
    shown_(key, sk, sizeof sk);
    did_you_mean_(key, flag_prefix, dm, sizeof dm);
    if (u->n == 0)
        snprintf(u->first, sizeof u->first, "%sunknown %s '%s%s'%s", where, what, flag_prefix, sk,
                 dm);
    if (u->len < sizeof u->text - 1) {
        int w = snprintf(u->text + u->len, sizeof u->text - u->len, "%s%s%s'%s%s'%s",
                         u->n ? "; " : "", label, *label ? " " : "", flag_prefix, sk, dm);
        u->len = w < 0 ? u->len : u->len + (size_t)w;
        if (u->len > sizeof u->text - 1) u->len = sizeof u->text - 1;
    }
    u->n++;
}

static int unknowns_fail_(const Unknowns *u, const char *name, const char *what, KdaError *err) {
    if (u->n == 1) return kda_fail(err, "%s", u->first);
    return kda_fail(err, "%s%s%d unknown %ss: %s", name, *name ? ": " : "", u->n, what, u->text);
}

// A no-op key: noted once in cfg->ignored (the caller reports the list in one line).
static void note_ignored_(KdaRunConfig *cfg, const char *key) {
    for (int i = 0; i < cfg->ignored.n; i++)
        if (key_eq(cfg->ignored.items[i], key)) return;
    cfg->ignored.items =
        kda_realloc(cfg->ignored.items, (size_t)(cfg->ignored.n + 1) * sizeof(char *));
    cfg->ignored.items[cfg->ignored.n++] = kda_strdup(key);
}

int kda_run_config_set(KdaRunConfig *cfg, const char *key, const char *const *vals, int n_vals,
                       KdaError *err) {
    const RcKey *k = key_find(key);
    if (!k && is_noop_key(key)) return note_ignored_(cfg, key), 0;
    if (!k) {
        char sk[300], dm[160];
        return kda_fail(err, "unknown key '%s'%s", shown_(key, sk, sizeof sk),
                        did_you_mean_(key, "", dm, sizeof dm));
    }
    return set_values(cfg, k, vals, n_vals, 1, "", err);
}

// ---------------------------------------------------------------------------------------------
// YAML (libyaml document API): a flat mapping of scalars and sequences of scalars.

static int yaml_is_null(const yaml_node_t *n) {
    if (n->type != YAML_SCALAR_NODE) return 0;
    if (n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return 0;
    const char *v = (const char *)n->data.scalar.value;
    return !*v || !strcmp(v, "~") || !strcmp(v, "null") || !strcmp(v, "Null") || !strcmp(v, "NULL");
}

// A block scalar (`>` folded, `|` literal) without its leading and trailing whitespace: YAML
// keeps the final newline ("train_data_path: >" would name "prefix\n.idx"). Owned copy.
static char *block_trimmed_(const yaml_node_t *n) {
    const char *v = (const char *)n->data.scalar.value;
    v += strspn(v, " \t\r\n");
    size_t len = strlen(v);
    while (len && strchr(" \t\r\n", v[len - 1]))
        len--;
    char *s = kda_malloc(len + 1);
    memcpy(s, v, len);
    s[len] = 0;
    return s;
}

static int yaml_apply_pair(KdaRunConfig *cfg, yaml_document_t *doc, yaml_node_pair_t *pair,
                           const char *name, unsigned *seen, Unknowns *unk, KdaError *err) {
    yaml_node_t *kn = yaml_document_get_node(doc, pair->key);
    yaml_node_t *vn = yaml_document_get_node(doc, pair->value);
    char where[600];
    snprintf(where, sizeof where, "%s:%zu: ", name, kn->start_mark.line + 1);
    if (kn->type != YAML_SCALAR_NODE) return kda_fail(err, "%sexpected a plain key", where);
    const char *key = (const char *)kn->data.scalar.value;
    const RcKey *k = key_find(key);
    if (!k && is_noop_key(key)) return note_ignored_(cfg, key), 0;
    if (!k && (vn->type == YAML_SCALAR_NODE || yaml_is_null(vn))) {
        int r = megatron_fixed_(
            cfg, key, yaml_is_null(vn) ? NULL : (const char *)vn->data.scalar.value, where, err);
        if (r <= 0) return r;
    }
    if (!k) {
        char line[32];
        snprintf(line, sizeof line, "line %zu", kn->start_mark.line + 1);
        unknowns_add_(unk, where, line, "key", key, "");
        return 0;
    }
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
        yaml_scalar_style_t st = vn->data.scalar.style;
        if (st == YAML_FOLDED_SCALAR_STYLE || st == YAML_LITERAL_SCALAR_STYLE) {
            char *v = block_trimmed_(vn);
            int rc = set_values(cfg, k, (const char *const *)&v, 1, 1, where, err);
            free(v);
            return rc;
        }
        const char *v = (const char *)vn->data.scalar.value;
        return set_values(cfg, k, &v, 1, 1, where, err);
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
        int rc = set_values(cfg, k, vals, n, 0, where, err);
        free(vals);
        return rc;
    }
    return kda_fail(err, "%skey '%s': expected %s", where, k->name,
                    k->type == RC_LIST ? "a list or a single value"
                                       : "a single value, not a list or mapping");
}

// The value of key in mapping m, or NULL.
static yaml_node_t *map_get_(yaml_document_t *doc, const yaml_node_t *m, const char *key) {
    if (!m || m->type != YAML_MAPPING_NODE) return NULL;
    for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key);
        if (k->type == YAML_SCALAR_NODE && !strcmp((const char *)k->data.scalar.value, key))
            return yaml_document_get_node(doc, p->value);
    }
    return NULL;
}

// Primus's experiment file: work_group/user_name/exp_name/workspace and
// modules.pre_trainer.{framework, config, model, overrides}; the Megatron keys are the
// overrides. Returns the overrides mapping (NULL with err set when the shape is not Primus's).
// The experiment's own keys are noted in cfg->ignored; its model YAML is Primus's, not a
// config.json, so `model` (or finetune + load) has to be given separately.
static yaml_node_t *primus_overrides_(KdaRunConfig *cfg, yaml_document_t *doc, yaml_node_t *root,
                                      const char *name, KdaError *err) {
    yaml_node_t *pre = map_get_(doc, map_get_(doc, root, "modules"), "pre_trainer");
    yaml_node_t *ov = map_get_(doc, pre, "overrides"), *fw = map_get_(doc, pre, "framework");
    if (!ov || ov->type != YAML_MAPPING_NODE) {
        kda_fail(err, "%s: modules: expected Primus's modules.pre_trainer.overrides mapping", name);
        return NULL;
    }
    if (fw && fw->type == YAML_SCALAR_NODE &&
        strcmp((const char *)fw->data.scalar.value, "megatron")) {
        char sv[300];
        kda_fail(err, "%s: modules.pre_trainer.framework: expected megatron, got '%s'", name,
                 shown_((const char *)fw->data.scalar.value, sv, sizeof sv));
        return NULL;
    }
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key);
        if (k->type == YAML_SCALAR_NODE && strcmp((const char *)k->data.scalar.value, "modules"))
            note_ignored_(cfg, (const char *)k->data.scalar.value);
    }
    const char *sub[2] = {"config", "model"};
    for (int i = 0; i < 2; i++)
        if (map_get_(doc, pre, sub[i]))
            note_ignored_(cfg, i ? "modules.pre_trainer.model (a Primus model YAML)"
                                 : "modules.pre_trainer.config");
    return ov;
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
    } else if (root && map_get_(&doc, root, "modules") &&
               !(root = primus_overrides_(cfg, &doc, root, name, err))) {
        rc = -1;
    } else if (root) {
        unsigned seen[(N_KEYS + 31) / 32] = {0};
        Unknowns unk = {.n = 0};
        for (yaml_node_pair_t *p = root->data.mapping.pairs.start;
             rc == 0 && p < root->data.mapping.pairs.top; p++)
            rc = yaml_apply_pair(cfg, &doc, p, name, seen, &unk, err);
        if (rc == 0 && unk.n) rc = unknowns_fail_(&unk, name, "key", err);
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
    Unknowns unk = {.n = 0};
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
        if (!k) { // no-op and Megatron-fixed keys are noted, others collected; skip the values
            const char *val = eq                                      ? eq + 1
                              : i + 1 < argc && !is_flag(argv[i + 1]) ? argv[i + 1]
                                                                      : NULL;
            int r = is_noop_key(key) ? (note_ignored_(cfg, key), 0)
                                     : megatron_fixed_(cfg, key, val, where, err);
            if (r < 0) return -1;
            if (r == 1) unknowns_add_(&unk, "", "", "flag", key, "--");
            for (i++; !eq && i < argc && !is_flag(argv[i]); i++) {
            }
            continue;
        }
        if (eq) {
            const char *v = eq + 1;
            if (set_values(cfg, k, &v, 1, 1, where, err)) return -1;
            i++;
            continue;
        }
        int j = i + 1;
        while (j < argc && !is_flag(argv[j]) && (k->type == RC_LIST || j == i + 1))
            j++;
        if (k->type != RC_LIST && j == i + 1) return kda_fail(err, "%smissing value", where);
        if (set_values(cfg, k, (const char *const *)argv + i + 1, j - i - 1, 1, where, err))
            return -1;
        i = j;
    }
    return unk.n ? unknowns_fail_(&unk, "", "flag", err) : 0;
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

// lr_warmup_fraction -> lr_warmup_iters (needs lr_decay_iters resolved).
static int resolve_warmup_(KdaRunConfig *c, KdaError *err) {
    if (!(c->lr_warmup_fraction >= 0 && c->lr_warmup_fraction <= 1))
        return kda_fail(err, "lr_warmup_fraction must be in [0, 1] (got %g)",
                        c->lr_warmup_fraction);
    if (c->lr_warmup_fraction > 0) {
        if (c->lr_warmup_iters > 0)
            return kda_fail(err, "lr_warmup_fraction and lr_warmup_iters are both set (Megatron "
                                 "allows only one)");
        // Megatron keeps the fractional step count; our schedule counts whole updates
        c->lr_warmup_iters = llround(c->lr_warmup_fraction * (double)c->lr_decay_iters);
        c->lr_warmup_fraction = 0;
    }
    return 0;
}

// The Megatron/Primus keys kda.c checks rather than uses (run_config.h).
static int validate_megatron_(const KdaRunConfig *c, KdaError *err) {
    if (c->hidden_dropout != 0 || c->attention_dropout != 0)
        return kda_fail(err,
                        "hidden_dropout %g, attention_dropout %g: kda.c has no dropout (FLA's "
                        "KDA has none; training-recipe.md §5); set both to 0",
                        c->hidden_dropout, c->attention_dropout);
    if (!(c->layernorm_epsilon >= 0))
        return kda_fail(err, "layernorm_epsilon must be > 0 (or 0: the model's norm_eps)");
    if ((c->no_load_optim || c->no_load_rng) && !c->finetune)
        return kda_fail(err, "no_load_optim / no_load_rng without finetune: kda.c resumes a "
                             "checkpoint completely; finetune: true starts from the weights of "
                             "`load` only (fresh optimizer and RNG, iteration 0)");
    if (c->finetune && !c->load)
        return kda_fail(err,
                        "finetune: true needs load: DIR (an HF model dir or a kda checkpoint)");
    if (!c->bf16 && c->device && !strcmp(c->device, "cuda"))
        return kda_fail(err, "bf16: false with device: cuda: kda.c's GPU path computes in bf16 "
                             "(fp32 master weights); use device: cpu for fp32 compute");
    if (!(c->exit_duration_in_mins >= 0))
        return kda_fail(err, "exit_duration_in_mins must be >= 0 (0: no limit)");
    return 0;
}

// Size bounds (docs/reliability.md): far above any real run, low enough that the sample
// indexes, batches and the products below fit int64 and memory; checked before any
// allocation, in an order where each product is bounded by the checks before it.
#define MAX_ITERS      ((int64_t)1 << 31)
#define MAX_BATCH      ((int64_t)1 << 24) // global_batch_size
#define MAX_MICRO      ((int64_t)1 << 14) // micro_batch_size
#define MAX_SEQ        ((int64_t)1 << 22) // seq_length
#define MAX_MICRO_TOKS ((int64_t)1 << 24) // micro_batch_size * seq_length
#define MAX_SAMPLES    ((int64_t)1 << 31) // samples drawn by training or by all evaluations

static int over_(const char *key, int64_t v, int64_t max, KdaError *err) {
    if (v <= max) return 0;
    return kda_fail(err, "%s: %lld exceeds the limit %lld", key, (long long)v, (long long)max);
}

static int validate_sizes_(const KdaRunConfig *c, KdaError *err) {
    if (over_("train_iters", c->train_iters, MAX_ITERS, err) ||
        over_("global_batch_size", c->global_batch_size, MAX_BATCH, err) ||
        over_("micro_batch_size", c->micro_batch_size, MAX_MICRO, err) ||
        over_("seq_length", c->seq_length, MAX_SEQ, err) ||
        over_("eval_iters", c->eval_iters, MAX_ITERS, err) ||
        over_("micro_batch_size * seq_length", c->micro_batch_size * c->seq_length, MAX_MICRO_TOKS,
              err))
        return -1;
    int64_t train = c->train_iters * c->global_batch_size; // <= 2^55
    if (train > MAX_SAMPLES)
        return kda_fail(err,
                        "train_iters %lld x global_batch_size %lld = %lld samples exceeds the "
                        "limit %lld",
                        (long long)c->train_iters, (long long)c->global_batch_size,
                        (long long)train, (long long)MAX_SAMPLES);
    if (c->eval_interval > 0 && c->eval_iters > 0) {
        int64_t n_evals = c->train_iters / c->eval_interval + 1; // <= 2^31 + 1
        if (c->eval_iters > MAX_SAMPLES / c->global_batch_size / n_evals)
            return kda_fail(err,
                            "eval_iters %lld x global_batch_size %lld x %lld evaluations exceeds "
                            "the limit of %lld validation samples",
                            (long long)c->eval_iters, (long long)c->global_batch_size,
                            (long long)n_evals, (long long)MAX_SAMPLES);
    }
    return 0;
}

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
    if (c->eval_iters < 0 || c->eval_interval < 0)
        return kda_fail(err, "intervals, counts and threads must be >= 0");
    if (validate_sizes_(c, err)) return -1;
    if (c->lr_decay_iters == 0) c->lr_decay_iters = c->train_iters;
    if (resolve_warmup_(c, err)) return -1;
    if (!(c->clip_grad >= 0)) return kda_fail(err, "clip_grad must be >= 0 (0 = off)");
    if (c->seed < 0 || c->seed > 0xffffffffll) return kda_fail(err, "seed must be in [0, 2^32)");
    if (c->save_interval < 0 || c->eval_interval < 0 || c->eval_iters < 0 || c->log_interval < 0 ||
        c->keep_last < 0 || c->max_nan_steps < 0 || c->threads < 0)
        return kda_fail(err, "intervals, counts and threads must be >= 0");
    if (!(c->distributed_timeout_minutes > 0))
        return kda_fail(err, "distributed_timeout_minutes must be > 0");
    if (!c->model && !(c->finetune && c->load))
        return kda_fail(err, "model (path of config.json) is not set (or finetune: true with "
                             "load: DIR takes it from DIR)");
    if (validate_megatron_(c, err)) return -1;
    // the choices, the schedule, the split of one rank's batch and the blends (run_plan.h)
    KdaRunPlan plan;
    if (kda_run_plan(c, 1, &plan, err)) return -1;
    kda_run_plan_free(&plan);
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
        case RC_BOOL:
            fprintf(f, " %s\n", *(const int64_t *)p ? "true" : "false");
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

// ---------------------------------------------------------------------------------------------
// Help and the finetune source

static void print_default_(FILE *f, const RcKey *k, const KdaRunConfig *d) {
    const void *p = (const char *)d + k->offset;
    switch (k->type) {
    case RC_INT:
        fprintf(f, "%lld", (long long)*(const int64_t *)p);
        break;
    case RC_BOOL:
        fputs(*(const int64_t *)p ? "true" : "false", f);
        break;
    case RC_FLOAT:
        write_double(f, *(const double *)p);
        break;
    case RC_STR:
        fputs(*(char *const *)p ? *(char *const *)p : "null", f);
        break;
    case RC_LIST:
        fputs("[]", f);
        break;
    }
}

void kda_run_config_print_keys(FILE *f) {
    static const char *const type_name[] = {"int", "float", "str", "list", "bool"};
    KdaRunConfig d;
    kda_run_config_defaults(&d);
    for (int i = 0; i < N_KEYS; i++) {
        const RcKey *k = &g_keys[i];
        fprintf(f, "  %-26s %-5s ", k->name, k->choices ? "enum" : type_name[k->type]);
        if (k->choices) fprintf(f, "%s, ", k->choices);
        fputs("default ", f);
        print_default_(f, k, &d);
        fprintf(f, "\n      %s\n", k->help);
    }
    fprintf(f, "  %-26s no-op: selects Primus/FLA kernels (kda.c has one implementation)\n",
            "spec, use_fla_*");
    kda_run_config_free(&d);
}

int kda_run_config_init_dir(const KdaRunConfig *c, char *model_dir, size_t cap, KdaError *err) {
    if (!c->finetune || !c->load) return 0;
    char p[PATH_MAX];
    path_join(p, sizeof p, c->load, "config.json");
    if (path_exists(p)) { // an HF model dir (a kda iter_* checkpoint is one too)
        snprintf(model_dir, cap, "%s", c->load);
        return 1;
    }
    int got = kda_checkpoint_resolve(c->load, model_dir, cap, err);
    if (got == 1)
        return kda_fail(err,
                        "load %s (finetune): neither an HF model dir (no config.json) nor a kda "
                        "checkpoint (no `latest`)",
                        c->load);
    return got < 0 ? -1 : 1;
}
