// runtime.h - the model seam: one interface to a KDA model on the CPU or on a GPU, chosen once
// (kda_runtime_open's device "auto" | "cpu" | "cuda"), used by every consumer (score, eval,
// generate, the trainer; the data-parallel layer dist/dp.h wraps it). The CPU implementation is
// model/model.h (fp32); the GPU one is model/model_cuda.h (bf16 mixed precision, training and
// inference) or model/model_cuda_f32.h (fp32, forward only), with cuda/decode_cuda.h for the
// recurrent decode. Math: kda-model.md §5 (forward), §6 (backward), §3 and §5.8 (inference).
//
// What a runtime offers:
//   inference: forward of a batch (per-position NLL, mean loss), the logits of any position of
//     the last forward, and prefill + O(1)-per-token recurrent decode through a state object;
//   training (after kda_runtime_train_init): forward + backward into the runtime's gradient
//     buffer, grad norm + clip, the AdamW update, host views of parameters and moments for
//     checkpoints, and the hooks the data-parallel layer needs (gradient view, per-layer hook,
//     ZeRO-1 shard).
//
// Ownership: kda_runtime_open takes the parameter table and buffer (as kda_model_init_from).
// Every pointer a runtime returns (config, name, host views, gradient views) is borrowed and
// lives until kda_runtime_close (host views: until the next call that changes them).
//
// Dtypes and layouts: host tensors are fp32 / int32 in the parameter table's dense layout
// (model/params.h), so host buffers are interchangeable between devices. Device views
// (KdaGradView with on_device = 1) are in the GPU's device layout (model_cuda.h).
//
// Numerics: a CPU runtime computes exactly what kda_model_* compute (the same calls: every
// result is bit-identical, tests/test_runtime.c); a GPU runtime computes what model_cuda.h /
// model_cuda_f32.h compute (bf16: within ~2e-3 per sequence of the CPU; fp32: ~1e-6).
//
// Errors: -1 with one line in *err (double-returning functions: NaN with *err set). Nothing is
// printed. Threads: one runtime per thread at a time (not reentrant); a GPU runtime queues work
// on its own stream and waits only where a result comes back to the host.
#ifndef KDA_MODEL_RUNTIME_H
#define KDA_MODEL_RUNTIME_H

#include <stdint.h>

#include "core/error.h"   // defines: KdaError
#include "core/prof.h"    // defines: KdaProf
#include "model/config.h" // defines: KdaConfig
#include "model/model.h"  // defines: KdaCoreMode, KdaDecodeState
#include "model/optim.h"  // defines: KdaAdamWConfig, KdaAdamW
#include "model/params.h" // defines: KdaParamTable
#include "model/zero1.h"  // defines: KdaShard

typedef struct KdaRuntime KdaRuntime;
typedef struct KdaRtState KdaRtState; // one sequence's recurrent cache (prefill + decode)

typedef enum { KDA_DEVICE_CPU = 0, KDA_DEVICE_CUDA = 1 } KdaDeviceKind;

// The one device choice of the tree. flag "auto" | "cpu" | "cuda" (NULL = "auto") -> *kind.
// auto = cuda when the build has CUDA and a device is visible, else cpu. -1 on another value, or
// on "cuda" without CUDA support or a visible device (one line saying which).
int kda_runtime_pick(const char *flag, KdaDeviceKind *kind, KdaError *err);

typedef struct {
    const char *device;    // "auto" | "cpu" | "cuda" (NULL = "auto")
    const char *precision; // "bf16" | "fp32" | NULL: the device's default (GPU bf16, CPU fp32).
                           // The CPU computes fp32 only: "bf16" there fails. GPU "fp32" is the
                           // forward-only model (no decode, no training).
    KdaCoreMode core;      // the CPU's KDA core (the GPU runs its chunked kernels)
    int gpu;               // CUDA device index (device cuda)
    int train;             // 1: a training runtime (bf16 on the GPU; kda_runtime_train_init next)
} KdaRuntimeOpts;

