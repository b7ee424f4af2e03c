/*
 * C self-test of the TH1 collectives (th1_ccl.h) under AddressSanitizer +
 * UBSan: two forked processes, each with its own simulated TH1; NCCL-style
 * calls, bfloat16, and a peer that dies.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../th1/th1_ccl.h"
#include "selftest_common.h"

static th1DevPtr_t put(const void *host, size_t n) {
    th1DevPtr_t p = 0;
    CHECK(th1MemAlloc(&p, n) == TH1_SUCCESS);
    CHECK(th1MemcpyHtoD(p, host, n) == TH1_SUCCESS);
    return p;
}

static uint16_t bf(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);  /* exact for the small integers used here */
}

static int child(int scenario, int rank, const char *key) {
    st_failures = st_checks = 0;
    CHECK(th1Init(0) == TH1_SUCCESS);
    th1CclComm_t c = NULL;
    CHECK(th1CclCommInitRank(&c, 2, key, rank, 20000) == th1CclSuccess);
    int n = 0;
    CHECK(th1CclCommCount(c, &n) == th1CclSuccess && n == 2);
    enum { N = 300 };
    float a[N], o[2 * N];
    for (int i = 0; i < N; i++) a[i] = (float)(rank * 1000 + i);
    th1DevPtr_t pa = put(a, sizeof a), po;
    CHECK(th1MemAlloc(&po, sizeof o) == TH1_SUCCESS);
    if (scenario == 0) {
        CHECK(th1CclAllReduce(pa, po, N, TH1_DATA_FLOAT, th1CclSum, c) == th1CclSuccess);
        CHECK(th1MemcpyDtoH(o, po, N * 4) == TH1_SUCCESS);
        CHECK(o[0] == 1000.0f && o[N - 1] == 1000.0f + 2.0f * (N - 1));
        CHECK(th1CclBroadcast(pa, pa, N, TH1_DATA_FLOAT, 0, c) == th1CclSuccess);
        CHECK(th1MemcpyDtoH(o, pa, N * 4) == TH1_SUCCESS);
        CHECK(o[0] == 0.0f && o[N - 1] == (float)(N - 1));
        /* in-place all-gather: this rank's block of recvbuff is the send buffer */
        float mine = (float)(rank + 7);
        for (int i = 0; i < 2 * N; i++) o[i] = -1.0f;
        for (int i = 0; i < N; i++) o[rank * N + i] = mine;
        CHECK(th1MemcpyHtoD(po, o, sizeof o) == TH1_SUCCESS);
        CHECK(th1CclAllGather(po + (th1DevPtr_t)rank * N * 4, po, N, TH1_DATA_FLOAT, c) == th1CclSuccess);
        CHECK(th1MemcpyDtoH(o, po, sizeof o) == TH1_SUCCESS);
        CHECK(o[0] == 7.0f && o[N - 1] == 7.0f && o[N] == 8.0f && o[2 * N - 1] == 8.0f);
        uint16_t h[N];
        for (int i = 0; i < N; i++) h[i] = bf((float)(rank + 1));
        th1DevPtr_t ph = put(h, sizeof h);
        CHECK(th1CclAllReduce(ph, ph, N, TH1_DATA_BFLOAT16, th1CclMin, c) == th1CclSuccess);
        CHECK(th1MemcpyDtoH(h, ph, sizeof h) == TH1_SUCCESS);
        CHECK(h[0] == bf(1.0f) && h[N - 1] == bf(1.0f));
        CHECK(th1CclAllReduce(ph, ph, N, TH1_DATA_INT32, th1CclSum, c) == th1CclInvalidUsage);
        CHECK(strstr(th1CclGetLastErrorString(), "not supported by TH1 collectives") != NULL);
        th1MemFree(ph);
    } else {
        if (rank == 1) _exit(0);
        CHECK(th1CclAllReduce(pa, pa, N, TH1_DATA_FLOAT, th1CclSum, c) == th1CclRemoteError);
        CHECK(strstr(th1CclGetLastErrorString(), "exited") != NULL);
    }
    CHECK(th1CclCommDestroy(c) == th1CclSuccess);
    th1MemFree(pa);
    th1MemFree(po);
    th1Shutdown();
    if (st_failures) fprintf(stderr, "  (scenario %d, rank %d: %s)\n", scenario, rank, th1CclGetLastErrorString());
    return st_failures;
}

int main(void) {
    setenv("TH1SIM_CCL_SLOT_BYTES", "512", 1);
    for (int s = 0; s < 2; s++) {
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
        }
    }
    REPORT("selftest_th1_ccl");
}
