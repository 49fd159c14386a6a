// prof.c - the per-op step profile: accumulator and table (contract in prof.h).
#include "core/prof.h"

#include <string.h>

#include "core/util.h" // defines: now_seconds

static const char *const OP_NAMES[KDA_OP_COUNT] = {
    [KDA_OP_EMBED_FWD] = "embedding fwd",      [KDA_OP_EMBED_BWD] = "embedding bwd",
    [KDA_OP_NORM_FWD] = "RMSNorm fwd",         [KDA_OP_NORM_BWD] = "RMSNorm bwd",
    [KDA_OP_PROJ_FWD] = "in-proj GEMMs fwd",   [KDA_OP_PROJ_BWD] = "in-proj GEMMs bwd",
    [KDA_OP_CONV_FWD] = "conv+SiLU fwd",       [KDA_OP_CONV_BWD] = "conv+SiLU bwd",
    [KDA_OP_L2NORM_FWD] = "q/k L2 norm fwd",   [KDA_OP_L2NORM_BWD] = "q/k L2 norm bwd",
    [KDA_OP_GATE_FWD] = "gate+beta fwd",       [KDA_OP_GATE_BWD] = "gate+beta bwd",
    [KDA_OP_CORE_FWD] = "KDA core fwd",        [KDA_OP_CORE_BWD] = "KDA core bwd",
    [KDA_OP_ONORM_FWD] = "gated out-norm fwd", [KDA_OP_ONORM_BWD] = "gated out-norm bwd",
    [KDA_OP_OPROJ_FWD] = "o_proj fwd",         [KDA_OP_OPROJ_BWD] = "o_proj bwd",
    [KDA_OP_MLP_FWD] = "MLP GEMMs fwd",        [KDA_OP_MLP_BWD] = "MLP GEMMs bwd",
    [KDA_OP_SWIGLU_FWD] = "SwiGLU fwd",        [KDA_OP_SWIGLU_BWD] = "SwiGLU bwd",
    [KDA_OP_HEAD_FWD] = "LM head+CE fwd",      [KDA_OP_HEAD_BWD] = "LM head+CE bwd",
    [KDA_OP_CAST] = "dh fp32->bf16",           [KDA_OP_ZERO_GRADS] = "zero grads",
    [KDA_OP_GRAD_NORM] = "grad norm+clip",     [KDA_OP_ADAMW] = "AdamW",
    [KDA_OP_SYNC] = "host syncs+copies",
    [KDA_OP_HEAD_ROW] = "LM head CE rows", // the fused classifier's row kernels (GPU)
};

void kda_prof_reset(KdaProf *p, double flop_rate, double byte_rate) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->flop_rate = flop_rate;
    p->byte_rate = byte_rate;
}

const char *kda_prof_op_name(KdaOp op) {
    return op >= 0 && op < KDA_OP_COUNT ? OP_NAMES[op] : "?";
}

void kda_prof_add(KdaProf *p, KdaOp op, double ms, double flops, double bytes) {
    if (!p || op < 0 || op >= KDA_OP_COUNT) return;
    KdaProfRow *r = &p->row[op];
    r->calls++;
    r->ms += ms;
    r->flops += flops;
    r->bytes += bytes;
    double tf = p->flop_rate > 0 ? flops / p->flop_rate : 0.0;
    double tb = p->byte_rate > 0 ? bytes / p->byte_rate : 0.0;
    r->floor_ms += 1e3 * (tf > tb ? tf : tb);
}

void kda_prof_begin(KdaProf *p, KdaOp op) {
    if (!p) return;
    p->open = (int)op + 1;
    p->t_open = now_seconds();
}

void kda_prof_end(KdaProf *p, KdaOp op, double flops, double bytes) {
    if (!p || p->open != (int)op + 1) return;
    p->open = 0;
    kda_prof_add(p, op, 1e3 * (now_seconds() - p->t_open), flops, bytes);
}

void kda_prof_mark_start(KdaProf *p) {
    if (p) p->t_start = now_seconds();
}
void kda_prof_mark_end(KdaProf *p) {
    if (p) p->t_end = now_seconds();
}
double kda_prof_wall_ms(const KdaProf *p) {
    return p ? 1e3 * (p->t_end - p->t_start) : 0.0;
}

double kda_prof_sum_ms(const KdaProf *p) {
    double s = 0.0;
    for (int i = 0; p && i < KDA_OP_COUNT; i++)
        s += p->row[i].ms;
    return s;
}

// Achieved rate of a row: TFLOP/s when it has FLOPs, else GB/s ("" when neither).
static void rate_(char *buf, size_t cap, const KdaProfRow *r) {
    double s = r->ms / 1e3;
    if (s <= 0)
        snprintf(buf, cap, "-");
    else if (r->flops > 0)
        snprintf(buf, cap, "%.1f TFLOP/s", r->flops / s / 1e12);
    else if (r->bytes > 0)
        snprintf(buf, cap, "%.0f GB/s", r->bytes / s / 1e9);
    else
        snprintf(buf, cap, "-");
}

int kda_prof_print(const KdaProf *p, const char *title, FILE *f) {
    double wall = kda_prof_wall_ms(p), sum = kda_prof_sum_ms(p), floor_sum = 0.0;
    double pct = wall > 0 ? 100.0 / wall : 0.0;
    int floors = p->flop_rate > 0 || p->byte_rate > 0;
    fprintf(f, "%s\n", title ? title : "profile");
    fprintf(f, "| op | calls | ms | %% of step | achieved |%s\n",
            floors ? " floor ms | x floor |" : "");
    fprintf(f, "|---|---:|---:|---:|---:|%s\n", floors ? "---:|---:|" : "");
    for (int i = 0; i < KDA_OP_COUNT; i++) {
        const KdaProfRow *r = &p->row[i];
        if (r->calls == 0) continue;
        char rate[48];
        rate_(rate, sizeof rate, r);
        fprintf(f, "| %s | %lld | %.3f | %.1f | %s |", OP_NAMES[i], (long long)r->calls, r->ms,
                r->ms * pct, rate);
        if (floors) {
            floor_sum += r->floor_ms;
            if (r->floor_ms > 0)
                fprintf(f, " %.3f | %.2f |", r->floor_ms, r->ms / r->floor_ms);
            else
                fprintf(f, " - | - |");
        }
        fputc('\n', f);
    }
    fprintf(f, "| unaccounted (wall - sum) | | %.3f | %.1f | |%s\n", wall - sum, (wall - sum) * pct,
            floors ? " | |" : "");
    fprintf(f, "| **step (wall)** | | **%.3f** | 100.0 | |", wall);
    if (floors) fprintf(f, " %.3f | %.2f |", floor_sum, floor_sum > 0 ? wall / floor_sum : 0.0);
    fputc('\n', f);
    fflush(f);
    return ferror(f) ? -1 : 0;
}
