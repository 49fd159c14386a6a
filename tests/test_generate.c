// test_generate.c - inference (src/model/model.c prefill + decode, src/cpu/kda_step.c) and
// generation (src/eval/generate.c): prefill + recurrent decode reproduce the full forward's
// logits at every position, greedy generation equals argmax over the full forward of the
// growing sequence, seeded sampling is deterministic, top-k/top-p select the right sets, EOS
// stops, and the UTF-8 stream holds split characters back.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "core/util.h"
#include "eval/generate.h"
#include "model/model.h"
#include "test.h"
#include "tiny_model.h"

// The tiny configs of tiny_model.h (the ones test_model.c uses).
static void gen_model_(KdaModel *m, TinyKind kind, uint64_t seed) {
    KdaConfig c = tiny_config(kind);
    // A large init std (0.2) so that logits spread widely and the state carries real signal.
    c.initializer_range = 0.2;
    tiny_model_init(m, &c, seed);
}

// max |a - b| / max(max |b|, 1e-3) over one row of logits.
static double rel_err_(const float *a, const float *b, int64_t n) {
    double e = 0.0, s = 1e-3;
    for (int64_t i = 0; i < n; i++) {
        e = fmax(e, fabs((double)a[i] - b[i]));
        s = fmax(s, fabs((double)b[i]));
    }
    return e / s;
}

// Prefill P tokens then decode the rest of a T-token sequence; every position's logits must
// match the full (chunked) forward. Tolerance 1e-4 relative: the two paths differ only in fp32
// summation order (chunked WY form vs per-token recurrence, batched vs single-row GEMMs,
// vocabulary-chunked head), which measures ~1e-6 here.
static void prefill_decode_case_(TinyKind kind, const char *name, int64_t P, KdaCoreMode core) {
    KdaModel m;
    gen_model_(&m, kind, 11 + (uint64_t)kind);
    m.core = core;
    int64_t T = P + 6, nv = m.cfg.vocab_size;
    int32_t *ids = kda_malloc((size_t)T * sizeof(int32_t));
    tiny_random_ids(ids, T, nv, 100 + (uint64_t)P);
    float *ref = kda_malloc((size_t)(T * nv) * sizeof(float));
    float *lg = kda_malloc((size_t)nv * sizeof(float));
    KdaError err;
    m.core = KDA_CORE_CHUNK;
    CHECK(kda_model_forward(&m, ids, NULL, 1, T, NULL, ref, NULL, &err) == 0);
    m.core = core;
    KdaDecodeState st;
    kda_decode_state_init(&st, &m.cfg);
    CHECK(kda_model_prefill(&m, ids, P, &st, lg, &err) == 0);
    CHECK_EQ_INT(st.pos, P);
    double worst = rel_err_(lg, ref + (P - 1) * nv, nv);
    for (int64_t t = P; t < T; t++) {
        CHECK(kda_model_decode_step(&m, &st, ids[t], lg, &err) == 0);
        worst = fmax(worst, rel_err_(lg, ref + t * nv, nv));
    }
    CHECK_EQ_INT(st.pos, T);
    CHECK_MSG(worst <= 1e-4, "%s P=%lld: prefill+decode vs forward logits rel err %.3g", name,
              (long long)P, worst);
    kda_decode_state_free(&st);
    free(ids), free(ref), free(lg);
    kda_model_free(&m);
}

static const int64_t k_prompt_lens[] = {1, 5, 64, 70}; // < W-1, > W-1, one chunk, > one chunk

KDA_TEST(gen_prefill_decode_tied) {
    for (int i = 0; i < 4; i++)
        prefill_decode_case_(TINY_TIED, "tied", k_prompt_lens[i], KDA_CORE_CHUNK);
}
KDA_TEST(gen_prefill_decode_gva_negeig_untied) {
    for (int i = 0; i < 4; i++)
        prefill_decode_case_(TINY_GVA_NEG, "gva", k_prompt_lens[i], KDA_CORE_CHUNK);
}
KDA_TEST(gen_prefill_decode_no_conv) {
    for (int i = 0; i < 4; i++)
        prefill_decode_case_(TINY_NO_CONV, "noconv", k_prompt_lens[i], KDA_CORE_CHUNK);
}
KDA_TEST(gen_prefill_decode_bounded_gate) {
    for (int i = 0; i < 4; i++)
        prefill_decode_case_(TINY_BOUNDED, "bounded", k_prompt_lens[i], KDA_CORE_CHUNK);
}
KDA_TEST(gen_prefill_recurrent_core) {
    prefill_decode_case_(TINY_GVA_NEG, "gva-recurrent", 70, KDA_CORE_RECURRENT);
}

