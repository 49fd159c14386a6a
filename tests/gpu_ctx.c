// gpu_ctx.c - the GPU tests' device check and own context (gpu_ctx.h).
#include "gpu_ctx.h"

#ifdef KDA_HAVE_CUDA

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

#endif
