// test_model_config.c - tests of src/model config.c and params.c: parameter counts of the
// 300M/1B configs (kda-model.md §4), config round trip and errors, the parameter table
// (names, shapes, order, decay), binding, init statistics (§7) and FLOPs (training-recipe §4.2).
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "core/util.h"
#include "model/config.h"
#include "model/params.h"
#include "test.h"

static KdaConfig load(const char *path) {
    KdaConfig c;
    KdaError e;
    memset(&c, 0, sizeof c);
    if (kda_config_load(&c, path, &e)) kda_test_fail(__FILE__, __LINE__, "%s", e.msg);
    return c;
}

static int64_t table_numel(const KdaConfig *c) {
    KdaParamTable t;
    KdaError e;
    if (kda_params_build(&t, c, &e)) return -1;
    int64_t n = t.total_numel;
    kda_params_free(&t);
    return n;
}

// ---------------------------------------------------------------------------------------------
// Counts and FLOPs: exact numbers of kda-model.md §4 and training-recipe.md §4

KDA_TEST(model_counts_300M_1B) {
    KdaConfig c = load("configs/kda_300M.json");
    CHECK_EQ_INT(c.num_v_heads, 8);
    CHECK_EQ_INT(c.head_v_dim, 64);
    CHECK_EQ_INT(c.intermediate_size, 4096);
    CHECK_EQ_INT(table_numel(&c), 303549280);
    CHECK_EQ_INT(kda_params_count(&c), 303549280);
    CHECK_EQ_INT(kda_params_matmul_count(&c), 303464448);
    c.tie_word_embeddings = 0;
    CHECK_EQ_INT(table_numel(&c), 434883424);
    CHECK_EQ_INT(kda_params_count(&c), 434883424);

    KdaConfig b = load("configs/kda_1B.json");
    CHECK_EQ_INT(table_numel(&b), 1175153920);
    CHECK_EQ_INT(kda_params_matmul_count(&b), 1174929408);
    b.tie_word_embeddings = 0;
    CHECK_EQ_INT(table_numel(&b), 1437822208);
}

KDA_TEST(model_flops) {
    KdaConfig c = load("configs/kda_300M.json"), b = load("configs/kda_1B.json");
    // spec values are quoted to 3-4 digits: 1.835e9 / 7.09e9 (model), 3.5059e9 / 1.5266e10
    CHECK_NEAR(kda_model_flops_per_token(&c, 2048) / 1.835e9, 1.0, 1e-3);
    CHECK_NEAR(kda_model_flops_per_token(&b, 2048) / 7.09e9, 1.0, 2e-3);
    CHECK_NEAR(kda_megatron_flops_per_token(&c, 2048) / 3.5059e9, 1.0, 1e-4);
    CHECK_NEAR(kda_megatron_flops_per_token(&b, 2048) / 1.5266e10, 1.0, 1e-4);
}

// ---------------------------------------------------------------------------------------------
// Config reading, defaults, round trip

static const char *write_tmp(const char *name, const char *text) {
    static char path[4096];
    KdaError e;
    path_join(path, sizeof path, test_tmpdir(), name);
    if (write_file_atomic(path, text, strlen(text), &e))
        kda_test_fail(__FILE__, __LINE__, "%s", e.msg);
    return path;
}

KDA_TEST(model_config_defaults) {
    // FLA constructor defaults; I = round_up_256(int(2048*4*2/3) = 5461) = 5632
    KdaConfig c = load(write_tmp("c.json", "{\"model_type\": \"kda\"}"));
    CHECK_EQ_INT(c.hidden_size, 2048);
    CHECK_EQ_INT(c.num_heads, 16);
    CHECK_EQ_INT(c.num_v_heads, 16);
    CHECK_EQ_INT(c.head_dim, 128);
    CHECK_EQ_INT(c.head_v_dim, 128);
    CHECK_EQ_INT(c.intermediate_size, 5632);
    CHECK_EQ_INT(c.intermediate_size_raw, 0);
    CHECK_EQ_INT(c.num_hidden_layers, 24);
    CHECK_EQ_INT(c.vocab_size, 32000);
    CHECK_EQ_INT(c.bos_token_id, 1);
    CHECK_EQ_INT(c.eos_token_id, 2);
    CHECK(c.use_short_conv && !c.tie_word_embeddings && !c.has_pad_token_id);
    CHECK_NEAR(c.norm_eps, 1e-6, 0);
    // the 300M hidden_ratio rule (if intermediate_size were null) gives 2816 (kda-model.md §5.6)
    KdaConfig d = load(write_tmp("d.json", "{\"model_type\": \"kda\", \"hidden_size\": 1024, "
                                           "\"intermediate_size\": null, \"expand_v\": 0.5}"));
    CHECK_EQ_INT(d.intermediate_size, 2816);
    CHECK_EQ_INT(d.head_v_dim, 64); // int(128 * 0.5)
}

