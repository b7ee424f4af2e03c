/*
 * x1_runtime.c: the simulated X1-Edge NPU runtime.
 *
 * Translates the public x1 ABI (x1_tensor_t, x1_status_t) onto the simulator
 * core and enforces what X1 silicon accepts.  Build with -DX1_SIM_REVISION=2
 * for the X1 v2 runtime (float32 convolution, larger memory).
 */
#include "x1_runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/simcore.h"
#include "../common/simkernels.h"

#ifndef X1_SIM_REVISION
#define X1_SIM_REVISION 1
#endif

#if X1_SIM_REVISION >= 2
#define X1_DEFAULT_CAPACITY (8ull << 30)
#define X1_VA_BASE 0x00A2000000000000ull
#else
#define X1_DEFAULT_CAPACITY (4ull << 30)
#define X1_VA_BASE 0x00A1000000000000ull
#endif

static const sim_dtype FLOATS[] = {SIM_F32, SIM_F16};

static x1_status_t code(sim_status s) {
    sim_op_done(); /* every runtime call returns through here: ends the device timer */
    static const x1_status_t map[SIM_E_COUNT] = {
        [SIM_OK] = X1_SUCCESS,
        [SIM_E_INVALID_VALUE] = X1_ERR_INVALID_VALUE,
        [SIM_E_OOM] = X1_ERR_OUT_OF_MEMORY,
        [SIM_E_UNSUPPORTED] = X1_ERR_UNSUPPORTED,
        [SIM_E_DEVICE] = X1_ERR_DEVICE,
        [SIM_E_NOT_INITIALIZED] = X1_ERR_NOT_INITIALIZED,
        [SIM_E_BAD_ADDRESS] = X1_ERR_INVALID_ADDRESS,
        [SIM_E_DATA] = X1_ERR_DATA,
    };
    return (unsigned)s < SIM_E_COUNT ? map[s] : X1_ERR_DEVICE;
}

static int to_sim_dtype(int32_t d, sim_dtype *out) {
    switch (d) {
        case X1_FLOAT32: *out = SIM_F32; return 1;
        case X1_FLOAT16: *out = SIM_F16; return 1;
        case X1_INT8: *out = SIM_I8; return 1;
        case X1_UINT8: *out = SIM_U8; return 1;
        case X1_INT32: *out = SIM_I32; return 1;
        case X1_INT64: *out = SIM_I64; return 1;
        case X1_BOOL: *out = SIM_BOOL; return 1;
        default: return 0;
    }
}

/* Resolves a descriptor; an absent optional tensor gives present == 0. */
static sim_status view_of(const x1_tensor_t *t, sim_view *v, const char *fn, const char *what,
                          int optional) {
    memset(v, 0, sizeof *v);
    if (!t) {
        if (optional) return SIM_OK;
        return sim_fail(SIM_E_INVALID_VALUE, fn, "%s descriptor is NULL", what);
    }
    if (t->ndim < 0 || t->ndim > X1_MAX_DIMS)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "%s: ndim=%d (X1 supports 0..%d)", what,
                        (int)t->ndim, X1_MAX_DIMS);
    sim_dtype dt;
    if (!to_sim_dtype(t->dtype, &dt))
        return sim_fail(SIM_E_INVALID_VALUE, fn, "%s: unknown x1 dtype code %d", what, (int)t->dtype);
    return sim_make_view(v, t->data, t->ndim, t->shape, t->strides, dt, fn, what);
}

#define TRY(expr)                       \
    do {                                \
        sim_status st_ = (expr);        \
        if (st_ != SIM_OK) return st_;  \
    } while (0)

static sim_status need_float(const char *fn, const char *what, const sim_view *v) {
    return simk_check_dtype_in(fn, what, v, FLOATS, 2);
}

/* ------------------------------------------------------------- runtime */

X1_API x1_status_t x1_init(uint64_t capacity_bytes) {
    sim_configure(X1_SIM_REVISION >= 2 ? "x1v2" : "x1", "X1SIM", X1_VA_BASE, X1_DEFAULT_CAPACITY);
    return code(sim_init(capacity_bytes));
}

X1_API x1_status_t x1_shutdown(void) { return code(sim_shutdown()); }
X1_API const char *x1_get_last_error(void) { return sim_last_error(); }

X1_API const char *x1_status_string(x1_status_t status) {
    switch (status) {
        case X1_SUCCESS: return "X1_SUCCESS";
        case X1_ERR_INVALID_VALUE: return "X1_ERR_INVALID_VALUE";
        case X1_ERR_OUT_OF_MEMORY: return "X1_ERR_OUT_OF_MEMORY";
        case X1_ERR_UNSUPPORTED: return "X1_ERR_UNSUPPORTED";
        case X1_ERR_DEVICE: return "X1_ERR_DEVICE";
        case X1_ERR_NOT_INITIALIZED: return "X1_ERR_NOT_INITIALIZED";
        case X1_ERR_INVALID_ADDRESS: return "X1_ERR_INVALID_ADDRESS";
        case X1_ERR_DATA: return "X1_ERR_DATA";
    }
    return "X1_ERR_UNKNOWN";
}

X1_API x1_status_t x1_synchronize(void) { return code(sim_require_init("x1_synchronize")); }

/* -------------------------------------------------------------- memory */

X1_API x1_status_t x1_malloc(x1_devptr_t *ptr, size_t nbytes) {
    return code(sim_malloc(ptr, nbytes, "x1_malloc"));
}
X1_API x1_status_t x1_free(x1_devptr_t ptr) { return code(sim_free(ptr, "x1_free")); }

X1_API x1_status_t x1_mem_get_info(uint64_t *free_bytes, uint64_t *total_bytes) {
    sim_status st = sim_require_init("x1_mem_get_info");
    if (!st) sim_mem_info(free_bytes, total_bytes);
    return code(st);
}

X1_API x1_status_t x1_memcpy_h2d(x1_devptr_t dst, const void *src, size_t nbytes) {
    return code(sim_h2d(dst, src, nbytes, "x1_memcpy_h2d"));
}
X1_API x1_status_t x1_memcpy_d2h(void *dst, x1_devptr_t src, size_t nbytes) {
    return code(sim_d2h(dst, src, nbytes, "x1_memcpy_d2h"));
}
X1_API x1_status_t x1_memcpy_d2d(x1_devptr_t dst, x1_devptr_t src, size_t nbytes) {
    return code(sim_d2d(dst, src, nbytes, "x1_memcpy_d2d"));
}
X1_API x1_status_t x1_memcpy_h2d_batch(const x1_devptr_t *dst, const void *const *src,
                                       const size_t *nbytes, size_t count) {
    return code(sim_h2d_batch(dst, src, nbytes, count, "x1_memcpy_h2d_batch"));
}
X1_API x1_status_t x1_mem_map(const void *host_ptr, size_t nbytes, x1_devptr_t *ptr) {
    return code(sim_map(host_ptr, nbytes, ptr, "x1_mem_map"));
}
X1_API x1_status_t x1_mem_unmap(x1_devptr_t ptr) { return code(sim_unmap(ptr, "x1_mem_unmap")); }

/* ------------------------------------------------------------ counters */

X1_API x1_status_t x1_get_counters(x1_counters_t *c) {
    if (!c) return code(sim_fail(SIM_E_INVALID_VALUE, "x1_get_counters", "counters is NULL"));
    sim_counters s;
    sim_get_counters(&s);
    *c = (x1_counters_t){s.h2d_bytes, s.h2d_calls, s.h2d_batch_calls, s.d2h_bytes, s.d2h_calls,
                         s.d2d_bytes, s.d2d_calls, s.mapped_bytes, s.map_calls, s.unmap_calls,
                         s.live_bytes, s.peak_bytes, s.live_mapped_bytes, s.alloc_calls,
                         s.free_calls, s.kernel_launches};
    return X1_SUCCESS;
}

X1_API x1_status_t x1_reset_counters(void) {
    sim_reset_counters();
    return X1_SUCCESS;
}

X1_API x1_status_t x1_get_kernel_counters(x1_kernel_counter_t *counters, int32_t capacity,
                                          int32_t *count) {
    if (!count || capacity < 0 || (capacity > 0 && !counters))
        return code(sim_fail(SIM_E_INVALID_VALUE, "x1_get_kernel_counters", "bad arguments"));
    char names[SIM_MAX_KERNELS][SIM_KERNEL_NAME_LEN];
    uint64_t counts[SIM_MAX_KERNELS];
    int n = sim_kernel_counters(names, counts, SIM_MAX_KERNELS);
    for (int i = 0; i < n && i < capacity && i < SIM_MAX_KERNELS; i++) {
        memcpy(counters[i].name, names[i], X1_KERNEL_NAME_LEN);
        counters[i].launches = counts[i];
    }
    *count = n;
    return X1_SUCCESS;
}

X1_API x1_status_t x1_debug_set_faults(const char *spec) { return code(sim_set_faults(spec)); }

/* --------------------------------------------------------- elementwise */

static const sim_dtype ARITH[] = {SIM_F32, SIM_F16, SIM_I32, SIM_I64};
static const sim_dtype BITS[] = {SIM_BOOL, SIM_I8, SIM_U8, SIM_I32, SIM_I64};
static const sim_dtype COMPARABLE[] = {SIM_F32, SIM_F16, SIM_I32, SIM_I64, SIM_BOOL};
#define NELEM(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* self op other -> out; `allowed` are the operand dtypes X1 computes for this op */
static sim_status binary(const char *fn, const char *kernel, simk_binop op, const sim_dtype *allowed,
                         int nallowed, const x1_tensor_t *self, const x1_tensor_t *other, double alpha,
                         x1_tensor_t *out, const char *other_name) {
    sim_view a, b, o;
    TRY(sim_require_init(fn));
    TRY(view_of(out, &o, fn, "out", 0));
    TRY(view_of(self, &a, fn, "self", 0));
    TRY(view_of(other, &b, fn, other_name, 0));
    TRY(simk_check_dtype_in(fn, "self", &a, allowed, nallowed));
    return simk_binary(fn, kernel, op, &a, &b, alpha, &o);
}

X1_API x1_status_t x1_add(const x1_tensor_t *self, const x1_tensor_t *other, double alpha,
                          x1_tensor_t *out) {
    return code(binary("x1_add", "add", SIMK_ADD, ARITH, NELEM(ARITH), self, other, alpha, out, "other"));
}
X1_API x1_status_t x1_sub(const x1_tensor_t *self, const x1_tensor_t *other, double alpha,
                          x1_tensor_t *out) {
    return code(binary("x1_sub", "sub", SIMK_SUB, ARITH, NELEM(ARITH), self, other, alpha, out, "other"));
}

