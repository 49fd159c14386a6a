// test_step_graph.c - the per-micro-batch CUDA graph bookkeeping (model/step_graph.h; host
// only): off means eager and nothing held; per key warm-up, capture, replay; a failed capture
// or launch keeps its key eager; a new fingerprint drops every graph and warm-up mark; a fifth
// key evicts the least recently used one; every exec the table took is destroyed exactly once.
#include <stdint.h>
#include <string.h>

#include "model/step_graph.h"
#include "test.h"

typedef struct {
    int destroyed[16]; // per fake exec id: how many times destroy saw it
} Sink;

static void destroy_(void *user, void *exec) {
    Sink *s = user;
    s->destroyed[(intptr_t)exec]++;
}

// Runs one call of key the way model_cuda.c does: plan, and on CAPTURE report exec (id, or
// NULL when id is 0). Returns the action.
static KdaGraphAction call_(KdaStepGraph *g, int64_t T, int64_t nv, uint64_t fp, intptr_t id) {
    KdaStepGraphKey k = {2, T, nv};
    KdaStepGraphSlot *s = NULL;
    KdaGraphAction a = kda_step_graph_plan(g, k, fp, &s);
    if (a == KDA_GRAPH_CAPTURE) kda_step_graph_captured(g, s, id ? (void *)id : NULL);
    return a;
}

KDA_TEST(step_graph_off_is_eager) {
    KdaStepGraph g;
    Sink sk = {{0}};
    kda_step_graph_init(&g, kda_step_graph_env_on("0"), destroy_, &sk);
    for (int i = 0; i < 4; i++)
        CHECK(call_(&g, 64, 126, 1, 1) == KDA_GRAPH_EAGER);
    CHECK(g.captures == 0 && g.replays == 0);
    // on by default: only "0" turns graphs off
    CHECK(!kda_step_graph_env_on("0") && kda_step_graph_env_on(NULL) && kda_step_graph_env_on("") &&
          kda_step_graph_env_on("1") && kda_step_graph_env_on("yes"));
}

KDA_TEST(step_graph_warm_capture_replay) {
    KdaStepGraph g;
    Sink sk = {{0}};
    kda_step_graph_init(&g, 1, destroy_, &sk);
    CHECK(call_(&g, 64, 126, 7, 1) == KDA_GRAPH_WARM);
    CHECK(call_(&g, 64, 126, 7, 1) == KDA_GRAPH_CAPTURE);
    CHECK(call_(&g, 64, 126, 7, 1) == KDA_GRAPH_REPLAY);
    CHECK(call_(&g, 64, 126, 7, 1) == KDA_GRAPH_REPLAY);
    // another T, then another n_valid: new keys, each warmed before its capture
    CHECK(call_(&g, 32, 62, 7, 2) == KDA_GRAPH_WARM);
    CHECK(call_(&g, 32, 62, 7, 2) == KDA_GRAPH_CAPTURE);
    CHECK(call_(&g, 32, 50, 7, 3) == KDA_GRAPH_WARM);
    CHECK(call_(&g, 32, 50, 7, 3) == KDA_GRAPH_CAPTURE);
    CHECK(call_(&g, 64, 126, 7, 1) == KDA_GRAPH_REPLAY); // the first graph is still held
    CHECK(call_(&g, 32, 62, 7, 2) == KDA_GRAPH_REPLAY);
    CHECK_EQ_INT(g.captures, 3);
    CHECK_EQ_INT(g.replays, 4);
    CHECK_EQ_INT(sk.destroyed[1] + sk.destroyed[2] + sk.destroyed[3], 0);
    kda_step_graph_clear(&g);
    CHECK(sk.destroyed[1] == 1 && sk.destroyed[2] == 1 && sk.destroyed[3] == 1);
    kda_step_graph_clear(&g); // nothing left to destroy twice
    CHECK(sk.destroyed[1] == 1 && sk.destroyed[2] == 1 && sk.destroyed[3] == 1);
}

