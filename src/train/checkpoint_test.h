// checkpoint_test.h - the fault-injection seam of checkpoint saving, for the test suite only
// (production code never includes this header and never sets the hook).
#ifndef KDA_TRAIN_CHECKPOINT_TEST_H
#define KDA_TRAIN_CHECKPOINT_TEST_H

// When set, called at named stages of a save ("model", "optimizer", "state", "before_rename",
// "replacing" (an existing dir of the iteration displaced), "before_latest"); a nonzero return
// makes the save fail there (a simulated write error). NULL unless a test sets it; not
// thread-safe (tests set it around one save).
extern int (*kda_checkpoint_test_hook)(const char *stage);

#endif