#define X1_BINARY(name, op, set)                                                                     \
    X1_API x1_status_t x1_##name(const x1_tensor_t *self, const x1_tensor_t *other, x1_tensor_t *out) { \
        return code(binary("x1_" #name, #name, op, set, NELEM(set), self, other, 1.0, out, "other"));   \
    }
X1_BINARY(mul, SIMK_MUL, ARITH)
X1_BINARY(div, SIMK_DIV, FLOATS)
X1_BINARY(maximum, SIMK_MAXIMUM, ARITH)
X1_BINARY(minimum, SIMK_MINIMUM, ARITH)
X1_BINARY(eq, SIMK_EQ, COMPARABLE)
X1_BINARY(ne, SIMK_NE, COMPARABLE)
X1_BINARY(lt, SIMK_LT, COMPARABLE)
X1_BINARY(le, SIMK_LE, COMPARABLE)
X1_BINARY(gt, SIMK_GT, COMPARABLE)
X1_BINARY(ge, SIMK_GE, COMPARABLE)
X1_BINARY(bitwise_and, SIMK_BITAND, BITS)
X1_BINARY(bitwise_or, SIMK_BITOR, BITS)
X1_BINARY(bitwise_xor, SIMK_BITXOR, BITS)

X1_API x1_status_t x1_pow(const x1_tensor_t *self, const x1_tensor_t *exponent, x1_tensor_t *out) {
    return code(binary("x1_pow", "pow", SIMK_POW, FLOATS, 2, self, exponent, 1.0, out, "exponent"));
}

X1_API x1_status_t x1_pow_scalar(const x1_tensor_t *self, double exponent, x1_tensor_t *out) {
    const char *fn = "x1_pow_scalar";
    sim_view a, o;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(out, &o, fn, "out", 0)) ||
        (st = view_of(self, &a, fn, "self", 0)) || (st = need_float(fn, "self", &a)))
        return code(st);
    return code(simk_pow_scalar(fn, "pow_scalar", &a, exponent, &o));
}

X1_API x1_status_t x1_scalar_pow(double self, const x1_tensor_t *exponent, x1_tensor_t *out) {
    const char *fn = "x1_scalar_pow";
    sim_view e, o;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(out, &o, fn, "out", 0)) ||
        (st = view_of(exponent, &e, fn, "exponent", 0)) || (st = need_float(fn, "exponent", &e)))
        return code(st);
    return code(simk_scalar_pow(fn, "scalar_pow", self, &e, &o));
}

X1_API x1_status_t x1_div_scalar(const x1_tensor_t *self, double other, x1_tensor_t *out) {
    const char *fn = "x1_div_scalar";
    sim_view a, o;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(out, &o, fn, "out", 0)) ||
        (st = view_of(self, &a, fn, "self", 0)) || (st = need_float(fn, "self", &a)))
        return code(st);
    return code(simk_div_scalar(fn, "div_scalar", &a, other, &o));
}

static sim_status unary(const char *fn, const char *kernel, simk_unop op, const sim_dtype *allowed, int nallowed,
                        const x1_tensor_t *self, x1_tensor_t *out) {
    sim_view a, o;
    TRY(sim_require_init(fn));
    TRY(view_of(out, &o, fn, "out", 0));
    TRY(view_of(self, &a, fn, "self", 0));
    TRY(simk_check_dtype_in(fn, "self", &a, allowed, nallowed));
    return simk_unary(fn, kernel, op, &a, &o);
}

#define X1_UNARY(name, op, set)                                                  \
    X1_API x1_status_t x1_##name(const x1_tensor_t *self, x1_tensor_t *out) {    \
        return code(unary("x1_" #name, #name, op, set, NELEM(set), self, out));   \
    }
X1_UNARY(relu, SIMK_RELU, FLOATS)
X1_UNARY(silu, SIMK_SILU, FLOATS)
X1_UNARY(sigmoid, SIMK_SIGMOID, FLOATS)
X1_UNARY(tanh, SIMK_TANH, FLOATS)
X1_UNARY(exp, SIMK_EXP, FLOATS)
X1_UNARY(log, SIMK_LOG, FLOATS)
X1_UNARY(sqrt, SIMK_SQRT, FLOATS)
X1_UNARY(rsqrt, SIMK_RSQRT, FLOATS)
X1_UNARY(reciprocal, SIMK_RECIPROCAL, FLOATS)
X1_UNARY(cos, SIMK_COS, FLOATS)
X1_UNARY(sin, SIMK_SIN, FLOATS)
X1_UNARY(neg, SIMK_NEG, ARITH)
X1_UNARY(abs, SIMK_ABS, ARITH)
X1_UNARY(bitwise_not, SIMK_BITNOT, BITS)

static int gelu_mode(const char *approximate, simk_unop *op) {
    if (!approximate || strcmp(approximate, "none") == 0) *op = SIMK_GELU;
    else if (strcmp(approximate, "tanh") == 0) *op = SIMK_GELU_TANH;
    else return 0;
    return 1;
}

X1_API x1_status_t x1_gelu(const x1_tensor_t *self, const char *approximate, x1_tensor_t *out) {
    simk_unop op;
    if (!gelu_mode(approximate, &op))
        return code(sim_fail(SIM_E_INVALID_VALUE, "x1_gelu",
                             "approximate='%s' (expected 'none' or 'tanh')", approximate));
    return code(unary("x1_gelu", "gelu", op, FLOATS, 2, self, out));
}

static sim_status addc(const char *fn, const char *kernel, int div, const x1_tensor_t *self,
                       const x1_tensor_t *tensor1, const x1_tensor_t *tensor2, double value, x1_tensor_t *out) {
    sim_view s, a, b, o;
    TRY(sim_require_init(fn));
    TRY(view_of(out, &o, fn, "out", 0));
    TRY(view_of(self, &s, fn, "self", 0));
    TRY(view_of(tensor1, &a, fn, "tensor1", 0));
    TRY(view_of(tensor2, &b, fn, "tensor2", 0));
    TRY(need_float(fn, "self", &s));
    return simk_addc(fn, kernel, div, &s, &a, &b, value, &o);
}

X1_API x1_status_t x1_addcmul(const x1_tensor_t *self, const x1_tensor_t *tensor1,
                              const x1_tensor_t *tensor2, double value, x1_tensor_t *out) {
    return code(addc("x1_addcmul", "addcmul", 0, self, tensor1, tensor2, value, out));
}
X1_API x1_status_t x1_addcdiv(const x1_tensor_t *self, const x1_tensor_t *tensor1,
                              const x1_tensor_t *tensor2, double value, x1_tensor_t *out) {
    return code(addc("x1_addcdiv", "addcdiv", 1, self, tensor1, tensor2, value, out));
}

X1_API x1_status_t x1_lerp(const x1_tensor_t *self, const x1_tensor_t *end, double weight,
                           x1_tensor_t *out) {
    const char *fn = "x1_lerp";
    sim_view s, e, o;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(out, &o, fn, "out", 0)) ||
        (st = view_of(self, &s, fn, "self", 0)) || (st = view_of(end, &e, fn, "end", 0)) ||
        (st = need_float(fn, "self", &s)))
        return code(st);
    return code(simk_lerp(fn, "lerp", &s, &e, weight, &o));
}

X1_API x1_status_t x1_where(const x1_tensor_t *condition, const x1_tensor_t *self,
                            const x1_tensor_t *other, x1_tensor_t *out) {
    const char *fn = "x1_where";
    sim_view c, a, b, o;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(out, &o, fn, "out", 0)) ||
        (st = view_of(condition, &c, fn, "condition", 0)) || (st = view_of(self, &a, fn, "self", 0)) ||
        (st = view_of(other, &b, fn, "other", 0)))
        return code(st);
    return code(simk_where(fn, "where", &c, &a, &b, &o));
}

X1_API x1_status_t x1_masked_fill(const x1_tensor_t *self, const x1_tensor_t *mask, double value,
                                  x1_tensor_t *out) {
    const char *fn = "x1_masked_fill";
    sim_view s, m, o;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(out, &o, fn, "out", 0)) ||
        (st = view_of(self, &s, fn, "self", 0)) || (st = view_of(mask, &m, fn, "mask", 0)))
        return code(st);
    return code(simk_masked_fill(fn, "masked_fill", &s, &m, value, &o));
}

static sim_status grad1(const char *fn, const char *kernel, simk_gradop op, const x1_tensor_t *grad_output,
                        const x1_tensor_t *x, const char *xname, double param, x1_tensor_t *out) {
    sim_view g, v, o;
    TRY(sim_require_init(fn));
    TRY(view_of(out, &o, fn, "out", 0));
    TRY(view_of(grad_output, &g, fn, "grad_output", 0));
    TRY(view_of(x, &v, fn, xname, 0));
    TRY(need_float(fn, "grad_output", &g));
    return simk_pointwise_grad(fn, kernel, op, &g, &v, param, &o);
}

X1_API x1_status_t x1_gelu_backward(const x1_tensor_t *grad_output, const x1_tensor_t *self,
                                    const char *approximate, x1_tensor_t *out) {
    simk_unop op;
    if (!gelu_mode(approximate, &op))
        return code(sim_fail(SIM_E_INVALID_VALUE, "x1_gelu_backward",
                             "approximate='%s' (expected 'none' or 'tanh')", approximate));
    return code(grad1("x1_gelu_backward", "gelu_backward", op == SIMK_GELU ? SIMK_GRAD_GELU : SIMK_GRAD_GELU_TANH,
                      grad_output, self, "self", 0, out));
}
X1_API x1_status_t x1_threshold_backward(const x1_tensor_t *grad_output, const x1_tensor_t *self,
                                         double threshold, x1_tensor_t *out) {
    return code(grad1("x1_threshold_backward", "threshold_backward", SIMK_GRAD_THRESHOLD, grad_output, self,
                      "self", threshold, out));
}
static sim_status dropout_backward(const char *fn, const x1_tensor_t *grad_output, const x1_tensor_t *mask,
                                   double scale, x1_tensor_t *out) {
    sim_view g, m, o;
    TRY(sim_require_init(fn));
    TRY(view_of(out, &o, fn, "out", 0));
    TRY(view_of(grad_output, &g, fn, "grad_output", 0));
    TRY(view_of(mask, &m, fn, "mask", 0));
    TRY(need_float(fn, "grad_output", &g));
    return simk_mask_scale(fn, "native_dropout_backward", &g, &m, scale, &o);
}
X1_API x1_status_t x1_native_dropout_backward(const x1_tensor_t *grad_output, const x1_tensor_t *mask,
                                              double scale, x1_tensor_t *out) {
    return code(dropout_backward("x1_native_dropout_backward", grad_output, mask, scale, out));
}
X1_API x1_status_t x1_sigmoid_backward(const x1_tensor_t *grad_output, const x1_tensor_t *output,
                                       x1_tensor_t *out) {
    return code(grad1("x1_sigmoid_backward", "sigmoid_backward", SIMK_GRAD_SIGMOID_Y, grad_output, output,
                      "output", 0, out));
}
X1_API x1_status_t x1_tanh_backward(const x1_tensor_t *grad_output, const x1_tensor_t *output,
                                    x1_tensor_t *out) {
    return code(grad1("x1_tanh_backward", "tanh_backward", SIMK_GRAD_TANH_Y, grad_output, output, "output", 0,
                      out));
}