static void round_trip(const char *src) {
    KdaConfig a = load(src), b;
    KdaError e;
    char path[4096];
    path_join(path, sizeof path, test_tmpdir(), "rt.json");
    CHECK(kda_config_save(&a, path, "bfloat16", &e) == 0);
    b = load(path);
    CHECK_MSG(kda_config_equal(&a, &b), "%s: config changed in a round trip", src);
    CHECK(!strcmp(b.torch_dtype, "bfloat16"));
    CHECK(b.num_v_heads == a.num_v_heads && b.intermediate_size == a.intermediate_size);
    // written again from b: byte-identical text
    char path2[4096];
    path_join(path2, sizeof path2, test_tmpdir(), "rt2.json");
    CHECK(kda_config_save(&b, path2, NULL, &e) == 0);
    size_t n1, n2;
    char *t1 = read_file(path, &n1, &e), *t2 = read_file(path2, &n2, &e);
    CHECK(t1 && t2 && n1 == n2 && !memcmp(t1, t2, n1));
    free(t1), free(t2);
}

KDA_TEST(model_config_round_trip) {
    round_trip("configs/tiny.json");
    round_trip("configs/tiny_gva.json");
    round_trip("configs/kda_300M.json");
    // nulls stay null; explicit values and the bounded gate survive
    round_trip(write_tmp("x.json",
                         "{\"model_type\": \"kda\", \"num_heads\": 4, \"num_v_heads\": 8, "
                         "\"safe_gate\": true, \"lower_bound\": -5, \"pad_token_id\": 0, "
                         "\"bos_token_id\": null, \"expand_v\": 1.5, \"norm_eps\": 1e-5, "
                         "\"initializer_range\": 0.006, \"use_short_conv\": false, "
                         "\"torch_dtype\": \"float32\", \"transformers_version\": \"4.56\"}"));
    KdaConfig t = load("configs/tiny.json");
    KdaError e;
    char path[4096];
    path_join(path, sizeof path, test_tmpdir(), "n.json");
    CHECK(kda_config_save(&t, path, "float32", &e) == 0);
    JsonDoc d;
    CHECK(json_parse_file(&d, path, &e) == 0);
    CHECK(json_get(&d.root, "num_v_heads")->type == JSON_NULL);
    CHECK(json_get(&d.root, "lower_bound")->type == JSON_NULL);
    CHECK(json_get(&d.root, "pad_token_id")->type == JSON_NULL);
    CHECK(json_get(&d.root, "intermediate_size")->i == 128);
    CHECK(!strcmp(json_get_str(&d.root, "torch_dtype"), "float32"));
    const JsonValue *arch = json_get(&d.root, "architectures");
    CHECK(arch && arch->len == 1 && !strcmp(arch->items[0].str, "KDAForCausalLM"));
    CHECK(!strcmp(json_get_str(&d.root, "model_type"), "kda"));
    json_free(&d);
}

// config.json as kda_config_save wrote it before the key table
// (tests/data/model_config/*_written*): the writer's key order, number formats and nulls stay byte
// for byte what they were.
static void expect_written(const KdaConfig *c, const char *dtype, const char *golden) {
    char path[4096];
    KdaError e;
    path_join(path, sizeof path, test_tmpdir(), "w.json");
    CHECK(kda_config_save(c, path, dtype, &e) == 0);
    size_t n1, n2;
    char *got = read_file(path, &n1, &e), *want = read_file(golden, &n2, &e);
    CHECK_MSG(got && want && n1 == n2 && !memcmp(got, want, n1), "%s: written text differs",
              golden);
    free(got), free(want);
}

