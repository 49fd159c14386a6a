// run_config.h - the training run configuration: a flat YAML mapping with Megatron/Primus key
// names (plus a few kda.c keys), command-line overrides, validation, and write-back.
//
// Keys (type, default) - Megatron names unless marked (kda):
//   train_iters (int, 0)         micro_batch_size (int, 1)     global_batch_size (int, 1)
//   seq_length (int, 2048)       lr (float, 2e-4)              min_lr (float, 2e-5)
//   lr_warmup_iters (int, 0)     lr_decay_iters (int, 0 = train_iters)
//   lr_decay_style (cosine|linear|constant, cosine)
//   adam_beta1 (0.9)  adam_beta2 (0.95)  adam_eps (1e-8)  weight_decay (0.01)  clip_grad (1.0)
//   seed (int, 42)  save (str)  save_interval (int, 0 = only at the end)  load (str)
//   eval_interval (int, 0)  eval_iters (int, 0)  log_interval (int, 100)
//   train_data_path, valid_data_path (lists: plain paths, or Megatron blends "w1 p1 w2 p2")
//   split (str, "969,30,1")  model (config.json path)  tokenizer (tokenizer.json path)
//   objective (megatron|fla, megatron) (kda)   data_order (megatron|fla, megatron) (kda)
//   keep_last (int, 0 = keep all) (kda)
//   max_nan_steps (int, 0 = stop at the first non-finite loss/grad norm; N > 0 = skip, stop at
//     N consecutive) (kda)   device (cpu|cuda, cpu) (kda)   threads (int, 0 = auto) (kda)
//   recompute_granularity (none|full, none): full = Megatron's full recompute of every block
//     (uniform, 1 layer): keep each block's input, re-run its forward in the backward (GPU)
// objective = what a row holds: megatron = seq_length + 1 tokens, seq_length targets; fla =
// seq_length tokens, seq_length - 1 targets (last position ignored). data_order = which rows in
// which order: megatron = GPTDataset windows (shuffled, multi-epoch); fla = FLA's chunk dataset
// (one seq_length-token chunk per row, the split's sequences concatenated and cut, remainder
// dropped) in Primus's FLAOrderGPTDataset order with our seeded permutation (loader.h).
// data_order: fla requires objective: fla and a single train/valid dataset (no blend);
// objective: fla with data_order: megatron is the first seq_length tokens of each window.
// A YAML null (`~`, `null`, empty) unsets a string or list; numbers must be numbers.
// Dashes and underscores in key names are equivalent ("lr-warmup-iters").
#ifndef KDA_RUN_CONFIG_H
#define KDA_RUN_CONFIG_H

#include <stdint.h>
#include <stdio.h>

#include "core/error.h"

typedef struct {
    char **items; // owned strings
    int n;
} KdaStrList;

typedef struct {
    int64_t train_iters;
    int64_t micro_batch_size;
    int64_t global_batch_size;
    int64_t seq_length;
    double lr;
    double min_lr;
    int64_t lr_warmup_iters;
    int64_t lr_decay_iters;
    char *lr_decay_style;
    double adam_beta1;
    double adam_beta2;
    double adam_eps;
    double weight_decay;
    double clip_grad;
    int64_t seed;
    char *save; // checkpoint directory (NULL: no checkpoints)
    int64_t save_interval;
    char *load; // checkpoint to resume from (NULL: fresh start)
    int64_t eval_interval;
    int64_t eval_iters;
    int64_t log_interval;
    KdaStrList train_data_path;
    KdaStrList valid_data_path;
    char *split;
    char *model;
    char *tokenizer;
    char *objective;  // "megatron" | "fla"
    char *data_order; // "megatron" | "fla"
    int64_t keep_last;
    int64_t max_nan_steps;
    char *device; // "cpu" | "cuda"
    int64_t threads;
    char *recompute_granularity; // "none" | "full" (per-block activation recompute, GPU only)
    // Megatron/Primus keys (kda_run_config_validate checks or resolves them)
    double layernorm_epsilon;           // 0: the model's norm_eps; else must equal it (trainer)
    double hidden_dropout;              // must be 0 (kda.c has no dropout, like FLA)
    double attention_dropout;           // must be 0
    int64_t bf16;                       // bool: bf16 compute on the GPU (the CPU computes in fp32)
    int64_t use_distributed_optimizer;  // bool: ZeRO-1 over the data-parallel ranks (dist.h)
    double distributed_timeout_minutes; // > 0: rendezvous and collective timeout (default 10)
    int64_t finetune;             // bool: `load` gives the starting weights only (= init-from)
    int64_t no_load_optim;        // bool: with finetune (implied by it)
    int64_t no_load_rng;          // bool: with finetune (implied by it)
    double exit_duration_in_mins; // > 0: save and stop after this much wall time
    double lr_warmup_fraction;    // > 0: lr_warmup_iters = fraction x lr_decay_iters (validate)
    char *tensorboard_dir;        // TensorBoard event file directory (NULL: none)
    char *log_style;              // "megatron" | "primus" (the log line's format)
    // Not keys: what parsing noted for the caller to report (owned lists).
    KdaStrList ignored; // no-op keys that select Primus/FLA internals ("spec", "use_fla_*")
} KdaRunConfig;

