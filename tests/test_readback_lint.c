// test_readback_lint.c - a CPU-suite check on the GPU op tests' source: device outputs are read
// back through the test context's stream, never with a bare cudaMemcpy.
// Why: the kernels run on ctx->stream, created cudaStreamNonBlocking, and a bare cudaMemcpy runs
// on the legacy default stream, which does not wait for it; the copy can read an output before
// its kernel has written it. gpu_bwd_strided_outputs failed that way on the GPU (whole rows still
// holding the poison, a different count each run, 2026-12-03) while the kernels were right.
// kda_cuda_get_bytes (cuda/cuda_common.h) queues the copy on ctx->stream and synchronizes.
// Runs from the repository root (as `make test` does); reads tests/test_gpu_ops.c as text.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h" // defines: KDA_TEST, CHECK, CHECK_MSG

// Counts "cudaMemcpy(" (not cudaMemcpyAsync / 2D: those take a stream) in path's lines; *lines
// gets the first offending line number (0 if none). Returns -1 when the file cannot be read.
static int bare_memcpy_count_(const char *path, int *first_line) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[4096];
    int n = 0, no = 0;
    *first_line = 0;
    while (fgets(line, sizeof line, f)) {
        no++;
        for (const char *s = line; (s = strstr(s, "cudaMemcpy(")) != NULL; s++) {
            if (!n) *first_line = no;
            n++;
        }
    }
    fclose(f);
    return n;
}

KDA_TEST(op_tests_read_back_on_the_ctx_stream) {
    int first = 0, n = bare_memcpy_count_("tests/test_gpu_ops.c", &first);
    CHECK_MSG(n >= 0, "tests/test_gpu_ops.c not readable (run from the repository root)");
    CHECK_MSG(n == 0,
              "tests/test_gpu_ops.c:%d: %d bare cudaMemcpy call(s); read device outputs with "
              "kda_cuda_get_bytes (ordered on the test context's stream)",
              first, n);
}
