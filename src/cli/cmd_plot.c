// cmd_plot.c - `kda plot metrics.jsonl -o loss.svg`: a self-contained SVG with two panels,
// loss (train, valid) and learning rate against iteration, from the trainer's metrics.jsonl.
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "core/args.h"
#include "core/error.h"
#include "core/json.h"
#include "core/log.h"
#include "core/util.h"

typedef struct {
    double *x, *y;
    int n, cap;
} Series;

static void series_add(Series *s, double x, double y) {
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 64;
        s->x = kda_realloc(s->x, (size_t)s->cap * sizeof(double));
        s->y = kda_realloc(s->y, (size_t)s->cap * sizeof(double));
    }
    s->x[s->n] = x;
    s->y[s->n++] = y;
}

typedef struct {
    double x0, y0, w, h;           // pixel box of the plot area
    double xmin, xmax, ymin, ymax; // data range
} Panel;

static double px(const Panel *p, double x) {
    return p->x0 + (x - p->xmin) / (p->xmax - p->xmin) * p->w;
}
static double py(const Panel *p, double y) {
    return p->y0 + p->h - (y - p->ymin) / (p->ymax - p->ymin) * p->h;
}

static void range(const Series *s, int n, double *lo, double *hi) {
    *lo = INFINITY;
    *hi = -INFINITY;
    for (int k = 0; k < n; k++)
        for (int i = 0; i < s[k].n; i++) {
            if (s[k].y[i] < *lo) *lo = s[k].y[i];
            if (s[k].y[i] > *hi) *hi = s[k].y[i];
        }
    if (!(*lo <= *hi)) *lo = 0, *hi = 1;
    if (*hi - *lo < 1e-12) *hi = *lo + (fabs(*lo) > 0 ? fabs(*lo) * 0.1 : 1);
    double pad = 0.05 * (*hi - *lo);
    *lo -= pad;
    *hi += pad;
}

static void axes(FILE *f, const Panel *p, const char *title) {
    fprintf(f, "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='none' stroke='#444'/>\n",
            p->x0, p->y0, p->w, p->h);
    fprintf(f, "<text x='%.1f' y='%.1f' font-size='14' text-anchor='middle'>%s</text>\n",
            p->x0 + p->w / 2, p->y0 - 8, title);
    for (int i = 0; i <= 5; i++) {
        double yv = p->ymin + (p->ymax - p->ymin) * i / 5,
               xv = p->xmin + (p->xmax - p->xmin) * i / 5;
        double y = py(p, yv), x = px(p, xv);
        fprintf(f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#ddd'/>\n", p->x0, y,
                p->x0 + p->w, y);
        fprintf(f, "<text x='%.1f' y='%.1f' font-size='11' text-anchor='end'>%.4g</text>\n",
                p->x0 - 4, y + 4, yv);
        fprintf(f, "<text x='%.1f' y='%.1f' font-size='11' text-anchor='middle'>%.0f</text>\n", x,
                p->y0 + p->h + 14, xv);
    }
}

static void line(FILE *f, const Panel *p, const Series *s, const char *color, int dots) {
    if (s->n == 0) return;
    fprintf(f, "<polyline fill='none' stroke='%s' stroke-width='1.5' points='", color);
    for (int i = 0; i < s->n; i++)
        fprintf(f, "%.1f,%.1f ", px(p, s->x[i]), py(p, s->y[i]));
    fprintf(f, "'/>\n");
    for (int i = 0; dots && i < s->n; i++)
        fprintf(f, "<circle cx='%.1f' cy='%.1f' r='3' fill='%s'/>\n", px(p, s->x[i]),
                py(p, s->y[i]), color);
}

