// zero1.h - the shard plan of ZeRO-1 (use_distributed_optimizer: true): which elements of a flat
// [n] parameter/gradient layout each data-parallel rank owns, i.e. keeps AdamW moments for,
// updates, and contributes to the all-gather of the updated parameters.
//
// Megatron's distributed optimizer pads its flat buffer to a multiple of lcm(world, align) so
// that every rank gets an equal, aligned shard; so do we: padded = n rounded up to a multiple of
// lcm(world, align), chunk = padded / world, rank r owns [r * chunk, (r + 1) * chunk). The padding
// [n, padded) holds zero gradients and parameters and is never written to a checkpoint.
//   CPU ranks: align 1 (chunk = ceil(n / world), the host layout needs no alignment).
//   GPU ranks: align 128 elements over the device layout (model_cuda.h), as Megatron does (256-byte
//     aligned buckets for 16-bit buffers; 512 bytes here, fp32).
// Pure host arithmetic over the flat parameter layout (model floor: the runtimes shard their
// optimizer with it, the data-parallel layer plans with it), no communicator; the CPU suite
// tests it.
#ifndef KDA_MODEL_ZERO1_H
#define KDA_MODEL_ZERO1_H

#include <stdint.h>

#include "core/error.h" // defines: KdaError

typedef struct {
    int64_t n;      // elements of the unpadded layout
    int64_t padded; // world * chunk >= n: elements of the buffers the collectives work on
    int64_t chunk;  // elements per rank (padding included)
    int64_t lo, hi; // this rank's shard [lo, hi) = [rank * chunk, (rank + 1) * chunk)
    int world, rank;
} KdaShard;

// The plan of rank `rank` of `world` over n >= 0 elements with alignment align >= 1. -1 with a
// message for world < 1, rank outside [0, world), align < 1, n < 0 or an int64 overflow.
int kda_zero1_plan(KdaShard *s, int64_t n, int world, int rank, int64_t align, KdaError *err);

// The part of [a, b) inside the shard, clipped further to [0, limit) (limit: where the real data
// ends, n, so padding is skipped): *ca, *cb. Returns 1 when that part is non-empty, else 0
// (then *ca == *cb).
int kda_zero1_clip(const KdaShard *s, int64_t a, int64_t b, int64_t limit, int64_t *ca,
                   int64_t *cb);

// Bytes of AdamW moments (m and v, fp32) per rank: without ZeRO-1 (8 n) and with it (8 chunk).
double kda_zero1_moment_bytes(const KdaShard *s, int sharded);

#endif
