// generate.c - sampling, the generation loop and the UTF-8 stream writer (contract in
// generate.h).
//
// Top-k and top-p use a three-way quickselect over candidate indices (expected O(n) per
// token, no full sort of a 128K vocabulary): the candidates end up first in s->idx in an order
// that depends only on the logits, so a seeded draw is reproducible.
#include "eval/generate.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h" // defines: now_seconds, utf8_lossy

// ---- sampling -----------------------------------------------------------------------------------

void kda_sampler_free(KdaSampler *s) {
    free(s->idx);
    free(s->w);
    memset(s, 0, sizeof *s);
}

int32_t kda_argmax(const float *x, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return (int32_t)best;
}

static void swap_(int32_t *a, int64_t i, int64_t j) {
    int32_t t = a[i];
    a[i] = a[j], a[j] = t;
}

// Median of key at a[lo], a[mid], a[hi-1] (deterministic pivot).
static float pivot_(const int32_t *a, const float *key, int64_t lo, int64_t hi) {
    float x = key[a[lo]], y = key[a[lo + (hi - lo) / 2]], z = key[a[hi - 1]];
    if ((x <= y && y <= z) || (z <= y && y <= x)) return y;
    if ((y <= x && x <= z) || (z <= x && x <= y)) return x;
    return z;
}

// Reorders a[lo..hi) into key > pv, key == pv, key < pv; *n_gt and *n_eq get the sizes.
static void partition3_(int32_t *a, const float *key, int64_t lo, int64_t hi, float pv,
                        int64_t *n_gt, int64_t *n_eq) {
    int64_t i = lo, j = lo, k = hi;
    while (j < k) {
        float x = key[a[j]];
        if (x > pv)
            swap_(a, i++, j++);
        else if (x < pv)
            swap_(a, j, --k);
        else
            j++;
    }
    *n_gt = i - lo, *n_eq = j - i;
}

// Moves the `count` largest keys of a[0..n) (plus ties of the count-th) to the front; returns
// how many that is. 1 <= count <= n.
static int64_t select_count_(int32_t *a, const float *key, int64_t n, int64_t count) {
    int64_t lo = 0, hi = n, need = count;
    for (;;) {
        int64_t gt, eq;
        partition3_(a, key, lo, hi, pivot_(a, key, lo, hi), &gt, &eq);
        if (need <= gt)
            hi = lo + gt;
        else if (need <= gt + eq)
            return lo + gt + eq;
        else
            need -= gt + eq, lo += gt + eq;
    }
}

static double mass_(const int32_t *a, const float *w, int64_t lo, int64_t hi) {
    double s = 0.0;
    for (int64_t i = lo; i < hi; i++)
        s += w[a[i]];
    return s;
}

// Moves the smallest set of largest weights of a[0..n) whose sum reaches `need` (plus ties of
// its smallest member) to the front; returns its size (>= 1).
static int64_t select_mass_(int32_t *a, const float *w, int64_t n, double need) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t gt, eq;
        partition3_(a, w, lo, hi, pivot_(a, w, lo, hi), &gt, &eq);
        double m_gt = mass_(a, w, lo, lo + gt), m_eq = mass_(a, w, lo + gt, lo + gt + eq);
        if (gt > 0 && m_gt >= need)
            hi = lo + gt;
        else if (m_gt + m_eq >= need)
            return lo + gt + eq;
        else
            need -= m_gt + m_eq, lo += gt + eq;
    }
    return hi > 0 ? hi : 1; // rounding left `need` unmet: everything up to here
}

