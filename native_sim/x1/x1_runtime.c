/*
 * x1_runtime.c: the simulated X1-Edge NPU runtime.
 *
 * Translates the public x1 ABI (x1_tensor_t, x1_status_t) onto the simulator
 * core and enforces what X1 silicon accepts.  Build with -DX1_SIM_REVISION=2
 * for the X1 v2 runtime (float32 convolution, larger memory).
 */
#include "x1_runtime.h"

#include <stdio.h>
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
    char names[96][SIM_KERNEL_NAME_LEN];
    uint64_t counts[96];
    int n = sim_kernel_counters(names, counts, 96);
    for (int i = 0; i < n && i < capacity && i < 96; i++) {
        memcpy(counters[i].name, names[i], X1_KERNEL_NAME_LEN);
        counters[i].launches = counts[i];
    }
    *count = n;
    return X1_SUCCESS;
}

X1_API x1_status_t x1_debug_set_faults(const char *spec) { return code(sim_set_faults(spec)); }

/* --------------------------------------------------------- elementwise */

static sim_status binary(const char *fn, const char *kernel, simk_binop op, const x1_tensor_t *self,
                         const x1_tensor_t *other, double alpha, x1_tensor_t *out) {
    sim_view a, b, o;
    TRY(sim_require_init(fn));
    TRY(view_of(out, &o, fn, "out", 0));
    TRY(view_of(self, &a, fn, "self", 0));
    TRY(view_of(other, &b, fn, "other", 0));
    TRY(need_float(fn, "out", &o));
    TRY(simk_check_same(fn, "self", &a, &o));
    TRY(simk_check_same(fn, "other", &b, &o));
    TRY(sim_launch(kernel, fn));
    simk_binary(op, &a, &b, alpha, &o);
    return SIM_OK;
}

X1_API x1_status_t x1_add(const x1_tensor_t *self, const x1_tensor_t *other, double alpha,
                          x1_tensor_t *out) {
    return code(binary("x1_add", "add", SIMK_ADD, self, other, alpha, out));
}
X1_API x1_status_t x1_sub(const x1_tensor_t *self, const x1_tensor_t *other, double alpha,
                          x1_tensor_t *out) {
    return code(binary("x1_sub", "sub", SIMK_SUB, self, other, alpha, out));
}
X1_API x1_status_t x1_mul(const x1_tensor_t *self, const x1_tensor_t *other, x1_tensor_t *out) {
    return code(binary("x1_mul", "mul", SIMK_MUL, self, other, 1.0, out));
}
X1_API x1_status_t x1_div(const x1_tensor_t *self, const x1_tensor_t *other, x1_tensor_t *out) {
    return code(binary("x1_div", "div", SIMK_DIV, self, other, 1.0, out));
}

static sim_status unary(const char *fn, const char *kernel, simk_unop op, const x1_tensor_t *self,
                        x1_tensor_t *out) {
    sim_view a, o;
    TRY(sim_require_init(fn));
    TRY(view_of(out, &o, fn, "out", 0));
    TRY(view_of(self, &a, fn, "self", 0));
    TRY(need_float(fn, "out", &o));
    TRY(simk_check_same(fn, "self", &a, &o));
    TRY(sim_launch(kernel, fn));
    simk_unary(op, &a, &o);
    return SIM_OK;
}

