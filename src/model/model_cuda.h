// model_cuda.h - the KDA language model on one GPU: whole-model forward, loss, backward and the
// AdamW update with bf16 mixed precision (the twin of model/model.h + model/optim.h; math of
// kda-model.md §5-6, dtypes of §8):
//   * fp32 master parameters, fp32 gradients, fp32 Adam moments, a bf16 working copy of the
//     parameters (the GEMM operands), refreshed by every AdamW step;
//   * residual stream fp32 (sublayer outputs are added by fp32-output GEMMs, beta = 1); RMSNorm
//     math fp32, outputs bf16 (they only feed GEMMs); every Linear output bf16 (fp32 accumulate);
//     conv + SiLU, L2 norm, gated norm, SwiGLU: fp32 math, bf16 out; gate, its cumsum, β and the
//     KDA state fp32; LM head logits bf16 per vocabulary chunk, logsumexp and loss fp32;
//   * weight gradients fp32-accumulated by the GEMMs (more accurate than FLA's bf16 rounding,
//     allowed by §8); activation gradients bf16 where they feed GEMMs, fp32 through norms.
// Supported configs: use_short_conv, the unbounded gate (no lower_bound); GVA (HV > H) wherever
// the fast KDA kernels fit the head dims (cuda/kda_fast.h; all of configs/). Others fail at create
// / backward with one clear message. The KDA core runs with chunk kda_fast_chunk (32 here).
//
// Device layout: the five buffers (params, grads, m, v fp32; bf16 copy) share one layout: the
// parameter table's rows in table order, each row starting at a multiple of 128 elements (so every
// weight is 256-byte aligned for cuBLASLt). Host transfers take and give the table's dense layout
// (model/params.h), so host buffers are interchangeable with the CPU model's. ZeRO-1
// (kda_cuda_model_shard): params and grads grow to the padded layout of the shard plan, the
// moments hold one shard only.
//
// Synchronization: calls queue work on the model's stream and return; only the functions that
// return values to the host (loss, nll, norm, get_*) wait for it. The ids of a forward are copied
// before it returns, so the caller may reuse the buffer.
//
// Errors: -1 with the message in *err (the first CUDA failure, "file:line: call: reason").
// The whole header is empty without KDA_HAVE_CUDA.
#ifndef KDA_MODEL_CUDA_H
#define KDA_MODEL_CUDA_H

#include <stdint.h>

#include "core/error.h"   // defines: KdaError
#include "core/prof.h"    // defines: KdaProf
#include "model/config.h" // defines: KdaConfig
#include "model/params.h" // defines: KdaParamTable
#include "model/optim.h"  // defines: KdaAdamWConfig
#include "model/zero1.h"  // defines: KdaShard (ZeRO-1)

#ifdef KDA_HAVE_CUDA

typedef struct KdaCudaModel KdaCudaModel;

// Device layout (the five parameter-sized buffers): dst's row offsets for table t, every row
// starting on a 128-element boundary. flags & KDA_LAYOUT_INPROJ puts each block's q_proj, k_proj,
// v_proj, f_proj.0, g_proj.0, b_proj weights back to back in that order (one [HK + HK + HVV + V +
// V + HV, D] matrix for the fused input GEMM); flags & KDA_LAYOUT_GATEUP puts gate_proj and
// up_proj back to back (one [2I, D] matrix: the MLP's input GEMM); each wherever no padding
// would fall between the parts (all but the last a multiple of 128 elements). *fused = the
// flags whose group every block got (flags = 1 is the former inproj = 1). Returns the elements
// of the layout. Host only (no device needed); checkpoints never see this layout.
#define KDA_INPROJ_PARTS  6
#define KDA_LAYOUT_INPROJ 1
#define KDA_LAYOUT_GATEUP 2
int64_t kda_cuda_device_offsets(KdaParamTable *dst, const KdaParamTable *t, int flags, int *fused);

// 0 when the GPU model supports cfg, else -1 with the one-line reason (the checks of create; also
// used by the fp32 scoring model, model_cuda_f32.h). Host only.
int kda_cuda_model_check_config(const KdaConfig *cfg, KdaError *err);
// The checks every GPU model's create makes first: kda_cuda_model_check_config, then that
// device `device` is visible. 0, or -1 with the one-line reason. Host only.
int kda_cuda_model_check(const KdaConfig *cfg, int device, KdaError *err);

// Device `device`'s context, the five parameter-sized buffers (grads and moments zero) and a
// copy of cfg and table; params [t->total_numel] fp32 host, dense table layout.
int kda_cuda_model_create(KdaCudaModel **out, const KdaConfig *cfg, const KdaParamTable *t,
                          const float *params, int device, KdaError *err);
