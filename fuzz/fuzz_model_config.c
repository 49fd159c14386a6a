// fuzz_model_config.c - libFuzzer target for the model config reader: core/json parse of the
// input, then kda_config_from_json (which ends in kda_config_derive).
// Contract checked: a rejection leaves a non-empty one-line message; an accepted config has
// positive dims (D, H, K, L, n_vocab, W, HV, V, I) with HV a multiple of H and the products
// key_dim = H*K, value_dim = HV*V, gate_dim = HV*K; it equals itself (kda_config_equal), and
// re-deriving it gives the same derived fields.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "model/config.h"

static void check_msg(const KdaError *err) {
    if (!err->msg[0] || strchr(err->msg, '\n')) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *buf = malloc(size ? size : 1); // exact-size copy: ASan sees any over-read
    if (!buf) return 0;
    memcpy(buf, data, size);
    JsonDoc doc;
    KdaError err;
    if (json_parse(&doc, buf, size, &err) == 0) {
        KdaConfig c;
        kda_config_defaults(&c);
        if (kda_config_from_json(&c, &doc.root, "fuzz/config.json", &err) == 0) {
            if (c.hidden_size <= 0 || c.num_heads <= 0 || c.head_dim <= 0 ||
                c.num_hidden_layers <= 0 || c.vocab_size <= 0 || c.conv_size <= 0 ||
                c.num_v_heads <= 0 || c.head_v_dim <= 0 || c.intermediate_size <= 0)
                abort(); // accepted with a non-positive dimension
            if (c.num_v_heads % c.num_heads) abort();
            if (c.key_dim != c.num_heads * c.head_dim ||
                c.value_dim != c.num_v_heads * c.head_v_dim ||
                c.gate_dim != c.num_v_heads * c.head_dim)
                abort();
            if (c.key_dim <= 0 || c.value_dim <= 0 || c.gate_dim <= 0) abort(); // overflowed
            if (!kda_config_equal(&c, &c)) abort();
            KdaConfig d = c;
            if (kda_config_derive(&d, "fuzz/config.json", &err) || memcmp(&c, &d, sizeof c))
                abort(); // derive is not idempotent
        } else {
            check_msg(&err);
        }
        json_free(&doc);
    }
    free(buf);
    return 0;
}