KDA_TEST(model_config_written_bytes) {
    KdaConfig c = load("configs/kda_300M.json");
    expect_written(&c, "bfloat16", "tests/data/model_config/kda_300M_written_bf16.json");
    // the other branch of every optional key: set pad and lower_bound, null bos, explicit HV
    c = load("configs/demo_model.json");
    c.has_pad_token_id = 1, c.pad_token_id = 0, c.has_lower_bound = 1, c.lower_bound = -2.5;
    c.has_bos_token_id = 0, c.num_v_heads_raw = c.num_heads * 2;
    expect_written(&c, NULL, "tests/data/model_config/demo_mut_written.json");
}

// Changes field number i of a config (-1 when i is past the last); returns its KdaConfig name.
static const char *mutate(KdaConfig *c, int i) {
    switch (i) {
    case 0:
        return strcpy(c->attn_mode, "fused_recurrent"), "attn_mode";
    case 1:
        return c->hidden_size += 32, "hidden_size";
    case 2:
        return c->num_hidden_layers += 1, "num_hidden_layers";
    case 3:
        return c->num_heads *= 2, "num_heads";
    case 4:
        return c->num_v_heads_raw = c->num_heads * 2, "num_v_heads_raw";
    case 5:
        return c->head_dim *= 2, "head_dim";
    case 6:
        return c->expand_v *= 2, "expand_v";
    case 7:
        return c->use_short_conv ^= 1, "use_short_conv";
    case 8:
        return c->conv_size += 1, "conv_size";
    case 9:
        return c->allow_neg_eigval ^= 1, "allow_neg_eigval";
    case 10:
        return c->safe_gate = 1, c->has_lower_bound = 1, c->lower_bound = -5, "safe_gate";
    case 11:
        return c->has_lower_bound = 1, c->lower_bound = -3, "lower_bound";
    case 12:
        return c->hidden_ratio += 1, "hidden_ratio";
    case 13:
        return c->intermediate_size_raw += 256, "intermediate_size_raw";
    case 14:
        return strcpy(c->hidden_act, "silu"), "hidden_act";
    case 15:
        return c->max_position_embeddings *= 2, "max_position_embeddings";
    case 16:
        return c->norm_eps *= 2, "norm_eps";
    case 17:
        return c->use_cache ^= 1, "use_cache";
    case 18:
        return c->initializer_range *= 2, "initializer_range";
    case 19:
        return c->fuse_norm ^= 1, "fuse_norm";
    case 20:
        return c->fuse_swiglu ^= 1, "fuse_swiglu";
    case 21:
        return c->fuse_cross_entropy ^= 1, "fuse_cross_entropy";
    case 22:
        return c->use_l2warp ^= 1, "use_l2warp";
    case 23:
        return c->vocab_size += 1, "vocab_size";
    case 24:
        return c->tie_word_embeddings ^= 1, "tie_word_embeddings";
    case 25:
        return c->bos_token_id += 1, "bos_token_id";
    case 26:
        return c->has_eos_token_id = 0, "eos_token_id";
    case 27:
        return c->has_pad_token_id = 1, c->pad_token_id = 3, "pad_token_id";
    }
    return NULL;
}

// Every key: changing one field makes the configs unequal, kda_config_diff names that field
// (use_cache aside: it does not change the model), and a save + load carries the change.
KDA_TEST(model_config_every_key_compared_and_saved) {
    const KdaConfig base = load("configs/tiny.json");
    char path[4096], d[256];
    KdaError e;
    path_join(path, sizeof path, test_tmpdir(), "k.json");
    int n = 0;
    for (int i = 0;; i++, n++) {
        KdaConfig c = base;
        const char *field = mutate(&c, i);
        if (!field) break;
        CHECK_MSG(!kda_config_equal(&base, &c), "%s: change not seen by equal", field);
        int r = kda_config_diff(&base, &c, d, sizeof d);
        if (!strcmp(field, "use_cache")) {
            CHECK_EQ_INT(r, 0);
        } else {
            CHECK_MSG(r == 1 && !strncmp(d, field, strlen(field)) && d[strlen(field)] == ':',
                      "%s: diff says '%s'", field, r ? d : "(nothing)");
        }
        CHECK_MSG(kda_config_save(&c, path, NULL, &e) == 0, "%s: %s", field, e.msg);
        KdaConfig back = load(path);
        CHECK_MSG(kda_config_equal(&back, &c), "%s: lost in a save + load", field);
    }
    CHECK_EQ_INT(n, 28);
}

