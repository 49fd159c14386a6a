// model_cuda_f32.c - the KDA LM's fp32 forward on one GPU, the --precision fp32 scoring path
// (contract in model_cuda_f32.h). Host C driver over the fp32 launchers of src/cuda/*.h; the
// blocks mirror model/model.c's forward step by step.
//
// Shape legend (kda-model.md §0): N = B·T tokens, D hidden, H/HV q-k/value heads, K/V their
// head dims, HK = H·K, HVK = HV·K, HVV = HV·V, I MLP width, W conv kernel. All tensors fp32.
#ifdef KDA_HAVE_CUDA

#include "model/model_cuda_f32.h"

#include <stdlib.h>
#include <string.h>

#include "cpu/kda_core.h"   // defines: KdaDims
#include "cpu/xent.h"       // defines: xent_targets
#include "cuda/gemm_cuda.h" // defines: kda_cuda_gemm_fwd_f32, _residual_f32, kda_cuda_bias_add_f32
#include "cuda/kda_fast.h"  // defines: kda_fast_chunk, kda_fast_supported, kda_fast_fwd_f32
#include "model/model_cuda.h"   // defines: kda_cuda_model_check, kda_cuda_device_offsets
#include "cuda/conv_cuda.h"     // defines: kda_cuda_conv_silu_fwd_f32
#include "cuda/embed_cuda.h"    // defines: kda_cuda_embed_fwd
#include "cuda/kda_gate_cuda.h" // defines: kda_cuda_*_fwd_f32 of gate, beta, L2 norm
#include "cuda/norm_cuda.h"     // defines: kda_cuda_rmsnorm_fwd_f32, kda_cuda_gnorm_fwd_f32
#include "cuda/swiglu_cuda.h"   // defines: kda_cuda_swiglu_fwd_f32
#include "cuda/xent_cuda.h"     // defines: kda_cuda_cls_loss_f32, kda_cuda_cls_rows, _ld
#include "model/model.h"        // defines: kda_model_dims, kda_model_check_batch

#define L2NORM_EPS  1e-6f             // q/k L2 norm eps, fixed in FLA (§5.3 step 6)
#define HEAD_BUDGET ((size_t)1 << 30) // bytes of the head's fp32 logits chunk [rows, ld]
#define F32(n)      ((size_t)(n) * sizeof(float))

// One block's activations, shared by every block (forward only: nothing is kept for a backward).
typedef struct {
    float *xa;           // [N, D] attn_norm / mlp_norm output
    float *pq, *pk;      // [N, HK] q/k projections (conv inputs)
    float *pv;           // [N, HVV]
    float *qc, *kc;      // [N, HK] conv + SiLU outputs (L2-norm inputs)
    float *q, *k, *v;    // [N, HK], [N, HK], [N, HVV] core inputs
    float *f0, *f;       // [N, V], [N, HVK] low-rank gate input and raw gate
    float *gcum;         // [N, HVK] chunk-local cumsum of the log-decay
    float *b, *beta;     // [N, HV] beta logits, beta
    float *z0, *z;       // [N, V], [N, HVV] output-gate low rank and gate logits
    float *o, *on;       // [N, HVV] core output, gated-norm output
    float *ga, *up, *mm; // [N, I] gate_proj, up_proj, SwiGLU product
    float *rstd;         // [N·max(H, HV)] the norms' rstd (written, never read: no backward)
} Acts;

struct KdaCudaF32Model {
    KdaCudaCtx ctx;
    int ctx_ok;
    KdaConfig cfg;
    KdaParamTable dtab; // the table's rows with device offsets (rows owned)
    int64_t dtotal;     // elements of the device parameter buffer
    float *p;           // [dtotal] fp32 parameters, device layout
    KdaTensors P;       // device views of p
    int64_t chunk;      // the KDA core's chunk (kda_fast_chunk); gcum uses it too
    // activations (one device arena, sized for cap_tokens)
    void *arena;
    int64_t cap_tokens, head_rows;
    Acts A;
    float *h;               // [N, D] residual stream, updated in place by every block
    float *nf;              // [N, D] final norm output (kept for logits)
    float *lse, *nll;       // [N]
    float *logits;          // [head_rows, ld] the head's fp32 logits chunk
    int32_t *ids, *targets; // [N]
    double *loss_sum;       // device [1]
    int64_t B, T, n_valid;
    int have_fwd;
};

