// test_run_plan.c - the typed run plan (src/train/run_plan.h): each string choice as its enum,
// the row length T and the micro-batch split per world size, the resolved LR schedule, the
// parsed blends, and one clear line for every bad choice.
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "train/run_plan.h"

// The demo recipe with overrides from YAML text.
static void config(KdaRunConfig *c, const char *yaml) {
    KdaError e;
    kda_run_config_defaults(c);
    KDA_ASSERT(kda_run_config_load(c, "configs/train_demo.yaml", &e) == 0);
    KDA_ASSERT(kda_run_config_parse(c, yaml, strlen(yaml), "t.yaml", &e) == 0);
}

KDA_TEST(run_plan_choices_and_sizes) {
    KdaRunConfig c;
    KdaRunPlan p;
    KdaError e;
    config(&c, "global_batch_size: 8\nmicro_batch_size: 2\nseq_length: 64\nlr_decay_iters: 0\n"
               "train_iters: 50\nlr_decay_style: linear\n");
    CHECK_MSG(kda_run_plan(&c, 1, &p, &e) == 0, "%s", e.msg);
    CHECK(p.objective == KDA_OBJ_MEGATRON && p.order == KDA_ORDER_MEGATRON);
    CHECK(p.device == KDA_DEVICE_CPU && !p.recompute && p.log_style == KDA_LOG_MEGATRON);
    CHECK_EQ_INT(p.T, 65); // a Megatron window: seq_length + 1 ids
    CHECK_EQ_INT(p.n_micro, 4);
    CHECK_EQ_INT(p.sched.decay_iters, 50); // 0: train_iters
    CHECK(p.sched.style == KDA_LR_LINEAR);
    CHECK(p.train.n == 1 && p.train.weights == NULL && p.valid.n == 0);
    kda_run_plan_free(&p);
    CHECK_MSG(kda_run_plan(&c, 2, &p, &e) == 0, "%s", e.msg);
    CHECK_EQ_INT(p.n_micro, 2); // per rank
    kda_run_plan_free(&p);
    CHECK_EQ_INT(kda_run_plan(&c, 3, &p, &e), -1);
    CHECK_MSG(strstr(e.msg, "multiple of micro_batch_size x data-parallel ranks = 2 x 3"), "%s",
              e.msg);
    kda_run_config_free(&c);

    config(&c, "objective: fla\ndata_order: fla\ndevice: cuda\nrecompute_granularity: full\n"
               "log_style: primus\nseq_length: 64\n"
               "train_data_path: 0.25 tests/a 0.75 tests/b\n");
    CHECK_MSG(kda_run_plan(&c, 1, &p, &e) == 0, "%s", e.msg);
    CHECK(p.objective == KDA_OBJ_FLA && p.order == KDA_ORDER_FLA);
    CHECK(p.device == KDA_DEVICE_CUDA && p.recompute && p.log_style == KDA_LOG_PRIMUS);
    CHECK_EQ_INT(p.T, 64); // an FLA chunk: seq_length ids
    CHECK(p.train.n == 2 && p.train.weights && !strcmp(p.train.paths[1], "tests/b"));
    CHECK_NEAR(p.train.weights[1], 0.75, 0); // 0.25 + 0.75 = 1: exact
    kda_run_plan_free(&p);
    kda_run_config_free(&c);
}

// Choices set directly in the struct (as a library caller may): each bad one is named.
KDA_TEST(run_plan_errors) {
    KdaRunConfig c;
    KdaRunPlan p;
    KdaError e;
    struct {
        char **field;
        const char *value, *want;
    } cases[] = {
        {&c.objective, "gpt", "objective: expected megatron or fla, got \"gpt\""},
        {&c.data_order, "random", "data_order: expected megatron or fla"},
        {&c.device, "tpu", "device: expected cpu or cuda, got \"tpu\""},
        {&c.recompute_granularity, "selective", "recompute_granularity: expected none or full"},
        {&c.log_style, "hf", "log_style: expected megatron or primus"},
        {&c.lr_decay_style, "wsd", "lr_decay_style \"wsd\""},
        {&c.data_order, "fla", "data_order: fla needs objective: fla"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        config(&c, "seq_length: 64\n");
        free(*cases[k].field);
        *cases[k].field = strdup(cases[k].value);
        CHECK_EQ_INT(kda_run_plan(&c, 1, &p, &e), -1);
        CHECK_MSG(strstr(e.msg, cases[k].want), "%s: got '%s'", cases[k].value, e.msg);
        CHECK(p.train.paths == NULL); // nothing left to free after an error
        kda_run_config_free(&c);
    }
    config(&c, "train_data_path: 0.5 tests/a 1\n");
    CHECK_EQ_INT(kda_run_plan(&c, 1, &p, &e), -1);
    CHECK_MSG(strstr(e.msg, "blend"), "%s", e.msg);
    kda_run_config_free(&c);
}
