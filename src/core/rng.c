// rng.c - xoshiro256** seeded through splitmix64, Box-Muller normals.
#include "core/rng.h"

#include <math.h>
#include <string.h>

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void rng_seed(KdaRng *r, uint64_t seed) {
    memset(r, 0, sizeof *r);
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

uint64_t rng_u64(KdaRng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double rng_uniform(KdaRng *r) {
    return (double)(rng_u64(r) >> 11) * 0x1.0p-53;
}

float rng_normal(KdaRng *r, float mean, float std) {
    if (r->has_spare) {
        r->has_spare = 0;
        return mean + std * (float)r->spare;
    }
    double u1, u2;
    do
        u1 = rng_uniform(r);
    while (u1 <= 0.0);
    u2 = rng_uniform(r);
    double rad = sqrt(-2.0 * log(u1)), th = 2.0 * M_PI * u2;
    r->spare = rad * sin(th);
    r->has_spare = 1;
    return mean + std * (float)(rad * cos(th));
}

uint64_t rng_below(KdaRng *r, uint64_t n) {
    if (n <= 1) return 0;
    uint64_t lim = (uint64_t)-1 - ((uint64_t)-1 % n), x;
    do
        x = rng_u64(r);
    while (x >= lim);
    return x % n;
}
