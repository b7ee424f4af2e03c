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
#include "../common/simkernels.h" /* sim_philox4x32_10: the generator's known answer */
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


/* ------------------------------------------------- training kernels */

#define F X1_FLOAT32
static x1_devptr_t dev_alloc(size_t n) {
    x1_devptr_t p = 0;
    CHECK(x1_malloc(&p, n) == X1_SUCCESS);
    return p;
}
static void get(void *host, x1_devptr_t p, size_t n) { CHECK(x1_memcpy_d2h(host, p, n) == X1_SUCCESS); }

/* Every kernel added for training and transformer inference, on values
 * whose results are known, and the rejections strict mode turns into aborts. */
static void training_kernels(void) {
    float x[8] = {-2, -1, -0.5f, 0, 0.5f, 1, 2, 3}, y[8] = {1, 2, 3, 4, 5, 6, 7, 8}, r[8];
    int64_t d8[1] = {8}, d24[2] = {2, 4}, d2[1] = {2}, d0[1] = {0};
    x1_devptr_t px = put(x, 32), py = put(y, 32), po = dev_alloc(32), pb = dev_alloc(8), pb2 = dev_alloc(8);
    x1_tensor_t tx = desc(px, 1, d8, F), ty = desc(py, 1, d8, F), to = desc(po, 1, d8, F);
    x1_tensor_t tb = desc(pb, 1, d8, X1_BOOL), tb2 = desc(pb2, 1, d8, X1_BOOL);

    /* arithmetic, comparisons, logic */
    CHECK(x1_pow(&ty, &ty, &to) == X1_SUCCESS);
    get(r, po, 32);
    CHECK(r[2] == 27.0f);
    CHECK(x1_pow_scalar(&ty, 2.0, &to) == X1_SUCCESS);
    get(r, po, 32);
    CHECK(r[7] == 64.0f);
    CHECK(x1_scalar_pow(2.0, &ty, &to) == X1_SUCCESS);
    get(r, po, 32);
    CHECK(r[2] == 8.0f && r[7] == 256.0f);
    CHECK(x1_maximum(&tx, &ty, &to) == X1_SUCCESS && x1_minimum(&tx, &ty, &to) == X1_SUCCESS);
    uint8_t m[8], m2[8];
    CHECK(x1_eq(&tx, &tx, &tb) == X1_SUCCESS && x1_ne(&tx, &ty, &tb2) == X1_SUCCESS);
    CHECK(x1_le(&tx, &ty, &tb) == X1_SUCCESS && x1_gt(&tx, &ty, &tb) == X1_SUCCESS);
    CHECK(x1_ge(&tx, &tx, &tb) == X1_SUCCESS && x1_lt(&tx, &ty, &tb) == X1_SUCCESS);
    CHECK(x1_bitwise_and(&tb, &tb2, &tb) == X1_SUCCESS && x1_bitwise_or(&tb, &tb2, &tb) == X1_SUCCESS);
    CHECK(x1_bitwise_xor(&tb, &tb2, &tb) == X1_SUCCESS && x1_bitwise_not(&tb2, &tb2) == X1_SUCCESS);
    get(m, pb, 8);
    get(m2, pb2, 8);
    CHECK(m[3] == 0 && m2[3] == 0);
    CHECK(x1_eq(&tx, &ty, &to) == X1_ERR_UNSUPPORTED);          /* a comparison writes bool */
    CHECK(x1_bitwise_or(&tx, &ty, &to) == X1_ERR_UNSUPPORTED);  /* no bitwise on floats */
    int64_t big[2] = {INT64_MAX, -7}, ri[2];
    x1_devptr_t pi = put(big, 16), pio = dev_alloc(16);
    x1_tensor_t ti = desc(pi, 1, d2, X1_INT64), tio = desc(pio, 1, d2, X1_INT64);
    CHECK(x1_add(&ti, &ti, 3.0, &tio) == X1_SUCCESS);
    get(ri, pio, 16);
    CHECK(ri[0] == -4 && ri[1] == -28); /* x + 3x, wrapping: 4 * INT64_MAX = -4 mod 2^64 */
    CHECK(x1_sub(&ti, &ti, 1.0, &tio) == X1_SUCCESS && x1_mul(&ti, &ti, &tio) == X1_SUCCESS);
    CHECK(x1_neg(&ti, &tio) == X1_SUCCESS && x1_abs(&ti, &tio) == X1_SUCCESS);
    CHECK(x1_pow(&ti, &ti, &tio) == X1_ERR_UNSUPPORTED);

    /* unary */
    CHECK(x1_silu(&tx, &to) == X1_SUCCESS && x1_log(&ty, &to) == X1_SUCCESS);
    CHECK(x1_reciprocal(&ty, &to) == X1_SUCCESS && x1_cos(&tx, &to) == X1_SUCCESS);
    CHECK(x1_sin(&tx, &to) == X1_SUCCESS && x1_abs(&tx, &to) == X1_SUCCESS);
    get(r, po, 32);
    CHECK(r[0] == 2.0f);

    /* optimizer arithmetic, selection, activation gradients */
    CHECK(x1_addcmul(&tx, &ty, &ty, 0.5, &to) == X1_SUCCESS);
    CHECK(x1_addcdiv(&tx, &ty, &ty, -1.0, &to) == X1_SUCCESS);
    get(r, po, 32);
    CHECK(r[7] == 2.0f);
    CHECK(x1_lerp(&tx, &ty, 0.5, &to) == X1_SUCCESS);
    get(r, po, 32);
    CHECK(r[3] == 2.0f);
    CHECK(x1_where(&tb, &tx, &ty, &to) == X1_SUCCESS && x1_masked_fill(&tx, &tb, 7.0, &to) == X1_SUCCESS);
    CHECK(x1_masked_fill(&tx, &tx, 7.0, &to) == X1_ERR_UNSUPPORTED); /* mask must be bool */
    CHECK(x1_gelu_backward(&ty, &tx, "none", &to) == X1_SUCCESS && x1_gelu_backward(&ty, &tx, "tanh", &to) == X1_SUCCESS);
    CHECK(x1_gelu_backward(&ty, &tx, "erf", &to) == X1_ERR_INVALID_VALUE);
    CHECK(x1_threshold_backward(&ty, &tx, 0.0, &to) == X1_SUCCESS);
    get(r, po, 32);
    CHECK(r[3] == 0.0f && r[7] == 8.0f);
    CHECK(x1_sigmoid_backward(&ty, &tx, &to) == X1_SUCCESS && x1_tanh_backward(&ty, &tx, &to) == X1_SUCCESS);

    /* reductions, softmax family, loss over [2, 4] */
    int64_t ax1[1] = {1}, d21[2] = {2, 1};
    x1_devptr_t pv = dev_alloc(8), pmn = dev_alloc(8), ps = dev_alloc(32), pg = dev_alloc(32);
    x1_tensor_t tx24 = desc(px, 2, d24, F), tv = desc(pv, 1, d2, F), tmn = desc(pmn, 1, d2, F);
    x1_tensor_t ts = desc(ps, 2, d24, F), tg = desc(pg, 2, d24, F);
    CHECK(x1_var_mean(&tx24, ax1, 1, 0.0, false, &tv, &tmn) == X1_SUCCESS);
    get(r, pv, 8);
    CHECK_NEAR(r[0], 2.1875 / 4, 1e-6); /* biased */
    CHECK(x1_mean(&tx24, NULL, 0, false, &(x1_tensor_t){.data = pmn, .ndim = 0, .dtype = F}) == X1_SUCCESS);
    CHECK(x1_logsumexp(&tx24, ax1, 1, false, &tv) == X1_SUCCESS);
    get(r, pv, 8);
    CHECK_NEAR(r[0], log(exp(-2.0) + exp(-1.0) + exp(-0.5) + 1.0), 1e-5);
    CHECK(x1_div_scalar(&tx, -2.0, &to) == X1_SUCCESS);
    get(r, po, 32);
    CHECK(r[7] == -1.5f);
    CHECK(x1_div_scalar(&tb, 2.0, &to) == X1_ERR_UNSUPPORTED);
    x1_tensor_t tcol = desc(py, 1, d2, F); /* the gradient of x[:, -1] */
    CHECK(x1_select_backward(&tcol, 0, 1, &tg) == X1_ERR_INVALID_VALUE); /* a row has 4, not 2 */
    CHECK(x1_select_backward(&tcol, 1, -1, &tg) == X1_SUCCESS);
    get(r, pg, 32);
    CHECK(r[3] == 1.0f && r[7] == 2.0f && r[0] == 0.0f);
    CHECK(x1_log_softmax(&tx24, 1, &ts) == X1_SUCCESS && x1_log_softmax_backward(&tx24, &ts, 1, &tg) == X1_SUCCESS);
    CHECK(custom_safe_softmax_x1(&tx24, 1, &ts) == X1_SUCCESS && x1_softmax_backward(&tx24, &ts, 1, &tg) == X1_SUCCESS);
    CHECK(x1_softmax_backward(&tx24, &ts, 2, &tg) == X1_ERR_INVALID_VALUE);
    int64_t tgt[2] = {3, 0};
    x1_devptr_t pt = put(tgt, 16), pl = dev_alloc(4), ptw = dev_alloc(4);
    x1_tensor_t tt = desc(pt, 1, d2, X1_INT64), tl = desc(pl, 0, d0, F), ttw = desc(ptw, 0, d0, F);
    x1_tensor_t tone = desc(py, 0, d0, F);
    CHECK(x1_nll_loss_forward(&tx24, &tt, NULL, 2, -100, &tl, &ttw) == X1_SUCCESS);
    get(r, pl, 4);
    CHECK(r[0] == -0.5f);
    CHECK(x1_nll_loss_backward(&tone, &tx24, &tt, NULL, 2, -100, &ttw, &tg) == X1_SUCCESS);
    get(r, pg, 32);
    CHECK(r[3] == -1.0f && r[4] == -1.0f && r[5] == 0.0f);
    CHECK(x1_nll_loss_forward(&tx24, &tt, &tx24, 2, -100, &tl, &ttw) == X1_ERR_INVALID_VALUE); /* weight [C] */
    tgt[0] = -1;
    CHECK(x1_memcpy_h2d(pt, tgt, 16) == X1_SUCCESS);
    CHECK(x1_nll_loss_forward(&tx24, &tt, NULL, 2, -100, &tl, &ttw) == X1_ERR_DATA);
    CHECK(x1_nll_loss_forward(&tx24, &tt, NULL, 2, -1, &tl, &ttw) == X1_SUCCESS); /* ignored */

    /* embedding gradient, layer norm gradient */
    int64_t ids[3] = {1, 0, 1}, d3[1] = {3}, d34[2] = {3, 4}, mask[3] = {1, 1, 1}, only_dx[3] = {1, 0, 0};
    x1_devptr_t pid = put(ids, 24), pe = dev_alloc(48), pdt = dev_alloc(32);
    x1_tensor_t tid = desc(pid, 1, d3, X1_INT64), te = desc(pe, 2, d34, F), tdt = desc(pdt, 2, d24, F);
    CHECK(x1_embedding(&tx24, &tid, &te) == X1_SUCCESS);
    CHECK(x1_embedding_backward(&te, &tid, 2, 0, true, &tdt) == X1_SUCCESS);
    get(r, pdt, 32);
    CHECK(r[0] == 0.0f && r[4] == 0.5f); /* row 0 is padding; row 1 twice, scaled by 1/2 */
    CHECK(x1_embedding_backward(&te, &tid, 3, -1, false, &tdt) == X1_ERR_INVALID_VALUE);
    int64_t ns[1] = {4}, d4[1] = {4};
    x1_devptr_t pm = dev_alloc(8), pr = dev_alloc(8), pdw = dev_alloc(16), pdb = dev_alloc(16);
    x1_tensor_t tm = desc(pm, 2, d21, F), tr = desc(pr, 2, d21, F), tgam = desc(py, 1, d4, F);
    x1_tensor_t tdw = desc(pdw, 1, d4, F), tdb = desc(pdb, 1, d4, F);
    CHECK(x1_layer_norm(&tx24, ns, 1, &tgam, NULL, 1e-5, &ts, &tm, &tr) == X1_SUCCESS);
    CHECK(x1_layer_norm_backward(&tx24, &tx24, ns, 1, &tm, &tr, &tgam, mask, &tg, &tdw, &tdb) == X1_SUCCESS);
    CHECK(x1_layer_norm_backward(&tx24, &tx24, ns, 1, &tm, &tr, NULL, only_dx, &tg, NULL, NULL) == X1_SUCCESS);
    CHECK(x1_layer_norm_backward(&tx24, &tx24, ns, 1, &tm, &tr, &tgam, mask, &tg, NULL, &tdb) ==
          X1_ERR_INVALID_VALUE);

    /* NHWC convolution gradients: x [1, 2, 2, 2], w [2, 1, 1, 2] */
    int64_t dx4[4] = {1, 2, 2, 2}, dw4[4] = {2, 1, 1, 2}, one[2] = {1, 1}, zero[2] = {0, 0}, three[2] = {3, 3};
    x1_devptr_t pdx = dev_alloc(32), pdw4 = dev_alloc(16), pdbias = dev_alloc(8);
    x1_tensor_t tx4 = desc(px, 4, dx4, F), tw4 = desc(py, 4, dw4, F), ty4 = desc(ps, 4, dx4, F);
    x1_tensor_t tdx = desc(pdx, 4, dx4, F), tdw4 = desc(pdw4, 4, dw4, F), tdbias = desc(pdbias, 1, d2, F);
    CHECK(x1_conv2d(&tx4, &tw4, NULL, one, zero, one, 1, &ty4) == X1_SUCCESS);
    CHECK(x1_conv2d_backward(&ty4, &tx4, &tw4, one, zero, one, 1, mask, &tdx, &tdw4, &tdbias) == X1_SUCCESS);
    get(r, pdbias, 8);
    CHECK(r[0] == 6.0f && r[1] == 12.0f); /* grad_bias = column sums of dy = y */
    CHECK(x1_conv2d_backward(&ty4, &tx4, &tw4, three, zero, one, 1, mask, &tdx, &tdw4, &tdbias) ==
          X1_ERR_UNSUPPORTED);
    CHECK(x1_conv2d_backward(&ty4, &tx4, &tw4, one, zero, one, 1, mask, NULL, &tdw4, &tdbias) ==
          X1_ERR_INVALID_VALUE);

    /* NHWC pooling gradients: 2x2 windows over [1, 2, 2, 2] -> [1, 1, 1, 2] */
    int64_t dp[4] = {1, 1, 1, 2}, two[2] = {2, 2};
    x1_devptr_t pp = dev_alloc(8), pidx = dev_alloc(16);
    x1_tensor_t tp = desc(pp, 4, dp, F), tidx = desc(pidx, 4, dp, X1_INT64);
    CHECK(x1_max_pool2d(&tx4, two, NULL, 0, zero, one, false, &tp, &tidx) == X1_SUCCESS);
    CHECK(x1_max_pool2d_backward(&tp, &tidx, &tdx) == X1_SUCCESS);
    get(r, pdx, 32);
    CHECK(r[6] == 2.0f && r[7] == 3.0f && r[0] == 0.0f);
    CHECK(x1_avg_pool2d_backward(&tp, two, NULL, 0, zero, false, true, 0, &tdx) == X1_SUCCESS);
    get(r, pdx, 32);
    CHECK(r[0] == 0.5f && r[1] == 0.75f);
    CHECK(x1_avg_pool2d_backward(&tp, two, NULL, 0, one, false, true, 0, &tdx) == X1_ERR_INVALID_VALUE);
    CHECK(x1_adaptive_avg_pool2d_backward(&tp, &tdx) == X1_SUCCESS);

    /* arange, cat */
    CHECK(x1_arange(-1.0, 3.0, 0.5, &to) == X1_SUCCESS);
    get(r, po, 32);
    CHECK(r[7] == 2.5f);
    CHECK(x1_arange(0.0, 1.0, 0.0, &to) == X1_ERR_INVALID_VALUE);
    CHECK(x1_arange(0.0, 8.0, 1.0, &tb) == X1_ERR_UNSUPPORTED);
    x1_tensor_t part = desc(px, 2, (int64_t[]){1, 4}, F), whole = desc(po, 2, d24, F);
    const x1_tensor_t *parts[2] = {&part, &part};
    CHECK(x1_cat(parts, 2, 0, &whole) == X1_SUCCESS);
    get(r, po, 32);
    CHECK(r[4] == -2.0f);
    CHECK(x1_cat(parts, 2, 1, &whole) == X1_ERR_INVALID_VALUE);

    x1_devptr_t all[] = {px, py, po, pb, pb2, pi, pio, pv, pmn, ps, pg, pt, pl, ptw, pid, pe, pdt, pm, pr, pdw,
                         pdb, pdx, pdw4, pdbias, pp, pidx};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) CHECK(x1_free(all[i]) == X1_SUCCESS);
}
#undef F

