// embed_cuda.cu - the token embedding on the GPU (see embed_cuda.h): gather forward, and the
// deterministic scatter-add backward over a stable radix sort of the ids.
#include "cuda/embed_cuda.h"

#include <cub/device/device_radix_sort.cuh>

#include "cuda/cuda_internal.h" // defines: grid_for, CUDA_CHECK, KDA_CUDA_REQUIRE

namespace {

// ---- embedding ---------------------------------------------------------------------------------

__global__ void embed_fwd_k(float *h, const float *E, const int32_t *ids, int64_t N, int64_t D) {
    kda_grid_wait();
    int64_t n = N * D;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
         e += (int64_t)gridDim.x * blockDim.x)
        h[e] = E[(int64_t)ids[e / D] * D + e % D];
}

__global__ void iota_k(uint32_t *v, int64_t n) {
    kda_grid_wait();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        v[i] = (uint32_t)i;
}

// One block per sorted position; the block at the start of each run of equal ids adds the run's
// rows (increasing token order, as the stable sort left them) into that id's row of dE.
__global__ void embed_bwd_k(float *dE, const float *dh, const uint32_t *keys, const uint32_t *tok,
                            int64_t N, int64_t D, int64_t pad_id) {
    kda_grid_wait();
    int64_t i = blockIdx.x;
    uint32_t id = keys[i];
    if (i > 0 && keys[i - 1] == id) return;
    if ((int64_t)id == pad_id) return;
    int64_t end = i;
    while (end < N && keys[end] == id)
        end++;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
        float acc = dE[(int64_t)id * D + d];
        for (int64_t j = i; j < end; j++)
            acc += dh[(int64_t)tok[j] * D + d];
        dE[(int64_t)id * D + d] = acc;
    }
}

} // namespace

extern "C" {

int kda_cuda_embed_fwd(KdaCudaCtx *ctx, float *h, const float *E, const int32_t *ids, int64_t N,
                       int64_t D) {
    KDA_CUDA_REQUIRE(ctx, N >= 0 && D > 0);
    if (N == 0) return 0;
    CUDA_CHECK(ctx,
               kda_launch(ctx, embed_fwd_k, dim3(grid_for(N * D)), dim3(256), 0, h, E, ids, N, D));
    return 0;
}

int kda_cuda_embed_bwd(KdaCudaCtx *ctx, float *dE, const float *dh, const int32_t *ids, int64_t N,
                       int64_t D, int64_t n_vocab, int64_t pad_id) {
    KDA_CUDA_REQUIRE(ctx, N >= 0 && N <= INT32_MAX && D > 0 && n_vocab > 0);
    if (N == 0) return 0;
    int end_bit = 1;
    while (end_bit < 32 && ((int64_t)1 << end_bit) < n_vocab)
        end_bit++;
    size_t temp = 0;
    const uint32_t *keys_in = (const uint32_t *)ids; // ids are in [0, n_vocab)
    CUDA_CHECK(ctx, cub::DeviceRadixSort::SortPairs(NULL, temp, keys_in, (uint32_t *)NULL,
                                                    (const uint32_t *)NULL, (uint32_t *)NULL,
                                                    (int)N, 0, end_bit, ctx->stream));
    size_t arr = ((size_t)N * sizeof(uint32_t) + 255) & ~(size_t)255;
    char *ws = (char *)kda_cuda_scratch(ctx, 3 * arr + temp);
    if (!ws) return -1;
    uint32_t *keys_out = (uint32_t *)ws, *vals_in = (uint32_t *)(ws + arr);
    uint32_t *vals_out = (uint32_t *)(ws + 2 * arr);
    CUDA_CHECK(ctx, kda_launch(ctx, iota_k, dim3(grid_for(N)), dim3(256), 0, vals_in, N));
    CUDA_CHECK(ctx, cub::DeviceRadixSort::SortPairs(ws + 3 * arr, temp, keys_in, keys_out, vals_in,
                                                    vals_out, (int)N, 0, end_bit, ctx->stream));
    CUDA_CHECK(ctx, kda_launch(ctx, embed_bwd_k, dim3((unsigned)N), dim3(128), 0, dE, dh, keys_out,
                               vals_out, N, D, pad_id));
    return 0;
}

} // extern "C"
