// model_cuda.c - the KDA LM on one GPU: forward, loss, backward, AdamW (contract in model_cuda.h).
// Host C driver over the launchers of src/cuda/*.h; mirrors model/model.c block by block.
//
// Shape legend (kda-model.md §0): N = B·T tokens, D hidden, H/HV q-k/value heads, K/V their
// head dims, HK = H·K, HVK = HV·K, HVV = HV·V, I MLP width, W conv kernel. "bf" = bf16.
#ifdef KDA_HAVE_CUDA

#include "model/model_cuda.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"           // defines: kda_warn
#include "core/prof.h"          // defines: KdaProf, kda_prof_add
#include "cpu/kda_core.h"       // defines: KdaDims
#include "cpu/xent.h"           // defines: xent_targets, XENT_IGNORE
#include "model/model.h"        // defines: kda_model_dims, kda_model_check_batch
#include "cuda/gemm_cuda.h"     // defines: kda_cuda_gemm_*, kda_cuda_bias_*, kda_cuda_cols_*
#include "cuda/kda_cuda.h"      // defines: kda_cuda_chunk_fwd, kda_cuda_chunk_bwd
#include "cuda/kda_fast.h"      // defines: kda_fast_chunk, kda_fast_*_keep (CORE_SIMT)
#include "cuda/kda_tc.h"        // defines: kda_tc_selected, kda_tc_* (the CORE_TC table)
#include "cuda/decode_cuda.h"   // defines: kda_cuda_decode_conv, _delta, _tail
#include "cuda/conv_cuda.h"     // defines: kda_cuda_conv_silu_*, kda_cuda_conv_l2_fusable
#include "cuda/embed_cuda.h"    // defines: kda_cuda_embed_fwd, kda_cuda_embed_bwd
#include "cuda/kda_gate_cuda.h" // defines: kda_cuda_gate_cumsum_*, _beta_*, _l2norm_*
#include "cuda/norm_cuda.h"     // defines: kda_cuda_rmsnorm_*, kda_cuda_gnorm_*
#include "cuda/optim_cuda.h"    // defines: kda_cuda_adamw, kda_cuda_grad_norm, kda_cuda_clip_coef
#include "cuda/swiglu_cuda.h"   // defines: kda_cuda_swiglu_*
#include "cuda/xent_cuda.h"     // defines: kda_cuda_xent_fwd, kda_cuda_xent_bwd
#include "model/zero1.h"        // defines: kda_zero1_plan, kda_zero1_clip (ZeRO-1)
#include "model/step_graph.h"   // defines: KdaStepGraph, kda_step_graph_* (KDA_GRAPH)

#define ROW_ALIGN   128                 // elements: device rows start 256-byte aligned (bf16)
#define L2NORM_EPS  1e-6f               // q/k L2 norm eps, fixed in FLA (§5.3 step 6)
#define XENT_BUDGET ((size_t)256 << 20) // bytes of the bf16 logits chunk [N, chunk]
#define CLS_BUDGET  ((size_t)2 << 30)   // bytes of the fused classifier's bf16 logits [rows, ld]
// Profile floors (core/prof.h): the H200's measured bf16 GEMM rate (torch 8192^3) and device
// copy rate (performance.md §2-3). Other GPUs get the same numbers: the floor column is then
// only a yardstick.
#define PROF_GEMM_FLOPS 767e12
#define PROF_HBM_BYTES  4.14e12
#define PROF_EVENTS0    4096 // events created when profiling starts (grown on demand)

typedef kda_bf16 bf;

// ---- activations ------------------------------------------------------------------------------

typedef struct { // one timed op call: events ev[e0] .. ev[e0 + 1]
    int op, e0;
    double flops, bytes;
} ProfRec;

typedef struct {      // saved per block for backward
    float *h;         // [N, D] block input (residual stream)
    bf *xa;           // [N, D] attn_norm output
    float *rstd_a;    // [N]
    bf *pq, *pk, *pv; // [N, HK], [N, HK], [N, HVV] projections (conv inputs)
    bf *qc, *kc;      // [N, HK] conv + SiLU outputs (L2-norm inputs); NULL when fused
    float *rq, *rk;   // [N·H] L2 rstd
    bf *q, *k, *v;    // [N, HK], [N, HK], [N, HVV] core inputs
    bf *f0, *f;       // [N, V], [N, HVK] low-rank gate input and raw gate
    float *gcum;      // [N, HVK] chunk-local cumsum of the log-decay
    bf *b;            // [N, HV] beta logits
    float *beta;      // [N, HV]
    bf *z0, *z;       // [N, V], [N, HVV] output-gate low rank and gate logits (fused: no bias)
    bf *o;            // [N, HVV] core output
    float *rstd_o;    // [N·HV]
    bf *on;           // [N, HVV] gated-norm output
    float *h2;        // [N, D] residual after the KDA sublayer
    bf *xm;           // [N, D] mlp_norm output
    float *rstd_m;    // [N]
    bf *ga, *up, *mm; // [N, I] gate_proj, up_proj, SwiGLU product (gate|up: ga [N, 2I], up NULL)
    float *keep;      // the KDA core's kept state (kda_fast/kda_tc_keep_floats) or NULL (recompute)
} DevLayer;

struct KdaCudaModel {
    KdaCudaCtx ctx;
    int ctx_ok;
    KdaConfig cfg;
    KdaParamTable table;    // dense host layout (rows owned)
    KdaParamTable dtab;     // the same rows with device offsets (rows owned)
    int64_t dtotal;         // elements of each device buffer
    float *p, *g, *m1, *m2; // fp32 params, grads [sh.padded]; Adam moments [sh.chunk]
    bf *pb;                 // [dtotal] bf16 working copy
    KdaTensors P, G;        // device views of p and g
    float *stage;           // [dtotal] host staging for dense <-> device layout
    void (*layer_hook)(void *user, int64_t layer); // data parallelism (may be NULL)
    void *layer_user;
    // The optimizer's shard of the device layout: AdamW and the grad norm cover [sh.lo, sh.hi)
    // (clipped to dtotal). One process or plain data parallel: the whole layout (world 1, align
    // 1: padded = chunk = dtotal). ZeRO-1 (kda_cuda_model_shard): 1/world of it, padding zero.
    KdaShard sh;
    int sharded;
    int (*norm_reduce)(void *user, double *sumsq, KdaError *err); // ZeRO-1: Σ over the ranks
    void *norm_user;
    // activations (one device arena, sized for cap_tokens)
    void *arena;
    int64_t cap_tokens;
    DevLayer *L;            // [num_hidden_layers]
    float *hL;              // [N, D] last block output
    bf *nf;                 // [N, D] final norm output
    float *rstd_f;          // [N]
    int32_t *ids, *targets; // [N]
    float *lse, *nll;       // [N]
    KdaCudaXentWs xws;
    KdaCudaClsWs cls; // fused classifier; its logits share xws.logits's bytes (never both live)
    float *dh, *dx;   // [N, D] fp32
    bf *dhb;          // [N, D] bf16 copy of dh (GEMM operand)
    bf *dI1, *dI2;    // [N, I] (gate|up: dI1 [N, 2I], dI2 NULL)
    float *dq, *dk;   // [N, HK]
    bf *dt1, *dt2;    // [N, max(HK, HVV)]
    bf *dv, *d_o, *dz, *don; // [N, HVV]
    float *dg;               // [N, HVK]
    bf *df;                  // [N, HVK]
    float *dbeta;            // [N, HV]
    bf *db;                  // [N, HV]
    bf *dlow;                // [N, V]
    // device scalars
    void *scal;
    double *loss_sum, *norm;
    float *coef, *gscale;
    int64_t B, T, n_valid;
    int64_t chunk; // the KDA core's chunk (kda_fast_chunk: 32 for K = 32, V = 64); gcum uses it too
    int recompute; // per-block activation recomputation (kda_cuda_model_set_recompute)
    size_t cls_budget; // bytes of the fused classifier's logits chunk (0: no workspace for it)
    int cls_row;       // its row kernel: KDA_CLS_ROW_CLUSTER, _BLOCK, _PIPE, _TRIM (=1, =2, =3)
    int core_keep;     // keep the KDA core's forward h and Δ for the backward (KDA_CORE_KEEP)
    int core_tc;       // the tensor-core KDA core (cuda/kda_tc.h) where it fits; KDA_CORE=simt off
    const struct CoreOps *core; // the KDA core of this (B, T): core_pick_, once per batch shape
    int inproj;     // q|k|v|f0|g0|b back to back on the device: one input GEMM (KDA_INPROJ)
    int dy_inplace; // beta/conv backwards write into the fused dY (default; KDA_DY_INPLACE=0 off)
    int gateup;     // gate_proj|up_proj back to back: one [2I, D] GEMM each way (KDA_GATEUP)
    // with gate|up, unless KDA_MLP_RECOMPUTE=0 at create (the default since 2026-12-03): the SwiGLU
    // product is not kept per layer; the forward writes it into one shared buffer for down_proj and
    // the backward's SwiGLU kernel writes it again, bit for bit, for down_proj's weight gradient
    // (FLA's fused SwiGLU + linear keeps no product either): -N·I·2 bytes per layer saved, one
    // more N·I·2-byte write per layer spent
    int mlp_recompute;
    int fuse;    // fused elementwise kernels wanted (KDA_FUSE; kda_cuda_model_set_fuse)
    int fuse_l2; // conv + SiLU + L2 norm of q and k in one kernel (fuse and K fits)
    // KDA_CONV_QKV at create: with fuse_l2, a layer's q, k and v convs in one launch
    // (kda_cuda_conv_qkv_fwd / _bwd; the same bits as three): 1 the forward only (the default
    // since 2026-12-04), 2 the backward too (bench_gpu, 2026-12-03: fwd 0.100 -> 0.088 ms a
    // layer, bwd 0.191 -> 0.223, slower), 0 (KDA_CONV_QKV=0) three launches each way
    int conv_qkv;
    int fuse_gn; // gated out-norm with the g_proj.1 bias folded in (fuse and V fits)
    int fuse_dh; // RMSNorm backward writes the bf16 dh (no fp32 -> bf16 cast)
    int *dorder; // [table.n] row indices by device offset
    bf *inb;     // [N, INPROJ width] bf16: the fused input GEMM's output, then its dY
    float *keep; // [keep_cap] floats: per layer (one layer's with recompute) kept h and Δ
    size_t keep_cap;
    int have_fwd;
    int clip_pending;
    size_t arena_bytes; // of the current activation arena (kda_cuda_model_plan counts the same)
    float *fin; // [HV, K, V] fp32: where the running block's KDA core leaves its final state
                // (kda_cuda_model_prefill), else NULL
    // per-op profile (kda_cuda_model_profile): events ev[0 .. n_ev) recorded in pairs
    KdaProf *prof;
    cudaEvent_t *ev;
    int n_ev, cap_ev, open_ev; // open_ev: first event of the running op (-1: none)
    ProfRec *rec;
    int n_rec;
    // forward_backward's device work as one CUDA graph per batch key (the default; KDA_GRAPH=0
    // at create: eager) (step_graph.h; the execs are cudaGraphExec_t, destroyed through
    // graph_destroy_)
    KdaStepGraph graphs;
    // AdamW in one launch over the shard (kda_cuda_adamw_runs; the default, KDA_ADAMW_ONE=0 at
    // create: one launch per run of rows with the same decay flag). The run table (device: ends [n]
    // int64 from the shard's start, then decay [n] bytes) covers [adam_lo, adam_lo + adam_n) of the
    // layout; it was built for the shard [adam_sh_lo, adam_sh_hi).
    int adamw_one;
    void *adam_runs;
    int adam_nruns;
    int64_t adam_lo, adam_n, adam_sh_lo, adam_sh_hi;
};

typedef struct {
    char *base;
    size_t used;
} Arena;

static void *take_(Arena *a, size_t bytes) {
    void *p = a->base ? a->base + a->used : NULL;
    a->used += (bytes + 255) & ~(size_t)255;
    return p;
}

#define F32(n) ((size_t)(n) * sizeof(float))
#define BF(n)  ((size_t)(n) * sizeof(bf))

static int64_t max64_(int64_t a, int64_t b) {
    return a > b ? a : b;
}

// Output width of the fused input GEMM: q | k | v | f_proj.0 | g_proj.0 | b_proj.
static int64_t inproj_width_(const KdaConfig *c) {
    return 2 * c->key_dim + c->value_dim + 2 * c->head_v_dim + c->num_v_heads;
}

// Assigns every activation pointer for N tokens (a->base NULL: only counts bytes).
static void layout_(KdaCudaModel *m, int64_t N, Arena *a) {
    const KdaConfig *c = &m->cfg;
    int64_t D = c->hidden_size, H = c->num_heads, HV = c->num_v_heads, V = c->head_v_dim;
    int64_t HK = c->key_dim, HVK = c->gate_dim, HVV = c->value_dim, I = c->intermediate_size;
    int64_t Wd = max64_(HK, HVV);
    bf *mm_shared = m->mlp_recompute ? take_(a, BF(N * I)) : NULL; // every layer's SwiGLU product
    for (int64_t l = 0; l < c->num_hidden_layers; l++) {
        DevLayer *L = &m->L[l];
        if (m->recompute && l > 0) { // only the block input is per layer; the rest is shared
            *L = m->L[0];
            L->h = take_(a, F32(N * D));
            continue;
        }
        L->h = take_(a, F32(N * D)), L->xa = take_(a, BF(N * D)), L->rstd_a = take_(a, F32(N));
        L->pq = take_(a, BF(N * HK)), L->pk = take_(a, BF(N * HK)), L->pv = take_(a, BF(N * HVV));
        L->qc = m->fuse_l2 ? NULL : take_(a, BF(N * HK));
        L->kc = m->fuse_l2 ? NULL : take_(a, BF(N * HK));
        L->rq = take_(a, F32(N * H)), L->rk = take_(a, F32(N * H));
        L->q = take_(a, BF(N * HK)), L->k = take_(a, BF(N * HK)), L->v = take_(a, BF(N * HVV));
        L->f0 = take_(a, BF(N * V)), L->f = take_(a, BF(N * HVK)), L->gcum = take_(a, F32(N * HVK));
        L->b = take_(a, BF(N * HV)), L->beta = take_(a, F32(N * HV));
        L->z0 = take_(a, BF(N * V)), L->z = take_(a, BF(N * HVV));
        L->o = take_(a, BF(N * HVV)), L->rstd_o = take_(a, F32(N * HV)),
        L->on = take_(a, BF(N * HVV));
        L->h2 = take_(a, F32(N * D)), L->xm = take_(a, BF(N * D)), L->rstd_m = take_(a, F32(N));
        L->ga = take_(a, BF(N * I * (m->gateup ? 2 : 1))); // gate|up: [N, 2I], gate | up per row
        L->up = m->gateup ? NULL : take_(a, BF(N * I));
        L->mm = m->mlp_recompute ? mm_shared : take_(a, BF(N * I)); // (counting: both NULL)
    }
    m->inb = m->inproj ? take_(a, BF(N * inproj_width_(c))) : NULL;
    m->hL = take_(a, F32(N * D)), m->nf = take_(a, BF(N * D)), m->rstd_f = take_(a, F32(N));
    m->ids = take_(a, (size_t)N * sizeof(int32_t)),
    m->targets = take_(a, (size_t)N * sizeof(int32_t));
    m->lse = take_(a, F32(N)), m->nll = take_(a, F32(N));
    m->xws.chunk = kda_cuda_xent_chunk(N, c->vocab_size, XENT_BUDGET);
    m->cls.rows = kda_cuda_cls_rows(N, c->vocab_size, m->cls_budget);
    m->cls.ld = kda_cuda_cls_ld(c->vocab_size);
    m->cls.row_kernel = m->cls_row;
    size_t lb = kda_cuda_xent_logits_bytes(N, m->xws.chunk);
    size_t cb = m->cls_budget ? kda_cuda_cls_bytes(m->cls.rows, c->vocab_size) : 0;
    m->xws.logits = take_(a, lb > cb ? lb : cb);
    m->cls.logits = m->xws.logits;
    m->xws.stat = take_(a, kda_cuda_xent_stat_bytes(N));
    m->dh = take_(a, F32(N * D)), m->dx = take_(a, F32(N * D)), m->dhb = take_(a, BF(N * D));
    m->dI1 = take_(a, BF(N * I * (m->gateup ? 2 : 1))); // gate|up: [N, 2I] d(gate | up)
    m->dI2 = m->gateup ? NULL : take_(a, BF(N * I));
    m->dq = take_(a, F32(N * HK)), m->dk = take_(a, F32(N * HK));
    m->dt1 = take_(a, BF(N * Wd)), m->dt2 = take_(a, BF(N * Wd));
    m->dv = take_(a, BF(N * HVV)), m->d_o = take_(a, BF(N * HVV));
    m->dz = take_(a, BF(N * HVV)), m->don = take_(a, BF(N * HVV));
    m->dg = take_(a, F32(N * HVK)), m->df = take_(a, BF(N * HVK));
    m->dbeta = take_(a, F32(N * HV)), m->db = take_(a, BF(N * HV)), m->dlow = take_(a, BF(N * V));
}

