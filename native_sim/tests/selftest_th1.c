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


/* ------------------------------------------------- training kernels */

#define F TH1_DATA_FLOAT
static th1DevPtr_t dev_alloc(size_t n) {
    th1DevPtr_t p = 0;
    CHECK(th1MemAlloc(&p, n) == TH1_SUCCESS);
    return p;
}
static void get(void *host, th1DevPtr_t p, size_t n) { CHECK(th1MemcpyDtoH(host, p, n) == TH1_SUCCESS); }

/* Every kernel added for training, on values whose results are known, and
 * the rejections strict mode turns into aborts. */
static void training_kernels(void) {
    float x[8] = {-2, -1, -0.5f, 0, 0.5f, 1, 2, 3}, y[8] = {1, 2, 3, 4, 5, 6, 7, 8}, r[8];
    int64_t d8[1] = {8}, d24[2] = {2, 4};
    th1DevPtr_t px = put(x, 32), py = put(y, 32), po = dev_alloc(32), pb = dev_alloc(8), pb2 = dev_alloc(8);
    th1TensorDesc_t tx = desc(px, 1, d8, F), ty = desc(py, 1, d8, F), to = desc(po, 1, d8, F);
    th1TensorDesc_t tb = desc(pb, 1, d8, TH1_DATA_BOOL), tb2 = desc(pb2, 1, d8, TH1_DATA_BOOL);

    /* arithmetic */
    CHECK(th1Sub(&tx, &ty, 2.0f, &to) == TH1_SUCCESS);
    get(r, po, 32);
    CHECK(r[0] == -4.0f && r[7] == -13.0f);
    CHECK(th1Div(&tx, &ty, &to) == TH1_SUCCESS);
    get(r, po, 32);
    CHECK(r[7] == 3.0f / 8.0f);
    CHECK(th1Pow(&ty, &ty, &to) == TH1_SUCCESS);
    get(r, po, 32);
    CHECK(r[2] == 27.0f);
    CHECK(th1PowScalar(&ty, 0.5, &to) == TH1_SUCCESS);
    get(r, po, 32);
    CHECK(r[3] == 2.0f);
    CHECK(th1PowScalar(&ty, 1.5, &to) == TH1_SUCCESS);
    get(r, po, 32);
    CHECK_NEAR(r[3], 8.0, 1e-5);
    CHECK(th1ScalarPow(2.0, &ty, &to) == TH1_SUCCESS);
    get(r, po, 32);
    CHECK(r[2] == 8.0f && r[7] == 256.0f);
    CHECK(th1Maximum(&tx, &ty, &to) == TH1_SUCCESS && th1Minimum(&tx, &ty, &to) == TH1_SUCCESS);
    get(r, po, 32);
    CHECK(r[7] == 3.0f && r[0] == -2.0f);

    /* comparisons and logic */
    uint8_t m[8], m2[8];
    CHECK(th1Less(&tx, &ty, &tb) == TH1_SUCCESS);
    get(m, pb, 8);
    CHECK(m[0] == 1 && m[7] == 1);
    CHECK(th1Equal(&tx, &tx, &tb) == TH1_SUCCESS && th1NotEqual(&tx, &ty, &tb2) == TH1_SUCCESS);
    CHECK(th1LessEqual(&tx, &ty, &tb) == TH1_SUCCESS && th1Greater(&tx, &ty, &tb) == TH1_SUCCESS);
    CHECK(th1GreaterEqual(&tx, &tx, &tb) == TH1_SUCCESS);
    get(m, pb, 8);
    CHECK(m[0] == 1 && m[5] == 1);
    CHECK(th1BitwiseAnd(&tb, &tb2, &tb) == TH1_SUCCESS && th1BitwiseOr(&tb, &tb2, &tb) == TH1_SUCCESS);
    CHECK(th1BitwiseXor(&tb, &tb2, &tb) == TH1_SUCCESS && th1BitwiseNot(&tb2, &tb2) == TH1_SUCCESS);
    get(m, pb, 8);
    get(m2, pb2, 8);
    CHECK(m[3] == 0 && m2[3] == 0); /* (1|1)^1 = 0; not(1) = 0 */
    CHECK(th1Equal(&tx, &ty, &to) == TH1_ERROR_NOT_SUPPORTED);      /* a comparison writes bool */
    CHECK(th1BitwiseAnd(&tx, &ty, &to) == TH1_ERROR_NOT_SUPPORTED); /* no bitwise on floats */
    CHECK(th1Less(&tx, &tb, &tb) == TH1_ERROR_NOT_SUPPORTED);       /* mixed operands */

    /* integers: exact, wrapping */
    int64_t big[2] = {INT64_MAX, -7}, ri[2];
    int64_t d2[1] = {2};
    th1DevPtr_t pi = put(big, 16), pio = dev_alloc(16);
    th1TensorDesc_t ti = desc(pi, 1, d2, TH1_DATA_INT64), tio = desc(pio, 1, d2, TH1_DATA_INT64);
    CHECK(th1Add(&ti, &ti, 1.0f, &tio) == TH1_SUCCESS);
    get(ri, pio, 16);
    CHECK(ri[0] == -2 && ri[1] == -14);
    CHECK(th1Mul(&ti, &ti, &tio) == TH1_SUCCESS && th1Neg(&ti, &tio) == TH1_SUCCESS);
    CHECK(th1Abs(&ti, &tio) == TH1_SUCCESS);
    get(ri, pio, 16);
    CHECK(ri[1] == 7);
    CHECK(th1Div(&ti, &ti, &tio) == TH1_ERROR_NOT_SUPPORTED); /* true division of integers: not here */
    CHECK(th1Exp(&ti, &tio) == TH1_ERROR_NOT_SUPPORTED);

    /* unary */
    CHECK(th1Silu(&tx, &to) == TH1_SUCCESS && th1Sigmoid(&tx, &to) == TH1_SUCCESS);
    CHECK(th1Tanh(&tx, &to) == TH1_SUCCESS && th1Exp(&tx, &to) == TH1_SUCCESS);
    CHECK(th1Log(&ty, &to) == TH1_SUCCESS && th1Sqrt(&ty, &to) == TH1_SUCCESS);
    CHECK(th1Rsqrt(&ty, &to) == TH1_SUCCESS && th1Reciprocal(&ty, &to) == TH1_SUCCESS);
    CHECK(th1Cos(&tx, &to) == TH1_SUCCESS && th1Sin(&tx, &to) == TH1_SUCCESS);
    CHECK(th1Neg(&tx, &to) == TH1_SUCCESS && th1Abs(&tx, &to) == TH1_SUCCESS);
    get(r, po, 32);
    CHECK(r[0] == 2.0f);

    /* optimizer arithmetic, selection */
    CHECK(th1Addcmul(&tx, &ty, &ty, 0.5, &to) == TH1_SUCCESS);
    get(r, po, 32);
    CHECK(r[1] == 1.0f); /* -1 + 0.5 * 2 * 2 */
    CHECK(th1Addcdiv(&tx, &ty, &ty, -1.0, &to) == TH1_SUCCESS);
    get(r, po, 32);
    CHECK(r[7] == 2.0f);
    CHECK(th1Lerp(&tx, &ty, 0.25, &to) == TH1_SUCCESS);
    get(r, po, 32);
    CHECK(r[3] == 1.0f);
    CHECK(th1Lerp(&tx, &ty, 0.75, &to) == TH1_SUCCESS);
    get(r, po, 32);
    CHECK(r[3] == 3.0f);
    CHECK(th1Less(&tx, &ty, &tb) == TH1_SUCCESS);
    CHECK(th1Where(&tb, &tx, &ty, &to) == TH1_SUCCESS);
    CHECK(th1MaskedFill(&tx, &tb, -1e9, &to) == TH1_SUCCESS);
    get(r, po, 32);
    CHECK(r[4] == -1e9f);
    CHECK(th1Where(&tx, &tx, &ty, &to) == TH1_ERROR_NOT_SUPPORTED); /* condition must be bool */

    /* activation gradients */
    CHECK(th1GeluBackward(&ty, &tx, 0, &to) == TH1_SUCCESS && th1GeluBackward(&ty, &tx, 1, &to) == TH1_SUCCESS);
    CHECK(th1GeluBackward(&ty, &tx, 5, &to) == TH1_ERROR_INVALID_ARGUMENT);
    CHECK(th1ThresholdBackward(&ty, &tx, 0.0, &to) == TH1_SUCCESS);
    get(r, po, 32);
    CHECK(r[3] == 0.0f && r[4] == 5.0f);
    CHECK(th1SigmoidBackward(&ty, &tx, &to) == TH1_SUCCESS && th1TanhBackward(&ty, &tx, &to) == TH1_SUCCESS);

    /* reductions over [2, 4] */
    int64_t ax1[1] = {1}, d21[2] = {2, 1};
    th1TensorDesc_t tx24 = desc(px, 2, d24, F), tsum = desc(po, 1, d2, F), tkeep = desc(pb, 2, d21, F);
    CHECK(th1ReduceSum(&tx24, ax1, 1, 0, &tsum) == TH1_SUCCESS);
    get(r, po, 8);
    CHECK(r[0] == -3.5f && r[1] == 6.5f);
    CHECK(th1ReduceMean(&tx24, ax1, 1, 1, &tkeep) == TH1_SUCCESS);
    CHECK(th1ReduceSum(&tx24, ax1, 1, 1, &tsum) == TH1_ERROR_INVALID_ARGUMENT); /* keepDims shape */
    CHECK(th1ReduceLogSumExp(&tx24, ax1, 1, 0, &tsum) == TH1_SUCCESS);
    get(r, po, 8);
    CHECK_NEAR(r[1], log(exp(0.5) + exp(1.0) + exp(2.0) + exp(3.0)), 1e-5);
    CHECK(th1DivScalar(&tx, 4.0, &to) == TH1_SUCCESS);
    get(r, po, 32);
    CHECK(r[0] == -0.5f);
    CHECK(th1DivScalar(&ti, 4.0, &tio) == TH1_ERROR_NOT_SUPPORTED);
    th1DevPtr_t pvar = dev_alloc(8);
    th1TensorDesc_t tvar = desc(pvar, 1, d2, F);
    CHECK(th1VarMean(&tx24, ax1, 1, 1.0, 0, &tvar, &tsum) == TH1_SUCCESS);
    get(r, pvar, 8);
    CHECK_NEAR(r[0], 2.1875 / 3, 1e-6);
    CHECK_NEAR(r[1], 3.6875 / 3, 1e-6); /* unbiased */

    /* softmax family */
    th1DevPtr_t ps = dev_alloc(32), pg = dev_alloc(32);
    th1TensorDesc_t ts = desc(ps, 2, d24, F), tg = desc(pg, 2, d24, F);
    CHECK(th1Softmax(&tx24, 1, TH1_SOFTMAX_LOG, &ts) == TH1_SUCCESS);
    CHECK(th1SoftmaxBackward(&tx24, &ts, 1, TH1_SOFTMAX_LOG, &tg) == TH1_SUCCESS);
    CHECK(th1Softmax(&tx24, -1, 0, &ts) == TH1_SUCCESS);
    CHECK(th1SoftmaxBackward(&tx24, &ts, -1, 0, &tg) == TH1_SUCCESS);
    CHECK(th1SoftmaxBackward(&tx24, &ts, -1, TH1_SOFTMAX_SAFE, &tg) == TH1_ERROR_INVALID_ARGUMENT);

    /* loss: nll over [2, 4] log-probabilities */
    int64_t tgt[2] = {3, 0}, d0[1] = {0};
    th1DevPtr_t pt = put(tgt, 16), pl = dev_alloc(4), ptw = dev_alloc(4);
    th1TensorDesc_t tt = desc(pt, 1, d2, TH1_DATA_INT64), tl = desc(pl, 0, d0, F), ttw = desc(ptw, 0, d0, F);
    CHECK(th1NllLossForward(&tx24, &tt, NULL, 1, -100, &tl, &ttw) == TH1_SUCCESS);
    get(r, pl, 4);
    CHECK(r[0] == -(0.0f + 0.5f) / 2.0f); /* -(x[0,3] + x[1,0]) / 2 */
    th1TensorDesc_t tone = desc(py, 0, d0, F); /* dLoss = 1 */
    CHECK(th1NllLossBackward(&tone, &tx24, &tt, NULL, 1, -100, &ttw, &tg) == TH1_SUCCESS);
    get(r, pg, 32);
    CHECK(r[3] == -0.5f && r[4] == -0.5f && r[0] == 0.0f);
    tgt[1] = 4;
    CHECK(th1MemcpyHtoD(pt, tgt, 16) == TH1_SUCCESS);
    CHECK(th1NllLossForward(&tx24, &tt, NULL, 1, -100, &tl, &ttw) == TH1_ERROR_DATA);
    CHECK(th1NllLossForward(&tx24, &tt, NULL, 3, -100, &tl, &ttw) == TH1_ERROR_INVALID_ARGUMENT);

    /* embedding and its gradient: rows 1, 0, 1 of a [2, 4] table */
    int64_t ids[3] = {1, 0, 1}, d3[1] = {3}, d34[2] = {3, 4};
    th1DevPtr_t pid = put(ids, 24), pe = dev_alloc(48), pdt = dev_alloc(32);
    th1TensorDesc_t tid = desc(pid, 1, d3, TH1_DATA_INT64), te = desc(pe, 2, d34, F), tdt = desc(pdt, 2, d24, F);
    CHECK(th1Embedding(&tx24, &tid, &te) == TH1_SUCCESS);
    CHECK(th1EmbeddingBackward(&te, &tid, 2, -1, 0, &tdt) == TH1_SUCCESS);
    get(r, pdt, 32);
    CHECK(r[4] == 1.0f && r[0] == -2.0f); /* row 1 twice: 2 * 0.5; row 0 once */
    CHECK(th1EmbeddingBackward(&te, &tid, 2, 1, 1, &tdt) == TH1_SUCCESS);
    get(r, pdt, 32);
    CHECK(r[4] == 0.0f);
    CHECK(th1EmbeddingBackward(&te, &tid, 1, -1, 0, &tdt) == TH1_ERROR_INVALID_ARGUMENT);

    /* layer norm backward, batch norm inference */
    th1DevPtr_t pm = dev_alloc(8), pr = dev_alloc(8), pdg = dev_alloc(16), pdb = dev_alloc(16);
    int64_t d4[1] = {4};
    th1TensorDesc_t tm = desc(pm, 2, d21, F), tr = desc(pr, 2, d21, F), tgam = desc(py, 1, d4, F);
    th1TensorDesc_t tdg = desc(pdg, 1, d4, F), tdb = desc(pdb, 1, d4, F);
    CHECK(th1LayerNorm(&tx24, 1, &tgam, NULL, 1e-5f, &ts, &tm, &tr) == TH1_SUCCESS);
    CHECK(th1LayerNormBackward(&tx24, &tx24, 1, &tm, &tr, &tgam, &tg, &tdg, &tdb) == TH1_SUCCESS);
    get(r, pdb, 16);
    CHECK(r[0] == -1.5f); /* sum over rows of dy */
    CHECK(th1LayerNormBackward(&tx24, &tx24, 1, &tm, &tr, NULL, &tg, &tdg, NULL) == TH1_ERROR_INVALID_ARGUMENT);
    int64_t d1224[4] = {1, 2, 2, 2}, dch[1] = {2};
    th1TensorDesc_t tbn = desc(px, 4, d1224, F), tbo = desc(ps, 4, d1224, F), tch = desc(py, 1, dch, F);
    CHECK(th1BatchNormInference(&tbn, &tch, NULL, &tch, &tch, 1e-5, &tbo) == TH1_SUCCESS);

    /* convolution NCHW and its gradients: x [1, 2, 2, 2], w [2, 2, 1, 1] */
    int64_t dw[4] = {2, 2, 1, 1}, one[2] = {1, 1}, zero[2] = {0, 0}, mask[3] = {1, 1, 1}, nomask[3] = {0, 1, 0};
    th1DevPtr_t pdx = dev_alloc(32), pdw = dev_alloc(16), pdbias = dev_alloc(8);
    th1TensorDesc_t tw = desc(py, 4, dw, F), tdx = desc(pdx, 4, d1224, F), tdw = desc(pdw, 4, dw, F);
    th1TensorDesc_t tdbias = desc(pdbias, 1, dch, F);
    CHECK(th1ConvolutionForward(&tbn, &tw, &tch, one, zero, one, 1, &tbo) == TH1_SUCCESS);
    get(r, ps, 32);
    CHECK(r[0] == 1.0f * -2.0f + 2.0f * 0.5f + 1.0f); /* o=0 at (0,0): w00*x0 + w01*x4 + bias 1 */
    CHECK(th1ConvolutionBackward(&tbo, &tbn, &tw, one, zero, one, 1, mask, &tdx, &tdw, &tdbias) == TH1_SUCCESS);
    CHECK(th1ConvolutionBackward(&tbo, &tbn, &tw, one, zero, one, 1, nomask, NULL, &tdw, NULL) == TH1_SUCCESS);
    CHECK(th1ConvolutionBackward(&tbo, &tbn, &tw, one, zero, one, 1, mask, NULL, &tdw, NULL) ==
          TH1_ERROR_INVALID_ARGUMENT);
    CHECK(th1ConvolutionBackward(&tbo, &tbn, &tw, one, zero, one, 3, mask, &tdx, &tdw, &tdbias) ==
          TH1_ERROR_INVALID_ARGUMENT); /* 2 channels in 3 groups */

    /* pooling NCHW: 2x2 windows over [1, 2, 2, 2] -> [1, 2, 1, 1] */
    int64_t dp[4] = {1, 2, 1, 1}, two[2] = {2, 2};
    th1DevPtr_t pp = dev_alloc(8), pidx = dev_alloc(16);
    th1TensorDesc_t tp = desc(pp, 4, dp, F), tidx = desc(pidx, 4, dp, TH1_DATA_INT64);
    CHECK(th1MaxPool2d(&tbn, two, NULL, 0, zero, one, 0, &tp, &tidx) == TH1_SUCCESS);
    get(r, pp, 8);
    CHECK(r[0] == 0.0f && r[1] == 3.0f);
    CHECK(th1MaxPool2dBackward(&tp, &tidx, &tdx) == TH1_SUCCESS);
    get(r, pdx, 32);
    CHECK(r[3] == 0.0f && r[7] == 3.0f && r[4] == 0.0f);
    CHECK(th1AvgPool2d(&tbn, two, two, 2, zero, 0, 1, 0, &tp) == TH1_SUCCESS);
    CHECK(th1AvgPool2dBackward(&tp, two, two, 2, zero, 0, 1, 0, &tdx) == TH1_SUCCESS);
    CHECK(th1AdaptiveAvgPool2d(&tbn, &tp) == TH1_SUCCESS && th1AdaptiveAvgPool2dBackward(&tp, &tdx) == TH1_SUCCESS);
    CHECK(th1MaxPool2d(&tbn, two, NULL, 0, two, one, 0, &tp, NULL) == TH1_ERROR_INVALID_ARGUMENT); /* pad > k/2 */
    int64_t bad_idx = 9;
    CHECK(th1MemcpyHtoD(pidx, &bad_idx, 8) == TH1_SUCCESS);
    CHECK(th1MaxPool2dBackward(&tp, &tidx, &tdx) == TH1_ERROR_DATA);

    /* select's gradient: row 1 of a [2, 4] zero matrix */
    th1TensorDesc_t trow = desc(py, 1, d4, F);
    CHECK(th1SelectBackward(&trow, 0, 1, &ts) == TH1_SUCCESS);
    get(r, ps, 32);
    CHECK(r[0] == 0.0f && r[4] == 1.0f && r[7] == 4.0f);
    CHECK(th1SelectBackward(&trow, 0, 2, &ts) == TH1_ERROR_INVALID_ARGUMENT);
    CHECK(th1SelectBackward(&trow, 1, 0, &ts) == TH1_ERROR_INVALID_ARGUMENT); /* [4] is not a column */

    /* arange and cat */
    CHECK(th1Arange(0.0, 8.0, 1.0, &to) == TH1_SUCCESS);
    get(r, po, 32);
    CHECK(r[7] == 7.0f);
    CHECK(th1Arange(0.0, 4.0, 2.0, &tio) == TH1_SUCCESS);
    get(ri, pio, 16);
    CHECK(ri[0] == 0 && ri[1] == 2);
    CHECK(th1Arange(0.0, 9.0, 1.0, &to) == TH1_ERROR_INVALID_ARGUMENT); /* 9 values in 8 */
    CHECK(th1Arange(0.0, -1.0, 1.0, &to) == TH1_ERROR_INVALID_ARGUMENT);
    int64_t d4x1[1] = {4};
    th1TensorDesc_t half1 = desc(px, 1, d4x1, F), half2 = desc(py, 1, d4x1, F);
    const th1TensorDesc_t *parts[2] = {&half1, &half2};
    CHECK(th1Cat(parts, 2, 0, &to) == TH1_SUCCESS);
    get(r, po, 32);
    CHECK(r[3] == 0.0f && r[4] == 1.0f);
    const th1TensorDesc_t *mixed[2] = {&half1, &tb};
    CHECK(th1Cat(mixed, 2, 0, &to) == TH1_ERROR_NOT_SUPPORTED); /* float32 and bool */
    const th1TensorDesc_t *three[3] = {&half1, &half2, &half1};
    CHECK(th1Cat(three, 3, 0, &to) == TH1_ERROR_INVALID_ARGUMENT); /* 12 values into 8 */
    CHECK(th1Cat(parts, 0, 0, &to) == TH1_ERROR_INVALID_ARGUMENT);

    th1DevPtr_t all[] = {px, py, po, pb, pb2, pi, pio, pvar, ps, pg, pt, pl, ptw, pid, pe, pdt, pm, pr, pdg, pdb,
                         pdx, pdw, pdbias, pp, pidx};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) CHECK(th1MemFree(all[i]) == TH1_SUCCESS);
}
/* The indexing, selection, reduction, mixed-precision and random kernels
 * (the same core as x1's, under TH1's names): known results, a data error
 * before any write, and the same random words as x1 for the same seed. */
