/*
 * th1_runtime.c: the simulated TH1 training accelerator.
 *
 * Same simulator core as x1, different ABI: descriptor layout with an element
 * offset, CUDA-style names and status codes, float32/bfloat16 compute, and
 * matrix kernels that only take sizes that are multiples of 16.
 */
#include "th1_runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/simcore.h"
#include "../common/simkernels.h"

static const sim_dtype COMPUTE[] = {SIM_F32, SIM_BF16};

static th1Result_t code(sim_status s) {
    sim_op_done(); /* every runtime call returns through here: ends the device timer */
    static const th1Result_t map[SIM_E_COUNT] = {
        [SIM_OK] = TH1_SUCCESS,
        [SIM_E_INVALID_VALUE] = TH1_ERROR_INVALID_ARGUMENT,
        [SIM_E_OOM] = TH1_ERROR_OUT_OF_MEMORY,
        [SIM_E_UNSUPPORTED] = TH1_ERROR_NOT_SUPPORTED,
        [SIM_E_DEVICE] = TH1_ERROR_HARDWARE,
        [SIM_E_NOT_INITIALIZED] = TH1_ERROR_NOT_INITIALIZED,
        [SIM_E_BAD_ADDRESS] = TH1_ERROR_ILLEGAL_ADDRESS,
        [SIM_E_DATA] = TH1_ERROR_DATA,
    };
    return (unsigned)s < SIM_E_COUNT ? map[s] : TH1_ERROR_HARDWARE;
}

static int to_sim_dtype(th1DataType_t d, sim_dtype *out) {
    switch (d) {
        case TH1_DATA_FLOAT: *out = SIM_F32; return 1;
        case TH1_DATA_BFLOAT16: *out = SIM_BF16; return 1;
        case TH1_DATA_INT32: *out = SIM_I32; return 1;
        case TH1_DATA_INT64: *out = SIM_I64; return 1;
        case TH1_DATA_BOOL: *out = SIM_BOOL; return 1;
        case TH1_DATA_INT8: *out = SIM_I8; return 1;
        case TH1_DATA_UINT8: *out = SIM_U8; return 1;
        default: return 0;
    }
}

static sim_status view_of(const th1TensorDesc_t *t, sim_view *v, const char *fn, const char *what,
                          int optional) {
    memset(v, 0, sizeof *v);
    if (!t) {
        if (optional) return SIM_OK;
        return sim_fail(SIM_E_INVALID_VALUE, fn, "%s descriptor is NULL", what);
    }
    if (t->nbDims < 0 || t->nbDims > TH1_MAX_DIMS)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "%s: nbDims=%d (TH1 supports 0..%d)", what,
                        (int)t->nbDims, TH1_MAX_DIMS);
    if (t->elemOffset < 0)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "%s: negative elemOffset", what);
    sim_dtype dt;
    if (!to_sim_dtype(t->dataType, &dt))
        return sim_fail(SIM_E_INVALID_VALUE, fn, "%s: unknown th1 data type %d", what, (int)t->dataType);
    uint64_t addr = t->ptr + (uint64_t)t->elemOffset * sim_dtype_size(dt);
    return sim_make_view(v, addr, t->nbDims, t->dims, t->strides, dt, fn, what);
}

#define TRY(expr)                       \
    do {                                \
        sim_status st_ = (expr);        \
        if (st_ != SIM_OK) return st_;  \
    } while (0)

static sim_status need_compute(const char *fn, const char *what, const sim_view *v) {
    return simk_check_dtype_in(fn, what, v, COMPUTE, 2);
}

/* -------------------------------------------------------------- driver */

TH1API th1Result_t th1Init(unsigned long long memBytes) {
    sim_configure("th1", "TH1SIM", 0x00B7000000000000ull, 16ull << 30);
    return code(sim_init(memBytes));
}
TH1API th1Result_t th1Shutdown(void) { return code(sim_shutdown()); }
TH1API const char *th1GetLastErrorString(void) { return sim_last_error(); }
TH1API th1Result_t th1DeviceSynchronize(void) { return code(sim_require_init("th1DeviceSynchronize")); }

TH1API th1Result_t th1MemAlloc(th1DevPtr_t *devPtr, size_t byteSize) {
    uint64_t p = 0;
    sim_status st = sim_malloc(devPtr ? &p : NULL, byteSize, "th1MemAlloc");
    if (!st) *devPtr = p;
    return code(st);
}
TH1API th1Result_t th1MemFree(th1DevPtr_t devPtr) { return code(sim_free(devPtr, "th1MemFree")); }

TH1API th1Result_t th1MemGetInfo(size_t *freeBytes, size_t *totalBytes) {
    sim_status st = sim_require_init("th1MemGetInfo");
    if (st) return code(st);
    uint64_t f, t;
    sim_mem_info(&f, &t);
    if (freeBytes) *freeBytes = (size_t)f;
    if (totalBytes) *totalBytes = (size_t)t;
    return TH1_SUCCESS;
}

TH1API th1Result_t th1MemcpyHtoD(th1DevPtr_t dstDevice, const void *srcHost, size_t byteCount) {
    return code(sim_h2d(dstDevice, srcHost, byteCount, "th1MemcpyHtoD"));
}
TH1API th1Result_t th1MemcpyDtoH(void *dstHost, th1DevPtr_t srcDevice, size_t byteCount) {
    return code(sim_d2h(dstHost, srcDevice, byteCount, "th1MemcpyDtoH"));
}
TH1API th1Result_t th1MemcpyDtoD(th1DevPtr_t dstDevice, th1DevPtr_t srcDevice, size_t byteCount) {
    return code(sim_d2d(dstDevice, srcDevice, byteCount, "th1MemcpyDtoD"));
}
TH1API th1Result_t th1MemcpyHtoDBatch(const th1DevPtr_t *dstDevices, const void *const *srcHosts,
                                      const size_t *byteCounts, size_t numCopies) {
    /* th1DevPtr_t and uint64_t have the same width on every supported target */
    return code(sim_h2d_batch((const uint64_t *)dstDevices, srcHosts, byteCounts, numCopies,
                              "th1MemcpyHtoDBatch"));
}

TH1API th1Result_t th1GetStats(th1Stats_t *stats) {
    if (!stats) return code(sim_fail(SIM_E_INVALID_VALUE, "th1GetStats", "stats is NULL"));
    sim_counters s;
    sim_get_counters(&s);
    *stats = (th1Stats_t){s.h2d_bytes, s.h2d_calls, s.h2d_batch_calls, s.d2h_bytes, s.d2h_calls,
                          s.d2d_bytes, s.d2d_calls, s.live_bytes, s.peak_bytes, s.alloc_calls,
                          s.free_calls, s.kernel_launches};
    return TH1_SUCCESS;
}
TH1API th1Result_t th1ResetStats(void) {
    sim_reset_counters();
    return TH1_SUCCESS;
}
TH1API th1Result_t th1GetKernelStats(th1KernelStat_t *stats, int maxStats, int *numStats) {
    if (!numStats || maxStats < 0 || (maxStats > 0 && !stats))
        return code(sim_fail(SIM_E_INVALID_VALUE, "th1GetKernelStats", "bad arguments"));
    char names[SIM_MAX_KERNELS][SIM_KERNEL_NAME_LEN];
    uint64_t counts[SIM_MAX_KERNELS];
    int n = sim_kernel_counters(names, counts, SIM_MAX_KERNELS);
    for (int i = 0; i < n && i < maxStats && i < SIM_MAX_KERNELS; i++) {
        memcpy(stats[i].name, names[i], TH1_KERNEL_NAME_MAX);
        stats[i].launches = counts[i];
    }
    *numStats = n;
    return TH1_SUCCESS;
}
TH1API th1Result_t th1DebugInjectFaults(const char *spec) { return code(sim_set_faults(spec)); }

/* ------------------------------------------------------------- kernels */

static const sim_dtype ARITH[] = {SIM_F32, SIM_BF16, SIM_I32, SIM_I64};
static const sim_dtype BITS[] = {SIM_BOOL, SIM_I32, SIM_I64};
static const sim_dtype ANY[] = {SIM_F32, SIM_BF16, SIM_I32, SIM_I64, SIM_BOOL};
#define NELEM(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* a op b -> c; `allowed` are the operand dtypes TH1 computes for this op */
static sim_status elementwise2(const char *fn, const char *kernel, simk_binop op, const sim_dtype *allowed,
                               int nallowed, const th1TensorDesc_t *a, const th1TensorDesc_t *b, float alpha,
                               th1TensorDesc_t *c) {
    sim_view av, bv, cv;
    TRY(sim_require_init(fn));
    TRY(view_of(c, &cv, fn, "c", 0));
    TRY(view_of(a, &av, fn, "a", 0));
    TRY(view_of(b, &bv, fn, "b", 0));
    TRY(simk_check_dtype_in(fn, "a", &av, allowed, nallowed));
    return simk_binary(fn, kernel, op, &av, &bv, alpha, &cv);
}

TH1API th1Result_t th1Add(const th1TensorDesc_t *a, const th1TensorDesc_t *b, float alpha,
                          th1TensorDesc_t *c) {
    return code(elementwise2("th1Add", "add", SIMK_ADD, ARITH, NELEM(ARITH), a, b, alpha, c));
}
TH1API th1Result_t th1Sub(const th1TensorDesc_t *a, const th1TensorDesc_t *b, float alpha,
                          th1TensorDesc_t *c) {
    return code(elementwise2("th1Sub", "sub", SIMK_SUB, ARITH, NELEM(ARITH), a, b, alpha, c));
}