// Opens the model cfg (derived fields filled) with parameters params [table->total_numel] fp32
// (kda_malloc'ed) on the device opts->device picks. On success the runtime owns *table's rows
// and params (*table is zeroed; a GPU runtime keeps params as its host staging buffer). When
// "auto" picked the GPU and the GPU model cannot be created (e.g. a config its kernels do not
// take), the CPU runtime opens instead and kda_runtime_note says why; an explicit "cuda" fails.
// On failure nothing is taken.
int kda_runtime_open(KdaRuntime **rt, const KdaConfig *cfg, KdaParamTable *table, float *params,
                     const KdaRuntimeOpts *opts, KdaError *err);
void kda_runtime_close(KdaRuntime *rt); // accepts NULL

// ---- what it is -------------------------------------------------------------------------------
const KdaConfig *kda_runtime_config(const KdaRuntime *rt);    // derived fields filled
const KdaParamTable *kda_runtime_table(const KdaRuntime *rt); // the dense host layout
KdaDeviceKind kda_runtime_device(const KdaRuntime *rt);       // where the math runs
const char *kda_runtime_name(const KdaRuntime *rt);           // "cpu", "cuda:0 (NAME)"
const char *kda_runtime_precision(const KdaRuntime *rt);      // "fp32" | "bf16"
const char *kda_runtime_note(const KdaRuntime *rt);           // why auto fell back ("" if not)
int kda_runtime_can_decode(const KdaRuntime *rt);             // 1: prefill/decode available

// ---- inference ---------------------------------------------------------------------------------

// Forward of a batch (kda_model_forward's contract): ids [B, T] int32 in [0, n_vocab); labels
// [B, T] int32 or NULL (= ids), shifted inside (target[b,t] = labels[b,t+1]), -100 ignored;
// nll [B, T] fp32 host or NULL (per-position NLL, 0 where ignored; overwritten); loss (host) or
// NULL: mean NLL over the valid targets. Keeps what backward and logits need.
int kda_runtime_forward(KdaRuntime *rt, const int32_t *ids, const int32_t *labels, int64_t B,
                        int64_t T, float *nll, float *loss, KdaError *err);
// logits [n_vocab] fp32 host (overwritten) of position (b, t) of the last forward: the final
// norm's row times the LM head. -1 without a forward or outside its [B, T].
int kda_runtime_logits(KdaRuntime *rt, int64_t b, int64_t t, float *logits, KdaError *err);

// A recurrent cache for one sequence on the runtime's device (CPU: KdaDecodeState; GPU: the
// state S [L, HV, K, V] fp32, the conv tails [L, C, W-1] fp32 and a token's scratch, all in
// device memory). -1 when the runtime cannot decode (kda_runtime_can_decode 0).
int kda_runtime_state_new(KdaRuntime *rt, KdaRtState **st, KdaError *err);
void kda_runtime_state_free(KdaRuntime *rt, KdaRtState *st); // accepts NULL
// dst = src (same runtime): the state, the tails and the position.
int kda_runtime_state_copy(KdaRuntime *rt, KdaRtState *dst, const KdaRtState *src, KdaError *err);
int64_t kda_runtime_state_pos(const KdaRtState *st); // tokens consumed so far
// Prefill (kda_model_prefill's contract): ONE sequence ids [T] int32 (T >= 1) from an empty
// cache; st is overwritten with the cache after its last token (S, the last W-1 conv inputs);
// logits_last [n_vocab] fp32 host = the logits of position T-1. Invalidates a pending backward.
int kda_runtime_prefill(KdaRuntime *rt, KdaRtState *st, const int32_t *ids, int64_t T,
                        float *logits_last, KdaError *err);
// One token id at position pos(st): the recurrence and conv advance by one (O(1) in the
// position); logits [n_vocab] fp32 host of this position.
int kda_runtime_decode(KdaRuntime *rt, KdaRtState *st, int32_t id, float *logits, KdaError *err);

// ---- memory plan (kda info) ---------------------------------------------------------------------

