// gpu_step.h - one training step of a GPU model for the GPU tests that hold two models to the
// same bits (test_gpu_model.c's switch tests, test_gpu_pdl.c): the schedule of a step, the step
// itself, so every such test trains the same way, and the count of elements whose bits differ.
#ifndef KDA_TESTS_GPU_STEP_H
#define KDA_TESTS_GPU_STEP_H

#ifdef KDA_HAVE_CUDA

#include <stdint.h>

#include "core/error.h"       // defines: KdaError
#include "model/model_cuda.h" // defines: KdaCudaModel

// Per step two micro-batches (gradient accumulation, as the trainer runs them) of B = 2 rows of
// T[i] tokens; ignore[i] != 0 marks some of micro-batch i's labels ignored (another count of
// valid targets, so another graph key).
typedef struct {
    int64_t T[2];
    int ignore[2];
} GpuStep;

// One training step of dm over sched: zeroed grads, the two forward_backwards (fused
// classifier), the mean loss into *loss, the dense gradients into g [n params] fp32 (overwrite),
// finish (scale 1/2, clip 1.0), AdamW step number s (lr 1e-3; betas 0.9, 0.95; wd 0.1), the
// parameters into p [n params] fp32 (overwrite). The batches depend on s and the micro-batch
// only, so two models fed the same schedule see the same data. 0, or -1 with *err set.
int gpu_train_step(KdaCudaModel *dm, const GpuStep *sched, int64_t s, float *loss, float *g,
                   float *p, KdaError *err);

// Elements of a [n] and b [n] (fp32) whose bits differ.
int64_t gpu_bits_differ(const float *a, const float *b, int64_t n);

// Trains dm[0] and dm[1] (models of the same parameters) side by side over sched [n_steps]
// (steps 1, 2, ...): every step's loss, gradients and updated parameters must be bit-identical.
// g[i], p[i] [n params] fp32: dm[i]'s scratch (overwritten). A failed step or a step whose bits
// differ is one failed check naming `what` and the step; the steps after it do not run. Returns
// 0 when every step's bits are equal, 1 when a step's differ, -1 when a step failed to run (its
// error in the check line).
int gpu_train_pair(KdaCudaModel *dm[2], const GpuStep *sched, int n_steps, float *g[2], float *p[2],
                   int64_t n, const char *what);

#endif // KDA_HAVE_CUDA
#endif
