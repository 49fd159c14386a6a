// step_graph.h - the bookkeeping of the GPU model's CUDA graphs of one training micro-batch
// (model_cuda.c, on unless KDA_GRAPH=0; docs/cuda.md "One CUDA graph per micro-batch"): which batch
// keys ran eagerly once, which hold a graph, which failed to capture, and when to drop them all.
//
// Per key (B, T, n_valid: the batch shape and the 1/n_valid the loss rows take by value) the
// first call runs eagerly (the warm-up: scratch growth, GEMM plans, shared-memory attributes),
// the second captures and launches, later calls launch the graph; a capture that failed leaves
// its key eager for good. Everything else a captured launch bakes in (buffer pointers, switches)
// is summed up in a fingerprint: when it changes, every graph and every warm-up mark is dropped.
// At most KDA_STEP_GRAPH_SLOTS keys are held; a new key evicts the least recently used one.
//
// Plain C, no CUDA: the graphs are opaque pointers that the owner creates and destroys (through
// the destroy callback), so the CPU suite tests the state machine. One owner thread; nothing
// here fails.
#ifndef KDA_MODEL_STEP_GRAPH_H
#define KDA_MODEL_STEP_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#define KDA_STEP_GRAPH_SLOTS 4

typedef struct {
    int64_t B, T, n_valid;
} KdaStepGraphKey;

typedef enum {
    KDA_GRAPH_EAGER,   // run eagerly (off, or this key's capture failed)
    KDA_GRAPH_WARM,    // run eagerly: the key's first call (the warm-up)
    KDA_GRAPH_CAPTURE, // capture now, then report with kda_step_graph_captured
    KDA_GRAPH_REPLAY,  // launch slot->exec
} KdaGraphAction;

enum { KDA_SLOT_FREE, KDA_SLOT_WARM, KDA_SLOT_READY, KDA_SLOT_FAILED };

typedef struct {
    KdaStepGraphKey key;
    int state;     // KDA_SLOT_*
    void *exec;    // the owner's executable graph (KDA_SLOT_READY only; owned by the table)
    uint64_t used; // tick of the last plan that chose this slot (least recently used goes first)
} KdaStepGraphSlot;

typedef struct {
    int on;        // 0: every plan is KDA_GRAPH_EAGER and nothing is held
    int have_fp;   // fp is set
    uint64_t fp;   // the fingerprint the held slots belong to
    uint64_t tick; // plans so far
    KdaStepGraphSlot slot[KDA_STEP_GRAPH_SLOTS];
    void (*destroy)(void *user, void *exec); // frees one exec (borrowed function)
    void *user;
    int64_t captures, replays, failures, drops; // counters (tests, logs)
} KdaStepGraph;

// A table with nothing held; on: graphs wanted. destroy(user, exec) frees an exec the table
// drops (may be NULL when no exec is ever reported).
void kda_step_graph_init(KdaStepGraph *g, int on, void (*destroy)(void *user, void *exec),
                         void *user);
// Destroys every held exec and forgets every key (warm-up marks too). Accepts a zeroed table.
void kda_step_graph_clear(KdaStepGraph *g);

// What to do with a call of key under fingerprint fp: a new fp clears the table first; a new
// key takes a free slot or evicts the least recently used one (its exec destroyed) and is
// KDA_GRAPH_WARM; a warm key is KDA_GRAPH_CAPTURE; a ready one KDA_GRAPH_REPLAY (replays
// counted); a failed one KDA_GRAPH_EAGER. *slot: the key's slot (NULL when off).
KdaGraphAction kda_step_graph_plan(KdaStepGraph *g, KdaStepGraphKey key, uint64_t fp,
                                   KdaStepGraphSlot **slot);
// The outcome of a KDA_GRAPH_CAPTURE of slot s: exec (the table owns it from now) or NULL
// (the capture or its instantiation failed: the key stays eager).
void kda_step_graph_captured(KdaStepGraph *g, KdaStepGraphSlot *s, void *exec);
// A launch of s's exec failed: the exec is destroyed and the key stays eager (failures counted).
void kda_step_graph_failed(KdaStepGraph *g, KdaStepGraphSlot *s);

// Fingerprint helpers (64-bit FNV-1a): h mixed with n bytes at p, or with the string s (NULL
// and "" differ). Start from KDA_STEP_GRAPH_FP0.
#define KDA_STEP_GRAPH_FP0 0xcbf29ce484222325ull
uint64_t kda_step_graph_fp(uint64_t h, const void *p, size_t n);
uint64_t kda_step_graph_fp_str(uint64_t h, const char *s);

// The switch's reading: 0 when v is exactly "0" (KDA_GRAPH=0), else 1 (unset, "1", anything):
// graphs are the default since they measured faster (docs/perf-log.md, 2026-12-03 session 5).
int kda_step_graph_env_on(const char *v);

#endif
