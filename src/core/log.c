// log.c - logging and the progress bar.
#include "core/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/util.h"

static void vlog(const char *level, const char *fmt, va_list ap) {
    if (level) fprintf(stderr, "%s: ", level);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

void kda_info(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vlog(NULL, fmt, ap);
    va_end(ap);
}

void kda_warn(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vlog("kda: warning", fmt, ap);
    va_end(ap);
}

const char *human_count(char *buf, int cap, double x) {
    if (x >= 1e9)
        snprintf(buf, (size_t)cap, "%.2fG", x / 1e9);
    else if (x >= 1e6)
        snprintf(buf, (size_t)cap, "%.2fM", x / 1e6);
    else if (x >= 1e3)
        snprintf(buf, (size_t)cap, "%.1fk", x / 1e3);
    else
        snprintf(buf, (size_t)cap, "%.0f", x);
    return buf;
}

const char *human_seconds(char *buf, int cap, double s) {
    if (s < 0) s = 0;
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, (size_t)cap, "%ldh%02ldm", t / 3600, (t / 60) % 60);
    else
        snprintf(buf, (size_t)cap, "%ldm%02lds", t / 60, t % 60);
    return buf;
}

void progress_init(Progress *p, const char *label, double total, const char *unit) {
    memset(p, 0, sizeof *p);
    p->label = label;
    p->unit = unit ? unit : "";
    p->total = total;
    p->t0 = p->last_draw = now_seconds();
    p->plain_every = 10.0;
    p->tty = isatty(STDERR_FILENO);
}

static void draw(Progress *p, double done, const char *extra, int final) {
    double el = now_seconds() - p->t0;
    char e1[32], e2[32], line[256];
    int n;
    if (p->total > 0) {
        double f = done / p->total;
        if (f > 1) f = 1;
        char bar[31];
        int fill = (int)(f * 30);
        for (int i = 0; i < 30; i++)
            bar[i] = i < fill ? '#' : '.';
        bar[30] = 0;
        double eta = f > 0 ? el * (1 - f) / f : 0;
        n = snprintf(line, sizeof line, "%s [%s] %5.1f%% %.1f/%.1f%s %s eta %s", p->label, bar,
                     100 * f, done, p->total, p->unit, human_seconds(e1, 32, el),
                     final ? "0m00s" : human_seconds(e2, 32, eta));
    } else {
        n = snprintf(line, sizeof line, "%s %.1f%s %s", p->label, done, p->unit,
                     human_seconds(e1, 32, el));
    }
    if (extra && n < (int)sizeof line) snprintf(line + n, sizeof line - (size_t)n, " | %s", extra);
    if (p->tty)
        fprintf(stderr, "\r\033[K%s%s", line, final ? "\n" : "");
    else
        fprintf(stderr, "%s\n", line);
    fflush(stderr);
    p->drawn = 1;
}

void progress_update(Progress *p, double done, const char *extra) {
    double t = now_seconds();
    if (t - p->last_draw < (p->tty ? 0.1 : p->plain_every)) return;
    p->last_draw = t;
    draw(p, done, extra, 0);
}

void progress_finish(Progress *p, double done, const char *extra) {
    draw(p, done, extra, 1);
}
