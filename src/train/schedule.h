// schedule.h - learning-rate schedule: linear warmup from 0, then cosine / linear decay to
// min_lr (or constant), as Megatron's OptimizerParamScheduler with lr_warmup_init 0
// (training-recipe.md §1.2).
//
// lr(n), n = updates already applied:
//   n <= warmup (warmup > 0):  lr * n / warmup
//   constant style:            lr
//   n > decay_iters:           min_lr
//   otherwise, r = (n - warmup) / (decay_iters - warmup):
//     cosine: min_lr + (lr - min_lr) * 0.5 * (1 + cos(pi * r));  linear: ... * (1 - r)
// The update with index u (1-based) uses lr(u - 1): the first update runs at 0.
#ifndef KDA_SCHEDULE_H
#define KDA_SCHEDULE_H

#include <stdint.h>

#include "core/error.h"

typedef enum { KDA_LR_COSINE, KDA_LR_LINEAR, KDA_LR_CONSTANT } KdaLrStyle;

typedef struct {
    double lr; // peak
    double min_lr;
    int64_t warmup_iters;
    int64_t decay_iters; // the schedule reaches min_lr here
    KdaLrStyle style;
} KdaLrSchedule;

// Checks 0 <= min_lr <= lr, warmup >= 0, decay_iters > warmup (unless constant).
int kda_lr_schedule_check(const KdaLrSchedule *s, KdaError *err);
double kda_lr_at(const KdaLrSchedule *s, int64_t n);         // lr(n), logged after update n
double kda_lr_for_update(const KdaLrSchedule *s, int64_t u); // lr(u - 1), u >= 1
// "cosine" | "linear" | "constant"; -1 with the valid names in err otherwise.
int kda_lr_style_parse(const char *name, KdaLrStyle *out, KdaError *err);
const char *kda_lr_style_name(KdaLrStyle s);

#endif