// Grows the activation arena to N tokens (frees the old one; cudaFree synchronizes).
static int reserve_(KdaCudaModel *m, int64_t N) {
    if (m->arena && m->cap_tokens >= N) return 0;
    kda_cuda_release(m->arena);
    m->arena = NULL;
    m->cap_tokens = 0;
    Arena a = {NULL, 0};
    layout_(m, N, &a);
    m->arena = kda_cuda_alloc(&m->ctx, a.used);
    if (!m->arena) return -1;
    m->arena_bytes = a.used;
    a.base = m->arena;
    a.used = 0;
    layout_(m, N, &a);
    m->cap_tokens = N;
    return 0;
}

// ---- errors, lifetime, transfers -----------------------------------------------------------

// Moves the context's first failure into err and clears it. Returns -1.
static int fail_(KdaCudaModel *m, KdaError *err) {
    if (err) {
        if (m->ctx.err.msg[0])
            *err = m->ctx.err;
        else
            kda_fail(err, "CUDA: unknown failure");
    }
    kda_cuda_clear_error(&m->ctx);
    return -1;
}

static int copy_table_(KdaParamTable *dst, const KdaParamTable *src) {
    *dst = *src;
    dst->rows = kda_malloc((size_t)(src->n > 0 ? src->n : 1) * sizeof *dst->rows);
    memcpy(dst->rows, src->rows, (size_t)src->n * sizeof *dst->rows);
    return 0;
}

int kda_cuda_model_check_config(const KdaConfig *c, KdaError *err) {
    if (!c->use_short_conv)
        return kda_fail(err, "CUDA model: use_short_conv = false is not implemented on the GPU");
    if (c->has_lower_bound)
        return kda_fail(err, "CUDA model: the bounded gate (lower_bound) is not implemented on "
                             "the GPU");
    if (c->hidden_act[0] && strcmp(c->hidden_act, "swish") && strcmp(c->hidden_act, "silu"))
        return kda_fail(err, "hidden_act '%s' is not supported (expected \"swish\")",
                        c->hidden_act);
    if (c->num_v_heads % c->num_heads)
        return kda_fail(err, "num_v_heads %lld is not a multiple of num_heads %lld",
                        (long long)c->num_v_heads, (long long)c->num_heads);
    if (c->conv_size < 1 || c->conv_size > 8)
        return kda_fail(err, "CUDA model: conv_size %lld outside [1, 8]", (long long)c->conv_size);
    return 0;
}

int kda_cuda_model_check(const KdaConfig *cfg, int device, KdaError *err) {
    if (kda_cuda_model_check_config(cfg, err)) return -1;
    int n_dev = kda_cuda_device_count();
    if (n_dev < 1) return kda_fail(err, "CUDA model: no CUDA device is visible");
    if (device < 0 || device >= n_dev)
        return kda_fail(err, "CUDA model: device %d does not exist (%d visible)", device, n_dev);
    return 0;
}

// dense host [table.total_numel] -> stage (device layout); stage's padding stays zero.
static void pack_(KdaCudaModel *m, const float *dense) {
    for (int i = 0; i < m->table.n; i++)
        memcpy(m->stage + m->dtab.rows[i].offset, dense + m->table.rows[i].offset,
               F32(m->table.rows[i].numel));
}
static void unpack_(KdaCudaModel *m, float *dense) {
    for (int i = 0; i < m->table.n; i++)
        memcpy(dense + m->table.rows[i].offset, m->stage + m->dtab.rows[i].offset,
               F32(m->table.rows[i].numel));
}

static int put_(KdaCudaModel *m, float *dev, const float *dense) {
    pack_(m, dense);
    CUDA_CHECK(&m->ctx, cudaMemcpyAsync(dev, m->stage, F32(m->dtotal), cudaMemcpyHostToDevice,
                                        m->ctx.stream));
    CUDA_CHECK(&m->ctx, cudaStreamSynchronize(m->ctx.stream));
    return 0;
}
static int get_(KdaCudaModel *m, float *dense, const float *dev) {
    CUDA_CHECK(&m->ctx, cudaMemcpyAsync(m->stage, dev, F32(m->dtotal), cudaMemcpyDeviceToHost,
                                        m->ctx.stream));
    CUDA_CHECK(&m->ctx, cudaStreamSynchronize(m->ctx.stream));
    unpack_(m, dense);
    return 0;
}

static int64_t align_(int64_t n) {
    return (n + ROW_ALIGN - 1) / ROW_ALIGN * ROW_ALIGN;
}

// Fusion groups of the device layout: rows of one block placed back to back, by field, in the
// order of the fused GEMM's output columns (kda_cuda_device_offsets).
typedef struct {
    int n, flag; // parts; its bit in the flags / *fused
    size_t field[KDA_INPROJ_PARTS];
} FuseGroup;
static const FuseGroup FUSE_GROUPS[] = {
    {KDA_INPROJ_PARTS,
     KDA_LAYOUT_INPROJ,
     {offsetof(KdaLayerTensors, q_proj), offsetof(KdaLayerTensors, k_proj),
      offsetof(KdaLayerTensors, v_proj), offsetof(KdaLayerTensors, f_proj0),
      offsetof(KdaLayerTensors, g_proj0), offsetof(KdaLayerTensors, b_proj)}},
    {2,
     KDA_LAYOUT_GATEUP,
     {offsetof(KdaLayerTensors, gate_proj), offsetof(KdaLayerTensors, up_proj)}},
};
#define N_FUSE_GROUPS ((int)(sizeof FUSE_GROUPS / sizeof FUSE_GROUPS[0]))

static int find_row_(const KdaParamTable *t, int layer, size_t field) {
    for (int i = 0; i < t->n; i++)
        if (t->rows[i].layer == layer && t->rows[i].field == field) return i;
    return -1;
}

// Row indices idx[0 .. g->n) of group g for the block of row r when every part exists, none is
// placed yet and all but the last are whole multiples of ROW_ALIGN (no padding between them).
static int group_rows_(const KdaParamTable *t, const char *done, const KdaParamInfo *r,
                       const FuseGroup *g, int *idx) {
    for (int p = 0; p < g->n; p++) {
        idx[p] = find_row_(t, r->layer, g->field[p]);
        if (idx[p] < 0 || done[idx[p]] || (p < g->n - 1 && t->rows[idx[p]].numel % ROW_ALIGN != 0))
            return 0;
    }
    return 1;
}

int64_t kda_cuda_device_offsets(KdaParamTable *dst, const KdaParamTable *t, int flags, int *fused) {
    char *done = kda_calloc((size_t)(t->n > 0 ? t->n : 1), 1);
    int all[N_FUSE_GROUPS], seen[N_FUSE_GROUPS];
    for (int k = 0; k < N_FUSE_GROUPS; k++)
        all[k] = (flags & FUSE_GROUPS[k].flag) != 0, seen[k] = 0;
    int64_t off = 0;
    for (int i = 0; i < t->n; i++) {
        if (done[i]) continue;
        const KdaParamInfo *r = &t->rows[i];
        const FuseGroup *g = NULL;
        int idx[KDA_INPROJ_PARTS];
        for (int k = 0; k < N_FUSE_GROUPS && r->layer >= 0 && !g; k++) {
            if (r->field != FUSE_GROUPS[k].field[0] || !(flags & FUSE_GROUPS[k].flag)) continue;
            seen[k] = 1;
            if (group_rows_(t, done, r, &FUSE_GROUPS[k], idx))
                g = &FUSE_GROUPS[k];
            else
                all[k] = 0;
        }
        if (!g) {
            dst->rows[i].offset = off;
            off += align_(r->numel);
            done[i] = 1;
            continue;
        }
        for (int p = 0; p < g->n; p++) {
            dst->rows[idx[p]].offset = off;
            off += p == g->n - 1 ? align_(t->rows[idx[p]].numel) : t->rows[idx[p]].numel;
            done[idx[p]] = 1;
        }
    }
    free(done);
    *fused = 0;
    for (int k = 0; k < N_FUSE_GROUPS; k++)
        if (all[k] && seen[k]) *fused |= FUSE_GROUPS[k].flag;
    return off;
}

// The fused-kernel flags for on/off; each fusion also needs the head dims its kernel takes.
static void set_fuse_flags_(KdaCudaModel *m, int on) {
    m->fuse = on;
    m->fuse_l2 = on && kda_cuda_conv_l2_fusable(m->cfg.head_dim);
    m->fuse_gn = on && kda_cuda_gnorm_fusable(m->cfg.head_v_dim);
    m->fuse_dh = on;
}

int kda_cuda_model_set_fuse(KdaCudaModel *m, int on, KdaError *err) {
    on = on != 0;
    if (on == m->fuse) return 0;
    if (kda_cuda_sync(&m->ctx)) return fail_(m, err);
    kda_cuda_release(m->arena); // the next forward lays the arena out again (qc, kc)
    m->arena = NULL;
    m->cap_tokens = 0;
    m->have_fwd = 0;
    set_fuse_flags_(m, on);
    return 0;
}

int kda_cuda_model_fused(const KdaCudaModel *m) {
    return m->fuse_l2 | (m->fuse_gn << 1) | (m->fuse_dh << 2);
}

// Everything create decides before allocating: the core's chunk (for m->ctx.info's shared memory),
// the environment's switches (KDA_CORE_KEEP, KDA_CORE, KDA_FUSE, KDA_INPROJ, KDA_GATEUP), the
// device layout and its fusion groups; cfg and t copied. Host only (kda_cuda_model_plan too).
static void configure_(KdaCudaModel *m, const KdaConfig *cfg, const KdaParamTable *t) {
    m->chunk = kda_fast_chunk(cfg->head_dim, cfg->head_v_dim, m->ctx.info.smem_per_block_optin);
    m->cls_budget = CLS_BUDGET;
    // the fused classifier's row kernel: a cluster per row, the row read once, trimmed to the
    // same bits in fewer instructions (default since the GPU run of 2026-12-03, session 6: CE
    // rows 7.59 → 6.03 ms at mb 16); "0": the cluster kernel untrimmed; "1": a block per row (the
    // kernel before, to measure against); "2": the cluster kernel on a persistent grid, the next
    // rows' loads in flight (to measure against)
    const char *row = getenv("KDA_CLS_ROW");
    m->cls_row = row && !strcmp(row, "0")   ? KDA_CLS_ROW_CLUSTER
                 : row && !strcmp(row, "1") ? KDA_CLS_ROW_BLOCK
                 : row && !strcmp(row, "2") ? KDA_CLS_ROW_PIPE
                                            : KDA_CLS_ROW_TRIM;
    const char *keep = getenv("KDA_CORE_KEEP"); // "0": the backward recomputes h and Δ
    m->core_keep = !(keep && !strcmp(keep, "0"));
    m->core_tc = kda_tc_selected(); // KDA_CORE=simt: the SIMT core (the oracle)
    m->cfg = *cfg;
    const char *fuse = getenv("KDA_FUSE"); // "0": the unfused kernels (the oracle, "before")
    set_fuse_flags_(m, !(fuse && !strcmp(fuse, "0")));
    copy_table_(&m->table, t);
    copy_table_(&m->dtab, t);
    // The six input GEMMs of a layer as one (KDA_INPROJ) and gate_proj|up_proj as one GEMM each
    // way (KDA_GATEUP): the defaults since the GPU run of 2026-12-03 (53/53 GPU tests, 198.8k vs
    // 169.7k tokens/s at mb 16 with the tensor-core core); "0" keeps the separate GEMMs.
    const char *inproj = getenv("KDA_INPROJ"), *gateup = getenv("KDA_GATEUP");
    int want = (inproj && !strcmp(inproj, "0") ? 0 : KDA_LAYOUT_INPROJ) |
               (gateup && !strcmp(gateup, "0") ? 0 : KDA_LAYOUT_GATEUP),
        got = 0;
    int64_t off = kda_cuda_device_offsets(&m->dtab, t, want, &got);
    m->inproj = (got & KDA_LAYOUT_INPROJ) != 0;
    // strided dY writes (kda_cuda_model_dy_inplace): the default since 2026-12-04; "0": the
    // contiguous buffers and column copies
    const char *dyi = getenv("KDA_DY_INPLACE");
    m->dy_inplace = m->inproj && !(dyi && !strcmp(dyi, "0"));
    m->gateup = (got & KDA_LAYOUT_GATEUP) != 0;
    // the SwiGLU product recomputed in the backward (default since the GPU run of 2026-12-03,
    // session 6: NVML peak 30.8 → 28.0 GiB at mb 16, under FLA's 29.0, for +0.5 ms); "0" keeps
    // one product per layer
    const char *mr = getenv("KDA_MLP_RECOMPUTE");
    m->mlp_recompute = m->gateup && !(mr && !strcmp(mr, "0"));
    // q, k, v convs in one launch (with fuse_l2; kda_cuda_model_conv_qkv): the forward's (1) by
    // default since 2026-12-04; "2" both ways, "0" three launches each way
    const char *qkv = getenv("KDA_CONV_QKV");
    m->conv_qkv = qkv && !strcmp(qkv, "0") ? 0 : qkv && !strcmp(qkv, "2") ? 2 : 1;
    m->dtotal = off > 0 ? off : ROW_ALIGN;
    m->dtab.total_numel = m->dtotal;
}

// step_graph's destroy callback for one cudaGraphExec_t. A replay of it may still be queued
// (the table drops graphs when a buffer they point into moved, or evicts one for a new key), so
// the stream is drained first. A failure is kept in the context's error and shows at the next
// call that reports (this runs where nothing returns).
static void graph_destroy_(void *user, void *exec) {
    KdaCudaModel *m = user;
    cudaError_t e = cudaStreamSynchronize(m->ctx.stream);
    if (e != cudaSuccess)
        kda_cuda_fail_at(&m->ctx, __FILE__, __LINE__, "cudaStreamSynchronize(graph drop)",
                         cudaGetErrorString(e));
    e = cudaGraphExecDestroy((cudaGraphExec_t)exec);
    if (e != cudaSuccess)
        kda_cuda_fail_at(&m->ctx, __FILE__, __LINE__, "cudaGraphExecDestroy",
                         cudaGetErrorString(e));
}

int kda_cuda_model_create(KdaCudaModel **out, const KdaConfig *cfg, const KdaParamTable *t,
                          const float *params, int device, KdaError *err) {
    *out = NULL;
    if (kda_cuda_model_check(cfg, device, err)) return -1;
    KdaCudaModel *m = kda_calloc(1, sizeof *m);
    if (kda_cuda_init(&m->ctx, device, err)) {
        free(m);
        return -1;
    }
    m->ctx_ok = 1;
    configure_(m, cfg, t);
    // one CUDA graph per micro-batch key (the default since it measured faster on 2026-12-03,
    // docs/perf-log.md; KDA_GRAPH=0 at create runs every micro-batch eagerly)
    kda_step_graph_init(&m->graphs, kda_step_graph_env_on(getenv("KDA_GRAPH")), graph_destroy_, m);
    // AdamW in one launch (the default since its row measured 2.67 -> 2.16 ms on 2026-12-03;
    // KDA_ADAMW_ONE=0 at create: one launch per run of rows with one decay flag)
    const char *one = getenv("KDA_ADAMW_ONE");
    m->adamw_one = !(one && !strcmp(one, "0"));
    kda_zero1_plan(&m->sh, m->dtotal, 1, 0, 1, NULL); // the whole layout (cannot fail)
    m->dorder = kda_malloc((size_t)(t->n > 0 ? t->n : 1) * sizeof *m->dorder);
    for (int i = 0; i < t->n; i++) // rows in device order (AdamW walks runs of them)
        m->dorder[i] = i;
    for (int i = 1; i < t->n; i++)
        for (int j = i;
             j > 0 && m->dtab.rows[m->dorder[j - 1]].offset > m->dtab.rows[m->dorder[j]].offset;
             j--) {
            int x = m->dorder[j];
            m->dorder[j] = m->dorder[j - 1], m->dorder[j - 1] = x;
        }
    m->L =
        kda_calloc((size_t)(cfg->num_hidden_layers > 0 ? cfg->num_hidden_layers : 1), sizeof *m->L);
    m->stage = kda_calloc((size_t)m->dtotal, sizeof(float));
    size_t nb = F32(m->dtotal);
    if (!(m->p = kda_cuda_alloc(&m->ctx, nb)) || !(m->g = kda_cuda_alloc(&m->ctx, nb)) ||
        !(m->m1 = kda_cuda_alloc(&m->ctx, nb)) || !(m->m2 = kda_cuda_alloc(&m->ctx, nb)) ||
        !(m->pb = kda_cuda_alloc(&m->ctx, BF(m->dtotal))) ||
        !(m->scal = kda_cuda_alloc(&m->ctx, 256)))
        goto fail;
    m->loss_sum = (double *)m->scal;
    m->norm = (double *)m->scal + 1;
    m->coef = (float *)((double *)m->scal + 2);
    m->gscale = m->coef + 1;
    if (kda_cuda_zero(&m->ctx, m->g, nb) || kda_cuda_zero(&m->ctx, m->m1, nb) ||
        kda_cuda_zero(&m->ctx, m->m2, nb) || kda_cuda_zero(&m->ctx, m->scal, 256))
        goto fail;
    kda_tensors_bind(&m->P, &m->dtab, m->p);
    kda_tensors_bind(&m->G, &m->dtab, m->g);
    if (put_(m, m->p, params) || kda_cuda_f32_to_bf16(&m->ctx, m->pb, m->p, m->dtotal) ||
        kda_cuda_sync(&m->ctx))
        goto fail;
    *out = m;
    return 0;
fail:
    fail_(m, err);
    kda_cuda_model_free(m);
    return -1;
}

