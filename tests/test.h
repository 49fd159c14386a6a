// test.h - the test harness: self-registering tests, checks that record file:line.
//
// KDA_TEST(name) { ... CHECK(cond); CHECK_NEAR(a, b, tol); ... } defines and registers a
// test; KDA_TEST_GPU(name) one of the GPU suite (tag KDA_TEST_TAG_GPU: it needs a device, the
// CPU suite skips it, `kda_test --gpu` / `make test-gpu` runs it). A test fails if any check fails;
// the runner prints "N passed, N failed" last and exits 1 when anything failed. Tests run from the
// repository root; test_data() builds paths under tests/data.
#ifndef KDA_TEST_H
#define KDA_TEST_H

#include <math.h>
#include <stdio.h>

typedef void (*KdaTestFn)(void);
#define KDA_TEST_TAG_GPU 1u // needs a GPU: not in the default (CPU) run
void kda_test_register(const char *name, const char *file, KdaTestFn fn, unsigned tags);
void kda_test_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int kda_test_failed(void); // has the current test failed so far?
// Path of a file under tests/data (static buffer, valid until the next call).
const char *test_data(const char *rel);
// A fresh empty temporary directory for the current test (removed after a passing run).
const char *test_tmpdir(void);
// 1 when files a and b both read and hold the same bytes, else 0 (a missing file is unequal).
int test_files_equal(const char *a, const char *b);
// Runs `ENV $KDA_BIN ARGS 2>&1` (KDA_BIN defaults to build/kda; env may be NULL) through the
// shell, the output NUL-terminated into out (truncated to cap - 1 bytes). Returns the exit
// status, -1 if the command could not run or did not exit normally.
int test_run_kda(char *out, size_t cap, const char *env, const char *args);

#define KDA_TEST_TAGGED(name, tags)                                                                \
    static void test_##name(void);                                                                 \
    __attribute__((constructor)) static void register_##name(void) {                               \
        kda_test_register(#name, __FILE__, test_##name, tags);                                     \
    }                                                                                              \
    static void test_##name(void)
#define KDA_TEST(name)     KDA_TEST_TAGGED(name, 0u)
#define KDA_TEST_GPU(name) KDA_TEST_TAGGED(name, KDA_TEST_TAG_GPU)

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) kda_test_fail(__FILE__, __LINE__, "CHECK(%s)", #cond);                        \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                       \
    do {                                                                                           \
        if (!(cond)) kda_test_fail(__FILE__, __LINE__, __VA_ARGS__);                               \
    } while (0)

// |a - b| <= tol, NaN never passes.
#define CHECK_NEAR(a, b, tol)                                                                      \
    do {                                                                                           \
        double a_ = (double)(a), b_ = (double)(b), t_ = (double)(tol);                             \
        if (!(fabs(a_ - b_) <= t_))                                                                \
            kda_test_fail(__FILE__, __LINE__, "CHECK_NEAR(%s, %s): %.9g vs %.9g (tol %g)", #a, #b, \
                          a_, b_, t_);                                                             \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                                         \
    do {                                                                                           \
        long long a_ = (long long)(a), b_ = (long long)(b);                                        \
        if (a_ != b_)                                                                              \
            kda_test_fail(__FILE__, __LINE__, "CHECK_EQ_INT(%s, %s): %lld vs %lld", #a, #b, a_,    \
                          b_);                                                                     \
    } while (0)

#endif
