// gloo_shim.h - the CPU-rank collective engine: Gloo (Debian libgloo-dev, TCP transport) behind a
// C interface. Gloo is C++; gloo_shim.cc is the only C++ host file and exposes just these calls.
// Gloo's rendezvous runs over our store (store.h), so a world forms from torchrun/Slurm/mpirun
// environment variables without any launcher support.
//
// Every call is collective (all ranks, same order, same sizes), synchronous and on host memory;
// it returns -1 with the engine's message on a peer failure or after the context timeout. After
// an error the context is unusable (close it). One thread at a time.
#ifndef KDA_DIST_GLOO_SHIM_H
#define KDA_DIST_GLOO_SHIM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "core/error.h" // defines: KdaError
#include "dist/store.h" // defines: KdaStore

typedef struct KdaGloo KdaGloo;

// Connects the full mesh: this rank listens on local_addr (an IPv4 address its peers can reach)
// and exchanges pair addresses through store (keys "gloo/..."). timeout_s bounds the connection
// and every later collective.
int kda_gloo_open(KdaGloo **out, KdaStore *store, int rank, int world, const char *local_addr,
                  double timeout_s, KdaError *err);
void kda_gloo_close(KdaGloo *g); // accepts NULL

// In-place all-reduce of buf: n elements, dtype 0 = fp32, 1 = fp64; op 0 = sum, 1 = max.
// Every rank ends with the same bits (Gloo's ring: each chunk is reduced once and broadcast).
int kda_gloo_allreduce(KdaGloo *g, void *buf, size_t n, int dtype, int op, KdaError *err);
// out [world * bytes] receives every rank's in [bytes] in rank order.
int kda_gloo_allgather(KdaGloo *g, const void *in, void *out, size_t bytes, KdaError *err);
int kda_gloo_broadcast(KdaGloo *g, void *buf, size_t bytes, int root, KdaError *err);
int kda_gloo_barrier(KdaGloo *g, KdaError *err);

#ifdef __cplusplus
}
#endif

#endif
