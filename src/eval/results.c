// results.c - kda eval's results files in lm-eval 0.4's schema (write, read, compare); the
// reader also takes lm-eval's own results_*.json and kda's pre-0.2 list format. See eval.h.
#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/json.h"    // defines: JsonDoc, json_parse_file, json_write_string
#include "core/log.h"     // defines: kda_warn
#include "core/util.h"    // defines: open_atomic, commit_atomic, path_join, path_is_dir
#include "core/version.h" // defines: kda_version, kda_commit
#include "eval/eval.h"    // defines: EvalResults, EvalSettings
#include "eval/tasks.h"   // defines: eval_mmlu_category, eval_mmlu_category_name

// ---------------------------------------------------------------------------------------------
// lm-eval's task metadata for the templates kda.c implements (lm-eval 0.4.13 task YAMLs).

typedef struct {
    const char *task, *dataset_path, *dataset_name;
    double version;
    double chance; // percent
} TaskMeta;

static const TaskMeta g_meta[] = {
    {"arc_easy", "allenai/ai2_arc", "ARC-Easy", 1.0, 25},
    {"arc_challenge", "allenai/ai2_arc", "ARC-Challenge", 1.0, 25},
    {"hellaswag", "Rowan/hellaswag", NULL, 1.0, 25},
    {"openbookqa", "allenai/openbookqa", "main", 1.0, 25},
    {"piqa", "baber/piqa", NULL, 1.0, 50},
    {"winogrande", "allenai/winogrande", "winogrande_xl", 1.0, 50},
    {"race", "EleutherAI/race", "high", 3.0, 25}, // v3.0: question[:-5] + answer
    {"mmlu", "hails/mmlu_no_train", NULL, 2.0, 25},
};

static const TaskMeta *meta_(const char *task) {
    for (size_t i = 0; i < sizeof g_meta / sizeof *g_meta; i++)
        if (!strcmp(g_meta[i].task, task)) return &g_meta[i];
    return NULL;
}

static int is_mmlu_part_(const char *task) {
    return !strncmp(task, "mmlu_", 5);
}

static int is_mmlu_category_(const char *task) {
    for (int c = 0; c < 4; c++)
        if (is_mmlu_part_(task) && !strcmp(task + 5, eval_mmlu_category_name(c))) return 1;
    return 0;
}

double eval_task_version(const char *task) {
    if (is_mmlu_category_(task)) return 2.0; // the group YAMLs
    if (is_mmlu_part_(task)) return 1.0;     // the 57 subject YAMLs
    const TaskMeta *m = meta_(task);
    return m ? m->version : 0.0;
}

static double chance_(const char *task) {
    const TaskMeta *m = meta_(is_mmlu_part_(task) ? "mmlu" : task);
    return m ? m->chance : 0.0;
}

// ---------------------------------------------------------------------------------------------
// Writing

static void put_num_(FILE *f, double x) {
    if (isfinite(x))
        fprintf(f, "%.10g", x);
    else
        fprintf(f, "\"N/A\""); // what lm-eval writes for an undefined stderr
}

static void put_key_(FILE *f, const char *k) {
    json_write_string(f, k, strlen(k));
    fputs(": ", f);
}

// lm-eval's alias: "mmlu", " - humanities", "  - abstract_algebra".
static void alias_(const char *task, char *out, size_t cap) {
    if (is_mmlu_category_(task))
        snprintf(out, cap, " - %s", task + 5);
    else if (is_mmlu_part_(task))
        snprintf(out, cap, "  - %s", task + 5);
    else
        snprintf(out, cap, "%s", task);
}

// Distinct task names of r->m in order of first appearance; *n gets the count (owned array).
static const char **task_names_(const EvalResults *r, int *n) {
    const char **names = kda_calloc((size_t)r->n + 1, sizeof *names);
    *n = 0;
    for (int i = 0; i < r->n; i++) {
        int seen = 0;
        for (int k = 0; k < *n && !seen; k++)
            seen = !strcmp(names[k], r->m[i].task);
        if (!seen) names[(*n)++] = r->m[i].task;
    }
    return names;
}

