// loader.c - datasets, split ranges, GPTDataset indices, blending, the FLA chunk order,
// micro-batch reading and the prefetch thread (contract in loader.h).
#include "data/loader.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/indexed.h"
#include "data/gpt_dataset.h"

typedef struct {
    char *prefix;
    IndexedDataset ds;
    int32_t *lengths; // [n_seq] aligned copy of the .idx lengths
    int64_t first_seq, n_seq_split, split_tokens;
    KdaGptIndex ix;
    int index_built;
    // KDA_ORDER_FLA
    int64_t *cum; // [n_seq_split + 1] start of each split sequence in the concatenated stream
    int64_t n_chunks, dropped;
    KdaFlaOrder order;
    int order_built;
} LoaderSet;

typedef struct {
    pthread_t th;
    int running, stop, failed;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int32_t **bufs; // [depth + 1] row buffers of B * T ids
    int depth;
    int64_t first, B, stride, n_prod, n_cons; // batch k starts at first + k * stride
    KdaError err;
} Prefetch;

struct KdaLoader {
    LoaderSet *sets;
    int n;
    double *weights;       // [n] normalized
    int64_t num_samples;   // blended size (n > 1) or the single index's sample count
    int16_t *blend_ds;     // [num_samples] (n > 1)
    int64_t *blend_sample; // [num_samples] (n > 1)
    int64_t seq_length, row_tokens, n_vocab;
    KdaObjective objective;
    KdaDataOrder order;
    int64_t mbs; // micro batch of the FLA mapping
    char *desc;
    uint64_t fingerprint;
    Prefetch pf;
};

