// schedule.c - warmup + cosine/linear/constant learning-rate schedule; see schedule.h.
#include "train/schedule.h" // defines: KdaLrSchedule, kda_lr_*

#include <math.h>
#include <string.h>

int kda_lr_schedule_check(const KdaLrSchedule *s, KdaError *err) {
    if (!(s->lr >= 0) || !(s->min_lr >= 0) || s->min_lr > s->lr)
        return kda_fail(err, "lr schedule: need 0 <= min_lr (%g) <= lr (%g)", s->min_lr, s->lr);
    if (s->warmup_iters < 0) return kda_fail(err, "lr schedule: lr_warmup_iters < 0");
    if (s->style != KDA_LR_CONSTANT && s->decay_iters <= s->warmup_iters)
        return kda_fail(err,
                        "lr schedule: lr_decay_iters (%lld) must exceed lr_warmup_iters (%lld)",
                        (long long)s->decay_iters, (long long)s->warmup_iters);
    return 0;
}

double kda_lr_at(const KdaLrSchedule *s, int64_t n) {
    if (n < 0) n = 0;
    if (s->warmup_iters > 0 && n <= s->warmup_iters)
        return s->lr * (double)n / (double)s->warmup_iters;
    if (s->style == KDA_LR_CONSTANT) return s->lr;
    if (n > s->decay_iters) return s->min_lr;
    double r = (double)(n - s->warmup_iters) / (double)(s->decay_iters - s->warmup_iters);
    double coeff = s->style == KDA_LR_COSINE ? 0.5 * (1.0 + cos(M_PI * r)) : 1.0 - r;
    return s->min_lr + coeff * (s->lr - s->min_lr);
}

double kda_lr_for_update(const KdaLrSchedule *s, int64_t u) {
    return kda_lr_at(s, u - 1);
}

static const char *const g_style_names[] = {"cosine", "linear", "constant"};

int kda_lr_style_parse(const char *name, KdaLrStyle *out, KdaError *err) {
    for (int k = 0; k < 3; k++)
        if (!strcmp(name, g_style_names[k])) {
            *out = (KdaLrStyle)k;
            return 0;
        }
    return kda_fail(err, "lr_decay_style \"%s\": expected cosine, linear or constant", name);
}

const char *kda_lr_style_name(KdaLrStyle s) {
    return g_style_names[s];
}