// What a training runtime on `device` allocates for micro-batches of [B, T], counted by the
// implementation's own layout code, without a device (bytes; one process, no ZeRO-1 shard):
//   CPU: fp32 parameters, gradient, the second micro-batch's gradient scratch (n_micro > 1), AdamW
//        m and v, model.c's activation arena for B·T tokens and its ids/targets;
//   GPU: the same fp32 state plus the bf16 working copy in the device layout, model_cuda.c's
//        activation arena (recompute: the block inputs and one block's activations), the KDA
//        core's kept states, the scalars and the cuBLASLt workspace, for a device with the
//        H200's shared memory per block (it picks the core's chunk); not the CUDA context.
//        Needs a CUDA build (-1 with a message otherwise).
typedef struct {
    double params, grads, moments; // fp32 parameters, gradient (+ scratch on the CPU), m and v
    double copy;                   // GPU: bf16 working copy (0 on the CPU)
    double acts;                   // the activation arena (+ kept core states on the GPU)
    double other;                  // CPU: ids and targets; GPU: scalars, cuBLASLt workspace
    double total;
} KdaMemoryPlan;
int kda_runtime_memory_plan(KdaDeviceKind device, const KdaConfig *cfg, int64_t B, int64_t T,
                            int n_micro, int recompute, KdaMemoryPlan *plan, KdaError *err);

// ---- training ----------------------------------------------------------------------------------

// Gradients (zero) and an AdamW optimizer with cfg (moments zero, step 0). Once, before the first
// training call. The GPU runtime must have been opened with opts.train = 1 (bf16 model).
int kda_runtime_train_init(KdaRuntime *rt, const KdaAdamWConfig *cfg, KdaError *err);
int kda_runtime_zero_grads(KdaRuntime *rt, KdaError *err);
// One micro-batch ids [B, T] int32 (labels = ids): *loss = its mean NLL; backward != 0 adds its
// gradient to the runtime's gradient buffer (ACCUMULATES: each micro-batch's gradient is computed
// on its own and then added, so a step's gradient is the plain sum over its micro-batches in
// order, on any number of ranks). The GPU runs the fused classifier (KDA_CLASSIFIER=legacy: the
// separate head; model_cuda.h).
int kda_runtime_train_step(KdaRuntime *rt, const int32_t *ids, int64_t B, int64_t T, int backward,
                           float *loss, KdaError *err);
// Backward of the last forward's mean loss into the gradient buffer (ACCUMULATES directly).
int kda_runtime_backward(KdaRuntime *rt, KdaError *err);
// gradient *= scale, returns its global L2 norm (non-finite when an element is) and clips to
// max_norm (<= 0: none; a non-finite norm leaves it unclipped). NaN with *err set on a failure.
double kda_runtime_finish_grads(KdaRuntime *rt, double scale, double max_norm, KdaError *err);
// AdamW update step+1 with learning rate lr (model/optim.h's arithmetic, on the shard only after
// kda_runtime_shard).
int kda_runtime_update(KdaRuntime *rt, double lr, KdaError *err);
int64_t kda_runtime_step(const KdaRuntime *rt); // updates applied (the optimizer's step)
// 1 when every parameter is finite, 0 when one is not, -1 when the runtime has no cheap check
// (the GPU: a non-finite weight is then caught when a checkpoint refuses it).
int kda_runtime_params_finite(KdaRuntime *rt);

