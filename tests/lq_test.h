/* lq_test.h -- minimal test harness: checks count failures and keep going; main returns
 * lq_test_end(). Exit 77 = SKIP (ctest SKIP_RETURN_CODE). */
#ifndef LQ_TEST_H
#define LQ_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int lq_test_failures_ = 0;
static int lq_test_checks_   = 0;

#define CHECK(cond)                                                                            \
    do {                                                                                       \
        lq_test_checks_++;                                                                     \
        if (!(cond)) {                                                                         \
            lq_test_failures_++;                                                               \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);           \
        }                                                                                      \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                   \
    do {                                                                                       \
        lq_test_checks_++;                                                                     \
        if (!(cond)) {                                                                         \
            lq_test_failures_++;                                                               \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);           \
            fprintf(stderr, __VA_ARGS__);                                                      \
            fputc('\n', stderr);                                                               \
        }                                                                                      \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                                     \
    do {                                                                                       \
        long long a_ = (long long)(a), b_ = (long long)(b);                                    \
        CHECK_MSG(a_ == b_, "%s = %lld, expected %lld", #a, a_, b_);                           \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                                  \
    do {                                                                                       \
        double a_ = (double)(a), b_ = (double)(b);                                             \
        CHECK_MSG(fabs(a_ - b_) <= (tol), "%s = %.9g, expected %.9g (tol %g)", #a, a_, b_,     \
                  (double)(tol));                                                              \
    } while (0)

#define CHECK_OK(expr)                                                                         \
    do {                                                                                       \
        lq_err e_  = {0};                                                                      \
        int    s_  = (int)(expr);                                                              \
        (void)e_;                                                                              \
        CHECK_MSG(s_ == 0, "%s returned %d", #expr, s_);                                       \
    } while (0)

/* Environment path or skip. */
static inline const char *lq_test_env_or_skip(const char *var) {
    const char *v = getenv(var);
    if (!v || !*v) {
        printf("SKIP: %s not set\n", var);
        exit(77);
    }
    return v;
}

static inline int lq_test_end(const char *name) {
    if (lq_test_failures_) {
        fprintf(stderr, "%s: %d of %d checks FAILED\n", name, lq_test_failures_,
                lq_test_checks_);
        return 1;
    }
    printf("%s: all %d checks passed\n", name, lq_test_checks_);
    return 0;
}

#endif
