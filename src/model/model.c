// model.c - whole-model forward/backward of the KDA LM on the CPU (contract in model.h).
//
// Shape legend (kda-model.md §0): N = B·T tokens, D hidden, H/HV q-k/value heads, K/V their
// head dims, HK = H·K, HVK = HV·K, HVV = HV·V, I MLP width, W conv kernel.
#include "model/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/prof.h"    // defines: KdaProf, kda_prof_begin, kda_prof_end
#include "cpu/gemm.h"     // defines: gemm_fwd, gemm_bwd_dx, gemm_bwd_dw
#include "cpu/kda_core.h" // defines: kda_{gate,beta,l2norm,chunk,recurrent}_{fwd,bwd}, KdaDims
#include "cpu/kda_step.h" // defines: kda_recurrent_step, kda_matvec
#include "cpu/conv.h"     // defines: conv_silu_*, silu_*
#include "cpu/embed.h"    // defines: embed_fwd, embed_bwd
#include "cpu/norm.h"     // defines: rmsnorm_*, gnorm_*
#include "cpu/swiglu.h"   // defines: swiglu_fwd, swiglu_bwd
#include "cpu/xent.h"     // defines: xent_*, XENT_IGNORE

#define L2NORM_EPS 1e-6f // q/k L2 norm eps, fixed in FLA (§5.3 step 6), not norm_eps

// ---- activations ----------------------------------------------------------------------------

typedef struct {         // saved per block for backward
    float *h;            // [N, D] block input (residual stream)
    float *xa, *rstd_a;  // [N, D], [N] attn_norm output and its rstd
    float *pq, *pk, *pv; // [N, HK], [N, HK], [N, HVV] projections (conv inputs)
    float *cq, *ck, *cv; // conv pre-activations (alias pq/pk/pv when use_short_conv = false)
    float *q, *k;        // [N, H, K] L2-normalized
    float *rq, *rk;      // [N·H] their L2 rstd
    float *v;            // [N, HV, V] after conv + SiLU
    float *f0, *f;       // [N, V], [N, HVK] low-rank gate input and the raw gate
    float *g;            // [N, HV, K] log-decay
    float *b, *beta;     // [N, HV] beta logits and beta
    float *z0, *z;       // [N, V], [N, HVV] output-gate low rank and gate logits
    float *o, *rstd_o;   // [N, HV, V] core output, [N·HV] its gated-norm rstd
    float *on;           // [N, HVV] gated-norm output
    float *h2;           // [N, D] residual after the KDA sublayer
    float *xm, *rstd_m;  // [N, D], [N] mlp_norm output and rstd
    float *ga, *up, *mm; // [N, I] gate_proj, up_proj outputs and SwiGLU product
} LayerActs;

struct KdaActs {
    float *arena;       // owned; every pointer below points into it
    LayerActs *layers;  // [L], owned
    float *hL;          // [N, D] output of the last block
    float *nf, *rstd_f; // [N, D], [N] final norm
    int32_t *ids;       // [N] copy of the last forward's ids
    int32_t *targets;   // [N] shifted targets
    int64_t n_valid;
    // backward scratch
    float *dh, *dx;             // [N, D]
    float *dI1, *dI2;           // [N, I]
    float *dq, *dk;             // [N, HK]
    float *dt1, *dt2;           // [N, max(HK, HVV)]
    float *dv, *d_o, *dz, *don; // [N, HVV]
    float *dg, *df;             // [N, HVK]
    float *dbeta, *db;          // [N, HV]
    float *dlow;                // [N, V]
    float *lse;                 // [N] per-row logsumexp of the logits
    float *xent_work;           // [xent_work_n] head/cross-entropy chunk buffer
    int64_t xent_work_n;
    float *qt; // [N, max(HK, HVV)] forward scratch (q̃/k̃ before the L2 norm)
};

typedef struct {
    float *base;
    int64_t used;
} Arena;

static float *take_(Arena *a, int64_t n) {
    float *p = a->base ? a->base + a->used : NULL;
    a->used += (n + 15) & ~(int64_t)15; // 64-byte aligned slices
    return p;
}

static int64_t max64_(int64_t a, int64_t b) {
    return a > b ? a : b;
}

// ---- profile (m->prof, kda train --profile)
// ------------------------------------------------------- TIMED(op, flops, bytes, stmt...) runs
// stmt as one call of op. Byte counts follow the GPU's storage dtypes (bf16 activations, fp32
// residual stream; prof.h) so the CPU and GPU tables compare.
#define TIMED(op, flops, bytes, ...)                                                               \
    do {                                                                                           \
        kda_prof_begin(m->prof, op);                                                               \
        __VA_ARGS__;                                                                               \
        kda_prof_end(m->prof, op, (double)(flops), (double)(bytes));                               \
    } while (0)

// FLOPs and fewest bytes of y [N, out] = x [N, in] · Wᵀ (bf16 operands and output).
static double gemm_fl_(int64_t N, int64_t in, int64_t out) {
    return 2.0 * (double)N * (double)in * (double)out;
}
static double gemm_by_(int64_t N, int64_t in, int64_t out) {
    return 2.0 * ((double)N * (double)(in + out) + (double)in * (double)out);
}