int cmd_plot(int argc, char **argv) {
    const char *output = "loss.svg";
    ArgList inputs = {0};
    ArgSpec specs[] = {
        {"input", ARG_STRS, &inputs, "metrics.jsonl written by kda train (or give it first)", 0},
        {"output", ARG_STR, &output, "SVG file to write (-o)", 0},
    };
    ArgTable t = {"kda plot", "plot loss (train, valid) and learning rate from metrics.jsonl",
                  "usage: kda plot metrics.jsonl -o loss.svg", specs, 2};
    // accept the positional form `kda plot FILE -o OUT` and a single-dash -o
    char **av = kda_calloc((size_t)argc + 2, sizeof *av);
    int ac = 0;
    for (int i = 0; i < argc; i++) {
        if (i == 0 && argv[0][0] != '-') av[ac++] = "--input";
        av[ac++] = !strcmp(argv[i], "-o") || !strcmp(argv[i], "--o") ? "--output" : argv[i];
    }
    if (args_parse_or_die(&t, ac, av)) return 0;
    if (inputs.n != 1) kda_die("give exactly one metrics.jsonl (kda plot --help)");
    KdaError err;
    size_t n;
    char *s = read_file(inputs.items[0], &n, &err);
    if (!s) kda_die("%s", err.msg);
    Series train = {0}, valid = {0}, lr = {0};
    int lineno = 0;
    for (char *ln = s; *ln;) {
        char *nl = strchr(ln, '\n');
        size_t len = nl ? (size_t)(nl - ln) : strlen(ln);
        lineno++;
        JsonDoc d;
        double it, v;
        if (len > 0) {
            if (json_parse(&d, ln, len, &err))
                kda_die("%s: line %d: %s", inputs.items[0], lineno, err.msg);
            if (json_get_num(&d.root, "iteration", &it) == 0) {
                if (!json_get_num(&d.root, "loss", &v) && v >= 0) series_add(&train, it, v);
                if (!json_get_num(&d.root, "valid_loss", &v)) series_add(&valid, it, v);
                if (!json_get_num(&d.root, "lr", &v)) series_add(&lr, it, v);
            }
            json_free(&d);
        }
        ln += len + (nl ? 1 : 0);
    }
    free(s);
    if (train.n + valid.n == 0) kda_die("%s: no loss values found", inputs.items[0]);
    double xmax = 1;
    Series all[3] = {train, valid, lr};
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < all[k].n; i++)
            if (all[k].x[i] > xmax) xmax = all[k].x[i];
    Panel pl = {70, 40, 800, 330, 0, xmax, 0, 0}, pr = {70, 430, 800, 130, 0, xmax, 0, 0};
    range(all, 2, &pl.ymin, &pl.ymax);
    range(&lr, 1, &pr.ymin, &pr.ymax);
    char tmp[PATH_MAX];
    FILE *f = open_atomic(output, tmp, &err);
    if (!f) kda_die("%s", err.msg);
    fprintf(f, "<svg xmlns='http://www.w3.org/2000/svg' width='900' height='600' "
               "font-family='sans-serif'>\n<rect width='900' height='600' fill='white'/>\n");
    axes(f, &pl, "loss");
    line(f, &pl, &train, "#1f77b4", 0);
    line(f, &pl, &valid, "#ff7f0e", 1);
    fprintf(f, "<text x='760' y='60' font-size='12' fill='#1f77b4'>train</text>\n"
               "<text x='760' y='76' font-size='12' fill='#ff7f0e'>valid</text>\n");
    axes(f, &pr, "learning rate");
    line(f, &pr, &lr, "#2ca02c", 0);
    fprintf(f, "<text x='470' y='595' font-size='12' text-anchor='middle'>iteration</text>\n"
               "</svg>\n");
    if (commit_atomic(f, tmp, output, &err)) kda_die("%s", err.msg);
    kda_info("wrote %s (%d train, %d valid points)", output, train.n, valid.n);
    free(train.x), free(train.y), free(valid.x), free(valid.y), free(lr.x), free(lr.y);
    arglist_free(&inputs);
    free(av);
    return 0;
}
