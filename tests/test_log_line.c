// test_log_line.c - the training log line on the CPU: Megatron's fields in order, the TFLOP/s
// field marked CPU (not Megatron's "per GPU" reading 0.0), host memory named as such, MFU n/a;
// log_style: primus prints Primus's short line (ms inst/avg, tokens per GPU).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "core/util.h"
#include "fixtures.h" // defines: TestDocs, TEST_DOCS, test_write_docs
#include "test.h"

static char g_out[1 << 16];

static int kda_(const char *args) {
    return test_run_kda(g_out, sizeof g_out, "OMP_NUM_THREADS=2", args);
}

KDA_TEST(log_line_cpu_and_primus) {
    const char *d = test_tmpdir();
    char data[4096], args[16384];
    snprintf(data, sizeof data, "%s/data", d);
    KdaError err;
    TestDocs docs = TEST_DOCS(60);
    docs.len = 40;
    CHECK_MSG(test_write_docs(data, docs, &err) == 0, "%s", err.msg);
    const char *common = "train --model configs/tiny.json --train_data_path %s --train_iters 4 "
                         "--seq_length 16 --micro_batch_size 2 --global_batch_size 2 "
                         "--log_interval 1 --no-progress %s";
    snprintf(args, sizeof args, common, data, "");
    CHECK_MSG(kda_(args) == 0, "%s", g_out);
    const char *line = strstr(g_out, "iteration        4/       4 |");
    CHECK_MSG(line != NULL, "%s", g_out);
    if (line) {
        CHECK(strstr(line, "| throughput (TFLOP/s, CPU): ") && strstr(line, "| MFU: n/a |") &&
              strstr(line, "| peak host memory (MiB): ") && !strstr(line, "TFLOP/s/GPU): 0.0"));
        CHECK(strstr(line, "| learning rate: ") < strstr(line, "| lm loss: ")); // Megatron order
    }
    snprintf(args, sizeof args, common, data, "--log_style primus");
    CHECK_MSG(kda_(args) == 0, "%s", g_out);
    line = strstr(g_out, "iteration     4/    4 | elapsed time per iteration (ms): ");
    CHECK_MSG(line && strstr(line, "| TFLOP/s/GPU: ") &&
                  strstr(line, "| tokens per GPU (tokens/s/GPU): ") && strstr(line, "| lm loss: "),
              "%s", g_out);
}
