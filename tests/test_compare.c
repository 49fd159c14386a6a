// test_compare.c - loss curves from kda metrics.jsonl, HF trainer_state.json (DeepSpeed sum,
// --divide) and Megatron/Primus logs (wrapped lines), and the Step 6 table / `kda compare`.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "test.h"
#include "train/loss_curve.h"

static const char *write_(const char *name, const char *text) {
    static char path[4][4096];
    static int k;
    char *p = path[k++ % 4];
    path_join(p, 4096, test_tmpdir(), name);
    KdaError err;
    return write_file_atomic(p, text, strlen(text), &err) ? NULL : p;
}

// FLA's values of training-recipe.md §2.1 at 1, 100, 500 and 4700, logged x8 (DeepSpeed sum).
static const char *TRAINER_STATE =
    "{\"best_metric\": null, \"global_step\": 4768, \"log_history\": ["
    "{\"epoch\": 0.0, \"grad_norm\": 3.1, \"learning_rate\": 1e-06, \"loss\": 95.7384, \"step\": "
    "1},"
    "{\"epoch\": 0.02, \"learning_rate\": 1e-04, \"loss\": 61.7368, \"step\": 100},"
    "{\"epoch\": 0.1, \"loss\": 37.8792, \"step\": 500},"
    "{\"eval_loss\": 4.0, \"step\": 500},"
    "{\"epoch\": 0.99, \"loss\": 26.7104, \"step\": 4700},"
    "{\"step\": 4768, \"train_loss\": 30.0, \"train_runtime\": 7119.2}]}";

// Primus's values, in the wrapped form of its docs and the one-line form of Megatron.
static const char *MEGATRON_LOG =
    "[2025-11-01 10:00:00] iteration        1/    4768 | consumed samples:         1024 | "
    "lm loss: 1.196690E+01 | loss scale: 1.0 |\n"
    "some other line with iterations in it\n"
    "iteration  100/ 4768 | elapsed time per iteration (ms): 1500.0/1500.0 |\n"
    "  TFLOP/s/GPU: 626.1 | tokens per GPU (tokens/s/GPU): 178596.5 | lm loss: 9.690300E+00\n"
    "iteration  500/ 4768 | elapsed time per iteration (ms): 1467.8/1466.1 | lm loss: "
    "4.839000E+00\n"
    "iteration  4700/ 4768 | elapsed time per iteration (ms): 1467.8/1466.1 |\n"
    "  TFLOP/s/GPU: 626.1 | tokens per GPU (tokens/s/GPU): 178596.5 | lm loss: 3.362445E+00\n";

KDA_TEST(compare_reads_three_formats) {
    KdaLossCurve a, b, c;
    KdaError err;
    const char *ts = write_("trainer_state.json", TRAINER_STATE);
    const char *ml = write_("primus.log", MEGATRON_LOG);
    const char *mj = write_("metrics.jsonl", "{\"iteration\": 2, \"loss\": 5.5, \"lr\": 1e-4}\n"
                                             "{\"iteration\": 1, \"loss\": 6.5}\n"
                                             "{\"iteration\": 3, \"loss\": null}\n"
                                             "{\"iteration\": 2, \"loss\": 5.25}\n"
                                             "{\"iteration\": 4, \"valid_loss\": 5.0}\n");
    CHECK_MSG(kda_loss_curve_read(ts, 8, &a, &err) == 0, "%s", err.msg);
    CHECK(!strcmp(a.format, "HF trainer_state") && a.n == 4);
    CHECK_NEAR(kda_loss_curve_at(&a, 1), 11.9673, 1e-12); // 95.7384 / 8
    CHECK(isnan(kda_loss_curve_at(&a, 4768)));            // train_loss summary: skipped
    CHECK_MSG(kda_loss_curve_read(ml, 1, &b, &err) == 0, "%s", err.msg);
    CHECK(!strcmp(b.format, "Megatron log") && b.n == 4);
    CHECK(kda_loss_curve_at(&b, 100) == 9.6903 && kda_loss_curve_at(&b, 4700) == 3.362445);
    CHECK_MSG(kda_loss_curve_read(mj, 1, &c, &err) == 0, "%s", err.msg);
    CHECK(!strcmp(c.format, "kda metrics") && c.n == 2);       // sorted; null skipped
    CHECK(c.iter[0] == 1 && kda_loss_curve_at(&c, 2) == 5.25); // repeated: the last value
    int64_t np;
    CHECK_NEAR(kda_loss_curve_mean(&a, 100, 500, &np), (7.7171 + 4.7349) / 2, 1e-12);
    CHECK_EQ_INT(np, 2);
    kda_loss_curve_free(&c);
    CHECK(kda_loss_curve_read(write_("empty.log", "nothing here\n"), 1, &c, &err) == -1 &&
          strstr(err.msg, "no loss values"));
    // the Step 6 table: Primus vs FLA at iteration 100 is +25.57 %
    char *buf;
    size_t n;
    FILE *f = open_memstream(&buf, &n);
    double rows[] = {1, 100, 500, 4700, 2000};
    int both = kda_loss_compare_table(f, &a, &b, "FLA (÷8)", "Primus", rows, 5, 100, 4700);
    fclose(f);
    CHECK_EQ_INT(both, 4);
    CHECK_MSG(strstr(buf, "| iteration | FLA (÷8) | Primus | Δ % |") &&
                  strstr(buf, "| 100 | 7.7171 | 9.6903 | +25.57 % |") &&
                  strstr(buf, "| 4700 | 3.3388 | 3.3624 | +0.71 % |") &&
                  strstr(buf, "| 2000 | — | — | — |") &&
                  strstr(buf, "| mean 100–4700 (3 / 3 points)"),
              "%s", buf);
    free(buf);
    kda_loss_curve_free(&a), kda_loss_curve_free(&b);
}

KDA_TEST(compare_cli_table_and_plot) {
    const char *ts = write_("trainer_state.json", TRAINER_STATE);
    const char *ml = write_("primus.log", MEGATRON_LOG);
    char svg[4096], args[16384];
    path_join(svg, sizeof svg, test_tmpdir(), "overlay.svg");
    snprintf(args, sizeof args, "compare %s %s --labels FLA,Primus --divide 8 -o %s", ts, ml, svg);
    static char out[1 << 14];
    int st = test_run_kda(out, sizeof out, NULL, args);
    CHECK_MSG(st == 0, "%s", out);
    if (st) return;
    CHECK_MSG(strstr(out, "| 1 | 11.9673 | 11.9669 | -0.00 % |") &&
                  strstr(out, "| 500 | 4.7349 | 4.8390 | +2.20 % |"),
              "%s", out);
    size_t sn;
    KdaError err;
    char *s = read_file(svg, &sn, &err);
    CHECK(s && strstr(s, "<svg") && strstr(s, ">FLA</text>") && strstr(s, ">Primus</text>") &&
          strstr(s, ">1000</text>")); // rounded ticks
    free(s);
    snprintf(args, sizeof args, "compare %s", ts);
    st = test_run_kda(out, sizeof out, NULL, args);
    CHECK_MSG(st == 2 && strstr(out, "two inputs"), "%s", out);
}
