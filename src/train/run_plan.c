// run_plan.c - a run config's choices as types, checked once (contract in run_plan.h).
#include "train/run_plan.h"

#include <stdlib.h>
#include <string.h>

// s (NULL: def) as the index of one of n names; -1 with "key: expected A or B, got "s"".
static int choice_(const char *key, const char *s, const char *def, const char *const *names, int n,
                   int *out, KdaError *err) {
    const char *v = s ? s : def;
    for (int k = 0; k < n; k++)
        if (!strcmp(v, names[k])) return *out = k, 0;
    return kda_fail(err, "%s: expected %s or %s, got \"%s\"", key, names[0], names[1], v);
}

static int choices_(const KdaRunConfig *c, KdaRunPlan *p, KdaError *err) {
    static const char *const mf[] = {"megatron", "fla"}, *const dev[] = {"cpu", "cuda"},
                             *const rec[] = {"none", "full"}, *const log[] = {"megatron", "primus"};
    int obj = 0, ord = 0, d = 0, r = 0, l = 0; // set by choice_ on success (zeroed for gcc 13)
    if (choice_("objective", c->objective, "megatron", mf, 2, &obj, err) ||
        choice_("data_order", c->data_order, "megatron", mf, 2, &ord, err) ||
        choice_("device", c->device, "cpu", dev, 2, &d, err) ||
        choice_("recompute_granularity", c->recompute_granularity, "none", rec, 2, &r, err) ||
        choice_("log_style", c->log_style, "megatron", log, 2, &l, err))
        return -1;
    p->objective = obj ? KDA_OBJ_FLA : KDA_OBJ_MEGATRON;
    p->order = ord ? KDA_ORDER_FLA : KDA_ORDER_MEGATRON;
    p->device = d ? KDA_DEVICE_CUDA : KDA_DEVICE_CPU;
    p->recompute = r;
    p->log_style = l ? KDA_LOG_PRIMUS : KDA_LOG_MEGATRON;
    if (p->order == KDA_ORDER_FLA && p->objective != KDA_OBJ_FLA)
        return kda_fail(err, "data_order: fla needs objective: fla (seq_length-token chunks, "
                             "seq_length - 1 targets)");
    return 0;
}

static int batch_(const KdaRunConfig *c, int world, KdaRunPlan *p, KdaError *err) {
    if (c->micro_batch_size < 1 || c->global_batch_size % c->micro_batch_size)
        return kda_fail(err, "global_batch_size %lld must be a multiple of micro_batch_size %lld",
                        (long long)c->global_batch_size, (long long)c->micro_batch_size);
    if (c->global_batch_size % (c->micro_batch_size * world))
        return kda_fail(err,
                        "global_batch_size %lld must be a multiple of micro_batch_size x "
                        "data-parallel ranks = %lld x %d",
                        (long long)c->global_batch_size, (long long)c->micro_batch_size, world);
    p->n_micro = c->global_batch_size / (c->micro_batch_size * world);
    p->T = p->objective == KDA_OBJ_FLA ? c->seq_length : c->seq_length + 1;
    return 0;
}

static int blend_(const KdaStrList *list, KdaBlend *b, KdaError *err) {
    return kda_run_config_blend(list, &b->paths, &b->weights, &b->n, err);
}

int kda_run_plan(const KdaRunConfig *c, int world, KdaRunPlan *p, KdaError *err) {
    memset(p, 0, sizeof *p);
    if (world < 1) return kda_fail(err, "data-parallel world size %d: expected >= 1", world);
    if (choices_(c, p, err) || batch_(c, world, p, err)) goto fail;
    p->sched =
        (KdaLrSchedule){c->lr, c->min_lr, c->lr_warmup_iters,
                        c->lr_decay_iters ? c->lr_decay_iters : c->train_iters, KDA_LR_COSINE};
    if (kda_lr_style_parse(c->lr_decay_style ? c->lr_decay_style : "cosine", &p->sched.style,
                           err) ||
        kda_lr_schedule_check(&p->sched, err))
        goto fail;
    if (c->train_data_path.n == 0) {
        kda_fail(err, "train_data_path is not set");
        goto fail;
    }
    if (blend_(&c->train_data_path, &p->train, err) || blend_(&c->valid_data_path, &p->valid, err))
        goto fail;
    return 0;
fail:
    kda_run_plan_free(p);
    return -1;
}

void kda_run_plan_free(KdaRunPlan *p) {
    free(p->train.paths), free(p->train.weights);
    free(p->valid.paths), free(p->valid.weights);
    memset(p, 0, sizeof *p);
}
