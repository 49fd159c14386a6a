// test_main.c - the test runner: runs every CPU test, or the GPU suite (--gpu), or the tests
// whose name or file contains one of the arguments, and prints "N passed, N failed".
//   kda_test [--gpu] [FILTER...]     kda_test --list (name, file, tags)
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/util.h"
#include "test.h"

typedef struct {
    const char *name, *file;
    KdaTestFn fn;
    unsigned tags; // KDA_TEST_TAG_*
} TestCase;

static TestCase g_tests[1024];
static int g_n_tests;
static int g_current_failed;
static char g_tmpdir[256];

void kda_test_register(const char *name, const char *file, KdaTestFn fn, unsigned tags) {
    if (g_n_tests < (int)(sizeof g_tests / sizeof *g_tests))
        g_tests[g_n_tests++] = (TestCase){name, file, fn, tags};
}

void kda_test_fail(const char *file, int line, const char *fmt, ...) {
    if (g_current_failed < 20) {
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "    %s:%d: ", file, line);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        va_end(ap);
    }
    g_current_failed++;
}

int kda_test_failed(void) {
    return g_current_failed > 0;
}

const char *test_data(const char *rel) {
    static char buf[4096];
    const char *root = getenv("KDA_TEST_DATA");
    snprintf(buf, sizeof buf, "%s/%s", root ? root : "tests/data", rel);
    return buf;
}

const char *test_tmpdir(void) {
    if (!g_tmpdir[0]) {
        snprintf(g_tmpdir, sizeof g_tmpdir, "/tmp/kda_test.XXXXXX");
        if (!mkdtemp(g_tmpdir)) {
            perror("mkdtemp");
            exit(1);
        }
    }
    return g_tmpdir;
}

static int by_file_then_order(const void *a, const void *b) {
    const TestCase *x = a, *y = b;
    int c = strcmp(x->file, y->file);
    return c ? c : (x < y ? -1 : x > y);
}

int test_run_kda(char *out, size_t cap, const char *env, const char *args) {
    const char *bin = getenv("KDA_BIN") ? getenv("KDA_BIN") : "build/kda";
    size_t len = (env ? strlen(env) : 0) + strlen(bin) + strlen(args) + 16;
    char *cmd = malloc(len);
    if (!cmd) return -1;
    snprintf(cmd, len, "%s%s%s %s 2>&1", env ? env : "", env ? " " : "", bin, args);
    FILE *p = popen(cmd, "r");
    free(cmd);
    if (!p) return -1;
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int test_files_equal(const char *a, const char *b) {
    KdaError e;
    size_t na, nb;
    char *x = read_file(a, &na, &e), *y = read_file(b, &nb, &e);
    int eq = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x), free(y);
    return eq;
}

// Without filters: the CPU suite (every test not tagged GPU), or with --gpu the GPU suite (it
// needs a device; `make test-gpu`). Filters pick by name or file among the tests of any tag
// (--gpu: among the GPU suite).
static int selected(const TestCase *t, int gpu, int argc, char **argv) {
    int is_gpu = (t->tags & KDA_TEST_TAG_GPU) != 0;
    if (gpu && !is_gpu) return 0;
    if (argc <= 1) return gpu || !is_gpu;
    for (int i = 1; i < argc; i++)
        if (strstr(t->name, argv[i]) || strstr(t->file, argv[i])) return 1;
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--list")) {
        for (int i = 0; i < g_n_tests; i++)
            printf("%s (%s)%s\n", g_tests[i].name, g_tests[i].file,
                   g_tests[i].tags & KDA_TEST_TAG_GPU ? " [gpu]" : "");
        return 0;
    }
    int gpu = argc > 1 && !strcmp(argv[1], "--gpu");
    if (gpu) argv[1] = argv[0], argc--, argv++; // the filters follow
    qsort(g_tests, (size_t)g_n_tests, sizeof *g_tests, by_file_then_order);
    int passed = 0, failed = 0;
    for (int i = 0; i < g_n_tests; i++) {
        if (!selected(&g_tests[i], gpu, argc, argv)) continue;
        g_current_failed = 0;
        g_tmpdir[0] = 0;
        double t0 = now_seconds();
        // A GPU test must say so with KDA_TEST_GPU: the name no longer selects the suite, so a
        // plain KDA_TEST named gpu_* (the old convention) fails here instead of running on the CPU.
        if (!strncmp(g_tests[i].name, "gpu_", 4) && !(g_tests[i].tags & KDA_TEST_TAG_GPU))
            kda_test_fail(g_tests[i].file, 0,
                          "named gpu_* but registered with KDA_TEST, not "
                          "KDA_TEST_GPU");
        else
            g_tests[i].fn();
        double dt = now_seconds() - t0;
        if (g_current_failed) {
            failed++;
            printf("FAIL %-48s %7.2fs  (%d failed checks; temp dir %s)\n", g_tests[i].name, dt,
                   g_current_failed, g_tmpdir[0] ? g_tmpdir : "-");
        } else {
            passed++;
            printf("ok   %-48s %7.2fs\n", g_tests[i].name, dt);
            if (g_tmpdir[0]) {
                char cmd[300];
                snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmpdir);
                if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_tmpdir);
            }
        }
        fflush(stdout);
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
