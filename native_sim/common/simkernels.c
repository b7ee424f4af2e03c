/*
 * simkernels.c: the arithmetic of the simulated chips.
 *
 * Inputs are read through their strides into dense float buffers, computed in
 * float (half and bfloat16 are "compute in float, store narrow", as the chips
 * claim), and written back through the output's strides with round-to-nearest-
 * even.  That keeps every kernel correct for any layout the descriptor can
 * express; layout *requirements* (NHWC, contiguity) are enforced by callers.
 */
#include "simkernels.h"
#include "simblas.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ iteration */

typedef void (*row_fn)(void *ctx, char *p, int64_t n, int64_t stride, int64_t lin);

/* Calls fn once per innermost row of v, in row-major order. */
static void for_rows(const sim_view *v, row_fn fn, void *ctx) {
    int64_t n = sim_numel(v);
    if (n == 0) return;
    if (v->ndim == 0) {
        fn(ctx, v->base, 1, 0, 0);
        return;
    }
    int nd = v->ndim;
    int64_t inner = v->shape[nd - 1], istride = v->strides[nd - 1];
    int64_t idx[SIM_MAX_DIMS] = {0};
    size_t es = sim_dtype_size(v->dtype);
    int64_t rows = n / inner;
    for (int64_t r = 0; r < rows; r++) {
        int64_t off = 0;
        for (int d = 0; d < nd - 1; d++) off += idx[d] * v->strides[d];
        fn(ctx, v->base + off * (int64_t)es, inner, istride, r * inner);
        for (int d = nd - 2; d >= 0; d--) {
            if (++idx[d] < v->shape[d]) break;
            idx[d] = 0;
        }
    }
}

static void gather_row(void *ctx, char *p, int64_t n, int64_t s, int64_t lin);
static void scatter_row(void *ctx, char *p, int64_t n, int64_t s, int64_t lin);

typedef struct {
    float *buf;
    sim_dtype dt;
} gs_ctx;

static void gather_row(void *vctx, char *p, int64_t n, int64_t s, int64_t lin) {
    gs_ctx *c = vctx;
    float *dst = c->buf + lin;
    switch (c->dt) {
        case SIM_F32: {
            const float *q = (const float *)p;
            if (s == 1) memcpy(dst, q, (size_t)n * 4);
            else for (int64_t i = 0; i < n; i++) dst[i] = q[i * s];
            break;
        }
        case SIM_F16: {
            const uint16_t *q = (const uint16_t *)p;
            for (int64_t i = 0; i < n; i++) dst[i] = sim_h2f(q[i * s]);
            break;
        }
        case SIM_BF16: {
            const uint16_t *q = (const uint16_t *)p;
            for (int64_t i = 0; i < n; i++) dst[i] = sim_bf2f(q[i * s]);
            break;
        }
        default: {
            size_t es = sim_dtype_size(c->dt);
            for (int64_t i = 0; i < n; i++) dst[i] = (float)sim_load(p + i * s * (int64_t)es, c->dt);
        }
    }
}

static void scatter_row(void *vctx, char *p, int64_t n, int64_t s, int64_t lin) {
    gs_ctx *c = vctx;
    const float *src = c->buf + lin;
    switch (c->dt) {
        case SIM_F32: {
            float *q = (float *)p;
            if (s == 1) memcpy(q, src, (size_t)n * 4);
            else for (int64_t i = 0; i < n; i++) q[i * s] = src[i];
            break;
        }
        case SIM_F16: {
            uint16_t *q = (uint16_t *)p;
            for (int64_t i = 0; i < n; i++) q[i * s] = sim_f2h(src[i]);
            break;
        }
        case SIM_BF16: {
            uint16_t *q = (uint16_t *)p;
            for (int64_t i = 0; i < n; i++) q[i * s] = sim_f2bf(src[i]);
            break;
        }
        default: {
            size_t es = sim_dtype_size(c->dt);
            for (int64_t i = 0; i < n; i++) sim_store(p + i * s * (int64_t)es, c->dt, src[i]);
        }
    }
}

float *sim_gather(const sim_view *v) {
    int64_t n = sim_numel(v);
    float *buf = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!buf) return NULL;
    gs_ctx c = {buf, v->dtype};
    for_rows(v, gather_row, &c);
    return buf;
}

void sim_scatter(const float *src, const sim_view *v) {
    gs_ctx c = {(float *)src, v->dtype};
    for_rows(v, scatter_row, &c);
    sim_corrupt_output(v); /* debug mode only (X1SIM_CORRUPT / TH1SIM_CORRUPT) */
}

/* Allocation failures inside a kernel are device OOM in spirit; the host has
 * plenty here, so they are treated as fatal bugs of the simulator itself. */
static float *gather_or_die(const sim_view *v) {
    float *b = sim_gather(v);
    if (!b) abort();
    return b;
}

static float *alloc_f(int64_t n) {
    float *b = calloc((size_t)(n > 0 ? n : 1), sizeof(float));
    if (!b) abort();
    return b;
}

/* --------------------------------------------------------------- checks */

sim_status simk_check_same(const char *fn, const char *what, const sim_view *a,
                           const sim_view *ref) {
    if (!sim_same_shape(a, ref)) {
        char s1[160], s2[160];
        sim_shape_str(a, s1, sizeof s1);
        sim_shape_str(ref, s2, sizeof s2);
        return sim_fail(SIM_E_INVALID_VALUE, fn,
                        "%s has shape %s but the output has shape %s (broadcast inputs must "
                        "be expanded with stride 0)", what, s1, s2);
    }
    if (a->dtype != ref->dtype)
        return sim_fail(SIM_E_UNSUPPORTED, fn, "%s is %s but the output is %s (mixed dtypes)", what,
                        sim_dtype_name(a->dtype), sim_dtype_name(ref->dtype));
    return SIM_OK;
}

sim_status simk_check_dtype_in(const char *fn, const char *what, const sim_view *v,
                               const sim_dtype *allowed, int n) {
    for (int i = 0; i < n; i++)
        if (v->dtype == allowed[i]) return SIM_OK;
    return sim_fail(SIM_E_UNSUPPORTED, fn, "%s: dtype %s is not supported by this kernel", what,
                    sim_dtype_name(v->dtype));
}

/* ----------------------------------------------------------- elementwise */

int simk_is_float(sim_dtype dt) {
    return dt == SIM_F32 || dt == SIM_F16 || dt == SIM_BF16 || dt == SIM_F64;
}

int simk_is_integer(sim_dtype dt) {
    return dt == SIM_I8 || dt == SIM_U8 || dt == SIM_I32 || dt == SIM_I64;
}

/* Integer element access: exact for every integer dtype (float never goes here). */
static int64_t load_i(const char *p, sim_dtype dt) {
    switch (dt) {
        case SIM_I64: { int64_t v; memcpy(&v, p, 8); return v; }
        case SIM_I32: { int32_t v; memcpy(&v, p, 4); return v; }
        case SIM_I8: return *(const int8_t *)p;
        case SIM_U8: return *(const uint8_t *)p;
        case SIM_BOOL: return *(const uint8_t *)p != 0;
        default: return 0;
    }
}

static void store_i(char *p, sim_dtype dt, int64_t v) {
    switch (dt) {
        case SIM_I64: memcpy(p, &v, 8); break;
        case SIM_I32: { int32_t w = (int32_t)(uint32_t)(uint64_t)v; memcpy(p, &w, 4); break; }
        case SIM_I8: *(int8_t *)p = (int8_t)(uint8_t)(uint64_t)v; break;
        case SIM_U8: *(uint8_t *)p = (uint8_t)(uint64_t)v; break;
        case SIM_BOOL: *(uint8_t *)p = v != 0; break;
        default: break;
    }
}

typedef struct {
    int64_t *buf;
    sim_dtype dt;
} gi_ctx;

static void gather_row_i(void *vctx, char *p, int64_t n, int64_t s, int64_t lin) {
    gi_ctx *c = vctx;
    int64_t es = (int64_t)sim_dtype_size(c->dt);
    for (int64_t i = 0; i < n; i++) c->buf[lin + i] = load_i(p + i * s * es, c->dt);
}

static void scatter_row_i(void *vctx, char *p, int64_t n, int64_t s, int64_t lin) {
    gi_ctx *c = vctx;
    int64_t es = (int64_t)sim_dtype_size(c->dt);
    for (int64_t i = 0; i < n; i++) store_i(p + i * s * es, c->dt, c->buf[lin + i]);
}

static int64_t *gather_i_or_die(const sim_view *v) {
    int64_t n = sim_numel(v);
    int64_t *b = malloc((size_t)(n > 0 ? n : 1) * sizeof(int64_t));
    if (!b) abort();
    gi_ctx c = {b, v->dtype};
    for_rows(v, gather_row_i, &c);
    return b;
}

static void scatter_i(const int64_t *src, const sim_view *v) {
    gi_ctx c = {(int64_t *)src, v->dtype};
    for_rows(v, scatter_row_i, &c);
}

/* Shape agreement only (dtype rules differ per op). */
static sim_status check_shape(const char *fn, const char *what, const sim_view *a, const sim_view *ref) {
    if (sim_same_shape(a, ref)) return SIM_OK;
    char s1[160], s2[160];
    sim_shape_str(a, s1, sizeof s1);
    sim_shape_str(ref, s2, sizeof s2);
    return sim_fail(SIM_E_INVALID_VALUE, fn,
                    "%s has shape %s but the output has shape %s (broadcast inputs must be expanded "
                    "with stride 0)", what, s1, s2);
}

static sim_status need_float_dt(const char *fn, const char *what, const sim_view *v) {
    if (simk_is_float(v->dtype)) return SIM_OK;
    return sim_fail(SIM_E_UNSUPPORTED, fn, "%s: dtype %s is not supported by this kernel (floating "
                    "point only)", what, sim_dtype_name(v->dtype));
}

/* a host scalar as an integer operand: saturating (an out-of-range double-to-
 * integer conversion is undefined in C), NaN as 0 */
static int64_t sat_i64(double v) {
    if (v != v) return 0;
    if (v >= 9223372036854775807.0) return INT64_MAX;
    if (v <= -9223372036854775808.0) return INT64_MIN;
    return (int64_t)v;
}

/* wrapping int64 arithmetic (signed overflow is undefined in C) */
static int64_t wadd(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }
static int64_t wmul(int64_t a, int64_t b) { return (int64_t)((uint64_t)a * (uint64_t)b); }

static float fmax_nan(float x, float y) { return (x != x || y != y) ? x + y : (x > y ? x : y); }
static float fmin_nan(float x, float y) { return (x != x || y != y) ? x + y : (x < y ? x : y); }

static int compare_f(simk_binop op, float x, float y) {
    switch (op) {
        case SIMK_EQ: return x == y;
        case SIMK_NE: return x != y;
        case SIMK_LT: return x < y;
        case SIMK_LE: return x <= y;
        case SIMK_GT: return x > y;
        default: return x >= y;
    }
}

static int compare_i(simk_binop op, int64_t x, int64_t y) {
    switch (op) {
        case SIMK_EQ: return x == y;
        case SIMK_NE: return x != y;
        case SIMK_LT: return x < y;
        case SIMK_LE: return x <= y;
        case SIMK_GT: return x > y;
        default: return x >= y;
    }
}