/* -------------------------------------------------------------- matrix */

static sim_status gemm(const char *fn, const char *kernel, int ndim, const x1_tensor_t *bias,
                       const x1_tensor_t *a, const x1_tensor_t *m, double beta, double alpha,
                       x1_tensor_t *out) {
    sim_view av, mv, bv, ov;
    TRY(sim_require_init(fn));
    TRY(view_of(out, &ov, fn, "out", 0));
    TRY(view_of(a, &av, fn, ndim == 2 && bias ? "mat1" : "self", 0));
    TRY(view_of(m, &mv, fn, "mat2", 0));
    TRY(view_of(bias, &bv, fn, "self", 1));
    TRY(need_float(fn, "out", &ov));
    if (ov.ndim != ndim)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "expects %d-D operands, got %d-D", ndim, ov.ndim);
    return simk_gemm(fn, kernel, &av, &mv, &bv, beta, alpha, &ov);
}

X1_API x1_status_t x1_mm(const x1_tensor_t *self, const x1_tensor_t *mat2, x1_tensor_t *out) {
    return code(gemm("x1_mm", "mm", 2, NULL, self, mat2, 0.0, 1.0, out));
}
X1_API x1_status_t x1_bmm(const x1_tensor_t *self, const x1_tensor_t *mat2, x1_tensor_t *out) {
    return code(gemm("x1_bmm", "bmm", 3, NULL, self, mat2, 0.0, 1.0, out));
}
X1_API x1_status_t x1_addmm(const x1_tensor_t *self, const x1_tensor_t *mat1,
                            const x1_tensor_t *mat2, double beta, double alpha, x1_tensor_t *out) {
    if (!self)
        return code(sim_fail(SIM_E_INVALID_VALUE, "x1_addmm", "self (the bias) descriptor is NULL"));
    return code(gemm("x1_addmm", "addmm", 2, self, mat1, mat2, beta, alpha, out));
}

X1_API x1_status_t x1_gemm_u8(const x1_tensor_t *self, const x1_tensor_t *mat2, x1_tensor_t *out) {
    const char *fn = "x1_gemm_u8";
    sim_view a, m, o;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(out, &o, fn, "out", 0)) ||
        (st = view_of(self, &a, fn, "self", 0)) || (st = view_of(mat2, &m, fn, "mat2", 0)))
        return code(st);
    if (a.dtype != SIM_U8 || m.dtype != SIM_U8 || o.dtype != SIM_I32)
        return code(sim_fail(SIM_E_UNSUPPORTED, fn,
                             "takes uint8 x uint8 -> int32 (zero point 128), got %s x %s -> %s; "
                             "convert int8 operands with x1_s8_to_u8",
                             sim_dtype_name(a.dtype), sim_dtype_name(m.dtype), sim_dtype_name(o.dtype)));
    return code(simk_gemm_u8(fn, "gemm_u8", &a, &m, &o));
}

X1_API x1_status_t x1_s8_to_u8(const x1_tensor_t *src, x1_tensor_t *dst) {
    const char *fn = "x1_s8_to_u8";
    sim_view s, d;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(dst, &d, fn, "dst", 0)) ||
        (st = view_of(src, &s, fn, "src", 0)))
        return code(st);
    if (s.dtype != SIM_I8 || d.dtype != SIM_U8)
        return code(sim_fail(SIM_E_UNSUPPORTED, fn, "takes int8 -> uint8, got %s -> %s",
                             sim_dtype_name(s.dtype), sim_dtype_name(d.dtype)));
    if (!sim_same_shape(&s, &d))
        return code(sim_fail(SIM_E_INVALID_VALUE, fn, "src and dst shapes differ"));
    if ((st = sim_launch("s8_to_u8", fn))) return code(st);
    simk_s8_to_u8(&s, &d);
    return X1_SUCCESS;
}

/* ---------------------------------------------------- conv and pooling */

static int in_set(int64_t v, const int64_t *set, int n) {
    for (int i = 0; i < n; i++)
        if (v == set[i]) return 1;
    return 0;
}

static sim_status need_nhwc(const char *fn, const char *what, const sim_view *v) {
    if (v->ndim != 4)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "%s must be 4-D (NHWC), got %d-D", what, v->ndim);
    if (!sim_is_contiguous(v))
        return sim_fail(SIM_E_UNSUPPORTED, fn,
                        "%s must be contiguous in NHWC order (strides [%lld, %lld, %lld, %lld] "
                        "given)", what, (long long)v->strides[0], (long long)v->strides[1],
                        (long long)v->strides[2], (long long)v->strides[3]);
    return SIM_OK;
}

static sim_status conv_limits(const char *fn, const int64_t *stride, const int64_t *padding,
                              const int64_t *dilation, int64_t groups) {
    static const int64_t strides_ok[] = {1, 2, 4}, pads_ok[] = {0, 1, 2}, groups_ok[] = {1, 2, 4};
    if (!stride || !padding || !dilation)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "stride, padding and dilation are required");
    for (int i = 0; i < 2; i++) {
        if (!in_set(stride[i], strides_ok, 3))
            return sim_fail(SIM_E_UNSUPPORTED, fn, "stride=%lld not in {1, 2, 4}", (long long)stride[i]);
        if (!in_set(padding[i], pads_ok, 3))
            return sim_fail(SIM_E_UNSUPPORTED, fn, "padding=%lld not in {0, 1, 2}", (long long)padding[i]);
        if (dilation[i] != 1)
            return sim_fail(SIM_E_UNSUPPORTED, fn, "dilation=%lld (only 1 is supported)", (long long)dilation[i]);
    }
    if (!in_set(groups, groups_ok, 3))
        return sim_fail(SIM_E_UNSUPPORTED, fn, "groups=%lld not in {1, 2, 4}", (long long)groups);
    return SIM_OK;
}

/* Revision 1 silicon convolves float16 only; revision 2 float32 too. */
static sim_status conv_dtype(const char *fn, const char *what, const sim_view *v) {
#if X1_SIM_REVISION >= 2
    return need_float(fn, what, v);
#else
    if (v->dtype != SIM_F16)
        return sim_fail(SIM_E_UNSUPPORTED, fn, "%s dtype %s: X1 revision 1 convolves float16 only", what,
                        sim_dtype_name(v->dtype));
    return SIM_OK;
#endif
}

X1_API x1_status_t x1_conv2d(const x1_tensor_t *input, const x1_tensor_t *weight,
                             const x1_tensor_t *bias, const int64_t *stride,
                             const int64_t *padding, const int64_t *dilation, int64_t groups,
                             x1_tensor_t *out) {
    const char *fn = "x1_conv2d";
    sim_view in, w, b, o;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = conv_limits(fn, stride, padding, dilation, groups)) ||
        (st = view_of(out, &o, fn, "out", 0)) || (st = view_of(input, &in, fn, "input", 0)) ||
        (st = view_of(weight, &w, fn, "weight", 0)) || (st = view_of(bias, &b, fn, "bias", 1)) ||
        (st = conv_dtype(fn, "input", &in)) || (st = need_nhwc(fn, "input", &in)) ||
        (st = need_nhwc(fn, "weight (OHWI)", &w)))
        return code(st);
    return code(simk_conv2d_nhwc(fn, "conv2d", &in, &w, &b, stride, padding, dilation, groups, &o));
}

X1_API x1_status_t x1_conv2d_backward(const x1_tensor_t *grad_output, const x1_tensor_t *input,
                                      const x1_tensor_t *weight, const int64_t *stride,
                                      const int64_t *padding, const int64_t *dilation, int64_t groups,
                                      const int64_t *output_mask, x1_tensor_t *grad_input,
                                      x1_tensor_t *grad_weight, x1_tensor_t *grad_bias) {
    const char *fn = "x1_conv2d_backward";
    sim_view g, in, w, gi, gw, gb;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = conv_limits(fn, stride, padding, dilation, groups))) return code(st);
    if (!output_mask) return code(sim_fail(SIM_E_INVALID_VALUE, fn, "output_mask is NULL"));
    x1_tensor_t *outs[3] = {grad_input, grad_weight, grad_bias};
    sim_view *views[3] = {&gi, &gw, &gb};
    const char *names[3] = {"grad_input", "grad_weight", "grad_bias"};
    for (int i = 0; i < 3; i++)
        if ((st = view_of(output_mask[i] ? outs[i] : NULL, views[i], fn, names[i], !output_mask[i])))
            return code(st);
    if ((st = view_of(grad_output, &g, fn, "grad_output", 0)) || (st = view_of(input, &in, fn, "input", 0)) ||
        (st = view_of(weight, &w, fn, "weight", 0)) || (st = conv_dtype(fn, "input", &in)) ||
        (st = need_nhwc(fn, "grad_output", &g)) || (st = need_nhwc(fn, "input", &in)) ||
        (st = need_nhwc(fn, "weight (OHWI)", &w)))
        return code(st);
    return code(simk_conv2d_backward_nhwc(fn, "conv2d_backward", &g, &in, &w, stride, padding, dilation, groups,
                                          &gi, &gw, &gb));
}

