// dist.h - the communicator for data-parallel training: who am I (rank, world, local rank), the
// launch environment it was read from, and the collectives the trainer needs, on one of two
// engines:
//   Gloo (KDA_DIST_HOST): host fp32/fp64 buffers, TCP (gloo_shim.h); the CPU ranks of CI.
//   NCCL (KDA_DIST_NCCL): device buffers, enqueued on a CUDA stream; host-buffer calls are staged
//       through a small device scratch. NCCL_NVLS_ENABLE=0 is set before the communicator is
//       created unless the user set it (NVLink multicast stays off).
// Both form their world at the rendezvous (store.h): rank 0 serves MASTER_ADDR:MASTER_PORT, every
// rank joins within timeout_s or every rank fails with a message naming the missing ranks; the
// NCCL unique id travels through it.
//
// Launch conventions (kda_dist_env_read, first match wins):
//   torchrun: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT
//   mpirun (Open MPI): OMPI_COMM_WORLD_RANK/_SIZE/_LOCAL_RANK/_LOCAL_SIZE; MASTER_ADDR, or
//       127.0.0.1 when every rank is on this node (LOCAL_SIZE == SIZE), else an error
//   Slurm (srun): SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE (or
//       LOCAL_WORLD_SIZE); MASTER_ADDR or else the first host of SLURM_JOB_NODELIST /
//       SLURM_NODELIST
//   none of them: a single process (rank 0 of 1).
// MASTER_PORT defaults to 29500 (torchrun's default) when a convention does not set it.
// Rank 0 serves the rendezvous on MASTER_PORT, except: KDA_RDZV_PORT names another port; under
// torchrun's elastic agent (TORCHELASTIC_USE_AGENT_STORE=True: the agent's own TCP store holds
// MASTER_PORT) it serves MASTER_PORT + 1.
//
// Faults: every collective fails (returns -1, never hangs past timeout_s) when a peer died or a
// collective timed out; the message then names the ranks whose rendezvous connection closed
// without a goodbye (killed, crashed), or says that rank 0, the rendezvous host, is gone. After a
// failure the communicator can only be closed.
//
// Threads: one thread per communicator. Every collective is called by all ranks in the same
// order with the same sizes.
#ifndef KDA_DIST_DIST_H
#define KDA_DIST_DIST_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

typedef enum { KDA_DIST_F32 = 0, KDA_DIST_F64 = 1 } KdaDistType;
typedef enum { KDA_DIST_SUM = 0, KDA_DIST_MAX = 1 } KdaDistOp;
typedef enum { KDA_DIST_HOST = 0, KDA_DIST_NCCL = 1 } KdaDistKind;

typedef struct {
    int rank, world;             // global
    int local_rank, local_world; // on this node (local_rank picks the GPU)
    char master_addr[256];
    int master_port;
    int rdzv_port;              // where rank 0 serves kda's rendezvous (store.h): master_port,
                                // or KDA_RDZV_PORT, or master_port + 1 under torchrun's agent
                                // (0 in a hand-made env: master_port)
    const char *rdzv_port_from; // which of those (static string; named when the rendezvous
                                // cannot be served or reached; NULL in a hand-made env)
    const char *launcher;       // "torchrun", "mpirun", "slurm" or "none" (static string)
} KdaDistEnv;

typedef const char *(*KdaGetenv)(const char *name);

// Reads the launch environment (get: NULL = getenv). A partial or malformed set (RANK without
// WORLD_SIZE, RANK >= WORLD_SIZE, a bad port, a multi-node mpirun without MASTER_ADDR) fails
// with one line naming the variable.
int kda_dist_env_read(KdaDistEnv *e, KdaGetenv get, KdaError *err);
// First host of a Slurm node list: "gpu[07-09,12],cpu3" -> "gpu07"; "a,b" -> "a".
int kda_slurm_first_host(const char *nodelist, char *out, size_t cap, KdaError *err);

typedef struct KdaDist KdaDist;

// Joins the world of env (world >= 1) on engine kind. Sets SIGPIPE to be ignored in this
// process (a peer's death must surface as an error, not kill the rank). device: the CUDA device
// (NCCL). Fails with one clear line when this build has no engine of that kind (world > 1 is never
// run alone).
int kda_dist_open(KdaDist **out, const KdaDistEnv *env, KdaDistKind kind, int device,
                  double timeout_s, KdaError *err);
// Leaves the world: goodbye to the rendezvous (rank 0 waits briefly for the others), frees
// everything. Not collective. Accepts NULL.
void kda_dist_close(KdaDist *d);

// Records at the rendezvous that this rank starts `iteration` (not collective; one small TCP
// round trip to rank 0). After a collective timeout the message names the ranks that are behind.
int kda_dist_mark_progress(KdaDist *d, int64_t iteration, KdaError *err);

int kda_dist_rank(const KdaDist *d);
int kda_dist_world(const KdaDist *d);
const char *kda_dist_engine(const KdaDist *d); // "gloo" | "nccl"

// ---- Host-buffer collectives (both engines) ----
// In place: buf [n] of type t, reduced with op over all ranks; every rank gets the same bits.
int kda_dist_allreduce(KdaDist *d, void *buf, int64_t n, KdaDistType t, KdaDistOp op,
                       KdaError *err);
// out [world * n] fp32 = every rank's in [n] fp32 in rank order.
int kda_dist_allgather(KdaDist *d, const float *in, float *out, int64_t n, KdaError *err);
// buf [bytes] of rank root copied to every rank.
int kda_dist_broadcast(KdaDist *d, void *buf, size_t bytes, int root, KdaError *err);
int kda_dist_barrier(KdaDist *d, KdaError *err);

// ---- Device-buffer collectives (NCCL only), enqueued on `stream` (a cudaStream_t) ----
// In place sum of d_buf [n] fp32.
int kda_dist_dev_allreduce(KdaDist *d, float *d_buf, int64_t n, void *stream, KdaError *err);
// d_out [n] fp32 = sum over ranks of d_in [rank * n, (rank + 1) * n) fp32.
int kda_dist_dev_reduce_scatter(KdaDist *d, const float *d_in, float *d_out, int64_t n,
                                void *stream, KdaError *err);
// d_out [world * n] fp32 = every rank's d_in [n] fp32 in rank order.
int kda_dist_dev_allgather(KdaDist *d, const float *d_in, float *d_out, int64_t n, void *stream,
                           KdaError *err);
// NCCL: host-buffer collectives run on `stream` from now on (borrowed; NULL: the
// communicator's own). A backend that enqueues device collectives on its own stream passes it,
// so every NCCL call of this communicator is ordered on one stream. No effect with Gloo.
void kda_dist_set_stream(KdaDist *d, void *stream);
// Waits for `stream`, polling NCCL's asynchronous errors; on an error or after timeout_s aborts
// the communicator (ncclCommAbort) and fails naming the gone ranks.
int kda_dist_dev_wait(KdaDist *d, void *stream, KdaError *err);

#endif
