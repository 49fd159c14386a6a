// log.h - leveled logging to stderr and a terminal progress bar.
//
// The progress bar redraws in place on a TTY (at most 10 times a second) and falls back to
// one plain line every `plain_every` seconds otherwise, so logs of batch jobs stay readable.
#ifndef KDA_LOG_H
#define KDA_LOG_H

#include <stdint.h>

void kda_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void kda_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

typedef struct {
    const char *label; // borrowed, e.g. "tokenize"
    const char *unit;  // borrowed, e.g. "MB" (done/total are in this unit)
    double total;      // <= 0: unknown
    double t0, last_draw;
    double plain_every; // seconds between plain lines on a non-TTY (default 10)
    int tty;
    int drawn;
} Progress;

void progress_init(Progress *p, const char *label, double total, const char *unit);
// extra: a short free-form status (may be NULL), e.g. "12.3k tok/s".
void progress_update(Progress *p, double done, const char *extra);
void progress_finish(Progress *p, double done, const char *extra);
// Formats a count with k/M/G suffix into buf.
const char *human_count(char *buf, int cap, double x);
const char *human_seconds(char *buf, int cap, double s);

#endif
