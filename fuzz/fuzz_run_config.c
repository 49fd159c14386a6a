// fuzz_run_config.c - libFuzzer target for the training run config YAML
// (kda_run_config_parse: libyaml tokenizes, run_config.c maps keys and types).
// Contract checked: a rejection gives a non-empty one-line message that starts with the file
// name; an accepted config written back as YAML (kda_run_config_write) parses again into a
// config that writes the same text (the header's round-trip promise). kda_run_config_validate
// and kda_run_config_blend run on the accepted config and must either pass or give a one-line
// message.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/run_config.h"

static void check_msg(const KdaError *err, const char *prefix) {
    if (!err->msg[0] || strchr(err->msg, '\n')) abort();
    if (prefix && strncmp(err->msg, prefix, strlen(prefix))) abort();
}

static char *write_yaml(const KdaRunConfig *cfg, size_t *n) {
    char *text = NULL;
    FILE *f = open_memstream(&text, n);
    if (!f || kda_run_config_write(cfg, f)) abort();
    fclose(f);
    return text;
}

static void check_blend(const KdaStrList *l) {
    const char **paths = NULL;
    double *w = NULL;
    int n = 0;
    KdaError err;
    if (kda_run_config_blend(l, &paths, &w, &n, &err) == 0) {
        if (n < 0 || (n > 0 && !paths)) abort();
        for (int i = 0; i < n; i++)
            if (!paths[i] || (w && !(w[i] >= 0))) abort();
    } else {
        check_msg(&err, NULL);
    }
    free(paths);
    free(w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *buf = malloc(size ? size : 1); // exact-size copy: ASan sees any over-read
    if (!buf) return 0;
    memcpy(buf, data, size);
    KdaRunConfig cfg;
    KdaError err;
    kda_run_config_defaults(&cfg);
    if (kda_run_config_parse(&cfg, buf, size, "fuzz.yaml", &err) == 0) {
        size_t n1, n2;
        char *t1 = write_yaml(&cfg, &n1);
        KdaRunConfig back;
        kda_run_config_defaults(&back);
        if (kda_run_config_parse(&back, t1, n1, "written.yaml", &err)) {
            fprintf(stderr, "written config does not read back: %s\n%s", err.msg, t1);
            abort();
        }
        char *t2 = write_yaml(&back, &n2);
        if (n1 != n2 || memcmp(t1, t2, n1)) {
            fprintf(stderr, "round trip differs:\n%s\n----\n%s", t1, t2);
            abort();
        }
        free(t1), free(t2);
        kda_run_config_free(&back);
        check_blend(&cfg.train_data_path);
        check_blend(&cfg.valid_data_path);
        if (kda_run_config_validate(&cfg, &err)) check_msg(&err, NULL);
    } else {
        check_msg(&err, "fuzz.yaml");
    }
    kda_run_config_free(&cfg);
    free(buf);
    return 0;
}