#define TH1_BINARY(name, kernel, op, set)                                                              \
    TH1API th1Result_t th1##name(const th1TensorDesc_t *a, const th1TensorDesc_t *b, th1TensorDesc_t *c) { \
        return code(elementwise2("th1" #name, kernel, op, set, NELEM(set), a, b, 1.0f, c));             \
    }
TH1_BINARY(Mul, "mul", SIMK_MUL, ARITH)
TH1_BINARY(Div, "div", SIMK_DIV, COMPUTE)
TH1_BINARY(Pow, "pow", SIMK_POW, COMPUTE)
TH1_BINARY(Maximum, "maximum", SIMK_MAXIMUM, ARITH)
TH1_BINARY(Minimum, "minimum", SIMK_MINIMUM, ARITH)
TH1_BINARY(Equal, "eq", SIMK_EQ, ANY)
TH1_BINARY(NotEqual, "ne", SIMK_NE, ANY)
TH1_BINARY(Less, "lt", SIMK_LT, ANY)
TH1_BINARY(LessEqual, "le", SIMK_LE, ANY)
TH1_BINARY(Greater, "gt", SIMK_GT, ANY)
TH1_BINARY(GreaterEqual, "ge", SIMK_GE, ANY)
TH1_BINARY(BitwiseAnd, "bitwise_and", SIMK_BITAND, BITS)
TH1_BINARY(BitwiseOr, "bitwise_or", SIMK_BITOR, BITS)
TH1_BINARY(BitwiseXor, "bitwise_xor", SIMK_BITXOR, BITS)

static sim_status elementwise1(const char *fn, const char *kernel, simk_unop op, const sim_dtype *allowed,
                               int nallowed, const th1TensorDesc_t *x, th1TensorDesc_t *y) {
    sim_view xv, yv;
    TRY(sim_require_init(fn));
    TRY(view_of(y, &yv, fn, "y", 0));
    TRY(view_of(x, &xv, fn, "x", 0));
    TRY(simk_check_dtype_in(fn, "x", &xv, allowed, nallowed));
    return simk_unary(fn, kernel, op, &xv, &yv);
}

#define TH1_UNARY(name, kernel, op, set)                                                       \
    TH1API th1Result_t th1##name(const th1TensorDesc_t *x, th1TensorDesc_t *y) {               \
        return code(elementwise1("th1" #name, kernel, op, set, NELEM(set), x, y));              \
    }
TH1_UNARY(Relu, "relu", SIMK_RELU, COMPUTE)
TH1_UNARY(Silu, "silu", SIMK_SILU, COMPUTE)
TH1_UNARY(Sigmoid, "sigmoid", SIMK_SIGMOID, COMPUTE)
TH1_UNARY(Tanh, "tanh", SIMK_TANH, COMPUTE)
TH1_UNARY(Exp, "exp", SIMK_EXP, COMPUTE)
TH1_UNARY(Log, "log", SIMK_LOG, COMPUTE)
TH1_UNARY(Sqrt, "sqrt", SIMK_SQRT, COMPUTE)
TH1_UNARY(Rsqrt, "rsqrt", SIMK_RSQRT, COMPUTE)
TH1_UNARY(Reciprocal, "reciprocal", SIMK_RECIPROCAL, COMPUTE)
TH1_UNARY(Cos, "cos", SIMK_COS, COMPUTE)
TH1_UNARY(Sin, "sin", SIMK_SIN, COMPUTE)
TH1_UNARY(Neg, "neg", SIMK_NEG, ARITH)
TH1_UNARY(Abs, "abs", SIMK_ABS, ARITH)
TH1_UNARY(BitwiseNot, "bitwise_not", SIMK_BITNOT, BITS)

TH1API th1Result_t th1Gelu(const th1TensorDesc_t *x, int mode, th1TensorDesc_t *y) {
    if (mode != 0 && mode != 1)
        return code(sim_fail(SIM_E_INVALID_VALUE, "th1Gelu", "mode=%d (0 exact, 1 tanh)", mode));
    return code(elementwise1("th1Gelu", "gelu", mode ? SIMK_GELU_TANH : SIMK_GELU, COMPUTE, NELEM(COMPUTE), x, y));
}

TH1API th1Result_t th1PowScalar(const th1TensorDesc_t *x, double exponent, th1TensorDesc_t *y) {
    const char *fn = "th1PowScalar";
    sim_view xv, yv;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(y, &yv, fn, "y", 0)) || (st = view_of(x, &xv, fn, "x", 0)) ||
        (st = need_compute(fn, "x", &xv)))
        return code(st);
    return code(simk_pow_scalar(fn, "pow_scalar", &xv, exponent, &yv));
}

TH1API th1Result_t th1ScalarPow(double base, const th1TensorDesc_t *x, th1TensorDesc_t *y) {
    const char *fn = "th1ScalarPow";
    sim_view xv, yv;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(y, &yv, fn, "y", 0)) || (st = view_of(x, &xv, fn, "x", 0)) ||
        (st = need_compute(fn, "x", &xv)))
        return code(st);
    return code(simk_scalar_pow(fn, "scalar_pow", base, &xv, &yv));
}

TH1API th1Result_t th1DivScalar(const th1TensorDesc_t *a, double b, th1TensorDesc_t *c) {
    const char *fn = "th1DivScalar";
    sim_view av, cv;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(c, &cv, fn, "c", 0)) || (st = view_of(a, &av, fn, "a", 0)) ||
        (st = need_compute(fn, "a", &av)))
        return code(st);
    return code(simk_div_scalar(fn, "div_scalar", &av, b, &cv));
}

static sim_status addc(const char *fn, const char *kernel, int div, const th1TensorDesc_t *x,
                       const th1TensorDesc_t *a, const th1TensorDesc_t *b, double scale, th1TensorDesc_t *y) {
    sim_view xv, av, bv, yv;
    TRY(sim_require_init(fn));
    TRY(view_of(y, &yv, fn, "y", 0));
    TRY(view_of(x, &xv, fn, "x", 0));
    TRY(view_of(a, &av, fn, "a", 0));
    TRY(view_of(b, &bv, fn, "b", 0));
    TRY(need_compute(fn, "x", &xv));
    return simk_addc(fn, kernel, div, &xv, &av, &bv, scale, &yv);
}

TH1API th1Result_t th1Addcmul(const th1TensorDesc_t *x, const th1TensorDesc_t *a, const th1TensorDesc_t *b,
                              double scale, th1TensorDesc_t *y) {
    return code(addc("th1Addcmul", "addcmul", 0, x, a, b, scale, y));
}
TH1API th1Result_t th1Addcdiv(const th1TensorDesc_t *x, const th1TensorDesc_t *a, const th1TensorDesc_t *b,
                              double scale, th1TensorDesc_t *y) {
    return code(addc("th1Addcdiv", "addcdiv", 1, x, a, b, scale, y));
}

TH1API th1Result_t th1Lerp(const th1TensorDesc_t *x, const th1TensorDesc_t *end, double weight,
                           th1TensorDesc_t *y) {
    const char *fn = "th1Lerp";
    sim_view xv, ev, yv;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(y, &yv, fn, "y", 0)) || (st = view_of(x, &xv, fn, "x", 0)) ||
        (st = view_of(end, &ev, fn, "end", 0)) || (st = need_compute(fn, "x", &xv)))
        return code(st);
    return code(simk_lerp(fn, "lerp", &xv, &ev, weight, &yv));
}

TH1API th1Result_t th1Where(const th1TensorDesc_t *cond, const th1TensorDesc_t *a, const th1TensorDesc_t *b,
                            th1TensorDesc_t *c) {
    const char *fn = "th1Where";
    sim_view kv, av, bv, cv;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(c, &cv, fn, "c", 0)) ||
        (st = view_of(cond, &kv, fn, "cond", 0)) || (st = view_of(a, &av, fn, "a", 0)) ||
        (st = view_of(b, &bv, fn, "b", 0)) || (st = simk_check_dtype_in(fn, "a", &av, ANY, NELEM(ANY))))
        return code(st);
    return code(simk_where(fn, "where", &kv, &av, &bv, &cv));
}

TH1API th1Result_t th1MaskedFill(const th1TensorDesc_t *x, const th1TensorDesc_t *mask, double value,
                                 th1TensorDesc_t *y) {
    const char *fn = "th1MaskedFill";
    sim_view xv, mv, yv;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(y, &yv, fn, "y", 0)) || (st = view_of(x, &xv, fn, "x", 0)) ||
        (st = view_of(mask, &mv, fn, "mask", 0)) || (st = simk_check_dtype_in(fn, "x", &xv, ANY, NELEM(ANY))))
        return code(st);
    return code(simk_masked_fill(fn, "masked_fill", &xv, &mv, value, &yv));
}

static sim_status grad1(const char *fn, const char *kernel, simk_gradop op, const th1TensorDesc_t *dy,
                        const th1TensorDesc_t *x, double param, th1TensorDesc_t *dx, const char *xname) {
    sim_view gv, xv, ov;
    TRY(sim_require_init(fn));
    TRY(view_of(dx, &ov, fn, "dx", 0));
    TRY(view_of(dy, &gv, fn, "dy", 0));
    TRY(view_of(x, &xv, fn, xname, 0));
    TRY(need_compute(fn, "dy", &gv));
    return simk_pointwise_grad(fn, kernel, op, &gv, &xv, param, &ov);
}