static uint64_t fnv1a(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static int set_open(LoaderSet *s, const char *prefix, const KdaLoaderSpec *spec, KdaError *err) {
    s->prefix = kda_strdup(prefix);
    if (indexed_open(&s->ds, prefix, err)) return -1;
    const IndexedIndex *ix = &s->ds.idx;
    s->lengths = kda_malloc((size_t)(ix->n_seq > 0 ? ix->n_seq : 1) * sizeof(int32_t));
    for (int64_t i = 0; i < ix->n_seq; i++)
        s->lengths[i] = indexed_index_length(ix, i);
    int64_t doc_lo = 0, doc_hi = ix->n_docs;
    if (!spec->whole) {
        double split[3];
        int64_t b[4];
        if (kda_split_parse(spec->split ? spec->split : "969,30,1", split, err)) return -1;
        kda_split_bounds(split, ix->n_docs, b);
        doc_lo = b[spec->split_part];
        doc_hi = b[spec->split_part + 1];
    }
    static const char *parts[3] = {"train", "valid", "test"};
    if (doc_hi <= doc_lo)
        return kda_fail(err, "%s: the %s split of %lld documents is empty (split \"%s\")", prefix,
                        parts[spec->split_part], (long long)ix->n_docs, spec->split);
    int64_t a, e, a2, e2;
    indexed_index_doc_range(ix, doc_lo, &a, &e);
    indexed_index_doc_range(ix, doc_hi - 1, &a2, &e2);
    s->first_seq = a;
    s->n_seq_split = e2 - a;
    for (int64_t i = a; i < e2; i++)
        s->split_tokens += s->lengths[i];
    int64_t need = spec->order == KDA_ORDER_FLA ? spec->seq_length : spec->seq_length + 1;
    if (s->n_seq_split < 1 || s->split_tokens < need)
        return kda_fail(err, "%s: the %s split has %lld tokens, fewer than %s = %lld", prefix,
                        parts[spec->split_part], (long long)s->split_tokens,
                        spec->order == KDA_ORDER_FLA ? "seq_length (one chunk)" : "seq_length + 1",
                        (long long)need);
    return 0;
}

// FLA order: chunk table of the split and the permutation (one dataset).
static int build_fla_order(KdaLoader *l, const KdaLoaderSpec *spec, KdaError *err) {
    LoaderSet *s = &l->sets[0];
    l->weights = kda_malloc(sizeof(double));
    l->weights[0] = 1.0;
    s->cum = kda_malloc((size_t)(s->n_seq_split + 1) * sizeof(int64_t));
    s->cum[0] = 0;
    for (int64_t k = 0; k < s->n_seq_split; k++)
        s->cum[k + 1] = s->cum[k] + s->lengths[s->first_seq + k];
    s->n_chunks = s->split_tokens / spec->seq_length;
    s->dropped = s->split_tokens - s->n_chunks * spec->seq_length;
    int64_t dp = spec->dp > 0 ? spec->dp : 1;
    if (kda_fla_order_build(&s->order, s->n_chunks, dp, spec->seed, err)) return -1;
    s->order_built = 1;
    l->num_samples = s->order.total;
    return 0;
}

static int build_indices(KdaLoader *l, const KdaLoaderSpec *spec, KdaError *err) {
    l->weights = kda_malloc((size_t)l->n * sizeof(double));
    for (int d = 0; d < l->n; d++)
        l->weights[d] = spec->weights ? spec->weights[d] : (double)l->sets[d].split_tokens;
    if (kda_blend_normalize(l->weights, l->n, err)) return -1;
    for (int d = 0; d < l->n; d++) {
        LoaderSet *s = &l->sets[d];
        int64_t want = l->n == 1 ? spec->num_samples
                                 : kda_blend_dataset_size(spec->num_samples, l->weights[d], 0.005);
        if (kda_gpt_index_build(&s->ix, s->lengths, s->ds.idx.n_seq, s->first_seq, s->n_seq_split,
                                spec->seq_length, want, spec->seed, err)) {
            char m[sizeof err->msg];
            snprintf(m, sizeof m, "%s", err->msg);
            return kda_fail(err, "%s: %s", s->prefix, m);
        }
        s->index_built = 1;
    }
    if (l->n == 1) {
        l->num_samples = l->sets[0].ix.n_samples;
        return 0;
    }
    l->num_samples = spec->num_samples;
    l->blend_ds = kda_malloc((size_t)l->num_samples * sizeof(int16_t));
    l->blend_sample = kda_malloc((size_t)l->num_samples * sizeof(int64_t));
    kda_blend_build(l->weights, l->n, l->num_samples, l->blend_ds, l->blend_sample);
    return 0;
}

static void describe(KdaLoader *l, const KdaLoaderSpec *spec) {
    size_t cap = 384, n = 0;
    for (int d = 0; d < l->n; d++)
        cap += strlen(l->sets[d].prefix) + 96;
    l->desc = kda_malloc(cap);
    n += (size_t)snprintf(
        l->desc + n, cap - n, "part=%d whole=%d split=%s seq_length=%lld seed=%u objective=%s",
        spec->split_part, spec->whole, spec->whole ? "-" : spec->split, (long long)spec->seq_length,
        spec->seed, spec->objective == KDA_OBJ_FLA ? "fla" : "megatron");
    if (l->order == KDA_ORDER_FLA) {
        const LoaderSet *s = &l->sets[0];
        n +=
            (size_t)snprintf(l->desc + n, cap - n, " order=fla chunks=%lld dropped=%lld dp=%lld",
                             (long long)s->n_chunks, (long long)s->dropped, (long long)s->order.dp);
        if (s->order.dp > 1)
            n += (size_t)snprintf(l->desc + n, cap - n, " mbs=%lld", (long long)l->mbs);
    }
    for (int d = 0; d < l->n; d++)
        n += (size_t)snprintf(l->desc + n, cap - n, " | %s w=%.6f seqs=%lld tokens=%lld",
                              l->sets[d].prefix, l->weights[d], (long long)l->sets[d].ds.idx.n_seq,
                              (long long)l->sets[d].ds.idx.n_tokens);
    l->fingerprint = fnv1a(l->desc);
}

int kda_loader_open(KdaLoader **out, const KdaLoaderSpec *spec, KdaError *err) {
    *out = NULL;
    if (spec->n_paths < 1) return kda_fail(err, "data: no dataset prefixes given");
    if (spec->n_paths > 32767) return kda_fail(err, "data: too many datasets in a blend");
    if (spec->seq_length < 2) return kda_fail(err, "data: seq_length must be >= 2");
    if (spec->order == KDA_ORDER_FLA && spec->objective != KDA_OBJ_FLA)
        return kda_fail(err, "data: the FLA data order needs the FLA objective (seq_length-token "
                             "chunks, seq_length - 1 targets)");
    if (spec->order == KDA_ORDER_FLA && spec->n_paths != 1)
        return kda_fail(err,
                        "data: the FLA data order reads one dataset (FLA's chunk dataset), "
                        "got %d prefixes",
                        spec->n_paths);
    KdaLoader *l = kda_calloc(1, sizeof *l);
    l->n = spec->n_paths;
    l->sets = kda_calloc((size_t)l->n, sizeof *l->sets);
    l->seq_length = spec->seq_length;
    l->objective = spec->objective;
    l->order = spec->order;
    l->mbs = spec->micro_batch > 0 ? spec->micro_batch : 1;
    l->row_tokens = spec->objective == KDA_OBJ_FLA ? spec->seq_length : spec->seq_length + 1;
    l->n_vocab = spec->n_vocab;
    pthread_mutex_init(&l->pf.mu, NULL);
    pthread_cond_init(&l->pf.cv, NULL);
    for (int d = 0; d < l->n; d++)
        if (set_open(&l->sets[d], spec->paths[d], spec, err)) goto fail;
    if (l->order == KDA_ORDER_FLA ? build_fla_order(l, spec, err) : build_indices(l, spec, err))
        goto fail;
    describe(l, spec);
    *out = l;
    return 0;
fail:
    kda_loader_free(l);
    return -1;
}

static void prefetch_stop(KdaLoader *l) {
    Prefetch *p = &l->pf;
    if (!p->running) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->th, NULL);
    p->running = 0;
    for (int i = 0; i <= p->depth; i++)
        free(p->bufs[i]);
    free(p->bufs);
    p->bufs = NULL;
}

