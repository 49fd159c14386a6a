// args.h - table-driven command-line flags: one ArgSpec table drives parsing and --help.
//
// Each flag is "--name value" or "--name=value" (ARG_BOOL takes no value; "--no-name" clears
// it). ARG_STRS collects every following word that does not start with "--". The variable a
// spec points at holds the default before parsing; usage prints it.
#ifndef KDA_ARGS_H
#define KDA_ARGS_H

#include <stdint.h>
#include <stdio.h>

#include "core/error.h"

typedef enum { ARG_STR, ARG_INT, ARG_FLOAT, ARG_BOOL, ARG_STRS } ArgType;

typedef struct {
    const char **items; // owned array of borrowed argv strings
    int n;
} ArgList;

typedef struct {
    const char *name; // without the leading "--"
    ArgType type;
    void *ptr; // const char **, int64_t *, double *, int *, or ArgList *
    const char *help;
    int required;
} ArgSpec;

typedef struct {
    const char *command; // "kda train"
    const char *summary; // one line
    const char *details; // optional paragraph printed after the flags (may be NULL)
    const ArgSpec *specs;
    int n_specs;
} ArgTable;

// Parses argv[0..argc) (argv[0] is the first flag, not the program). On "--help"/"-h" prints
// usage to stdout and returns 1; on error returns -1 with one line naming the flag in err.
int args_parse(const ArgTable *t, int argc, char **argv, KdaError *err);
void args_usage(const ArgTable *t, FILE *f);
// Convenience for commands: parse, or print usage. Returns 0 to go on, 1 if help was shown; a
// usage error (unknown flag, with a "did you mean" when one is close; bad or missing value)
// prints one line and exits with status 2.
int args_parse_or_die(const ArgTable *t, int argc, char **argv);
void arglist_free(ArgList *l);

#endif