// Each bad config fails with one message naming the file and containing `want`.
static void expect_error(const char *json, const char *want) {
    const char *path = write_tmp("bad.json", json);
    KdaConfig c;
    KdaError e;
    memset(&e, 0, sizeof e);
    int rc = kda_config_load(&c, path, &e);
    CHECK_MSG(rc == -1, "accepted: %s", json);
    CHECK_MSG(strstr(e.msg, "bad.json") && strstr(e.msg, want), "for %s: got '%s', want '%s'", json,
              e.msg, want);
}

KDA_TEST(model_config_errors) {
#define KDA "{\"model_type\": \"kda\", "
    expect_error(KDA "\"num_heads\": \"8\"}",
                 "key 'num_heads': expected a positive integer, got \"8\"");
    expect_error(KDA "\"num_heads\": 0}", "key 'num_heads': expected a positive integer, got 0");
    expect_error(KDA "\"hidden_size\": 8.5}",
                 "key 'hidden_size': expected a positive integer, got 8.5");
    expect_error(KDA "\"vocab_size\": null}",
                 "key 'vocab_size': expected a positive integer, got null");
    expect_error(KDA "\"expand_v\": \"2\"}", "key 'expand_v': expected a number");
    expect_error(KDA "\"expand_v\": 0.001}", "key 'expand_v'");
    expect_error(KDA "\"use_short_conv\": 1}",
                 "key 'use_short_conv': expected true or false, got 1");
    expect_error(KDA "\"hidden_act\": \"gelu\"}", "key 'hidden_act'");
    expect_error(KDA "\"attn_mode\": \"parallel\"}", "key 'attn_mode'");
    expect_error(KDA "\"num_heads\": 2, \"num_v_heads\": 3}", "not a multiple of num_heads");
    expect_error(KDA "\"num_v_heads\": [4]}",
                 "key 'num_v_heads': expected a positive integer or null");
    expect_error(KDA "\"safe_gate\": true}", "requires lower_bound");
    expect_error(KDA "\"safe_gate\": true, \"lower_bound\": -6}", "-5 <= lower_bound < 0");
    expect_error(KDA "\"lower_bound\": 0.5}", "key 'lower_bound'");
    expect_error(KDA "\"lower_bound\": \"x\"}", "key 'lower_bound'");
    expect_error(KDA "\"attn\": {\"layers\": [1], \"num_heads\": 8}}", "key 'attn'");
    expect_error(KDA "\"attnres_block_size\": 4}", "key 'attnres_block_size'");
    expect_error(KDA "\"pad_token_id\": 32000}", "key 'pad_token_id'");
    expect_error(KDA "\"pad_token_id\": -1}", "key 'pad_token_id'");
    expect_error(KDA "\"norm_eps\": 0}", "key 'norm_eps'");
    expect_error(KDA "\"tie_word_embeddings\": \"yes\"}", "key 'tie_word_embeddings'");
    expect_error("{\"model_type\": \"llama\"}",
                 "key 'model_type': expected \"kda\", got \"llama\"");
    expect_error("{\"hidden_size\": 64}", "key 'model_type': missing");
    expect_error("[1, 2]", "expected a JSON object");
    expect_error("{\"model_type\": \"kda\",}", "line 1");
#undef KDA
    // a directory without config.json names the missing file
    KdaConfig c;
    KdaError e;
    CHECK(kda_config_load(&c, test_tmpdir(), &e) == -1 && strstr(e.msg, "config.json"));
}

// Found by review of fuzz/fuzz_model_config's one-line contract (a 60 s run had not reached
// it): a string value with a JSON "\n" escape was quoted raw into the message. Control bytes
// are now shown escaped, long strings cut at 40 bytes.
KDA_TEST(model_config_errors_stay_on_one_line) {
    KdaConfig c;
    KdaError e;
    CHECK(kda_config_load(&c, test_data("model_config/fuzz_attn_mode_newline.json"), &e) == -1);
    CHECK_MSG(!strchr(e.msg, '\n') && strstr(e.msg, "key 'attn_mode'") &&
                  strstr(e.msg, "got \"a\\nb\""),
              "%s", e.msg);
    const char *bad =
        "{\"model_type\": \"kda\\t\\u0001xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}";
    JsonDoc d;
    CHECK(json_parse(&d, bad, strlen(bad), &e) == 0);
    CHECK(kda_config_from_json(&c, &d.root, "t.json", &e) == -1);
    CHECK_MSG(!strchr(e.msg, '\t') && strstr(e.msg, "got \"kda\\t\\x01xxx") &&
                  strstr(e.msg, "x...\""),
              "%s", e.msg);
    json_free(&d);
}