static void lin_(KdaModel *m, KdaOp op, float *y, const float *x, const float *W, const float *bias,
                 int64_t N, int64_t in, int64_t out, int acc) {
    TIMED(op, gemm_fl_(N, in, out), gemm_by_(N, in, out), gemm_fwd(y, x, W, bias, N, in, out, acc));
}
static void lin_dx_(KdaModel *m, KdaOp op, float *dx, const float *dy, const float *W, int64_t N,
                    int64_t in, int64_t out, int acc) {
    TIMED(op, gemm_fl_(N, in, out), gemm_by_(N, in, out), gemm_bwd_dx(dx, dy, W, N, in, out, acc));
}
// The dW read-modify-write is fp32: 8 bytes per weight instead of 2.
static void lin_dw_(KdaModel *m, KdaOp op, float *dW, float *dbias, const float *dy, const float *x,
                    int64_t N, int64_t in, int64_t out) {
    TIMED(op, gemm_fl_(N, in, out), gemm_by_(N, in, out) + 6.0 * (double)in * (double)out,
          gemm_bwd_dw(dW, dbias, dy, x, N, in, out));
}

// Assigns every activation pointer for N tokens (a->base NULL: only counts).
static void layout_(KdaActs *A, const KdaConfig *c, int64_t N, Arena *a) {
    int64_t D = c->hidden_size, H = c->num_heads, HV = c->num_v_heads, V = c->head_v_dim;
    int64_t HK = c->key_dim, HVK = c->gate_dim, HVV = c->value_dim, I = c->intermediate_size;
    int64_t W = max64_(HK, HVV);
    for (int64_t l = 0; l < c->num_hidden_layers; l++) {
        LayerActs *L = &A->layers[l];
        L->h = take_(a, N * D), L->xa = take_(a, N * D), L->rstd_a = take_(a, N);
        L->pq = take_(a, N * HK), L->pk = take_(a, N * HK), L->pv = take_(a, N * HVV);
        if (c->use_short_conv) {
            L->cq = take_(a, N * HK), L->ck = take_(a, N * HK), L->cv = take_(a, N * HVV);
        } else {
            L->cq = L->pq, L->ck = L->pk, L->cv = L->pv;
        }
        L->q = take_(a, N * HK), L->k = take_(a, N * HK);
        L->rq = take_(a, N * H), L->rk = take_(a, N * H);
        L->v = take_(a, N * HVV);
        L->f0 = take_(a, N * V), L->f = take_(a, N * HVK), L->g = take_(a, N * HVK);
        L->b = take_(a, N * HV), L->beta = take_(a, N * HV);
        L->z0 = take_(a, N * V), L->z = take_(a, N * HVV);
        L->o = take_(a, N * HVV), L->rstd_o = take_(a, N * HV), L->on = take_(a, N * HVV);
        L->h2 = take_(a, N * D), L->xm = take_(a, N * D), L->rstd_m = take_(a, N);
        L->ga = take_(a, N * I), L->up = take_(a, N * I), L->mm = take_(a, N * I);
    }
    A->hL = take_(a, N * D), A->nf = take_(a, N * D), A->rstd_f = take_(a, N);
    A->dh = take_(a, N * D), A->dx = take_(a, N * D);
    A->dI1 = take_(a, N * I), A->dI2 = take_(a, N * I);
    A->dq = take_(a, N * HK), A->dk = take_(a, N * HK);
    A->dt1 = take_(a, N * W), A->dt2 = take_(a, N * W), A->qt = take_(a, N * W);
    A->dv = take_(a, N * HVV), A->d_o = take_(a, N * HVV), A->dz = take_(a, N * HVV);
    A->don = take_(a, N * HVV);
    A->dg = take_(a, N * HVK), A->df = take_(a, N * HVK);
    A->dbeta = take_(a, N * HV), A->db = take_(a, N * HV), A->dlow = take_(a, N * V);
    A->lse = take_(a, N);
    A->xent_work_n = xent_work_floats(N, c->vocab_size);
    A->xent_work = take_(a, A->xent_work_n);
}

static void acts_free_(KdaActs *A) {
    if (!A) return;
    free(A->arena);
    free(A->layers);
    free(A->ids);
    free(A->targets);
    free(A);
}

int64_t kda_model_arena_floats(const KdaConfig *c, int64_t N) {
    KdaActs A = {0};
    A.layers =
        kda_calloc((size_t)(c->num_hidden_layers > 0 ? c->num_hidden_layers : 1), sizeof *A.layers);
    Arena a = {NULL, 0};
    layout_(&A, c, N, &a);
    free(A.layers);
    return a.used;
}

static void reserve_(KdaModel *m, int64_t N) {
    if (m->acts && m->cap_tokens >= N) return;
    acts_free_(m->acts);
    KdaActs *A = kda_calloc(1, sizeof *A);
    A->layers = kda_calloc((size_t)m->cfg.num_hidden_layers, sizeof *A->layers);
    Arena a = {NULL, 0};
    layout_(A, &m->cfg, N, &a);
    a.base = A->arena = kda_malloc((size_t)a.used * sizeof(float));
    a.used = 0;
    layout_(A, &m->cfg, N, &a);
    A->ids = kda_malloc((size_t)N * sizeof(int32_t));
    A->targets = kda_malloc((size_t)N * sizeof(int32_t));
    m->acts = A;
    m->cap_tokens = N;
}

// ---- lifetime -----------------------------------------------------------------------------------

