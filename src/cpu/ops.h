// ops.h - the non-KDA-core operators of the model on the CPU, fp32, forward and backward
// (kda-model.md §5.1-5.7 and §6.5): RMSNorm, gated RMSNorm, causal depthwise conv + SiLU,
// SiLU, SwiGLU, embedding gather / scatter-add, and the fused linear cross-entropy head.
//
// Gradient contract (same as llm.c): parameter gradients (dw, dE, dW) ACCUMULATE (+=);
// activation gradients OVERWRITE, except where a function says "accumulate" (rmsnorm_bwd's dx,
// whose input is always the residual stream). Tensors are row-major fp32, last index fastest.
// N is a number of rows (tokens, or tokens x heads). Row statistics use double accumulators.
#ifndef KDA_CPU_OPS_H
#define KDA_CPU_OPS_H

#include <stdint.h>

// ---- RMSNorm: y = x · (mean(x²) + eps)^-1/2 ⊙ w -------------------------------------------
// x, y [N, D]; w [D]; rstd [N] saved for backward.
void rmsnorm_fwd(float *y, float *rstd, const float *x, const float *w, int64_t N, int64_t D,
                 float eps);
// dx [N, D] += (accumulate = 1) or = (accumulate = 0) the input gradient; dw [D] += Σ dy ⊙ x̂.
void rmsnorm_bwd(float *dx, float *dw, const float *dy, const float *x, const float *w,
                 const float *rstd, int64_t N, int64_t D, int accumulate);

// ---- gated RMSNorm (o_norm): y = RMSNorm(x; w) ⊙ σ(z), per value head ---------------------
// x, z, y [N, V] with N = tokens·HV (one row per value head); w [V] shared by all heads.
void gnorm_fwd(float *y, float *rstd, const float *x, const float *z, const float *w, int64_t N,
               int64_t V, float eps);
// dx, dz [N, V] overwritten; dw [V] accumulates over tokens and heads.
void gnorm_bwd(float *dx, float *dz, float *dw, const float *dy, const float *x, const float *z,
               const float *w, const float *rstd, int64_t N, int64_t V);

// ---- causal depthwise conv + SiLU (short conv, §5.3 step 2) --------------------------------
// p [B, T, C] input; w [C, W] (torch [C, 1, W]; tap W-1 = current token); c [B, T, C] the
// pre-activation (saved for backward); y [B, T, C] = SiLU(c). History is zero at t = 0 of
// every row b. W >= 1; T < W is fine.
void conv_silu_fwd(float *y, float *c, const float *p, const float *w, int64_t B, int64_t T,
                   int64_t C, int64_t W);
// dp [B, T, C] overwritten; dw [C, W] accumulates.
void conv_silu_bwd(float *dp, float *dw, const float *dy, const float *p, const float *c,
                   const float *w, int64_t B, int64_t T, int64_t C, int64_t W);
// The use_short_conv = false variant: y = SiLU(x), x, y [n]; dx [n] overwritten.
void silu_fwd(float *y, const float *x, int64_t n);
void silu_bwd(float *dx, const float *dy, const float *x, int64_t n);

// ---- SwiGLU: m = SiLU(a) ⊙ b -------------------------------------------------------------
// a, b, m [n]; da, db [n] overwritten.
void swiglu_fwd(float *m, const float *a, const float *b, int64_t n);
void swiglu_bwd(float *da, float *db, const float *dm, const float *a, const float *b, int64_t n);

// ---- embedding ------------------------------------------------------------------------------
// h [N, D] = E [n_vocab, D] rows at ids [N] (ids already validated to be in range).
void embed_fwd(float *h, const float *E, const int32_t *ids, int64_t N, int64_t D);
// dE [n_vocab, D] += scatter of dh [N, D] rows at ids; rows with ids == pad_id are skipped
// (torch's padding_idx; pass -1 for none).
void embed_bwd(float *dE, const float *dh, const int32_t *ids, int64_t N, int64_t D,
               int64_t pad_id);

// ---- cross-entropy with shifted labels and the LM head fused -------------------------------
#define XENT_IGNORE (-100)
// targets [B, T] from labels [B, T]: target[b, t] = labels[b, t+1], XENT_IGNORE at t = T-1.
// Labels equal to XENT_IGNORE stay ignored. Returns the number of valid targets.
int64_t xent_targets(int32_t *targets, const int32_t *labels, int64_t B, int64_t T);
// The head is processed in vocabulary chunks of Vc = work_floats / N columns for all N rows at
// once: each chunk of Wh is read once per pass and its gradient written once, and
// full-vocabulary logits never exist for all rows together. xent_work_floats gives the default
// work size (N·Vc with N·Vc ~ 4M floats, Vc >= 256, Vc <= n_vocab); any size >= N works.
int64_t xent_work_floats(int64_t N, int64_t n_vocab);
// logits = n [N, D] · Wh [n_vocab, D]ᵀ; per-row logsumexp by an online (max, sum) pass in double.
// nll [N] (may be NULL): logsumexp(logits) - logits[target] for valid rows, 0 for ignored rows.
// lse [N] (may be NULL): the per-row logsumexp, kept for xent_bwd.
// logits_out [N, n_vocab] (may be NULL): the logits, for tests. Returns Σ nll in double.
double xent_fwd(float *nll, float *lse, float *logits_out, const float *n, const float *Wh,
                const int32_t *targets, int64_t N, int64_t D, int64_t n_vocab, float *work,
                int64_t work_floats);
// Recomputes the logits chunk by chunk, writes dlogits = (softmax - onehot) · scale in place
// (softmax from the forward's lse; 0 for ignored rows; scale = 1/N_valid for the mean loss) and
// applies the head backward: dn [N, D] overwritten, dWh [n_vocab, D] accumulates.
void xent_bwd(float *dn, float *dWh, const float *n, const float *Wh, const int32_t *targets,
              const float *lse, int64_t N, int64_t D, int64_t n_vocab, float scale, float *work,
              int64_t work_floats);

#endif
