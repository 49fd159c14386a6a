// test_eval_results.c - kda eval's results file in lm-eval 0.4's schema: written, read back,
// read from an lm-eval output directory (tests/data/eval/lm_eval_out) and from kda's pre-0.2
// list format; --compare with --labels warns when BOS, limit or a task's split differ.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "core/util.h"
#include "eval/eval.h"
#include "test.h"

static void add_(EvalResults *r, const char *task, const char *metric, double v, double se,
                 int64_t n) {
    r->m = realloc(r->m, (size_t)(r->n + 1) * sizeof *r->m);
    EvalMetric *e = &r->m[r->n++];
    memset(e, 0, sizeof *e);
    snprintf(e->task, sizeof e->task, "%s", task);
    snprintf(e->metric, sizeof e->metric, "%s", metric);
    e->value = v, e->stderr = se, e->n = n;
}

static void add_task_(EvalResults *r, const char *task, const char *split, int fallback) {
    r->tasks = realloc(r->tasks, (size_t)(r->n_tasks + 1) * sizeof *r->tasks);
    EvalTaskInfo *t = &r->tasks[r->n_tasks++];
    memset(t, 0, sizeof *t);
    snprintf(t->task, sizeof t->task, "%s", task);
    snprintf(t->split, sizeof t->split, "%s", split);
    t->split_fallback = fallback;
}

// A kda run: arc_easy read from its validation split (test missing), mmlu with one subject,
// race with an undefined stderr; BOS from the tokenizer, --limit 10.
static int write_kda_(const char *path, KdaError *err) {
    EvalResults r = {0};
    add_(&r, "arc_easy", "acc", 0.5, 0.1, 10);
    add_(&r, "arc_easy", "acc_norm", 0.4, 0.1, 10);
    add_(&r, "mmlu_formal_logic", "acc", 0.3, 0.15, 10);
    add_(&r, "mmlu_humanities", "acc", 0.3, 0.15, 10);
    add_(&r, "mmlu", "acc", 0.3, 0.15, 10);
    add_(&r, "race", "acc", 0.2, NAN, 10);
    add_task_(&r, "arc_easy", "validation", 1);
    add_task_(&r, "mmlu", "test", 0);
    add_task_(&r, "race", "test", 0);
    EvalSettings s = {.bos = 1, .bos_source = "tokenizer", .max_length = 2048, .limit = 10};
    int rc = eval_results_write(path, &r, &s, "hf/kda_300M", err);
    eval_results_free(&r);
    return rc;
}

static const JsonValue *at_(const JsonValue *v, const char *a, const char *b) {
    v = json_get(v, a);
    return b ? json_get(v, b) : v;
}

KDA_TEST(eval_results_lm_eval_schema_roundtrip) {
    char path[4096];
    path_join(path, sizeof path, test_tmpdir(), "results.json");
    KdaError err;
    CHECK_MSG(write_kda_(path, &err) == 0, "%s", err.msg);
    JsonDoc d;
    CHECK(json_parse_file(&d, path, &err) == 0);
    const JsonValue *root = &d.root;
    double x;
    CHECK(!json_get_num(at_(root, "results", "arc_easy"), "acc,none", &x) && x == 0.5);
    CHECK(!json_get_num(at_(root, "results", "arc_easy"), "acc_norm_stderr,none", &x) && x == 0.1);
    CHECK(json_get_str(at_(root, "results", "race"), "acc_stderr,none") &&
          !strcmp(json_get_str(at_(root, "results", "race"), "acc_stderr,none"), "N/A"));
    CHECK(!strcmp(json_get_str(at_(root, "results", "mmlu_humanities"), "alias"), " - humanities"));
    CHECK(at_(root, "groups", "mmlu") && at_(root, "groups", "mmlu_humanities"));
    CHECK(!at_(root, "groups", "arc_easy"));
    const JsonValue *gs = at_(root, "group_subtasks", "mmlu_humanities");
    CHECK(gs && gs->len == 1 && !strcmp(gs->items[0].str, "mmlu_formal_logic"));
    CHECK(
        !strcmp(json_get_str(at_(root, "configs", "arc_easy"), "validation_split"), "validation"));
    CHECK(!strcmp(json_get_str(at_(root, "configs", "mmlu_formal_logic"), "dataset_name"),
                  "formal_logic"));
    CHECK(!json_get_num(json_get(root, "versions"), "race", &x) && x == 3.0);
    CHECK(!json_get_num(json_get(root, "n-shot"), "arc_easy", &x) && x == 0);
    const JsonValue *ns = at_(root, "n-samples", "arc_easy");
    CHECK(ns && json_get(ns, "original")->type == JSON_NULL); // --limit: not all read
    CHECK(!json_get_num(json_get(root, "config"), "limit", &x) && x == 10);
    CHECK(!strcmp(json_get_str(json_get(root, "config"), "bos_source"), "tokenizer"));
    CHECK(!json_get_num(root, "date", &x) && x > 1.7e9);
    CHECK(json_get_str(root, "kda_version") && json_get_str(root, "kda_commit"));
    CHECK(at_(root, "task_splits", "arc_easy") &&
          json_get(at_(root, "task_splits", "arc_easy"), "fallback")->type == JSON_TRUE);
    json_free(&d);
    EvalResults r;
    CHECK_MSG(eval_results_read(path, &r, NULL, 0, &err) == 0, "%s", err.msg);
    CHECK(r.n == 6 && r.bos == 1 && r.limit == 10 && !strcmp(r.format, "lm-eval"));
    CHECK(r.n == 6 && !strcmp(r.m[1].metric, "acc_norm") && r.m[1].value == 0.4 && r.m[1].n == 10);
    CHECK(r.n == 6 && isnan(r.m[5].stderr) && r.m[5].random == 25.0);
    CHECK(r.n_tasks == 3 && r.tasks[0].split_fallback && !strcmp(r.tasks[0].split, "validation"));
    eval_results_free(&r);
}

