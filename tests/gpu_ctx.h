// gpu_ctx.h - the GPU tests' device check and context of their own: one failed check line
// ("no usable CUDA device (GPU tests need one)") when the machine has none, so every GPU test
// that runs without a device fails the same way, whichever file it is in.
#ifndef KDA_TESTS_GPU_CTX_H
#define KDA_TESTS_GPU_CTX_H

#ifdef KDA_HAVE_CUDA

#include "cuda/cuda_common.h" // defines: KdaCudaCtx

// 1 when a CUDA device is usable; else one failed check and 0.
int gpu_test_have(void);

// *ctx initialised on device 0 for a test of its own (the caller frees it with kda_cuda_free):
// 1; else one failed check (no device, or the initialisation's error) and 0.
int gpu_test_ctx(KdaCudaCtx *ctx);

#endif // KDA_HAVE_CUDA
#endif