int kda_model_init_from(KdaModel *m, const KdaConfig *cfg, KdaParamTable *table, float *params,
                        KdaError *err) {
    memset(m, 0, sizeof *m);
    if (cfg->hidden_act[0] && strcmp(cfg->hidden_act, "swish") && strcmp(cfg->hidden_act, "silu"))
        return kda_fail(err, "hidden_act '%s' is not supported (expected \"swish\")",
                        cfg->hidden_act);
    if (cfg->num_v_heads % cfg->num_heads)
        return kda_fail(err, "num_v_heads %lld is not a multiple of num_heads %lld",
                        (long long)cfg->num_v_heads, (long long)cfg->num_heads);
    m->cfg = *cfg;
    m->table = *table;
    memset(table, 0, sizeof *table);
    m->params = params;
    kda_tensors_bind(&m->w, &m->table, m->params);
    m->core = KDA_CORE_CHUNK;
    return 0;
}

int kda_model_init(KdaModel *m, const KdaConfig *cfg, KdaError *err) {
    KdaParamTable t;
    memset(m, 0, sizeof *m);
    if (kda_params_build(&t, cfg, err)) return -1;
    float *p = kda_calloc((size_t)t.total_numel, sizeof(float));
    if (kda_model_init_from(m, cfg, &t, p, err)) {
        kda_params_free(&t);
        free(p);
        return -1;
    }
    return 0;
}

void kda_model_free(KdaModel *m) {
    acts_free_(m->acts);
    kda_tensors_free(&m->w);
    kda_params_free(&m->table);
    free(m->params);
    memset(m, 0, sizeof *m);
}

// ---- forward ------------------------------------------------------------------------------------

KdaDims kda_model_dims(const KdaConfig *c, int64_t B, int64_t T) {
    KdaDims d = {B,
                 T,
                 c->num_heads,
                 c->num_v_heads,
                 c->head_dim,
                 c->head_v_dim,
                 (float)(1.0 / sqrt((double)c->head_dim)),
                 64};
    return d;
}

static KdaDims dims_(const KdaModel *m) {
    return kda_model_dims(&m->cfg, m->B, m->T);
}

static KdaGateOpts gate_opts_(const KdaConfig *c) {
    KdaGateOpts o = {c->has_lower_bound, (float)c->lower_bound};
    return o;
}

// q̃ = SiLU(conv(p)) (or SiLU(p)) into out [B, T, C].
static void short_conv_fwd_(const KdaModel *m, float *out, float *c, const float *p, const float *w,
                            int64_t C) {
    if (m->cfg.use_short_conv)
        conv_silu_fwd(out, c, p, w, m->B, m->T, C, m->cfg.conv_size);
    else
        silu_fwd(out, p, m->B * m->T * C);
}

// One KDA sublayer + MLP: reads L->h, writes next [N, D] (the block output). state_out
// [B, HV, K, V] (NULL: not wanted) receives the core's final state (used by the prefill).
static void block_fwd_(KdaModel *m, const KdaLayerTensors *P, LayerActs *L, float *next,
                       float *state_out) {
    const KdaConfig *c = &m->cfg;
    KdaActs *A = m->acts;
    int64_t N = m->B * m->T, D = c->hidden_size, H = c->num_heads, HV = c->num_v_heads;
    int64_t K = c->head_dim, V = c->head_v_dim, HK = c->key_dim, HVK = c->gate_dim;
    int64_t HVV = c->value_dim, I = c->intermediate_size;
    float eps = (float)c->norm_eps;
    KdaDims d = dims_(m);
    KdaGateOpts go = gate_opts_(c);

    double ND = (double)N * (double)D;
    TIMED(KDA_OP_NORM_FWD, 0, 6.0 * ND,
          rmsnorm_fwd(L->xa, L->rstd_a, L->h, P->attn_norm, N, D, eps));
    lin_(m, KDA_OP_PROJ_FWD, L->pq, L->xa, P->q_proj, NULL, N, D, HK, 0);
    lin_(m, KDA_OP_PROJ_FWD, L->pk, L->xa, P->k_proj, NULL, N, D, HK, 0);
    lin_(m, KDA_OP_PROJ_FWD, L->pv, L->xa, P->v_proj, NULL, N, D, HVV, 0);
    TIMED(KDA_OP_CONV_FWD, 0, 4.0 * N * HK, short_conv_fwd_(m, A->qt, L->cq, L->pq, P->q_conv, HK));
    TIMED(KDA_OP_L2NORM_FWD, 0, 4.0 * N * HK,
          kda_l2norm_fwd(L->q, L->rq, A->qt, N * H, K, L2NORM_EPS));
    TIMED(KDA_OP_CONV_FWD, 0, 4.0 * N * HK, short_conv_fwd_(m, A->qt, L->ck, L->pk, P->k_conv, HK));
    TIMED(KDA_OP_L2NORM_FWD, 0, 4.0 * N * HK,
          kda_l2norm_fwd(L->k, L->rk, A->qt, N * H, K, L2NORM_EPS));
    TIMED(KDA_OP_CONV_FWD, 0, 4.0 * N * HVV,
          short_conv_fwd_(m, L->v, L->cv, L->pv, P->v_conv, HVV));
    lin_(m, KDA_OP_PROJ_FWD, L->f0, L->xa, P->f_proj0, NULL, N, D, V, 0);
    lin_(m, KDA_OP_PROJ_FWD, L->f, L->f0, P->f_proj1, NULL, N, V, HVK, 0);
    TIMED(KDA_OP_GATE_FWD, 0, 6.0 * N * HVK,
          kda_gate_fwd(L->g, L->f, P->A_log, P->dt_bias, N, HV, K, &go));
    lin_(m, KDA_OP_PROJ_FWD, L->b, L->xa, P->b_proj, NULL, N, D, HV, 0);
    TIMED(KDA_OP_GATE_FWD, 0, 6.0 * N * HV,
          kda_beta_fwd(L->beta, L->b, N * HV, c->allow_neg_eigval));
    TIMED(KDA_OP_CORE_FWD, 0, 512.0 * N * HV, {
        if (m->core == KDA_CORE_RECURRENT)
            kda_recurrent_fwd(L->o, state_out, L->q, L->k, L->v, L->g, L->beta, NULL, &d);
        else
            kda_chunk_fwd(L->o, state_out, L->q, L->k, L->v, L->g, L->beta, NULL, &d);
    });
    lin_(m, KDA_OP_PROJ_FWD, L->z0, L->xa, P->g_proj0, NULL, N, D, V, 0);
    lin_(m, KDA_OP_PROJ_FWD, L->z, L->z0, P->g_proj1, P->g_proj1_bias, N, V, HVV, 0);
    TIMED(KDA_OP_ONORM_FWD, 0, 6.0 * N * HVV,
          gnorm_fwd(L->on, L->rstd_o, L->o, L->z, P->o_norm, N * HV, V, eps));
    TIMED(KDA_OP_OPROJ_FWD, gemm_fl_(N, HVV, D), gemm_by_(N, HVV, D) + 6.0 * ND, {
        memcpy(L->h2, L->h, (size_t)(N * D) * sizeof(float));
        gemm_fwd(L->h2, L->on, P->o_proj, NULL, N, HVV, D, 1);
    });

    TIMED(KDA_OP_NORM_FWD, 0, 6.0 * ND,
          rmsnorm_fwd(L->xm, L->rstd_m, L->h2, P->mlp_norm, N, D, eps));
    lin_(m, KDA_OP_MLP_FWD, L->ga, L->xm, P->gate_proj, NULL, N, D, I, 0);
    lin_(m, KDA_OP_MLP_FWD, L->up, L->xm, P->up_proj, NULL, N, D, I, 0);
    TIMED(KDA_OP_SWIGLU_FWD, 0, 6.0 * N * I, swiglu_fwd(L->mm, L->ga, L->up, N * I));
    TIMED(KDA_OP_MLP_FWD, gemm_fl_(N, I, D), gemm_by_(N, I, D) + 6.0 * ND, {
        memcpy(next, L->h2, (size_t)(N * D) * sizeof(float));
        gemm_fwd(next, L->mm, P->down_proj, NULL, N, I, D, 1);
    });
}