// The decode state after a prefill of P tokens equals the one after prefill(1) + P-1 steps
// (state and conv tails are what decoding continues from).
KDA_TEST(gen_prefill_state_matches_stepping) {
    KdaModel m;
    gen_model_(&m, TINY_TIED, 5);
    int64_t P = 9, nv = m.cfg.vocab_size;
    int32_t ids[9];
    tiny_random_ids(ids, P, nv, 77);
    float *lg = kda_malloc((size_t)nv * sizeof(float));
    KdaDecodeState a, b;
    kda_decode_state_init(&a, &m.cfg);
    kda_decode_state_init(&b, &m.cfg);
    KdaError err;
    CHECK(kda_model_prefill(&m, ids, P, &a, lg, &err) == 0);
    CHECK(kda_model_prefill(&m, ids, 1, &b, lg, &err) == 0);
    for (int64_t t = 1; t < P; t++)
        CHECK(kda_model_decode_step(&m, &b, ids[t], lg, &err) == 0);
    int64_t ns = m.cfg.num_hidden_layers * m.cfg.num_v_heads * m.cfg.head_dim * m.cfg.head_v_dim;
    int64_t nc = m.cfg.num_hidden_layers * m.cfg.key_dim * (m.cfg.conv_size - 1);
    double es = 0.0, ec = 0.0;
    for (int64_t i = 0; i < ns; i++)
        es = fmax(es, fabs((double)a.S[i] - b.S[i]));
    for (int64_t i = 0; i < nc; i++)
        ec = fmax(ec, fabs((double)a.conv_k[i] - b.conv_k[i]));
    CHECK_MSG(es <= 1e-5, "state differs by %.3g", es); // |S| ~ 1: fp32 order noise only
    CHECK_MSG(ec <= 1e-5, "conv tail differs by %.3g", ec);
    kda_decode_state_free(&a), kda_decode_state_free(&b);
    free(lg);
    kda_model_free(&m);
}

KDA_TEST(gen_errors) {
    KdaModel m;
    gen_model_(&m, TINY_TIED, 3);
    KdaDecodeState st;
    kda_decode_state_init(&st, &m.cfg);
    float lg[50];
    int32_t bad = 50, ok = 1;
    KdaError err;
    CHECK(kda_model_prefill(&m, &ok, 0, &st, lg, &err) == -1);
    CHECK(kda_model_prefill(&m, &bad, 1, &st, lg, &err) == -1);
    CHECK(strstr(err.msg, "outside the vocabulary") != NULL);
    CHECK(kda_model_prefill(&m, &ok, 1, &st, lg, &err) == 0);
    CHECK(kda_model_decode_step(&m, &st, -1, lg, &err) == -1);
    CHECK(kda_model_decode_step(&m, &st, bad, lg, &err) == -1);
    kda_decode_state_free(&st);
    kda_model_free(&m);
}

// ---- generation ---------------------------------------------------------------------------------

static int64_t gen_(KdaModel *m, const int32_t *prompt, int64_t P, KdaSampleOpts so, int64_t n,
                    uint64_t seed, const int32_t *eos, int n_eos, int32_t *out, KdaGenStats *st) {
    KdaGenOpts o = {so, n, seed, eos, n_eos, 0};
    KdaError err;
    KdaGenStats s = {0};
    KdaRuntime *rt = tiny_runtime(m, "cpu", NULL);
    CHECK(rt && kda_generate(rt, prompt, P, &o, out, NULL, NULL, &s, &err) == 0);
    kda_runtime_close(rt);
    if (st) *st = s;
    return s.n_new;
}

static const KdaSampleOpts k_greedy = {0.0, 0, 1.0};