static void write_entry_(FILE *f, const EvalResults *r, const char *task) {
    char alias[128];
    alias_(task, alias, sizeof alias);
    fputs("{\"alias\": ", f);
    json_write_string(f, alias, strlen(alias));
    for (int i = 0; i < r->n; i++) {
        if (strcmp(r->m[i].task, task)) continue;
        fprintf(f, ", \"%s,none\": ", r->m[i].metric);
        put_num_(f, r->m[i].value);
        fprintf(f, ", \"%s_stderr,none\": ", r->m[i].metric);
        put_num_(f, r->m[i].stderr);
    }
    fputc('}', f);
}

static int64_t task_n_(const EvalResults *r, const char *task) {
    for (int i = 0; i < r->n; i++)
        if (!strcmp(r->m[i].task, task)) return r->m[i].n;
    return 0;
}

// results and groups (mmlu and its 4 categories are groups in lm-eval 0.4).
static void write_results_(FILE *f, const EvalResults *r, const char **names, int n) {
    fputs("  \"results\": {", f);
    for (int k = 0; k < n; k++) {
        fprintf(f, "%s\n    ", k ? "," : "");
        put_key_(f, names[k]);
        write_entry_(f, r, names[k]);
    }
    fputs("\n  },\n  \"groups\": {", f);
    int g = 0;
    for (int k = 0; k < n; k++) {
        if (strcmp(names[k], "mmlu") && !is_mmlu_category_(names[k])) continue;
        fprintf(f, "%s\n    ", g++ ? "," : "");
        put_key_(f, names[k]);
        write_entry_(f, r, names[k]);
    }
    fputs("\n  },\n  \"group_subtasks\": {", f);
    for (int k = 0; k < n; k++) {
        fprintf(f, "%s\n    ", k ? "," : "");
        put_key_(f, names[k]);
        fputc('[', f);
        int first = 1;
        for (int j = 0; j < n; j++) {
            int member = 0;
            if (!strcmp(names[k], "mmlu")) member = is_mmlu_category_(names[j]);
            if (is_mmlu_category_(names[k]) && is_mmlu_part_(names[j]) &&
                !is_mmlu_category_(names[j]))
                member = !strcmp(eval_mmlu_category_name(eval_mmlu_category(names[j] + 5)),
                                 names[k] + 5);
            if (!member) continue;
            fprintf(f, "%s", first ? "" : ", ");
            json_write_string(f, names[j], strlen(names[j]));
            first = 0;
        }
        fputc(']', f);
    }
    fputs("\n  },\n", f);
}

static const EvalTaskInfo *info_(const EvalResults *r, const char *task) {
    const char *top = is_mmlu_part_(task) ? "mmlu" : task;
    for (int i = 0; i < r->n_tasks; i++)
        if (!strcmp(r->tasks[i].task, top)) return &r->tasks[i];
    return NULL;
}