void kda_cuda_model_free(KdaCudaModel *m); // accepts NULL

// Forward of a batch (contract of kda_model_forward): ids [B, T] int32 in [0, n_vocab); labels
// [B, T] or NULL (= ids), shifted inside, -100 ignored. nll [B, T] fp32 host or NULL (per-position
// NLL, 0 where ignored); loss (host) or NULL. With both NULL nothing waits for the GPU: read the
// loss later with kda_cuda_model_loss. Activations are kept for kda_cuda_model_backward and grow
// on demand (memory ~ B·T).
int kda_cuda_model_forward(KdaCudaModel *m, const int32_t *ids, const int32_t *labels, int64_t B,
                           int64_t T, float *nll, float *loss, KdaError *err);
// Mean NLL of the last forward (waits for it).
int kda_cuda_model_loss(KdaCudaModel *m, float *loss, KdaError *err);
// Backward of the last forward's mean loss; ACCUMULATES into the device gradients. -1 without a
// preceding forward, or when HV != H.
int kda_cuda_model_backward(KdaCudaModel *m, KdaError *err);

// Forward AND backward of one batch with the fused classifier (xent_cuda.h
// kda_cuda_cls_fused): the same result as kda_cuda_model_forward + kda_cuda_model_backward
// (gradients ACCUMULATE; nll / loss as there), but the head's logits are computed once per token
// chunk in bf16 and turned into dlogits in place (no logits recompute, no fp32 logits). The
// loss then comes from bf16 logits (the legacy forward's are fp32): the difference is bf16
// rounding noise, xent_cuda.h. Eval and scoring keep kda_cuda_model_forward.
//
// CUDA graphs (the default since 2026-12-03; the environment KDA_GRAPH=0 at create turns them off):
// the device work after the ids upload is captured once per key (B, T, the count of valid targets)
// and replayed: a key's first call runs eagerly (warm-up), its second captures and launches, later
// ones launch (up to 4 keys held; a moved buffer or a changed switch drops them all). The same
// kernels in the same order: the results are the eager path's bits. Eager whatever the switch
// while a profile runs or a data-parallel hook (layer hook, norm reducer, ZeRO-1 shard) is set;
// a capture or launch that fails leaves its key eager with one warning line (never an error).
int kda_cuda_model_forward_backward(KdaCudaModel *m, const int32_t *ids, const int32_t *labels,
                                    int64_t B, int64_t T, float *nll, float *loss, KdaError *err);
// forward_backward's graphs so far: captured, launches of a held graph after the one that
// followed its capture, captures or launches that failed (their keys run eagerly). All 0 with
// KDA_GRAPH off. Host only.
void kda_cuda_model_graph_stats(const KdaCudaModel *m, int64_t *captures, int64_t *replays,
                                int64_t *failures);
// Bytes of the fused classifier's logits chunk (default 2 GiB: 4 chunks of 8192 tokens at
// B·T = 32768 and a 128,256 vocabulary; chunks share the legacy head's workspace). 0 drops the
// workspace (forward_backward then fails). Frees the activation arena like set_recompute.
int kda_cuda_model_set_cls_budget(KdaCudaModel *m, size_t bytes, KdaError *err);
// The fused classifier's row kernel (xent_cuda.h KDA_CLS_ROW_CLUSTER, the default,
// KDA_CLS_ROW_BLOCK, KDA_CLS_ROW_PIPE or KDA_CLS_ROW_TRIM, which the environment KDA_CLS_ROW=1, =2
// or =3 selects at create); other values are ignored. Takes effect at the next forward_backward.
void kda_cuda_model_set_cls_row(KdaCudaModel *m, int kernel);

// Per-block activation recomputation (off by default): keep only each block's input [N, D] fp32
// per layer and one block's other activations (shared by all blocks); the backward re-runs each
// block's forward (except the last's, still in place) just before that block's backward. Costs
// about one more forward of the blocks (~1/3 of a step's block compute); activation memory per
// token goes from ~(L x 48 KB) to ~(L x 4 KB + 48 KB) at the 300M shape. The recomputed
// activations are bit-identical (same deterministic kernels on the same inputs), so gradients do
// not change. Switching frees the activation arena; the next forward lays it out again.
int kda_cuda_model_set_recompute(KdaCudaModel *m, int on, KdaError *err);