sim_status simk_binary(const char *fn, const char *kernel, simk_binop op, const sim_view *a,
                       const sim_view *b, double alpha, const sim_view *out) {
    int compare = op >= SIMK_EQ && op <= SIMK_GE, bitwise = op >= SIMK_BITAND;
    sim_status st;
    if ((st = check_shape(fn, "self", a, out)) || (st = check_shape(fn, "other", b, out))) return st;
    if (a->dtype != b->dtype)
        return sim_fail(SIM_E_UNSUPPORTED, fn, "operands are %s and %s (mixed dtypes)",
                        sim_dtype_name(a->dtype), sim_dtype_name(b->dtype));
    if (compare) {
        if (out->dtype != SIM_BOOL)
            return sim_fail(SIM_E_UNSUPPORTED, fn, "a comparison writes bool, the output is %s",
                            sim_dtype_name(out->dtype));
    } else if (a->dtype != out->dtype) {
        return sim_fail(SIM_E_UNSUPPORTED, fn, "operands are %s but the output is %s (mixed dtypes)",
                        sim_dtype_name(a->dtype), sim_dtype_name(out->dtype));
    }
    int fl = simk_is_float(a->dtype);
    if (bitwise && fl)
        return sim_fail(SIM_E_UNSUPPORTED, fn, "bitwise ops take bool or integer tensors, not %s",
                        sim_dtype_name(a->dtype));
    if (!bitwise && !compare && !fl &&
        (a->dtype == SIM_BOOL || op == SIMK_DIV || op == SIMK_POW))
        return sim_fail(SIM_E_UNSUPPORTED, fn, "dtype %s is not supported by this kernel",
                        sim_dtype_name(a->dtype));
    if ((st = sim_launch(kernel, fn))) return st;
    int64_t n = sim_numel(out);
    if (fl) {
        float *x = gather_or_die(a), *y = gather_or_die(b);
        float al = (float)alpha;
        if (compare) {
            int64_t *r = malloc((size_t)(n > 0 ? n : 1) * sizeof(int64_t));
            if (!r) abort();
            for (int64_t i = 0; i < n; i++) r[i] = compare_f(op, x[i], y[i]);
            scatter_i(r, out);
            free(r);
        } else {
            switch (op) {
                case SIMK_ADD:
                    if (al == 1.0f) for (int64_t i = 0; i < n; i++) x[i] = x[i] + y[i];
                    else for (int64_t i = 0; i < n; i++) x[i] = x[i] + al * y[i];
                    break;
                case SIMK_SUB:
                    if (al == 1.0f) for (int64_t i = 0; i < n; i++) x[i] = x[i] - y[i];
                    else for (int64_t i = 0; i < n; i++) x[i] = x[i] - al * y[i];
                    break;
                case SIMK_MUL: for (int64_t i = 0; i < n; i++) x[i] = x[i] * y[i]; break;
                case SIMK_DIV: for (int64_t i = 0; i < n; i++) x[i] = x[i] / y[i]; break;
                case SIMK_POW: for (int64_t i = 0; i < n; i++) x[i] = powf(x[i], y[i]); break;
                case SIMK_MAXIMUM: for (int64_t i = 0; i < n; i++) x[i] = fmax_nan(x[i], y[i]); break;
                case SIMK_MINIMUM: for (int64_t i = 0; i < n; i++) x[i] = fmin_nan(x[i], y[i]); break;
                default: break;
            }
            sim_scatter(x, out);
        }
        free(x);
        free(y);
        return SIM_OK;
    }
    int64_t *x = gather_i_or_die(a), *y = gather_i_or_die(b);
    int64_t al = sat_i64(alpha);
    for (int64_t i = 0; i < n; i++) {
        int64_t u = x[i], v = y[i];
        switch (op) {
            case SIMK_ADD: x[i] = wadd(u, wmul(al, v)); break;
            case SIMK_SUB: x[i] = wadd(u, wmul(-al, v)); break;
            case SIMK_MUL: x[i] = wmul(u, v); break;
            case SIMK_MAXIMUM: x[i] = u > v ? u : v; break;
            case SIMK_MINIMUM: x[i] = u < v ? u : v; break;
            case SIMK_BITAND: x[i] = u & v; break;
            case SIMK_BITOR: x[i] = u | v; break;
            case SIMK_BITXOR: x[i] = u ^ v; break;
            default: x[i] = compare_i(op, u, v); break;
        }
    }
    scatter_i(x, out);
    free(x);
    free(y);
    return SIM_OK;
}

static float unary_f(simk_unop op, float v) {
    const float k0 = 0.7978845608028654f; /* sqrt(2/pi) */
    switch (op) {
        case SIMK_RELU: return v > 0.0f ? v : (v != v ? v : 0.0f);
        case SIMK_GELU: return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
        case SIMK_GELU_TANH: return 0.5f * v * (1.0f + tanhf(k0 * (v + 0.044715f * v * v * v)));
        case SIMK_SIGMOID: return 1.0f / (1.0f + expf(-v));
        case SIMK_TANH: return tanhf(v);
        case SIMK_EXP: return expf(v);
        case SIMK_NEG: return -v;
        case SIMK_SQRT: return sqrtf(v);
        case SIMK_RSQRT: return 1.0f / sqrtf(v);
        case SIMK_LOG: return logf(v);
        case SIMK_COS: return cosf(v);
        case SIMK_SIN: return sinf(v);
        case SIMK_ABS: return fabsf(v);
        case SIMK_RECIPROCAL: return 1.0f / v;
        case SIMK_SILU: return v / (1.0f + expf(-v));
        default: return v;
    }
}

sim_status simk_unary(const char *fn, const char *kernel, simk_unop op, const sim_view *a,
                      const sim_view *out) {
    sim_status st = simk_check_same(fn, "self", a, out);
    if (st) return st;
    int fl = simk_is_float(a->dtype), boolean = a->dtype == SIM_BOOL;
    int int_ok = op == SIMK_NEG || op == SIMK_ABS || op == SIMK_RELU;
    if (op == SIMK_BITNOT ? fl : (!fl && !(int_ok && !boolean)))
        return sim_fail(SIM_E_UNSUPPORTED, fn, "dtype %s is not supported by this kernel",
                        sim_dtype_name(a->dtype));
    if ((st = sim_launch(kernel, fn))) return st;
    int64_t n = sim_numel(out);
    if (fl) {
        float *x = gather_or_die(a);
        for (int64_t i = 0; i < n; i++) x[i] = unary_f(op, x[i]);
        sim_scatter(x, out);
        free(x);
        return SIM_OK;
    }
    int64_t *x = gather_i_or_die(a);
    for (int64_t i = 0; i < n; i++) {
        int64_t v = x[i];
        switch (op) {
            case SIMK_NEG: x[i] = wmul(v, -1); break;
            case SIMK_ABS: x[i] = v < 0 ? wmul(v, -1) : v; break;
            case SIMK_RELU: x[i] = v > 0 ? v : 0; break;
            default: x[i] = boolean ? !v : ~v; break; /* bitwise not; logical on bool */
        }
    }
    scatter_i(x, out);
    free(x);
    return SIM_OK;
}

sim_status simk_pow_scalar(const char *fn, const char *kernel, const sim_view *a, double exponent,
                           const sim_view *out) {
    sim_status st;
    if ((st = simk_check_same(fn, "self", a, out)) || (st = need_float_dt(fn, "self", a))) return st;
    if ((st = sim_launch(kernel, fn))) return st;
    int64_t n = sim_numel(out);
    float *x = gather_or_die(a), e = (float)exponent;
    /* PyTorch computes these exponents exactly this way (no pow call) */
    if (exponent == 2.0) for (int64_t i = 0; i < n; i++) x[i] = x[i] * x[i];
    else if (exponent == 3.0) for (int64_t i = 0; i < n; i++) x[i] = x[i] * x[i] * x[i];
    else if (exponent == 0.5) for (int64_t i = 0; i < n; i++) x[i] = sqrtf(x[i]);
    else if (exponent == -0.5) for (int64_t i = 0; i < n; i++) x[i] = 1.0f / sqrtf(x[i]);
    else if (exponent == -1.0) for (int64_t i = 0; i < n; i++) x[i] = 1.0f / x[i];
    else if (exponent == -2.0) for (int64_t i = 0; i < n; i++) x[i] = 1.0f / (x[i] * x[i]);
    else for (int64_t i = 0; i < n; i++) x[i] = powf(x[i], e);
    sim_scatter(x, out);
    free(x);
    return SIM_OK;
}

sim_status simk_div_scalar(const char *fn, const char *kernel, const sim_view *a, double divisor,
                           const sim_view *out) {
    sim_status st;
    if ((st = simk_check_same(fn, "self", a, out)) || (st = need_float_dt(fn, "self", a))) return st;
    if ((st = sim_launch(kernel, fn))) return st;
    int64_t n = sim_numel(out);
    float *x = gather_or_die(a), d = (float)divisor;
    for (int64_t i = 0; i < n; i++) x[i] = x[i] / d;
    sim_scatter(x, out);
    free(x);
    return SIM_OK;
}

sim_status simk_addc(const char *fn, const char *kernel, int div, const sim_view *self,
                     const sim_view *t1, const sim_view *t2, double value, const sim_view *out) {
    sim_status st;
    if ((st = simk_check_same(fn, "self", self, out)) || (st = simk_check_same(fn, "tensor1", t1, out)) ||
        (st = simk_check_same(fn, "tensor2", t2, out)) || (st = need_float_dt(fn, "self", self)))
        return st;
    if ((st = sim_launch(kernel, fn))) return st;
    int64_t n = sim_numel(out);
    float *s = gather_or_die(self), *x = gather_or_die(t1), *y = gather_or_die(t2), v = (float)value;
    /* PyTorch's order: value * t1 first, then by t2 */
    if (div) for (int64_t i = 0; i < n; i++) s[i] = s[i] + v * x[i] / y[i];
    else for (int64_t i = 0; i < n; i++) s[i] = s[i] + v * x[i] * y[i];
    sim_scatter(s, out);
    free(s); free(x); free(y);
    return SIM_OK;
}

sim_status simk_lerp(const char *fn, const char *kernel, const sim_view *self, const sim_view *end,
                     double weight, const sim_view *out) {
    sim_status st;
    if ((st = simk_check_same(fn, "self", self, out)) || (st = simk_check_same(fn, "end", end, out)) ||
        (st = need_float_dt(fn, "self", self)))
        return st;
    if ((st = sim_launch(kernel, fn))) return st;
    int64_t n = sim_numel(out);
    float *s = gather_or_die(self), *e = gather_or_die(end), w = (float)weight;
    /* PyTorch's form: exact at both ends, one fused multiply-add */
    if (fabsf(w) < 0.5f) for (int64_t i = 0; i < n; i++) s[i] = fmaf(w, e[i] - s[i], s[i]);
    else for (int64_t i = 0; i < n; i++) s[i] = fmaf(w - 1.0f, e[i] - s[i], e[i]);
    sim_scatter(s, out);
    free(s); free(e);
    return SIM_OK;
}

sim_status simk_where(const char *fn, const char *kernel, const sim_view *cond, const sim_view *a,
                      const sim_view *b, const sim_view *out) {
    sim_status st;
    if ((st = check_shape(fn, "condition", cond, out)) || (st = simk_check_same(fn, "self", a, out)) ||
        (st = simk_check_same(fn, "other", b, out)))
        return st;
    if (cond->dtype != SIM_BOOL)
        return sim_fail(SIM_E_UNSUPPORTED, fn, "condition must be bool, got %s", sim_dtype_name(cond->dtype));
    if ((st = sim_launch(kernel, fn))) return st;
    int64_t n = sim_numel(out);
    int64_t *c = gather_i_or_die(cond);
    if (simk_is_float(out->dtype)) {
        float *x = gather_or_die(a), *y = gather_or_die(b);
        for (int64_t i = 0; i < n; i++) x[i] = c[i] ? x[i] : y[i];
        sim_scatter(x, out);
        free(x); free(y);
    } else {
        int64_t *x = gather_i_or_die(a), *y = gather_i_or_die(b);
        for (int64_t i = 0; i < n; i++) x[i] = c[i] ? x[i] : y[i];
        scatter_i(x, out);
        free(x); free(y);
    }
    free(c);
    return SIM_OK;
}

sim_status simk_masked_fill(const char *fn, const char *kernel, const sim_view *self, const sim_view *mask,
                            double value, const sim_view *out) {
    sim_status st;
    if ((st = simk_check_same(fn, "self", self, out)) || (st = check_shape(fn, "mask", mask, out)))
        return st;
    if (mask->dtype != SIM_BOOL)
        return sim_fail(SIM_E_UNSUPPORTED, fn, "mask must be bool, got %s", sim_dtype_name(mask->dtype));
    if ((st = sim_launch(kernel, fn))) return st;
    int64_t n = sim_numel(out);
    int64_t *m = gather_i_or_die(mask);
    if (simk_is_float(out->dtype)) {
        float *x = gather_or_die(self), v = (float)value;
        for (int64_t i = 0; i < n; i++) if (m[i]) x[i] = v;
        sim_scatter(x, out);
        free(x);
    } else {
        int64_t *x = gather_i_or_die(self), v = sat_i64(value);
        for (int64_t i = 0; i < n; i++) if (m[i]) x[i] = v;
        scatter_i(x, out);
        free(x);
    }
    free(m);
    return SIM_OK;
}

sim_status simk_pointwise_grad(const char *fn, const char *kernel, simk_gradop op, const sim_view *grad,
                               const sim_view *x, double param, const sim_view *out) {
    sim_status st;
    if ((st = simk_check_same(fn, "grad_output", grad, out)) || (st = simk_check_same(fn, "input", x, out)) ||
        (st = need_float_dt(fn, "grad_output", grad)))
        return st;
    if ((st = sim_launch(kernel, fn))) return st;
    int64_t n = sim_numel(out);
    float *g = gather_or_die(grad), *v = gather_or_die(x);
    const float kBeta = 0.7978845608028654f, kKappa = 0.044715f;    /* sqrt(2/pi) */
    const float kAlpha = 0.70710678118654752f, kPdf = 0.3989422804014327f; /* 1/sqrt(2), 1/sqrt(2pi) */
    float th = (float)param;
    for (int64_t i = 0; i < n; i++) {
        float z = v[i], d;
        switch (op) {
            case SIMK_GRAD_GELU: {
                float cdf = 0.5f * (1.0f + erff(z * kAlpha));
                float pdf = expf(-0.5f * z * z) * kPdf;
                d = g[i] * (cdf + z * pdf);
                break;
            }
            case SIMK_GRAD_GELU_TANH: {
                float z2 = z * z, z3 = z2 * z;
                float inner = kBeta * (z + kKappa * z3), t = tanhf(inner);
                float left = 0.5f * z, right = 1.0f + t;
                float dleft = 0.5f * right, dtanh = 1.0f - t * t;
                float dinner = kBeta * (1.0f + 3.0f * kKappa * z2);
                d = g[i] * (dleft + left * dtanh * dinner);
                break;
            }
            case SIMK_GRAD_THRESHOLD: d = z <= th ? 0.0f : g[i]; break;
            case SIMK_GRAD_SIGMOID_Y: d = g[i] * (1.0f - z) * z; break;
            default: d = g[i] * (1.0f - z * z); break; /* tanh, from its output */
        }
        g[i] = d;
    }
    sim_scatter(g, out);
    free(g);
    free(v);
    return SIM_OK;
}