// ---------------------------------------------------------------------------------------------
// Parameter table

static const char *const g_layer_keys[] = {
    "attn_norm.weight",     "attn.A_log",           "attn.dt_bias",         "attn.q_proj.weight",
    "attn.k_proj.weight",   "attn.v_proj.weight",   "attn.q_conv1d.weight", "attn.k_conv1d.weight",
    "attn.v_conv1d.weight", "attn.f_proj.0.weight", "attn.f_proj.1.weight", "attn.b_proj.weight",
    "attn.g_proj.0.weight", "attn.g_proj.1.weight", "attn.g_proj.1.bias",   "attn.o_norm.weight",
    "attn.o_proj.weight",   "mlp_norm.weight",      "mlp.gate_proj.weight", "mlp.up_proj.weight",
    "mlp.down_proj.weight",
};
// 300M shapes of kda-model.md §3, in the order above
static const int64_t g_300M_shapes[][3] = {
    {1024},      {8},         {256},       {256, 1024}, {256, 1024},  {512, 1024},  {256, 1, 4},
    {256, 1, 4}, {512, 1, 4}, {64, 1024},  {256, 64},   {8, 1024},    {64, 1024},   {512, 64},
    {512},       {64},        {1024, 512}, {1024},      {4096, 1024}, {4096, 1024}, {1024, 4096},
};
static const int g_300M_ndim[] = {1, 1, 1, 2, 2, 2, 3, 3, 3, 2, 2, 2, 2, 2, 1, 1, 2, 1, 2, 2, 2};
// weight decay per training-recipe.md §1.3
static const int g_decay[] = {0, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 0, 1, 1, 1};

KDA_TEST(model_params_table_300M) {
    KdaConfig c = load("configs/kda_300M.json");
    KdaParamTable t;
    KdaError e;
    CHECK(kda_params_build(&t, &c, &e) == 0);
    const int nk = (int)(sizeof g_layer_keys / sizeof *g_layer_keys);
    CHECK_EQ_INT(t.n, 1 + 12 * nk + 1); // embedding, 12 blocks, final norm; no lm_head (tied)
    CHECK(!strcmp(t.rows[0].name, "model.embeddings.weight"));
    CHECK(t.rows[0].shape[0] == 128256 && t.rows[0].shape[1] == 1024 && t.rows[0].weight_decay);
    CHECK(!strcmp(t.rows[t.n - 1].name, "model.norm.weight") && !t.rows[t.n - 1].weight_decay);
    CHECK(kda_params_find(&t, "lm_head.weight") == NULL);
    for (int l = 0; l < 12; l++) {
        for (int k = 0; k < nk; k++) {
            const KdaParamInfo *r = &t.rows[1 + l * nk + k];
            char want[96];
            snprintf(want, sizeof want, "model.layers.%d.%s", l, g_layer_keys[k]);
            CHECK_MSG(!strcmp(r->name, want), "row %d: %s, want %s", 1 + l * nk + k, r->name, want);
            CHECK_EQ_INT(r->layer, l);
            CHECK_EQ_INT(r->ndim, g_300M_ndim[k]);
            for (int d = 0; d < r->ndim; d++)
                CHECK_EQ_INT(r->shape[d], g_300M_shapes[k][d]);
            CHECK_MSG(r->weight_decay == g_decay[k], "%s: decay %d", r->name, r->weight_decay);
            CHECK(r->init == (r->ndim == 1 ? r->init : KDA_INIT_NORMAL));
        }
    }
    // offsets are dense in table order
    int64_t off = 0;
    for (int i = 0; i < t.n; i++) {
        CHECK_EQ_INT(t.rows[i].offset, off);
        off += t.rows[i].numel;
    }
    CHECK_EQ_INT(off, t.total_numel);
    kda_params_free(&t);
}

