// mt19937.c - numpy legacy RandomState (MT19937 + interval draws + shuffle); see mt19937.h.
#include "data/mt19937.h" // defines: KdaMt19937, mt19937_*

#define MT_M        397
#define MT_UPPER    0x80000000u
#define MT_LOWER    0x7fffffffu
#define MT_MATRIX_A 0x9908b0dfu

void mt19937_seed(KdaMt19937 *r, uint32_t seed) {
    r->key[0] = seed;
    for (int i = 1; i < KDA_MT_N; i++) {
        uint32_t prev = r->key[i - 1];
        r->key[i] = 1812433253u * (prev ^ (prev >> 30)) + (uint32_t)i;
    }
    r->pos = KDA_MT_N;
}

// Regenerates all 624 words (the standard MT19937 twist).
static void mt_twist(KdaMt19937 *r) {
    uint32_t *k = r->key;
    for (int i = 0; i < KDA_MT_N; i++) {
        uint32_t y = (k[i] & MT_UPPER) | (k[(i + 1) % KDA_MT_N] & MT_LOWER);
        k[i] = k[(i + MT_M) % KDA_MT_N] ^ (y >> 1) ^ ((y & 1u) ? MT_MATRIX_A : 0u);
    }
    r->pos = 0;
}

uint32_t mt19937_next32(KdaMt19937 *r) {
    if (r->pos >= KDA_MT_N) mt_twist(r);
    uint32_t y = r->key[r->pos++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

uint64_t mt19937_next64(KdaMt19937 *r) {
    uint64_t hi = mt19937_next32(r); // drawn first: the high word
    uint64_t lo = mt19937_next32(r);
    return (hi << 32) | lo;
}

uint64_t mt19937_interval(KdaMt19937 *r, uint64_t max) {
    if (max == 0) return 0;
    uint64_t mask = max;
    mask |= mask >> 1;
    mask |= mask >> 2;
    mask |= mask >> 4;
    mask |= mask >> 8;
    mask |= mask >> 16;
    mask |= mask >> 32;
    uint64_t v;
    if (max <= 0xffffffffu) {
        do
            v = mt19937_next32(r) & mask;
        while (v > max);
    } else {
        do
            v = mt19937_next64(r) & mask;
        while (v > max);
    }
    return v;
}

void mt19937_shuffle_i32(KdaMt19937 *r, int32_t *x, int64_t n) {
    for (int64_t i = n - 1; i >= 1; i--) {
        int64_t j = (int64_t)mt19937_interval(r, (uint64_t)i);
        int32_t t = x[i];
        x[i] = x[j];
        x[j] = t;
    }
}

void mt19937_shuffle_i64(KdaMt19937 *r, int64_t *x, int64_t n) {
    for (int64_t i = n - 1; i >= 1; i--) {
        int64_t j = (int64_t)mt19937_interval(r, (uint64_t)i);
        int64_t t = x[i];
        x[i] = x[j];
        x[j] = t;
    }
}
