// trainer.h - the training loop: data -> micro-batches -> forward/backward on the model runtime
// (model/runtime.h: the CPU or the GPU, chosen by the run config's device) -> averaged gradients
// (summed over the ranks by dist/dp.h) -> clipping -> AdamW with the LR schedule; Megatron-style
// logs, metrics.jsonl, validation, atomic checkpoints, exact resume, signals, NaN handling.
//
// One update ("iteration") = global_batch_size / micro_batch_size micro-batches. Gradients are
// accumulated and scaled by 1 / n_micro, so the step's loss and gradient are the mean of the
// micro-batch means (training-recipe.md §1.4). Norm before clipping is logged as "grad norm".
// The update index u (1-based) counts applied updates only: a skipped iteration (NaN/inf loss
// or grad norm) advances the iteration and the data cursor but neither the optimizer step nor
// the schedule (Megatron's behaviour), and leaves parameters and moments untouched.
//
// Non-finite policy (docs/reliability.md): non-finite weights after an update always stop the
// run (returns -1, nothing saved). A non-finite loss or grad norm stops it too by default
// (max_nan_steps 0); max_nan_steps N > 0 opts into skipping such iterations and stops at N
// consecutive ones. Every stop's message names the iteration and the last good checkpoint.
//
// Resume: from rc->load (a checkpoint dir or a save dir with `latest`), or else from rc->save
// when it has a `latest`. On CPU the continued run is bit-identical to an uninterrupted one
// (same data cursor, parameters, moments, step; the math is deterministic for a fixed thread
// count). A different model config fails naming the key; a different data description only
// warns. No checkpoint is written for an iteration that was just loaded.
//
// Signals (after kda_train_install_signal_handlers): the first SIGINT/SIGTERM/SIGHUP lets the
// current iteration finish, then a checkpoint is saved (when rc->save is set) and kda_train returns
// 0 with result.interrupted = 1; a second signal exits the process at once (status 130).
//
// Data parallelism (o->dist, D ranks; Megatron's semantics): global_batch_size = micro_batch_size
// x n_micro x D, so each rank runs n_micro = global / (micro x D) micro-batches per iteration.
// Rank r reads, of the one global sample order, the micro-batches at cursor + k x D x micro +
// r x micro (k = 0 .. n_micro - 1): the union per iteration is the same samples a single process
// reads, whatever D, in either data_order. The loss sum, the stop request and the fp32 gradient
// are summed over the ranks before anything is decided, so the logged loss, the grad norm, the
// NaN skip and the clip factor are the same on every rank. Rank 0 alone resumes (then broadcasts
// parameters, moments and the trainer state), writes checkpoints (the single-process format:
// ZeRO-1 moments are gathered first) and logs; every rank leaves save() only after rank 0's
// checkpoint is complete. A signal to any rank stops all of them after the same iteration.
//
// Outputs: one Megatron log line (training-recipe.md §3.1 fields and order, then ours) to
// stdout at iteration 1 and every log_interval; a validation line every eval_interval (and at
// the end); SAVE/metrics.jsonl (one JSON object per log/eval; on resume lines past the resumed
// iteration are dropped); a progress bar on stderr when it is a TTY.
#ifndef KDA_TRAINER_H
#define KDA_TRAINER_H

#include <limits.h>
#include <stdint.h>

#include "core/error.h"
#include "core/prof.h"
#include "dist/dist.h" // defines: KdaDist
#include "model/model.h"
#include "model/optim.h"
#include "model/runtime.h" // defines: KdaRuntime
#include "train/run_config.h"

// ---- The loop ---------------------------------------------------------------------------------
typedef struct {
    int64_t iteration;
    float loss;       // mean of the micro-batch means (NaN when poisoned)
    double grad_norm; // before clipping (NaN when the loss was already non-finite)
    double lr;        // learning rate the update used (0 when skipped)
    int skipped;
} KdaStepInfo;

typedef struct {
    const KdaRunConfig *rc;  // validated (kda_run_config_validate)
    const char *init_from;   // HF model dir whose weights start a fresh run (NULL: own init)
    int progress;            // 1: progress bar when stderr is a TTY; 0: never
    int quiet;               // 1: no log lines on stdout (tests)
    int64_t stop_after;      // > 0: stop as on a signal after this iteration (tests)
    int no_verify_checksums; // 1: resume without comparing the checkpoint's checksums
    // Test hook: nonzero makes that micro-batch's loss NaN (the step is then skipped).
    int (*poison)(void *user, int64_t iteration, int micro);
    void (*on_step)(void *user, const KdaStepInfo *s); // after every iteration (may be NULL)
    void *user;
    // > 0: profile that iteration (kda train --profile N): the per-op table goes to stdout (and
    // into *profile_out when non-NULL), whatever quiet says.
    int64_t profile_iter;
    KdaProf *profile_out;
    // Data parallelism: the communicator of this rank (borrowed; NULL = one process). Every rank
    // runs kda_train with the same run config; see "Data parallelism" above.
    KdaDist *dist;
    int device; // CUDA device of this rank (device: cuda)
} KdaTrainOptions;

typedef struct {
    int64_t iteration;        // iterations completed
    int64_t consumed_samples; // train samples consumed
    int64_t start_iteration;  // iteration resumed from (0 for a fresh run)
    int64_t nan_iters, skipped_iters;
    int interrupted;           // stopped by a signal / stop_after
    double last_loss;          // loss of the last iteration
    double last_valid_loss;    // NaN when never evaluated
    double seconds;            // wall time of the loop
    double tokens_per_s;       // averaged over the loop (after the first iteration)
    char checkpoint[PATH_MAX]; // last checkpoint written ("" if none)
} KdaTrainResult;

// Runs (or resumes) the training described by o->rc. Returns 0 when train_iters is reached or
// a stop was requested (checkpoint written), -1 on error (bad data/config, write failure,
// max_nan_steps consecutive NaN iterations) with the message in err.
int kda_train(const KdaTrainOptions *o, KdaTrainResult *res, KdaError *err);

void kda_train_install_signal_handlers(void); // SIGINT, SIGTERM, SIGHUP (see above)
void kda_train_request_stop(void);            // what the first signal does
void kda_train_clear_stop(void);              // tests: reset the stop flag

#endif
