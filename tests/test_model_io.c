// test_model_io.c - tests of src/io/model_io.c: HF model directory save/load round trips
// (F32 bit-identical, BF16 = exact bf16 rounding), tied head with and without a stored copy,
// mixed storage dtypes, sharded input, and the error for every broken key set or shape.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/util.h"
#include "io/model_io.h"
#include "io/safetensors.h"
#include "test.h"

typedef struct {
    KdaConfig c;
    KdaParamTable t;
    float *flat; // [t.total_numel]
} Model;

static void model_make(Model *m, const char *config, uint64_t seed) {
    KdaError e;
    if (kda_config_load(&m->c, config, &e) || kda_params_build(&m->t, &m->c, &e))
        kda_test_fail(__FILE__, __LINE__, "%s", e.msg);
    m->flat = malloc((size_t)m->t.total_numel * sizeof *m->flat);
    kda_params_init(&m->t, &m->c, m->flat, seed);
}

static void model_free(Model *m) {
    kda_params_free(&m->t);
    free(m->flat);
}

static const char *sub(const char *name) {
    static char path[4096];
    return path_join(path, sizeof path, test_tmpdir(), name);
}

// ---------------------------------------------------------------------------------------------
// Round trips

KDA_TEST(model_io_round_trip_f32) {
    Model m;
    model_make(&m, "configs/tiny.json", 1);
    KdaError e;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", sub("out/model")); // parent does not exist yet
    CHECK_MSG(kda_model_save_dir(dir, &m.c, &m.t, m.flat, KDA_DTYPE_F32, &e) == 0, "%s", e.msg);
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", dir, (long)getpid());
    CHECK(!path_exists(tmp)); // the temporary directory was renamed into place

    KdaConfig c;
    KdaParamTable t;
    float *flat = NULL;
    CHECK_MSG(kda_model_load_dir(dir, &c, &t, &flat, &e) == 0, "%s", e.msg);
    CHECK(kda_config_equal(&c, &m.c));
    CHECK(!strcmp(c.torch_dtype, "float32"));
    CHECK_EQ_INT(t.total_numel, m.t.total_numel);
    CHECK(flat && !memcmp(flat, m.flat, (size_t)t.total_numel * sizeof *flat));

    // tied: the file has no lm_head.weight (HF save_pretrained form)
    SafeTensors st;
    char file[4200];
    snprintf(file, sizeof file, "%s/model.safetensors", dir);
    CHECK(st_open(&st, file, &e) == 0);
    CHECK(st_find(&st, "lm_head.weight") == NULL);
    CHECK_EQ_INT(st.n_tensors, m.t.n);
    CHECK(!strcmp(st_meta(&st, "format"), "pt"));
    CHECK(st_find(&st, "model.layers.1.attn.A_log")->dtype == ST_F32);
    st_close(&st);

    // saving into the existing directory replaces the weights and keeps other files
    CHECK(write_file_atomic(sub("out/model/tokenizer.json"), "{}", 2, &e) == 0);
    kda_params_init(&m.t, &m.c, m.flat, 2);
    CHECK(kda_model_save_dir(dir, &m.c, &m.t, m.flat, KDA_DTYPE_F32, &e) == 0);
    CHECK(kda_model_read_weights(dir, &c, &t, flat, &e) == 0);
    CHECK(!memcmp(flat, m.flat, (size_t)t.total_numel * sizeof *flat));
    CHECK(path_exists(sub("out/model/tokenizer.json")));
    free(flat);
    kda_params_free(&t);
    model_free(&m);
}

KDA_TEST(model_io_round_trip_bf16) {
    Model m;
    model_make(&m, "configs/tiny_gva.json", 3); // untied: lm_head.weight is stored
    KdaError e;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", sub("bf16"));
    CHECK_MSG(kda_model_save_dir(dir, &m.c, &m.t, m.flat, KDA_DTYPE_BF16, &e) == 0, "%s", e.msg);
    KdaConfig c;
    KdaParamTable t;
    float *flat = NULL;
    CHECK_MSG(kda_model_load_dir(dir, &c, &t, &flat, &e) == 0, "%s", e.msg);
    CHECK(!strcmp(c.torch_dtype, "bfloat16"));
    CHECK(kda_params_find(&t, "lm_head.weight") != NULL);
    // each value is exactly the round-to-nearest-even bf16 of the original (no other error)
    int64_t bad = 0, changed = 0;
    for (int64_t i = 0; i < t.total_numel; i++) {
        float want = bf16_to_f32(f32_to_bf16(m.flat[i]));
        bad += memcmp(&flat[i], &want, sizeof want) != 0;
        changed += flat[i] != m.flat[i];
    }
    CHECK_EQ_INT(bad, 0);
    CHECK(changed > t.total_numel / 2); // the file really was bf16
    free(flat);
    kda_params_free(&t);
    model_free(&m);
}

// ---------------------------------------------------------------------------------------------
// Hand-built directories: every table row (optionally changed) plus extras