static void selection_kernels(void) {
    float x[6] = {3, -1, 7, 7, 0.5f, -2}, r[6];
    int64_t i6[6] = {4, -3, 0, 9, 2, 2}, ri[6], s6[1] = {6}, s23[2] = {2, 3}, s2[1] = {2}, s3[1] = {3};
    uint8_t b[6];
    th1DevPtr_t px = put(x, sizeof x), pi = put(i6, sizeof i6), po = dev_alloc(24), pio = dev_alloc(48),
                pb = dev_alloc(6);
    th1TensorDesc_t tx = desc(px, 1, s6, F), ti = desc(pi, 1, s6, TH1_DATA_INT64), to = desc(po, 1, s6, F),
                    tio = desc(pio, 1, s6, TH1_DATA_INT64), tb = desc(pb, 1, s6, TH1_DATA_BOOL);
    CHECK(th1GreaterScalar(&ti, 2.5, &tb) == TH1_SUCCESS);
    get(b, pb, 6);
    CHECK(b[0] == 1 && b[1] == 0 && b[3] == 1 && b[4] == 0);
    CHECK(th1EqualScalar(&ti, 2.0, &tb) == TH1_SUCCESS && th1NotEqualScalar(&tx, 7.0, &tb) == TH1_SUCCESS);
    CHECK(th1LessScalar(&tx, 0.0, &tb) == TH1_SUCCESS && th1LessEqualScalar(&tx, 0.5, &tb) == TH1_SUCCESS);
    CHECK(th1GreaterEqualScalar(&tb, 1.0, &tb) == TH1_SUCCESS);
    CHECK(th1Logical(&tx, &ti, TH1_LOGICAL_AND, &tb) == TH1_SUCCESS && th1Logical(&tb, &tx, 7, &tb) == TH1_ERROR_INVALID_ARGUMENT);
    CHECK(th1Logical(&ti, &ti, TH1_LOGICAL_XOR, &tb) == TH1_SUCCESS && th1LogicalNot(&tx, &tb) == TH1_SUCCESS);
    th1TensorDesc_t tsum = desc(pio, 0, s6, TH1_DATA_INT64), tany = desc(pb, 0, s6, TH1_DATA_BOOL);
    CHECK(th1ReduceSum(&ti, NULL, 0, 0, &tsum) == TH1_SUCCESS);
    get(ri, pio, 8);
    CHECK(ri[0] == 14);
    CHECK(th1ReduceLogical(&tx, NULL, 0, 0, TH1_REDUCE_ALL, &tany) == TH1_SUCCESS);
    CHECK(th1ReduceLogicalAxis(&tx, 0, 0, TH1_REDUCE_ANY, &tany) == TH1_SUCCESS);
    th1TensorDesc_t tx23 = desc(px, 2, s23, F), tv2 = desc(po, 1, s2, F), ti2 = desc(pio, 1, s2, TH1_DATA_INT64);
    CHECK(th1ReduceMinMax(&tx23, 1, 0, TH1_REDUCE_MAX, &tv2, &ti2) == TH1_SUCCESS);
    get(r, po, 8);
    get(ri, pio, 16);
    CHECK(r[0] == 7 && ri[0] == 2 && ri[1] == 0);
    CHECK(th1ArgMinMax(&tx23, -1, 0, TH1_REDUCE_MIN, &ti2) == TH1_SUCCESS);
    th1TensorDesc_t tk = desc(po, 1, s3, F), tki = desc(pio, 1, s3, TH1_DATA_INT64);
    CHECK(th1TopK(&tx, 3, 0, 0, &tk, &tki) == TH1_SUCCESS);
    get(r, po, 12);
    CHECK(r[0] == -2 && r[1] == -1 && r[2] == 0.5f);
    CHECK(th1CumSum(&ti, 0, &tio) == TH1_SUCCESS);
    CHECK(th1Clamp(&tx, NULL, &tx, &to) == TH1_SUCCESS && th1IsIn(&ti, &ti, 0, &tb) == TH1_SUCCESS);
    int64_t g6[6] = {2, 0, 1, 1, 1, 0};
    th1DevPtr_t pg = put(g6, sizeof g6);
    th1TensorDesc_t tg = desc(pg, 2, s23, TH1_DATA_INT64), to23 = desc(po, 2, s23, F);
    CHECK(th1Gather(&tx23, 1, &tg, &to23) == TH1_SUCCESS);
    get(r, po, 24);
    CHECK(r[0] == 7 && r[1] == 3 && r[5] == 7);
    CHECK(th1Scatter(&tx23, 1, &tg, &tx23, 1, &to23) == TH1_SUCCESS);
    th1TensorDesc_t tbad = desc(pi, 2, s23, TH1_DATA_INT64);
    CHECK(th1Gather(&tx23, 1, &tbad, &to23) == TH1_ERROR_DATA);
    th1TensorDesc_t tsel = desc(pg, 1, s2, TH1_DATA_INT64), tos = desc(po, 2, (int64_t[]){2, 2}, F);
    CHECK(th1IndexSelect(&tx23, 1, &tsel, &tos) == TH1_SUCCESS);
    CHECK(th1IndexAdd(&tx23, 1, &tsel, &tos, 1.0, &to23) == TH1_SUCCESS);
    const th1TensorDesc_t *idx[1] = {&tsel};
    CHECK(th1Index(&tx, idx, 1, &tv2) == TH1_SUCCESS && th1IndexPut(&tx, idx, 1, &tv2, 0, &to) == TH1_SUCCESS);
    CHECK(th1Triangle(&tx23, 0, 1, &to23) == TH1_SUCCESS);
    int64_t pad[2] = {1, 1};
    th1TensorDesc_t tpad = desc(pio, 1, (int64_t[]){8}, F);
    CHECK(th1Pad(&tx, pad, 2, 9.0, &tpad) == TH1_SUCCESS);
    th1TensorDesc_t tu = desc(px, 4, (int64_t[]){1, 1, 2, 3}, F), tuo = desc(pio, 4, (int64_t[]){1, 1, 2, 6}, F);
    CHECK(th1UpsampleNearest2d(&tu, 0.0, 0.0, &tuo) == TH1_SUCCESS);
    th1TensorDesc_t tug = desc(pb, 4, (int64_t[]){1, 1, 1, 1}, F);
    CHECK(th1UpsampleNearest2dBackward(&tuo, 0.0, 0.0, &tug) == TH1_SUCCESS);
    CHECK(th1SliceBackward(&tv2, 0, 1, 6, 3, &to) == TH1_SUCCESS);
    float scale = 1024.0f, inf0 = 0.0f, inv = 0.5f;
    int32_t tracker = 1;
    th1DevPtr_t psc = put(&scale, 4), pgt = put(&tracker, 4), pfi = put(&inf0, 4), pinv = put(&inv, 4);
    th1TensorDesc_t tsc = desc(psc, 0, s6, F), tgt = desc(pgt, 0, s6, TH1_DATA_INT32), tfi = desc(pfi, 0, s6, F),
                    tinv = desc(pinv, 0, s6, F);
    CHECK(th1AmpUpdateScale(&tsc, &tgt, &tfi, 2.0, 0.5, 2, &tsc) == TH1_SUCCESS);
    get(&scale, psc, 4);
    CHECK(scale == 2048.0f);
    th1TensorDesc_t *grads[1] = {&to};
    CHECK(th1AmpUnscale(grads, 1, &tfi, &tinv) == TH1_SUCCESS);
    float fp[2] = {1.0f, 1.0f}, fg[2] = {0.5f, -0.5f}, fz[2] = {0, 0}, fstep = 1.0f;
    th1DevPtr_t pfp = put(fp, 8), pfg = put(fg, 8), pfm = put(fz, 8), pfv = put(fz, 8), pfs = put(&fstep, 4);
    th1TensorDesc_t tfp = desc(pfp, 1, s2, F), tfg = desc(pfg, 1, s2, F), tfm = desc(pfm, 1, s2, F),
                    tfv = desc(pfv, 1, s2, F), tfs = desc(pfs, 0, s2, F);
    th1TensorDesc_t *lp[1] = {&tfp}, *lg[1] = {&tfg}, *lm[1] = {&tfm}, *lv[1] = {&tfv};
    const th1TensorDesc_t *ls[1] = {&tfs};
    CHECK(th1FusedAdam(lp, lg, lm, lv, NULL, ls, 1, 0.1, 0.9, 0.999, 0.0, 1e-8, TH1_ADAM_DECOUPLED, NULL, NULL) ==
          TH1_SUCCESS);
    get(fp, pfp, 8);
    CHECK(fabsf(fp[0] - 0.9f) < 1e-6f && fabsf(fp[1] - 1.1f) < 1e-6f);
    CHECK(th1FusedSgd(lp, lg, lm, 1, 0.0, 0.9, 0.1, 0.0, TH1_SGD_FIRST_STEP, NULL, NULL) == TH1_SUCCESS);
    th1MemFree(pfp), th1MemFree(pfg), th1MemFree(pfm), th1MemFree(pfv), th1MemFree(pfs);
    unsigned long long words = 0;
    CHECK(th1RngWords(5, 1, &words) == TH1_SUCCESS && words == 8);
    CHECK(th1RngRandom(&tio, 0, (int64_t)1 << 31, 0, 0) == TH1_SUCCESS);   /* x1's words: the same stream */
    get(ri, pio, 48);
    CHECK(ri[0] == 0x6627e8d5 && ri[1] == 0x6169c58d);
    CHECK(th1RngUniform(&to, -1.0, 1.0, 1, 0) == TH1_SUCCESS && th1RngNormal(&to, 0.0, 1.0, 1, 8) == TH1_SUCCESS);
    CHECK(th1RngBernoulli(&tb, 0.5, 1, 16) == TH1_SUCCESS && th1RngNormal(&tb, 0.0, 1.0, 1, 0) == TH1_ERROR_NOT_SUPPORTED);
    CHECK(th1Dropout(&tx, 0.5, 1, 3, 0, &to, &tb) == TH1_SUCCESS && th1Dropout(&tx, 0.5, 1, 3, 6, &to, &tb) ==
          TH1_ERROR_INVALID_ARGUMENT);
    th1MemFree(px), th1MemFree(pi), th1MemFree(po), th1MemFree(pio), th1MemFree(pb), th1MemFree(pg);
    th1MemFree(psc), th1MemFree(pgt), th1MemFree(pfi), th1MemFree(pinv);
}

#undef F

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
    training_kernels();
    selection_kernels();
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
