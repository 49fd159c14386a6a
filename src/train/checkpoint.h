// checkpoint.h - training checkpoints: atomic save, keep-last rotation, `latest` pointer, load
// and resume checks (engineering-notes.md §7).
//
// Layout of SAVE/iter_NNNNNNN/ (NNNNNNN = iteration, 7 digits as Megatron):
//   model.safetensors      fp32 weights, FLA names (kda-model.md §3); + config.json (FLA keys):
//                          the directory is also a valid HF model dir for kda_model_load_dir
//   optimizer.safetensors  fp32 "<param>.exp_avg" and "<param>.exp_avg_sq" for every row of
//                          the parameter table; __metadata__ "step" = updates applied
//   trainer_state.json     iteration, consumed samples (train, valid), skipped/nan counters,
//                          RNG state, data descriptions and fingerprints, format version, and
//                          checksums of the weights, the optimizer state and these numbers
//   run_config.yaml        the effective run config
// SAVE/latest holds "iter_NNNNNNN\n" and is replaced atomically after the directory is complete.
//
// Atomicity: files are written (each fsync'ed) into SAVE/.tmp-iter_NNNNNNN.PID, the temp directory
// is fsync'ed and renamed to iter_NNNNNNN, SAVE is fsync'ed, then `latest` is written. A crash
// (even SIGKILL) at any point leaves `latest` naming the previous complete checkpoint; the
// .tmp-iter_* directories of writers that are gone (pid not alive on this host) are removed by
// the next save, a live writer's never.
//
// One writer per save dir: kda_save_lock takes an advisory flock on SAVE/.lock (which holds
// "PID HOST") for the writer's lifetime (the trainer holds it for the whole run). On any error the
// temp directory is removed and -1 returned (no partial checkpoint is ever visible under an iter_
// name).
#ifndef KDA_CHECKPOINT_H
#define KDA_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/rng.h"
#include "model/config.h"
#include "model/params.h"
#include "model/optim.h"
#include "train/run_config.h"

typedef struct {
    int64_t iteration;       // iterations completed (skipped ones included)
    int64_t consumed_train;  // train samples consumed = the loader cursor
    int64_t consumed_valid;  // valid samples consumed by evaluations so far
    int64_t skipped_iters;   // total updates skipped (NaN/inf loss or grad norm)
    int64_t nan_iters;       // total iterations with a NaN/inf loss or grad norm
    int64_t consecutive_nan; // current run of consecutive NaN iterations
    KdaRng rng;              // trainer RNG (not used by the CPU math today; saved for resume)
    char train_desc[2048];   // kda_loader_describe of the train data ("" if none)
    uint64_t train_fingerprint;
    char valid_desc[2048];
    uint64_t valid_fingerprint;
} KdaTrainState;

typedef struct {
    int fd; // SAVE/.lock, flock'ed (-1: not held)
} KdaSaveLock;

// Creates save if needed and locks it (non-blocking). Fails when another process holds it:
// "SAVE is in use by another writer (pid P on HOST, ...)". The lock goes with the process
// (also on a crash); kda_save_unlock releases it early and accepts an unheld lock.
int kda_save_lock(KdaSaveLock *l, const char *save, KdaError *err);
void kda_save_unlock(KdaSaveLock *l);

// Writes SAVE/iter_NNNNNNN (see above) and updates SAVE/latest; then, when keep_last > 0,
// rotates (docs/reliability.md): of the iter_* dirs numbered <= this iteration the keep_last
// newest stay, older ones are deleted except the one `latest` names and resumed_from (the
// checkpoint dir the run resumed from, may be NULL; protected when it is inside SAVE); dirs
// numbered past this iteration (a rolled-back timeline) are never deleted by rotation. out_dir (may
// be NULL, cap PATH_MAX) receives the checkpoint path. rc may be NULL (no run_config.yaml).
int kda_checkpoint_save(const char *save, const KdaTrainState *st, const KdaConfig *cfg,
                        const KdaParamTable *t, const float *params, const KdaAdamW *opt,
                        const KdaRunConfig *rc, int64_t keep_last, const char *resumed_from,
                        char *out_dir, KdaError *err);

// Resolves path to a checkpoint directory: an iter_* directory (holds trainer_state.json) is
// taken as is; a save directory is followed through its `latest` file. Returns 0 with out
// filled, 1 when path is a directory without `latest` (nothing to resume), -1 on error
// (missing path, latest naming a missing directory).
int kda_checkpoint_resolve(const char *path, char *out, size_t cap, KdaError *err);

// Loads a checkpoint directory into caller buffers. cfg is the run's model config: a different
// model config fails with "model config differs from the checkpoint: <key> is X there, Y here".
// params [t->total_numel] fp32; opt must be initialized for t->total_numel elements (its
// moments and step are overwritten); st receives the trainer state. The state's counters are
// range-checked (error naming the field); with verify_checksums the weights, moments and state
// are compared with the checksums trainer_state.json recorded at save (checkpoints written
// before checksums existed have none and load unchecked).
int kda_checkpoint_load(const char *dir, const KdaConfig *cfg, const KdaParamTable *t,
                        float *params, KdaAdamW *opt, KdaTrainState *st, int verify_checksums,
                        KdaError *err);

// When dir is SAVE/iter_N, writes the newest SAVE/iter_M with M < N into out and returns 1 (the
// checkpoint to fall back to when dir is damaged), else returns 0.
int kda_checkpoint_older(const char *dir, char *out, size_t cap);

#endif
