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

// An environment switch (KDA_FAST_EXP, KDA_PDL, KDA_GRAPH, ...) set for a stretch of a test:
// gpu_env_set saves var's value (a copy; NULL when unset) into *s and sets var = val (NULL:
// unsets it); gpu_env_restore puts it back and frees the copy, so a suite run under
// KDA_FAST_EXP=0 keeps it after a test that toggles it. gpu_env_set returns 0, or -1 after a
// failed check when the old value cannot be copied: var is then left as it was and
// gpu_env_restore does nothing, so callers need not branch on it.
typedef struct {
    const char *var;
    char *old; // var's value before gpu_env_set (owned), NULL when it was unset
} GpuEnv;
int gpu_env_set(GpuEnv *s, const char *var, const char *val);
void gpu_env_restore(GpuEnv *s);

#endif // KDA_HAVE_CUDA
#endif