void kda_cuda_model_free(KdaCudaModel *m) {
    if (!m) return;
    if (m->ctx_ok) kda_cuda_sync(&m->ctx);
    kda_step_graph_clear(&m->graphs); // before the context (and its stream) goes
    kda_cuda_release(m->arena);
    kda_cuda_release(m->p);
    kda_cuda_release(m->g);
    kda_cuda_release(m->m1);
    kda_cuda_release(m->m2);
    kda_cuda_release(m->pb);
    kda_cuda_release(m->scal);
    kda_cuda_release(m->keep);
    kda_cuda_release(m->adam_runs);
    for (int i = 0; i < m->cap_ev; i++)
        cudaEventDestroy(m->ev[i]);
    free(m->ev);
    free(m->rec);
    kda_tensors_free(&m->P);
    kda_tensors_free(&m->G);
    free(m->table.rows);
    free(m->dtab.rows);
    free(m->dorder);
    free(m->L);
    free(m->stage);
    if (m->ctx_ok) kda_cuda_free(&m->ctx);
    free(m);
}

int kda_cuda_model_inproj(const KdaCudaModel *m) {
    return m->inproj;
}
int kda_cuda_model_dy_inplace(const KdaCudaModel *m) {
    return m->dy_inplace;
}
int kda_cuda_model_gateup(const KdaCudaModel *m) {
    return m->gateup;
}
int kda_cuda_model_mlp_recompute(const KdaCudaModel *m) {
    return m->mlp_recompute;
}
int kda_cuda_model_pdl(const KdaCudaModel *m) {
    return m->ctx.pdl;
}
int kda_cuda_model_conv_qkv(const KdaCudaModel *m) {
    return m->fuse_l2 ? m->conv_qkv : 0;
}
int kda_cuda_model_gate_beta_fused(const KdaCudaModel *m) {
    return m->ctx.gate_version == 2;
}

const KdaConfig *kda_cuda_model_config(const KdaCudaModel *m) {
    return &m->cfg;
}
const char *kda_cuda_model_device_name(const KdaCudaModel *m) {
    return m->ctx.info.name;
}

// bf16 working copy of a master tensor (same device offset).
static const bf *W_(const KdaCudaModel *m, const float *master) {
    return m->pb + (master - m->p);
}

// ---- forward ----------------------------------------------------------------------------------

#define TRY(call)                                                                                  \
    do {                                                                                           \
        if ((call)) return -1;                                                                     \
    } while (0)

// ---- per-op profile -----------------------------------------------------------------------------
// TIMED(op, flops, bytes, call) runs call (an int-returning launcher) as one call of op: with a
// profile running, CUDA events are recorded on the stream before and after it; the elapsed
// times are added to m->prof by kda_cuda_model_profile(m, NULL). Without a profile it is TRY.

static int prof_event_(KdaCudaModel *m, int *idx) {
    if (m->n_ev == m->cap_ev) { // grow the pool (host-side cudaEventCreate; rare)
        int cap = m->cap_ev ? 2 * m->cap_ev : PROF_EVENTS0;
        cudaEvent_t *ev = realloc(m->ev, (size_t)cap * sizeof *ev);
        ProfRec *rec = realloc(m->rec, (size_t)cap * sizeof *rec);
        if (!ev || !rec) {
            if (ev) m->ev = ev;
            if (rec) m->rec = rec;
            return kda_cuda_fail_at(&m->ctx, __FILE__, __LINE__, "profile", "out of host memory");
        }
        m->ev = ev, m->rec = rec;
        for (int i = m->cap_ev; i < cap; i++)
            CUDA_CHECK(&m->ctx, cudaEventCreate(&m->ev[m->cap_ev++]));
    }
    *idx = m->n_ev++;
    CUDA_CHECK(&m->ctx, cudaEventRecord(m->ev[*idx], m->ctx.stream));
    return 0;
}

static int prof_begin_(KdaCudaModel *m) {
    if (!m->prof) return 0;
    return prof_event_(m, &m->open_ev);
}

static int prof_end_(KdaCudaModel *m, KdaOp op, double flops, double bytes) {
    if (!m->prof || m->open_ev < 0) return 0;
    int e1;
    if (prof_event_(m, &e1)) return -1;
    m->rec[m->n_rec++] = (ProfRec){(int)op, m->open_ev, flops, bytes};
    m->open_ev = -1;
    (void)e1; // always open_ev + 1: nothing records events between a begin and its end
    return 0;
}

#define TIMED(op, flops, bytes, ...)                                                               \
    do {                                                                                           \
        if (prof_begin_(m) || (__VA_ARGS__) || prof_end_(m, op, (double)(flops), (double)(bytes))) \
            return -1;                                                                             \
    } while (0)

int kda_cuda_model_profile(KdaCudaModel *m, KdaProf *p, KdaError *err) {
    if (kda_cuda_sync(&m->ctx)) return fail_(m, err);
    if (p) {
        if (p->flop_rate <= 0 && p->byte_rate <= 0) p->flop_rate = PROF_GEMM_FLOPS;
        if (p->byte_rate <= 0) p->byte_rate = PROF_HBM_BYTES;
        m->prof = p;
        m->n_ev = m->n_rec = 0;
        m->open_ev = -1;
        kda_prof_mark_start(p);
        return 0;
    }
    if (!m->prof) return 0;
    kda_prof_mark_end(m->prof);
    int rc = 0;
    for (int i = 0; i < m->n_rec && !rc; i++) {
        float ms = 0.0f;
        cudaError_t e = cudaEventElapsedTime(&ms, m->ev[m->rec[i].e0], m->ev[m->rec[i].e0 + 1]);
        if (e != cudaSuccess)
            rc = kda_cuda_fail_at(&m->ctx, __FILE__, __LINE__, "cudaEventElapsedTime",
                                  cudaGetErrorString(e));
        else
            kda_prof_add(m->prof, (KdaOp)m->rec[i].op, ms, m->rec[i].flops, m->rec[i].bytes);
    }
    m->prof = NULL;
    m->n_ev = m->n_rec = 0;
    return rc ? fail_(m, err) : 0;
}

// One implementation of the KDA core: its plain and kept (M0) forward and backward and the size
// of its kept buffer. The two tables share signatures (kda_tc.h; kda_cuda.h + kda_fast.h), so the
// choice between them is made once per batch shape (core_pick_) and the blocks call m->core.
typedef int (*CoreFwd)(KdaCudaCtx *ctx, kda_bf16 *o, float *final_state, const kda_bf16 *q,
                       const kda_bf16 *k, const kda_bf16 *v, const float *gcum, const float *beta,
                       const float *init_state, const KdaDims *d);
typedef int (*CoreFwdKeep)(KdaCudaCtx *ctx, kda_bf16 *o, float *final_state, const kda_bf16 *q,
                           const kda_bf16 *k, const kda_bf16 *v, const float *gcum,
                           const float *beta, const float *init_state, const KdaDims *d,
                           float *keep);
typedef int (*CoreBwd)(KdaCudaCtx *ctx, float *dq, float *dk, kda_bf16 *dv, float *dg, float *dbeta,
                       float *dinit_state, const kda_bf16 *d_o, const float *dfinal_state,
                       const kda_bf16 *q, const kda_bf16 *k, const kda_bf16 *v, const float *gcum,
                       const float *beta, const float *init_state, const KdaDims *d);
typedef int (*CoreBwdKept)(KdaCudaCtx *ctx, float *dq, float *dk, kda_bf16 *dv, float *dg,
                           float *dbeta, float *dinit_state, const kda_bf16 *d_o,
                           const float *dfinal_state, const kda_bf16 *q, const kda_bf16 *k,
                           const kda_bf16 *v, const float *gcum, const float *beta,
                           const float *init_state, const KdaDims *d, const float *kept);
typedef struct CoreOps {
    const char *name;
    CoreFwd fwd;
    CoreFwdKeep fwd_keep;
    CoreBwd bwd;
    CoreBwdKept bwd_kept;
    size_t (*keep_floats)(const KdaDims *d);
} CoreOps;
static const CoreOps CORE_TC = {"tc",       kda_tc_fwd,      kda_tc_fwd_keep,
                                kda_tc_bwd, kda_tc_bwd_kept, kda_tc_keep_floats};
static const CoreOps CORE_SIMT = {"simt",
                                  kda_cuda_chunk_fwd,
                                  kda_fast_fwd_keep,
                                  kda_cuda_chunk_bwd,
                                  kda_fast_bwd_kept,
                                  kda_fast_keep_floats};

// The tensor-core core when KDA_CORE is not simt and its kernels take these dims, else the SIMT
// fast path (which itself falls back to kda_cuda.h's chunk kernels where kda_fast does not fit).
static const CoreOps *core_pick_(const KdaCudaModel *m, const KdaDims *d) {
    return m->core_tc && kda_tc_supported(d, m->ctx.info.smem_per_block_optin) ? &CORE_TC
                                                                               : &CORE_SIMT;
}

static KdaDims dims_(const KdaCudaModel *m) {
    KdaDims d = kda_model_dims(&m->cfg, m->B, m->T);
    d.chunk = m->chunk; // the chunked form is exact for any chunk; the GPU's is not the CPU's 64
    return d;
}

// The batch shape of the coming forward, and with it the KDA core that serves it (the one
// dispatch to the fast paths: the blocks call m->core).
static void set_batch_(KdaCudaModel *m, int64_t B, int64_t T) {
    m->B = B, m->T = T;
    KdaDims d = dims_(m);
    m->core = core_pick_(m, &d);
}

// FLOPs and fewest bytes of y [N, out] = x [N, in] · Wᵀ, bf16 operands and output (profile).
static double gemm_fl_(int64_t N, int64_t in, int64_t out) {
    return 2.0 * (double)N * (double)in * (double)out;
}
static double gemm_by_(int64_t N, int64_t in, int64_t out) {
    return 2.0 * ((double)N * (double)(in + out) + (double)in * (double)out);
}

// y [N, out] bf16 = x [N, in] bf16 · W[out, in]ᵀ (the bf16 copy of master W).
static int lin_(KdaCudaModel *m, KdaOp op, bf *y, const bf *x, const float *W, int64_t N,
                int64_t in, int64_t out) {
    TIMED(op, gemm_fl_(N, in, out), gemm_by_(N, in, out),
          kda_cuda_gemm_fwd(&m->ctx, y, KDA_DT_BF16, x, W_(m, W), N, in, out, 0));
    return 0;
}

// residual_out [N, D] fp32 = residual_in + x · Wᵀ (fp32 GEMM output, beta = 1).
static int residual_(KdaCudaModel *m, KdaOp op, float *res_out, const float *res_in, const bf *x,
                     const float *W, int64_t N, int64_t in, int64_t D) {
    TIMED(op, gemm_fl_(N, in, D), gemm_by_(N, in, D) + 6.0 * (double)N * (double)D,
          kda_cuda_gemm_residual(&m->ctx, res_out, res_in, x, W_(m, W), N, in, D));
    return 0;
}

// Columns [col, col + w) of the fused input buffer m->inb [N, width] <- a contiguous dy [N, w]
// (one strided copy kernel, 16-byte accesses; it replaced cudaMemcpy2DAsync, whose rows of
// 16..1024 bytes are copied one by one).
static int inb_put_(KdaCudaModel *m, const bf *dy, int64_t col, int64_t w) {
    int64_t N = m->B * m->T, W = inproj_width_(&m->cfg);
    return kda_cuda_cols_copy(&m->ctx, m->inb + col, W, dy, w, N, w);
}

// Column offsets of the parts in the fused input buffer (kda_cuda_device_offsets' order).
typedef struct {
    int64_t q, k, v, f0, g0, b, width;
} InCols;
static InCols in_cols_(const KdaConfig *c) {
    InCols o;
    o.q = 0, o.k = c->key_dim, o.v = 2 * c->key_dim, o.f0 = o.v + c->value_dim;
    o.g0 = o.f0 + c->head_v_dim, o.b = o.g0 + c->head_v_dim, o.width = o.b + c->num_v_heads;
    return o;
}

// The fused input projection's forward: one GEMM xa [N, D] -> inb [N, width] with the block's
// stacked weights (they start at q_proj), then its six parts copied out to the saved
// activations in one kernel (the backward reads them contiguous).
static int inproj_fwd_(KdaCudaModel *m, const KdaLayerTensors *P, DevLayer *L) {
    const KdaConfig *c = &m->cfg;
    int64_t N = m->B * m->T, D = c->hidden_size;
    InCols o = in_cols_(c);
    TRY(lin_(m, KDA_OP_PROJ_FWD, m->inb, L->xa, P->q_proj, N, D, o.width));
    KdaCudaColParts pp = {
        {L->pq, L->pk, L->pv, L->f0, L->z0, L->b},
        {o.q, o.k, o.v, o.f0, o.g0, o.b},
        {c->key_dim, c->key_dim, c->value_dim, c->head_v_dim, c->head_v_dim, c->num_v_heads},
        {c->key_dim, c->key_dim, c->value_dim, c->head_v_dim, c->head_v_dim, c->num_v_heads},
        6};
    TIMED(KDA_OP_PROJ_FWD, 0, 4.0 * N * o.width,
          kda_cuda_cols_split(&m->ctx, m->inb, o.width, N, &pp)); // one launch, six parts
    return 0;
}