// configs, versions, n-shot, higher_is_better, n-samples, task_splits (leaf tasks only where
// lm-eval lists leaves only).
static void write_task_meta_(FILE *f, const EvalResults *r, const char **names, int n,
                             int64_t limit) {
    fputs("  \"configs\": {", f);
    int first = 1;
    for (int k = 0; k < n; k++) {
        const char *t = names[k];
        if (!strcmp(t, "mmlu") || is_mmlu_category_(t)) continue;
        const EvalTaskInfo *ti = info_(r, t);
        const TaskMeta *m = meta_(is_mmlu_part_(t) ? "mmlu" : t);
        fprintf(f, "%s\n    ", first ? "" : ",");
        first = 0;
        put_key_(f, t);
        fputs("{\"task\": ", f);
        json_write_string(f, t, strlen(t));
        if (m) {
            fputs(", \"dataset_path\": ", f);
            json_write_string(f, m->dataset_path, strlen(m->dataset_path));
            const char *dn = is_mmlu_part_(t) ? t + 5 : m->dataset_name;
            if (dn) fputs(", \"dataset_name\": ", f), json_write_string(f, dn, strlen(dn));
        }
        if (ti && ti->split[0]) {
            int test = !strcmp(ti->split, "test");
            fprintf(f, ", \"%s\": ", test ? "test_split" : "validation_split");
            json_write_string(f, ti->split, strlen(ti->split));
        }
        fprintf(f,
                ", \"output_type\": \"multiple_choice\", \"num_fewshot\": 0, "
                "\"metadata\": {\"version\": %.1f}}",
                eval_task_version(t));
    }
    fputs("\n  },\n  \"versions\": {", f);
    for (int k = 0; k < n; k++)
        fprintf(f, "%s\n    \"%s\": %.1f", k ? "," : "", names[k], eval_task_version(names[k]));
    fputs("\n  },\n  \"n-shot\": {", f);
    for (int k = 0; k < n; k++)
        fprintf(f, "%s\n    \"%s\": 0", k ? "," : "", names[k]);
    fputs("\n  },\n  \"higher_is_better\": {", f);
    for (int k = 0; k < n; k++)
        fprintf(f, "%s\n    \"%s\": {\"acc\": true, \"acc_norm\": true}", k ? "," : "", names[k]);
    fputs("\n  },\n  \"n-samples\": {", f);
    first = 1;
    for (int k = 0; k < n; k++) {
        if (!strcmp(names[k], "mmlu") || is_mmlu_category_(names[k])) continue;
        int64_t e = task_n_(r, names[k]);
        fprintf(f, "%s\n    \"%s\": {\"original\": ", first ? "" : ",", names[k]);
        first = 0;
        if (limit > 0)
            fputs("null", f); // the documents before --limit were not all read
        else
            fprintf(f, "%lld", (long long)e);
        fprintf(f, ", \"effective\": %lld}", (long long)e);
    }
    fputs("\n  },\n  \"task_splits\": {", f);
    for (int i = 0; i < r->n_tasks; i++) {
        fprintf(f, "%s\n    \"%s\": {\"split\": ", i ? "," : "", r->tasks[i].task);
        const char *sp = r->tasks[i].split;
        if (sp[0])
            json_write_string(f, sp, strlen(sp));
        else
            fputs("null", f);
        fprintf(f, ", \"fallback\": %s}", r->tasks[i].split_fallback ? "true" : "false");
    }
    fputs("\n  },\n", f);
}

int eval_results_write(const char *path, const EvalResults *r, const EvalSettings *s,
                       const char *model_dir, KdaError *err) {
    char tmp[PATH_MAX];
    FILE *f = open_atomic(path, tmp, err);
    if (!f) return -1;
    int n;
    const char **names = task_names_(r, &n);
    int on_gpu = s->device && !strcmp(s->device, "cuda");
    int bf16 = s->precision ? !strcmp(s->precision, "bf16") : on_gpu;
    const char *dir = model_dir ? model_dir : "";
    fputs("{\n", f);
    write_results_(f, r, names, n);
    write_task_meta_(f, r, names, n, s->limit);
    fputs("  \"config\": {\"model\": \"kda\", \"model_args\": ", f);
    char args[PATH_MAX + 32];
    snprintf(args, sizeof args, "pretrained=%s", dir);
    json_write_string(f, args, strlen(args));
    fprintf(f, ", \"batch_size\": \"auto\", \"device\": \"%s\", \"dtype\": \"%s\", \"limit\": ",
            on_gpu ? "cuda" : "cpu", bf16 ? "bfloat16" : "float32");
    if (s->limit > 0)
        fprintf(f, "%lld", (long long)s->limit);
    else
        fputs("null", f);
    fprintf(f, ", \"bos\": %s, \"bos_source\": \"%s\", \"max_length\": %lld},\n",
            s->bos ? "true" : "false", s->bos_source ? s->bos_source : "unknown",
            (long long)s->max_length);
    fputs("  \"model_name\": ", f);
    json_write_string(f, dir, strlen(dir));
    fprintf(f, ",\n  \"date\": %.3f,\n  \"kda_version\": \"%s\",\n  \"kda_commit\": ",
            (double)time(NULL), kda_version());
    json_write_string(f, kda_commit(), strlen(kda_commit()));
    fputs("\n}\n", f);
    free(names);
    return commit_atomic(f, tmp, path, err);
}

