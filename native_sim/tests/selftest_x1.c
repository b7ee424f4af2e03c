/*
 * C self-test of the x1 runtime, built with the sources and run under
 * AddressSanitizer + UBSan (python native_sim/build.py --sanitize-test).
 * It calls every function of x1_runtime.h, on success and error paths, from
 * several threads, and ends with everything freed, so a leak, an overrun or
 * undefined behaviour anywhere in the simulator fails the run.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdint.h>

#include "../x1/x1_runtime.h"
#include "selftest_common.h"

static x1_devptr_t put(const void *host, size_t n) {
    x1_devptr_t p = 0;
    CHECK(x1_malloc(&p, n) == X1_SUCCESS);
    CHECK(x1_memcpy_h2d(p, host, n) == X1_SUCCESS);
    return p;
}

static x1_tensor_t desc(x1_devptr_t p, int ndim, const int64_t *shape, x1_dtype_t dt) {
    x1_tensor_t t;
    memset(&t, 0, sizeof t);
    t.data = p;
    t.ndim = ndim;
    t.dtype = dt;
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        t.shape[i] = shape[i];
        t.strides[i] = s;
        s *= shape[i];
    }
    return t;
}

static void *worker(void *arg) {
    (void)arg;
    float buf[64];
    for (int i = 0; i < 64; i++) buf[i] = (float)i;
    for (int i = 0; i < 200; i++) {
        x1_devptr_t p;
        if (x1_malloc(&p, sizeof buf) != X1_SUCCESS) continue;
        x1_memcpy_h2d(p, buf, sizeof buf);
        x1_counters_t c;
        x1_get_counters(&c);
        x1_free(p);
    }
    return NULL;
}

int main(void) {
    CHECK(x1_malloc(&(x1_devptr_t){0}, 16) == X1_ERR_NOT_INITIALIZED);
    CHECK(x1_init(1 << 24) == X1_SUCCESS);
    CHECK(x1_init(1 << 24) == X1_SUCCESS); /* idempotent */
    CHECK(strcmp(x1_status_string(X1_ERR_DEVICE), "X1_ERR_DEVICE") == 0);
    CHECK(x1_synchronize() == X1_SUCCESS);

    uint64_t freeb, total;
    CHECK(x1_mem_get_info(&freeb, &total) == X1_SUCCESS && total == (1u << 24));

    /* elementwise on every unary/binary entry point */
    float a[12], b[12], o[12];
    for (int i = 0; i < 12; i++) {
        a[i] = (float)(i + 1) * 0.25f;
        b[i] = 2.0f;
    }
    int64_t sh[2] = {3, 4};
    x1_devptr_t pa = put(a, sizeof a), pb = put(b, sizeof b), po;
    CHECK(x1_malloc(&po, sizeof o) == X1_SUCCESS);
    x1_tensor_t ta = desc(pa, 2, sh, X1_FLOAT32), tb = desc(pb, 2, sh, X1_FLOAT32),
                to = desc(po, 2, sh, X1_FLOAT32);
    CHECK(x1_add(&ta, &tb, 2.0, &to) == X1_SUCCESS);
    CHECK(x1_memcpy_d2h(o, po, sizeof o) == X1_SUCCESS);
    CHECK_NEAR(o[3], a[3] + 4.0f, 1e-6);
    CHECK(x1_sub(&ta, &tb, 1.0, &to) == X1_SUCCESS);
    CHECK(x1_mul(&ta, &tb, &to) == X1_SUCCESS);
    CHECK(x1_div(&ta, &tb, &to) == X1_SUCCESS);
    x1_memcpy_d2h(o, po, sizeof o);
    CHECK_NEAR(o[5], a[5] / 2.0f, 1e-6);
    CHECK(x1_relu(&ta, &to) == X1_SUCCESS);
    CHECK(x1_gelu(&ta, "tanh", &to) == X1_SUCCESS);
    CHECK(x1_gelu(&ta, "bogus", &to) == X1_ERR_INVALID_VALUE);
    CHECK(x1_sigmoid(&ta, &to) == X1_SUCCESS);
    CHECK(x1_tanh(&ta, &to) == X1_SUCCESS);
    CHECK(x1_exp(&ta, &to) == X1_SUCCESS);
    CHECK(x1_neg(&ta, &to) == X1_SUCCESS);
    CHECK(x1_sqrt(&ta, &to) == X1_SUCCESS);
    CHECK(x1_rsqrt(&ta, &to) == X1_SUCCESS);
    x1_memcpy_d2h(o, po, sizeof o);
    CHECK_NEAR(o[0], 2.0f, 1e-5); /* rsqrt(0.25) */

    /* matrix */
    int64_t sk[2] = {4, 3}, so[2] = {3, 3};
    x1_devptr_t pm, pmo;
    float m[12];
    for (int i = 0; i < 12; i++) m[i] = 1.0f;
    pm = put(m, sizeof m);
    CHECK(x1_malloc(&pmo, 9 * 4) == X1_SUCCESS);
    x1_tensor_t tm = desc(pm, 2, sk, X1_FLOAT32), tmo = desc(pmo, 2, so, X1_FLOAT32);
    CHECK(x1_mm(&ta, &tm, &tmo) == X1_SUCCESS);
    CHECK(x1_addmm(&tmo, &ta, &tm, 1.0, 1.0, &tmo) == X1_SUCCESS);
    CHECK(x1_mm(&ta, &ta, &tmo) == X1_ERR_INVALID_VALUE);
    int64_t s3[3] = {1, 3, 4}, s3k[3] = {1, 4, 3}, s3o[3] = {1, 3, 3};
    x1_tensor_t t3a = desc(pa, 3, s3, X1_FLOAT32), t3m = desc(pm, 3, s3k, X1_FLOAT32),
                t3o = desc(pmo, 3, s3o, X1_FLOAT32);
    CHECK(x1_bmm(&t3a, &t3m, &t3o) == X1_SUCCESS);

    /* int8 GEMM */
    int8_t q[12];
    for (int i = 0; i < 12; i++) q[i] = (int8_t)(i * 20 - 120);
    x1_devptr_t pq = put(q, sizeof q), pu, pu2, pi;
    CHECK(x1_malloc(&pu, 12) == X1_SUCCESS && x1_malloc(&pu2, 12) == X1_SUCCESS);
    CHECK(x1_malloc(&pi, 9 * 4) == X1_SUCCESS);
    x1_tensor_t tq = desc(pq, 2, sh, X1_INT8), tu = desc(pu, 2, sh, X1_UINT8);
    x1_tensor_t tq2 = desc(pq, 2, sk, X1_INT8), tu2 = desc(pu2, 2, sk, X1_UINT8);
    x1_tensor_t ti = desc(pi, 2, so, X1_INT32);
    CHECK(x1_s8_to_u8(&tq, &tu) == X1_SUCCESS);
    CHECK(x1_s8_to_u8(&tq2, &tu2) == X1_SUCCESS);
    CHECK(x1_gemm_u8(&tu, &tu2, &ti) == X1_SUCCESS);
    CHECK(x1_gemm_u8(&tq, &tq2, &ti) == X1_ERR_UNSUPPORTED);

    /* conv + pools (NHWC) */
    float img[1 * 4 * 4 * 2], wt[2 * 3 * 3 * 2], bias[2] = {0.5f, -0.5f};
    for (int i = 0; i < 32; i++) img[i] = (float)(i % 7) - 3.0f;
    for (int i = 0; i < 36; i++) wt[i] = 0.1f * (float)(i % 5);
    int64_t si[4] = {1, 4, 4, 2}, sw[4] = {2, 3, 3, 2}, sp[4] = {1, 2, 2, 2};
    x1_devptr_t pimg = put(img, sizeof img), pw = put(wt, sizeof wt), pbias = put(bias, sizeof bias);
    x1_devptr_t pc, pp, pidx;
    CHECK(x1_malloc(&pc, sizeof img) == X1_SUCCESS);
    CHECK(x1_malloc(&pp, 8 * 4) == X1_SUCCESS && x1_malloc(&pidx, 8 * 8) == X1_SUCCESS);
    x1_tensor_t timg = desc(pimg, 4, si, X1_FLOAT32), tw = desc(pw, 4, sw, X1_FLOAT32);
    int64_t sb[1] = {2};
    x1_tensor_t tbias = desc(pbias, 1, sb, X1_FLOAT32), tc = desc(pc, 4, si, X1_FLOAT32);
    x1_tensor_t tp = desc(pp, 4, sp, X1_FLOAT32), tidx = desc(pidx, 4, sp, X1_INT64);
    int64_t one[2] = {1, 1}, two[2] = {2, 2}, zero[2] = {0, 0}, three[2] = {3, 3};
    CHECK(x1_conv2d(&timg, &tw, &tbias, one, one, one, 1, &tc) == X1_SUCCESS);
    CHECK(x1_conv2d(&timg, &tw, NULL, one, one, one, 1, &tc) == X1_SUCCESS);
    CHECK(x1_conv2d(&timg, &tw, NULL, three, one, one, 1, &tc) == X1_ERR_UNSUPPORTED);
    CHECK(x1_max_pool2d(&timg, two, NULL, 0, zero, one, false, &tp, &tidx) == X1_SUCCESS);
    CHECK(x1_max_pool2d(&timg, two, two, 2, zero, one, false, &tp, NULL) == X1_SUCCESS);
    CHECK(x1_avg_pool2d(&timg, two, two, 2, zero, false, true, 0, &tp) == X1_SUCCESS);
    CHECK(x1_adaptive_avg_pool2d(&timg, two, &tp) == X1_SUCCESS);

    /* norm / reduce / misc */
    float ch[2] = {1.0f, 2.0f};
    x1_devptr_t pch = put(ch, sizeof ch);
    x1_tensor_t tch = desc(pch, 1, sb, X1_FLOAT32);
    int64_t sbn[4] = {1, 2, 4, 4}; /* NCHW view of the same 32 floats */
    x1_tensor_t tbn = desc(pimg, 4, sbn, X1_FLOAT32), tbo = desc(pc, 4, sbn, X1_FLOAT32);
    CHECK(x1_batch_norm(&tbn, &tch, NULL, &tch, &tch, 1e-5, &tbo) == X1_SUCCESS);
    int64_t ns[1] = {4}, sms[2] = {3, 1};
    x1_devptr_t pmean, prstd;
    CHECK(x1_malloc(&pmean, 12) == X1_SUCCESS && x1_malloc(&prstd, 12) == X1_SUCCESS);
    x1_tensor_t tmean = desc(pmean, 2, sms, X1_FLOAT32), trstd = desc(prstd, 2, sms, X1_FLOAT32);
    CHECK(x1_layer_norm(&ta, ns, 1, NULL, NULL, 1e-5, &to, &tmean, &trstd) == X1_SUCCESS);
    int64_t d1[1] = {1}, s1[1] = {3};
    x1_tensor_t tred = desc(pmean, 1, s1, X1_FLOAT32);
    CHECK(x1_sum(&ta, d1, 1, false, &tred) == X1_SUCCESS);
    CHECK(x1_mean(&ta, d1, 1, true, &tmean) == X1_SUCCESS);
    int64_t idx[3] = {0, 2, 1};
    x1_devptr_t pix = put(idx, sizeof idx);
    int64_t six[1] = {3};
    x1_tensor_t tix = desc(pix, 1, six, X1_INT64), tw3 = desc(pa, 2, sh, X1_FLOAT32);
    int64_t seo[2] = {3, 4};
    x1_tensor_t teo = desc(po, 2, seo, X1_FLOAT32);
    CHECK(x1_embedding(&tw3, &tix, &teo) == X1_SUCCESS);
    int64_t bad = 7;
    x1_memcpy_h2d(pix, &bad, 8);
    CHECK(x1_embedding(&tw3, &tix, &teo) == X1_ERR_DATA);
    x1_tensor_t th16 = desc(pc, 2, sh, X1_FLOAT16);
    CHECK(x1_copy(&ta, &th16) == X1_SUCCESS);
    CHECK(x1_copy(&th16, &to) == X1_SUCCESS);
    CHECK(x1_fill(&to, 1.5) == X1_SUCCESS);
    CHECK(custom_softmax_x1(&ta, 1, &to) == X1_SUCCESS);
    x1_memcpy_d2h(o, po, sizeof o);
    CHECK_NEAR(o[0] + o[1] + o[2] + o[3], 1.0, 1e-5);

    /* bad addresses, batch, map, faults, counters */
    CHECK(x1_memcpy_d2d(po, pa, sizeof a) == X1_SUCCESS);
    CHECK(x1_memcpy_h2d(0x42, a, 4) == X1_ERR_INVALID_ADDRESS);
    CHECK(strstr(x1_get_last_error(), "not in any live allocation") != NULL);
    const void *srcs[2] = {a, b};
    x1_devptr_t dsts[2] = {pa, pb};
    size_t ns2[2] = {sizeof a, sizeof b};
    CHECK(x1_memcpy_h2d_batch(dsts, srcs, ns2, 2) == X1_SUCCESS);
    float *host = aligned_alloc(64, 256);
    memset(host, 0, 256);
    x1_devptr_t mapped;
    CHECK(x1_mem_map(host, 256, &mapped) == X1_SUCCESS);
    int64_t s64[1] = {64};
    x1_tensor_t tmap = desc(mapped, 1, s64, X1_FLOAT32);
    CHECK(x1_fill(&tmap, 3.0) == X1_SUCCESS);
    CHECK(host[63] == 3.0f);
    CHECK(x1_mem_unmap(mapped) == X1_SUCCESS);
    free(host);
    CHECK(x1_debug_set_faults("fill:1") == X1_SUCCESS);
    CHECK(x1_fill(&to, 0.0) == X1_ERR_DEVICE);
    CHECK(x1_debug_set_faults("") == X1_SUCCESS);
    x1_kernel_counter_t kc[64];
    int32_t nk = 0;
    CHECK(x1_get_kernel_counters(kc, 64, &nk) == X1_SUCCESS && nk > 10);
    CHECK(x1_reset_counters() == X1_SUCCESS);
    x1_counters_t c;
    CHECK(x1_get_counters(&c) == X1_SUCCESS && c.kernel_launches == 0 && c.live_bytes > 0);

    /* the allocator under contention */
    pthread_t th[8];
    for (int i = 0; i < 8; i++) pthread_create(&th[i], NULL, worker, NULL);
    for (int i = 0; i < 8; i++) pthread_join(th[i], NULL);
    CHECK(x1_get_counters(&c) == X1_SUCCESS && c.alloc_calls == 1600 && c.free_calls == 1600);

    /* OOM leaves things unchanged; shutdown frees everything still live */
    x1_devptr_t big;
    CHECK(x1_malloc(&big, (size_t)1 << 30) == X1_ERR_OUT_OF_MEMORY);
    x1_free(pa);
    CHECK(x1_free(pa) == X1_ERR_INVALID_ADDRESS);
    CHECK(x1_shutdown() == X1_SUCCESS);
    REPORT("selftest_x1");
}
