/* Tiny assertion helpers for the C self-tests (run under ASan + UBSan). */
#ifndef SELFTEST_COMMON_H
#define SELFTEST_COMMON_H
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int st_failures = 0, st_checks = 0;
#define CHECK(cond)                                                              \
    do {                                                                         \
        st_checks++;                                                             \
        if (!(cond)) {                                                           \
            st_failures++;                                                       \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                        \
    } while (0)
#define CHECK_NEAR(a, b, tol) CHECK(fabs((double)(a) - (double)(b)) <= (tol))
#define REPORT(name)                                                             \
    do {                                                                         \
        printf("%s: %d checks, %d failures\n", name, st_checks, st_failures);    \
        return st_failures ? 1 : 0;                                              \
    } while (0)
#endif