// ---------------------------------------------------------------------------------------------
// Reading

static void add_metric_(EvalResults *r, const char *task, const char *metric, double v, double se,
                        int64_t n) {
    r->m = kda_realloc(r->m, (size_t)(r->n + 1) * sizeof *r->m);
    EvalMetric *e = &r->m[r->n++];
    memset(e, 0, sizeof *e);
    snprintf(e->task, sizeof e->task, "%s", task);
    snprintf(e->metric, sizeof e->metric, "%s", metric);
    e->value = v, e->stderr = se, e->n = n, e->random = chance_(task);
}

static void add_split_(EvalResults *r, const char *task, const char *split, int fallback) {
    r->tasks = kda_realloc(r->tasks, (size_t)(r->n_tasks + 1) * sizeof *r->tasks);
    EvalTaskInfo *ti = &r->tasks[r->n_tasks++];
    memset(ti, 0, sizeof *ti);
    snprintf(ti->task, sizeof ti->task, "%s", task);
    snprintf(ti->split, sizeof ti->split, "%s", split ? split : "");
    ti->split_fallback = fallback;
}

static int read_legacy_(const JsonValue *arr, EvalResults *r, const char *path, KdaError *err) {
    snprintf(r->format, sizeof r->format, "kda-legacy");
    for (size_t i = 0; i < arr->len; i++) {
        const JsonValue *e = &arr->items[i];
        const char *task = json_get_str(e, "task"), *metric = json_get_str(e, "metric");
        double v, se = NAN;
        int64_t n = 0;
        if (!task || !metric || json_get_num(e, "value", &v))
            return kda_fail(err, "%s: results[%zu]: needs task, metric and a numeric value", path,
                            i);
        json_get_num(e, "stderr", &se), json_get_int(e, "n", &n);
        add_metric_(r, task, metric, v, se, n);
    }
    return 0;
}

// The split an lm-eval config evaluated: test_split when set, else validation_split.
static const char *config_split_(const JsonValue *cfg) {
    const char *t = json_get_str(cfg, "test_split");
    return t ? t : json_get_str(cfg, "validation_split");
}