// One KDA sublayer + MLP: reads L->h, writes next [N, D] fp32.
static int block_fwd_(KdaCudaModel *m, const KdaLayerTensors *P, DevLayer *L, float *next) {
    const KdaConfig *c = &m->cfg;
    KdaCudaCtx *x = &m->ctx;
    int64_t N = m->B * m->T, D = c->hidden_size, H = c->num_heads, HV = c->num_v_heads;
    int64_t K = c->head_dim, V = c->head_v_dim, HK = c->key_dim, HVK = c->gate_dim;
    int64_t HVV = c->value_dim, I = c->intermediate_size, Wc = c->conv_size;
    float eps = (float)c->norm_eps;
    KdaDims d = dims_(m);

    double ND = (double)N * (double)D;
    TIMED(KDA_OP_NORM_FWD, 0, 6.0 * ND,
          kda_cuda_rmsnorm_fwd(x, L->xa, L->rstd_a, L->h, P->attn_norm, N, D, eps));
    if (m->inproj) {
        TRY(inproj_fwd_(m, P, L));
    } else {
        TRY(lin_(m, KDA_OP_PROJ_FWD, L->pq, L->xa, P->q_proj, N, D, HK));
        TRY(lin_(m, KDA_OP_PROJ_FWD, L->pk, L->xa, P->k_proj, N, D, HK));
        TRY(lin_(m, KDA_OP_PROJ_FWD, L->pv, L->xa, P->v_proj, N, D, HVV));
    }
    int qkv = kda_cuda_model_conv_qkv(m) > 0; // KDA_CONV_QKV=1 or 2, with fuse_l2
    if (qkv) { // q, k (+ L2 norm) and v in one launch (row: conv fwd)
        KdaConvQkvFwd cp[3] = {{L->q, L->rq, L->pq, P->q_conv},
                               {L->k, L->rk, L->pk, P->k_conv},
                               {L->v, NULL, L->pv, P->v_conv}};
        TIMED(KDA_OP_CONV_FWD, 0, 8.0 * N * HK + 8.0 * N * H + 4.0 * N * HVV,
              kda_cuda_conv_qkv_fwd(x, cp, m->B, m->T, HK, HVV, Wc, K, L2NORM_EPS));
    } else if (m->fuse_l2) { // conv + SiLU + L2 norm in one kernel (profile row: conv fwd)
        TIMED(KDA_OP_CONV_FWD, 0, 4.0 * N * HK + 4.0 * N * H,
              kda_cuda_conv_silu_l2_fwd(x, L->q, L->rq, L->pq, P->q_conv, m->B, m->T, HK, Wc, K,
                                        L2NORM_EPS));
        TIMED(KDA_OP_CONV_FWD, 0, 4.0 * N * HK + 4.0 * N * H,
              kda_cuda_conv_silu_l2_fwd(x, L->k, L->rk, L->pk, P->k_conv, m->B, m->T, HK, Wc, K,
                                        L2NORM_EPS));
    } else {
        TIMED(KDA_OP_CONV_FWD, 0, 4.0 * N * HK,
              kda_cuda_conv_silu_fwd(x, L->qc, L->pq, P->q_conv, m->B, m->T, HK, Wc));
        TIMED(KDA_OP_L2NORM_FWD, 0, 4.0 * N * HK,
              kda_cuda_l2norm_fwd(x, L->q, L->rq, L->qc, N * H, K, L2NORM_EPS));
        TIMED(KDA_OP_CONV_FWD, 0, 4.0 * N * HK,
              kda_cuda_conv_silu_fwd(x, L->kc, L->pk, P->k_conv, m->B, m->T, HK, Wc));
        TIMED(KDA_OP_L2NORM_FWD, 0, 4.0 * N * HK,
              kda_cuda_l2norm_fwd(x, L->k, L->rk, L->kc, N * H, K, L2NORM_EPS));
    }
    if (!qkv)
        TIMED(KDA_OP_CONV_FWD, 0, 4.0 * N * HVV,
              kda_cuda_conv_silu_fwd(x, L->v, L->pv, P->v_conv, m->B, m->T, HVV, Wc));
    if (!m->inproj) TRY(lin_(m, KDA_OP_PROJ_FWD, L->f0, L->xa, P->f_proj0, N, D, V));
    TRY(lin_(m, KDA_OP_PROJ_FWD, L->f, L->f0, P->f_proj1, N, V, HVK));
    // gate v2 (KDA_GATE_V=2): the gate and beta in one launch, after b's GEMM
    int gate2 = x->gate_version == 2;
    if (!gate2)
        TIMED(KDA_OP_GATE_FWD, 0, 6.0 * N * HVK,
              kda_cuda_gate_cumsum_fwd(x, L->gcum, NULL, L->f, P->A_log, P->dt_bias, m->B, m->T, HV,
                                       K, d.chunk));
    if (!m->inproj) TRY(lin_(m, KDA_OP_PROJ_FWD, L->b, L->xa, P->b_proj, N, D, HV));
    if (gate2)
        TIMED(KDA_OP_GATE_FWD, 0, 6.0 * N * (HVK + HV),
              kda_cuda_gate_beta_fwd(x, L->gcum, NULL, L->beta, L->f, L->b, P->A_log, P->dt_bias,
                                     m->B, m->T, HV, K, d.chunk, c->allow_neg_eigval));
    else
        TIMED(KDA_OP_GATE_FWD, 0, 6.0 * N * HV,
              kda_cuda_beta_fwd(x, L->beta, L->b, N * HV, c->allow_neg_eigval));
    if (L->keep) // M0: the state (and with the tc core more) kept for the backward
        TIMED(KDA_OP_CORE_FWD, 0, 512.0 * N * HV,
              m->core->fwd_keep(x, L->o, m->fin, L->q, L->k, L->v, L->gcum, L->beta, NULL, &d,
                                L->keep));
    else
        TIMED(KDA_OP_CORE_FWD, 0, 512.0 * N * HV,
              m->core->fwd(x, L->o, m->fin, L->q, L->k, L->v, L->gcum, L->beta, NULL, &d));
    if (!m->inproj) TRY(lin_(m, KDA_OP_PROJ_FWD, L->z0, L->xa, P->g_proj0, N, D, V));
    TRY(lin_(m, KDA_OP_PROJ_FWD, L->z, L->z0, P->g_proj1, N, V, HVV));
    if (m->fuse_gn) { // the bias folded into the gated norm: z stays the raw GEMM output
        TIMED(KDA_OP_ONORM_FWD, 0, 6.0 * N * HVV,
              kda_cuda_gnorm_bias_fwd(x, L->on, L->rstd_o, L->o, L->z, P->g_proj1_bias, P->o_norm,
                                      N, HV, V, eps));
    } else {
        TIMED(KDA_OP_ONORM_FWD, 0, 4.0 * N * HVV,
              kda_cuda_bias_add(x, L->z, P->g_proj1_bias, N, HVV));
        TIMED(KDA_OP_ONORM_FWD, 0, 6.0 * N * HVV,
              kda_cuda_gnorm_fwd(x, L->on, L->rstd_o, L->o, L->z, P->o_norm, N * HV, V, eps));
    }
    TRY(residual_(m, KDA_OP_OPROJ_FWD, L->h2, L->h, L->on, P->o_proj, N, HVV, D));

    TIMED(KDA_OP_NORM_FWD, 0, 6.0 * ND,
          kda_cuda_rmsnorm_fwd(x, L->xm, L->rstd_m, L->h2, P->mlp_norm, N, D, eps));
    if (m->gateup) { // one GEMM with the stacked [2I, D] weights (they start at gate_proj)
        TRY(lin_(m, KDA_OP_MLP_FWD, L->ga, L->xm, P->gate_proj, N, D, 2 * I));
        TIMED(KDA_OP_SWIGLU_FWD, 0, 6.0 * N * I, kda_cuda_swiglu_gu_fwd(x, L->mm, L->ga, N, I));
    } else {
        TRY(lin_(m, KDA_OP_MLP_FWD, L->ga, L->xm, P->gate_proj, N, D, I));
        TRY(lin_(m, KDA_OP_MLP_FWD, L->up, L->xm, P->up_proj, N, D, I));
        TIMED(KDA_OP_SWIGLU_FWD, 0, 6.0 * N * I,
              kda_cuda_swiglu_fwd(x, L->mm, L->ga, L->up, N * I));
    }
    TRY(residual_(m, KDA_OP_MLP_FWD, next, L->h2, L->mm, P->down_proj, N, I, D));
    return 0;
}

// Queues embedding, blocks and final norm (ids/targets already on the device).
static int trunk_fwd_(KdaCudaModel *m) {
    const KdaConfig *c = &m->cfg;
    int64_t N = m->B * m->T, D = c->hidden_size, nl = c->num_hidden_layers;
    float *h0 = nl > 0 ? m->L[0].h : m->hL;
    double ND = (double)N * (double)D;
    TIMED(KDA_OP_EMBED_FWD, 0, 8.0 * ND, kda_cuda_embed_fwd(&m->ctx, h0, m->P.embed, m->ids, N, D));
    for (int64_t l = 0; l < nl; l++)
        TRY(block_fwd_(m, &m->P.layers[l], &m->L[l], l + 1 < nl ? m->L[l + 1].h : m->hL));
    TIMED(KDA_OP_NORM_FWD, 0, 6.0 * ND,
          kda_cuda_rmsnorm_fwd(&m->ctx, m->nf, m->rstd_f, m->hL, m->P.final_norm, N, D,
                               (float)c->norm_eps));
    return 0;
}

// Queues the whole forward with the legacy head (loss only).
static int forward_dev_(KdaCudaModel *m) {
    const KdaConfig *c = &m->cfg;
    int64_t N = m->B * m->T, D = c->hidden_size;
    double NV = (double)N * (double)c->vocab_size;
    TRY(trunk_fwd_(m));
    // legacy head: fp32 logits written and read once per vocabulary chunk
    TIMED(KDA_OP_HEAD_FWD, gemm_fl_(N, D, c->vocab_size), gemm_by_(N, D, c->vocab_size) + 6.0 * NV,
          kda_cuda_xent_fwd(&m->ctx, m->nll, m->lse, m->loss_sum, m->nf, W_(m, m->P.lm_head),
                            m->targets, N, D, c->vocab_size, &m->xws));
    return 0;
}

// The KDA core's kept h and Δ (kda_fast.h M0; with the tc core also w, kg, qg, Aqk: kda_tc.h)
// for this (B, T): a buffer of one set per layer
// (one shared set with recompute: each block's forward re-runs just before its backward),
// grown on demand (cudaFree synchronizes); L[l].keep set, or NULL when off or the fast kernels
// do not take these dims.
static int keep_reserve_(KdaCudaModel *m) {
    KdaDims d = dims_(m);
    int64_t nl = m->cfg.num_hidden_layers;
    int on = m->core_keep && kda_fast_supported(&d, m->ctx.info.smem_per_block_optin);
    size_t per = on ? m->core->keep_floats(&d) : 0;
    size_t sets = m->recompute ? 1 : (size_t)nl;
    if (on && m->keep_cap < per * sets) {
        kda_cuda_release(m->keep);
        m->keep_cap = 0;
        if (!(m->keep = kda_cuda_alloc(&m->ctx, F32(per * sets)))) return -1;
        m->keep_cap = per * sets;
    }
    for (int64_t l = 0; l < nl; l++)
        m->L[l].keep = on ? m->keep + (m->recompute ? 0 : (size_t)l * per) : NULL;
    return 0;
}

// ids [N] and tg [N] to the device. Pageable sources: the copies are staged before
// cudaMemcpyAsync returns, so ids and tg may be reused at once; they are ordered on the stream
// after the previous step's work.
static int upload_(KdaCudaModel *m, const int32_t *ids, const int32_t *tg, int64_t N) {
    CUDA_CHECK(&m->ctx, cudaMemcpyAsync(m->ids, ids, (size_t)N * sizeof(int32_t),
                                        cudaMemcpyHostToDevice, m->ctx.stream));
    CUDA_CHECK(&m->ctx, cudaMemcpyAsync(m->targets, tg, (size_t)N * sizeof(int32_t),
                                        cudaMemcpyHostToDevice, m->ctx.stream));
    return 0;
}

// Checks the batch, computes the shifted targets, grows the arena and uploads: the common start
// of every forward. -1 with err set.
static int start_forward_(KdaCudaModel *m, const int32_t *ids, const int32_t *labels, int64_t B,
                          int64_t T, KdaError *err) {
    int64_t N = B * T;
    m->have_fwd = 0;
    if (kda_model_check_batch(&m->cfg, ids, &labels, B, T, err)) return -1;
    int32_t *tg = kda_malloc((size_t)N * sizeof(int32_t));
    m->n_valid = xent_targets(tg, labels, B, T);
    int rc = reserve_(m, N);
    if (!rc) {
        set_batch_(m, B, T);
        rc = keep_reserve_(m) || prof_begin_(m) || upload_(m, ids, tg, N) ||
             prof_end_(m, KDA_OP_SYNC, 0, 8.0 * (double)N);
    }
    free(tg);
    return rc ? fail_(m, err) : 0;
}

int kda_cuda_model_forward(KdaCudaModel *m, const int32_t *ids, const int32_t *labels, int64_t B,
                           int64_t T, float *nll, float *loss, KdaError *err) {
    if (start_forward_(m, ids, labels, B, T, err)) return -1;
    int rc = forward_dev_(m);
    if (!rc && nll && kda_cuda_get_f32(&m->ctx, nll, m->nll, B * T)) rc = -1;
    if (rc) return fail_(m, err);
    m->have_fwd = 1;
    if (loss) return kda_cuda_model_loss(m, loss, err);
    return 0;
}

static int read_loss_(KdaCudaModel *m, double *s) {
    CUDA_CHECK(&m->ctx,
               cudaMemcpyAsync(s, m->loss_sum, sizeof *s, cudaMemcpyDeviceToHost, m->ctx.stream));
    CUDA_CHECK(&m->ctx, cudaStreamSynchronize(m->ctx.stream));
    return 0;
}

int kda_cuda_model_loss(KdaCudaModel *m, float *loss, KdaError *err) {
    double s = 0.0;
    if (prof_begin_(m) || read_loss_(m, &s) || prof_end_(m, KDA_OP_SYNC, 0, 8.0))
        return fail_(m, err);
    *loss = m->n_valid ? (float)(s / (double)m->n_valid) : 0.0f;
    return 0;
}

// ---- backward ---------------------------------------------------------------------------------

// dx [N, in] (fp32 or bf16 per dt) (+)= dy [N, out] bf16 · W (bf16 copy of master W).
static int dx_(KdaCudaModel *m, KdaOp op, void *dx, KdaDtype dt, const bf *dy, const float *W,
               int64_t N, int64_t in, int64_t out, int acc) {
    double by = gemm_by_(N, in, out) + (dt == KDA_DT_F32 ? (acc ? 4.0 : 2.0) : 0.0) * N * in;
    TIMED(op, gemm_fl_(N, in, out), by,
          kda_cuda_gemm_bwd_dx(&m->ctx, dx, dt, dy, W_(m, W), N, in, out, acc));
    return 0;
}
// dx [N, in] bf16 with row stride ld (>= in) = dy [N, out] bf16 · W: writes columns [0, in) of
// a wider buffer (the gate half of gate|up's gradient).
static int dx_ld_(KdaCudaModel *m, KdaOp op, bf *dx, int64_t ld, const bf *dy, const float *W,
                  int64_t N, int64_t in, int64_t out) {
    TIMED(op, gemm_fl_(N, in, out), gemm_by_(N, in, out),
          kda_cuda_matmul(&m->ctx, 0, 0, in, N, out, 1.0f, W_(m, W), in, dy, out, 0.0f, dx,
                          KDA_DT_BF16, ld));
    return 0;
}
// dW [out, in] fp32 += dyᵀ · x (fp32 read-modify-write of dW: 8 bytes per weight).
static int dw_(KdaCudaModel *m, KdaOp op, float *dW, const bf *dy, const bf *x, int64_t N,
               int64_t in, int64_t out) {
    TIMED(op, gemm_fl_(N, in, out), gemm_by_(N, in, out) + 6.0 * (double)in * (double)out,
          kda_cuda_gemm_bwd_dw(&m->ctx, dW, dy, x, N, in, out));
    return 0;
}

// q or k from the core's gradient dqk [N, HK] fp32 back to its projection's: dp [N, HK] bf16
// with row stride ldo (overwritten: the fused input projection's dY columns, or m->dt2),
// dconv [HK, W] +=. Fused: one kernel; else the L2 backward into m->dt1, then the conv backward
// (qc the saved conv output).
static int conv_l2_bwd_(KdaCudaModel *m, bf *dp, int64_t ldo, float *dconv, const float *dqk,
                        const bf *p, const bf *qc, const float *conv, const float *rstd) {
    const KdaConfig *c = &m->cfg;
    int64_t N = m->B * m->T, H = c->num_heads, K = c->head_dim, HK = c->key_dim;
    int64_t Wc = c->conv_size;
    if (m->fuse_l2) { // dqk fp32 and p read, dp written (profile row: conv bwd)
        TIMED(KDA_OP_CONV_BWD, 0, 8.0 * N * HK + 4.0 * N * H,
              kda_cuda_conv_silu_l2_bwd_ld(&m->ctx, dp, ldo, dconv, dqk, p, conv, rstd, m->B, m->T,
                                           HK, Wc, K));
        return 0;
    }
    TIMED(KDA_OP_L2NORM_BWD, 0, 8.0 * N * HK,
          kda_cuda_l2norm_bwd(&m->ctx, m->dt1, dqk, qc, rstd, N * H, K));
    TIMED(KDA_OP_CONV_BWD, 0, 6.0 * N * HK,
          kda_cuda_conv_silu_bwd_ld(&m->ctx, dp, ldo, dconv, m->dt1, p, conv, m->B, m->T, HK, Wc));
    return 0;
}

// One input projection's backward from its dY [N, w] bf16 (part at column col of the fused
// buffer): with the fused input projection dY is copied into its columns of m->inb (the one dW
// and one dX GEMM over all six parts follow at the end of the sublayer); else its own dW GEMM
// (dW += dYᵀ xa) and dX GEMM into m->dx (acc = 0 overwrites: the sublayer's first part).
static int proj_bwd_(KdaCudaModel *m, float *dW, const float *W, bf *dy, const bf *xa, int64_t col,
                     int64_t w, int acc) {
    int64_t N = m->B * m->T, D = m->cfg.hidden_size;
    if (m->inproj) { // strided copy: bf16 read + write per element
        TIMED(KDA_OP_PROJ_BWD, 0, 4.0 * (double)N * (double)w, inb_put_(m, dy, col, w));
        return 0;
    }
    TRY(dw_(m, KDA_OP_PROJ_BWD, dW, dy, xa, N, D, w));
    TRY(dx_(m, KDA_OP_PROJ_BWD, m->dx, KDA_DT_F32, dy, W, N, D, w, acc));
    return 0;
}

