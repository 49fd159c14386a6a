// rng.h - deterministic random numbers: xoshiro256** (init, sampling, tests) and numpy's
// legacy MT19937 (Megatron-compatible shuffles, data-formats.md §2.2).
//
// State is a plain struct so it can be saved in checkpoints and restored bit for bit.
#ifndef KDA_RNG_H
#define KDA_RNG_H

#include <stdint.h>

typedef struct {
    uint64_t s[4];
    int has_spare; // Box-Muller keeps its second normal
    double spare;
} KdaRng;

void rng_seed(KdaRng *r, uint64_t seed);
uint64_t rng_u64(KdaRng *r);
double rng_uniform(KdaRng *r); // [0, 1), 53 bits
float rng_normal(KdaRng *r, float mean, float std);
uint64_t rng_below(KdaRng *r, uint64_t n); // uniform in [0, n), unbiased

#endif