static int read_lm_eval_(const JsonValue *root, EvalResults *r, const char *path, KdaError *err) {
    snprintf(r->format, sizeof r->format, "lm-eval");
    const JsonValue *res = json_get(root, "results"), *ns = json_get(root, "n-samples");
    for (size_t t = 0; t < res->len; t++) {
        const char *task = res->keys[t];
        const JsonValue *e = &res->items[t];
        if (e->type != JSON_OBJECT)
            return kda_fail(err, "%s: results.%s: expected an object", path, task);
        int64_t n = 0;
        const JsonValue *nt = json_get(ns, task);
        if (nt) json_get_int(nt, "effective", &n);
        const char *metrics[2] = {"acc", "acc_norm"};
        for (int m = 0; m < 2; m++) {
            char k[64], ks[64];
            snprintf(k, sizeof k, "%s,none", metrics[m]);
            snprintf(ks, sizeof ks, "%s_stderr,none", metrics[m]);
            double v, se = NAN;
            if (json_get_num(e, k, &v)) continue;
            json_get_num(e, ks, &se); // "N/A" stays NaN
            add_metric_(r, task, metrics[m], v, se, n);
        }
    }
    const JsonValue *cfg = json_get(root, "config");
    int b;
    if (cfg && !json_get_bool(cfg, "bos", &b)) {
        r->bos = b;
    } else if (cfg && json_get_str(cfg, "model_args")) { // lm-eval: add_bos_token=True/False
        const char *ma = json_get_str(cfg, "model_args"), *p = strstr(ma, "add_bos_token=");
        if (p) r->bos = !strncmp(p + 14, "True", 4) || !strncmp(p + 14, "true", 4);
    }
    const JsonValue *lim = cfg ? json_get(cfg, "limit") : NULL;
    if (lim && lim->type == JSON_NULL) r->limit = 0;
    if (lim && lim->type == JSON_NUMBER) r->limit = (int64_t)lim->num;
    const JsonValue *ts = json_get(root, "task_splits"), *cs = json_get(root, "configs");
    if (ts && ts->type == JSON_OBJECT) {
        for (size_t i = 0; i < ts->len; i++) {
            int fb = 0;
            json_get_bool(&ts->items[i], "fallback", &fb);
            add_split_(r, ts->keys[i], json_get_str(&ts->items[i], "split"), fb);
        }
    } else if (cs && cs->type == JSON_OBJECT) {
        for (size_t i = 0; i < cs->len; i++)
            if (!is_mmlu_part_(cs->keys[i])) // one line for mmlu: its subjects share the split
                add_split_(r, cs->keys[i], config_split_(&cs->items[i]), 0);
        for (size_t i = 0; i < cs->len; i++)
            if (is_mmlu_part_(cs->keys[i]) && !info_(r, cs->keys[i])) {
                add_split_(r, "mmlu", config_split_(&cs->items[i]), 0);
                break;
            }
    }
    return 0;
}

// The newest results*.json directly in dir or one level below (lm-eval writes
// OUTPUT/<model>/results_<date>.json). Returns 0 with out filled, -1 when there is none.
static int newest_results_(const char *dir, int depth, char *out, size_t cap, double *best) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    struct dirent *e;
    int found = -1;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[PATH_MAX];
        path_join(p, sizeof p, dir, e->d_name);
        size_t len = strlen(e->d_name);
        struct stat st;
        if (stat(p, &st)) continue;
        if (S_ISDIR(st.st_mode) && depth > 0) {
            if (newest_results_(p, depth - 1, out, cap, best) == 0) found = 0;
        } else if (S_ISREG(st.st_mode) && !strncmp(e->d_name, "results", 7) && len > 5 &&
                   !strcmp(e->d_name + len - 5, ".json")) {
            double t = (double)st.st_mtim.tv_sec + 1e-9 * (double)st.st_mtim.tv_nsec;
            if (t > *best) *best = t, snprintf(out, cap, "%s", p), found = 0;
        }
    }
    closedir(d);
    return found;
}

int eval_results_read(const char *path, EvalResults *r, char *resolved, size_t cap, KdaError *err) {
    memset(r, 0, sizeof *r);
    r->bos = -1, r->limit = -1;
    char file[PATH_MAX];
    snprintf(file, sizeof file, "%s", path);
    if (path_is_dir(path)) {
        double best = -1;
        if (newest_results_(path, 1, file, sizeof file, &best))
            return kda_fail(err, "%s: no results*.json in the directory or its subdirectories",
                            path);
    }
    if (resolved) snprintf(resolved, cap, "%s", file);
    JsonDoc doc;
    if (json_parse_file(&doc, file, err)) return -1;
    const JsonValue *res = json_get(&doc.root, "results");
    int rc;
    if (res && res->type == JSON_ARRAY) {
        rc = read_legacy_(res, r, file, err);
        const JsonValue *st = json_get(&doc.root, "settings");
        int b;
        if (st && !json_get_bool(st, "bos", &b)) r->bos = b;
    } else if (res && res->type == JSON_OBJECT) {
        rc = read_lm_eval_(&doc.root, r, file, err);
    } else {
        rc = kda_fail(err, "%s: no \"results\" (expected lm-eval's results JSON or kda eval's)",
                      file);
    }
    json_free(&doc);
    if (rc == 0 && r->n == 0) rc = kda_fail(err, "%s: no acc or acc_norm results", file);
    if (rc) eval_results_free(r);
    return rc;
}