// Fused elementwise kernels (on by default; the environment KDA_FUSE=0 at create turns them off,
// the unfused kernels being their oracle and the "before" of docs/perf-log.md): conv + SiLU +
// L2 norm of q and k in one kernel each way (when kda_cuda_conv_l2_fusable(head_dim)), the gated
// out-norm with the g_proj.1 bias folded in (when kda_cuda_gnorm_fusable(head_v_dim)), and the
// RMSNorm backward writing the bf16 dh that the next dX/dW GEMMs read (no separate cast). Same
// math; results differ from the unfused path by bf16 roundings only (the fused kernels keep the
// conv output and z + bias in fp32). Switching frees the activation arena like set_recompute.
int kda_cuda_model_set_fuse(KdaCudaModel *m, int on, KdaError *err);
// Which fusions run: bit 0 conv + L2, bit 1 gated norm + bias, bit 2 bf16 dh (0: none).
int kda_cuda_model_fused(const KdaCudaModel *m);

// Per-op profile (core/prof.h, kda train --profile). p non-NULL: waits for the stream, sets p's
// floor rates when unset (the H200's measured GEMM and copy rates), marks its start and from
// then on records a CUDA event pair around every op the model queues (forward, backward, zero
// grads, finish grads, AdamW, the ids upload and the loss / norm reads). p NULL: waits, marks
// the end of the running profile, adds each op's event time to it and stops. p must live until
// then. Costs two event records per op while on; nothing when off.
int kda_cuda_model_profile(KdaCudaModel *m, KdaProf *p, KdaError *err);

// ---- training state ------------------------------------------------------------------------
int kda_cuda_model_zero_grads(KdaCudaModel *m, KdaError *err);
// grads *= scale (skipped when scale == 1), returns the global L2 norm (waits; NaN on error with
// *err set, or when a gradient is non-finite). max_norm > 0 and a finite norm: the next
// kda_cuda_model_adamw multiplies the gradients by min(1, max_norm / (norm + 1e-6)) (torch
// clip_grad_norm_, the CPU's kda_grad_clip) as it reads them.
double kda_cuda_model_finish_grads(KdaCudaModel *m, double scale, double max_norm, KdaError *err);
// AdamW update number `step` (1-based) with lr on every row (decay per the table's weight_decay
// flag), model/optim.h's arithmetic; refreshes the bf16 copy. Uses the clip factor of the last
// finish_grads (1 if none) once.
int kda_cuda_model_adamw(KdaCudaModel *m, const KdaAdamWConfig *c, int64_t step, double lr,
                         KdaError *err);

// Host <-> device copies in the table's dense layout ([t->total_numel] fp32 each); they wait.
// put_params also refreshes the bf16 copy. NULL pointers are skipped (moments).
int kda_cuda_model_get_params(KdaCudaModel *m, float *params, KdaError *err);
int kda_cuda_model_put_params(KdaCudaModel *m, const float *params, KdaError *err);
int kda_cuda_model_get_grads(KdaCudaModel *m, float *grads, KdaError *err);
int kda_cuda_model_put_grads(KdaCudaModel *m, const float *grads, KdaError *err);
int kda_cuda_model_get_moments(KdaCudaModel *m, float *mom1, float *mom2, KdaError *err);
int kda_cuda_model_put_moments(KdaCudaModel *m, const float *mom1, const float *mom2,
                               KdaError *err);

// ---- data parallelism ----------------------------------------------------------------------
// The device gradient buffer g [*n = dtotal] fp32 (device layout, padding zero) and the model's
// stream (a cudaStream_t), for the gradient all-reduce of backend_cuda.c.
void kda_cuda_model_grad_view(KdaCudaModel *m, float **d_g, int64_t *n, void **stream);
// The device range [*lo, *hi) of layer `layer`'s rows (their padding included); -1 when other
// rows lie inside it (then the layer cannot be reduced on its own).
int kda_cuda_model_layer_range(const KdaCudaModel *m, int64_t layer, int64_t *lo, int64_t *hi);
// fn(user, l) is called on the host right after block l's backward is queued on the model's
// stream (l = L-1 down to 0): an event recorded then completes when l's weight gradients do.
// NULL: none. The embedding (and a tied LM head) and the final norm are finished only when the
// whole backward is.
void kda_cuda_model_set_layer_hook(KdaCudaModel *m, void (*fn)(void *user, int64_t layer),
                                   void *user);

