// params.c - the parameter table (FLA state_dict order), tensor binding, init, counts, FLOPs.
//
// Row order = torch state_dict order of KDAForCausalLM (kda-model.md §2, §3): the embedding,
// then per block attn_norm, attn (own parameters A_log and dt_bias before its children), mlp_norm,
// mlp; then the final norm and, when untied, lm_head. Offsets are dense in that order.
#include "model/params.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h" // defines: KdaRng, rng_seed, rng_uniform, rng_normal

// ---------------------------------------------------------------------------------------------
// Table construction

static void add_row(KdaParamTable *t, int *cap, const char *name, int ndim, int64_t d0, int64_t d1,
                    int64_t d2, KdaInit init, int decay, int layer, size_t field) {
    if (t->n == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        t->rows = kda_realloc(t->rows, (size_t)*cap * sizeof *t->rows);
    }
    KdaParamInfo *r = &t->rows[t->n++];
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", name);
    r->ndim = ndim;
    int64_t dims[3] = {d0, d1, d2};
    r->numel = 1;
    for (int i = 0; i < ndim; i++)
        r->shape[i] = dims[i], r->numel *= dims[i];
    r->init = init;
    r->weight_decay = decay;
    r->layer = layer;
    r->field = field;
    r->offset = t->total_numel;
    t->total_numel += r->numel;
}

#define LF(f) offsetof(KdaLayerTensors, f)
#define TF(f) offsetof(KdaTensors, f)

// One block's rows. Weight decay per training-recipe.md §1.3: no decay for norm weights,
// dt_bias and g_proj.1.bias; decay for matrices, conv weights and A_log.
static void add_layer(KdaParamTable *t, int *cap, const KdaConfig *c, int i) {
    const int64_t D = c->hidden_size, HK = c->key_dim, HVV = c->value_dim, HVK = c->gate_dim;
    const int64_t HV = c->num_v_heads, V = c->head_v_dim, W = c->conv_size,
                  I = c->intermediate_size;
    char n[96];
#define ROW(suffix, nd, a, b, cc, init, decay, field)                                              \
    (snprintf(n, sizeof n, "model.layers.%d.%s", i, suffix),                                       \
     add_row(t, cap, n, nd, a, b, cc, init, decay, i, LF(field)))
    ROW("attn_norm.weight", 1, D, 0, 0, KDA_INIT_ONES, 0, attn_norm);
    ROW("attn.A_log", 1, HV, 0, 0, KDA_INIT_A_LOG, 1, A_log);
    ROW("attn.dt_bias", 1, HVK, 0, 0, KDA_INIT_DT_BIAS, 0, dt_bias);
    ROW("attn.q_proj.weight", 2, HK, D, 0, KDA_INIT_NORMAL, 1, q_proj);
    ROW("attn.k_proj.weight", 2, HK, D, 0, KDA_INIT_NORMAL, 1, k_proj);
    ROW("attn.v_proj.weight", 2, HVV, D, 0, KDA_INIT_NORMAL, 1, v_proj);
    if (c->use_short_conv) {
        ROW("attn.q_conv1d.weight", 3, HK, 1, W, KDA_INIT_NORMAL, 1, q_conv);
        ROW("attn.k_conv1d.weight", 3, HK, 1, W, KDA_INIT_NORMAL, 1, k_conv);
        ROW("attn.v_conv1d.weight", 3, HVV, 1, W, KDA_INIT_NORMAL, 1, v_conv);
    }
    ROW("attn.f_proj.0.weight", 2, V, D, 0, KDA_INIT_NORMAL, 1, f_proj0);
    ROW("attn.f_proj.1.weight", 2, HVK, V, 0, KDA_INIT_NORMAL, 1, f_proj1);
    ROW("attn.b_proj.weight", 2, HV, D, 0, KDA_INIT_NORMAL, 1, b_proj);
    ROW("attn.g_proj.0.weight", 2, V, D, 0, KDA_INIT_NORMAL, 1, g_proj0);
    ROW("attn.g_proj.1.weight", 2, HVV, V, 0, KDA_INIT_NORMAL, 1, g_proj1);
    ROW("attn.g_proj.1.bias", 1, HVV, 0, 0, KDA_INIT_ZEROS, 0, g_proj1_bias);
    ROW("attn.o_norm.weight", 1, V, 0, 0, KDA_INIT_ONES, 0, o_norm);
    ROW("attn.o_proj.weight", 2, D, HVV, 0, KDA_INIT_NORMAL, 1, o_proj);
    ROW("mlp_norm.weight", 1, D, 0, 0, KDA_INIT_ONES, 0, mlp_norm);
    ROW("mlp.gate_proj.weight", 2, I, D, 0, KDA_INIT_NORMAL, 1, gate_proj);
    ROW("mlp.up_proj.weight", 2, I, D, 0, KDA_INIT_NORMAL, 1, up_proj);
    ROW("mlp.down_proj.weight", 2, D, I, 0, KDA_INIT_NORMAL, 1, down_proj);
#undef ROW
}

