// test_zero1.c - the ZeRO-1 shard plan (model/zero1.h; host arithmetic, no communicator): bounds
// and padding of the shards (Megatron's multiple of lcm(world, align)), the CPU backend's
// chunk = ceil(n / world), bad arguments, and the GPU's AdamW launches over a shard: each run of
// rows of a 128-aligned device-style layout of the tiny configs, clipped to every rank's
// shard, updates every real element exactly once over the ranks, with its row's decay flag, at
// a moment index inside the shard, and never a padding element past the layout's end.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/zero1.h"
#include "model/config.h" // defines: kda_config_load, kda_config_derive
#include "model/params.h" // defines: kda_params_build, KdaParamTable
#include "test.h"

static int64_t lcm_(int64_t a, int64_t b) {
    int64_t x = a, y = b;
    while (y) {
        int64_t t = x % y;
        x = y;
        y = t;
    }
    return a / x * b;
}

KDA_TEST(zero1_plan_bounds_and_padding) {
    const int64_t ns[] = {1, 7, 127, 128, 129, 1000, 4096, 123457, 305000064};
    const int64_t aligns[] = {1, 128};
    KdaError err;
    for (size_t i = 0; i < sizeof ns / sizeof *ns; i++)
        for (size_t a = 0; a < 2; a++)
            for (int w = 1; w <= 9; w++) {
                int64_t n = ns[i], unit = lcm_(aligns[a], w), covered = 0;
                for (int r = 0; r < w; r++) {
                    KdaShard s;
                    CHECK(kda_zero1_plan(&s, n, w, r, aligns[a], &err) == 0);
                    CHECK(s.padded % unit == 0 && s.padded >= n && s.padded - n < unit);
                    CHECK(s.chunk * w == s.padded);
                    CHECK(s.lo == r * s.chunk && s.hi == s.lo + s.chunk);
                    CHECK(s.lo == covered); // shards are consecutive and disjoint
                    covered = s.hi;
                    if (aligns[a] == 1) CHECK(s.chunk == (n + w - 1) / w); // the CPU's chunk
                    if (aligns[a] == 128 && 128 % w == 0)
                        CHECK(s.lo % (128 / w) == 0); // Megatron: padded to 128, chunk 128 / w
                    CHECK(kda_zero1_moment_bytes(&s, 0) == 8.0 * (double)n);
                    CHECK(kda_zero1_moment_bytes(&s, 1) == 8.0 * (double)s.chunk);
                }
                CHECK(covered >= n);
            }
    // worked examples: 10 over 3 ranks (CPU) = 4 + 4 + 2 real elements; 1000 over 3 GPU ranks
    // pads to lcm(3, 128) = 384 x 3 = 1152, chunk 384
    KdaShard s;
    CHECK(kda_zero1_plan(&s, 10, 3, 2, 1, &err) == 0);
    CHECK(s.padded == 12 && s.chunk == 4 && s.lo == 8 && s.hi == 12);
    CHECK(kda_zero1_plan(&s, 1000, 3, 1, 128, &err) == 0);
    CHECK(s.padded == 1152 && s.chunk == 384 && s.lo == 384 && s.hi == 768);
    CHECK(kda_zero1_plan(&s, 1000, 8, 7, 128, &err) == 0);
    CHECK(s.padded == 1024 && s.chunk == 128 && s.lo == 896);
}

KDA_TEST(zero1_plan_rejects_bad_arguments) {
    KdaShard s;
    KdaError err = {{0}};
    CHECK(kda_zero1_plan(&s, 10, 0, 0, 1, &err) == -1 && strstr(err.msg, "world 0"));
    CHECK(kda_zero1_plan(&s, 10, 2, 2, 1, &err) == -1 && strstr(err.msg, "rank 2 of world 2"));
    CHECK(kda_zero1_plan(&s, 10, 2, -1, 1, &err) == -1);
    CHECK(kda_zero1_plan(&s, 10, 2, 0, 0, &err) == -1 && strstr(err.msg, "align"));
    CHECK(kda_zero1_plan(&s, -1, 2, 0, 1, &err) == -1);
    CHECK(kda_zero1_plan(&s, INT64_MAX - 5, 3, 0, 128, &err) == -1 && strstr(err.msg, "overflow"));
}

