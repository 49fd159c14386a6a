// test_decode_host.c - the GPU decode kernels (src/cuda/decode_cuda.cu) through their HOST twins
// (kda_cuda_decode_*_host: each kernel thread's body run one after another) against the CPU's
// decode (cpu/kda_step.h kda_recurrent_step, cpu/conv.h conv_silu_fwd, cpu/kda_core.h
// kda_l2norm_fwd). Runs in the CPU suite of every CUDA build (no GPU needed); the kernels on a
// device are test_gpu_decode.c's.
//
// Every comparison is exact (bits): the twins take the device's dtypes (bf16 q, k, v and conv
// inputs, fp32 state, tails, gate, β) and the CPU gets the same bf16-rounded values in fp32;
// both sides then run the same fp32 operations in the same order (serial sums in index order,
// glibc expf on both), and a bf16 output is compared with the CPU's fp32 result rounded to bf16.
// A wrong head, tap, decay or update order changes bits at once.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

#ifdef KDA_HAVE_CUDA

#include "core/rng.h"         // defines: KdaRng, rng_normal, rng_uniform
#include "core/util.h"        // defines: f32_to_bf16, bf16_to_f32
#include "cpu/kda_core.h"     // defines: KdaDims, kda_l2norm_fwd
#include "cpu/kda_step.h"     // defines: kda_recurrent_step
#include "cpu/conv.h"         // defines: conv_silu_fwd
#include "cuda/decode_cuda.h" // defines: kda_cuda_decode_*_host

#define EPS 1e-6f // the q/k L2 eps (model.c L2NORM_EPS)

// n values N(0, std) rounded to bf16: b (bits) and f (the same values in fp32).
static void rand_bf16_(KdaRng *r, kda_bf16 *b, float *f, int64_t n, float std) {
    for (int64_t i = 0; i < n; i++) {
        b[i] = f32_to_bf16(rng_normal(r, 0.0f, std));
        f[i] = bf16_to_f32(b[i]);
    }
}

// T tokens of one sequence through the conv step, against conv_silu_fwd over the whole sequence
// (+ the L2 norm per head of K channels when l2): every token's output and the final tail.
static void conv_case_(int64_t C, int64_t W, int64_t group, int l2, int64_t T) {
    KdaRng r;
    rng_seed(&r, (uint64_t)(C * 131 + W * 7 + l2));
    kda_bf16 *pb = malloc((size_t)(T * C) * sizeof *pb), *y = malloc((size_t)C * sizeof *y);
    float *pf = malloc((size_t)(T * C) * sizeof(float)), *w = malloc((size_t)(C * W) * 4);
    float *ref = malloc((size_t)(T * C) * 4), *pre = malloc((size_t)(T * C) * 4);
    float *nrm = malloc((size_t)(T * C) * 4), *tail = calloc((size_t)(C * W), 4);
    rand_bf16_(&r, pb, pf, T * C, 1.0f);
    for (int64_t i = 0; i < C * W; i++)
        w[i] = rng_normal(&r, 0.0f, 0.5f);
    conv_silu_fwd(ref, pre, pf, w, 1, T, C, W);
    if (l2) kda_l2norm_fwd(nrm, NULL, ref, T * C / group, group, EPS);
    int bad = 0;
    for (int64_t t = 0; t < T; t++) {
        kda_cuda_decode_conv_host(y, W > 1 ? tail : NULL, pb + t * C, w, C, W, group, l2, EPS);
        for (int64_t c = 0; c < C; c++)
            bad += y[c] != f32_to_bf16((l2 ? nrm : ref)[t * C + c]);
    }
    CHECK_MSG(bad == 0, "conv C %lld W %lld l2 %d: %d outputs differ", (long long)C, (long long)W,
              l2, bad);
    for (int64_t c = 0; c < C; c++) // the tail holds the last W-1 inputs, oldest first
        for (int64_t i = 0; i + 1 < W; i++) {
            int64_t tau = T - (W - 1) + i;
            CHECK(tail[c * (W - 1) + i] == (tau >= 0 ? pf[tau * C + c] : 0.0f));
        }
    free(pb), free(y), free(pf), free(w), free(ref), free(pre), free(nrm), free(tail);
}