// config.device / config.dtype: the CPU is float32; the GPU bfloat16 by default and float32
// under --precision fp32 (EvalSettings.precision).
KDA_TEST(eval_results_dtype_records_precision) {
    static const struct {
        const char *device, *precision, *dtype;
    } C[] = {{NULL, NULL, "float32"},
             {"cpu", "fp32", "float32"},
             {"cuda", NULL, "bfloat16"},
             {"cuda", "bf16", "bfloat16"},
             {"cuda", "fp32", "float32"}};
    char path[4096];
    path_join(path, sizeof path, test_tmpdir(), "results_dtype.json");
    for (size_t i = 0; i < sizeof C / sizeof C[0]; i++) {
        EvalResults r = {0};
        add_(&r, "arc_easy", "acc", 0.5, 0.1, 10);
        EvalSettings s = {.max_length = 2048, .device = C[i].device, .precision = C[i].precision};
        KdaError err;
        CHECK_MSG(eval_results_write(path, &r, &s, "m", &err) == 0, "%s", err.msg);
        eval_results_free(&r);
        JsonDoc d;
        CHECK(json_parse_file(&d, path, &err) == 0);
        const char *dt = json_get_str(json_get(&d.root, "config"), "dtype");
        CHECK_MSG(dt && !strcmp(dt, C[i].dtype), "case %zu: dtype %s, want %s", i, dt ? dt : "-",
                  C[i].dtype);
        json_free(&d);
    }
}

KDA_TEST(eval_results_reads_lm_eval_dir_and_legacy) {
    KdaError err;
    EvalResults r;
    char got[4096];
    CHECK_MSG(eval_results_read(test_data("eval/lm_eval_out"), &r, got, sizeof got, &err) == 0,
              "%s", err.msg);
    CHECK(strstr(got, "results_2026-11-20T10-00-00.000000.json") != NULL);
    CHECK(r.n == 6 && r.bos == -1 && r.limit == 0); // lm-eval's file: no add_bos_token in args
    CHECK(r.n == 6 && !strcmp(r.m[0].task, "arc_easy") && r.m[0].value == 0.4878 &&
          r.m[0].n == 2376);
    CHECK(r.n == 6 && !strcmp(r.m[5].task, "race") && isnan(r.m[5].stderr));
    int splits_ok = 0;
    for (int i = 0; i < r.n_tasks; i++)
        splits_ok += !strcmp(r.tasks[i].split, "test");
    CHECK_EQ_INT(r.n_tasks, 3); // arc_easy, race, and mmlu for its subjects
    CHECK_EQ_INT(splits_ok, 3);
    EvalResults k;
    char path[4096];
    path_join(path, sizeof path, test_tmpdir(), "kda.json");
    CHECK(write_kda_(path, &err) == 0);
    CHECK(eval_results_read(path, &k, NULL, 0, &err) == 0);
    char *buf;
    size_t n;
    FILE *f = open_memstream(&buf, &n);
    int lines = eval_results_mismatches(f, &r, &k, "FLA", "kda");
    fclose(f);
    CHECK_EQ_INT(lines, 3);
    CHECK_MSG(strstr(buf, "BOS differs: FLA not recorded, kda on") &&
                  strstr(buf, "limit differs: FLA 0, kda 10") &&
                  strstr(buf, "arc_easy: split differs: FLA test, kda validation (fallback)"),
              "%s", buf);
    free(buf);
    eval_results_free(&k);
    eval_results_free(&r);
    // kda's pre-0.2 file
    path_join(path, sizeof path, test_tmpdir(), "old.json");
    const char *old = "{\"settings\": {\"bos\": false}, \"results\": [{\"task\": \"piqa\", "
                      "\"metric\": \"acc\", \"value\": 0.6, \"stderr\": 0.01, \"n\": 5}]}";
    CHECK(write_file_atomic(path, old, strlen(old), &err) == 0);
    CHECK(eval_results_read(path, &r, NULL, 0, &err) == 0);
    CHECK(r.n == 1 && r.bos == 0 && !strcmp(r.format, "kda-legacy") && r.m[0].random == 50.0);
    eval_results_free(&r);
    CHECK(eval_results_read(test_tmpdir(), &r, NULL, 0, &err) == -1); // no results*.json
}

// `kda eval --compare LM_EVAL_DIR kda.json --labels FLA,kda`: the table and the warnings.
KDA_TEST(eval_results_compare_cli) {
    char path[4096], args[9000];
    path_join(path, sizeof path, test_tmpdir(), "kda.json");
    KdaError err;
    CHECK(write_kda_(path, &err) == 0);
    snprintf(args, sizeof args, "eval --compare %s %s --labels FLA,kda",
             test_data("eval/lm_eval_out"), path);
    static char out[1 << 14];
    CHECK_MSG(test_run_kda(out, sizeof out, NULL, args) == 0, "%s", out);
    CHECK_MSG(strstr(out, "| task | metric | random | FLA | kda | Δ (kda − FLA) |") &&
                  strstr(out, "| arc_easy | acc | 25.00 | 48.78 | 50.00 | +1.22 |") &&
                  strstr(out, "not like for like: BOS differs"),
              "%s", out);
}
