// tiny_model.c - tiny model configs, random ids and runtimes for the model tests (tiny_model.h).
#include "tiny_model.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"  // defines: KDA_ASSERT
#include "core/rng.h"    // defines: KdaRng, rng_seed, rng_below, rng_normal
#include "io/model_io.h" // defines: kda_model_load_dir
#include "test.h"        // defines: CHECK_MSG, test_data

KdaConfig tiny_config(TinyKind kind) {
    KdaConfig c;
    kda_config_defaults(&c);
    c.hidden_size = 32, c.num_hidden_layers = 2, c.num_heads = 2, c.head_dim = 8;
    c.expand_v = 1.0, c.intermediate_size_raw = 48, c.vocab_size = 50, c.conv_size = 4;
    c.tie_word_embeddings = 1;
    if (kind == TINY_GVA_NEG) {
        c.tie_word_embeddings = 0, c.num_v_heads_raw = 4, c.expand_v = 2.0;
        c.allow_neg_eigval = 1;
    }
    if (kind == TINY_NO_CONV) c.use_short_conv = 0;
    if (kind == TINY_BOUNDED) c.has_lower_bound = 1, c.lower_bound = -5.0;
    KdaError err;
    KDA_ASSERT(kda_config_derive(&c, "tiny", &err) == 0);
    return c;
}

void tiny_model_init(KdaModel *m, const KdaConfig *c, uint64_t seed) {
    KdaError err;
    KDA_ASSERT(kda_model_init(m, c, &err) == 0);
    kda_params_init(&m->table, &m->cfg, m->params, seed);
    KdaRng r;
    rng_seed(&r, seed + 1);
    for (int64_t l = 0; l < c->num_hidden_layers; l++)
        for (int64_t i = 0; i < m->cfg.value_dim; i++)
            m->w.layers[l].g_proj1_bias[i] = rng_normal(&r, 0.0f, 0.5f);
}

void tiny_random_ids(int32_t *ids, int64_t n, int64_t vocab, uint64_t seed) {
    KdaRng r;
    rng_seed(&r, seed);
    for (int64_t i = 0; i < n; i++)
        ids[i] = (int32_t)rng_below(&r, (uint64_t)vocab);
}

KdaRuntime *tiny_runtime(const KdaModel *m, const char *device, const char *precision) {
    KdaParamTable t;
    KdaError err;
    KDA_ASSERT(kda_params_build(&t, &m->cfg, &err) == 0);
    float *p = kda_malloc((size_t)t.total_numel * sizeof(float));
    memcpy(p, m->params, (size_t)t.total_numel * sizeof(float));
    KdaRuntimeOpts o = {.device = device, .precision = precision, .core = m->core};
    KdaRuntime *rt = NULL;
    if (kda_runtime_open(&rt, &m->cfg, &t, p, &o, &err)) {
        kda_params_free(&t);
        free(p);
        return NULL;
    }
    return rt;
}

double tiny_forward_ll(KdaModel *m, const int32_t *ids, int64_t n, int64_t n_cont) {
    float *nll = kda_malloc((size_t)n * sizeof *nll);
    KdaError err;
    KDA_ASSERT(kda_model_forward(m, ids, NULL, 1, n, nll, NULL, NULL, &err) == 0);
    double s = 0.0;
    for (int64_t p = n - n_cont; p < n; p++)
        s -= nll[p - 1]; // nll[t] scores token t + 1
    free(nll);
    return s;
}

int tiny_load_model(KdaModel *m, const char *rel) {
    KdaConfig cfg;
    KdaParamTable t;
    float *flat;
    KdaError err;
    int rc = kda_model_load_dir(test_data(rel), &cfg, &t, &flat, &err) ||
             kda_model_init_from(m, &cfg, &t, flat, &err);
    CHECK_MSG(rc == 0, "%s: %s", rel, err.msg);
    return rc ? -1 : 0;
}