TH1API th1Result_t th1GeluBackward(const th1TensorDesc_t *dy, const th1TensorDesc_t *x, int mode,
                                   th1TensorDesc_t *dx) {
    if (mode != 0 && mode != 1)
        return code(sim_fail(SIM_E_INVALID_VALUE, "th1GeluBackward", "mode=%d (0 exact, 1 tanh)", mode));
    return code(grad1("th1GeluBackward", "gelu_backward", mode ? SIMK_GRAD_GELU_TANH : SIMK_GRAD_GELU, dy, x, 0,
                      dx, "x"));
}
TH1API th1Result_t th1DropoutBackward(const th1TensorDesc_t *dy, const th1TensorDesc_t *mask, double scale,
                                      th1TensorDesc_t *dx) {
    const char *fn = "th1DropoutBackward";
    sim_view gv, mv, ov;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(dx, &ov, fn, "dx", 0)) || (st = view_of(dy, &gv, fn, "dy", 0)) ||
        (st = view_of(mask, &mv, fn, "mask", 0)) || (st = need_compute(fn, "dy", &gv)))
        return code(st);
    return code(simk_mask_scale(fn, "dropout_backward", &gv, &mv, scale, &ov));
}
TH1API th1Result_t th1ThresholdBackward(const th1TensorDesc_t *dy, const th1TensorDesc_t *x, double threshold,
                                        th1TensorDesc_t *dx) {
    return code(grad1("th1ThresholdBackward", "threshold_backward", SIMK_GRAD_THRESHOLD, dy, x, threshold, dx,
                      "x"));
}
TH1API th1Result_t th1SigmoidBackward(const th1TensorDesc_t *dy, const th1TensorDesc_t *y, th1TensorDesc_t *dx) {
    return code(grad1("th1SigmoidBackward", "sigmoid_backward", SIMK_GRAD_SIGMOID_Y, dy, y, 0, dx, "y"));
}
TH1API th1Result_t th1TanhBackward(const th1TensorDesc_t *dy, const th1TensorDesc_t *y, th1TensorDesc_t *dx) {
    return code(grad1("th1TanhBackward", "tanh_backward", SIMK_GRAD_TANH_Y, dy, y, 0, dx, "y"));
}

/* ---------------------------------------------------------- matrix unit */

static sim_status check_aligned(const char *fn, const sim_view *a, const sim_view *b) {
    int nd = a->ndim;
    if (nd < 2 || b->ndim < 2)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "operands must be at least 2-D");
    int64_t M = a->shape[nd - 2], K = a->shape[nd - 1], N = b->shape[b->ndim - 1];
    if (M % TH1_MATMUL_ALIGN || N % TH1_MATMUL_ALIGN || K % TH1_MATMUL_ALIGN)
        return sim_fail(SIM_E_UNSUPPORTED, fn,
                        "M=%lld, N=%lld, K=%lld: the TH1 matrix unit needs multiples of %d",
                        (long long)M, (long long)N, (long long)K, TH1_MATMUL_ALIGN);
    return SIM_OK;
}

TH1API th1Result_t th1Matmul(const th1TensorDesc_t *a, const th1TensorDesc_t *b, th1TensorDesc_t *c) {
    const char *fn = "th1Matmul";
    sim_view av, bv, cv, none;
    sim_status st;
    memset(&none, 0, sizeof none);
    if ((st = sim_require_init(fn)) || (st = view_of(c, &cv, fn, "c", 0)) ||
        (st = view_of(a, &av, fn, "a", 0)) || (st = view_of(b, &bv, fn, "b", 0)) ||
        (st = need_compute(fn, "c", &cv)) || (st = check_aligned(fn, &av, &bv)))
        return code(st);
    return code(simk_gemm(fn, av.ndim == 3 ? "bmm" : "mm", &av, &bv, &none, 0.0, 1.0, &cv));
}

TH1API th1Result_t th1Addmm(const th1TensorDesc_t *bias, const th1TensorDesc_t *a,
                            const th1TensorDesc_t *b, float beta, float alpha, th1TensorDesc_t *c) {
    const char *fn = "th1Addmm";
    sim_view biv, av, bv, cv;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(c, &cv, fn, "c", 0)) ||
        (st = view_of(a, &av, fn, "a", 0)) || (st = view_of(b, &bv, fn, "b", 0)) ||
        (st = view_of(bias, &biv, fn, "bias", 0)) || (st = need_compute(fn, "c", &cv)) ||
        (st = check_aligned(fn, &av, &bv)))
        return code(st);
    if (cv.ndim != 2) return code(sim_fail(SIM_E_INVALID_VALUE, fn, "operands must be 2-D"));
    return code(simk_gemm(fn, "addmm", &av, &bv, &biv, beta, alpha, &cv));
}

TH1API th1Result_t th1LayerNorm(const th1TensorDesc_t *x, int normDims, const th1TensorDesc_t *gamma,
                                const th1TensorDesc_t *beta, float epsilon, th1TensorDesc_t *y,
                                th1TensorDesc_t *mean, th1TensorDesc_t *rstd) {
    const char *fn = "th1LayerNorm";
    sim_view xv, gv, bv, yv, mv, rv;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(y, &yv, fn, "y", 0)) ||
        (st = view_of(x, &xv, fn, "x", 0)) || (st = view_of(gamma, &gv, fn, "gamma", 1)) ||
        (st = view_of(beta, &bv, fn, "beta", 1)) || (st = view_of(mean, &mv, fn, "mean", 1)) ||
        (st = view_of(rstd, &rv, fn, "rstd", 1)) || (st = need_compute(fn, "x", &xv)))
        return code(st);
    return code(simk_layer_norm(fn, "layer_norm", &xv, normDims, &gv, &bv, epsilon, &yv, &mv, &rv));
}

TH1API th1Result_t th1LayerNormBackward(const th1TensorDesc_t *dy, const th1TensorDesc_t *x, int normDims,
                                        const th1TensorDesc_t *mean, const th1TensorDesc_t *rstd,
                                        const th1TensorDesc_t *gamma, th1TensorDesc_t *dx,
                                        th1TensorDesc_t *dgamma, th1TensorDesc_t *dbeta) {
    const char *fn = "th1LayerNormBackward";
    sim_view dyv, xv, mv, rv, gv, dxv, dgv, dbv;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(dy, &dyv, fn, "dy", 0)) || (st = view_of(x, &xv, fn, "x", 0)) ||
        (st = view_of(mean, &mv, fn, "mean", 0)) || (st = view_of(rstd, &rv, fn, "rstd", 0)) ||
        (st = view_of(gamma, &gv, fn, "gamma", 1)) || (st = view_of(dx, &dxv, fn, "dx", 1)) ||
        (st = view_of(dgamma, &dgv, fn, "dgamma", 1)) || (st = view_of(dbeta, &dbv, fn, "dbeta", 1)) ||
        (st = need_compute(fn, "x", &xv)))
        return code(st);
    if ((dgv.present || dbv.present) && !gv.present)
        return code(sim_fail(SIM_E_INVALID_VALUE, fn, "dgamma and dbeta need gamma (an affine layer norm)"));
    return code(simk_layer_norm_backward(fn, "layer_norm_backward", &dyv, &xv, normDims, &mv, &rv, &gv, &dxv,
                                         &dgv, &dbv));
}

TH1API th1Result_t th1BatchNormInference(const th1TensorDesc_t *x, const th1TensorDesc_t *gamma,
                                         const th1TensorDesc_t *beta, const th1TensorDesc_t *runningMean,
                                         const th1TensorDesc_t *runningVar, double epsilon, th1TensorDesc_t *y) {
    const char *fn = "th1BatchNormInference";
    sim_view xv, gv, bv, mv, vv, yv;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(y, &yv, fn, "y", 0)) || (st = view_of(x, &xv, fn, "x", 0)) ||
        (st = view_of(gamma, &gv, fn, "gamma", 1)) || (st = view_of(beta, &bv, fn, "beta", 1)) ||
        (st = view_of(runningMean, &mv, fn, "runningMean", 0)) ||
        (st = view_of(runningVar, &vv, fn, "runningVar", 0)) || (st = need_compute(fn, "x", &xv)))
        return code(st);
    const sim_view *params[4] = {&gv, &bv, &mv, &vv};
    for (int i = 0; i < 4; i++)
        if (params[i]->present && (st = need_compute(fn, "per-channel parameter", params[i]))) return code(st);
    return code(simk_batch_norm_infer(fn, "batch_norm", &xv, &gv, &bv, &mv, &vv, epsilon, &yv));
}

/* --------------------------------------------------------------- softmax */

static sim_status softmax_flags(const char *fn, int flags, int allowed) {
    if (flags & ~allowed) return sim_fail(SIM_E_INVALID_VALUE, fn, "unknown flags 0x%x", (unsigned)flags);
    return SIM_OK;
}

TH1API th1Result_t th1Softmax(const th1TensorDesc_t *x, int axis, int flags, th1TensorDesc_t *y) {
    const char *fn = "th1Softmax";
    sim_view xv, yv;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(y, &yv, fn, "y", 0)) ||
        (st = view_of(x, &xv, fn, "x", 0)) || (st = need_compute(fn, "x", &xv)) ||
        (st = softmax_flags(fn, flags, TH1_SOFTMAX_SAFE | TH1_SOFTMAX_LOG)))
        return code(st);
    unsigned f = ((flags & TH1_SOFTMAX_SAFE) ? SIMK_SOFTMAX_SAFE : 0) | ((flags & TH1_SOFTMAX_LOG) ? SIMK_SOFTMAX_LOG : 0);
    const char *kernel = (flags & TH1_SOFTMAX_LOG) ? "log_softmax" : (flags & TH1_SOFTMAX_SAFE) ? "safe_softmax"
                                                                                                : "softmax";
    return code(simk_softmax(fn, kernel, &xv, axis, f, &yv));
}

TH1API th1Result_t th1SoftmaxBackward(const th1TensorDesc_t *dy, const th1TensorDesc_t *y, int axis, int flags,
                                      th1TensorDesc_t *dx) {
    const char *fn = "th1SoftmaxBackward";
    sim_view gv, yv, ov;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(dx, &ov, fn, "dx", 0)) || (st = view_of(dy, &gv, fn, "dy", 0)) ||
        (st = view_of(y, &yv, fn, "y", 0)) || (st = need_compute(fn, "y", &yv)) ||
        (st = softmax_flags(fn, flags, TH1_SOFTMAX_LOG)))
        return code(st);
    int lg = (flags & TH1_SOFTMAX_LOG) != 0;
    return code(simk_softmax_backward(fn, lg ? "log_softmax_backward" : "softmax_backward", &gv, &yv, axis, lg,
                                      &ov));
}

/* ------------------------------------------------------------ reductions */

