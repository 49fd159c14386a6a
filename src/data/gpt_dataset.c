// gpt_dataset.c - Megatron GPTDataset indices, splits, blending, FLA order; see gpt_dataset.h.
#include "data/gpt_dataset.h" // defines: KdaGptIndex, KdaSpan, KdaFlaOrder, kda_gpt_*, ...

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data/mt19937.h" // defines: KdaMt19937, mt19937_seed, mt19937_shuffle_*

// ---------------------------------------------------------------------------------------------
// Epoch count and the separate-last-epoch rule (data-formats.md §2.1)

// Smallest E >= 1 with E * tokens_per_epoch >= num_samples * seq_length + 1.
static int64_t gpt_num_epochs(int64_t tokens_per_epoch, int64_t seq_length, int64_t num_samples) {
    if (num_samples <= 0) return 1;
    int64_t need = num_samples * seq_length + 1;
    return (need + tokens_per_epoch - 1) / tokens_per_epoch;
}

static int gpt_separate_last_epoch(int64_t epochs, int64_t tpe, int64_t seq_length,
                                   int64_t num_samples, int64_t *samples_before_last) {
    *samples_before_last = 0;
    if (epochs == 1 || num_samples <= 0) return 0;
    int64_t before = ((epochs - 1) * tpe - 1) / seq_length;
    int64_t from_last = num_samples - before;
    int64_t per_epoch = (tpe - 1) / seq_length;
    *samples_before_last = before;
    // int(0.80 * per_epoch): Python truncates the double product.
    return from_last < (int64_t)(0.80 * (double)per_epoch);
}

// ---------------------------------------------------------------------------------------------
// Document index (§2.3): the split's ids tiled per epoch, shuffled; a separate last epoch is
// shuffled on its own after the first E-1 tiles.

static void gpt_tile_shuffle(int32_t *out, int64_t first, int64_t count, int64_t epochs,
                             KdaMt19937 *rs) {
    for (int64_t e = 0; e < epochs; e++)
        for (int64_t k = 0; k < count; k++)
            out[e * count + k] = (int32_t)(first + k);
    mt19937_shuffle_i32(rs, out, epochs * count);
}

// ---------------------------------------------------------------------------------------------
// Sample index (§2.4, Megatron's build_sample_idx with add_extra_token 1, drop_last true)