KDA_TEST(step_graph_failed_capture_stays_eager) {
    KdaStepGraph g;
    Sink sk = {{0}};
    kda_step_graph_init(&g, 1, destroy_, &sk);
    CHECK(call_(&g, 64, 126, 7, 0) == KDA_GRAPH_WARM);
    CHECK(call_(&g, 64, 126, 7, 0) == KDA_GRAPH_CAPTURE); // reports NULL: failed
    for (int i = 0; i < 3; i++)
        CHECK(call_(&g, 64, 126, 7, 0) == KDA_GRAPH_EAGER); // no second attempt
    CHECK_EQ_INT(g.failures, 1);
    CHECK_EQ_INT(g.captures, 0);
    // a failed launch: the exec is destroyed once and the key is eager from then on
    CHECK(call_(&g, 32, 62, 7, 4) == KDA_GRAPH_WARM);
    CHECK(call_(&g, 32, 62, 7, 4) == KDA_GRAPH_CAPTURE);
    KdaStepGraphKey k = {2, 32, 62};
    KdaStepGraphSlot *s = NULL;
    CHECK(kda_step_graph_plan(&g, k, 7, &s) == KDA_GRAPH_REPLAY);
    kda_step_graph_failed(&g, s);
    CHECK_EQ_INT(sk.destroyed[4], 1);
    CHECK(call_(&g, 32, 62, 7, 4) == KDA_GRAPH_EAGER);
    CHECK_EQ_INT(g.failures, 2);
    // a new fingerprint (e.g. the arena moved) gives the failed key another chance
    CHECK(call_(&g, 64, 126, 8, 5) == KDA_GRAPH_WARM);
    CHECK(call_(&g, 64, 126, 8, 5) == KDA_GRAPH_CAPTURE);
    kda_step_graph_clear(&g);
    CHECK_EQ_INT(sk.destroyed[4], 1);
    CHECK_EQ_INT(sk.destroyed[5], 1);
}

KDA_TEST(step_graph_fingerprint_drops_all) {
    KdaStepGraph g;
    Sink sk = {{0}};
    kda_step_graph_init(&g, 1, destroy_, &sk);
    call_(&g, 64, 126, 7, 1), call_(&g, 64, 126, 7, 1);
    call_(&g, 32, 62, 7, 2);                           // warm only
    CHECK(call_(&g, 64, 126, 9, 3) == KDA_GRAPH_WARM); // fp changed: warm again
    CHECK_EQ_INT(sk.destroyed[1], 1);
    CHECK(call_(&g, 32, 62, 9, 2) == KDA_GRAPH_WARM); // its warm-up mark is gone too
    CHECK(call_(&g, 64, 126, 9, 3) == KDA_GRAPH_CAPTURE);
    CHECK(call_(&g, 64, 126, 9, 3) == KDA_GRAPH_REPLAY);
    kda_step_graph_clear(&g);
    CHECK_EQ_INT(sk.destroyed[3], 1);
    // fingerprint helpers: order, bytes and unset vs empty strings matter
    uint64_t a = 1, b = 2, h0 = KDA_STEP_GRAPH_FP0;
    uint64_t ab = kda_step_graph_fp(kda_step_graph_fp(h0, &a, 8), &b, 8);
    uint64_t ba = kda_step_graph_fp(kda_step_graph_fp(h0, &b, 8), &a, 8);
    CHECK(ab != ba);
    CHECK(kda_step_graph_fp_str(h0, NULL) != kda_step_graph_fp_str(h0, ""));
    CHECK(kda_step_graph_fp_str(h0, "0") != kda_step_graph_fp_str(h0, "1"));
    CHECK(kda_step_graph_fp_str(h0, "1") == kda_step_graph_fp_str(h0, "1"));
}

KDA_TEST(step_graph_evicts_least_recently_used) {
    KdaStepGraph g;
    Sink sk = {{0}};
    kda_step_graph_init(&g, 1, destroy_, &sk);
    for (intptr_t k = 1; k <= KDA_STEP_GRAPH_SLOTS; k++) { // keys T = 10 .. 40, graphs 1 .. 4
        call_(&g, 10 * k, 1, 7, k);
        call_(&g, 10 * k, 1, 7, k);
    }
    CHECK(call_(&g, 10, 1, 7, 1) == KDA_GRAPH_REPLAY); // key 1 used last: key 2 is the oldest
    CHECK(call_(&g, 50, 1, 7, 5) == KDA_GRAPH_WARM);
    CHECK_EQ_INT(sk.destroyed[2], 1);
    CHECK(sk.destroyed[1] == 0 && sk.destroyed[3] == 0 && sk.destroyed[4] == 0);
    CHECK(call_(&g, 10, 1, 7, 1) == KDA_GRAPH_REPLAY);
    CHECK(call_(&g, 20, 1, 7, 2) == KDA_GRAPH_WARM); // evicted: warmed again (evicts key 3)
    CHECK_EQ_INT(sk.destroyed[3], 1);
    kda_step_graph_clear(&g);
    for (int k = 1; k <= 5; k++)
        CHECK_MSG(sk.destroyed[k] == (k == 5 ? 0 : 1), "exec %d destroyed %d times", k,
                  sk.destroyed[k]); // 5 was only warmed; 1, 4 at the clear; 2, 3 evicted
}
