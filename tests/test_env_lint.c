// test_env_lint.c - a CPU-suite check on the GPU tests' source: a test that changes a KDA_
// launch switch (setenv / unsetenv of a "KDA_..." literal) does it inside a GpuEnv stretch
// (tests/gpu_ctx.h: gpu_env_set before it, gpu_env_restore after it, in the same function).
// Why: device_plan.sh runs the GPU suite under switches (KDA_FAST_EXP=0, session 10's paths). A
// test that unsets a switch when it is done leaves every later test on the default instead of
// the switch the suite was started with, and one that assumes the switch unset compares a path
// with itself. Both happened: gpu_model_conv_qkv_bit_identical and core_keep_case_ (2026-12-04,
// docs/log/gpu-2026-12-04.md §3). Reads every tests/test_gpu_*.c as text, from the repository
// root (as `make test` runs).
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h" // defines: KDA_TEST, CHECK, CHECK_MSG

enum { LINES_MAX = 8192 };

// A line that starts a top-level function (KDA_TEST / KDA_TEST_GPU or any definition at column
// 0 ending in '{'), so a GpuEnv stretch is looked for within one function only.
static int starts_function_(const char *l) {
    if (!strncmp(l, "KDA_TEST", 8)) return 1;
    if (l[0] == ' ' || l[0] == '\t' || l[0] == '/' || l[0] == '#' || l[0] == '}' || l[0] == '\n')
        return 0;
    const char *e = l + strlen(l);
    while (e > l && (e[-1] == '\n' || e[-1] == ' '))
        e--;
    return e > l && e[-1] == '{' && strchr(l, '(') != NULL;
}

static int bare_switch_(const char *l) {
    return strstr(l, "setenv(\"KDA_") != NULL; // setenv("KDA_ and unsetenv("KDA_
}

// Bare switch changes in path outside a GpuEnv stretch: returns their count (first one's line in
// *first), or -1 when the file cannot be read or is too long for this check.
static int unguarded_(const char *path, int *first) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char kind[LINES_MAX]; // per line: 'f' function start, 'b' bare, 's' set, 'r' restore
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        if (n == LINES_MAX) {
            fclose(f);
            return -1;
        }
        kind[n++] = starts_function_(line)             ? 'f'
                    : bare_switch_(line)               ? 'b'
                    : strstr(line, "gpu_env_set(")     ? 's'
                    : strstr(line, "gpu_env_restore(") ? 'r'
                                                       : '.';
    }
    fclose(f);
    int bad = 0;
    *first = 0;
    for (int i = 0; i < n; i++) {
        if (kind[i] != 'b') continue;
        int set = 0, restore = 0;
        for (int j = i - 1; j >= 0 && kind[j] != 'f'; j--)
            set |= kind[j] == 's';
        for (int j = i + 1; j < n && kind[j] != 'f'; j++)
            restore |= kind[j] == 'r';
        if (set && restore) continue;
        if (!bad) *first = i + 1;
        bad++;
    }
    return bad;
}

KDA_TEST(tests_change_gpu_switches_inside_gpu_env) {
    DIR *d = opendir("tests");
    CHECK_MSG(d != NULL, "tests/ not readable (run from the repository root)");
    if (!d) return;
    int files = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (strncmp(e->d_name, "test_gpu_", 9) || strcmp(e->d_name + len - 2, ".c")) continue;
        char path[512];
        snprintf(path, sizeof path, "tests/%s", e->d_name);
        int first = 0, n = unguarded_(path, &first);
        files++;
        CHECK_MSG(n >= 0, "%s: not readable, or over %d lines", path, LINES_MAX);
        CHECK_MSG(
            n <= 0,
            "%s:%d: %d setenv/unsetenv of a KDA_ switch outside a GpuEnv stretch; set it with "
            "gpu_env_set and put it back with gpu_env_restore (tests/gpu_ctx.h)",
            path, first, n);
    }
    closedir(d);
    CHECK_MSG(files >= 8, "found %d tests/test_gpu_*.c files, expected the GPU tests", files);
}