KDA_TEST(zero1_clip) {
    KdaShard s;
    KdaError err;
    int64_t a, b;
    CHECK(kda_zero1_plan(&s, 1000, 3, 1, 128, &err) == 0); // [384, 768)
    CHECK(kda_zero1_clip(&s, 0, 100, 1000, &a, &b) == 0 && a == b);
    CHECK(kda_zero1_clip(&s, 300, 500, 1000, &a, &b) == 1 && a == 384 && b == 500);
    CHECK(kda_zero1_clip(&s, 500, 900, 1000, &a, &b) == 1 && a == 500 && b == 768);
    CHECK(kda_zero1_clip(&s, 0, 1152, 600, &a, &b) == 1 && a == 384 && b == 600); // the limit
    CHECK(kda_zero1_clip(&s, 0, 1152, 300, &a, &b) == 0 && a == b);
    CHECK(kda_zero1_plan(&s, 1000, 3, 2, 128, &err) == 0); // [768, 1152): past n = 1000
    CHECK(kda_zero1_clip(&s, 900, 1152, 1000, &a, &b) == 1 && a == 900 && b == 1000);
}

// The device-style layout of config `path` (table order, every row at a multiple of 128: the
// GPU's layout without the fused input projection), then model_cuda.c's AdamW launch plan: runs
// of consecutive rows with the same decay flag, the last run ending at the layout's end.
static void check_runs_(const char *path) {
    KdaConfig c;
    KdaParamTable t;
    KdaError err;
    KDA_ASSERT(kda_config_load(&c, path, &err) == 0 && kda_config_derive(&c, path, &err) == 0);
    KDA_ASSERT(kda_params_build(&t, &c, &err) == 0);
    int64_t *off = malloc((size_t)t.n * sizeof *off), total = 0;
    for (int i = 0; i < t.n; i++) {
        off[i] = total;
        total += (t.rows[i].numel + 127) / 128 * 128;
    }
    uint8_t *hits = calloc((size_t)total, 1);
    for (int w = 1; w <= 9; w++) {
        memset(hits, 0, (size_t)total);
        for (int r = 0; r < w; r++) {
            KdaShard s;
            CHECK(kda_zero1_plan(&s, total, w, r, 128, &err) == 0);
            for (int i = 0, j; i < t.n; i = j + 1) {
                for (j = i; j + 1 < t.n && t.rows[j + 1].weight_decay == t.rows[i].weight_decay;)
                    j++;
                int64_t a = off[i], b = j + 1 < t.n ? off[j + 1] : total;
                if (!kda_zero1_clip(&s, a, b, total, &a, &b)) continue;
                CHECK(a >= s.lo && b <= s.hi && b <= total);
                CHECK(a - s.lo >= 0 && b - s.lo <= s.chunk); // moment indices inside the shard
                for (int64_t e = a; e < b; e++)
                    hits[e]++;
                for (int k = i; k <= j; k++) // the rows the launch touches share the flag
                    if (off[k] < b && off[k] + t.rows[k].numel > a)
                        CHECK(t.rows[k].weight_decay == t.rows[i].weight_decay);
            }
        }
        int64_t bad = 0;
        for (int64_t e = 0; e < total; e++)
            bad += hits[e] != 1;
        CHECK_MSG(bad == 0, "%s, world %d: %lld of %lld elements not updated exactly once", path, w,
                  (long long)bad, (long long)total);
    }
    free(hits);
    free(off);
    kda_params_free(&t);
}

KDA_TEST(zero1_adamw_runs_cover_each_element_once) {
    check_runs_("configs/tiny.json");
    check_runs_("configs/tiny_gva.json");
}