/* The window, stride (stride_len 0: the window) and padding, PyTorch's limits and the NPU's. */
static sim_status pool_window(const char *fn, const int64_t *k, const int64_t *stride, int64_t stride_len,
                              const int64_t *pad, int64_t s[2]) {
    if (!k || !pad) return sim_fail(SIM_E_INVALID_VALUE, fn, "kernel_size and padding are required");
    if (stride_len != 0 && stride_len != 2)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "stride_len=%lld (expected 0 or 2)",
                        (long long)stride_len);
    if (stride_len && !stride) return sim_fail(SIM_E_INVALID_VALUE, fn, "stride is NULL");
    for (int i = 0; i < 2; i++) {
        s[i] = stride_len ? stride[i] : k[i];
        if (k[i] < 1 || k[i] > 16 || s[i] < 1)
            return sim_fail(SIM_E_UNSUPPORTED, fn, "kernel_size %lld / stride %lld out of range "
                            "(kernel 1..16, stride >= 1)", (long long)k[i], (long long)s[i]);
        if (pad[i] < 0 || pad[i] > k[i] / 2)
            return sim_fail(SIM_E_INVALID_VALUE, fn, "padding %lld must be in [0, kernel_size/2]",
                            (long long)pad[i]);
    }
    return SIM_OK;
}

/* Shared checks for the pools: the window, then a contiguous NHWC float input. */
static sim_status pool_setup(const char *fn, const x1_tensor_t *self, x1_tensor_t *out,
                             sim_view *in, sim_view *o, const int64_t *k, const int64_t *stride,
                             int64_t stride_len, const int64_t *pad, int64_t s[2]) {
    TRY(sim_require_init(fn));
    TRY(pool_window(fn, k, stride, stride_len, pad, s));
    TRY(view_of(out, o, fn, "out", 0));
    TRY(view_of(self, in, fn, "self", 0));
    TRY(need_float(fn, "self", in));
    TRY(need_nhwc(fn, "self", in));
    return SIM_OK;
}

static sim_status check_pool_out(const char *fn, const char *what, const sim_view *in, const sim_view *o,
                                 int64_t oh, int64_t ow) {
    if (oh <= 0 || ow <= 0) return sim_fail(SIM_E_INVALID_VALUE, fn, "output would be empty");
    if (o->ndim != 4 || o->shape[0] != in->shape[0] || o->shape[1] != oh || o->shape[2] != ow ||
        o->shape[3] != in->shape[3])
        return sim_fail(SIM_E_INVALID_VALUE, fn, "%s must be NHWC [%lld, %lld, %lld, %lld]", what,
                        (long long)in->shape[0], (long long)oh, (long long)ow,
                        (long long)in->shape[3]);
    return SIM_OK;
}

X1_API x1_status_t x1_max_pool2d(const x1_tensor_t *self, const int64_t *kernel_size,
                                 const int64_t *stride, int64_t stride_len,
                                 const int64_t *padding, const int64_t *dilation, bool ceil_mode,
                                 x1_tensor_t *out, x1_tensor_t *indices) {
    const char *fn = "x1_max_pool2d";
    sim_view in, o, idx;
    int64_t s[2];
    sim_status st = pool_setup(fn, self, out, &in, &o, kernel_size, stride, stride_len, padding, s);
    if (st) return code(st);
    if (!dilation || dilation[0] < 1 || dilation[1] < 1)
        return code(sim_fail(SIM_E_INVALID_VALUE, fn, "dilation must be >= 1"));
    if ((st = view_of(indices, &idx, fn, "indices", 1))) return code(st);
    int64_t oh = simk_pool_out(in.shape[1], kernel_size[0], s[0], padding[0], dilation[0], ceil_mode);
    int64_t ow = simk_pool_out(in.shape[2], kernel_size[1], s[1], padding[1], dilation[1], ceil_mode);
    if ((st = check_pool_out(fn, "out", &in, &o, oh, ow))) return code(st);
    return code(simk_max_pool2d_nhwc(fn, "max_pool2d", &in, kernel_size, s, padding, dilation, &o, &idx));
}

X1_API x1_status_t x1_avg_pool2d(const x1_tensor_t *self, const int64_t *kernel_size,
                                 const int64_t *stride, int64_t stride_len,
                                 const int64_t *padding, bool ceil_mode, bool count_include_pad,
                                 int64_t divisor_override, x1_tensor_t *out) {
    const char *fn = "x1_avg_pool2d";
    sim_view in, o;
    int64_t s[2];
    sim_status st = pool_setup(fn, self, out, &in, &o, kernel_size, stride, stride_len, padding, s);
    if (st) return code(st);
    if (divisor_override < 0)
        return code(sim_fail(SIM_E_INVALID_VALUE, fn, "divisor_override must be > 0 (0 = none)"));
    int64_t oh = simk_pool_out(in.shape[1], kernel_size[0], s[0], padding[0], 1, ceil_mode);
    int64_t ow = simk_pool_out(in.shape[2], kernel_size[1], s[1], padding[1], 1, ceil_mode);
    if ((st = check_pool_out(fn, "out", &in, &o, oh, ow))) return code(st);
    return code(simk_avg_pool2d_nhwc(fn, "avg_pool2d", &in, kernel_size, s, padding, count_include_pad,
                                     divisor_override, &o));
}

X1_API x1_status_t x1_adaptive_avg_pool2d(const x1_tensor_t *self, const int64_t *output_size,
                                          x1_tensor_t *out) {
    const char *fn = "x1_adaptive_avg_pool2d";
    sim_view in, o;
    sim_status st;
    if ((st = sim_require_init(fn))) return code(st);
    if (!output_size) return code(sim_fail(SIM_E_INVALID_VALUE, fn, "output_size is NULL"));
    if ((st = view_of(out, &o, fn, "out", 0)) || (st = view_of(self, &in, fn, "self", 0)) ||
        (st = need_float(fn, "self", &in)) || (st = need_nhwc(fn, "self", &in)))
        return code(st);
    if ((st = check_pool_out(fn, "out", &in, &o, output_size[0], output_size[1]))) return code(st);
    return code(simk_adaptive_avg_pool2d_nhwc(fn, "adaptive_avg_pool2d", &in, &o));
}

X1_API x1_status_t x1_max_pool2d_backward(const x1_tensor_t *grad_output, const x1_tensor_t *indices,
                                          x1_tensor_t *out) {
    const char *fn = "x1_max_pool2d_backward";
    sim_view g, i, o;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(out, &o, fn, "out", 0)) ||
        (st = view_of(grad_output, &g, fn, "grad_output", 0)) || (st = view_of(indices, &i, fn, "indices", 0)) ||
        (st = need_float(fn, "grad_output", &g)) || (st = need_nhwc(fn, "grad_output", &g)) ||
        (st = need_nhwc(fn, "indices", &i)))
        return code(st);
    return code(simk_max_pool2d_backward_nhwc(fn, "max_pool2d_backward", &g, &i, &o));
}

X1_API x1_status_t x1_avg_pool2d_backward(const x1_tensor_t *grad_output, const int64_t *kernel_size,
                                          const int64_t *stride, int64_t stride_len,
                                          const int64_t *padding, bool ceil_mode,
                                          bool count_include_pad, int64_t divisor_override,
                                          x1_tensor_t *out) {
    const char *fn = "x1_avg_pool2d_backward";
    sim_view g, o;
    int64_t s[2];
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = pool_window(fn, kernel_size, stride, stride_len, padding, s)) ||
        (st = view_of(out, &o, fn, "out", 0)) || (st = view_of(grad_output, &g, fn, "grad_output", 0)) ||
        (st = need_float(fn, "grad_output", &g)) || (st = need_nhwc(fn, "grad_output", &g)))
        return code(st);
    if (o.ndim != 4) return code(sim_fail(SIM_E_INVALID_VALUE, fn, "out must be 4-D (NHWC), got %d-D", o.ndim));
    if (divisor_override < 0)
        return code(sim_fail(SIM_E_INVALID_VALUE, fn, "divisor_override must be > 0 (0 = none)"));
    int64_t oh = simk_pool_out(o.shape[1], kernel_size[0], s[0], padding[0], 1, ceil_mode);
    int64_t ow = simk_pool_out(o.shape[2], kernel_size[1], s[1], padding[1], 1, ceil_mode);
    if ((st = check_pool_out(fn, "grad_output", &o, &g, oh, ow))) return code(st);
    return code(simk_avg_pool2d_backward_nhwc(fn, "avg_pool2d_backward", &g, kernel_size, s, padding,
                                              count_include_pad, divisor_override, &o));
}

X1_API x1_status_t x1_adaptive_avg_pool2d_backward(const x1_tensor_t *grad_output, x1_tensor_t *out) {
    const char *fn = "x1_adaptive_avg_pool2d_backward";
    sim_view g, o;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(out, &o, fn, "out", 0)) ||
        (st = view_of(grad_output, &g, fn, "grad_output", 0)) || (st = need_float(fn, "grad_output", &g)) ||
        (st = need_nhwc(fn, "grad_output", &g)))
        return code(st);
    return code(simk_adaptive_avg_pool2d_backward_nhwc(fn, "adaptive_avg_pool2d_backward", &g, &o));
}

/* ------------------------------------------------- norm, reduce, misc */

X1_API x1_status_t x1_batch_norm(const x1_tensor_t *input, const x1_tensor_t *weight,
                                 const x1_tensor_t *bias, const x1_tensor_t *running_mean,
                                 const x1_tensor_t *running_var, double eps, x1_tensor_t *out) {
    const char *fn = "x1_batch_norm";
    sim_view in, w, b, m, v, o;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(out, &o, fn, "out", 0)) ||
        (st = view_of(input, &in, fn, "input", 0)) || (st = view_of(weight, &w, fn, "weight", 1)) ||
        (st = view_of(bias, &b, fn, "bias", 1)) ||
        (st = view_of(running_mean, &m, fn, "running_mean", 0)) ||
        (st = view_of(running_var, &v, fn, "running_var", 0)) || (st = need_float(fn, "input", &in)))
        return code(st);
    const sim_view *params[4] = {&w, &b, &m, &v};
    for (int i = 0; i < 4; i++)
        if (params[i]->present && (st = need_float(fn, "per-channel parameter", params[i])))
            return code(st);
    return code(simk_batch_norm_infer(fn, "batch_norm", &in, &w, &b, &m, &v, eps, &o));
}

/* normalized_shape must name the input's trailing dims (layer norm and its backward) */
static sim_status normalized_dims(const char *fn, const int64_t *shape, int64_t len, const sim_view *in) {
    if (!shape || len < 1 || len > in->ndim)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "normalized_shape has %lld dims for a %d-D input", (long long)len,
                        in->ndim);
    for (int64_t i = 0; i < len; i++)
        if (shape[i] != in->shape[in->ndim - len + i])
            return sim_fail(SIM_E_INVALID_VALUE, fn, "normalized_shape does not match the input's trailing dims");
    return SIM_OK;
}