int kda_params_build(KdaParamTable *t, const KdaConfig *c, KdaError *err) {
    memset(t, 0, sizeof *t);
    if (c->num_v_heads <= 0 || c->head_v_dim <= 0 || c->intermediate_size <= 0)
        return kda_fail(err,
                        "kda_params_build: config has no derived sizes (call kda_config_derive)");
    if (c->num_hidden_layers > 100000)
        return kda_fail(err, "kda_params_build: %lld layers is too many",
                        (long long)c->num_hidden_layers);
    int cap = 0;
    const int64_t D = c->hidden_size, NV = c->vocab_size;
    add_row(t, &cap, "model.embeddings.weight", 2, NV, D, 0, KDA_INIT_NORMAL, 1, -1, TF(embed));
    for (int i = 0; i < (int)c->num_hidden_layers; i++)
        add_layer(t, &cap, c, i);
    add_row(t, &cap, "model.norm.weight", 1, D, 0, 0, KDA_INIT_ONES, 0, -1, TF(final_norm));
    if (!c->tie_word_embeddings)
        add_row(t, &cap, "lm_head.weight", 2, NV, D, 0, KDA_INIT_NORMAL, 1, -1, TF(lm_head));
    return 0;
}

void kda_params_free(KdaParamTable *t) {
    free(t->rows);
    memset(t, 0, sizeof *t);
}

const KdaParamInfo *kda_params_first_nonfinite(const KdaParamTable *t, const float *flat) {
    for (int i = 0; i < t->n; i++) {
        const float *x = flat + t->rows[i].offset;
        int bad = 0; // counted, not branched on, so the loop vectorizes
        for (int64_t k = 0; k < t->rows[i].numel; k++)
            bad |= !isfinite(x[k]);
        if (bad) return &t->rows[i];
    }
    return NULL;
}

const KdaParamInfo *kda_params_find(const KdaParamTable *t, const char *name) {
    for (int i = 0; i < t->n; i++)
        if (!strcmp(t->rows[i].name, name)) return &t->rows[i];
    return NULL;
}

// ---------------------------------------------------------------------------------------------
// Binding named views

void kda_tensors_bind(KdaTensors *w, const KdaParamTable *t, float *flat) {
    int64_t L = 0;
    for (int i = 0; i < t->n; i++)
        if (t->rows[i].layer + 1 > L) L = t->rows[i].layer + 1;
    memset(w, 0, sizeof *w);
    w->n_layers = L;
    w->layers = kda_calloc((size_t)(L ? L : 1), sizeof *w->layers);
    for (int i = 0; i < t->n; i++) {
        const KdaParamInfo *r = &t->rows[i];
        char *base = r->layer >= 0 ? (char *)&w->layers[r->layer] : (char *)w;
        *(float **)(base + r->field) = flat + r->offset;
    }
    if (!w->lm_head) w->lm_head = w->embed; // tied: no row of its own
}

void kda_tensors_free(KdaTensors *w) {
    free(w->layers);
    memset(w, 0, sizeof *w);
}

// ---------------------------------------------------------------------------------------------
// Init (kda-model.md §7). Each tensor is cut into chunks of INIT_CHUNK elements; every chunk
// draws from its own generator seeded by (seed, tensor name, chunk index), so the result does
// not depend on the thread count, on the other rows, or on tying (the embedding is the same
// tied or untied).

#define INIT_CHUNK ((int64_t)1 << 20)

