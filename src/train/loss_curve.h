// loss_curve.h - training-loss curves from other stacks' logs, for side-by-side comparison
// (the seed's Step 6 table: kda.c vs FLA vs Primus).
//
// Formats (detected from the content):
//   * kda.c metrics.jsonl: one JSON object per line, "iteration" and "loss" (null/-1 skipped)
//   * HF Trainer trainer_state.json (FLA's flame): log_history[] entries with "step" and "loss"
//     (eval/summary entries without "loss" are skipped). DeepSpeed logs the SUM of the per-rank
//     losses: pass divide = number of ranks (8 in the seed's run) to get the mean.
//   * Megatron / Primus logs: "iteration N/ M | ... | lm loss: X |" (the fields may wrap onto
//     the next lines, as in Primus's docs; the loss belongs to the last iteration seen).
// Every value is what the log says for that iteration (a window mean for Megatron and kda.c,
// the logging-interval mean for HF).
#ifndef KDA_LOSS_CURVE_H
#define KDA_LOSS_CURVE_H

#include <stdint.h>
#include <stdio.h>

#include "core/error.h"

typedef struct {
    double *iter; // [n] owned, increasing
    double *loss; // [n] owned
    int64_t n;
    char format[24]; // "kda metrics", "HF trainer_state", "Megatron log"
} KdaLossCurve;

// Reads path into *c (divide > 0 divides HF trainer_state losses; 1 leaves them). Points are
// sorted by iteration; a repeated iteration keeps the last value (a resumed run). Errors: an
// unreadable file, or no loss values at all (the message names the formats looked for).
int kda_loss_curve_read(const char *path, double divide, KdaLossCurve *c, KdaError *err);
void kda_loss_curve_free(KdaLossCurve *c); // accepts a zeroed curve

// The loss logged at iteration it, or NaN when that iteration is not in the curve.
double kda_loss_curve_at(const KdaLossCurve *c, double it);
// Mean of the points with lo <= iteration <= hi (NaN when none); *n_points gets their count.
double kda_loss_curve_mean(const KdaLossCurve *c, double lo, double hi, int64_t *n_points);

// The seed's Step 6 table: "| iteration | A | B | Δ % |" at iters[0..n_iters) (a dash where a
// curve has no point), then the window means over [w_lo, w_hi] with their Δ %. Δ % =
// 100 (B - A) / A. Returns the number of rows where both curves have a value.
int kda_loss_compare_table(FILE *f, const KdaLossCurve *a, const KdaLossCurve *b, const char *la,
                           const char *lb, const double *iters, int n_iters, double w_lo,
                           double w_hi);

#endif