X1_API x1_status_t x1_layer_norm(const x1_tensor_t *input, const int64_t *normalized_shape,
                                 int64_t normalized_shape_len, const x1_tensor_t *weight,
                                 const x1_tensor_t *bias, double eps, x1_tensor_t *out,
                                 x1_tensor_t *mean, x1_tensor_t *rstd) {
    const char *fn = "x1_layer_norm";
    sim_view in, w, b, o, m, r;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(out, &o, fn, "out", 0)) ||
        (st = view_of(input, &in, fn, "input", 0)) || (st = view_of(weight, &w, fn, "weight", 1)) ||
        (st = view_of(bias, &b, fn, "bias", 1)) || (st = view_of(mean, &m, fn, "mean", 1)) ||
        (st = view_of(rstd, &r, fn, "rstd", 1)) || (st = need_float(fn, "input", &in)))
        return code(st);
    if ((st = normalized_dims(fn, normalized_shape, normalized_shape_len, &in))) return code(st);
    return code(simk_layer_norm(fn, "layer_norm", &in, normalized_shape_len, &w, &b, eps, &o, &m, &r));
}

static sim_status reduce(const char *fn, const char *kernel, int mean, const x1_tensor_t *self,
                         const int64_t *dim, int64_t dim_len, bool keepdim, x1_tensor_t *out) {
    sim_view in, o;
    uint32_t mask;
    TRY(sim_require_init(fn));
    TRY(view_of(out, &o, fn, "out", 0));
    TRY(view_of(self, &in, fn, "self", 0));
    TRY(need_float(fn, "self", &in));
    TRY(need_float(fn, "out", &o));
    TRY(simk_reduce_dims(fn, &in, dim, dim_len, keepdim, &o, &mask));
    return simk_reduce(fn, kernel, &in, mask, mean, &o);
}

X1_API x1_status_t x1_sum(const x1_tensor_t *self, const int64_t *dim, int64_t dim_len,
                          bool keepdim, x1_tensor_t *out) {
    const char *fn = "x1_sum";
    sim_view in, o;
    uint32_t mask;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(out, &o, fn, "out", 0)) ||
        (st = view_of(self, &in, fn, "self", 0)))
        return code(st);
    if (simk_is_float(in.dtype)) return code(reduce(fn, "sum", 0, self, dim, dim_len, keepdim, out));
    if ((st = simk_reduce_dims(fn, &in, dim, dim_len, keepdim, &o, &mask))) return code(st);
    return code(simk_reduce_int(fn, "sum", &in, mask, &o));
}
X1_API x1_status_t x1_mean(const x1_tensor_t *self, const int64_t *dim, int64_t dim_len,
                           bool keepdim, x1_tensor_t *out) {
    return code(reduce("x1_mean", "mean", 1, self, dim, dim_len, keepdim, out));
}

X1_API x1_status_t x1_logsumexp(const x1_tensor_t *self, const int64_t *dim, int64_t dim_len,
                                bool keepdim, x1_tensor_t *out) {
    const char *fn = "x1_logsumexp";
    sim_view in, o;
    uint32_t mask;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(out, &o, fn, "out", 0)) ||
        (st = view_of(self, &in, fn, "self", 0)) || (st = need_float(fn, "self", &in)) ||
        (st = simk_reduce_dims(fn, &in, dim, dim_len, keepdim, &o, &mask)))
        return code(st);
    return code(simk_logsumexp(fn, "logsumexp", &in, mask, &o));
}

X1_API x1_status_t x1_var_mean(const x1_tensor_t *self, const int64_t *dim, int64_t dim_len,
                               double correction, bool keepdim, x1_tensor_t *var, x1_tensor_t *mean) {
    const char *fn = "x1_var_mean";
    sim_view in, v, m;
    uint32_t mask;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(var, &v, fn, "var", 0)) ||
        (st = view_of(mean, &m, fn, "mean", 0)) || (st = view_of(self, &in, fn, "self", 0)) ||
        (st = need_float(fn, "self", &in)) || (st = simk_reduce_dims(fn, &in, dim, dim_len, keepdim, &v, &mask)) ||
        (st = simk_reduce_dims(fn, &in, dim, dim_len, keepdim, &m, &mask)))
        return code(st);
    return code(simk_var_mean(fn, "var_mean", &in, mask, correction, &v, &m));
}

X1_API x1_status_t x1_layer_norm_backward(const x1_tensor_t *grad_out, const x1_tensor_t *input,
                                          const int64_t *normalized_shape, int64_t normalized_shape_len,
                                          const x1_tensor_t *mean, const x1_tensor_t *rstd,
                                          const x1_tensor_t *weight, const int64_t *output_mask,
                                          x1_tensor_t *grad_input, x1_tensor_t *grad_weight,
                                          x1_tensor_t *grad_bias) {
    const char *fn = "x1_layer_norm_backward";
    sim_view g, in, m, r, w, gi, gw, gb;
    sim_status st;
    if ((st = sim_require_init(fn))) return code(st);
    if (!output_mask) return code(sim_fail(SIM_E_INVALID_VALUE, fn, "output_mask is NULL"));
    x1_tensor_t *outs[3] = {grad_input, grad_weight, grad_bias};
    sim_view *views[3] = {&gi, &gw, &gb};
    const char *names[3] = {"grad_input", "grad_weight", "grad_bias"};
    for (int i = 0; i < 3; i++)
        if ((st = view_of(output_mask[i] ? outs[i] : NULL, views[i], fn, names[i], !output_mask[i])))
            return code(st);
    if ((st = view_of(grad_out, &g, fn, "grad_out", 0)) || (st = view_of(input, &in, fn, "input", 0)) ||
        (st = view_of(mean, &m, fn, "mean", 0)) || (st = view_of(rstd, &r, fn, "rstd", 0)) ||
        (st = view_of(weight, &w, fn, "weight", 1)) || (st = need_float(fn, "input", &in)))
        return code(st);
    if ((st = normalized_dims(fn, normalized_shape, normalized_shape_len, &in))) return code(st);
    if ((gw.present || gb.present) && !w.present)
        return code(sim_fail(SIM_E_INVALID_VALUE, fn, "grad_weight and grad_bias need weight (an affine layer norm)"));
    return code(simk_layer_norm_backward(fn, "layer_norm_backward", &g, &in, normalized_shape_len, &m, &r, &w,
                                         &gi, &gw, &gb));
}

X1_API x1_status_t x1_embedding(const x1_tensor_t *weight, const x1_tensor_t *indices,
                                x1_tensor_t *out) {
    const char *fn = "x1_embedding";
    sim_view w, i, o;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(out, &o, fn, "out", 0)) ||
        (st = view_of(weight, &w, fn, "weight", 0)) || (st = view_of(indices, &i, fn, "indices", 0)) ||
        (st = need_float(fn, "weight", &w)))
        return code(st);
    return code(simk_embedding(fn, "embedding", &w, &i, &o));
}

X1_API x1_status_t x1_embedding_backward(const x1_tensor_t *grad_output, const x1_tensor_t *indices,
                                         int64_t num_weights, int64_t padding_idx,
                                         bool scale_grad_by_freq, x1_tensor_t *out) {
    const char *fn = "x1_embedding_backward";
    sim_view g, i, o;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(out, &o, fn, "out", 0)) ||
        (st = view_of(grad_output, &g, fn, "grad_output", 0)) || (st = view_of(indices, &i, fn, "indices", 0)) ||
        (st = need_float(fn, "grad_output", &g)))
        return code(st);
    return code(simk_embedding_backward(fn, "embedding_backward", &g, &i, num_weights, padding_idx,
                                        scale_grad_by_freq, &o));
}

X1_API x1_status_t x1_nll_loss_forward(const x1_tensor_t *self, const x1_tensor_t *target,
                                       const x1_tensor_t *weight, int64_t reduction,
                                       int64_t ignore_index, x1_tensor_t *output,
                                       x1_tensor_t *total_weight) {
    const char *fn = "x1_nll_loss_forward";
    sim_view in, t, w, o, tw;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(output, &o, fn, "output", 0)) ||
        (st = view_of(total_weight, &tw, fn, "total_weight", 0)) || (st = view_of(self, &in, fn, "self", 0)) ||
        (st = view_of(target, &t, fn, "target", 0)) || (st = view_of(weight, &w, fn, "weight", 1)) ||
        (st = need_float(fn, "self", &in)))
        return code(st);
    return code(simk_nll_loss(fn, "nll_loss", &in, &t, &w, reduction, ignore_index, &o, &tw));
}

X1_API x1_status_t x1_nll_loss_backward(const x1_tensor_t *grad_output, const x1_tensor_t *self,
                                        const x1_tensor_t *target, const x1_tensor_t *weight,
                                        int64_t reduction, int64_t ignore_index,
                                        const x1_tensor_t *total_weight, x1_tensor_t *out) {
    const char *fn = "x1_nll_loss_backward";
    sim_view g, in, t, w, tw, o;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(out, &o, fn, "out", 0)) ||
        (st = view_of(grad_output, &g, fn, "grad_output", 0)) || (st = view_of(self, &in, fn, "self", 0)) ||
        (st = view_of(target, &t, fn, "target", 0)) || (st = view_of(weight, &w, fn, "weight", 1)) ||
        (st = view_of(total_weight, &tw, fn, "total_weight", 0)) || (st = need_float(fn, "self", &in)))
        return code(st);
    return code(simk_nll_loss_backward(fn, "nll_loss_backward", &g, &in, &t, &w, reduction, ignore_index, &tw,
                                       &o));
}

X1_API x1_status_t x1_copy(const x1_tensor_t *src, x1_tensor_t *dst) {
    const char *fn = "x1_copy";
    sim_view s, d;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(dst, &d, fn, "dst", 0)) ||
        (st = view_of(src, &s, fn, "src", 0)))
        return code(st);
    if (!sim_same_shape(&s, &d))
        return code(sim_fail(SIM_E_INVALID_VALUE, fn, "src and dst shapes differ"));
    return code(simk_copy(fn, "copy", &s, &d));
}

X1_API x1_status_t x1_fill(x1_tensor_t *self, double value) {
    const char *fn = "x1_fill";
    sim_view o;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(self, &o, fn, "self", 0))) return code(st);
    if ((st = sim_launch("fill", fn))) return code(st);
    simk_fill(&o, value);
    return X1_SUCCESS;
}