// ZeRO-1 (use_distributed_optimizer): from now on AdamW, the gradient scaling and the grad norm
// cover only the shard [s->lo, s->hi) of the device layout (clipped to its end), and the moments
// are held for that shard only. s: kda_zero1_plan over the n of kda_cuda_model_grad_view (the
// device layout), align 128. p and g grow to s->padded elements (the collectives' layout;
// parameters kept, padding and gradients zero), m1 and m2 shrink to s->chunk (the shard's part
// kept). Call before the first forward (device pointers change). After it:
//   get_moments fails (gather the shards into the gradient buffer, then kda_cuda_model_unpack);
//   put_moments uploads only the shard's part of the dense host moments;
//   finish_grads calls the norm reducer (set_norm_reduce) between the shard's Σ g² and the norm.
// -1 with a message when s does not fit the layout or on a device failure (nothing changed).
int kda_cuda_model_shard(KdaCudaModel *m, const KdaShard *s, KdaError *err);
// The device buffers for the ZeRO-1 collectives (borrowed): p, g [s->padded] fp32 in the device
// layout, m1, m2 [s->chunk] fp32 (element i is device element s->lo + i).
void kda_cuda_model_shard_view(KdaCudaModel *m, float **d_p, float **d_g, float **d_m1,
                               float **d_m2);
// fn(user, sumsq, err): *sumsq (host) is this rank's Σ g² of its shard on entry and must be the
// sum over every rank's on return (an all-reduce); -1 fails finish_grads (NaN, err set). NULL:
// none (the norm of the local layout, as without data parallelism).
void kda_cuda_model_set_norm_reduce(KdaCudaModel *m,
                                    int (*fn)(void *user, double *sumsq, KdaError *err),
                                    void *user);
// After the caller all-gathered the updated parameters into p: the bf16 working copy outside
// the shard is refreshed (AdamW refreshed the shard's). Queued on the model's stream.
int kda_cuda_model_params_gathered(KdaCudaModel *m, KdaError *err);
// dense host [total_numel] fp32 = d_buf, a device buffer in the device layout ([>= n of
// grad_view] fp32; e.g. gathered moments); waits.
int kda_cuda_model_unpack(KdaCudaModel *m, float *dense, const float *d_buf, KdaError *err);

// 1 when the blocks run the fused input projection (kda_cuda_device_offsets; the default,
// KDA_INPROJ=0 at create turns it off; 0 when the sizes do not allow it).
int kda_cuda_model_inproj(const KdaCudaModel *m);
// 1 when, with the fused input projection, the beta and conv backwards write their dY straight
// into the fused dY buffer's columns (row stride: kda_cuda_*_bwd_ld) instead of a contiguous
// buffer and a column copy. The default since 2026-12-04 (environment KDA_DY_INPLACE=0 at create
// keeps the copies): the strided outputs match (gpu_bwd_strided_outputs) and the bits are the
// copies' (gpu_model_conv_qkv_bit_identical); alone it measured -0.2..-0.9 ms a mb-16 step,
// inside the noise, and with three other switches it beat every default run at mb 32 and 64
// (docs/log/gpu-2026-12-04.md §3).
int kda_cuda_model_dy_inplace(const KdaCudaModel *m);
// 1 when the MLP runs gate|up as one GEMM each way (KDA_LAYOUT_GATEUP; the default, KDA_GATEUP=0
// at create turns it off; 0 when the sizes do not allow it).
int kda_cuda_model_gateup(const KdaCudaModel *m);
// 1 when each block runs the gate and beta as one kernel each way (gate v2, the context's
// gate_version 2: the default; KDA_GATE_V=1 at create keeps v1's two launches each way).
int kda_cuda_model_gate_beta_fused(const KdaCudaModel *m);
// 1 when the MLP keeps no SwiGLU product per layer (with gate|up, the default since 2026-12-03;
// environment KDA_MLP_RECOMPUTE=0 at create keeps one per layer): one shared [N, I] buffer, written
// by the forward for down_proj and again, bit for bit, by the backward's SwiGLU kernel for
// down_proj's weight gradient. Saves (L - 1)·N·I·2 bytes (3 GiB at KDA-300M, mb 16); costs one
// N·I·2-byte write per layer in the backward.
int kda_cuda_model_mlp_recompute(const KdaCudaModel *m);
// 1 when the model's kernels launch with programmatic dependent launch (the context's pdl:
// environment KDA_PDL=1 at create, on compute capability >= 9.0; cuda_common.h).
int kda_cuda_model_pdl(const KdaCudaModel *m);
// How each block runs its q, k and v convs (environment KDA_CONV_QKV at create, with the fused
// conv + L2 kernels): 0 three launches each way (KDA_CONV_QKV=0), 1 one launch forward
// (kda_cuda_conv_qkv_fwd; the default since 2026-12-04), 2 one launch each way (+
// kda_cuda_conv_qkv_bwd; KDA_CONV_QKV=2), the same bits as the three launches (the backward keeps
// three where the fused dY's columns or the scratch buffers do not allow it, and the launchers
// where their kernels do not). bench_gpu on an H200 (2026-12-03): forward 0.100 -> 0.088 ms a
// layer, backward 0.191 -> 0.223 (its v blocks at 2 per SM instead of 3).
int kda_cuda_model_conv_qkv(const KdaCudaModel *m);