void simk_fill(const sim_view *out, double value) {
    int64_t n = sim_numel(out);
    if (n == 0) return;
    size_t es = sim_dtype_size(out->dtype);
    char one[8];
    sim_store(one, out->dtype, value);
    int64_t idx[SIM_MAX_DIMS] = {0};
    for (int64_t i = 0; i < n; i++) {
        int64_t off = 0;
        for (int d = 0; d < out->ndim; d++) off += idx[d] * out->strides[d];
        memcpy(out->base + off * (int64_t)es, one, es);
        for (int d = out->ndim - 1; d >= 0; d--) {
            if (++idx[d] < out->shape[d]) break;
            idx[d] = 0;
        }
    }
}

/* ------------------------------------------------------------------ copy */

static void copy_view(const sim_view *src, const sim_view *dst);

sim_status simk_copy(const char *fn, const char *kernel, const sim_view *src, const sim_view *dst) {
    if (!sim_same_shape(src, dst)) {
        char s1[160], s2[160];
        sim_shape_str(src, s1, sizeof s1);
        sim_shape_str(dst, s2, sizeof s2);
        return sim_fail(SIM_E_INVALID_VALUE, fn, "source shape %s differs from destination %s", s1,
                        s2);
    }
    if (sim_numel(dst) == 0) return SIM_OK;
    sim_status lst = sim_launch(kernel, fn);
    if (lst) return lst;
    copy_view(src, dst);
    return SIM_OK;
}

/* dst = src element by element (same shape), converting dtypes. */
static void copy_view(const sim_view *src, const sim_view *dst) {
    int64_t n = sim_numel(dst);
    size_t ses = sim_dtype_size(src->dtype), des = sim_dtype_size(dst->dtype);
    if (src->dtype == dst->dtype && sim_is_contiguous(src) && sim_is_contiguous(dst)) {
        memmove(dst->base, src->base, (size_t)n * des);
        return;
    }
    /* Element by element through double: exact for every integer the dtypes
     * hold below 2^53 and for all float formats; same-dtype copies are bytes. */
    int nd = dst->ndim;
    int64_t idx[SIM_MAX_DIMS] = {0};
    for (int64_t i = 0; i < n; i++) {
        int64_t so = 0, doff = 0;
        for (int d = 0; d < nd; d++) {
            so += idx[d] * src->strides[d];
            doff += idx[d] * dst->strides[d];
        }
        const char *sp = src->base + so * (int64_t)ses;
        char *dp = dst->base + doff * (int64_t)des;
        if (src->dtype == dst->dtype) memcpy(dp, sp, des);
        else if (src->dtype == SIM_I64 && dst->dtype != SIM_F32 && dst->dtype != SIM_F64 &&
                 dst->dtype != SIM_F16 && dst->dtype != SIM_BF16) {
            int64_t v;
            memcpy(&v, sp, 8);
            switch (dst->dtype) {
                case SIM_I32: { int32_t w = (int32_t)v; memcpy(dp, &w, 4); break; }
                case SIM_I8: *(int8_t *)dp = (int8_t)v; break;
                case SIM_U8: *(uint8_t *)dp = (uint8_t)v; break;
                case SIM_BOOL: *(uint8_t *)dp = v != 0; break;
                default: break;
            }
        } else {
            sim_store(dp, dst->dtype, sim_load(sp, src->dtype));
        }
        for (int d = nd - 1; d >= 0; d--) {
            if (++idx[d] < dst->shape[d]) break;
            idx[d] = 0;
        }
    }
}

/* ------------------------------------------------------------------ GEMM */

/* The arithmetic lives in simblas.c (packed, register-blocked, vectorized,
 * strided operands read in place). */

/* The last two dims of a 2-D or 3-D view as a simblas operand. */
static simblas_mat blas_mat(const sim_view *v) {
    int nd = v->ndim;
    simblas_mat m = {v->base, v->dtype, v->strides[nd - 2], v->strides[nd - 1],
                     nd == 3 ? v->strides[0] : 0};
    return m;
}

sim_status simk_gemm(const char *fn, const char *kernel, const sim_view *a, const sim_view *m, const sim_view *bias,
                     double beta, double alpha, const sim_view *out) {
    int nd = out->ndim;
    if ((nd != 2 && nd != 3) || a->ndim != nd || m->ndim != nd)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "operands must all be 2-D (mm) or 3-D (bmm); got "
                        "%d-D x %d-D -> %d-D", a->ndim, m->ndim, nd);
    int64_t B = nd == 3 ? out->shape[0] : 1;
    int64_t M = a->shape[nd - 2], K = a->shape[nd - 1], N = m->shape[nd - 1];
    if (m->shape[nd - 2] != K || out->shape[nd - 2] != M || out->shape[nd - 1] != N ||
        (nd == 3 && (a->shape[0] != B || m->shape[0] != B)))
        return sim_fail(SIM_E_INVALID_VALUE, fn, "shape mismatch: [%lldx%lld] @ [%lldx%lld] -> "
                        "[%lldx%lld]", (long long)M, (long long)K, (long long)m->shape[nd - 2],
                        (long long)N, (long long)out->shape[nd - 2],
                        (long long)out->shape[nd - 1]);
    if (a->dtype != out->dtype || m->dtype != out->dtype)
        return sim_fail(SIM_E_UNSUPPORTED, fn, "mixed dtypes %s @ %s -> %s", sim_dtype_name(a->dtype),
                        sim_dtype_name(m->dtype), sim_dtype_name(out->dtype));
    if (bias && bias->present) {
        sim_status st = simk_check_same(fn, "bias (expanded to the output)", bias, out);
        if (st) return st;
    }
    sim_status lst = sim_launch(kernel, fn);
    if (lst) return lst;
    simblas_mat A = blas_mat(a), Mt = blas_mat(m), C = blas_mat(out), D;
    int has_bias = bias && bias->present;
    if (has_bias) D = blas_mat(bias);
    simblas_gemm(B, M, N, K, (float)alpha, &A, &Mt, (float)beta, has_bias ? &D : NULL, &C);
    return SIM_OK;
}

sim_status simk_gemm_u8(const char *fn, const char *kernel, const sim_view *a, const sim_view *m,
                        const sim_view *out) {
    if (a->ndim != 2 || m->ndim != 2 || out->ndim != 2)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "operands must be 2-D");
    int64_t M = a->shape[0], K = a->shape[1], N = m->shape[1];
    if (m->shape[0] != K || out->shape[0] != M || out->shape[1] != N)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "shape mismatch: [%lldx%lld] @ [%lldx%lld] -> "
                        "[%lldx%lld]", (long long)M, (long long)K, (long long)m->shape[0],
                        (long long)N, (long long)out->shape[0], (long long)out->shape[1]);
    if (a->dtype != SIM_U8 || m->dtype != SIM_U8 || out->dtype != SIM_I32)
        return sim_fail(SIM_E_UNSUPPORTED, fn, "takes uint8 x uint8 -> int32, got %s x %s -> %s",
                        sim_dtype_name(a->dtype), sim_dtype_name(m->dtype),
                        sim_dtype_name(out->dtype));
    sim_status lst = sim_launch(kernel, fn);
    if (lst) return lst;
    int32_t *acc = calloc((size_t)(M * N > 0 ? M * N : 1), sizeof(int32_t));
    if (!acc) abort();
    for (int64_t i = 0; i < M; i++)
        for (int64_t k = 0; k < K; k++) {
            int32_t av = (int32_t)*(const uint8_t *)(a->base + i * a->strides[0] + k * a->strides[1]) - 128;
            for (int64_t j = 0; j < N; j++) {
                int32_t bv =
                    (int32_t)*(const uint8_t *)(m->base + k * m->strides[0] + j * m->strides[1]) - 128;
                acc[i * N + j] += av * bv;
            }
        }
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++)
            memcpy(out->base + (i * out->strides[0] + j * out->strides[1]) * 4, &acc[i * N + j], 4);
    free(acc);
    return SIM_OK;
}

void simk_s8_to_u8(const sim_view *src, const sim_view *dst) {
    int64_t n = sim_numel(dst);
    int nd = dst->ndim;
    int64_t idx[SIM_MAX_DIMS] = {0};
    for (int64_t i = 0; i < n; i++) {
        int64_t so = 0, doff = 0;
        for (int d = 0; d < nd; d++) {
            so += idx[d] * src->strides[d];
            doff += idx[d] * dst->strides[d];
        }
        *(uint8_t *)(dst->base + doff) = (uint8_t)((int)*(const int8_t *)(src->base + so) + 128);
        for (int d = nd - 1; d >= 0; d--) {
            if (++idx[d] < dst->shape[d]) break;
            idx[d] = 0;
        }
    }
}

/* ------------------------------------------------------------- conv/pool */

int64_t simk_pool_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, int ceil_mode) {
    int64_t num = in + 2 * p - d * (k - 1) - 1 + (ceil_mode ? s - 1 : 0);
    int64_t o = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;
    if (ceil_mode && (o - 1) * s >= in + p) o--; /* last window must start inside */
    return o;
}

static sim_status check_out_shape4(const char *fn, const sim_view *out, int64_t n, int64_t h,
                                   int64_t w, int64_t c) {
    if (out->ndim != 4 || out->shape[0] != n || out->shape[1] != h || out->shape[2] != w ||
        out->shape[3] != c)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "output must be NHWC [%lld, %lld, %lld, %lld]",
                        (long long)n, (long long)h, (long long)w, (long long)c);
    return SIM_OK;
}

/* Bytes [lo, hi) a view can touch. */
static void view_span(const sim_view *v, intptr_t *lo, intptr_t *hi) {
    int64_t mn = 0, mx = 0;
    for (int d = 0; d < v->ndim; d++) {
        int64_t off = (v->shape[d] - 1) * v->strides[d];
        if (off < 0) mn += off;
        else mx += off;
    }
    int64_t es = (int64_t)sim_dtype_size(v->dtype);
    *lo = (intptr_t)v->base + (intptr_t)(mn * es);
    *hi = (intptr_t)v->base + (intptr_t)((mx + 1) * es);
}

static int views_overlap(const sim_view *a, const sim_view *b) {
    if (sim_numel(a) == 0 || sim_numel(b) == 0) return 0;
    intptr_t alo, ahi, blo, bhi;
    view_span(a, &alo, &ahi);
    view_span(b, &blo, &bhi);
    return alo < bhi && blo < ahi;
}

/* Small float copies and clears as fixed 64-byte moves, which compile to
 * vector loads and stores instead of library calls. */
static inline void copy_f32(float *d, const float *s, int64_t n) {
    int64_t t = 0;
    for (; t + 16 <= n; t += 16) memcpy(d + t, s + t, 64);
    for (; t < n; t++) d[t] = s[t];
}

static inline void zero_f32(float *d, int64_t n) {
    int64_t t = 0;
    for (; t + 16 <= n; t += 16) memset(d + t, 0, 64);
    for (; t < n; t++) d[t] = 0.0f;
}

/* A stretch of im2col columns: channels [ci, ...) of kernel cell (kh, kw) and,
 * when pixels are channel-contiguous, whole cells (kh, kw+1), ... after it:
 * nkw cells, len floats, written at column offset dst of the block. */
typedef struct {
    int64_t kh, kw, ci, nkw, len, dst;
} conv_run;

/* The convolution as simblas sees it: A = im2col of the NHWC input for group
 * g, row q_base + i is output pixel (n, oh, ow) in NHWC order, column
 * (kh, kw, ci) as in an OHWI weight, zero where the window hangs over the
 * padding.  Rows are produced a block at a time, never the whole matrix. */
typedef struct {
    const sim_view *in;
    int64_t g, q_base;
    int64_t KH, KW, Cg, OH, OW;
    const int64_t *stride, *padding, *dilation;
    int contiguous_cells;  /* ungrouped, undilated, channel-contiguous pixels */
    conv_run *runs;        /* scratch, KH*KW entries */
} conv_ctx;

