// params.h - the parameter table: one row per FLA state_dict tensor (name, shape, init rule,
// weight-decay flag, offset into the flat buffers). Init, weight decay, checkpoint names,
// export and optimizer loops all iterate this table; nothing indexes parameters by number.
//
// Layout: all parameters live in one flat fp32 buffer of table.total_numel elements, rows in
// FLA's state_dict order (kda-model.md §3). Gradients, Adam moments (and GPU copies) use the
// same layout, so one offset addresses a tensor in every buffer. When tied, lm_head.weight is
// not a row of its own: KdaTensors.lm_head points at the embedding.
#ifndef KDA_PARAMS_H
#define KDA_PARAMS_H

#include <stddef.h>
#include <stdint.h>

#include "model/config.h"

typedef enum {
    KDA_INIT_NORMAL, // N(0, initializer_range^2)
    KDA_INIT_ONES,
    KDA_INIT_ZEROS,
    KDA_INIT_A_LOG,  // ln U[1, 16] (0 when safe_gate)
    KDA_INIT_DT_BIAS // softplus^-1 of log-uniform [1e-3, 0.1], clamped >= 1e-4
} KdaInit;

// Per-block tensors; shapes as kda-model.md §3, [out, in] for Linear weights.
typedef struct {
    float *attn_norm;    // [D]
    float *A_log;        // [HV]
    float *dt_bias;      // [HV*K], head-major
    float *q_proj;       // [H*K, D]
    float *k_proj;       // [H*K, D]
    float *v_proj;       // [HV*V, D]
    float *q_conv;       // [H*K, 1, W], tap W-1 = current token
    float *k_conv;       // [H*K, 1, W]
    float *v_conv;       // [HV*V, 1, W]
    float *f_proj0;      // [V, D]
    float *f_proj1;      // [HV*K, V]
    float *b_proj;       // [HV, D]
    float *g_proj0;      // [V, D]
    float *g_proj1;      // [HV*V, V]
    float *g_proj1_bias; // [HV*V]
    float *o_norm;       // [V], shared by all value heads
    float *o_proj;       // [D, HV*V]
    float *mlp_norm;     // [D]
    float *gate_proj;    // [I, D]
    float *up_proj;      // [I, D]
    float *down_proj;    // [D, I]
} KdaLayerTensors;

// Named views into one flat buffer (parameters, gradients or moments). Borrowed pointers.
typedef struct {
    float *embed;            // [n_vocab, D]
    KdaLayerTensors *layers; // [L], owned array
    float *final_norm;       // [D]
    float *lm_head;          // [n_vocab, D]; equals embed when tied
    int64_t n_layers;
} KdaTensors;

typedef struct {
    char name[96]; // FLA state_dict key, e.g. "model.layers.3.attn.dt_bias"
    int ndim;
    int64_t shape[3];
    int64_t numel;
    KdaInit init;
    int weight_decay; // 1: AdamW decays it (training-recipe.md §1.3)
    int layer;        // block index, -1 for top-level tensors
    size_t field;     // offsetof(KdaLayerTensors, ...) for block tensors,
                      // offsetof(KdaTensors, ...) for top-level ones
    int64_t offset;   // element offset into the flat buffers
} KdaParamInfo;

typedef struct {
    KdaParamInfo *rows; // owned
    int n;
    int64_t total_numel; // unique parameters (tied head counted once)
} KdaParamTable;

int kda_params_build(KdaParamTable *t, const KdaConfig *c, KdaError *err);
void kda_params_free(KdaParamTable *t);
const KdaParamInfo *kda_params_find(const KdaParamTable *t, const char *name);
// Points every field of w into flat (total_numel floats). kda_tensors_free releases w->layers.
void kda_tensors_bind(KdaTensors *w, const KdaParamTable *t, float *flat);
void kda_tensors_free(KdaTensors *w);
// Row of the first tensor of flat (a [total_numel] buffer in the table's layout: parameters,
// gradients or moments) holding a NaN or inf, or NULL when every element is finite.
const KdaParamInfo *kda_params_first_nonfinite(const KdaParamTable *t, const float *flat);
// Draws every tensor by its init rule from a seeded RNG (deterministic for a seed).
void kda_params_init(const KdaParamTable *t, const KdaConfig *c, float *flat, uint64_t seed);
// FLOPs per token for training (6 x matmul weights + KDA core + conv), training-recipe.md §4.2.
// seq_len only matters below the chunk size 64 (shorter chunks). 300M at 2048: ~1.835e9.
double kda_model_flops_per_token(const KdaConfig *c, int64_t seq_len);
// What Megatron's dense-transformer formula reports for the same model (training-recipe.md
// §4.1; 2L sublayers counted as attention+MLP blocks). For comparison in logs only.
double kda_megatron_flops_per_token(const KdaConfig *c, int64_t seq_len);
// Parameter counts straight from the config (kda-model.md §4): unique parameters (tied head
// counted once), the matmul weights used for FLOPs (all Linear weights + head once).
int64_t kda_params_count(const KdaConfig *c);
int64_t kda_params_matmul_count(const KdaConfig *c);

#endif
