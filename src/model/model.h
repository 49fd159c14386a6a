// model.h - the KDA language model on the CPU (fp32 reference): whole-model forward, loss and
// backward (kda-model.md §5: embedding, L pre-norm blocks of KDA sublayer + SwiGLU MLP, final
// RMSNorm, tied or untied LM head, shifted-label cross-entropy; backward per §6.4-6.5).
//
// Lifetime: kda_model_init (zero parameters, owned) or kda_model_init_from (takes ownership of
// a table and flat buffer, e.g. from kda_model_load_dir) ... kda_model_free. Activations are
// sized for B*T tokens and grow on demand inside kda_model_forward.
//
// Gradient contract: kda_model_backward ACCUMULATES (+=) into grads (table.total_numel floats,
// same layout as params): zero it before the first micro-batch. The loss is the mean NLL over
// the valid targets of the last forward's batch, so accumulating k micro-batches sums k means.
//
// Threads: OpenMP loops over tokens/channels and OpenBLAS GEMMs (OMP_NUM_THREADS /
// OPENBLAS_NUM_THREADS). Not reentrant: one forward/backward at a time per KdaModel.
#ifndef KDA_MODEL_H
#define KDA_MODEL_H

#include <stdint.h>

#include "core/error.h"   // defines: KdaError
#include "core/prof.h"    // defines: KdaProf
#include "model/config.h" // defines: KdaConfig
#include "model/params.h" // defines: KdaParamTable, KdaTensors
#include "cpu/kda_core.h" // defines: KdaDims

typedef enum {
    KDA_CORE_CHUNK = 0,    // kda_chunk_fwd/bwd (default; the GPU's algorithm)
    KDA_CORE_RECURRENT = 1 // kda_recurrent_fwd/bwd (per-token reference)
} KdaCoreMode;

typedef struct KdaActs KdaActs; // saved activations and backward scratch (model.c)

typedef struct {
    KdaConfig cfg;       // derived fields filled
    KdaParamTable table; // owned
    float *params;       // [table.total_numel] fp32, owned
    KdaTensors w;        // named views into params
    KdaCoreMode core;    // KDA_CORE_CHUNK unless changed by the caller
    KdaActs *acts;       // owned; NULL until the first forward
    int64_t cap_tokens;  // tokens the activations are sized for
    int64_t B, T;        // shape of the last forward (0 before)
    int have_fwd;        // 1 after a forward, until the next backward
    int have_rows;       // 1 after a forward, until a prefill: kda_model_logits may read its rows
    KdaProf *prof;       // not owned; non-NULL: forward/backward time each op into it (prof.h)
    // Data parallelism (may be NULL): called on the backward's thread right after block l's
    // backward (l = L-1 down to 0), when block l's rows of the gradient buffer are final.
    void (*layer_hook)(void *user, int64_t layer);
    void *layer_user;
} KdaModel;

// The KDA core's dims for a [B, T] batch of this config: H, HV, K, V from cfg, scale K^-1/2
// (kda-model.md §5.3 step 9), chunk 64 (§6). CPU and GPU drivers both take them from here.
KdaDims kda_model_dims(const KdaConfig *c, int64_t B, int64_t T);

// Checks a [B, T] batch for a forward of config c (CPU and GPU drivers): positive shape, ids in
// [0, vocab), labels in [0, vocab) or XENT_IGNORE; *labels NULL becomes ids. -1 with one line
// naming the first bad element ("ids[b][t] = x is outside the vocabulary [0, V)").
int kda_model_check_batch(const KdaConfig *c, const int32_t *ids, const int32_t **labels, int64_t B,
                          int64_t T, KdaError *err);

// Builds the table from cfg (kda_config_derive must have run) and allocates zero parameters.
// Use kda_params_init(&m->table, &m->cfg, m->params, seed) for a random init.
int kda_model_init(KdaModel *m, const KdaConfig *cfg, KdaError *err);
// Takes ownership of table and params (params: table->total_numel floats, kda_malloc'ed);
// on success *table is zeroed. On failure nothing is taken.
int kda_model_init_from(KdaModel *m, const KdaConfig *cfg, KdaParamTable *table, float *params,
                        KdaError *err);
