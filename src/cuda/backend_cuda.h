// backend_cuda.h - the trainer's GPU backend (train/trainer.h KdaBackend) over model_cuda.h:
// parameters, gradients and AdamW moments live on the GPU; the trainer only sees the loss, the
// grad norm and, for checkpoints, host copies.
//
// Host views: host_params() copies the whole training state (parameters AND moments) to the host
// and returns the parameters; host_optim() returns the host mirror of the optimizer without a
// copy: its `step` is always current, its m and v are those of the last host_params() call. The
// trainer's checkpoint save and resume both call host_params() (save: before writing; resume:
// before loading into the views, then state_changed() uploads params and moments).
// Errors inside update() (which cannot report) are raised by the next forward_backward().
#ifndef KDA_BACKEND_CUDA_H
#define KDA_BACKEND_CUDA_H

#include "core/error.h"    // defines: KdaError
#include "model/model.h"   // defines: KdaModel
#include "model/optim.h"   // defines: KdaAdamWConfig
#include "train/trainer.h" // defines: KdaBackend

// 1 when this build has CUDA and at least one device is visible.
int kda_cuda_available(void);
// GPU backend on device `device` from an initialized host model; on success the model's contents
// move into the backend (*model is zeroed; its parameter buffer becomes the host staging of
// host_params). Fails with a clear message when the build has no CUDA, no device is visible or
// the config is not supported on the GPU (nothing is taken then).
int kda_backend_cuda_create(KdaBackend *be, KdaModel *model, const KdaAdamWConfig *ocfg, int device,
                            KdaError *err);

// Per-block activation recomputation on a backend made by kda_backend_cuda_create
// (kda_cuda_model_set_recompute). -1 with a message without CUDA.
int kda_backend_cuda_set_recompute(KdaBackend *be, int on, KdaError *err);

#endif
