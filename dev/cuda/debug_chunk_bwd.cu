// debug_chunk_bwd.cu - the chunked KDA backward kernel (src/cuda/kda_cuda.cu, included whole so
// its internal kernel can be launched directly) against the CPU reference kda_chunk_bwd, launched
// with several block sizes. Built in variants (-O3, -G, -DKDA_CB_FENCE) by dev/cuda/debug_run.sh to
// tell a compiler/visibility problem from a logic error. Inputs as tests/test_gpu_kda.c.
//
// Usage: debug_chunk_bwd [T B H K V]
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "core/rng.h"     // defines: KdaRng, rng_seed, rng_normal
#include "cpu/kda_core.h" // defines: KdaDims, kda_chunk_bwd
}
#include "cuda/kda_cuda.cu" // defines: chunk_bwd_k, chunk_ws_floats

static float r16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}

static double rel(const float *ref, const float *out, int64_t n) {
    double se = 0, sr = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(out[i])) return INFINITY;
        se += ((double)ref[i] - out[i]) * ((double)ref[i] - out[i]);
        sr += (double)ref[i] * ref[i];
    }
    return sr > 0 ? sqrt(se / sr) : sqrt(se);
}

static void *up(const void *h, size_t bytes) {
    void *d = NULL;
    if (cudaMalloc(&d, bytes) != cudaSuccess || cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice))
        exit(1);
    return d;
}

// Per-field checksums of block 0's chunk workspace (finite elements only; the workspace was
// filled with NaN before the launch), in chunk_ws_carve's order, to compare with a host run.
static void ws_sums(const float *ws0, int64_t NT, int64_t C, int64_t K, int64_t V) {
    const char *names[] = {"h",    "dS",   "dSn", "q",  "k",    "G",     "eG", "eL", "Kb",
                           "w",    "dq",   "dk",  "dG", "dw",   "dKb",   "tk", "v",  "Vb",
                           "u",    "D",    "dO",  "dD", "dVb",  "Aqk",   "KK", "L",  "Akk",
                           "dAqk", "dAkk", "M",   "dL", "beta", "dbeta", "acc"};
    int64_t KV = K * V, CK = C * K, CV = C * V, CC = C * C;
    int64_t sizes[] = {(NT + 1) * KV,
                       KV,
                       KV,
                       CK,
                       CK,
                       CK,
                       CK,
                       CK,
                       CK,
                       CK,
                       CK,
                       CK,
                       CK,
                       CK,
                       CK,
                       CK,
                       CV,
                       CV,
                       CV,
                       CV,
                       CV,
                       CV,
                       CV,
                       CC,
                       CC,
                       CC,
                       CC,
                       CC,
                       CC,
                       CC,
                       CC,
                       C,
                       C,
                       K};
    const float *p = ws0;
    for (int f = 0; f < 34; f++) {
        double sum = 0;
        int64_t fin = 0;
        for (int64_t i = 0; i < sizes[f]; i++)
            if (isfinite(p[i])) sum += fabs((double)p[i]), fin++;
        printf("  ws %-5s finite %5lld sum|x| %.6g\n", names[f], (long long)fin, sum);
        p += sizes[f];
    }
}