static sim_status reduce(const char *fn, const char *kernel, int mean, const th1TensorDesc_t *x,
                         const int64_t *axes, int numAxes, int keepDims, th1TensorDesc_t *y) {
    sim_view xv, yv;
    uint32_t mask;
    TRY(sim_require_init(fn));
    TRY(view_of(y, &yv, fn, "y", 0));
    TRY(view_of(x, &xv, fn, "x", 0));
    TRY(need_compute(fn, "x", &xv));
    TRY(need_compute(fn, "y", &yv));
    TRY(simk_reduce_dims(fn, &xv, axes, numAxes, keepDims, &yv, &mask));
    return simk_reduce(fn, kernel, &xv, mask, mean, &yv);
}

TH1API th1Result_t th1ReduceSum(const th1TensorDesc_t *x, const int64_t *axes, int numAxes, int keepDims,
                                th1TensorDesc_t *y) {
    const char *fn = "th1ReduceSum";
    sim_view xv, yv;
    uint32_t mask;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(y, &yv, fn, "y", 0)) || (st = view_of(x, &xv, fn, "x", 0)))
        return code(st);
    if (simk_is_float(xv.dtype)) return code(reduce(fn, "sum", 0, x, axes, numAxes, keepDims, y));
    if ((st = simk_reduce_dims(fn, &xv, axes, numAxes, keepDims, &yv, &mask))) return code(st);
    return code(simk_reduce_int(fn, "sum", &xv, mask, &yv));
}
TH1API th1Result_t th1ReduceMean(const th1TensorDesc_t *x, const int64_t *axes, int numAxes, int keepDims,
                                 th1TensorDesc_t *y) {
    return code(reduce("th1ReduceMean", "mean", 1, x, axes, numAxes, keepDims, y));
}

TH1API th1Result_t th1ReduceLogSumExp(const th1TensorDesc_t *x, const int64_t *axes, int numAxes, int keepDims,
                                      th1TensorDesc_t *y) {
    const char *fn = "th1ReduceLogSumExp";
    sim_view xv, yv;
    uint32_t mask;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(y, &yv, fn, "y", 0)) || (st = view_of(x, &xv, fn, "x", 0)) ||
        (st = need_compute(fn, "x", &xv)) || (st = simk_reduce_dims(fn, &xv, axes, numAxes, keepDims, &yv, &mask)))
        return code(st);
    return code(simk_logsumexp(fn, "logsumexp", &xv, mask, &yv));
}

TH1API th1Result_t th1VarMean(const th1TensorDesc_t *x, const int64_t *axes, int numAxes, double correction,
                              int keepDims, th1TensorDesc_t *var, th1TensorDesc_t *mean) {
    const char *fn = "th1VarMean";
    sim_view xv, vv, mv;
    uint32_t mask;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(var, &vv, fn, "var", 0)) ||
        (st = view_of(mean, &mv, fn, "mean", 0)) || (st = view_of(x, &xv, fn, "x", 0)) ||
        (st = need_compute(fn, "x", &xv)) || (st = simk_reduce_dims(fn, &xv, axes, numAxes, keepDims, &vv, &mask)) ||
        (st = simk_reduce_dims(fn, &xv, axes, numAxes, keepDims, &mv, &mask)))
        return code(st);
    return code(simk_var_mean(fn, "var_mean", &xv, mask, correction, &vv, &mv));
}

/* ------------------------------------------------------ loss, embedding */

TH1API th1Result_t th1NllLossForward(const th1TensorDesc_t *x, const th1TensorDesc_t *target,
                                     const th1TensorDesc_t *weight, int reduction, int64_t ignoreIndex,
                                     th1TensorDesc_t *loss, th1TensorDesc_t *totalWeight) {
    const char *fn = "th1NllLossForward";
    sim_view xv, tv, wv, lv, twv;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(loss, &lv, fn, "loss", 0)) ||
        (st = view_of(totalWeight, &twv, fn, "totalWeight", 0)) || (st = view_of(x, &xv, fn, "x", 0)) ||
        (st = view_of(target, &tv, fn, "target", 0)) || (st = view_of(weight, &wv, fn, "weight", 1)) ||
        (st = need_compute(fn, "x", &xv)))
        return code(st);
    return code(simk_nll_loss(fn, "nll_loss", &xv, &tv, &wv, reduction, ignoreIndex, &lv, &twv));
}

TH1API th1Result_t th1NllLossBackward(const th1TensorDesc_t *dLoss, const th1TensorDesc_t *x,
                                      const th1TensorDesc_t *target, const th1TensorDesc_t *weight, int reduction,
                                      int64_t ignoreIndex, const th1TensorDesc_t *totalWeight,
                                      th1TensorDesc_t *dx) {
    const char *fn = "th1NllLossBackward";
    sim_view gv, xv, tv, wv, twv, ov;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(dx, &ov, fn, "dx", 0)) ||
        (st = view_of(dLoss, &gv, fn, "dLoss", 0)) || (st = view_of(x, &xv, fn, "x", 0)) ||
        (st = view_of(target, &tv, fn, "target", 0)) || (st = view_of(weight, &wv, fn, "weight", 1)) ||
        (st = view_of(totalWeight, &twv, fn, "totalWeight", 0)) || (st = need_compute(fn, "x", &xv)))
        return code(st);
    return code(simk_nll_loss_backward(fn, "nll_loss_backward", &gv, &xv, &tv, &wv, reduction, ignoreIndex, &twv,
                                       &ov));
}

TH1API th1Result_t th1Embedding(const th1TensorDesc_t *table, const th1TensorDesc_t *indices,
                                th1TensorDesc_t *y) {
    const char *fn = "th1Embedding";
    sim_view tv, iv, yv;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(y, &yv, fn, "y", 0)) ||
        (st = view_of(table, &tv, fn, "table", 0)) || (st = view_of(indices, &iv, fn, "indices", 0)) ||
        (st = need_compute(fn, "table", &tv)))
        return code(st);
    return code(simk_embedding(fn, "embedding", &tv, &iv, &yv));
}

TH1API th1Result_t th1EmbeddingBackward(const th1TensorDesc_t *dy, const th1TensorDesc_t *indices,
                                        int64_t numRows, int64_t paddingIdx, int scaleByFreq,
                                        th1TensorDesc_t *dTable) {
    const char *fn = "th1EmbeddingBackward";
    sim_view gv, iv, ov;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(dTable, &ov, fn, "dTable", 0)) ||
        (st = view_of(dy, &gv, fn, "dy", 0)) || (st = view_of(indices, &iv, fn, "indices", 0)) ||
        (st = need_compute(fn, "dy", &gv)))
        return code(st);
    return code(simk_embedding_backward(fn, "embedding_backward", &gv, &iv, numRows, paddingIdx, scaleByFreq, &ov));
}

/* ----------------------------------------------------------- convolution */

/* NCHW tensors are handed to the NHWC kernels as permuted views of the same memory. */
static sim_status need_nchw(const char *fn, const char *what, const sim_view *v) {
    if (v->present && v->ndim != 4)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "%s must be 4-D (NCHW), got %d-D", what, v->ndim);
    return SIM_OK;
}

static sim_status conv_params(const char *fn, const int64_t *stride, const int64_t *padding,
                              const int64_t *dilation, int64_t groups) {
    if (!stride || !padding || !dilation)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "stride, padding and dilation are required");
    for (int i = 0; i < 2; i++)
        if (stride[i] < 1 || padding[i] < 0 || dilation[i] < 1)
            return sim_fail(SIM_E_INVALID_VALUE, fn, "stride %lld, padding %lld, dilation %lld: stride and "
                            "dilation must be >= 1, padding >= 0", (long long)stride[i], (long long)padding[i],
                            (long long)dilation[i]);
    if (groups < 1) return sim_fail(SIM_E_INVALID_VALUE, fn, "groups=%lld must be >= 1", (long long)groups);
    return SIM_OK;
}

TH1API th1Result_t th1ConvolutionForward(const th1TensorDesc_t *x, const th1TensorDesc_t *w,
                                         const th1TensorDesc_t *bias, const int64_t *stride,
                                         const int64_t *padding, const int64_t *dilation, int64_t groups,
                                         th1TensorDesc_t *y) {
    const char *fn = "th1ConvolutionForward";
    sim_view xv, wv, bv, yv;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = conv_params(fn, stride, padding, dilation, groups)) ||
        (st = view_of(y, &yv, fn, "y", 0)) || (st = view_of(x, &xv, fn, "x", 0)) ||
        (st = view_of(w, &wv, fn, "w", 0)) || (st = view_of(bias, &bv, fn, "bias", 1)) ||
        (st = need_compute(fn, "x", &xv)) || (st = need_nchw(fn, "x", &xv)) || (st = need_nchw(fn, "w", &wv)) ||
        (st = need_nchw(fn, "y", &yv)))
        return code(st);
    sim_view xn = simk_nchw_as_nhwc(&xv), wn = simk_nchw_as_nhwc(&wv), yn = simk_nchw_as_nhwc(&yv);
    return code(simk_conv2d_nhwc(fn, "conv2d", &xn, &wn, &bv, stride, padding, dilation, groups, &yn));
}