X1_API x1_status_t x1_arange(double start, double end, double step, x1_tensor_t *out) {
    const char *fn = "x1_arange";
    sim_view o;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(out, &o, fn, "out", 0)) ||
        (st = simk_check_dtype_in(fn, "out", &o, ARITH, NELEM(ARITH))))
        return code(st);
    return code(simk_arange(fn, "arange", start, end, step, &o));
}

X1_API x1_status_t x1_select_backward(const x1_tensor_t *grad_output, int64_t dim, int64_t index,
                                      x1_tensor_t *out) {
    const char *fn = "x1_select_backward";
    sim_view g, o;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(out, &o, fn, "out", 0)) ||
        (st = view_of(grad_output, &g, fn, "grad_output", 0)))
        return code(st);
    return code(simk_select_backward(fn, "select_backward", &g, dim, index, &o));
}

X1_API x1_status_t x1_cat(const x1_tensor_t *const *tensors, int32_t tensors_len, int64_t dim,
                          x1_tensor_t *out) {
    const char *fn = "x1_cat";
    sim_view o;
    sim_status st;
    if ((st = sim_require_init(fn))) return code(st);
    if (!tensors || tensors_len < 1)
        return code(sim_fail(SIM_E_INVALID_VALUE, fn, "needs at least one tensor (tensors_len=%d)", (int)tensors_len));
    if ((st = view_of(out, &o, fn, "out", 0))) return code(st);
    sim_view *views = malloc((size_t)tensors_len * sizeof *views);
    if (!views) abort();
    for (int32_t i = 0; i < tensors_len && !st; i++) {
        char what[32];
        snprintf(what, sizeof what, "tensors[%d]", (int)i);
        st = view_of(tensors[i], &views[i], fn, what, 0);
    }
    if (!st) st = simk_cat(fn, "cat", views, tensors_len, dim, &o);
    free(views);
    return code(st);
}

/* ------------------------------------------------ comparisons with scalars */

static sim_status compare_scalar(const char *fn, const char *kernel, simk_binop op, const x1_tensor_t *self,
                                 double other, x1_tensor_t *out) {
    sim_view a, o;
    TRY(sim_require_init(fn));
    TRY(view_of(out, &o, fn, "out", 0));
    TRY(view_of(self, &a, fn, "self", 0));
    return simk_compare_scalar(fn, kernel, op, &a, other, &o);
}

#define X1_COMPARE_SCALAR(name, op)                                                             \
    X1_API x1_status_t x1_##name##_scalar(const x1_tensor_t *self, double other, x1_tensor_t *out) { \
        return code(compare_scalar("x1_" #name "_scalar", #name "_scalar", op, self, other, out));   \
    }
X1_COMPARE_SCALAR(eq, SIMK_EQ)
X1_COMPARE_SCALAR(ne, SIMK_NE)
X1_COMPARE_SCALAR(lt, SIMK_LT)
X1_COMPARE_SCALAR(le, SIMK_LE)
X1_COMPARE_SCALAR(gt, SIMK_GT)
X1_COMPARE_SCALAR(ge, SIMK_GE)

static sim_status logical(const char *fn, const char *kernel, simk_logop op, const x1_tensor_t *self,
                          const x1_tensor_t *other, x1_tensor_t *out) {
    sim_view a, b, o;
    TRY(sim_require_init(fn));
    TRY(view_of(out, &o, fn, "out", 0));
    TRY(view_of(self, &a, fn, "self", 0));
    if (op != SIMK_LOGICAL_NOT) TRY(view_of(other, &b, fn, "other", 0));
    return simk_logical(fn, kernel, op, &a, op == SIMK_LOGICAL_NOT ? NULL : &b, &o);
}

X1_API x1_status_t x1_logical_and(const x1_tensor_t *self, const x1_tensor_t *other, x1_tensor_t *out) {
    return code(logical("x1_logical_and", "logical_and", SIMK_LOGICAL_AND, self, other, out));
}
X1_API x1_status_t x1_logical_or(const x1_tensor_t *self, const x1_tensor_t *other, x1_tensor_t *out) {
    return code(logical("x1_logical_or", "logical_or", SIMK_LOGICAL_OR, self, other, out));
}
X1_API x1_status_t x1_logical_xor(const x1_tensor_t *self, const x1_tensor_t *other, x1_tensor_t *out) {
    return code(logical("x1_logical_xor", "logical_xor", SIMK_LOGICAL_XOR, self, other, out));
}
X1_API x1_status_t x1_logical_not(const x1_tensor_t *self, x1_tensor_t *out) {
    return code(logical("x1_logical_not", "logical_not", SIMK_LOGICAL_NOT, self, NULL, out));
}

/* ------------------------------------------------- reductions to bool, extremes */

static sim_status any_all(const char *fn, const char *kernel, int all, const x1_tensor_t *self, const int64_t *dim,
                          int64_t dim_len, bool keepdim, x1_tensor_t *out) {
    sim_view in, o;
    uint32_t mask;
    TRY(sim_require_init(fn));
    TRY(view_of(out, &o, fn, "out", 0));
    TRY(view_of(self, &in, fn, "self", 0));
    TRY(simk_reduce_dims(fn, &in, dim, dim_len, keepdim, &o, &mask));
    return simk_any_all(fn, kernel, &in, mask, all, &o);
}

X1_API x1_status_t x1_any(const x1_tensor_t *self, const int64_t *dim, int64_t dim_len, bool keepdim,
                          x1_tensor_t *out) {
    return code(any_all("x1_any", "any", 0, self, dim, dim_len, keepdim, out));
}
X1_API x1_status_t x1_all(const x1_tensor_t *self, const int64_t *dim, int64_t dim_len, bool keepdim,
                          x1_tensor_t *out) {
    return code(any_all("x1_all", "all", 1, self, dim, dim_len, keepdim, out));
}
X1_API x1_status_t x1_any_dim(const x1_tensor_t *self, int64_t dim, bool keepdim, x1_tensor_t *out) {
    return code(any_all("x1_any_dim", "any", 0, self, &dim, 1, keepdim, out));
}
X1_API x1_status_t x1_all_dim(const x1_tensor_t *self, int64_t dim, bool keepdim, x1_tensor_t *out) {
    return code(any_all("x1_all_dim", "all", 1, self, &dim, 1, keepdim, out));
}

static sim_status minmax(const char *fn, const char *kernel, int is_min, const x1_tensor_t *self, int64_t dim,
                         bool keepdim, x1_tensor_t *values, x1_tensor_t *indices) {
    sim_view in, v, i;
    TRY(sim_require_init(fn));
    TRY(view_of(values, &v, fn, "values", 1));
    TRY(view_of(indices, &i, fn, "indices", 0));
    TRY(view_of(self, &in, fn, "self", 0));
    TRY(simk_check_dtype_in(fn, "self", &in, ARITH, NELEM(ARITH)));
    return simk_minmax_dim(fn, kernel, &in, dim, keepdim, is_min, &v, &i);
}

X1_API x1_status_t x1_max_dim(const x1_tensor_t *self, int64_t dim, bool keepdim, x1_tensor_t *values,
                              x1_tensor_t *indices) {
    if (!values) return code(sim_fail(SIM_E_INVALID_VALUE, "x1_max_dim", "values descriptor is NULL"));
    return code(minmax("x1_max_dim", "max_dim", 0, self, dim, keepdim, values, indices));
}
X1_API x1_status_t x1_min_dim(const x1_tensor_t *self, int64_t dim, bool keepdim, x1_tensor_t *values,
                              x1_tensor_t *indices) {
    if (!values) return code(sim_fail(SIM_E_INVALID_VALUE, "x1_min_dim", "values descriptor is NULL"));
    return code(minmax("x1_min_dim", "min_dim", 1, self, dim, keepdim, values, indices));
}
X1_API x1_status_t x1_argmax(const x1_tensor_t *self, int64_t dim, bool keepdim, x1_tensor_t *out) {
    return code(minmax("x1_argmax", "argmax", 0, self, dim, keepdim, NULL, out));
}
X1_API x1_status_t x1_argmin(const x1_tensor_t *self, int64_t dim, bool keepdim, x1_tensor_t *out) {
    return code(minmax("x1_argmin", "argmin", 1, self, dim, keepdim, NULL, out));
}

X1_API x1_status_t x1_topk(const x1_tensor_t *self, int64_t k, int64_t dim, bool largest, x1_tensor_t *values,
                           x1_tensor_t *indices) {
    const char *fn = "x1_topk";
    sim_view in, v, i;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(values, &v, fn, "values", 0)) ||
        (st = view_of(indices, &i, fn, "indices", 0)) || (st = view_of(self, &in, fn, "self", 0)) ||
        (st = simk_check_dtype_in(fn, "self", &in, ARITH, NELEM(ARITH))))
        return code(st);
    return code(simk_topk(fn, "topk", &in, k, dim, largest, &v, &i));
}

X1_API x1_status_t x1_cumsum(const x1_tensor_t *self, int64_t dim, x1_tensor_t *out) {
    const char *fn = "x1_cumsum";
    sim_view in, o;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(out, &o, fn, "out", 0)) || (st = view_of(self, &in, fn, "self", 0)))
        return code(st);
    return code(simk_cumsum(fn, "cumsum", &in, dim, &o));
}

X1_API x1_status_t x1_clamp(const x1_tensor_t *self, const x1_tensor_t *min, const x1_tensor_t *max,
                            x1_tensor_t *out) {
    const char *fn = "x1_clamp";
    sim_view in, lo, hi, o;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(out, &o, fn, "out", 0)) ||
        (st = view_of(self, &in, fn, "self", 0)) || (st = view_of(min, &lo, fn, "min", 1)) ||
        (st = view_of(max, &hi, fn, "max", 1)) || (st = simk_check_dtype_in(fn, "self", &in, ARITH, NELEM(ARITH))))
        return code(st);
    return code(simk_clamp(fn, "clamp", &in, &lo, &hi, &o));
}

X1_API x1_status_t x1_isin(const x1_tensor_t *elements, const x1_tensor_t *test_elements, bool invert,
                           x1_tensor_t *out) {
    const char *fn = "x1_isin";
    sim_view e, t, o;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(out, &o, fn, "out", 0)) ||
        (st = view_of(elements, &e, fn, "elements", 0)) || (st = view_of(test_elements, &t, fn, "test_elements", 0)))
        return code(st);
    return code(simk_isin(fn, "isin", &e, &t, invert, &o));
}