int32_t kda_sample(KdaSampler *s, const float *logits, int64_t n, const KdaSampleOpts *o,
                   KdaRng *rng) {
    float inv_t = (float)(1.0 / o->temperature);
    // A temperature so small that 1/T overflows: every non-maximal weight underflows anyway.
    if (o->temperature <= 0.0 || !isfinite(inv_t) || n <= 1) return kda_argmax(logits, n);
    if (s->cap < n) {
        free(s->idx), free(s->w);
        s->idx = kda_malloc((size_t)n * sizeof(int32_t));
        s->w = kda_malloc((size_t)n * sizeof(float));
        s->cap = n;
    }
    float lmax = logits[kda_argmax(logits, n)];
    for (int64_t i = 0; i < n; i++)
        s->idx[i] = (int32_t)i;
    int64_t m = n;
    if (o->top_k > 0 && o->top_k < n) m = select_count_(s->idx, logits, n, o->top_k);
    // Weights of the candidates only: exp((l - lmax) / T), exactly 1 for the maximum.
    for (int64_t i = 0; i < m; i++)
        s->w[s->idx[i]] = expf((logits[s->idx[i]] - lmax) * inv_t);
    if (o->top_p < 1.0) {
        double need = (o->top_p > 0.0 ? o->top_p : 0.0) * mass_(s->idx, s->w, 0, m);
        m = select_mass_(s->idx, s->w, m, need);
    }
    double u = rng_uniform(rng) * mass_(s->idx, s->w, 0, m), acc = 0.0;
    for (int64_t i = 0; i < m; i++) {
        acc += s->w[s->idx[i]];
        if (u < acc) return s->idx[i];
    }
    return s->idx[m - 1];
}

// ---- generation loop ----------------------------------------------------------------------------