// ---- errors, lifetime ---------------------------------------------------------------------------

// Moves the context's first failure into err and clears it. Returns -1.
static int fail_(KdaCudaF32Model *m, KdaError *err) {
    if (m->ctx.err.msg[0])
        *err = m->ctx.err;
    else
        kda_fail(err, "CUDA: unknown failure");
    kda_cuda_clear_error(&m->ctx);
    return -1;
}

typedef struct {
    char *base;
    size_t used;
} Arena;

// Next 256-byte aligned piece of the arena (base NULL: only counts bytes).
static float *take_(Arena *a, size_t bytes) {
    void *p = a->base ? a->base + a->used : NULL;
    a->used += (bytes + 255) & ~(size_t)255;
    return p;
}

// Assigns every activation pointer for N tokens.
static void layout_(KdaCudaF32Model *m, int64_t N, Arena *a) {
    const KdaConfig *c = &m->cfg;
    int64_t D = c->hidden_size, H = c->num_heads, HV = c->num_v_heads, V = c->head_v_dim;
    int64_t HK = c->key_dim, HVK = c->gate_dim, HVV = c->value_dim, I = c->intermediate_size;
    Acts *A = &m->A;
    A->xa = take_(a, F32(N * D));
    A->pq = take_(a, F32(N * HK)), A->pk = take_(a, F32(N * HK)), A->pv = take_(a, F32(N * HVV));
    A->qc = take_(a, F32(N * HK)), A->kc = take_(a, F32(N * HK));
    A->q = take_(a, F32(N * HK)), A->k = take_(a, F32(N * HK)), A->v = take_(a, F32(N * HVV));
    A->f0 = take_(a, F32(N * V)), A->f = take_(a, F32(N * HVK)), A->gcum = take_(a, F32(N * HVK));
    A->b = take_(a, F32(N * HV)), A->beta = take_(a, F32(N * HV));
    A->z0 = take_(a, F32(N * V)), A->z = take_(a, F32(N * HVV));
    A->o = take_(a, F32(N * HVV)), A->on = take_(a, F32(N * HVV));
    A->ga = take_(a, F32(N * I)), A->up = take_(a, F32(N * I)), A->mm = take_(a, F32(N * I));
    A->rstd = take_(a, F32(N * (H > HV ? H : HV)));
    m->h = take_(a, F32(N * D)), m->nf = take_(a, F32(N * D));
    m->lse = take_(a, F32(N)), m->nll = take_(a, F32(N));
    // the fused classifier's token chunk, sized for fp32 logits (twice the bf16 bytes)
    m->head_rows = kda_cuda_cls_rows(N, c->vocab_size, HEAD_BUDGET / 2);
    m->logits = take_(a, kda_cuda_cls_f32_bytes(m->head_rows, c->vocab_size));
    m->ids = (int32_t *)take_(a, (size_t)N * sizeof(int32_t));
    m->targets = (int32_t *)take_(a, (size_t)N * sizeof(int32_t));
    m->loss_sum = (double *)take_(a, sizeof(double));
}

// Grows the activation arena to N tokens (frees the old one; cudaFree synchronizes).
static int reserve_(KdaCudaF32Model *m, int64_t N) {
    if (m->arena && m->cap_tokens >= N) return 0;
    kda_cuda_release(m->arena);
    m->arena = NULL;
    m->cap_tokens = 0;
    Arena a = {NULL, 0};
    layout_(m, N, &a);
    if (!(m->arena = kda_cuda_alloc(&m->ctx, a.used))) return -1;
    a.base = m->arena;
    a.used = 0;
    layout_(m, N, &a);
    m->cap_tokens = N;
    return 0;
}