typedef struct {
    const char *skip;      // row not written
    const char *extra;     // extra [4] tensor written
    const char *transpose; // 2-D row written with its dims swapped
    int head_copy;         // 1: write lm_head.weight = embedding; 2: a copy with one change
    StDtype small_dtype;   // dtype of A_log and dt_bias (others: BF16 when mixed, else F32)
    int mixed;
    StDtype bad_dtype_for_norm; // != 0: dtype of model.norm.weight (e.g. ST_I32)
} Variant;

static void write_variant(const char *dir, const Model *m, const Variant *v) {
    KdaError e;
    char path[4200];
    if (mkdir_p(dir, &e) == 0) {
        snprintf(path, sizeof path, "%s/config.json", dir);
        if (kda_config_save(&m->c, path, NULL, &e)) kda_test_fail(__FILE__, __LINE__, "%s", e.msg);
    }
    StWriter *w = st_writer_new();
    static int32_t ints[1 << 10];
    static float extra[4] = {1, 2, 3, 4};
    for (int i = 0; i < m->t.n; i++) {
        const KdaParamInfo *r = &m->t.rows[i];
        if (v->skip && !strcmp(r->name, v->skip)) continue;
        int64_t shape[3] = {r->shape[0], r->shape[1], r->shape[2]};
        if (v->transpose && !strcmp(r->name, v->transpose))
            shape[0] = r->shape[1], shape[1] = r->shape[0];
        StDtype dt = v->mixed ? ST_BF16 : ST_F32;
        if (r->init == KDA_INIT_A_LOG || r->init == KDA_INIT_DT_BIAS) dt = v->small_dtype;
        if (v->bad_dtype_for_norm && !strcmp(r->name, "model.norm.weight"))
            st_writer_add(w, r->name, v->bad_dtype_for_norm, r->ndim, shape, ints);
        else
            st_writer_add_f32(w, r->name, dt, r->ndim, shape, m->flat + r->offset);
    }
    float *copy = NULL;
    if (v->head_copy) {
        const KdaParamInfo *emb = kda_params_find(&m->t, "model.embeddings.weight");
        copy = malloc((size_t)emb->numel * sizeof *copy);
        memcpy(copy, m->flat + emb->offset, (size_t)emb->numel * sizeof *copy);
        if (v->head_copy == 2) copy[1000] += 0.5f;
        // F32 copy of a BF16 embedding: equal after conversion only if pre-rounded
        if (v->mixed)
            for (int64_t i = 0; i < emb->numel; i++)
                copy[i] = bf16_to_f32(f32_to_bf16(copy[i]));
        st_writer_add_f32(w, "lm_head.weight", ST_F32, 2, emb->shape, copy);
    }
    if (v->extra) st_writer_add_f32(w, v->extra, ST_F32, 1, (int64_t[]){4}, extra);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (st_writer_save(w, path, &e)) kda_test_fail(__FILE__, __LINE__, "%s", e.msg);
    st_writer_free(w);
    free(copy);
}

// Loads dir; returns 0 or -1 with the message in err.
static int try_load(const char *dir, KdaError *err) {
    KdaConfig c;
    KdaParamTable t;
    float *flat = NULL;
    int rc = kda_model_load_dir(dir, &c, &t, &flat, err);
    if (rc == 0) {
        kda_params_free(&t);
        free(flat);
    }
    return rc;
}

static void expect_load_error(const Model *m, const char *name, const Variant *v, const char *want1,
                              const char *want2) {
    KdaError e;
    memset(&e, 0, sizeof e);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", sub(name));
    write_variant(dir, m, v);
    CHECK_MSG(try_load(dir, &e) == -1, "%s: loaded", name);
    CHECK_MSG(strstr(e.msg, want1) && (!want2 || strstr(e.msg, want2)), "%s: got '%s'", name,
              e.msg);
    CHECK_MSG(strstr(e.msg, name), "%s: error does not name the file: '%s'", name, e.msg);
}

KDA_TEST(model_io_tied_head) {
    Model m;
    model_make(&m, "configs/tiny.json", 5);
    KdaError e;
    // with an identical explicit copy (Primus converter form)
    Variant v = {.head_copy = 1, .small_dtype = ST_F32};
    write_variant(sub("copy"), &m, &v);
    CHECK_MSG(try_load(sub("copy"), &e) == 0, "%s", e.msg);
    // a copy stored in F32 next to a BF16 embedding, equal after conversion
    Variant vm = {.head_copy = 1, .small_dtype = ST_F32, .mixed = 1};
    write_variant(sub("copy_mixed"), &m, &vm);
    CHECK_MSG(try_load(sub("copy_mixed"), &e) == 0, "%s", e.msg);
    // a copy that differs in one element
    Variant vd = {.head_copy = 2, .small_dtype = ST_F32};
    expect_load_error(&m, "copy_differs", &vd, "'lm_head.weight' differs", "element 1000");
    model_free(&m);
}