TH1API th1Result_t th1ConvolutionBackward(const th1TensorDesc_t *dy, const th1TensorDesc_t *x,
                                          const th1TensorDesc_t *w, const int64_t *stride,
                                          const int64_t *padding, const int64_t *dilation, int64_t groups,
                                          const int64_t *gradMask, th1TensorDesc_t *dx, th1TensorDesc_t *dw,
                                          th1TensorDesc_t *db) {
    const char *fn = "th1ConvolutionBackward";
    sim_view gv, xv, wv, dxv, dwv, dbv;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = conv_params(fn, stride, padding, dilation, groups)))
        return code(st);
    if (!gradMask) return code(sim_fail(SIM_E_INVALID_VALUE, fn, "gradMask is NULL"));
    th1TensorDesc_t *outs[3] = {dx, dw, db};
    sim_view *views[3] = {&dxv, &dwv, &dbv};
    const char *names[3] = {"dx", "dw", "db"};
    for (int i = 0; i < 3; i++)
        if ((st = view_of(gradMask[i] ? outs[i] : NULL, views[i], fn, names[i], !gradMask[i]))) return code(st);
    if ((st = view_of(dy, &gv, fn, "dy", 0)) || (st = view_of(x, &xv, fn, "x", 0)) ||
        (st = view_of(w, &wv, fn, "w", 0)) || (st = need_compute(fn, "x", &xv)) || (st = need_nchw(fn, "dy", &gv)) ||
        (st = need_nchw(fn, "x", &xv)) || (st = need_nchw(fn, "w", &wv)) || (st = need_nchw(fn, "dx", &dxv)) ||
        (st = need_nchw(fn, "dw", &dwv)))
        return code(st);
    sim_view gn = simk_nchw_as_nhwc(&gv), xn = simk_nchw_as_nhwc(&xv), wn = simk_nchw_as_nhwc(&wv);
    sim_view dxn = simk_nchw_as_nhwc(&dxv), dwn = simk_nchw_as_nhwc(&dwv);
    return code(simk_conv2d_backward_nhwc(fn, "conv2d_backward", &gn, &xn, &wn, stride, padding, dilation, groups,
                                          &dxn, &dwn, &dbv));
}

/* --------------------------------------------------------------- pooling */

/* window, stride (numStride 0: the window), padding (at most half the window,
 * PyTorch's rule) and dilation (NULL: 1) */
static sim_status pool_params(const char *fn, const int64_t *window, const int64_t *stride, int numStride,
                              const int64_t *padding, const int64_t *dilation, int64_t s[2]) {
    if (!window || !padding) return sim_fail(SIM_E_INVALID_VALUE, fn, "window and padding are required");
    if (numStride != 0 && numStride != 2)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "numStride=%d (expected 0 or 2)", numStride);
    if (numStride && !stride) return sim_fail(SIM_E_INVALID_VALUE, fn, "stride is NULL");
    for (int i = 0; i < 2; i++) {
        s[i] = numStride ? stride[i] : window[i];
        if (window[i] < 1 || s[i] < 1 || (dilation && dilation[i] < 1))
            return sim_fail(SIM_E_INVALID_VALUE, fn, "window %lld, stride %lld: window, stride and dilation "
                            "must be >= 1", (long long)window[i], (long long)s[i]);
        if (padding[i] < 0 || padding[i] > window[i] / 2)
            return sim_fail(SIM_E_INVALID_VALUE, fn, "padding %lld must be in [0, window/2]", (long long)padding[i]);
    }
    return SIM_OK;
}

/* y must be [N, C, oh, ow] for x [N, C, H, W] */
static sim_status check_pooled(const char *fn, const char *what, const sim_view *x, const sim_view *y,
                               int64_t oh, int64_t ow) {
    if (oh <= 0 || ow <= 0) return sim_fail(SIM_E_INVALID_VALUE, fn, "output would be empty");
    if (y->ndim != 4 || y->shape[0] != x->shape[0] || y->shape[1] != x->shape[1] || y->shape[2] != oh ||
        y->shape[3] != ow)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "%s must be NCHW [%lld, %lld, %lld, %lld]", what,
                        (long long)x->shape[0], (long long)x->shape[1], (long long)oh, (long long)ow);
    return SIM_OK;
}

TH1API th1Result_t th1MaxPool2d(const th1TensorDesc_t *x, const int64_t *window, const int64_t *stride,
                                int numStride, const int64_t *padding, const int64_t *dilation, int ceilMode,
                                th1TensorDesc_t *y, th1TensorDesc_t *indices) {
    const char *fn = "th1MaxPool2d";
    sim_view xv, yv, iv;
    int64_t s[2];
    sim_status st;
    if ((st = sim_require_init(fn))) return code(st);
    if (!dilation) return code(sim_fail(SIM_E_INVALID_VALUE, fn, "dilation is required"));
    if ((st = pool_params(fn, window, stride, numStride, padding, dilation, s)) ||
        (st = view_of(y, &yv, fn, "y", 0)) || (st = view_of(x, &xv, fn, "x", 0)) ||
        (st = view_of(indices, &iv, fn, "indices", 1)) || (st = need_compute(fn, "x", &xv)) ||
        (st = need_nchw(fn, "x", &xv)))
        return code(st);
    int64_t oh = simk_pool_out(xv.shape[2], window[0], s[0], padding[0], dilation[0], ceilMode);
    int64_t ow = simk_pool_out(xv.shape[3], window[1], s[1], padding[1], dilation[1], ceilMode);
    if ((st = check_pooled(fn, "y", &xv, &yv, oh, ow)) || (iv.present && (st = check_pooled(fn, "indices", &xv, &iv, oh, ow))))
        return code(st);
    sim_view xn = simk_nchw_as_nhwc(&xv), yn = simk_nchw_as_nhwc(&yv), in = simk_nchw_as_nhwc(&iv);
    return code(simk_max_pool2d_nhwc(fn, "max_pool2d", &xn, window, s, padding, dilation, &yn, &in));
}

TH1API th1Result_t th1MaxPool2dBackward(const th1TensorDesc_t *dy, const th1TensorDesc_t *indices,
                                        th1TensorDesc_t *dx) {
    const char *fn = "th1MaxPool2dBackward";
    sim_view gv, iv, ov;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(dx, &ov, fn, "dx", 0)) || (st = view_of(dy, &gv, fn, "dy", 0)) ||
        (st = view_of(indices, &iv, fn, "indices", 0)) || (st = need_compute(fn, "dy", &gv)) ||
        (st = need_nchw(fn, "dy", &gv)) || (st = need_nchw(fn, "dx", &ov)))
        return code(st);
    sim_view gn = simk_nchw_as_nhwc(&gv), in = simk_nchw_as_nhwc(&iv), on = simk_nchw_as_nhwc(&ov);
    return code(simk_max_pool2d_backward_nhwc(fn, "max_pool2d_backward", &gn, &in, &on));
}

TH1API th1Result_t th1AvgPool2d(const th1TensorDesc_t *x, const int64_t *window, const int64_t *stride,
                                int numStride, const int64_t *padding, int ceilMode, int countIncludePad,
                                int64_t divisorOverride, th1TensorDesc_t *y) {
    const char *fn = "th1AvgPool2d";
    sim_view xv, yv;
    int64_t s[2];
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = pool_params(fn, window, stride, numStride, padding, NULL, s)) ||
        (st = view_of(y, &yv, fn, "y", 0)) || (st = view_of(x, &xv, fn, "x", 0)) ||
        (st = need_compute(fn, "x", &xv)) || (st = need_nchw(fn, "x", &xv)))
        return code(st);
    if (divisorOverride < 0)
        return code(sim_fail(SIM_E_INVALID_VALUE, fn, "divisorOverride must be > 0 (0 = none)"));
    int64_t oh = simk_pool_out(xv.shape[2], window[0], s[0], padding[0], 1, ceilMode);
    int64_t ow = simk_pool_out(xv.shape[3], window[1], s[1], padding[1], 1, ceilMode);
    if ((st = check_pooled(fn, "y", &xv, &yv, oh, ow))) return code(st);
    sim_view xn = simk_nchw_as_nhwc(&xv), yn = simk_nchw_as_nhwc(&yv);
    return code(simk_avg_pool2d_nhwc(fn, "avg_pool2d", &xn, window, s, padding, countIncludePad, divisorOverride,
                                     &yn));
}

TH1API th1Result_t th1AvgPool2dBackward(const th1TensorDesc_t *dy, const int64_t *window,
                                        const int64_t *stride, int numStride, const int64_t *padding,
                                        int ceilMode, int countIncludePad, int64_t divisorOverride,
                                        th1TensorDesc_t *dx) {
    const char *fn = "th1AvgPool2dBackward";
    sim_view gv, ov;
    int64_t s[2];
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = pool_params(fn, window, stride, numStride, padding, NULL, s)) ||
        (st = view_of(dx, &ov, fn, "dx", 0)) || (st = view_of(dy, &gv, fn, "dy", 0)) ||
        (st = need_compute(fn, "dy", &gv)) || (st = need_nchw(fn, "dx", &ov)))
        return code(st);
    if (divisorOverride < 0)
        return code(sim_fail(SIM_E_INVALID_VALUE, fn, "divisorOverride must be > 0 (0 = none)"));
    int64_t oh = simk_pool_out(ov.shape[2], window[0], s[0], padding[0], 1, ceilMode);
    int64_t ow = simk_pool_out(ov.shape[3], window[1], s[1], padding[1], 1, ceilMode);
    if ((st = check_pooled(fn, "dy", &ov, &gv, oh, ow))) return code(st);
    sim_view gn = simk_nchw_as_nhwc(&gv), on = simk_nchw_as_nhwc(&ov);
    return code(simk_avg_pool2d_backward_nhwc(fn, "avg_pool2d_backward", &gn, window, s, padding, countIncludePad,
                                              divisorOverride, &on));
}

TH1API th1Result_t th1AdaptiveAvgPool2d(const th1TensorDesc_t *x, th1TensorDesc_t *y) {
    const char *fn = "th1AdaptiveAvgPool2d";
    sim_view xv, yv;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(y, &yv, fn, "y", 0)) || (st = view_of(x, &xv, fn, "x", 0)) ||
        (st = need_compute(fn, "x", &xv)) || (st = need_nchw(fn, "x", &xv)) || (st = need_nchw(fn, "y", &yv)) ||
        (st = check_pooled(fn, "y", &xv, &yv, yv.shape[2], yv.shape[3])))
        return code(st);
    sim_view xn = simk_nchw_as_nhwc(&xv), yn = simk_nchw_as_nhwc(&yv);
    return code(simk_adaptive_avg_pool2d_nhwc(fn, "adaptive_avg_pool2d", &xn, &yn));
}

