// generate.h - text generation with a KDA model runtime (model/runtime.h, CPU or GPU): token
// sampling (greedy, temperature, top-k, top-p), the prefill + recurrent decode loop, the
// whole-sequence re-forward loop (the path before the GPU decode, kept to measure against), and
// a UTF-8 stream writer that holds back the bytes of a character split across tokens.
//
// Sampling order (as HF's logits warpers): temperature, then top-k, then top-p (nucleus) on
// the top-k survivors renormalized, then one draw from the kept probabilities. Ties at the
// top-k / top-p boundary are all kept (torch's `scores < kth_value` rule). Deterministic for a
// seed: the same logits and RNG state give the same id on every machine.
#ifndef KDA_GENERATE_H
#define KDA_GENERATE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/error.h"    // defines: KdaError
#include "core/rng.h"      // defines: KdaRng
#include "model/runtime.h" // defines: KdaRuntime

typedef struct {
    double temperature; // <= 0: greedy (argmax; the lowest id among equal maxima), no draw
    int64_t top_k;      // > 0: keep the top_k largest logits (and ties of the k-th); <= 0: off
    double top_p;       // < 1: keep the smallest set of most probable ids with mass >= top_p
                        // (at least the most probable); >= 1: off
} KdaSampleOpts;

// Scratch of kda_sample, grown on demand. Zero-initialize; release with kda_sampler_free.
typedef struct {
    int32_t *idx; // [cap]
    float *w;     // [cap]
    int64_t cap;
} KdaSampler;

void kda_sampler_free(KdaSampler *s);
// Index of the largest x [n] (the first one on ties).
int32_t kda_argmax(const float *x, int64_t n);
// One id from logits [n] fp32 (all finite) under o. Draws one rng_uniform unless greedy.
int32_t kda_sample(KdaSampler *s, const float *logits, int64_t n, const KdaSampleOpts *o,
                   KdaRng *rng);

typedef struct {
    KdaSampleOpts sample;
    int64_t max_new_tokens; // >= 0
    uint64_t seed;          // seeds the sampling RNG (rng_seed)
    const int32_t *eos_ids; // [n_eos] ids that stop generation (after being emitted)
    int n_eos;
    int ignore_eos; // 1: never stop at an EOS id
} KdaGenOpts;

// Called with every generated id as soon as it is sampled (the EOS that stops included);
// a nonzero return stops generation after this id.
typedef int (*KdaGenTokenFn)(int32_t id, void *user);

typedef struct {
    int64_t n_prompt, n_new; // prompt tokens, generated tokens
    int64_t n_steps;         // decode steps run (n_new - 1 when stopped by the limit or EOS)
    double prefill_s;        // seconds in the prefill (incl. the first logits)
    double decode_s;         // seconds in the decode steps + sampling after the prefill
    int stopped_eos;         // 1 when an EOS id ended generation
} KdaGenStats;

// Prefill of prompt [n_prompt] (>= 1 ids) then up to max_new_tokens ids, each sampled from the
// logits of the previous position and fed back through one recurrent decode step
// (kda_runtime_prefill / kda_runtime_decode: O(1) per token on the CPU and the GPU). out
// [max_new_tokens] int32 (may be NULL) receives the new ids; cb (may be NULL) sees each one.
// stats may be NULL. Fails on bad ids, non-finite logits (naming the position) or a runtime that
// cannot decode. On the CPU the decode steps run with omp_set_num_threads(1) for the calling
// thread (restored on return); OpenBLAS keeps its threads.
int kda_generate(KdaRuntime *rt, const int32_t *prompt, int64_t n_prompt, const KdaGenOpts *o,
                 int32_t *out, KdaGenTokenFn cb, void *user, KdaGenStats *stats, KdaError *err);

// kda_generate without a recurrent state: the same sampling, RNG use, EOS rule, callback and
// stats, but the logits of every new token come from a forward of the whole sequence so far
// (prompt + generated ids; kda_runtime_forward + kda_runtime_logits of its last position), so
// token k costs a forward of n_prompt + k tokens: O(T^2) work over a generation. The GPU's path
// before its recurrent decode (`kda generate --decode refeed`, to measure against). prefill_s
// times the first forward, decode_s the rest. With equal logits the ids equal kda_generate's.
int kda_generate_refeed(KdaRuntime *rt, const int32_t *prompt, int64_t n_prompt,
                        const KdaGenOpts *o, int32_t *out, KdaGenTokenFn cb, void *user,
                        KdaGenStats *stats, KdaError *err);

// Streaming UTF-8 writer: bytes arrive token by token; complete characters are written at
// once, an incomplete multi-byte character at the end is held until its continuation bytes
// arrive. Invalid sequences become U+FFFD exactly as utf8_lossy does on the whole byte string,
// so the concatenated output equals utf8_lossy(all bytes). Zero-initialize.
typedef struct {
    unsigned char pend[4]; // held bytes of an incomplete character (at most 3)
    size_t n;
} KdaUtf8Stream;

// Writes what is complete of the held bytes + b[0..n) to f and holds the rest.
void kda_utf8_stream_write(KdaUtf8Stream *s, const void *b, size_t n, FILE *f);
// Writes the held bytes (as U+FFFD: they never completed) and empties the stream.
void kda_utf8_stream_flush(KdaUtf8Stream *s, FILE *f);

#endif