#define X1_UNARY(name, op)                                                      \
    X1_API x1_status_t x1_##name(const x1_tensor_t *self, x1_tensor_t *out) {   \
        return code(unary("x1_" #name, #name, op, self, out));                   \
    }
X1_UNARY(relu, SIMK_RELU)
X1_UNARY(sigmoid, SIMK_SIGMOID)
X1_UNARY(tanh, SIMK_TANH)
X1_UNARY(exp, SIMK_EXP)
X1_UNARY(neg, SIMK_NEG)
X1_UNARY(sqrt, SIMK_SQRT)
X1_UNARY(rsqrt, SIMK_RSQRT)

X1_API x1_status_t x1_gelu(const x1_tensor_t *self, const char *approximate, x1_tensor_t *out) {
    simk_unop op;
    if (!approximate || strcmp(approximate, "none") == 0) op = SIMK_GELU;
    else if (strcmp(approximate, "tanh") == 0) op = SIMK_GELU_TANH;
    else
        return code(sim_fail(SIM_E_INVALID_VALUE, "x1_gelu",
                             "approximate='%s' (expected 'none' or 'tanh')", approximate));
    return code(unary("x1_gelu", "gelu", op, self, out));
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

X1_API x1_status_t x1_conv2d(const x1_tensor_t *input, const x1_tensor_t *weight,
                             const x1_tensor_t *bias, const int64_t *stride,
                             const int64_t *padding, const int64_t *dilation, int64_t groups,
                             x1_tensor_t *out) {
    const char *fn = "x1_conv2d";
    static const int64_t strides_ok[] = {1, 2, 4}, pads_ok[] = {0, 1, 2}, groups_ok[] = {1, 2, 4};
    sim_view in, w, b, o;
    sim_status st;
    if ((st = sim_require_init(fn))) return code(st);
    if (!stride || !padding || !dilation)
        return code(sim_fail(SIM_E_INVALID_VALUE, fn, "stride, padding and dilation are required"));
    for (int i = 0; i < 2; i++) {
        if (!in_set(stride[i], strides_ok, 3))
            return code(sim_fail(SIM_E_UNSUPPORTED, fn, "stride=%lld not in {1, 2, 4}",
                                 (long long)stride[i]));
        if (!in_set(padding[i], pads_ok, 3))
            return code(sim_fail(SIM_E_UNSUPPORTED, fn, "padding=%lld not in {0, 1, 2}",
                                 (long long)padding[i]));
        if (dilation[i] != 1)
            return code(sim_fail(SIM_E_UNSUPPORTED, fn, "dilation=%lld (only 1 is supported)",
                                 (long long)dilation[i]));
    }
    if (!in_set(groups, groups_ok, 3))
        return code(sim_fail(SIM_E_UNSUPPORTED, fn, "groups=%lld not in {1, 2, 4}", (long long)groups));
    if ((st = view_of(out, &o, fn, "out", 0)) || (st = view_of(input, &in, fn, "input", 0)) ||
        (st = view_of(weight, &w, fn, "weight", 0)) || (st = view_of(bias, &b, fn, "bias", 1)))
        return code(st);
#if X1_SIM_REVISION >= 2
    if ((st = need_float(fn, "input", &in))) return code(st);
#else
    if (in.dtype != SIM_F16)
        return code(sim_fail(SIM_E_UNSUPPORTED, fn,
                             "input dtype %s: X1 revision 1 convolves float16 only",
                             sim_dtype_name(in.dtype)));
#endif
    if ((st = need_nhwc(fn, "input", &in)) || (st = need_nhwc(fn, "weight (OHWI)", &w)))
        return code(st);
    return code(simk_conv2d_nhwc(fn, "conv2d", &in, &w, &b, stride, padding, dilation, groups, &o));
}

/* Shared checks for the pools: NHWC input, positive window, PyTorch's limits. */
static sim_status pool_setup(const char *fn, const x1_tensor_t *self, x1_tensor_t *out,
                             sim_view *in, sim_view *o, const int64_t *k, const int64_t *stride,
                             int64_t stride_len, const int64_t *pad, int64_t s[2]) {
    TRY(sim_require_init(fn));
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
    TRY(view_of(out, o, fn, "out", 0));
    TRY(view_of(self, in, fn, "self", 0));
    TRY(need_float(fn, "self", in));
    TRY(need_nhwc(fn, "self", in));
    return SIM_OK;
}

static sim_status check_pool_out(const char *fn, const sim_view *in, const sim_view *o,
                                 int64_t oh, int64_t ow) {
    if (oh <= 0 || ow <= 0) return sim_fail(SIM_E_INVALID_VALUE, fn, "output would be empty");
    if (o->ndim != 4 || o->shape[0] != in->shape[0] || o->shape[1] != oh || o->shape[2] != ow ||
        o->shape[3] != in->shape[3])
        return sim_fail(SIM_E_INVALID_VALUE, fn, "out must be NHWC [%lld, %lld, %lld, %lld]",
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
    if ((st = check_pool_out(fn, &in, &o, oh, ow))) return code(st);
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
    if ((st = check_pool_out(fn, &in, &o, oh, ow))) return code(st);
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
    if ((st = check_pool_out(fn, &in, &o, output_size[0], output_size[1]))) return code(st);
    return code(simk_adaptive_avg_pool2d_nhwc(fn, "adaptive_avg_pool2d", &in, &o));
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
    if (!normalized_shape || normalized_shape_len < 1 || normalized_shape_len > in.ndim)
        return code(sim_fail(SIM_E_INVALID_VALUE, fn, "normalized_shape has %lld dims for a %d-D input",
                             (long long)normalized_shape_len, in.ndim));
    for (int64_t i = 0; i < normalized_shape_len; i++)
        if (normalized_shape[i] != in.shape[in.ndim - normalized_shape_len + i])
            return code(sim_fail(SIM_E_INVALID_VALUE, fn,
                                 "normalized_shape does not match the input's trailing dims"));
    return code(simk_layer_norm(fn, "layer_norm", &in, normalized_shape_len, &w, &b, eps, &o, &m, &r));
}

static sim_status reduce(const char *fn, const char *kernel, int mean, const x1_tensor_t *self,
                         const int64_t *dim, int64_t dim_len, bool keepdim, x1_tensor_t *out) {
    sim_view in, o;
    TRY(sim_require_init(fn));
    TRY(view_of(out, &o, fn, "out", 0));
    TRY(view_of(self, &in, fn, "self", 0));
    TRY(need_float(fn, "self", &in));
    TRY(need_float(fn, "out", &o));
    if (dim_len < 0 || (dim_len > 0 && !dim))
        return sim_fail(SIM_E_INVALID_VALUE, fn, "bad dim list");
    uint32_t mask = 0;
    for (int64_t i = 0; i < dim_len; i++) {
        int64_t d = dim[i] < 0 ? dim[i] + in.ndim : dim[i];
        if (d < 0 || d >= (in.ndim ? in.ndim : 1))
            return sim_fail(SIM_E_INVALID_VALUE, fn, "dim %lld out of range for %d-D input",
                            (long long)dim[i], in.ndim);
        if (mask & (1u << d))
            return sim_fail(SIM_E_INVALID_VALUE, fn, "dim %lld appears twice", (long long)dim[i]);
        mask |= 1u << d;
    }
    if (dim_len == 0) mask = (1u << in.ndim) - 1u;
    int expect_nd = 0;
    for (int d = 0; d < in.ndim; d++)
        if (keepdim || !(mask & (1u << d))) {
            int64_t want = (mask & (1u << d)) ? 1 : in.shape[d];
            if (expect_nd >= o.ndim || o.shape[expect_nd] != want)
                return sim_fail(SIM_E_INVALID_VALUE, fn, "out shape does not match the reduction");
            expect_nd++;
        }
    if (expect_nd != o.ndim)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "out has %d dims, expected %d", o.ndim, expect_nd);
    return simk_reduce(fn, kernel, &in, mask, mean, &o);
}

X1_API x1_status_t x1_sum(const x1_tensor_t *self, const int64_t *dim, int64_t dim_len,
                          bool keepdim, x1_tensor_t *out) {
    return code(reduce("x1_sum", "sum", 0, self, dim, dim_len, keepdim, out));
}
X1_API x1_status_t x1_mean(const x1_tensor_t *self, const int64_t *dim, int64_t dim_len,
                           bool keepdim, x1_tensor_t *out) {
    return code(reduce("x1_mean", "mean", 1, self, dim, dim_len, keepdim, out));
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

X1_API x1_status_t custom_softmax_x1(const x1_tensor_t *self, int64_t dim, x1_tensor_t *out) {
    const char *fn = "custom_softmax_x1";
    sim_view in, o;
    sim_status st;
    if ((st = sim_require_init(fn)) || (st = view_of(out, &o, fn, "out", 0)) ||
        (st = view_of(self, &in, fn, "self", 0)) || (st = need_float(fn, "self", &in)))
        return code(st);
    return code(simk_softmax(fn, "custom_softmax", &in, dim, 0, 1, &o));
}