TH1API th1Result_t th1AdaptiveAvgPool2dBackward(const th1TensorDesc_t *dy, th1TensorDesc_t *dx) {
    const char *fn = "th1AdaptiveAvgPool2dBackward";
    sim_view gv, ov;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(dx, &ov, fn, "dx", 0)) || (st = view_of(dy, &gv, fn, "dy", 0)) ||
        (st = need_compute(fn, "dy", &gv)) || (st = need_nchw(fn, "dy", &gv)) || (st = need_nchw(fn, "dx", &ov)))
        return code(st);
    sim_view gn = simk_nchw_as_nhwc(&gv), on = simk_nchw_as_nhwc(&ov);
    return code(simk_adaptive_avg_pool2d_backward_nhwc(fn, "adaptive_avg_pool2d_backward", &gn, &on));
}

/* -------------------------------------------------------- data movement */

TH1API th1Result_t th1Copy(const th1TensorDesc_t *src, th1TensorDesc_t *dst) {
    const char *fn = "th1Copy";
    sim_view s, d;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(dst, &d, fn, "dst", 0)) ||
        (st = view_of(src, &s, fn, "src", 0)))
        return code(st);
    return code(simk_copy(fn, "copy", &s, &d));
}

TH1API th1Result_t th1Fill(th1TensorDesc_t *dst, double value) {
    const char *fn = "th1Fill";
    sim_view d;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(dst, &d, fn, "dst", 0))) return code(st);
    if ((st = sim_launch("fill", fn))) return code(st);
    simk_fill(&d, value);
    return TH1_SUCCESS;
}

TH1API th1Result_t th1Arange(double start, double end, double step, th1TensorDesc_t *y) {
    const char *fn = "th1Arange";
    sim_view yv;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(y, &yv, fn, "y", 0)) ||
        (st = simk_check_dtype_in(fn, "y", &yv, ARITH, NELEM(ARITH))))
        return code(st);
    return code(simk_arange(fn, "arange", start, end, step, &yv));
}

TH1API th1Result_t th1SelectBackward(const th1TensorDesc_t *dy, int axis, int64_t index, th1TensorDesc_t *dx) {
    const char *fn = "th1SelectBackward";
    sim_view gv, ov;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(dx, &ov, fn, "dx", 0)) || (st = view_of(dy, &gv, fn, "dy", 0)) ||
        (st = simk_check_dtype_in(fn, "dy", &gv, ANY, NELEM(ANY))))
        return code(st);
    return code(simk_select_backward(fn, "select_backward", &gv, axis, index, &ov));
}

TH1API th1Result_t th1Cat(const th1TensorDesc_t *const *inputs, int numInputs, int axis, th1TensorDesc_t *y) {
    const char *fn = "th1Cat";
    sim_view yv;
    sim_status st;
    if ((st = sim_require_init(fn))) return code(st);
    if (!inputs || numInputs < 1)
        return code(sim_fail(SIM_E_INVALID_VALUE, fn, "needs at least one input (numInputs=%d)", numInputs));
    if ((st = view_of(y, &yv, fn, "y", 0)) || (st = simk_check_dtype_in(fn, "y", &yv, ANY, NELEM(ANY))))
        return code(st);
    sim_view *views = malloc((size_t)numInputs * sizeof *views);
    if (!views) abort();
    for (int i = 0; i < numInputs && !st; i++) {
        char what[32];
        snprintf(what, sizeof what, "inputs[%d]", i);
        st = view_of(inputs[i], &views[i], fn, what, 0);
    }
    if (!st) st = simk_cat(fn, "cat", views, numInputs, axis, &yv);
    free(views);
    return code(st);
}

/* --------------------------------------------------- comparisons, logical */

static sim_status compare_scalar(const char *fn, const char *kernel, simk_binop op, const th1TensorDesc_t *x,
                                 double value, th1TensorDesc_t *y) {
    sim_view xv, yv;
    TRY(sim_require_init(fn));
    TRY(view_of(y, &yv, fn, "y", 0));
    TRY(view_of(x, &xv, fn, "x", 0));
    return simk_compare_scalar(fn, kernel, op, &xv, value, &yv);
}

#define TH1_COMPARE_SCALAR(name, kernel, op)                                                              \
    TH1API th1Result_t th1##name##Scalar(const th1TensorDesc_t *x, double value, th1TensorDesc_t *y) {    \
        return code(compare_scalar("th1" #name "Scalar", kernel, op, x, value, y));                       \
    }
TH1_COMPARE_SCALAR(Equal, "eq_scalar", SIMK_EQ)
TH1_COMPARE_SCALAR(NotEqual, "ne_scalar", SIMK_NE)
TH1_COMPARE_SCALAR(Less, "lt_scalar", SIMK_LT)
TH1_COMPARE_SCALAR(LessEqual, "le_scalar", SIMK_LE)
TH1_COMPARE_SCALAR(Greater, "gt_scalar", SIMK_GT)
TH1_COMPARE_SCALAR(GreaterEqual, "ge_scalar", SIMK_GE)

TH1API th1Result_t th1Logical(const th1TensorDesc_t *a, const th1TensorDesc_t *b, int op, th1TensorDesc_t *c) {
    const char *fn = "th1Logical";
    static const char *const names[3] = {"logical_and", "logical_or", "logical_xor"};
    sim_view av, bv, cv;
    sim_status st;
    if ((st = sim_require_init(fn))) return code(st);
    if (op < TH1_LOGICAL_AND || op > TH1_LOGICAL_XOR)
        return code(sim_fail(SIM_E_INVALID_VALUE, fn, "op=%d (expected TH1_LOGICAL_AND, _OR or _XOR)", op));
    if ((st = view_of(c, &cv, fn, "c", 0)) || (st = view_of(a, &av, fn, "a", 0)) || (st = view_of(b, &bv, fn, "b", 0)))
        return code(st);
    return code(simk_logical(fn, names[op], (simk_logop)op, &av, &bv, &cv));
}

TH1API th1Result_t th1LogicalNot(const th1TensorDesc_t *x, th1TensorDesc_t *y) {
    const char *fn = "th1LogicalNot";
    sim_view xv, yv;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(y, &yv, fn, "y", 0)) || (st = view_of(x, &xv, fn, "x", 0)))
        return code(st);
    return code(simk_logical(fn, "logical_not", SIMK_LOGICAL_NOT, &xv, NULL, &yv));
}

/* ----------------------------------------------- reductions to bool, extremes */

static sim_status reduce_logical(const char *fn, const th1TensorDesc_t *x, const int64_t *axes, int numAxes,
                                 int keepDims, int mode, th1TensorDesc_t *y) {
    sim_view xv, yv;
    uint32_t mask;
    TRY(sim_require_init(fn));
    if (mode != TH1_REDUCE_ANY && mode != TH1_REDUCE_ALL)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "mode=%d (expected TH1_REDUCE_ANY or TH1_REDUCE_ALL)", mode);
    TRY(view_of(y, &yv, fn, "y", 0));
    TRY(view_of(x, &xv, fn, "x", 0));
    TRY(simk_reduce_dims(fn, &xv, axes, numAxes, keepDims, &yv, &mask));
    return simk_any_all(fn, mode == TH1_REDUCE_ALL ? "all" : "any", &xv, mask, mode == TH1_REDUCE_ALL, &yv);
}

TH1API th1Result_t th1ReduceLogical(const th1TensorDesc_t *x, const int64_t *axes, int numAxes, int keepDims,
                                    int mode, th1TensorDesc_t *y) {
    return code(reduce_logical("th1ReduceLogical", x, axes, numAxes, keepDims, mode, y));
}

TH1API th1Result_t th1ReduceLogicalAxis(const th1TensorDesc_t *x, int axis, int keepDims, int mode,
                                        th1TensorDesc_t *y) {
    int64_t a = axis;
    return code(reduce_logical("th1ReduceLogicalAxis", x, &a, 1, keepDims, mode, y));
}

static sim_status minmax(const char *fn, const th1TensorDesc_t *x, int axis, int keepDims, int mode,
                         th1TensorDesc_t *values, th1TensorDesc_t *indices) {
    sim_view xv, vv, iv;
    TRY(sim_require_init(fn));
    if (mode != TH1_REDUCE_MAX && mode != TH1_REDUCE_MIN)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "mode=%d (expected TH1_REDUCE_MAX or TH1_REDUCE_MIN)", mode);
    TRY(view_of(values, &vv, fn, "values", 1));
    TRY(view_of(indices, &iv, fn, "indices", 0));
    TRY(view_of(x, &xv, fn, "x", 0));
    TRY(simk_check_dtype_in(fn, "x", &xv, ARITH, NELEM(ARITH)));
    const char *kernel = values ? (mode ? "min_dim" : "max_dim") : (mode ? "argmin" : "argmax");
    return simk_minmax_dim(fn, kernel, &xv, axis, keepDims, mode == TH1_REDUCE_MIN, &vv, &iv);
}

TH1API th1Result_t th1ReduceMinMax(const th1TensorDesc_t *x, int axis, int keepDims, int mode,
                                   th1TensorDesc_t *values, th1TensorDesc_t *indices) {
    if (!values) return code(sim_fail(SIM_E_INVALID_VALUE, "th1ReduceMinMax", "values descriptor is NULL"));
    return code(minmax("th1ReduceMinMax", x, axis, keepDims, mode, values, indices));
}

TH1API th1Result_t th1ArgMinMax(const th1TensorDesc_t *x, int axis, int keepDims, int mode, th1TensorDesc_t *indices) {
    return code(minmax("th1ArgMinMax", x, axis, keepDims, mode, NULL, indices));
}

TH1API th1Result_t th1TopK(const th1TensorDesc_t *x, int64_t k, int axis, int largest, th1TensorDesc_t *values,
                           th1TensorDesc_t *indices) {
    const char *fn = "th1TopK";
    sim_view xv, vv, iv;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(values, &vv, fn, "values", 0)) ||
        (st = view_of(indices, &iv, fn, "indices", 0)) || (st = view_of(x, &xv, fn, "x", 0)) ||
        (st = simk_check_dtype_in(fn, "x", &xv, ARITH, NELEM(ARITH))))
        return code(st);
    return code(simk_topk(fn, "topk", &xv, k, axis, largest, &vv, &iv));
}

