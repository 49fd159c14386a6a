// cmd_score.c - `kda score` (placeholder until the model module lands).
#include <stdio.h>

#include "commands.h"

int cmd_score(int argc, char **argv) {
    (void)argc, (void)argv;
    fprintf(stderr, "kda score: not implemented yet\n");
    return 1;
}