// Releases everything; accepts a zeroed model.
void kda_model_free(KdaModel *m);
// Floats of the activation arena a forward of N = B·T tokens allocates (saved activations, the
// backward's scratch and the head's chunk buffer; the layout kda_model_forward uses). Plus the
// ids and shifted targets (2 x N int32) beside it. Host arithmetic (kda info's estimate).
int64_t kda_model_arena_floats(const KdaConfig *c, int64_t N);

// Forward of a batch and its loss.
//   ids    [B, T] int32 token ids, each in [0, n_vocab) (checked: -1 with the position)
//   labels [B, T] int32 or NULL (= ids); targets are shifted inside: target[b,t] = labels[b,t+1],
//          the last position and labels of -100 are ignored; other labels must be in range.
//   nll    [B, T] fp32 or NULL: per-position NLL of its target (natural log), 0 where ignored;
//          Σ nll / (number of valid targets) = *loss.
//   logits [B, T, n_vocab] fp32 or NULL (tests only: large).
//   loss   mean NLL over valid targets (0 when there are none); may be NULL.
// Saves what kda_model_backward needs. Rows of the batch are independent sequences.
int kda_model_forward(KdaModel *m, const int32_t *ids, const int32_t *labels, int64_t B, int64_t T,
                      float *nll, float *logits, float *loss, KdaError *err);
// logits [n_vocab] fp32 (overwritten) of position (b, t) of the last forward: its final-norm row
// times the LM head, one matrix-vector product (kda_matvec; the forward's head is a GEMM, so the
// last bits may differ from kda_model_forward's logits). -1 without a forward (a prefill since
// counts as none) or outside its [B, T].
int kda_model_logits(KdaModel *m, int64_t b, int64_t t, float *logits, KdaError *err);
// Backward of the last forward's mean loss; grads [table.total_numel] ACCUMULATES.
// Fails (-1) if no forward preceded it. When tied, the head and embedding gradients both land
// in the embedding rows. A pad_token_id row gets no embedding-lookup gradient (torch semantics).
int kda_model_backward(KdaModel *m, float *grads, KdaError *err);

// ---- inference: chunked prefill + O(1)-per-token recurrent decode (kda-model.md §3, §5.8) ---
//
// The cache of one sequence. Math orientation: S is [HV, K, V] per layer (FLA's cache stores
// the transpose [HV, V, K]). The conv tails hold the last W-1 conv inputs (the q/k/v
// projection outputs before conv and SiLU), oldest first, zeros before the sequence start;
// with use_short_conv = false (or W = 1) they are NULL. Decoding continues the sequence that
// kda_model_prefill started; a token costs the same whatever the position.
typedef struct {
    int64_t n_layers; // L
    int64_t pos;      // tokens consumed so far (prefill + decode steps)
    float *S;         // [L, HV, K, V] fp32 recurrent state
    float *conv_q;    // [L, HK, W-1] fp32 or NULL
    float *conv_k;    // [L, HK, W-1] fp32 or NULL
    float *conv_v;    // [L, HVV, W-1] fp32 or NULL
    float *work;      // per-token scratch of kda_model_decode_step (owned)
} KdaDecodeState;

// Allocates a zero state for cfg (derived fields filled). kda_decode_state_free releases it.
void kda_decode_state_init(KdaDecodeState *st, const KdaConfig *cfg);
void kda_decode_state_free(KdaDecodeState *st);

// Runs the chunked (or recurrent, per m->core) forward of ONE sequence ids [T] int32 (T >= 1,
// ids in range) from an empty cache, overwrites st with the cache after its last token and
// writes logits_last [n_vocab] fp32, the logits of position T-1 (only that row of the head is
// computed). Uses (and may grow) the model's activation buffers; invalidates a pending
// backward. st->pos = T.
int kda_model_prefill(KdaModel *m, const int32_t *ids, int64_t T, KdaDecodeState *st,
                      float *logits_last, KdaError *err);
// Feeds one token id at position st->pos: the same ops as the forward on one token, the conv
// from the tails and one step of the recurrence (kda_recurrent_step). Writes logits [n_vocab]
// fp32 of this position; st->pos += 1. Does not touch the model's activation buffers, so a
// prefill with a fresh state may start at any time. A state must not be shared by threads.
int kda_model_decode_step(KdaModel *m, KdaDecodeState *st, int32_t id, float *logits,
                          KdaError *err);

#endif
