// args.c - table-driven flag parser and usage printer.
#include "core/args.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h" // defines: str_closest

static const ArgSpec *find_spec(const ArgTable *t, const char *name, size_t n) {
    for (int i = 0; i < t->n_specs; i++)
        if (strlen(t->specs[i].name) == n && strncmp(t->specs[i].name, name, n) == 0)
            return &t->specs[i];
    return NULL;
}

static int set_value(const ArgSpec *s, const char *v, KdaError *err) {
    char *end;
    switch (s->type) {
    case ARG_STR:
        *(const char **)s->ptr = v;
        return 0;
    case ARG_INT: {
        errno = 0;
        long long x = strtoll(v, &end, 10);
        if (errno || end == v || *end)
            return kda_fail(err, "--%s: expected an integer, got '%s'", s->name, v);
        *(int64_t *)s->ptr = x;
        return 0;
    }
    case ARG_FLOAT: {
        errno = 0;
        double x = strtod(v, &end);
        if (errno || end == v || *end || !isfinite(x))
            return kda_fail(err, "--%s: expected a number, got '%s'", s->name, v);
        *(double *)s->ptr = x;
        return 0;
    }
    case ARG_BOOL: {
        if (!strcmp(v, "1") || !strcmp(v, "true"))
            *(int *)s->ptr = 1;
        else if (!strcmp(v, "0") || !strcmp(v, "false"))
            *(int *)s->ptr = 0;
        else
            return kda_fail(err, "--%s: expected true or false, got '%s'", s->name, v);
        return 0;
    }
    case ARG_STRS: {
        ArgList *l = s->ptr;
        l->items = kda_realloc(l->items, (size_t)(l->n + 1) * sizeof *l->items);
        l->items[l->n++] = v;
        return 0;
    }
    }
    return kda_fail(err, "--%s: bad spec", s->name);
}

int args_parse(const ArgTable *t, int argc, char **argv, KdaError *err) {
    int *seen = kda_calloc((size_t)t->n_specs + 1, sizeof *seen);
    int rc = 0;
    for (int i = 0; i < argc && rc == 0; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            args_usage(t, stdout);
            free(seen);
            return 1;
        }
        if (strncmp(a, "--", 2) != 0) {
            rc = kda_fail(err, "%s: unexpected argument '%s' (see --help)", t->command, a);
            break;
        }
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t n = eq ? (size_t)(eq - name) : strlen(name);
        const ArgSpec *s = find_spec(t, name, n);
        if (!s && n > 3 && !strncmp(name, "no-", 3) && !eq) {
            s = find_spec(t, name + 3, n - 3);
            if (s && s->type == ARG_BOOL) {
                *(int *)s->ptr = 0;
                seen[s - t->specs] = 1;
                continue;
            }
            s = NULL;
        }
        if (!s) {
            const char *names[64];
            int k = 0;
            for (; k < t->n_specs && k < 64; k++)
                names[k] = t->specs[k].name;
            char flag[128];
            snprintf(flag, sizeof flag, "%.*s", (int)n, name);
            const char *near = str_closest(flag, names, k);
            if (near)
                rc = kda_fail(err, "%s: unknown flag '--%s' (did you mean '--%s'?)", t->command,
                              flag, near);
            else
                rc = kda_fail(err, "%s: unknown flag '--%s' (see --help)", t->command, flag);
            break;
        }
        seen[s - t->specs] = 1;
        if (s->type == ARG_BOOL && !eq) {
            *(int *)s->ptr = 1;
        } else if (s->type == ARG_STRS && !eq) {
            int got = 0;
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) {
                set_value(s, argv[++i], err);
                got++;
            }
            if (!got) rc = kda_fail(err, "--%s: expected at least one value", s->name);
        } else if (eq) {
            rc = set_value(s, eq + 1, err);
        } else if (i + 1 < argc) {
            rc = set_value(s, argv[++i], err);
        } else {
            rc = kda_fail(err, "--%s: missing value", s->name);
        }
    }
    for (int i = 0; rc == 0 && i < t->n_specs; i++)
        if (t->specs[i].required && !seen[i])
            rc = kda_fail(err, "%s: missing required flag --%s (see --help)", t->command,
                          t->specs[i].name);
    free(seen);
    return rc;
}

void args_usage(const ArgTable *t, FILE *f) {
    fprintf(f, "usage: %s [flags]\n%s\n\nflags:\n", t->command, t->summary);
    for (int i = 0; i < t->n_specs; i++) {
        const ArgSpec *s = &t->specs[i];
        char left[64], def[96] = "";
        const char *meta = s->type == ARG_INT     ? " N"
                           : s->type == ARG_FLOAT ? " X"
                           : s->type == ARG_STR   ? " S"
                           : s->type == ARG_STRS  ? " S..."
                                                  : "";
        snprintf(left, sizeof left, "--%s%s", s->name, meta);
        if (s->required)
            snprintf(def, sizeof def, " (required)");
        else if (s->type == ARG_STR && *(const char **)s->ptr)
            snprintf(def, sizeof def, " (default: %s)", *(const char **)s->ptr);
        else if (s->type == ARG_INT)
            snprintf(def, sizeof def, " (default: %lld)", (long long)*(int64_t *)s->ptr);
        else if (s->type == ARG_FLOAT)
            snprintf(def, sizeof def, " (default: %g)", *(double *)s->ptr);
        else if (s->type == ARG_BOOL && *(int *)s->ptr < 0) // tri-state: neither flag given
            snprintf(def, sizeof def, " (default: auto)");
        else if (s->type == ARG_BOOL && *(int *)s->ptr)
            snprintf(def, sizeof def, " (default: on)");
        fprintf(f, "  %-26s %s%s\n", left, s->help, def);
    }
    fprintf(f, "  %-26s %s\n", "--help", "show this help");
    if (t->details) fprintf(f, "\n%s\n", t->details);
}

int args_parse_or_die(const ArgTable *t, int argc, char **argv) {
    KdaError err;
    int rc = args_parse(t, argc, argv, &err);
    if (rc < 0) { // a usage error: exit status 2
        fprintf(stderr, "kda: error: %s\n", err.msg);
        exit(2);
    }
    return rc;
}

void arglist_free(ArgList *l) {
    free(l->items);
    l->items = NULL;
    l->n = 0;
}
