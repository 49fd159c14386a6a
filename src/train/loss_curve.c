// loss_curve.c - loss curves from kda.c, HF Trainer and Megatron/Primus logs; the comparison
// table (loss_curve.h).
#include "train/loss_curve.h" // defines: KdaLossCurve, kda_loss_curve_*

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h" // defines: JsonDoc, json_parse, json_get_num
#include "core/util.h" // defines: read_file

static void add_(KdaLossCurve *c, double it, double loss, int64_t *cap) {
    if (c->n == *cap) {
        *cap = *cap ? 2 * *cap : 256;
        c->iter = kda_realloc(c->iter, (size_t)*cap * sizeof(double));
        c->loss = kda_realloc(c->loss, (size_t)*cap * sizeof(double));
    }
    c->iter[c->n] = it;
    c->loss[c->n++] = loss;
}

// kda.c metrics.jsonl: lines that parse as objects with "iteration" and a finite "loss" >= 0.
static void read_metrics_(KdaLossCurve *c, const char *s, int64_t *cap) {
    for (const char *ln = s; *ln;) {
        const char *nl = strchr(ln, '\n');
        size_t len = nl ? (size_t)(nl - ln) : strlen(ln);
        JsonDoc d;
        KdaError e;
        double it, v;
        if (len && ln[0] == '{' && !json_parse(&d, ln, len, &e)) {
            if (!json_get_num(&d.root, "iteration", &it) && !json_get_num(&d.root, "loss", &v) &&
                isfinite(v) && v >= 0)
                add_(c, it, v, cap);
            json_free(&d);
        }
        ln += len + (nl != NULL);
    }
}

// HF trainer_state.json: log_history[].{step, loss}.
static int read_trainer_state_(KdaLossCurve *c, const char *s, size_t n, double divide,
                               int64_t *cap) {
    JsonDoc d;
    KdaError e;
    if (json_parse(&d, s, n, &e)) return 0;
    const JsonValue *h = json_get(&d.root, "log_history");
    int found = h && h->type == JSON_ARRAY;
    for (size_t i = 0; found && i < h->len; i++) {
        double it, v;
        if (!json_get_num(&h->items[i], "step", &it) && !json_get_num(&h->items[i], "loss", &v) &&
            isfinite(v))
            add_(c, it, v / (divide > 0 ? divide : 1), cap);
    }
    json_free(&d);
    return found;
}

// Megatron / Primus text logs: "iteration N/ M" then, possibly lines later, "lm loss: X".
static void read_megatron_(KdaLossCurve *c, const char *s, int64_t *cap) {
    double it = NAN;
    for (const char *p = s; (p = strpbrk(p, "il"));) {
        if (!strncmp(p, "iteration", 9)) {
            char *end;
            double v = strtod(p + 9, &end);
            const char *q = end;
            while (*q == ' ')
                q++;
            if (end != p + 9 && *q == '/') it = v; // "iteration 100/ 4768", not "iterations"
            p += 9;
        } else if (!strncmp(p, "lm loss:", 8)) {
            char *end;
            double v = strtod(p + 8, &end);
            if (end != p + 8 && isfinite(it) && isfinite(v)) add_(c, it, v, cap), it = NAN;
            p += 8;
        } else {
            p++;
        }
    }
}

static int cmp_idx_(const void *x, const void *y, void *ctx) {
    const double *it = ctx;
    size_t a = *(const size_t *)x, b = *(const size_t *)y;
    if (it[a] != it[b]) return it[a] < it[b] ? -1 : 1;
    return a < b ? -1 : a > b; // stable: later duplicates sort after earlier ones
}

// Sorts by iteration; for a repeated iteration keeps the last logged value.
static void sort_dedup_(KdaLossCurve *c) {
    size_t n = (size_t)c->n, *idx = kda_malloc((n + 1) * sizeof *idx);
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    qsort_r(idx, n, sizeof *idx, cmp_idx_, c->iter);
    double *it = kda_malloc((n + 1) * sizeof *it), *l = kda_malloc((n + 1) * sizeof *l);
    int64_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (k && it[k - 1] == c->iter[idx[i]]) k--;
        it[k] = c->iter[idx[i]], l[k++] = c->loss[idx[i]];
    }
    free(c->iter), free(c->loss), free(idx);
    c->iter = it, c->loss = l, c->n = k;
}