// m->dh holds dLoss/d(block output) on entry and dLoss/d(block input) on exit.
static int block_bwd_(KdaCudaModel *m, const KdaLayerTensors *P, KdaLayerTensors *G,
                      const DevLayer *L) {
    const KdaConfig *c = &m->cfg;
    KdaCudaCtx *x = &m->ctx;
    int64_t N = m->B * m->T, D = c->hidden_size, HV = c->num_v_heads;
    int64_t K = c->head_dim, V = c->head_v_dim, HK = c->key_dim, HVK = c->gate_dim;
    int64_t HVV = c->value_dim, I = c->intermediate_size, Wc = c->conv_size;
    KdaDims d = dims_(m);

    double ND = (double)N * (double)D;
    // MLP: out = h2 + down(SwiGLU(gate(xm), up(xm)))
    if (!m->fuse_dh) // else the RMSNorm backward that wrote dh wrote dhb too
        TIMED(KDA_OP_CAST, 0, 6.0 * ND, kda_cuda_f32_to_bf16(x, m->dhb, m->dh, N * D));
    if (!m->mlp_recompute) TRY(dw_(m, KDA_OP_MLP_BWD, G->down_proj, m->dhb, L->mm, N, I, D));
    if (m->gateup) { // dm into the gate half of d(gate|up), SwiGLU's backward in place, then
                     // one dX GEMM (overwriting dx) and one dW GEMM over the 2I columns
        TRY(dx_ld_(m, KDA_OP_MLP_BWD, m->dI1, 2 * I, m->dhb, P->down_proj, N, I, D));
        // with the MLP recompute the same kernel writes the product back into the shared L->mm
        // (another layer's by now), then down_proj's weight gradient reads it
        TIMED(KDA_OP_SWIGLU_BWD, 0, (m->mlp_recompute ? 12.0 : 10.0) * N * I,
              kda_cuda_swiglu_gu_bwd(x, m->dI1, m->mlp_recompute ? L->mm : NULL, m->dI1, 2 * I,
                                     L->ga, N, I));
        if (m->mlp_recompute) TRY(dw_(m, KDA_OP_MLP_BWD, G->down_proj, m->dhb, L->mm, N, I, D));
        TRY(dx_(m, KDA_OP_MLP_BWD, m->dx, KDA_DT_F32, m->dI1, P->gate_proj, N, D, 2 * I, 0));
        TRY(dw_(m, KDA_OP_MLP_BWD, G->gate_proj, m->dI1, L->xm, N, D, 2 * I));
    } else {
        TRY(dx_(m, KDA_OP_MLP_BWD, m->dI1, KDA_DT_BF16, m->dhb, P->down_proj, N, I, D, 0));
        TIMED(KDA_OP_SWIGLU_BWD, 0, 10.0 * N * I,
              kda_cuda_swiglu_bwd(x, m->dI1, m->dI2, m->dI1, L->ga, L->up, N * I));
        TRY(dx_(m, KDA_OP_MLP_BWD, m->dx, KDA_DT_F32, m->dI1, P->gate_proj, N, D, I, 0));
        TRY(dx_(m, KDA_OP_MLP_BWD, m->dx, KDA_DT_F32, m->dI2, P->up_proj, N, D, I, 1));
        TRY(dw_(m, KDA_OP_MLP_BWD, G->gate_proj, m->dI1, L->xm, N, D, I));
        TRY(dw_(m, KDA_OP_MLP_BWD, G->up_proj, m->dI2, L->xm, N, D, I));
    }
    TIMED(KDA_OP_NORM_BWD, 0, (m->fuse_dh ? 18.0 : 16.0) * ND,
          kda_cuda_rmsnorm_bwd_bf16(x, m->dh, m->fuse_dh ? m->dhb : NULL, G->mlp_norm, m->dx, L->h2,
                                    P->mlp_norm, L->rstd_m, N, D, 1));

    // KDA sublayer: h2 = h + o_proj(gnorm(o, z))
    if (!m->fuse_dh) TIMED(KDA_OP_CAST, 0, 6.0 * ND, kda_cuda_f32_to_bf16(x, m->dhb, m->dh, N * D));
    TRY(dx_(m, KDA_OP_OPROJ_BWD, m->don, KDA_DT_BF16, m->dhb, P->o_proj, N, HVV, D, 0));
    TRY(dw_(m, KDA_OP_OPROJ_BWD, G->o_proj, m->dhb, L->on, N, HVV, D));
    if (m->fuse_gn) { // dy, o, z read, dx, dz written; then dz read for the bias
        TIMED(KDA_OP_ONORM_BWD, 0, 12.0 * N * HVV,
              kda_cuda_gnorm_bias_bwd(x, m->d_o, m->dz, G->o_norm, G->g_proj1_bias, m->don, L->o,
                                      L->z, P->g_proj1_bias, P->o_norm, L->rstd_o, N, HV, V));
    } else {
        TIMED(KDA_OP_ONORM_BWD, 0, 10.0 * N * HVV,
              kda_cuda_gnorm_bwd(x, m->d_o, m->dz, G->o_norm, m->don, L->o, L->z, P->o_norm,
                                 L->rstd_o, N * HV, V));
        TIMED(KDA_OP_ONORM_BWD, 0, 2.0 * N * HVV,
              kda_cuda_bias_bwd(x, G->g_proj1_bias, m->dz, N, HVV));
    }
    // With the fused input projection (m->inproj) each part's dY goes into its columns of m->inb
    // (g0 and f0 copied in after their GEMMs, b, q, k, v written there by their kernels) and one
    // dX GEMM (overwriting dx) and one dW GEMM follow at the end of the sublayer.
    InCols ic = in_cols_(c);
    TRY(dw_(m, KDA_OP_PROJ_BWD, G->g_proj1, m->dz, L->z0, N, V, HVV));
    TRY(dx_(m, KDA_OP_PROJ_BWD, m->dlow, KDA_DT_BF16, m->dz, P->g_proj1, N, V, HVV, 0));
    TRY(proj_bwd_(m, G->g_proj0, P->g_proj0, m->dlow, L->xa, ic.g0, V, 0));

    if (L->keep)
        TIMED(KDA_OP_CORE_BWD, 0, 1024.0 * N * HV,
              m->core->bwd_kept(x, m->dq, m->dk, m->dv, m->dg, m->dbeta, NULL, m->d_o, NULL, L->q,
                                L->k, L->v, L->gcum, L->beta, NULL, &d, L->keep));
    else
        TIMED(KDA_OP_CORE_BWD, 0, 1024.0 * N * HV,
              m->core->bwd(x, m->dq, m->dk, m->dv, m->dg, m->dbeta, NULL, m->d_o, NULL, L->q, L->k,
                           L->v, L->gcum, L->beta, NULL, &d));

    // With the fused input projection (and KDA_DY_INPLACE unset or 1) the beta and conv backwards
    // write their dY straight into its columns of m->inb (row stride ic.width; no copy), else into
    // m->db / m->dt2, then the part's own GEMMs or (fused input projection) a column copy. The
    // fused q/k kernel writes 4-element groups: its columns need a width and column offsets
    // that keep them 8-byte aligned, else it writes m->dt2 and is copied.
    int fz = m->inproj && m->dy_inplace,
        fzq = fz && (!m->fuse_l2 || (ic.width % 4 == 0 && ic.k % 4 == 0));
    // gate v2 (KDA_GATE_V=2): beta's backward in the gate's launch; db is read only by the b
    // part's GEMMs or its m->inb columns below, which the f part's GEMMs and copy leave alone
    int gate2 = x->gate_version == 2;
    if (gate2)
        TIMED(KDA_OP_GATE_BWD, 0, 8.0 * N * (HVK + HV),
              kda_cuda_gate_beta_bwd(x, m->df, G->A_log, G->dt_bias, fz ? m->inb + ic.b : m->db,
                                     fz ? ic.width : HV, m->dg, m->dbeta, L->f, L->b, P->A_log,
                                     P->dt_bias, m->B, m->T, HV, K, d.chunk, 0,
                                     c->allow_neg_eigval));
    else
        TIMED(KDA_OP_GATE_BWD, 0, 8.0 * N * HVK,
              kda_cuda_gate_cumsum_bwd(x, m->df, G->A_log, G->dt_bias, m->dg, L->f, P->A_log,
                                       P->dt_bias, m->B, m->T, HV, K, d.chunk, 0));
    TRY(dw_(m, KDA_OP_PROJ_BWD, G->f_proj1, m->df, L->f0, N, V, HVK));
    TRY(dx_(m, KDA_OP_PROJ_BWD, m->dlow, KDA_DT_BF16, m->df, P->f_proj1, N, V, HVK, 0));
    TRY(proj_bwd_(m, G->f_proj0, P->f_proj0, m->dlow, L->xa, ic.f0, V, 1));

    if (!gate2)
        TIMED(KDA_OP_GATE_BWD, 0, 8.0 * N * HV,
              kda_cuda_beta_bwd_ld(x, fz ? m->inb + ic.b : m->db, fz ? ic.width : HV, m->dbeta,
                                   L->b, N, HV, c->allow_neg_eigval));
    if (!fz) TRY(proj_bwd_(m, G->b_proj, P->b_proj, m->db, L->xa, ic.b, HV, 1));

    // KDA_CONV_QKV=2 (with fuse_l2): q, k, v's conv backwards in one launch (+ one dw finish),
    // then their projections' backwards in the same order as below (the same bits). Their dY:
    // the fused dY's columns (fz, fzq), else three buffers at once: q and k in m->dt1's two halves
    // (the unfused L2 path's buffer, free with fuse_l2; needs 2HK <= its width), v in m->dt2.
    int qkv = kda_cuda_model_conv_qkv(m) == 2 && (fz ? fzq : 2 * HK <= (HK > HVV ? HK : HVV));
    if (qkv) {
        bf *dpq = fz ? m->inb + ic.q : m->dt1, *dpk = fz ? m->inb + ic.k : m->dt1 + N * HK;
        bf *dpv = fz ? m->inb + ic.v : m->dt2;
        KdaConvQkvBwd cb[3] = {
            {dpq, fz ? ic.width : HK, G->q_conv, m->dq, NULL, L->pq, P->q_conv, L->rq},
            {dpk, fz ? ic.width : HK, G->k_conv, m->dk, NULL, L->pk, P->k_conv, L->rk},
            {dpv, fz ? ic.width : HVV, G->v_conv, NULL, m->dv, L->pv, P->v_conv, NULL}};
        TIMED(KDA_OP_CONV_BWD, 0, 16.0 * N * HK + 8.0 * N * c->num_heads + 6.0 * N * HVV,
              kda_cuda_conv_qkv_bwd(x, cb, m->B, m->T, HK, HVV, Wc, c->head_dim));
        if (!fz) {
            TRY(proj_bwd_(m, G->q_proj, P->q_proj, dpq, L->xa, ic.q, HK, 1));
            TRY(proj_bwd_(m, G->k_proj, P->k_proj, dpk, L->xa, ic.k, HK, 1));
            TRY(proj_bwd_(m, G->v_proj, P->v_proj, dpv, L->xa, ic.v, HVV, 1));
        }
    } else {
        TRY(conv_l2_bwd_(m, fzq ? m->inb + ic.q : m->dt2, fzq ? ic.width : HK, G->q_conv, m->dq,
                         L->pq, L->qc, P->q_conv, L->rq));
        if (!fzq) TRY(proj_bwd_(m, G->q_proj, P->q_proj, m->dt2, L->xa, ic.q, HK, 1));

        TRY(conv_l2_bwd_(m, fzq ? m->inb + ic.k : m->dt2, fzq ? ic.width : HK, G->k_conv, m->dk,
                         L->pk, L->kc, P->k_conv, L->rk));
        if (!fzq) TRY(proj_bwd_(m, G->k_proj, P->k_proj, m->dt2, L->xa, ic.k, HK, 1));

        TIMED(KDA_OP_CONV_BWD, 0, 6.0 * N * HVV,
              kda_cuda_conv_silu_bwd_ld(x, fz ? m->inb + ic.v : m->dt2, fz ? ic.width : HVV,
                                        G->v_conv, m->dv, L->pv, P->v_conv, m->B, m->T, HVV, Wc));
        if (!fz) TRY(proj_bwd_(m, G->v_proj, P->v_proj, m->dt2, L->xa, ic.v, HVV, 1));
    }

    if (m->inproj) { // the six parts' weight gradients and dx in one GEMM each
        TRY(dw_(m, KDA_OP_PROJ_BWD, G->q_proj, m->inb, L->xa, N, D, ic.width));
        TRY(dx_(m, KDA_OP_PROJ_BWD, m->dx, KDA_DT_F32, m->inb, P->q_proj, N, D, ic.width, 0));
    }

    TIMED(KDA_OP_NORM_BWD, 0, (m->fuse_dh ? 18.0 : 16.0) * ND,
          kda_cuda_rmsnorm_bwd_bf16(x, m->dh, m->fuse_dh ? m->dhb : NULL, G->attn_norm, m->dx, L->h,
                                    P->attn_norm, L->rstd_a, N, D, 1));
    return 0;
}

// The legacy head's backward: logits recomputed per vocabulary chunk, dn into m->dx.
static int head_bwd_legacy_(KdaCudaModel *m) {
    const KdaConfig *c = &m->cfg;
    int64_t N = m->B * m->T, D = c->hidden_size;
    float scale = m->n_valid ? 1.0f / (float)m->n_valid : 0.0f;
    double NV = (double)N * (double)c->vocab_size;
    // logits recomputed (3 GEMMs), bf16 dlogits written once and read twice
    TIMED(KDA_OP_HEAD_BWD, 3.0 * gemm_fl_(N, D, c->vocab_size),
          3.0 * gemm_by_(N, D, c->vocab_size) + 8.0 * NV,
          kda_cuda_xent_bwd(&m->ctx, m->dx, m->G.lm_head, m->nf, W_(m, m->P.lm_head), m->targets,
                            m->lse, N, D, c->vocab_size, scale, &m->xws));
    return 0;
}

// The fused classifier (xent_cuda.h) on the final-norm output: loss, dn into m->dx and the
// head's gradient, logits computed once per token chunk. Profile rows: fwd = each chunk's logits
// GEMM (bf16 logits written) and the loss sum, rows = each chunk's row kernel (floor: the logits
// read once, the dlogits written once), bwd = each chunk's dX and dW GEMMs (dlogits read twice,
// dW fp32 read-modify-write per chunk).
static int head_fused_(KdaCudaModel *m) {
    const KdaConfig *c = &m->cfg;
    int64_t N = m->B * m->T, D = c->hidden_size, Vv = c->vocab_size;
    float scale = m->n_valid ? 1.0f / (float)m->n_valid : 0.0f;
    const bf *Wh = W_(m, m->P.lm_head);
    for (int64_t r0 = 0; r0 < N; r0 += m->cls.rows) {
        int64_t nr = N - r0 < m->cls.rows ? N - r0 : m->cls.rows;
        double NV = (double)nr * (double)Vv;
        TIMED(KDA_OP_HEAD_FWD, gemm_fl_(nr, D, Vv), gemm_by_(nr, D, Vv),
              kda_cuda_cls_chunk_logits(&m->ctx, m->nf, Wh, N, D, Vv, r0, &m->cls));
        TIMED(KDA_OP_HEAD_ROW, 0, 4.0 * NV + 12.0 * (double)nr,
              kda_cuda_cls_chunk_rows(&m->ctx, m->nll, m->lse, m->targets, N, Vv, scale, 1, r0,
                                      &m->cls));
        TIMED(
            KDA_OP_HEAD_BWD, 2.0 * gemm_fl_(nr, D, Vv),
            2.0 * gemm_by_(nr, D, Vv) + 6.0 * (double)Vv * (double)D,
            kda_cuda_cls_chunk_bwd(&m->ctx, m->dx, m->G.lm_head, m->nf, Wh, N, D, Vv, r0, &m->cls));
    }
    TIMED(KDA_OP_HEAD_FWD, 0, 4.0 * N, kda_cuda_cls_loss_sum(&m->ctx, m->loss_sum, m->nll, N));
    return 0;
}

// Everything of the backward after the head (dLoss/d final-norm output in m->dx).
static int trunk_bwd_(KdaCudaModel *m) {
    const KdaConfig *c = &m->cfg;
    int64_t N = m->B * m->T, D = c->hidden_size;
    double ND = (double)N * (double)D;
    TIMED(KDA_OP_NORM_BWD, 0, (m->fuse_dh ? 14.0 : 12.0) * ND,
          kda_cuda_rmsnorm_bwd_bf16(&m->ctx, m->dh, m->fuse_dh ? m->dhb : NULL, m->G.final_norm,
                                    m->dx, m->hL, m->P.final_norm, m->rstd_f, N, D, 0));
    for (int64_t l = c->num_hidden_layers - 1; l >= 0; l--) {
        // recompute: the shared activations hold the last block's from the forward; every other
        // block re-runs its forward (same kernels, same inputs: the same bits) first
        if (m->recompute && l + 1 < c->num_hidden_layers)
            TRY(block_fwd_(m, &m->P.layers[l], &m->L[l], m->L[l + 1].h));
        TRY(block_bwd_(m, &m->P.layers[l], &m->G.layers[l], &m->L[l]));
        if (m->layer_hook) m->layer_hook(m->layer_user, l);
    }
    TIMED(KDA_OP_EMBED_BWD, 0, 8.0 * ND,
          kda_cuda_embed_bwd(&m->ctx, m->G.embed, m->dh, m->ids, N, D, c->vocab_size,
                             c->has_pad_token_id ? c->pad_token_id : -1));
    return 0;
}

