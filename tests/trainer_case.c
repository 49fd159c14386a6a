// trainer_case.c - the trainer tests' run config and resume check (see trainer_case.h).
#include "trainer_case.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h" // defines: KdaError
#include "test.h"       // defines: CHECK_MSG, test_files_equal

int trainer_case_config(KdaRunConfig *rc, const char *base, const char *extra) {
    KdaError err;
    kda_run_config_defaults(rc);
    if (kda_run_config_parse(rc, base, strlen(base), "test.yaml", &err) ||
        (extra && kda_run_config_parse(rc, extra, strlen(extra), "extra.yaml", &err)) ||
        kda_run_config_validate(rc, &err)) {
        fprintf(stderr, "run config: %s\n", err.msg);
        return -1;
    }
    return 0;
}

void trainer_case_expect_same_run(const float *loss_a, const double *norm_a, const float *loss_b,
                                  const double *norm_b, int n, const char *save_a,
                                  const char *save_b) {
    for (int i = 0; i < n; i++) {
        // memcmp: bit-equal, which == would not say of two NaNs or of 0.0 and -0.0
        CHECK_MSG(memcmp(&loss_a[i], &loss_b[i], sizeof(float)) == 0,
                  "iteration %d: loss %.9g vs %.9g", i + 1, loss_a[i], loss_b[i]);
        CHECK_MSG(norm_a[i] == norm_b[i], "iteration %d: grad norm %.17g vs %.17g", i + 1,
                  norm_a[i], norm_b[i]);
    }
    const char *files[] = {"model.safetensors", "optimizer.safetensors"};
    for (int k = 0; k < 2; k++) {
        char pa[PATH_MAX], pb[PATH_MAX];
        snprintf(pa, sizeof pa, "%s/iter_%07d/%s", save_a, n, files[k]);
        snprintf(pb, sizeof pb, "%s/iter_%07d/%s", save_b, n, files[k]);
        CHECK_MSG(test_files_equal(pa, pb), "%s differs after resume", files[k]);
    }
}