KDA_TEST(model_params_bind) {
    KdaConfig c = load("configs/tiny_gva.json"); // untied, HV 4 > H 2
    KdaParamTable t;
    KdaError e;
    CHECK(kda_params_build(&t, &c, &e) == 0);
    CHECK(!strcmp(t.rows[t.n - 1].name, "lm_head.weight") && t.rows[t.n - 1].weight_decay);
    CHECK(!strcmp(t.rows[t.n - 2].name, "model.norm.weight"));
    const KdaParamInfo *a = kda_params_find(&t, "model.layers.1.attn.A_log");
    const KdaParamInfo *f1 = kda_params_find(&t, "model.layers.1.attn.f_proj.1.weight");
    CHECK(a && a->shape[0] == 4 && f1 && f1->shape[0] == 64 && f1->shape[1] == 32);
    float *flat = calloc((size_t)t.total_numel, sizeof *flat);
    KdaTensors w;
    kda_tensors_bind(&w, &t, flat);
    CHECK_EQ_INT(w.n_layers, 2);
    CHECK(w.embed == flat);
    CHECK(w.layers[1].A_log == flat + a->offset);
    CHECK(w.layers[1].f_proj1 == flat + f1->offset);
    CHECK(w.lm_head == flat + kda_params_find(&t, "lm_head.weight")->offset);
    CHECK(w.final_norm == flat + kda_params_find(&t, "model.norm.weight")->offset);
    CHECK(w.layers[0].down_proj ==
          flat + kda_params_find(&t, "model.layers.0.mlp.down_proj.weight")->offset);
    kda_tensors_free(&w);
    kda_params_free(&t);
    free(flat);

    // tied: lm_head aliases the embedding; no short conv: no conv rows, NULL conv views
    c = load("configs/tiny.json");
    c.use_short_conv = 0;
    CHECK(kda_params_build(&t, &c, &e) == 0);
    CHECK(kda_params_find(&t, "model.layers.0.attn.q_conv1d.weight") == NULL);
    CHECK_EQ_INT(t.total_numel, kda_params_count(&c));
    flat = calloc((size_t)t.total_numel, sizeof *flat);
    kda_tensors_bind(&w, &t, flat);
    CHECK(w.lm_head == w.embed);
    CHECK(w.layers[0].q_conv == NULL && w.layers[1].v_conv == NULL && w.layers[1].q_proj != NULL);
    kda_tensors_free(&w);
    kda_params_free(&t);
    free(flat);
}

// ---------------------------------------------------------------------------------------------
// Init (kda-model.md §7)

static float *init_model(const KdaConfig *c, KdaParamTable *t, uint64_t seed) {
    KdaError e;
    if (kda_params_build(t, c, &e)) return NULL;
    float *flat = malloc((size_t)t->total_numel * sizeof *flat);
    kda_params_init(t, c, flat, seed);
    return flat;
}

KDA_TEST(model_params_init_stats) {
    KdaConfig c = load("configs/tiny_gva.json");
    c.vocab_size = 16384; // 1M embedding entries for tight statistics
    c.hidden_size = 64;
    KdaParamTable t;
    float *flat = init_model(&c, &t, 42);
    const KdaParamInfo *emb = kda_params_find(&t, "model.embeddings.weight");
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < emb->numel; i++)
        s += flat[emb->offset + i], s2 += (double)flat[emb->offset + i] * flat[emb->offset + i];
    double mean = s / (double)emb->numel, std = sqrt(s2 / (double)emb->numel - mean * mean);
    // N = 1,048,576: std error of the mean 0.02/1024 = 2e-5, of the std 0.02/1448 = 1.4e-5;
    // tolerances are ~5 standard errors
    CHECK_NEAR(mean, 0.0, 1e-4);
    CHECK_NEAR(std, 0.02, 1e-4);
    int ok_alog = 1, ok_dt = 1, ok_const = 1;
    double log_dt_sum = 0;
    int64_t n_dt = 0;
    for (int i = 0; i < t.n; i++) {
        const KdaParamInfo *r = &t.rows[i];
        const float *x = flat + r->offset;
        for (int64_t j = 0; j < r->numel; j++) {
            if (r->init == KDA_INIT_A_LOG && !(x[j] >= 0.0f && x[j] <= logf(16.0f) + 1e-6f))
                ok_alog = 0;
            if (r->init == KDA_INIT_DT_BIAS) {
                double dt = log1p(exp(x[j])); // softplus
                // fp32 rounding of dt_bias (|bias| <= 7) moves dt by < 1e-6 relative; allow 1e-5
                if (!(dt >= 1e-3 * (1 - 1e-5) && dt <= 0.1 * (1 + 1e-5))) ok_dt = 0;
                log_dt_sum += log(dt), n_dt++;
            }
            if (r->init == KDA_INIT_ONES && x[j] != 1.0f) ok_const = 0;
            if (r->init == KDA_INIT_ZEROS && x[j] != 0.0f) ok_const = 0;
        }
    }
    CHECK(ok_alog);
    CHECK(ok_dt);
    CHECK(ok_const);
    // log dt ~ U[ln 1e-3, ln 0.1]: mean -4.605, sd 1.33; n = 2*64 = 128 -> std error 0.12
    CHECK_NEAR(log_dt_sum / (double)n_dt, 0.5 * (log(1e-3) + log(0.1)), 0.5);
    // every normal-init matrix has std ~ 0.02 (smallest: b_proj 4x64 = 256 values, ~4.4% se)
    for (int i = 0; i < t.n; i++) {
        const KdaParamInfo *r = &t.rows[i];
        if (r->init != KDA_INIT_NORMAL) continue;
        double q = 0;
        for (int64_t j = 0; j < r->numel; j++)
            q += (double)flat[r->offset + j] * flat[r->offset + j];
        CHECK_MSG(fabs(sqrt(q / (double)r->numel) / 0.02 - 1) < 0.25, "%s: std %g", r->name,
                  sqrt(q / (double)r->numel));
    }
    kda_params_free(&t);
    free(flat);
}