TH1API th1Result_t th1CumSum(const th1TensorDesc_t *x, int axis, th1TensorDesc_t *y) {
    const char *fn = "th1CumSum";
    sim_view xv, yv;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(y, &yv, fn, "y", 0)) || (st = view_of(x, &xv, fn, "x", 0)))
        return code(st);
    return code(simk_cumsum(fn, "cumsum", &xv, axis, &yv));
}

TH1API th1Result_t th1Clamp(const th1TensorDesc_t *x, const th1TensorDesc_t *lo, const th1TensorDesc_t *hi,
                            th1TensorDesc_t *y) {
    const char *fn = "th1Clamp";
    sim_view xv, lv, hv, yv;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(y, &yv, fn, "y", 0)) || (st = view_of(x, &xv, fn, "x", 0)) ||
        (st = view_of(lo, &lv, fn, "lo", 1)) || (st = view_of(hi, &hv, fn, "hi", 1)) ||
        (st = simk_check_dtype_in(fn, "x", &xv, ARITH, NELEM(ARITH))))
        return code(st);
    return code(simk_clamp(fn, "clamp", &xv, &lv, &hv, &yv));
}

TH1API th1Result_t th1IsIn(const th1TensorDesc_t *x, const th1TensorDesc_t *set, int invert, th1TensorDesc_t *y) {
    const char *fn = "th1IsIn";
    sim_view xv, sv, yv;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(y, &yv, fn, "y", 0)) || (st = view_of(x, &xv, fn, "x", 0)) ||
        (st = view_of(set, &sv, fn, "set", 0)))
        return code(st);
    return code(simk_isin(fn, "isin", &xv, &sv, invert, &yv));
}

/* ------------------------------------------------------------ indexing */

TH1API th1Result_t th1Gather(const th1TensorDesc_t *x, int axis, const th1TensorDesc_t *index, th1TensorDesc_t *y) {
    const char *fn = "th1Gather";
    sim_view xv, iv, yv;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(y, &yv, fn, "y", 0)) || (st = view_of(x, &xv, fn, "x", 0)) ||
        (st = view_of(index, &iv, fn, "index", 0)))
        return code(st);
    return code(simk_gather(fn, "gather", &xv, axis, &iv, &yv));
}

TH1API th1Result_t th1Scatter(const th1TensorDesc_t *x, int axis, const th1TensorDesc_t *index,
                              const th1TensorDesc_t *src, int accumulate, th1TensorDesc_t *y) {
    const char *fn = "th1Scatter";
    sim_view xv, iv, sv, yv;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(y, &yv, fn, "y", 0)) || (st = view_of(x, &xv, fn, "x", 0)) ||
        (st = view_of(index, &iv, fn, "index", 0)) || (st = view_of(src, &sv, fn, "src", 0)))
        return code(st);
    if (sv.dtype != yv.dtype)
        return code(sim_fail(SIM_E_UNSUPPORTED, fn, "src is %s but y is %s (mixed types)", sim_dtype_name(sv.dtype),
                             sim_dtype_name(yv.dtype)));
    return code(simk_scatter(fn, accumulate ? "scatter_add" : "scatter", &xv, axis, &iv, &sv, accumulate != 0, &yv));
}

TH1API th1Result_t th1IndexSelect(const th1TensorDesc_t *x, int axis, const th1TensorDesc_t *index,
                                  th1TensorDesc_t *y) {
    const char *fn = "th1IndexSelect";
    sim_view xv, iv, yv;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(y, &yv, fn, "y", 0)) || (st = view_of(x, &xv, fn, "x", 0)) ||
        (st = view_of(index, &iv, fn, "index", 0)))
        return code(st);
    return code(simk_index_select(fn, "index_select", &xv, axis, &iv, &yv));
}

TH1API th1Result_t th1IndexAdd(const th1TensorDesc_t *x, int axis, const th1TensorDesc_t *index,
                               const th1TensorDesc_t *src, double alpha, th1TensorDesc_t *y) {
    const char *fn = "th1IndexAdd";
    sim_view xv, iv, sv, yv;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(y, &yv, fn, "y", 0)) || (st = view_of(x, &xv, fn, "x", 0)) ||
        (st = view_of(index, &iv, fn, "index", 0)) || (st = view_of(src, &sv, fn, "src", 0)))
        return code(st);
    return code(simk_index_add(fn, "index_add", &xv, axis, &iv, &sv, alpha, &yv));
}

/* n views of a descriptor list (NULL list: *out NULL); *out to free */
static sim_status list_views(const char *fn, const char *name, const th1TensorDesc_t *const *list, int n,
                             sim_view **out) {
    *out = NULL;
    if (!list) return SIM_OK;
    sim_view *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
    if (!v) abort();
    for (int i = 0; i < n; i++) {
        char what[48];
        snprintf(what, sizeof what, "%s[%d]", name, i);
        sim_status st = view_of(list[i], &v[i], fn, what, 0);
        if (st) {
            free(v);
            return st;
        }
    }
    *out = v;
    return SIM_OK;
}

static sim_status idx_views(const char *fn, const th1TensorDesc_t *const *idx, int numIdx, sim_view **out) {
    *out = NULL;
    if (!idx || numIdx < 1 || numIdx > TH1_MAX_DIMS)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "idx: %d descriptors (1..%d)", numIdx, TH1_MAX_DIMS);
    return list_views(fn, "idx", idx, numIdx, out);
}

TH1API th1Result_t th1Index(const th1TensorDesc_t *x, const th1TensorDesc_t *const *idx, int numIdx,
                            th1TensorDesc_t *y) {
    const char *fn = "th1Index";
    sim_view xv, yv, *iv;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(y, &yv, fn, "y", 0)) || (st = view_of(x, &xv, fn, "x", 0)) ||
        (st = idx_views(fn, idx, numIdx, &iv)))
        return code(st);
    st = simk_index(fn, "index", &xv, iv, numIdx, &yv);
    free(iv);
    return code(st);
}

TH1API th1Result_t th1IndexPut(const th1TensorDesc_t *x, const th1TensorDesc_t *const *idx, int numIdx,
                               const th1TensorDesc_t *values, int accumulate, th1TensorDesc_t *y) {
    const char *fn = "th1IndexPut";
    sim_view xv, vv, yv, *iv;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(y, &yv, fn, "y", 0)) || (st = view_of(x, &xv, fn, "x", 0)) ||
        (st = view_of(values, &vv, fn, "values", 0)) || (st = idx_views(fn, idx, numIdx, &iv)))
        return code(st);
    if (vv.dtype != yv.dtype) {
        free(iv);
        return code(sim_fail(SIM_E_UNSUPPORTED, fn, "values are %s but y is %s (mixed types)",
                             sim_dtype_name(vv.dtype), sim_dtype_name(yv.dtype)));
    }
    st = simk_index_put(fn, "index_put", &xv, iv, numIdx, &vv, accumulate != 0, &yv);
    free(iv);
    return code(st);
}

/* ------------------------------------------------------------- shaping */

TH1API th1Result_t th1Triangle(const th1TensorDesc_t *x, int64_t diagonal, int upper, th1TensorDesc_t *y) {
    const char *fn = "th1Triangle";
    sim_view xv, yv;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(y, &yv, fn, "y", 0)) || (st = view_of(x, &xv, fn, "x", 0)))
        return code(st);
    return code(simk_triangle(fn, upper ? "triu" : "tril", &xv, diagonal, upper != 0, &yv));
}

TH1API th1Result_t th1Pad(const th1TensorDesc_t *x, const int64_t *pads, int numPads, double value,
                          th1TensorDesc_t *y) {
    const char *fn = "th1Pad";
    sim_view xv, yv;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(y, &yv, fn, "y", 0)) || (st = view_of(x, &xv, fn, "x", 0)))
        return code(st);
    return code(simk_constant_pad(fn, "pad", &xv, pads, numPads, value, &yv));
}

TH1API th1Result_t th1UpsampleNearest2d(const th1TensorDesc_t *x, double scaleH, double scaleW, th1TensorDesc_t *y) {
    const char *fn = "th1UpsampleNearest2d";
    sim_view xv, yv;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(y, &yv, fn, "y", 0)) || (st = view_of(x, &xv, fn, "x", 0)) ||
        (st = need_compute(fn, "x", &xv)))
        return code(st);
    return code(simk_upsample_nearest2d(fn, "upsample_nearest2d", &xv, scaleH, scaleW, &yv));
}

TH1API th1Result_t th1UpsampleNearest2dBackward(const th1TensorDesc_t *dy, double scaleH, double scaleW,
                                                th1TensorDesc_t *dx) {
    const char *fn = "th1UpsampleNearest2dBackward";
    sim_view gv, xv;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(dx, &xv, fn, "dx", 0)) || (st = view_of(dy, &gv, fn, "dy", 0)) ||
        (st = need_compute(fn, "dy", &gv)))
        return code(st);
    return code(simk_upsample_nearest2d_backward(fn, "upsample_nearest2d_backward", &gv, scaleH, scaleW, &xv));
}

TH1API th1Result_t th1SliceBackward(const th1TensorDesc_t *dy, int axis, int64_t start, int64_t end, int64_t step,
                                    th1TensorDesc_t *dx) {
    const char *fn = "th1SliceBackward";
    sim_view gv, xv;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(dx, &xv, fn, "dx", 0)) || (st = view_of(dy, &gv, fn, "dy", 0)))
        return code(st);
    return code(simk_slice_backward(fn, "slice_backward", &gv, axis, start, end, step, &xv));
}

/* ----------------------------------------------------- mixed precision */

