// gpu_ctx.h - the GPU tests' device check and context of their own: one failed check line
// ("no usable CUDA device (GPU tests need one)") when the machine has none, so every GPU test
// that runs without a device fails the same way, whichever file it is in; and the launch-time
// switches a test sets for a while and puts back as they were.
#ifndef KDA_TESTS_GPU_CTX_H
#define KDA_TESTS_GPU_CTX_H

#ifdef KDA_HAVE_CUDA

#include "cuda/cuda_common.h" // defines: KdaCudaCtx

// 1 when a CUDA device is usable; else one failed check and 0.
int gpu_test_have(void);

// *ctx initialised on device 0 for a test of its own (the caller frees it with kda_cuda_free):
// 1; else one failed check (no device, or the initialisation's error) and 0.
int gpu_test_ctx(KdaCudaCtx *ctx);

// An environment switch the launchers read at every launch (KDA_FAST_EXP, KDA_CONV_PREFETCH, ...)
// set for a stretch of a test: gpu_env_set saves var's value (or its absence) into *s and sets
// var = val; gpu_env_restore puts it back, so a suite run under KDA_FAST_EXP=1 keeps it after a
// test that toggles it. Values longer than 63 bytes are not saved (a failed check).
typedef struct {
    const char *var;
    char old[64];
    int had; // var was set
} GpuEnv;
void gpu_env_set(GpuEnv *s, const char *var, const char *val);
void gpu_env_restore(GpuEnv *s);

#endif // KDA_HAVE_CUDA
#endif