static void conv_im2col_rows(void *vctx, int64_t i0, int64_t m, int64_t k0, int64_t kc, float *dst,
                             int64_t ld) {
    conv_ctx *cx = vctx;
    const sim_view *in = cx->in;
    const int64_t H = in->shape[1], W = in->shape[2];
    const int64_t *is = in->strides;
    const int64_t KW = cx->KW, Cg = cx->Cg, OH = cx->OH, OW = cx->OW;
    const int64_t es = (int64_t)sim_dtype_size(in->dtype);
    const int fast = in->dtype == SIM_F32 && is[3] == 1;
    /* the column range as runs, the same for every row */
    int nr = 0;
    int64_t k = k0, kh = k0 / (KW * Cg), kw = k0 / Cg % KW, ci = k0 % Cg;
    while (k < k0 + kc) {
        int64_t len = Cg - ci < k0 + kc - k ? Cg - ci : k0 + kc - k;
        if (cx->contiguous_cells && nr > 0 && cx->runs[nr - 1].kh == kh && ci == 0) {
            cx->runs[nr - 1].nkw++;
            cx->runs[nr - 1].len += len;
        } else {
            cx->runs[nr++] = (conv_run){kh, kw, ci, 1, len, k - k0};
        }
        k += len;
        ci = 0;
        if (++kw == KW) kw = 0, kh++;
    }
    const int64_t q = cx->q_base + i0;
    int64_t n = q / (OH * OW), oh = q / OW % OH, ow = q % OW;
    for (int64_t r = 0; r < m; r++) {
        float *row = dst + r * ld;
        for (int t = 0; t < nr; t++) {
            const conv_run *ru = &cx->runs[t];
            float *d = row + ru->dst;
            const int64_t ih = oh * cx->stride[0] - cx->padding[0] + ru->kh * cx->dilation[0];
            if (ih < 0 || ih >= H) {
                zero_f32(d, ru->len);
                continue;
            }
            const char *pix = in->base + (n * is[0] + ih * is[1] + cx->g * Cg * is[3]) * es;
            const int64_t iwa = ow * cx->stride[1] - cx->padding[1] + ru->kw * cx->dilation[1];
            const int64_t iwb = iwa + (ru->nkw - 1) * cx->dilation[1];
            if (iwa >= 0 && iwb < W) {  /* the whole run inside: one copy */
                const char *src = pix + (iwa * is[2] + ru->ci * is[3]) * es;
                if (fast) copy_f32(d, (const float *)src, ru->len);
                else simblas_to_f32(d, src, in->dtype, is[3], ru->len);
                continue;
            }
            for (int64_t c = 0, off = 0; c < ru->nkw; c++) {  /* cell by cell at a border */
                const int64_t c0 = c == 0 ? ru->ci : 0;
                const int64_t cl = Cg - c0 < ru->len - off ? Cg - c0 : ru->len - off;
                const int64_t iw = iwa + c * cx->dilation[1];
                if (iw < 0 || iw >= W) zero_f32(d + off, cl);
                else simblas_to_f32(d + off, pix + (iw * is[2] + c0 * is[3]) * es, in->dtype, is[3], cl);
                off += cl;
            }
        }
        if (++ow == OW) {  /* next output pixel without dividing */
            ow = 0;
            if (++oh == OH) oh = 0, n++;
        }
    }
}

sim_status simk_conv2d_nhwc(const char *fn, const char *kernel, const sim_view *in, const sim_view *w,
                            const sim_view *bias, const int64_t *stride, const int64_t *padding,
                            const int64_t *dilation, int64_t groups, const sim_view *out) {
    if (in->ndim != 4 || w->ndim != 4)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "input and weight must be 4-D (NHWC, OHWI)");
    int64_t N = in->shape[0], H = in->shape[1], W = in->shape[2], C = in->shape[3];
    int64_t O = w->shape[0], KH = w->shape[1], KW = w->shape[2], Cg = w->shape[3];
    if (groups < 1 || C % groups || O % groups || Cg * groups != C)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "channels: input C=%lld, weight [O=%lld, I/g=%lld], "
                        "groups=%lld do not agree", (long long)C, (long long)O, (long long)Cg,
                        (long long)groups);
    int64_t OH = simk_pool_out(H, KH, stride[0], padding[0], dilation[0], 0);
    int64_t OW = simk_pool_out(W, KW, stride[1], padding[1], dilation[1], 0);
    if (OH <= 0 || OW <= 0)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "kernel larger than padded input");
    sim_status st = check_out_shape4(fn, out, N, OH, OW, O);
    if (st) return st;
    if (w->dtype != in->dtype || out->dtype != in->dtype ||
        (bias->present && bias->dtype != in->dtype))
        return sim_fail(SIM_E_UNSUPPORTED, fn, "mixed dtypes");
    if (bias->present && (bias->ndim != 1 || bias->shape[0] != O))
        return sim_fail(SIM_E_INVALID_VALUE, fn, "bias must be [%lld]", (long long)O);
    sim_status lst = sim_launch(kernel, fn);
    if (lst) return lst;
    /* One GEMM per group: im2col(input) [pixels, KH*KW*Cg] @ weight^T
     * [KH*KW*Cg, Og] + bias -> the group's output channels; simblas pulls the
     * im2col rows through conv_im2col_rows a cache-sized block at a time. */
    const int64_t Og = O / groups, KK = KH * KW * Cg, Q = N * OH * OW;
    if (Q == 0 || Og == 0) return SIM_OK;
    /* the weight transposed once to float [KK][O], so B panels are row copies */
    float *wt = alloc_f(KK * O);
    {
        float *wd = gather_or_die(w);
        for (int64_t o = 0; o < O; o++)
            for (int64_t k = 0; k < KK; k++) wt[k * O + o] = wd[o * KK + k];
        free(wd);
    }
    /* an output sharing memory with an input is computed aside, written last */
    float *Y = NULL;
    if (views_overlap(out, in) || views_overlap(out, w) || (bias->present && views_overlap(out, bias)))
        Y = alloc_f(Q * O);
    /* output pixels q, q+1, ... are one row stride apart within runs of this length */
    const int64_t *os = out->strides;
    int64_t runlen = OW;
    if (Y || OH == 1 || os[1] == OW * os[2]) runlen = OH * OW;
    if (Y || (runlen == OH * OW && (N == 1 || os[0] == OH * OW * os[2]))) runlen = Q;
    conv_run *runs = malloc((size_t)(KH * KW > 0 ? KH * KW : 1) * sizeof(conv_run));
    if (!runs) abort();
    conv_ctx cx = {in, 0, 0, KH, KW, Cg, OH, OW, stride, padding, dilation,
                   dilation[1] == 1 && Cg == C && in->strides[3] == 1 && in->strides[2] == C, runs};
    const int64_t oes = (int64_t)sim_dtype_size(out->dtype);
    for (int64_t g = 0; g < groups; g++) {
        simblas_mat Bg = {wt + g * Og, SIM_F32, O, 1, 0}, D;
        if (bias->present)
            D = (simblas_mat){bias->base + g * Og * bias->strides[0] * (int64_t)sim_dtype_size(bias->dtype),
                              bias->dtype, 0, bias->strides[0], 0};
        for (int64_t q0 = 0; q0 < Q; q0 += runlen) {
            simblas_mat Cm;
            if (Y) {
                Cm = (simblas_mat){Y + q0 * O + g * Og, SIM_F32, O, 1, 0};
            } else {
                const int64_t n = q0 / (OH * OW), oh = q0 / OW % OH, ow = q0 % OW;
                Cm = (simblas_mat){out->base + (n * os[0] + oh * os[1] + ow * os[2] + g * Og * os[3]) * oes,
                                   out->dtype, os[2], os[3], 0};
            }
            cx.g = g;
            cx.q_base = q0;
            simblas_gemm_rows(runlen, Og, KK, 1.0f, conv_im2col_rows, &cx, &Bg, 1.0f,
                              bias->present ? &D : NULL, &Cm);
        }
    }
    if (Y) sim_scatter(Y, out);
    free(Y);
    free(runs);
    free(wt);
    return SIM_OK;
}

sim_status simk_max_pool2d_nhwc(const char *fn, const char *kernel, const sim_view *in, const int64_t *k,
                                const int64_t *stride, const int64_t *pad, const int64_t *dil,
                                const sim_view *out, const sim_view *indices) {
    if (in->ndim != 4) return sim_fail(SIM_E_INVALID_VALUE, fn, "input must be 4-D NHWC");
    int64_t N = in->shape[0], H = in->shape[1], W = in->shape[2], C = in->shape[3];
    int64_t OH = out->ndim == 4 ? out->shape[1] : -1, OW = out->ndim == 4 ? out->shape[2] : -1;
    sim_status st = check_out_shape4(fn, out, N, OH, OW, C);
    if (st) return st;
    if (indices->present) {
        st = check_out_shape4(fn, indices, N, OH, OW, C);
        if (st) return st;
        if (indices->dtype != SIM_I64)
            return sim_fail(SIM_E_UNSUPPORTED, fn, "indices must be int64");
    }
    if (out->dtype != in->dtype) return sim_fail(SIM_E_UNSUPPORTED, fn, "mixed dtypes");
    sim_status lst = sim_launch(kernel, fn);
    if (lst) return lst;
    float *X = gather_or_die(in);
    float *Y = alloc_f(N * OH * OW * C);
    int64_t *I = indices->present ? calloc((size_t)(N * OH * OW * C + 1), 8) : NULL;
    for (int64_t n = 0; n < N; n++)
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++)
                for (int64_t c = 0; c < C; c++) {
                    /* PyTorch's rule: start at the first in-bounds element,
                     * take anything larger, and let NaN win. */
                    float best = -INFINITY;
                    int64_t h0 = oh * stride[0] - pad[0], w0 = ow * stride[1] - pad[1];
                    int64_t fh = h0, fw = w0;
                    while (fh < 0) fh += dil[0];
                    while (fw < 0) fw += dil[1];
                    int64_t arg = fh * W + fw;
                    for (int64_t kh = 0; kh < k[0]; kh++) {
                        int64_t ih = h0 + kh * dil[0];
                        if (ih < 0 || ih >= H) continue;
                        for (int64_t kw = 0; kw < k[1]; kw++) {
                            int64_t iw = w0 + kw * dil[1];
                            if (iw < 0 || iw >= W) continue;
                            float v = X[((n * H + ih) * W + iw) * C + c];
                            if (v > best || isnan(v)) {
                                best = v;
                                arg = ih * W + iw;
                            }
                        }
                    }
                    int64_t o = ((n * OH + oh) * OW + ow) * C + c;
                    Y[o] = best;
                    if (I) I[o] = arg;
                }
    sim_scatter(Y, out);
    if (I) {
        int64_t o = 0;
        for (int64_t n = 0; n < N; n++)
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++)
                    for (int64_t c = 0; c < C; c++, o++)
                        memcpy(indices->base + (n * indices->strides[0] + oh * indices->strides[1] +
                                                ow * indices->strides[2] + c * indices->strides[3]) * 8,
                               &I[o], 8);
    }
    free(X); free(Y); free(I);
    return SIM_OK;
}

/* Sum of channel c over rows [hs, he) and columns [ws, we) of image n (NHWC). */
static float window_sum(const float *X, int64_t n, int64_t H, int64_t W, int64_t C, int64_t c,
                        int64_t hs, int64_t he, int64_t ws, int64_t we) {
    float s = 0;
    for (int64_t ih = hs; ih < he; ih++)
        for (int64_t iw = ws; iw < we; iw++) s += X[((n * H + ih) * W + iw) * C + c];
    return s;
}

sim_status simk_avg_pool2d_nhwc(const char *fn, const char *kernel, const sim_view *in, const int64_t *k,
                                const int64_t *stride, const int64_t *pad, int count_include_pad,
                                int64_t divisor_override, const sim_view *out) {
    if (in->ndim != 4) return sim_fail(SIM_E_INVALID_VALUE, fn, "input must be 4-D NHWC");
    int64_t N = in->shape[0], H = in->shape[1], W = in->shape[2], C = in->shape[3];
    int64_t OH = out->ndim == 4 ? out->shape[1] : -1, OW = out->ndim == 4 ? out->shape[2] : -1;
    sim_status st = check_out_shape4(fn, out, N, OH, OW, C);
    if (st) return st;
    if (out->dtype != in->dtype) return sim_fail(SIM_E_UNSUPPORTED, fn, "mixed dtypes");
    sim_status lst = sim_launch(kernel, fn);
    if (lst) return lst;
    float *X = gather_or_die(in);
    float *Y = alloc_f(N * OH * OW * C);
    for (int64_t n = 0; n < N; n++)
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                /* PyTorch's window rule: the pool size counts padding up to the
                 * padded edge, then the window is clipped to the input. */
                int64_t hs = oh * stride[0] - pad[0], ws = ow * stride[1] - pad[1];
                int64_t he = hs + k[0] < H + pad[0] ? hs + k[0] : H + pad[0];
                int64_t we = ws + k[1] < W + pad[1] ? ws + k[1] : W + pad[1];
                int64_t pool = (he - hs) * (we - ws);
                if (hs < 0) hs = 0;
                if (ws < 0) ws = 0;
                if (he > H) he = H;
                if (we > W) we = W;
                int64_t div = divisor_override ? divisor_override
                              : count_include_pad ? pool : (he - hs) * (we - ws);
                for (int64_t c = 0; c < C; c++) {
                    float s = window_sum(X, n, H, W, C, c, hs, he, ws, we);
                    Y[((n * OH + oh) * OW + ow) * C + c] = div ? s / (float)div : NAN;
                }
            }
    sim_scatter(Y, out);
    free(X);
    free(Y);
    return SIM_OK;
}