int kda_cuda_model_set_recompute(KdaCudaModel *m, int on, KdaError *err) {
    on = on != 0;
    if (on == m->recompute) return 0;
    if (kda_cuda_sync(&m->ctx)) return fail_(m, err);
    kda_cuda_release(m->arena); // the next forward lays the arena out again
    kda_cuda_release(m->keep);  // and sizes the kept KDA states for one layer or all
    m->arena = NULL;
    m->keep = NULL;
    m->cap_tokens = 0;
    m->keep_cap = 0;
    m->have_fwd = 0;
    m->recompute = on;
    return 0;
}

int kda_cuda_model_backward(KdaCudaModel *m, KdaError *err) {
    if (!m->have_fwd) return kda_fail(err, "kda_cuda_model_backward: no forward to differentiate");
    if (m->cfg.num_v_heads != m->cfg.num_heads && m->chunk == 64) // the fallback core's limit
        return kda_fail(err,
                        "CUDA model: backward with num_v_heads %lld != num_heads %lld (GVA) "
                        "needs the fast KDA kernels, which do not fit these head dims",
                        (long long)m->cfg.num_v_heads, (long long)m->cfg.num_heads);
    m->have_fwd = 0;
    if (head_bwd_legacy_(m) || trunk_bwd_(m)) return fail_(m, err);
    return 0;
}

// ---- one CUDA graph per training micro-batch (default; KDA_GRAPH=0 off; docs/cuda.md)
// ----------------------- What is captured: the device work of kda_cuda_model_forward_backward
// after the ids / targets upload (embedding, blocks, final norm, the fused classifier with its loss
// sum, the whole backward). The upload stays eager: its source is the caller's pageable memory,
// which a graph cannot copy from, and cudaMemcpyAsync stages it before returning, so the graph
// launched behind it on the same stream reads the new ids. Zero grads, the loss and norm reads, the
// gradient norm and AdamW stay eager too (host syncs and host scalars: lr, step, clip).

// The micro-batch's device work, queued on the model's stream.
static int fb_enqueue_(KdaCudaModel *m) {
    return trunk_fwd_(m) || head_fused_(m) || trunk_bwd_(m) ? -1 : 0;
}

// 1 when this call must run eagerly whatever the key: graphs off; a profile (its events around
// every op would be captured, and it measures the eager path); data parallelism (the layer hook
// records events for the overlap stream inside the backward; ZeRO-1 and the norm reducer are
// kept eager with it until measured); a prefill's final-state output (m->fin).
static int graph_blocked_(const KdaCudaModel *m) {
    return !m->graphs.on || m->prof || m->layer_hook || m->norm_reduce || m->sharded ||
           m->fin != NULL;
}

// Everything a captured micro-batch bakes in besides its key (B, T, n_valid): the buffers its
// launches point into (arena and its layout size, kept states, the context's scratch and
// cuBLASLt workspace, params, grads, bf16 copy, device scalars), the model's and context's
// switches, and the launchers' per-call environment switches (they pick kernels at launch time;
// a graph keeps the kernels it captured). B and T pick the KDA core and its kept-state slices.
static uint64_t graph_fp_(const KdaCudaModel *m) {
    static const char *const PER_CALL_ENV[] = {"KDA_TC_ASYNC", "KDA_CONV_PREFETCH", "KDA_CONV_V",
                                               "KDA_RMS_FWD",  "KDA_RMS_BWD",       "KDA_FAST_EXP"};
    const void *ptr[] = {m->arena, m->keep, m->ctx.ws, m->ctx.lt_ws, m->p, m->g, m->pb, m->scal};
    size_t size[] = {(size_t)m->cap_tokens, m->arena_bytes, m->keep_cap, m->ctx.ws_size,
                     m->cls_budget};
    int sw[] = {m->recompute,     m->fuse_l2,          m->fuse_gn,        m->fuse_dh,
                m->inproj,        m->gateup,           m->cls_row,        m->core_keep,
                m->core_tc,       m->dy_inplace,       m->ctx.tc_version, m->ctx.plan_off,
                m->ctx.gemm_tune, m->ctx.gate_version, m->mlp_recompute,  m->conv_qkv,
                m->ctx.gemm_cand};
    uint64_t h = kda_step_graph_fp(KDA_STEP_GRAPH_FP0, ptr, sizeof ptr);
    h = kda_step_graph_fp(h, size, sizeof size);
    h = kda_step_graph_fp(h, sw, sizeof sw);
    // KDA_GEMM_RULES, KDA_GEMM_TILES (no padding: cuda_common.cu's static_assert)
    h = kda_step_graph_fp(h, &m->ctx.gemm_pick, sizeof m->ctx.gemm_pick);
    for (size_t i = 0; i < sizeof PER_CALL_ENV / sizeof PER_CALL_ENV[0]; i++)
        h = kda_step_graph_fp_str(h, getenv(PER_CALL_ENV[i]));
    return h;
}

// One warning line for a graph that could not be made or launched (the key then runs eagerly);
// clears the context's error and CUDA's last error, which the eager run must not inherit.
static void graph_warn_(KdaCudaModel *m, const char *what, cudaError_t e) {
    kda_warn("CUDA graph of the training micro-batch (B=%lld T=%lld n_valid=%lld): %s failed: %s; "
             "this batch shape runs eagerly",
             (long long)m->B, (long long)m->T, (long long)m->n_valid, what,
             m->ctx.err.msg[0] ? m->ctx.err.msg : cudaGetErrorString(e));
    (void)cudaGetLastError();
    kda_cuda_clear_error(&m->ctx);
}

// The micro-batch's device work captured from the model's stream and instantiated, or NULL
// (after one warning line). Nothing runs during a capture. ThreadLocal mode: a call of this
// thread that cannot be captured (a synchronization, cudaMalloc, a pageable copy) fails the
// capture instead of slipping out of it (Relaxed would let cudaMalloc through), and other
// threads (data loader, data-parallel overlap) are not restricted (Global mode would fail their
// unsafe calls while the capture is open).
static void *graph_capture_(KdaCudaModel *m) {
    cudaStream_t s = m->ctx.stream;
    cudaGraph_t g = NULL;
    cudaGraphExec_t exec = NULL;
    const char *what = "cudaStreamBeginCapture";
    cudaError_t e = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    if (e == cudaSuccess) {
        int rc = fb_enqueue_(m); // always ended below, also after a failed launcher
        what = "cudaStreamEndCapture";
        e = cudaStreamEndCapture(s, &g);
        if (e == cudaSuccess && (rc || !g))
            what = "a launch during the capture", e = cudaErrorStreamCaptureInvalidated;
    }
    if (e == cudaSuccess) {
        what = "cudaGraphInstantiate";
        e = cudaGraphInstantiate(&exec, g, 0);
    }
    size_t nodes = 0; // for the log line: the launches one replay stands for
    if (e == cudaSuccess && cudaGraphGetNodes(g, NULL, &nodes) != cudaSuccess)
        nodes = 0, (void)cudaGetLastError();
    // the exec keeps what it needs of the graph; a failure to free the template only leaks it
    if (g && cudaGraphDestroy(g) != cudaSuccess) (void)cudaGetLastError();
    if (e == cudaSuccess) {
        kda_info("CUDA graph of the training micro-batch (B=%lld T=%lld n_valid=%lld) captured: "
                 "%zu nodes",
                 (long long)m->B, (long long)m->T, (long long)m->n_valid, nodes);
        return exec;
    }
    graph_warn_(m, what, e);
    return NULL;
}

// Launches slot sl's graph; a failed launch drops it (one warning) and runs the batch eagerly.
static int graph_launch_(KdaCudaModel *m, KdaStepGraphSlot *sl) {
    cudaError_t e = cudaGraphLaunch((cudaGraphExec_t)sl->exec, m->ctx.stream);
    if (e == cudaSuccess) return 0;
    graph_warn_(m, "cudaGraphLaunch", e);
    kda_step_graph_failed(&m->graphs, sl);
    return fb_enqueue_(m);
}

// The micro-batch's device work: eagerly, or through its key's graph (step_graph.h: the first
// call of a key runs eagerly and warms the caches a capture cannot fill; the second captures
// and launches; later calls launch). The results are the eager path's bits: the same kernels
// with the same arguments in the same order. -1 with the context's error set.
static int fb_run_(KdaCudaModel *m) {
    KdaStepGraphSlot *sl = NULL;
    KdaGraphAction a = KDA_GRAPH_EAGER;
    if (!graph_blocked_(m)) {
        KdaStepGraphKey key = {m->B, m->T, m->n_valid};
        a = kda_step_graph_plan(&m->graphs, key, graph_fp_(m), &sl);
    }
    if (a == KDA_GRAPH_CAPTURE) {
        void *exec = graph_capture_(m);
        kda_step_graph_captured(&m->graphs, sl, exec);
        a = exec ? KDA_GRAPH_REPLAY : KDA_GRAPH_EAGER;
    }
    return a == KDA_GRAPH_REPLAY ? graph_launch_(m, sl) : fb_enqueue_(m);
}

void kda_cuda_model_graph_stats(const KdaCudaModel *m, int64_t *captures, int64_t *replays,
                                int64_t *failures) {
    *captures = m->graphs.captures;
    *replays = m->graphs.replays;
    *failures = m->graphs.failures;
}

int kda_cuda_model_forward_backward(KdaCudaModel *m, const int32_t *ids, const int32_t *labels,
                                    int64_t B, int64_t T, float *nll, float *loss, KdaError *err) {
    if (m->cfg.num_v_heads != m->cfg.num_heads && m->chunk == 64)
        return kda_fail(err,
                        "CUDA model: backward with num_v_heads %lld != num_heads %lld (GVA) "
                        "needs the fast KDA kernels, which do not fit these head dims",
                        (long long)m->cfg.num_v_heads, (long long)m->cfg.num_heads);
    if (!m->cls_budget)
        return kda_fail(err, "CUDA model: the fused classifier has no workspace (budget 0)");
    if (start_forward_(m, ids, labels, B, T, err)) return -1;
    int rc = fb_run_(m);
    if (!rc && nll && kda_cuda_get_f32(&m->ctx, nll, m->nll, B * T)) rc = -1;
    if (rc) return fail_(m, err);
    if (loss) return kda_cuda_model_loss(m, loss, err);
    return 0;
}

int kda_cuda_model_set_cls_budget(KdaCudaModel *m, size_t bytes, KdaError *err) {
    if (bytes == m->cls_budget) return 0;
    if (kda_cuda_sync(&m->ctx)) return fail_(m, err);
    kda_cuda_release(m->arena); // the next forward lays the arena out again
    m->arena = NULL;
    m->cap_tokens = 0;
    m->have_fwd = 0;
    m->cls_budget = bytes;
    return 0;
}

void kda_cuda_model_set_cls_row(KdaCudaModel *m, int kernel) {
    if (kernel != KDA_CLS_ROW_CLUSTER && kernel != KDA_CLS_ROW_BLOCK &&
        kernel != KDA_CLS_ROW_PIPE && kernel != KDA_CLS_ROW_TRIM)
        return;
    m->cls_row = kernel;
    m->cls.row_kernel = kernel;
}

// ---- data parallelism --------------------------------------------------------------------------

void kda_cuda_model_grad_view(KdaCudaModel *m, float **d_g, int64_t *n, void **stream) {
    *d_g = m->g;
    *n = m->dtotal;
    *stream = m->ctx.stream;
}

int kda_cuda_model_layer_range(const KdaCudaModel *m, int64_t layer, int64_t *lo, int64_t *hi) {
    int64_t a = -1, b = -1;
    for (int i = 0; i < m->dtab.n; i++) {
        const KdaParamInfo *r = &m->dtab.rows[i];
        if (r->layer != layer) continue;
        int64_t end = (r->offset + r->numel + ROW_ALIGN - 1) / ROW_ALIGN * ROW_ALIGN; // + padding
        a = a < 0 || r->offset < a ? r->offset : a;
        b = end > b ? end : b;
    }
    if (a < 0) return -1;
    for (int i = 0; i < m->dtab.n; i++) {
        const KdaParamInfo *r = &m->dtab.rows[i];
        if (r->layer != layer && r->offset < b && r->offset + r->numel > a) return -1;
    }
    *lo = a;
    *hi = b < m->dtotal ? b : m->dtotal;
    return 0;
}

void kda_cuda_model_set_layer_hook(KdaCudaModel *m, void (*fn)(void *user, int64_t layer),
                                   void *user) {
    m->layer_hook = fn;
    m->layer_user = user;
}

// ZeRO-1: p and g grow to the padded layout (parameters kept, the rest zero), the moments
// shrink to the shard (their shard's part kept). The new buffers are allocated before the old
// ones are released, so a failure leaves the model as it was.
int kda_cuda_model_shard(KdaCudaModel *m, const KdaShard *s, KdaError *err) {
    if (s->n != m->dtotal || s->padded < m->dtotal || s->hi > s->padded)
        return kda_fail(err,
                        "CUDA model: a ZeRO-1 plan over %lld elements for a device layout of "
                        "%lld",
                        (long long)s->n, (long long)m->dtotal);
    float *p = kda_cuda_alloc(&m->ctx, F32(s->padded)),
          *g = kda_cuda_alloc(&m->ctx, F32(s->padded));
    float *m1 = kda_cuda_alloc(&m->ctx, F32(s->chunk)),
          *m2 = kda_cuda_alloc(&m->ctx, F32(s->chunk));
    int64_t keep = (s->hi < m->dtotal ? s->hi : m->dtotal) - s->lo; // the moments' real part
    int ok = p && g && m1 && m2 && !kda_cuda_zero(&m->ctx, p, F32(s->padded)) &&
             !kda_cuda_zero(&m->ctx, g, F32(s->padded)) &&
             !kda_cuda_zero(&m->ctx, m1, F32(s->chunk)) &&
             !kda_cuda_zero(&m->ctx, m2, F32(s->chunk));
    if (ok) {
        cudaStream_t st = m->ctx.stream;
        ok =
            cudaMemcpyAsync(p, m->p, F32(m->dtotal), cudaMemcpyDeviceToDevice, st) == cudaSuccess &&
            (keep <= 0 || (cudaMemcpyAsync(m1, m->m1 + s->lo, F32(keep), cudaMemcpyDeviceToDevice,
                                           st) == cudaSuccess &&
                           cudaMemcpyAsync(m2, m->m2 + s->lo, F32(keep), cudaMemcpyDeviceToDevice,
                                           st) == cudaSuccess)) &&
            cudaStreamSynchronize(st) == cudaSuccess;
        if (!ok) kda_cuda_fail_at(&m->ctx, __FILE__, __LINE__, "ZeRO-1 copies", "cudaMemcpyAsync");
    }
    if (!ok) {
        kda_cuda_release(p), kda_cuda_release(g), kda_cuda_release(m1), kda_cuda_release(m2);
        return fail_(m, err);
    }
    kda_cuda_release(m->p), kda_cuda_release(m->g), kda_cuda_release(m->m1);
    kda_cuda_release(m->m2);
    m->p = p, m->g = g, m->m1 = m1, m->m2 = m2;
    m->sh = *s;
    m->sharded = 1;
    kda_tensors_free(&m->P);
    kda_tensors_free(&m->G);
    kda_tensors_bind(&m->P, &m->dtab, m->p);
    kda_tensors_bind(&m->G, &m->dtab, m->g);
    m->clip_pending = 0;
    return 0;
}

void kda_cuda_model_shard_view(KdaCudaModel *m, float **d_p, float **d_g, float **d_m1,
                               float **d_m2) {
    *d_p = m->p, *d_g = m->g, *d_m1 = m->m1, *d_m2 = m->m2;
}

void kda_cuda_model_set_norm_reduce(KdaCudaModel *m,
                                    int (*fn)(void *user, double *sumsq, KdaError *err),
                                    void *user) {
    m->norm_reduce = fn;
    m->norm_user = user;
}

// The AdamW launches refreshed the shard's bf16 copy; the gathered rest gets it here.
int kda_cuda_model_params_gathered(KdaCudaModel *m, KdaError *err) {
    int64_t lo = m->sh.lo < m->dtotal ? m->sh.lo : m->dtotal;
    int64_t hi = m->sh.hi < m->dtotal ? m->sh.hi : m->dtotal;
    if (kda_cuda_f32_to_bf16(&m->ctx, m->pb, m->p, lo) ||
        kda_cuda_f32_to_bf16(&m->ctx, m->pb + hi, m->p + hi, m->dtotal - hi))
        return fail_(m, err);
    return 0;
}

int kda_cuda_model_unpack(KdaCudaModel *m, float *dense, const float *d_buf, KdaError *err) {
    return get_(m, dense, d_buf) ? fail_(m, err) : 0;
}

