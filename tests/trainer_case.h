// trainer_case.h - pieces shared by the trainer tests that run the tiny model end to end
// (test_trainer.c, test_loader_fla.c): a run config from YAML text, and the check that a run
// stopped and resumed half-way matches a straight one bit for bit.
#ifndef KDA_TESTS_TRAINER_CASE_H
#define KDA_TESTS_TRAINER_CASE_H

#include "train/run_config.h" // defines: KdaRunConfig

// rc = the defaults, then the YAML text base, then extra on top (NULL: none; overrides), then
// validated. 0, or -1 with the error printed to stderr ("run config: ...").
int trainer_case_config(KdaRunConfig *rc, const char *base, const char *extra);

// The resume check of two runs of n iterations (a straight, b stopped and resumed): every loss
// bit-equal (loss_a, loss_b [n]), every grad norm equal (norm_a, norm_b [n]), and the model and
// optimizer files of iter_<n> byte-identical under save_a and save_b.
void trainer_case_expect_same_run(const float *loss_a, const double *norm_a, const float *loss_b,
                                  const double *norm_b, int n, const char *save_a,
                                  const char *save_b);

#endif