KDA_TEST(decode_host_conv_equals_cpu) {
    conv_case_(16, 4, 8, 1, 7);  // q/k: 2 heads of K 8, L2-normalized; T > W
    conv_case_(32, 4, 16, 0, 2); // v: T < W - 1 (zeros before the start)
    conv_case_(8, 1, 8, 1, 3);   // conv_size 1: no tail
    conv_case_(24, 3, 8, 0, 5);
}

// One delta-rule step against kda_recurrent_step: the state and the output, with GVA (HV > H).
static void delta_case_(int64_t H, int64_t HV, int64_t K, int64_t V, int steps) {
    KdaRng r;
    rng_seed(&r, (uint64_t)(H * 1000 + HV * 100 + K + V));
    KdaDims d = {1, 1, H, HV, K, V, (float)(1.0 / sqrt((double)K)), 64};
    int64_t SN = HV * K * V;
    float *S = malloc((size_t)SN * 4), *Sc = malloc((size_t)SN * 4);
    kda_bf16 *qb = malloc((size_t)(H * K) * 2), *kb = malloc((size_t)(H * K) * 2);
    kda_bf16 *vb = malloc((size_t)(HV * V) * 2), *o = malloc((size_t)(HV * V) * 2);
    float *q = malloc((size_t)(H * K) * 4), *k = malloc((size_t)(H * K) * 4);
    float *v = malloc((size_t)(HV * V) * 4), *oc = malloc((size_t)(HV * V) * 4);
    float *g = malloc((size_t)(HV * K) * 4), beta[64];
    for (int64_t i = 0; i < SN; i++)
        S[i] = Sc[i] = rng_normal(&r, 0.0f, 0.3f);
    int bad_o = 0;
    for (int s = 0; s < steps; s++) {
        rand_bf16_(&r, qb, q, H * K, 0.35f);
        rand_bf16_(&r, kb, k, H * K, 0.35f);
        rand_bf16_(&r, vb, v, HV * V, 1.0f);
        for (int64_t i = 0; i < HV * K; i++)
            g[i] = -(float)rng_uniform(&r) * 0.5f;
        for (int64_t j = 0; j < HV; j++)
            beta[j] = (float)rng_uniform(&r);
        kda_cuda_decode_delta_host(o, S, qb, kb, vb, g, beta, H, HV, K, V, d.scale);
        kda_recurrent_step(oc, Sc, q, k, v, g, beta, &d);
        for (int64_t i = 0; i < HV * V; i++)
            bad_o += o[i] != f32_to_bf16(oc[i]);
    }
    CHECK_MSG(memcmp(S, Sc, (size_t)SN * 4) == 0, "delta H %lld HV %lld: the states differ",
              (long long)H, (long long)HV);
    CHECK_MSG(bad_o == 0, "delta H %lld HV %lld: %d outputs differ", (long long)H, (long long)HV,
              bad_o);
    free(S), free(Sc), free(qb), free(kb), free(vb), free(o), free(q), free(k), free(v), free(oc);
    free(g);
}

KDA_TEST(decode_host_delta_equals_cpu) {
    delta_case_(2, 2, 8, 8, 3);   // HV = H
    delta_case_(2, 4, 8, 16, 3);  // GVA: value heads 0-1 read q/k head 0, 2-3 head 1
    delta_case_(1, 3, 16, 32, 2); // one q/k head for three value heads
}

// The tail a prefill leaves: the last W-1 rows of p, oldest first, zeros before the start.
KDA_TEST(decode_host_tail_from_prefill) {
    int64_t C = 3, W = 4;
    kda_bf16 p[5 * 3];
    for (int i = 0; i < 15; i++)
        p[i] = f32_to_bf16((float)(i + 1));
    float tail[3 * 3];
    kda_cuda_decode_tail_host(tail, p, 5, C, W); // rows 2, 3, 4
    for (int64_t c = 0; c < C; c++)
        for (int64_t i = 0; i < 3; i++)
            CHECK(tail[c * 3 + i] == (float)((2 + i) * C + c + 1));
    kda_cuda_decode_tail_host(tail, p, 2, C, W); // rows -1 (zero), 0, 1
    for (int64_t c = 0; c < C; c++) {
        CHECK(tail[c * 3] == 0.0f);
        CHECK(tail[c * 3 + 1] == (float)(c + 1) && tail[c * 3 + 2] == (float)(C + c + 1));
    }
}

#endif // KDA_HAVE_CUDA