static int check_ids_(const int32_t *x, int64_t n, int64_t T, int64_t vocab, int allow_ignore,
                      const char *what, KdaError *err) {
    for (int64_t i = 0; i < n; i++) {
        if (allow_ignore && x[i] == XENT_IGNORE) continue;
        if (x[i] < 0 || x[i] >= vocab)
            return kda_fail(err, "%s[%lld][%lld] = %d is outside the vocabulary [0, %lld)", what,
                            (long long)(i / T), (long long)(i % T), (int)x[i], (long long)vocab);
    }
    return 0;
}

int kda_model_check_batch(const KdaConfig *c, const int32_t *ids, const int32_t **labels, int64_t B,
                          int64_t T, KdaError *err) {
    if (B <= 0 || T <= 0)
        return kda_fail(err, "batch shape B=%lld T=%lld must be positive", (long long)B,
                        (long long)T);
    if (check_ids_(ids, B * T, T, c->vocab_size, 0, "ids", err)) return -1;
    if (!*labels)
        *labels = ids;
    else if (check_ids_(*labels, B * T, T, c->vocab_size, 1, "labels", err))
        return -1;
    return 0;
}

int kda_model_forward(KdaModel *m, const int32_t *ids, const int32_t *labels, int64_t B, int64_t T,
                      float *nll, float *logits, float *loss, KdaError *err) {
    const KdaConfig *c = &m->cfg;
    int64_t N = B * T, D = c->hidden_size, vocab = c->vocab_size;
    if (kda_model_check_batch(c, ids, &labels, B, T, err)) return -1;
    reserve_(m, N);
    m->B = B, m->T = T;
    KdaActs *A = m->acts;
    memcpy(A->ids, ids, (size_t)N * sizeof(int32_t));
    A->n_valid = xent_targets(A->targets, labels, B, T);

    int64_t nl = c->num_hidden_layers;
    double ND = (double)N * (double)D, NV = (double)N * (double)vocab;
    TIMED(KDA_OP_EMBED_FWD, 0, 8.0 * ND,
          embed_fwd(nl > 0 ? A->layers[0].h : A->hL, m->w.embed, ids, N, D));
    for (int64_t l = 0; l < nl; l++)
        block_fwd_(m, &m->w.layers[l], &A->layers[l], l + 1 < nl ? A->layers[l + 1].h : A->hL,
                   NULL);
    TIMED(KDA_OP_NORM_FWD, 0, 6.0 * ND,
          rmsnorm_fwd(A->nf, A->rstd_f, A->hL, m->w.final_norm, N, D, (float)c->norm_eps));
    double sum = 0.0;
    TIMED(KDA_OP_HEAD_FWD, gemm_fl_(N, D, vocab), gemm_by_(N, D, vocab) + 2.0 * NV,
          sum = xent_fwd(nll, A->lse, logits, A->nf, m->w.lm_head, A->targets, N, D, vocab,
                         A->xent_work, A->xent_work_n));
    if (loss) *loss = A->n_valid ? (float)(sum / (double)A->n_valid) : 0.0f;
    m->have_fwd = 1;
    m->have_rows = 1;
    return 0;
}