TH1API th1Result_t th1AmpUpdateScale(const th1TensorDesc_t *scale, th1TensorDesc_t *growthTracker,
                                     const th1TensorDesc_t *foundInf, double growthFactor, double backoffFactor,
                                     int64_t growthInterval, th1TensorDesc_t *newScale) {
    const char *fn = "th1AmpUpdateScale";
    sim_view sv, gv, fv, nv;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(newScale, &nv, fn, "newScale", 0)) ||
        (st = view_of(scale, &sv, fn, "scale", 0)) || (st = view_of(growthTracker, &gv, fn, "growthTracker", 0)) ||
        (st = view_of(foundInf, &fv, fn, "foundInf", 0)))
        return code(st);
    return code(simk_amp_update_scale(fn, "amp_update_scale", &sv, &gv, &fv, growthFactor, backoffFactor,
                                      growthInterval, &nv));
}

TH1API th1Result_t th1AmpUnscale(th1TensorDesc_t *const *grads, int numGrads, th1TensorDesc_t *foundInf,
                                 const th1TensorDesc_t *invScale) {
    const char *fn = "th1AmpUnscale";
    sim_view fv, iv, *gv = NULL;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(foundInf, &fv, fn, "foundInf", 0)) ||
        (st = view_of(invScale, &iv, fn, "invScale", 0)))
        return code(st);
    if (!grads || numGrads < 0) return code(sim_fail(SIM_E_INVALID_VALUE, fn, "bad grads list"));
    if (numGrads > 0) {
        gv = malloc((size_t)numGrads * sizeof *gv);
        if (!gv) abort();
    }
    for (int i = 0; i < numGrads && !st; i++) {
        char what[32];
        snprintf(what, sizeof what, "grads[%d]", i);
        st = view_of(grads[i], &gv[i], fn, what, 0);
    }
    if (!st) st = simk_amp_unscale(fn, "amp_unscale", gv, numGrads, &fv, &iv);
    free(gv);
    return code(st);
}

/* ---------------------------------------------------- fused optimizers */

TH1API th1Result_t th1FusedAdam(th1TensorDesc_t *const *params, th1TensorDesc_t *const *grads,
                                th1TensorDesc_t *const *expAvgs, th1TensorDesc_t *const *expAvgSqs,
                                th1TensorDesc_t *const *maxExpAvgSqs, const th1TensorDesc_t *const *steps,
                                int numTensors, double lr, double beta1, double beta2, double weightDecay, double eps,
                                int flags, const th1TensorDesc_t *gradScale, const th1TensorDesc_t *foundInf) {
    const char *fn = "th1FusedAdam";
    const int ams = (flags & TH1_ADAM_AMSGRAD) != 0;
    sim_view *p = NULL, *g = NULL, *m = NULL, *s = NULL, *mx = NULL, *st = NULL, gsv, fiv;
    sim_status rc;
    if ((rc = sim_require_init(fn))) return code(rc);
    if (numTensors < 0 || !params || !grads || !expAvgs || !expAvgSqs || !steps || (ams && !maxExpAvgSqs))
        return code(sim_fail(SIM_E_INVALID_VALUE, fn, "every list is required (maxExpAvgSqs with TH1_ADAM_AMSGRAD)"));
    if (!(rc = view_of(gradScale, &gsv, fn, "gradScale", 1)) && !(rc = view_of(foundInf, &fiv, fn, "foundInf", 1)) &&
        !(rc = list_views(fn, "params", (const th1TensorDesc_t *const *)params, numTensors, &p)) &&
        !(rc = list_views(fn, "grads", (const th1TensorDesc_t *const *)grads, numTensors, &g)) &&
        !(rc = list_views(fn, "expAvgs", (const th1TensorDesc_t *const *)expAvgs, numTensors, &m)) &&
        !(rc = list_views(fn, "expAvgSqs", (const th1TensorDesc_t *const *)expAvgSqs, numTensors, &s)) &&
        !(rc = list_views(fn, "maxExpAvgSqs", ams ? (const th1TensorDesc_t *const *)maxExpAvgSqs : NULL, numTensors,
                          &mx)) &&
        !(rc = list_views(fn, "steps", steps, numTensors, &st)))
        rc = simk_fused_adam(fn, (flags & TH1_ADAM_DECOUPLED) ? "fused_adamw" : "fused_adam", p, g, m, s, mx, st,
                             numTensors, lr, beta1, beta2, weightDecay, eps, ams, (flags & TH1_ADAM_MAXIMIZE) != 0,
                             (flags & TH1_ADAM_DECOUPLED) != 0, &gsv, &fiv);
    free(p), free(g), free(m), free(s), free(mx), free(st);
    return code(rc);
}

TH1API th1Result_t th1FusedSgd(th1TensorDesc_t *const *params, th1TensorDesc_t *const *grads,
                               th1TensorDesc_t *const *momentumBuffers, int numTensors, double weightDecay,
                               double momentum, double lr, double dampening, int flags,
                               const th1TensorDesc_t *gradScale, const th1TensorDesc_t *foundInf) {
    const char *fn = "th1FusedSgd";
    sim_view *p = NULL, *g = NULL, *b = NULL, gsv, fiv;
    sim_status rc;
    if ((rc = sim_require_init(fn))) return code(rc);
    if (numTensors < 0 || !params || !grads)
        return code(sim_fail(SIM_E_INVALID_VALUE, fn, "params and grads are required"));
    if (!(rc = view_of(gradScale, &gsv, fn, "gradScale", 1)) && !(rc = view_of(foundInf, &fiv, fn, "foundInf", 1)) &&
        !(rc = list_views(fn, "params", (const th1TensorDesc_t *const *)params, numTensors, &p)) &&
        !(rc = list_views(fn, "grads", (const th1TensorDesc_t *const *)grads, numTensors, &g)) &&
        !(rc = list_views(fn, "momentumBuffers", (const th1TensorDesc_t *const *)momentumBuffers, numTensors, &b)))
        rc = simk_fused_sgd(fn, "fused_sgd", p, g, b, numTensors, weightDecay, momentum, lr, dampening,
                            (flags & TH1_SGD_NESTEROV) != 0, (flags & TH1_SGD_MAXIMIZE) != 0,
                            (flags & TH1_SGD_FIRST_STEP) != 0, &gsv, &fiv);
    free(p), free(g), free(b);
    return code(rc);
}

/* -------------------------------------------------------- random numbers */

TH1API th1Result_t th1RngWords(int64_t numElements, int wordsPerElement, unsigned long long *words) {
    if (!words || numElements < 0 || wordsPerElement < 1 || wordsPerElement > 2)
        return code(sim_fail(SIM_E_INVALID_VALUE, "th1RngWords", "bad arguments (numElements >= 0, 1 or 2 words)"));
    *words = sim_rng_words(numElements, wordsPerElement);
    return TH1_SUCCESS;
}

#define TH1_RNG_PROLOGUE(name)          \
    const char *fn = "th1Rng" #name;    \
    sim_view yv;                        \
    sim_status st;                      \
    if ((st = sim_require_init(fn)) || (st = view_of(y, &yv, fn, "y", 0))) return code(st)

TH1API th1Result_t th1RngUniform(th1TensorDesc_t *y, double low, double high, unsigned long long seed,
                                 unsigned long long offset) {
    TH1_RNG_PROLOGUE(Uniform);
    return code(sim_rng_uniform(fn, "uniform", &yv, low, high, seed, offset));
}
TH1API th1Result_t th1RngNormal(th1TensorDesc_t *y, double mean, double stddev, unsigned long long seed,
                                unsigned long long offset) {
    TH1_RNG_PROLOGUE(Normal);
    return code(sim_rng_normal(fn, "normal", &yv, mean, stddev, seed, offset));
}
TH1API th1Result_t th1RngBernoulli(th1TensorDesc_t *y, double prob, unsigned long long seed,
                                   unsigned long long offset) {
    TH1_RNG_PROLOGUE(Bernoulli);
    return code(sim_rng_bernoulli(fn, "bernoulli", &yv, prob, seed, offset));
}
TH1API th1Result_t th1RngRandom(th1TensorDesc_t *y, int64_t low, int64_t high, unsigned long long seed,
                                unsigned long long offset) {
    TH1_RNG_PROLOGUE(Random);
    return code(sim_rng_random(fn, "random", &yv, low, high, seed, offset));
}

TH1API th1Result_t th1Dropout(const th1TensorDesc_t *x, double prob, int training, unsigned long long seed,
                              unsigned long long offset, th1TensorDesc_t *y, th1TensorDesc_t *mask) {
    const char *fn = "th1Dropout";
    sim_view xv, yv, mv;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(y, &yv, fn, "y", 0)) || (st = view_of(mask, &mv, fn, "mask", 0)) ||
        (st = view_of(x, &xv, fn, "x", 0)) || (st = need_compute(fn, "x", &xv)))
        return code(st);
    return code(sim_rng_dropout(fn, "native_dropout", &xv, prob, training != 0, seed, offset, &yv, &mv));
}

/* ------------------------------------------------- profiling: device time */

TH1API th1Result_t th1GetLastKernelTime(uint64_t *nanoseconds) {
    if (!nanoseconds) return code(sim_fail(SIM_E_INVALID_VALUE, "th1GetLastKernelTime", "nanoseconds is NULL"));
    *nanoseconds = sim_last_op_ns();
    return TH1_SUCCESS;
}
TH1API th1Result_t th1GetTotalKernelTime(uint64_t *nanoseconds) {
    if (!nanoseconds) return code(sim_fail(SIM_E_INVALID_VALUE, "th1GetTotalKernelTime", "nanoseconds is NULL"));
    *nanoseconds = sim_device_ns_total();
    return TH1_SUCCESS;
}
TH1API th1Result_t th1DebugCorruptKernel(const char *kernelName) { return code(sim_set_corrupt(kernelName)); }
TH1API th1Result_t th1DebugGetCorruptions(uint64_t *count) {
    if (!count) return code(sim_fail(SIM_E_INVALID_VALUE, "th1DebugGetCorruptions", "count is NULL"));
    *count = sim_corruptions();
    return TH1_SUCCESS;
}
