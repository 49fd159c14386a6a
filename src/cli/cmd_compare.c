// cmd_compare.c - `kda compare A B [--labels LA,LB] [--divide N] [-o overlay.svg]`: two training
// runs side by side, the seed's Step 6 table (iteration | A | B | Δ %, window means) and an
// overlay plot. Inputs: kda metrics.jsonl, HF trainer_state.json, Megatron/Primus logs
// (loss_curve.h).
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "core/args.h"
#include "core/error.h"
#include "core/log.h"
#include "core/util.h"
#include "train/loss_curve.h" // defines: KdaLossCurve, kda_loss_curve_read, kda_loss_compare_table

// The seed's Step 6 iterations (training-recipe.md §2.1).
static const double g_seed_iters[] = {1, 100, 500, 1000, 2000, 2600, 3000, 3600, 4000, 4500, 4700};
#define N_SEED ((int)(sizeof g_seed_iters / sizeof *g_seed_iters))

// Iterations for the table: --iterations, else the seed's that both curves have (when at least
// 3), else up to 12 iterations spread over those both curves have. Returns the count.
static int pick_iters_(const KdaLossCurve *a, const KdaLossCurve *b, const char *list, double *out,
                       int cap) {
    int n = 0;
    if (list) {
        for (const char *p = list; *p && n < cap;) {
            char *end;
            out[n++] = strtod(p, &end);
            if (end == p) kda_die("--iterations: expected numbers separated by commas: '%s'", list);
            p = *end == ',' ? end + 1 : end;
        }
        return n;
    }
    for (int i = 0; i < N_SEED; i++)
        if (isfinite(kda_loss_curve_at(a, g_seed_iters[i])) &&
            isfinite(kda_loss_curve_at(b, g_seed_iters[i])))
            out[n++] = g_seed_iters[i];
    if (n >= 3) return n;
    double *common = kda_malloc((size_t)(a->n + 1) * sizeof *common);
    int nc = 0;
    for (int64_t i = 0; i < a->n; i++)
        if (isfinite(kda_loss_curve_at(b, a->iter[i]))) common[nc++] = a->iter[i];
    n = 0;
    for (int k = 0; k < nc && n < cap; k++) {
        int idx = nc <= 12 ? k : (int)llround((double)k * (nc - 1) / 11.0);
        if (nc > 12 && k > 11) break;
        if (n == 0 || out[n - 1] != common[idx]) out[n++] = common[idx];
    }
    free(common);
    return n;
}

// ---- overlay plot ------------------------------------------------------------------------------

// A "nice" tick step (1, 2 or 5 x 10^k) for about n ticks over span.
static double nice_step_(double span, int n) {
    double raw = span / n, p = pow(10, floor(log10(raw))), m = raw / p;
    return p * (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10);
}

typedef struct {
    double x0, y0, w, h, xmin, xmax, ymin, ymax;
} Box;

static double bx_(const Box *b, double x) {
    return b->x0 + (x - b->xmin) / (b->xmax - b->xmin) * b->w;
}
static double by_(const Box *b, double y) {
    return b->y0 + b->h - (y - b->ymin) / (b->ymax - b->ymin) * b->h;
}

static void ticks_(FILE *f, const Box *b) {
    double sx = nice_step_(b->xmax - b->xmin, 8), sy = nice_step_(b->ymax - b->ymin, 6);
    for (double x = ceil(b->xmin / sx) * sx; x <= b->xmax + 1e-9; x += sx)
        fprintf(f,
                "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#eee'/><text x='%.1f' "
                "y='%.1f' font-size='11' text-anchor='middle'>%g</text>\n",
                bx_(b, x), b->y0, bx_(b, x), b->y0 + b->h, bx_(b, x), b->y0 + b->h + 15, x);
    for (double y = ceil(b->ymin / sy) * sy; y <= b->ymax + 1e-9; y += sy)
        fprintf(f,
                "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#eee'/><text x='%.1f' "
                "y='%.1f' font-size='11' text-anchor='end'>%g</text>\n",
                b->x0, by_(b, y), b->x0 + b->w, by_(b, y), b->x0 - 5, by_(b, y) + 4, y);
}

static void curve_(FILE *f, const Box *b, const KdaLossCurve *c, const char *color) {
    fprintf(f, "<polyline fill='none' stroke='%s' stroke-width='1.5' points='", color);
    for (int64_t i = 0; i < c->n; i++)
        if (c->loss[i] >= b->ymin && c->loss[i] <= b->ymax)
            fprintf(f, "%.1f,%.1f ", bx_(b, c->iter[i]), by_(b, c->loss[i]));
    fputs("'/>\n", f);
}