int kda_loss_curve_read(const char *path, double divide, KdaLossCurve *c, KdaError *err) {
    memset(c, 0, sizeof *c);
    size_t n;
    char *s = read_file(path, &n, err);
    if (!s) return -1;
    int64_t cap = 0;
    const char *first = s + strspn(s, " \t\r\n");
    if (*first == '{' && read_trainer_state_(c, s, n, divide, &cap)) {
        snprintf(c->format, sizeof c->format, "HF trainer_state");
    } else if (*first == '{') {
        read_metrics_(c, s, &cap);
        snprintf(c->format, sizeof c->format, "kda metrics");
    } else {
        read_megatron_(c, s, &cap);
        snprintf(c->format, sizeof c->format, "Megatron log");
    }
    free(s);
    if (c->n == 0) {
        kda_loss_curve_free(c);
        return kda_fail(err,
                        "%s: no loss values found (looked for kda metrics.jsonl \"loss\", HF "
                        "trainer_state.json log_history[].loss, Megatron \"lm loss:\")",
                        path);
    }
    sort_dedup_(c);
    return 0;
}

void kda_loss_curve_free(KdaLossCurve *c) {
    free(c->iter), free(c->loss);
    memset(c, 0, sizeof *c);
}

double kda_loss_curve_at(const KdaLossCurve *c, double it) {
    int64_t lo = 0, hi = c->n - 1;
    while (lo <= hi) {
        int64_t mid = (lo + hi) / 2;
        if (c->iter[mid] == it) return c->loss[mid];
        if (c->iter[mid] < it)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return NAN;
}

double kda_loss_curve_mean(const KdaLossCurve *c, double lo, double hi, int64_t *n_points) {
    double sum = 0;
    int64_t k = 0;
    for (int64_t i = 0; i < c->n; i++)
        if (c->iter[i] >= lo && c->iter[i] <= hi) sum += c->loss[i], k++;
    if (n_points) *n_points = k;
    return k ? sum / (double)k : NAN;
}

static void cell_(FILE *f, double v) {
    if (isfinite(v))
        fprintf(f, " %.4f |", v);
    else
        fprintf(f, " — |");
}

int kda_loss_compare_table(FILE *f, const KdaLossCurve *a, const KdaLossCurve *b, const char *la,
                           const char *lb, const double *iters, int n_iters, double w_lo,
                           double w_hi) {
    fprintf(f, "| iteration | %s | %s | Δ %% |\n|---:|---:|---:|---:|\n", la, lb);
    int rows = 0;
    for (int i = 0; i < n_iters; i++) {
        double x = kda_loss_curve_at(a, iters[i]), y = kda_loss_curve_at(b, iters[i]);
        fprintf(f, "| %.0f |", iters[i]);
        cell_(f, x), cell_(f, y);
        if (isfinite(x) && isfinite(y) && x != 0)
            fprintf(f, " %+.2f %% |\n", 100.0 * (y - x) / x), rows++;
        else
            fprintf(f, " — |\n");
    }
    int64_t na, nb;
    double ma = kda_loss_curve_mean(a, w_lo, w_hi, &na),
           mb = kda_loss_curve_mean(b, w_lo, w_hi, &nb);
    fprintf(f, "| mean %.0f–%.0f (%lld / %lld points) |", w_lo, w_hi, (long long)na, (long long)nb);
    cell_(f, ma), cell_(f, mb);
    if (isfinite(ma) && isfinite(mb) && ma != 0)
        fprintf(f, " %+.2f %% |\n", 100.0 * (mb - ma) / ma);
    else
        fprintf(f, " — |\n");
    return rows;
}