static void test_conv2d_dilation_groups(void);

/* The indexing, selection, reduction, mixed-precision and random kernels:
 * each on values with known results, and a data error before any write. */
#define F X1_FLOAT32
static void selection_kernels(void) {
    float x[6] = {3, -1, 7, 7, 0.5f, -2}, r[6];
    int64_t i6[6] = {4, -3, 0, 9, 2, 2}, ri[6], s6[1] = {6}, s23[2] = {2, 3}, s32[2] = {3, 2};
    uint8_t b[6];
    x1_devptr_t px = put(x, sizeof x), pi = put(i6, sizeof i6), po = dev_alloc(24), pio = dev_alloc(48),
                pb = dev_alloc(6);
    x1_tensor_t tx = desc(px, 1, s6, F), ti = desc(pi, 1, s6, X1_INT64), to = desc(po, 1, s6, F),
                tio = desc(pio, 1, s6, X1_INT64), tb = desc(pb, 1, s6, X1_BOOL);
    CHECK(x1_gt_scalar(&ti, 2.5, &tb) == X1_SUCCESS); /* an integer tensor against 2.5: in float */
    get(b, pb, 6);
    CHECK(b[0] == 1 && b[1] == 0 && b[3] == 1 && b[4] == 0);
    CHECK(x1_eq_scalar(&ti, 2.0, &tb) == X1_SUCCESS && x1_ne_scalar(&tx, 7.0, &tb) == X1_SUCCESS);
    CHECK(x1_lt_scalar(&tx, 0.0, &tb) == X1_SUCCESS && x1_le_scalar(&tx, 0.5, &tb) == X1_SUCCESS);
    CHECK(x1_ge_scalar(&tb, 1.0, &tb) == X1_SUCCESS);
    CHECK(x1_eq_scalar(&tx, 1.0, &to) == X1_ERR_UNSUPPORTED);      /* writes bool */
    CHECK(x1_logical_and(&tx, &ti, &tb) == X1_SUCCESS && x1_logical_or(&tb, &tx, &tb) == X1_SUCCESS);
    CHECK(x1_logical_xor(&ti, &ti, &tb) == X1_SUCCESS && x1_logical_not(&tx, &tb) == X1_SUCCESS);
    get(b, pb, 6);
    CHECK(b[4] == 0 && b[5] == 0);
    /* reductions */
    int64_t d0[1] = {0}, one = 1;
    x1_tensor_t tsum = desc(pio, 0, s6, X1_INT64), tany = desc(pb, 0, s6, X1_BOOL);
    CHECK(x1_sum(&ti, NULL, 0, false, &tsum) == X1_SUCCESS);
    get(ri, pio, 8);
    CHECK(ri[0] == 14);
    CHECK(x1_any(&tb, NULL, 0, false, &tany) == X1_SUCCESS && x1_all(&tx, d0, 1, false, &tany) == X1_SUCCESS);
    get(b, pb, 1);
    CHECK(b[0] == 1);
    CHECK(x1_any_dim(&tx, 0, false, &tany) == X1_SUCCESS && x1_all_dim(&ti, 0, false, &tany) == X1_SUCCESS);
    x1_tensor_t tx23 = desc(px, 2, s23, F), tv2 = desc(po, 1, (int64_t[]){2}, F),
                ti2 = desc(pio, 1, (int64_t[]){2}, X1_INT64);
    CHECK(x1_max_dim(&tx23, 1, false, &tv2, &ti2) == X1_SUCCESS);
    get(r, po, 8);
    get(ri, pio, 16);
    CHECK(r[0] == 7 && r[1] == 7 && ri[0] == 2 && ri[1] == 0);    /* the first 7 of each row */
    CHECK(x1_min_dim(&tx23, 1, false, &tv2, &ti2) == X1_SUCCESS && x1_argmin(&tx23, 1, false, &ti2) == X1_SUCCESS);
    CHECK(x1_argmax(&tx23, -1, false, &ti2) == X1_SUCCESS);
    CHECK(x1_argmax(&tx23, 2, false, &ti2) == X1_ERR_INVALID_VALUE);
    x1_tensor_t tk = desc(po, 1, (int64_t[]){3}, F), tki = desc(pio, 1, (int64_t[]){3}, X1_INT64);
    CHECK(x1_topk(&tx, 3, 0, true, &tk, &tki) == X1_SUCCESS);
    get(r, po, 12);
    get(ri, pio, 24);
    CHECK(r[0] == 7 && r[1] == 7 && r[2] == 3 && ri[0] == 2 && ri[1] == 3 && ri[2] == 0);
    CHECK(x1_cumsum(&ti, 0, &tio) == X1_SUCCESS);
    get(ri, pio, 48);
    CHECK(ri[5] == 14);
    CHECK(x1_cumsum(&tx, 0, &tio) == X1_ERR_UNSUPPORTED);             /* float gives float */
    /* clamp, isin */
    float lo = 0.0f;
    x1_devptr_t plo = put(&lo, 4);
    x1_tensor_t tlo = desc(plo, 1, s6, F);
    tlo.strides[0] = 0;
    CHECK(x1_clamp(&tx, &tlo, NULL, &to) == X1_SUCCESS);
    get(r, po, 24);
    CHECK(r[1] == 0 && r[2] == 7);
    CHECK(x1_clamp(&tx, NULL, NULL, &to) == X1_ERR_INVALID_VALUE);
    CHECK(x1_isin(&ti, &ti, true, &tb) == X1_SUCCESS);
    get(b, pb, 6);
    CHECK(b[0] == 0 && b[5] == 0);
    /* indexing: gather, scatter, index_select / add, advanced indexing */
    int64_t g6[6] = {2, 0, 1, 1, 1, 0};
    x1_devptr_t pg = put(g6, sizeof g6);
    x1_tensor_t tg = desc(pg, 2, s23, X1_INT64), to23 = desc(po, 2, s23, F);
    CHECK(x1_gather(&tx23, 1, &tg, &to23) == X1_SUCCESS);
    get(r, po, 24);
    CHECK(r[0] == 7 && r[1] == 3 && r[5] == 7);
    CHECK(x1_scatter(&tx23, 1, &tg, &tx23, &to23) == X1_SUCCESS && x1_scatter_add(&tx23, 1, &tg, &tx23, &to23) == X1_SUCCESS);
    x1_tensor_t tbad = desc(pi, 2, s23, X1_INT64);
    CHECK(x1_gather(&tx23, 1, &tbad, &to23) == X1_ERR_DATA);          /* 4, -3, 9: out of range */
    x1_tensor_t tsel = desc(pg, 1, (int64_t[]){2}, X1_INT64), tos = desc(po, 2, (int64_t[]){2, 2}, F);
    CHECK(x1_index_select(&tx23, 1, &tsel, &tos) == X1_SUCCESS);
    CHECK(x1_index_add(&tx23, 1, &tsel, &tos, 2.0, &to23) == X1_SUCCESS);
    const x1_tensor_t *idx[1] = {&tsel};
    CHECK(x1_index(&tx, idx, 1, &tv2) == X1_SUCCESS);
    get(r, po, 8);
    CHECK(r[0] == 7 && r[1] == 3);
    CHECK(x1_index_put(&tx, idx, 1, &tv2, true, &to) == X1_SUCCESS);
    get(r, po, 24);
    CHECK(r[2] == 14 && r[0] == 6);
    CHECK(x1_index(&tx, idx, 0, &tv2) == X1_ERR_INVALID_VALUE);
    /* shaping */
    x1_tensor_t tx32 = desc(px, 2, s32, F), to32 = desc(po, 2, s32, F);
    CHECK(x1_tril(&tx32, 0, &to32) == X1_SUCCESS && x1_triu(&tx32, 1, &to32) == X1_SUCCESS);
    get(r, po, 24);
    CHECK(r[0] == 0 && r[1] == -1 && r[2] == 0);
    int64_t pad[2] = {1, 1};
    x1_tensor_t tpad = desc(pio, 1, (int64_t[]){8}, F);
    CHECK(x1_constant_pad_nd(&tx, pad, 2, 9.0, &tpad) == X1_SUCCESS);
    float pr[8];
    get(pr, pio, 32);
    CHECK(pr[0] == 9 && pr[1] == 3 && pr[7] == 9);
    x1_tensor_t tu = desc(px, 4, (int64_t[]){1, 1, 2, 3}, F), tuo = desc(pio, 4, (int64_t[]){1, 1, 2, 6}, F);
    CHECK(x1_upsample_nearest2d(&tu, 0.0, 0.0, &tuo) == X1_SUCCESS);
    x1_tensor_t tug = desc(pb, 4, (int64_t[]){1, 1, 1, 1}, F);
    CHECK(x1_upsample_nearest2d_backward(&tuo, 0.0, 0.0, &tug) == X1_SUCCESS);
    float ug;
    get(&ug, pb, 4);
    CHECK(ug == 3 - 1 + 7 + 7 + 0.5f - 2 + 3 - 1 + 7 + 7 + 0.5f - 2);   /* every output from the one pixel */
    CHECK(x1_slice_backward(&tv2, 0, 1, 6, 3, &to) == X1_SUCCESS);        /* tv2 = [0, -1], read first */
    get(r, po, 24);
    CHECK(r[0] == 0 && r[1] == 0 && r[4] == -1 && r[5] == 0);
    /* mixed precision */
    float scale = 1024.0f, inf0 = 0.0f;
    int32_t tracker = 1;
    x1_devptr_t psc = put(&scale, 4), pgt = put(&tracker, 4), pfi = put(&inf0, 4);
    x1_tensor_t tsc = desc(psc, 0, s6, F), tgt = desc(pgt, 0, s6, X1_INT32), tfi = desc(pfi, 0, s6, F);
    CHECK(x1_amp_update_scale(&tsc, &tgt, &tfi, 2.0, 0.5, 2, &tsc) == X1_SUCCESS);
    get(&scale, psc, 4);
    get(&tracker, pgt, 4);
    CHECK(scale == 2048.0f && tracker == 0);
    float inv = 0.5f, nan_in[2] = {2.0f, 1.0f / 0.0f};
    x1_devptr_t pinv = put(&inv, 4), pn = put(nan_in, 8);
    x1_tensor_t tinv = desc(pinv, 0, s6, F), tn = desc(pn, 1, (int64_t[]){2}, F);
    x1_tensor_t *grads[2] = {&tn, &to};
    CHECK(x1_amp_unscale(grads, 2, &tfi, &tinv) == X1_SUCCESS);
    get(&inf0, pfi, 4);
    get(nan_in, pn, 8);
    CHECK(inf0 == 1.0f && nan_in[0] == 1.0f);
    /* fused optimizers: one parameter, then one Adam step of (2, 1, 0.5, 0.25) over a zero state */
    float fp[2] = {1.0f, 1.0f}, fg[2] = {0.5f, -0.5f}, fz[4] = {0, 0, 0, 0}, fstep = 1.0f;
    x1_devptr_t pfp = put(fp, 8), pfg = put(fg, 8), pfm = put(fz, 8), pfv = put(fz, 8), pfs = put(&fstep, 4);
    int64_t s2b[1] = {2};
    x1_tensor_t tfp = desc(pfp, 1, s2b, F), tfg = desc(pfg, 1, s2b, F), tfm = desc(pfm, 1, s2b, F),
                tfv = desc(pfv, 1, s2b, F), tfs = desc(pfs, 0, s2b, F);
    x1_tensor_t *lp[1] = {&tfp}, *lg[1] = {&tfg}, *lm[1] = {&tfm}, *lv[1] = {&tfv};
    const x1_tensor_t *ls[1] = {&tfs};
    CHECK(x1_fused_adam(lp, lg, lm, lv, NULL, ls, 1, 0.1, 0.9, 0.999, 0.0, 1e-8, false, false, true, NULL, NULL) ==
          X1_SUCCESS);
    get(fp, pfp, 8);
    CHECK(fabsf(fp[0] - 0.9f) < 1e-6f && fabsf(fp[1] - 1.1f) < 1e-6f);   /* the first step moves by lr */
    CHECK(x1_fused_sgd(lp, lg, lm, 1, 0.0, 0.9, 0.1, 0.0, true, false, true, NULL, NULL) == X1_SUCCESS);
    CHECK(x1_fused_adam(lp, lg, lm, lv, NULL, ls, 1, 0.1, 0.9, 0.999, 0.0, 1e-8, true, false, true, NULL, NULL) ==
          X1_ERR_INVALID_VALUE);                                                /* amsgrad without its list */
    x1_free(pfp), x1_free(pfg), x1_free(pfm), x1_free(pfv), x1_free(pfs);
    /* random numbers: the Philox4x32-10 known answer, then each kernel */
    uint32_t ctr[4] = {0, 0, 0, 0}, key[2] = {0, 0}, out4[4];
    sim_philox4x32_10(ctr, key, out4);
    CHECK(out4[0] == 0x6627e8d5u && out4[1] == 0xe169c58du && out4[2] == 0xbc57ac4cu && out4[3] == 0x9b00dbd8u);
    uint64_t words = 0;
    CHECK(x1_rng_words(5, 1, &words) == X1_SUCCESS && words == 8);
    CHECK(x1_rng_words(5, 2, &words) == X1_SUCCESS && words == 12);
    CHECK(x1_random(&tio, 0, (int64_t)1 << 31, 0, 0) == X1_SUCCESS);  /* word % 2^31 */
    get(ri, pio, 48);
    CHECK(ri[0] == 0x6627e8d5 && ri[1] == 0x6169c58d && ri[4] != ri[0]);
    CHECK(x1_random(&tio, -5, 5, 7, 4) == X1_SUCCESS && x1_random(&tio, 0, INT64_MAX, 7, 0) == X1_SUCCESS);
    CHECK(x1_uniform(&to, -1.0, 1.0, 1, 0) == X1_SUCCESS && x1_normal(&to, 0.0, 1.0, 1, 8) == X1_SUCCESS);
    CHECK(x1_bernoulli(&tb, 0.5, 1, 16) == X1_SUCCESS && x1_bernoulli(&tio, 0.25, 1, 0) == X1_SUCCESS);
    CHECK(x1_uniform(&to, 0.0, 1.0, 1, 2) == X1_ERR_INVALID_VALUE);   /* offset not a multiple of 4 */
    CHECK(x1_native_dropout(&tx, 0.5, true, 3, 0, &to, &tb) == X1_SUCCESS);
    CHECK(x1_native_dropout(&tx, 0.5, false, 3, 0, &to, &tb) == X1_SUCCESS);
    get(r, po, 24);
    CHECK(r[0] == 3 && r[5] == -2);
    (void)one;
    x1_free(px), x1_free(pi), x1_free(po), x1_free(pio), x1_free(pb), x1_free(plo), x1_free(pg);
    x1_free(psc), x1_free(pgt), x1_free(pfi), x1_free(pinv), x1_free(pn);
}
#undef F

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

    training_kernels();
    selection_kernels();

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
    test_conv2d_dilation_groups();
    REPORT("selftest_x1");
}