KDA_TEST(gen_greedy_equals_full_forward_argmax) {
    KdaModel m;
    gen_model_(&m, TINY_GVA_NEG, 21);
    int64_t P = 7, N = 20, nv = m.cfg.vocab_size;
    int32_t seq[27], out[20];
    tiny_random_ids(seq, P, nv, 9);
    CHECK_EQ_INT(gen_(&m, seq, P, k_greedy, N, 0, NULL, 0, out, NULL), N);
    float *lg = kda_malloc((size_t)((P + N) * nv) * sizeof(float));
    KdaError err;
    for (int64_t i = 0; i < N; i++) {
        int64_t T = P + i;
        CHECK(kda_model_forward(&m, seq, NULL, 1, T, NULL, lg, NULL, &err) == 0);
        seq[T] = kda_argmax(lg + (T - 1) * nv, nv);
        CHECK_MSG(out[i] == seq[T], "token %lld: generate %d, full forward argmax %d", (long long)i,
                  out[i], seq[T]);
    }
    free(lg);
    kda_model_free(&m);
}

KDA_TEST(gen_sampling_seeded_and_limits) {
    KdaModel m;
    gen_model_(&m, TINY_TIED, 31);
    int32_t prompt[3] = {1, 2, 3}, a[16], b[16], c[16], g[16];
    KdaSampleOpts so = {1.0, 10, 0.9};
    gen_(&m, prompt, 3, so, 16, 42, NULL, 0, a, NULL);
    gen_(&m, prompt, 3, so, 16, 42, NULL, 0, b, NULL);
    CHECK(memcmp(a, b, sizeof a) == 0); // same seed, same ids
    int differs = 0; // another seed gives another sequence (16 draws from ~10 candidates)
    for (uint64_t s = 43; s < 46; s++) {
        gen_(&m, prompt, 3, so, 16, s, NULL, 0, c, NULL);
        differs |= memcmp(a, c, sizeof a) != 0;
    }
    CHECK(differs);
    gen_(&m, prompt, 3, k_greedy, 16, 0, NULL, 0, g, NULL);
    KdaSampleOpts k1 = {1.0, 1, 1.0}, p0 = {1.5, 0, 1e-9};
    gen_(&m, prompt, 3, k1, 16, 7, NULL, 0, c, NULL);
    CHECK(memcmp(c, g, sizeof g) == 0); // top-k = 1 is greedy
    gen_(&m, prompt, 3, p0, 16, 7, NULL, 0, c, NULL);
    CHECK(memcmp(c, g, sizeof g) == 0);                               // tiny top-p is greedy
    CHECK_EQ_INT(gen_(&m, prompt, 3, so, 0, 1, NULL, 0, c, NULL), 0); // max_new_tokens 0
    kda_model_free(&m);
}

KDA_TEST(gen_eos_stops) {
    KdaModel m;
    gen_model_(&m, TINY_BOUNDED, 41);
    int32_t prompt[2] = {4, 5}, g[12], o[12];
    gen_(&m, prompt, 2, k_greedy, 12, 0, NULL, 0, g, NULL);
    int32_t eos = g[4];
    int64_t first = 0;
    while (g[first] != eos)
        first++;
    KdaGenStats st;
    CHECK_EQ_INT(gen_(&m, prompt, 2, k_greedy, 12, 0, &eos, 1, o, &st), first + 1);
    CHECK(st.stopped_eos);
    CHECK_EQ_INT(o[first], eos);
    CHECK_EQ_INT(st.n_steps, first);
    KdaGenOpts go = {k_greedy, 12, 0, &eos, 1, 1}; // ignore_eos runs to the limit
    KdaError err;
    KdaRuntime *rt = tiny_runtime(&m, "cpu", NULL);
    CHECK(rt && kda_generate(rt, prompt, 2, &go, o, NULL, NULL, &st, &err) == 0);
    kda_runtime_close(rt);
    CHECK_EQ_INT(st.n_new, 12);
    CHECK(!st.stopped_eos);
    CHECK(memcmp(o, g, sizeof g) == 0);
    kda_model_free(&m);
}

// ---- sampler ------------------------------------------------------------------------------------