// ---- training state ---------------------------------------------------------------------------

int kda_cuda_model_zero_grads(KdaCudaModel *m, KdaError *err) {
    if (prof_begin_(m) || kda_cuda_zero(&m->ctx, m->g, F32(m->sh.padded)) ||
        prof_end_(m, KDA_OP_ZERO_GRADS, 0, (double)F32(m->sh.padded)))
        return fail_(m, err);
    m->clip_pending = 0;
    return 0;
}

static int put_scalar_(KdaCudaModel *m, float *dev, float v) {
    CUDA_CHECK(&m->ctx, cudaMemcpyAsync(dev, &v, sizeof v, cudaMemcpyHostToDevice, m->ctx.stream));
    CUDA_CHECK(&m->ctx, cudaStreamSynchronize(m->ctx.stream)); // v lives on this stack frame
    return 0;
}

static int read_norm_(KdaCudaModel *m, double *norm) {
    CUDA_CHECK(&m->ctx,
               cudaMemcpyAsync(norm, m->norm, sizeof *norm, cudaMemcpyDeviceToHost, m->ctx.stream));
    CUDA_CHECK(&m->ctx, cudaStreamSynchronize(m->ctx.stream));
    return 0;
}

// Scale, norm and clip coefficient on the device over the optimizer's shard (the whole layout
// unless ZeRO-1), then the norm's read (a host sync). With a norm reducer *norm is this shard's
// Σ g² instead, and the clip coefficient waits for finish_reduced_.
static int finish_dev_(KdaCudaModel *m, double scale, double max_norm, double *norm) {
    float *g = m->g + m->sh.lo;
    int64_t n = (m->sh.hi < m->dtotal ? m->sh.hi : m->dtotal) - m->sh.lo;
    if (n < 0) n = 0; // a shard of padding only
    double by = (double)F32(n);
    if (scale != 1.0) {
        TIMED(KDA_OP_SYNC, 0, 4.0, put_scalar_(m, m->gscale, (float)scale));
        TIMED(KDA_OP_GRAD_NORM, 0, 2.0 * by, kda_cuda_scale(&m->ctx, g, n, m->gscale));
    }
    if (m->norm_reduce) {
        TIMED(KDA_OP_GRAD_NORM, 0, by, kda_cuda_grad_sumsq(&m->ctx, m->norm, g, n));
    } else {
        TIMED(KDA_OP_GRAD_NORM, 0, by, kda_cuda_grad_norm(&m->ctx, m->norm, g, n));
        if (max_norm > 0)
            TIMED(KDA_OP_GRAD_NORM, 0, 0, kda_cuda_clip_coef(&m->ctx, m->coef, m->norm, max_norm));
    }
    TIMED(KDA_OP_SYNC, 0, 8.0, read_norm_(m, norm));
    return 0;
}

// ZeRO-1, after the reducer: *norm = sqrt(Σ over the ranks) (IEEE double sqrt on either side,
// so one rank gives kda_cuda_grad_norm's bits), back on the device for the clip coefficient.
static int finish_reduced_(KdaCudaModel *m, double max_norm, double *norm) {
    *norm = sqrt(*norm);
    CUDA_CHECK(&m->ctx,
               cudaMemcpyAsync(m->norm, norm, sizeof *norm, cudaMemcpyHostToDevice, m->ctx.stream));
    if (max_norm > 0)
        TIMED(KDA_OP_GRAD_NORM, 0, 0, kda_cuda_clip_coef(&m->ctx, m->coef, m->norm, max_norm));
    CUDA_CHECK(&m->ctx, cudaStreamSynchronize(m->ctx.stream)); // *norm is the caller's
    return 0;
}

double kda_cuda_model_finish_grads(KdaCudaModel *m, double scale, double max_norm, KdaError *err) {
    double norm = NAN;
    m->clip_pending = 0;
    if (finish_dev_(m, scale, max_norm, &norm)) {
        fail_(m, err);
        return NAN;
    }
    if (m->norm_reduce) {
        if (m->norm_reduce(m->norm_user, &norm, err)) return NAN;
        if (finish_reduced_(m, max_norm, &norm)) {
            fail_(m, err);
            return NAN;
        }
    }
    m->clip_pending = max_norm > 0 && isfinite(norm);
    return norm;
}

// The runs of rows with the same decay flag over the device rows (padding included: zero grads
// and moments keep zero parameters at zero), clipped to the optimizer's shard (ZeRO-1), in
// device order (dorder: the fused input projection moves rows out of table order). fn(user, a,
// b, decay) per non-empty run [a, b) of the device layout, in increasing order.
static int adam_runs_(const KdaCudaModel *m, int (*fn)(void *user, int64_t a, int64_t b, int decay),
                      void *user) {
    const KdaParamInfo *R = m->dtab.rows;
    const int *o = m->dorder;
    int i = 0, n = m->dtab.n;
    while (i < n) {
        int j = i;
        while (j + 1 < n && R[o[j + 1]].weight_decay == R[o[i]].weight_decay)
            j++;
        int64_t a = R[o[i]].offset;
        int64_t b = j + 1 < n ? R[o[j + 1]].offset : m->dtotal;
        int decay = R[o[i]].weight_decay != 0;
        i = j + 1;
        if (kda_zero1_clip(&m->sh, a, b, m->dtotal, &a, &b) && fn(user, a, b, decay)) return -1;
    }
    return 0;
}

typedef struct {
    KdaCudaModel *m;
    KdaCudaAdamScalars sd, sn;
    const float *gs;
} AdamCall;

// One launch per run (the path before KDA_ADAMW_ONE; the moments hold the shard from sh.lo).
static int adam_one_run_(void *user, int64_t a, int64_t b, int decay) {
    AdamCall *c = user;
    KdaCudaModel *m = c->m;
    int64_t k = a - m->sh.lo; // the moments' index of element a
    // fp32 p, g, m, v read; p, m, v written; bf16 copy written: 30 bytes per parameter
    return prof_begin_(m) ||
           kda_cuda_adamw(&m->ctx, m->p + a, m->pb + a, m->g + a, m->m1 + k, m->m2 + k, b - a,
                          decay ? &c->sd : &c->sn, c->gs) ||
           prof_end_(m, KDA_OP_ADAMW, 0, 30.0 * (double)(b - a));
}

typedef struct {
    int64_t *ends;
    unsigned char *decay;
    int n, cap;
    int64_t lo, hi; // the shard's first element; the last run's end
} RunTable;

static int add_run_(void *user, int64_t a, int64_t b, int decay) {
    RunTable *t = user;
    if (t->n > 0 && t->ends[t->n - 1] != a - t->lo) return -1; // runs must tile the shard
    if (t->n == 0 && a != t->lo) return -1;
    if (t->n == t->cap) return -1;
    t->ends[t->n] = b - t->lo;
    t->decay[t->n++] = (unsigned char)decay;
    t->hi = b;
    return 0;
}

// Uploads t into a new device run table m->adam_runs (ends at the start, decay after all
// KDA_ADAMW_MAX_RUNS ends), ordered on the context's stream and waited for (t lives on the
// caller's stack). -1 on a device failure (ctx->err set).
static int adam_upload_(KdaCudaModel *m, const RunTable *t) {
    size_t ends_bytes = (size_t)KDA_ADAMW_MAX_RUNS * sizeof(int64_t);
    if (!(m->adam_runs = kda_cuda_alloc(&m->ctx, ends_bytes + KDA_ADAMW_MAX_RUNS))) return -1;
    cudaStream_t st = m->ctx.stream;
    CUDA_CHECK(&m->ctx, cudaMemcpyAsync(m->adam_runs, t->ends, (size_t)t->n * sizeof(int64_t),
                                        cudaMemcpyHostToDevice, st));
    CUDA_CHECK(&m->ctx, cudaMemcpyAsync((char *)m->adam_runs + ends_bytes, t->decay, (size_t)t->n,
                                        cudaMemcpyHostToDevice, st));
    CUDA_CHECK(&m->ctx, cudaStreamSynchronize(st));
    return 0;
}

// The device run table of the current shard, built once per shard. Returns 0 (table ready),
// 1 when the runs cannot use one (they do not tile the shard, or more than KDA_ADAMW_MAX_RUNS:
// the caller launches per run), -1 on a device failure (ctx->err set).
static int adam_table_(KdaCudaModel *m) {
    if (m->adam_runs && m->adam_sh_lo == m->sh.lo && m->adam_sh_hi == m->sh.hi) return 0;
    kda_cuda_release(m->adam_runs);
    m->adam_runs = NULL;
    RunTable t = {.cap = KDA_ADAMW_MAX_RUNS, .lo = m->sh.lo, .hi = m->sh.lo};
    t.ends = kda_malloc((size_t)t.cap * sizeof *t.ends);
    t.decay = kda_malloc((size_t)t.cap);
    int rc = adam_runs_(m, add_run_, &t) || t.n == 0 ? 1 : adam_upload_(m, &t);
    free(t.ends), free(t.decay);
    if (rc) {
        kda_cuda_release(m->adam_runs);
        m->adam_runs = NULL;
        return rc;
    }
    m->adam_nruns = t.n;
    m->adam_lo = t.lo, m->adam_n = t.hi - t.lo;
    m->adam_sh_lo = m->sh.lo, m->adam_sh_hi = m->sh.hi;
    return 0;
}

int kda_cuda_model_adamw(KdaCudaModel *m, const KdaAdamWConfig *c, int64_t step, double lr,
                         KdaError *err) {
    AdamCall call = {
        .m = m,
        .sd = kda_cuda_adam_scalars(c->beta1, c->beta2, c->eps, c->weight_decay, step, lr),
        .sn = kda_cuda_adam_scalars(c->beta1, c->beta2, c->eps, 0.0, step, lr),
        .gs = m->clip_pending ? m->coef : NULL};
    m->clip_pending = 0;
    int table = m->adamw_one ? adam_table_(m) : 1;
    if (table < 0) return fail_(m, err);
    if (table == 0) {
        int64_t a = m->adam_lo, n = m->adam_n;
        const int64_t *ends = m->adam_runs;
        const unsigned char *dec = (const unsigned char *)(ends + KDA_ADAMW_MAX_RUNS);
        if (prof_begin_(m) ||
            kda_cuda_adamw_runs(&m->ctx, m->p + a, m->pb + a, m->g + a, m->m1, m->m2, n, ends, dec,
                                m->adam_nruns, &call.sd, &call.sn, call.gs) ||
            prof_end_(m, KDA_OP_ADAMW, 0, 30.0 * (double)n))
            return fail_(m, err);
        return 0;
    }
    return adam_runs_(m, adam_one_run_, &call) ? fail_(m, err) : 0;
}

int kda_cuda_model_get_params(KdaCudaModel *m, float *params, KdaError *err) {
    return get_(m, params, m->p) ? fail_(m, err) : 0;
}
int kda_cuda_model_put_params(KdaCudaModel *m, const float *params, KdaError *err) {
    if (put_(m, m->p, params) || kda_cuda_f32_to_bf16(&m->ctx, m->pb, m->p, m->dtotal) ||
        kda_cuda_sync(&m->ctx))
        return fail_(m, err);
    return 0;
}
int kda_cuda_model_get_grads(KdaCudaModel *m, float *grads, KdaError *err) {
    return get_(m, grads, m->g) ? fail_(m, err) : 0;
}
int kda_cuda_model_put_grads(KdaCudaModel *m, const float *grads, KdaError *err) {
    m->clip_pending = 0;
    return put_(m, m->g, grads) ? fail_(m, err) : 0;
}
int kda_cuda_model_get_moments(KdaCudaModel *m, float *mom1, float *mom2, KdaError *err) {
    if (m->sharded)
        return kda_fail(err, "CUDA model: the moments are sharded (ZeRO-1): gather them into the "
                             "gradient buffer and read it with kda_cuda_model_unpack");
    if ((mom1 && get_(m, mom1, m->m1)) || (mom2 && get_(m, mom2, m->m2))) return fail_(m, err);
    return 0;
}

// ZeRO-1: packs the dense host moments and uploads the shard's part (its padding stays zero).
static int put_shard_(KdaCudaModel *m, float *dev, const float *dense) {
    pack_(m, dense);
    int64_t n = (m->sh.hi < m->dtotal ? m->sh.hi : m->dtotal) - m->sh.lo;
    if (n > 0)
        CUDA_CHECK(&m->ctx, cudaMemcpyAsync(dev, m->stage + m->sh.lo, F32(n),
                                            cudaMemcpyHostToDevice, m->ctx.stream));
    CUDA_CHECK(&m->ctx, cudaStreamSynchronize(m->ctx.stream));
    return 0;
}

int kda_cuda_model_put_moments(KdaCudaModel *m, const float *mom1, const float *mom2,
                               KdaError *err) {
    int (*put)(KdaCudaModel *, float *, const float *) = m->sharded ? put_shard_ : put_;
    if ((mom1 && put(m, m->m1, mom1)) || (mom2 && put(m, m->m2, mom2))) return fail_(m, err);
    return 0;
}

// ---- inference (eval / generate) ----------------------------------------------------------------

int kda_cuda_model_logits(KdaCudaModel *m, int64_t b, int64_t t, float *logits, KdaError *err) {
    if (!m->have_fwd) return kda_fail(err, "CUDA model: logits need a preceding forward");
    if (b < 0 || b >= m->B || t < 0 || t >= m->T)
        return kda_fail(err,
                        "CUDA model: logits of (%lld, %lld) outside the last batch [%lld, %lld]",
                        (long long)b, (long long)t, (long long)m->B, (long long)m->T);
    int64_t D = m->cfg.hidden_size, V = m->cfg.vocab_size;
    size_t ybytes = ((size_t)V * sizeof(float) + 255) / 256 * 256;
    char *ws = kda_cuda_scratch(&m->ctx, ybytes + (size_t)D * sizeof(bf));
    if (!ws) return fail_(m, err);
    float *y = (float *)ws;
    bf *x = (bf *)(ws + ybytes); // the row, copied to a 256-byte aligned address for cuBLASLt
    cudaError_t e = cudaMemcpyAsync(x, m->nf + (b * m->T + t) * D, (size_t)D * sizeof(bf),
                                    cudaMemcpyDeviceToDevice, m->ctx.stream);
    if (e != cudaSuccess) {
        kda_cuda_fail_at(&m->ctx, __FILE__, __LINE__, "cudaMemcpyAsync(row)",
                         cudaGetErrorString(e));
        return fail_(m, err);
    }
    if (kda_cuda_gemm_fwd(&m->ctx, y, KDA_DT_F32, x, W_(m, m->P.lm_head), 1, D, V, 0) ||
        kda_cuda_get_f32(&m->ctx, logits, y, V))
        return fail_(m, err);
    return 0;
}

// ---- memory plan (kda info; no device needed) ---------------------------------------------------

int kda_cuda_model_plan(const KdaConfig *cfg, const KdaParamTable *t, int64_t B, int64_t T,
                        int recompute, size_t smem_optin, KdaCudaPlan *out, KdaError *err) {
    memset(out, 0, sizeof *out);
    if (kda_cuda_model_check_config(cfg, err)) return -1;
    if (B <= 0 || T <= 0) return kda_fail(err, "memory plan: B and T must be positive");
    KdaCudaModel *m = kda_calloc(1, sizeof *m);
    m->ctx.info.smem_per_block_optin = smem_optin;
    configure_(m, cfg, t);
    m->recompute = recompute != 0;
    m->L =
        kda_calloc((size_t)(cfg->num_hidden_layers > 0 ? cfg->num_hidden_layers : 1), sizeof *m->L);
    set_batch_(m, B, T);
    Arena a = {NULL, 0};
    layout_(m, B * T, &a); // reserve_'s count, for B·T tokens
    KdaDims d = dims_(m);  // keep_reserve_'s size
    int keep = m->core_keep && kda_fast_supported(&d, smem_optin);
    size_t per = keep ? m->core->keep_floats(&d) : 0;
    size_t sets = m->recompute ? 1 : (size_t)cfg->num_hidden_layers;
    out->dtotal = m->dtotal;
    out->state_bytes = 4.0 * F32(m->dtotal); // p, g, m1, m2
    out->copy_bytes = (double)BF(m->dtotal);
    out->arena_bytes = (double)a.used;
    out->keep_bytes = (double)F32(per * sets);
    out->fixed_bytes = 256.0 + (double)((size_t)32 << 20); // scalars, cuBLASLt workspace
    free(m->L);
    free(m->table.rows);
    free(m->dtab.rows);
    free(m);
    return 0;
}

size_t kda_cuda_model_arena_bytes(const KdaCudaModel *m) {
    return m->arena_bytes + F32(m->keep_cap);
}

// ---- recurrent decode: prefill + one token at a time (model_cuda.h) -----------------------------