// The model's config (derived fields filled) and device name, for logs.
const KdaConfig *kda_cuda_model_config(const KdaCudaModel *m);
const char *kda_cuda_model_device_name(const KdaCudaModel *m);

// ---- inference (eval / generate) ---------------------------------------------------------------
// Logits [n_vocab] fp32 host of position (b, t) of the last forward: that row of the final norm
// output (bf16) times the LM head (bf16 operands, fp32 accumulate, as the forward's xent); waits.
// -1 without a preceding forward or outside its [B, T].
int kda_cuda_model_logits(KdaCudaModel *m, int64_t b, int64_t t, float *logits, KdaError *err);

// ---- memory plan (kda info) ---------------------------------------------------------------
// What kda_cuda_model_create plus a training step of [B, T] allocate on the device, counted by the
// same code (configure_, layout_, the kept-state size; the environment's switches as create reads
// them) without a device: smem_optin is the device's opt-in shared memory per block (it picks the
// core's chunk and kernels; the H200's is 232448 bytes). Bytes; one process (no ZeRO-1 shard).
typedef struct {
    int64_t dtotal;     // elements of each parameter-sized buffer (the device layout)
    double state_bytes; // fp32 params, grads, Adam m and v: 4 x 4 x dtotal
    double copy_bytes;  // the bf16 working copy: 2 x dtotal
    double arena_bytes; // the activation arena for B·T tokens (recompute: one block's + inputs)
    double keep_bytes;  // the KDA core's kept h and Δ (per layer; one set with recompute)
    double fixed_bytes; // device scalars and the cuBLASLt workspace (not the CUDA context)
} KdaCudaPlan;
int kda_cuda_model_plan(const KdaConfig *cfg, const KdaParamTable *t, int64_t B, int64_t T,
                        int recompute, size_t smem_optin, KdaCudaPlan *out, KdaError *err);
// Bytes of m's activation arena and kept states now (what the plan's arena + keep count).
size_t kda_cuda_model_arena_bytes(const KdaCudaModel *m);

// ---- recurrent decode (one sequence; cuda/decode_cuda.h) -----------------------------------
// A decode cache in device memory: the state S [L, HV, K, V] fp32, the conv tails [L, HK | HK |
// HVV, W-1] fp32 and one token's scratch (a few vectors and the logits). Zero at create. The
// second and later steps replay the step as one CUDA graph (captured once per cache; the same
// kernels on the same buffers, so the same bits; KDA_DECODE_GRAPH=0 at create: every step eager);
// a capture that fails falls back to the eager step.
typedef struct KdaCudaDecode KdaCudaDecode;
int kda_cuda_decode_create(KdaCudaModel *m, KdaCudaDecode **st, KdaError *err);
void kda_cuda_decode_free(KdaCudaDecode *st);         // accepts NULL
int kda_cuda_decode_graphed(const KdaCudaDecode *st); // 1 when its steps replay a CUDA graph
// dst's cache = src's (queued on m's stream).
int kda_cuda_decode_copy(KdaCudaModel *m, KdaCudaDecode *dst, const KdaCudaDecode *src,
                         KdaError *err);
// The bf16 forward of ids [T] int32 (one sequence, T >= 1) leaving each block's final KDA state
// (the chunk kernels' final_state) and the last W-1 conv inputs of each projection in st, and
// logits [n_vocab] fp32 host of position T-1 (as kda_cuda_model_logits computes a row); waits.
// Uses the activation arena like a forward; no backward may follow it.
int kda_cuda_model_prefill(KdaCudaModel *m, KdaCudaDecode *st, const int32_t *ids, int64_t T,
                           float *logits, KdaError *err);
// One token id: embedding, per block the forward's ops on one token (N = 1: RMSNorm, projection
// GEMMs, conv step, gate, β, one delta-rule step on st's state, gated norm, residual GEMMs,
// SwiGLU), final norm and head; logits [n_vocab] fp32 host; waits. O(1) in the position.
int kda_cuda_model_decode(KdaCudaModel *m, KdaCudaDecode *st, int32_t id, float *logits,
                          KdaError *err);

#endif // KDA_HAVE_CUDA
#endif