sim_status simk_adaptive_avg_pool2d_nhwc(const char *fn, const char *kernel, const sim_view *in, const sim_view *out) {
    if (in->ndim != 4 || out->ndim != 4)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "input and output must be 4-D NHWC");
    int64_t N = in->shape[0], H = in->shape[1], W = in->shape[2], C = in->shape[3];
    int64_t OH = out->shape[1], OW = out->shape[2];
    sim_status st = check_out_shape4(fn, out, N, OH, OW, C);
    if (st) return st;
    if (out->dtype != in->dtype) return sim_fail(SIM_E_UNSUPPORTED, fn, "mixed dtypes");
    sim_status lst = sim_launch(kernel, fn);
    if (lst) return lst;
    float *X = gather_or_die(in);
    float *Y = alloc_f(N * OH * OW * C);
    for (int64_t n = 0; n < N; n++)
        for (int64_t oh = 0; oh < OH; oh++) {
            int64_t hs = (oh * H) / OH, he = ((oh + 1) * H + OH - 1) / OH;
            for (int64_t ow = 0; ow < OW; ow++) {
                int64_t ws = (ow * W) / OW, we = ((ow + 1) * W + OW - 1) / OW;
                for (int64_t c = 0; c < C; c++)
                    Y[((n * OH + oh) * OW + ow) * C + c] =
                        window_sum(X, n, H, W, C, c, hs, he, ws, we) / (float)((he - hs) * (we - ws));
            }
        }
    sim_scatter(Y, out);
    free(X);
    free(Y);
    return SIM_OK;
}

/* ------------------------------------------------------ conv/pool backward */

sim_status simk_conv2d_backward_nhwc(const char *fn, const char *kernel, const sim_view *dy, const sim_view *x,
                                     const sim_view *w, const int64_t *stride, const int64_t *padding,
                                     const int64_t *dilation, int64_t groups, const sim_view *dx,
                                     const sim_view *dw, const sim_view *db) {
    if (dy->ndim != 4 || x->ndim != 4 || w->ndim != 4)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "grad_output, input and weight must be 4-D (NHWC, OHWI)");
    int64_t N = x->shape[0], H = x->shape[1], W = x->shape[2], C = x->shape[3];
    int64_t O = w->shape[0], KH = w->shape[1], KW = w->shape[2], Cg = w->shape[3];
    if (groups < 1 || C % groups || O % groups || Cg * groups != C)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "channels: input C=%lld, weight [O=%lld, I/g=%lld], "
                        "groups=%lld do not agree", (long long)C, (long long)O, (long long)Cg, (long long)groups);
    for (int i = 0; i < 2; i++)
        if (stride[i] < 1 || padding[i] < 0 || dilation[i] < 1)
            return sim_fail(SIM_E_INVALID_VALUE, fn, "stride and dilation must be >= 1, padding >= 0");
    int64_t OH = simk_pool_out(H, KH, stride[0], padding[0], dilation[0], 0);
    int64_t OW = simk_pool_out(W, KW, stride[1], padding[1], dilation[1], 0);
    if (OH <= 0 || OW <= 0) return sim_fail(SIM_E_INVALID_VALUE, fn, "kernel larger than padded input");
    sim_status st;
    if ((st = check_out_shape4(fn, dy, N, OH, OW, O))) return st;
    if (dx->present && (st = check_out_shape4(fn, dx, N, H, W, C))) return st;
    if (dw->present && (st = check_out_shape4(fn, dw, O, KH, KW, Cg))) return st;
    if (db->present && (db->ndim != 1 || db->shape[0] != O))
        return sim_fail(SIM_E_INVALID_VALUE, fn, "grad_bias must be [%lld]", (long long)O);
    const sim_view *all[6] = {dy, x, w, dx, dw, db};
    for (int i = 0; i < 6; i++)
        if (all[i]->present && all[i]->dtype != x->dtype) return sim_fail(SIM_E_UNSUPPORTED, fn, "mixed dtypes");
    if ((st = need_float_dt(fn, "input", x))) return st;
    if (!dx->present && !dw->present && !db->present)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "no gradient requested");
    if ((st = sim_launch(kernel, fn))) return st;
    int64_t Og = O / groups, KK = KH * KW * Cg, P = OH * OW;
    float *DY = gather_or_die(dy);
    if (db->present) {
        double *acc = calloc((size_t)O, sizeof(double));
        if (!acc) abort();
        for (int64_t i = 0; i < N * P; i++)
            for (int64_t o = 0; o < O; o++) acc[o] += DY[i * O + o];
        float *B = alloc_f(O);
        for (int64_t o = 0; o < O; o++) B[o] = (float)acc[o];
        sim_scatter(B, db);
        free(acc);
        free(B);
    }
    float *X = dw->present ? gather_or_die(x) : NULL, *Wt = dx->present ? gather_or_die(w) : NULL;
    float *DW = dw->present ? alloc_f(O * KK) : NULL, *DX = dx->present ? alloc_f(N * H * W * C) : NULL;
    float *col = alloc_f(P * KK);
    for (int64_t g = 0; g < groups; g++)
        for (int64_t n = 0; n < N; n++) {
            /* this image's gradient for group g as [P, Og] (row stride O) */
            simblas_mat dyg = {DY + n * P * O + g * Og, SIM_F32, O, 1, 0};
            if (DW) {
                for (int64_t oh = 0; oh < OH; oh++)
                    for (int64_t ow = 0; ow < OW; ow++) {
                        float *crow = col + (oh * OW + ow) * KK;
                        for (int64_t kh = 0; kh < KH; kh++) {
                            int64_t ih = oh * stride[0] - padding[0] + kh * dilation[0];
                            for (int64_t kw = 0; kw < KW; kw++) {
                                int64_t iw = ow * stride[1] - padding[1] + kw * dilation[1];
                                float *d = crow + (kh * KW + kw) * Cg;
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W) memset(d, 0, (size_t)Cg * sizeof(float));
                                else memcpy(d, X + ((n * H + ih) * W + iw) * C + g * Cg, (size_t)Cg * sizeof(float));
                            }
                        }
                    }
                /* dW_g[Og, KK] += dy_g^T @ col */
                simblas_mat a = {dyg.base, SIM_F32, 1, O, 0}, b = {col, SIM_F32, KK, 1, 0};
                simblas_mat c = {DW + g * Og * KK, SIM_F32, KK, 1, 0};
                simblas_gemm(1, Og, KK, P, 1.0f, &a, &b, 1.0f, &c, &c);
            }
            if (DX) {
                /* dcol[P, KK] = dy_g @ W_g, then added back where each column came from */
                simblas_mat b = {Wt + g * Og * KK, SIM_F32, KK, 1, 0}, c = {col, SIM_F32, KK, 1, 0};
                simblas_gemm(1, P, KK, Og, 1.0f, &dyg, &b, 0.0f, NULL, &c);
                for (int64_t oh = 0; oh < OH; oh++)
                    for (int64_t ow = 0; ow < OW; ow++) {
                        const float *crow = col + (oh * OW + ow) * KK;
                        for (int64_t kh = 0; kh < KH; kh++) {
                            int64_t ih = oh * stride[0] - padding[0] + kh * dilation[0];
                            if (ih < 0 || ih >= H) continue;
                            for (int64_t kw = 0; kw < KW; kw++) {
                                int64_t iw = ow * stride[1] - padding[1] + kw * dilation[1];
                                if (iw < 0 || iw >= W) continue;
                                float *d = DX + ((n * H + ih) * W + iw) * C + g * Cg;
                                const float *s = crow + (kh * KW + kw) * Cg;
                                for (int64_t ci = 0; ci < Cg; ci++) d[ci] += s[ci];
                            }
                        }
                    }
            }
        }
    if (DW) sim_scatter(DW, dw);
    if (DX) sim_scatter(DX, dx);
    free(DY); free(X); free(Wt); free(DW); free(DX); free(col);
    return SIM_OK;
}

/* dx's geometry against dy's: same N and C; returns H, W, OH, OW */
static sim_status pool_grad_shapes(const char *fn, const sim_view *dy, const sim_view *dx, int64_t *H,
                                   int64_t *W, int64_t *OH, int64_t *OW) {
    if (dy->ndim != 4 || dx->ndim != 4)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "grad_output and grad_input must be 4-D NHWC");
    if (dy->shape[0] != dx->shape[0] || dy->shape[3] != dx->shape[3])
        return sim_fail(SIM_E_INVALID_VALUE, fn, "grad_output and grad_input differ in N or C");
    if (dy->dtype != dx->dtype) return sim_fail(SIM_E_UNSUPPORTED, fn, "mixed dtypes");
    *H = dx->shape[1];
    *W = dx->shape[2];
    *OH = dy->shape[1];
    *OW = dy->shape[2];
    return need_float_dt(fn, "grad_output", dy);
}

sim_status simk_max_pool2d_backward_nhwc(const char *fn, const char *kernel, const sim_view *dy,
                                         const sim_view *indices, const sim_view *dx) {
    int64_t H = 0, W = 0, OH = 0, OW = 0;
    sim_status st;
    if ((st = pool_grad_shapes(fn, dy, dx, &H, &W, &OH, &OW))) return st;
    if (!sim_same_shape(indices, dy) || indices->dtype != SIM_I64)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "indices must be int64 shaped like grad_output");
    int64_t N = dx->shape[0], C = dx->shape[3], m = sim_numel(dy);
    int64_t *I = gather_i_or_die(indices);
    for (int64_t i = 0; i < m; i++)
        if (I[i] < 0 || I[i] >= H * W) {
            long long bad = (long long)I[i];
            free(I);
            return sim_fail(SIM_E_DATA, fn, "index %lld out of range [0, %lld)", bad, (long long)(H * W));
        }
    if ((st = sim_launch(kernel, fn))) {
        free(I);
        return st;
    }
    float *G = gather_or_die(dy), *R = alloc_f(N * H * W * C);
    for (int64_t n = 0, i = 0; n < N; n++)
        for (int64_t p = 0; p < OH * OW; p++)
            for (int64_t c = 0; c < C; c++, i++) R[(n * H * W + I[i]) * C + c] += G[i];
    sim_scatter(R, dx);
    free(I); free(G); free(R);
    return SIM_OK;
}

sim_status simk_avg_pool2d_backward_nhwc(const char *fn, const char *kernel, const sim_view *dy, const int64_t *k,
                                         const int64_t *stride, const int64_t *pad, int count_include_pad,
                                         int64_t divisor_override, const sim_view *dx) {
    int64_t H = 0, W = 0, OH = 0, OW = 0;
    sim_status st;
    if ((st = pool_grad_shapes(fn, dy, dx, &H, &W, &OH, &OW))) return st;
    if ((st = sim_launch(kernel, fn))) return st;
    int64_t N = dx->shape[0], C = dx->shape[3];
    float *G = gather_or_die(dy), *R = alloc_f(N * H * W * C);
    for (int64_t n = 0; n < N; n++)
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                /* the forward's window rule (see simk_avg_pool2d_nhwc) */
                int64_t hs = oh * stride[0] - pad[0], ws = ow * stride[1] - pad[1];
                int64_t he = hs + k[0] < H + pad[0] ? hs + k[0] : H + pad[0];
                int64_t we = ws + k[1] < W + pad[1] ? ws + k[1] : W + pad[1];
                int64_t pool = (he - hs) * (we - ws);
                if (hs < 0) hs = 0;
                if (ws < 0) ws = 0;
                if (he > H) he = H;
                if (we > W) we = W;
                int64_t div = divisor_override ? divisor_override : count_include_pad ? pool : (he - hs) * (we - ws);
                for (int64_t c = 0; c < C; c++) {
                    float g = G[((n * OH + oh) * OW + ow) * C + c] / (float)div;
                    for (int64_t ih = hs; ih < he; ih++)
                        for (int64_t iw = ws; iw < we; iw++) R[((n * H + ih) * W + iw) * C + c] += g;
                }
            }
    sim_scatter(R, dx);
    free(G);
    free(R);
    return SIM_OK;
}