struct KdaCudaDecode {
    void *mem;               // one device allocation; every pointer below points into it
    float *S;                // [L, HV, K, V] fp32 recurrent state
    float *tq, *tk, *tv;     // [L, HK, W-1], [L, HK, W-1], [L, HVV, W-1] fp32 conv tails
    int32_t *id;             // [1] the token being decoded
    float *h, *h2, *rstd;    // [D], [D] residual stream; [max(HV, 1)] norm statistics
    bf *x, *pq, *pk, *pv;    // [D] norm output; [HK], [HK], [HVV] projections
    bf *q, *k, *v;           // [HK], [HK], [HVV] core inputs
    bf *f0, *f, *b, *z0, *z; // [V], [HVK], [HV], [V], [HVV]
    float *g, *beta;         // [HVK], [HV]
    bf *o, *on;              // [HVV] core output and gated-norm output
    bf *ga, *up, *mm;        // [I] each
    float *logits;           // [n_vocab]
    int64_t bytes;           // of mem
    // By default (KDA_DECODE_GRAPH=0 at create: eager) after one eager step the step is captured
    // once as a CUDA graph (its ~25 launches per layer replayed by one), reading the id from and
    // writing the logits to pinned host buffers. graph: 0 not yet, 1 ready, -1 off or the capture
    // failed.
    int graph;
    cudaGraphExec_t exec;
    int32_t *h_id;   // [1] pinned
    float *h_logits; // [n_vocab] pinned
    int64_t steps;   // decode steps run on this state
};

// Assigns every pointer of st for m's config (a->base NULL: only counts bytes).
static void decode_layout_(const KdaConfig *c, KdaCudaDecode *st, Arena *a) {
    int64_t L = c->num_hidden_layers, D = c->hidden_size, HV = c->num_v_heads, V = c->head_v_dim;
    int64_t HK = c->key_dim, HVK = c->gate_dim, HVV = c->value_dim, I = c->intermediate_size;
    int64_t W1 = c->conv_size - 1;
    st->S = take_(a, F32(L * HV * c->head_dim * V));
    st->tq = take_(a, F32(L * HK * W1)), st->tk = take_(a, F32(L * HK * W1));
    st->tv = take_(a, F32(L * HVV * W1));
    st->id = take_(a, sizeof(int32_t));
    st->h = take_(a, F32(D)), st->h2 = take_(a, F32(D)), st->rstd = take_(a, F32(max64_(HV, 1)));
    st->x = take_(a, BF(D)), st->pq = take_(a, BF(HK)), st->pk = take_(a, BF(HK));
    st->pv = take_(a, BF(HVV)), st->q = take_(a, BF(HK)), st->k = take_(a, BF(HK));
    st->v = take_(a, BF(HVV)), st->f0 = take_(a, BF(V)), st->f = take_(a, BF(HVK));
    st->b = take_(a, BF(HV)), st->z0 = take_(a, BF(V)), st->z = take_(a, BF(HVV));
    st->g = take_(a, F32(HVK)), st->beta = take_(a, F32(HV));
    st->o = take_(a, BF(HVV)), st->on = take_(a, BF(HVV));
    st->ga = take_(a, BF(I)), st->up = take_(a, BF(I)), st->mm = take_(a, BF(I));
    st->logits = take_(a, F32(c->vocab_size));
}

int kda_cuda_decode_create(KdaCudaModel *m, KdaCudaDecode **out, KdaError *err) {
    *out = NULL;
    KdaCudaDecode *st = kda_calloc(1, sizeof *st);
    Arena a = {NULL, 0};
    decode_layout_(&m->cfg, st, &a);
    st->bytes = (int64_t)a.used;
    if (!(st->mem = kda_cuda_alloc(&m->ctx, a.used)) || kda_cuda_zero(&m->ctx, st->mem, a.used)) {
        kda_cuda_release(st->mem);
        free(st);
        return fail_(m, err);
    }
    a.base = st->mem, a.used = 0;
    decode_layout_(&m->cfg, st, &a);
    // the step replayed as a CUDA graph unless KDA_DECODE_GRAPH=0 (measured 2026-12-03: 728 vs
    // 548 tokens/s at a 128-token prompt, the same ids; docs/log/gpu-2026-12-03.md §6)
    const char *g = getenv("KDA_DECODE_GRAPH");
    st->graph = g && !strcmp(g, "0") ? -1 : 0;
    if (st->graph == 0 &&
        (cudaMallocHost((void **)&st->h_id, sizeof(int32_t)) != cudaSuccess ||
         cudaMallocHost((void **)&st->h_logits, F32(m->cfg.vocab_size)) != cudaSuccess)) {
        cudaGetLastError(); // no pinned memory: the eager step
        st->graph = -1;
    }
    *out = st;
    return 0;
}

int kda_cuda_decode_graphed(const KdaCudaDecode *st) {
    return st->graph == 1;
}

void kda_cuda_decode_free(KdaCudaDecode *st) {
    if (!st) return;
    if (st->graph == 1) cudaGraphExecDestroy(st->exec);
    if (st->h_id) cudaFreeHost(st->h_id);
    if (st->h_logits) cudaFreeHost(st->h_logits);
    kda_cuda_release(st->mem);
    free(st);
}

// The cache part of the layout (S and the tails) comes first: one copy.
int kda_cuda_decode_copy(KdaCudaModel *m, KdaCudaDecode *dst, const KdaCudaDecode *src,
                         KdaError *err) {
    size_t n = (size_t)((char *)src->id - (char *)src->mem);
    cudaError_t e = cudaMemcpyAsync(dst->mem, src->mem, n, cudaMemcpyDeviceToDevice, m->ctx.stream);
    if (e != cudaSuccess) {
        kda_cuda_fail_at(&m->ctx, __FILE__, __LINE__, "cudaMemcpyAsync(state)",
                         cudaGetErrorString(e));
        return fail_(m, err);
    }
    return 0;
}

// logits [n_vocab] fp32 host = RMSNorm(h) · lm_headᵀ (bf16 operands, fp32 out), as
// kda_cuda_model_logits reads a forward's row; waits.
static int decode_head_(KdaCudaModel *m, KdaCudaDecode *st, const float *h, float *logits) {
    const KdaConfig *c = &m->cfg;
    TRY(kda_cuda_rmsnorm_fwd(&m->ctx, st->x, st->rstd, h, m->P.final_norm, 1, c->hidden_size,
                             (float)c->norm_eps));
    TRY(kda_cuda_gemm_fwd(&m->ctx, st->logits, KDA_DT_F32, st->x, W_(m, m->P.lm_head), 1,
                          c->hidden_size, c->vocab_size, 0));
    return kda_cuda_get_f32(&m->ctx, logits, st->logits, c->vocab_size);
}

// The forward of one sequence's blocks (trunk_fwd_ with each block's final KDA state into st->S
// and the conv tails taken from its projections before the next block reuses them).
static int prefill_trunk_(KdaCudaModel *m, KdaCudaDecode *st) {
    const KdaConfig *c = &m->cfg;
    int64_t T = m->T, D = c->hidden_size, nl = c->num_hidden_layers, W = c->conv_size;
    int64_t HK = c->key_dim, HVV = c->value_dim, W1 = W - 1;
    int64_t SL = c->num_v_heads * c->head_dim * c->head_v_dim;
    TRY(kda_cuda_embed_fwd(&m->ctx, nl > 0 ? m->L[0].h : m->hL, m->P.embed, m->ids, T, D));
    for (int64_t l = 0; l < nl; l++) {
        DevLayer *L = &m->L[l];
        m->fin = st->S + l * SL;
        int rc = block_fwd_(m, &m->P.layers[l], L, l + 1 < nl ? m->L[l + 1].h : m->hL);
        m->fin = NULL;
        TRY(rc);
        TRY(kda_cuda_decode_tail(&m->ctx, st->tq + l * HK * W1, L->pq, T, HK, W));
        TRY(kda_cuda_decode_tail(&m->ctx, st->tk + l * HK * W1, L->pk, T, HK, W));
        TRY(kda_cuda_decode_tail(&m->ctx, st->tv + l * HVV * W1, L->pv, T, HVV, W));
    }
    return 0;
}

int kda_cuda_model_prefill(KdaCudaModel *m, KdaCudaDecode *st, const int32_t *ids, int64_t T,
                           float *logits, KdaError *err) {
    if (T <= 0) return kda_fail(err, "prefill: the prompt is empty (T = %lld)", (long long)T);
    if (start_forward_(m, ids, NULL, 1, T, err)) return -1;
    const float *last = m->hL + (T - 1) * m->cfg.hidden_size;
    if (prefill_trunk_(m, st) || decode_head_(m, st, last, logits)) return fail_(m, err);
    return 0;
}

// One block on one token: st->h in, st->h out (through st->h2). The forward's launchers with
// N = 1 (separate projection GEMMs: every weight starts 256-byte aligned in either device
// layout), the conv and the delta rule from decode_cuda.h.
static int decode_block_(KdaCudaModel *m, KdaCudaDecode *st, int64_t l) {
    const KdaConfig *c = &m->cfg;
    const KdaLayerTensors *P = &m->P.layers[l];
    KdaCudaCtx *x = &m->ctx;
    int64_t D = c->hidden_size, H = c->num_heads, HV = c->num_v_heads, K = c->head_dim;
    int64_t V = c->head_v_dim, HK = c->key_dim, HVK = c->gate_dim, HVV = c->value_dim;
    int64_t I = c->intermediate_size, W = c->conv_size, W1 = W - 1;
    float eps = (float)c->norm_eps;
    KdaDims d = kda_model_dims(c, 1, 1);
    TRY(kda_cuda_rmsnorm_fwd(x, st->x, st->rstd, st->h, P->attn_norm, 1, D, eps));
    TRY(kda_cuda_gemm_fwd(x, st->pq, KDA_DT_BF16, st->x, W_(m, P->q_proj), 1, D, HK, 0));
    TRY(kda_cuda_gemm_fwd(x, st->pk, KDA_DT_BF16, st->x, W_(m, P->k_proj), 1, D, HK, 0));
    TRY(kda_cuda_gemm_fwd(x, st->pv, KDA_DT_BF16, st->x, W_(m, P->v_proj), 1, D, HVV, 0));
    TRY(kda_cuda_decode_conv(x, st->q, st->tq + l * HK * W1, st->pq, P->q_conv, HK, W, K, 1,
                             L2NORM_EPS));
    TRY(kda_cuda_decode_conv(x, st->k, st->tk + l * HK * W1, st->pk, P->k_conv, HK, W, K, 1,
                             L2NORM_EPS));
    TRY(kda_cuda_decode_conv(x, st->v, st->tv + l * HVV * W1, st->pv, P->v_conv, HVV, W, V, 0,
                             0.0f));
    TRY(kda_cuda_gemm_fwd(x, st->f0, KDA_DT_BF16, st->x, W_(m, P->f_proj0), 1, D, V, 0));
    TRY(kda_cuda_gemm_fwd(x, st->f, KDA_DT_BF16, st->f0, W_(m, P->f_proj1), 1, V, HVK, 0));
    TRY(kda_cuda_gate_cumsum_fwd(x, st->g, NULL, st->f, P->A_log, P->dt_bias, 1, 1, HV, K,
                                 m->chunk)); // one token: the cumsum is g itself
    TRY(kda_cuda_gemm_fwd(x, st->b, KDA_DT_BF16, st->x, W_(m, P->b_proj), 1, D, HV, 0));
    TRY(kda_cuda_beta_fwd(x, st->beta, st->b, HV, c->allow_neg_eigval));
    TRY(kda_cuda_decode_delta(x, st->o, st->S + l * HV * K * V, st->q, st->k, st->v, st->g,
                              st->beta, H, HV, K, V, d.scale));
    TRY(kda_cuda_gemm_fwd(x, st->z0, KDA_DT_BF16, st->x, W_(m, P->g_proj0), 1, D, V, 0));
    TRY(kda_cuda_gemm_fwd(x, st->z, KDA_DT_BF16, st->z0, W_(m, P->g_proj1), 1, V, HVV, 0));
    if (m->fuse_gn) {
        TRY(kda_cuda_gnorm_bias_fwd(x, st->on, st->rstd, st->o, st->z, P->g_proj1_bias, P->o_norm,
                                    1, HV, V, eps));
    } else {
        TRY(kda_cuda_bias_add(x, st->z, P->g_proj1_bias, 1, HVV));
        TRY(kda_cuda_gnorm_fwd(x, st->on, st->rstd, st->o, st->z, P->o_norm, HV, V, eps));
    }
    TRY(kda_cuda_gemm_residual(x, st->h2, st->h, st->on, W_(m, P->o_proj), 1, HVV, D));
    TRY(kda_cuda_rmsnorm_fwd(x, st->x, st->rstd, st->h2, P->mlp_norm, 1, D, eps));
    TRY(kda_cuda_gemm_fwd(x, st->ga, KDA_DT_BF16, st->x, W_(m, P->gate_proj), 1, D, I, 0));
    TRY(kda_cuda_gemm_fwd(x, st->up, KDA_DT_BF16, st->x, W_(m, P->up_proj), 1, D, I, 0));
    TRY(kda_cuda_swiglu_fwd(x, st->mm, st->ga, st->up, I));
    TRY(kda_cuda_gemm_residual(x, st->h, st->h2, st->mm, W_(m, P->down_proj), 1, I, D));
    return 0;
}

// One step's work on the stream, the id already in st->id: embedding, blocks, final norm and
// head into st->logits.
static int decode_enqueue_(KdaCudaModel *m, KdaCudaDecode *st) {
    const KdaConfig *c = &m->cfg;
    TRY(kda_cuda_embed_fwd(&m->ctx, st->h, m->P.embed, st->id, 1, c->hidden_size));
    for (int64_t l = 0; l < c->num_hidden_layers; l++)
        TRY(decode_block_(m, st, l));
    TRY(kda_cuda_rmsnorm_fwd(&m->ctx, st->x, st->rstd, st->h, m->P.final_norm, 1, c->hidden_size,
                             (float)c->norm_eps));
    return kda_cuda_gemm_fwd(&m->ctx, st->logits, KDA_DT_F32, st->x, W_(m, m->P.lm_head), 1,
                             c->hidden_size, c->vocab_size, 0);
}

// Captures pinned id -> st->id, the step, st->logits -> pinned logits as one graph. A failure
// (a launcher that cannot be captured) leaves the eager step in place: graph -1, errors cleared.
static void decode_capture_(KdaCudaModel *m, KdaCudaDecode *st) {
    cudaStream_t s = m->ctx.stream;
    cudaGraph_t g = NULL;
    int64_t V = m->cfg.vocab_size;
    int ok = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
    if (ok) {
        int rc = cudaMemcpyAsync(st->id, st->h_id, sizeof(int32_t), cudaMemcpyHostToDevice, s) ||
                 decode_enqueue_(m, st) ||
                 cudaMemcpyAsync(st->h_logits, st->logits, F32(V), cudaMemcpyDeviceToHost, s);
        ok = cudaStreamEndCapture(s, &g) == cudaSuccess && !rc && g;
    }
    ok = ok && cudaGraphInstantiate(&st->exec, g, 0) == cudaSuccess;
    if (g) cudaGraphDestroy(g);
    if (!ok) cudaGetLastError(), kda_cuda_clear_error(&m->ctx);
    st->graph = ok ? 1 : -1;
}

int kda_cuda_model_decode(KdaCudaModel *m, KdaCudaDecode *st, int32_t id, float *logits,
                          KdaError *err) {
    const KdaConfig *c = &m->cfg;
    if (id < 0 || id >= c->vocab_size)
        return kda_fail(err, "decode: token id %d is outside the vocabulary [0, %lld)", (int)id,
                        (long long)c->vocab_size);
    m->have_fwd = 0; // the forward's activations stay, but a backward of them is not wanted now
    if (st->graph == 0 && st->steps > 0) decode_capture_(m, st); // caches warm after one step
    st->steps++;
    if (st->graph == 1) {
        *st->h_id = id;
        cudaError_t e = cudaGraphLaunch(st->exec, m->ctx.stream);
        if (e == cudaSuccess) e = cudaStreamSynchronize(m->ctx.stream);
        if (e != cudaSuccess) {
            kda_cuda_fail_at(&m->ctx, __FILE__, __LINE__, "cudaGraphLaunch(decode)",
                             cudaGetErrorString(e));
            return fail_(m, err);
        }
        memcpy(logits, st->h_logits, F32(c->vocab_size));
        return 0;
    }
    cudaError_t e = cudaMemcpyAsync(st->id, &id, sizeof id, cudaMemcpyHostToDevice, m->ctx.stream);
    if (e != cudaSuccess) {
        kda_cuda_fail_at(&m->ctx, __FILE__, __LINE__, "cudaMemcpyAsync(id)", cudaGetErrorString(e));
        return fail_(m, err);
    }
    if (decode_enqueue_(m, st) || kda_cuda_get_f32(&m->ctx, logits, st->logits, c->vocab_size))
        return fail_(m, err);
    return 0;
}

#endif // KDA_HAVE_CUDA