// Host views for checkpoints. host_params: the parameters [total_numel] fp32 dense (a GPU copies
// parameters and, unless sharded, moments to the host first). host_optim: the optimizer (cfg,
// step, m and v [total_numel] fp32 dense as of the last host_params; ZeRO-1: m and v NULL until
// kda_runtime_optim_full). After writing into them (a resume), call state_changed (uploads on a
// GPU; ZeRO-1 takes this rank's shard of the full moments and releases them).
float *kda_runtime_host_params(KdaRuntime *rt, KdaError *err);
KdaAdamW *kda_runtime_host_optim(KdaRuntime *rt);
int kda_runtime_state_changed(KdaRuntime *rt, KdaError *err);
// ZeRO-1: the host optimizer with full-size m and v [total_numel] fp32 allocated (the target of
// a moments gather; released by state_changed or optim_release). Without a shard:
// kda_runtime_host_optim.
KdaAdamW *kda_runtime_optim_full(KdaRuntime *rt);
// After a checkpoint has read the gathered moments: the CPU frees its full-size copy; nothing is
// uploaded (the device's parameters and shard moments are current; a GPU rank other than 0 has no
// current host parameters then, so state_changed there would upload stale ones).
void kda_runtime_optim_release(KdaRuntime *rt);

int kda_runtime_set_recompute(KdaRuntime *rt, int on, KdaError *err); // GPU only (-1 on the CPU)
// Device memory in use and total (MiB); -1 on the CPU or on a device error.
int kda_runtime_device_memory(KdaRuntime *rt, double *used_mib, double *total_mib);
double kda_runtime_peak_flops(const KdaRuntime *rt); // dense bf16 peak FLOP/s (0: unknown, CPU)
// Per-op profile (core/prof.h): p non-NULL starts timing every op into p (waits for queued work
// first); p NULL stops, adds the device timings and marks the end.
int kda_runtime_profile(KdaRuntime *rt, KdaProf *p, KdaError *err);

// ---- data-parallel hooks (dist/dp.h) -----------------------------------------------------------

typedef struct {
    float *g;      // the gradient buffer [n] fp32: host (dense layout) or device (device layout)
    int64_t n;     // its elements (ZeRO-1: the shard plan's n)
    void *stream;  // the GPU runtime's cudaStream_t (NULL on the CPU)
    int on_device; // 1: g is device memory (collectives through NCCL)
    int64_t align; // the shard alignment the layout wants (1 CPU, 128 GPU)
} KdaGradView;
void kda_runtime_grad_view(KdaRuntime *rt, KdaGradView *v);
// [*lo, *hi) of layer `layer`'s rows in the gradient view; -1 when other rows lie inside it.
int kda_runtime_layer_range(KdaRuntime *rt, int64_t layer, int64_t *lo, int64_t *hi);
// fn(user, l) runs on the caller's thread during a backward, right after layer l's rows of the
// gradient buffer are final (CPU: added into the step's gradient; GPU: queued on the stream, so
// work ordered after the stream's current point sees them), l = L-1 down to 0. NULL: none.
void kda_runtime_set_layer_hook(KdaRuntime *rt, void (*fn)(void *user, int64_t layer), void *user);
// ZeRO-1: from now on AdamW (and on a GPU the grad norm, through the reducer) covers the shard
// [s->lo, s->hi) of the gradient view's layout; moments are kept for the shard only.
int kda_runtime_shard(KdaRuntime *rt, const KdaShard *s, KdaError *err);
// The buffers of the shard's collectives (borrowed): p, g [padded] (the view's layout; CPU: the
// dense [n] buffers), m1, m2 the shard's moments [chunk] (CPU: [hi - lo] with hi clipped to n).
void kda_runtime_shard_view(KdaRuntime *rt, float **p, float **g, float **m1, float **m2);
// GPU ZeRO-1: fn(user, sumsq, err) turns this shard's Σ g² into the sum over the ranks inside
// finish_grads. No-op on the CPU (its gradient is complete on every rank).
void kda_runtime_set_norm_reduce(KdaRuntime *rt,
                                 int (*fn)(void *user, double *sumsq, KdaError *err), void *user);
// After the caller all-gathered the updated parameters into p: the GPU refreshes its bf16 copy.
int kda_runtime_params_gathered(KdaRuntime *rt, KdaError *err);
// dense host [total_numel] fp32 = buf, a buffer in the view's layout (GPU: device memory).
int kda_runtime_unpack(KdaRuntime *rt, float *dense, const float *buf, KdaError *err);

#endif