int kda_model_logits(KdaModel *m, int64_t b, int64_t t, float *logits, KdaError *err) {
    const KdaConfig *c = &m->cfg;
    if (!m->have_rows) return kda_fail(err, "logits: no forward to read");
    if (b < 0 || b >= m->B || t < 0 || t >= m->T)
        return kda_fail(err, "logits of (%lld, %lld) outside the last batch [%lld, %lld]",
                        (long long)b, (long long)t, (long long)m->B, (long long)m->T);
    const float *row = m->acts->nf + (b * m->T + t) * c->hidden_size;
    kda_matvec(logits, row, m->w.lm_head, NULL, c->hidden_size, c->vocab_size, 0);
    return 0;
}

// ---- backward -----------------------------------------------------------------------------------

// dp [N, C] from dy [N, C] through SiLU(conv(p)) (or SiLU(p)); dw accumulates.
static void short_conv_bwd_(const KdaModel *m, float *dp, float *dw, const float *dy,
                            const float *p, const float *cpre, const float *w, int64_t C) {
    if (m->cfg.use_short_conv)
        conv_silu_bwd(dp, dw, dy, p, cpre, w, m->B, m->T, C, m->cfg.conv_size);
    else
        silu_bwd(dp, dy, p, m->B * m->T * C);
}

// A->dh holds dLoss/d(block output) on entry and dLoss/d(block input) on exit.
static void block_bwd_(KdaModel *m, const KdaLayerTensors *P, KdaLayerTensors *G,
                       const LayerActs *L) {
    const KdaConfig *c = &m->cfg;
    KdaActs *A = m->acts;
    int64_t N = m->B * m->T, D = c->hidden_size, H = c->num_heads, HV = c->num_v_heads;
    int64_t K = c->head_dim, V = c->head_v_dim, HK = c->key_dim, HVK = c->gate_dim;
    int64_t HVV = c->value_dim, I = c->intermediate_size;
    KdaDims d = dims_(m);
    KdaGateOpts go = gate_opts_(c);

    double ND = (double)N * (double)D;
    // MLP: out = h2 + down(SwiGLU(gate(xm), up(xm)))
    lin_dx_(m, KDA_OP_MLP_BWD, A->dI1, A->dh, P->down_proj, N, I, D, 0);
    lin_dw_(m, KDA_OP_MLP_BWD, G->down_proj, NULL, A->dh, L->mm, N, I, D);
    TIMED(KDA_OP_SWIGLU_BWD, 0, 10.0 * N * I,
          swiglu_bwd(A->dI1, A->dI2, A->dI1, L->ga, L->up, N * I));
    lin_dx_(m, KDA_OP_MLP_BWD, A->dx, A->dI1, P->gate_proj, N, D, I, 0);
    lin_dx_(m, KDA_OP_MLP_BWD, A->dx, A->dI2, P->up_proj, N, D, I, 1);
    lin_dw_(m, KDA_OP_MLP_BWD, G->gate_proj, NULL, A->dI1, L->xm, N, D, I);
    lin_dw_(m, KDA_OP_MLP_BWD, G->up_proj, NULL, A->dI2, L->xm, N, D, I);
    TIMED(KDA_OP_NORM_BWD, 0, 16.0 * ND,
          rmsnorm_bwd(A->dh, G->mlp_norm, A->dx, L->h2, P->mlp_norm, L->rstd_m, N, D, 1));

    // KDA sublayer: h2 = h + o_proj(gnorm(o, z))
    lin_dx_(m, KDA_OP_OPROJ_BWD, A->don, A->dh, P->o_proj, N, HVV, D, 0);
    lin_dw_(m, KDA_OP_OPROJ_BWD, G->o_proj, NULL, A->dh, L->on, N, HVV, D);
    TIMED(KDA_OP_ONORM_BWD, 0, 12.0 * N * HVV,
          gnorm_bwd(A->d_o, A->dz, G->o_norm, A->don, L->o, L->z, P->o_norm, L->rstd_o, N * HV, V));
    lin_dw_(m, KDA_OP_PROJ_BWD, G->g_proj1, G->g_proj1_bias, A->dz, L->z0, N, V, HVV);
    lin_dx_(m, KDA_OP_PROJ_BWD, A->dlow, A->dz, P->g_proj1, N, V, HVV, 0);
    lin_dw_(m, KDA_OP_PROJ_BWD, G->g_proj0, NULL, A->dlow, L->xa, N, D, V);
    lin_dx_(m, KDA_OP_PROJ_BWD, A->dx, A->dlow, P->g_proj0, N, D, V, 0);

    TIMED(KDA_OP_CORE_BWD, 0, 1024.0 * N * HV, {
        if (m->core == KDA_CORE_RECURRENT)
            kda_recurrent_bwd(A->dq, A->dk, A->dv, A->dg, A->dbeta, NULL, A->d_o, NULL, L->q, L->k,
                              L->v, L->g, L->beta, NULL, &d);
        else
            kda_chunk_bwd(A->dq, A->dk, A->dv, A->dg, A->dbeta, NULL, A->d_o, NULL, L->q, L->k,
                          L->v, L->g, L->beta, NULL, &d);
    });

    TIMED(KDA_OP_GATE_BWD, 0, 8.0 * N * HVK,
          kda_gate_bwd(A->df, G->A_log, G->dt_bias, A->dg, L->f, P->A_log, P->dt_bias, N, HV, K,
                       &go));
    lin_dw_(m, KDA_OP_PROJ_BWD, G->f_proj1, NULL, A->df, L->f0, N, V, HVK);
    lin_dx_(m, KDA_OP_PROJ_BWD, A->dlow, A->df, P->f_proj1, N, V, HVK, 0);
    lin_dw_(m, KDA_OP_PROJ_BWD, G->f_proj0, NULL, A->dlow, L->xa, N, D, V);
    lin_dx_(m, KDA_OP_PROJ_BWD, A->dx, A->dlow, P->f_proj0, N, D, V, 1);

    TIMED(KDA_OP_GATE_BWD, 0, 8.0 * N * HV,
          kda_beta_bwd(A->db, A->dbeta, L->b, N * HV, c->allow_neg_eigval));
    lin_dw_(m, KDA_OP_PROJ_BWD, G->b_proj, NULL, A->db, L->xa, N, D, HV);
    lin_dx_(m, KDA_OP_PROJ_BWD, A->dx, A->db, P->b_proj, N, D, HV, 1);

    TIMED(KDA_OP_L2NORM_BWD, 0, 8.0 * N * HK, kda_l2norm_bwd(A->dt1, A->dq, L->q, L->rq, N * H, K));
    TIMED(KDA_OP_CONV_BWD, 0, 6.0 * N * HK,
          short_conv_bwd_(m, A->dt2, G->q_conv, A->dt1, L->pq, L->cq, P->q_conv, HK));
    lin_dw_(m, KDA_OP_PROJ_BWD, G->q_proj, NULL, A->dt2, L->xa, N, D, HK);
    lin_dx_(m, KDA_OP_PROJ_BWD, A->dx, A->dt2, P->q_proj, N, D, HK, 1);

    TIMED(KDA_OP_L2NORM_BWD, 0, 8.0 * N * HK, kda_l2norm_bwd(A->dt1, A->dk, L->k, L->rk, N * H, K));
    TIMED(KDA_OP_CONV_BWD, 0, 6.0 * N * HK,
          short_conv_bwd_(m, A->dt2, G->k_conv, A->dt1, L->pk, L->ck, P->k_conv, HK));
    lin_dw_(m, KDA_OP_PROJ_BWD, G->k_proj, NULL, A->dt2, L->xa, N, D, HK);
    lin_dx_(m, KDA_OP_PROJ_BWD, A->dx, A->dt2, P->k_proj, N, D, HK, 1);

    TIMED(KDA_OP_CONV_BWD, 0, 6.0 * N * HVV,
          short_conv_bwd_(m, A->dt2, G->v_conv, A->dv, L->pv, L->cv, P->v_conv, HVV));
    lin_dw_(m, KDA_OP_PROJ_BWD, G->v_proj, NULL, A->dt2, L->xa, N, D, HVV);
    lin_dx_(m, KDA_OP_PROJ_BWD, A->dx, A->dt2, P->v_proj, N, D, HVV, 1);

    TIMED(KDA_OP_NORM_BWD, 0, 16.0 * ND,
          rmsnorm_bwd(A->dh, G->attn_norm, A->dx, L->h, P->attn_norm, L->rstd_a, N, D, 1));
}

