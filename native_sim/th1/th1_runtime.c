/*
 * th1_runtime.c: the simulated TH1 training accelerator.
 *
 * Same simulator core as x1, different ABI: descriptor layout with an element
 * offset, CUDA-style names and status codes, float32/bfloat16 compute, and
 * matrix kernels that only take sizes that are multiples of 16.
 */
#include "th1_runtime.h"

#include <stdio.h>
#include <string.h>

#include "../common/simcore.h"
#include "../common/simkernels.h"

static const sim_dtype COMPUTE[] = {SIM_F32, SIM_BF16};

static th1Result_t code(sim_status s) {
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
    char names[96][SIM_KERNEL_NAME_LEN];
    uint64_t counts[96];
    int n = sim_kernel_counters(names, counts, 96);
    for (int i = 0; i < n && i < maxStats && i < 96; i++) {
        memcpy(stats[i].name, names[i], TH1_KERNEL_NAME_MAX);
        stats[i].launches = counts[i];
    }
    *numStats = n;
    return TH1_SUCCESS;
}
TH1API th1Result_t th1DebugInjectFaults(const char *spec) { return code(sim_set_faults(spec)); }

/* ------------------------------------------------------------- kernels */

static sim_status elementwise2(const char *fn, const char *kernel, simk_binop op,
                               const th1TensorDesc_t *a, const th1TensorDesc_t *b, float alpha,
                               th1TensorDesc_t *c) {
    sim_view av, bv, cv;
    TRY(sim_require_init(fn));
    TRY(view_of(c, &cv, fn, "c", 0));
    TRY(view_of(a, &av, fn, "a", 0));
    TRY(view_of(b, &bv, fn, "b", 0));
    TRY(need_compute(fn, "c", &cv));
    TRY(simk_check_same(fn, "a", &av, &cv));
    TRY(simk_check_same(fn, "b", &bv, &cv));
    TRY(sim_launch(kernel, fn));
    simk_binary(op, &av, &bv, alpha, &cv);
    return SIM_OK;
}

TH1API th1Result_t th1Add(const th1TensorDesc_t *a, const th1TensorDesc_t *b, float alpha,
                          th1TensorDesc_t *c) {
    return code(elementwise2("th1Add", "add", SIMK_ADD, a, b, alpha, c));
}
TH1API th1Result_t th1Mul(const th1TensorDesc_t *a, const th1TensorDesc_t *b, th1TensorDesc_t *c) {
    return code(elementwise2("th1Mul", "mul", SIMK_MUL, a, b, 1.0f, c));
}

static sim_status elementwise1(const char *fn, const char *kernel, simk_unop op,
                               const th1TensorDesc_t *x, th1TensorDesc_t *y) {
    sim_view xv, yv;
    TRY(sim_require_init(fn));
    TRY(view_of(y, &yv, fn, "y", 0));
    TRY(view_of(x, &xv, fn, "x", 0));
    TRY(need_compute(fn, "y", &yv));
    TRY(simk_check_same(fn, "x", &xv, &yv));
    TRY(sim_launch(kernel, fn));
    simk_unary(op, &xv, &yv);
    return SIM_OK;
}

TH1API th1Result_t th1Relu(const th1TensorDesc_t *x, th1TensorDesc_t *y) {
    return code(elementwise1("th1Relu", "relu", SIMK_RELU, x, y));
}
TH1API th1Result_t th1Gelu(const th1TensorDesc_t *x, int mode, th1TensorDesc_t *y) {
    if (mode != 0 && mode != 1)
        return code(sim_fail(SIM_E_INVALID_VALUE, "th1Gelu", "mode=%d (0 exact, 1 tanh)", mode));
    return code(elementwise1("th1Gelu", "gelu", mode ? SIMK_GELU_TANH : SIMK_GELU, x, y));
}

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

TH1API th1Result_t th1Softmax(const th1TensorDesc_t *x, int axis, int flags, th1TensorDesc_t *y) {
    const char *fn = "th1Softmax";
    sim_view xv, yv;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(y, &yv, fn, "y", 0)) ||
        (st = view_of(x, &xv, fn, "x", 0)) || (st = need_compute(fn, "x", &xv)))
        return code(st);
    if (flags & ~TH1_SOFTMAX_SAFE)
        return code(sim_fail(SIM_E_INVALID_VALUE, fn, "unknown flags 0x%x", (unsigned)flags));
    return code(simk_softmax(fn, (flags & TH1_SOFTMAX_SAFE) ? "safe_softmax" : "softmax", &xv, axis, 0,
                             (flags & TH1_SOFTMAX_SAFE) ? 2 : 0, &yv));
}

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