void kda_loader_free(KdaLoader *l) {
    if (!l) return;
    prefetch_stop(l);
    pthread_mutex_destroy(&l->pf.mu);
    pthread_cond_destroy(&l->pf.cv);
    for (int d = 0; d < l->n; d++) {
        LoaderSet *s = &l->sets[d];
        if (s->index_built) kda_gpt_index_free(&s->ix);
        if (s->order_built) kda_fla_order_free(&s->order);
        free(s->cum);
        indexed_close(&s->ds);
        free(s->lengths);
        free(s->prefix);
    }
    free(l->sets);
    free(l->weights);
    free(l->blend_ds);
    free(l->blend_sample);
    free(l->desc);
    free(l);
}

int64_t kda_loader_row_tokens(const KdaLoader *l) {
    return l->row_tokens;
}
int64_t kda_loader_n_samples(const KdaLoader *l) {
    return l->num_samples;
}
int64_t kda_loader_fla_chunk(const KdaLoader *l, int64_t g) {
    if (l->order != KDA_ORDER_FLA) return -1;
    return kda_fla_order_chunk(&l->sets[0].order, g, l->mbs);
}
int64_t kda_loader_n_chunks(const KdaLoader *l) {
    return l->order == KDA_ORDER_FLA ? l->sets[0].n_chunks : 0;
}
const char *kda_loader_describe(const KdaLoader *l) {
    return l->desc;
}
uint64_t kda_loader_fingerprint(const KdaLoader *l) {
    return l->fingerprint;
}

// Copies n tokens of sequence seq from offset off into row, checking the vocabulary.
// tok: [>= n] int64 scratch. Returns the number copied (< n at the end of the sequence).
static int64_t copy_tokens(const KdaLoader *l, const LoaderSet *s, int64_t seq, int64_t off,
                           int64_t n, int32_t *row, int64_t *tok, KdaError *err) {
    int64_t got = indexed_read_tokens(&s->ds, seq, off, tok, n);
    for (int64_t t = 0; t < got; t++) {
        if (tok[t] < 0 || tok[t] >= l->n_vocab)
            return kda_fail(err,
                            "%s: sequence %lld holds token id %lld, outside the model's "
                            "vocabulary [0, %lld)",
                            s->prefix, (long long)seq, (long long)tok[t], (long long)l->n_vocab);
        row[t] = (int32_t)tok[t];
    }
    return got;
}

// FLA order: reads chunk c (tokens [c * T, (c + 1) * T) of the split's concatenated stream).
static int read_chunk(const KdaLoader *l, int64_t c, int32_t *row, int64_t *tok, KdaError *err) {
    const LoaderSet *s = &l->sets[0];
    int64_t start = c * l->row_tokens;
    int64_t lo = 0, hi = s->n_seq_split - 1; // last k with cum[k] <= start
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        if (s->cum[mid] <= start)
            lo = mid;
        else
            hi = mid - 1;
    }
    int64_t at = 0, off = start - s->cum[lo];
    for (int64_t k = lo; k < s->n_seq_split && at < l->row_tokens; k++, off = 0) {
        int64_t got =
            copy_tokens(l, s, s->first_seq + k, off, l->row_tokens - at, row + at, tok, err);
        if (got < 0) return -1;
        at += got;
    }
    KDA_ASSERT(at == l->row_tokens);
    return 0;
}

