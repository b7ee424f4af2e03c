/*
 * C self-test of the th1 runtime under AddressSanitizer + UBSan: every
 * function of th1_runtime.h, error paths, threads, clean shutdown.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdint.h>

#include "../th1/th1_runtime.h"
#include "selftest_common.h"

static th1DevPtr_t put(const void *host, size_t n) {
    th1DevPtr_t p = 0;
    CHECK(th1MemAlloc(&p, n) == TH1_SUCCESS);
    CHECK(th1MemcpyHtoD(p, host, n) == TH1_SUCCESS);
    return p;
}

static th1TensorDesc_t desc(th1DevPtr_t p, int nd, const int64_t *dims, th1DataType_t dt) {
    th1TensorDesc_t t;
    memset(&t, 0, sizeof t);
    t.ptr = p;
    t.nbDims = nd;
    t.dataType = dt;
    int64_t s = 1;
    for (int i = nd - 1; i >= 0; i--) {
        t.dims[i] = dims[i];
        t.strides[i] = s;
        s *= dims[i];
    }
    return t;
}

static void *worker(void *arg) {
    (void)arg;
    for (int i = 0; i < 200; i++) {
        th1DevPtr_t p;
        if (th1MemAlloc(&p, 512) == TH1_SUCCESS) th1MemFree(p);
        th1Stats_t s;
        th1GetStats(&s);
    }
    return NULL;
}

int main(void) {
    CHECK(th1DeviceSynchronize() == TH1_ERROR_NOT_INITIALIZED);
    CHECK(th1Init(0) == TH1_SUCCESS);
    size_t fr, tot;
    CHECK(th1MemGetInfo(&fr, &tot) == TH1_SUCCESS && tot == (size_t)16 << 30);
    CHECK(th1DeviceSynchronize() == TH1_SUCCESS);

    enum { N = 16 * 16 };
    float *a = malloc(N * 4), *o = malloc(N * 4);
    for (int i = 0; i < N; i++) a[i] = (float)(i % 13) * 0.1f - 0.5f;
    int64_t sq[2] = {16, 16};
    th1DevPtr_t pa = put(a, N * 4), po, pm, pr;
    CHECK(th1MemAlloc(&po, N * 4) == TH1_SUCCESS);
    th1TensorDesc_t ta = desc(pa, 2, sq, TH1_DATA_FLOAT), to = desc(po, 2, sq, TH1_DATA_FLOAT);
    CHECK(th1Add(&ta, &ta, 0.5f, &to) == TH1_SUCCESS);
    CHECK(th1Mul(&ta, &ta, &to) == TH1_SUCCESS);
    CHECK(th1Relu(&ta, &to) == TH1_SUCCESS);
    CHECK(th1Gelu(&ta, 0, &to) == TH1_SUCCESS);
    CHECK(th1Gelu(&ta, 1, &to) == TH1_SUCCESS);
    CHECK(th1Matmul(&ta, &ta, &to) == TH1_SUCCESS);
    CHECK(th1Addmm(&to, &ta, &ta, 1.0f, 1.0f, &to) == TH1_SUCCESS);
    int64_t bad[2] = {15, 16};
    th1TensorDesc_t tbad = desc(pa, 2, bad, TH1_DATA_FLOAT);
    CHECK(th1Matmul(&tbad, &ta, &to) == TH1_ERROR_NOT_SUPPORTED);
    int64_t sst[2] = {16, 1};
    CHECK(th1MemAlloc(&pm, 64) == TH1_SUCCESS && th1MemAlloc(&pr, 64) == TH1_SUCCESS);
    th1TensorDesc_t tm = desc(pm, 2, sst, TH1_DATA_FLOAT), tr = desc(pr, 2, sst, TH1_DATA_FLOAT);
    CHECK(th1LayerNorm(&ta, 1, NULL, NULL, 1e-5f, &to, &tm, &tr) == TH1_SUCCESS);
    CHECK(th1Softmax(&ta, 1, 0, &to) == TH1_SUCCESS);
    CHECK(th1Softmax(&ta, 1, TH1_SOFTMAX_SAFE, &to) == TH1_SUCCESS);
    CHECK(th1Softmax(&ta, 1, 4, &to) == TH1_ERROR_INVALID_ARGUMENT);
    CHECK(th1MemcpyDtoH(o, po, N * 4) == TH1_SUCCESS);
    double s = 0;
    for (int i = 0; i < 16; i++) s += o[i];
    CHECK_NEAR(s, 1.0, 1e-5);
    th1TensorDesc_t tbf = desc(pm, 1, (int64_t[]){16}, TH1_DATA_BFLOAT16);
    th1TensorDesc_t trow = desc(pa, 1, (int64_t[]){16}, TH1_DATA_FLOAT);
    CHECK(th1Copy(&trow, &tbf) == TH1_SUCCESS);
    CHECK(th1Fill(&tbf, 2.0) == TH1_SUCCESS);
    CHECK(th1MemcpyDtoD(po, pa, N * 4) == TH1_SUCCESS);
    const void *srcs[1] = {a};
    th1DevPtr_t dsts[1] = {pa};
    size_t sizes[1] = {N * 4};
    CHECK(th1MemcpyHtoDBatch(dsts, srcs, sizes, 1) == TH1_SUCCESS);
    CHECK(th1MemcpyHtoD(12345, a, 4) == TH1_ERROR_ILLEGAL_ADDRESS);
    CHECK(strstr(th1GetLastErrorString(), "th1MemcpyHtoD") != NULL);
    CHECK(th1DebugInjectFaults("softmax:1") == TH1_SUCCESS);
    CHECK(th1Softmax(&ta, 1, 0, &to) == TH1_ERROR_HARDWARE);
    CHECK(th1DebugInjectFaults("") == TH1_SUCCESS);
    th1KernelStat_t ks[32];
    int nk = 0;
    CHECK(th1GetKernelStats(ks, 32, &nk) == TH1_SUCCESS && nk >= 8);
    CHECK(th1ResetStats() == TH1_SUCCESS);

    pthread_t th[6];
    for (int i = 0; i < 6; i++) pthread_create(&th[i], NULL, worker, NULL);
    for (int i = 0; i < 6; i++) pthread_join(th[i], NULL);
    th1Stats_t st;
    CHECK(th1GetStats(&st) == TH1_SUCCESS && st.allocCalls == 1200 && st.freeCalls == 1200);

    CHECK(th1MemFree(pa) == TH1_SUCCESS);
    CHECK(th1MemFree(pa) == TH1_ERROR_ILLEGAL_ADDRESS);
    free(a);
    free(o);
    CHECK(th1Shutdown() == TH1_SUCCESS);
    REPORT("selftest_th1");
}