// params (dense table layout) -> m->p (device layout, padding zero), through a host staging copy.
static int upload_params_(KdaCudaF32Model *m, const KdaParamTable *t, const float *params) {
    float *stage = kda_calloc((size_t)m->dtotal, sizeof(float));
    for (int i = 0; i < t->n; i++)
        memcpy(stage + m->dtab.rows[i].offset, params + t->rows[i].offset, F32(t->rows[i].numel));
    cudaError_t e = cudaMemcpy(m->p, stage, F32(m->dtotal), cudaMemcpyHostToDevice);
    free(stage);
    if (e != cudaSuccess)
        return kda_cuda_fail_at(&m->ctx, __FILE__, __LINE__, "cudaMemcpy(params)",
                                cudaGetErrorString(e));
    return 0;
}

int kda_cuda_f32_model_create(KdaCudaF32Model **out, const KdaConfig *cfg, const KdaParamTable *t,
                              const float *params, int device, KdaError *err) {
    *out = NULL;
    if (kda_cuda_model_check(cfg, device, err)) return -1;
    KdaCudaF32Model *m = kda_calloc(1, sizeof *m);
    if (kda_cuda_init(&m->ctx, device, err)) {
        free(m);
        return -1;
    }
    m->ctx_ok = 1;
    m->cfg = *cfg;
    m->chunk = kda_fast_chunk(cfg->head_dim, cfg->head_v_dim, m->ctx.info.smem_per_block_optin);
    KdaDims d = kda_model_dims(cfg, 1, m->chunk);
    d.chunk = m->chunk;
    if (!kda_fast_supported(&d, m->ctx.info.smem_per_block_optin)) {
        kda_fail(err,
                 "--precision fp32: the chunk-parallel KDA kernels do not fit head_dim %lld, "
                 "head_v_dim %lld on this GPU (use --precision bf16)",
                 (long long)cfg->head_dim, (long long)cfg->head_v_dim);
        kda_cuda_f32_model_free(m);
        return -1;
    }
    m->dtab = *t;
    m->dtab.rows = kda_malloc((size_t)(t->n > 0 ? t->n : 1) * sizeof *t->rows);
    memcpy(m->dtab.rows, t->rows, (size_t)t->n * sizeof *t->rows);
    int fused;
    int64_t off = kda_cuda_device_offsets(&m->dtab, t, 0, &fused);
    m->dtotal = off > 0 ? off : 128;
    m->dtab.total_numel = m->dtotal;
    if (!(m->p = kda_cuda_alloc(&m->ctx, F32(m->dtotal))) || upload_params_(m, t, params)) {
        fail_(m, err);
        kda_cuda_f32_model_free(m);
        return -1;
    }
    kda_tensors_bind(&m->P, &m->dtab, m->p);
    *out = m;
    return 0;
}

void kda_cuda_f32_model_free(KdaCudaF32Model *m) {
    if (!m) return;
    if (m->ctx_ok) kda_cuda_sync(&m->ctx);
    kda_cuda_release(m->arena);
    kda_cuda_release(m->p);
    kda_tensors_free(&m->P);
    free(m->dtab.rows);
    if (m->ctx_ok) kda_cuda_free(&m->ctx);
    free(m);
}

const char *kda_cuda_f32_model_device_name(const KdaCudaF32Model *m) {
    return m->ctx.info.name;
}

// ---- forward ------------------------------------------------------------------------------------

#define TRY(call)                                                                                  \
    do {                                                                                           \
        if ((call)) return -1;                                                                     \
    } while (0)

// y [N, out] = x [N, in] · Wᵀ.
static int lin_(KdaCudaF32Model *m, float *y, const float *x, const float *W, int64_t N, int64_t in,
                int64_t out) {
    return kda_cuda_gemm_fwd_f32(&m->ctx, y, x, W, N, in, out);
}