int kda_model_backward(KdaModel *m, float *grads, KdaError *err) {
    if (!m->have_fwd) return kda_fail(err, "kda_model_backward: no forward to differentiate");
    const KdaConfig *c = &m->cfg;
    KdaActs *A = m->acts;
    int64_t N = m->B * m->T, D = c->hidden_size;
    KdaTensors G;
    kda_tensors_bind(&G, &m->table, grads);

    float scale = A->n_valid ? 1.0f / (float)A->n_valid : 0.0f;
    double ND = (double)N * (double)D, NV = (double)N * (double)c->vocab_size;
    TIMED(KDA_OP_HEAD_BWD, 3.0 * gemm_fl_(N, D, c->vocab_size),
          3.0 * gemm_by_(N, D, c->vocab_size) + 4.0 * NV,
          xent_bwd(A->dx, G.lm_head, A->nf, m->w.lm_head, A->targets, A->lse, N, D, c->vocab_size,
                   scale, A->xent_work, A->xent_work_n));
    TIMED(KDA_OP_NORM_BWD, 0, 16.0 * ND,
          rmsnorm_bwd(A->dh, G.final_norm, A->dx, A->hL, m->w.final_norm, A->rstd_f, N, D, 0));
    for (int64_t l = c->num_hidden_layers - 1; l >= 0; l--) {
        block_bwd_(m, &m->w.layers[l], &G.layers[l], &A->layers[l]);
        if (m->layer_hook) m->layer_hook(m->layer_user, l);
    }
    TIMED(KDA_OP_EMBED_BWD, 0, 8.0 * ND,
          embed_bwd(G.embed, A->dh, A->ids, N, D, c->has_pad_token_id ? c->pad_token_id : -1));

    kda_tensors_free(&G);
    m->have_fwd = 0;
    return 0;
}

// ---- inference: prefill + decode (model.h) ------------------------------------------------------