KDA_TEST(model_params_init_deterministic) {
    KdaConfig c = load("configs/tiny.json");
    c.vocab_size = 40000; // embedding spans 3 init chunks of 2^20
    KdaParamTable t;
    int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    float *a = init_model(&c, &t, 7);
    omp_set_num_threads(2);
    float *b = malloc((size_t)t.total_numel * sizeof *b);
    kda_params_init(&t, &c, b, 7);
    omp_set_num_threads(threads);
    CHECK(!memcmp(a, b, (size_t)t.total_numel * sizeof *a)); // thread count does not matter
    kda_params_init(&t, &c, b, 8);
    CHECK(memcmp(a, b, (size_t)t.total_numel * sizeof *a) != 0); // the seed does
    // the embedding is the same whether tied or untied (per-tensor streams)
    KdaConfig u = c;
    u.tie_word_embeddings = 0;
    KdaParamTable tu;
    float *cu = init_model(&u, &tu, 7);
    CHECK(!memcmp(a, cu, (size_t)c.vocab_size * (size_t)c.hidden_size * sizeof *a));
    // the untied head is drawn independently of the embedding
    CHECK(memcmp(cu, cu + kda_params_find(&tu, "lm_head.weight")->offset, 64 * sizeof *cu) != 0);
    // safe_gate: A_log = 0
    c.safe_gate = 1, c.has_lower_bound = 1, c.lower_bound = -5;
    kda_params_init(&t, &c, b, 7);
    const float *alog = b + kda_params_find(&t, "model.layers.0.attn.A_log")->offset;
    CHECK(alog[0] == 0.0f && alog[1] == 0.0f);
    kda_params_free(&t);
    kda_params_free(&tu);
    free(a), free(b), free(cu);
}

// Absurd sizes fail validation naming the key and the limit, before anything is allocated
// (issue 15, finding 9: dims 1e9, head_dim 2^31 and vocab 4e9 aborted with "out of memory",
// and params.c overflowed a signed product under UBSan).
KDA_TEST(model_config_size_bounds) {
#define KDA "{\"model_type\": \"kda\", "
    expect_error(KDA "\"hidden_size\": 1000000000}", "key 'hidden_size': 1000000000 exceeds");
    expect_error(KDA "\"head_dim\": 2147483648}", "key 'head_dim': 2147483648 exceeds");
    expect_error(KDA "\"vocab_size\": 4000000000}", "key 'vocab_size': 4000000000 exceeds");
    expect_error(KDA "\"num_hidden_layers\": 100000000}", "key 'num_hidden_layers'");
    expect_error(KDA "\"intermediate_size\": 1000000000}", "key 'intermediate_size'");
    expect_error(KDA "\"num_heads\": 1, \"num_v_heads\": 4000000}", "key 'num_v_heads'");
    expect_error(KDA "\"hidden_size\": 65536, \"vocab_size\": 2000000000}", "parameters");
#undef KDA
}