/* ------------------------------------------------------------ indexing */

X1_API x1_status_t x1_gather(const x1_tensor_t *self, int64_t dim, const x1_tensor_t *index, x1_tensor_t *out) {
    const char *fn = "x1_gather";
    sim_view in, ix, o;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(out, &o, fn, "out", 0)) ||
        (st = view_of(self, &in, fn, "self", 0)) || (st = view_of(index, &ix, fn, "index", 0)))
        return code(st);
    return code(simk_gather(fn, "gather", &in, dim, &ix, &o));
}

static sim_status scatter(const char *fn, const char *kernel, int add, const x1_tensor_t *self, int64_t dim,
                          const x1_tensor_t *index, const x1_tensor_t *src, x1_tensor_t *out) {
    sim_view in, ix, sv, o;
    TRY(sim_require_init(fn));
    TRY(view_of(out, &o, fn, "out", 0));
    TRY(view_of(self, &in, fn, "self", 0));
    TRY(view_of(index, &ix, fn, "index", 0));
    TRY(view_of(src, &sv, fn, "src", 0));
    if (sv.dtype != o.dtype)
        return sim_fail(SIM_E_UNSUPPORTED, fn, "src is %s but the output is %s (mixed dtypes)",
                        sim_dtype_name(sv.dtype), sim_dtype_name(o.dtype));
    return simk_scatter(fn, kernel, &in, dim, &ix, &sv, add, &o);
}

X1_API x1_status_t x1_scatter(const x1_tensor_t *self, int64_t dim, const x1_tensor_t *index,
                              const x1_tensor_t *src, x1_tensor_t *out) {
    return code(scatter("x1_scatter", "scatter", 0, self, dim, index, src, out));
}
X1_API x1_status_t x1_scatter_add(const x1_tensor_t *self, int64_t dim, const x1_tensor_t *index,
                                  const x1_tensor_t *src, x1_tensor_t *out) {
    return code(scatter("x1_scatter_add", "scatter_add", 1, self, dim, index, src, out));
}

X1_API x1_status_t x1_index_select(const x1_tensor_t *self, int64_t dim, const x1_tensor_t *index,
                                   x1_tensor_t *out) {
    const char *fn = "x1_index_select";
    sim_view in, ix, o;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(out, &o, fn, "out", 0)) ||
        (st = view_of(self, &in, fn, "self", 0)) || (st = view_of(index, &ix, fn, "index", 0)))
        return code(st);
    return code(simk_index_select(fn, "index_select", &in, dim, &ix, &o));
}

X1_API x1_status_t x1_index_add(const x1_tensor_t *self, int64_t dim, const x1_tensor_t *index,
                                const x1_tensor_t *source, double alpha, x1_tensor_t *out) {
    const char *fn = "x1_index_add";
    sim_view in, ix, sv, o;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(out, &o, fn, "out", 0)) ||
        (st = view_of(self, &in, fn, "self", 0)) || (st = view_of(index, &ix, fn, "index", 0)) ||
        (st = view_of(source, &sv, fn, "source", 0)))
        return code(st);
    return code(simk_index_add(fn, "index_add", &in, dim, &ix, &sv, alpha, &o));
}

/* n views of a descriptor list (NULL list: *out NULL); *out to free */
static sim_status list_views(const char *fn, const char *name, const x1_tensor_t *const *list, int32_t n,
                             sim_view **out) {
    *out = NULL;
    if (!list) return SIM_OK;
    sim_view *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
    if (!v) abort();
    for (int32_t i = 0; i < n; i++) {
        char what[48];
        snprintf(what, sizeof what, "%s[%d]", name, (int)i);
        sim_status st = view_of(list[i], &v[i], fn, what, 0);
        if (st) {
            free(v);
            return st;
        }
    }
    *out = v;
    return SIM_OK;
}

/* the views of a descriptor list of 1..X1_MAX_DIMS entries (*views to free) */
static sim_status view_list(const char *fn, const char *name, const x1_tensor_t *const *list, int32_t n,
                            sim_view **views) {
    *views = NULL;
    if (!list || n < 1 || n > X1_MAX_DIMS)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "%s: %d descriptors (1..%d)", name, (int)n, X1_MAX_DIMS);
    return list_views(fn, name, list, n, views);
}

X1_API x1_status_t x1_index(const x1_tensor_t *self, const x1_tensor_t *const *indices, int32_t indices_len,
                            x1_tensor_t *out) {
    const char *fn = "x1_index";
    sim_view in, o, *iv;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(out, &o, fn, "out", 0)) ||
        (st = view_of(self, &in, fn, "self", 0)) || (st = view_list(fn, "indices", indices, indices_len, &iv)))
        return code(st);
    st = simk_index(fn, "index", &in, iv, indices_len, &o);
    free(iv);
    return code(st);
}

X1_API x1_status_t x1_index_put(const x1_tensor_t *self, const x1_tensor_t *const *indices, int32_t indices_len,
                                const x1_tensor_t *values, bool accumulate, x1_tensor_t *out) {
    const char *fn = "x1_index_put";
    sim_view in, v, o, *iv;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(out, &o, fn, "out", 0)) ||
        (st = view_of(self, &in, fn, "self", 0)) || (st = view_of(values, &v, fn, "values", 0)) ||
        (st = view_list(fn, "indices", indices, indices_len, &iv)))
        return code(st);
    if (v.dtype != o.dtype) {
        free(iv);
        return code(sim_fail(SIM_E_UNSUPPORTED, fn, "values are %s but the output is %s (mixed dtypes)",
                             sim_dtype_name(v.dtype), sim_dtype_name(o.dtype)));
    }
    st = simk_index_put(fn, "index_put", &in, iv, indices_len, &v, accumulate, &o);
    free(iv);
    return code(st);
}

/* ------------------------------------------------------------- shaping */

static sim_status triangle(const char *fn, const char *kernel, int upper, const x1_tensor_t *self, int64_t diagonal,
                           x1_tensor_t *out) {
    sim_view in, o;
    TRY(sim_require_init(fn));
    TRY(view_of(out, &o, fn, "out", 0));
    TRY(view_of(self, &in, fn, "self", 0));
    return simk_triangle(fn, kernel, &in, diagonal, upper, &o);
}

X1_API x1_status_t x1_tril(const x1_tensor_t *self, int64_t diagonal, x1_tensor_t *out) {
    return code(triangle("x1_tril", "tril", 0, self, diagonal, out));
}
X1_API x1_status_t x1_triu(const x1_tensor_t *self, int64_t diagonal, x1_tensor_t *out) {
    return code(triangle("x1_triu", "triu", 1, self, diagonal, out));
}

X1_API x1_status_t x1_constant_pad_nd(const x1_tensor_t *self, const int64_t *pad, int64_t pad_len, double value,
                                      x1_tensor_t *out) {
    const char *fn = "x1_constant_pad_nd";
    sim_view in, o;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(out, &o, fn, "out", 0)) || (st = view_of(self, &in, fn, "self", 0)))
        return code(st);
    return code(simk_constant_pad(fn, "constant_pad_nd", &in, pad, pad_len, value, &o));
}

X1_API x1_status_t x1_upsample_nearest2d(const x1_tensor_t *self, double scales_h, double scales_w,
                                         x1_tensor_t *out) {
    const char *fn = "x1_upsample_nearest2d";
    sim_view in, o;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(out, &o, fn, "out", 0)) ||
        (st = view_of(self, &in, fn, "self", 0)) || (st = need_float(fn, "self", &in)))
        return code(st);
    return code(simk_upsample_nearest2d(fn, "upsample_nearest2d", &in, scales_h, scales_w, &o));
}

X1_API x1_status_t x1_upsample_nearest2d_backward(const x1_tensor_t *grad_output, double scales_h, double scales_w,
                                                  x1_tensor_t *out) {
    const char *fn = "x1_upsample_nearest2d_backward";
    sim_view g, o;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(out, &o, fn, "out", 0)) ||
        (st = view_of(grad_output, &g, fn, "grad_output", 0)) || (st = need_float(fn, "grad_output", &g)))
        return code(st);
    return code(simk_upsample_nearest2d_backward(fn, "upsample_nearest2d_backward", &g, scales_h, scales_w, &o));
}

X1_API x1_status_t x1_slice_backward(const x1_tensor_t *grad_output, int64_t dim, int64_t start, int64_t end,
                                     int64_t step, x1_tensor_t *out) {
    const char *fn = "x1_slice_backward";
    sim_view g, o;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(out, &o, fn, "out", 0)) ||
        (st = view_of(grad_output, &g, fn, "grad_output", 0)))
        return code(st);
    return code(simk_slice_backward(fn, "slice_backward", &g, dim, start, end, step, &o));
}

/* ----------------------------------------------------- mixed precision */

X1_API x1_status_t x1_amp_update_scale(const x1_tensor_t *self, x1_tensor_t *growth_tracker,
                                       const x1_tensor_t *found_inf, double scale_growth_factor,
                                       double scale_backoff_factor, int64_t growth_interval, x1_tensor_t *out) {
    const char *fn = "x1_amp_update_scale";
    sim_view sc, gt, fi, o;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(out, &o, fn, "out", 0)) ||
        (st = view_of(self, &sc, fn, "self", 0)) || (st = view_of(growth_tracker, &gt, fn, "growth_tracker", 0)) ||
        (st = view_of(found_inf, &fi, fn, "found_inf", 0)))
        return code(st);
    return code(simk_amp_update_scale(fn, "amp_update_scale", &sc, &gt, &fi, scale_growth_factor,
                                      scale_backoff_factor, growth_interval, &o));
}

X1_API x1_status_t x1_amp_unscale(x1_tensor_t *const *grads, int32_t grads_len, x1_tensor_t *found_inf,
                                  const x1_tensor_t *inv_scale) {
    const char *fn = "x1_amp_unscale";
    sim_view fi, inv, *gv = NULL;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(found_inf, &fi, fn, "found_inf", 0)) ||
        (st = view_of(inv_scale, &inv, fn, "inv_scale", 0)))
        return code(st);
    if (!grads || grads_len < 0) return code(sim_fail(SIM_E_INVALID_VALUE, fn, "bad grads list"));
    if (grads_len > 0) {
        gv = malloc((size_t)grads_len * sizeof *gv);
        if (!gv) abort();
    }
    for (int32_t i = 0; i < grads_len && !st; i++) {
        char what[32];
        snprintf(what, sizeof what, "grads[%d]", (int)i);
        st = view_of(grads[i], &gv[i], fn, what, 0);
    }
    if (!st) st = simk_amp_unscale(fn, "amp_unscale", gv, grads_len, &fi, &inv);
    free(gv);
    return code(st);
}