/* simk_conv2d_nhwc with what x1_conv2d refuses (dilation, odd strides and
 * padding) and a strided weight, against a direct loop: the kernel is shared
 * with chips that may allow them. */
#include "../common/simkernels.h"

static sim_view host_view(float *p, int ndim, const int64_t *shape, const int64_t *strides) {
    sim_view v;
    memset(&v, 0, sizeof v);
    v.base = (char *)p;
    v.ndim = ndim;
    v.dtype = SIM_F32;
    v.present = 1;
    for (int i = 0; i < ndim; i++) v.shape[i] = shape[i], v.strides[i] = strides[i];
    return v;
}

static void test_conv2d_dilation_groups(void) {
    enum { N = 2, H = 9, W = 8, C = 6, O = 4, G = 2, KH = 3, KW = 2, CG = C / G };
    const int64_t stride[2] = {1, 2}, pad[2] = {2, 1}, dil[2] = {2, 3};
    const int64_t OH = (H + 2 * pad[0] - dil[0] * (KH - 1) - 1) / stride[0] + 1;
    const int64_t OW = (W + 2 * pad[1] - dil[1] * (KW - 1) - 1) / stride[1] + 1;
    static float x[N * H * W * C], wbuf[O * KH * KW * (CG + 1)], bias[O], y[N * 16 * 16 * O];
    for (int i = 0; i < N * H * W * C; i++) x[i] = (float)((i * 37) % 23) / 11.0f - 1.0f;
    for (int i = 0; i < O * KH * KW * (CG + 1); i++) wbuf[i] = (float)((i * 13) % 17) / 8.0f - 1.0f;
    for (int i = 0; i < O; i++) bias[i] = 0.25f * (float)i;
    /* the weight's channel rows padded by one element: not one uniform stride */
    const int64_t xs[4] = {N, H, W, C}, xst[4] = {H * W * C, W * C, C, 1};
    const int64_t ws[4] = {O, KH, KW, CG}, wst[4] = {KH * KW * (CG + 1), KW * (CG + 1), CG + 1, 1};
    const int64_t ys[4] = {N, OH, OW, O}, yst[4] = {OH * OW * O, OW * O, O, 1};
    const int64_t bs[1] = {O}, bst[1] = {1};
    sim_view xv = host_view(x, 4, xs, xst), wv = host_view(wbuf, 4, ws, wst);
    sim_view yv = host_view(y, 4, ys, yst), bv = host_view(bias, 1, bs, bst);
    CHECK(simk_conv2d_nhwc("selftest", "conv2d", &xv, &wv, &bv, stride, pad, dil, G, &yv) == SIM_OK);
    double worst = 0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++)
                for (int64_t o = 0; o < O; o++) {
                    int64_t g = o / (O / G);
                    double acc = bias[o];
                    for (int64_t kh = 0; kh < KH; kh++)
                        for (int64_t kw = 0; kw < KW; kw++) {
                            int64_t ih = oh * stride[0] - pad[0] + kh * dil[0];
                            int64_t iw = ow * stride[1] - pad[1] + kw * dil[1];
                            if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                            for (int64_t c = 0; c < CG; c++)
                                acc += (double)x[((n * H + ih) * W + iw) * C + g * CG + c] *
                                       wbuf[o * wst[0] + kh * wst[1] + kw * wst[2] + c];
                        }
                    double d = fabs(acc - y[((n * OH + oh) * OW + ow) * O + o]);
                    if (d > worst) worst = d;
                }
    CHECK(worst < 1e-4);
}