static uint64_t fnv1a(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

static void init_chunk(const KdaParamInfo *r, const KdaConfig *c, float *x, int64_t n,
                       KdaRng *rng) {
    const float std = (float)c->initializer_range;
    const double ln_lo = log(1e-3), ln_hi = log(0.1);
    for (int64_t j = 0; j < n; j++) {
        switch (r->init) {
        case KDA_INIT_NORMAL:
            x[j] = rng_normal(rng, 0.0f, std);
            break;
        case KDA_INIT_ONES:
            x[j] = 1.0f;
            break;
        case KDA_INIT_ZEROS:
            x[j] = 0.0f;
            break;
        case KDA_INIT_A_LOG: // A = exp(A_log) ~ U[1, 16]; 0 with safe_gate
            x[j] = c->safe_gate ? 0.0f : (float)log(1.0 + 15.0 * rng_uniform(rng));
            break;
        case KDA_INIT_DT_BIAS: { // dt log-uniform in [1e-3, 0.1], bias = softplus^-1(dt)
            double dt = exp(rng_uniform(rng) * (ln_hi - ln_lo) + ln_lo);
            if (dt < 1e-4) dt = 1e-4;
            x[j] = (float)(dt + log(-expm1(-dt)));
            break;
        }
        }
    }
}

void kda_params_init(const KdaParamTable *t, const KdaConfig *c, float *flat, uint64_t seed) {
    // flatten (row, chunk) pairs so one parallel loop covers big and small tensors alike
    int64_t n_jobs = 0;
    for (int i = 0; i < t->n; i++)
        n_jobs += (t->rows[i].numel + INIT_CHUNK - 1) / INIT_CHUNK;
    int *job_row = kda_malloc((size_t)(n_jobs ? n_jobs : 1) * sizeof *job_row);
    int64_t *job_chunk = kda_malloc((size_t)(n_jobs ? n_jobs : 1) * sizeof *job_chunk);
    int64_t k = 0;
    for (int i = 0; i < t->n; i++)
        for (int64_t ch = 0; ch * INIT_CHUNK < t->rows[i].numel; ch++)
            job_row[k] = i, job_chunk[k++] = ch;
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t j = 0; j < n_jobs; j++) {
        const KdaParamInfo *r = &t->rows[job_row[j]];
        int64_t begin = job_chunk[j] * INIT_CHUNK;
        int64_t n = r->numel - begin < INIT_CHUNK ? r->numel - begin : INIT_CHUNK;
        KdaRng rng;
        rng_seed(&rng, seed ^ fnv1a(r->name) ^ ((uint64_t)job_chunk[j] * 0x9e3779b97f4a7c15ull));
        init_chunk(r, c, flat + r->offset + begin, n, &rng);
    }
    free(job_row);
    free(job_chunk);
}

// ---------------------------------------------------------------------------------------------
// Counts (kda-model.md §4) and FLOPs (training-recipe.md §4)

// Linear weights of one block (everything multiplied in a GEMM).
static int64_t layer_matmul(const KdaConfig *c) {
    const int64_t D = c->hidden_size, V = c->head_v_dim, HV = c->num_v_heads;
    return 2 * D * c->key_dim + D * c->value_dim // q, k, v
           + D * V + V * c->gate_dim             // f_proj
           + D * HV                              // b_proj
           + D * V + V * c->value_dim            // g_proj weights
           + c->value_dim * D                    // o_proj
           + 3 * D * c->intermediate_size;       // MLP
}

static int64_t layer_other(const KdaConfig *c) {
    int64_t conv = c->use_short_conv ? c->conv_size * (2 * c->key_dim + c->value_dim) : 0;
    return conv + c->num_v_heads + c->gate_dim + c->value_dim + c->head_v_dim + 2 * c->hidden_size;
    //      conv  A_log            dt_bias        g bias       o_norm          2 block norms
}

int64_t kda_params_count(const KdaConfig *c) {
    int64_t emb = c->vocab_size * c->hidden_size;
    return c->num_hidden_layers * (layer_matmul(c) + layer_other(c)) + emb + c->hidden_size +
           (c->tie_word_embeddings ? 0 : emb);
}

int64_t kda_params_matmul_count(const KdaConfig *c) {
    return c->num_hidden_layers * layer_matmul(c) + c->vocab_size * c->hidden_size;
}

// Chunked KDA core, dense count per token and value head (performance.md §1.1): forward
// 6KV + 6CK + 4CV + 2C^2/3, backward 16KV + 14CK + 10CV + 4C^2 minus its recompute of the
// forward (4KV + 2CK + 2CV). K 32, V 64, C 64: 142k.
static double core_flops_per_token_head(double K, double V, double C) {
    double fwd = 6 * K * V + 6 * C * K + 4 * C * V + 2 * C * C / 3;
    double bwd = 16 * K * V + 14 * C * K + 10 * C * V + 4 * C * C;
    double recompute = 4 * K * V + 2 * C * K + 2 * C * V;
    return fwd + bwd - recompute;
}

double kda_model_flops_per_token(const KdaConfig *c, int64_t seq_len) {
    double C = seq_len > 0 && seq_len < 64 ? (double)seq_len : 64.0;
    double L = (double)c->num_hidden_layers;
    double gemm = 6.0 * (double)kda_params_matmul_count(c);
    double core = core_flops_per_token_head((double)c->head_dim, (double)c->head_v_dim, C) *
                  (double)c->num_v_heads * L;
    double conv = c->use_short_conv
                      ? 6.0 * (double)c->conv_size * (double)(2 * c->key_dim + c->value_dim) * L
                      : 0.0;
    return gemm + core + conv;
}

double kda_megatron_flops_per_token(const KdaConfig *c, int64_t seq_len) {
    double D = (double)c->hidden_size, Lm = 2.0 * (double)c->num_hidden_layers;
    double s = (double)seq_len, I = (double)c->intermediate_size;
    return 12.0 * Lm * D * D * ((1.0 + 1.0 + s / (2.0 * D)) + (I / D) * 1.5) +
           6.0 * (double)c->vocab_size * D;
}