int main(int argc, char **argv) {
    int64_t T = argc > 1 ? atoll(argv[1]) : 63, B = argc > 2 ? atoll(argv[2]) : 2;
    int64_t H = argc > 3 ? atoll(argv[3]) : 2, K = argc > 4 ? atoll(argv[4]) : 32;
    int64_t V = argc > 5 ? atoll(argv[5]) : 64, C = 64;
    KdaDims d = {B, T, H, H, K, V, 1.0f / sqrtf((float)K), C};
    int64_t nqk = B * T * H * K, nv = B * T * H * V, nb = B * T * H, ns = B * H * K * V;
    float *q = new float[nqk], *k = new float[nqk], *g = new float[nqk], *gc = new float[nqk];
    float *v = new float[nv], *dO = new float[nv], *beta = new float[nb];
    float *S0 = new float[ns], *dST = new float[ns];
    KdaRng r;
    rng_seed(&r, 203);
    for (int64_t i = 0; i < nqk; i++)
        q[i] = rng_normal(&r, 0, 1);
    for (int64_t i = 0; i < nqk; i++)
        k[i] = rng_normal(&r, 0, 1);
    for (int64_t row = 0; row < B * T * H; row++) {
        float *rows[2] = {q + row * K, k + row * K};
        for (int x = 0; x < 2; x++) {
            double ss = 0;
            for (int64_t i = 0; i < K; i++)
                ss += (double)rows[x][i] * rows[x][i];
            for (int64_t i = 0; i < K; i++)
                rows[x][i] = r16((float)(rows[x][i] / sqrt(ss + 1e-6)));
        }
    }
    for (int64_t i = 0; i < nv; i++)
        v[i] = r16(rng_normal(&r, 0, 1));
    for (int64_t i = 0; i < nv; i++)
        dO[i] = r16(rng_normal(&r, 0, 1));
    for (int64_t i = 0; i < nqk; i++)
        g[i] = -expf(rng_normal(&r, -2.5f, 1.5f));
    for (int64_t i = 0; i < nb; i++)
        beta[i] = 1.0f / (1.0f + expf(-rng_normal(&r, 0, 1)));
    for (int64_t i = 0; i < ns; i++)
        S0[i] = rng_normal(&r, 0, 0.5f);
    for (int64_t i = 0; i < ns; i++)
        dST[i] = rng_normal(&r, 0, 0.5f);
    for (int64_t b = 0; b < B; b++)
        for (int64_t t0 = 0; t0 < T; t0 += C)
            for (int64_t jd = 0; jd < H * K; jd++) {
                float a = 0;
                for (int64_t t = t0; t < T && t < t0 + C; t++) {
                    a += g[(b * T + t) * H * K + jd];
                    gc[(b * T + t) * H * K + jd] = a;
                }
            }
    float *rq = new float[nqk], *rk = new float[nqk], *rv = new float[nv], *rg = new float[nqk];
    float *rb = new float[nb], *rS = new float[ns];
    kda_chunk_bwd(rq, rk, rv, rg, rb, rS, dO, dST, q, k, v, g, beta, S0, &d);

    uint16_t *q16 = new uint16_t[nqk], *k16 = new uint16_t[nqk], *v16 = new uint16_t[nv];
    uint16_t *o16 = new uint16_t[nv];
    for (int64_t i = 0; i < nqk; i++) {
        uint32_t a, b;
        memcpy(&a, &q[i], 4), memcpy(&b, &k[i], 4);
        q16[i] = (uint16_t)(a >> 16), k16[i] = (uint16_t)(b >> 16);
    }
    for (int64_t i = 0; i < nv; i++) {
        uint32_t a, b;
        memcpy(&a, &v[i], 4), memcpy(&b, &dO[i], 4);
        v16[i] = (uint16_t)(a >> 16), o16[i] = (uint16_t)(b >> 16);
    }
    void *dq16 = up(q16, nqk * 2), *dk16 = up(k16, nqk * 2), *dv16 = up(v16, nv * 2);
    void *do16 = up(o16, nv * 2), *dgc = up(gc, nqk * 4), *dbeta = up(beta, nb * 4);
    void *dS0 = up(S0, ns * 4), *ddST = up(dST, ns * 4);
    float *oq, *ok, *og, *ob, *oS;
    uint16_t *ov;
    cudaMalloc(&oq, nqk * 4), cudaMalloc(&ok, nqk * 4), cudaMalloc(&og, nqk * 4);
    cudaMalloc(&ob, nb * 4), cudaMalloc(&oS, ns * 4), cudaMalloc(&ov, nv * 2);
    int64_t NT = (T + C - 1) / C;
    size_t per = chunk_ws_floats(NT, C, K, V);
    float *ws;
    cudaMalloc(&ws, (size_t)(B * H) * per * 4);
    float *hq = new float[nqk], *hk = new float[nqk], *hg = new float[nqk], *hb = new float[nb];
    float *hS = new float[ns], *hv = new float[nv];
    uint16_t *hv16 = new uint16_t[nv];
    const int threads[] = {1, 32, 64, 128, 256};
    for (int ti = 0; ti < 5; ti++) {
        cudaMemset(oq, 0xFF, nqk * 4), cudaMemset(ok, 0xFF, nqk * 4), cudaMemset(og, 0xFF, nqk * 4);
        cudaMemset(ob, 0xFF, nb * 4), cudaMemset(oS, 0xFF, ns * 4), cudaMemset(ov, 0xFF, nv * 2);
        cudaMemset(ws, 0xFF, (size_t)(B * H) * per * 4);
        chunk_bwd_k<<<(unsigned)(B * H), threads[ti]>>>(
            oq, ok, (kda_bf16 *)ov, og, ob, oS, (const kda_bf16 *)do16, (const float *)ddST,
            (const kda_bf16 *)dq16, (const kda_bf16 *)dk16, (const kda_bf16 *)dv16,
            (const float *)dgc, (const float *)dbeta, (const float *)dS0, d, ws);
        cudaError_t e = cudaDeviceSynchronize();
        if (e != cudaSuccess) {
            printf("threads %d: %s\n", threads[ti], cudaGetErrorString(e));
            continue;
        }
        cudaMemcpy(hq, oq, nqk * 4, cudaMemcpyDeviceToHost);
        cudaMemcpy(hk, ok, nqk * 4, cudaMemcpyDeviceToHost);
        cudaMemcpy(hg, og, nqk * 4, cudaMemcpyDeviceToHost);
        cudaMemcpy(hb, ob, nb * 4, cudaMemcpyDeviceToHost);
        cudaMemcpy(hS, oS, ns * 4, cudaMemcpyDeviceToHost);
        cudaMemcpy(hv16, ov, nv * 2, cudaMemcpyDeviceToHost);
        for (int64_t i = 0; i < nv; i++) {
            uint32_t u = (uint32_t)hv16[i] << 16;
            memcpy(&hv[i], &u, 4);
        }
        if (T * K * V <= 64 && (threads[ti] == 1 || threads[ti] == 256)) {
            float *h0 = new float[per];
            cudaMemcpy(h0, ws, per * 4, cudaMemcpyDeviceToHost);
            printf(" workspace of block 0, %d threads:\n", threads[ti]);
            ws_sums(h0, NT, C, K, V);
            delete[] h0;
        }
        printf("T=%lld B=%lld H=%lld K=%lld V=%lld threads %3d: dq %.2e dk %.2e dv %.2e dg %.2e "
               "dbeta %.2e dS0 %.2e | dq[0..2] cpu %.5g %.5g %.5g gpu %.5g %.5g %.5g\n",
               (long long)T, (long long)B, (long long)H, (long long)K, (long long)V, threads[ti],
               rel(rq, hq, nqk), rel(rk, hk, nqk), rel(rv, hv, nv), rel(rg, hg, nqk),
               rel(rb, hb, nb), rel(rS, hS, ns), rq[0], rq[1], rq[2], hq[0], hq[1], hq[2]);
    }
    return 0;
}