sim_status simk_adaptive_avg_pool2d_backward_nhwc(const char *fn, const char *kernel, const sim_view *dy,
                                                  const sim_view *dx) {
    int64_t H = 0, W = 0, OH = 0, OW = 0;
    sim_status st;
    if ((st = pool_grad_shapes(fn, dy, dx, &H, &W, &OH, &OW))) return st;
    if ((st = sim_launch(kernel, fn))) return st;
    int64_t N = dx->shape[0], C = dx->shape[3];
    float *G = gather_or_die(dy), *R = alloc_f(N * H * W * C);
    for (int64_t n = 0; n < N; n++)
        for (int64_t oh = 0; oh < OH; oh++) {
            int64_t hs = (oh * H) / OH, he = ((oh + 1) * H + OH - 1) / OH;
            for (int64_t ow = 0; ow < OW; ow++) {
                int64_t ws = (ow * W) / OW, we = ((ow + 1) * W + OW - 1) / OW;
                float area = (float)((he - hs) * (we - ws));
                for (int64_t c = 0; c < C; c++) {
                    float g = G[((n * OH + oh) * OW + ow) * C + c] / area;
                    for (int64_t ih = hs; ih < he; ih++)
                        for (int64_t iw = ws; iw < we; iw++) R[((n * H + ih) * W + iw) * C + c] += g;
                }
            }
        }
    sim_scatter(R, dx);
    free(G);
    free(R);
    return SIM_OK;
}

/* ------------------------------------------------------------ normalize */

sim_status simk_batch_norm_infer(const char *fn, const char *kernel, const sim_view *in, const sim_view *w,
                                 const sim_view *b, const sim_view *mean, const sim_view *var,
                                 double eps, const sim_view *out) {
    if (in->ndim < 2) return sim_fail(SIM_E_INVALID_VALUE, fn, "input must be [N, C, ...]");
    sim_status st = simk_check_same(fn, "input", in, out);
    if (st) return st;
    int64_t C = in->shape[1];
    const sim_view *per_ch[4] = {w, b, mean, var};
    const char *names[4] = {"weight", "bias", "running_mean", "running_var"};
    for (int i = 0; i < 4; i++) {
        if (!per_ch[i]->present) {
            if (i >= 2) return sim_fail(SIM_E_INVALID_VALUE, fn, "%s is required", names[i]);
            continue;
        }
        if (per_ch[i]->ndim != 1 || per_ch[i]->shape[0] != C)
            return sim_fail(SIM_E_INVALID_VALUE, fn, "%s must be [%lld]", names[i], (long long)C);
    }
    sim_status lst = sim_launch(kernel, fn);
    if (lst) return lst;
    int64_t n = sim_numel(in), inner = 1;
    for (int d = 2; d < in->ndim; d++) inner *= in->shape[d];
    float *X = gather_or_die(in);
    float *Wv = w->present ? gather_or_die(w) : NULL, *Bv = b->present ? gather_or_die(b) : NULL;
    float *Mv = gather_or_die(mean), *Vv = gather_or_die(var);
    for (int64_t i = 0; i < n; i++) {
        int64_t c = (i / inner) % C;
        float inv = 1.0f / sqrtf(Vv[c] + (float)eps);
        float y = (X[i] - Mv[c]) * inv;
        if (Wv) y *= Wv[c];
        if (Bv) y += Bv[c];
        X[i] = y;
    }
    sim_scatter(X, out);
    free(X); free(Wv); free(Bv); free(Mv); free(Vv);
    return SIM_OK;
}

sim_status simk_layer_norm(const char *fn, const char *kernel, const sim_view *in, int64_t norm_ndim,
                           const sim_view *w, const sim_view *b, double eps, const sim_view *out,
                           const sim_view *mean, const sim_view *rstd) {
    if (norm_ndim < 1 || norm_ndim > in->ndim)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "normalized dims %lld out of range for %d-D input",
                        (long long)norm_ndim, in->ndim);
    sim_status st = simk_check_same(fn, "input", in, out);
    if (st) return st;
    int64_t inner = 1;
    for (int d = in->ndim - (int)norm_ndim; d < in->ndim; d++) inner *= in->shape[d];
    int64_t n = sim_numel(in), outer = inner ? n / inner : 0;
    const sim_view *aff[2] = {w, b};
    for (int i = 0; i < 2; i++)
        if (aff[i]->present && sim_numel(aff[i]) != inner)
            return sim_fail(SIM_E_INVALID_VALUE, fn, "%s must have %lld elements",
                            i ? "bias" : "weight", (long long)inner);
    const sim_view *stats[2] = {mean, rstd};
    for (int i = 0; i < 2; i++)
        if (stats[i]->present && sim_numel(stats[i]) != outer)
            return sim_fail(SIM_E_INVALID_VALUE, fn, "%s must have %lld elements",
                            i ? "rstd" : "mean", (long long)outer);
    sim_status lst = sim_launch(kernel, fn);
    if (lst) return lst;
    float *X = gather_or_die(in);
    float *Wv = w->present ? gather_or_die(w) : NULL, *Bv = b->present ? gather_or_die(b) : NULL;
    float *Mo = alloc_f(outer), *Ro = alloc_f(outer);
    for (int64_t r = 0; r < outer; r++) {
        float *x = X + r * inner;
        double s = 0, ss = 0;
        for (int64_t i = 0; i < inner; i++) s += x[i];
        double mu = s / (double)inner;
        for (int64_t i = 0; i < inner; i++) ss += (x[i] - mu) * (x[i] - mu);
        double rs = 1.0 / sqrt(ss / (double)inner + eps);
        for (int64_t i = 0; i < inner; i++) {
            float y = (float)((x[i] - mu) * rs);
            if (Wv) y *= Wv[i];
            if (Bv) y += Bv[i];
            x[i] = y;
        }
        Mo[r] = (float)mu;
        Ro[r] = (float)rs;
    }
    sim_scatter(X, out);
    if (mean->present) sim_scatter(Mo, mean);
    if (rstd->present) sim_scatter(Ro, rstd);
    free(X); free(Wv); free(Bv); free(Mo); free(Ro);
    return SIM_OK;
}

sim_status simk_reduce_dims(const char *fn, const sim_view *in, const int64_t *dims, int64_t n, int keepdim,
                            const sim_view *out, uint32_t *mask) {
    if (n < 0 || (n > 0 && !dims)) return sim_fail(SIM_E_INVALID_VALUE, fn, "bad dim list");
    uint32_t m = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t d = dims[i] < 0 ? dims[i] + in->ndim : dims[i];
        if (d < 0 || d >= (in->ndim ? in->ndim : 1))
            return sim_fail(SIM_E_INVALID_VALUE, fn, "dim %lld out of range for %d-D input", (long long)dims[i],
                            in->ndim);
        if (m & (1u << d)) return sim_fail(SIM_E_INVALID_VALUE, fn, "dim %lld appears twice", (long long)dims[i]);
        m |= 1u << d;
    }
    if (n == 0) m = (1u << in->ndim) - 1u;
    int expect_nd = 0;
    for (int d = 0; d < in->ndim; d++)
        if (keepdim || !(m & (1u << d))) {
            int64_t want = (m & (1u << d)) ? 1 : in->shape[d];
            if (expect_nd >= out->ndim || out->shape[expect_nd] != want)
                return sim_fail(SIM_E_INVALID_VALUE, fn, "out shape does not match the reduction");
            expect_nd++;
        }
    if (expect_nd != out->ndim)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "out has %d dims, expected %d", out->ndim, expect_nd);
    *mask = m;
    return SIM_OK;
}

sim_status simk_reduce(const char *fn, const char *kernel, const sim_view *in, uint32_t reduce, int mean,
                       const sim_view *out) {
    int nd = in->ndim;
    int64_t kept = 1, count = 1;
    for (int d = 0; d < nd; d++) {
        if (reduce & (1u << d)) count *= in->shape[d];
        else kept *= in->shape[d];
    }
    if (sim_numel(out) != kept)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "output has %lld elements, the reduction gives %lld",
                        (long long)sim_numel(out), (long long)kept);
    sim_status lst = sim_launch(kernel, fn);
    if (lst) return lst;
    float *X = gather_or_die(in);
    double *acc = calloc((size_t)(kept ? kept : 1), sizeof(double));
    if (!acc) abort();
    /* output index = the input's multi-index with reduced dims dropped */
    int64_t ostride[SIM_MAX_DIMS], s = 1;
    for (int d = nd - 1; d >= 0; d--) {
        ostride[d] = (reduce & (1u << d)) ? 0 : s;
        if (!(reduce & (1u << d))) s *= in->shape[d];
    }
    int64_t n = sim_numel(in), idx[SIM_MAX_DIMS] = {0}, o = 0;
    for (int64_t i = 0; i < n; i++) {
        acc[o] += X[i];
        for (int d = nd - 1; d >= 0; d--) {
            o += ostride[d];
            if (++idx[d] < in->shape[d]) break;
            o -= ostride[d] * idx[d];
            idx[d] = 0;
        }
    }
    float *R = alloc_f(kept);
    for (int64_t i = 0; i < kept; i++)
        R[i] = (float)(mean ? (count ? acc[i] / (double)count : NAN) : acc[i]);
    sim_scatter(R, out);
    free(X);
    free(acc);
    free(R);
    return SIM_OK;
}

/* The reduced dim's geometry: rows of D elements, `inner` apart, `outer` x `inner` of them. */
static sim_status softmax_geometry(const char *fn, const sim_view *in, int64_t *dim, int64_t *D,
                                   int64_t *outer, int64_t *inner) {
    int nd = in->ndim;
    if (nd == 0) *dim = 0;
    else if (*dim < 0) *dim += nd;
    if (nd > 0 && (*dim < 0 || *dim >= nd))
        return sim_fail(SIM_E_INVALID_VALUE, fn, "dim out of range for %d-D input", nd);
    *D = nd ? in->shape[*dim] : 1;
    *inner = *outer = 1;
    for (int d = 0; d < nd; d++) {
        if (d < *dim) *outer *= in->shape[d];
        else if (d > *dim) *inner *= in->shape[d];
    }
    return SIM_OK;
}

sim_status simk_softmax(const char *fn, const char *kernel, const sim_view *in, int64_t dim, unsigned flags,
                        const sim_view *out) {
    int64_t D, outer, inner;
    sim_status st;
    if ((st = softmax_geometry(fn, in, &dim, &D, &outer, &inner)) ||
        (st = simk_check_same(fn, "input", in, out)) || (st = need_float_dt(fn, "input", in)))
        return st;
    if ((st = sim_launch(kernel, fn))) return st;
    float *X = gather_or_die(in);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            float *x = X + o * D * inner + i;
            float mx = -INFINITY;
            for (int64_t j = 0; j < D; j++)
                if (x[j * inner] > mx) mx = x[j * inner];
            if ((flags & SIMK_SOFTMAX_SAFE) && mx == -INFINITY) { /* a fully masked row is all zeros */
                for (int64_t j = 0; j < D; j++) x[j * inner] = 0.0f;
                continue;
            }
            double sum = 0;
            for (int64_t j = 0; j < D; j++) sum += expf(x[j * inner] - mx);
            if (flags & SIMK_SOFTMAX_LOG) {
                float lse = logf((float)sum);
                for (int64_t j = 0; j < D; j++) x[j * inner] = x[j * inner] - mx - lse;
            } else if (flags & SIMK_SOFTMAX_GENERIC) {
                /* the vendor's generic path: recomputes exp and divides */
                for (int64_t j = 0; j < D; j++) x[j * inner] = expf(x[j * inner] - mx) / (float)sum;
            } else {
                float inv = (float)(1.0 / sum);
                for (int64_t j = 0; j < D; j++) x[j * inner] = expf(x[j * inner] - mx) * inv;
            }
        }
    sim_scatter(X, out);
    free(X);
    return SIM_OK;
}

sim_status simk_softmax_backward(const char *fn, const char *kernel, const sim_view *grad, const sim_view *y,
                                 int64_t dim, int log, const sim_view *out) {
    int64_t D, outer, inner;
    sim_status st;
    if ((st = softmax_geometry(fn, y, &dim, &D, &outer, &inner)) ||
        (st = simk_check_same(fn, "grad_output", grad, out)) || (st = simk_check_same(fn, "output", y, out)) ||
        (st = need_float_dt(fn, "output", y)))
        return st;
    if ((st = sim_launch(kernel, fn))) return st;
    float *G = gather_or_die(grad), *Y = gather_or_die(y);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            float *g = G + o * D * inner + i, *yy = Y + o * D * inner + i;
            double acc = 0;
            if (log) { /* d log_softmax: g - exp(y) * sum(g) */
                for (int64_t j = 0; j < D; j++) acc += g[j * inner];
                float s = (float)acc;
                for (int64_t j = 0; j < D; j++) g[j * inner] = g[j * inner] - expf(yy[j * inner]) * s;
            } else { /* d softmax: y * (g - sum(g * y)) */
                for (int64_t j = 0; j < D; j++) acc += (double)g[j * inner] * yy[j * inner];
                float s = (float)acc;
                for (int64_t j = 0; j < D; j++) g[j * inner] = yy[j * inner] * (g[j * inner] - s);
            }
        }
    sim_scatter(G, out);
    free(G);
    free(Y);
    return SIM_OK;
}