static int finite_(const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

static int is_eos_(const KdaGenOpts *o, int32_t id) {
    if (o->ignore_eos) return 0;
    for (int i = 0; i < o->n_eos; i++)
        if (o->eos_ids[i] == id) return 1;
    return 0;
}

// The logits of the last position of seq [n]: a forward of the whole sequence (labels = ids; its
// NLLs are not read) and that row of the head.
static int refeed_logits_(KdaRuntime *rt, const int32_t *seq, int64_t n, float *logits,
                          KdaError *err) {
    if (kda_runtime_forward(rt, seq, NULL, 1, n, NULL, NULL, err)) return -1;
    return kda_runtime_logits(rt, 0, n - 1, logits, err);
}

// The sampling loop both generators share: logits [vocab] hold the first new token's logits on
// entry; next(ctx, id, logits, err) feeds id and writes the following logits. pos0 is the
// position of the logits on entry (for messages).
typedef int (*NextFn)(void *ctx, int32_t id, float *logits, KdaError *err);

static int sample_loop_(NextFn next, void *ctx, float *logits, int64_t vocab, int64_t pos0,
                        const KdaGenOpts *o, int32_t *out, KdaGenTokenFn cb, void *user,
                        KdaGenStats *st, KdaError *err) {
    KdaSampler smp = {0};
    KdaRng rng;
    rng_seed(&rng, o->seed);
    int rc = 0;
    while (st->n_new < o->max_new_tokens) {
        if (!finite_(logits, vocab)) {
            rc = kda_fail(err, "non-finite logits at position %lld", (long long)(pos0 + st->n_new));
            break;
        }
        int32_t id = kda_sample(&smp, logits, vocab, &o->sample, &rng);
        if (out) out[st->n_new] = id;
        st->n_new++;
        int stop = cb ? cb(id, user) : 0;
        if (is_eos_(o, id)) st->stopped_eos = 1, stop = 1;
        if (stop || st->n_new == o->max_new_tokens) break;
        if (next(ctx, id, logits, err)) {
            rc = -1;
            break;
        }
        st->n_steps++;
    }
    kda_sampler_free(&smp);
    return rc;
}

typedef struct {
    KdaRuntime *rt;
    KdaRtState *st;
} DecodeCtx;

static int decode_next_(void *c, int32_t id, float *logits, KdaError *err) {
    DecodeCtx *d = c;
    return kda_runtime_decode(d->rt, d->st, id, logits, err);
}

int kda_generate(KdaRuntime *rt, const int32_t *prompt, int64_t n_prompt, const KdaGenOpts *o,
                 int32_t *out, KdaGenTokenFn cb, void *user, KdaGenStats *stats, KdaError *err) {
    KdaGenStats st = {n_prompt, 0, 0, 0.0, 0.0, 0};
    int64_t vocab = kda_runtime_config(rt)->vocab_size;
    DecodeCtx dc = {rt, NULL};
    if (kda_runtime_state_new(rt, &dc.st, err)) return -1;
    float *logits = kda_malloc((size_t)vocab * sizeof(float));
    double t0 = now_seconds();
    int rc = kda_runtime_prefill(rt, dc.st, prompt, n_prompt, logits, err);
    double t1 = now_seconds();
    st.prefill_s = t1 - t0;
    // The CPU decode's OpenMP loops are per-token vectors, too small for threads; idle OpenMP
    // workers spinning between them starve OpenBLAS's own threads in the matvecs (demo model,
    // 2 threads: 223 tok/s with OpenMP threads, 1110 without). Restored below.
    int omp_threads = omp_get_max_threads();
    omp_set_num_threads(1);
    if (!rc)
        rc = sample_loop_(decode_next_, &dc, logits, vocab, n_prompt - 1, o, out, cb, user, &st,
                          err);
    st.decode_s = now_seconds() - t1;
    omp_set_num_threads(omp_threads);
    if (stats) *stats = st;
    free(logits);
    kda_runtime_state_free(rt, dc.st);
    return rc;
}

typedef struct {
    KdaRuntime *rt;
    int32_t *seq;
    int64_t n;
} RefeedCtx;

static int refeed_next_(void *c, int32_t id, float *logits, KdaError *err) {
    RefeedCtx *r = c;
    r->seq[r->n++] = id;
    return refeed_logits_(r->rt, r->seq, r->n, logits, err);
}

int kda_generate_refeed(KdaRuntime *rt, const int32_t *prompt, int64_t n_prompt,
                        const KdaGenOpts *o, int32_t *out, KdaGenTokenFn cb, void *user,
                        KdaGenStats *stats, KdaError *err) {
    KdaGenStats st = {n_prompt, 0, 0, 0.0, 0.0, 0};
    if (n_prompt < 1) return kda_fail(err, "generation needs a prompt of at least one token");
    int64_t vocab = kda_runtime_config(rt)->vocab_size;
    RefeedCtx rc_ = {rt, kda_malloc((size_t)(n_prompt + o->max_new_tokens) * sizeof(int32_t)),
                     n_prompt};
    memcpy(rc_.seq, prompt, (size_t)n_prompt * sizeof(int32_t));
    float *logits = kda_malloc((size_t)vocab * sizeof(float));
    double t0 = now_seconds();
    int rc = o->max_new_tokens > 0 && refeed_logits_(rt, rc_.seq, n_prompt, logits, err) ? -1 : 0;
    double t1 = now_seconds();
    st.prefill_s = t1 - t0;
    if (!rc)
        rc = sample_loop_(refeed_next_, &rc_, logits, vocab, n_prompt - 1, o, out, cb, user, &st,
                          err);
    st.decode_s = now_seconds() - t1;
    if (stats) *stats = st;
    free(rc_.seq), free(logits);
    return rc;
}

// ---- UTF-8 stream -------------------------------------------------------------------------------

// Length of a trailing proper prefix of a well-formed UTF-8 sequence at the end of s[0..n)
// (0..3): the bytes that may still complete. Second-byte ranges per Unicode Table 3-7.
static size_t incomplete_tail_(const unsigned char *s, size_t n) {
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        unsigned c = s[n - back];
        if (c < 0x80) return 0;
        if (c < 0xC0) continue; // continuation byte: look further back for the lead
        size_t need;
        unsigned lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF)
            need = 2;
        else if (c >= 0xE0 && c <= 0xEF)
            need = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
        else if (c >= 0xF0 && c <= 0xF4)
            need = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
        else
            return 0;
        if (back >= need) return 0;
        if (back >= 2 && (s[n - back + 1] < lo || s[n - back + 1] > hi)) return 0;
        for (size_t i = 2; i < back; i++)
            if ((s[n - back + i] & 0xC0) != 0x80) return 0;
        return back;
    }
    return 0;
}

static void write_lossy_(const unsigned char *b, size_t n, FILE *f) {
    if (!n) return;
    unsigned char *out = kda_malloc(3 * n);
    size_t k = utf8_lossy(b, n, out);
    fwrite(out, 1, k, f);
    free(out);
}

void kda_utf8_stream_write(KdaUtf8Stream *s, const void *b, size_t n, FILE *f) {
    size_t len = s->n + n;
    unsigned char *buf = kda_malloc(len ? len : 1);
    memcpy(buf, s->pend, s->n);
    if (n) memcpy(buf + s->n, b, n);
    size_t hold = incomplete_tail_(buf, len);
    write_lossy_(buf, len - hold, f);
    memcpy(s->pend, buf + len - hold, hold);
    s->n = hold;
    free(buf);
}

void kda_utf8_stream_flush(KdaUtf8Stream *s, FILE *f) {
    write_lossy_(s->pend, s->n, f);
    s->n = 0;
}
