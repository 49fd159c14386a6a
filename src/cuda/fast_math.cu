// fast_math.cu - the fast (default; KDA_FAST_EXP=0: off) and precise activations of fast_math.cuh
// evaluated on a vector, on the GPU and on the host (see fast_math.h): the tests' window on the
// functions the conv and CE row kernels inline.
#include "cuda/fast_math.h"

#include "cuda/fast_math.cuh" // defines: silu_x, dsilu_x, exp_x

// Element i of x into out[i], out[n + i], out[2n + i] (one function for the kernel and the host).
template <bool FX>
__host__ __device__ __forceinline__ void act_eval_one(float *out, const float *x, int64_t n,
                                                      int64_t i) {
    out[i] = silu_x<FX>(x[i]);
    out[n + i] = dsilu_x<FX>(x[i]);
    out[2 * n + i] = exp_x<FX>(x[i]);
}

template <bool FX> __global__ void act_eval_k(float *out, const float *x, int64_t n) {
    kda_grid_wait();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        act_eval_one<FX>(out, x, n, i);
}

extern "C" {

int kda_cuda_fast_act_eval(KdaCudaCtx *ctx, float *out, const float *x, int64_t n, int fast) {
    KDA_CUDA_REQUIRE(ctx, n >= 0 && (n == 0 || (out && x)));
    if (n == 0) return 0;
    CUDA_CHECK(ctx, kda_launch(ctx, fast ? act_eval_k<true> : act_eval_k<false>, dim3(grid_for(n)),
                               dim3(256), 0, out, x, n));
    return 0;
}

void kda_cuda_fast_act_eval_host(float *out, const float *x, int64_t n, int fast) {
    for (int64_t i = 0; i < n; i++)
        if (fast)
            act_eval_one<true>(out, x, n, i);
        else
            act_eval_one<false>(out, x, n, i);
}

} // extern "C"