// Per-token scratch of the decode step (one token: every "N" of the forward is 1).
typedef struct {
    float *h, *x, *rstd;    // [D] residual stream, [D] norm output, [max(HV, 1)] rstds
    float *pq, *pk, *pv;    // [HK], [HK], [HVV] projections (conv inputs)
    float *qt, *q, *k, *v;  // [max(HK, HVV)] conv output, [HK], [HK], [HVV]
    float *f0, *f, *g;      // [V], [HVK], [HVK]
    float *b, *beta;        // [HV], [HV]
    float *z0, *z, *o, *on; // [V], [HVV], [HVV], [HVV]
    float *ga, *up, *mm;    // [I] each
} StepBufs;

static int64_t step_layout_(StepBufs *s, const KdaConfig *c, float *base) {
    int64_t D = c->hidden_size, HV = c->num_v_heads, V = c->head_v_dim, HK = c->key_dim;
    int64_t HVK = c->gate_dim, HVV = c->value_dim, I = c->intermediate_size;
    Arena a = {base, 0};
    s->h = take_(&a, D), s->x = take_(&a, D), s->rstd = take_(&a, max64_(HV, 1));
    s->pq = take_(&a, HK), s->pk = take_(&a, HK), s->pv = take_(&a, HVV);
    s->qt = take_(&a, max64_(HK, HVV)), s->q = take_(&a, HK), s->k = take_(&a, HK);
    s->v = take_(&a, HVV);
    s->f0 = take_(&a, V), s->f = take_(&a, HVK), s->g = take_(&a, HVK);
    s->b = take_(&a, HV), s->beta = take_(&a, HV);
    s->z0 = take_(&a, V), s->z = take_(&a, HVV), s->o = take_(&a, HVV), s->on = take_(&a, HVV);
    s->ga = take_(&a, I), s->up = take_(&a, I), s->mm = take_(&a, I);
    return a.used;
}

static int64_t tail_len_(const KdaConfig *c) {
    return c->use_short_conv ? c->conv_size - 1 : 0;
}

void kda_decode_state_init(KdaDecodeState *st, const KdaConfig *c) {
    memset(st, 0, sizeof *st);
    int64_t L = c->num_hidden_layers, W1 = tail_len_(c);
    st->n_layers = L;
    st->S = kda_calloc((size_t)max64_(L * c->num_v_heads * c->head_dim * c->head_v_dim, 1),
                       sizeof(float));
    if (W1 > 0) {
        st->conv_q = kda_calloc((size_t)(L * c->key_dim * W1), sizeof(float));
        st->conv_k = kda_calloc((size_t)(L * c->key_dim * W1), sizeof(float));
        st->conv_v = kda_calloc((size_t)(L * c->value_dim * W1), sizeof(float));
    }
    StepBufs s;
    st->work = kda_calloc((size_t)step_layout_(&s, c, NULL), sizeof(float));
}

void kda_decode_state_free(KdaDecodeState *st) {
    free(st->S);
    free(st->conv_q);
    free(st->conv_k);
    free(st->conv_v);
    free(st->work);
    memset(st, 0, sizeof *st);
}

// tail [C, W1] = the last W1 rows of p [T, C] (zeros before the sequence start), oldest first.
static void tail_from_(float *tail, const float *p, int64_t T, int64_t C, int64_t W1) {
    for (int64_t ch = 0; ch < C; ch++)
        for (int64_t i = 0; i < W1; i++) {
            int64_t tau = T - W1 + i;
            tail[ch * W1 + i] = tau >= 0 ? p[tau * C + ch] : 0.0f;
        }
}

// logits [n_vocab] of one final-block output row hL [D]; s->x, s->rstd as scratch.
static void head_row_(KdaModel *m, StepBufs *s, const float *hL, float *logits) {
    const KdaConfig *c = &m->cfg;
    rmsnorm_fwd(s->x, s->rstd, hL, m->w.final_norm, 1, c->hidden_size, (float)c->norm_eps);
    kda_matvec(logits, s->x, m->w.lm_head, NULL, c->hidden_size, c->vocab_size, 0);
}

int kda_model_prefill(KdaModel *m, const int32_t *ids, int64_t T, KdaDecodeState *st,
                      float *logits_last, KdaError *err) {
    const KdaConfig *c = &m->cfg;
    int64_t D = c->hidden_size, L = c->num_hidden_layers, W1 = tail_len_(c);
    int64_t SL = c->num_v_heads * c->head_dim * c->head_v_dim;
    if (T <= 0) return kda_fail(err, "prefill: the prompt is empty (T = %lld)", (long long)T);
    if (st->n_layers != L)
        return kda_fail(err, "prefill: decode state has %lld layers, model %lld",
                        (long long)st->n_layers, (long long)L);
    if (check_ids_(ids, T, T, c->vocab_size, 0, "ids", err)) return -1;
    reserve_(m, T);
    m->B = 1, m->T = T, m->have_fwd = 0, m->have_rows = 0;
    KdaActs *A = m->acts;
    embed_fwd(L > 0 ? A->layers[0].h : A->hL, m->w.embed, ids, T, D);
    for (int64_t l = 0; l < L; l++) {
        LayerActs *La = &A->layers[l];
        block_fwd_(m, &m->w.layers[l], La, l + 1 < L ? A->layers[l + 1].h : A->hL, st->S + l * SL);
        if (W1 > 0) {
            tail_from_(st->conv_q + l * c->key_dim * W1, La->pq, T, c->key_dim, W1);
            tail_from_(st->conv_k + l * c->key_dim * W1, La->pk, T, c->key_dim, W1);
            tail_from_(st->conv_v + l * c->value_dim * W1, La->pv, T, c->value_dim, W1);
        }
    }
    StepBufs s;
    step_layout_(&s, c, st->work);
    head_row_(m, &s, A->hL + (T - 1) * D, logits_last);
    st->pos = T;
    return 0;
}