sim_status simk_embedding(const char *fn, const char *kernel, const sim_view *weight, const sim_view *indices,
                          const sim_view *out) {
    if (weight->ndim != 2) return sim_fail(SIM_E_INVALID_VALUE, fn, "weight must be 2-D");
    if (indices->dtype != SIM_I64 && indices->dtype != SIM_I32)
        return sim_fail(SIM_E_UNSUPPORTED, fn, "indices must be int32 or int64");
    int64_t V = weight->shape[0], D = weight->shape[1];
    if (out->ndim != indices->ndim + 1 || out->shape[out->ndim - 1] != D)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "output must be indices.shape + [%lld]", (long long)D);
    for (int d = 0; d < indices->ndim; d++)
        if (out->shape[d] != indices->shape[d])
            return sim_fail(SIM_E_INVALID_VALUE, fn, "output must be indices.shape + [%lld]",
                            (long long)D);
    if (out->dtype != weight->dtype) return sim_fail(SIM_E_UNSUPPORTED, fn, "mixed dtypes");
    int64_t n = sim_numel(indices), idx[SIM_MAX_DIMS] = {0};
    size_t es = sim_dtype_size(out->dtype), is = sim_dtype_size(indices->dtype);
    /* check every index before writing anything, then launch */
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            sim_status lst = sim_launch(kernel, fn);
            if (lst) return lst;
        }
        memset(idx, 0, sizeof idx);
        for (int64_t i = 0; i < n; i++) {
            int64_t io = 0, oo = 0;
            for (int d = 0; d < indices->ndim; d++) {
                io += idx[d] * indices->strides[d];
                oo += idx[d] * out->strides[d];
            }
            int64_t row = (int64_t)sim_load(indices->base + io * (int64_t)is, indices->dtype);
            if (pass == 0 && (row < 0 || row >= V))
                return sim_fail(SIM_E_DATA, fn, "index %lld out of range [0, %lld)", (long long)row,
                                (long long)V);
            if (pass == 1)
                for (int64_t j = 0; j < D; j++)
                    memcpy(out->base + (oo + j * out->strides[out->ndim - 1]) * (int64_t)es,
                           weight->base + (row * weight->strides[0] + j * weight->strides[1]) * (int64_t)es,
                           es);
            for (int d = indices->ndim - 1; d >= 0; d--) {
                if (++idx[d] < indices->shape[d]) break;
                idx[d] = 0;
            }
        }
    }
    return SIM_OK;
}

/* ---------------------------------------------------- training: reductions */

sim_status simk_var_mean(const char *fn, const char *kernel, const sim_view *in, uint32_t reduce,
                         double correction, const sim_view *var, const sim_view *mean) {
    int nd = in->ndim;
    int64_t kept = 1, count = 1;
    for (int d = 0; d < nd; d++) {
        if (reduce & (1u << d)) count *= in->shape[d];
        else kept *= in->shape[d];
    }
    sim_status st;
    if ((st = need_float_dt(fn, "self", in))) return st;
    const sim_view *outs[2] = {var, mean};
    for (int i = 0; i < 2; i++) {
        if (sim_numel(outs[i]) != kept)
            return sim_fail(SIM_E_INVALID_VALUE, fn, "%s has %lld elements, the reduction gives %lld",
                            i ? "mean" : "var", (long long)sim_numel(outs[i]), (long long)kept);
        if (outs[i]->dtype != in->dtype)
            return sim_fail(SIM_E_UNSUPPORTED, fn, "%s is %s but the input is %s (mixed dtypes)",
                            i ? "mean" : "var", sim_dtype_name(outs[i]->dtype), sim_dtype_name(in->dtype));
    }
    if ((st = sim_launch(kernel, fn))) return st;
    float *X = gather_or_die(in);
    double *sum = calloc((size_t)(kept ? kept : 1), sizeof(double));
    double *ss = calloc((size_t)(kept ? kept : 1), sizeof(double));
    if (!sum || !ss) abort();
    int64_t ostride[SIM_MAX_DIMS], s = 1;
    for (int d = nd - 1; d >= 0; d--) {
        ostride[d] = (reduce & (1u << d)) ? 0 : s;
        if (!(reduce & (1u << d))) s *= in->shape[d];
    }
    int64_t n = sim_numel(in);
    /* two passes (mean, then squared deviations), both in double */
    for (int pass = 0; pass < 2; pass++) {
        int64_t idx[SIM_MAX_DIMS] = {0}, o = 0;
        for (int64_t i = 0; i < n; i++) {
            if (pass == 0) sum[o] += X[i];
            else {
                double dv = X[i] - sum[o];
                ss[o] += dv * dv;
            }
            for (int d = nd - 1; d >= 0; d--) {
                o += ostride[d];
                if (++idx[d] < in->shape[d]) break;
                o -= ostride[d] * idx[d];
                idx[d] = 0;
            }
        }
        if (pass == 0)
            for (int64_t k = 0; k < kept; k++) sum[k] = count ? sum[k] / (double)count : NAN;
    }
    float *V = alloc_f(kept), *M = alloc_f(kept);
    double dof = (double)count - correction;
    for (int64_t k = 0; k < kept; k++) {
        M[k] = (float)sum[k];
        V[k] = (float)(dof > 0 ? ss[k] / dof : (ss[k] > 0 ? INFINITY : NAN));
    }
    sim_scatter(V, var);
    sim_scatter(M, mean);
    free(X); free(sum); free(ss); free(V); free(M);
    return SIM_OK;
}

sim_status simk_logsumexp(const char *fn, const char *kernel, const sim_view *in, uint32_t reduce,
                          const sim_view *out) {
    int nd = in->ndim;
    int64_t kept = 1;
    for (int d = 0; d < nd; d++)
        if (!(reduce & (1u << d))) kept *= in->shape[d];
    sim_status st;
    if ((st = need_float_dt(fn, "self", in))) return st;
    if (sim_numel(out) != kept)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "output has %lld elements, the reduction gives %lld",
                        (long long)sim_numel(out), (long long)kept);
    if (out->dtype != in->dtype)
        return sim_fail(SIM_E_UNSUPPORTED, fn, "out is %s but the input is %s (mixed dtypes)",
                        sim_dtype_name(out->dtype), sim_dtype_name(in->dtype));
    if ((st = sim_launch(kernel, fn))) return st;
    float *X = gather_or_die(in), *mx = alloc_f(kept);
    double *sum = calloc((size_t)(kept ? kept : 1), sizeof(double));
    if (!sum) abort();
    for (int64_t k = 0; k < kept; k++) mx[k] = -INFINITY;
    int64_t ostride[SIM_MAX_DIMS], sk = 1;
    for (int d = nd - 1; d >= 0; d--) {
        ostride[d] = (reduce & (1u << d)) ? 0 : sk;
        if (!(reduce & (1u << d))) sk *= in->shape[d];
    }
    int64_t n = sim_numel(in);
    for (int pass = 0; pass < 2; pass++) {
        int64_t idx[SIM_MAX_DIMS] = {0}, o = 0;
        for (int64_t i = 0; i < n; i++) {
            if (pass == 0) {
                if (X[i] > mx[o]) mx[o] = X[i];
            } else {
                sum[o] += expf(X[i] - mx[o]);
            }
            for (int d = nd - 1; d >= 0; d--) {
                o += ostride[d];
                if (++idx[d] < in->shape[d]) break;
                o -= ostride[d] * idx[d];
                idx[d] = 0;
            }
        }
        if (pass == 0) /* PyTorch's shift: an infinite max counts as 0, so all -inf gives -inf */
            for (int64_t k = 0; k < kept; k++)
                if (isinf(mx[k])) mx[k] = 0.0f;
    }
    for (int64_t k = 0; k < kept; k++) mx[k] = logf((float)sum[k]) + mx[k];
    sim_scatter(mx, out);
    free(X); free(mx); free(sum);
    return SIM_OK;
}

/* ---------------------------------------------------------- training: loss */

/* [N, C] (or [C]) log-probabilities with [N] (or []) targets: N, C and the target row stride */
static sim_status nll_shapes(const char *fn, const sim_view *in, const sim_view *target, const sim_view *weight,
                             int64_t *N, int64_t *C) {
    if (in->ndim != 1 && in->ndim != 2)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "input must be [N, C] or [C], got %d-D", in->ndim);
    *N = in->ndim == 2 ? in->shape[0] : 1;
    *C = in->shape[in->ndim - 1];
    if (target->ndim != in->ndim - 1 || (in->ndim == 2 && target->shape[0] != *N))
        return sim_fail(SIM_E_INVALID_VALUE, fn, "target must be [%lld] for a %d-D input",
                        (long long)*N, in->ndim);
    if (target->dtype != SIM_I64 && target->dtype != SIM_I32)
        return sim_fail(SIM_E_UNSUPPORTED, fn, "target must be int64 or int32, got %s",
                        sim_dtype_name(target->dtype));
    if (weight->present && (weight->ndim != 1 || weight->shape[0] != *C || weight->dtype != in->dtype))
        return sim_fail(SIM_E_INVALID_VALUE, fn, "weight must be [%lld] of the input's dtype", (long long)*C);
    return need_float_dt(fn, "input", in);
}

/* Targets, checked: a target outside [0, C) that is not ignore_index is a data error. */
static sim_status nll_targets(const char *fn, const sim_view *target, int64_t N, int64_t C,
                              int64_t ignore_index, int64_t **out) {
    int64_t *t = gather_i_or_die(target);
    for (int64_t n = 0; n < N; n++)
        if (t[n] != ignore_index && (t[n] < 0 || t[n] >= C)) {
            long long bad = (long long)t[n];
            free(t);
            return sim_fail(SIM_E_DATA, fn, "target %lld is out of bounds [0, %lld)", bad, (long long)C);
        }
    *out = t;
    return SIM_OK;
}

sim_status simk_nll_loss(const char *fn, const char *kernel, const sim_view *in, const sim_view *target,
                         const sim_view *weight, int64_t reduction, int64_t ignore_index, const sim_view *out,
                         const sim_view *total_weight) {
    int64_t N = 0, C = 0;
    sim_status st;
    if ((st = nll_shapes(fn, in, target, weight, &N, &C))) return st;
    if (reduction < 0 || reduction > 2)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "reduction=%lld (0 none, 1 mean, 2 sum)", (long long)reduction);
    int64_t want = reduction == 0 ? sim_numel(target) : 1;
    if (sim_numel(out) != want || (reduction == 0 ? out->ndim != target->ndim : out->ndim != 0))
        return sim_fail(SIM_E_INVALID_VALUE, fn, "output must be %s", reduction == 0 ? "shaped like target" : "0-D");
    if (total_weight->ndim != 0 || out->dtype != in->dtype || total_weight->dtype != in->dtype)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "output and total_weight must be of the input's dtype, "
                        "total_weight 0-D");
    int64_t *t = NULL;
    if ((st = nll_targets(fn, target, N, C, ignore_index, &t))) return st;
    if ((st = sim_launch(kernel, fn))) {
        free(t);
        return st;
    }
    float *X = gather_or_die(in), *W = weight->present ? gather_or_die(weight) : NULL;
    float *L = alloc_f(N);
    double sum = 0, wsum = 0;
    for (int64_t n = 0; n < N; n++) {
        if (t[n] == ignore_index) continue;
        float w = W ? W[t[n]] : 1.0f;
        L[n] = -X[n * C + t[n]] * w;
        sum += L[n];
        wsum += w;
    }
    float tw = reduction == 0 ? 0.0f : (float)wsum;
    if (reduction == 0) sim_scatter(L, out);
    else {
        float r = (float)(reduction == 1 ? sum / wsum : sum); /* mean over no weight: 0/0 = NaN */
        sim_scatter(&r, out);
    }
    sim_scatter(&tw, total_weight);
    free(t); free(X); free(W); free(L);
    return SIM_OK;
}

sim_status simk_nll_loss_backward(const char *fn, const char *kernel, const sim_view *grad, const sim_view *in,
                                  const sim_view *target, const sim_view *weight, int64_t reduction,
                                  int64_t ignore_index, const sim_view *total_weight, const sim_view *out) {
    int64_t N = 0, C = 0;
    sim_status st;
    if ((st = nll_shapes(fn, in, target, weight, &N, &C)) || (st = simk_check_same(fn, "self", in, out)))
        return st;
    if (reduction < 0 || reduction > 2)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "reduction=%lld (0 none, 1 mean, 2 sum)", (long long)reduction);
    int64_t want = reduction == 0 ? sim_numel(target) : 1;
    if (sim_numel(grad) != want || grad->dtype != in->dtype)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "grad_output must have %lld element(s) of the input's dtype",
                        (long long)want);
    if (sim_numel(total_weight) != 1 || total_weight->dtype != in->dtype)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "total_weight must be one element of the input's dtype");
    int64_t *t = NULL;
    if ((st = nll_targets(fn, target, N, C, ignore_index, &t))) return st;
    if ((st = sim_launch(kernel, fn))) {
        free(t);
        return st;
    }
    float *G = gather_or_die(grad), *W = weight->present ? gather_or_die(weight) : NULL;
    float *TW = gather_or_die(total_weight);
    float *R = alloc_f(N * C);
    for (int64_t n = 0; n < N; n++) {
        if (t[n] == ignore_index) continue;
        float g = reduction == 0 ? G[n] : G[0];
        float v = -(W ? W[t[n]] : 1.0f) * g;
        R[n * C + t[n]] = reduction == 1 ? v / TW[0] : v;
    }
    sim_scatter(R, out);
    free(t); free(G); free(W); free(TW); free(R);
    return SIM_OK;
}