// One KDA sublayer + MLP on the residual stream m->h (in place), model.c's block forward.
static int block_fwd_(KdaCudaF32Model *m, const KdaLayerTensors *P) {
    const KdaConfig *c = &m->cfg;
    KdaCudaCtx *x = &m->ctx;
    Acts *A = &m->A;
    int64_t N = m->B * m->T, D = c->hidden_size, H = c->num_heads, HV = c->num_v_heads;
    int64_t K = c->head_dim, V = c->head_v_dim, HK = c->key_dim, HVK = c->gate_dim;
    int64_t HVV = c->value_dim, I = c->intermediate_size, Wc = c->conv_size;
    float eps = (float)c->norm_eps;
    KdaDims d = kda_model_dims(c, m->B, m->T);
    d.chunk = m->chunk; // the chunked form is exact for any chunk; gcum restarts at it

    TRY(kda_cuda_rmsnorm_fwd_f32(x, A->xa, A->rstd, m->h, P->attn_norm, N, D, eps));
    TRY(lin_(m, A->pq, A->xa, P->q_proj, N, D, HK));
    TRY(lin_(m, A->pk, A->xa, P->k_proj, N, D, HK));
    TRY(lin_(m, A->pv, A->xa, P->v_proj, N, D, HVV));
    TRY(kda_cuda_conv_silu_fwd_f32(x, A->qc, A->pq, P->q_conv, m->B, m->T, HK, Wc));
    TRY(kda_cuda_l2norm_fwd_f32(x, A->q, A->rstd, A->qc, N * H, K, L2NORM_EPS));
    TRY(kda_cuda_conv_silu_fwd_f32(x, A->kc, A->pk, P->k_conv, m->B, m->T, HK, Wc));
    TRY(kda_cuda_l2norm_fwd_f32(x, A->k, A->rstd, A->kc, N * H, K, L2NORM_EPS));
    TRY(kda_cuda_conv_silu_fwd_f32(x, A->v, A->pv, P->v_conv, m->B, m->T, HVV, Wc));
    TRY(lin_(m, A->f0, A->xa, P->f_proj0, N, D, V));
    TRY(lin_(m, A->f, A->f0, P->f_proj1, N, V, HVK));
    TRY(kda_cuda_gate_cumsum_fwd_f32(x, A->gcum, A->f, P->A_log, P->dt_bias, m->B, m->T, HV, K,
                                     d.chunk));
    TRY(lin_(m, A->b, A->xa, P->b_proj, N, D, HV));
    TRY(kda_cuda_beta_fwd_f32(x, A->beta, A->b, N * HV, c->allow_neg_eigval));
    TRY(kda_fast_fwd_f32(x, A->o, NULL, A->q, A->k, A->v, A->gcum, A->beta, NULL, &d));
    TRY(lin_(m, A->z0, A->xa, P->g_proj0, N, D, V));
    TRY(lin_(m, A->z, A->z0, P->g_proj1, N, V, HVV));
    TRY(kda_cuda_bias_add_f32(x, A->z, P->g_proj1_bias, N, HVV));
    TRY(kda_cuda_gnorm_fwd_f32(x, A->on, A->rstd, A->o, A->z, P->o_norm, N * HV, V, eps));
    TRY(kda_cuda_gemm_residual_f32(x, m->h, m->h, A->on, P->o_proj, N, HVV, D));

    TRY(kda_cuda_rmsnorm_fwd_f32(x, A->xa, A->rstd, m->h, P->mlp_norm, N, D, eps));
    TRY(lin_(m, A->ga, A->xa, P->gate_proj, N, D, I));
    TRY(lin_(m, A->up, A->xa, P->up_proj, N, D, I));
    TRY(kda_cuda_swiglu_fwd_f32(x, A->mm, A->ga, A->up, N * I));
    TRY(kda_cuda_gemm_residual_f32(x, m->h, m->h, A->mm, P->down_proj, N, I, D));
    return 0;
}

// Embedding, blocks, final norm and the fp32 head (ids and targets already on the device).
static int forward_dev_(KdaCudaF32Model *m) {
    const KdaConfig *c = &m->cfg;
    int64_t N = m->B * m->T, D = c->hidden_size;
    TRY(kda_cuda_embed_fwd(&m->ctx, m->h, m->P.embed, m->ids, N, D));
    for (int64_t l = 0; l < c->num_hidden_layers; l++)
        TRY(block_fwd_(m, &m->P.layers[l]));
    TRY(kda_cuda_rmsnorm_fwd_f32(&m->ctx, m->nf, m->A.rstd, m->h, m->P.final_norm, N, D,
                                 (float)c->norm_eps));
    return kda_cuda_cls_loss_f32(&m->ctx, m->nll, m->lse, m->loss_sum, m->nf, m->P.lm_head,
                                 m->targets, N, D, c->vocab_size, m->logits, m->head_rows);
}