// Megatron/Primus keys: layernorm_epsilon (0 = the model's norm_eps, else checked against it),
// hidden_dropout / attention_dropout (must be 0), bf16, use_distributed_optimizer, finetune +
// no_load_optim + no_load_rng + load (= --init-from: `load` is an HF dir or a kda checkpoint,
// and when `model` is unset the model config comes from it), data_path (= train_data_path),
// norm_epsilon (= layernorm_epsilon), exit_duration_in_mins, lr_warmup_fraction. Keys that
// select Primus/FLA kernels (`spec`, `use_fla_*`) are accepted as no-ops and listed in
// cfg->ignored. A list key given one scalar is split on whitespace (the blend "w1 p1 w2 p2");
// folded and literal block scalars (`>`, `|`) lose their surrounding whitespace.
// Every string of cfg is owned; free with kda_run_config_free (accepts a zeroed struct).
void kda_run_config_defaults(KdaRunConfig *cfg);
void kda_run_config_free(KdaRunConfig *cfg);

// Applies the YAML file at path on top of cfg. Errors name the file, line and key:
// unknown keys (all of them in one message, each with a suggestion: another stack's name for
// it, else the nearest valid name), wrong type, duplicate key, non-flat value.
// On error cfg may be partly updated.
int kda_run_config_load(KdaRunConfig *cfg, const char *path, KdaError *err);
// Same for YAML text in memory (name is used in messages).
int kda_run_config_parse(KdaRunConfig *cfg, const char *text, size_t n, const char *name,
                         KdaError *err);

// Sets one key from n_vals strings (exactly one for scalars; any number for lists).
int kda_run_config_set(KdaRunConfig *cfg, const char *key, const char *const *vals, int n_vals,
                       KdaError *err);
// Applies "--key value", "--key=value" and "--list_key v1 v2 ..." (every following word that
// does not start with "--") from argv[0..argc). Unknown keys fail with a suggestion.
int kda_run_config_apply_args(KdaRunConfig *cfg, int argc, char **argv, KdaError *err);
// The trainer's entry: defaults, then the YAML named by "--config PATH" if present, then every
// other flag as an override (in argv order).
int kda_run_config_from_cli(KdaRunConfig *cfg, int argc, char **argv, KdaError *err);

// Cross-field checks: train_iters > 0, global % micro == 0, seq_length >= 2, a valid schedule,
// model (or finetune + load) and train_data_path set, intervals >= 0, dropout 0, no_load_*
// only with finetune. Sets lr_decay_iters = train_iters when 0 and resolves lr_warmup_fraction
// into lr_warmup_iters (rounded to whole iterations; the fraction is then reset to 0).
int kda_run_config_validate(KdaRunConfig *cfg, KdaError *err);

// Data paths of a list: a Megatron blend ("w1 p1 w2 p2", detected by a numeric first item)
// gives *weights (owned, normalized to sum 1); a plain list gives *weights = NULL.
// *paths is an owned array of strings borrowed from list; the caller frees both arrays.
// n_out = number of datasets (0 and NULLs for an empty list).
int kda_run_config_blend(const KdaStrList *list, const char ***paths, double **weights, int *n_out,
                         KdaError *err);

// Writes the effective config as YAML (every key, in table order); the _atomic form writes
// path via a temp file + rename. The result reads back to an identical config.
int kda_run_config_write(const KdaRunConfig *cfg, FILE *f);
int kda_run_config_write_atomic(const KdaRunConfig *cfg, const char *path, KdaError *err);

// A suggestion for an unknown key: the key another stack's name maps to (HF Trainer, flame,
// Megatron), else the valid key closest by edit distance when it is close (at most a third of
// the name's length), else NULL. Dashes = underscores.
const char *kda_run_config_suggest(const char *key);

// Prints every key with its type, default and meaning (kda train --help), in table order.
void kda_run_config_print_keys(FILE *f);

// Where the run's starting weights come from: finetune + load, else NULL. *model_dir receives
// the directory holding config.json + model.safetensors (load itself for an HF dir, or the
// checkpoint `latest` names / the iter_* dir for a kda checkpoint); cap bytes.
// Returns 1 with model_dir filled, 0 when the run does not start from loaded weights, -1 on
// error (load missing, neither kind of directory).
int kda_run_config_init_dir(const KdaRunConfig *cfg, char *model_dir, size_t cap, KdaError *err);

#endif