// Reads global sample i (wrapping) into row ([row_tokens] int32). spans/tok are scratch.
static int read_sample(const KdaLoader *l, int64_t i, int32_t *row, KdaSpan **spans, int64_t *cap,
                       int64_t *tok, KdaError *err) {
    if (l->order == KDA_ORDER_FLA) return read_chunk(l, kda_loader_fla_chunk(l, i), row, tok, err);
    i %= l->num_samples;
    int d = 0;
    int64_t j = i;
    if (l->n > 1) {
        d = l->blend_ds[i];
        j = l->blend_sample[i];
    }
    const LoaderSet *s = &l->sets[d];
    j %= s->ix.n_samples;
    int64_t ns;
    while ((ns = kda_gpt_sample_spans(&s->ix, s->lengths, j, *spans, *cap)) > *cap) {
        *cap = ns;
        *spans = kda_realloc(*spans, (size_t)ns * sizeof(KdaSpan));
    }
    int64_t at = 0;
    for (int64_t k = 0; k < ns && at < l->row_tokens; k++) {
        int64_t want = (*spans)[k].length;
        if (want > l->row_tokens - at) want = l->row_tokens - at;
        int64_t got =
            copy_tokens(l, s, (*spans)[k].seq, (*spans)[k].offset, want, row + at, tok, err);
        if (got < 0) return -1;
        at += got;
    }
    KDA_ASSERT(at == l->row_tokens);
    return 0;
}

int kda_loader_read(KdaLoader *l, int64_t first, int64_t B, int32_t *ids, KdaError *err) {
    int64_t cap = 16;
    KdaSpan *spans = kda_malloc((size_t)cap * sizeof(KdaSpan));
    int64_t *tok = kda_malloc((size_t)l->row_tokens * sizeof(int64_t));
    int rc = 0;
    for (int64_t b = 0; b < B && !rc; b++)
        rc = read_sample(l, first + b, ids + b * l->row_tokens, &spans, &cap, tok, err);
    free(spans);
    free(tok);
    return rc;
}

static void *prefetch_main(void *arg) {
    KdaLoader *l = arg;
    Prefetch *p = &l->pf;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (!p->stop && p->n_prod - p->n_cons >= p->depth)
            pthread_cond_wait(&p->cv, &p->mu);
        if (p->stop || p->failed) {
            pthread_mutex_unlock(&p->mu);
            return NULL;
        }
        int64_t k = p->n_prod;
        pthread_mutex_unlock(&p->mu);
        KdaError e = {{0}};
        int rc =
            kda_loader_read(l, p->first + k * p->stride, p->B, p->bufs[k % (p->depth + 1)], &e);
        pthread_mutex_lock(&p->mu);
        if (rc) {
            p->failed = 1;
            p->err = e;
        } else {
            p->n_prod++;
        }
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        if (rc) return NULL;
    }
}

int kda_loader_start(KdaLoader *l, int64_t first, int64_t B, int depth, KdaError *err) {
    return kda_loader_start_strided(l, first, B, B, depth, err);
}

int kda_loader_start_strided(KdaLoader *l, int64_t first, int64_t B, int64_t stride, int depth,
                             KdaError *err) {
    prefetch_stop(l);
    Prefetch *p = &l->pf;
    if (depth < 1) depth = 1;
    p->depth = depth;
    p->first = first;
    p->B = B;
    p->stride = stride;
    p->n_prod = p->n_cons = 0;
    p->stop = p->failed = 0;
    p->bufs = kda_malloc((size_t)(depth + 1) * sizeof(int32_t *));
    for (int i = 0; i <= depth; i++)
        p->bufs[i] = kda_malloc((size_t)(B * l->row_tokens) * sizeof(int32_t));
    if (pthread_create(&p->th, NULL, prefetch_main, l) != 0) {
        for (int i = 0; i <= depth; i++)
            free(p->bufs[i]);
        free(p->bufs);
        p->bufs = NULL;
        return kda_fail(err, "data: cannot start the prefetch thread");
    }
    p->running = 1;
    return 0;
}

const int32_t *kda_loader_next(KdaLoader *l, KdaError *err) {
    Prefetch *p = &l->pf;
    if (!p->running) {
        kda_fail(err, "data: kda_loader_next without kda_loader_start");
        return NULL;
    }
    pthread_mutex_lock(&p->mu);
    while (!p->failed && p->n_prod <= p->n_cons)
        pthread_cond_wait(&p->cv, &p->mu);
    if (p->n_prod <= p->n_cons) { // failed before producing this batch
        if (err) *err = p->err;
        pthread_mutex_unlock(&p->mu);
        return NULL;
    }
    const int32_t *buf = p->bufs[p->n_cons % (p->depth + 1)];
    p->n_cons++;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return buf;
}
