// xent.h - the cross-entropy with shifted labels and the LM head fused, on the CPU (kda-model.md
// §5.7, §6.5), fp32. The GPU twin: cuda/xent_cuda.h.
//
// Gradient contract (same as llm.c): the head's weight gradient dWh ACCUMULATES (+=); dn is
// OVERWRITTEN. Tensors are row-major fp32, last index fastest; N is a number of rows (tokens).
#ifndef KDA_CPU_XENT_H
#define KDA_CPU_XENT_H

#include <stdint.h>

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
