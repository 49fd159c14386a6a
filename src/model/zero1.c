// zero1.c - the ZeRO-1 shard plan (contract in zero1.h).
#include "model/zero1.h"

static int64_t gcd64_(int64_t a, int64_t b) {
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

int kda_zero1_plan(KdaShard *s, int64_t n, int world, int rank, int64_t align, KdaError *err) {
    if (world < 1 || rank < 0 || rank >= world)
        return kda_fail(err, "ZeRO-1: rank %d of world %d: expected 0 <= rank < world", rank,
                        world);
    if (align < 1 || n < 0)
        return kda_fail(err,
                        "ZeRO-1: %lld elements with alignment %lld: expected n >= 0, align >= 1",
                        (long long)n, (long long)align);
    int64_t g = gcd64_(align, world), unit = align / g * world; // lcm(align, world)
    if (unit <= 0 || n > INT64_MAX - unit)
        return kda_fail(err, "ZeRO-1: %lld elements overflow the padded layout", (long long)n);
    int64_t padded = (n + unit - 1) / unit * unit;
    if (padded == 0) padded = unit; // an empty layout still gives every rank a valid buffer
    *s =
        (KdaShard){.n = n, .padded = padded, .chunk = padded / world, .world = world, .rank = rank};
    s->lo = (int64_t)rank * s->chunk;
    s->hi = s->lo + s->chunk;
    return 0;
}

int kda_zero1_clip(const KdaShard *s, int64_t a, int64_t b, int64_t limit, int64_t *ca,
                   int64_t *cb) {
    int64_t lo = a > s->lo ? a : s->lo, hi = b < s->hi ? b : s->hi;
    if (hi > limit) hi = limit;
    if (hi <= lo) {
        *ca = *cb = lo;
        return 0;
    }
    *ca = lo;
    *cb = hi;
    return 1;
}

double kda_zero1_moment_bytes(const KdaShard *s, int sharded) {
    return 8.0 * (double)(sharded ? s->chunk : s->n);
}