/* ----------------------------------------------------- training: embedding */

sim_status simk_embedding_backward(const char *fn, const char *kernel, const sim_view *grad,
                                   const sim_view *indices, int64_t num_weights, int64_t padding_idx,
                                   int scale_grad_by_freq, const sim_view *out) {
    if (indices->dtype != SIM_I64 && indices->dtype != SIM_I32)
        return sim_fail(SIM_E_UNSUPPORTED, fn, "indices must be int32 or int64");
    if (out->ndim != 2 || out->shape[0] != num_weights || num_weights < 0)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "output must be [num_weights=%lld, D]", (long long)num_weights);
    int64_t D = out->shape[1], n = sim_numel(indices);
    if (grad->ndim != indices->ndim + 1 || grad->shape[grad->ndim - 1] != D)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "grad_output must be indices.shape + [%lld]", (long long)D);
    for (int d = 0; d < indices->ndim; d++)
        if (grad->shape[d] != indices->shape[d])
            return sim_fail(SIM_E_INVALID_VALUE, fn, "grad_output must be indices.shape + [%lld]", (long long)D);
    sim_status st;
    if ((st = need_float_dt(fn, "grad_output", grad))) return st;
    if (grad->dtype != out->dtype) return sim_fail(SIM_E_UNSUPPORTED, fn, "mixed dtypes");
    int64_t *idx = gather_i_or_die(indices);
    for (int64_t i = 0; i < n; i++)
        if (idx[i] < 0 || idx[i] >= num_weights) {
            long long bad = (long long)idx[i];
            free(idx);
            return sim_fail(SIM_E_DATA, fn, "index %lld out of range [0, %lld)", bad, (long long)num_weights);
        }
    if ((st = sim_launch(kernel, fn))) {
        free(idx);
        return st;
    }
    float *G = gather_or_die(grad), *R = alloc_f(num_weights * D);
    int64_t *freq = NULL;
    if (scale_grad_by_freq) {
        freq = calloc((size_t)(num_weights ? num_weights : 1), sizeof(int64_t));
        if (!freq) abort();
        for (int64_t i = 0; i < n; i++) freq[idx[i]]++;
    }
    /* rows summed in index order, like PyTorch's index_add */
    for (int64_t i = 0; i < n; i++) {
        int64_t r = idx[i];
        if (r == padding_idx) continue;
        float sc = freq ? 1.0f / (float)freq[r] : 1.0f;
        float *dst = R + r * D;
        const float *src = G + i * D;
        if (freq) for (int64_t j = 0; j < D; j++) dst[j] += src[j] * sc;
        else for (int64_t j = 0; j < D; j++) dst[j] += src[j];
    }
    sim_scatter(R, out);
    free(idx); free(G); free(R); free(freq);
    return SIM_OK;
}

/* ---------------------------------------------------- training: layer norm */

sim_status simk_layer_norm_backward(const char *fn, const char *kernel, const sim_view *dy, const sim_view *x,
                                    int64_t norm_ndim, const sim_view *mean, const sim_view *rstd,
                                    const sim_view *w, const sim_view *dx, const sim_view *dw,
                                    const sim_view *db) {
    if (norm_ndim < 1 || norm_ndim > x->ndim)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "normalized dims %lld out of range for %d-D input",
                        (long long)norm_ndim, x->ndim);
    sim_status st;
    if ((st = simk_check_same(fn, "grad_out", dy, x)) || (st = need_float_dt(fn, "input", x))) return st;
    if (dx->present && (st = simk_check_same(fn, "grad_input", dx, x))) return st;
    int64_t inner = 1;
    for (int d = x->ndim - (int)norm_ndim; d < x->ndim; d++) inner *= x->shape[d];
    int64_t n = sim_numel(x), outer = inner ? n / inner : 0;
    if (sim_numel(mean) != outer || sim_numel(rstd) != outer)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "mean and rstd must have %lld elements", (long long)outer);
    const sim_view *per[3] = {w, dw, db};
    const char *names[3] = {"weight", "grad_weight", "grad_bias"};
    for (int i = 0; i < 3; i++)
        if (per[i]->present && (sim_numel(per[i]) != inner || per[i]->dtype != x->dtype))
            return sim_fail(SIM_E_INVALID_VALUE, fn, "%s must have %lld elements of the input's dtype",
                            names[i], (long long)inner);
    if (!dx->present && !dw->present && !db->present)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "no gradient requested");
    if ((st = sim_launch(kernel, fn))) return st;
    float *DY = gather_or_die(dy), *X = gather_or_die(x), *Mu = gather_or_die(mean), *Rs = gather_or_die(rstd);
    float *Wv = w->present ? gather_or_die(w) : NULL;
    float *gw = alloc_f(inner), *gb = alloc_f(inner);
    /* PyTorch's formula, in float and in its order of operations: with a
     * single normalized element (or a constant row) rstd is huge and the
     * result is rounding noise, which then matches PyTorch's own noise. */
    float scale = 1.0f / (float)inner;
    for (int64_t r = 0; r < outer; r++) {
        const float *g = DY + r * inner;
        float *xr = X + r * inner;
        float mu = Mu[r], a = Rs[r], am = -a * mu, ds = 0.0f, dsum = 0.0f;
        for (int64_t i = 0; i < inner; i++) {
            gw[i] += g[i] * fmaf(a, xr[i], am); /* a fused multiply-add, as PyTorch's compiled loop */
            gb[i] += g[i];
            float gg = Wv ? g[i] * Wv[i] : g[i];
            ds += Wv ? g[i] * xr[i] * Wv[i] : g[i] * xr[i];
            dsum += gg;
        }
        float b = (dsum * mu - ds) * a * a * a * scale;
        float c = -b * mu - dsum * a * scale;
        /* dx = a * dy * gamma + b * x + c, written over x */
        for (int64_t i = 0; i < inner; i++)
            xr[i] = (Wv ? a * g[i] * Wv[i] : a * g[i]) + b * xr[i] + c;
    }
    if (dx->present) sim_scatter(X, dx);
    if (dw->present) sim_scatter(gw, dw);
    if (db->present) sim_scatter(gb, db);
    free(DY); free(X); free(Mu); free(Rs); free(Wv); free(gw); free(gb);
    return SIM_OK;
}

/* ---------------------------------------------------------- data movement */

sim_status simk_arange(const char *fn, const char *kernel, double start, double end, double step,
                       const sim_view *out) {
    if (step == 0 || step != step || start != start || end != end)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "step must be nonzero and start, end, step finite");
    if ((step > 0 && end < start) || (step < 0 && end > start))
        return sim_fail(SIM_E_INVALID_VALUE, fn, "upper bound and step are inconsistent with each other");
    double count = ceil((end - start) / step);
    if (out->ndim != 1 || (double)out->shape[0] != count)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "output must be 1-D with %.0f elements", count);
    if (out->dtype == SIM_BOOL) return sim_fail(SIM_E_UNSUPPORTED, fn, "dtype bool is not supported");
    sim_status st = sim_launch(kernel, fn);
    if (st) return st;
    int64_t n = out->shape[0], es = (int64_t)sim_dtype_size(out->dtype);
    if (simk_is_float(out->dtype)) {
        /* PyTorch accumulates in double for floating outputs */
        for (int64_t i = 0; i < n; i++)
            sim_store(out->base + i * out->strides[0] * es, out->dtype, start + (double)i * step);
    } else {
        int64_t s0 = sat_i64(start), st1 = sat_i64(step);
        for (int64_t i = 0; i < n; i++)
            store_i(out->base + i * out->strides[0] * es, out->dtype, wadd(s0, wmul(i, st1)));
    }
    return SIM_OK;
}

sim_status simk_select_backward(const char *fn, const char *kernel, const sim_view *grad, int64_t dim,
                                int64_t index, const sim_view *out) {
    int nd = out->ndim;
    if (nd < 1 || grad->ndim != nd - 1)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "grad_output is %d-D, the output %d-D (expected one more)",
                        grad->ndim, nd);
    if (dim < 0) dim += nd;
    if (dim < 0 || dim >= nd) return sim_fail(SIM_E_INVALID_VALUE, fn, "dim out of range for %d-D output", nd);
    int64_t size = out->shape[dim];
    if (index < -size || index >= size)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "index %lld out of range for size %lld", (long long)index,
                        (long long)size);
    if (index < 0) index += size;
    sim_view slice;
    memset(&slice, 0, sizeof slice);
    slice.ndim = nd - 1;
    slice.dtype = out->dtype;
    slice.present = 1;
    for (int d = 0, j = 0; d < nd; d++)
        if (d != dim) {
            slice.shape[j] = out->shape[d];
            slice.strides[j++] = out->strides[d];
        }
    slice.base = out->base + index * out->strides[dim] * (int64_t)sim_dtype_size(out->dtype);
    sim_status st;
    if ((st = check_shape(fn, "grad_output", grad, &slice))) return st;
    if (grad->dtype != out->dtype)
        return sim_fail(SIM_E_UNSUPPORTED, fn, "grad_output is %s but the output is %s (mixed dtypes)",
                        sim_dtype_name(grad->dtype), sim_dtype_name(out->dtype));
    if ((st = sim_launch(kernel, fn))) return st;
    simk_fill(out, 0.0);
    copy_view(grad, &slice);
    return SIM_OK;
}

sim_status simk_cat(const char *fn, const char *kernel, const sim_view *inputs, int n, int64_t dim,
                    const sim_view *out) {
    if (n < 1) return sim_fail(SIM_E_INVALID_VALUE, fn, "needs at least one input");
    int nd = out->ndim;
    if (nd == 0) return sim_fail(SIM_E_INVALID_VALUE, fn, "cannot concatenate 0-D tensors");
    if (dim < 0) dim += nd;
    if (dim < 0 || dim >= nd)
        return sim_fail(SIM_E_INVALID_VALUE, fn, "dim out of range for %d-D tensors", nd);
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        const sim_view *v = &inputs[i];
        if (v->ndim == 1 && v->shape[0] == 0) continue; /* PyTorch's legacy rule: skipped */
        if (v->ndim != nd)
            return sim_fail(SIM_E_INVALID_VALUE, fn, "input %d is %d-D, the output %d-D", i, v->ndim, nd);
        if (v->dtype != out->dtype)
            return sim_fail(SIM_E_UNSUPPORTED, fn, "input %d is %s but the output is %s (mixed dtypes)", i,
                            sim_dtype_name(v->dtype), sim_dtype_name(out->dtype));
        for (int d = 0; d < nd; d++)
            if (d != dim && v->shape[d] != out->shape[d])
                return sim_fail(SIM_E_INVALID_VALUE, fn, "input %d has size %lld in dim %d, the output %lld",
                                i, (long long)v->shape[d], d, (long long)out->shape[d]);
        total += v->shape[dim];
    }
    if (total != out->shape[dim])
        return sim_fail(SIM_E_INVALID_VALUE, fn, "inputs add up to %lld along dim %lld, the output has %lld",
                        (long long)total, (long long)dim, (long long)out->shape[dim]);
    sim_status st = sim_launch(kernel, fn);
    if (st) return st;
    /* each input is copied into its slice of the output (the output's view
     * narrowed along dim); inputs must not overlap the output, as in PyTorch */
    int64_t off = 0, es = (int64_t)sim_dtype_size(out->dtype);
    for (int i = 0; i < n; i++) {
        const sim_view *v = &inputs[i];
        if (v->ndim == 1 && v->shape[0] == 0) continue;
        sim_view slice = *out;
        slice.shape[dim] = v->shape[dim];
        slice.base = out->base + off * out->strides[dim] * es;
        int64_t cnt = sim_numel(v), idx[SIM_MAX_DIMS] = {0};
        for (int64_t k = 0; k < cnt; k++) {
            int64_t so = 0, doff = 0;
            for (int d = 0; d < nd; d++) {
                so += idx[d] * v->strides[d];
                doff += idx[d] * slice.strides[d];
            }
            memmove(slice.base + doff * es, v->base + so * es, (size_t)es);
            for (int d = nd - 1; d >= 0; d--) {
                if (++idx[d] < v->shape[d]) break;
                idx[d] = 0;
            }
        }
        off += v->shape[dim];
    }
    return SIM_OK;
}

sim_view simk_nchw_as_nhwc(const sim_view *v) {
    sim_view r = *v;
    if (v->ndim == 4) {
        static const int perm[4] = {0, 2, 3, 1};
        for (int i = 0; i < 4; i++) {
            r.shape[i] = v->shape[perm[i]];
            r.strides[i] = v->strides[perm[i]];
        }
    }
    return r;
}
