// step_graph.c - the key / slot state machine of the GPU model's per-micro-batch CUDA graphs
// (contract in step_graph.h). Host only, no CUDA.
#include "model/step_graph.h"

#include <string.h>

void kda_step_graph_init(KdaStepGraph *g, int on, void (*destroy)(void *user, void *exec),
                         void *user) {
    memset(g, 0, sizeof *g);
    g->on = on != 0;
    g->destroy = destroy;
    g->user = user;
}

// Frees s's exec (if any) and marks it free.
static void slot_drop_(KdaStepGraph *g, KdaStepGraphSlot *s) {
    if (s->exec && g->destroy) g->destroy(g->user, s->exec);
    memset(s, 0, sizeof *s);
}

void kda_step_graph_clear(KdaStepGraph *g) {
    for (int i = 0; i < KDA_STEP_GRAPH_SLOTS; i++) {
        if (g->slot[i].state != KDA_SLOT_FREE) g->drops++;
        slot_drop_(g, &g->slot[i]);
    }
}

static int key_eq_(KdaStepGraphKey a, KdaStepGraphKey b) {
    return a.B == b.B && a.T == b.T && a.n_valid == b.n_valid;
}

// The slot of key, or a free one, or the least recently used one (dropped) for it.
static KdaStepGraphSlot *slot_for_(KdaStepGraph *g, KdaStepGraphKey key, int *fresh) {
    KdaStepGraphSlot *victim = NULL;
    *fresh = 0;
    for (int i = 0; i < KDA_STEP_GRAPH_SLOTS; i++) {
        KdaStepGraphSlot *s = &g->slot[i];
        if (s->state != KDA_SLOT_FREE && key_eq_(s->key, key)) return s;
    }
    for (int i = 0; i < KDA_STEP_GRAPH_SLOTS && !victim; i++)
        if (g->slot[i].state == KDA_SLOT_FREE) victim = &g->slot[i];
    if (!victim) { // full: the least recently used
        victim = &g->slot[0];
        for (int i = 1; i < KDA_STEP_GRAPH_SLOTS; i++)
            if (g->slot[i].used < victim->used) victim = &g->slot[i];
    }
    if (victim->state != KDA_SLOT_FREE) g->drops++;
    slot_drop_(g, victim);
    victim->key = key;
    *fresh = 1;
    return victim;
}

KdaGraphAction kda_step_graph_plan(KdaStepGraph *g, KdaStepGraphKey key, uint64_t fp,
                                   KdaStepGraphSlot **slot) {
    *slot = NULL;
    if (!g->on) return KDA_GRAPH_EAGER;
    if (!g->have_fp || g->fp != fp) { // a buffer or a switch the graphs bake in changed
        kda_step_graph_clear(g);
        g->fp = fp;
        g->have_fp = 1;
    }
    int fresh = 0;
    KdaStepGraphSlot *s = slot_for_(g, key, &fresh);
    s->used = ++g->tick;
    *slot = s;
    if (fresh) {
        s->state = KDA_SLOT_WARM;
        return KDA_GRAPH_WARM;
    }
    switch (s->state) {
    case KDA_SLOT_WARM:
        return KDA_GRAPH_CAPTURE;
    case KDA_SLOT_READY:
        g->replays++;
        return KDA_GRAPH_REPLAY;
    default:
        return KDA_GRAPH_EAGER;
    }
}

void kda_step_graph_captured(KdaStepGraph *g, KdaStepGraphSlot *s, void *exec) {
    if (exec) {
        s->exec = exec;
        s->state = KDA_SLOT_READY;
        g->captures++;
        return;
    }
    s->state = KDA_SLOT_FAILED;
    g->failures++;
}

void kda_step_graph_failed(KdaStepGraph *g, KdaStepGraphSlot *s) {
    KdaStepGraphKey key = s->key;
    uint64_t used = s->used;
    slot_drop_(g, s);
    s->key = key, s->used = used;
    s->state = KDA_SLOT_FAILED;
    g->failures++;
}

uint64_t kda_step_graph_fp(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

uint64_t kda_step_graph_fp_str(uint64_t h, const char *s) {
    unsigned char tag = s ? 1 : 0; // unset and empty are different settings
    h = kda_step_graph_fp(h, &tag, 1);
    return s ? kda_step_graph_fp(h, s, strlen(s) + 1) : h;
}

int kda_step_graph_env_on(const char *v) {
    return !(v && !strcmp(v, "0"));
}