// Loss against iteration for both curves; the y range starts at the lower curve's minimum and
// is cut at its 2nd-percentile-from-the-top value so the early spike does not flatten the rest.
static void write_svg_(const char *path, const KdaLossCurve *c[2], const char *label[2]) {
    Box b = {70, 30, 800, 420, INFINITY, -INFINITY, INFINITY, -INFINITY};
    double top = -INFINITY;
    for (int k = 0; k < 2; k++)
        for (int64_t i = 0; i < c[k]->n; i++) {
            b.xmin = fmin(b.xmin, c[k]->iter[i]), b.xmax = fmax(b.xmax, c[k]->iter[i]);
            b.ymin = fmin(b.ymin, c[k]->loss[i]);
            if (i >= c[k]->n / 50) top = fmax(top, c[k]->loss[i]); // skip the first 2 %
        }
    b.ymax = top > b.ymin ? top : b.ymin + 1;
    double pad = 0.04 * (b.ymax - b.ymin);
    b.ymin -= pad, b.ymax += pad;
    if (b.xmax <= b.xmin) b.xmax = b.xmin + 1;
    KdaError err;
    char tmp[PATH_MAX];
    FILE *f = open_atomic(path, tmp, &err);
    if (!f) kda_die("%s", err.msg);
    fputs("<svg xmlns='http://www.w3.org/2000/svg' width='900' height='500' "
          "font-family='sans-serif'>\n<rect width='900' height='500' fill='white'/>\n",
          f);
    ticks_(f, &b);
    fprintf(f, "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='none' stroke='#444'/>\n",
            b.x0, b.y0, b.w, b.h);
    const char *colors[2] = {"#1f77b4", "#d62728"};
    for (int k = 0; k < 2; k++) {
        curve_(f, &b, c[k], colors[k]);
        fprintf(f, "<text x='780' y='%d' font-size='13' fill='%s'>", 55 + 18 * k, colors[k]);
        for (const char *p = label[k]; *p; p++) // XML-escape the label
            fputs(*p == '<' ? "&lt;" : *p == '&' ? "&amp;" : (char[2]){*p, 0}, f);
        fputs("</text>\n", f);
    }
    fputs("<text x='470' y='490' font-size='12' text-anchor='middle'>iteration</text>\n"
          "<text x='18' y='240' font-size='12' transform='rotate(-90 18 240)' "
          "text-anchor='middle'>lm loss</text>\n</svg>\n",
          f);
    if (commit_atomic(f, tmp, path, &err)) kda_die("%s", err.msg);
}

// ---- command -----------------------------------------------------------------------------------

int cmd_compare(int argc, char **argv) {
    ArgList inputs = {0};
    const char *labels = NULL, *output = NULL, *iters = NULL, *window = NULL;
    double divide = 1;
    ArgSpec specs[] = {
        {"input", ARG_STRS, &inputs,
         "A B: kda metrics.jsonl, HF trainer_state.json or a Megatron/Primus log (or give them "
         "first)",
         0},
        {"labels", ARG_STR, &labels, "column names, e.g. FLA,kda (default: A,B)", 0},
        {"divide", ARG_FLOAT, &divide,
         "divide HF trainer_state losses by N (DeepSpeed logs the sum over ranks: 8 for the "
         "seed's FLA run)",
         0},
        {"iterations", ARG_STR, &iters,
         "table rows, e.g. 1,100,500 (default: the seed's Step 6 rows both runs have)", 0},
        {"window", ARG_STR, &window,
         "LO:HI iterations averaged (default: the last 1000 both runs cover)", 0},
        {"output", ARG_STR, &output, "overlay plot (SVG) to write (-o)", 0},
    };
    ArgTable t = {"kda compare", "compare two training runs' loss curves (Step 6 table + plot)",
                  "usage: kda compare A B [--labels FLA,kda] [--divide 8] [-o overlay.svg]", specs,
                  (int)(sizeof specs / sizeof *specs)};
    char **av = kda_calloc((size_t)argc + 2, sizeof *av);
    int ac = 0;
    for (int i = 0; i < argc; i++) {
        if (i == 0 && argv[0][0] != '-') av[ac++] = "--input";
        av[ac++] = !strcmp(argv[i], "-o") ? "--output" : argv[i];
    }
    if (args_parse_or_die(&t, ac, av)) return free(av), 0;
    if (inputs.n != 2) kda_usage_die("kda compare", "give two inputs, got %d", inputs.n);
    char la[64] = "A", lb[64] = "B";
    if (labels) {
        const char *c = strchr(labels, ',');
        if (!c) kda_usage_die("kda compare", "--labels: expected two names like FLA,kda");
        snprintf(la, sizeof la, "%.*s", (int)(c - labels), labels);
        snprintf(lb, sizeof lb, "%s", c + 1);
    }
    KdaLossCurve a, b;
    KdaError err;
    if (kda_loss_curve_read(inputs.items[0], divide, &a, &err)) kda_die("%s", err.msg);
    if (kda_loss_curve_read(inputs.items[1], divide, &b, &err)) kda_die("%s", err.msg);
    double rows[64];
    int n = pick_iters_(&a, &b, iters, rows, 64);
    double hi = fmin(a.iter[a.n - 1], b.iter[b.n - 1]), lo = hi > 1000 ? hi - 1000 : hi / 2;
    if (window && sscanf(window, "%lf:%lf", &lo, &hi) != 2)
        kda_usage_die("kda compare", "--window: expected LO:HI, got '%s'", window);
    printf("%s = %s (%s, %lld points%s)\n%s = %s (%s, %lld points%s)\n\n", la, inputs.items[0],
           a.format, (long long)a.n,
           divide != 1 && !strcmp(a.format, "HF trainer_state") ? ", divided" : "", lb,
           inputs.items[1], b.format, (long long)b.n,
           divide != 1 && !strcmp(b.format, "HF trainer_state") ? ", divided" : "");
    if (kda_loss_compare_table(stdout, &a, &b, la, lb, rows, n, lo, hi) == 0)
        kda_warn("the two runs share none of the table's iterations (--iterations)");
    for (int k = 0; k < 2; k++) {
        const KdaLossCurve *c = k ? &b : &a;
        if (!strcmp(c->format, "HF trainer_state") && divide == 1 && c->loss[0] > 20)
            kda_warn("%s: first loss %.2f looks like a sum over ranks (DeepSpeed): --divide N",
                     inputs.items[k], c->loss[0]);
    }
    if (output) {
        const KdaLossCurve *cs[2] = {&a, &b};
        const char *ls[2] = {la, lb};
        write_svg_(output, cs, ls);
        kda_info("wrote %s", output);
    }
    kda_loss_curve_free(&a), kda_loss_curve_free(&b);
    arglist_free(&inputs);
    free(av);
    return 0;
}
