/*
 * C self-test of the x1 collectives (x1_ccl.h) under AddressSanitizer +
 * UBSan: two forked processes, each with its own simulated X1, exchange data
 * through a communicator; error paths (dead peer, timeout, device fault,
 * mismatched calls, a rank that never joins) fail in time with a message.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../x1/x1_ccl.h"
#include "selftest_common.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static x1_devptr_t put(const void *host, size_t n) {
    x1_devptr_t p = 0;
    CHECK(x1_malloc(&p, n) == X1_SUCCESS);
    CHECK(x1_memcpy_h2d(p, host, n) == X1_SUCCESS);
    return p;
}

static void get(void *host, x1_devptr_t p, size_t n) { CHECK(x1_memcpy_d2h(host, p, n) == X1_SUCCESS); }

static uint16_t f2h(float f) {
    /* exact for the small integers used here */
    uint32_t u;
    memcpy(&u, &f, 4);
    if (f == 0) return 0;
    int e = (int)((u >> 23) & 0xff) - 127 + 15;
    return (uint16_t)(((u >> 16) & 0x8000u) | ((uint32_t)e << 10) | ((u >> 13) & 0x3ffu));
}

static void basic(x1_ccl_comm_t c, int rank) {
    enum { N = 1000 };  /* > one 256-byte slot: several chunks */
    float a[N], o[N], g[2 * N];
    for (int i = 0; i < N; i++) a[i] = (float)(rank + 1) * (float)(i % 7);
    x1_devptr_t pa = put(a, sizeof a), po;
    CHECK(x1_malloc(&po, sizeof o) == X1_SUCCESS);

    CHECK(x1_ccl_all_reduce(c, pa, po, N, X1_FLOAT32, X1_CCL_SUM) == X1_CCL_SUCCESS);
    get(o, po, sizeof o);
    int ok = 1;
    for (int i = 0; i < N; i++) ok &= o[i] == 3.0f * (float)(i % 7);
    CHECK(ok);
    CHECK(x1_ccl_all_reduce(c, pa, pa, N, X1_FLOAT32, X1_CCL_MAX) == X1_CCL_SUCCESS);  /* in place */
    get(o, pa, sizeof o);
    ok = 1;
    for (int i = 0; i < N; i++) ok &= o[i] == 2.0f * (float)(i % 7);
    CHECK(ok);

    uint16_t h[N], ho[N];
    for (int i = 0; i < N; i++) h[i] = f2h((float)(rank + 1));
    x1_devptr_t ph = put(h, sizeof h);
    CHECK(x1_ccl_all_reduce(c, ph, ph, N, X1_FLOAT16, X1_CCL_PROD) == X1_CCL_SUCCESS);
    get(ho, ph, sizeof ho);
    CHECK(ho[0] == f2h(2.0f) && ho[N - 1] == f2h(2.0f));

    for (int i = 0; i < N; i++) a[i] = (float)(rank * 1000 + i);
    CHECK(x1_memcpy_h2d(pa, a, sizeof a) == X1_SUCCESS);
    CHECK(x1_ccl_broadcast(c, 1, pa, po, N, X1_FLOAT32) == X1_CCL_SUCCESS);
    get(o, po, sizeof o);
    CHECK(o[0] == 1000.0f && o[N - 1] == 1999.0f);

    x1_devptr_t pg;
    CHECK(x1_malloc(&pg, sizeof g) == X1_SUCCESS);
    CHECK(x1_ccl_all_gather(c, pa, pg, N, X1_FLOAT32) == X1_CCL_SUCCESS);
    get(g, pg, sizeof g);
    CHECK(g[0] == 0.0f && g[N - 1] == 999.0f && g[N] == 1000.0f && g[2 * N - 1] == 1999.0f);
    CHECK(x1_ccl_all_reduce(c, pa, po, 0, X1_FLOAT32, X1_CCL_SUM) == X1_CCL_SUCCESS);

    /* rejected before any peer is involved */
    CHECK(x1_ccl_all_reduce(c, pa, po, N, X1_INT32, X1_CCL_SUM) == X1_CCL_ERR_UNSUPPORTED);
    CHECK(strstr(x1_ccl_get_last_error(), "float32, float16") != NULL);
    CHECK(x1_ccl_broadcast(c, 2, pa, po, N, X1_FLOAT32) == X1_CCL_ERR_INVALID_VALUE);
    CHECK(x1_ccl_all_reduce(c, pa + (1u << 20), po, N, X1_FLOAT32, X1_CCL_SUM) == X1_CCL_ERR_INVALID_VALUE);
    int32_t r = -1, n = -1;
    CHECK(x1_ccl_comm_rank(c, &r, &n) == X1_CCL_SUCCESS && r == rank && n == 2);

    /* ranks that disagree about the call both fail, and say what each called */
    x1_ccl_status_t st = rank == 0 ? x1_ccl_all_reduce(c, pa, po, N, X1_FLOAT32, X1_CCL_SUM)
                                   : x1_ccl_broadcast(c, 0, pa, po, N, X1_FLOAT32);
    CHECK(st == X1_CCL_ERR_INVALID_VALUE);
    CHECK(strstr(x1_ccl_get_last_error(), "mismatched collectives") != NULL);
    CHECK(x1_ccl_all_reduce(c, pa, po, N, X1_FLOAT32, X1_CCL_SUM) == X1_CCL_ERR_PEER);  /* broken now */
    x1_free(pa);
    x1_free(po);
    x1_free(ph);
    x1_free(pg);
}

