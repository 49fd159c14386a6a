// gpu_ctx.c - the GPU tests' device check and own context (gpu_ctx.h).
#include "gpu_ctx.h"

#ifdef KDA_HAVE_CUDA

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

int gpu_env_set(GpuEnv *s, const char *var, const char *val) {
    const char *o = getenv(var);
    s->var = var, s->old = o ? strdup(o) : NULL;
    if (o && !s->old) {
        CHECK_MSG(0, "%s: out of memory copying its value", var);
        s->var = NULL; // restore: nothing to put back
        return -1;
    }
    if (val)
        setenv(var, val, 1);
    else
        unsetenv(var);
    return 0;
}

void gpu_env_restore(GpuEnv *s) {
    if (!s->var) return;
    if (s->old)
        setenv(s->var, s->old, 1);
    else
        unsetenv(s->var);
    free(s->old);
    s->old = NULL;
}

#endif