KDA_TEST(model_io_mixed_dtypes_and_shards) {
    Model m;
    model_make(&m, "configs/tiny_gva.json", 9);
    KdaError e;
    // A_log/dt_bias F32 and the rest BF16 (data-formats.md §5.2): the small ones stay exact
    Variant v = {.small_dtype = ST_F32, .mixed = 1};
    write_variant(sub("mixed"), &m, &v);
    KdaConfig c;
    KdaParamTable t;
    float *flat = NULL;
    CHECK_MSG(kda_model_load_dir(sub("mixed"), &c, &t, &flat, &e) == 0, "%s", e.msg);
    const KdaParamInfo *dt = kda_params_find(&t, "model.layers.1.attn.dt_bias");
    const KdaParamInfo *q = kda_params_find(&t, "model.layers.1.attn.q_proj.weight");
    CHECK(!memcmp(flat + dt->offset, m.flat + dt->offset, (size_t)dt->numel * sizeof *flat));
    CHECK(flat[q->offset] == bf16_to_f32(f32_to_bf16(m.flat[q->offset])));
    // F16 storage is accepted too
    Variant vh = {.small_dtype = ST_F16};
    write_variant(sub("f16"), &m, &vh);
    CHECK_MSG(try_load(sub("f16"), &e) == 0, "%s", e.msg);

    // sharded: two files + index.json
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", sub("sharded"));
    CHECK(mkdir_p(dir, &e) == 0);
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    CHECK(kda_config_save(&m.c, path, "float32", &e) == 0);
    StWriter *w[2] = {st_writer_new(), st_writer_new()};
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    FILE *ix = fopen(path, "w");
    fprintf(ix, "{\"metadata\": {\"total_size\": %lld}, \"weight_map\": {",
            (long long)(m.t.total_numel * 4));
    for (int i = 0; i < m.t.n; i++) {
        const KdaParamInfo *r = &m.t.rows[i];
        int s = r->layer == 1 ? 1 : 0;
        st_writer_add_f32(w[s], r->name, ST_F32, r->ndim, r->shape, m.flat + r->offset);
        fprintf(ix, "%s\"%s\": \"model-0000%d-of-00002.safetensors\"", i ? ", " : "", r->name,
                s + 1);
    }
    fprintf(ix, "}}\n");
    fclose(ix);
    for (int s = 0; s < 2; s++) {
        snprintf(path, sizeof path, "%s/model-0000%d-of-00002.safetensors", dir, s + 1);
        CHECK(st_writer_save(w[s], path, &e) == 0);
        st_writer_free(w[s]);
    }
    float *flat2 = malloc((size_t)t.total_numel * sizeof *flat2);
    CHECK_MSG(kda_model_read_weights(dir, &m.c, &t, flat2, &e) == 0, "%s", e.msg);
    CHECK(!memcmp(flat2, m.flat, (size_t)t.total_numel * sizeof *flat2));
    free(flat2);
    free(flat);
    kda_params_free(&t);
    model_free(&m);
}

KDA_TEST(model_io_errors_name_the_tensor) {
    Model m;
    model_make(&m, "configs/tiny.json", 11);
    Variant miss = {.skip = "model.layers.1.attn.dt_bias", .small_dtype = ST_F32};
    expect_load_error(&m, "missing", &miss, "missing tensor 'model.layers.1.attn.dt_bias'", "[32]");
    Variant extra = {.extra = "model.layers.0.attn.q_norm.weight", .small_dtype = ST_F32};
    expect_load_error(&m, "extra", &extra, "unexpected tensor 'model.layers.0.attn.q_norm.weight'",
                      NULL);
    Variant tr = {.transpose = "model.layers.0.attn.f_proj.0.weight", .small_dtype = ST_F32};
    expect_load_error(&m, "shape", &tr,
                      "tensor 'model.layers.0.attn.f_proj.0.weight': shape [64, 32]",
                      "expected [32, 64]");
    Variant dt = {.small_dtype = ST_F32, .bad_dtype_for_norm = ST_I32};
    expect_load_error(&m, "dtype", &dt, "tensor 'model.norm.weight': dtype I32", NULL);
    model_free(&m);

    // an untied model must store lm_head.weight
    Model u;
    model_make(&u, "configs/tiny_gva.json", 12);
    Variant nohead = {.skip = "lm_head.weight", .small_dtype = ST_F32};
    expect_load_error(&u, "nohead", &nohead, "missing tensor 'lm_head.weight'", NULL);
    model_free(&u);

    // a missing directory / weights file
    KdaError e;
    CHECK(try_load(sub("nothing"), &e) == -1 && strstr(e.msg, "nothing"));
    Model t;
    model_make(&t, "configs/tiny.json", 1);
    CHECK(mkdir_p(sub("noweights"), &e) == 0);
    CHECK(kda_config_save(&t.c, sub("noweights/config.json"), NULL, &e) == 0);
    CHECK(try_load(sub("noweights"), &e) == -1 && strstr(e.msg, "model.safetensors"));
    // saving over a plain file fails cleanly
    CHECK(write_file_atomic(sub("plain"), "x", 1, &e) == 0);
    CHECK(kda_model_save_dir(sub("plain"), &t.c, &t.t, t.flat, KDA_DTYPE_F32, &e) == -1);
    CHECK(strstr(e.msg, "not a directory") != NULL);
    model_free(&t);
}
