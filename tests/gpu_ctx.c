// gpu_ctx.c - the GPU tests' device check and own context (gpu_ctx.h).
#include "gpu_ctx.h"

#ifdef KDA_HAVE_CUDA

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

int gpu_test_have(void) {
    int ok = kda_cuda_device_count() > 0;
    CHECK_MSG(ok, "no usable CUDA device (GPU tests need one)");
    return ok;
}

int gpu_test_ctx(KdaCudaCtx *ctx) {
    if (!gpu_test_have()) return 0;
    KdaError err = {{0}};
    CHECK_MSG(kda_cuda_init(ctx, 0, &err) == 0, "%s", err.msg);
    return err.msg[0] == 0;
}

void gpu_env_set(GpuEnv *s, const char *var, const char *val) {
    const char *o = getenv(var);
    s->var = var, s->had = o != NULL, s->old[0] = '\0';
    if (o) {
        CHECK_MSG(strlen(o) < sizeof s->old, "%s: value too long to restore", var);
        snprintf(s->old, sizeof s->old, "%s", o);
    }
    setenv(var, val, 1);
}

void gpu_env_restore(GpuEnv *s) {
    if (s->had)
        setenv(s->var, s->old, 1);
    else
        unsetenv(s->var);
}

#endif