/* ---------------------------------------------------- fused optimizers */

X1_API x1_status_t x1_fused_adam(x1_tensor_t *const *params, x1_tensor_t *const *grads, x1_tensor_t *const *exp_avgs,
                                 x1_tensor_t *const *exp_avg_sqs, x1_tensor_t *const *max_exp_avg_sqs,
                                 const x1_tensor_t *const *state_steps, int32_t params_len, double lr, double beta1,
                                 double beta2, double weight_decay, double eps, bool amsgrad, bool maximize,
                                 bool decoupled_weight_decay, const x1_tensor_t *grad_scale,
                                 const x1_tensor_t *found_inf) {
    const char *fn = "x1_fused_adam";
    sim_view *p = NULL, *g = NULL, *m = NULL, *s = NULL, *mx = NULL, *st = NULL, gsv, fiv;
    sim_status rc;
    if ((rc = sim_require_init(fn))) return code(rc);
    if (params_len < 0 || !params || !grads || !exp_avgs || !exp_avg_sqs || !state_steps ||
        (amsgrad && !max_exp_avg_sqs))
        return code(sim_fail(SIM_E_INVALID_VALUE, fn, "every list is required (max_exp_avg_sqs with amsgrad)"));
    if (!(rc = view_of(grad_scale, &gsv, fn, "grad_scale", 1)) && !(rc = view_of(found_inf, &fiv, fn, "found_inf", 1)) &&
        !(rc = list_views(fn, "params", (const x1_tensor_t *const *)params, params_len, &p)) &&
        !(rc = list_views(fn, "grads", (const x1_tensor_t *const *)grads, params_len, &g)) &&
        !(rc = list_views(fn, "exp_avgs", (const x1_tensor_t *const *)exp_avgs, params_len, &m)) &&
        !(rc = list_views(fn, "exp_avg_sqs", (const x1_tensor_t *const *)exp_avg_sqs, params_len, &s)) &&
        !(rc = list_views(fn, "max_exp_avg_sqs", amsgrad ? (const x1_tensor_t *const *)max_exp_avg_sqs : NULL,
                          params_len, &mx)) &&
        !(rc = list_views(fn, "state_steps", state_steps, params_len, &st)))
        rc = simk_fused_adam(fn, decoupled_weight_decay ? "fused_adamw" : "fused_adam", p, g, m, s, mx, st,
                             params_len, lr, beta1, beta2, weight_decay, eps, amsgrad, maximize,
                             decoupled_weight_decay, &gsv, &fiv);
    free(p), free(g), free(m), free(s), free(mx), free(st);
    return code(rc);
}

X1_API x1_status_t x1_fused_sgd(x1_tensor_t *const *params, x1_tensor_t *const *grads,
                                x1_tensor_t *const *momentum_buffers, int32_t params_len, double weight_decay,
                                double momentum, double lr, double dampening, bool nesterov, bool maximize,
                                bool is_first_step, const x1_tensor_t *grad_scale, const x1_tensor_t *found_inf) {
    const char *fn = "x1_fused_sgd";
    sim_view *p = NULL, *g = NULL, *b = NULL, gsv, fiv;
    sim_status rc;
    if ((rc = sim_require_init(fn))) return code(rc);
    if (params_len < 0 || !params || !grads)
        return code(sim_fail(SIM_E_INVALID_VALUE, fn, "params and grads are required"));
    if (!(rc = view_of(grad_scale, &gsv, fn, "grad_scale", 1)) && !(rc = view_of(found_inf, &fiv, fn, "found_inf", 1)) &&
        !(rc = list_views(fn, "params", (const x1_tensor_t *const *)params, params_len, &p)) &&
        !(rc = list_views(fn, "grads", (const x1_tensor_t *const *)grads, params_len, &g)) &&
        !(rc = list_views(fn, "momentum_buffers", (const x1_tensor_t *const *)momentum_buffers, params_len, &b)))
        rc = simk_fused_sgd(fn, "fused_sgd", p, g, b, params_len, weight_decay, momentum, lr, dampening, nesterov,
                            maximize, is_first_step, &gsv, &fiv);
    free(p), free(g), free(b);
    return code(rc);
}

/* -------------------------------------------------------- random numbers */

X1_API x1_status_t x1_rng_words(int64_t numel, int32_t words_per_element, uint64_t *words) {
    if (!words || numel < 0 || words_per_element < 1 || words_per_element > 2)
        return code(sim_fail(SIM_E_INVALID_VALUE, "x1_rng_words", "bad arguments (numel >= 0, 1 or 2 words)"));
    *words = sim_rng_words(numel, words_per_element);
    return X1_SUCCESS;
}

#define X1_RNG_PROLOGUE(name)               \
    const char *fn = "x1_" #name;           \
    sim_view o;                             \
    sim_status st;                          \
    if ((st = sim_require_init(fn)) || (st = view_of(self, &o, fn, "self", 0))) return code(st)

X1_API x1_status_t x1_uniform(x1_tensor_t *self, double from, double to, uint64_t seed, uint64_t offset) {
    X1_RNG_PROLOGUE(uniform);
    return code(sim_rng_uniform(fn, "uniform", &o, from, to, seed, offset));
}
X1_API x1_status_t x1_normal(x1_tensor_t *self, double mean, double std, uint64_t seed, uint64_t offset) {
    X1_RNG_PROLOGUE(normal);
    return code(sim_rng_normal(fn, "normal", &o, mean, std, seed, offset));
}
X1_API x1_status_t x1_bernoulli(x1_tensor_t *self, double p, uint64_t seed, uint64_t offset) {
    X1_RNG_PROLOGUE(bernoulli);
    return code(sim_rng_bernoulli(fn, "bernoulli", &o, p, seed, offset));
}
X1_API x1_status_t x1_random(x1_tensor_t *self, int64_t from, int64_t to, uint64_t seed, uint64_t offset) {
    X1_RNG_PROLOGUE(random);
    return code(sim_rng_random(fn, "random", &o, from, to, seed, offset));
}

X1_API x1_status_t x1_native_dropout(const x1_tensor_t *input, double p, bool train, uint64_t seed,
                                     uint64_t offset, x1_tensor_t *output, x1_tensor_t *mask) {
    const char *fn = "x1_native_dropout";
    sim_view in, o, m;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(output, &o, fn, "output", 0)) ||
        (st = view_of(mask, &m, fn, "mask", 0)) || (st = view_of(input, &in, fn, "input", 0)) ||
        (st = need_float(fn, "input", &in)))
        return code(st);
    return code(sim_rng_dropout(fn, "native_dropout", &in, p, train, seed, offset, &o, &m));
}

/* --------------------------------------------------------- softmax family */

static sim_status softmax_like(const char *fn, const char *kernel, unsigned flags, const x1_tensor_t *self,
                               int64_t dim, x1_tensor_t *out) {
    sim_view in, o;
    TRY(sim_require_init(fn));
    TRY(view_of(out, &o, fn, "out", 0));
    TRY(view_of(self, &in, fn, "self", 0));
    TRY(need_float(fn, "self", &in));
    return simk_softmax(fn, kernel, &in, dim, flags, &o);
}

X1_API x1_status_t custom_softmax_x1(const x1_tensor_t *self, int64_t dim, x1_tensor_t *out) {
    return code(softmax_like("custom_softmax_x1", "custom_softmax", SIMK_SOFTMAX_GENERIC, self, dim, out));
}
X1_API x1_status_t custom_safe_softmax_x1(const x1_tensor_t *self, int64_t dim, x1_tensor_t *out) {
    return code(softmax_like("custom_safe_softmax_x1", "custom_safe_softmax",
                             SIMK_SOFTMAX_GENERIC | SIMK_SOFTMAX_SAFE, self, dim, out));
}
X1_API x1_status_t x1_log_softmax(const x1_tensor_t *self, int64_t dim, x1_tensor_t *out) {
    return code(softmax_like("x1_log_softmax", "log_softmax", SIMK_SOFTMAX_LOG, self, dim, out));
}

static sim_status softmax_grad(const char *fn, const char *kernel, int log, const x1_tensor_t *grad_output,
                               const x1_tensor_t *output, int64_t dim, x1_tensor_t *out) {
    sim_view g, y, o;
    TRY(sim_require_init(fn));
    TRY(view_of(out, &o, fn, "out", 0));
    TRY(view_of(grad_output, &g, fn, "grad_output", 0));
    TRY(view_of(output, &y, fn, "output", 0));
    TRY(need_float(fn, "output", &y));
    return simk_softmax_backward(fn, kernel, &g, &y, dim, log, &o);
}

X1_API x1_status_t x1_softmax_backward(const x1_tensor_t *grad_output, const x1_tensor_t *output,
                                       int64_t dim, x1_tensor_t *out) {
    return code(softmax_grad("x1_softmax_backward", "softmax_backward", 0, grad_output, output, dim, out));
}
X1_API x1_status_t x1_log_softmax_backward(const x1_tensor_t *grad_output, const x1_tensor_t *output,
                                           int64_t dim, x1_tensor_t *out) {
    return code(softmax_grad("x1_log_softmax_backward", "log_softmax_backward", 1, grad_output, output, dim,
                             out));
}

/* ------------------------------------------------- profiling: device time */

X1_API x1_status_t x1_get_last_kernel_ns(uint64_t *ns) {
    if (!ns) return code(sim_fail(SIM_E_INVALID_VALUE, "x1_get_last_kernel_ns", "ns is NULL"));
    *ns = sim_last_op_ns();
    return X1_SUCCESS;
}
X1_API x1_status_t x1_get_kernel_ns_total(uint64_t *ns) {
    if (!ns) return code(sim_fail(SIM_E_INVALID_VALUE, "x1_get_kernel_ns_total", "ns is NULL"));
    *ns = sim_device_ns_total();
    return X1_SUCCESS;
}
X1_API x1_status_t x1_debug_set_corrupt(const char *kernel) { return code(sim_set_corrupt(kernel)); }
X1_API x1_status_t x1_debug_get_corruptions(uint64_t *count) {
    if (!count) return code(sim_fail(SIM_E_INVALID_VALUE, "x1_debug_get_corruptions", "count is NULL"));
    *count = sim_corruptions();
    return X1_SUCCESS;
}
