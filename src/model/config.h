// config.h - KDA model configuration: FLA's HF config.json (model_type "kda") and derived dims.
//
// Every KDAConfig key of FLA (kda-model.md §1.1) is kept so that a config read and written
// back is the same model. Derived sizes follow §9.1: HV = num_v_heads or num_heads,
// V = int(head_dim * expand_v), I = intermediate_size or round_up_256(int(D*hidden_ratio*2/3)).
#ifndef KDA_CONFIG_H
#define KDA_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/json.h"

typedef struct {
    // FLA keys (names as in config.json)
    char attn_mode[32];  // "chunk" | "fused_recurrent"
    int64_t hidden_size; // D
    double expand_v;
    int use_short_conv;
    int allow_neg_eigval; // beta = 2*sigmoid(b)
    int safe_gate;        // requires lower_bound
    int has_lower_bound;  // lower_bound != null: bounded sigmoid gate (§5.8)
    double lower_bound;
    int64_t conv_size;       // W
    int64_t head_dim;        // K
    int64_t num_heads;       // H
    int64_t num_v_heads_raw; // 0 when null in the file
    int64_t max_position_embeddings;
    int64_t hidden_ratio;
    int64_t intermediate_size_raw; // 0 when null in the file
    char hidden_act[16];           // "swish"
    int64_t num_hidden_layers;     // L
    double norm_eps;
    int use_cache;
    int has_pad_token_id;
    int64_t pad_token_id;
    int has_bos_token_id, has_eos_token_id; // 0 when null in the file
    int64_t bos_token_id, eos_token_id;
    int tie_word_embeddings;
    double initializer_range;
    int fuse_norm, fuse_swiglu, fuse_cross_entropy, use_l2warp;
    int64_t vocab_size;   // n_vocab
    char torch_dtype[16]; // as read ("float32", "bfloat16", ...) or ""

    // derived (kda_config_derive fills these)
    int64_t num_v_heads;       // HV
    int64_t head_v_dim;        // V
    int64_t intermediate_size; // I
    int64_t key_dim;           // H*K
    int64_t value_dim;         // HV*V
    int64_t gate_dim;          // HV*K
} KdaConfig;

// FLA's constructor defaults (kda-model.md §1.1).
void kda_config_defaults(KdaConfig *c);
// Fills the derived fields and validates ranges; errors name `src` and the field.
int kda_config_derive(KdaConfig *c, const char *src, KdaError *err);
// Reads config.json (a file, or a directory holding config.json). Rejects model_type other
// than "kda", hybrid `attn` layers and `attnres_block_size` with a clear error.
int kda_config_load(KdaConfig *c, const char *path, KdaError *err);
int kda_config_from_json(KdaConfig *c, const JsonValue *root, const char *src, KdaError *err);
// Writes FLA-format config.json atomically (architectures ["KDAForCausalLM"], every key;
// null where the file had null). torch_dtype: the stored dtype ("float32", "bfloat16"), or
// NULL to keep c->torch_dtype (omitted when that is empty).
int kda_config_save(const KdaConfig *c, const char *path, const char *torch_dtype, KdaError *err);
// 1 when every FLA key (the raw values, not torch_dtype) of a and b is equal.
int kda_config_equal(const KdaConfig *a, const KdaConfig *b);
// First FLA config key (in config.json's order) whose value differs between a and b, use_cache
// aside (it does not change the model); writes "field: A vs B" into out (cap bytes; field is
// the KdaConfig member, e.g. num_v_heads_raw) and returns 1, or returns 0 when the configs are
// the same model.
int kda_config_diff(const KdaConfig *a, const KdaConfig *b, char *out, size_t cap);

#endif
