// test_prof.c - the per-op profile table (core/prof.h): the printed rows plus "unaccounted" add
// up to the printed step time, floors are max(FLOP time, byte time) per call, rows with no call
// are left out.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/prof.h"
#include "test.h"

// Parses the ms column (third) of every table row into ms[], names into the row order; returns
// the number of rows and the step's ms in *step (the "step (wall)" row), the unaccounted row's
// in *unacc.
static int parse_(FILE *f, double *ms, int cap, double *step, double *unacc) {
    char line[512];
    int n = 0;
    rewind(f);
    while (fgets(line, sizeof line, f)) {
        if (line[0] != '|' || !strncmp(line, "| op", 4) || !strncmp(line, "|---", 4)) continue;
        char *c2 = strchr(line + 1, '|'), *c3 = c2 ? strchr(c2 + 1, '|') : NULL;
        if (!c3) continue;
        const char *v = c3 + 1;
        while (*v == ' ' || *v == '*')
            v++;
        double x = strtod(v, NULL);
        if (strstr(line, "step (wall)"))
            *step = x;
        else if (strstr(line, "unaccounted"))
            *unacc = x;
        else if (n < cap)
            ms[n++] = x;
    }
    return n;
}

KDA_TEST(prof_table_sums_to_step) {
    KdaProf p;
    kda_prof_reset(&p, 1e12, 1e9);                     // 1 TFLOP/s, 1 GB/s
    kda_prof_add(&p, KDA_OP_MLP_FWD, 2.5, 2e9, 1e6);   // floor max(2 ms, 1 ms) = 2 ms
    kda_prof_add(&p, KDA_OP_MLP_FWD, 1.5, 1e9, 3e6);   // floor max(1 ms, 3 ms) = 3 ms
    kda_prof_add(&p, KDA_OP_SWIGLU_FWD, 0.75, 0, 5e5); // floor 0.5 ms
    kda_prof_add(&p, KDA_OP_SYNC, 0.125, 0, 0);        // no floor
    p.t_start = 10.0;
    p.t_end = 10.0105; // 10.5 ms of wall
    CHECK_EQ_INT(p.row[KDA_OP_MLP_FWD].calls, 2);
    CHECK_NEAR(p.row[KDA_OP_MLP_FWD].floor_ms, 5.0, 1e-12);
    CHECK_NEAR(p.row[KDA_OP_SWIGLU_FWD].floor_ms, 0.5, 1e-12);
    CHECK_NEAR(kda_prof_sum_ms(&p), 4.875, 1e-12);
    CHECK_NEAR(kda_prof_wall_ms(&p), 10.5, 1e-9);
    FILE *f = tmpfile();
    CHECK(f != NULL);
    if (!f) return;
    CHECK(kda_prof_print(&p, "t", f) == 0);
    double ms[KDA_OP_COUNT], step = -1, unacc = -1;
    int n = parse_(f, ms, KDA_OP_COUNT, &step, &unacc);
    fclose(f);
    CHECK_EQ_INT(n, 3); // ops without calls are not printed
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += ms[i];
    CHECK_NEAR(step, 10.5, 1e-3);              // printed with 3 decimals
    CHECK_NEAR(sum + unacc, step, 4 * 0.5e-3); // four printed roundings
    CHECK_NEAR(unacc, 10.5 - 4.875, 1e-3);
}

// Host-clock timing: an end without its begin (or for another op) records nothing; NULL is a
// no-op everywhere.
KDA_TEST(prof_begin_end) {
    KdaProf p;
    kda_prof_reset(&p, 0, 0);
    kda_prof_begin(&p, KDA_OP_ADAMW);
    kda_prof_end(&p, KDA_OP_GRAD_NORM, 1, 1);
    CHECK_EQ_INT(p.row[KDA_OP_GRAD_NORM].calls, 0);
    kda_prof_end(&p, KDA_OP_ADAMW, 0, 8);
    CHECK_EQ_INT(p.row[KDA_OP_ADAMW].calls, 1);
    CHECK(p.row[KDA_OP_ADAMW].ms >= 0 && p.row[KDA_OP_ADAMW].bytes == 8);
    kda_prof_end(&p, KDA_OP_ADAMW, 0, 8); // no begin: ignored
    CHECK_EQ_INT(p.row[KDA_OP_ADAMW].calls, 1);
    kda_prof_begin(NULL, KDA_OP_ADAMW);
    kda_prof_end(NULL, KDA_OP_ADAMW, 0, 0);
    kda_prof_add(NULL, KDA_OP_ADAMW, 1, 0, 0);
    CHECK(!strcmp(kda_prof_op_name(KDA_OP_CORE_BWD), "KDA core bwd"));
}
