// test_tfevents.c - TensorBoard event files: CRC-32C check value, records read back with both
// CRCs checked, corruption detected, and a training run with tensorboard_dir writing Megatron's
// tags; metrics.jsonl has timestamps and null for non-finite values.
// (tools/reference/tensorboard_readback.py reads the same files with the tensorboard package.)
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>

#include "core/util.h"
#include "fixtures.h" // defines: TestDocs, TEST_DOCS, test_write_docs
#include "test.h"
#include "train/run_config.h"
#include "train/tfevents.h"
#include "train/trainer.h"

KDA_TEST(tfevents_crc32c_check_value) {
    CHECK(kda_crc32c("123456789", 9) == 0xe3069283u); // the CRC-32C catalogue check value
    CHECK(kda_crc32c("", 0) == 0);
}

KDA_TEST(tfevents_write_read_back) {
    KdaTfEvents *w;
    KdaError err;
    char path[PATH_MAX], dir[PATH_MAX];
    path_join(dir, sizeof dir, test_tmpdir(), "tb/run1");
    CHECK_MSG(kda_tfevents_open(&w, dir, path, sizeof path, &err) == 0, "%s", err.msg);
    CHECK(strstr(path, "/events.out.tfevents.") != NULL);
    CHECK(kda_tfevents_scalar(w, "lm loss", 1, 1700000000.25, 11.9673f, &err) == 0);
    CHECK(kda_tfevents_scalar(w, "learning-rate", 1, 1700000000.25, 1e-6f, &err) == 0);
    CHECK(kda_tfevents_scalar(w, "lm loss", 300, 1700000100.5, 3.25f, &err) == 0); // step > 127
    CHECK(kda_tfevents_flush(w, &err) == 0);
    kda_tfevents_close(w);
    KdaTfScalar *s;
    int64_t n;
    CHECK_MSG(kda_tfevents_read(path, &s, &n, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(n, 3);
    if (n == 3) {
        CHECK(!strcmp(s[0].tag, "lm loss") && s[0].step == 1 && s[0].value == 11.9673f &&
              s[0].wall_time == 1700000000.25);
        CHECK(!strcmp(s[1].tag, "learning-rate") && s[1].value == 1e-6f);
        CHECK(s[2].step == 300 && s[2].value == 3.25f);
    }
    free(s);
    // flip one byte of the last record's payload: the data CRC catches it
    size_t len;
    char *buf = read_file(path, &len, &err);
    CHECK(buf != NULL);
    if (!buf) return;
    buf[len - 6] ^= 0x40;
    CHECK(write_file_atomic(path, buf, len, &err) == 0);
    CHECK(kda_tfevents_read(path, &s, &n, &err) == -1 && strstr(err.msg, "bad data CRC"));
    CHECK(write_file_atomic(path, buf, len - 3, &err) == 0); // truncated
    CHECK(kda_tfevents_read(path, &s, &n, &err) == -1 && strstr(err.msg, "truncated"));
    free(buf);
}

// The only event file in dir (path out).
static int find_events_(const char *dir, char *path, size_t cap) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    struct dirent *e;
    int found = 0;
    while ((e = readdir(d)))
        if (strstr(e->d_name, "tfevents")) found++, path_join(path, cap, dir, e->d_name);
    closedir(d);
    return found == 1 ? 0 : -1;
}

// Iteration 2's loss is NaN (its update is skipped; max_nan_steps tolerates it).
static int poison_2_(void *user, int64_t it, int micro) {
    (void)user;
    return it == 2 && micro == 0;
}

KDA_TEST(tfevents_training_run) {
    char data[PATH_MAX], save[PATH_MAX], tb[PATH_MAX];
    snprintf(data, sizeof data, "%s/data", test_tmpdir());
    snprintf(save, sizeof save, "%s/ckpt", test_tmpdir());
    snprintf(tb, sizeof tb, "%s/tb", test_tmpdir());
    KdaError err;
    TestDocs docs = TEST_DOCS(60);
    docs.len = 40;
    CHECK_MSG(test_write_docs(data, docs, &err) == 0, "%s", err.msg);
    char y[16384];
    snprintf(y, sizeof y,
             "model: configs/tiny.json\ntrain_data_path: [%s]\nsplit: \"90,10,0\"\n"
             "seq_length: 16\ntrain_iters: 4\nglobal_batch_size: 2\nmicro_batch_size: 2\n"
             "log_interval: 1\neval_interval: 2\neval_iters: 1\nsave: %s\ntensorboard_dir: %s\n"
             "max_nan_steps: 3\n",
             data, save, tb);
    KdaRunConfig rc;
    kda_run_config_defaults(&rc);
    CHECK(kda_run_config_parse(&rc, y, strlen(y), "t.yaml", &err) == 0);
    CHECK_MSG(kda_run_config_validate(&rc, &err) == 0, "%s", err.msg);
    KdaTrainOptions o = {.rc = &rc, .quiet = 1, .poison = poison_2_};
    KdaTrainResult res;
    CHECK_MSG(kda_train(&o, &res, &err) == 0, "%s", err.msg);
    char ev[PATH_MAX];
    CHECK(find_events_(tb, ev, sizeof ev) == 0);
    KdaTfScalar *s;
    int64_t n;
    CHECK_MSG(kda_tfevents_read(ev, &s, &n, &err) == 0, "%s", err.msg);
    // log lines at 1..4 (6 tags each, but no "lm loss" at the NaN iteration 2) and
    // evaluations at 2, 4 (2 tags each)
    CHECK_EQ_INT(n, 4 * 6 - 1 + 2 * 2);
    int loss_at_4 = 0, valid = 0;
    for (int64_t i = 0; i < n; i++) {
        loss_at_4 += !strcmp(s[i].tag, "lm loss") && s[i].step == 4 &&
                     fabsf(s[i].value - (float)res.last_loss) < 1e-6f;
        valid += !strcmp(s[i].tag, "lm loss validation");
    }
    CHECK(loss_at_4 == 1 && valid == 2);
    free(s);
    size_t len;
    char mp[PATH_MAX];
    path_join(mp, sizeof mp, save, "metrics.jsonl");
    char *m = read_file(mp, &len, &err);
    CHECK(m && strstr(m, "{\"iteration\": 1, \"time\": 1") != NULL);
    CHECK_MSG(m && strstr(m, "{\"iteration\": 2, ") &&
                  strstr(strstr(m, "{\"iteration\": 2, "), "\"loss\": null"),
              "%s", m ? m : "");
    free(m);
    kda_run_config_free(&rc);
}
