// run_plan.h - a run config's choices as types, resolved and checked in one place: what the
// trainer runs. KdaRunConfig keeps the user's strings (they are written back to run_config.yaml
// as given); the plan holds their meaning: enums for objective, data order, device, recompute
// and log style, the parsed data blends, the complete LR schedule, the micro-batch split and the
// row length T. kda_run_config_validate builds one (world 1) to check a config; the trainer
// builds its own for its world size and never compares a string or re-checks a field.
#ifndef KDA_RUN_PLAN_H
#define KDA_RUN_PLAN_H

#include <stdint.h>

#include "core/error.h"
#include "data/loader.h"      // defines: KdaObjective, KdaDataOrder
#include "train/run_config.h" // defines: KdaRunConfig, KdaStrList
#include "model/runtime.h"    // defines: KdaDeviceKind
#include "train/schedule.h"   // defines: KdaLrSchedule

typedef enum { KDA_LOG_MEGATRON = 0, KDA_LOG_PRIMUS = 1 } KdaLogStyle;

// One data path list: plain paths (weights NULL) or a Megatron blend "w1 p1 w2 p2" (weights
// normalized to sum 1). paths borrow the config's strings; the arrays are owned.
typedef struct {
    const char **paths;
    double *weights;
    int n; // 0: the list is empty
} KdaBlend;

typedef struct {
    KdaObjective objective; // objective: megatron | fla
    KdaDataOrder order;     // data_order: megatron | fla (fla needs objective fla)
    KdaDeviceKind device;   // device: cpu | cuda
    int recompute;          // recompute_granularity: full
    KdaLogStyle log_style;  // log_style: megatron | primus
    KdaLrSchedule sched;    // lr, min_lr, warmup, decay iters (0: train_iters), style; checked
    KdaBlend train;         // train_data_path (n >= 1)
    KdaBlend valid;         // valid_data_path (n == 0: the split's validation part of train)
    int64_t n_micro;        // micro-batches per rank per iteration: global / (micro x world)
    int64_t T;              // tokens per row: seq_length + 1 (objective megatron) or seq_length
} KdaRunPlan;

// Builds *plan from cfg for `world` data-parallel ranks. -1 with one line on: a string choice
// outside its values (objective, data_order, device, recompute_granularity, log_style,
// lr_decay_style), data_order fla without objective fla, global_batch_size not a multiple of
// micro_batch_size x world, a bad schedule, an empty train_data_path, a bad blend. NULL strings
// take the defaults (megatron, cpu, none, cosine). *plan is overwritten (zeroed on error);
// release with kda_run_plan_free. It borrows cfg's path strings: cfg must outlive it.
int kda_run_plan(const KdaRunConfig *cfg, int world, KdaRunPlan *plan, KdaError *err);
void kda_run_plan_free(KdaRunPlan *plan); // accepts a zeroed struct

#endif