static int gpt_build_sample_index(KdaGptIndex *ix, const int32_t *lengths, KdaError *err) {
    const int64_t seq = ix->seq_length;
    int64_t *si = ix->sample_index;
    int64_t pos = 0, off = 0; // position in the document index, offset inside that sequence
    si[0] = 0;
    si[1] = 0;
    for (int64_t s = 1; s <= ix->n_samples; s++) {
        int64_t remaining = seq + 1;
        while (remaining != 0) {
            int64_t len = (int64_t)lengths[ix->document_index[pos]] - off;
            remaining -= len;
            if (remaining <= 0) {
                off += remaining + len - 1; // offset of the sample's last token
                remaining = 0;
            } else {
                if (pos == ix->n_document_index - 1)
                    return kda_fail(err,
                                    "gpt dataset: ran out of tokens at sample %lld "
                                    "(internal error)",
                                    (long long)s);
                pos++;
                off = 0;
            }
        }
        si[2 * s] = pos;
        si[2 * s + 1] = off;
    }
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Shuffle index (§2.5)

static void gpt_build_shuffle_index(KdaGptIndex *ix, KdaMt19937 *rs) {
    for (int64_t k = 0; k < ix->n_samples; k++)
        ix->shuffle_index[k] = k;
    mt19937_shuffle_i64(rs, ix->shuffle_index, ix->n_samples_first);
    if (ix->n_samples_first < ix->n_samples)
        mt19937_shuffle_i64(rs, ix->shuffle_index + ix->n_samples_first,
                            ix->n_samples - ix->n_samples_first);
}

static int gpt_check_args(const int32_t *lengths, int64_t n_lengths, int64_t first, int64_t count,
                          int64_t seq_length, int64_t *tpe, KdaError *err) {
    if (seq_length < 2)
        return kda_fail(err, "gpt dataset: seq_length %lld < 2", (long long)seq_length);
    if (count <= 0 || first < 0 || first + count > n_lengths || first + count > INT32_MAX)
        return kda_fail(err,
                        "gpt dataset: split [%lld, %lld) is empty or outside the %lld sequences",
                        (long long)first, (long long)(first + count), (long long)n_lengths);
    int64_t sum = 0;
    for (int64_t k = first; k < first + count; k++) {
        if (lengths[k] < 0)
            return kda_fail(err, "gpt dataset: sequence %lld has negative length %d", (long long)k,
                            lengths[k]);
        sum += lengths[k];
    }
    if (sum < seq_length + 1)
        return kda_fail(err, "gpt dataset: split has %lld tokens, fewer than seq_length + 1 = %lld",
                        (long long)sum, (long long)(seq_length + 1));
    *tpe = sum;
    return 0;
}

int kda_gpt_index_build(KdaGptIndex *ix, const int32_t *lengths, int64_t n_lengths, int64_t first,
                        int64_t count, int64_t seq_length, int64_t num_samples, uint32_t seed,
                        KdaError *err) {
    memset(ix, 0, sizeof *ix);
    int64_t tpe = 0;
    if (gpt_check_args(lengths, n_lengths, first, count, seq_length, &tpe, err)) return -1;
    ix->seq_length = seq_length;
    ix->num_samples = num_samples;
    ix->tokens_per_epoch = tpe;
    ix->num_epochs = gpt_num_epochs(tpe, seq_length, num_samples);
    int64_t before = 0;
    ix->separate_last_epoch =
        gpt_separate_last_epoch(ix->num_epochs, tpe, seq_length, num_samples, &before);

    KdaMt19937 rs;
    mt19937_seed(&rs, seed);
    ix->n_document_index = ix->num_epochs * count;
    ix->document_index = kda_malloc((size_t)ix->n_document_index * sizeof(int32_t));
    if (ix->separate_last_epoch) {
        gpt_tile_shuffle(ix->document_index, first, count, ix->num_epochs - 1, &rs);
        gpt_tile_shuffle(ix->document_index + (ix->num_epochs - 1) * count, first, count, 1, &rs);
    } else {
        gpt_tile_shuffle(ix->document_index, first, count, ix->num_epochs, &rs);
    }

    ix->n_samples = (ix->num_epochs * tpe - 1) / seq_length;
    ix->sample_index = kda_malloc((size_t)(ix->n_samples + 1) * 2 * sizeof(int64_t));
    if (gpt_build_sample_index(ix, lengths, err)) {
        kda_gpt_index_free(ix);
        return -1;
    }
    ix->n_samples_first = ix->separate_last_epoch ? before : ix->n_samples;
    ix->shuffle_index =
        kda_malloc((size_t)(ix->n_samples > 0 ? ix->n_samples : 1) * sizeof(int64_t));
    gpt_build_shuffle_index(ix, &rs);
    return 0;
}

void kda_gpt_index_free(KdaGptIndex *ix) {
    free(ix->document_index);
    free(ix->sample_index);
    free(ix->shuffle_index);
    memset(ix, 0, sizeof *ix);
}

// ---------------------------------------------------------------------------------------------
// Reading a sample (§2.6)

static int64_t span_push(KdaSpan *spans, int64_t cap, int64_t n, int64_t seq, int64_t off,
                         int64_t len) {
    if (len <= 0) return n; // empty sequences add no tokens
    if (n < cap) spans[n] = (KdaSpan){seq, off, len};
    return n + 1;
}

int64_t kda_gpt_sample_spans(const KdaGptIndex *ix, const int32_t *lengths, int64_t i,
                             KdaSpan *spans, int64_t cap) {
    KDA_ASSERT(i >= 0 && i < ix->n_samples);
    int64_t j = ix->shuffle_index[i];
    int64_t pb = ix->sample_index[2 * j], ob = ix->sample_index[2 * j + 1];
    int64_t pe = ix->sample_index[2 * j + 2], oe = ix->sample_index[2 * j + 3];
    const int32_t *doc = ix->document_index;
    if (pb == pe) return span_push(spans, cap, 0, doc[pb], ob, oe - ob + 1);
    int64_t n = span_push(spans, cap, 0, doc[pb], ob, lengths[doc[pb]] - ob);
    for (int64_t p = pb + 1; p < pe; p++)
        n = span_push(spans, cap, n, doc[p], 0, lengths[doc[p]]);
    return span_push(spans, cap, n, doc[pe], 0, oe + 1);
}

// ---------------------------------------------------------------------------------------------
// Splits

int kda_split_parse(const char *s, double split[3], KdaError *err) {
    int n = 0;
    double v[3] = {0, 0, 0};
    for (const char *p = s; *p;) {
        if (*p == ',' || *p == '/' || *p == ' ' || *p == '\t') { // Megatron's separators
            p++;
            continue;
        }
        if (!((*p >= '0' && *p <= '9') || *p == '.'))
            return kda_fail(err,
                            "split \"%s\": '%c' is not part of a weight (expected up to 3 "
                            "non-negative numbers separated by ',' or '/')",
                            s, *p);
        const char *start = p;
        while ((*p >= '0' && *p <= '9') || *p == '.')
            p++;
        if (n == 3) return kda_fail(err, "split \"%s\": more than 3 numbers", s);
        char buf[64];
        size_t len = (size_t)(p - start);
        if (len >= sizeof buf) return kda_fail(err, "split \"%s\": number too long", s);
        memcpy(buf, start, len);
        buf[len] = 0;
        char *end;
        v[n] = strtod(buf, &end);
        if (*end || end == buf)
            return kda_fail(err, "split \"%s\": \"%s\" is not a number", s, buf);
        n++;
    }
    double sum = v[0] + v[1] + v[2];
    if (!(sum > 0))
        return kda_fail(err, "split \"%s\": expected up to 3 weights with a positive sum", s);
    for (int k = 0; k < 3; k++)
        split[k] = v[k] / sum;
    return 0;
}

void kda_split_bounds(const double split[3], int64_t n, int64_t bounds[4]) {
    bounds[0] = 0;
    for (int k = 0; k < 3; k++)
        bounds[k + 1] = bounds[k] + (int64_t)nearbyint(split[k] * (double)n); // half to even
    int64_t excess = bounds[3] - n;
    for (int k = 1; k < 4; k++)
        bounds[k] -= excess;
}

// ---------------------------------------------------------------------------------------------
// Blends

int kda_blend_normalize(double *w, int n, KdaError *err) {
    if (n < 1) return kda_fail(err, "blend: no datasets");
    double sum = 0;
    for (int k = 0; k < n; k++) {
        if (!isfinite(w[k]) || w[k] < 0)
            return kda_fail(err, "blend: weight %d is %g, expected >= 0", k, w[k]);
        sum += w[k];
    }
    if (!(sum > 0)) return kda_fail(err, "blend: weights sum to 0");
    for (int k = 0; k < n; k++)
        w[k] /= sum;
    return 0;
}

int64_t kda_blend_dataset_size(int64_t target, double weight, double surplus) {
    return (int64_t)ceil(ceil((double)target * weight) * (1.0 + surplus));
}

void kda_blend_build(const double *weights, int n, int64_t size, int16_t *dataset_index,
                     int64_t *dataset_sample_index) {
    int64_t *taken = kda_calloc((size_t)n, sizeof(int64_t));
    for (int64_t s = 0; s < size; s++) {
        double sd = s > 1 ? (double)s : 1.0;
        int best = 0;
        double best_err = weights[0] * sd - (double)taken[0];
        for (int d = 1; d < n; d++) {
            double e = weights[d] * sd - (double)taken[d];
            if (e > best_err) {
                best_err = e;
                best = d;
            }
        }
        dataset_index[s] = (int16_t)best;
        dataset_sample_index[s] = taken[best]++;
    }
    free(taken);
}

// ---------------------------------------------------------------------------------------------
// FLA order

int kda_fla_order_build(KdaFlaOrder *o, int64_t n_chunks, int64_t dp, uint32_t seed,
                        KdaError *err) {
    memset(o, 0, sizeof *o);
    if (n_chunks < 1 || dp < 1)
        return kda_fail(err, "fla order: need at least one chunk and one rank (got %lld, %lld)",
                        (long long)n_chunks, (long long)dp);
    o->n_chunks = n_chunks;
    o->dp = dp;
    o->total = (n_chunks + dp - 1) / dp * dp;
    int64_t pad = o->total - n_chunks;
    o->n_perm = n_chunks + (pad < n_chunks ? pad : n_chunks);
    o->perm = kda_malloc((size_t)o->n_perm * sizeof(int64_t));
    for (int64_t k = 0; k < n_chunks; k++)
        o->perm[k] = k;
    KdaMt19937 rs;
    mt19937_seed(&rs, seed);
    mt19937_shuffle_i64(&rs, o->perm, n_chunks); // our permutation, not torch.randperm
    for (int64_t k = n_chunks; k < o->n_perm; k++)
        o->perm[k] = o->perm[k - n_chunks];
    return 0;
}

void kda_fla_order_free(KdaFlaOrder *o) {
    free(o->perm);
    memset(o, 0, sizeof *o);
}

int64_t kda_fla_order_chunk(const KdaFlaOrder *o, int64_t g, int64_t mbs) {
    KDA_ASSERT(g >= 0 && mbs >= 1);
    g %= o->total;
    int64_t gb = mbs * o->dp;
    int64_t t = g / gb, r = (g % gb) / mbs, j = g % mbs;
    int64_t k = r + (t * mbs + j) * o->dp;
    return k < o->n_perm ? o->perm[k] : 0;
}