static int cmp_desc_(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

// Over a 5000-id vocabulary: every draw under top-k lies in the k largest logits, every draw
// under top-p in the nucleus computed by a full sort, and all of them get drawn eventually.
KDA_TEST(gen_sampler_topk_topp_sets) {
    int64_t n = 5000;
    float *lg = kda_malloc((size_t)n * sizeof(float)),
          *sorted = kda_malloc((size_t)n * sizeof(float));
    KdaRng r, d;
    rng_seed(&r, 3);
    for (int64_t i = 0; i < n; i++)
        lg[i] = rng_normal(&r, 0.0f, 3.0f);
    memcpy(sorted, lg, (size_t)n * sizeof(float));
    qsort(sorted, (size_t)n, sizeof(float), cmp_desc_);
    KdaSampler s = {0};
    rng_seed(&d, 1);
    // top-k 37 at a huge temperature: (nearly) uniform over exactly the 37 largest.
    KdaSampleOpts ok = {1e6, 37, 1.0};
    char *seen = kda_calloc((size_t)n, 1);
    int64_t distinct = 0;
    for (int i = 0; i < 3000; i++) {
        int32_t id = kda_sample(&s, lg, n, &ok, &d);
        CHECK(lg[id] >= sorted[36]);
        distinct += !seen[id], seen[id] = 1;
    }
    CHECK_EQ_INT(distinct, 37);
    // top-p 0.5 at temperature 1: the nucleus by sorted cumulative probability.
    double z = 0.0, acc = 0.0;
    for (int64_t i = 0; i < n; i++)
        z += exp((double)sorted[i] - sorted[0]);
    int64_t nuc = 0;
    while (acc < 0.5 * z)
        acc += exp((double)sorted[nuc++] - sorted[0]);
    KdaSampleOpts op = {1.0, 0, 0.5};
    for (int i = 0; i < 2000; i++) {
        int32_t id = kda_sample(&s, lg, n, &op, &d);
        CHECK(lg[id] >= sorted[nuc - 1]);
    }
    // Frequencies follow the softmax: logits ln(0.5), ln(0.3), ln(0.2), 20000 draws; binomial
    // std <= 0.0036, so 0.015 is > 4 sigma.
    float small[3] = {logf(0.5f), logf(0.3f), logf(0.2f)};
    KdaSampleOpts t1 = {1.0, 0, 1.0};
    int cnt[3] = {0, 0, 0};
    for (int i = 0; i < 20000; i++)
        cnt[kda_sample(&s, small, 3, &t1, &d)]++;
    CHECK_NEAR(cnt[0] / 20000.0, 0.5, 0.015);
    CHECK_NEAR(cnt[1] / 20000.0, 0.3, 0.015);
    CHECK_NEAR(cnt[2] / 20000.0, 0.2, 0.015);
    // Ties with the k-th logit are kept: top-k 1 over {1, 1, 0} draws both maxima.
    float tie[3] = {1.0f, 1.0f, 0.0f};
    KdaSampleOpts k1 = {1.0, 1, 1.0};
    int got[3] = {0, 0, 0};
    for (int i = 0; i < 200; i++)
        got[kda_sample(&s, tie, 3, &k1, &d)]++;
    CHECK(got[0] > 0 && got[1] > 0 && got[2] == 0);
    CHECK_EQ_INT(kda_argmax(tie, 3), 0);
    kda_sampler_free(&s);
    free(seen), free(lg), free(sorted);
}

// ---- UTF-8 stream -------------------------------------------------------------------------------

KDA_TEST(gen_utf8_stream_holds_split_chars) {
    const char *pieces[] = {"h",         "\xC3", "\xA9", "\xE2\x82", "\xAC!", "\xFF",
                            "a\xF0\x9F", "\x98", "\x80", "\xE0",     "\x80",  "z\xE2\x82"};
    int n = (int)(sizeof pieces / sizeof *pieces);
    char *buf = NULL;
    size_t len = 0, all_n = 0;
    FILE *f = open_memstream(&buf, &len);
    KdaUtf8Stream s = {{0}, 0};
    unsigned char all[64];
    for (int i = 0; i < n; i++) {
        size_t k = strlen(pieces[i]);
        memcpy(all + all_n, pieces[i], k), all_n += k;
        kda_utf8_stream_write(&s, pieces[i], k, f);
        fflush(f);
        if (i == 1) CHECK_EQ_INT(len, 1); // "h" out, the lead byte of é held
        if (i == 2) CHECK_EQ_INT(len, 3); // é complete
        if (i == 3) CHECK_EQ_INT(len, 3); // two bytes of € held
        if (i == 7) CHECK_EQ_INT(s.n, 3); // three bytes of an emoji held
    }
    kda_utf8_stream_flush(&s, f); // the trailing "\xE2\x82" never completes: one U+FFFD
    fclose(f);
    unsigned char want[256];
    size_t wn = utf8_lossy(all, all_n, want);
    CHECK_EQ_INT(len, wn);
    CHECK(len == wn && memcmp(buf, want, wn) == 0);
    free(buf);
}