enum { BASIC, DEAD_PEER, TIMEOUT, FAULT, NEVER_JOINS, SCENARIOS };
static const char *const NAMES[] = {"basic", "dead peer", "timeout", "device fault", "never joins"};

static int child(int scenario, int rank, const char *key) {
    st_failures = st_checks = 0;  /* the parent's counts are not this child's */
    if (scenario == FAULT && rank == 1) setenv("X1SIM_FAULTS", "ccl_all_reduce:1", 1);
    CHECK(x1_init(0) == X1_SUCCESS);
    if (scenario == NEVER_JOINS && rank == 1) {
        x1_shutdown();
        return st_failures;
    }
    x1_ccl_comm_t c = NULL;
    int timeout = scenario == TIMEOUT || scenario == NEVER_JOINS ? 300 : 20000;
    x1_ccl_status_t st = x1_ccl_comm_init(&c, key, 2, rank, timeout);
    if (scenario == NEVER_JOINS) {
        CHECK(st == X1_CCL_ERR_TIMEOUT && c == NULL);
        CHECK(strstr(x1_ccl_get_last_error(), "1 of 2 ranks arrived") != NULL);
        x1_shutdown();
        return st_failures;
    }
    CHECK(st == X1_CCL_SUCCESS);
    float v[4] = {1, 2, 3, 4};
    x1_devptr_t p = put(v, sizeof v);
    double t0 = now_s();
    switch (scenario) {
        case BASIC:
            basic(c, rank);
            break;
        case DEAD_PEER:
            if (rank == 1) _exit(0);  /* dies without a word */
            st = x1_ccl_all_reduce(c, p, p, 4, X1_FLOAT32, X1_CCL_SUM);
            CHECK(st == X1_CCL_ERR_PEER);
            CHECK(strstr(x1_ccl_get_last_error(), "rank 1") && strstr(x1_ccl_get_last_error(), "exited"));
            CHECK(now_s() - t0 < 5.0);  /* noticed at once, not after the 20 s timeout */
            break;
        case TIMEOUT:
            if (rank == 1) {
                struct timespec ts = {1, 0};
                nanosleep(&ts, NULL);
            }
            st = x1_ccl_all_reduce(c, p, p, 4, X1_FLOAT32, X1_CCL_SUM);
            /* rank 0 times out; rank 1, arriving late, learns that rank 0 gave up */
            CHECK(st == (rank == 0 ? X1_CCL_ERR_TIMEOUT : X1_CCL_ERR_PEER));
            CHECK(strstr(x1_ccl_get_last_error(), rank == 0 ? "timed out after 300 ms" : "rank 0 failed"));
            break;
        case FAULT:
            st = x1_ccl_all_reduce(c, p, p, 4, X1_FLOAT32, X1_CCL_SUM);
            CHECK(st == (rank == 1 ? X1_CCL_ERR_DEVICE : X1_CCL_ERR_PEER));
            if (rank == 0) CHECK(strstr(x1_ccl_get_last_error(), "device fault in ccl_all_reduce"));
            CHECK(now_s() - t0 < 5.0);
            break;
        default:
            break;
    }
    CHECK(x1_ccl_comm_destroy(c) == X1_CCL_SUCCESS);
    x1_free(p);
    x1_shutdown();
    if (st_failures) fprintf(stderr, "  (%s, rank %d: last error: %s)\n", NAMES[scenario], rank,
                             x1_ccl_get_last_error());
    return st_failures;
}

int main(void) {
    setenv("X1SIM_CCL_SLOT_BYTES", "256", 1);
    for (int s = 0; s < SCENARIOS; s++) {
        char key[64];
        snprintf(key, sizeof key, "selftest-%d-%d", (int)getpid(), s);
        pid_t pids[2];
        for (int rank = 0; rank < 2; rank++) {
            pids[rank] = fork();
            if (pids[rank] == 0) exit(child(s, rank, key) ? 1 : 0);
        }
        for (int rank = 0; rank < 2; rank++) {
            int status = 0;
            CHECK(waitpid(pids[rank], &status, 0) == pids[rank]);
            CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
            if (!WIFEXITED(status) || WEXITSTATUS(status))
                fprintf(stderr, "scenario '%s': rank %d failed (status %d)\n", NAMES[s], rank, status);
        }
    }
    char path[96];
    snprintf(path, sizeof path, "/dev/shm/flsim-ccl-x1v2-selftest-%d-0", (int)getpid());
    CHECK(access(path, F_OK) != 0);  /* nothing left behind */
    REPORT("selftest_x1_ccl");
}
