// gpu_step.c - one training step of a GPU model for the bit-identity tests (gpu_step.h).
#include "gpu_step.h"

#ifdef KDA_HAVE_CUDA

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"  // defines: kda_malloc
#include "cpu/xent.h"    // defines: XENT_IGNORE
#include "model/optim.h" // defines: KdaAdamWConfig
#include "test.h"        // defines: CHECK_MSG
#include "tiny_model.h"  // defines: tiny_random_ids

int gpu_train_step(KdaCudaModel *dm, const GpuStep *sched, int64_t s, float *loss, float *g,
                   float *p, KdaError *err) {
    const KdaAdamWConfig oc = {0.9, 0.95, 1e-8, 0.1};
    const int64_t B = 2, vocab = kda_cuda_model_config(dm)->vocab_size;
    if (kda_cuda_model_zero_grads(dm, err)) return -1;
    double sum = 0.0;
    for (int mi = 0; mi < 2; mi++) {
        int64_t T = sched->T[mi], N = B * T;
        int32_t *ids = kda_malloc((size_t)N * sizeof(int32_t));
        int32_t *lab = kda_malloc((size_t)N * sizeof(int32_t));
        tiny_random_ids(ids, N, vocab, (uint64_t)(100 * s + mi));
        memcpy(lab, ids, (size_t)N * sizeof(int32_t));
        for (int64_t i = 0; sched->ignore[mi] && i < N; i += 3 + (i % 5)) // another n_valid
            lab[i] = XENT_IGNORE;
        float l = NAN;
        int rc = kda_cuda_model_forward_backward(dm, ids, lab, B, T, NULL, &l, err);
        free(ids), free(lab);
        if (rc) return -1;
        sum += l;
    }
    *loss = (float)(sum / 2.0);
    if (kda_cuda_model_get_grads(dm, g, err) ||
        !isfinite(kda_cuda_model_finish_grads(dm, 0.5, 1.0, err)))
        return -1;
    return kda_cuda_model_adamw(dm, &oc, s, 1e-3, err) || kda_cuda_model_get_params(dm, p, err);
}

int64_t gpu_bits_differ(const float *a, const float *b, int64_t n) {
    int64_t d = 0;
    for (int64_t i = 0; i < n; i++)
        d += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return d;
}

int gpu_train_pair(KdaCudaModel *dm[2], const GpuStep *sched, int n_steps, float *g[2], float *p[2],
                   int64_t n, const char *what) {
    KdaError err = {{0}};
    float loss[2];
    for (int s = 0; s < n_steps; s++) {
        int rc = 0;
        for (int pass = 0; pass < 2 && !rc; pass++)
            rc = gpu_train_step(dm[pass], &sched[s], s + 1, &loss[pass], g[pass], p[pass], &err);
        CHECK_MSG(rc == 0, "%s, step %d: %s", what, s + 1, err.msg);
        if (rc) return -1;
        int64_t dg = gpu_bits_differ(g[1], g[0], n), dp = gpu_bits_differ(p[1], p[0], n);
        int same = memcmp(&loss[1], &loss[0], sizeof(float)) == 0 && !dg && !dp;
        CHECK_MSG(same, "%s, step %d: loss %.9g vs %.9g, %lld grads and %lld params of %lld differ",
                  what, s + 1, loss[1], loss[0], (long long)dg, (long long)dp, (long long)n);
        if (!same) return 1;
    }
    return 0;
}

#endif // KDA_HAVE_CUDA
