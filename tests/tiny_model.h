// tiny_model.h - the tiny KDA configs the CPU model tests build in code (test_model.c,
// test_generate.c), one per structural option, random token ids, a runtime over a model, and the
// loader of the model directories under tests/data: one definition, so the model and generation
// tests cover the same shapes.
//
// Every kind: D 32, L 2, H 2, K 8, I 48, vocab 50, conv 4, FLA's other defaults.
//   TINY_TIED     HV = H, V = 8, tied head
//   TINY_GVA_NEG  untied, HV 4 > H (grouped values), V 16, allow_neg_eigval (β = 2σ(b))
//   TINY_NO_CONV  as TIED, use_short_conv false
//   TINY_BOUNDED  as TIED, lower_bound -5 (the bounded gate)
#ifndef KDA_TESTS_TINY_MODEL_H
#define KDA_TESTS_TINY_MODEL_H

#include <stdint.h>

#include "model/config.h"  // defines: KdaConfig
#include "model/model.h"   // defines: KdaModel
#include "model/runtime.h" // defines: KdaRuntime

typedef enum { TINY_TIED, TINY_GVA_NEG, TINY_NO_CONV, TINY_BOUNDED } TinyKind;

// The derived config of kind (aborts through KDA_ASSERT if it does not derive: a test bug).
KdaConfig tiny_config(TinyKind kind);
// m with c's parameters initialized by FLA's rules (kda_params_init, seed) and every layer's
// g_proj1_bias then drawn N(0, 0.5) from seed + 1 (FLA inits it to zero: a non-zero bias puts the
// output gate's bias path under test). Aborts (KDA_ASSERT) if the model does not build.
void tiny_model_init(KdaModel *m, const KdaConfig *c, uint64_t seed);
// ids [n] int32, uniform in [0, vocab), from a generator seeded with seed (overwrites ids).
void tiny_random_ids(int32_t *ids, int64_t n, int64_t vocab, uint64_t seed);
// A runtime (model/runtime.h) on device ("cpu", "cuda", "auto") with precision (NULL: the
// device's default) over a copy of m's parameters, its KDA core m->core. NULL when it does not
// open (no GPU, an unsupported config); close with kda_runtime_close.
KdaRuntime *tiny_runtime(const KdaModel *m, const char *device, const char *precision);
// The log-likelihood of the last n_cont tokens of ids [n] under m, from one CPU forward of the
// whole sequence (-Σ nll): the reference of the eval tests. Aborts (KDA_ASSERT) if it fails.
double tiny_forward_ll(KdaModel *m, const int32_t *ids, int64_t n, int64_t n_cont);
// Loads the HF model directory rel under tests/data (test_data: golden/model_a, fla_trained/...)
// into m (kda_model_load_dir, kda_model_init_from). 0, or -1 after a failed check naming rel and
// the error.
int tiny_load_model(KdaModel *m, const char *rel);

#endif
