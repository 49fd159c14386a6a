// test_schedule.c - the recipe's learning-rate schedule (training-recipe.md §1.2).
// Tolerances: 1e-18 absolute on values ~1e-4 is exact up to double rounding of the formula.
#include <string.h>

#include "test.h"
#include "train/schedule.h"

static KdaLrSchedule recipe(KdaLrStyle style) {
    return (KdaLrSchedule){
        .lr = 2e-4, .min_lr = 2e-5, .warmup_iters = 200, .decay_iters = 4768, .style = style};
}

KDA_TEST(schedule_recipe_values) {
    KdaLrSchedule s = recipe(KDA_LR_COSINE);
    KdaError e;
    CHECK(kda_lr_schedule_check(&s, &e) == 0);
    CHECK(kda_lr_at(&s, 0) == 0.0);
    CHECK_NEAR(kda_lr_at(&s, 1), 1e-6, 1e-18);
    CHECK_NEAR(kda_lr_at(&s, 100), 1e-4, 1e-18);
    CHECK_NEAR(kda_lr_at(&s, 200), 2e-4, 1e-18);
    CHECK_NEAR(kda_lr_at(&s, 2484), 1.1e-4, 1e-18); // cosine midpoint: (2e-4 + 2e-5) / 2
    CHECK_NEAR(kda_lr_at(&s, 4768), 2e-5, 1e-18);
    CHECK(kda_lr_at(&s, 4769) == 2e-5 && kda_lr_at(&s, 100000) == 2e-5);
    CHECK(kda_lr_at(&s, 201) < 2e-4 && kda_lr_at(&s, 201) > 1.9999e-4);
    // off by one: update u runs at lr(u-1); first update at 0, peak at u = 201
    CHECK(kda_lr_for_update(&s, 1) == 0.0);
    CHECK_NEAR(kda_lr_for_update(&s, 201), 2e-4, 1e-18);
    CHECK_NEAR(kda_lr_for_update(&s, 4768), kda_lr_at(&s, 4767), 0);
    CHECK(kda_lr_for_update(&s, 4768) > 2e-5 && kda_lr_for_update(&s, 4768) < 2.0001e-5);
}

KDA_TEST(schedule_linear_and_constant) {
    KdaLrSchedule s = recipe(KDA_LR_LINEAR);
    CHECK_NEAR(kda_lr_at(&s, 2484), 1.1e-4, 1e-18);
    CHECK_NEAR(kda_lr_at(&s, 200 + 4568 / 4), 2e-5 + 0.75 * 1.8e-4, 1e-18);
    s.style = KDA_LR_CONSTANT;
    CHECK_NEAR(kda_lr_at(&s, 100), 1e-4, 1e-18); // warmup still applies
    CHECK(kda_lr_at(&s, 3000) == 2e-4 && kda_lr_at(&s, 9000) == 2e-4);
    s.warmup_iters = 0;
    s.style = KDA_LR_COSINE;
    CHECK(kda_lr_at(&s, 0) == 2e-4); // no warmup: starts at the peak
}

KDA_TEST(schedule_parse_and_check) {
    KdaLrStyle st;
    KdaError e;
    CHECK(kda_lr_style_parse("linear", &st, &e) == 0 && st == KDA_LR_LINEAR);
    CHECK(kda_lr_style_parse("cosine", &st, &e) == 0 && st == KDA_LR_COSINE);
    CHECK(kda_lr_style_parse("inverse-square-root", &st, &e) == -1);
    CHECK(strstr(e.msg, "inverse-square-root") && strstr(e.msg, "cosine"));
    CHECK(!strcmp(kda_lr_style_name(KDA_LR_CONSTANT), "constant"));
    KdaLrSchedule s = recipe(KDA_LR_COSINE);
    s.min_lr = 3e-4;
    CHECK(kda_lr_schedule_check(&s, &e) == -1);
    s = recipe(KDA_LR_COSINE);
    s.decay_iters = 200;
    CHECK(kda_lr_schedule_check(&s, &e) == -1);
}