// ---------------------------------------------------------------------------------------------
// Tables

static int shown_(const EvalMetric *e) {
    return !is_mmlu_part_(e->task);
}

void eval_results_print(FILE *f, const EvalResults *r) {
    fprintf(f, "| task | metric | random | score ± stderr | n |\n|---|---|---:|---:|---:|\n");
    int any_fallback = 0;
    for (int i = 0; i < r->n; i++) {
        const EvalMetric *e = &r->m[i];
        if (!shown_(e)) continue;
        const EvalTaskInfo *ti = info_(r, e->task);
        int fb = ti && ti->split_fallback;
        any_fallback |= fb;
        char task[256];
        snprintf(task, sizeof task, "%s%s%s%s%s", e->task,
                 strcmp(e->task, "mmlu") ? "" : " (aggregate)", fb ? " (" : "", fb ? ti->split : "",
                 fb ? "*)" : "");
        fprintf(f, "| %s | %s | %.2f | %.2f ± %.2f | %lld |\n", task, e->metric, e->random,
                100.0 * e->value, isfinite(e->stderr) ? 100.0 * e->stderr : 0.0, (long long)e->n);
    }
    if (any_fallback)
        fprintf(f, "\n* lm-eval's split of this task is not in --data; this split was read "
                   "instead (not comparable with lm-eval's number)\n");
}

void eval_results_compare(FILE *f, const EvalResults *a, const EvalResults *b, const char *na,
                          const char *nb) {
    fprintf(f,
            "| task | metric | random | %s | %s | Δ (%s − %s) |\n|---|---|---:|---:|---:|---:|\n",
            na, nb, nb, na);
    double sum = 0.0;
    int k = 0;
    for (int i = 0; i < a->n; i++) {
        const EvalMetric *x = &a->m[i];
        if (!shown_(x)) continue;
        for (int j = 0; j < b->n; j++) {
            const EvalMetric *y = &b->m[j];
            if (strcmp(x->task, y->task) || strcmp(x->metric, y->metric)) continue;
            double d = 100.0 * (y->value - x->value);
            fprintf(f, "| %s | %s | %.2f | %.2f | %.2f | %+.2f |\n", x->task, x->metric, x->random,
                    100.0 * x->value, 100.0 * y->value, d);
            sum += fabs(d), k++;
            break;
        }
    }
    fprintf(f, "| mean absolute difference | | | | | %.2f pp |\n", k ? sum / k : 0.0);
}

static const char *bos_str_(int b) {
    return b < 0 ? "not recorded" : b ? "on" : "off";
}

int eval_results_mismatches(FILE *f, const EvalResults *a, const EvalResults *b, const char *na,
                            const char *nb) {
    int n = 0;
    if (a->bos != b->bos)
        n++, fprintf(f, "BOS differs: %s %s, %s %s\n", na, bos_str_(a->bos), nb, bos_str_(b->bos));
    if (a->limit != b->limit && (a->limit > 0 || b->limit > 0))
        n++, fprintf(f, "limit differs: %s %lld, %s %lld (0: none, -1: not recorded)\n", na,
                     (long long)a->limit, nb, (long long)b->limit);
    for (int i = 0; i < a->n_tasks; i++) {
        const EvalTaskInfo *x = &a->tasks[i], *y = info_(b, x->task);
        if (!y || !x->split[0] || !y->split[0]) continue;
        if (strcmp(x->split, y->split) || x->split_fallback != y->split_fallback)
            n++, fprintf(f, "%s: split differs: %s %s%s, %s %s%s\n", x->task, na, x->split,
                         x->split_fallback ? " (fallback)" : "", nb, y->split,
                         y->split_fallback ? " (fallback)" : "");
    }
    return n;
}
