// store.h - the rendezvous: a small TCP key-value store served by rank 0 at
// MASTER_ADDR:MASTER_PORT. It carries only control data (Gloo's pair addresses, the NCCL unique
// id, the join list and per-rank liveness), never tensors: collectives go through the engines
// (Gloo, NCCL), see dist.h.
//
// Every rank (rank 0 too) holds one persistent connection to the server and says hello with its
// rank. The server remembers per rank: never joined, alive, left cleanly (sent goodbye), or died
// (its connection closed without a goodbye: killed, crashed). kda_store_status reads that list,
// which is how a failed collective names the rank that is gone.
//
// Wire format (both directions, little-endian): op byte, u32 key length, key, u32 value length,
// value. Ops: 'H' hello (value = rank), 'S' set, 'G' get (the reply waits until the key exists),
// 'P' peek (the value, or 'N' when absent), 'Q' status, 'B' goodbye; replies 'K' (done) and 'V'
// (value).
//
// Threads: the server runs on its own thread in rank 0's process; a KdaStore client is used by
// one thread at a time (the communicator's).
#ifndef KDA_DIST_STORE_H
#define KDA_DIST_STORE_H

#include <stddef.h>

#include "core/error.h"

typedef struct KdaStore KdaStore;

// Rank state letters of kda_store_status.
#define KDA_STORE_ABSENT '-' // never said hello
#define KDA_STORE_ALIVE  'a'
#define KDA_STORE_LEFT   'b' // said goodbye
#define KDA_STORE_DIED   'd' // connection lost without goodbye

// Connects rank `rank` of `world` to the store at host:port; rank 0 first starts the server there
// (bound to every interface at port). Retries the connection until timeout_s (the server may
// start later than the clients). On error returns -1 (nothing left open) with a message naming
// host:port.
int kda_store_open(KdaStore **out, const char *host, int port, int rank, int world,
                   double timeout_s, KdaError *err);
// Sends goodbye (best effort), closes the connection; rank 0 then waits up to linger_s for every
// other rank's goodbye or loss before stopping the server. Accepts NULL.
void kda_store_close(KdaStore *s, double linger_s);

int kda_store_set(KdaStore *s, const char *key, const void *val, size_t n, KdaError *err);
// Blocks until key exists (or timeout_s passes: -1, "timed out"). *val is malloc'ed (caller
// frees), *n its size.
int kda_store_get(KdaStore *s, const char *key, void **val, size_t *n, double timeout_s,
                  KdaError *err);
// The value of key if it exists now: returns 1 with *val malloc'ed, 0 when absent (*val NULL),
// -1 on a lost connection.
int kda_store_peek(KdaStore *s, const char *key, void **val, size_t *n, double timeout_s,
                   KdaError *err);
// Writes world rank-state letters (KDA_STORE_*) and a NUL into out (cap >= world + 1).
int kda_store_status(KdaStore *s, char *out, size_t cap, double timeout_s, KdaError *err);
// The local IPv4 address of the store connection (the interface that routes to the master):
// what this rank's peers reach it at. out: cap >= 64.
void kda_store_local_addr(const KdaStore *s, char *out, size_t cap);

#endif