// ids [N] and the shifted targets to the device (pageable sources: staged before returning).
static int upload_batch_(KdaCudaF32Model *m, const int32_t *ids, const int32_t *tg, int64_t N) {
    CUDA_CHECK(&m->ctx, cudaMemcpyAsync(m->ids, ids, (size_t)N * sizeof(int32_t),
                                        cudaMemcpyHostToDevice, m->ctx.stream));
    CUDA_CHECK(&m->ctx, cudaMemcpyAsync(m->targets, tg, (size_t)N * sizeof(int32_t),
                                        cudaMemcpyHostToDevice, m->ctx.stream));
    return 0;
}

static int read_loss_(KdaCudaF32Model *m, double *s) {
    CUDA_CHECK(&m->ctx,
               cudaMemcpyAsync(s, m->loss_sum, sizeof *s, cudaMemcpyDeviceToHost, m->ctx.stream));
    return kda_cuda_sync(&m->ctx);
}

int kda_cuda_f32_model_forward(KdaCudaF32Model *m, const int32_t *ids, const int32_t *labels,
                               int64_t B, int64_t T, float *nll, float *loss, KdaError *err) {
    int64_t N = B * T;
    m->have_fwd = 0;
    if (kda_model_check_batch(&m->cfg, ids, &labels, B, T, err)) return -1;
    int32_t *tg = kda_malloc((size_t)N * sizeof(int32_t));
    m->n_valid = xent_targets(tg, labels, B, T);
    int rc = reserve_(m, N);
    if (!rc) {
        m->B = B, m->T = T;
        rc = upload_batch_(m, ids, tg, N) || forward_dev_(m);
    }
    free(tg);
    double s = 0.0;
    if (!rc && nll) rc = kda_cuda_get_f32(&m->ctx, nll, m->nll, N);
    if (!rc) rc = read_loss_(m, &s);
    if (rc) return fail_(m, err);
    if (loss) *loss = m->n_valid ? (float)(s / (double)m->n_valid) : 0.0f;
    m->have_fwd = 1;
    return 0;
}

int kda_cuda_f32_model_logits(KdaCudaF32Model *m, int64_t b, int64_t t, float *logits,
                              KdaError *err) {
    if (!m->have_fwd) return kda_fail(err, "CUDA model: logits need a preceding forward");
    if (b < 0 || b >= m->B || t < 0 || t >= m->T)
        return kda_fail(err,
                        "CUDA model: logits of (%lld, %lld) outside the last batch [%lld, %lld]",
                        (long long)b, (long long)t, (long long)m->B, (long long)m->T);
    int64_t D = m->cfg.hidden_size, V = m->cfg.vocab_size;
    size_t ybytes = (F32(V) + 255) / 256 * 256;
    char *ws = kda_cuda_scratch(&m->ctx, ybytes + F32(D));
    if (!ws) return fail_(m, err);
    float *y = (float *)ws;
    float *x = (float *)(ws + ybytes); // the row, copied to a 256-byte aligned address (cuBLASLt)
    cudaError_t e = cudaMemcpyAsync(x, m->nf + (b * m->T + t) * D, F32(D), cudaMemcpyDeviceToDevice,
                                    m->ctx.stream);
    if (e != cudaSuccess) {
        kda_cuda_fail_at(&m->ctx, __FILE__, __LINE__, "cudaMemcpyAsync(row)",
                         cudaGetErrorString(e));
        return fail_(m, err);
    }
    if (kda_cuda_gemm_fwd_f32(&m->ctx, y, x, m->P.lm_head, 1, D, V) ||
        kda_cuda_get_f32(&m->ctx, logits, y, V))
        return fail_(m, err);
    return 0;
}

#endif // KDA_HAVE_CUDA
