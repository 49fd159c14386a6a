// prof.h - the per-op profile of one training step (`kda train --profile N`): an accumulator of
// (calls, ms, FLOPs, bytes, floor) per op kind, summed over layers, and the printed table whose
// rows plus "unaccounted" add up to the step's wall-clock time.
//
// Who fills it: the CPU model (model/model.c) and backend time each op with the host clock
// (kda_prof_begin / kda_prof_end: the ops run one after another, so the timed intervals are
// disjoint and their sum never exceeds the wall time); the GPU model (model/model_cuda.c) records
// CUDA events around each op and adds the elapsed times with kda_prof_add after the step.
// The step's wall time is kda_prof_mark_start .. kda_prof_mark_end (host clock; a GPU backend
// marks after synchronizing). unaccounted = wall - Σ rows: host work outside any op, launch gaps
// between GPU ops, and anything not instrumented.
//
// Floors (optional): flop_rate / byte_rate > 0 give each call the floor max(flops / flop_rate,
// bytes / byte_rate) (METHOD.md: the larger of the two is the fewest time the op can take);
// the table then shows floor ms and measured / floor. The byte counts are estimates of the
// fewest bytes each op must move (each input read once, each output written once), stated per
// op where it is instrumented.
//
// Not thread-safe; a NULL KdaProf * is accepted everywhere and does nothing.
#ifndef KDA_PROF_H
#define KDA_PROF_H

#include <stdint.h>
#include <stdio.h>

typedef enum {
    KDA_OP_EMBED_FWD,
    KDA_OP_EMBED_BWD,
    KDA_OP_NORM_FWD, // attn_norm, mlp_norm, final norm (RMSNorm)
    KDA_OP_NORM_BWD,
    KDA_OP_PROJ_FWD, // KDA sublayer input GEMMs: q, k, v, f_proj.0/1, b_proj, g_proj.0/1
    KDA_OP_PROJ_BWD, // their dX and dW GEMMs
    KDA_OP_CONV_FWD, // short conv + SiLU of q, k, v
    KDA_OP_CONV_BWD,
    KDA_OP_L2NORM_FWD, // q, k L2 norm
    KDA_OP_L2NORM_BWD,
    KDA_OP_GATE_FWD, // gate (+ chunk cumsum on the GPU) and beta
    KDA_OP_GATE_BWD,
    KDA_OP_CORE_FWD, // the KDA core
    KDA_OP_CORE_BWD,
    KDA_OP_ONORM_FWD, // g_proj.1 bias + gated output norm
    KDA_OP_ONORM_BWD,
    KDA_OP_OPROJ_FWD, // o_proj (+ residual)
    KDA_OP_OPROJ_BWD,
    KDA_OP_MLP_FWD, // gate_proj, up_proj, down_proj (+ residual)
    KDA_OP_MLP_BWD,
    KDA_OP_SWIGLU_FWD,
    KDA_OP_SWIGLU_BWD,
    KDA_OP_HEAD_FWD, // LM head + cross-entropy: logits and loss (fused classifier on the GPU:
                     // its logits GEMMs and the loss sum; the row kernels are HEAD_ROW)
    KDA_OP_HEAD_ROW, // the fused classifier's row kernels: lse, nll, dlogits in place (GPU)
    KDA_OP_HEAD_BWD, // dX and dW of the head (legacy: with the logits recompute)
    KDA_OP_CAST,     // fp32 -> bf16 copies of the residual gradient (GPU)
    KDA_OP_ZERO_GRADS,
    KDA_OP_GRAD_NORM, // grad scale, norm and clip coefficient
    KDA_OP_ADAMW,
    KDA_OP_SYNC, // host <-> device: ids upload, loss and grad-norm reads (each waits for the GPU)
    KDA_OP_COUNT
} KdaOp;

typedef struct {
    int64_t calls;
    double ms, flops, bytes, floor_ms;
} KdaProfRow;

typedef struct {
    KdaProfRow row[KDA_OP_COUNT];
    double flop_rate, byte_rate; // FLOP/s and B/s of the floors (0: no floor column)
    double t_start, t_end;       // host seconds of the step's start and end marks
    double t_open;               // kda_prof_begin's start time
    int open;                    // op of the running kda_prof_begin + 1 (0: none)
} KdaProf;

// Clears every row and the marks; sets the floor rates (0 = none).
void kda_prof_reset(KdaProf *p, double flop_rate, double byte_rate);
const char *kda_prof_op_name(KdaOp op);

// One call of op that took ms (any clock) and had this work (0 when unknown).
void kda_prof_add(KdaProf *p, KdaOp op, double ms, double flops, double bytes);
// Host-clock timing of one call: begin .. end (no nesting: a begin while one is open restarts it).
void kda_prof_begin(KdaProf *p, KdaOp op);
void kda_prof_end(KdaProf *p, KdaOp op, double flops, double bytes);

// The step's wall-clock interval (host clock, now).
void kda_prof_mark_start(KdaProf *p);
void kda_prof_mark_end(KdaProf *p);
double kda_prof_wall_ms(const KdaProf *p);
double kda_prof_sum_ms(const KdaProf *p); // Σ row ms

// The table: one line per op with calls > 0 (op, calls, ms, % of the step, achieved TFLOP/s
// or GB/s, floor ms and measured / floor when rates are set), then "unaccounted" (wall - Σ) and
// "step (wall)". title goes on the first line. Returns 0, -1 on a write error.
int kda_prof_print(const KdaProf *p, const char *title, FILE *f);

#endif
