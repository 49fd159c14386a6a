// cmd_info.c - `kda info`: model config summary (placeholder until the model module lands).
#include <stdio.h>

#include "commands.h"

int cmd_info(int argc, char **argv) {
    (void)argc, (void)argv;
    fprintf(stderr, "kda info: not implemented yet\n");
    return 1;
}