// y [C] = SiLU(conv over the tail [C, W1] and p [C]) when use_conv (tail then shifts by one and
// takes p; W1 = 0 leaves it NULL), else SiLU(p). The sum runs over the taps in conv_silu_fwd's
// order, so the zeros of an early tail add exactly nothing.
static void conv_step_(float *y, float *tail, const float *p, const float *w, int64_t C, int64_t W1,
                       int use_conv) {
    if (!use_conv) {
        silu_fwd(y, p, C);
        return;
    }
    for (int64_t ch = 0; ch < C; ch++) {
        const float *wc = w + ch * (W1 + 1);
        float *tc = tail ? tail + ch * W1 : NULL, acc = 0.0f;
        for (int64_t i = 0; i < W1; i++)
            acc += wc[i] * tc[i];
        acc += wc[W1] * p[ch];
        y[ch] = acc;
        for (int64_t i = 0; i + 1 < W1; i++)
            tc[i] = tc[i + 1];
        if (W1 > 0) tc[W1 - 1] = p[ch];
    }
    silu_fwd(y, y, C);
}

// One block on one token: s->h in, s->h out (the residual stream).
static void block_step_(KdaModel *m, KdaDecodeState *st, int64_t l, StepBufs *s) {
    const KdaConfig *c = &m->cfg;
    const KdaLayerTensors *P = &m->w.layers[l];
    int64_t D = c->hidden_size, H = c->num_heads, HV = c->num_v_heads, K = c->head_dim;
    int64_t V = c->head_v_dim, HK = c->key_dim, HVK = c->gate_dim, HVV = c->value_dim;
    int64_t I = c->intermediate_size, W1 = tail_len_(c);
    float eps = (float)c->norm_eps;
    KdaGateOpts go = gate_opts_(c);
    KdaDims d = kda_model_dims(c, 1, 1);

    rmsnorm_fwd(s->x, s->rstd, s->h, P->attn_norm, 1, D, eps);
    kda_matvec(s->pq, s->x, P->q_proj, NULL, D, HK, 0);
    kda_matvec(s->pk, s->x, P->k_proj, NULL, D, HK, 0);
    kda_matvec(s->pv, s->x, P->v_proj, NULL, D, HVV, 0);
    int uc = (int)c->use_short_conv;
    conv_step_(s->qt, W1 ? st->conv_q + l * HK * W1 : NULL, s->pq, P->q_conv, HK, W1, uc);
    kda_l2norm_fwd(s->q, NULL, s->qt, H, K, L2NORM_EPS);
    conv_step_(s->qt, W1 ? st->conv_k + l * HK * W1 : NULL, s->pk, P->k_conv, HK, W1, uc);
    kda_l2norm_fwd(s->k, NULL, s->qt, H, K, L2NORM_EPS);
    conv_step_(s->v, W1 ? st->conv_v + l * HVV * W1 : NULL, s->pv, P->v_conv, HVV, W1, uc);
    kda_matvec(s->f0, s->x, P->f_proj0, NULL, D, V, 0);
    kda_matvec(s->f, s->f0, P->f_proj1, NULL, V, HVK, 0);
    kda_gate_fwd(s->g, s->f, P->A_log, P->dt_bias, 1, HV, K, &go);
    kda_matvec(s->b, s->x, P->b_proj, NULL, D, HV, 0);
    kda_beta_fwd(s->beta, s->b, HV, c->allow_neg_eigval);
    kda_recurrent_step(s->o, st->S + l * HV * K * V, s->q, s->k, s->v, s->g, s->beta, &d);
    kda_matvec(s->z0, s->x, P->g_proj0, NULL, D, V, 0);
    kda_matvec(s->z, s->z0, P->g_proj1, P->g_proj1_bias, V, HVV, 0);
    gnorm_fwd(s->on, s->rstd, s->o, s->z, P->o_norm, HV, V, eps);
    kda_matvec(s->h, s->on, P->o_proj, NULL, HVV, D, 1);

    rmsnorm_fwd(s->x, s->rstd, s->h, P->mlp_norm, 1, D, eps);
    kda_matvec(s->ga, s->x, P->gate_proj, NULL, D, I, 0);
    kda_matvec(s->up, s->x, P->up_proj, NULL, D, I, 0);
    swiglu_fwd(s->mm, s->ga, s->up, I);
    kda_matvec(s->h, s->mm, P->down_proj, NULL, I, D, 1);
}

int kda_model_decode_step(KdaModel *m, KdaDecodeState *st, int32_t id, float *logits,
                          KdaError *err) {
    const KdaConfig *c = &m->cfg;
    if (st->n_layers != c->num_hidden_layers)
        return kda_fail(err, "decode: state has %lld layers, model %lld", (long long)st->n_layers,
                        (long long)c->num_hidden_layers);
    if (id < 0 || id >= c->vocab_size)
        return kda_fail(err,
                        "decode: token id %d at position %lld is outside the vocabulary "
                        "[0, %lld)",
                        (int)id, (long long)st->pos, (long long)c->vocab_size);
    StepBufs s;
    step_layout_(&s, c, st->work);
    embed_fwd(s.h, m->w.embed, &id, 1, c->hidden_size);
    for (int64_t l = 0; l < c->num_hidden_layers; l++)
        block_step_(m, st, l, &s);
    head_row_(m, &s, s.h, logits);
    st->pos++;
    return 0;
}
